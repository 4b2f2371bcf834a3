"""``hector bench placement``: compiled training that places its own saved values, vs keep-all.

One full-graph training step (forward, ``loss.backward()``) of a Hector RGAT or HGT layer, run
twice in fresh worker processes: keeping every value ``<f>_train`` saves (``memory_budget=1``:
planned, nothing moved) and under ``--memory-budget FRACTION`` of those bytes (the generated
code offloads the rest to the store, or recomputes it). Each worker compiles and warms up, then
measures the step time (median of ``--runs``) and the process's peak RSS above its baseline over
those steps, and hashes every gradient. The record has both rows, the plan (saved, kept and
budget bytes from ``placement-plan-saved``), the store's traffic, and:

* ``grads_bit_identical``: the two runs' gradients hash alike;
* ``peak_reduction``: 1 - budgeted peak / keep-all peak (above baseline);
* ``step_overhead``: budgeted median / keep-all median - 1.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from hector.tools import cli_args as _args

from . import _common

MODELS = ("rgat", "hgt")


_M_MMAP_THRESHOLD = -3  # mallopt parameter (malloc.h)


class BenchError(Exception):
    """A worker failed; the message says how."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``hector bench placement``."""
    p.add_argument("--model", choices=MODELS, default="rgat")
    p.add_argument("--dataset", default="synthetic:mag")
    p.add_argument("--scale", type=_args.SCALE, default=0.05, help="synthetic graph scale")
    p.add_argument("--hidden", type=_args.WIDTH, default=32, help="output width per head")
    p.add_argument("--heads", type=_args.HEADS, default=4)
    p.add_argument("--in-dim", type=_args.WIDTH, default=32)
    p.add_argument(
        "--memory-budget",
        type=_args.FRACTION,
        default=0.5,
        metavar="FRACTION",
        help="saved bytes kept resident, as a fraction of keep-all (default 0.5)",
    )
    p.add_argument("--runs", type=_args.RUNS, default=3, help="timed steps per worker")
    p.add_argument(
        "--repeats",
        type=_args.REPEATS,
        default=1,
        help="workers per mode, alternating keep-all and budgeted (the load changes in between)",
    )
    p.add_argument("--seed", type=_args.SEED, default=0)
    p.add_argument("--out", metavar="PATH", help="write the JSON record here")
    p.add_argument("--worker", metavar="JSON", help=argparse.SUPPRESS)


def _grad_digest(tensors: list[Any]) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(b"none" if t is None else t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def _attr(ir_text: str, name: str) -> int | None:
    """An ``i64`` function attribute of the planned ``<f>_train`` (from its IR text)."""
    key = f"{name} = "
    at = ir_text.find(key)
    if at < 0:
        return None
    return int(ir_text[at + len(key) :].split(" ", 1)[0])


def _training_step(cfg: dict[str, Any], ds: Any, g: Any) -> tuple[Any, list[Any], Any]:
    """``(layer, inputs, loss)``: the configured Hector layer (RGAT or HGT) on ``g``, its inputs
    (leaves that need gradients, drawn from a generator seeded with ``cfg["seed"]``) and the
    loss function (sum of squared outputs) whose ``backward()`` is the measured step."""
    import torch

    from hector import models

    gen = torch.Generator().manual_seed(cfg["seed"])
    heads, hidden, in_dim = cfg["heads"], cfg["hidden"], cfg["in_dim"]
    if cfg["model"] == "rgat":
        layer: Any = models.RGATLayer(in_dim, hidden, g.num_etypes, heads=heads)
        x: Any = torch.randn(g.num_nodes, in_dim, generator=gen).requires_grad_()

        def loss() -> Any:
            out = layer(g, x)
            return (out * out).sum()

        return layer, [x], loss
    layer = models.HGTLayer(in_dim, hidden * heads, ds.node_types, ds.edge_types, heads=heads)
    counts = torch.bincount(ds.node_type, minlength=len(ds.node_types)).tolist()
    xd = {
        t: torch.randn(n, in_dim, generator=gen).requires_grad_()
        for t, n in zip(ds.node_types, counts, strict=True)
    }

    def hgt_loss() -> Any:
        return sum((o * o).sum() for o in layer(g, xd).values())

    return layer, list(xd.values()), hgt_loss


def worker(cfg: dict[str, Any]) -> dict[str, Any]:
    """Measure one mode (``cfg["budget"]``) in this process."""
    import ctypes

    import torch

    from hector import datasets
    from hector.runtime.placement import current_store, wait_stats

    # glibc raises its mmap threshold after freeing a large block, and then keeps freed
    # temporaries in the heap: RSS would show allocator history, not live memory. A fixed
    # threshold (both modes alike) makes every large buffer go back to the OS when freed.
    ctypes.CDLL("libc.so.6").mallopt(_M_MMAP_THRESHOLD, 1 << 20)

    torch.manual_seed(cfg["seed"])
    ds = datasets.load(cfg["dataset"], scale=cfg["scale"], seed=cfg["seed"])
    g = ds.hetero_graph()
    layer, inputs, loss = _training_step(cfg, ds, g)
    layer._fn.memory_budget = cfg["budget"]

    def zero() -> None:
        for t in [*inputs, *layer.parameters()]:
            t.grad = None

    loss().backward()  # compile and warm up
    zero()
    entry = next(iter(layer._fn._cache.values()))
    planned = entry.ir("placement")
    store = current_store()
    before, waits_before = store.stats(), wait_stats()
    gc.collect()
    _release_idle_memory()
    meter = _common.PeakRSS()
    meter.start()
    times, cpu_times = [], []
    for _ in range(cfg["runs"]):
        zero()
        start, cpu = time.perf_counter(), time.process_time()
        loss().backward()
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu)
    peak = meter.peak_bytes()
    after, waits = store.stats(), wait_stats()
    waited = {k: (waits[k] - waits_before[k]) / 1e6 / cfg["runs"] for k in waits if "ns" in k}
    grads = [t.grad for t in [*inputs, *layer.parameters()]]
    return {
        "memory_budget": cfg["budget"],
        "median_ms": round(statistics.median(times) * 1e3, 2),
        "min_ms": round(min(times) * 1e3, 2),
        "max_ms": round(max(times) * 1e3, 2),
        "cpu_median_ms": round(statistics.median(cpu_times) * 1e3, 2),
        "peak_mem_bytes": peak,
        "peak_mem_method": meter.method,
        "modeled_peak_bytes": _attr(planned, "placement.peak_bytes"),
        "modeled_keep_all_peak_bytes": _attr(planned, "placement.keep_all_peak_bytes"),
        "saved_bytes": _attr(planned, "placement.saved_bytes"),
        "kept_bytes": _attr(planned, "placement.kept_bytes"),
        "budget_bytes": _attr(planned, "placement.budget_bytes"),
        "decisions": {
            d: planned.count(f'"placement.{d}"') for d in ("keep", "offload", "recompute")
        },
        "store_bytes_written": after["bytes_written"] - before["bytes_written"],
        "store_bytes_read": after["bytes_read"] - before["bytes_read"],
        "store_write_bandwidth": after["write_bandwidth"],
        # Per step, the store's I/O the kernels did not hide: generated code blocked in
        # hector_place_wait for writes (before freeing a written value) and for reads.
        "store_wait_write_ms": round(waited["wait_write_ns"], 2),
        "store_wait_read_ms": round(waited["wait_read_ns"], 2),
        "store_direct_io": store.direct,
        "store_io_backend": "native " + _io_backend(),
        "grad_sha256": _grad_digest(grads),
        # Where generated code allocates through the host memory cache, what it held after
        # the steps (idle blocks count in RSS).
        "host_memory_cache": cache.stats() if (cache := _host_memory()) is not None else None,
        "graph": {
            "nodes": g.num_nodes,
            "edges": g.num_edges,
            "compact": g.num_compact,
            "relations": g.num_etypes,
        },
    }


def _release_idle_memory() -> None:
    """Return freed memory to the OS — glibc's heap (``malloc_trim``) and the idle blocks of
    Hector's host memory cache where the runtime has one — so the baseline is live memory and
    the peak above it is what a step needs."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    host_memory = _host_memory()
    if host_memory is not None:
        host_memory.empty_cache()


def _host_memory() -> Any:
    """Hector's host memory cache module, or None in a runtime without one (the cache is newer
    than this benchmark)."""
    try:
        return importlib.import_module("hector.runtime.host_memory")
    except ImportError:
        return None


def _io_backend() -> str:
    from hector.runtime.offload import IO_BACKEND

    return IO_BACKEND


def _ratio(planned: int | None, keep_all: int | None) -> float | None:
    """1 - planned / keep-all (None when either is unknown)."""
    return round(1 - planned / keep_all, 4) if planned and keep_all else None


def _run_worker(cfg: dict[str, Any]) -> dict[str, Any]:
    """Run :func:`worker` in a fresh interpreter (its own peak RSS and store)."""
    # The worker imports Hector as this process did (-S: from PYTHONPATH, no site hooks).
    flags = ["-S"] if sys.flags.no_site else []
    cmd = [sys.executable, *flags, "-m", "hector_bench.placement", "--worker", json.dumps(cfg)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or ["(no output)"]
        raise BenchError(
            f"{cfg['model']} worker (memory_budget={cfg['budget']}) failed with exit status "
            f"{done.returncode}: {lines[-1]}"  # the exception's own line, not its traceback
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _merge(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One mode's row from its workers: the medians of their step times and peaks, each
    worker's own figures under ``workers``."""
    out = dict(rows[0])
    for key in ("median_ms", "cpu_median_ms", "peak_mem_bytes"):
        out[key] = statistics.median(r[key] for r in rows)
    if len({r["grad_sha256"] for r in rows}) != 1:
        out["grad_sha256"] = "workers disagree: " + ", ".join(r["grad_sha256"] for r in rows)
    out["workers"] = [
        {k: r[k] for k in ("median_ms", "min_ms", "max_ms", "cpu_median_ms", "peak_mem_bytes")}
        for r in rows
    ]
    return out


def run(args: argparse.Namespace) -> int:
    """``hector bench placement``: both modes, the comparison, the record."""
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    if not 0 <= args.memory_budget <= 1:
        print("hector bench placement: --memory-budget is a fraction in [0, 1]", file=sys.stderr)
        return 2
    if args.runs < 1 or args.repeats < 1:
        print("hector bench placement: --runs and --repeats must be at least 1", file=sys.stderr)
        return 2
    cfg = {
        k: getattr(args, k)
        for k in ("model", "dataset", "scale", "hidden", "heads", "in_dim", "runs", "seed")
    }
    workers: dict[float, list[dict[str, Any]]] = {1.0: [], args.memory_budget: []}
    load_before = os.getloadavg()
    try:
        for _ in range(args.repeats):
            for budget in (1.0, args.memory_budget):
                workers[budget].append(_run_worker({**cfg, "budget": budget}))
    except BenchError as err:
        print(f"hector bench placement: {err}", file=sys.stderr)
        return 1
    keep, budgeted = _merge(workers[1.0]), _merge(workers[args.memory_budget])
    peak_k, peak_b = keep["peak_mem_bytes"], budgeted["peak_mem_bytes"]
    record = {
        "benchmark": "placement",
        "model": args.model,
        "dataset": args.dataset,
        "scale": args.scale,
        "hidden_per_head": args.hidden,
        "heads": args.heads,
        "in_dim": args.in_dim,
        "mode": "training (full graph, one layer, CPU)",
        "memory_budget": args.memory_budget,
        "results": [{"variant": "keep-all", **keep}, {"variant": "budgeted", **budgeted}],
        "grads_bit_identical": keep["grad_sha256"] == budgeted["grad_sha256"],
        "peak_reduction": round(1 - peak_b / peak_k, 4) if peak_k else None,
        "step_overhead": round(budgeted["median_ms"] / keep["median_ms"] - 1, 4),
        "cpu_overhead": round(budgeted["cpu_median_ms"] / keep["cpu_median_ms"] - 1, 4),
        "modeled_peak_reduction": _ratio(
            budgeted["modeled_peak_bytes"], budgeted["modeled_keep_all_peak_bytes"]
        ),
        "repeats": args.repeats,
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "host": _common.host_info("cpu"),
        "notes": "machine shared with other jobs (2 cores; load_before/after are the 1, 5 and "
        "15 minute load averages); peak RSS above each worker's baseline after a warm-up step "
        "(glibc heap trimmed, idle host-cache blocks released); both workers fix glibc's mmap "
        "threshold at 1 MiB (mallopt) so freed buffers leave RSS; keep-all is the same program "
        "planned with memory_budget=1 (nothing moved; the same early frees of temporaries); "
        "modeled peaks are placement-plan-saved's liveness model at the graph's sizes; with "
        "repeats > 1 the modes alternate and each figure is the median over workers",
    }
    text = json.dumps(record, indent=2)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(
        f"{args.model} on {args.dataset} x{args.scale}: keep-all {keep['median_ms']} ms, "
        f"peak {_common.mib(peak_k):.1f} MiB; budget {args.memory_budget}: "
        f"{budgeted['median_ms']} ms, peak {_common.mib(peak_b):.1f} MiB "
        f"(peak -{record['peak_reduction']:.1%}, step {record['step_overhead']:+.1%}), "
        f"gradients bit-identical: {record['grads_bit_identical']}"
    )
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m hector_bench.placement")
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
