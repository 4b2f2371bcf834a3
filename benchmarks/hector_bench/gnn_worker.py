"""The worker processes of ``hector bench gnn``: one system of one cell, measured in a fresh
process under an address-space cap (``--system-worker``), or its steady-state peak memory
(``--memory-worker``).

Both are started as ``python -m hector_bench.gnn <flag> JSON`` (:data:`WORKER_MODULE`; the
module's ``__main__`` is :func:`main`); the worker rebuilds the cell from the payload
(deterministic, :func:`hector_bench.gnn_setup.build_setup`) and answers on stdout
(:func:`hector_bench._common.run_worker`, :func:`hector_bench._common.measure_in_subprocess`).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import traceback
from typing import Any

from . import _common
from .gnn_cell import Cell
from .gnn_measure import fresh_input, input_dtype, make_step, measure_system, zero_grad
from .gnn_setup import build_setup, find_system

#: The module a parent runs with ``python -m`` to start a worker.
WORKER_MODULE = "hector_bench.gnn"


def format_gib(nbytes: float) -> str:
    """A memory size for a failure reason: MiB below 1 GiB, else GiB."""
    if nbytes < 2**30:
        return f"{nbytes / 2**20:.0f} MiB"
    return f"{nbytes / 2**30:.1f} GiB"


def isolate(mem_limit_bytes: int | None) -> None:
    """Worker set-up: heavy imports and PyTorch's worker threads first (so the cap counts only
    the work, not the libraries or the threads' stack reservations), then the address space
    cap, and the OOM killer's first choice should memory still run out."""
    import torch  # noqa: F401
    import torch_geometric  # noqa: F401

    import hector.models  # noqa: F401
    from hector.lowering.cpu import jit as cpu_jit
    from hector.targets import driver  # noqa: F401  (the MLIR bindings, loaded lazily otherwise)

    cpu_jit.runtime_symbols()  # MLIR's async runtime and runner utilities
    _common.start_thread_pools()  # their stacks in the baseline, whatever the core count
    _common.limit_address_space(mem_limit_bytes)
    _common.prefer_oom_kill()


def _is_out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is an allocation that failed (under the cap)."""
    text = str(err)
    return isinstance(err, MemoryError) or any(
        s in text for s in ("can't allocate memory", "out of memory", "Cannot allocate memory")
    )


def system_worker(payload: dict[str, Any]) -> dict[str, Any]:
    """One system of one cell, in this (fresh) process: its result entry (see
    :func:`~hector_bench.gnn_measure.measure_system`); its tensors go to
    ``payload["tensors_path"]`` (``torch.save``).

    Progress (one line per call) and the answer are protocol lines on stdout
    (:func:`hector_bench._common.run_worker`). An exception becomes a ``"failed"`` entry whose
    reason says ``out of memory`` (with the cap) when an allocation failed.
    """
    import torch

    limit = payload.get("mem_limit_bytes")
    isolate(limit)
    base = {"system": payload["system"], "variant": payload["variant"]}
    try:
        setup = build_setup(Cell(**payload["cell"]))
        system = find_system(setup, payload)
        entry, tensors = measure_system(
            setup, system, lambda n: _common.emit_worker_line({"progress": n})
        )
        torch.save(tensors, payload["tensors_path"])
        return entry
    except Exception as err:  # noqa: BLE001 — reported to the parent as a failed row
        if os.environ.get("HECTOR_DEBUG"):
            traceback.print_exc()
        message = f"{type(err).__name__}: {err}".strip().splitlines()[0][:400]
        if _is_out_of_memory(err):
            cap = f" (cap {format_gib(limit)} above the worker's imports)" if limit else ""
            message = f"out of memory{cap}: {message}"
        return {**base, "status": "failed", "reason": message}


def _malloc_trim() -> None:
    """Return freed heap memory to the OS (glibc), so RSS tracks live memory."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def memory_worker(payload: dict[str, Any], steps: int = 2) -> dict[str, Any]:
    """Peak memory of one system's steady-state calls, above the set-up baseline.

    Builds the cell (imports, dataset, inputs, layer), makes one untimed call (Hector compiles;
    caches fill), drops gradients, then takes the baseline and runs ``steps`` calls.
    """
    import torch

    isolate(payload.get("mem_limit_bytes"))
    cell = Cell(**payload["cell"])
    setup = build_setup(cell)
    system = find_system(setup, payload)
    module, forward = system.build()
    x = fresh_input(setup.x, cell.training, input_dtype(setup, system))
    step = make_step(module, forward, x, cell.training)
    step()  # warm-up (compile)
    zero_grad(module, x)
    gc.collect()
    if cell.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        return {
            "peak_mem_bytes": int(torch.cuda.max_memory_allocated() - base),
            "method": "torch.cuda.max_memory_allocated above allocated baseline",
        }
    _malloc_trim()
    meter = _common.PeakRSS()
    meter.start()
    for _ in range(steps):
        out = step()
        del out
    return {"peak_mem_bytes": meter.peak_bytes(), "method": meter.method}


def main(argv: list[str]) -> int:
    """``python -m hector_bench.gnn --system-worker JSON`` (or ``--memory-worker JSON``): the
    answer as one protocol line (system worker) or one JSON line (memory worker)."""
    p = argparse.ArgumentParser(prog="hector_bench.gnn")
    kind = p.add_mutually_exclusive_group(required=True)
    kind.add_argument("--system-worker")
    kind.add_argument("--memory-worker")
    args = p.parse_args(argv)
    if args.system_worker is not None:
        _common.emit_worker_line({"result": system_worker(json.loads(args.system_worker))})
        return 0
    try:
        answer = memory_worker(json.loads(args.memory_worker))
    except Exception as err:  # noqa: BLE001 — reported to the parent as JSON
        answer = {"error": f"{type(err).__name__}: {err}"}
    print(json.dumps(answer))
    return 0
