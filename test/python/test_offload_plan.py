"""The adaptive planner rule and plan files (print, save, load)."""

from __future__ import annotations

import pytest

from hector.offload import Plan, PlanError
from hector.offload.plan import plan_hidden, simulate_step
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


# ---- the hidden-I/O rule (measured forward/backward times, write and read bandwidth) --------

GIB = 1 << 30


def test_hidden_rule_offloads_what_compute_hides_and_keeps_the_last_scopes():
    # 4 blocks of 100 ms forward / 200 ms backward, 64 MiB each, 1 GiB/s both ways: every
    # write (62.5 ms) hides, but the last two blocks' reads are due as backward starts (the
    # last one's at once, the one before when backward enters the last): offloading them would
    # not lower the peak, which is there.
    # (An 8% target: recomputing a block, 8.3% of the step, does not fit.)
    fwd, bwd, nbytes = [100e6] * 4, [200e6] * 4, [64 * MIB] * 4
    got = plan_hidden(fwd, bwd, nbytes, GIB, GIB, overhead_target=0.08)
    assert got == ["offload", "offload", "keep", "keep"]
    model = simulate_step(fwd, bwd, nbytes, got, GIB, GIB)
    assert model.exposed_ns == 0
    assert model.kept_in_memory == ()
    assert model.read_at_peak == ()
    everything = simulate_step(fwd, bwd, nbytes, ["offload"] * 4, GIB, GIB)
    assert everything.read_at_peak == (2, 3)


def test_hidden_rule_keeps_what_io_cannot_hide():
    # 1 ms of compute per scope cannot hide 64 MiB at 1 GiB/s (62.5 ms): nothing is offloaded,
    # and recomputation (1 ms of a 12 ms step, 8.3%) is over an 8% target but within the 10%
    # default.
    fwd, bwd, nbytes = [1e6] * 4, [2e6] * 4, [64 * MIB] * 4
    assert plan_hidden(fwd, bwd, nbytes, GIB, GIB, recompute=False) == ["keep"] * 4
    assert plan_hidden(fwd, bwd, nbytes, GIB, GIB, overhead_target=0.08) == ["keep"] * 4
    got = plan_hidden(fwd, bwd, nbytes, GIB, GIB)
    assert got.count("recompute") == 1
    assert got[-1] == "keep"  # the last scope's backward comes first: recomputing frees nothing


def _gpt2_profile() -> tuple[list[float], list[float], list[int]]:
    """Hugging Face GPT-2's scopes as profiled (4 layers, width 1024, seq 512, batch 2):
    small layer norms between attention (120 MiB, ~300 ms forward) and MLP (88 MiB) scopes,
    the LM head last."""
    fwd, bwd, nbytes = [11e6], [1e6], [4 * MIB]  # embeddings' dropout
    for _ in range(4):
        fwd += [2e6, 305e6, 2e6, 310e6]
        bwd += [4e6, 300e6, 6e6, 480e6]
        nbytes += [4 * MIB, 120 * MIB, 4 * MIB, 88 * MIB]
    return fwd + [2e6, 231e6], bwd + [4e6, 449e6], nbytes + [4 * MIB, 4 * MIB]


@pytest.mark.parametrize("target", [0.02, 0.05, 0.1])
def test_hidden_rule_holds_the_least_memory_within_its_target(target):
    # Its reads come one scope ahead, so an attention scope's read behind a layer norm is
    # partly exposed; the rule still offloads until the target is spent, and offloading
    # any scope it kept (that would save anything) goes over it.
    fwd, bwd, nbytes = _gpt2_profile()
    w, r = 960e6, 1240e6
    got = plan_hidden(fwd, bwd, nbytes, w, r, overhead_target=target, recompute=False)
    assert simulate_step(fwd, bwd, nbytes, got, w, r).overhead <= target
    big = [i for i, b in enumerate(nbytes) if b > 64 * MIB]
    assert any(got[i] == "offload" for i in big)
    for i in big:
        if got[i] == "keep":
            more = [*got[:i], "offload", *got[i + 1 :]]
            model = simulate_step(fwd, bwd, nbytes, more, w, r)
            wasted = i in model.read_at_peak or i in model.kept_in_memory
            assert wasted or model.overhead > target
    # A larger target never holds more.
    kept = sum(b for b, d in zip(nbytes, got, strict=True) if d == "keep")
    wider = plan_hidden(fwd, bwd, nbytes, w, r, overhead_target=2 * target, recompute=False)
    assert sum(b for b, d in zip(nbytes, wider, strict=True) if d == "keep") <= kept


def test_a_write_still_running_when_its_read_is_due_is_not_offloaded():
    fwd, bwd, nbytes = [100e6, 1e6, 1e6], [200e6, 2e6, 2e6], [MIB, 512 * MIB, MIB]
    model = simulate_step(fwd, bwd, nbytes, ["offload"] * 3, GIB, GIB)
    assert model.kept_in_memory == (1, 2)  # 512 MiB take 500 ms to write: not done in time
    assert model.exposed_ns > 0.4e9  # and scope 0's read queues behind that write
    got = plan_hidden(fwd, bwd, nbytes, GIB, GIB, recompute=False)
    assert got == ["offload", "keep", "keep"]


def test_hidden_rule_counts_what_each_offloaded_byte_costs_the_training_thread():
    # The first test's blocks (1.2 s step): at 0.1 ns per byte, 64 MiB cost 6.7 ms (0.56% of
    # the step) each, so both hidden blocks still fit a 1% target; at 0.2 ns (1.1% each)
    # the first block alone fits; at 1 ns none does, however well the I/O hides.
    fwd, bwd, nbytes = [100e6] * 4, [200e6] * 4, [64 * MIB] * 4

    def plan(ns_per_byte: float) -> list[str]:
        return plan_hidden(
            fwd,
            bwd,
            nbytes,
            GIB,
            GIB,
            overhead_target=0.0115,
            recompute=False,
            offload_ns_per_byte=ns_per_byte,
        )

    assert plan(0.1) == ["offload", "offload", "keep", "keep"]
    assert plan(0.2) == ["offload", "keep", "keep", "keep"]
    assert plan(1.0) == ["keep"] * 4
    model = simulate_step(fwd, bwd, nbytes, plan(0.2), GIB, GIB, offload_ns_per_byte=0.2)
    assert model.offload_cpu_ns == pytest.approx(64 * MIB * 0.2)
    assert model.overhead == pytest.approx(64 * MIB * 0.2 / 1.2e9)


def test_the_plan_gives_heap_trims_the_budget_its_decisions_leave():
    scopes = [ScopeProfile(f"blocks.{i}", 100_000_000, 64 * MIB) for i in range(4)]
    bwd = [200e6] * 4

    target = 0.08  # under a block's recomputation (8.3%): the plan only offloads

    def plan(**kw) -> Plan:
        return Plan.from_measurements(
            scopes, bwd, GIB, GIB, trim_heap=True, overhead_target=target, **kw
        )

    free = plan()  # two blocks offloaded, nothing spent: the whole target of the 1.2 s step
    assert free.trim_budget_ns == pytest.approx(target * 1.2e9, rel=1e-6)
    assert f"placement.trim_budget_ns = {free.trim_budget_ns} " in free.text
    assert Plan.from_ir(free.text).trim_budget_ns == free.trim_budget_ns  # printed, loaded
    # 0.1 ns per offloaded byte: 13.4 ms of the budget spent on the two blocks.
    spent = plan(offload_ns_per_byte=0.1)
    left = target * 1.2e9 - 2 * 64 * MIB * 0.1
    assert spent.trim_budget_ns == pytest.approx(left, rel=1e-6)
    assert Plan.from_measurements(scopes, bwd, GIB, GIB).trim_budget_ns == 0  # cannot trim
    nothing = Plan.from_measurements(scopes, [1.0] * 4, GIB, GIB, trim_heap=True)
    assert "offload" not in nothing.decisions.values()
    assert nothing.trim_budget_ns == 0  # nothing offloaded: nothing to hand back
    assert "trim_budget_ns" not in nothing.text


def test_measured_release_cost_is_a_time_per_byte():
    import math

    from hector.offload.cache import measure_release_cost

    cost = measure_release_cost(4 << 20)
    # Only its type, sign and finiteness are checked: its size depends on how busy the machine
    # is (0.0 when a busy moment made the faulting pass no slower; the benchmark records it).
    assert isinstance(cost, float)
    assert math.isfinite(cost)
    assert cost >= 0


def test_hidden_rule_rejects_bad_bandwidth():
    with pytest.raises(ValueError, match="bandwidth must be > 0"):
        plan_hidden([1.0], [2.0], [1], 0, 1)


def _without_mlir(monkeypatch) -> None:
    """This process as one where the MLIR Python bindings do not import (the GPU machine)."""
    import sys

    monkeypatch.setitem(sys.modules, "mlir", None)
    monkeypatch.setitem(sys.modules, "mlir.ir", None)


def test_without_mlir_the_plan_makes_the_same_decisions_but_no_ir(tmp_path, monkeypatch):
    from hector.offload import PlanWithoutIRWarning
    from hector.offload.plan import profile_from

    profile = {f"blocks.{i}": [0.1, 64 * MIB] for i in range(4)}
    names = list(profile)
    args = ([200e6] * 4, GIB, GIB)
    kw = {"offload_ns_per_byte": 0.05, "overhead_target": 0.08, "trim_heap": True}
    with_ir = Plan.from_measurements(profile_from(names, profile), *args, **kw)
    _without_mlir(monkeypatch)
    scopes = profile_from(names, profile)  # no ScopeProfile: its module needs MLIR
    assert [(s.name, s.forward_ns, s.nbytes) for s in scopes] == [
        (n, 100_000_000, 64 * MIB) for n in names
    ]
    with pytest.warns(PlanWithoutIRWarning, match="MLIR Python bindings do not import"):
        plain = Plan.from_measurements(scopes, *args, **kw)
    assert plain.decisions == with_ir.decisions
    assert (plain.trim_budget_ns, plain.nbytes) == (with_ir.trim_budget_ns, with_ir.nbytes)
    assert plain.modelled_overhead == pytest.approx(with_ir.modelled_overhead, abs=1e-6)
    assert plain.offload_ns_per_byte == with_ir.offload_ns_per_byte
    assert plain.text == ""
    assert plain.scopes == names
    with pytest.raises(PlanError, match="no placement IR to save"):
        plain.save(tmp_path / "plan.mlir")
    assert not (tmp_path / "plan.mlir").exists()


def test_measured_plan_is_placement_ir(tmp_path):
    scopes = [ScopeProfile(f"blocks.{i}", 100_000_000, 64 * MIB) for i in range(4)]
    plan = Plan.from_measurements(
        scopes, [200e6] * 4, GIB, GIB, offload_ns_per_byte=0.05, overhead_target=0.08
    )
    assert plan.policy == "adaptive"
    assert plan.decisions == {
        "blocks.0": "offload",
        "blocks.1": "offload",
        "blocks.2": "keep",
        "blocks.3": "keep",
    }
    text = str(plan)
    assert 'placement.rule = "hidden-io"' in text
    assert "placement.backward_ns = 200000000" in text
    assert "placement.read_bandwidth" in text
    assert "placement.offload_ps_per_byte = 50 " in text
    assert text.count('"placement.prefetch"') == 2
    path = tmp_path / "plan.mlir"
    plan.save(path)
    assert Plan.load(path).decisions == plan.decisions


def test_hidden_rule_recomputes_only_what_is_cheaper_than_moving_it():
    # The heavier GPT's blocks: 360 ms forward for 64 MiB is 5.4 ns per byte, where moving a
    # byte out and back takes 1.8 ns at 1.25 / 1 GB/s. Even a target that would pay for it
    # keeps the block that cannot be offloaded (its read is due as backward starts) instead
    # of spending 7% of the step recomputing it; at 50 ms (0.75 ns per byte) it is cheap.
    bwd, nbytes = [680e6] * 4, [64 * MIB] * 4

    def plan(forward_ns: float) -> list[str]:
        return plan_hidden([forward_ns] * 4, bwd, nbytes, 1.25e9, 1e9, overhead_target=0.5)

    assert plan(360e6) == ["offload", "offload", "keep", "keep"]
    assert plan(50e6)[2] == "recompute"
    assert plan(50e6)[3] == "keep"  # the last scope: recomputing it frees nothing at the peak


def test_release_cost_is_measured_on_the_pieces_the_bytes_come_in():
    from hector.offload.host_policy import byte_weighted_median as _byte_weighted_median
    from hector.offload.host_policy import measure_release_cost

    # Half of the bytes are in blocks of at most the median: 1 MiB here, not the 64 KiB ones.
    assert _byte_weighted_median([64 << 10] * 8 + [1 << 20] * 4 + [4 << 20]) == 1 << 20
    assert _byte_weighted_median([]) is None
    cost = measure_release_cost(4 << 20, piece_bytes=256 << 10)  # 16 blocks of 256 KiB
    # A measured time per byte: finite and not negative. Its size depends on the machine's
    # load (0.0 when a busy moment made the faulting pass no slower), so no more is asserted.
    assert 0 <= cost < float("inf")
