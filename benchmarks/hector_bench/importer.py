"""``hector bench import``: a plain-PyTorch layer, eager vs imported with ``hector.import_model``.

The layers are written the way users write them (no graph library): per-relation weights
picked with ``W[etype]`` and applied with ``bmm``, ``index_add`` / ``scatter_add`` /
``scatter_reduce`` onto destinations, a segment softmax built from ``scatter_reduce("amax")``.
Each is imported once (export + raise + compile, timed apart), then eager and imported run in
this process on the same inputs: ``--runs`` timed calls after ``--warmup`` untimed ones, for
inference (``torch.no_grad``) and for a training step (forward, ``mean(out**2)``, backward).
The record (docs/benchmarks.md, "Benchmark records") has one result per system and mode, the
output and gradient errors of the imported model against eager, and the speed-up per mode.

    hector bench import --model rgat --dataset synthetic:aifb --json rgat.json
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from hector.tools import cli_args as _args

from . import _common
from .plot_args import PLOT

MODELS = ("rgcn", "rgat", "hgt")


class RGCN(nn.Module):
    """RGCN layer: per-relation mean of ``W_r h_j`` plus a root weight and bias."""

    def __init__(self, num_nodes: int, rels: int, din: int, dout: int) -> None:
        """Weights for ``rels`` relations, ``din`` → ``dout`` features."""
        super().__init__()
        self.n, self.dout = num_nodes, dout
        self.weight = nn.Parameter(torch.randn(rels, din, dout) / din**0.5)
        self.root = nn.Parameter(torch.randn(din, dout) / din**0.5)
        self.bias = nn.Parameter(torch.zeros(dout))

    def forward(  # noqa: D102
        self,
        x: torch.Tensor,
        src: torch.Tensor,
        dst: torch.Tensor,
        etype: torch.Tensor,
        norm: torch.Tensor,
    ) -> torch.Tensor:
        m = torch.bmm(torch.index_select(x, 0, src).unsqueeze(1), self.weight[etype]).squeeze(1)
        out = torch.zeros(self.n, self.dout).index_add_(0, dst, m * norm)
        return torch.relu(out + x @ self.root + self.bias)


def _softmax(s: torch.Tensor, dst: torch.Tensor, n: int) -> torch.Tensor:
    idx = dst.unsqueeze(-1).expand_as(s)
    m = torch.zeros(n, s.shape[1]).scatter_reduce(0, idx, s, "amax", include_self=False)
    ex = (s - m[dst]).exp()
    return ex / torch.zeros(n, s.shape[1]).scatter_add(0, idx, ex)[dst]


class RGAT(nn.Module):
    """RGAT layer: per-relation projections, attention softmax over incoming edges."""

    def __init__(self, num_nodes: int, rels: int, din: int, heads: int, dh: int) -> None:
        """Weights for ``rels`` relations, ``din`` → ``heads`` × ``dh`` features."""
        super().__init__()
        self.n, self.heads, self.dh = num_nodes, heads, dh
        self.weight = nn.Parameter(torch.randn(rels, din, heads * dh) / din**0.5)
        self.q = nn.Parameter(torch.randn(heads * dh, heads) * 0.1)
        self.k = nn.Parameter(torch.randn(heads * dh, heads) * 0.1)
        self.bias = nn.Parameter(torch.zeros(heads * dh))

    def forward(  # noqa: D102
        self, x: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, etype: torch.Tensor
    ) -> torch.Tensor:
        w = self.weight[etype]
        hs = torch.bmm(x[src].unsqueeze(1), w).squeeze(1)
        hd = torch.bmm(x[dst].unsqueeze(1), w).squeeze(1)
        alpha = _softmax(nn.functional.leaky_relu(hd @ self.q + hs @ self.k, 0.2), dst, self.n)
        msg = (hs.view(-1, self.heads, self.dh) * alpha.unsqueeze(-1)).view(
            -1, self.heads * self.dh
        )
        return torch.zeros(self.n, self.heads * self.dh).index_add(0, dst, msg) + self.bias


class HGT(nn.Module):
    """HGT-style layer: K/Q/V projections, per-relation attention and message matrices
    (the attention matrix scaled by ``1/sqrt(dh)``), softmax, GELU, output projection and
    residual."""

    def __init__(self, num_nodes: int, rels: int, din: int, heads: int, dh: int) -> None:
        """Weights for ``rels`` relations, ``din`` features, ``heads`` × ``dh`` inside."""
        super().__init__()
        d = heads * dh
        self.n, self.heads, self.dh = num_nodes, heads, dh
        self.k = nn.Linear(din, d)
        self.q = nn.Parameter(torch.randn(din, d) / din**0.5)
        self.v = nn.Parameter(torch.randn(din, d) / din**0.5)
        self.att = nn.Parameter(torch.randn(rels, d, d) / d**0.5)
        self.msg = nn.Parameter(torch.randn(rels, d, d) / d**0.5)
        self.out = nn.Parameter(torch.randn(d, din) / d**0.5)

    def forward(  # noqa: D102
        self, x: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, etype: torch.Tensor
    ) -> torch.Tensor:
        h, dh = self.heads, self.dh
        k, q, v = self.k(x), x @ self.q, x @ self.v
        kr = torch.bmm(k[src].unsqueeze(1), self.att[etype] / dh**0.5).squeeze(1)
        vr = torch.bmm(v[src].unsqueeze(1), self.msg[etype]).squeeze(1)
        logits = (q[dst].view(-1, h, dh) * kr.view(-1, h, dh)).sum(-1)
        alpha = _softmax(logits, dst, self.n)
        m = (vr.view(-1, h, dh) * alpha.unsqueeze(-1)).view(-1, h * dh)
        agg = torch.zeros(self.n, h * dh).index_add(0, dst, m)
        return nn.functional.gelu(agg) @ self.out + x


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``hector bench import``."""
    p.add_argument("--model", choices=MODELS, required=True, help="plain-PyTorch layer")
    p.add_argument("--dataset", default="synthetic:aifb", help="hector.datasets name")
    p.add_argument("--in-dim", type=_args.WIDTH, default=16, help="input features (default 16)")
    p.add_argument(
        "--heads", type=_args.HEADS, default=2, help="attention heads (rgat/hgt; default 2)"
    )
    p.add_argument("--head-dim", type=_args.WIDTH, default=8, help="features per head (default 8)")
    p.add_argument("--runs", type=_args.RUNS, default=5, help="timed runs per system (median)")
    p.add_argument("--warmup", type=_args.WARMUP, default=1, help="untimed runs first (default 1)")
    p.add_argument(
        "--fallback",
        choices=("linalg", "eager"),
        default="linalg",
        help="how the imported model runs what is not raised (default linalg)",
    )
    p.add_argument("--seed", type=_args.SEED, default=0, help="seed of weights and inputs")
    p.add_argument("--json", metavar="PATH", help="write the JSON record here")
    p.add_argument("--plot", type=PLOT, metavar="PATH", help="bar chart of the medians (png/svg)")


class BenchError(Exception):
    """Bad arguments or a failed import: printed as ``error: ...``."""


def _build(args: argparse.Namespace) -> tuple[nn.Module, list[Any], Any]:
    from hector.datasets import load

    try:
        ds = load(args.dataset)
    except (KeyError, ValueError, FileNotFoundError) as err:
        raise BenchError(f"cannot load dataset {args.dataset!r}: {err}") from None
    g = ds.hetero_graph()
    ei, et = g.edge_index_sorted()
    torch.manual_seed(args.seed)
    x = torch.randn(g.num_nodes, args.in_dim)
    n, r = g.num_nodes, g.num_etypes
    if args.model == "rgcn":
        model: nn.Module = RGCN(n, r, args.in_dim, args.heads * args.head_dim)
        inputs = [x, ei[0], ei[1], et, g.norm_dst_etype]
    elif args.model == "rgat":
        model = RGAT(n, r, args.in_dim, args.heads, args.head_dim)
        inputs = [x, ei[0], ei[1], et]
    else:
        model = HGT(n, r, args.in_dim, args.heads, args.head_dim)
        inputs = [x, ei[0], ei[1], et]
    return model, inputs, g


def _errors(model: nn.Module, imported: nn.Module, inputs: list[Any]) -> dict[str, float]:
    """Max abs error of the imported output and parameter gradients against eager."""
    out, want = imported(*inputs), model(*inputs)
    out.square().mean().backward()
    mine = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    want.square().mean().backward()
    grad_err = max(
        (
            (mine[k] - p.grad).abs().max().item()
            for k, p in model.named_parameters()
            if k in mine and p.grad is not None
        ),
        default=0.0,
    )
    model.zero_grad(set_to_none=True)
    return {"output": (out - want).abs().max().item(), "grad": grad_err}


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    """Import the layer, time eager vs imported in both modes; return the record."""
    from tqdm import tqdm

    import hector
    from hector.frontends.importer import ImportError_

    model, inputs, g = _build(args)
    start = time.perf_counter()
    try:
        imported = hector.import_model(model, inputs, graph=g, fallback=args.fallback)
    except ImportError_ as err:
        raise BenchError(f"import failed: {err}") from None
    import_s = time.perf_counter() - start
    errors = _errors(model, imported, inputs)

    def infer(f: nn.Module) -> Callable[[], object]:
        def call() -> object:
            with torch.no_grad():
                return f(*inputs)

        return call

    def train(f: nn.Module) -> Callable[[], object]:
        def call() -> object:
            model.zero_grad(set_to_none=True)
            f(*inputs).square().mean().backward()
            return None

        return call

    results = []
    speedup: dict[str, float] = {}
    total = 4 * (args.runs + args.warmup)
    with tqdm(total=total, desc=f"import {args.model}", file=sys.stderr, leave=False) as bar:
        for mode, make in (("inference", infer), ("training", train)):
            timing = {}
            for system, f in (("eager", model), ("hector", imported)):
                t = _common.time_calls(make(f), args.runs, warmup=args.warmup, progress=bar)
                timing[system] = t
                entry = {
                    "system": system,
                    "variant": (
                        "eager PyTorch" if system == "eager" else f"imported ({args.fallback})"
                    ),
                    "mode": mode,
                    **t.as_record(),
                }
                if system == "hector":
                    entry["max_abs_err"] = errors["output" if mode == "inference" else "grad"]
                results.append(entry)
            speedup[mode] = round(timing["eager"].median_ms / timing["hector"].median_ms, 4)
    kinds: dict[str, int] = {}
    for seg in imported.torch_segments:
        kinds[seg.kind] = kinds.get(seg.kind, 0) + 1
    return {
        "benchmark": "import",
        "model": args.model,
        "dataset": args.dataset,
        "mode": "inference+training",
        "device": "cpu",
        "hector_version": hector.__version__,
        "host": _common.host_info("cpu"),
        "config": {
            "in_dim": args.in_dim,
            "heads": args.heads,
            "head_dim": args.head_dim,
            "runs": args.runs,
            "warmup": args.warmup,
            "fallback": args.fallback,
            "seed": args.seed,
            "loss": "mean(out**2)",
        },
        "graph": {"nodes": g.num_nodes, "edges": g.num_edges, "relations": g.num_etypes},
        "import_s": round(import_s, 3),
        "raised": dict(imported.report.raised),
        "hector_regions": sum(1 for s in imported.segments if s.entry is not None),
        "torch_segments": kinds,
        "results": results,
        "speedup_vs_eager": speedup,
        "speedup_vs_best_peer": speedup["training"],
        "memory_ratio_vs_best_peer": None,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _plot(record: dict[str, Any], path: str) -> None:
    res = record["results"]
    labels = [f"{r['system']} {r['mode']}" for r in res]
    _common.bar_plot(
        path,
        f"import {record['model']} on {record['dataset']}",
        labels,
        [("median ms", [r["median_ms"] for r in res], [(r["min_ms"], r["max_ms"]) for r in res])],
    )


def run(args: argparse.Namespace) -> int:
    """Entry point of ``hector bench import``: bad arguments print ``error: ...``, exit 1."""
    if args.runs < 1 or args.warmup < 0:
        print("error: --runs must be >= 1 and --warmup >= 0", file=sys.stderr)
        return 1
    if min(args.in_dim, args.heads, args.head_dim) < 1:
        print("error: --in-dim, --heads and --head-dim must be >= 1", file=sys.stderr)
        return 1
    try:
        record = run_bench(args)
    except BenchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    rows = [
        {
            "mode": r["mode"],
            "system": r["variant"],
            "median_ms": r["median_ms"],
            "min_ms": r["min_ms"],
            "max_ms": r["max_ms"],
            "speedup": record["speedup_vs_eager"][r["mode"]] if r["system"] == "hector" else None,
        }
        for r in record["results"]
    ]
    print(
        f"{record['model']} on {record['dataset']} ({record['graph']['nodes']} nodes, "
        f"{record['graph']['edges']} edges, {record['graph']['relations']} relations); "
        f"import {record['import_s']:.1f} s; raised {record['raised']}; "
        f"torch segments {record['torch_segments']}"
    )
    table = _common.format_table(
        rows,
        [
            ("mode", "mode"),
            ("system", "system"),
            ("median_ms", "median ms"),
            ("min_ms", "min ms"),
            ("max_ms", "max ms"),
            ("speedup", "speed-up"),
        ],
    )
    _common.emit_record(record, table, args.json, args.plot, _plot)
    return 0
