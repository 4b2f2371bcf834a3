"""The offload planner's model of a training step, and its rules (no MLIR needed).

:func:`simulate_step` models one step of keep / offload / recompute decisions on measured
scope times and bandwidths (SSDTrain's timeline); :func:`plan_hidden` is the adaptive rule
(the least activation memory within an overhead target) and :func:`plan_within_budget` the
budget rule (the least modelled overhead whose activation memory fits a byte budget).
``hector.offload.plan`` writes their decisions as ``placement`` IR; this module stays free of
MLIR so a machine without the bindings plans the same way.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "OVERHEAD_TARGET",
    "DECISION_SHARE",
    "BudgetPlan",
    "StepModel",
    "modelled_peak",
    "plan_hidden",
    "plan_within_budget",
    "simulate_step",
]

#: The step-time overhead over keep-all an adaptive plan may spend by default (a fraction).
#: What a plan does not spend on its decisions goes to the heap trim, which the heavier GPT's
#: peak RSS needs to fall by more than a third: at 5% it never fit, and at 8%, once the
#: release cost counted the ``madvise`` itself, it fit in 2 of 3 runs (RSS -19% in the third).
#: Under this 10% its adaptive steps measured +8.3% and +10.6% in two interleaved records
#: (rounds -2.5% to +20.1% on a host whose speed drifts).
OVERHEAD_TARGET = 0.10

#: The share of the overhead target an adaptive plan's decisions may spend in the model; the
#: rest is left to what the model leaves out (the hooks, a slower moment of the host) and to
#: heap trims. With the whole target GPT-2 (4 layers, width 1024) would offload all but one
#: block's worth, modelled at +8.9%, on a model that put a plan it modelled at +4.3% at
#: -0.2% to +3.1% in three rounds: what the model misses is host noise of a few percent.
DECISION_SHARE = 0.5


@dataclass(frozen=True)
class StepModel:
    """What a plan would do to one step, from the profile (nanoseconds, bytes).

    Attributes:
        exposed_ns: time backward waits for reads that did not arrive in time.
        recompute_ns: forward time run again for recomputed scopes.
        step_ns: the keep-all step (forward + backward) the plan is measured against.
        kept_in_memory: offloaded scopes whose write would still be running when their read is
            due (the cache keeps them in memory: I/O spent, nothing saved).
        read_at_peak: offloaded scopes whose read is requested when backward starts — where
            memory peaks — so they are back in memory at the peak: I/O spent, no peak saved.
        offload_cpu_ns: time the training thread itself spends per step on the offloaded bytes
            (their memory handed back and faulted in again), ``offload_ns_per_byte`` times the
            bytes offloaded.
    """

    exposed_ns: float
    recompute_ns: float
    step_ns: float
    kept_in_memory: tuple[int, ...]
    read_at_peak: tuple[int, ...] = ()
    offload_cpu_ns: float = 0.0

    @property
    def overhead(self) -> float:
        """Modelled step-time overhead over keep-all (a fraction)."""
        spent = self.exposed_ns + self.recompute_ns + self.offload_cpu_ns
        return spent / max(self.step_ns, 1.0)


def simulate_step(
    forward_ns: Sequence[float],
    backward_ns: Sequence[float],
    nbytes: Sequence[int],
    decisions: Sequence[str],
    write_bandwidth: float,
    read_bandwidth: float,
    ahead: int = 1,
    offload_ns_per_byte: float = 0.0,
) -> StepModel:
    """Model one step of ``decisions`` (SSDTrain's timeline, one I/O queue shared in order).

    Forward runs the scopes in order; each offloaded scope's write joins the queue when its
    forward ends. Backward runs them in reverse; the read of scope ``i`` is requested when
    backward enters scope ``i + ahead`` (the forward's end for the last ones) and must land
    before backward enters ``i``; a late read delays everything after it. Each offloaded byte
    also costs the training thread ``offload_ns_per_byte`` (measured: its memory handed back
    and faulted in again, see :func:`measure_release_cost`), which no I/O overlap hides.
    """
    n = len(forward_ns)
    fwd_end = list(itertools.accumulate(forward_ns))
    total_fwd = fwd_end[-1] if n else 0.0
    io_free = 0.0
    write_done: dict[int, float] = {}
    for i in range(n):
        if decisions[i] == "offload":
            io_free = max(io_free, fwd_end[i]) + nbytes[i] * 1e9 / write_bandwidth
            write_done[i] = io_free
    clock = total_fwd  # backward's clock, delayed by every late read
    enter: dict[int, float] = {}
    exposed = 0.0
    kept: list[int] = []
    at_peak: list[int] = []
    for i in range(n - 1, -1, -1):
        if i in write_done:
            request = enter.get(i + ahead, total_fwd)
            if request <= total_fwd:
                at_peak.append(i)
            if write_done[i] > request:
                kept.append(i)  # still being written when wanted: served from memory
            else:
                io_free = max(io_free, request) + nbytes[i] * 1e9 / read_bandwidth
                if io_free > clock:
                    exposed += io_free - clock
                    clock = io_free
        enter[i] = clock
        clock += backward_ns[i]
    recompute = sum(f for f, d in zip(forward_ns, decisions, strict=True) if d == "recompute")
    step = total_fwd + sum(backward_ns)
    offloaded = sum(b for b, d in zip(nbytes, decisions, strict=True) if d == "offload")
    return StepModel(
        exposed,
        recompute,
        step,
        tuple(sorted(kept)),
        tuple(sorted(at_peak)),
        offloaded * offload_ns_per_byte,
    )


def plan_hidden(
    forward_ns: Sequence[float],
    backward_ns: Sequence[float],
    nbytes: Sequence[int],
    write_bandwidth: float,
    read_bandwidth: float,
    *,
    overhead_target: float = OVERHEAD_TARGET,
    recompute: bool = True,
    ahead: int = 1,
    offload_ns_per_byte: float = 0.0,
) -> list[str]:
    """The adaptive rule: the least activation memory whose modelled overhead stays within
    ``overhead_target``, offloading what compute hides and recomputing what is cheap.

    Starts from offloading every scope that saves bytes, less those whose offloading saves
    nothing (:func:`simulate_step`: a write still running when its read is due, or a read
    due as backward starts, where memory peaks — with ``ahead=1`` the last two scopes). While
    the modelled overhead — exposed read waits and the training thread's own cost of the
    offloaded bytes (``offload_ns_per_byte``) — is over ``overhead_target``, the offloaded
    scope whose keeping removes the most overhead per byte is kept (later scopes first among
    equals). Of the kept scopes, all but the last (whose backward comes first, so recomputing
    it frees nothing at the peak) are then recomputed cheapest first (least forward time per
    byte) while the overhead stays within the target — but only where a byte's forward time
    is no more than moving it out and back would take (``1/write + 1/read``): a transformer
    block costs several times that, and a plan spending its whole target on recomputation
    lands above it as soon as anything the model leaves out (the hooks, a slower moment of
    the host) adds to the step. Everything else is kept.
    """
    if write_bandwidth <= 0 or read_bandwidth <= 0:
        raise ValueError("write and read bandwidth must be > 0 bytes/s")
    costs = (write_bandwidth, read_bandwidth, ahead, offload_ns_per_byte)

    def model(decisions: Sequence[str]) -> StepModel:
        return simulate_step(forward_ns, backward_ns, nbytes, decisions, *costs)

    decisions = ["offload" if b > 0 else "keep" for b in nbytes]
    everything = model(decisions)
    for i in (*everything.kept_in_memory, *everything.read_at_peak):
        decisions[i] = "keep"
    _keep_back_until(decisions, nbytes, model, overhead_target)
    if recompute:
        _recompute_cheap(decisions, forward_ns, nbytes, model, overhead_target, costs)
    return decisions


def _keep_back_until(
    decisions: list[str],
    nbytes: Sequence[int],
    model: Callable[[Sequence[str]], StepModel],
    overhead_target: float,
) -> None:
    """Keep offloaded scopes back, the most modelled overhead removed per byte first, until
    the overhead is within ``overhead_target`` (or nothing is offloaded)."""
    current = model(decisions).overhead
    while current > overhead_target and "offload" in decisions:
        best: tuple[float, int, float] | None = None
        for i, d in enumerate(decisions):
            if d != "offload":
                continue
            decisions[i] = "keep"
            without = model(decisions).overhead
            decisions[i] = "offload"
            candidate = ((current - without) / max(nbytes[i], 1), i, without)
            if best is None or candidate[:2] > best[:2]:
                best = candidate
        assert best is not None
        decisions[best[1]] = "keep"
        current = best[2]


def _recompute_cheap(
    decisions: list[str],
    forward_ns: Sequence[float],
    nbytes: Sequence[int],
    model: Callable[[Sequence[str]], StepModel],
    overhead_target: float,
    costs: tuple[float, float, int, float],
) -> None:
    """Recompute kept scopes (all but the last) that cost no more than moving their bytes out
    and back, cheapest first, while the modelled overhead stays within ``overhead_target``."""
    moving_ns_per_byte = 1e9 / costs[0] + 1e9 / costs[1]
    cheap = sorted(
        (
            i
            for i in range(len(nbytes) - 1)
            if decisions[i] == "keep"
            and nbytes[i] > 0
            and forward_ns[i] / nbytes[i] <= moving_ns_per_byte
        ),
        key=lambda i: (forward_ns[i] / nbytes[i], i),
    )
    for i in cheap:
        decisions[i] = "recompute"
        if model(decisions).overhead > overhead_target:
            decisions[i] = "keep"


@dataclass(frozen=True)
class BudgetPlan:
    """The budget rule's decisions and the activation memory they were modelled to hold.

    Attributes:
        decisions: per scope, ``"keep"`` or ``"offload"``.
        peak_bytes: modelled activation bytes in memory at the step's peak
            (:func:`modelled_peak`, or the ``peak`` the rule was given).
        fits: whether ``peak_bytes`` is within the budget (False: even offloading every
            scope does not fit, and every scope is offloaded).
        model: the step model of ``decisions``.
    """

    decisions: list[str]
    peak_bytes: int
    fits: bool
    model: StepModel


def modelled_peak(nbytes: Sequence[int], decisions: Sequence[str], unscoped: int = 0) -> int:
    """Activation bytes in memory at a step's peak (as backward starts) under ``decisions``:
    what no scope saves (``unscoped``, always kept), every kept scope, and the read-ahead
    window of the offloaded ones — 1.5x the largest, what the cache's ``"auto"`` window holds
    (a read-back group, and half of the next one started)."""
    kept = sum(b for b, d in zip(nbytes, decisions, strict=True) if d != "offload")
    offloaded = [b for b, d in zip(nbytes, decisions, strict=True) if d == "offload"]
    window = min(3 * max(offloaded) // 2, sum(offloaded)) if offloaded else 0
    return unscoped + kept + window


def plan_within_budget(
    forward_ns: Sequence[float],
    backward_ns: Sequence[float],
    nbytes: Sequence[int],
    write_bandwidth: float,
    read_bandwidth: float,
    budget: int,
    *,
    unscoped: int = 0,
    ahead: int = 1,
    offload_ns_per_byte: float = 0.0,
    peak: Callable[[Sequence[str]], int] | None = None,
) -> BudgetPlan:
    """The budget rule: the least modelled overhead whose activation memory fits ``budget``.

    Starts from offloading every scope that saves bytes (the least memory: what a budgeted
    cache's first steps run), then keeps scopes back in memory, best first — the most
    modelled overhead removed per byte kept (:func:`simulate_step`, each scope measured
    alone against offloading everything), later scopes first among equals (their reads come
    as backward starts) — while :func:`modelled_peak` stays within ``budget``. ``unscoped``:
    saved bytes outside every scope (always kept). Recomputation is not used: its memory
    comes back inside backward, where the cache cannot count it. ``peak``: the memory that
    must fit ``budget`` under given decisions, in place of :func:`modelled_peak` (a compiled
    graph's plan models its whole step by liveness, values read back included).
    """
    if write_bandwidth <= 0 or read_bandwidth <= 0:
        raise ValueError("write and read bandwidth must be > 0 bytes/s")
    decisions = ["offload" if b > 0 else "keep" for b in nbytes]
    costs = (write_bandwidth, read_bandwidth, ahead, offload_ns_per_byte)
    base = simulate_step(forward_ns, backward_ns, nbytes, decisions, *costs).overhead
    gains: list[tuple[float, int]] = []
    for i, b in enumerate(nbytes):
        if decisions[i] == "offload":
            decisions[i] = "keep"
            alone = simulate_step(forward_ns, backward_ns, nbytes, decisions, *costs).overhead
            decisions[i] = "offload"
            gains.append(((base - alone) / b, i))

    def held(chosen: Sequence[str]) -> int:
        return modelled_peak(nbytes, chosen, unscoped) if peak is None else peak(chosen)

    for _, i in sorted(gains, reverse=True):
        decisions[i] = "keep"
        if held(decisions) > budget:
            decisions[i] = "offload"
    most = held(decisions)
    model = simulate_step(forward_ns, backward_ns, nbytes, decisions, *costs)
    return BudgetPlan(decisions, most, most <= budget, model)
