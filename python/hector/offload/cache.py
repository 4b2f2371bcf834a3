"""The tensor cache: saved activations offloaded to the native store, read back for backward.

:class:`TensorCache` installs ``torch.autograd.graph.saved_tensors_hooks``. ``pack`` starts an
asynchronous write of the tensor's storage and returns a small handle; ``unpack`` returns the
tensor from memory (a write still in flight, or a prefetched read) or waits for its read.
Every storage is stored once, however many views of it autograd saves. Parameters, buffers,
tensors below ``threshold`` bytes and scopes the plan keeps stay in memory.

Scopes are modules (by default the top-level blocks of the model, ModuleLists expanded);
forward pre-/post-hooks track which scope saved each tensor. Every time a scope starts a new
*group* is opened; when backward unpacks a tensor of group ``g`` the cache starts reading groups
``g``, ``g-1``, …, ``g-ahead`` (reverse forward order), and when the forward of the whole model
ends it prefetches its last groups (a group still being written is then simply kept in memory).

Lifecycle (docs/offload.md, "Lifecycle"): a cache is *open* (no saved tensor outstanding), *in
a step* (saved tensors still referenced by autograd) or *closed*. :meth:`TensorCache.close` in a
step is an error unless ``force=True`` (which discards the saved tensors: the pending backward
then fails with :class:`OffloadError`); a closed cache never reopens its store.

This module puts the cache together and follows each step of the model (its forward's start
and end); the options are :mod:`.options`', the pack and unpack hooks :mod:`.saved_tensors`',
the scopes :mod:`.scope_tracker`'s, the store's I/O :mod:`.scheduler`'s (reading back
:mod:`.read_back`'s), the adaptive policy's profile and plan :mod:`.profiler`'s, what becomes
of freed host memory :mod:`.host_policy`'s and :mod:`.heap_trim`'s, the counters :mod:`.stats`'.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from types import TracebackType
from typing import Any, Generic, TypeVar, cast, overload

import torch
from torch import nn
from torch._dynamo.eval_frame import skip_code

from hector.runtime import libc_heap
from hector.runtime.offload import OffloadIOError, TensorStore

from .budget import MemoryBudget
from .compiled import CompiledRegions, eager
from .errors import HugePagesAdvice, OffloadError
from .heap_trim import TRIM_POINTS as TRIM_POINTS
from .heap_trim import TRIM_RULES as TRIM_RULES
from .heap_trim import TrimPoint, TrimRule
from .host_policy import CPU_ALLOCATOR_ENV as CPU_ALLOCATOR_ENV
from .host_policy import RELEASE_MODES as RELEASE_MODES
from .host_policy import HostMemory, HostMemoryPolicy, measure_release_cost
from .options import POLICIES as POLICIES
from .options import CacheOptions
from .plan import OVERHEAD_TARGET, Plan
from .profiler import follow_plan
from .saved_tensors import SavedTensorHooks
from .scope_tracker import ScopeTracker
from .scopes import GRANULARITIES as GRANULARITIES
from .scopes import default_scopes
from .stats import CacheStatistics

__all__ = [
    "HugePagesAdvice",
    "OffloadError",
    "OffloadedModule",
    "TensorCache",
    "default_scopes",
    "measure_release_cost",
]

#: Kept here for the benchmarks' heap traces (:func:`hector.runtime.libc_heap.mallinfo2`).
_mallinfo2 = libc_heap.mallinfo2

T = TypeVar("T")


class _KeptBy(Generic[T]):
    """A :class:`TensorCache` attribute kept by one of the cache's parts (``part``, a dotted
    path from the cache): reading or writing it reads or writes the part's attribute of the
    same name (or ``name``); ``read_only`` ones cannot be written."""

    def __init__(self, part: str, name: str = "", *, read_only: bool = False) -> None:
        self._path = part.split(".")
        self._name = name
        self._read_only = read_only

    def __set_name__(self, owner: type, name: str) -> None:
        self._public = name
        self._name = self._name or name

    def _part(self, obj: object) -> Any:
        return functools.reduce(getattr, self._path, obj)

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> _KeptBy[T]: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> T | _KeptBy[T]:
        if obj is None:
            return self
        return cast(T, getattr(self._part(obj), self._name))

    def __set__(self, obj: object, value: T) -> None:
        if self._read_only:
            raise AttributeError(f"{self._public} is read-only")
        setattr(self._part(obj), self._name, value)


class TensorCache:
    """Offload saved activations to SSD through the native store.

    Args:
        policy: ``"all"`` (offload every eligible tensor), ``"none"`` (keep everything),
            ``"adaptive"`` (profile the first steps offloading everything, each scope waiting
            for the last one's writes, then plan with the adaptive rule — or the budget rule
            under ``memory_budget`` — and follow the plan), a :class:`Plan`, or the path of a
            plan file (a ``placement`` module written by :meth:`Plan.save`).
        memory_budget: ``"adaptive"``: the saved activations the cache may hold in memory at
            any moment of a step (kept, still being written, or read back): bytes (an int), or
            a fraction of what one step saves (a float in (0, 1], measured by the first
            forward). The plan keeps what fits and offloads the rest
            (:func:`~hector.passes.offload_model.plan_within_budget`); from the first step a
            forward waits for writes in flight rather than hold more, and backward reads
            ahead only within it. :attr:`step_peaks` holds each step's measured peak; a budget
            below what offloading every scope holds warns (:class:`MemoryBudgetWarning`).
            None (default): no bound, the plan follows ``overhead_target``.
        module: the model whose parameters/buffers stay in memory and whose scopes are tracked
            (None: no scopes; every eligible tensor follows ``"all"``/``"none"``).
        scopes: ``(name, module)`` scopes to track instead of :func:`default_scopes`.
        threshold: tensors whose storage is smaller than this many bytes stay in memory.
        ahead: how many groups (scopes) before the one backward is in are prefetched.
        root, threads, chunk_bytes, direct: passed to :class:`TensorStore` (created lazily,
            one per process, so one per rank under ``torch.distributed``).
        on_write_error: ``"keep"`` (the tensor stays valid in memory, a ``RuntimeWarning`` is
            issued and the error recorded in :attr:`errors`, once per failed write) or
            ``"raise"`` (the forward that started the failed write raises the first
            :class:`OffloadIOError` when it ends, whenever the write completed; see
            :meth:`flush`).
        record_timeline: keep ``(seconds, resident bytes)`` after each event in
            :attr:`timeline`.
        readahead_bytes: the read-ahead window of backward, in bytes: the next groups' reads
            start while the offloaded bytes held in memory (read back or being read) plus the
            group to read stay within it (a group always starts when nothing is held, so
            backward never waits on the window). ``"auto"`` (default): 1.5x the largest group
            offloaded so far, so the next group's read starts once backward has released
            about half of the group it is in. ``None``: ``ahead`` groups at once (no bound).
        release_memory: how the memory of offloaded activations leaves the process (CPU).
            ``"auto"`` (default): when the cache offloads and the module holds CPU tensors,
            install Hector's caching CPU allocator (process-wide, default limits; unless it
            already serves the process) and become ``"allocator"``, described last; where it
            cannot be built, or ``$HECTOR_CPU_ALLOCATOR`` is ``pytorch``, become ``"advise"``
            (with a warning in the first case). ``True``/``"mmap"``: fix glibc's
            mmap threshold (``mallopt(M_MMAP_THRESHOLD)``, process-wide, once) so the memory
            of an offloaded activation returns to the operating system when it is freed;
            otherwise glibc
            raises the threshold after the first large free and keeps freed activations in its
            heap, and the process's peak resident memory barely falls (docs/offload.md, "Peak
            memory"). The price is a page fault per fresh page of every large allocation,
            offloaded or not. ``"advise"``: leave the threshold; when the cache is the last
            owner of an offloaded activation whose write is done (or of a read-back buffer
            backward is done with), it hands the whole pages of its memory back
            (``madvise(MADV_DONTNEED)``) before freeing it, so only offloaded bytes leave the
            process and fault in again, and other allocations keep reusing the heap; memory
            someone else still holds is handed back once they let go (checked at every hook).
            Once per forward that offloaded it also calls ``malloc_trim``, when that
            forward's backward starts (after whatever the loop freed in between, typically
            last step's gradients): always without a plan (``"all"``), and under a plan
            when the heap's free bytes, faulted in again later, fit the plan's trim budget;
            where they fit at the forward's end but not when backward starts, three steps in
            a row (decided on what the steps measured, not on the probe alone), later steps
            trim at the forward's end (:attr:`trim_point`).
            ``"trim"``: leave the threshold, call ``malloc_trim`` each time 32 MiB of
            offloaded activations were freed. ``False``: none of these. ``"allocator"``
            (what ``"auto"`` and ``"advise"`` become when Hector's caching CPU allocator
            serves the process, :func:`hector.offload.enable_caching_allocator`): nothing
            either; freed activations go back to that allocator, which gives them to the next
            block of their size and unmaps what its cache limit does not hold. Under it the
            process's peak falls with the saved bytes (the heavier GPT: saved activations
            -52%, peak RSS -80%; docs/offload.md, the caching allocator's measured results).
            Each value names a :class:`~hector.offload.host_policy.HostMemoryPolicy`
            (:func:`~hector.offload.host_policy.host_policy`); a policy object may be passed
            instead (``AdvisePages()``, ``PeriodicTrim()``, ...).
        overhead_target: ``"adaptive"``: the step-time overhead over keep-all the plan may
            spend on recomputation, exposed I/O, the offloaded bytes' page faults and heap
            trims (a fraction, default ``plan.OVERHEAD_TARGET``, 0.10; the model leaves out
            the hooks themselves, a few percent of a small model's step).
        granularity: without ``scopes``: ``"auto"`` (default), ``"block"`` (the model's
            repeated blocks, at any depth) or ``"layer"`` (each block's children), see
            :func:`default_scopes`.
        warmup_steps: ``"adaptive"``: forward passes (with their backward) kept whole and
            not measured before the profiled one (default 2). The first steps of a process
            run slower while the allocator and caches warm up (the small GPT's first step
            took 1.2-1.6x, its second 1.1-1.3x a later one): a plan measured on them takes
            the step for longer than it is, counts its costs as a smaller fraction of it, and
            spends more than its target.
        trim_point: ``"advise"``: where the once-per-step heap trim runs (see
            ``release_memory``): ``"backward start"`` (default) also hands back what the loop
            frees between forward and backward (last step's gradients, under
            ``zero_grad(set_to_none=True)`` before ``backward()``): the heavier GPT's peak RSS
            fell 40-46% where ``"forward end"`` (which hands back less) gave 34-39%; in the
            same runs the step times differed by -6 to +7%, within the host's noise
            (docs/offload.md, "Where the peak is"). A
            :class:`~hector.offload.heap_trim.TrimPoint` may be passed instead of its name.
        trim_rule: how a plan's heap trims are decided. ``"model"`` (default): the trim's
            modelled cost (its bytes at the probe's price) within the plan's trim budget.
            ``"measured"``: once the steps tell it (:class:`FaultCostMeter`), what the
            offloading steps spent in the kernel and the hooks against what the plan
            budgeted for faults and trims, at training's own price per faulted byte, and
            the trim point moves only on measured misses. On the heavier GPT it kept the trim
            as backward starts in 13 runs of 16, but in two runs of one record it stopped
            trimming after costly steps (RSS −16% and −26%), a worse floor than the model's
            (docs/offload.md, "Trims decided by what the steps spend"). A
            :class:`~hector.offload.heap_trim.TrimRule` (``ModelTrimRule()``,
            ``MeasuredTrimRule()``) may be passed instead of its name.

    The cache itself follows the steps of the model (its forward's start and end) and its
    lifecycle; its parts do the rest: :attr:`options` (the options, checked,
    :class:`~hector.offload.options.CacheOptions`), :attr:`saved_hooks` (the pack and unpack
    hooks and the policy they follow, :class:`~hector.offload.saved_tensors.SavedTensorHooks`),
    :attr:`scope_tracker` (the pass, group and scope of the forward,
    :class:`~hector.offload.scope_tracker.ScopeTracker`), :attr:`scheduler` (the store's I/O,
    :class:`~hector.offload.scheduler.OffloadScheduler`), :attr:`profiler` (the adaptive
    policy's measurements and plan, :class:`~hector.offload.profiler.StepProfiler`),
    :attr:`heap_trims` (:class:`~hector.offload.heap_trim.HeapTrims`), :attr:`host_memory`
    (:class:`~hector.offload.host_policy.HostMemory`), :attr:`budget`
    (:class:`~hector.offload.budget.MemoryBudget`) and :attr:`statistics`
    (:class:`~hector.offload.stats.CacheStatistics`). Attributes such as :attr:`plan`,
    :attr:`counters`, :attr:`errors` or :attr:`trim_yield` are those parts' own, read and
    written through the cache.
    """

    # Attributes kept by the cache's parts (see the class docstring).
    counters: _KeptBy[dict[str, int]] = _KeptBy("statistics")
    timing: _KeptBy[dict[str, int]] = _KeptBy("statistics")
    read_wait_s: _KeptBy[float] = _KeptBy("statistics")
    resident_bytes: _KeptBy[int] = _KeptBy("statistics")
    peak_resident_bytes: _KeptBy[int] = _KeptBy("statistics")
    record_timeline: _KeptBy[bool] = _KeptBy("statistics")
    timeline: _KeptBy[list[tuple[float, int]]] = _KeptBy("statistics")
    errors: _KeptBy[list[OffloadIOError]] = _KeptBy("scheduler")
    ahead: _KeptBy[int] = _KeptBy("scheduler.reads")
    readahead_bytes: _KeptBy[int | str | None] = _KeptBy("scheduler.reads")
    on_write_error: _KeptBy[str] = _KeptBy("scheduler")
    released_bytes: _KeptBy[int] = _KeptBy("host_memory")
    release_memory: _KeptBy[bool | str] = _KeptBy("host_memory.policy", "label", read_only=True)
    write_bandwidth: _KeptBy[float | None] = _KeptBy("profiler")
    read_bandwidth: _KeptBy[float | None] = _KeptBy("profiler")
    offload_ns_per_byte: _KeptBy[float | None] = _KeptBy("profiler")
    huge_pages_advice: _KeptBy[str | None] = _KeptBy("profiler")
    trim_yield: _KeptBy[float] = _KeptBy("heap_trims")
    trim_point: _KeptBy[str] = _KeptBy("heap_trims")
    trim_ns_per_byte: _KeptBy[float | None] = _KeptBy("heap_trims")
    trim_cost_source: _KeptBy[str | None] = _KeptBy("heap_trims")
    trim_rule: _KeptBy[str | None] = _KeptBy("heap_trims")
    last_trim_decision: _KeptBy[dict[str, Any] | None] = _KeptBy("heap_trims")
    step_peaks: _KeptBy[Any] = _KeptBy("statistics", read_only=True)
    budget_bytes: _KeptBy[int | None] = _KeptBy("budget", "bytes", read_only=True)
    policy: _KeptBy[str] = _KeptBy("saved_hooks")
    plan: _KeptBy[Plan | None] = _KeptBy("saved_hooks")
    threshold: _KeptBy[int] = _KeptBy("saved_hooks")
    scope_names: _KeptBy[list[str]] = _KeptBy("scope_tracker", "names")
    overhead_target: _KeptBy[float] = _KeptBy("options", read_only=True)

    def __init__(
        self,
        policy: str | Plan = "all",
        module: nn.Module | None = None,
        *,
        scopes: list[tuple[str, nn.Module]] | None = None,
        threshold: int = 64 * 1024,
        ahead: int = 1,
        root: str | None = None,
        threads: int = 4,
        chunk_bytes: int = 4 << 20,
        direct: bool = True,
        on_write_error: str = "keep",
        record_timeline: bool = False,
        write_bandwidth: float | None = None,
        readahead_bytes: int | str | None = "auto",
        release_memory: bool | str | HostMemoryPolicy = "auto",
        overhead_target: float = OVERHEAD_TARGET,
        granularity: str = "auto",
        warmup_steps: int = 2,
        trim_point: str | TrimPoint = "backward start",
        trim_rule: str | TrimRule = "model",
        memory_budget: int | float | None = None,
        compile_callback: Any | None = None,
    ) -> None:
        self.options = options = CacheOptions(
            policy=policy,
            memory_budget=memory_budget,
            threshold=threshold,
            ahead=ahead,
            root=root,
            threads=threads,
            chunk_bytes=chunk_bytes,
            direct=direct,
            on_write_error=on_write_error,
            record_timeline=record_timeline,
            write_bandwidth=write_bandwidth,
            readahead_bytes=readahead_bytes,
            release_memory=release_memory,
            overhead_target=overhead_target,
            granularity=granularity,
            warmup_steps=warmup_steps,
            trim_point=trim_point,
            trim_rule=trim_rule,
        )
        #: Why ``release_memory="auto"`` could not install the caching allocator ("" if not).
        host, self.cpu_allocator_note = options.host_policy(module)
        self.module = module
        self.budget = MemoryBudget(memory_budget)
        self.statistics = CacheStatistics(record_timeline)
        self.host_memory = HostMemory(host, self.statistics)
        self.scheduler = options.scheduler(self.statistics, self.host_memory, self.budget)
        self.profiler = options.profiler(host, self.statistics, self.scheduler.wait_for_writes)
        self.heap_trims = options.heap_trims(host, self.statistics, self.profiler.release_cost)
        self.scope_tracker = ScopeTracker(
            module, self.profiler.scope_entered, self.profiler.scope_left, scopes is not None
        )
        self.saved_hooks = SavedTensorHooks(
            options.policy_name,
            options.plan,
            threshold,
            scheduler=self.scheduler,
            stats=self.statistics,
            profiler=self.profiler,
            heap_trims=self.heap_trims,
            scopes=self.scope_tracker,
            budget=self.budget,
        )
        self._hooks: list[Any] = []  # the model's own forward hooks
        self._wrapped: list[tuple[nn.Module, Any]] = []
        self.regions = CompiledRegions(  # the scopes as regions under torch.compile
            self._wrapped, self.scope_tracker.for_regions, compile_callback
        )
        self._ctx: contextlib.AbstractContextManager[Any] | None = None
        if module is not None:
            self._attach(module, scopes)

    # ---- set-up -------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """True once :meth:`close` succeeded; a closed cache cannot be used again."""
        return self.scheduler.closed

    @property
    def store(self) -> TensorStore:
        """The process's store (opened on first use, never reopened once closed).

        Raises:
            OffloadError: the cache (or its store) was closed.
        """
        return self.scheduler.store.get()

    def _attach(self, module: nn.Module, scopes: list[tuple[str, nn.Module]] | None) -> None:
        """Follow ``module``'s steps and track ``scopes`` (None: :func:`default_scopes`)."""
        self._hooks.append(module.register_forward_pre_hook(eager(self._root_pre)))
        self._hooks.append(module.register_forward_hook(eager(self._root_post)))
        if scopes is None:
            scopes = default_scopes(module, self.options.granularity)
        self.scope_tracker.track(scopes)
        if self.plan is not None:
            self._wrapped += follow_plan(self.plan, self.scope_tracker.scopes)

    def _refresh_params(self) -> None:
        on_gpu = self.saved_hooks.keep_parameters(self.module)
        # Where the module is now (it may have moved since it was wrapped).
        self.profiler.sync = torch.cuda.synchronize if on_gpu else None

    def _new_pass(self) -> None:
        with self.scheduler.lock:
            self.scope_tracker.new_pass()
            self.statistics.start_pass()
            self.heap_trims.trimmed_at = None

    def _root_pre(self, module: nn.Module, args: Any) -> None:
        if not torch.is_grad_enabled():
            return
        profiler = self.profiler
        pass_ = self.scope_tracker.pass_
        # The step that just ended; not the first steps, which fault in what they
        # allocate (the warm-up steps: the small GPT's second step faulted 2.6x its third),
        # nor the first planned one, which starts with the keep-everything steps' garbage.
        warming_up = profiler.active and bool(profiler.profile) and profiler.warmup_left > 0
        atypical = pass_ <= 1 or warming_up or pass_ == profiler.first_planned_pass
        offloaded = None if atypical else self.statistics.offloaded_this_pass()
        self.heap_trims.step_ended(offloaded, self.statistics.own_hook_ns_this_pass())
        if profiler.active and profiler.profile:
            if profiler.warmup_left > 0:  # a warm-up step: measured, then forgotten
                profiler.warmup_left -= 1
                profiler.forget()
            else:  # after the profiled step's backward, when it ran
                self.plan = profiler.finish(
                    lambda: self.store, self.module, self.scope_names, self.budget_bytes or 0
                )
                self._wrapped += follow_plan(self.plan, self.scope_tracker.scopes)
                self.heap_trims.fault_cost.restart()  # the probes are not the next step's cost
                profiler.first_planned_pass = pass_ + 1
        self._refresh_params()
        self._new_pass()
        if profiler.active:
            profiler.pass_ = self.scope_tracker.pass_

    def _root_post(self, module: nn.Module, args: Any, output: Any) -> None:
        if not torch.is_grad_enabled():
            return
        if self.budget.pending:
            self.budget.measured(self.profiler.saved_bytes())  # the first forward's: keep-all's
        # Backward starts with the last groups: get them in (or keep them) now.
        tracker = self.scope_tracker
        with self.scheduler.lock:
            self.scheduler.reads.read_ahead((tracker.pass_, tracker.group))
        if self.statistics.offloaded_this_pass():
            self.heap_trims.at_forward_end(self.plan)
        # The end of the forward is where on_write_error="raise" reports, whatever the timing.
        try:
            self.flush()
        except BaseException:
            self.scheduler.step_failed(self.scope_tracker.pass_)
            raise

    # ---- context manager ----------------------------------------------------------------------
    def hooks(self) -> torch.autograd.graph.saved_tensors_hooks:
        """The ``saved_tensors_hooks`` context that routes saved tensors through this cache."""
        return torch.autograd.graph.saved_tensors_hooks(*self.saved_hooks.eager)

    def __enter__(self) -> TensorCache:
        self.scheduler.store.check_open()
        if self.module is None:
            self._new_pass()
        self._ctx = self.hooks()
        self._ctx.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._ctx is not None:
            ctx, self._ctx = self._ctx, None
            ctx.__exit__(exc_type, exc, tb)
        if exc_type is not None:
            self.scheduler.step_failed(self.scope_tracker.pass_)
        elif not self.closed:
            try:
                self.flush()  # leaving the block ends the forward: report write errors here
            except BaseException:
                self.scheduler.step_failed(self.scope_tracker.pass_)
                raise

    def flush(self) -> None:
        """With ``on_write_error="raise"``: wait for the writes in flight and raise a failure.

        Called at the end of each forward of the attached module and when a ``with cache:``
        block is left; call it yourself after code run under :meth:`hooks` directly. With
        ``"keep"`` (failures are warnings) and on a closed cache it does nothing.

        Raises:
            OffloadIOError: (``on_write_error="raise"`` only) the first write that failed since
                the last flush; the others are in :attr:`errors`.
        """
        self.scheduler.flush()

    def saved_tensors_alive(self) -> int:
        """How many saved storages autograd still references (> 0: a step is in flight).

        Storages of a forward or backward that raised are not counted: that step is over,
        even while the exception's traceback still holds its graph.
        """
        return self.scheduler.saved_tensors_alive()

    def close(self, *, force: bool = False) -> None:
        """Remove the hooks, undo recompute wrappers, close the store (deleting its files).

        Idempotent. A closed cache stays closed: using it again raises :class:`OffloadError`.

        Args:
            force: close even while a step is in flight; its saved tensors are discarded and
                the pending backward raises :class:`OffloadError`.

        Raises:
            OffloadError: saved tensors are still referenced by autograd (a forward whose
                backward has not run) and ``force`` is false; nothing is changed then.
        """
        if self.closed:
            return
        if not force:
            self.scheduler.check_no_step_in_flight()
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        self.scope_tracker.remove()
        for m, original in reversed(self._wrapped):  # a module wrapped twice: the first last
            if getattr(original, "__self__", None) is m and "forward" in vars(m):
                delattr(m, "forward")  # its class's forward again
            else:
                m.forward = original
        self._wrapped.clear()
        self.scheduler.close()

    # ---- reporting ----------------------------------------------------------------------------
    def time_breakdown(self) -> dict[str, int]:
        """Nanoseconds spent in the hooks since creation, by part, measured.

        ``pack_ns`` / ``unpack_ns`` / ``release_ns`` are the whole hooks (release: a saved
        tensor freed by autograd); inside them ``submit_ns`` (starting store writes and reads),
        ``write_wait_ns`` (a released tensor whose write was still running), ``read_wait_ns``
        (backward waiting for a read), ``alloc_ns`` (read-back buffers), ``staging_ns`` (CUDA
        copies to pinned memory) and ``drain_ns`` (collecting completions); ``python_ns`` is
        the rest (the cache's own bookkeeping). ``trim_ns`` (heap trims, outside the hooks'
        figures) counts only the ``malloc_trim`` calls, not the page faults that bring the
        memory back later; ``outside_ns`` (also outside them) the profiler's waits for
        a scope's writes and the pages handed back then. The store's own per-phase counters
        (copies, checksums, its queues) are in ``stats()["store"]``.
        """
        return self.statistics.time_breakdown()

    def stats(self) -> dict[str, Any]:
        """Counters of the cache plus the store's I/O statistics."""
        out: dict[str, Any] = dict(self.counters)
        out["read_wait_s"] = self.read_wait_s
        out["timing"] = self.time_breakdown()
        out["resident_bytes"] = self.resident_bytes
        out["peak_resident_bytes"] = self.peak_resident_bytes
        out["memory_budget_bytes"] = self.budget_bytes
        out["step_peak_bytes"] = list(self.step_peaks)
        out["release_memory"] = self.release_memory
        if self.cpu_allocator_note:
            out["cpu_allocator_note"] = self.cpu_allocator_note
        out["released_bytes"] = self.released_bytes
        out["offload_ns_per_byte"] = self.offload_ns_per_byte
        out.update(self.heap_trims.report())
        out["huge_pages_advice"] = self.huge_pages_advice
        out.update(self.scheduler.store.report())
        return out

    @contextlib.contextmanager
    def step(self) -> Iterator[TensorCache]:
        """Context for one training step without a module (``with cache.step(): ...``)."""
        with self:
            yield self


class OffloadedModule(nn.Module):
    """A module whose forward runs under a :class:`TensorCache` (``hector.offload(model)``).

    Calling it runs ``module`` with the cache's saved-tensor hooks; backward then reads the
    offloaded activations back. ``cache`` exposes statistics and the plan; :meth:`close` (or
    leaving a ``with`` block) removes the hooks and deletes the store's files.
    """

    # Set with object.__setattr__ (a plain attribute, not a submodule); declared for readers.
    cache: TensorCache

    def __init__(self, module: nn.Module, cache: TensorCache) -> None:
        super().__init__()
        self.module = module
        object.__setattr__(self, "cache", cache)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the wrapped module with saved tensors routed through the cache.

        Raises:
            OffloadError: the model was closed.
        """
        cache = self.cache
        prior = cache.regions.enter()  # under torch.compile: the model by compiled regions
        try:
            if cache.closed:
                raise OffloadError(
                    "this offloaded model was closed; call the original model (`.module`) or "
                    "wrap it again with hector.offload(model, ...)"
                )
            with cache.hooks():
                try:
                    return self.module(*args, **kwargs)
                except BaseException:
                    cache.scheduler.step_failed(cache.scope_tracker.pass_)
                    raise
        finally:
            cache.regions.leave(prior)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` succeeded."""
        return self.cache.closed

    def close(self, *, force: bool = False) -> None:
        """Detach the cache from the module and delete its stored files.

        See :meth:`TensorCache.close`: during a step this raises unless ``force=True``.
        """
        self.cache.close(force=force)

    def __enter__(self) -> OffloadedModule:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Leaving on an exception must not hide it behind a "step in flight" error.
        self.close(force=exc_type is not None)


# Dynamo skips the offloaded forward's own frame (it switches Dynamo's callback), not the
# frames it calls (docs/offload-your-model.md, "Compiled models").
skip_code(OffloadedModule.forward.__code__)
