"""A tensor cache's options: checked before anything is set up, then the parts they configure.

:class:`CacheOptions` holds what :class:`~hector.offload.cache.TensorCache` takes besides the
model and its scopes (its arguments say what each means). Made, it loads a plan file given as
the policy and checks every option against its range, so a bad option is an
:class:`~hector.offload.errors.OffloadError` before any hook, thread or file exists; it then
builds the cache's parts from them: the scheduler over the store
(:class:`~hector.offload.scheduler.OffloadScheduler`), the adaptive policy's profiler
(:class:`~hector.offload.profiler.StepProfiler`) and the heap trims
(:class:`~hector.offload.heap_trim.HeapTrims`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from hector.runtime.fault_cost import FaultCostMeter

from .budget import MemoryBudget
from .errors import OffloadError
from .heap_trim import HeapTrims, TrimPoint, TrimRule, to_trim_point, to_trim_rule
from .host_policy import HostMemory, HostMemoryPolicy, ReleaseCostProbe, resolve_host_policy
from .plan import Plan
from .profiler import StepProfiler
from .scheduler import OffloadScheduler
from .scopes import GRANULARITIES
from .stats import CacheStatistics
from .store import LazyStore

__all__ = ["POLICIES", "CacheOptions"]

#: The policies named by a string (any other string names a plan file).
POLICIES = ("adaptive", "all", "none")


@dataclass(kw_only=True)
class CacheOptions:
    """The options of a :class:`~hector.offload.cache.TensorCache`, checked (see the module).

    Raises:
        OffloadError: an option is out of its range, a ``memory_budget`` comes without the
            adaptive policy, or a trim point or rule is unknown.
        PlanError: ``policy`` names a file that is not a plan.
    """

    policy: str | Plan
    memory_budget: int | float | None
    threshold: int
    ahead: int
    root: str | None
    threads: int
    chunk_bytes: int
    direct: bool
    on_write_error: str
    record_timeline: bool
    write_bandwidth: float | None
    readahead_bytes: int | str | None
    release_memory: bool | str | HostMemoryPolicy
    overhead_target: float
    granularity: str
    warmup_steps: int
    trim_point: str | TrimPoint
    trim_rule: str | TrimRule

    def __post_init__(self) -> None:
        if isinstance(self.policy, str) and self.policy not in POLICIES:
            self.policy = Plan.load(self.policy)  # a plan file; raises a clear error if not one
        _check_budget(self.memory_budget, self.policy)
        _check_ranges(self)
        self.trim_point = to_trim_point(self.trim_point)
        self.trim_rule = to_trim_rule(self.trim_rule)

    @property
    def plan(self) -> Plan | None:
        """The plan given (as a :class:`Plan` or a plan file), or None."""
        return self.policy if isinstance(self.policy, Plan) else None

    @property
    def policy_name(self) -> str:
        """``"all"``, ``"none"``, ``"adaptive"``, or ``"plan"`` when a plan was given."""
        return self.policy if isinstance(self.policy, str) else "plan"

    def host_policy(self, module: nn.Module | None) -> tuple[HostMemoryPolicy, str]:
        """The host-memory policy ``release_memory`` names for ``module`` and why ``"auto"``
        could not install the caching allocator ("" if not), the process prepared for it
        when the cache may offload.

        Raises:
            OffloadError: see :func:`~hector.offload.host_policy.resolve_host_policy`.
        """
        offloads = self.policy != "none"
        host, note = resolve_host_policy(self.release_memory, offloads, module)
        if offloads:
            # Before the first step: blocks a profiling step (or any step before the first
            # write) puts in glibc's heap would otherwise be reused from there ever after.
            host.prepare_process()
        return host, note

    def scheduler(
        self, stats: CacheStatistics, host: HostMemory, budget: MemoryBudget
    ) -> OffloadScheduler:
        """The I/O of the saved storages, through a store opened on first use."""
        return OffloadScheduler(
            LazyStore(self.root, self.threads, self.chunk_bytes, self.direct),
            stats,
            host,
            budget,
            ahead=self.ahead,
            readahead_bytes=self.readahead_bytes,
            on_write_error=self.on_write_error,
        )

    def profiler(
        self, host: HostMemoryPolicy, stats: CacheStatistics, settle: Callable[[], None]
    ) -> StepProfiler:
        """The adaptive policy's profiler (inactive under the other policies); ``settle``
        waits for the writes in flight as each profiled scope starts."""
        return StepProfiler(
            self.policy == "adaptive",
            self.warmup_steps,
            host,
            stats=stats,
            settle=settle,
            write_bandwidth=self.write_bandwidth,
            overhead_target=self.overhead_target,
            ahead=self.ahead,
        )

    def heap_trims(
        self, host: HostMemoryPolicy, stats: CacheStatistics, probe: ReleaseCostProbe
    ) -> HeapTrims:
        """The once-per-step heap trims, priced by ``probe`` until the steps are measured."""
        return HeapTrims(
            host,
            to_trim_point(self.trim_point),
            to_trim_rule(self.trim_rule),
            stats=stats,
            probe=probe,
            fault_cost=FaultCostMeter(),
        )


def _check_budget(budget: int | float | None, policy: object) -> None:
    """Check ``memory_budget``: None, a byte count > 1, or a fraction in (0, 1], with the
    adaptive policy (the only one that plans).

    Raises:
        OffloadError: it is none of these, or the policy is not ``"adaptive"``.
    """
    if budget is None:
        return
    fraction = isinstance(budget, float) and 0 < budget <= 1
    count = isinstance(budget, int) and not isinstance(budget, bool) and budget > 1
    if not (fraction or count):
        raise OffloadError(
            "memory_budget must be a byte count (an int > 1) or a fraction of the activation "
            f"memory one step saves (a float in (0, 1]), got {budget!r}"
        )
    if policy != "adaptive":
        raise OffloadError(f"memory_budget plans with policy='adaptive', not {policy!r}")


def _check_ranges(o: CacheOptions) -> None:
    """Check the plain options of ``o`` against their ranges.

    Raises:
        OffloadError: one is out of its range.
    """
    if o.on_write_error not in ("keep", "raise"):
        raise OffloadError(f"on_write_error must be 'keep' or 'raise', got {o.on_write_error!r}")
    if o.ahead < 0 or o.threshold < 0:
        raise OffloadError("ahead and threshold must be >= 0")
    readahead = o.readahead_bytes
    if readahead != "auto" and not (
        readahead is None or (isinstance(readahead, int) and readahead >= 0)
    ):
        raise OffloadError(
            f"readahead_bytes must be 'auto', None or an int >= 0, got {readahead!r}"
        )
    if o.granularity not in GRANULARITIES:
        raise OffloadError(f"granularity must be one of {GRANULARITIES}, got {o.granularity!r}")
    if not 0 <= o.overhead_target < 10:
        raise OffloadError(f"overhead_target must be in [0, 10), got {o.overhead_target}")
    steps = o.warmup_steps
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise OffloadError(f"warmup_steps must be an int >= 0, got {steps!r}")
