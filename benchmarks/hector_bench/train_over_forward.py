"""How much longer an RGCN training step takes than its forward (the target "a training step
at most 3x its forward" on ``synthetic:am --scale 0.25``), written as a JSON record.

    hector bench train-over-forward --threads 1 --json OUT.json

Times an inference forward (``no_grad``) and a training step (forward, ``sum()``, backward) of
one ``hector.models.RGCNLayer`` (64 → 64), medians of ``--runs`` after one warm-up, both in
wall time and in process CPU time: on a shared machine the CPU-time ratio at one thread is the
steadier of the two.

Unless ``--no-kernels``, the record also holds ``kernels``: every template of the forward and
of the training step (its ``_train`` and ``_backward`` functions) with its mean time per call,
GFLOP/s, GB/s and share of its step, from a second, profiled compilation of the same layer
(``hector-profile-kernels``, :mod:`.roofline`), timed apart from the ratio above so the timers
cost the ratio nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from typing import Any

import torch

import hector
from hector.tools import cli_args as _args

from . import _common, roofline


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


def _timed(fn: Callable[[], object], runs: int) -> tuple[float, float, float]:
    """:func:`_median` of ``fn`` and the bytes the host memory cache mapped per timed call
    (fresh pages, each faulted in: a step whose buffers the cache cannot reuse)."""
    from hector.runtime import host_memory

    fn()
    before = host_memory.stats()["mapped_bytes"]
    wall, cpu = _median(fn, runs)
    mapped = host_memory.stats()["mapped_bytes"] - before
    return wall, cpu, mapped / (runs + 1)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of the training-over-forward benchmark."""
    p.add_argument("--dataset", default="synthetic:am")
    p.add_argument("--scale", type=_args.SCALE, default=0.25)
    p.add_argument(
        "--threads", type=_args.THREADS_OR_AUTO, default=0, help="0: torch.get_num_threads()"
    )
    p.add_argument("--runs", type=_args.RUNS, default=3)
    p.add_argument("--json", help="write the record here")
    p.add_argument(
        "--no-kernels",
        dest="kernels",
        action="store_false",
        help="leave out the per-kernel table (a second, profiled compilation)",
    )


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

    fw, fc, fm = _timed(forward, args.runs)
    tw, tc, tm = _timed(train, args.runs)
    kernels = None
    if args.kernels:
        kernels = kernel_table(g, x, layer, args.runs)
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
        # other work on a shared machine: the 1, 5 and 15 minute load averages at the end
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "forward_wall_s": fw,
        "train_wall_s": tw,
        "forward_cpu_s": fc,
        "train_cpu_s": tc,
        "train_over_forward_wall": tw / fw,
        "train_over_forward_cpu": tc / fc,
        # fresh pages the host memory cache mapped per call, warm (0: every buffer reused)
        "forward_mapped_bytes": round(fm),
        "train_mapped_bytes": round(tm),
    }
    if kernels is not None:
        record["kernels"] = kernels
    print(json.dumps({k: v for k, v in record.items() if k != "kernels"}, indent=1))
    if kernels is not None:
        print(format_kernels(kernels))
    if args.json:
        _common.write_json(args.json, record)
    return 0


#: The phase of a profiled template, by the compiled function it belongs to.
_PHASES = {"": "forward", "_train": "train forward", "_backward": "backward"}


def _phase(function: str) -> str:
    for suffix in ("_backward", "_train"):
        if function.endswith(suffix):
            return _PHASES[suffix]
    return _PHASES[""]


def kernel_table(g: Any, x: torch.Tensor, layer: Any, runs: int) -> dict[str, Any]:
    """Per-template rows of the forward and of the training step, from a profiled compilation
    of the layer's function (its own cache: the timed one stays unprofiled): ``forward_ms``
    and ``train_ms`` (medians of the profiled calls), ``phase_ms`` (the rows' ``ms`` summed by
    phase), and per row its ``phase``, mean ``ms``
    per call, ``gflops``, ``gbps`` and ``share`` of its step (:func:`.roofline.kernel_rows`)."""
    from hector import models
    from hector.frontends import compiled as frontend

    fn = frontend.compile(models.rgcn_layer.fn)
    params = (layer.weight, layer.root, layer.bias)
    xx = x.clone().requires_grad_()

    def forward() -> None:
        with torch.no_grad():
            fn(g, x, *params)

    def train() -> None:
        xx.grad = None
        layer.zero_grad(set_to_none=True)
        fn(g, xx, *params).sum().backward()

    with roofline.profiling():
        forward()
        train()  # compiles both, profiled
    entries = roofline.profiled_entries([fn])
    steps: dict[str, float] = {}
    rows: list[dict[str, Any]] = []
    for step, call in (("forward", forward), ("train", train)):
        roofline.reset(entries)
        steps[step] = _median(call, runs)[0] * 1e3
        for row in roofline.kernel_rows(entries):
            row["phase"] = _phase(row["function"])
            row["share"] = round(row["ms"] / steps[step], 4)
            rows.append(row)
    phase_ms: dict[str, float] = {}
    for row in rows:
        phase_ms[row["phase"]] = round(phase_ms.get(row["phase"], 0.0) + row["ms"], 3)
    return {
        "forward_ms": round(steps["forward"], 3),
        "train_ms": round(steps["train"], 3),
        "phase_ms": phase_ms,  # the kernels' mean milliseconds per call, summed by phase
        "method": roofline.METHOD + "; share = ms / the profiled step's median",
        "rows": rows,
    }


_COLUMNS = [
    ("phase", "phase"),
    ("name", "kernel"),
    ("M", "M"),
    ("K", "K"),
    ("N", "N"),
    ("ms", "mean ms"),
    ("gflops", "GFLOP/s"),
    ("gbps", "GB/s"),
    ("torch_mm_best_gflops", "torch.mm GFLOP/s"),
    ("share", "share of step"),
]


def format_kernels(kernels: dict[str, Any]) -> str:
    """The per-kernel table as text, headed by the profiled steps' times."""
    phases = ", ".join(f"{p} {ms:.1f}" for p, ms in kernels["phase_ms"].items())
    head = (
        f"kernels (profiled: forward {kernels['forward_ms']:.1f} ms, "
        f"training step {kernels['train_ms']:.1f} ms; kernel ms by phase: {phases})"
    )
    return "\n".join([head, _common.format_table(kernels["rows"], _COLUMNS)])
