"""The once-per-step heap trim of :class:`~hector.offload.host_policy.AdvisePages`.

Under that policy a cache calls ``malloc_trim`` once per forward that offloaded: always without
a plan, and under a plan when the heap's free bytes, faulted in again later, fit the plan's
trim budget. :class:`TrimPoint` says where the trim runs (as backward starts, or at the
forward's end), a :class:`TrimRule` how a plan's trim is decided (:class:`ModelTrimRule`, the
default, or :class:`MeasuredTrimRule`), and :class:`HeapTrims` keeps one cache's trims: their
decisions, what they handed back and where they run.
"""

from __future__ import annotations

import enum
import time
from typing import Any

from hector.runtime import libc_heap
from hector.runtime.fault_cost import FaultCostMeter

from .errors import OffloadError
from .host_policy import HostMemoryPolicy, ReleaseCostProbe
from .plan import Plan
from .stats import CacheStatistics

__all__ = [
    "TRIM_POINTS",
    "TRIM_RULES",
    "HeapTrims",
    "MeasuredTrimRule",
    "ModelTrimRule",
    "TrimPoint",
    "TrimRule",
    "to_trim_point",
    "to_trim_rule",
]

#: Backward starts in a row whose trim did not fit (where the forward's end would have) before
#: the heap trim moves to the forward's end for the rest of training.
_TRIM_MISSES_BEFORE_MOVING = 3

#: What a heap trim is assumed to hand back of the free bytes before one has been measured.
TRIM_YIELD_PRIOR = 0.5


class TrimPoint(enum.Enum):
    """Where the heap trim of a step that offloaded runs."""

    #: The first unpack after a forward that offloaded: also hands back what the loop frees
    #: between forward and backward (last step's gradients).
    BACKWARD_START = "backward start"
    #: The end of the forward that offloaded.
    FORWARD_END = "forward end"


#: The legacy names of the trim points (``TensorCache(trim_point=...)``).
TRIM_POINTS = tuple(p.value for p in TrimPoint)


def to_trim_point(value: str | TrimPoint) -> TrimPoint:
    """The trim point ``value`` is or names.

    Raises:
        OffloadError: not a trim point nor one of :data:`TRIM_POINTS`.
    """
    if isinstance(value, TrimPoint):
        return value
    if value not in TRIM_POINTS:
        raise OffloadError(f"trim_point must be one of {TRIM_POINTS}, got {value!r}")
    return TrimPoint(value)


class TrimRule:
    """How a plan's heap trims are decided: the price of a trimmed byte and whether the
    recent steps' measured cost replaces the trim's modelled one."""

    #: The rule's name (``TensorCache(trim_rule=...)``).
    name = "model"

    def price(self, meter: FaultCostMeter) -> float | None:
        """Nanoseconds per byte a trim's bytes cost when faulted in again, as measured in
        training; None: the probe's figure."""
        return None

    def spent_ns(self, meter: FaultCostMeter, at: str, trim_ns: float) -> float | None:
        """What a step trimming at ``at`` spends, measured (None: decide by the model)."""
        return None

    def counts_miss(self, decided_by: str | None) -> bool:
        """Whether a trim that did not fit as backward started (decided by ``decided_by``)
        counts towards moving the trim to the forward's end."""
        return True

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class ModelTrimRule(TrimRule):
    """The trim's modelled cost (its bytes at the probe's price) within the plan's trim
    budget (``trim_rule="model"``, the default)."""


class MeasuredTrimRule(TrimRule):
    """``trim_rule="measured"``: once the steps tell it (:class:`FaultCostMeter`), what the
    offloading steps spent in the kernel and the hooks against what the plan budgeted for
    faults and trims, at training's own price per faulted byte; the trim point moves only on
    measured misses. On the heavier GPT it kept the trim as backward starts in 13 runs of 16,
    but in two runs of one record it stopped trimming after costly steps (docs/offload.md,
    "Trims decided by what the steps spend")."""

    name = "measured"

    def price(self, meter: FaultCostMeter) -> float | None:
        """What a faulted byte cost this process's offloading steps, once they tell it."""
        return meter.ns_per_byte()

    def spent_ns(self, meter: FaultCostMeter, at: str, trim_ns: float) -> float | None:
        """The recent offloading steps that trimmed at ``at`` (else those that did not, plus
        this trim's cost), once enough of them tell it."""
        spent = meter.step_cost_ns(at)
        if spent is None:
            untrimmed = meter.step_cost_ns(None)
            spent = None if untrimmed is None else untrimmed + trim_ns
        return spent

    def counts_miss(self, decided_by: str | None) -> bool:
        """Only misses the measured rule decided: the move is for the rest of training."""
        return decided_by == "measured"


_RULES: dict[str, type[TrimRule]] = {"model": ModelTrimRule, "measured": MeasuredTrimRule}
#: The legacy names of the trim rules (``TensorCache(trim_rule=...)``).
TRIM_RULES = tuple(_RULES)


def to_trim_rule(value: str | TrimRule) -> TrimRule:
    """The trim rule ``value`` is or names.

    Raises:
        OffloadError: not a rule nor one of :data:`TRIM_RULES`.
    """
    if isinstance(value, TrimRule):
        return value
    if value not in _RULES:
        raise OffloadError(f"trim_rule must be one of {TRIM_RULES}, got {value!r}")
    return _RULES[value]()


class HeapTrims:
    """One cache's heap trims: whether each fits, running them, where they run, and the
    figures of the last decision (see ``TensorCache``'s ``release_memory``, ``trim_point`` and
    ``trim_rule``)."""

    def __init__(
        self,
        policy: HostMemoryPolicy,
        point: TrimPoint,
        rule: TrimRule,
        *,
        stats: CacheStatistics,
        probe: ReleaseCostProbe,
        fault_cost: FaultCostMeter,
    ) -> None:
        """Trims under host-memory ``policy`` at ``point`` decided by ``rule``; counted in
        ``stats``, priced by ``probe`` or by the steps ``fault_cost`` measures."""
        self._policy = policy
        self.point = point
        self.rule = rule
        self._stats = stats
        self.probe = probe
        self.fault_cost = fault_cost
        #: The fraction of the heap's free bytes the last heap trim handed back, measured.
        #: Until one is, a prior of half: the trims measured on the heavier GPT handed back
        #: 39-62%, and counting every free byte (the old 1.0) skipped whole runs' trims.
        self.trim_yield = TRIM_YIELD_PRIOR
        #: What each byte a heap trim hands back costs when faulted in again, as the last
        #: trim decision counted it (ns), and where that figure came from: ``"training"``
        #: (:class:`FaultCostMeter`, the training thread's steps) or ``"probe"``.
        self.trim_ns_per_byte: float | None = None
        self.trim_cost_source: str | None = None
        #: How the last trim decision was taken: ``"measured"`` (the recent steps' kernel
        #: and hooks' time against what the plan budgeted for faults) or ``"model"`` (the
        #: trim's modelled cost against the plan's trim budget).
        self.trim_rule: str | None = None
        #: The last trim decision's figures (ms): where, by which rule, what the trim would
        #: cost, what the steps spent (measured rule), the budget it was held to, and whether
        #: it fitted.
        self.last_trim_decision: dict[str, Any] | None = None
        # A trim awaiting the next backward's start: whether it fitted at the forward's end.
        self.pending: bool | None = None
        self._misses = 0  # backward starts in a row whose trim did not fit
        self.trimmed_at: str | None = None  # where this pass trimmed the heap

    @property
    def trim_point(self) -> str:
        """The name of the trim point (``"backward start"`` or ``"forward end"``)."""
        return self.point.value

    @trim_point.setter
    def trim_point(self, value: str | TrimPoint) -> None:
        self.point = to_trim_point(value)

    def at_forward_end(self, plan: Plan | None) -> None:
        """A forward that offloaded ends: trim now, or leave the trim to backward's start."""
        fits = self.fits(TrimPoint.FORWARD_END.value, plan)
        if self.point is TrimPoint.BACKWARD_START and self._policy.trims_heap_per_step:
            self.pending = fits
        elif fits:
            self.trim(TrimPoint.FORWARD_END.value)

    def as_backward_starts(self, plan: Plan | None) -> None:
        """The heap trim of the forward whose backward starts now, once per step.

        Here rather than at the forward's end: memory peaks from backward into the next
        forward, and between the two points loops commonly free last step's gradients
        (``zero_grad(set_to_none=True)`` before ``backward()``). Trimmed at the forward's
        end, those stayed resident while backward's allocations faulted in the pages the trim
        had handed back: on the heavier GPT, 190-250 MiB of free memory at the peak."""
        pending, self.pending = self.pending, None
        if pending is None:
            return
        if self.fits(TrimPoint.BACKWARD_START.value, plan):
            self._misses = 0
            self.trim(TrimPoint.BACKWARD_START.value)
        elif pending and self.rule.counts_miss(self.trim_rule):
            # The forward's end was within budget. Moved only after misses in a row: the
            # first planned step's backward starts with the free memory of the keep-everything
            # steps before it, more than later ones. Under trim_rule="measured", only on what
            # the steps measured: the move is for the rest of training.
            self._misses += 1
            if self._misses >= _TRIM_MISSES_BEFORE_MOVING:
                self.point = TrimPoint.FORWARD_END

    def trim(self, at: str) -> None:
        """``malloc_trim`` now (``at``: which trim point), recording the fraction of the free
        bytes it handed back."""
        self.trimmed_at = at
        start = time.perf_counter_ns()
        measured = libc_heap.trim_heap()
        self._stats.timing["trim_ns"] += time.perf_counter_ns() - start
        if measured is not None:
            self.trim_yield = measured
        self._stats.counters["heap_trims"] += 1

    def fits(self, at: str, plan: Plan | None) -> bool:
        """Whether a heap trim (``malloc_trim``) at trim point ``at`` fits now under ``plan``.

        Only under a policy that trims per step; without a plan (``"all"``): always. What it
        hands back is the heap's free bytes now times the fraction the last trim handed back
        (:attr:`trim_yield`, measured), each byte faulted in again later at
        :meth:`cost_per_byte`. Under a plan, by the :class:`TrimRule`: the **model** (the
        trim's cost within the plan's trim budget) or, under :class:`MeasuredTrimRule` once
        this process's steps tell it, **measured**: the recent offloading steps that trimmed
        at ``at`` (else those that did not, plus this trim's cost) spent, in system time and
        the hooks' own time, no more than the plan budgeted for its faults and trims (its
        offloaded bytes at its cost per byte, plus its trim budget).

        :attr:`last_trim_decision` records the figures.
        """
        if not self._policy.trims_heap_per_step:
            return False
        if plan is None:
            return True
        if plan.trim_budget_ns <= 0:
            return False
        free = libc_heap.heap_free_bytes()
        if free is None:
            return False
        trim_ns = free * self.trim_yield * self.cost_per_byte()
        spent = self.rule.spent_ns(self.fault_cost, at, trim_ns)
        if spent is None:
            self.trim_rule = "model"
            budget = float(plan.trim_budget_ns)
            fits = trim_ns <= budget
        else:
            self.trim_rule = "measured"
            offloaded = self._stats.bytes_offloaded_this_pass()
            budget = plan.trim_budget_ns + offloaded * plan.offload_ns_per_byte
            fits = spent <= budget
        self.last_trim_decision = {
            "at": at,
            "rule": self.trim_rule,
            "trim_ms": trim_ns / 1e6,
            "spent_ms": None if spent is None else spent / 1e6,
            "budget_ms": budget / 1e6,
            "fits": fits,
        }
        return fits

    def cost_per_byte(self) -> float:
        """Nanoseconds per byte a trim's bytes cost when faulted in again: the probe
        (:class:`ReleaseCostProbe`); under :class:`MeasuredTrimRule`, what a faulted byte cost
        this process's offloading steps (:class:`FaultCostMeter`) once they tell it. On the
        heavier GPT the probe came out at 0.09-0.62 ns per byte between processes while
        training paid 0.46-0.65 (docs/offload.md, "Trims decided by what the steps spend")."""
        measured = self.rule.price(self.fault_cost)
        self.trim_cost_source = "probe" if measured is None else "training"
        self.trim_ns_per_byte = self.probe.cost() if measured is None else measured
        return self.trim_ns_per_byte

    def step_ended(self, offloaded: bool | None, hooks_ns: float) -> None:
        """Tell the fault meter the step that just ended (see :meth:`FaultCostMeter.mark`)."""
        self.fault_cost.mark(offloaded, trimmed_at=self.trimmed_at, hooks_ns=hooks_ns)

    def report(self) -> dict[str, Any]:
        """The trims' figures for ``stats()``, in its order."""
        return {
            "trim_yield": self.trim_yield,
            "trim_point": self.trim_point,
            "trim_ns_per_byte": self.trim_ns_per_byte,
            "trim_cost_source": self.trim_cost_source,
            "trim_rule": self.trim_rule,
            "fault_ns_per_byte": self.fault_cost.ns_per_byte(),
            "last_trim_decision": self.last_trim_decision,
            "probe_ns_per_byte": self.probe.ns_per_byte,
            "fault_cost_steps": self.fault_cost.summary(),
        }
