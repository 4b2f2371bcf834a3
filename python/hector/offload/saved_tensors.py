"""The saved-tensor hooks of a tensor cache: what autograd saves goes in, backward gets it back.

:class:`SavedTensorHooks` holds the pair of functions ``torch.autograd.graph.saved_tensors_hooks``
calls. ``pack`` (forward) leaves parameters, buffers and tensors that are not strided CPU or
CUDA tensors as they are; every other saved tensor is grouped by *storage* (views of one
storage are saved once) and replaced by a :class:`~hector.offload.scheduler.SavedHandle`, the
storage kept in memory or, from ``threshold`` bytes and where the policy decides so, written to
the store. ``unpack`` (backward) rebuilds the same view from wherever its bytes are. The policy
decides per scope: ``"none"`` keeps, ``"all"`` (and the adaptive policy's profiled steps)
offloads, a plan gives each scope's decision.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import torch
from torch import nn

from hector.runtime.offload_entries import Entry

from .budget import MemoryBudget
from .compiled import eager
from .heap_trim import HeapTrims
from .plan import Plan
from .profiler import StepProfiler
from .scheduler import OffloadScheduler, SavedHandle
from .scope_tracker import ScopeTracker
from .stats import CacheStatistics

__all__ = ["SavedTensorHooks"]


def _eligible(t: torch.Tensor) -> bool:
    """Whether ``t`` may be offloaded at all: a strided CPU or CUDA tensor, no parameter."""
    return (
        t.layout == torch.strided
        # type() first: a Parameter's isinstance check runs Python code (its metaclass).
        and (type(t) is torch.Tensor or not isinstance(t, nn.Parameter))
        and t.device.type in ("cpu", "cuda")
    )


class SavedTensorHooks:
    """The pack and unpack hooks of one cache (see the module), and the policy they follow.

    Args:
        policy: ``"all"``, ``"none"``, ``"adaptive"`` or ``"plan"`` (``plan`` given).
        plan: the plan followed (None: none yet, or none to follow).
        threshold: storages smaller than this many bytes stay in memory.
        scheduler, stats, profiler, heap_trims, scopes, budget: the cache's parts.
    """

    def __init__(
        self,
        policy: str,
        plan: Plan | None,
        threshold: int,
        *,
        scheduler: OffloadScheduler,
        stats: CacheStatistics,
        profiler: StepProfiler,
        heap_trims: HeapTrims,
        scopes: ScopeTracker,
        budget: MemoryBudget,
    ) -> None:
        self.policy = policy
        self.plan = plan
        self.threshold = threshold
        self._scheduler = scheduler
        self._stats = stats
        self._profiler = profiler
        self._trims = heap_trims
        self._scopes = scopes
        self._budget = budget
        self._param_ptrs: set[int] = set()
        #: The hooks as ``saved_tensors_hooks`` calls them: eager wherever they are called from.
        self.eager = (eager(self.pack), eager(self.unpack))

    def keep_parameters(self, module: nn.Module | None) -> bool:
        """Keep ``module``'s parameters and buffers as they are now (they may have moved since
        the cache was made); whether any is on a GPU."""
        ptrs: set[int] = set()
        on_gpu = False
        if module is not None:
            for t in itertools.chain(module.parameters(), module.buffers()):
                ptrs.add(t.untyped_storage().data_ptr())
                on_gpu = on_gpu or t.device.type == "cuda"
        self._param_ptrs = ptrs
        return on_gpu

    def _decision(self) -> str:
        """``"offload"`` or ``"keep"``: the policy's decision for a tensor saved now."""
        stack = self._scopes.stack
        if self.policy == "none":
            return "keep"
        if self._profiler.active or self.policy == "all":  # adaptive: profile while offloading
            return "offload"
        assert self.plan is not None
        if not stack:
            return "keep"
        return self.plan.decisions.get(stack[-1], "keep")

    def pack(self, t: torch.Tensor) -> Any:
        """Forward saves ``t``: ``t`` itself (kept as is) or a handle of its storage."""
        timing = self._stats.timing
        start = time.perf_counter_ns()
        try:
            return self._pack(t)
        finally:
            timing["pack_ns"] += time.perf_counter_ns() - start
            timing["hook_calls"] += 1

    def _pack(self, t: torch.Tensor) -> Any:
        scheduler = self._scheduler
        scheduler.store.check_open()
        if not _eligible(t):
            return t
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr == 0 or ptr in self._param_ptrs:
            return t
        nbytes = storage.nbytes()
        with scheduler.lock:
            scheduler.drain()
            scopes = self._scopes
            rec = self._profiler.record_of(scopes.stack)
            key = (str(t.device), ptr)
            entry = scheduler.entries.live_alias(key)
            if entry is not None:
                self._stats.counters["aliased"] += 1
            else:
                offload = nbytes >= self.threshold and self._decision() == "offload"
                budget = self._budget.bytes
                if budget is not None:
                    scheduler.make_room(nbytes, budget)
                group = (scopes.pass_, scopes.group)
                entry = scheduler.save(storage, nbytes, key, t.device, group, offload)
                if self._profiler.active:
                    self._profiler.saved(rec, nbytes, self.threshold)
            entry.refs += 1
            return SavedHandle(scheduler, entry, t)

    def unpack(self, h: Any) -> torch.Tensor:
        """Backward needs a saved tensor: ``h`` itself, or the view its handle describes."""
        if self._trims.pending is not None:
            self._trims.as_backward_starts(self.plan)
        if not isinstance(h, SavedHandle):
            return h
        timing = self._stats.timing
        start = time.perf_counter_ns()
        try:
            return self._unpack(h)
        finally:
            timing["unpack_ns"] += time.perf_counter_ns() - start
            timing["hook_calls"] += 1

    def _unpack(self, h: SavedHandle) -> torch.Tensor:
        e: Entry = h.entry
        dtype, size, stride, offset = h.dtype, h.size, h.stride, h.offset
        if self._profiler.active and e.group[0] == self._profiler.pass_:
            self._profiler.unpacked(e.group[1])
        # The traceback of an error raised below keeps this frame: it must not keep the
        # handle (a saved tensor close() counts as in flight) alive.
        del h
        storage, shift = self._scheduler.load(e)
        out = torch.empty((0,), dtype=dtype, device=storage.device)
        return out.set_(storage, offset + shift // out.element_size(), size, stride)
