"""Measuring one ``hector bench gnn`` cell: every system in its own worker process under a
memory cap, their errors against the reference PyG layer, their peak memory in fresh
subprocesses, and the cell's record (docs/benchmarks.md, "Benchmark records").

A system that runs out of memory, crashes or hangs is a ``"failed"`` row with its reason; the
record is always complete.
"""

from __future__ import annotations

import gc
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from . import _common
from .gnn_ablation import ablation_summary
from .gnn_cell import Cell
from .gnn_errors import error_columns
from .gnn_setup import Setup, System, build_setup
from .gnn_worker import WORKER_MODULE, format_gib


def slug(text: str) -> str:
    """``text`` as a file-name part: runs of other characters than ``[A-Za-z0-9_.-]`` -> ``-``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")


def _memory_budget(cell: Cell) -> int | None:
    """Bytes one system's worker may map beyond its imports: ``--max-system-mem-gb`` capped by
    80% of the memory available now (so the machine keeps a margin for everyone else), but not
    under 1 GiB (address space, not resident memory: a smaller cap fails on mappings the work
    never touches; past what is free, the worker is the OOM killer's first choice)."""
    avail = _common.available_memory_bytes()
    budget = None if avail is None else max(int(0.8 * avail), 2**30)
    if cell.max_system_mem_gb is not None:
        cap = int(cell.max_system_mem_gb * 2**30)
        budget = cap if budget is None else min(budget, cap)
    return budget


def _run_isolated(
    cell: Cell, system: System, workdir: str, progress: Callable[[int], object]
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Measure ``system`` in a fresh worker process (``--system-worker``) under a memory cap.

    Returns its entry and its tensors (loaded from the file the worker saved, then deleted); a
    worker that runs out of memory, crashes or times out gives a ``"failed"`` entry and no
    tensors.
    """
    import torch

    base: dict[str, Any] = {"system": system.name, "variant": system.variant}
    budget = _memory_budget(cell)
    path = os.path.join(workdir, f"{system.name}-{slug(system.variant)}.pt")
    payload = {
        "cell": asdict(cell),
        "system": system.name,
        "variant": system.variant,
        "tensors_path": path,
        "mem_limit_bytes": budget,
    }
    outcome = _common.run_worker(
        WORKER_MODULE,
        "--system-worker",
        payload,
        timeout=cell.system_timeout_s,
        on_progress=progress,
    )
    try:
        if outcome.failure is not None or outcome.answer is None:
            why = outcome.failure or "no answer"
            if budget is not None and "SIGKILL" in why:
                why += f"; its memory cap was {format_gib(budget)}"
            return {**base, "status": "failed", "reason": why}, None
        entry = dict(outcome.answer)
        if entry.get("status") not in ("ok", "untimed") or not os.path.exists(path):
            return entry, None
        return entry, torch.load(path, weights_only=True)
    finally:
        if os.path.exists(path):
            os.unlink(path)


def _run_order(systems: list[System]) -> list[System]:
    """The reference first (every other system is compared with it), then the other peers (a
    fall-back reference when it fails), then Hector."""
    return sorted(systems, key=lambda s: (not s.reference, s.name == "hector"))


def _skipped(system: System, cell_dtype: str) -> dict[str, Any]:
    """The row of a system that does not run (unavailable, or too big for the peer cap)."""
    return {
        "system": system.name,
        "variant": system.variant,
        "dtype": system.dtype or cell_dtype,
        "status": system.skip_status,
        "reason": system.skip_reason,
    }


def _measure_systems(
    setup: Setup, bar: Any, say: Callable[[str], None]
) -> tuple[list[dict[str, Any]], list[tuple[System, dict[str, Any]]]]:
    """Every system of the cell in its own worker, the reference first; each row gets its errors
    against the first PyG layer that ran. Returns the rows (in run order) and the systems that
    were timed, with their rows."""
    import tempfile

    cell = setup.cell
    results: list[dict[str, Any]] = []
    ref: tuple[str, dict[str, Any]] | None = None  # (label, tensors) of the error reference
    measured: list[tuple[System, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="hector-bench-") as workdir:
        for system in _run_order(setup.systems):
            label = f"{system.name} {system.variant}"
            if system.skip_reason is not None:
                say(f"{label}: {system.skip_reason}")
                results.append(_skipped(system, cell.dtype))
                continue
            bar.set_postfix_str(label)
            entry, tensors = _run_isolated(cell, system, workdir, bar.update)
            if entry.get("status") not in ("ok", "untimed"):
                say(f"{label} {entry.get('status')}: {entry.get('reason')}")
            elif tensors is not None and ref is None and system.name != "hector":
                ref = (label, tensors)  # against itself: zero errors, the reference's scales
            if tensors is not None and ref is not None:
                entry.update(error_columns(tensors, ref[1], cell.training))
                entry["error_reference"] = ref[0]
            elif tensors is not None:
                entry.update(max_abs_err=None, max_rel_err=None, error_reference=None)
                entry["reason"] = "no PyG layer ran to compare with: errors not measured"
            if entry.get("status") == "ok":
                measured.append((system, entry))
            results.append(entry)
            del tensors
            gc.collect()
    return results, measured


def _measure_peak_memory(
    cell: Cell, measured: list[tuple[System, dict[str, Any]]], memory: bool, bar: Any
) -> None:
    """Peak memory: one fresh subprocess per system that ran (``peak_mem_bytes`` null when
    ``memory`` is off)."""
    for system, entry in measured:
        entry["peak_mem_bytes"] = None
        if not memory:
            continue
        bar.set_postfix_str(f"memory: {system.name} {system.variant}")
        answer = _common.measure_in_subprocess(
            WORKER_MODULE,
            {
                "cell": asdict(cell),
                "variant": system.variant,
                "system": system.name,
                "mem_limit_bytes": _memory_budget(cell),
            },
            timeout=cell.system_timeout_s,
            env={"MALLOC_MMAP_THRESHOLD_": "65536"},
        )
        if "error" in answer:
            entry["peak_mem_error"] = answer["error"]
        else:
            entry["peak_mem_bytes"] = answer["peak_mem_bytes"]
            entry["peak_mem_method"] = answer["method"]
        bar.update(1)


def _record(setup: Setup, results: list[dict[str, Any]]) -> dict[str, Any]:
    """The cell's record from its rows (in the order the systems were built)."""
    from hector import __version__

    cell = setup.cell
    speedup, mem_ratio = _common.best_peer_ratios(results)
    ablation = ablation_summary(results, setup.stats, cell.training) if cell.ablation else None
    return {
        "benchmark": "gnn",
        "model": cell.model,
        "dataset": cell.dataset,
        "mode": cell.mode,
        "device": cell.device,
        "dtype": cell.dtype,
        "hector_version": __version__,
        "host": _common.host_info(cell.device),
        "config": {
            "hidden": cell.hidden,
            "in_dim": cell.in_dim,
            "heads": cell.heads,
            "runs": cell.runs,
            "warmup": 1,
            "scale": cell.scale,
            "seed": cell.seed,
            "dtype": cell.dtype,
            "loss": "mean(out**2)" if cell.training else None,
        },
        "graph": setup.stats,
        "results": results,
        "speedup_vs_best_peer": speedup,
        "memory_ratio_vs_best_peer": mem_ratio,
        **({"ablation": ablation} if ablation is not None else {}),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def run_cell(cell: Cell, *, memory: bool = True, quiet: bool = False) -> dict[str, Any]:
    """Measure every system of ``cell``, each in its own worker process, and return its record
    (docs/benchmarks.md, "Benchmark records"). A system that fails, runs out of memory or
    crashes is a row with ``status: "failed"`` and its ``reason``; the record is always
    complete."""
    import torch
    from tqdm import tqdm

    setup = build_setup(cell)
    active = [s for s in setup.systems if s.skip_reason is None]
    total = len(active) * (cell.runs + 2) + (len(active) if memory else 0)
    bar = tqdm(
        total=total,
        desc=f"{cell.model}/{cell.dataset}/{cell.mode}",
        file=sys.stderr,
        leave=False,
        disable=quiet or None,
    )

    def say(text: str) -> None:
        if not quiet:
            tqdm.write(text, file=sys.stderr)

    results, measured = _measure_systems(setup, bar, say)
    if cell.device == "cuda":
        torch.cuda.empty_cache()
    _measure_peak_memory(cell, measured, memory, bar)
    bar.close()

    # Keep the order hector, then peers as built.
    by_variant = {(r["system"], r["variant"]): r for r in results}
    return _record(setup, [by_variant[(s.name, s.variant)] for s in setup.systems])
