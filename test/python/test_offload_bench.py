"""``hector bench offload``: argument errors, the raw-disk probe and one in-process worker run."""

from __future__ import annotations

import os

import pytest

from hector.bench import offload as bench
from hector.cli import main

TINY = {"model": "gpt", "layers": 2, "hidden": 32, "heads": 2, "seq": 16, "batch": 2, "vocab": 64}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--systems", "foo"], "unknown system(s) foo"),
        (["--hidden", "10", "--heads", "4"], "--hidden must be divisible by --heads"),
        (["--layers", "0"], "--layers must be >= 1"),
    ],
)
def test_bad_arguments(capsys, argv, message):
    assert main(["bench", "offload", *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert message in err


def test_raw_disk_bandwidth(tmp_path):
    raw = bench.raw_disk_bandwidth(str(tmp_path), total_mib=8)
    assert raw["bytes"] == 8 << 20
    assert raw["write_bandwidth"] > 0
    assert raw["read_bandwidth"] > 0
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("system", ["hector-all", "checkpoint"])
def test_worker_reports_figures(tmp_path, system):
    out = bench._worker(
        {
            "system": system,
            "config": TINY,
            "steps": 2,
            "warmup": 1,
            "root": str(tmp_path),
            "threads": 1,
        }
    )
    assert len(out["times_ms"]) == 2
    assert out["saved_peak_bytes"] > 0
    if system == "hector-all":
        assert out["bytes_written_per_step"] >= 0
        assert out["timeline"]
    assert os.listdir(tmp_path) == []
