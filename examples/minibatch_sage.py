"""GraphSAGE-style neighbour-sampled training with node features in a unified tensor.

The feature table lives in a unified tensor (``hector.data.unified``): on a GPU machine, pinned host
memory the GPU reads zero-copy, and each mini-batch's input features are gathered straight into
GPU memory by Hector's aligned gather kernel (``hector.data.unified.gather``). Without CUDA the
table is a host fallback (``allow_host_fallback=True``) and the gather is ``index_select``:
the script runs unchanged. The two changed lines against a plain PyTorch loop are marked
``# unified``.

Per epoch it reports the loss, accuracy on the trained seeds, and the time spent moving input
features (the gathers) versus the rest of the step::

    python examples/minibatch_sage.py --nodes 50000 --feat 100 --epochs 2
    python examples/minibatch_sage.py --json sage.json     # one JSON record per run

The graph is synthetic (a random graph whose node labels depend on neighbour features, so the
model has something to learn); sampling draws ``--fanouts`` neighbours per layer with
replacement from a CSR adjacency.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

import hector


@dataclass
class Graph:
    """CSR adjacency (incoming neighbours of each node), features and labels."""

    indptr: torch.Tensor
    indices: torch.Tensor
    features: torch.Tensor
    labels: torch.Tensor


def make_graph(nodes: int, degree: int, feat: int, classes: int, seed: int) -> Graph:
    """A random graph with ``degree`` in-neighbours per node; labels from aggregated features."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, nodes, (nodes * degree,), generator=g)
    indptr = torch.arange(0, nodes * degree + 1, degree)
    x = torch.randn(nodes, feat, generator=g)
    proj = torch.randn(feat, classes, generator=g)
    neigh = x[src].view(nodes, degree, feat).mean(1)
    labels = ((x + neigh) @ proj).argmax(1)
    return Graph(indptr, src, x, labels)


def sample(g: Graph, seeds: torch.Tensor, fanouts: list[int], gen: torch.Generator):
    """Layer-wise neighbour sampling: the input nodes and one (dst → src) block per layer."""
    blocks = []
    nodes = seeds
    for fanout in fanouts:
        deg = g.indptr[nodes + 1] - g.indptr[nodes]
        pick = (torch.rand(len(nodes), fanout, generator=gen) * deg.unsqueeze(1)).long()
        nbrs = g.indices[g.indptr[nodes].unsqueeze(1) + pick]  # [n, fanout]
        frontier, inverse = torch.unique(torch.cat([nodes, nbrs.flatten()]), return_inverse=True)
        dst_pos = inverse[: len(nodes)]
        src_pos = inverse[len(nodes) :].view(len(nodes), fanout)
        blocks.append((dst_pos, src_pos))
        nodes = frontier
    return nodes, blocks[::-1]


class SAGE(nn.Module):
    """Mean-aggregator GraphSAGE: ``h' = relu(W_self h + W_neigh mean(h_nbrs))``."""

    def __init__(self, feat: int, hidden: int, classes: int, layers: int) -> None:
        """Layers of widths feat → hidden → ... → classes."""
        super().__init__()
        dims = [feat] + [hidden] * (layers - 1) + [classes]
        pairs = list(zip(dims[:-1], dims[1:], strict=True))
        self.self_lin = nn.ModuleList(nn.Linear(a, b) for a, b in pairs)
        self.neigh_lin = nn.ModuleList(nn.Linear(a, b, bias=False) for a, b in pairs)

    def forward(self, h: torch.Tensor, blocks) -> torch.Tensor:
        """Apply one layer per block, innermost (widest) first."""
        for k, (dst_pos, src_pos) in enumerate(blocks):
            h = self.self_lin[k](h[dst_pos]) + self.neigh_lin[k](h[src_pos].mean(1))
            if k < len(blocks) - 1:
                h = F.relu(h)
        return h


def _parser() -> argparse.ArgumentParser:
    """The example's command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=50_000)
    p.add_argument("--degree", type=int, default=15)
    p.add_argument("--feat", type=int, default=100, help="feature width (100: not 128-B aligned)")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--classes", type=int, default=8)
    p.add_argument("--fanouts", default="10,5")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--max-batches", type=int, default=20, help="batches per epoch (0 = all)")
    p.add_argument("--align", choices=("warp128", "none"), default="warp128")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="PATH")
    return p


def train_epoch(args, epoch, g, feats, labels, model, opt, fanouts, gen, device) -> dict:
    """One epoch of sampled mini-batches; the epoch's record (loss, accuracy, times)."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    order = torch.randperm(args.nodes, generator=gen)
    nb = (args.nodes + args.batch - 1) // args.batch
    if args.max_batches:
        nb = min(nb, args.max_batches)
    transfer = step = 0.0
    loss_sum = correct = seen = moved = 0
    for b in range(nb):
        seeds = order[b * args.batch : (b + 1) * args.batch]
        t0 = time.perf_counter()
        inputs, blocks = sample(g, seeds, fanouts, gen)
        sync()
        t1 = time.perf_counter()
        # unified: input features gathered zero-copy into GPU memory
        h = hector.data.unified.gather(feats, inputs, align=args.align).to(device)
        sync()
        t2 = time.perf_counter()
        blocks = [(d.to(device), s.to(device)) for d, s in blocks]
        out = model(h, blocks)
        y = labels[seeds.to(device)]
        loss = F.cross_entropy(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sync()
        t3 = time.perf_counter()
        transfer += t2 - t1
        step += (t1 - t0) + (t3 - t2)
        loss_sum += loss.item() * len(seeds)
        correct += int((out.argmax(1) == y).sum())
        seen += len(seeds)
        moved += inputs.numel() * args.feat * 4
    return {
        "epoch": epoch,
        "batches": nb,
        "loss": round(loss_sum / seen, 4),
        "train_acc": round(correct / seen, 4),
        "transfer_ms": round(transfer * 1e3, 2),
        "other_ms": round(step * 1e3, 2),
        "transfer_gbytes": round(moved / 1e9, 4),
    }


def main(argv: list[str] | None = None) -> int:
    """Train and report per-epoch feature-transfer time."""
    args = _parser().parse_args(argv)
    try:
        fanouts = [int(f) for f in args.fanouts.split(",")]
    except ValueError:
        print(f"error: --fanouts must be integers, got {args.fanouts!r}", file=sys.stderr)
        return 1
    if min(args.nodes, args.degree, args.feat, args.batch, args.epochs, *fanouts) <= 0:
        print("error: sizes, --epochs and --fanouts must be positive", file=sys.stderr)
        return 1
    cuda = torch.cuda.is_available()
    if args.device == "cuda" and not cuda:
        print("error: --device cuda: no CUDA device is available here", file=sys.stderr)
        return 1
    device = "cuda" if (args.device == "auto" and cuda) or args.device == "cuda" else "cpu"

    torch.manual_seed(args.seed)
    g = make_graph(args.nodes, args.degree, args.feat, args.classes, args.seed)
    # unified: the feature table stays in (pinned) host memory, GPU-affine
    feats = hector.unified(g.features, "gpu", allow_host_fallback=device == "cpu")
    del g.features
    labels = g.labels.to(device)
    model = SAGE(args.feat, args.hidden, args.classes, len(fanouts)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    mapped = hector.data.unified.unified_info(feats).mapped
    print(
        f"{args.nodes} nodes, features {args.feat} wide in a unified tensor "
        f"({'GPU zero-copy, align=' + args.align if mapped else 'host fallback: index_select'}), "
        f"device {device}"
    )
    gen = torch.Generator().manual_seed(args.seed + 1)
    epochs = []
    for epoch in range(args.epochs):
        rec = train_epoch(args, epoch, g, feats, labels, model, opt, fanouts, gen, device)
        epochs.append(rec)
        print(
            f"epoch {epoch}: loss {rec['loss']:.4f}  acc {rec['train_acc']:.3f}  "
            f"feature transfer {rec['transfer_ms']:.1f} ms for {rec['transfer_gbytes']:.3f} GB "
            f"({rec['batches']} batches)  sampling+compute {rec['other_ms']:.1f} ms"
        )
    if args.json:
        record = {
            "benchmark": "minibatch_sage",
            "device": device,
            "zero_copy": mapped,
            "align": args.align if mapped else None,
            "hector_version": hector.__version__,
            "config": {k: v for k, v in vars(args).items() if k != "json"},
            "epochs": epochs,
        }
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2)
        print(f"record written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
