"""Profiling a training step and following the plan made from it.

Under ``policy="adaptive"`` the cache offloads everything for its warm-up steps and one
profiled step, each scope waiting for the last one's writes (the least memory, so the first
steps hold no more than the plan's later ones), measuring each scope's forward and backward
time — less the time they waited for the store — and saved bytes (:class:`StepProfiler`);
when the next forward starts it plans from those measurements and the bandwidth the store gave
them (:meth:`StepProfiler.finish`) and follows the plan: offloaded scopes are written to the
store, recomputed scopes run under activation checkpointing (:func:`follow_plan`).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from hector.runtime import libc_heap
from hector.runtime.offload import TensorStore

from .errors import HugePagesAdvice, MemoryBudgetWarning, OffloadError
from .host_policy import (
    HostMemoryPolicy,
    ReleaseCostProbe,
    byte_weighted_median,
    device_types,
)
from .plan import Plan
from .stats import CacheStatistics

__all__ = ["StepProfiler", "follow_plan"]

#: A recompute wrapper: the module and the forward it replaced.
Wrapped = tuple[nn.Module, Callable[..., Any]]


def follow_plan(plan: Plan, scopes: list[tuple[str, nn.Module]]) -> list[Wrapped]:
    """Check that ``plan`` names only ``scopes`` and wrap the scopes it recomputes in
    activation checkpointing; the wrapped modules with their original forwards.

    Raises:
        OffloadError: the plan names a scope the model does not have.
    """
    names = [n for n, _ in scopes]
    unknown = [n for n in plan.decisions if n not in names]
    if unknown:
        raise OffloadError(
            f"the plan names scopes the model does not have: {', '.join(unknown[:5])} "
            f"(model scopes: {', '.join(names[:8])}{' ...' if len(names) > 8 else ''})"
        )
    return [_wrap_recompute(m) for name, m in scopes if plan.decisions.get(name) == "recompute"]


def _wrap_recompute(m: nn.Module) -> Wrapped:
    """Run ``m``'s forward under activation checkpointing when gradients are on."""
    from torch.utils.checkpoint import checkpoint

    original = m.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return original(*args, **kwargs)
        return checkpoint(original, *args, use_reentrant=False, **kwargs)

    m.forward = forward
    return m, original


#: Bytes the profiled steps must have written and read for their own bandwidth to plan with.
MEASURED_IO_BYTES = 16 << 20


def _bandwidth_moved(store: TensorStore) -> tuple[float, float] | None:
    """The write and read bandwidth (bytes per busy second) the store gave the steps that
    offloaded everything, or None where they moved less than :data:`MEASURED_IO_BYTES` each
    way (then a probe measures it, allocating its own buffer while the plan is made)."""
    stats = store.stats()
    if min(stats["bytes_written"], stats["bytes_read"]) < MEASURED_IO_BYTES:
        return None
    if not (stats["write_bandwidth"] > 0 and stats["read_bandwidth"] > 0):
        return None
    return float(stats["write_bandwidth"]), float(stats["read_bandwidth"])


class StepProfiler:
    """What the adaptive policy measures before it plans, and the plan's inputs it measured.

    Args:
        active: profile (``policy="adaptive"``); otherwise it never measures.
        warmup_steps: forward passes (with their backward) measured and then forgotten
            before the profiled one.
        host: the cache's host-memory policy (how much each offloaded byte costs).
        stats: the cache's statistics (the time it waited for the store, left out of the
            scopes' times).
        settle: waits for the writes in flight; called as each profiled scope starts, so one
            scope's writes at most are in flight.
        write_bandwidth: the store's write bandwidth given by the caller (None: measured).
        overhead_target: the step-time overhead over keep-all the plan may spend.
        ahead: the groups read ahead of backward.
    """

    def __init__(
        self,
        active: bool,
        warmup_steps: int,
        host: HostMemoryPolicy,
        *,
        stats: CacheStatistics,
        settle: Callable[[], None],
        write_bandwidth: float | None,
        overhead_target: float,
        ahead: int,
    ) -> None:
        self.active = active
        self.pass_ = 0  # the pass being profiled (its backward too)
        self.warmup_left = warmup_steps  # measured steps still to discard
        self._host = host
        self._stats = stats
        self._settle = settle
        self._overhead_target = overhead_target
        self._ahead = ahead
        self.profile: dict[str, list[float]] = {}  # scope -> [forward seconds, saved bytes]
        self.sizes: list[int] = []  # profiled pass: bytes of each offloadable storage
        self.unscoped_bytes = 0  # profiled pass: bytes saved outside every scope
        self._scope_start: dict[str, tuple[float, int]] = {}  # scope -> (time, waited ns)
        self._group_scope: dict[int, str] = {}  # profiled pass: group -> scope name
        # Profiled pass: group -> (first unpack time, ns waited for the store until then).
        self._unpack_marks: dict[int, tuple[float, int]] = {}
        self._last_unpack = (0.0, 0)
        self.first_planned_pass = 0  # the pass that first followed the plan
        #: The cost of handing memory back and faulting it in, measured on the profiled sizes.
        self.release_cost = ReleaseCostProbe(self.sizes)
        self.write_bandwidth = write_bandwidth
        self.read_bandwidth: float | None = None
        #: The training thread's measured cost per offloaded byte (ns), planned with.
        self.offload_ns_per_byte: float | None = None
        #: After a profile on CPU: why this process should enable huge pages, or None.
        self.huge_pages_advice: str | None = None
        #: What the profiled steps' clock waits on before reading the time (a GPU module's
        #: queued kernels; None on CPU); set at each forward's start.
        self.sync: Callable[[], None] | None = None

    def clock(self) -> float:
        """Seconds, for the profiled steps' scope times: on a GPU, after the work queued so
        far has run (``torch.cuda.synchronize``). Kernels run asynchronously, so without the
        wait a scope's forward and backward would measure how long queueing its kernels took,
        and the plan would hide I/O behind compute that had not happened yet. Only profiled
        steps wait; planned steps run as queued."""
        if self.sync is not None:
            self.sync()
        return time.perf_counter()

    def forget(self) -> None:
        """Drop what the last step measured (a warm-up step's times are not the training's)."""
        self.profile.clear()
        self.sizes.clear()
        self.unscoped_bytes = 0
        self._scope_start.clear()
        self._group_scope.clear()
        self._unpack_marks.clear()
        self._last_unpack = (0.0, 0)

    def scope_entered(self, name: str, group: int) -> None:
        """Scope ``name`` opened ``group``: while profiling, once the last scope's writes are
        done, its forward starts now (the time the cache waits for the store from now on is
        left out of the scope's time)."""
        if not self.active:
            return
        self._settle()
        self._group_scope[group] = name
        self._scope_start[name] = (self.clock(), self._stats.waited_ns())

    def scope_left(self, name: str) -> None:
        """Scope ``name``'s forward ended now."""
        if self.active and name in self._scope_start:
            waited_ns = self._stats.waited_ns()
            rec = self.profile.setdefault(name, [0.0, 0.0])
            start, waited_before = self._scope_start.pop(name)
            rec[0] += max(self.clock() - start - (waited_ns - waited_before) * 1e-9, 0.0)

    def record_of(self, scope_stack: list[str]) -> list[float] | None:
        """Where the innermost scope's saved bytes add up (None: profiling no scope)."""
        if self.active and scope_stack:
            return self.profile.setdefault(scope_stack[-1], [0.0, 0.0])
        return None

    def saved(self, rec: list[float] | None, nbytes: int, threshold: int) -> None:
        """A new storage of ``nbytes`` was saved in the scope of ``rec`` (None: in none)."""
        if rec is None:
            self.unscoped_bytes += nbytes
        else:
            rec[1] += nbytes
        if nbytes >= threshold:
            self.sizes.append(nbytes)

    def saved_bytes(self) -> int:
        """The bytes the pass being profiled saved so far (every new storage)."""
        return int(sum(rec[1] for rec in self.profile.values())) + self.unscoped_bytes

    def unpacked(self, group: int) -> None:
        """Backward unpacked a tensor of the profiled pass's ``group``."""
        waited_ns = self._stats.waited_ns()
        self._last_unpack = (self.clock(), waited_ns)
        self._unpack_marks.setdefault(group, self._last_unpack)

    def finish(
        self,
        store: Callable[[], TensorStore],
        module: nn.Module | None,
        scope_names: list[str],
        budget: int = 0,
    ) -> Plan:
        """After the profiled step: plan from its measured times and the store's bandwidth
        (measured in ``store()`` unless given); ``module``'s devices decide the price of an
        offloaded byte; ``budget`` (bytes, 0: none) makes it a budgeted plan
        (:func:`~hector.passes.offload_model.plan_within_budget`). Profiling ends.

        Runs when the next forward starts, so the profiled step's backward (when it ran) is
        measured too; otherwise backward is taken as twice the forward.
        """
        from .plan import measure_store_bandwidth, profile_from

        if self.write_bandwidth is None or self.read_bandwidth is None:
            write, read = _bandwidth_moved(store()) or measure_store_bandwidth(store())
            self.write_bandwidth = self.write_bandwidth or write
            self.read_bandwidth = self.read_bandwidth or read
        on_cpu = module is None or device_types(module) <= {"cpu"}
        if on_cpu and self._host.refaults_per_offloaded_byte:
            self._advise_huge_pages()  # its memory is handed back and faulted in again
        if self.offload_ns_per_byte is None:
            refaults = self._host.refaults_per_offloaded_byte if on_cpu else 0
            self.offload_ns_per_byte = refaults * self.release_cost.cost() if refaults else 0.0
        scopes = profile_from(scope_names, self.profile)
        plan = Plan.from_measurements(
            scopes,
            self._backward_ns(scopes),
            self.write_bandwidth,
            self.read_bandwidth,
            overhead_target=self._overhead_target,
            ahead=max(self._ahead, 1),
            offload_ns_per_byte=self.offload_ns_per_byte,
            trim_heap=self._host.trims_heap_per_step and libc_heap.heap_free_bytes() is not None,
            memory_budget=budget,
            unscoped=self.unscoped_bytes,
        )
        self.active = False
        if budget and (plan.modelled_peak or 0) > budget:
            warnings.warn(
                f"hector.offload: memory_budget={budget} bytes is below what offloading every "
                f"scope holds ({plan.modelled_peak} bytes modelled: the bytes saved outside every "
                "scope and the read-back window); every scope is offloaded. Raise the budget, or "
                "offload finer scopes (granularity='layer')",
                MemoryBudgetWarning,
                3,
            )
        return plan

    def _advise_huge_pages(self) -> None:
        """Tell the user, once, when the profiled step's activations are large enough for
        PyTorch's huge-page allocation and this process does not have it
        (:func:`~hector.offload.hugepages.huge_pages_advice`; :attr:`huge_pages_advice`)."""
        from hector.runtime.hugepages import huge_pages_advice

        self.huge_pages_advice = huge_pages_advice(byte_weighted_median(self.sizes))
        if self.huge_pages_advice is not None:
            warnings.warn(f"hector.offload: {self.huge_pages_advice}", HugePagesAdvice, 3)

    def _backward_ns(self, scopes: list[Any]) -> list[float]:
        """Each scope's backward time in the profiled step: from the first unpack of its group
        to the first unpack of the group backward reached next, less what it waited for the
        store (2x forward when unmeasured)."""
        marks = sorted(self._unpack_marks.items(), key=lambda kv: kv[1])
        spent: dict[str, float] = {}
        for k, (group, (at, waited)) in enumerate(marks):
            end, waited_end = marks[k + 1][1] if k + 1 < len(marks) else self._last_unpack
            name = self._group_scope.get(group)
            if name is not None:
                ns = max((end - at) * 1e9 - (waited_end - waited), 0.0)
                spent[name] = spent.get(name, 0.0) + ns
        return [spent.get(s.name, 2.0 * s.forward_ns) for s in scopes]
