"""The fuzzer's API strategies (``differential``, ``shapes``, ``tamper``): deterministic cases,
a few of each run for real through the worker pool with no finding, findings recorded with the
command that replays them, and the programs' eager reference itself checked."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

import hector_fuzz as fuzz
from hector_fuzz.api import ApiStrategy, Finding
from hector_fuzz.campaign import _record
from hector_fuzz.cases import Case
from hector_fuzz.programs import Eager, make_graph, make_program, within
from hector_fuzz.strategies import STRATEGIES, Environment, strategy_rng

_API = ["differential", "shapes", "tamper"]


def _cases(name: str, count: int, seed: int = 5) -> list[Case]:
    env = Environment([], seed)
    return list(STRATEGIES[name].cases(strategy_rng(seed, name), count, env))


@pytest.mark.parametrize("name", _API)
def test_each_api_strategy_is_deterministic_for_a_seed(name: str) -> None:
    first = _cases(name, 30)
    assert first == _cases(name, 30)
    assert first != _cases(name, 30, seed=6)
    assert all(isinstance(json.loads(c.text), dict) for c in first)
    assert isinstance(STRATEGIES[name], ApiStrategy)


def test_the_cli_default_keeps_to_the_ir_strategies(tmp_path: Path) -> None:
    from hector_fuzz.cli import _parser, _plan_arguments

    _, _, _, names = _plan_arguments(_parser().parse_args([]))
    assert not set(names) & set(_API)


@pytest.mark.parametrize(("name", "cases"), [("differential", 2), ("shapes", 8), ("tamper", 100)])
def test_a_few_cases_of_each_api_strategy_find_nothing(
    tmp_path: Path, name: str, cases: int
) -> None:
    """Through the worker pool, as ``scripts/fuzz.sh --strategies NAME`` runs them (a tamper
    campaign of 100 cases holds one end-to-end compilation)."""
    summary = fuzz.run_campaign(
        cases=cases, strategies=[name], seed=11, out=tmp_path, workers=1, timeout=300
    )
    assert summary.strategy_cases == {name: cases}
    assert summary.findings == []
    assert summary.per_strategy[name].get("accepted", 0) >= 1


def test_an_api_finding_is_recorded_with_its_replay_command(tmp_path: Path) -> None:
    (case,) = _cases("tamper", 1)
    result = fuzz.Result(case, fuzz.Outcome.INTERNAL_ERROR, 2, "hector_fuzz: internal error: x")
    entry = _record(result, tmp_path)
    argv = shlex.split(entry["command"])
    assert argv[1:4] == ["-m", "hector_fuzz.replay_api", "tamper"]
    assert argv[4] == str(tmp_path / entry["input"])
    assert (tmp_path / entry["input"]).read_text() == case.text  # the case's parameters
    done = subprocess.run(
        [sys.executable, *argv[1:]],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr  # the case itself checks out


def test_a_check_that_fails_is_a_finding() -> None:
    class Broken(ApiStrategy):
        name = "broken"

        def cases(self, rng, count, env):  # type: ignore[no-untyped-def]
            yield from ()

        def check(self, params):  # type: ignore[no-untyped-def]
            raise Finding("wrong")

    rc, detail = Broken().execute(Case(0, "o", "{}", strategy="broken"))
    assert (rc, fuzz.classify(rc, detail)) == (2, fuzz.Outcome.INTERNAL_ERROR)
    assert "internal error: wrong" in detail


def test_the_eager_reference_matches_torch_geometric_softmax_and_degrees() -> None:
    """The differential oracle itself: its edge softmax and degree norms against PyG's and
    the graph's own."""
    from torch_geometric.utils import softmax

    g = make_graph(1)
    eager = Eager(g)
    scores = torch.randn(g.num_edges, 2, dtype=torch.float64)
    want = softmax(scores, g.dst.long(), num_nodes=g.num_nodes)
    torch.testing.assert_close(eager.edge_softmax(scores, by="dst"), want)
    for by, norm in (("dst_etype", g.norm_dst_etype), ("dst", g.norm_dst)):
        torch.testing.assert_close(eager.degree_norm(by).view(-1).float(), norm.view(-1).float())


def test_within_catches_wrong_and_nan_results() -> None:
    want = torch.ones(3, 2, dtype=torch.float64)
    within(torch.ones(3, 2), want, "same")
    for bad in (torch.ones(3, 2) * 1.1, torch.full((3, 2), float("nan")), torch.ones(2, 3)):
        with pytest.raises(Finding):
            within(bad, want, "bad")


def test_programs_are_valid_for_the_graph_api() -> None:
    for seed in range(12):
        program = make_program(seed)
        g = make_graph(seed % 3)
        args = [torch.randn(s, dtype=torch.float64) for s in program.shapes(g.num_nodes)]
        out = program.run(Eager(g), args[0], args[1:])
        for o in out if isinstance(out, tuple) else (out,):
            assert o.shape[0] in (g.num_nodes, g.num_edges)
    assert asdict(make_program(3)) == asdict(make_program(3))
