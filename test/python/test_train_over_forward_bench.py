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


def test_the_record_holds_both_times_and_their_ratio(tmp_path: Path, torch_threads) -> None:
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
