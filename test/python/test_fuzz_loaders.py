"""The fuzzer's ``loaders`` strategy (:mod:`hector_fuzz.loaders`): a short seeded run of every
sub-grammar ends without a finding, each sub-grammar has files the loaders accept and files
they refuse, the oracle flags a loader that hands on wrong values, and one case replays alone.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch

from hector.data.loader import FeatureStore
from hector_fuzz.loader_checks import judge
from hector_fuzz.loaders import SUB_GRAMMARS, LoaderStrategy, recipe
from hector_fuzz.loaders import main as replay_main
from hector_fuzz.strategies import Environment, strategy_rng

_CASES = 60


def _cases(count: int, seed: int = 58) -> list:
    return list(LoaderStrategy().cases(strategy_rng(seed, "loaders"), count, Environment([], 0)))


def test_a_short_run_of_every_sub_grammar_has_no_finding(tmp_path: Path) -> None:
    outcomes: Counter[tuple[str, int]] = Counter()
    for case in _cases(_CASES):
        rc, message = judge(recipe(case), str(tmp_path))
        assert rc in (0, 1), f"{case.origin} {case.text}\n{message}"
        outcomes[case.origin.removeprefix("loaders/"), rc] += 1
    for sub in SUB_GRAMMARS:  # cases go round the sub-grammars: each has accepted and refused
        assert outcomes[sub, 0] + outcomes[sub, 1] == _CASES // len(SUB_GRAMMARS)
        assert outcomes[sub, 0] > 0, (sub, outcomes)
        assert outcomes[sub, 1] > 0, (sub, outcomes)


def test_cases_are_recipes_deterministic_for_a_seed() -> None:
    first = _cases(10)
    assert first == _cases(10)
    assert first != _cases(10, seed=59)
    assert [recipe(c)["grammar"] for c in first[:5]] == list(SUB_GRAMMARS)


def test_the_oracle_flags_rows_left_in_the_file_byte_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the gathers' swap undone, a big-endian table's rows come back as raw bytes (the
    defect of issue 58): every such case is then a finding."""
    big = [c for c in _cases(200) if c.origin == "loaders/torch"]
    big = [c for c in big if recipe(c)["byteorder"] == "big" and recipe(c)["layout"] == "plain"]
    assert big
    monkeypatch.setattr(FeatureStore, "_rows", lambda self, out: torch.from_numpy(out))
    verdicts = [judge(recipe(c), str(tmp_path)) for c in big]
    flagged = [m for rc, m in verdicts if rc == 2]
    assert flagged, verdicts
    assert all("silent wrong" in m for m in flagged), verdicts


def test_a_case_replays_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``python3 -m hector_fuzz.loaders CASE.json`` (the finding's replay command) runs the
    case's check and exits with its status."""
    case = next(c for c in _cases(5) if c.origin == "loaders/tsv")
    path = tmp_path / "case.json"
    path.write_text(case.text, encoding="utf-8")
    argv = LoaderStrategy().replay_argv(case, str(path))
    assert argv[1:] == ["-m", "hector_fuzz.loaders", str(path)]
    rc, _ = judge(recipe(case), str(tmp_path))
    assert replay_main([str(path)]) == rc
    assert rc in (0, 1)
    assert (capsys.readouterr().err.strip() == "accepted") == (rc == 0)
