"""``hector bench bases-gin``: each system's steps on the same ``to_hetero_with_bases`` GIN model,
each Hector system through its own program, its outputs matching eager PyG's."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from hector_bench import bases_gin


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    bases_gin.add_arguments(p)
    return p.parse_args(argv)


TINY = ["--nodes", "30", "--edges", "120", "--relations", "3", "--width", "8", "--runs", "1"]


def test_record_has_each_system_and_its_program(tmp_path: Path) -> None:
    out = tmp_path / "rec.json"
    assert bases_gin.run(_args([*TINY, "--bases", "1,2", "--json", str(out)])) == 0
    cells = json.loads(out.read_text())["cells"]
    assert [c["bases"] for c in cells] == [1, 2]
    for cell in cells:
        assert [r["system"] for r in cell["results"]] == list(bases_gin.SYSTEMS)
        # each Hector system: its program once per layer, forward, in each of its 3 steps
        assert cell["programs"] == {"bases-gin:sum": 6, "hetero-bases:sum": 6}
        assert cell["fallbacks"] == {}
        for r in cell["results"][1:]:
            assert r["max_abs_err_vs_eager"] <= 1e-4
            assert r["compilations"] == 1


def test_bad_systems_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert bases_gin.run(_args([*TINY, "--systems", "hector"])) == 2
    assert "--systems is a subset" in capsys.readouterr().out
