#!/usr/bin/env python3
"""How much longer an RGCN training step takes than its forward (issue 13's "training step
≤ 3x its forward" on ``synthetic:am --scale 0.25``), written as a JSON record.

    python3 scripts/train_over_forward.py --threads 1 --json OUT.json

Times an inference forward (``no_grad``) and a training step (forward, ``sum()``, backward) of
one ``hector.models.RGCNLayer`` (64 → 64), medians of ``--runs`` after one warm-up, both in
wall time and in process CPU time: on a shared machine the CPU-time ratio at one thread is the
steadier of the two.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import torch

from hector import datasets, models


def _median(fn: Callable[[], object], runs: int) -> tuple[float, float]:
    """Median wall and CPU seconds of ``fn`` over ``runs`` calls, after one warm-up call."""
    fn()
    wall, cpu = [], []
    for _ in range(runs):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return sorted(wall)[runs // 2], sorted(cpu)[runs // 2]


def main() -> None:
    """Measure and print (and with ``--json`` write) the record."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="synthetic:am")
    p.add_argument("--scale", type=float, default=0.25)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--json", help="write the record here")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    ds = datasets.load(args.dataset, scale=args.scale)
    g = ds.hetero_graph()
    torch.manual_seed(0)
    layer = models.RGCNLayer(64, 64, ds.num_relations)
    x = torch.randn(ds.num_nodes, 64)

    def forward() -> None:
        with torch.no_grad():
            layer(g, x)

    xx = x.clone().requires_grad_()

    def train() -> None:
        xx.grad = None  # as optimizer.zero_grad(set_to_none=True) does between steps
        layer.zero_grad(set_to_none=True)
        layer(g, xx).sum().backward()

    fw, fc = _median(forward, args.runs)
    tw, tc = _median(train, args.runs)
    record = {
        "benchmark": "train_over_forward",
        "dataset": args.dataset,
        "scale": args.scale,
        "nodes": ds.num_nodes,
        "edges": ds.num_edges,
        "relations": ds.num_relations,
        "threads": args.threads,
        "runs": args.runs,
        "forward_wall_s": fw,
        "train_wall_s": tw,
        "forward_cpu_s": fc,
        "train_cpu_s": tc,
        "train_over_forward_wall": tw / fw,
        "train_over_forward_cpu": tc / fc,
    }
    print(json.dumps(record, indent=1))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
