"""Hector's own IR fuzzer (hector_fuzz): a short seeded run finds no defect, and the harness
tells each kind of outcome apart (a real C++ abort is a crash, a hang a timeout)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import hector_fuzz as fuzz
from hector_fuzz import Case, Outcome

# A C++ assertion in MLIR's parser (upstream): it aborts the process that parses this text.
_ABORTS_MLIR = "module attributes {test.a = array<index: 1>} {}\n"
_RAW_PARSE = (
    sys.executable,
    "-c",
    "import sys; from mlir import ir; ir.Module.parse(open(sys.argv[1]).read(), ir.Context())",
)


def test_short_seeded_run_finds_no_crash_internal_error_or_timeout(tmp_path: Path) -> None:
    summary = fuzz.run_campaign(
        inputs=400, pipeline_runs=100, seed=20261201, out=tmp_path, workers=2, timeout=120
    )
    assert summary.defects == 0, json.dumps(summary.findings, indent=2)
    total = summary.counts["total"]
    assert sum(total.values()) == 500
    # The run exercises both sides: inputs that pass every stage and inputs that are refused.
    assert total["accepted"] > 25
    assert total["clean_error"] > 25
    assert summary.counts["pipelines"].get("accepted", 0) > 10
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written["counts"] == summary.counts


def test_cases_are_reproducible_from_the_seed() -> None:
    seeds = fuzz.load_seeds(fuzz.DEFAULT_CORPUS)
    first = list(fuzz.make_cases(seeds, 30, 10, seed=7))
    assert first == list(fuzz.make_cases(seeds, 30, 10, seed=7))
    assert first != list(fuzz.make_cases(seeds, 30, 10, seed=8))
    assert [c.pipeline == "" for c in first] == [True] * 30 + [False] * 10
    assert all(c.text != s.text for c, s in zip(first, seeds, strict=False))


def test_seeds_are_the_lit_inputs_split_on_markers() -> None:
    seeds = fuzz.load_seeds(fuzz.DEFAULT_CORPUS)
    origins = {s.origin.rsplit(":", 1)[0] for s in seeds}
    assert "passes/hector-verify-invalid.mlir" in origins
    assert len(seeds) > 2 * len(origins)  # split on // -----
    assert any(s.torch for s in seeds)
    assert not any(line.lstrip().startswith("//") for s in seeds for line in s.text.splitlines())


def test_every_pipeline_and_pass_is_fuzzed() -> None:
    from hector.passes.registry import PASSES, PIPELINES

    hector, torch = fuzz.pipelines()
    assert set(hector) | set(torch) == set(PASSES) | set(PIPELINES)
    assert "raise-torch-to-hector" in torch
    assert "convert-hector-inter-to-intra{block_size=-1}" in fuzz.option_variants()


@pytest.mark.parametrize(
    ("returncode", "stderr", "outcome"),
    [
        (0, "", Outcome.ACCEPTED),
        (1, "in.mlir:1:2: error: expected type", Outcome.CLEAN_ERROR),
        (
            1,
            "in.mlir:3:4: error: internal error in pass 'x' on 'y': KeyError: 1",
            Outcome.INTERNAL_ERROR,
        ),
        (1, "Traceback (most recent call last):\n  ...", Outcome.INTERNAL_ERROR),
        (2, "hector-opt: internal error: ValueError: x", Outcome.INTERNAL_ERROR),
        (-6, "Assertion `isIntOrFloat()' failed.", Outcome.CRASH),
        (134, "", Outcome.CRASH),
        (None, "", Outcome.TIMEOUT),
    ],
)
def test_classify(returncode: int | None, stderr: str, outcome: Outcome) -> None:
    assert fuzz.classify(returncode, stderr) is outcome


def test_input_that_aborts_mlir_is_a_clean_error_in_hector_opt() -> None:
    """The fuzzer's first finding: parsed raw, the text aborts the process (a crash, as the
    harness classifies it); through hector-opt it is a located error."""
    case = Case(0, "test", _ABORTS_MLIR)
    raw = fuzz.replay(case, timeout=120, command=_RAW_PARSE)
    assert raw.outcome is Outcome.CRASH
    assert raw.returncode is not None
    assert raw.returncode < 0
    pool = fuzz.WorkerPool(1, timeout=120)
    try:
        result = pool.run(case)
    finally:
        pool.close()
    assert result.outcome is Outcome.CLEAN_ERROR
    assert "dense array attributes cannot hold 'index' elements" in result.detail


def test_output_that_does_not_read_back_is_an_internal_error(tmp_path: Path) -> None:
    """Silently invalid output (once: block_size=0 printed IR hector-verify rejects) is found by
    reading each accepted case's output back."""

    def fake_opt(argv: list[str]) -> int:
        if argv[0].endswith("input.mlir"):
            print('"hector_intra.gemm_template"() {block_size = 0 : i64}')
            return 0
        sys.stderr.write("output.mlir:1:1: error: tile_n and block_size must be positive\n")
        return 1

    case = Case(0, "test", "func.func @f() { return }", "convert-hector-inter-to-intra")
    paths = str(tmp_path / "input.mlir"), str(tmp_path / "output.mlir")
    rc, stderr = fuzz.run_case(fake_opt, case, *paths)
    assert rc == 0
    assert fuzz.READ_BACK_FAILED in stderr
    assert "block_size must be positive" in stderr
    assert fuzz.classify(rc, stderr) is Outcome.INTERNAL_ERROR
    assert (tmp_path / "output.mlir").read_text().startswith('"hector_intra.gemm_template"')
    assert fuzz.run_case(lambda argv: 0, case, *paths) == (0, "")


def test_a_worker_that_dies_is_replaced_and_its_case_recorded(tmp_path: Path) -> None:
    """A worker killed by a case (here: every worker aborts) does not stop the run: the case is
    replayed alone, classified, and written out with the command that replays it."""
    summary = fuzz.run_campaign(
        inputs=3,
        pipeline_runs=0,
        seed=1,
        out=tmp_path,
        workers=1,
        timeout=60,
        command=[sys.executable, "-c", "import os; os.abort()"],
        replay_command=_RAW_PARSE[:2] + ("import os; os.abort()",),
    )
    assert summary.counts["total"] == {"crash": 3}
    assert summary.defects == 3
    finding = summary.findings[0]
    assert (tmp_path / finding["input"]).is_file()
    assert finding["command"].startswith("hector-opt ")


def test_a_hanging_case_is_a_timeout(tmp_path: Path) -> None:
    hang = [sys.executable, "-c", "import time; time.sleep(60)"]
    summary = fuzz.run_campaign(
        inputs=1,
        pipeline_runs=0,
        seed=1,
        out=tmp_path,
        workers=1,
        timeout=1,
        command=hang,
        replay_command=hang,
    )
    assert summary.counts["total"] == {"timeout": 1}


def test_cli_writes_summary_and_exit_status(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert fuzz.main(["--inputs", "6", "--pipelines", "2", "--seed", "3", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["inputs"], summary["pipeline_runs"]) == (6, 2)
    assert sum(summary["counts"]["total"].values()) == 8
    assert fuzz.main(["--inputs", "-1"]) == 2
