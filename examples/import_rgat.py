"""Import a plain-PyTorch RGAT layer with ``hector.import_model`` and time it against eager.

The layer is written the way users write it: per-relation weights picked with ``W[etype]`` and
applied with ``bmm``, attention logits from shared projections, a segment softmax built from
``scatter_reduce("amax")`` / ``scatter_add``, multi-head weighting and ``index_add`` onto
destinations. Both versions run in this process on ``hector.datasets.load(DATASET)``; the
medians of ``--runs`` (at least 5) timed runs after one warm-up are printed, for inference and
for a training step (forward + backward), with the largest output difference.

    python examples/import_rgat.py                     # synthetic:aifb, 5 runs
    python examples/import_rgat.py --dataset synthetic:mutag --runs 10 --heads 4
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import torch
from torch import nn

import hector  # loads Hector's MLIR libraries (they must load before torch-mlir's)
from hector.datasets import load
from hector_bench.importer import RGAT  # the plain-PyTorch layer (shared with the benchmark)


def median_ms(fn: Callable[[], object], runs: int) -> float:
    """Median wall time of ``fn`` in milliseconds over ``runs`` runs, after one warm-up."""
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print a table; returns the exit status."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="synthetic:aifb")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--in-dim", type=int, default=16)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=8)
    args = p.parse_args(argv)
    if args.runs < 5:
        p.error("--runs must be at least 5")
    torch.manual_seed(0)
    ds = load(args.dataset)
    g = ds.hetero_graph()
    ei, et = g.edge_index_sorted()
    src, dst = ei[0], ei[1]
    x = torch.randn(g.num_nodes, args.in_dim)
    model = RGAT(g.num_nodes, g.num_etypes, args.in_dim, args.heads, args.head_dim)
    print(
        f"{args.dataset}: {g.num_nodes} nodes, {g.num_edges} edges, {g.num_etypes} relations; "
        f"{args.in_dim} -> {args.heads} heads x {args.head_dim}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads",
        flush=True,
    )
    t0 = time.perf_counter()
    imported = hector.import_model(model, (x, src, dst, et), graph=g, strict=True)
    compile_s = time.perf_counter() - t0
    print(f"import (export + raise + compile): {compile_s:.1f} s; raised {imported.report.raised}")

    with torch.no_grad():
        err = (imported(x, src, dst, et) - model(x, src, dst, et)).abs().max().item()

    def infer(f: nn.Module) -> Callable[[], object]:
        def run() -> object:
            with torch.no_grad():
                return f(x, src, dst, et)

        return run

    def train(f: nn.Module) -> Callable[[], object]:
        def run() -> object:
            model.zero_grad(set_to_none=True)
            f(x, src, dst, et).square().mean().backward()
            return None

        return run

    rows = []
    for mode, make in (("inference", infer), ("training step", train)):
        eager = median_ms(make(model), args.runs)
        mine = median_ms(make(imported), args.runs)
        rows.append((mode, eager, mine))
    print(f"\n| median of {args.runs} | eager PyTorch | imported (Hector) | speed-up |")
    print("|---|---|---|---|")
    for mode, eager, mine in rows:
        print(f"| {mode} | {eager:.1f} ms | {mine:.1f} ms | {eager / mine:.1f}x |")
    print(f"\nmax abs error (inference output): {err:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
