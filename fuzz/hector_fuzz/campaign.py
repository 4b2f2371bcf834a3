"""Fuzzing campaigns: the cases of every selected strategy interleaved, run on a worker pool,
counted per kind, strategy and pipeline, and each finding written out with the command that
replays it.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hector_fuzz.api import ApiStrategy
from hector_fuzz.base import Environment
from hector_fuzz.cases import DEFAULT_CORPUS, Case, Result, Seed, Summary, load_seeds
from hector_fuzz.mutation import MutationStrategy
from hector_fuzz.runner import WorkerPool
from hector_fuzz.strategies import STRATEGIES, interleave, plan, strategy_rng

__all__ = ["campaign_cases", "run_campaign"]


def campaign_cases(
    seeds: Sequence[Seed],
    *,
    seed: int,
    inputs: int = 0,
    pipeline_runs: int = 0,
    cases: int = 0,
    strategies: Sequence[str] = ("mutation",),
) -> tuple[dict[str, int], Iterator[Case]]:
    """(cases per strategy, the cases interleaved): ``cases`` split by weight across
    ``strategies`` (:mod:`hector_fuzz.strategies`), plus ``inputs`` and ``pipeline_runs``
    mutation cases when ``mutation`` is among them."""
    counts = plan(strategies, cases)
    env = Environment(seeds, seed)
    streams: dict[str, tuple[int, Iterator[Case]]] = {}
    for name, count in counts.items():
        if name == "mutation":
            share_inputs = round(count * 0.8)
            n_in, n_pipe = inputs + share_inputs, pipeline_runs + count - share_inputs
            count = n_in + n_pipe
            stream = MutationStrategy.split(env, n_in, n_pipe)
        else:
            stream = STRATEGIES[name].cases(strategy_rng(seed, name), count, env)
        streams[name] = (count, stream)
    return {n: c for n, (c, _) in streams.items()}, interleave(streams)


def run_campaign(
    *,
    inputs: int = 0,
    pipeline_runs: int = 0,
    seed: int,
    out: Path | None,
    workers: int = 2,
    timeout: float = 60.0,
    corpus: Path = DEFAULT_CORPUS,
    command: Sequence[str] | None = None,
    replay_command: Sequence[str] | None = None,
    progress: Callable[[int], None] | None = None,
    cases: int = 0,
    strategies: Sequence[str] = ("mutation",),
) -> Summary:
    """Fuzz ``inputs`` parse-and-verify and ``pipeline_runs`` pipeline mutation cases plus
    ``cases`` split across ``strategies``; write each finding (input file + replay command)
    and ``summary.json`` under ``out`` (when given).

    ``command`` and ``replay_command`` replace the worker and ``hector-opt`` commands (tests).
    """
    start = time.monotonic()
    seeds = load_seeds(corpus)
    if not seeds:
        raise ValueError(f"no seed inputs (*.mlir) under {corpus}")
    if "mutation" not in strategies and (inputs or pipeline_runs):
        raise ValueError("--inputs and --pipelines are counts of the mutation strategy")
    planned, stream = campaign_cases(
        seeds,
        seed=seed,
        inputs=inputs,
        pipeline_runs=pipeline_runs,
        cases=cases,
        strategies=strategies,
    )
    counts: dict[str, Counter[str]] = {"inputs": Counter(), "pipelines": Counter()}
    per_pipeline: dict[str, Counter[str]] = {}
    per_strategy: dict[str, Counter[str]] = {name: Counter() for name in planned}
    mutation: Counter[str] = Counter()
    findings: list[dict[str, Any]] = []
    pool = WorkerPool(workers, timeout, command=command, replay_command=replay_command)
    try:
        for done, result in enumerate(pool.map(stream)):
            case = result.case
            kind = "pipelines" if case.pipeline else "inputs"
            counts[kind][result.outcome.value] += 1
            per_strategy[case.strategy][result.outcome.value] += 1
            if case.strategy == "mutation":
                mutation[kind] += 1
            if case.pipeline:
                name = case.pipeline if len(case.pipeline) <= 200 else case.pipeline[:200] + "..."
                per_pipeline.setdefault(name, Counter())[result.outcome.value] += 1
            if result.outcome.is_finding:
                findings.append(_record(result, out))
            if progress is not None:
                progress(done + 1)
    finally:
        pool.close()
    total = counts["inputs"] + counts["pipelines"]
    summary = Summary(
        seed,
        mutation["inputs"],
        mutation["pipelines"],
        {k: dict(sorted(v.items())) for k, v in (*counts.items(), ("total", total))},
        {k: dict(sorted(v.items())) for k, v in sorted(per_pipeline.items())},
        sorted(findings, key=lambda f: f["id"]),
        round(time.monotonic() - start, 1),
        _git_head(corpus),
        sum(total.values()),
        planned,
        {k: dict(sorted(v.items())) for k, v in per_strategy.items()},
    )
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(json.dumps(asdict(summary), indent=2) + "\n")
    return summary


def _git_head(folder: Path) -> str:
    try:
        proc = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def _record(result: Result, out: Path | None) -> dict[str, Any]:
    """A finding's entry in the summary; its input file under ``out``."""
    case = result.case
    entry: dict[str, Any] = {
        "id": case.id,
        "outcome": result.outcome.value,
        "strategy": case.strategy,
        "origin": case.origin,
        "pipeline": case.pipeline if len(case.pipeline) <= 300 else case.pipeline[:300] + "...",
        "returncode": result.returncode,
        "message": _first_error(result.detail),
    }
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        api = isinstance(STRATEGIES.get(case.strategy), ApiStrategy)
        path = out / f"{result.outcome.value}-{case.id}.{'json' if api else 'mlir'}"
        path.write_text(json.dumps(asdict(case)) if api else case.text, encoding="utf-8")
        entry["input"] = path.name
        entry["command"] = (
            shlex.join(["python3", "-m", "hector_fuzz.replay_api", str(path)])
            if api
            else _replay_line(case, path)
        )
        (out / f"{result.outcome.value}-{case.id}.txt").write_text(
            entry["command"] + "\n\n" + result.detail, encoding="utf-8"
        )
    return entry


def _replay_line(case: Case, path: Path) -> str:
    """The shell command that replays ``case`` on ``path``; a long pipeline is written next
    to it (``<input>.pipeline``) and read back with ``$(cat ...)``."""
    if len(case.pipeline) <= 300:
        return shlex.join(["hector-opt", *case.argv(str(path))])
    pipe_file = path.with_suffix(".pipeline")
    pipe_file.write_text(case.pipeline, encoding="utf-8")
    argv = [shlex.quote(a) for a in case.argv(str(path))]
    argv[argv.index("-p") + 1] = f'"$(cat {shlex.quote(str(pipe_file))})"'
    return " ".join(["hector-opt", *argv])


def _first_error(stderr: str) -> str:
    for line in stderr.splitlines():
        if "internal error" in line or "Assertion" in line or "Error" in line:
            return line.strip()[:300]
    return stderr.strip().splitlines()[-1][:300] if stderr.strip() else ""
