"""``hector bench gnn``: RGCN / RGAT / HGT layers, Hector against PyG, inference or training.

One *cell* = (model, dataset, mode). For a cell the benchmark loads the dataset
(:mod:`hector.datasets`), builds the PyG layer with a fixed seed (``RGCNConv``, ``RGATConv`` or
``HGTConv``), loads the very same weights into Hector's layer (``hector.models.<X>Layer
.from_pyg``) and into every other applicable PyG layer (``FastRGCNConv``), and then measures each
system in its own worker process (``python -m hector_bench.gnn --system-worker``), under an
address-space cap, so a system that runs out of memory, crashes or hangs is a ``"failed"`` row
with its reason and never costs the run or the record:

* checks correctness against the reference PyG layer (or, when it failed, the next PyG layer
  that ran): max abs error and max relative error (over max |reference|) of the forward output
  and, in training mode, of the input gradient and of the parameter gradients whose names and
  shapes match;
* times it: one untimed first call (Hector compiles there; its compile time is reported
  separately), one warm-up call, then the median / min / max of ``--runs`` calls. A training
  call is ``zero_grad`` + forward + ``out.square().mean()`` + backward;
* measures peak memory in a fresh subprocess (``python -m hector_bench.gnn --memory-worker``):
  peak RSS above the subprocess's baseline on CPU, ``torch.cuda.max_memory_allocated`` above the
  allocated baseline on CUDA (see :mod:`hector_bench._common`).

The record (``--json``) follows docs/benchmarks.md, "Benchmark records". ``--suite`` runs the
grid {rgcn, rgat, hgt} x {synthetic:aifb, synthetic:mutag, synthetic:bgs, ogbn_mag_0.1} x
{inference, training} (restricted by ``--model`` / ``--dataset`` / ``--mode`` when given), one
JSON per cell into a directory (default ``bench-results/gnn``) plus ``summary.json``, a summary
table and a plot.

A cell whose Hector layer does not exist yet (``hector.models`` without ``RGATLayer``, ...)
says so in its record (``status: "unavailable"``) and the benchmark goes on with the peers.

This module is the command line (options, checks, one cell or the suite) and the workers' entry
point; the work is split by job: :mod:`~hector_bench.gnn_cell` (what a cell is),
:mod:`~hector_bench.gnn_setup` (its dataset, inputs and systems),
:mod:`~hector_bench.gnn_measure` (one system timed in this process),
:mod:`~hector_bench.gnn_compiled` (what Hector compiled), :mod:`~hector_bench.gnn_errors`
(errors against the reference), :mod:`~hector_bench.gnn_worker` (the worker processes),
:mod:`~hector_bench.gnn_run` (one cell's record), :mod:`~hector_bench.gnn_ablation` (its
ablation part) and :mod:`~hector_bench.gnn_report` (tables and plots).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from hector.tools import cli_args as _args

from . import _common, gnn_worker
from .gnn_cell import (
    DTYPES,
    HECTOR_CLASS,
    MODELS,
    MODES,
    REFERENCE,
    SUITE_DATASETS,
    BenchError,
    Cell,
)
from .gnn_compiled import aggregation_order, kernel_count, saved_bytes
from .gnn_errors import error_columns
from .gnn_measure import loss_of, make_step, measure_system
from .gnn_report import format_record, format_suite, plot_record, plot_roofline, plot_suite
from .gnn_run import run_cell, slug
from .gnn_setup import ABLATION, Setup, System, build_setup
from .gnn_worker import memory_worker, system_worker
from .plot_args import PLOT

__all__ = [
    "ABLATION",
    "DTYPES",
    "HECTOR_CLASS",
    "MODELS",
    "MODES",
    "REFERENCE",
    "SUITE_DATASETS",
    "BenchError",
    "Cell",
    "Setup",
    "System",
    "add_arguments",
    "aggregation_order",
    "build_setup",
    "error_columns",
    "format_record",
    "kernel_count",
    "loss_of",
    "make_step",
    "measure_system",
    "memory_worker",
    "plot_record",
    "run",
    "run_cell",
    "run_single",
    "run_suite",
    "saved_bytes",
    "system_worker",
]

#: Where ``--suite`` writes its records when ``--json`` names no directory.
DEFAULT_SUITE_DIR = "bench-results/gnn"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the ``hector bench gnn`` options to ``p``."""
    p.add_argument("--model", choices=MODELS, help="model (required unless --suite)")
    p.add_argument(
        "--dataset",
        help="synthetic:<name>, ogbn_mag_0.1, a COO directory or a triple file "
        "(required unless --suite)",
    )
    p.add_argument("--mode", choices=MODES, help="inference or training (required unless --suite)")
    p.add_argument(
        "--hidden", type=_args.WIDTH, default=64, help="output features per head (default 64)"
    )
    p.add_argument(
        "--in-dim", type=_args.WIDTH, default=None, help="input features (default: --hidden)"
    )
    p.add_argument(
        "--heads", type=_args.HEADS, default=None, help="attention heads (rgat/hgt; default 1)"
    )
    p.add_argument(
        "--runs", type=_args.RUNS, default=5, help="timed runs per system (median; default 5)"
    )
    p.add_argument(
        "--scale",
        type=_args.SCALE,
        default=None,
        help="size factor for synthetic datasets (default 1; in --suite: bgs 0.1, others 1)",
    )
    p.add_argument("--seed", type=_args.SEED, default=0, help="seed of graph, weights and inputs")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument(
        "--dtype",
        choices=DTYPES,
        default="float32",
        help="type of the features, the weights and every system's layer (default float32); "
        "in bfloat16 the errors are measured against the reference PyG layer in float32 on "
        "the same bfloat16-rounded weights and inputs",
    )
    p.add_argument(
        "--json",
        metavar="PATH",
        help="write the record (with --suite: a directory, default " + DEFAULT_SUITE_DIR + ")",
    )
    p.add_argument(
        "--plot", type=PLOT, metavar="PATH", help="bar chart of time and memory per system"
    )
    p.add_argument("--suite", action="store_true", help="run the model x dataset x mode grid")
    p.add_argument(
        "--ablation",
        action="store_true",
        help="measure Hector under U (no optimization), C, R, C+R and C+R+F",
    )
    p.add_argument(
        "--no-memory",
        action="store_true",
        help="skip the per-system peak-memory subprocesses (peak_mem_bytes is null)",
    )
    p.add_argument(
        "--max-peer-mem-gb",
        type=_args.GIB,
        default=4.0,
        help="skip a PyG layer whose estimated extra memory exceeds this (FastRGCNConv "
        "materializes one weight matrix per edge; default 4)",
    )
    p.add_argument(
        "--max-system-mem-gb",
        type=_args.GIB,
        default=None,
        help="address-space cap of each system's worker process; a system that needs more "
        "fails with 'out of memory' (default: 80%% of the memory available when it starts)",
    )
    p.add_argument(
        "--system-timeout",
        type=_args.SECONDS,
        default=3600.0,
        metavar="SECONDS",
        help="a system still running after this many seconds is killed and reported as "
        "failed (default 3600)",
    )
    p.add_argument(
        "--no-roofline",
        action="store_true",
        help="do not time Hector's kernels one by one (the per-kernel FLOPs, bytes, GFLOP/s and "
        "torch.mm references of the record's kernel_profile; docs/benchmarks.md, Roofline)",
    )
    p.add_argument(
        "--order",
        choices=("auto", "transform-first", "aggregate-first"),
        default="auto",
        help="order of Hector's linear messages (hector-aggregation-order): the cost model's "
        "choice per layer and graph (default), or one forced",
    )
    p.add_argument(
        "--no-peer-timing",
        action="store_true",
        help="run the PyG layers once, as the reference for the error columns, without timing "
        "or memory (for --ablation on graphs where a PyG step takes minutes)",
    )


def _cell_from_args(args: argparse.Namespace, model: str, dataset: str, mode: str) -> Cell:
    """The cell (model, dataset, mode) with the command line's settings (the suite's scale for
    ``dataset`` under ``--suite`` when ``--scale`` is not given)."""
    scale = args.scale if args.scale is not None else SUITE_DATASETS.get(dataset, 1.0)
    if not args.suite and args.scale is None:
        scale = 1.0
    heads = args.heads if args.heads is not None else 1
    return Cell(
        model=model,
        dataset=dataset,
        mode=mode,
        hidden=args.hidden,
        in_dim=args.in_dim if args.in_dim is not None else args.hidden,
        heads=heads,
        runs=args.runs,
        scale=scale,
        seed=args.seed,
        device=args.device,
        max_peer_mem_gb=args.max_peer_mem_gb,
        max_system_mem_gb=getattr(args, "max_system_mem_gb", None),
        system_timeout_s=getattr(args, "system_timeout", 3600.0),
        ablation=getattr(args, "ablation", False),
        time_peers=not getattr(args, "no_peer_timing", False),
        roofline=not getattr(args, "no_roofline", False),
        order=getattr(args, "order", "auto"),
        dtype=getattr(args, "dtype", "float32"),
    )


def _validate(args: argparse.Namespace) -> None:
    """Refuse bad arguments (a BenchError) before any work starts."""
    if args.hidden is None or args.hidden <= 0:
        raise BenchError(f"--hidden must be > 0, got {args.hidden}")
    if args.in_dim is not None and args.in_dim <= 0:
        raise BenchError(f"--in-dim must be > 0, got {args.in_dim}")
    if args.heads is not None and args.heads <= 0:
        raise BenchError(f"--heads must be > 0, got {args.heads}")
    if args.runs < 1:
        raise BenchError(f"--runs must be >= 1, got {args.runs}")
    if args.scale is not None and not 0 < args.scale <= 1000:
        raise BenchError(f"--scale must be in (0, 1000], got {args.scale}")
    if args.max_peer_mem_gb <= 0:
        raise BenchError(f"--max-peer-mem-gb must be > 0, got {args.max_peer_mem_gb}")
    if getattr(args, "max_system_mem_gb", None) is not None and args.max_system_mem_gb <= 0:
        raise BenchError(f"--max-system-mem-gb must be > 0, got {args.max_system_mem_gb}")
    if getattr(args, "system_timeout", 1.0) <= 0:
        raise BenchError(f"--system-timeout must be > 0, got {args.system_timeout}")
    if args.heads is not None and args.heads > 1 and args.model == "rgcn":
        raise BenchError("--heads applies to rgat and hgt only")
    if args.model == "hgt" and args.heads and args.hidden % args.heads:
        raise BenchError(
            f"hgt needs --hidden divisible by --heads (HGTConv splits {args.hidden} "
            f"channels over {args.heads} heads)"
        )
    if not args.suite:
        missing = [f"--{k}" for k in ("model", "dataset", "mode") if getattr(args, k) is None]
        if missing:
            raise BenchError(f"{', '.join(missing)} required (or use --suite)")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise BenchError("--device cuda: no CUDA device is available here")
    if args.dataset is not None and not args.dataset.startswith("synthetic:"):
        from hector import datasets

        if args.dataset not in datasets.SHARED_DATASETS and not os.path.exists(args.dataset):
            raise BenchError(
                f"unknown dataset {args.dataset!r}: not a file or directory; valid names: "
                + ", ".join(datasets.available())
            )
    if args.dataset is not None and args.dataset.startswith("synthetic:"):
        from hector import datasets

        if args.dataset.removeprefix("synthetic:") not in datasets.SYNTHETIC_SPECS:
            raise BenchError(
                f"unknown synthetic dataset {args.dataset!r}; valid: "
                + ", ".join(f"synthetic:{k}" for k in datasets.SYNTHETIC_SPECS)
            )


def run_single(args: argparse.Namespace) -> int:
    """One cell: run, print the table, write JSON / plot."""
    cell = _cell_from_args(args, args.model, args.dataset, args.mode)
    record = run_cell(cell, memory=not args.no_memory)
    _common.emit_record(record, format_record(record), args.json, args.plot, plot_record)
    if args.json:
        plot_roofline(record, args.json)
    return 0


def _summary_row(record: dict[str, Any], path: Path) -> dict[str, Any]:
    """A cell's row of the suite's summary: Hector's status, time and errors, the best PyG
    layer's time, the ratios, and the cell's file."""
    hector = next(r for r in record["results"] if r["system"] == "hector")
    peers = [r for r in record["results"] if r["system"] != "hector" and r.get("status") == "ok"]
    best = min(peers, key=lambda r: r["median_ms"], default=None)
    return {
        "model": record["model"],
        "dataset": record["dataset"],
        "mode": record["mode"],
        "dtype": record.get("dtype", "float32"),
        "status": hector.get("status"),
        "hector_ms": hector.get("median_ms"),
        "best_peer": best["variant"] if best else None,
        "best_peer_ms": best["median_ms"] if best else None,
        "speedup_vs_best_peer": record["speedup_vs_best_peer"],
        "memory_ratio_vs_best_peer": record["memory_ratio_vs_best_peer"],
        "max_abs_err": hector.get("max_abs_err"),
        "max_rel_err": hector.get("max_rel_err"),
        "max_rel_err_grad": _largest(hector, _GRAD_REL),
        "best_peer_max_rel_err": best.get("max_rel_err") if best else None,
        "best_peer_max_rel_err_grad": _largest(best, _GRAD_REL) if best else None,
        "error_reference": hector.get("error_reference"),
        "file": path.name,
    }


#: A row's relative gradient errors (input, parameters), summarised as their largest.
_GRAD_REL = ("max_rel_err_grad_input", "max_rel_err_grad_params")


def _largest(row: dict[str, Any], keys: tuple[str, ...]) -> float | None:
    """The largest of ``row``'s values at ``keys`` that are present (None when none is)."""
    found = [row[k] for k in keys if row.get(k) is not None]
    return max(found) if found else None


def _suite_cell(args: argparse.Namespace, cell: Cell, out_dir: Path) -> dict[str, Any]:
    """Run one cell of the suite, write its record into ``out_dir`` and print its table;
    return its summary row (its error as ``status`` when it could not run)."""
    model, dataset, mode = cell.model, cell.dataset, cell.mode
    try:
        record = run_cell(cell, memory=not args.no_memory)
    except BenchError as err:
        print(f"  error: {err}")
        return {"model": model, "dataset": dataset, "mode": mode, "status": f"error: {err}"}
    path = out_dir / f"{model}_{slug(dataset)}_{mode}_{cell.dtype}.json"
    _common.write_json(path, record)
    print(format_record(record), flush=True)
    return _summary_row(record, path)


def _geomeans(rows: list[dict[str, Any]], modes: list[str]) -> dict[str, dict[str, Any]]:
    """Per mode: the geometric means of Hector's speed-up and memory ratio over the cells, and
    how many cells were measured."""
    return {
        mode: {
            "speedup": _common.geomean(
                r.get("speedup_vs_best_peer") for r in rows if r["mode"] == mode
            ),
            "memory_ratio": _common.geomean(
                r.get("memory_ratio_vs_best_peer") for r in rows if r["mode"] == mode
            ),
            "cells_measured": sum(
                1 for r in rows if r["mode"] == mode and r.get("speedup_vs_best_peer") is not None
            ),
        }
        for mode in modes
    }


def run_suite(args: argparse.Namespace) -> int:
    """The grid: one JSON per cell into a directory, then summary.json, table and plot."""
    from hector import __version__

    models = [args.model] if args.model else list(MODELS)
    data = [args.dataset] if args.dataset else list(SUITE_DATASETS)
    modes = [args.mode] if args.mode else list(MODES)
    out_dir = Path(args.json or DEFAULT_SUITE_DIR)
    if out_dir.exists() and not out_dir.is_dir():
        raise BenchError(f"--json {out_dir} must be a directory with --suite")
    out_dir.mkdir(parents=True, exist_ok=True)
    cells = [(m, d, mode) for m in models for d in data for mode in modes]
    summary_rows: list[dict[str, Any]] = []
    for i, (model, dataset, mode) in enumerate(cells, 1):
        cell = _cell_from_args(args, model, dataset, mode)
        print(f"[{i}/{len(cells)}] {model} {dataset} {mode} (scale {cell.scale:g})", flush=True)
        summary_rows.append(_suite_cell(args, cell, out_dir))
    geo = _geomeans(summary_rows, modes)
    summary = {
        "benchmark": "gnn-suite",
        "device": args.device,
        "dtype": args.dtype,
        "hector_version": __version__,
        "host": _common.host_info(args.device),
        "config": {
            "hidden": args.hidden,
            "heads": args.heads or 1,
            "runs": args.runs,
            "dtype": args.dtype,
        },
        "cells": summary_rows,
        "geomean": geo,
    }
    summary_path = out_dir / f"summary_{args.dtype}.json"
    _common.write_json(summary_path, summary)
    print(format_suite(summary_rows, geo, args.dtype))
    plot_path = args.plot or str(out_dir / f"summary_{args.dtype}.png")
    plot_suite(plot_path, summary_rows, geo, args.dtype)
    print(f"records in {out_dir}/ ({summary_path.name}); plot {plot_path}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Entry point of ``hector bench gnn``: bad arguments print ``error: ...`` and return 1."""
    try:
        _validate(args)
        return run_suite(args) if args.suite else run_single(args)
    except BenchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # the worker processes: python -m hector_bench.gnn --system-worker ...
    sys.exit(gnn_worker.main(sys.argv[1:]))
