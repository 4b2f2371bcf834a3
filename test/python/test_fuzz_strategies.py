"""The fuzzer's generation strategies (the table hector_fuzz.strategies and the modules it
lists): each is deterministic for a fixed seed, and each produces inputs of the classes it
targets. Generation only (no hector-opt runs), except one short end-to-end campaign."""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

import pytest

import hector_fuzz as fuzz
from hector_fuzz import Case
from hector_fuzz.campaign import _record
from hector_fuzz.extremes import EXTREMES
from hector_fuzz.strategies import STRATEGIES, Environment, plan, strategy_rng

_ALL = ["mutation", "grammar", "extremes", "pass-options", "diagnostics", "loaders"]
_IR = _ALL[:5]


@pytest.fixture(scope="module")
def env() -> Environment:
    return Environment(fuzz.load_seeds(fuzz.DEFAULT_CORPUS), 7)


def _cases(name: str, count: int, env: Environment, seed: int = 7) -> list[Case]:
    """``count`` cases of strategy ``name`` in the campaign seeded ``seed``."""
    env = Environment(env.seeds, seed)
    return list(STRATEGIES[name].cases(strategy_rng(seed, name), count, env))


def test_registry_holds_every_strategy() -> None:
    assert list(STRATEGIES) == [*_ALL, "differential", "shapes", "tamper"]  # test_fuzz_api.py
    assert plan(_IR, 1000) == {
        "mutation": 300,
        "grammar": 300,
        "extremes": 100,
        "pass-options": 200,
        "diagnostics": 100,
    }
    assert sum(plan(["grammar", "extremes"], 7).values()) == 7
    with pytest.raises(ValueError, match="unknown strategy"):
        plan(["nope"], 1)


@pytest.mark.parametrize("name", _ALL)
def test_each_strategy_is_deterministic_for_a_seed(name: str, env: Environment) -> None:
    first = _cases(name, 25, env)
    assert len(first) == 25
    assert first == _cases(name, 25, env)
    assert first != _cases(name, 25, env, seed=8)


def test_campaign_cases_interleave_and_count(env: Environment) -> None:
    planned, stream = fuzz.campaign_cases(env.seeds, seed=3, cases=50, strategies=_ALL)
    cases = list(stream)
    assert sum(planned.values()) == len(cases) == 50
    assert [c.id for c in cases] == list(range(50))
    assert {c.strategy for c in cases[:12]} == set(_ALL)  # every strategy early on
    again = list(fuzz.campaign_cases(env.seeds, seed=3, cases=50, strategies=_ALL)[1])
    assert cases == again


def test_grammar_covers_every_dialect_well_and_ill_typed(env: Environment) -> None:
    cases = _cases("grammar", 200, env)
    text = "\n".join(c.text for c in cases)
    for dialect in ("hector_inter", "hector_intra", "placement"):
        assert any(c.origin == f"grammar:{dialect}" for c in cases)
    from hector.dialects import SPECS

    used = set(re.findall(r'"(\w+\.\w+)"\(', text))
    assert len(used & set(SPECS)) > 0.8 * len(SPECS)
    assert '"bogus"' in text  # an ill-typed enum attribute
    assert "operandSegmentSizes" in text
    assert any(c.pipeline for c in cases)
    builtin = [c.text for c in cases if c.origin == "grammar:builtin"]
    assert any("affine_map<" in t for t in builtin)
    assert any("dialect_resources" in t for t in builtin)
    assert any("loc(" in t for t in builtin)


def _max_depth(text: str, opener: str) -> int:
    return max(
        (len(m) // len(opener) for m in re.findall(f"(?:{re.escape(opener)})+", text)), default=0
    )


def test_extremes_nest_each_bracket_deep_and_reach_the_boundaries(env: Environment) -> None:
    cases = _cases("extremes", 400, env)
    by_kind: dict[str, list[Case]] = {}
    for c in cases:
        by_kind.setdefault(c.origin.split(":", 1)[1], []).append(c)
    openers = {"nesting-array": "[", "nesting-tuple": "tuple<", "nesting-dictionary": "{a = ",
               "nesting-function-type": "() -> (", "nesting-location-callsite": "callsite(",
               "nesting-module": "module {\n", "nesting-affine-parens": "("}  # fmt: skip
    depths = {k: max(_max_depth(c.text, o) for c in by_kind[k]) for k, o in openers.items()}
    assert min(depths.values()) >= 1000, depths
    assert max(depths.values()) >= 10000, depths
    regions = max(c.text.count("scf.execute_region") for c in by_kind["nesting-region"])
    assert regions >= 1000
    dims = "\n".join(c.text for c in by_kind["dims-lowered"])
    assert "4294967296x" in dims or "x4294967296x" in dims
    assert any(c.pipeline for c in by_kind["dims-lowered"])
    assert any("<?x?x" in c.text and "hector-schedule" in c.pipeline for c in cases)
    overflow = by_kind["dims-overflow-lowered"]
    assert any("<4294967296x4294967296x" in c.text and c.pipeline for c in overflow)
    # A blob of alignment 0 is one draw in seven: drawn from its generator directly, so the
    # check does not hang on how many draws the other generators (the spec's ops) take first.
    blob = EXTREMES["resource-blob"].make
    assert any('"0x00000000' in blob(random.Random(i))[0] for i in range(64))  # alignment 0
    assert any(
        re.search(r'\} "\w+"\(\) : \(\) -> \(\)', c.text) for c in by_kind["bare-dialect-op"]
    )
    assert any(len(c.text) > 100_000 for c in by_kind["long-identifier"])


def test_pass_options_mix_upstream_options_and_nest_deep(env: Environment) -> None:
    pipes = [c.pipeline for c in _cases("pass-options", 400, env)]
    levels = [m for p in pipes for m in re.findall(r"nvvm-attach-target\{[^}]*\bO=([^ }]*)", p)]
    assert set(levels) - {"0", "1", "2", "3"}  # an optimisation level out of range
    assert any("canonicalize{" in p and "hector-" in p for p in pipes)
    assert any(p.count("builtin.module(") >= 1000 for p in pipes)
    assert any(re.search(r"=(9223372036854775808|99999999999999999999)", p) for p in pipes)


def test_diagnostics_carry_invalid_and_catastrophic_regexes(env: Environment) -> None:
    cases = _cases("diagnostics", 100, env)
    assert all("--verify-diagnostics" in c.flags for c in cases)
    assert any("--split-input-file" in c.flags for c in cases)
    text = "\n".join(c.text for c in cases)
    assert "expected-error-re" in text
    assert "{{{{[}}}}" in text or "{{[}}" in text  # an invalid regex
    assert "(a+)+$" in text or "(.*.*)*Z" in text  # catastrophic backtracking


def test_case_json_round_trip_keeps_flags() -> None:
    case = Case(3, "o", "x", "p", False, "diagnostics", ("--verify-diagnostics",))
    from dataclasses import asdict

    assert Case.from_json(json.loads(json.dumps(asdict(case)))) == case
    assert case.argv("in.mlir") == ["in.mlir", "-p", "p", "--verify-diagnostics"]


def test_a_small_campaign_of_every_strategy_writes_its_summary(tmp_path: Path) -> None:
    summary = fuzz.run_campaign(
        cases=30, strategies=_ALL, seed=20261203, out=tmp_path, workers=1, timeout=120
    )
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written["cases"] == summary.cases == 30
    assert sum(written["strategy_cases"].values()) == 30
    assert set(written["per_strategy"]) == set(_ALL)
    for name, outcomes in written["per_strategy"].items():
        assert sum(outcomes.values()) == written["strategy_cases"][name]
    for finding in written["findings"]:  # findings are allowed; each must replay
        assert finding["command"].startswith(("hector-opt ", f"{sys.executable} -m hector_fuzz"))
        assert (tmp_path / finding["input"]).is_file()


def test_cli_selects_strategies(tmp_path: Path) -> None:
    out = tmp_path / "run"
    fuzz.main(["--strategies", "grammar", "--cases", "4", "--seed", "1", "--out", str(out),
               "--workers", "1", "--no-progress"])  # fmt: skip
    summary = json.loads((out / "summary.json").read_text())
    assert summary["strategy_cases"] == {"grammar": 4}
    assert fuzz.main(["--strategies", "nope", "--cases", "1"]) == 2
    assert fuzz.main(["--strategies", "grammar", "--inputs", "1"]) == 2


def test_long_pipelines_replay_from_a_file(tmp_path: Path) -> None:
    deep = "builtin.module(" * 500 + "canonicalize" + ")" * 500
    case = Case(9, "t", "module {}\n", deep, strategy="pass-options")
    result = fuzz.Result(case, fuzz.Outcome.INTERNAL_ERROR, 2, "hector-opt: internal error: x")
    entry = _record(result, tmp_path)
    assert (tmp_path / "internal_error-9.pipeline").read_text() == deep
    assert "$(cat " in entry["command"]
    assert len(entry["pipeline"]) < 400


def test_rng_streams_do_not_depend_on_each_other() -> None:
    assert strategy_rng(1, "grammar").random() == strategy_rng(1, "grammar").random()
    assert strategy_rng(1, "grammar").random() != strategy_rng(1, "extremes").random()
    assert isinstance(strategy_rng(1, "x"), random.Random)
