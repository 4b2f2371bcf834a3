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
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

import torch
from torch import nn

from hector.runtime import cpu_allocator
from hector.runtime.offload import OffloadIOError, TensorStore

from .fault_cost import FaultCostMeter
from .plan import OVERHEAD_TARGET, Plan

__all__ = [
    "HugePagesAdvice",
    "OffloadError",
    "OffloadedModule",
    "TensorCache",
    "default_scopes",
    "measure_release_cost",
]

POLICIES = ("adaptive", "all", "none")
#: Parts of the hooks' time, in ns: the whole pack/unpack hooks, what they spend submitting
#: I/O to the store, waiting for writes (a released tensor whose write is in flight) and reads,
#: allocating read-back buffers, staging copies (CUDA), polling completions and handing
#: pages back (``madvise``, inside the others); and, outside the hooks, the heap trims'
#: ``malloc_trim`` calls.
_TIMING_KEYS = (
    "pack_ns",
    "unpack_ns",
    "release_ns",
    "submit_ns",
    "write_wait_ns",
    "read_wait_ns",
    "alloc_ns",
    "staging_ns",
    "drain_ns",
    "madvise_ns",
    "trim_ns",
    "hook_calls",
)

#: Where the heap trim of a step that offloaded may run (``TensorCache(trim_point=...)``).
TRIM_POINTS = ("backward start", "forward end")
#: How a plan's heap trims are decided (``TensorCache(trim_rule=...)``).
TRIM_RULES = ("model", "measured")


class HugePagesAdvice(UserWarning):
    """An adaptive CPU offload's activations are large enough for huge pages, which this
    process does not have (:attr:`TensorCache.huge_pages_advice`)."""


class OffloadError(RuntimeError):
    """Misuse of the tensor cache (bad policy, plan not matching the model, closed cache)."""


_CLOSED_HINT = (
    "wrap the model again with hector.offload(model, ...) (or create a new TensorCache) to keep "
    "offloading, or call the unwrapped model"
)


#: How finely :func:`default_scopes` cuts a model into offload scopes.
GRANULARITIES = ("block", "layer")


def default_scopes(model: nn.Module, granularity: str = "block") -> list[tuple[str, nn.Module]]:
    """The forward scopes of ``model``: its top-level blocks, or (``granularity="layer"``)
    each block's children (a transformer block's norms, attention and MLP).

    Wrappers with a single child (``DistributedDataParallel``, ``OffloadedModule``) are looked
    through; ``ModuleList``/``Sequential`` children are expanded into their elements. Names are
    the qualified names inside ``model``. Layer scopes let a plan spend its overhead budget
    on part of a block; a tensor a block saves outside its children belongs to no scope and
    is kept.
    """
    if granularity not in GRANULARITIES:
        raise OffloadError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
    prefix = ""
    root = model
    while True:
        children = list(root.named_children())
        if len(children) != 1:
            break
        name, child = children[0]
        if isinstance(child, nn.ModuleList | nn.Sequential):
            break
        prefix += name + "."
        root = child
    scopes: list[tuple[str, nn.Module]] = []
    for name, child in root.named_children():
        if isinstance(child, nn.ModuleList | nn.Sequential):
            scopes += [(f"{prefix}{name}.{n}", c) for n, c in child.named_children()]
        else:
            scopes.append((prefix + name, child))
    if granularity == "layer":
        scopes = [
            (f"{name}.{n}", c) if n else (name, c)
            for name, block in scopes
            for n, c in (list(block.named_children()) or [("", block)])
        ]
    return scopes or [(prefix.rstrip(".") or "model", root)]


#: glibc's initial mmap threshold, fixed (``mallopt`` turns its dynamic raising off): blocks of
#: at least this size are mapped on their own and unmapped when freed.
_MMAP_THRESHOLD = 128 << 10
_M_MMAP_THRESHOLD = -3  # <malloc.h>
_allocator_fixed = False


#: ``release_memory="trim"``: hand freed heap memory back after this many bytes were freed.
_TRIM_EVERY = 32 << 20
RELEASE_MODES = (True, False, "auto", "advise", "mmap", "trim", "allocator")
#: ``release_memory="auto"`` leaves the process on PyTorch's own CPU allocator (``"advise"``)
#: when this environment variable says ``pytorch``; ``caching`` (or unset) installs Hector's.
CPU_ALLOCATOR_ENV = "HECTOR_CPU_ALLOCATOR"
_MADV_DONTNEED = 4  # <sys/mman.h>
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@functools.cache
def _libc() -> Any:
    """The C library (glibc) through ctypes, or None where it is not glibc (its allocator's
    own policy applies there)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        return libc
    except (OSError, AttributeError):
        return None


def _drop_pages(storage: torch.UntypedStorage) -> int:
    """Hand the whole pages inside ``storage``'s memory back to the operating system
    (``madvise(MADV_DONTNEED)``); the bytes released. Only for memory whose contents are dead:
    the caller is its last owner and frees it next, and the allocator's chunk headers lie
    outside the whole pages of the data (or are rewritten by ``free``, reading as zero)."""
    libc = _libc()
    ptr, nbytes = storage.data_ptr(), storage.nbytes()
    start = -(-ptr // _PAGE) * _PAGE
    end = (ptr + nbytes) // _PAGE * _PAGE
    if libc is None or end <= start:
        return 0
    return end - start if libc.madvise(start, end - start, _MADV_DONTNEED) == 0 else 0


#: The store's O_DIRECT block: it keeps byte i of an object at file offset (the written
#: address mod _BLOCK) + i, so a read into an address in that same phase moves whole blocks
#: straight into memory, and any other address goes through a chunk-sized copy buffer.
_BLOCK = 4096
#: Phases that keep every dtype's elements aligned in a shifted buffer (allocators give 64).
_PHASE_ALIGN = 64


def _in_phase_buffer(nbytes: int, phase: int, pin: bool) -> tuple[torch.Tensor, int]:
    """A ``nbytes`` uint8 read-back buffer whose address is ``phase`` mod :data:`_BLOCK`, and
    its byte offset in its storage: one block more, shifted (pinned memory: a plain
    allocation when it is in phase already, as page-aligned pinned blocks are). A phase that
    is not a multiple of :data:`_PHASE_ALIGN` gets a plain buffer (the store then copies)."""
    if phase % _PHASE_ALIGN:
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin), 0
    if pin:  # page-aligned blocks, rounded up in size: in phase with page-aligned staging
        plain = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        if plain.data_ptr() % _BLOCK == phase:
            return plain, 0
        del plain
    # Host memory: always one block more (its untouched pages cost nothing), one allocation.
    raw = torch.empty(nbytes + _BLOCK, dtype=torch.uint8, pin_memory=pin)
    shift = (phase - raw.data_ptr()) % _BLOCK
    return raw[shift : shift + nbytes], shift


def _sole_owner(storage: torch.UntypedStorage) -> bool:
    """Nothing but this reference holds ``storage`` (no tensor, view or other storage object)."""
    return int(torch._C._storage_Use_Count(storage._cdata)) == 1


#: Times each offloaded byte's memory is handed back and faulted in again per step, by
#: ``release_memory``: "advise" hands back the activation and then its read-back buffer; the
#: mmap threshold maps every read-back buffer afresh (activations fault whatever the plan);
#: "trim" refaults what it trimmed, about the offloaded bytes; False keeps them in the heap.
_REFAULTS_PER_OFFLOADED_BYTE: dict[bool | str, int] = {
    "allocator": 0,  # Hector's caching CPU allocator reuses the freed blocks as they are
    "advise": 2,
    "mmap": 1,
    True: 1,
    "trim": 1,
    False: 0,
}


def measure_release_cost(
    nbytes: int = 16 << 20, repeats: int = 5, piece_bytes: int | None = None
) -> float:
    """Nanoseconds per byte that handing memory back costs: the ``madvise`` that drops its
    pages plus the page faults that bring them back when it is written again (over writing
    resident memory), measured here on ``nbytes`` with the current intra-op threads; 0.0 where
    pages cannot be handed back.

    ``piece_bytes``: measure on blocks of this size (at most ``nbytes``; ``nbytes`` of them in
    all), the size the offloaded bytes come in. It matters where PyTorch backs large blocks with
    huge pages (``THP_MEM_ALLOC_ENABLE=1``, 2 MiB and more): those refault 512 pages at a
    time, smaller ones a page at a time, 3-5x dearer per byte. None: one ``nbytes`` block.
    The median of ``repeats`` (five: with three, the figure the heavier GPT's plans used
    varied 1.8x between runs on a shared host).
    """
    # Capped at nbytes: what matters is only whether a piece reaches the 2 MiB huge-page size.
    piece = max(min(piece_bytes or nbytes, nbytes), _PAGE)
    blocks = [torch.empty(piece, dtype=torch.uint8) for _ in range(max(nbytes // piece, 1))]
    total = piece * len(blocks)
    for block in blocks:
        block.fill_(1)
    costs = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for block in blocks:
            block.fill_(2)
        resident = time.perf_counter_ns() - start
        start = time.perf_counter_ns()
        for block in blocks:
            if not _drop_pages(block.untyped_storage()):
                return 0.0
            block.fill_(3)
        costs.append(max(time.perf_counter_ns() - start - resident, 0) / total)
    return sorted(costs)[len(costs) // 2]


def _device_types(module: nn.Module) -> set[str]:
    """The device types (``"cpu"``, ``"cuda"``) of ``module``'s parameters and buffers."""
    return {t.device.type for t in itertools.chain(module.parameters(), module.buffers())}


def _byte_weighted_median(sizes: list[int]) -> int | None:
    """The size that half of the bytes of ``sizes`` come in blocks of at most (None if empty)."""
    ordered = sorted(sizes)
    half, seen = sum(ordered) / 2, 0
    for size in ordered:
        seen += size
        if seen >= half:
            return size
    return None


@functools.cache
def _mallinfo2() -> Any:
    """The C library's ``mallinfo2`` with its result type declared, or None (not glibc, or
    glibc before 2.33)."""
    import ctypes

    libc = _libc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        return None
    names = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"

    class _MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in names.split()]  # noqa: RUF012

    libc.mallinfo2.restype = _MallInfo2
    return libc.mallinfo2


def _heap_free_bytes() -> int | None:
    """Free bytes in glibc's heaps now (``mallinfo2().fordblks``: freed, still resident until
    trimmed), or None where that is not known."""
    mallinfo2 = _mallinfo2()
    return None if mallinfo2 is None else int(mallinfo2().fordblks)


def _malloc_trim() -> None:
    """Return the free pages of glibc's heaps to the operating system."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


#: Backward starts in a row whose trim did not fit (where the forward's end would have) before
#: the heap trim moves to the forward's end for the rest of training.
_TRIM_MISSES_BEFORE_MOVING = 3

#: What a heap trim is assumed to hand back of the free bytes before one has been measured.
_TRIM_YIELD_PRIOR = 0.5


def _process_resident_bytes() -> int | None:
    """The process's resident memory now (``/proc/self/statm``), or None where unknown."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def _trim_heap() -> float | None:
    """``malloc_trim``, and the fraction of the heap's free bytes it handed back (measured
    as the fall of resident memory; None where either is unknown). Free chunks whose pages
    the cache already dropped count in glibc's free bytes but are not resident: a trim after
    an offloading forward hands back 39-62% of them on the heavier GPT."""
    free, before = _heap_free_bytes(), _process_resident_bytes()
    _malloc_trim()
    after = _process_resident_bytes()
    if not free or before is None or after is None:
        return None
    return min(max(before - after, 0) / free, 1.0)


def _release_freed_memory(enabled: bool | str) -> None:
    """Fix glibc's mmap threshold once per process (see ``release_memory``)."""
    global _allocator_fixed
    if _allocator_fixed or enabled not in (True, "mmap"):
        return
    _allocator_fixed = True
    libc = _libc()
    if libc is not None:
        libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)


class _Entry:
    """One saved storage: in memory, being written, on disk, being read, or loaded."""

    __slots__ = (
        "id",
        "key",
        "nbytes",
        "device",
        "storage",
        "buffer",
        "state",
        "refs",
        "group",
        "wanted",
        "weak",
        "ptr",
        "orphaned",
        "phase",
        "shift",
    )

    def __init__(self, entry_id: int, nbytes: int, device: torch.device) -> None:
        self.id = entry_id
        self.key = 0
        self.nbytes = nbytes
        self.device = device
        self.storage: torch.UntypedStorage | None = None  # original memory, while held
        self.buffer: torch.Tensor | None = None  # uint8 host buffer of a read
        # memory | writing | stored | reading | loaded | failed | discarded (force-closed cache)
        self.state = "memory"
        self.refs = 0
        self.group: tuple[int, int] = (0, 0)
        self.wanted = False
        self.weak: Any = None
        self.ptr = 0
        self.orphaned = False  # its forward or backward raised: no step is waiting for it
        self.phase = 0  # address of the written bytes mod _BLOCK (the store's file layout)
        self.shift = 0  # bytes from the read-back buffer's storage start to the object


class _Handle:
    """What autograd keeps instead of an offloaded tensor: the entry and the view geometry."""

    __slots__ = ("cache", "entry", "dtype", "size", "stride", "offset", "__weakref__")

    def __init__(self, cache: TensorCache, entry: _Entry, t: torch.Tensor) -> None:
        self.cache = cache
        self.entry = entry
        self.dtype = t.dtype
        self.size = tuple(t.shape)
        self.stride = tuple(t.stride())
        self.offset = t.storage_offset()

    def __del__(self) -> None:
        try:
            self.cache._release(self.entry)
        except Exception:  # noqa: BLE001  (interpreter shutdown)
            pass


class TensorCache:
    """Offload saved activations to SSD through the native store.

    Args:
        policy: ``"all"`` (offload every eligible tensor), ``"none"`` (keep everything),
            ``"adaptive"`` (profile the first step with everything kept, then plan with the
            adaptive rule of ``placement-plan-offload`` and follow the plan), a :class:`Plan`,
            or the path of a plan file (a ``placement`` module written by :meth:`Plan.save`).
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
            -52%, peak RSS -80%; docs/offload.md, "Results of session s16").
        overhead_target: ``"adaptive"``: the step-time overhead over keep-all the plan may
            spend on recomputation, exposed I/O, the offloaded bytes' page faults and heap
            trims (a fraction, default ``plan.OVERHEAD_TARGET``, 0.10; the model leaves out
            the hooks themselves, a few percent of a small model's step).
        granularity: without ``scopes``: ``"block"`` (the model's top-level blocks) or
            ``"layer"`` (each block's children), see :func:`default_scopes`.
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
            (docs/offload.md, "Where the peak is").
        trim_rule: how a plan's heap trims are decided. ``"model"`` (default): the trim's
            modelled cost (its bytes at the probe's price) within the plan's trim budget.
            ``"measured"``: once the steps tell it (:class:`FaultCostMeter`), what the
            offloading steps spent in the kernel and the hooks against what the plan
            budgeted for faults and trims, at training's own price per faulted byte, and
            the trim point moves only on measured misses. On the heavier GPT it kept the trim
            as backward starts in 13 runs of 16, but in two runs of one record it stopped
            trimming after costly steps (RSS −16% and −26%), a worse floor than the model's
            (docs/offload.md, "Trims decided by what the steps spend").
    """

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
        release_memory: bool | str = "auto",
        overhead_target: float = OVERHEAD_TARGET,
        granularity: str = "block",
        warmup_steps: int = 2,
        trim_point: str = "backward start",
        trim_rule: str = "model",
    ) -> None:
        if isinstance(policy, str) and policy not in POLICIES:
            plan = Plan.load(policy)  # a plan file; raises a clear error if it is not one
            policy = plan
        if on_write_error not in ("keep", "raise"):
            raise OffloadError(f"on_write_error must be 'keep' or 'raise', got {on_write_error!r}")
        if ahead < 0 or threshold < 0:
            raise OffloadError("ahead and threshold must be >= 0")
        if readahead_bytes != "auto" and not (
            readahead_bytes is None or (isinstance(readahead_bytes, int) and readahead_bytes >= 0)
        ):
            raise OffloadError(
                f"readahead_bytes must be 'auto', None or an int >= 0, got {readahead_bytes!r}"
            )
        if granularity not in GRANULARITIES:
            raise OffloadError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
        if not 0 <= overhead_target < 10:
            raise OffloadError(f"overhead_target must be in [0, 10), got {overhead_target}")
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise OffloadError(f"warmup_steps must be an int >= 0, got {warmup_steps!r}")
        if trim_point not in TRIM_POINTS:
            raise OffloadError(f"trim_point must be one of {TRIM_POINTS}, got {trim_point!r}")
        if trim_rule not in TRIM_RULES:
            raise OffloadError(f"trim_rule must be one of {TRIM_RULES}, got {trim_rule!r}")
        self._trim_rule_option = trim_rule
        self.readahead_bytes = readahead_bytes
        self._group_offloaded: dict[tuple[int, int], int] = {}  # bytes written per group
        self._largest_group = 0
        if release_memory not in RELEASE_MODES:
            raise OffloadError(
                f"release_memory must be one of {RELEASE_MODES}, got {release_memory!r}"
            )
        self.cpu_allocator_note = ""  # why "auto" could not install the caching allocator
        if release_memory == "auto":
            release_memory = self._auto_release_memory(policy, module)
        if release_memory == "advise" and cpu_allocator.installed():
            release_memory = "allocator"  # madvise would only make its reuse fault
        elif release_memory == "allocator" and not cpu_allocator.installed():
            raise OffloadError(
                "release_memory='allocator' leaves freed activations to Hector's caching CPU "
                "allocator: call hector.offload.enable_caching_allocator() first"
            )
        self.release_memory = release_memory
        self._freed_since_trim = 0
        # release_memory="advise": storages to hand back once the cache is their last owner.
        self._pending_release: list[torch.UntypedStorage] = []
        self.released_bytes = 0  # handed back with madvise
        if policy != "none":
            # Before the first step: blocks a profiling step (or any step before the first
            # write) puts in glibc's heap would otherwise be reused from there ever after.
            _release_freed_memory(release_memory)
        self.overhead_target = overhead_target
        self.plan: Plan | None = policy if isinstance(policy, Plan) else None
        self.policy = "plan" if self.plan is not None else policy
        self.threshold = threshold
        self.ahead = ahead
        self.on_write_error = on_write_error
        self._open_store: Callable[[], TensorStore] = functools.partial(
            TensorStore,
            root=root,
            threads=threads,
            chunk_bytes=chunk_bytes,
            direct=direct,
            keep_files=True,  # training writes the same sizes every step: overwrite, not create
        )
        self.write_bandwidth = write_bandwidth
        self._store: TensorStore | None = None
        self._lock = threading.RLock()
        self._ids = itertools.count(1)
        self._aliases: dict[tuple[str, int], _Entry] = {}
        self._by_key: dict[int, _Entry] = {}
        self._groups: dict[tuple[int, int], dict[int, _Entry]] = {}
        # The entries of each group whose write started: the only ones a read-ahead looks at,
        # so a hook costs the same however many tensors a group keeps in memory.
        self._offloaded_entries: dict[tuple[int, int], dict[int, _Entry]] = {}
        self._pass = 0
        self._group = 0
        self._scope_stack: list[str] = []
        self._param_ptrs: set[int] = set()
        self._hooks: list[Any] = []
        self._wrapped: list[tuple[nn.Module, Any]] = []
        self._ctx: contextlib.AbstractContextManager[Any] | None = None
        self._writing: dict[int, _Entry] = {}  # by key: writes whose outcome is not known yet
        self._unraised: list[OffloadIOError] = []  # on_write_error="raise": for the next flush
        self._closed = False
        self._closed_store_stats: dict[str, Any] | None = None
        self.errors: list[OffloadIOError] = []
        self.module = module
        self.scope_names: list[str] = []  # in first-forward order
        self._profile: dict[str, list[float]] = {}
        self._profile_sizes: list[int] = []  # profiled pass: bytes of each offloadable storage
        self._scope_start: dict[str, float] = {}
        self._profiling = self.policy == "adaptive"
        self._profile_pass = 0  # the pass being profiled (its backward too)
        self._group_scope: dict[int, str] = {}  # profiled pass: group -> scope name
        self._unpack_marks: dict[int, float] = {}  # profiled pass: group -> first unpack time
        self._last_unpack = 0.0
        self._warmup_left = warmup_steps  # "adaptive": measured steps still to discard
        self.counters = dict.fromkeys(
            (
                "packed",
                "offloaded",
                "kept",
                "aliased",
                "served_from_memory",
                "prefetched",
                "read_waits",
                "write_errors",
                "bytes_offloaded",
                "heap_trims",
            ),
            0,
        )
        self._offloaded_before_pass = 0
        self.read_wait_s = 0.0
        # Nanoseconds spent in each part of the hooks (time_breakdown() reports them).
        self.timing = dict.fromkeys(_TIMING_KEYS, 0)
        self.read_bandwidth: float | None = None
        #: "adaptive": the training thread's measured cost per offloaded byte (ns), planned with.
        self.offload_ns_per_byte: float | None = None
        self._release_ns_per_byte: float | None = None  # measured on first need
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
        self._fault_cost = FaultCostMeter()
        # At this pass's start: the hooks' timing and the bytes offloaded so far.
        self._pass_marks: tuple[dict[str, int], int] = ({}, 0)
        self._trimmed_at: str | None = None  # where this pass trimmed the heap
        self._first_planned_pass = 0  # "adaptive": the pass that first followed the plan
        #: The fraction of the heap's free bytes the last heap trim handed back, measured.
        #: Until one is, a prior of half: the trims measured on the heavier GPT handed back
        #: 39-62%, and counting every free byte (the old 1.0) skipped whole runs' trims.
        self.trim_yield = _TRIM_YIELD_PRIOR
        #: Where the heap trim runs: ``"backward start"`` (first unpack after a forward that
        #: offloaded) or ``"forward end"``; the first moves to the second (the cheaper point)
        #: for the rest of training once trims did not fit there, but would have at the
        #: forward's end, three steps in a row (under ``trim_rule="measured"``, three the
        #: measured rule decided).
        self.trim_point = trim_point
        #: After an adaptive profile on CPU: why this process should enable huge pages
        #: (``hector.offload.enable_huge_pages()``), or None.
        self.huge_pages_advice: str | None = None
        # A trim awaiting the next backward's start: whether it fitted at the forward's end.
        self._trim_pending: bool | None = None
        self._trim_misses = 0  # backward starts in a row whose trim did not fit
        self.resident_bytes = 0
        self.peak_resident_bytes = 0
        self.record_timeline = record_timeline
        self.timeline: list[tuple[float, int]] = []
        self._t0 = time.perf_counter()
        #: What the profiled steps' clock waits on before reading the time (a GPU module's
        #: queued kernels; None on CPU); set at each forward's start (:meth:`_refresh_params`).
        self._profile_sync: Callable[[], None] | None = None
        if module is not None:
            self._attach(
                module, scopes if scopes is not None else default_scopes(module, granularity)
            )

    # ---- set-up -------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """True once :meth:`close` succeeded; a closed cache cannot be used again."""
        return self._closed

    @property
    def store(self) -> TensorStore:
        """The process's store (opened on first use, never reopened once closed).

        Raises:
            OffloadError: the cache (or its store) was closed.
        """
        if self._closed:
            raise OffloadError(f"this offload cache is closed; {_CLOSED_HINT}")
        if self._store is None:
            self._store = self._open_store()
        elif self._store.closed:
            raise OffloadError(
                f"the offload store {self._store.path} was closed directly; {_CLOSED_HINT}"
            )
        return self._store

    def _attach(self, module: nn.Module, scopes: list[tuple[str, nn.Module]]) -> None:
        self._scopes = scopes
        self._hooks.append(module.register_forward_pre_hook(self._root_pre))
        self._hooks.append(module.register_forward_hook(self._root_post))
        for name, m in scopes:
            self._hooks.append(m.register_forward_pre_hook(self._scope_pre(name)))
            self._hooks.append(m.register_forward_hook(self._scope_post(name)))
        if self.plan is not None:
            self._apply_plan(self.plan)

    def _apply_plan(self, plan: Plan) -> None:
        names = [n for n, _ in self._scopes]
        unknown = [n for n in plan.decisions if n not in names]
        if unknown:
            raise OffloadError(
                f"the plan names scopes the model does not have: {', '.join(unknown[:5])} "
                f"(model scopes: {', '.join(names[:8])}{' ...' if len(names) > 8 else ''})"
            )
        for name, m in self._scopes:
            if plan.decisions.get(name) == "recompute":
                self._wrap_recompute(m)

    def _wrap_recompute(self, m: nn.Module) -> None:
        from torch.utils.checkpoint import checkpoint

        original = m.forward

        def forward(*args: Any, **kwargs: Any) -> Any:
            if not torch.is_grad_enabled():
                return original(*args, **kwargs)
            return checkpoint(original, *args, use_reentrant=False, **kwargs)

        m.forward = forward
        self._wrapped.append((m, original))

    def _refresh_params(self) -> None:
        ptrs: set[int] = set()
        on_gpu = False
        if self.module is not None:
            for t in itertools.chain(self.module.parameters(), self.module.buffers()):
                ptrs.add(t.untyped_storage().data_ptr())
                on_gpu = on_gpu or t.device.type == "cuda"
        self._param_ptrs = ptrs
        # Where the module is now (it may have moved since it was wrapped).
        self._profile_sync = torch.cuda.synchronize if on_gpu else None

    def _new_pass(self) -> None:
        with self._lock:
            self._pass += 1
            self._group = 0
            self._offloaded_before_pass = self.counters["offloaded"]
            self._pass_marks = (dict(self.timing), self.counters["bytes_offloaded"])
            self._trimmed_at = None

    def _own_hook_ns_this_pass(self) -> float:
        """The hooks' own time since this pass started: all of it but the waits for I/O
        (the plan models those) and ``madvise`` (system time, which the fault meter counts)."""
        before, now = self._pass_marks[0], self.timing
        if not before:
            return 0.0
        spent = sum(now[k] - before[k] for k in ("pack_ns", "unpack_ns", "release_ns"))
        left_out = ("write_wait_ns", "read_wait_ns", "madvise_ns")
        return float(max(spent - sum(now[k] - before[k] for k in left_out), 0))

    def _root_pre(self, module: nn.Module, args: Any) -> None:
        if torch.is_grad_enabled():
            # The step that just ended; not the first steps, which fault in what they
            # allocate (the warm-up steps: the small GPT's second step faulted 2.6x its third),
            # nor the first planned one, which starts with the keep-everything steps' garbage.
            warming_up = self._profiling and bool(self._profile) and self._warmup_left > 0
            atypical = self._pass <= 1 or warming_up or self._pass == self._first_planned_pass
            self._fault_cost.mark(
                None if atypical else self.counters["offloaded"] > self._offloaded_before_pass,
                trimmed_at=self._trimmed_at,
                hooks_ns=self._own_hook_ns_this_pass(),
            )
            if self._profiling and self._profile:
                if self._warmup_left > 0:  # a warm-up step: measured, then forgotten
                    self._warmup_left -= 1
                    self._forget_profile()
                else:
                    self._finish_profile()  # after the profiled step's backward, when it ran
                    self._fault_cost.restart()  # the probes are not the next step's cost
                    self._first_planned_pass = self._pass + 1
            self._refresh_params()
            self._new_pass()
            if self._profiling:
                self._profile_pass = self._pass

    def _root_post(self, module: nn.Module, args: Any, output: Any) -> None:
        if not torch.is_grad_enabled():
            return
        # Backward starts with the last groups: get them in (or keep them) now.
        with self._lock:
            self._read_ahead((self._pass, self._group))
        if self.counters["offloaded"] > self._offloaded_before_pass:
            fits = self._trims_heap("forward end")
            if self.trim_point == "backward start" and self.release_memory == "advise":
                self._trim_pending = fits
            elif fits:
                self._trim("forward end")
        # The end of the forward is where on_write_error="raise" reports, whatever the timing.
        try:
            self.flush()
        except BaseException:
            self._step_failed(self._pass)
            raise

    def _trim(self, at: str) -> None:
        """``malloc_trim`` now (``at``: which trim point), recording the fraction of the free
        bytes it handed back."""
        self._trimmed_at = at
        start = time.perf_counter_ns()
        measured = _trim_heap()
        self.timing["trim_ns"] += time.perf_counter_ns() - start
        if measured is not None:
            self.trim_yield = measured
        self.counters["heap_trims"] += 1

    def _trim_as_backward_starts(self) -> None:
        """The heap trim of the forward whose backward starts now, once per step.

        Here rather than at the forward's end: memory peaks from backward into the next
        forward, and between the two points loops commonly free last step's gradients
        (``zero_grad(set_to_none=True)`` before ``backward()``). Trimmed at the forward's
        end, those stayed resident while backward's allocations faulted in the pages the trim
        had handed back: on the heavier GPT, 190-250 MiB of free memory at the peak."""
        pending, self._trim_pending = self._trim_pending, None
        if pending is None:
            return
        if self._trims_heap("backward start"):
            self._trim_misses = 0
            self._trim("backward start")
        elif pending and (self._trim_rule_option == "model" or self.trim_rule == "measured"):
            # The forward's end was within budget. Moved only after misses in a row: the
            # first planned step's backward starts with the free memory of the keep-everything
            # steps before it, more than later ones. Under trim_rule="measured", only on what
            # the steps measured: the move is for the rest of training.
            self._trim_misses += 1
            if self._trim_misses >= _TRIM_MISSES_BEFORE_MOVING:
                self.trim_point = "forward end"

    def _trims_heap(self, at: str) -> bool:
        """Whether a heap trim (``malloc_trim``) at trim point ``at`` fits now.

        Only under ``"advise"``; without a plan (``"all"``): always. What it hands back is
        the heap's free bytes now times the fraction the last trim handed back
        (:attr:`trim_yield`, measured), each byte faulted in again later at
        :meth:`_trim_cost`. Under a plan:

        - by the **model** (default): the trim's cost within the plan's trim budget;
        - under ``trim_rule="measured"``, once this process's steps tell it
          (:class:`FaultCostMeter`), **measured**: the recent offloading steps that trimmed
          at ``at`` (else those that did not, plus this trim's cost) spent, in system time
          and the hooks' own time, no more than the plan budgeted for its faults and trims
          (its offloaded bytes at its cost per byte, plus its trim budget); until then, by
          the model. It kept the heavier GPT's trims as backward starts in 13 runs of 16,
          but stopped trimming in two after a costly step (docs/offload.md, "Trims decided
          by what the steps spend").

        :attr:`last_trim_decision` records the figures.
        """
        if self.release_memory != "advise":
            return False
        if self.plan is None:
            return True
        if self.plan.trim_budget_ns <= 0:
            return False
        free = _heap_free_bytes()
        if free is None:
            return False
        trim_ns = free * self.trim_yield * self._trim_cost()
        spent = None
        if self._trim_rule_option == "measured":
            spent = self._fault_cost.step_cost_ns(at)
            if spent is None:
                untrimmed = self._fault_cost.step_cost_ns(None)
                spent = None if untrimmed is None else untrimmed + trim_ns
        if spent is None:
            self.trim_rule = "model"
            budget = float(self.plan.trim_budget_ns)
            fits = trim_ns <= budget
        else:
            self.trim_rule = "measured"
            offloaded = self.counters["bytes_offloaded"] - self._pass_marks[1]
            budget = self.plan.trim_budget_ns + offloaded * self.plan.offload_ns_per_byte
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

    def _trim_cost(self) -> float:
        """Nanoseconds per byte a trim's bytes cost when faulted in again: the probe
        (:meth:`_release_cost`); under ``trim_rule="measured"``, what a faulted byte cost this
        process's offloading steps (:class:`FaultCostMeter`) once they tell it. On the heavier
        GPT the probe came out at 0.09-0.62 ns per byte between processes while training paid
        0.46-0.65 (docs/offload.md, "Trims decided by what the steps spend")."""
        measured = self._fault_cost.ns_per_byte() if self._trim_rule_option == "measured" else None
        self.trim_cost_source = "probe" if measured is None else "training"
        self.trim_ns_per_byte = self._release_cost() if measured is None else measured
        return self.trim_ns_per_byte

    def _release_cost(self) -> float:
        """Nanoseconds per byte that handing memory back and faulting it in again costs
        (:func:`measure_release_cost`), measured once, on first need: a plan given by the
        caller was not profiled here, and without it every trim would look free. Measured on
        blocks of the profiled step's byte-weighted median offloadable storage (one 16 MiB
        block without a profile): under huge-page allocation a model whose activations are
        smaller than 2 MiB refaults them a page at a time, and a 16 MiB probe said otherwise."""
        if self._release_ns_per_byte is None:
            piece = _byte_weighted_median(self._profile_sizes)
            self._release_ns_per_byte = measure_release_cost(piece_bytes=piece)
        return self._release_ns_per_byte

    def _scope_pre(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any) -> None:
            if not torch.is_grad_enabled():
                return
            if name not in self.scope_names:
                self.scope_names.append(name)
            with self._lock:
                self._group += 1
            self._scope_stack.append(name)
            if self._profiling:
                self._group_scope[self._group] = name
                self._scope_start[name] = self._profile_clock()

        return hook

    def _scope_post(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if not torch.is_grad_enabled():
                return
            if self._scope_stack and self._scope_stack[-1] == name:
                self._scope_stack.pop()
            if self._profiling and name in self._scope_start:
                rec = self._profile.setdefault(name, [0.0, 0.0])
                rec[0] += self._profile_clock() - self._scope_start.pop(name)

        return hook

    def _profile_clock(self) -> float:
        """Seconds, for the profiled steps' scope times: on a GPU, after the work queued so
        far has run (``torch.cuda.synchronize``). Kernels run asynchronously, so without the
        wait a scope's forward and backward would measure how long queueing its kernels took,
        and the plan would hide I/O behind compute that had not happened yet. Only profiled
        steps wait; planned steps run as queued."""
        if self._profile_sync is not None:
            self._profile_sync()
        return time.perf_counter()

    def _forget_profile(self) -> None:
        """Drop what the last step measured (a warm-up step's times are not the training's)."""
        self._profile.clear()
        self._profile_sizes.clear()
        self._scope_start.clear()
        self._group_scope.clear()
        self._unpack_marks.clear()
        self._last_unpack = 0.0

    def _finish_profile(self) -> None:
        """After the profiled step: plan from its measured times and the store's bandwidth.

        Runs when the next forward starts, so the profiled step's backward (when it ran) is
        measured too; otherwise backward is taken as twice the forward.
        """
        from .plan import measure_store_bandwidth, profile_from

        if self.write_bandwidth is None or self.read_bandwidth is None:
            write, read = measure_store_bandwidth(self.store)
            self.write_bandwidth = self.write_bandwidth or write
            self.read_bandwidth = self.read_bandwidth or read
        on_cpu = self.module is None or _device_types(self.module) <= {"cpu"}
        if on_cpu and self.release_memory:
            self._advise_huge_pages()
        if self.offload_ns_per_byte is None:
            refaults = _REFAULTS_PER_OFFLOADED_BYTE[self.release_memory] if on_cpu else 0
            self.offload_ns_per_byte = refaults * self._release_cost() if refaults else 0.0
        scopes = profile_from(self.scope_names, self._profile)
        self.plan = Plan.from_measurements(
            scopes,
            self._backward_ns(scopes),
            self.write_bandwidth,
            self.read_bandwidth,
            overhead_target=self.overhead_target,
            ahead=max(self.ahead, 1),
            offload_ns_per_byte=self.offload_ns_per_byte,
            trim_heap=self.release_memory == "advise" and _heap_free_bytes() is not None,
        )
        self._profiling = False
        self._apply_plan(self.plan)

    def _advise_huge_pages(self) -> None:
        """Tell the user, once, when the profiled step's activations are large enough for
        PyTorch's huge-page allocation and this process does not have it
        (:func:`~hector.offload.hugepages.huge_pages_advice`; :attr:`huge_pages_advice`)."""
        from .hugepages import huge_pages_advice

        if self.release_memory == "allocator":  # its blocks are reused, not faulted in again
            return
        self.huge_pages_advice = huge_pages_advice(_byte_weighted_median(self._profile_sizes))
        if self.huge_pages_advice is not None:
            warnings.warn(f"hector.offload: {self.huge_pages_advice}", HugePagesAdvice, 3)

    def _backward_ns(self, scopes: list[Any]) -> list[float]:
        """Each scope's backward time in the profiled step: from the first unpack of its group
        to the first unpack of the group backward reached next (2x forward when unmeasured)."""
        marks = sorted(self._unpack_marks.items(), key=lambda kv: kv[1])
        spent: dict[str, float] = {}
        for k, (group, at) in enumerate(marks):
            end = marks[k + 1][1] if k + 1 < len(marks) else self._last_unpack
            name = self._group_scope.get(group)
            if name is not None:
                spent[name] = spent.get(name, 0.0) + (end - at) * 1e9
        return [spent.get(s.name, 2.0 * s.forward_ns) for s in scopes]

    # ---- context manager ----------------------------------------------------------------------
    def hooks(self) -> torch.autograd.graph.saved_tensors_hooks:
        """The ``saved_tensors_hooks`` context that routes saved tensors through this cache."""
        return torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def __enter__(self) -> TensorCache:
        self._check_open()
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
            self._step_failed(self._pass)
        elif not self._closed:
            try:
                self.flush()  # leaving the block ends the forward: report write errors here
            except BaseException:
                self._step_failed(self._pass)
                raise

    def _step_failed(self, pass_: int) -> None:
        """Pass ``pass_`` raised: its graph is dead, even if a traceback still holds it."""
        with self._lock:
            for (p, _), group in self._groups.items():
                if p == pass_:
                    for e in group.values():
                        e.orphaned = True

    def _check_open(self) -> None:
        if self._closed:
            raise OffloadError(f"this offload cache is closed; {_CLOSED_HINT}")

    def flush(self) -> None:
        """With ``on_write_error="raise"``: wait for the writes in flight and raise a failure.

        Called at the end of each forward of the attached module and when a ``with cache:``
        block is left; call it yourself after code run under :meth:`hooks` directly. With
        ``"keep"`` (failures are warnings) and on a closed cache it does nothing.

        Raises:
            OffloadIOError: (``on_write_error="raise"`` only) the first write that failed since
                the last flush; the others are in :attr:`errors`.
        """
        with self._lock:
            if self._closed:
                return
            if self.on_write_error == "raise":
                for e in list(self._writing.values()):
                    self._finish_write(e)
            if not self._unraised:
                return
            recorded, rest = self._unraised[0], len(self._unraised) - 1
            self._unraised.clear()
        # A copy is raised: a traceback on the recorded error (kept in ``errors``) would keep
        # the frames of this forward, and so its autograd graph, alive.
        error = type(recorded)(recorded.errno, recorded.strerror, recorded.filename)
        if rest:
            error.add_note(f"{rest} more write(s) failed since; see TensorCache.errors")
        raise error

    def saved_tensors_alive(self) -> int:
        """How many saved storages autograd still references (> 0: a step is in flight).

        Storages of a forward or backward that raised are not counted: that step is over,
        even while the exception's traceback still holds its graph.
        """
        with self._lock:
            return sum(not e.orphaned for group in self._groups.values() for e in group.values())

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
        if self._closed:
            return
        if not force:
            self._check_no_step_in_flight()
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        for m, original in self._wrapped:
            m.forward = original
        self._wrapped.clear()
        with self._lock:
            self._closed = True
            if self._store is not None and not self._store.closed:
                self._closed_store_stats = self._store.stats()
                self._store.close()  # waits for the I/O still reading saved memory
            self._discard_entries()

    def _check_no_step_in_flight(self) -> None:
        alive = self.saved_tensors_alive()
        if alive:
            gc.collect()  # a graph kept only by a reference cycle is not a step in flight
            alive = self.saved_tensors_alive()
        if alive:
            raise OffloadError(
                f"close() during a step: {alive} saved tensor(s) of this offload cache are still "
                "referenced by autograd (a forward whose backward has not run). Run backward "
                "(or drop its outputs, e.g. `del loss`) before close(), or call "
                "close(force=True) to discard them (that backward then fails)"
            )

    def _discard_entries(self) -> None:
        """Drop every saved tensor of a (force-)closed cache; their handles now fail."""
        for group in self._groups.values():
            for e in group.values():
                e.state = "discarded"
                e.storage = None
                e.buffer = None
        self._groups.clear()
        self._offloaded_entries.clear()
        self._pending_release.clear()
        self._group_offloaded.clear()
        self._aliases.clear()
        self._by_key.clear()
        self._writing.clear()
        self._unraised.clear()
        self.resident_bytes = 0

    # ---- decisions ----------------------------------------------------------------------------
    def _decision(self) -> str:
        scope = self._scope_stack[-1] if self._scope_stack else None
        if self._profiling or self.policy == "none":
            return "keep"
        if self.policy == "all":
            return "offload"
        assert self.plan is not None
        if scope is None:
            return "keep"
        return self.plan.decisions.get(scope, "keep")

    def _eligible(self, t: torch.Tensor) -> bool:
        return (
            t.layout == torch.strided
            # type() first: a Parameter's isinstance check runs Python code (its metaclass).
            and (type(t) is torch.Tensor or not isinstance(t, nn.Parameter))
            and t.device.type in ("cpu", "cuda")
        )

    # ---- hooks --------------------------------------------------------------------------------
    def _pack(self, t: torch.Tensor) -> Any:
        start = time.perf_counter_ns()
        try:
            return self._pack_timed(t)
        finally:
            self.timing["pack_ns"] += time.perf_counter_ns() - start
            self.timing["hook_calls"] += 1

    def _pack_timed(self, t: torch.Tensor) -> Any:
        self._check_open()
        if not self._eligible(t):
            return t
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr == 0 or ptr in self._param_ptrs:
            return t
        nbytes = storage.nbytes()
        with self._lock:
            self._drain()
            if self._profiling and self._scope_stack:
                rec = self._profile.setdefault(self._scope_stack[-1], [0.0, 0.0])
            else:
                rec = None
            key = (str(t.device), ptr)
            entry = self._aliases.get(key)
            if entry is not None and entry.weak is not None and not entry.weak.expired():
                self.counters["aliased"] += 1
            else:
                entry = _Entry(next(self._ids), nbytes, t.device)
                entry.ptr = ptr
                entry.weak = torch.multiprocessing.reductions.StorageWeakRef(storage)
                entry.storage = storage
                entry.group = (self._pass, self._group)
                # Write first: if starting it fails, nothing is registered (no entry leaks).
                if nbytes >= self.threshold and self._decision() == "offload":
                    self._start_write(entry)
                else:
                    self.counters["kept"] += 1
                self._aliases[key] = entry
                self._groups.setdefault(entry.group, {})[entry.id] = entry
                self._add_resident(nbytes)
                self.counters["packed"] += 1
                if rec is not None:
                    rec[1] += nbytes
                    if nbytes >= self.threshold:
                        self._profile_sizes.append(nbytes)
            entry.refs += 1
            return _Handle(self, entry, t)

    def _unpack(self, h: Any) -> torch.Tensor:
        if self._trim_pending is not None:
            self._trim_as_backward_starts()
        if not isinstance(h, _Handle):
            return h
        start = time.perf_counter_ns()
        try:
            return self._unpack_handle(h)
        finally:
            self.timing["unpack_ns"] += time.perf_counter_ns() - start
            self.timing["hook_calls"] += 1

    def _unpack_handle(self, h: Any) -> torch.Tensor:
        e, dtype, size, stride, offset = h.entry, h.dtype, h.size, h.stride, h.offset
        if self._profiling and e.group[0] == self._profile_pass:
            self._last_unpack = self._profile_clock()
            self._unpack_marks.setdefault(e.group[1], self._last_unpack)
        # The traceback of an error raised below keeps this frame: it must not keep the
        # handle (a saved tensor close() counts as in flight) alive.
        del h
        with self._lock:
            if e.state == "discarded":
                raise OffloadError(
                    "backward needs a tensor saved through an offload cache that was closed "
                    "with close(force=True) before this backward ran; run backward before "
                    "closing the cache"
                )
            self._drain()
            group = e.group
            if self._offloaded_entries:  # otherwise there is nothing to read ahead
                self._read_ahead(group)
            try:
                storage, shift = self._materialize(e)
            except BaseException:
                self._step_failed(group[0])  # this backward is over
                raise
        out = torch.empty((0,), dtype=dtype, device=storage.device)
        return out.set_(storage, offset + shift // out.element_size(), size, stride)

    # ---- entry state machine (called with the lock held) -----------------------------------
    def _add_resident(self, n: int) -> None:
        self.resident_bytes += n
        self.peak_resident_bytes = max(self.peak_resident_bytes, self.resident_bytes)
        if self.record_timeline:
            self.timeline.append((time.perf_counter() - self._t0, self.resident_bytes))

    def _start_write(self, e: _Entry) -> None:
        assert e.storage is not None
        store = self.store
        if e.device.type == "cuda":  # pinned staging: device → pinned host, then to the store
            start = time.perf_counter_ns()
            staging = torch.empty(e.nbytes, dtype=torch.uint8, pin_memory=True)
            src = torch.empty((0,), dtype=torch.uint8, device=e.device).set_(e.storage)
            staging.copy_(src, non_blocking=True)
            torch.cuda.current_stream(e.device).synchronize()
            e.buffer = staging
            address = staging.data_ptr()
            self.timing["staging_ns"] += time.perf_counter_ns() - start
        else:
            address = e.storage.data_ptr()
        e.phase = address % _BLOCK
        start = time.perf_counter_ns()
        e.key = store.write(address, e.nbytes)
        self.timing["submit_ns"] += time.perf_counter_ns() - start
        e.state = "writing"
        self._by_key[e.key] = e
        self._writing[e.key] = e
        self.counters["offloaded"] += 1
        self.counters["bytes_offloaded"] += e.nbytes
        group_bytes = self._group_offloaded.get(e.group, 0) + e.nbytes
        self._group_offloaded[e.group] = group_bytes
        self._largest_group = max(self._largest_group, group_bytes)
        self._offloaded_entries.setdefault(e.group, {})[e.id] = e

    def _drain(self) -> None:
        if self._store is None or self._store.closed:
            return
        if not self._offloaded_entries and not self._pending_release:
            return  # nothing in flight to complete, nothing to hand back: skip the native call
        start = time.perf_counter_ns()
        try:
            self._drain_completions()
        finally:
            self.timing["drain_ns"] += time.perf_counter_ns() - start

    def _let_go(self, storage: torch.UntypedStorage | None, device: torch.device) -> None:
        """Drop the cache's reference to offloaded memory whose contents are dead; under
        ``release_memory="advise"`` hand its pages back first (now, or once nobody else holds
        it). Only allocator-owned storages (resizable): a storage wrapping memory someone
        else owns (``from_numpy``, ``frombuffer``) is only dropped."""
        if storage is None or self.release_memory != "advise" or device.type != "cpu":
            return
        if not storage.resizable():
            return
        if _sole_owner(storage):
            self._hand_back(storage)
        else:
            self._pending_release.append(storage)

    def _hand_back(self, storage: torch.UntypedStorage) -> None:
        start = time.perf_counter_ns()
        self.released_bytes += _drop_pages(storage)
        self.timing["madvise_ns"] += time.perf_counter_ns() - start

    def _release_pending(self, final: bool = False) -> None:
        """Hand back the pending storages the cache now owns alone (``final``: drop the rest)."""
        if not self._pending_release:
            return
        still = []
        for storage in self._pending_release:
            if _sole_owner(storage):
                self._hand_back(storage)
            elif not final:
                still.append(storage)
        self._pending_release = still

    def _drain_completions(self) -> None:
        assert self._store is not None
        self._release_pending()
        for key in self._store.completions():
            e = self._by_key.get(key)
            if e is None:
                continue
            if e.state == "writing":
                self._write_done(e)
            elif e.state == "reading":
                with contextlib.suppress(OffloadIOError):  # raised again by _materialize
                    if self._store.poll(key):
                        e.state = "loaded"

    def _finish_write(self, e: _Entry) -> None:
        """Wait for the write of ``e`` and record its outcome (it reads ``e``'s memory)."""
        if self._store is None or self._store.closed:  # closed directly: its close waited
            self._writing.pop(e.key, None)
            return
        start = time.perf_counter_ns()
        with contextlib.suppress(OffloadIOError):  # recorded by _write_done
            self._store.wait(e.key)
        self.timing["write_wait_ns"] += time.perf_counter_ns() - start
        self._write_done(e)

    def _finish_read(self, e: _Entry) -> None:
        """Wait for the read of ``e`` (its buffer is about to be freed); errors do not matter."""
        if self._store is None or self._store.closed:  # closed directly: its close waited
            return
        start = time.perf_counter_ns()
        with contextlib.suppress(OffloadIOError):
            self._store.wait(e.key)
        self.timing["read_wait_ns"] += time.perf_counter_ns() - start
        e.state = "loaded"

    def _write_done(self, e: _Entry) -> None:
        """Record the outcome of a completed write: each failure is reported exactly once."""
        self._writing.pop(e.key, None)
        try:
            self.store.poll(e.key)
        except OffloadIOError as err:
            e.state = "failed"  # the storage stays referenced: nothing is lost
            self.counters["write_errors"] += 1
            # Kept without its traceback, whose frames would keep this step's graph alive.
            self.errors.append(err.with_traceback(None))
            if e.device.type == "cuda":
                e.buffer = None
            if self.on_write_error == "raise":
                self._unraised.append(err)
            else:
                warnings.warn(
                    f"hector.offload: {err}; the tensor stays in memory",
                    RuntimeWarning,
                    stacklevel=2,
                )
            return
        e.state = "stored"
        if e.device.type == "cuda":
            e.buffer = None
        if not e.wanted:
            storage, e.storage = e.storage, None
            self._let_go(storage, e.device)
            del storage
            self._add_resident(-e.nbytes)
            if self.release_memory == "trim" and e.device.type == "cpu":
                self._freed_since_trim += e.nbytes
                if self._freed_since_trim >= _TRIM_EVERY:
                    self._freed_since_trim = 0
                    _malloc_trim()

    def _read_ahead(self, group: tuple[int, int]) -> None:
        """Backward needs ``group``: fetch it and start the reads of the groups before it.

        Without a window, the ``ahead`` previous groups start at once. With
        ``readahead_bytes``, a previous group starts only while the offloaded bytes held in
        memory plus its own stay within the window (or when nothing is held), so reads land
        just in time instead of all at the start of backward.
        """
        self._prefetch_group(group)
        window = self._window()
        if window is None:
            for g in range(group[1] - 1, group[1] - self.ahead - 1, -1):
                self._prefetch_group((group[0], g))
            return
        held = -1  # computed only when a group has something to read
        for g in range(group[1] - 1, group[1] - self.ahead - 1, -1):
            need = self._bytes_to_read((group[0], g))
            if not need:
                continue
            if held < 0:
                held = self._held_offloaded_bytes()
            if held and held + need > window:
                return
            self._prefetch_group((group[0], g))
            held += need

    def _window(self) -> int | None:
        """The read-ahead window in bytes (None: unbounded)."""
        if self.readahead_bytes == "auto":
            return self._largest_group * 3 // 2
        assert self.readahead_bytes is None or isinstance(self.readahead_bytes, int)
        return self.readahead_bytes

    def _held_offloaded_bytes(self) -> int:
        """Bytes of offloaded entries now in memory: read back, being read, or kept (wanted)."""
        return sum(
            e.nbytes
            for entries in self._offloaded_entries.values()
            for e in entries.values()
            if e.buffer is not None or (e.wanted and e.storage is not None)
        )

    def _bytes_to_read(self, group: tuple[int, int]) -> int:
        entries = self._offloaded_entries.get(group, {}).values()
        return sum(e.nbytes for e in entries if e.state == "stored" and e.buffer is None)

    def _prefetch_group(self, group: tuple[int, int]) -> None:
        for e in list(self._offloaded_entries.get(group, {}).values()):
            if e.state == "writing":
                e.wanted = True  # keep it in memory when the write completes
            elif e.state == "stored" and e.storage is None and e.buffer is None:
                self._start_read(e)
                self.counters["prefetched"] += 1

    def _start_read(self, e: _Entry) -> None:
        pin = e.device.type == "cuda"
        start = time.perf_counter_ns()
        e.buffer, e.shift = _in_phase_buffer(e.nbytes, e.phase, pin)
        submitted = time.perf_counter_ns()
        self.timing["alloc_ns"] += submitted - start
        self._add_resident(e.nbytes)
        self.store.read(e.key, e.buffer.data_ptr(), e.nbytes)
        self.timing["submit_ns"] += time.perf_counter_ns() - submitted
        e.state = "reading"

    def _materialize(self, e: _Entry) -> tuple[torch.UntypedStorage, int]:
        """The memory holding ``e``'s bytes and the byte offset they start at in it (a
        read-back buffer starts in phase with the store's file), read back if needed."""
        if e.storage is not None:
            if e.state != "memory":
                self.counters["served_from_memory"] += 1
            return e.storage, 0
        if e.state == "stored" and e.buffer is None:
            self._start_read(e)
        if e.state == "reading":
            start = time.perf_counter_ns()
            self.counters["read_waits"] += 1
            try:
                self.store.wait(e.key)
            except OffloadIOError:
                e.state = "stored"
                self._add_resident(-e.nbytes)
                e.buffer = None
                raise
            finally:
                waited = time.perf_counter_ns() - start
                self.timing["read_wait_ns"] += waited
                self.read_wait_s += waited * 1e-9
            e.state = "loaded"
        assert e.buffer is not None
        if e.device.type == "cuda":
            data = e.buffer.to(e.device, non_blocking=True)
            e.storage = data.untyped_storage()
            e.buffer = None
            return e.storage, 0
        return e.buffer.untyped_storage(), e.shift

    def _release(self, e: _Entry) -> None:
        start = time.perf_counter_ns()
        try:
            self._release_entry(e)
        finally:
            self.timing["release_ns"] += time.perf_counter_ns() - start

    def _release_entry(self, e: _Entry) -> None:
        with self._lock:
            e.refs -= 1
            if e.refs > 0:
                return
            group = self._groups.get(e.group)
            if group is not None:
                group.pop(e.id, None)
                if not group:
                    del self._groups[e.group]
                    self._group_offloaded.pop(e.group, None)
            offloaded = self._offloaded_entries.get(e.group)
            if offloaded is not None and offloaded.pop(e.id, None) is not None and not offloaded:
                del self._offloaded_entries[e.group]
            akey = (str(e.device), e.ptr)
            if self._aliases.get(akey) is e:
                del self._aliases[akey]
            if not self._groups:  # the last saved tensor: backward is over
                self._release_pending(final=True)
            if e.state == "discarded":
                return
            if e.state == "writing":
                # The write still reads this memory (or its staging buffer): wait before
                # freeing it, and record a failure now rather than lose it.
                self._finish_write(e)
            elif e.state == "reading":
                # A prefetch nobody consumed (the graph was dropped): the read still fills
                # this buffer, so it must land before the buffer is freed.
                self._finish_read(e)
            if e.key:
                self._by_key.pop(e.key, None)
                if self._store is not None and not self._store.closed:
                    # Cheap: the store keeps the file for a later write (no unlink, which
                    # cost 4-10 ms here with its blocks discarded) while its files stay
                    # within the most it held at once.
                    self._store.remove(e.key)
            held = e.storage is not None or (e.buffer is not None and e.device.type == "cpu")
            if held:
                self._add_resident(-e.nbytes)
            read_back = e.buffer is not None
            buffer = e.buffer.untyped_storage() if e.buffer is not None else None
            e.storage = None
            e.buffer = None
            self._let_go(buffer, e.device)
            del buffer
            if read_back and not e.orphaned and self._window() is not None and not self._closed:
                self._read_ahead(e.group)  # the window has room again: start the next reads

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
        memory back later. The store's own per-phase counters (copies, checksums, its
        queues) are in ``stats()["store"]``.
        """
        t = dict(self.timing)
        inside = sum(
            t[k] for k in ("submit_ns", "write_wait_ns", "read_wait_ns", "alloc_ns", "staging_ns")
        )
        t["hooks_ns"] = t["pack_ns"] + t["unpack_ns"] + t["release_ns"]
        t["python_ns"] = max(t["hooks_ns"] - inside - t["drain_ns"], 0)
        return t

    def _auto_release_memory(self, policy: str | Plan, module: nn.Module | None) -> str:
        """``release_memory="auto"``: ``"allocator"`` once Hector's caching CPU allocator serves
        the process (installed here, with its default limits, unless it already is), else
        ``"advise"``: when nothing is offloaded, when the module holds no CPU tensor, when
        ``$HECTOR_CPU_ALLOCATOR`` is ``pytorch``, or (with a warning and
        :attr:`cpu_allocator_note`) when the allocator cannot be built here."""
        if cpu_allocator.installed():
            return "allocator"
        choice = os.environ.get(CPU_ALLOCATOR_ENV, "caching")
        if choice not in ("caching", "pytorch"):
            raise OffloadError(
                f"${CPU_ALLOCATOR_ENV} must be 'caching' or 'pytorch', got {choice!r}"
            )
        if policy == "none" or choice == "pytorch":
            return "advise"
        if module is not None:
            devices = _device_types(module)
            if devices and "cpu" not in devices:  # its activations never touch a CPU allocator
                return "advise"
        try:
            cpu_allocator.install()
        except cpu_allocator.CpuAllocatorError as err:
            self.cpu_allocator_note = str(err)
            warnings.warn(
                f"hector.offload: {err}; freed activations are handed back with madvise "
                '(release_memory="advise") instead, and the peak memory falls less '
                '(docs/offload.md, "Caching CPU allocator")',
                stacklevel=4,
            )
            return "advise"
        return "allocator"

    def stats(self) -> dict[str, Any]:
        """Counters of the cache plus the store's I/O statistics."""
        out: dict[str, Any] = dict(self.counters)
        out["read_wait_s"] = self.read_wait_s
        out["timing"] = self.time_breakdown()
        out["resident_bytes"] = self.resident_bytes
        out["peak_resident_bytes"] = self.peak_resident_bytes
        out["release_memory"] = self.release_memory
        if self.cpu_allocator_note:
            out["cpu_allocator_note"] = self.cpu_allocator_note
        out["released_bytes"] = self.released_bytes
        out["offload_ns_per_byte"] = self.offload_ns_per_byte
        out["trim_yield"] = self.trim_yield
        out["trim_point"] = self.trim_point
        out["trim_ns_per_byte"] = self.trim_ns_per_byte
        out["trim_cost_source"] = self.trim_cost_source
        out["trim_rule"] = self.trim_rule
        out["fault_ns_per_byte"] = self._fault_cost.ns_per_byte()
        out["last_trim_decision"] = self.last_trim_decision
        out["probe_ns_per_byte"] = self._release_ns_per_byte
        out["fault_cost_steps"] = self._fault_cost.summary()
        out["huge_pages_advice"] = self.huge_pages_advice
        if self._store is not None and not self._store.closed:
            out["store"] = self._store.stats()
            out["direct_io"] = self._store.direct
        elif self._closed_store_stats is not None:  # closed: the totals at close
            out["store"] = dict(self._closed_store_stats)
            out["direct_io"] = self._store.direct if self._store is not None else False
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
        if self.cache.closed:
            raise OffloadError(
                "this offloaded model was closed; call the original model (`.module`) or wrap "
                "it again with hector.offload(model, ...)"
            )
        with self.cache.hooks():
            try:
                return self.module(*args, **kwargs)
            except BaseException:
                self.cache._step_failed(self.cache._pass)
                raise

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
