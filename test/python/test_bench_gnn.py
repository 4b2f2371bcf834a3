"""``hector bench gnn``: records on a tiny synthetic graph, the suite, argument errors, and
systems that fail (out of memory, crash, timeout) without costing the record."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from hector.tools import cli
from hector_bench import _common, gnn, gnn_ablation, gnn_setup, gnn_worker

# synthetic:mag at this scale: 194 nodes, 4222 edges, 8 relations, 4 node types
TINY = ["--dataset", "synthetic:mag", "--scale", "0.0001", "--hidden", "8", "--runs", "2"]
DS, SCALE = "synthetic:mag", 0.0001
TOP_KEYS = {
    "benchmark",
    "model",
    "dataset",
    "mode",
    "device",
    "hector_version",
    "host",
    "results",
    "speedup_vs_best_peer",
    "memory_ratio_vs_best_peer",
}
# Error tolerance, as torch.testing.assert_close: ATOL + RTOL * max|reference| (the record holds
# maxima, so the relative part scales with the largest reference value).
ATOL, RTOL = 1e-4, 1e-5


def _within(err: float | None, scale: float | None) -> bool:
    return err is not None and scale is not None and err <= ATOL + RTOL * scale


def _check_errors(r: dict, training: bool) -> None:
    """Every max_abs_err* column within tolerance of its reference scale, max_rel_err* beside
    it equal to max_abs_err* / max|reference|."""
    pairs = [("max_abs_err", "max_rel_err", "ref_max_abs")]
    if training:
        pairs += [
            ("max_abs_err_grad_input", "max_rel_err_grad_input", "ref_grad_input_max_abs"),
        ]
        if r.get("grad_params_compared"):
            pairs.append(
                ("max_abs_err_grad_params", "max_rel_err_grad_params", "ref_grad_params_max_abs")
            )
    for abs_key, rel_key, ref_key in pairs:
        assert _within(r[abs_key], r[ref_key]), (abs_key, r)
        assert r[ref_key] > 0, (ref_key, r)
        assert r[rel_key] == pytest.approx(r[abs_key] / r[ref_key], rel=1e-9), (rel_key, r)


def _has(model: str) -> bool:
    return gnn_setup._hector_class(model) is not None


def _check_record(rec: dict, model: str, mode: str, peers: set[str]) -> dict:
    """Validate the record fields (docs/benchmarks.md, "Benchmark records"); return the hector
    entry."""
    assert TOP_KEYS <= set(rec)
    assert (rec["benchmark"], rec["model"], rec["mode"]) == ("gnn", model, mode)
    assert rec["dataset"] == DS
    assert rec["device"] == "cpu"
    assert rec["host"]["cpus"] >= 1
    assert rec["host"]["torch"].startswith("2.")
    assert rec["graph"]["nodes"] == 194
    assert rec["graph"]["edges"] == 4222
    systems = {(r["system"], r["variant"]) for r in rec["results"]}
    assert {("pyg", p) for p in peers} <= systems
    for r in rec["results"]:
        if r["status"] != "ok":
            continue
        assert r["runs"] == 2
        assert 0 < r["min_ms"] <= r["median_ms"] <= r["max_ms"]
        _check_errors(r, mode == "training")
    hector = next(r for r in rec["results"] if r["system"] == "hector")
    if hector["status"] == "ok":
        assert hector["compile_ms"] >= 0
        assert hector["compile_ms_method"]
        best = min(
            r["median_ms"] for r in rec["results"] if r["system"] == "pyg" and r["status"] == "ok"
        )
        assert rec["speedup_vs_best_peer"] == pytest.approx(
            best / hector["median_ms"], rel=1e-3, abs=1e-4
        )
    return hector


@pytest.fixture(scope="module", autouse=True)
def _each_worker_runs_once() -> Iterator[None]:
    """A system's worker (``--system-worker``) of a given cell runs once in this module: a later
    run of the very same cell and system gets that worker's answer and tensors back instead of
    a fresh process (imports, compiles: seconds each on a busy machine). The suite, first,
    measures the rgcn cells; the single-cell tests of the same cells reuse its workers, and
    the tests that make some of a cell's workers fail reuse the others' (the parent's work, what
    those tests check, runs each time). The worker's memory cap (a share of what is free at
    the time) is not in the key: these cells map a few MiB."""
    real = _common.run_worker
    seen: dict[str, tuple[_common.WorkerOutcome, bytes | None]] = {}

    def run_worker(module: str, flag: str, payload: dict, **kw: object) -> _common.WorkerOutcome:
        if module != gnn_worker.WORKER_MODULE or flag != "--system-worker":
            return real(module, flag, payload, **kw)  # type: ignore[arg-type]
        key = json.dumps(
            [payload["cell"], payload["system"], payload["variant"], kw.get("env")],
            sort_keys=True,
        )
        path = Path(payload["tensors_path"])
        if key not in seen:
            outcome = real(module, flag, payload, **kw)  # type: ignore[arg-type]
            seen[key] = (outcome, path.read_bytes() if path.exists() else None)
        outcome, tensors = seen[key]
        if tensors is not None and not path.exists():
            path.write_bytes(tensors)
        return dataclasses.replace(outcome, answer=copy.deepcopy(outcome.answer))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_common, "run_worker", run_worker)
        yield


def test_suite_writes_cells_summary_and_plot(tmp_path, capsys) -> None:
    rc = cli.main(
        ["bench", "gnn", "--suite", "--model", "rgcn", "--dataset", DS]
        + ["--scale", str(SCALE), "--hidden", "8", "--runs", "2", "--no-memory", "--no-roofline"]
        + ["--json", str(tmp_path / "suite")]
    )
    assert rc == 0
    files = sorted(p.name for p in (tmp_path / "suite").iterdir())
    assert files == [  # the dtype in every name: suites of both types can share a folder
        "rgcn_synthetic-mag_inference_float32.json",
        "rgcn_synthetic-mag_training_float32.json",
        "summary_float32.json",
        "summary_float32.png",
    ]
    summary = json.loads((tmp_path / "suite" / "summary_float32.json").read_text())
    assert summary["benchmark"] == "gnn-suite"
    assert summary["dtype"] == summary["config"]["dtype"] == "float32"
    assert len(summary["cells"]) == 2
    assert set(summary["geomean"]) == {"inference", "training"}
    if _has("rgcn"):
        assert summary["geomean"]["training"]["cells_measured"] == 1
    for row in summary["cells"]:
        assert row["max_rel_err"] < 1e-5, row
        assert row["dtype"] == "float32"
        assert row["error_reference"] == "pyg RGCNConv"
        assert row["best_peer"] in ("RGCNConv", "FastRGCNConv")
        assert row["best_peer_max_rel_err"] < 1e-5, row
    assert "geomean inference" in capsys.readouterr().out


def test_rgcn_inference_cli_writes_record_plot_and_memory(tmp_path, capsys) -> None:
    # In this process: every system is measured in its own worker processes all the same; the
    # command line as a process of its own is test_bad_argument_from_the_command_line_....
    out, plot = tmp_path / "rec.json", tmp_path / "rec.png"
    argv = ["bench", "gnn", "--model", "rgcn", "--mode", "inference", *TINY, "--no-roofline"]
    assert cli.main([*argv, "--json", str(out), "--plot", str(plot)]) == 0
    stdout = capsys.readouterr().out
    assert "speed-up vs best PyG layer" in stdout
    assert "RGCNConv" in stdout
    rec = json.loads(out.read_text())
    hector = _check_record(rec, "rgcn", "inference", {"RGCNConv", "FastRGCNConv"})
    assert hector["status"] == "ok"
    for res in rec["results"]:  # peak memory measured per system in a subprocess
        assert isinstance(res["peak_mem_bytes"], int), res
        assert res["peak_mem_bytes"] >= 0, res
        assert "VmHWM" in res["peak_mem_method"]
    fast = next(r for r in rec["results"] if r["variant"] == "FastRGCNConv")
    assert fast["peak_mem_bytes"] > 0  # it materializes one weight matrix per edge
    peers = [x["peak_mem_bytes"] for x in rec["results"] if x["system"] == "pyg"]
    if min(peers) > 0:
        assert rec["memory_ratio_vs_best_peer"] == pytest.approx(
            hector["peak_mem_bytes"] / min(peers), rel=1e-3
        )
    assert plot.stat().st_size > 1000
    assert plot.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("model", ["rgcn", "rgat", "hgt"])
def test_training_records_compare_gradients(model: str) -> None:
    assert _has(model), f"hector.models.{gnn.HECTOR_CLASS[model]} is missing"
    cell = gnn.Cell(model, DS, "training", hidden=8, in_dim=8, runs=2, scale=SCALE, roofline=False)
    rec = gnn.run_cell(cell, memory=False, quiet=True)
    peers = {"rgcn": {"RGCNConv", "FastRGCNConv"}, "rgat": {"RGATConv"}, "hgt": {"HGTConv"}}
    hector = _check_record(rec, model, "training", peers[model])
    assert hector["status"] == "ok"
    assert hector["error_reference"] == f"pyg {gnn.REFERENCE[model]}"
    if model in ("rgcn", "rgat"):  # same parameter names as the PyG layer
        assert set(hector["grad_params_compared"]) >= {"weight", "bias"}
    assert rec["config"]["loss"] == "mean(out**2)"
    assert hector["peak_mem_bytes"] is None  # memory=False
    saved = hector["saved_bytes"]  # what _train saves for backward, by row kind
    if model == "rgcn":
        assert hector["aggregation_order"] in (["transform-first"], ["aggregate-first"])
    if model == "rgcn" and hector["aggregation_order"] == ["transform-first"]:
        assert sum(saved.values()) == 0  # one scatter-GEMM per relation sum: nothing to save
    if model == "rgcn" and hector["aggregation_order"] == ["aggregate-first"]:
        # the per-(destination, relation) sums the weight gradient reads
        pairs = round(hector["dst_compaction_ratio"] * rec["graph"]["edges"])
        assert saved == {
            "edge": 0,
            "compact": 0,
            "node": 0,
            "weight": 0,
            "dst_compact": 4 * 8 * pairs,
        }
    if model == "rgat":  # source projections on compact rows
        assert saved["compact"] > 0
    if model == "hgt":  # K and V are compact rows (folded and compacted), attention per edge
        n_compact = round(rec["graph"]["compaction_ratio"] * rec["graph"]["edges"])
        assert saved["compact"] == 2 * n_compact * 8 * 4
        assert saved["edge"] == rec["graph"]["edges"] * 1 * 4


def test_compaction_effect_against_its_allowance() -> None:
    """The ablation's memory check: allowance (1 - ratio) x U's saved edge bytes, saving U - C."""
    stats = {"edges": 1000, "nodes": 100, "compaction_ratio": 0.4}
    ran = {
        "U": {"saved_bytes": {"edge": 1000 * 64 * 4}, "peak_mem_bytes": 10_000_000},
        "C": {"saved_bytes": {"edge": 0}, "peak_mem_bytes": 9_900_000},
    }
    got = gnn_ablation.compaction_effect(ran, stats)
    assert got["allowance_bytes"] == round(0.6 * 256_000)
    assert got["saving_bytes"] == 100_000
    assert got["fraction_of_allowance"] == round(100_000 / (0.6 * 256_000), 4)
    assert gnn_ablation.compaction_effect({"U": ran["U"]}, stats) is None  # no C measured


@pytest.mark.parametrize("model", ["rgat", "hgt"])
def test_attention_models_inference_with_heads(model: str) -> None:
    assert _has(model), f"hector.models.{gnn.HECTOR_CLASS[model]} is missing"
    cell = gnn.Cell(
        model, DS, "inference", hidden=8, in_dim=8, heads=2, runs=2, scale=SCALE, roofline=False
    )
    rec = gnn.run_cell(cell, memory=False, quiet=True)
    hector = _check_record(rec, model, "inference", {gnn.REFERENCE[model]})
    assert hector["status"] == "ok"
    assert rec["config"]["heads"] == 2


def test_missing_hector_model_is_reported_and_peers_still_run(monkeypatch) -> None:
    monkeypatch.setattr(gnn_setup, "_hector_class", lambda model: None)
    cell = gnn.Cell(  # test_attention_models_inference_with_heads[rgat]'s
        "rgat", DS, "inference", hidden=8, in_dim=8, heads=2, runs=2, scale=SCALE, roofline=False
    )
    rec = gnn.run_cell(cell, memory=False, quiet=True)
    hector = rec["results"][0]
    assert hector["system"] == "hector"
    assert hector["status"] == "unavailable"
    assert "RGATLayer is not available yet" in hector["reason"]
    assert rec["results"][1]["status"] == "ok"
    assert rec["speedup_vs_best_peer"] is None
    assert rec["memory_ratio_vs_best_peer"] is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "rgcn", "--mode", "inference"], "--dataset required"),
        (["--model", "rgcn", "--mode", "inference", "--dataset", "cora"], "unknown dataset 'cora'"),
        (TINY[:2] + ["--model", "hgt", "--mode", "training", "--heads", "3"], "divisible"),
        (["--model", "rgcn", "--mode", "training", "--dataset", "synthetic:cora"], "valid: synth"),
        (
            [
                "--model",
                "rgcn",
                "--mode",
                "training",
                "--dataset",
                "synthetic:aifb",
                "--scale",
                "0.0001",
            ],
            "leaves 1 nodes",
        ),  # fmt: skip
    ],
)
def test_bad_arguments_give_error_and_exit_1(argv: list[str], message: str, capsys) -> None:
    assert cli.main(["bench", "gnn", *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: "), err
    assert message in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--runs", "0"], "argument --runs: must be from 1 to 100_000, got 0"),
        (["--hidden", "-1"], "argument --hidden: must be from 1 to 65536, got -1"),
        (["--scale", "0"], "argument --scale: must be a finite number 0 < x <= 100, got 0"),
        (["--max-system-mem-gb", "0"], "argument --max-system-mem-gb: must be a finite number 0 <"),
        (["--system-timeout", "-1"], "argument --system-timeout: must be a finite number 0 <"),
    ],
)
def test_bad_numbers_are_refused_by_the_parser_with_exit_2(argv, message, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "gnn", *TINY[:2], "--model", "rgcn", "--mode", "training", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"hector bench gnn: error: {message}" in err, err
    assert "Traceback" not in err


def test_bad_argument_from_the_command_line_has_no_traceback(tmp_path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "hector.tools.cli", "bench", "gnn", "--model", "rgcn", "--mode"]
        + ["inference", "--dataset", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1
    assert r.stderr.startswith("error: unknown dataset")
    assert "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_common_helpers() -> None:
    t = _common.time_calls(lambda: None, 3, warmup=1)
    assert len(t.times_ms) == 3
    assert t.as_record()["runs"] == 3
    results = [
        {"system": "hector", "variant": "h", "median_ms": 2.0, "peak_mem_bytes": 50},
        {"system": "pyg", "variant": "a", "median_ms": 8.0, "peak_mem_bytes": 100},
        {"system": "pyg", "variant": "b", "median_ms": 6.0, "peak_mem_bytes": 400},
        {"system": "pyg", "variant": "c", "status": "skipped"},
    ]
    assert _common.best_peer_ratios(results) == (3.0, 0.5)
    assert _common.geomean([2.0, 8.0, None]) == pytest.approx(4.0)
    table = _common.format_table(results, [("variant", "v"), ("median_ms", "ms")])
    assert table.splitlines()[0].split() == ["v", "ms"]
    assert "-" in table.splitlines()[-1]
    with pytest.raises(ValueError, match="runs must be >= 1"):
        _common.time_calls(lambda: None, 0)


def test_untimed_peers_are_still_the_error_reference() -> None:
    """--no-peer-timing: the PyG layer runs once so Hector's errors are still measured, but it
    is neither timed nor compared for speed."""
    cell = gnn.Cell(
        "rgat",
        DS,
        "training",
        hidden=8,
        in_dim=8,
        runs=1,
        scale=SCALE,
        time_peers=False,
        roofline=False,
    )
    rec = gnn.run_cell(cell, memory=False, quiet=True)
    by = {r["variant"]: r for r in rec["results"]}
    assert by["RGATConv"]["status"] == "untimed"
    assert "median_ms" not in by["RGATConv"]
    hector = next(r for r in rec["results"] if r["system"] == "hector")
    assert hector["status"] == "ok"
    _check_errors(hector, training=True)
    assert rec["speedup_vs_best_peer"] is None


def test_error_columns_scale_with_the_reference() -> None:
    """A 1e-3 error on outputs of size 1e4 is a relative 1e-7 (a hub's sum), not a bug."""
    import torch

    ref = {
        "out": torch.tensor([[1e4, -2.0]]),
        "grad_input": torch.tensor([0.5, -0.25]),
        "grad_params": {"weight": torch.tensor([4.0]), "bias": torch.tensor([2.0, 1.0])},
    }
    mine = {
        "out": torch.tensor([[1e4 + 1e-3, -2.0]]),
        "grad_input": torch.tensor([0.5, -0.2]),
        "grad_params": {"weight": torch.tensor([4.5]), "root": torch.tensor([1.0])},
    }
    cols = gnn.error_columns(mine, ref, training=True)
    assert cols["ref_max_abs"] == 1e4
    assert cols["max_rel_err"] == pytest.approx(cols["max_abs_err"] / 1e4)
    assert cols["max_rel_err"] < 1e-6
    assert cols["max_abs_err_grad_input"] == pytest.approx(0.05)
    assert cols["max_rel_err_grad_input"] == pytest.approx(0.1)
    assert cols["grad_params_compared"] == ["weight"]  # root: not in the reference
    assert cols["max_rel_err_grad_params"] == pytest.approx(0.5 / 4.0)
    inference = gnn.error_columns(mine, ref, training=False)
    assert "max_abs_err_grad_input" not in inference
    zero = gnn.error_columns({"out": torch.zeros(2)}, {"out": torch.zeros(2)}, training=False)
    assert zero["max_abs_err"] == 0.0
    assert zero["max_rel_err"] is None  # no scale to divide by


def _failing_worker(monkeypatch: pytest.MonkeyPatch, variants: set[str], why: str) -> None:
    """Make the workers of ``variants`` fail as a crashed process would; others run for real."""
    real = _common.run_worker

    def run_worker(module: str, flag: str, payload: dict, **kw: object) -> _common.WorkerOutcome:
        if payload["variant"] in variants and flag == "--system-worker":
            return _common.WorkerOutcome(None, -9, why)
        return real(module, flag, payload, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(_common, "run_worker", run_worker)


def test_failed_reference_falls_back_to_the_next_peer(monkeypatch) -> None:
    """The reference PyG layer dies (OOM killer): a failed row with its reason; Hector is still
    measured and compared with the next PyG layer that ran."""
    _failing_worker(monkeypatch, {"RGCNConv"}, "crashed: killed by SIGKILL")
    # the suite's training cell (test_suite_writes_cells_summary_and_plot)
    cell = gnn.Cell("rgcn", DS, "training", hidden=8, in_dim=8, runs=2, scale=SCALE, roofline=False)
    rec = gnn.run_cell(cell, memory=False, quiet=True)
    by = {r["variant"]: r for r in rec["results"]}
    assert by["RGCNConv"]["status"] == "failed"
    assert by["RGCNConv"]["reason"].startswith("crashed: killed by SIGKILL; its memory cap was")
    assert by["FastRGCNConv"]["status"] == "ok"
    assert by["FastRGCNConv"]["max_abs_err"] == 0.0  # now the reference
    hector = by["RGCNLayer"]
    assert hector["status"] == "ok"
    assert hector["error_reference"] == "pyg FastRGCNConv"
    _check_errors(hector, training=True)
    assert rec["speedup_vs_best_peer"] == pytest.approx(
        by["FastRGCNConv"]["median_ms"] / hector["median_ms"], rel=1e-3, abs=1e-4
    )


def test_record_is_written_when_hector_and_every_peer_fail(monkeypatch, tmp_path) -> None:
    _failing_worker(monkeypatch, {"RGATLayer", "RGATConv"}, "crashed: killed by SIGABRT")
    out = tmp_path / "rec.json"
    argv = ["bench", "gnn", "--model", "rgat", "--mode", "inference", *TINY, "--json", str(out)]
    assert cli.main(argv) == 0
    rec = json.loads(out.read_text())
    assert [(r["variant"], r["status"]) for r in rec["results"]] == [
        ("RGATLayer", "failed"),
        ("RGATConv", "failed"),
    ]
    assert all(r["reason"] == "crashed: killed by SIGABRT" for r in rec["results"])
    assert rec["speedup_vs_best_peer"] is None


def test_hector_without_a_reference_is_measured_and_says_so(monkeypatch) -> None:
    _failing_worker(monkeypatch, {"RGATConv"}, "crashed: killed by SIGKILL")
    cell = gnn.Cell(  # test_attention_models_inference_with_heads[rgat]'s
        "rgat", DS, "inference", hidden=8, in_dim=8, heads=2, runs=2, scale=SCALE, roofline=False
    )
    hector = gnn.run_cell(cell, memory=False, quiet=True)["results"][0]
    assert hector["status"] == "ok"
    assert hector["median_ms"] > 0
    assert hector["max_abs_err"] is None
    assert hector["error_reference"] is None
    assert "errors not measured" in hector["reason"]


def test_peer_over_the_memory_cap_fails_with_out_of_memory(tmp_path, capsys) -> None:
    """For real, through the CLI: FastRGCNConv's per-edge weights (4222 x 128 x 128 floats,
    264 MiB per copy) exceed a 200 MiB cap in training; its worker fails cleanly, Hector is
    measured (its work maps about 70 MiB).

    The cap counts address space. What does not belong to the work stays out of it: the
    roofline's 2 x 64 MiB reference copy runs with the cap lifted and PyTorch's threads start
    before it (both once counted, and Hector's worker then sat 2 MiB under the cap); LLVM's
    thread pools, which compilation and MLIR's async runtime start after it (one 8 MiB stack
    reservation per thread, as many threads as CPUs the process may use), are the same here on
    every machine: the run is pinned to at most 2 CPUs (this thread, which starts the workers:
    they inherit it; restored after)."""
    out = tmp_path / "rec.json"
    argv = ["bench", "gnn", "--model", "rgcn", "--mode", "training", "--dataset", DS]
    argv += ["--scale", str(SCALE), "--hidden", "128", "--runs", "1", "--no-memory"]
    argv += ["--max-system-mem-gb", "0.2", "--json", str(out)]
    every = os.sched_getaffinity(0)
    os.sched_setaffinity(0, sorted(every)[:2])
    try:
        assert cli.main(argv) == 0
    finally:
        os.sched_setaffinity(0, every)
    stdout = capsys.readouterr().out
    by = {x["variant"]: x for x in json.loads(out.read_text())["results"]}
    assert by["FastRGCNConv"]["status"] == "failed"
    assert by["FastRGCNConv"]["reason"].startswith("out of memory (cap 205 MiB"), by
    assert "FastRGCNConv" in stdout  # the table and its note
    assert by["RGCNLayer"]["status"] == "ok", by["RGCNLayer"]
    _check_errors(by["RGCNLayer"], training=True)
    # the record and its roofline plot, nothing left behind by the failed worker
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rec.json", "rec_roofline.png"]


WORKER = """
import json, os, signal, sys, time
from hector_bench import _common

how = json.loads(sys.argv[2])["how"]
_common.emit_worker_line({"progress": 1})
print("noise that is not a protocol line")
if how == "answer":
    _common.emit_worker_line({"result": {"status": "ok"}})
elif how == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
elif how == "exit":
    print("something broke", file=sys.stderr)
    sys.exit(3)
elif how == "hang":
    time.sleep(60)
elif how == "allocate":
    _common.limit_address_space(64 << 20)
    try:
        bytearray(1 << 30)
    except MemoryError:
        _common.emit_worker_line({"result": {"status": "failed", "reason": "out of memory"}})
"""


@pytest.mark.parametrize(
    ("how", "failure"),
    [
        ("answer", None),
        ("kill", "crashed: killed by SIGKILL (the kernel's out-of-memory killer)"),
        ("exit", "crashed: exit status 3: something broke"),
        ("hang", "timed out after 2 s (killed)"),
        ("allocate", None),
    ],
)
def test_run_worker_contains_every_way_a_worker_ends(
    how: str, failure: str | None, tmp_path: Path
) -> None:
    (tmp_path / "fake_bench_worker.py").write_text(textwrap.dedent(WORKER))
    seen: list[int] = []
    outcome = _common.run_worker(
        "fake_bench_worker",
        "--system-worker",
        {"how": how},
        timeout=2 if how == "hang" else 120,
        on_progress=seen.append,
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert seen == [1]
    assert outcome.failure == failure
    if how == "answer":
        assert outcome.answer == {"status": "ok"}
    if how == "allocate":  # the cap made the allocation fail inside the process
        assert outcome.answer == {"status": "failed", "reason": "out of memory"}


def test_a_record_path_that_is_a_folder_is_refused_clearly(tmp_path: Path) -> None:
    # `--json` of a single run names a file; a folder (what `--suite` takes) is refused with
    # the path, and nothing is left behind in it.
    with pytest.raises(IsADirectoryError, match="give a .json file name") as err:
        _common.write_json(tmp_path, {"a": 1})
    assert err.value.filename == str(tmp_path)
    assert list(tmp_path.iterdir()) == []
