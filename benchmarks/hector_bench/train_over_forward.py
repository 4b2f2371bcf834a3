"""How much longer an RGCN training step takes than its forward (the target "a training step
at most 3x its forward" on ``synthetic:am --scale 0.25``), written as a JSON record.

    hector bench train-over-forward --threads 1 --json OUT.json

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

import hector
from hector.tools import cli_args as _args

from . import _common


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


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of the training-over-forward benchmark."""
    p.add_argument("--dataset", default="synthetic:am")
    p.add_argument("--scale", type=_args.SCALE, default=0.25)
    p.add_argument(
        "--threads", type=_args.THREADS_OR_AUTO, default=0, help="0: torch.get_num_threads()"
    )
    p.add_argument("--runs", type=_args.RUNS, default=3)
    p.add_argument("--json", help="write the record here")


def run(args: argparse.Namespace) -> int:
    """Measure and print (and with ``--json`` write) the record."""
    from hector import datasets, models

    if args.threads:
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
        "benchmark": "train-over-forward",
        "dataset": args.dataset,
        "scale": args.scale,
        "hector_version": hector.__version__,
        "host": _common.host_info(),
        "nodes": ds.num_nodes,
        "edges": ds.num_edges,
        "relations": ds.num_relations,
        "threads": torch.get_num_threads(),
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
        _common.write_json(args.json, record)
    return 0
