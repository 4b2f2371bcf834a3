"""``hector bench hetero-conv``: MLPerf's rgnn and PyG's ``to_hetero`` benchmark models as
written, each system on the same graph."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from hector_bench import hetero_conv


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    hetero_conv.add_arguments(p)
    return p.parse_args(argv)


TINY = ["--nodes", "12,8,4,5", "--edges", "160", "--width", "8", "--heads", "2", "--layers", "2"]


@pytest.mark.parametrize(
    ("model", "program"),
    [
        ("rgat", "hetero-gat"),
        ("rsage", "hetero-sage"),
        ("to-hetero-sage", "hetero-sage"),
        ("to-hetero-gat", "hetero-gat"),
        ("to-hetero-gin", "hetero-gin"),
        ("han", "han"),  # with attention dropout: the same masks as eager's
    ],
)
def test_record_has_each_system_and_hectors_program(
    tmp_path: Path, model: str, program: str
) -> None:
    out = tmp_path / "rec.json"
    argv = [*TINY, "--model", model, "--systems", "eager,hector", "--runs", "1"]
    assert hetero_conv.run(_args([*argv, "--json", str(out)])) == 0
    (cell,) = json.loads(out.read_text())["cells"]
    assert [r["system"] for r in cell["results"]] == ["eager", "hector"]
    assert cell["graph"]["relations"] == 8
    assert cell["graph"]["edges"] == 160
    assert [p.split(":")[0] for p in cell["hector_programs"]] == [program]
    assert cell["hector_layer_fallbacks"] == {}
    assert cell["results"][1]["max_abs_err_vs_eager"] <= 1e-5


def test_bad_names_and_counts_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert hetero_conv.run(_args(["--model", "gcn"])) == 2
    assert "unknown names ['gcn']" in capsys.readouterr().out
    assert hetero_conv.run(_args([*TINY[2:], "--nodes", "1,2"])) == 2
    assert "--nodes needs 4 positive counts" in capsys.readouterr().out


def test_a_sampled_mag_batch_runs_the_dblp_model_through_one_program(tmp_path: Path) -> None:
    """``--graph synthetic:mag``: one sampled batch of the ogbn-mag replica; PyG's DBLP
    ``HeteroConv(SAGEConv((-1, -1), h))`` runs Hector's program and matches eager."""
    out = tmp_path / "rec.json"
    argv = ["--graph", "synthetic:mag", "--scale", "0.002", "--batch-size", "16"]
    argv += ["--fanouts", "4,3", "--width", "8", "--layers", "2", "--model", "hetero-sage"]
    argv += ["--systems", "eager,hector", "--runs", "1", "--json", str(out)]
    assert hetero_conv.run(_args(argv)) == 0
    (cell,) = json.loads(out.read_text())["cells"]
    assert cell["graph"]["kind"] == "synthetic:mag@0.002 batch"
    assert "paper" in cell["graph"]["nodes"]
    assert cell["graph"]["edges"] > 0
    assert [p.split(":")[0] for p in cell["hector_programs"]] == ["hetero-sage"]
    assert cell["hector_layer_fallbacks"] == {}
    assert cell["results"][1]["max_abs_err_vs_eager"] <= 1e-5
