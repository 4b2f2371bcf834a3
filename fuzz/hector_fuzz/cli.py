"""The fuzzer's command line: ``python3 -m hector_fuzz --cases N --strategies LIST``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from hector_fuzz.api import ApiStrategy
from hector_fuzz.campaign import run_campaign
from hector_fuzz.cases import DEFAULT_CORPUS
from hector_fuzz.runner import worker_main
from hector_fuzz.strategies import STRATEGIES

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python3 -m hector_fuzz",
        description="Fuzz hector-opt (parse/verify, every pipeline, upstream passes, "
        "--verify-diagnostics) with mutated lit-test inputs and generated ones; exit 1 when "
        "any case crashes, times out or errs internally.",
    )
    p.add_argument(
        "--strategies",
        default=None,
        help="comma-separated strategies: mutation,grammar,extremes,pass-options,diagnostics "
        "(the IR tools), differential,shapes,tamper (the Python API) (default: the IR "
        "strategies; only mutation when --inputs/--pipelines are given without --cases)",
    )
    p.add_argument(
        "--cases", type=int, default=None, help="cases split across the strategies (default 1000)"
    )
    p.add_argument("--inputs", type=int, default=None, help="mutation parse-and-verify cases")
    p.add_argument("--pipelines", type=int, default=None, help="mutation pipeline cases")
    p.add_argument("--seed", type=int, default=0, help="random seed (a run is reproducible)")
    p.add_argument("--out", type=Path, default=None, help="folder for findings + summary.json")
    p.add_argument("--workers", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    p.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="folder of seed .mlir")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p


def _plan_arguments(args: argparse.Namespace) -> tuple[int, int, int, list[str]]:
    """(inputs, pipeline runs, cases, strategies) from the command line."""
    legacy = args.inputs is not None or args.pipelines is not None
    if args.strategies is not None:
        names = [n.strip() for n in args.strategies.split(",") if n.strip()]
    else:
        ir_only = [n for n, s in STRATEGIES.items() if not isinstance(s, ApiStrategy)]
        names = ["mutation"] if legacy and args.cases is None else ir_only
    cases = args.cases if args.cases is not None else (0 if legacy else 1000)
    return args.inputs or 0, args.pipelines or 0, cases, names


def _progress_bar(total: int, enabled: bool) -> tuple[Callable[[int], None], Callable[[], None]]:
    """(update to ``done`` cases, close): a tqdm bar on a terminal, else a line every 500."""
    if enabled and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=total, unit="case", file=sys.stderr, smoothing=0.05)

        def update(done: int) -> None:
            bar.update(done - bar.n)

        return update, bar.close

    def lines(done: int) -> None:
        if enabled and (done % 500 == 0 or done == total):
            sys.stderr.write(f"hector_fuzz: {done}/{total} cases\n")

    return lines, lambda: None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python3 -m hector_fuzz``; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.worker:
        return worker_main()
    inputs, pipeline_runs, cases, names = _plan_arguments(args)
    if min(inputs, pipeline_runs, cases) < 0 or args.workers < 1 or args.timeout <= 0:
        sys.stderr.write("hector_fuzz: counts must be >= 0, workers >= 1, timeout > 0\n")
        return 2
    update, close = _progress_bar(inputs + pipeline_runs + cases, not args.no_progress)
    try:
        summary = run_campaign(
            inputs=inputs,
            pipeline_runs=pipeline_runs,
            cases=cases,
            strategies=names,
            seed=args.seed,
            out=args.out,
            workers=args.workers,
            timeout=args.timeout,
            corpus=args.corpus,
            progress=update,
        )
    except (OSError, ValueError) as err:
        sys.stderr.write(f"hector_fuzz: error: {err}\n")
        return 2
    finally:
        close()
    report = {"cases": summary.cases, "strategy_cases": summary.strategy_cases}
    report |= {"per_strategy": summary.per_strategy, "seconds": summary.seconds}
    print(json.dumps(report, indent=2))
    for f in summary.findings:
        print(
            f"{f['outcome']}: case {f['id']} ({f['strategy']}: {f['origin']}, "
            f"-p {f['pipeline'][:80]!r}): {f['message']}"
        )
    return 1 if summary.defects else 0
