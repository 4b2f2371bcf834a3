"""FaultCostMeter: what one more faulted byte costs the training thread, from whole steps."""

from __future__ import annotations

import mmap
import resource
import threading

import pytest

from hector.runtime.fault_cost import FaultCostMeter, thread_kernel_usage

PAGE = resource.getpagesize()


class _FakeUsage:
    """A thread's (system seconds, faults) that the test advances step by step."""

    def __init__(self) -> None:
        self.system_s, self.faults = 0.0, 0

    def step(self, system_s: float, faults: int) -> None:
        self.system_s += system_s
        self.faults += faults

    def __call__(self) -> tuple[float, int]:
        return self.system_s, self.faults


def _meter(**kw):
    usage = _FakeUsage()
    return FaultCostMeter(usage=usage, **kw), usage


def _run(meter, usage, steps):
    """Mark the start, then each ``(offloaded, system_s, faults)`` step's end."""
    meter.restart()
    for offloaded, system_s, faults in steps:
        usage.step(system_s, faults)
        meter.mark(offloaded)


def test_the_cost_is_the_offloading_steps_system_time_over_their_faults():
    meter, usage = _meter()
    _run(meter, usage, [(False, 0.02, 1000), (True, 0.30, 11_000), (True, 0.32, 13_000)])
    assert meter.ns_per_byte() == pytest.approx(0.62e9 / (24_000 * PAGE))
    summary = meter.summary()
    assert summary["keeping_steps"] == 1  # reported, not part of the figure
    assert summary["keeping_system_ms"] == 20.0
    assert summary["offloading_steps"] == 2
    assert summary["offloading_faults"] == 12_000
    assert summary["offloading_system_ms"] == 310.0


def test_no_figure_until_the_steps_can_tell():
    meter, usage = _meter()
    assert meter.ns_per_byte() is None
    _run(meter, usage, [(False, 0.1, 1000), (True, 0.3, 10_000)])
    assert meter.ns_per_byte() is None  # one offloading step of the two needed
    _run(meter, usage, [(True, 0.3, 10_000)])
    assert meter.ns_per_byte() is not None
    meter, usage = _meter()  # 40 ms of system time: 10 ticks at 250 Hz, too few
    _run(meter, usage, [(True, 0.02, 10_000), (True, 0.02, 10_000)])
    assert meter.ns_per_byte() is None
    meter, usage = _meter()  # system time but no fault: nothing to divide by
    _run(meter, usage, [(True, 0.3, 0), (True, 0.3, 0)])
    assert meter.ns_per_byte() is None


def test_uncounted_steps_and_other_threads_are_left_out():
    meter, usage = _meter()
    _run(meter, usage, [(None, 5.0, 10**6), (False, 0.1, 1000), (True, 0.3, 11_000)])
    _run(meter, usage, [(True, 0.3, 11_000)])  # restart: nothing since the last mark counts
    assert meter.summary()["keeping_steps"] == 1  # the first step (None) was not counted
    assert meter.summary()["offloading_steps"] == 2
    other = threading.Thread(target=lambda: (usage.step(9.0, 10**6), meter.mark(True)))
    other.start()
    other.join()
    assert meter.summary()["offloading_steps"] == 2  # ended on another thread: not compared
    usage.step(0.3, 11_000)
    meter.mark(True)  # began on the other thread: not compared either
    assert meter.summary()["offloading_steps"] == 2
    usage.step(0.3, 11_000)
    meter.mark(True)
    assert meter.summary()["offloading_steps"] == 3


def test_the_window_keeps_the_last_steps():
    meter, usage = _meter(window=2)
    _run(meter, usage, [(True, 9.0, 2000)] * 2 + [(True, 0.3, 11_000)] * 2)
    assert meter.summary()["offloading_faults"] == 11_000
    assert meter.ns_per_byte() == pytest.approx(0.3e9 / (11_000 * PAGE))


def test_the_thread_figures_are_the_kernels():
    before = thread_kernel_usage()
    assert before is not None  # Linux: per-thread accounting
    nbytes = 16 << 20
    with mmap.mmap(-1, nbytes) as region:  # this thread writes each fresh page: one fault each
        for offset in range(0, nbytes, PAGE):
            region[offset] = 1
    after = thread_kernel_usage()
    assert after is not None
    assert after[1] - before[1] >= 0.9 * nbytes / PAGE
    assert after[0] >= before[0]


def test_what_the_steps_spend_by_where_they_trimmed():
    meter, usage = _meter()
    meter.restart()
    for system_s, trimmed_at, hooks_ns in (
        (0.20, None, 1e7),
        (0.22, None, 1e7),
        (0.30, "backward start", 2e7),
    ):
        usage.step(system_s, 10_000)
        meter.mark(True, trimmed_at=trimmed_at, hooks_ns=hooks_ns)
    assert meter.step_cost_ns(None) == pytest.approx(0.21e9 + 1e7)
    assert meter.step_cost_ns("backward start") is None  # one such step: not yet
    usage.step(0.32, 10_000)
    meter.mark(True, trimmed_at="backward start", hooks_ns=2e7)
    assert meter.step_cost_ns("backward start") == pytest.approx(0.31e9 + 2e7)
    assert meter.step_cost_ns("forward end") is None
    assert meter.summary()["trimmed_steps"] == 2
    assert meter.summary()["offloading_hooks_ms"] == 15.0
