"""The tensor cache's host memory: heap trims within the plan's budget and priced by what the
steps pay in page faults, the trim point, release modes (trim, advise) and the pages they hand
back to the operating system."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from _offload_training import (
    SEQ,
    VOCAB,
    _model,
    _same,
    _train,
    keep_all_reference,
    one_intra_op_thread,
)

import hector
from hector.offload import OffloadError, Plan, TensorCache
from hector.offload.heap_trim import TRIM_YIELD_PRIOR as _TRIM_YIELD_PRIOR
from hector.runtime import libc_heap


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    yield from one_intra_op_thread()


@pytest.fixture(scope="module")
def reference():
    return keep_all_reference()


def _plan_with_trim_budget(budget_ns: int):
    """A plan for ``_model()`` that offloads, whose forward may spend ``budget_ns`` on trims."""
    from hector.passes.plan_offload import ScopeProfile

    names = [n for n, _ in hector.offload.default_scopes(_model())]
    scopes = [ScopeProfile(n, 1_000_000_000, 1 << 20) for n in names]
    plan = Plan.from_measurements(
        scopes, [2e9] * len(names), 1e12, 1e12, overhead_target=5.0, recompute=False
    )
    assert "offload" in plan.decisions.values()
    return Plan(plan.decisions, plan.policy, plan.text, plan.scopes, plan.nbytes, budget_ns)


@pytest.mark.parametrize(("budget_ns", "trims"), [(1, 0), (10**15, 3)])
def test_a_given_plan_trims_only_within_its_budget(tmp_path, budget_ns, trims):
    # A plan given by the caller was not profiled here: the cost of a trimmed byte is measured
    # on first need (it used to count as free, so any budget trimmed every step).
    _, _, wrapped = _train(_plan_with_trim_budget(budget_ns), steps=3, root=str(tmp_path))
    assert wrapped.cache.counters["heap_trims"] == trims
    assert wrapped.cache.profiler.release_cost.ns_per_byte > 0
    if trims:  # each trim measured what it handed back
        assert wrapped.cache.trim_yield != _TRIM_YIELD_PRIOR
        assert 0.0 <= wrapped.cache.trim_yield <= 1.0
    wrapped.close()


def test_the_trim_decision_counts_only_what_a_trim_hands_back(tmp_path, monkeypatch):
    # Free chunks whose pages the cache already dropped are not resident: a trim hands back
    # only a fraction of the heap's free bytes, and only that fraction is faulted in again.
    cache = TensorCache(_plan_with_trim_budget(100), _model(), root=str(tmp_path))
    monkeypatch.setattr(libc_heap, "heap_free_bytes", lambda: 1000)
    cache.profiler.release_cost.ns_per_byte = 0.15  # a trim of all 1000 free bytes: 150 ns
    assert cache.trim_yield == _TRIM_YIELD_PRIOR
    cache.trim_yield = 1.0
    assert not cache.heap_trims.fits("backward start", cache.plan)
    cache.trim_yield = 0.6  # 90 ns: within the budget
    assert cache.heap_trims.fits("backward start", cache.plan)
    cache.close()


def _meter_with(steps):
    """A FaultCostMeter that counted ``(offloaded, system_s, faults, trimmed_at, hooks_ns)``
    steps of a fake thread."""
    from hector.runtime.fault_cost import FaultCostMeter

    usage = [0.0, 0]
    meter = FaultCostMeter(usage=lambda: (usage[0], usage[1]))
    meter.restart()
    for offloaded, system_s, faults, trimmed_at, hooks_ns in steps:
        usage[0] += system_s
        usage[1] += faults
        meter.mark(offloaded, trimmed_at=trimmed_at, hooks_ns=hooks_ns)
    return meter


def test_trims_count_what_training_paid_per_faulted_byte(tmp_path, monkeypatch):
    # The probe varied 0.43-1.09 ns per byte between the heavier GPT's processes; once the
    # steps tell what a faulted byte costs this process's training thread, trims count that.
    cache = TensorCache(
        _plan_with_trim_budget(100), _model(), root=str(tmp_path), trim_rule="measured"
    )
    monkeypatch.setattr(libc_heap, "heap_free_bytes", lambda: 1000)
    cache.profiler.release_cost.ns_per_byte = 0.15  # the probe: a trim of 1000 bytes at 150 ns
    cache.trim_yield = 1.0
    assert not cache.heap_trims.fits("backward start", cache.plan)
    assert cache.stats()["trim_cost_source"] == "probe"
    assert cache.stats()["trim_ns_per_byte"] == 0.15
    assert cache.stats()["trim_rule"] == "model"
    # Two steps that offloaded and trimmed at the forward's end: 0.3 s of system time for
    # 10^6 faulted pages each, 0.073 ns per byte (a trim of 1000 bytes: 73 ns). Nothing yet
    # tells what a step trimming as backward starts spends: the model decides, at that price.
    cache.heap_trims.fault_cost = _meter_with([(True, 0.3, 10**6, "forward end", 0.0)] * 2)
    assert cache.heap_trims.fits("backward start", cache.plan)
    stats = cache.stats()
    assert stats["trim_rule"] == "model"
    assert stats["trim_cost_source"] == "training"
    assert stats["trim_ns_per_byte"] == pytest.approx(0.3e9 / (10**6 * 4096))
    assert stats["probe_ns_per_byte"] == 0.15
    assert stats["fault_cost_steps"]["offloading_steps"] == 2
    assert stats["fault_cost_steps"]["trimmed_steps"] == 2
    cache.close()


def test_by_default_trims_are_decided_by_the_model_at_the_probes_price(tmp_path, monkeypatch):
    # trim_rule="measured" stopped trimming in two runs of one heavier-GPT record after
    # costly steps; the default stays the model's rule, the meter's figure only recorded.
    cache = TensorCache(_plan_with_trim_budget(100), _model(), root=str(tmp_path))
    monkeypatch.setattr(libc_heap, "heap_free_bytes", lambda: 1000)
    cache.profiler.release_cost.ns_per_byte = 0.15
    cache.trim_yield = 1.0
    cache.heap_trims.fault_cost = _meter_with([(True, 0.3, 10**6, None, 0.0)] * 2)  # 0.073 ns/B
    assert not cache.heap_trims.fits("backward start", cache.plan)  # 150 ns at the probe's price
    stats = cache.stats()
    assert stats["trim_rule"] == "model"
    assert stats["trim_cost_source"] == "probe"
    assert stats["fault_ns_per_byte"] == pytest.approx(0.3e9 / (10**6 * 4096))
    cache.close()
    with pytest.raises(OffloadError, match="trim_rule must be one of"):
        TensorCache("all", trim_rule="measure")


def test_trims_are_decided_by_what_the_steps_spend_once_they_tell(tmp_path, monkeypatch):
    # The plan budgets its faults (offloaded bytes at its cost per byte) and its trims; once
    # the steps measured what they spend in the kernel and in the hooks, that decides.
    plan = _plan_with_trim_budget(100_000_000)  # 0.1 s of trims per step
    plan.offload_ns_per_byte = 1.0
    cache = TensorCache(plan, _model(), root=str(tmp_path), trim_rule="measured")
    cache.counters["bytes_offloaded"] = 200_000_000  # this pass: 0.2 s of modelled faults
    free = [1000]
    monkeypatch.setattr(libc_heap, "heap_free_bytes", lambda: free[0])
    cache.trim_yield = 1.0
    # Steps without a trim: 0.2 s in the kernel plus 10 ms in the hooks, and the trim's own
    # bytes (0.49 ns each: 0.2 s over 10^5 pages).
    untrimmed = (True, 0.2, 100_000, None, 10_000_000)
    cache.heap_trims.fault_cost = _meter_with([untrimmed] * 2)
    assert cache.heap_trims.fits("backward start", cache.plan)  # 0.21 s and 490 ns, within 0.3 s
    assert cache.stats()["trim_rule"] == "measured"
    free[0] = 200_000_000  # a trim of 0.098 s more: 0.308 s
    assert not cache.heap_trims.fits("backward start", cache.plan)
    # Steps that trimmed as backward started spent 0.25 s, trim included: that decides.
    trimmed = (True, 0.24, 150_000, "backward start", 10_000_000)
    cache.heap_trims.fault_cost = _meter_with([untrimmed] * 2 + [trimmed] * 2)
    free[0] = 300_000_000  # at 0.44 ns per byte (all four steps), a trim of 0.13 s
    assert cache.heap_trims.fits("backward start", cache.plan)
    # No step trimmed at the forward's end: untrimmed + trim.
    assert not cache.heap_trims.fits("forward end", cache.plan)
    cache.counters["bytes_offloaded"] = 100_000_000  # 0.1 + 0.1 s budgeted: 0.25 is over
    assert not cache.heap_trims.fits("backward start", cache.plan)
    cache.close()


class _RecordingMeter:
    """Stands in for the cache's FaultCostMeter: records what the cache tells it."""

    def __init__(self) -> None:
        self.calls: list[object] = []

    def mark(self, offloaded, *, trimmed_at=None, hooks_ns=0.0):
        self.calls.append(offloaded if offloaded is None else (offloaded, trimmed_at, hooks_ns > 0))

    def restart(self):
        self.calls.append("restart")

    def ns_per_byte(self):
        return None

    def step_cost_ns(self, trimmed_at):
        return None

    def summary(self):
        return {}


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        # Not the first step (it faults in all it allocates): then each step that offloaded.
        # Each trimmed as its backward started; the hooks' own time counts.
        ("all", [None, None, (True, "backward start", True), (True, "backward start", True)]),
        # Nor the warm-up steps; the profiled step offloaded everything and trimmed; the
        # probes after it are not the next step's cost, nor is the first planned step typical.
        ("adaptive", [None, None, None, (True, "backward start", True), "restart", None]),
    ],
)
def test_the_cache_tells_the_fault_meter_each_step(tmp_path, monkeypatch, policy, expected):
    import hector.offload.options as options_mod

    meter = _RecordingMeter()
    monkeypatch.setattr(options_mod, "FaultCostMeter", lambda: meter)
    _, _, wrapped = _train(policy, steps=len(expected) - (policy == "adaptive"), root=str(tmp_path))
    assert meter.calls == expected
    wrapped.close()


def _step_freeing_between_forward_and_backward(fwd, freed: list[str]) -> None:
    """One step of a loop that frees memory after its forward and before its backward (as
    ``zero_grad(set_to_none=True)`` there frees last step's gradients)."""
    ids = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(1))
    blocks = [torch.ones(8 << 10) for _ in range(256)]  # 32 KiB each: glibc's heap
    loss = F.cross_entropy(fwd(ids).reshape(-1, VOCAB), ids.reshape(-1))
    del blocks
    freed.append("freed")
    loss.backward()
    freed.append("backward done")


def test_the_heap_trim_runs_as_backward_starts_after_what_the_loop_freed(tmp_path, monkeypatch):
    # Trimmed at the forward's end, memory freed before backward (last step's gradients)
    # stayed resident at the peak while backward faulted in the pages the trim handed back.
    events: list[str] = []
    trims: list[str] = []
    real = libc_heap.trim_heap
    monkeypatch.setattr(libc_heap, "trim_heap", lambda: (trims.append(events[-1]), real())[1])
    fwd = hector.offload(_model(), "all", root=str(tmp_path), threshold=1024)
    for _ in range(2):
        events.append("forward")
        _step_freeing_between_forward_and_backward(fwd, events)
    assert trims == ["freed", "freed"]  # once per step, after the free, before backward's end
    assert fwd.cache.trim_point == "backward start"
    assert fwd.cache.stats()["trim_point"] == "backward start"
    fwd.close()


class _MeteredSteps(_RecordingMeter):
    """A fault meter whose steps spent nothing of their own: a trim costs what it hands back."""

    def step_cost_ns(self, trimmed_at):
        return 0.0 if trimmed_at is None else None


@pytest.mark.parametrize(
    ("rule", "metered", "moves"),
    [("model", False, True), ("measured", True, True), ("measured", False, False)],
)
def test_a_trim_that_fits_only_at_the_forward_end_moves_there(
    tmp_path, monkeypatch, rule, metered, moves
):
    # Backward may start with more free memory than the budget pays to hand back (the freed
    # gradients): that step skips its trim; three such steps in a row, and later steps trim
    # at the forward's end. Under trim_rule="measured", misses the model decided (before the
    # steps tell, on the probe alone) never move it: the move is for good.
    events: list[str] = []
    trims: list[str] = []
    monkeypatch.setattr(libc_heap, "trim_heap", lambda: trims.append(events[-1]))
    # 1000 free bytes cost 150 ns against a budget of 100; 100 free bytes cost 15.
    monkeypatch.setattr(
        libc_heap, "heap_free_bytes", lambda: 1000 if events[-1] == "freed" else 100
    )
    fwd = hector.offload(
        _model(), _plan_with_trim_budget(100), root=str(tmp_path), threshold=1024, trim_rule=rule
    )
    fwd.cache.profiler.release_cost.ns_per_byte = 0.15
    fwd.cache.trim_yield = 1.0
    if metered:
        fwd.cache.heap_trims.fault_cost = _MeteredSteps()
    for _ in range(2):  # one miss (the first planned step's) does not move it
        events.append("forward")
        _step_freeing_between_forward_and_backward(fwd, events)
        assert fwd.cache.trim_point == "backward start"
    events.append("forward")
    _step_freeing_between_forward_and_backward(fwd, events)
    assert trims == []  # did not fit as backward started: no trim in those steps
    decision = fwd.cache.stats()["last_trim_decision"]
    assert decision["at"] == "backward start"
    assert decision["fits"] is False
    assert decision["trim_ms"] == pytest.approx(150e-6)
    assert decision["budget_ms"] == pytest.approx(100e-6)
    if not moves:
        assert decision["rule"] == "model"
        assert decision["spent_ms"] is None
        for _ in range(3):
            events.append("forward")
            _step_freeing_between_forward_and_backward(fwd, events)
        assert fwd.cache.trim_point == "backward start"
        assert trims == []
        fwd.close()
        return
    assert decision["rule"] == ("measured" if metered else "model")
    if metered:
        assert decision["spent_ms"] == pytest.approx(150e-6)
    assert fwd.cache.trim_point == "forward end"  # three in a row
    events.append("forward")
    _step_freeing_between_forward_and_backward(fwd, events)
    assert trims == ["forward"]  # at the forward's end, before the loop freed anything
    fwd.close()


def test_the_trim_point_is_an_option(tmp_path, monkeypatch):
    events: list[str] = []
    trims: list[str] = []
    monkeypatch.setattr(libc_heap, "trim_heap", lambda: trims.append(events[-1]))
    fwd = hector.offload(
        _model(), "all", root=str(tmp_path), threshold=1024, trim_point="forward end"
    )
    events.append("forward")
    _step_freeing_between_forward_and_backward(fwd, events)
    assert trims == ["forward"]
    fwd.close()
    with pytest.raises(OffloadError, match="trim_point must be one of"):
        TensorCache("all", trim_point="backward")


def _profiled_bytes(tmp_path, steps: int, warmup_steps: int):
    """Saved bytes per scope the adaptive cache measured after ``steps``, and its plan."""
    _, _, wrapped = _train("adaptive", steps=steps, root=str(tmp_path), warmup_steps=warmup_steps)
    measured = {name: rec[1] for name, rec in wrapped.cache.profiler.profile.items()}
    plan = wrapped.cache.plan
    assert wrapped.cache.counters["offloaded"] > 0  # every step so far offloaded everything
    wrapped.close()
    return measured, plan


def test_adaptive_profiles_only_after_its_warmup_steps(tmp_path):
    # A process's first steps run slower (allocator, caches): a plan measured on them counts
    # its costs against a step longer than training's.
    once, plan = _profiled_bytes(tmp_path, steps=1, warmup_steps=0)
    assert plan is None  # planned when the next forward starts
    assert once
    assert all(once.values())
    after_warmup, plan = _profiled_bytes(tmp_path, steps=2, warmup_steps=1)
    assert plan is None  # the second step was the profiled one
    assert after_warmup == once  # the warm-up step's measurements were dropped, not added
    for bad in (-1, True, 1.5):
        with pytest.raises(OffloadError, match="warmup_steps must be an int >= 0"):
            TensorCache("adaptive", warmup_steps=bad)


def test_a_heap_trim_measures_the_fraction_it_hands_back():
    from hector.runtime.libc_heap import process_resident_bytes as _process_resident_bytes
    from hector.runtime.libc_heap import trim_heap as _trim_heap

    _trim_heap()
    blocks = [torch.ones(8 << 10) for _ in range(1024)]  # 32 KiB each: glibc's heap, 32 MiB
    before = _process_resident_bytes()
    del blocks
    fraction = _trim_heap()
    assert fraction is not None
    assert 0.0 < fraction <= 1.0
    assert before - _process_resident_bytes() >= 16 << 20  # the freed blocks left


def test_read_back_buffers_are_in_phase_with_the_store():
    from hector.runtime.libc_heap import BLOCK as _BLOCK
    from hector.runtime.libc_heap import in_phase_buffer as _in_phase_buffer

    for phase in (0, 64, 1024, 4032):
        buf, shift = _in_phase_buffer(10_000, phase, pin=False)
        assert buf.numel() == 10_000
        assert buf.dtype == torch.uint8
        assert buf.data_ptr() % _BLOCK == phase
        assert buf.data_ptr() - buf.untyped_storage().data_ptr() == shift
    buf, shift = _in_phase_buffer(100, 8, pin=False)  # not element-safe: a plain buffer
    assert shift == 0
    assert buf.data_ptr() == buf.untyped_storage().data_ptr()


@pytest.mark.parametrize("window", [-1, "big", 1.5])
def test_bad_read_ahead_window_is_a_clear_error(window):
    with pytest.raises(OffloadError, match="readahead_bytes must be"):
        TensorCache("all", readahead_bytes=window)


def test_trim_mode_trains_bit_identically_and_bad_modes_are_errors(tmp_path):
    ref = _train(None, steps=3)
    got = _train("all", steps=3, root=str(tmp_path), release_memory="trim")
    _same(got, ref)
    got[2].close()
    with pytest.raises(OffloadError, match="release_memory must be one of"):
        TensorCache("all", release_memory="sometimes")


# ---- release_memory="advise": only offloaded pages leave the process ------------------------


def _resident_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_dropping_pages_returns_them_to_the_operating_system():
    from hector.offload.host_policy import drop_storage_pages as _drop_pages

    t = torch.ones(64 << 18)  # 64 MiB, every page written
    before = _resident_bytes()
    released = _drop_pages(t.untyped_storage())
    assert released >= (64 << 20) - 2 * os.sysconf("SC_PAGE_SIZE")
    assert before - _resident_bytes() >= 60 << 20
    assert float(t[1 << 20]) == 0.0  # the contents are gone: only for dead memory


def test_advise_mode_trains_bit_identically_and_hands_back_offloaded_pages(tmp_path, reference):
    got = _train("all", root=str(tmp_path), release_memory="advise")
    _same(got, reference)
    stats = got[2].cache.stats()
    assert stats["release_memory"] == "advise"
    assert stats["released_bytes"] > 0
    assert stats["heap_trims"] == 20  # once per forward that offloaded
    assert stats["timing"]["trim_ns"] > 0  # the trims' own time, in the breakdown
    got[2].close()


def _saved_by_mul(cache: TensorCache, make, w: torch.Tensor) -> torch.Tensor:
    """``(make() * w).sum()`` under ``cache``'s hooks, every write finished and collected."""
    with cache.hooks():
        out = (make() * w).sum()
    cache.flush()
    with cache.scheduler.lock:
        cache.scheduler.drain()
    return out


def test_advise_mode_never_drops_memory_someone_else_still_holds(tmp_path):
    cache = TensorCache(
        "all", threshold=0, root=str(tmp_path), on_write_error="raise", release_memory="advise"
    )
    w = torch.randn(256, 1024, requires_grad=True)
    held = [torch.randn(256, 1024).exp()]  # allocator-owned, and the caller keeps it
    expect = held[0].clone()
    out = _saved_by_mul(cache, lambda: held[0], w)
    assert cache.counters["offloaded"] >= 1
    assert torch.equal(held[0], expect)  # written and dropped by the cache, not handed back
    assert cache.released_bytes == 0
    held.clear()  # now the cache is the last owner: the next hook hands the pages back
    with cache.scheduler.lock:
        cache.scheduler.drain()
    assert cache.released_bytes >= 256 * 1024 * 4 - 2 * os.sysconf("SC_PAGE_SIZE")
    out.backward()
    assert torch.allclose(w.grad, expect)  # read back from the store
    cache.close()


def test_advise_mode_never_drops_memory_owned_outside_torch(tmp_path):
    import numpy as np

    cache = TensorCache(
        "all", threshold=0, root=str(tmp_path), on_write_error="raise", release_memory="advise"
    )
    w = torch.randn(256, 1024, requires_grad=True)
    array = np.full((256, 1024), 3.0, dtype=np.float32)  # numpy's memory: not the cache's
    out = _saved_by_mul(cache, lambda: torch.from_numpy(array), w)
    assert cache.counters["offloaded"] >= 1
    assert cache.released_bytes == 0
    assert (array == 3.0).all()
    out.backward()
    assert torch.all(w.grad == 3.0)
    cache.close()


def test_waits_outside_the_hooks_are_not_taken_from_the_hooks_own_time(tmp_path) -> None:
    """The profiler waits for a scope's writes outside the saved-tensor hooks: that wait is
    ``outside_ns``, in the waits the plan models, and never subtracted from the hooks'
    own time (which under load it could exceed, leaving a step with no hook time at all)."""
    fwd = hector.offload(_model(), "all", root=str(tmp_path), threshold=1024)
    ids = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(1))
    stats = fwd.cache.statistics
    stats.start_pass()
    loss = F.cross_entropy(fwd(ids).reshape(-1, VOCAB), ids.reshape(-1))
    own = stats.own_hook_ns_this_pass()
    waited = stats.waited_ns()
    fwd.cache.scheduler.wait_for_writes()
    assert stats.timing["outside_ns"] >= 0
    assert stats.own_hook_ns_this_pass() == own  # the wait is not a hook's
    assert stats.waited_ns() - waited == stats.timing["outside_ns"]
    loss.backward()
    fwd.close()
