"""``hector bench gather`` and the mini-batch example, at CI size (CPU fallback here)."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest
import torch

from hector.tools.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_bench_gather_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, plot = tmp_path / "g.json", tmp_path / "g.png"
    args = ["bench", "gather", "--rows", "2000", "--batch", "300", "--widths", "64,100"]
    rc = main([*args, "--runs", "2", "--warmup", "0", "--json", str(out), "--plot", str(plot)])
    assert rc == 0
    rec = json.loads(out.read_text())
    assert rec["benchmark"] == "gather"
    assert rec["widths"] == [64, 100]
    assert plot.stat().st_size > 0
    by = {(r["system"], r["variant"], r["width"]): r for r in rec["results"]}
    cuda = torch.cuda.is_available()
    assert rec["gpu_parts_run"] == cuda
    for w in (64, 100):
        peer = [r for r in rec["results"] if r["system"] == "torch" and r["width"] == w]
        assert len(peer) == 1
        assert peer[0]["median_ms"] > 0
        assert peer[0]["runs"] == 2
    # modelled requests: equal for 256-byte rows, fewer with alignment for 400-byte rows
    assert by[("hector", "none", 64)]["requests_per_row"] == 2.0
    assert by[("hector", "warp128", 64)]["requests_per_row"] == 2.0
    assert by[("hector", "warp128", 100)]["requests_per_row"] == 4.0
    assert by[("hector", "none", 100)]["requests_per_row"] > 6.0
    text = capsys.readouterr().out
    if not cuda:
        assert by[("hector", "warp128", 100)]["status"] == "not_run"
        assert rec["speedup_vs_best_peer"] is None
        assert "GPU parts not run" in text


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--widths", "0"], "argument --widths: each value must be from 1 to 65536, got 0"),
        (
            ["--widths", "x"],
            "argument --widths: each value must be an integer from 1 to 65536, got 'x'",
        ),
        (["--runs", "0"], "argument --runs: must be from 1 to 100_000, got 0"),
        (["--rows", "-5"], "argument --rows: must be from 1 to 2_147_483_647, got -5"),
    ],
)
def test_bench_gather_bad_arguments(
    extra: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "g.json"
    with pytest.raises(SystemExit) as exc:
        main(["bench", "gather", *extra, "--json", str(out)])
    assert exc.value.code == 2
    assert f"hector bench gather: error: {message}" in capsys.readouterr().err
    assert not out.exists()


def test_minibatch_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sage.json"
    argv = ["minibatch_sage.py", "--nodes", "600", "--feat", "20", "--batch", "100"]
    argv += ["--epochs", "2", "--max-batches", "2", "--fanouts", "3,2", "--json", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exc:
        runpy.run_path(str(ROOT / "examples" / "minibatch_sage.py"), run_name="__main__")
    assert exc.value.code == 0
    rec = json.loads(out.read_text())
    assert [e["epoch"] for e in rec["epochs"]] == [0, 1]
    assert all(e["transfer_ms"] >= 0 and e["transfer_gbytes"] > 0 for e in rec["epochs"])
    assert "feature transfer" in capsys.readouterr().out
