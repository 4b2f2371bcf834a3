"""What handing memory back costs the training thread, measured in training.

The cache decides each heap trim by what its bytes cost when they are faulted in again, and
the plan prices the offloaded bytes' refaults the same way. The probe both used
(:func:`hector.offload.host_policy.measure_release_cost`: 16 MiB dropped and written again,
in a moment) came out at 0.09-0.62 ns per byte between the heavier GPT's processes
(docs/offload.md, measured results), while its training thread paid 0.46-0.65 ns per faulted
byte in system time, steadily, step after step. Whether a trim as backward starts fitted the
plan's budget thus hung on a moment's measurement; where it did not, the trim moved to the
forward's end and peak RSS fell about a third instead of two fifths.

:class:`FaultCostMeter` measures what training pays: the training thread's system
time over its minor page faults in the steps that offloaded (``getrusage(RUSAGE_THREAD)``,
whole steps). Nearly all of that system time is the faults and the calls that cause them
(``madvise``, ``malloc_trim``): a step of the heavier GPT that kept everything spent 0-36 ms
in the kernel, one that offloaded 230-340 ms. Every cache runs it and reports its figures;
``TensorCache(trim_rule="measured")`` decides its trims by them (opt-in: in two heavier-GPT
runs that rule stopped trimming after a costly step, docs/offload.md).
"""

from __future__ import annotations

import collections
import resource
import threading
from collections.abc import Callable

_PAGE = resource.getpagesize()


def thread_kernel_usage() -> tuple[float, int] | None:
    """The calling thread's system CPU seconds and minor page faults so far, or None where
    the kernel has no per-thread accounting (``RUSAGE_THREAD`` is Linux-only)."""
    who = getattr(resource, "RUSAGE_THREAD", None)
    if who is None:
        return None
    usage = resource.getrusage(who)
    return usage.ru_stime, usage.ru_minflt


#: One counted step: system seconds, minor faults, where it trimmed the heap (None: it did
#: not), and nanoseconds of the hooks' own work (outside waits and ``madvise``).
_Step = tuple[float, int, str | None, float]


class FaultCostMeter:
    """What the steps that offloaded cost the training thread, from whole steps.

    Call :meth:`mark` at each step's start (the root module's forward) with whether the step
    that just ended offloaded (None: count it nowhere, e.g. a process's first steps, which
    fault in all they allocate), where it trimmed the heap and its hooks' own time;
    :meth:`restart` after work between steps that is not training (the plan's probes).

    - :meth:`ns_per_byte`: the last ``window`` offloading steps' system time over their
      faults' bytes, what a faulted byte costs this process.
    - :meth:`step_cost_ns`: the mean system time plus hooks' time of the recent offloading
      steps that trimmed at a given point (or did not trim).

    Both are None until ``min_offloading_steps`` such steps spent ``min_system_s`` in the
    kernel together: CPU time is tick-sampled on kernels with ``CONFIG_TICK_CPU_ACCOUNTING``
    (4 ms per tick at 250 Hz), so 0.1 s is 25 ticks, a sampling error of about a fifth.
    Steps that kept everything are counted for :meth:`summary` only.
    """

    def __init__(
        self,
        *,
        window: int = 16,
        min_offloading_steps: int = 2,
        min_system_s: float = 0.1,
        usage: Callable[[], tuple[float, int] | None] = thread_kernel_usage,
    ) -> None:
        """A meter keeping the last ``window`` steps of each kind; ``usage`` reads the
        thread's (system seconds, minor faults), injectable for tests."""
        self._usage = usage
        self._min_offloading = min_offloading_steps
        self._min_system_s = min_system_s
        self._keeping: collections.deque[_Step] = collections.deque(maxlen=window)
        self._offloading: collections.deque[_Step] = collections.deque(maxlen=window)
        self._last: tuple[int, tuple[float, int]] | None = None

    def restart(self) -> None:
        """Start the next step's interval now, counting nothing since the last mark."""
        now = self._usage()
        self._last = None if now is None else (threading.get_ident(), now)

    def mark(
        self, offloaded: bool | None, *, trimmed_at: str | None = None, hooks_ns: float = 0.0
    ) -> None:
        """The step since the last mark ended: count it (``offloaded``: whether it offloaded;
        None: not at all; ``trimmed_at``: where it trimmed the heap, None if it did not;
        ``hooks_ns``: its hooks' own time) and start the next. A step that ran on another
        thread than the mark before it is not counted: per-thread figures would not compare."""
        last = self._last
        self.restart()
        if last is None or self._last is None or offloaded is None:
            return
        thread, (system_s, faults) = last
        if thread != self._last[0]:
            return
        now_system_s, now_faults = self._last[1]
        step = (now_system_s - system_s, now_faults - faults, trimmed_at, hooks_ns)
        (self._offloading if offloaded else self._keeping).append(step)

    def _enough(self, steps: list[_Step]) -> bool:
        return len(steps) >= self._min_offloading and sum(s[0] for s in steps) >= self._min_system_s

    def ns_per_byte(self) -> float | None:
        """What a faulted byte cost the offloading steps, or None while they do not tell."""
        steps = list(self._offloading)
        faults = sum(s[1] for s in steps)
        if not self._enough(steps) or faults <= 0:
            return None
        return sum(s[0] for s in steps) * 1e9 / (faults * _PAGE)

    def step_cost_ns(self, trimmed_at: str | None) -> float | None:
        """Mean nanoseconds of system time plus hooks' own time of the recent offloading
        steps that trimmed at ``trimmed_at`` (None: that did not trim), or None while too
        few of them tell it."""
        steps = [s for s in self._offloading if s[2] == trimmed_at]
        if not self._enough(steps):
            return None
        return sum(s[0] * 1e9 + s[3] for s in steps) / len(steps)

    def summary(self) -> dict[str, float | int]:
        """Steps counted and their mean system milliseconds, faults and hooks' milliseconds,
        by kind (steps that kept everything, steps that offloaded)."""
        out: dict[str, float | int] = {}
        for kind, steps in (("keeping", self._keeping), ("offloading", self._offloading)):
            out[f"{kind}_steps"] = len(steps)
            if steps:
                n = len(steps)
                out[f"{kind}_system_ms"] = round(sum(s[0] for s in steps) * 1e3 / n, 1)
                out[f"{kind}_faults"] = round(sum(s[1] for s in steps) / n)
                out[f"{kind}_hooks_ms"] = round(sum(s[3] for s in steps) / 1e6 / n, 1)
        out["trimmed_steps"] = sum(s[2] is not None for s in self._offloading)
        return out
