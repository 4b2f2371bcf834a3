"""``hector bench gnn``: records on a tiny synthetic graph, the suite, and argument errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hector import cli
from hector.bench import _common, gnn

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


def _has(model: str) -> bool:
    return gnn._hector_class(model) is not None


def _check_record(rec: dict, model: str, mode: str, peers: set[str]) -> dict:
    """Validate the DESIGN.md record fields; return the hector entry."""
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
        assert r["max_abs_err"] is not None
        assert r["max_abs_err"] < 1e-4
    hector = next(r for r in rec["results"] if r["system"] == "hector")
    if hector["status"] == "ok":
        assert hector["compile_ms"] >= 0
        assert hector["compile_ms_method"]
        best = min(
            r["median_ms"] for r in rec["results"] if r["system"] == "pyg" and r["status"] == "ok"
        )
        assert rec["speedup_vs_best_peer"] == pytest.approx(best / hector["median_ms"], rel=1e-3)
    return hector


def test_rgcn_inference_cli_writes_record_plot_and_memory(tmp_path) -> None:
    out, plot = tmp_path / "rec.json", tmp_path / "rec.png"
    r = subprocess.run(
        [sys.executable, "-m", "hector.cli", "bench", "gnn", "--model", "rgcn"]
        + ["--mode", "inference", *TINY, "--json", str(out), "--plot", str(plot)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    assert "speed-up vs best PyG layer" in r.stdout
    assert "RGCNConv" in r.stdout
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
    if not _has(model):
        pytest.skip(f"hector.models.{gnn.HECTOR_CLASS[model]} not available yet")
    cell = gnn.Cell(model, DS, "training", hidden=8, in_dim=8, runs=2, scale=SCALE)
    rec = gnn.run_cell(cell, memory=False, quiet=True)
    peers = {"rgcn": {"RGCNConv", "FastRGCNConv"}, "rgat": {"RGATConv"}, "hgt": {"HGTConv"}}
    hector = _check_record(rec, model, "training", peers[model])
    assert hector["status"] == "ok"
    assert hector["max_abs_err_grad_input"] < 1e-4
    assert hector["ref_grad_input_max_abs"] > 0
    if model in ("rgcn", "rgat"):  # same parameter names as the PyG layer
        assert set(hector["grad_params_compared"]) >= {"weight", "bias"}
        assert hector["max_abs_err_grad_params"] < 1e-4
    assert rec["config"]["loss"] == "mean(out**2)"
    assert hector["peak_mem_bytes"] is None  # memory=False
    saved = hector["saved_bytes"]  # what _train saves for backward, by row kind
    if model == "rgcn":  # one scatter-GEMM per relation sum: nothing to save
        assert sum(saved.values()) == 0
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
    got = gnn._compaction_effect(ran, stats)
    assert got["allowance_bytes"] == round(0.6 * 256_000)
    assert got["saving_bytes"] == 100_000
    assert got["fraction_of_allowance"] == round(100_000 / (0.6 * 256_000), 4)
    assert gnn._compaction_effect({"U": ran["U"]}, stats) is None  # no C measured


@pytest.mark.parametrize("model", ["rgat", "hgt"])
def test_attention_models_inference_with_heads(model: str) -> None:
    if not _has(model):
        pytest.skip(f"hector.models.{gnn.HECTOR_CLASS[model]} not available yet")
    cell = gnn.Cell(model, DS, "inference", hidden=8, in_dim=8, heads=2, runs=2, scale=SCALE)
    rec = gnn.run_cell(cell, memory=False, quiet=True)
    hector = _check_record(rec, model, "inference", {gnn.REFERENCE[model]})
    assert hector["status"] == "ok"
    assert rec["config"]["heads"] == 2


def test_missing_hector_model_is_reported_and_peers_still_run(monkeypatch) -> None:
    monkeypatch.setattr(gnn, "_hector_class", lambda model: None)
    cell = gnn.Cell("rgat", DS, "inference", hidden=8, in_dim=8, runs=2, scale=SCALE)
    rec = gnn.run_cell(cell, memory=False, quiet=True)
    hector = rec["results"][0]
    assert hector["system"] == "hector"
    assert hector["status"] == "unavailable"
    assert "RGATLayer is not available yet" in hector["reason"]
    assert rec["results"][1]["status"] == "ok"
    assert rec["speedup_vs_best_peer"] is None
    assert rec["memory_ratio_vs_best_peer"] is None


def test_suite_writes_cells_summary_and_plot(tmp_path, capsys) -> None:
    rc = cli.main(
        ["bench", "gnn", "--suite", "--model", "rgcn", "--dataset", DS]
        + ["--scale", str(SCALE), "--hidden", "8", "--runs", "1", "--no-memory"]
        + ["--json", str(tmp_path / "suite")]
    )
    assert rc == 0
    files = sorted(p.name for p in (tmp_path / "suite").iterdir())
    assert files == [
        "rgcn_synthetic-mag_inference.json",
        "rgcn_synthetic-mag_training.json",
        "summary.json",
        "summary.png",
    ]
    summary = json.loads((tmp_path / "suite" / "summary.json").read_text())
    assert summary["benchmark"] == "gnn-suite"
    assert len(summary["cells"]) == 2
    assert set(summary["geomean"]) == {"inference", "training"}
    if _has("rgcn"):
        assert summary["geomean"]["training"]["cells_measured"] == 1
    assert "geomean inference" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "rgcn", "--mode", "inference"], "--dataset required"),
        (["--model", "rgcn", "--mode", "inference", "--dataset", "cora"], "unknown dataset 'cora'"),
        (TINY[:2] + ["--model", "rgat", "--mode", "training", "--runs", "0"], "--runs must be"),
        (TINY[:2] + ["--model", "rgat", "--mode", "training", "--hidden", "-1"], "--hidden must"),
        (TINY[:2] + ["--model", "hgt", "--mode", "training", "--heads", "3"], "divisible"),
        (TINY[:2] + ["--model", "rgcn", "--mode", "training", "--scale", "0"], "--scale must"),
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


def test_bad_argument_from_the_command_line_has_no_traceback(tmp_path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "hector.cli", "bench", "gnn", "--model", "rgcn", "--mode"]
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
        "rgat", DS, "training", hidden=8, in_dim=8, runs=1, scale=SCALE, time_peers=False
    )
    rec = gnn.run_cell(cell, memory=False, quiet=True)
    by = {r["variant"]: r for r in rec["results"]}
    assert by["RGATConv"]["status"] == "untimed"
    assert "median_ms" not in by["RGATConv"]
    hector = next(r for r in rec["results"] if r["system"] == "hector")
    assert hector["status"] == "ok"
    assert hector["max_abs_err_grad_input"] < 1e-4
    assert rec["speedup_vs_best_peer"] is None
