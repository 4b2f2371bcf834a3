"""The adaptive planner rule and plan files (print, save, load)."""

from __future__ import annotations

import pytest

from hector.offload import Plan, PlanError
from hector.passes.plan_offload import ScopeProfile, decide, profile_ir, required_bandwidths

MIB = 1 << 20


def _scopes(n: int = 4, nbytes: int = MIB, ns: int = 1_000_000) -> list[ScopeProfile]:
    return [ScopeProfile(f"blocks.{i}", ns, nbytes) for i in range(n)]


def test_required_bandwidth_formula():
    needs = required_bandwidths(_scopes())
    # (Σ earlier + 2·b) / (3T − 2·Σ earlier time), T = 4 ms
    assert needs[0] == pytest.approx(2 * MIB / 12e-3)
    assert needs[3] == pytest.approx(5 * MIB / 6e-3)


@pytest.mark.parametrize(
    ("bandwidth", "expected"),
    [
        (1e12, ["offload"] * 4),
        (5e8, ["offload", "offload", "keep", "keep"]),
        (1e8, ["keep"] * 4),
    ],
)
def test_adaptive_keeps_the_last_scopes(bandwidth, expected):
    assert decide(_scopes(), bandwidth) == expected


def test_policies_and_budget():
    s = _scopes()
    assert decide(s, 0, "all") == ["offload"] * 4
    assert decide(s, 0, "none") == ["keep"] * 4
    got = decide(s, 1e8, memory_budget=2 * MIB)
    assert got.count("recompute") == 2
    assert got.count("keep") == 2
    assert decide(s, 1e8, memory_budget=2 * MIB, recompute=False) == ["keep"] * 4
    with pytest.raises(ValueError, match="policy must be one of"):
        decide(s, 1e9, "most")
    with pytest.raises(ValueError, match="write bandwidth must be > 0"):
        decide(s, 0)


def test_plan_print_save_load(tmp_path):
    plan = Plan.from_profile(_scopes(), 5e8)
    assert plan.decisions == {
        "blocks.0": "offload",
        "blocks.1": "offload",
        "blocks.2": "keep",
        "blocks.3": "keep",
    }
    assert plan.summary() == {"keep": 2, "offload": 2, "recompute": 0}
    assert '"placement.offload"' in str(plan)
    assert 'placement.name = "blocks.0"' in str(plan)
    path = tmp_path / "plan.mlir"
    plan.save(path)
    again = Plan.load(path)
    assert again.decisions == plan.decisions
    assert again.nbytes["blocks.1"] == MIB
    assert again.scopes == [f"blocks.{i}" for i in range(4)]


def test_profile_ir_escapes_names():
    text = profile_ir([ScopeProfile('a"b', 1, 2)], 10)
    assert 'placement.name = "a\\22b"' in text  # the printer's escape of the quote
    assert Plan.from_ir(Plan.from_profile([ScopeProfile('a"b', 1, 2)], 1e12).text).decisions == {
        'a"b': "offload"
    }


def test_plan_without_decisions_is_rejected():
    with pytest.raises(PlanError, match="contains no placement decisions"):
        Plan.from_ir(profile_ir(_scopes(), 1e9), "profile.mlir")
