"""``hector bench gather``: zero-copy gathers from a unified tensor vs ``index_select`` + copy.

For each row width ``W`` a table of ``--rows`` × ``W`` float32 features is built and a batch of
``--batch`` random row numbers drawn (a mini-batch's input nodes). Systems, timed in the same
process (warm-up, then the median of ``--runs`` calls, CUDA synchronised after each):

* ``torch`` / ``index_select+copy``: ``table.index_select(0, idx)`` on the CPU, then
  ``.to("cuda")`` (the usual pinned-memory-free path);
* ``hector`` / ``warp128``: Hector's zero-copy gather kernel reading the unified table
  directly, with the aligned thread→element mapping;
* ``hector`` / ``none``: the same kernel without alignment (one thread per element).

Every entry also carries the PCIe request count the model in ``hector_bench/request_model.py``
predicts for that batch (per gathered row, estimated on the first 1024 rows of the batch).

Without CUDA only the CPU half of the peer is measured (``index_select`` + a copy into a
preallocated output, standing in for the transfer), the record says ``gpu_parts_run: false``
and the table says the GPU parts were not run. JSON record: docs/benchmarks.md, "Benchmark
records", one result entry per (system, variant, width).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
from typing import Any

from hector.tools import cli_args as _args

from . import _common
from .plot_args import PLOT

DEFAULT_WIDTHS = (64, 100, 128, 256, 500, 512)
_MODEL_SAMPLE = 1024


class BenchError(Exception):
    """A bad benchmark argument; printed as ``error: ...``."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``hector bench gather``."""
    p.add_argument(
        "--rows", type=_args.POSITIVE_DIM, default=None, help="table rows (default 1M on GPU, 200k)"
    )
    p.add_argument(
        "--widths",
        type=_args.WIDTHS,
        default=",".join(map(str, DEFAULT_WIDTHS)),
        help="comma-separated row widths in floats (default %(default)s)",
    )
    p.add_argument("--batch", type=_args.POSITIVE_DIM, default=65536, help="rows gathered per call")
    p.add_argument("--runs", type=_args.RUNS, default=10, help="timed calls per system")
    p.add_argument("--warmup", type=_args.WARMUP, default=2, help="untimed calls first")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--seed", type=_args.SEED, default=0)
    p.add_argument("--json", metavar="PATH", help="write the JSON record here")
    p.add_argument("--plot", type=PLOT, metavar="PATH", help="save a plot (png/svg) here")


def _widths(text: str) -> list[int]:
    try:
        widths = [int(w) for w in text.split(",") if w.strip()]
    except ValueError:
        raise BenchError(f"--widths must be comma-separated integers, got {text!r}") from None
    if not widths or any(w <= 0 for w in widths):
        raise BenchError(f"--widths must be positive integers, got {text!r}")
    return widths


def _device(choice: str) -> str:
    import torch

    has = torch.cuda.is_available()
    if choice == "cuda" and not has:
        raise BenchError("--device cuda: no CUDA device is available here")
    return "cuda" if choice == "auto" and has else ("cpu" if choice == "auto" else choice)


def model_requests(index: Any, width: int, align: str) -> float:
    """Mean PCIe requests per gathered row predicted by the request model for this batch."""
    from hector_bench.request_model import gather_requests

    sample = [int(i) for i in index[:_MODEL_SAMPLE].tolist()]
    if not sample:
        return 0.0
    return gather_requests(sample, width, align) / len(sample)


def _bench_width(
    width: int, args: argparse.Namespace, device: str, bar: Any
) -> tuple[list[dict[str, Any]], str | None]:
    import torch

    from hector.data import unified as U

    gen = torch.Generator().manual_seed(args.seed + width)
    table = torch.randn(args.rows, width, generator=gen)
    index = torch.randint(0, args.rows, (args.batch,), generator=gen)
    nbytes = args.batch * width * 4
    results: list[dict[str, Any]] = []
    note = None
    sync = torch.cuda.synchronize if device == "cuda" else None

    def entry(system: str, variant: str, timing: _common.Timing, **extra: Any) -> None:
        rec: dict[str, Any] = {"system": system, "variant": variant, "width": width}
        rec.update(timing.as_record())
        rec["gbytes_per_s"] = round(nbytes / (timing.median_ms * 1e-3) / 1e9, 3)
        rec.update(extra)
        results.append(rec)

    if device == "cuda":
        reference = table.index_select(0, index)
        t = _common.time_calls(
            lambda: table.index_select(0, index).to("cuda"),
            args.runs,
            warmup=args.warmup,
            sync=sync,
            progress=bar,
        )
        entry("torch", "index_select+copy", t)
        utable = U.make_unified(table, "gpu")
        del table
        idx_gpu = index.to("cuda", torch.int32)
        for align in ("warp128", "none"):
            try:
                out = U.gather(utable, idx_gpu, align=align)
                torch.cuda.synchronize()
                err = (out.cpu() - reference).abs().max().item()
                t = _common.time_calls(
                    functools.partial(U.gather, utable, idx_gpu, align=align),
                    args.runs,
                    warmup=args.warmup,
                    sync=sync,
                    progress=bar,
                )
                entry(
                    "hector",
                    align,
                    t,
                    max_abs_err=err,
                    requests_per_row=round(model_requests(index, width, align), 3),
                )
            except Exception as exc:  # noqa: BLE001 — one failing variant must not stop the run
                results.append(
                    {
                        "system": "hector",
                        "variant": align,
                        "width": width,
                        "status": "failed",
                        "reason": f"{type(exc).__name__}: {exc}",
                        "requests_per_row": round(model_requests(index, width, align), 3),
                    }
                )
    else:
        out = torch.empty(args.batch, width)

        def cpu_peer() -> None:
            out.copy_(table.index_select(0, index))

        t = _common.time_calls(cpu_peer, args.runs, warmup=args.warmup, progress=bar)
        entry("torch", "index_select+copy (CPU only)", t)
        for align in ("warp128", "none"):
            results.append(
                {
                    "system": "hector",
                    "variant": align,
                    "width": width,
                    "status": "not_run",
                    "reason": "no CUDA device: the zero-copy kernel needs a GPU",
                    "requests_per_row": round(model_requests(index, width, align), 3),
                }
            )
        note = "GPU parts not run (no CUDA device): index_select + host copy only"
    return results, note


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    """Run every width and return the JSON record."""
    from tqdm import tqdm

    import hector

    widths = _widths(args.widths)
    for name in ("batch", "runs"):
        if getattr(args, name) <= 0:
            raise BenchError(f"--{name} must be > 0, got {getattr(args, name)}")
    if args.warmup < 0:
        raise BenchError(f"--warmup must be >= 0, got {args.warmup}")
    device = _device(args.device)
    if args.rows is None:
        args.rows = 1 << 20 if device == "cuda" else 200_000
    if args.rows <= 0:
        raise BenchError(f"--rows must be > 0, got {args.rows}")
    calls = (args.runs + args.warmup) * (3 if device == "cuda" else 1) * len(widths)
    bar = tqdm(total=calls, desc="gather", file=sys.stderr, leave=False)
    results: list[dict[str, Any]] = []
    note = None
    try:
        for w in widths:
            res, note = _bench_width(w, args, device, bar)
            results += res
    finally:
        bar.close()
    speedups: dict[int, float] = {}
    for w in widths:
        peer = [r for r in results if r["width"] == w and r["system"] == "torch"]
        ours = [
            r
            for r in results
            if r["width"] == w and r["variant"] == "warp128" and r.get("median_ms")
        ]
        if peer and ours:
            speedups[w] = peer[0]["median_ms"] / ours[0]["median_ms"]
    return {
        "benchmark": "gather",
        "rows": args.rows,
        "batch": args.batch,
        "widths": widths,
        "device": device,
        "gpu_parts_run": device == "cuda",
        "note": note,
        "hector_version": hector.__version__,
        "host": _common.host_info(device),
        "results": results,
        "speedup_vs_best_peer": (
            round(statistics.median(speedups.values()), 4) if speedups else None
        ),
        "speedup_by_width": {str(w): round(s, 4) for w, s in speedups.items()},
    }


def format_record(record: dict[str, Any]) -> str:
    """A table: one row per width, times per system and modelled requests per row."""
    rows = []
    for w in record["widths"]:
        row: dict[str, Any] = {"width": w}
        for r in record["results"]:
            if r["width"] != w:
                continue
            key = "torch" if r["system"] == "torch" else r["variant"]
            row[f"{key}_ms"] = r.get("median_ms")
            if r["system"] == "hector":
                row[f"{key}_req"] = r.get("requests_per_row")
        if row.get("torch_ms") and row.get("warp128_ms"):
            row["speedup"] = row["torch_ms"] / row["warp128_ms"]
        rows.append(row)
    cols = [
        ("width", "W (floats)"),
        ("torch_ms", "index_select+copy ms"),
        ("warp128_ms", "hector warp128 ms"),
        ("none_ms", "hector unaligned ms"),
        ("speedup", "speedup"),
        ("none_req", "req/row unaligned"),
        ("warp128_req", "req/row warp128"),
    ]
    head = (
        f"gather: {record['batch']} rows of a {record['rows']}-row table, device {record['device']}"
    )
    lines = [head, _common.format_table(rows, cols)]
    if record.get("note"):
        lines.append(record["note"])
    return "\n".join(lines)


def plot_record(record: dict[str, Any], path: str) -> None:
    """Median time per width for each system (and modelled requests per row)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    widths = record["widths"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    series = {
        "index_select+copy": ("torch", None),
        "hector warp128": ("hector", "warp128"),
        "hector unaligned": ("hector", "none"),
    }
    for label, (system, variant) in series.items():
        ys = []
        for w in widths:
            match = [
                r
                for r in record["results"]
                if r["width"] == w
                and r["system"] == system
                and (variant is None or r["variant"] == variant)
            ]
            ys.append(match[0].get("median_ms") if match else None)
        if any(y is not None for y in ys):
            ax1.plot(widths, [y if y is not None else float("nan") for y in ys], "o-", label=label)
    ax1.set_xlabel("row width (floats)")
    ax1.set_ylabel("median ms per batch")
    ax1.legend(fontsize=8)
    for variant in ("none", "warp128"):
        ys = [
            next(
                r["requests_per_row"]
                for r in record["results"]
                if r["width"] == w and r.get("variant") == variant
            )
            for w in widths
        ]
        ax2.plot(widths, ys, "o-", label=f"{variant} (model)")
    ax2.set_xlabel("row width (floats)")
    ax2.set_ylabel("PCIe requests per row")
    ax2.legend(fontsize=8)
    fig.suptitle(f"hector bench gather ({record['device']}, batch {record['batch']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``hector bench gather``; bad arguments raise the CLI's error type."""
    from hector.tools.cli import CliError

    try:
        record = run_benchmark(args)
    except BenchError as err:
        raise CliError(str(err)) from None
    _common.emit_record(record, format_record(record), args.json, args.plot, plot_record)
    return 0
