"""``hector bench offload``: activation offloading vs keep-all, save_on_cpu and checkpointing.

Trains a GPT-2-style decoder or a BERT-style encoder (random init) with each system, each in a
fresh subprocess, and reports per system: median step time, peak bytes of saved activations
resident in memory, peak resident memory (RSS) of the process above its baseline, bytes
written/read by the offload store and its achieved write/read bandwidth (bytes moved / time
with at least one request in flight), next to the raw bandwidth of the same disk measured in
the same run (sequential 4 MiB ``O_DIRECT`` writes then reads of one file). ``--plot`` draws
the saved-activation bytes resident over one training step for keep-all and the offload
systems. After its timed steps each system runs one more step traced at every scope
boundary (:mod:`hector_bench.memory_trace`: resident memory against the heap in use), drawn
next to the JSON record as ``<record>_memory.png``. Module-level imports stay light:
``hector --help`` imports this file.

This module is the command: its options, the driver that runs each system
(:mod:`hector_bench.offload_systems`) in a fresh worker process
(:mod:`hector_bench.offload_worker`, ``python -m hector_bench.offload --memory-worker JSON``)
between raw disk probes (:mod:`hector_bench.offload_disk`), and the record it writes; the table
is :mod:`hector_bench.offload_report`'s, the pooled rounds :mod:`hector_bench.offload_pooling`'s
and the figures :mod:`hector_bench.offload_plots`'.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Any

from hector.tools import cli_args as _args

from .offload_disk import engine_bandwidth, raw_around, raw_disk_bandwidth
from .offload_plots import frontier_plot, memory_trace_plot, timeline_plot
from .offload_pooling import number_rounds, pool_records, pooled_summary, shown_pooled_row
from .offload_report import compare_with_keep_all, print_report
from .offload_systems import SYSTEMS, VARIANTS, SystemRun, parse_systems
from .offload_worker import measure_system, run_until_planned
from .plot_args import PLOT

#: The offload granularities (``hector.offload.cache.GRANULARITIES``), named here
#: so that building the command line (every ``hector`` command builds it) does not import
#: ``hector.offload``, which imports ``torch._dynamo`` (seconds); a test checks they agree.
GRANULARITIES = ("auto", "block", "layer")

#: ``--model``: the bundled GPT/BERT and the models users bring
#: (:mod:`hector_bench.offload_user_models`).
MODEL_NAMES = ("gpt", "bert", "hf-gpt2", "hf-llama", "torch-encoder", "vit")

__all__ = [
    "add_arguments",
    "engine_bandwidth",
    "pool_records",
    "pooled_summary",
    "raw_disk_bandwidth",
    "run",
    "run_until_planned",
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``hector bench offload``."""
    parser.add_argument(
        "--model",
        choices=MODEL_NAMES,
        default="gpt",
        help="the bundled gpt/bert, or a model users bring: Hugging Face's GPT-2 and Llama "
        "(transformers), torch.nn.TransformerEncoder, a ViT-B-shaped classifier",
    )
    parser.add_argument("--layers", type=_args.LAYERS, default=4)
    parser.add_argument("--hidden", type=_args.WIDTH, default=256)
    parser.add_argument("--heads", type=_args.HEADS, default=4)
    parser.add_argument("--seq", type=_args.SEQ, default=128)
    parser.add_argument("--batch", type=_args.BATCH, default=4)
    parser.add_argument("--vocab", type=_args.VOCAB, default=1024)
    parser.add_argument("--steps", type=_args.RUNS, default=4, help="timed steps per system")
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where the model trains (default cpu). cuda: peak memory is torch.cuda's peak of "
        "allocated bytes above what the timed steps started with (not RSS), steps are timed "
        "to their kernels' end, save_on_cpu pins its host copies",
    )
    parser.add_argument(
        "--threads",
        type=_args.THREADS,
        default=1,
        help="torch intra-op threads per system (default 1: the I/O workers and other "
        "processes get the other cores; 2 threads on a shared 2-core machine ran 3-5x slower)",
    )
    parser.add_argument(
        "--warmup",
        type=_args.WARMUP,
        default=2,
        help="untimed steps first (hector-adaptive: after the steps it profiles and plans on)",
    )
    parser.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help=f"comma-separated subset of {tuple(SYSTEMS)}, in the order to run (repeat them for "
        "interleaved rounds); a system may name a variant: keep-all+thp runs under PyTorch's "
        "huge-page allocation (THP_MEM_ALLOC_ENABLE=1), +calloc under Hector's caching CPU "
        "allocator installed before the model, +torchalloc under PyTorch's own allocator",
    )
    parser.add_argument(
        "--release-memory",
        choices=("auto", "advise", "mmap", "trim", "off"),
        default="auto",
        help="hector systems: how freed activations leave the process (TensorCache "
        "release_memory; default auto: under Hector's caching CPU allocator, which the "
        "cache installs)",
    )
    parser.add_argument(
        "--granularity",
        choices=GRANULARITIES,
        default="auto",
        help="hector systems: offload scopes (TensorCache granularity; default auto)",
    )
    parser.add_argument("--root", default=None, help="offload root (default: $TMPDIR)")
    parser.add_argument(
        "--raw-mib", type=_args.RAW_MIB, default=256, help="raw disk test size (MiB)"
    )
    parser.add_argument(
        "--raw-probes",
        type=_args.PROBES,
        default=3,
        help="raw disk probes just before and just after each hector run (default 3 each); "
        "the run's bandwidth is compared with their median",
    )
    parser.add_argument("--json", metavar="PATH", default=None, help="write the JSON record")
    parser.add_argument(
        "--plot", type=PLOT, metavar="PATH", default=None, help="memory-over-time plot"
    )
    parser.add_argument(
        "--frontier",
        type=PLOT,
        metavar="PATH",
        default=None,
        help="step time vs peak memory plot (default: <json>_frontier.png next to --json)",
    )
    parser.add_argument(
        "--pool",
        nargs="+",
        metavar="RECORD",
        default=None,
        help="run nothing: pool the rounds of earlier records of one configuration (their "
        "--json files) into one table, each round still against its own keep-all; with "
        "--json, write it (and its frontier plot)",
    )


def _run_pool(args: argparse.Namespace) -> int:
    """``--pool``: read the records, print the pooled table, write JSON and the frontier."""
    from hector_bench._common import format_table, write_json

    records = []
    for path in args.pool:
        try:
            with open(path) as f:
                records.append((path, json.load(f)))
        except (OSError, ValueError) as err:
            print(f"error: cannot read record {path}: {err}", file=sys.stderr)
            return 1
    try:
        pooled = pool_records(records)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if not pooled["pooled"]:
        print("error: nothing to pool: no system ran twice next to keep-all", file=sys.stderr)
        return 1
    rounds = {r["round"] for r in pooled["results"]}
    print(
        f"pooled over {len(rounds)} rounds of {len(records)} record(s) "
        "(each round against its own keep-all):"
    )
    shown = [shown_pooled_row(row) for row in pooled["pooled"]]
    print(format_table(shown, [(k, k) for k in shown[0]]))
    if args.json:
        write_json(args.json, pooled)
    frontier = args.frontier or (
        os.path.splitext(args.json)[0] + "_frontier.png" if args.json else None
    )
    if frontier:
        frontier_plot(frontier, pooled)
    return 0


#: Options that must be at least 1 (the parser checks their upper bounds).
_POSITIVE = ("layers", "hidden", "heads", "seq", "batch", "vocab", "steps", "threads", "raw_probes")


def _checked_systems(args: argparse.Namespace) -> list[SystemRun] | None:
    """The ``--systems`` runs, or None after printing why the arguments cannot run."""
    runs, bad = parse_systems(args.systems)
    if bad or not runs:
        environment = [v.name for v in VARIANTS.values() if v.changes_environment]
        print(
            f"error: unknown system(s) {', '.join(bad)}; choose from {', '.join(SYSTEMS)}, "
            f"each optionally +{' or +'.join(environment)}",
            file=sys.stderr,
        )
        return None
    for name in _POSITIVE:
        if getattr(args, name) < 1:
            print(f"error: --{name.replace('_', '-')} must be >= 1", file=sys.stderr)
            return None
    if args.hidden % args.heads:
        print("error: --hidden must be divisible by --heads", file=sys.stderr)
        return None
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print(
                "error: --device cuda: no CUDA device here (torch.cuda.is_available() is False)",
                file=sys.stderr,
            )
            return None
    return runs


def _run_system(
    system: SystemRun, args: argparse.Namespace, root: str, config: dict[str, Any]
) -> dict[str, Any]:
    """One system in a fresh worker process, between raw disk probes where it does I/O: its
    result entry (status ok, error or unsupported)."""
    from hector_bench._common import measure_in_subprocess

    payload = {
        "system": system.system.name,
        "config": config,
        "steps": args.steps,
        "warmup": args.warmup,
        "root": root,
        "threads": args.threads,
        "device": args.device,
        "release_memory": args.release_memory,
        "granularity": args.granularity,
        "cache_options": system.cache_options,
    }
    probes = args.raw_probes if system.system.does_io else 0
    raw_before = [raw_disk_bandwidth(root, args.raw_mib) for _ in range(probes)]
    answer = measure_in_subprocess("hector_bench.offload", payload, env=system.env)
    entry: dict[str, Any] = {"system": system.name}
    if raw_before:
        raw_after = [raw_disk_bandwidth(root, args.raw_mib) for _ in range(probes)]
        entry["raw_disk_around"] = raw_around(raw_before, raw_after)
    if "error" in answer:
        entry.update(status="error", error=answer["error"])
    elif "unsupported" in answer:
        entry.update(status="unsupported", error=answer["unsupported"])
    else:
        times = answer.pop("times_ms")
        entry.update(
            times_ms=[round(t, 3) for t in times],
            status="ok",
            median_ms=round(statistics.median(times), 3),
            min_ms=round(min(times), 3),
            max_ms=round(max(times), 3),
            runs=len(times),
            peak_mem_bytes=answer.pop("peak_rss_bytes"),
            **answer,
        )
    return entry


def _record(
    args: argparse.Namespace,
    config: dict[str, Any],
    results: list[dict[str, Any]],
    disks: tuple[dict[str, Any], dict[str, Any]],
    pooled: list[dict[str, Any]],
) -> dict[str, Any]:
    """The JSON record: configuration, host, the disk's and engine's bandwidth (``disks``),
    every result (without its timeline) and the pooled rows."""
    from hector import __version__
    from hector.runtime.hugepages import huge_page_mode
    from hector.runtime.offload import IO_BACKEND
    from hector_bench._common import host_info

    raw, engine = disks
    return {
        "benchmark": "offload",
        **config,
        "mode": "training",
        "device": args.device,
        "memory_metric": "peak RSS above baseline"
        if args.device == "cpu"
        else "torch.cuda peak allocated above the timed steps' start",
        "hector_version": __version__,
        "host": host_info(args.device),
        "io_backend": next((r["io_backend"] for r in results if r.get("io_backend")), IO_BACKEND),
        "threads": args.threads,
        "release_memory": args.release_memory,
        "granularity": args.granularity,
        "kernel_huge_page_mode": huge_page_mode(),
        "load_average": os.getloadavg(),
        "raw_disk": raw,
        "engine_alone": engine,
        "results": [{k: v for k, v in r.items() if k != "timeline"} for r in results],
        "pooled": pooled,
    }


def _write_outputs(
    args: argparse.Namespace, record: dict[str, Any], results: list[dict[str, Any]]
) -> None:
    """``--json``, ``--plot``, the frontier plot and, next to the JSON, the traced steps."""
    from hector_bench._common import write_json

    if args.json:
        write_json(args.json, record)
    if args.plot:
        timeline_plot(
            args.plot,
            [r for r in results if r.get("timeline")],
            f"{args.model}: saved activations over one step",
        )
    frontier = args.frontier
    if frontier is None and args.json:
        frontier = os.path.splitext(args.json)[0] + "_frontier.png"
    if frontier:
        frontier_plot(frontier, record)
    if args.json:
        memory_trace_plot(os.path.splitext(args.json)[0] + "_memory.png", record)


def run(args: argparse.Namespace) -> int:
    """Run every system in a fresh subprocess, print a table, write JSON / plot (``--pool``:
    pool earlier records instead, :func:`pool_records`)."""
    from tqdm import tqdm

    if args.pool:
        return _run_pool(args)

    from hector.runtime.offload import default_root

    systems = _checked_systems(args)
    if systems is None:
        return 1
    root = args.root or default_root()
    config = {
        k: getattr(args, k) for k in ("model", "layers", "hidden", "heads", "seq", "batch", "vocab")
    }
    raw = raw_disk_bandwidth(root, args.raw_mib)
    engine = engine_bandwidth(root, args.raw_mib)
    for what in ("write", "read"):
        engine[f"{what}_vs_raw"] = round(engine[f"{what}_bandwidth"] / raw[f"{what}_bandwidth"], 4)
    results = [
        _run_system(system, args, root, config)
        for system in tqdm(systems, desc="offload bench", file=sys.stderr)
    ]
    number_rounds(results)
    compare_with_keep_all(results, raw)
    pooled = print_report(results, raw, engine, args.device)
    record = _record(args, config, results, (raw, engine), pooled)
    _write_outputs(args, record, results)
    return 0 if all(r["status"] in ("ok", "unsupported") for r in results) else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--memory-worker":
        print(json.dumps(measure_system(json.loads(sys.argv[2]))))
    else:
        print("usage: python -m hector_bench.offload --memory-worker JSON", file=sys.stderr)
        sys.exit(2)
