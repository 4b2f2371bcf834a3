"""``hector bench train-over-forward``: an RGCN layer's training step against its forward,
wall and CPU time, as a JSON record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hector.tools.cli import main


@pytest.fixture
def torch_threads():  # type: ignore[no-untyped-def]
    """The benchmark sets torch's thread count for the process: set it back afterwards."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_the_record_holds_the_times_ratio_and_kernels(tmp_path: Path, torch_threads) -> None:
    record = tmp_path / "ratio.json"
    argv = ["bench", "train-over-forward", "--scale", "0.02", "--runs", "1", "--threads", "1"]
    assert main([*argv, "--json", str(record)]) == 0
    r = json.loads(record.read_text())
    assert r["benchmark"] == "train-over-forward"
    assert r["threads"] == 1
    assert r["nodes"] > 0
    assert r["edges"] > 0
    for kind in ("wall", "cpu"):
        fwd, train = r[f"forward_{kind}_s"], r[f"train_{kind}_s"]
        assert fwd > 0
        assert train > 0
        assert r[f"train_over_forward_{kind}"] == train / fwd
    assert len(r["load_average"]) == 3
    assert r["forward_mapped_bytes"] >= 0
    assert r["train_mapped_bytes"] >= 0
    # and a row per kernel of each step
    k = r["kernels"]
    assert k["forward_ms"] > 0
    assert k["train_ms"] > 0
    phases = {r["phase"] for r in k["rows"]}
    for phase, ms in k["phase_ms"].items():
        assert ms == pytest.approx(sum(r["ms"] for r in k["rows"] if r["phase"] == phase), abs=1e-2)
    assert phases == {"forward", "train forward", "backward"}
    backward = [r for r in k["rows"] if r["phase"] == "backward"]
    # the weight gradients and the input gradient's product are GEMMs of the backward
    assert {"xty", "xwt"} <= {r["variant"] for r in backward if r["template"] == "gemm"}
    for r in k["rows"]:
        step_ms = k["forward_ms"] if r["phase"] == "forward" else k["train_ms"]
        # an xwt paired with the xty reading the same gradient rows (hector-pair-gradient-gemms)
        # runs inside that xty's timer: its own row reads 0 ms
        paired = (r["phase"], r["template"], r["variant"]) == ("backward", "gemm", "xwt")
        assert r["ms"] > 0 or paired
        assert r["share"] == pytest.approx(r["ms"] / step_ms, abs=1e-3)


def test_no_kernels_leaves_the_table_out(tmp_path: Path, torch_threads) -> None:
    record = tmp_path / "plain.json"
    argv = ["bench", "train-over-forward", "--scale", "0.02", "--runs", "1", "--threads", "1"]
    assert main([*argv, "--no-kernels", "--json", str(record)]) == 0
    assert "kernels" not in json.loads(record.read_text())
