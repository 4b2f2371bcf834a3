"""``memory_budget``: the saved activations a training step holds stay within what the user
states, in every step from the first, with losses and gradients bit-identical to keep-all."""

from __future__ import annotations

import pytest
from _offload_training import _model, _same, _train, keep_all_reference

import hector
from hector.offload import MemoryBudgetWarning, OffloadError, Plan, TensorCache
from hector.offload.plan import plan_within_budget, simulate_step
from hector.passes.offload_model import modelled_peak
from hector.passes.plan_offload import ScopeProfile

MIB = 1 << 20
GIB = 1 << 30


def _keep_all_saved_bytes(tmp_path) -> int:
    """The bytes one keep-all step saves (what a fraction of the budget is a fraction of)."""
    _, _, wrapped = _train("none", steps=1, root=str(tmp_path))
    counter = wrapped.cache
    peak = counter.step_peaks[0]
    wrapped.close()
    return peak


@pytest.mark.parametrize("budget", [0.5, 0.65])
def test_a_fraction_bounds_every_step_and_changes_no_number(tmp_path, budget):
    got = _train("adaptive", root=str(tmp_path), memory_budget=budget)
    _same(got, keep_all_reference())
    cache = got[2].cache
    assert cache.budget_bytes == int(budget * _keep_all_saved_bytes(tmp_path))
    peaks = list(cache.step_peaks)
    assert len(peaks) == 20
    assert max(peaks) <= cache.budget_bytes * 1.05  # every step, the first ones too
    plan = cache.plan
    assert plan.memory_budget == cache.budget_bytes
    assert plan.modelled_peak is not None
    assert plan.modelled_peak <= plan.memory_budget
    assert 'placement.rule = "budget"' in plan.text
    assert f"placement.memory_budget = {cache.budget_bytes}" in plan.text
    summary = plan.summary()
    assert summary["offload"] > 0  # a real choice, not all or nothing
    assert summary["keep"] > 0
    assert summary["recompute"] == 0
    assert cache.stats()["memory_budget_bytes"] == cache.budget_bytes
    got[2].close()


def test_a_larger_budget_keeps_more_and_offloads_less(tmp_path):
    kept = {}
    for budget in (0.5, 0.9):
        _, _, wrapped = _train("adaptive", steps=5, root=str(tmp_path), memory_budget=budget)
        plan = wrapped.cache.plan
        kept[budget] = sum(plan.nbytes[s] for s, d in plan.decisions.items() if d == "keep")
        wrapped.close()
    assert kept[0.9] > kept[0.5]


def test_a_byte_budget_bounds_every_step(tmp_path):
    budget = _keep_all_saved_bytes(tmp_path) // 2
    got = _train("adaptive", steps=6, root=str(tmp_path), memory_budget=budget)
    _same(got[:2], _train(None, steps=6)[:2])
    cache = got[2].cache
    assert cache.budget_bytes == budget
    assert max(cache.step_peaks) <= budget * 1.05
    got[2].close()


def test_the_first_steps_offload_everything_under_any_adaptive_plan(tmp_path):
    # Warm-up and profiled steps offload everything, one scope's writes in flight at a time
    # (each scope waits for the last one's), so they hold no more than the plan's steps.
    _, _, wrapped = _train("adaptive", steps=3, root=str(tmp_path))
    cache = wrapped.cache
    assert cache.plan is None  # planned when the fourth forward starts
    assert cache.counters["offloaded"] > 0
    assert max(cache.step_peaks) < _keep_all_saved_bytes(tmp_path) / 2
    wrapped.close()


def test_a_budget_below_what_offloading_everything_holds_warns_and_offloads_everything(
    tmp_path,
):
    with pytest.warns(MemoryBudgetWarning, match="memory_budget=4096 bytes is below"):
        got = _train("adaptive", steps=6, root=str(tmp_path), memory_budget=4096)
    _same(got[:2], _train(None, steps=6)[:2])
    plan = got[2].cache.plan
    assert set(plan.decisions.values()) == {"offload"}
    assert plan.modelled_peak > plan.memory_budget
    got[2].close()


@pytest.mark.parametrize("bad", [0, 1, -5, 0.0, 1.5, -0.1, True, "half", [1]])
def test_bad_budgets_are_refused(bad):
    with pytest.raises(OffloadError, match="memory_budget must be"):
        TensorCache("adaptive", memory_budget=bad)


@pytest.mark.parametrize("policy", ["all", "none"])
def test_a_budget_needs_the_adaptive_policy(policy):
    with pytest.raises(OffloadError, match="memory_budget plans with policy='adaptive'"):
        hector.offload(_model(), policy, memory_budget=0.5)


# ---- the budget rule on its own ----------------------------------------------------------------


def _profile(n: int = 6, nbytes: int = 100 * MIB):
    forward = [10e6] * n
    return forward, [2 * f for f in forward], [nbytes] * n


def test_the_budget_rule_keeps_the_scopes_whose_reads_backward_waits_for():
    forward, backward, nbytes = _profile()
    # Slow reads: offloading the last scope exposes its read as backward starts.
    got = plan_within_budget(forward, backward, nbytes, GIB, 0.2 * GIB, 300 * MIB)
    assert got.fits
    assert got.decisions[-1] == "keep"
    assert got.peak_bytes == modelled_peak(nbytes, got.decisions)
    assert got.peak_bytes <= 300 * MIB
    everything = simulate_step(forward, backward, nbytes, ["offload"] * 6, GIB, 0.2 * GIB)
    assert got.model.overhead < everything.overhead


def test_the_budget_rule_counts_bytes_outside_every_scope():
    forward, backward, nbytes = _profile()
    alone = plan_within_budget(forward, backward, nbytes, GIB, GIB, 400 * MIB)
    shared = plan_within_budget(forward, backward, nbytes, GIB, GIB, 400 * MIB, unscoped=200 * MIB)
    assert alone.decisions.count("keep") > shared.decisions.count("keep")
    assert shared.peak_bytes <= 400 * MIB


def test_the_budget_rule_offloads_everything_when_nothing_fits():
    forward, backward, nbytes = _profile()
    got = plan_within_budget(forward, backward, nbytes, GIB, GIB, 10 * MIB)
    assert not got.fits
    assert got.decisions == ["offload"] * 6
    assert got.peak_bytes == 150 * MIB  # one scope read back, and half the next
    with pytest.raises(ValueError, match="bandwidth must be > 0"):
        plan_within_budget(forward, backward, nbytes, 0, GIB, GIB)


def test_a_budgeted_plan_round_trips_through_its_ir(tmp_path):
    scopes = [ScopeProfile(f"h.{i}", 10_000_000, 100 * MIB) for i in range(4)]
    plan = Plan.from_measurements(
        scopes, [20e6] * 4, GIB, GIB, memory_budget=300 * MIB, unscoped=10 * MIB
    )
    assert plan.memory_budget == 300 * MIB
    assert plan.modelled_peak is not None
    assert plan.modelled_peak <= 300 * MIB
    plan.save(tmp_path / "plan.mlir")
    again = Plan.load(tmp_path / "plan.mlir")
    assert (again.decisions, again.memory_budget) == (plan.decisions, plan.memory_budget)
    assert again.modelled_peak == plan.modelled_peak
    plain = Plan.from_measurements(scopes, [20e6] * 4, GIB, GIB)
    assert (plain.memory_budget, plain.modelled_peak) == (0, None)
