"""How the memory of offloaded activations leaves the process: host-memory policies.

A :class:`HostMemoryPolicy` is the strategy behind ``TensorCache(release_memory=...)``. The
legacy values map onto one each (:func:`host_policy`): ``False`` :class:`KeepInHeap`,
``True``/``"mmap"`` :class:`UnmapLargeBlocks`, ``"advise"`` :class:`AdvisePages`, ``"trim"``
:class:`PeriodicTrim`, ``"allocator"`` :class:`CachingAllocatorReuse`; ``"auto"`` chooses
between the last two and :class:`AdvisePages` (:func:`resolve_host_policy`). A policy object
may be passed instead of its name. Policies hold no state: what a cache handed back, and what
it still has to, is its :class:`HostMemory`.

:func:`measure_release_cost` and :class:`ReleaseCostProbe` measure what handing memory back
and faulting it in again costs, the price the plan and the heap trims count each byte at.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from typing import ClassVar

import torch
from torch import nn

from hector.runtime import cpu_allocator, libc_heap

from .errors import OffloadError
from .stats import CacheStatistics

__all__ = [
    "CPU_ALLOCATOR_ENV",
    "RELEASE_MODES",
    "TRIM_EVERY",
    "AdvisePages",
    "CachingAllocatorReuse",
    "HostMemory",
    "HostMemoryPolicy",
    "KeepInHeap",
    "PeriodicTrim",
    "ReleaseCostProbe",
    "UnmapLargeBlocks",
    "byte_weighted_median",
    "device_types",
    "drop_storage_pages",
    "host_policy",
    "measure_release_cost",
    "resolve_host_policy",
]

#: ``release_memory="trim"``: hand freed heap memory back after this many bytes were freed.
TRIM_EVERY = 32 << 20
#: The legacy ``release_memory`` values (:func:`host_policy` maps all but ``"auto"``).
RELEASE_MODES = (True, False, "auto", "advise", "mmap", "trim", "allocator")
#: ``release_memory="auto"`` leaves the process on PyTorch's own CPU allocator (``"advise"``)
#: when this environment variable says ``pytorch``; ``caching`` (or unset) installs Hector's.
CPU_ALLOCATOR_ENV = "HECTOR_CPU_ALLOCATOR"


def drop_storage_pages(storage: torch.UntypedStorage) -> int:
    """Hand the whole pages inside ``storage``'s memory back to the operating system
    (:func:`hector.runtime.libc_heap.drop_pages`); the bytes released. Only for memory whose
    contents are dead: the caller is its last owner and frees it next."""
    return int(libc_heap.drop_pages(storage.data_ptr(), storage.nbytes()))


def _sole_owner(storage: torch.UntypedStorage) -> bool:
    """Nothing but this reference holds ``storage`` (no tensor, view or other storage object)."""
    return int(torch._C._storage_Use_Count(storage._cdata)) == 1


def device_types(module: nn.Module) -> set[str]:
    """The device types (``"cpu"``, ``"cuda"``) of ``module``'s parameters and buffers."""
    return {t.device.type for t in (*module.parameters(), *module.buffers())}


class HostMemory:
    """One cache's host memory under its policy: the storages still to hand back once the
    cache owns them alone, the bytes handed back so far, and the bytes freed since the last
    periodic trim."""

    def __init__(self, policy: HostMemoryPolicy, stats: CacheStatistics) -> None:
        """Memory released under ``policy``; ``madvise`` time is counted in ``stats``."""
        self.policy = policy
        self._stats = stats
        # AdvisePages: storages to hand back once the cache is their last owner.
        self.pending: list[torch.UntypedStorage] = []
        self.released_bytes = 0  # handed back with madvise
        self.freed_since_trim = 0

    def let_go(self, storage: torch.UntypedStorage | None, device: torch.device) -> None:
        """Drop the cache's reference to offloaded memory whose contents are dead; under
        :class:`AdvisePages` hand its pages back first (now, or once nobody else holds it)."""
        if storage is None or device.type != "cpu":
            return
        self.policy.let_go(storage, self)

    def freed_after_write(self, nbytes: int, device: torch.device) -> None:
        """An offloaded activation of ``nbytes`` was freed once its write completed."""
        if device.type == "cpu":
            self.policy.freed_after_write(nbytes, self)

    def hand_back(self, storage: torch.UntypedStorage) -> None:
        """Hand ``storage``'s whole pages back now (the cache is its last owner)."""
        start = time.perf_counter_ns()
        self.released_bytes += drop_storage_pages(storage)
        self._stats.timing["madvise_ns"] += time.perf_counter_ns() - start

    def release_pending(self, final: bool = False) -> None:
        """Hand back the pending storages the cache now owns alone (``final``: drop the rest)."""
        if not self.pending:
            return
        still = []
        for storage in self.pending:
            if _sole_owner(storage):
                self.hand_back(storage)
            elif not final:
                still.append(storage)
        self.pending = still


class HostMemoryPolicy:
    """How the memory of offloaded activations leaves the process (CPU tensors only).

    The base policy does nothing with freed memory; subclasses say what they do differently.
    """

    #: The ``release_memory`` value this policy is reported as (``stats()["release_memory"]``).
    label: bool | str = False
    #: Times each offloaded byte's memory is handed back and faulted in again per step.
    refaults_per_offloaded_byte: ClassVar[int] = 0
    #: Whether the cache decides a heap trim (``malloc_trim``) once per step that offloaded.
    trims_heap_per_step: ClassVar[bool] = False

    def prepare_process(self) -> None:
        """Set the process up before the first step of a cache that may offload."""

    def let_go(self, storage: torch.UntypedStorage, memory: HostMemory) -> None:
        """The cache drops ``storage`` (CPU memory whose contents are dead)."""

    def freed_after_write(self, nbytes: int, memory: HostMemory) -> None:
        """An offloaded CPU activation of ``nbytes`` was freed once its write completed."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class KeepInHeap(HostMemoryPolicy):
    """``release_memory=False``: freed activations stay in glibc's heap."""


class UnmapLargeBlocks(HostMemoryPolicy):
    """``release_memory=True``/``"mmap"``: fix glibc's mmap threshold (process-wide, once) so
    the memory of an offloaded activation returns to the operating system when it is freed;
    every large allocation then faults its fresh pages in (read-back buffers included)."""

    refaults_per_offloaded_byte = 1

    def __init__(self, label: bool | str = "mmap") -> None:
        """The policy, reported as ``label`` (``True`` or ``"mmap"``)."""
        self.label = label  # per instance: True and "mmap" name one policy

    def prepare_process(self) -> None:
        """Fix glibc's mmap threshold (:func:`hector.runtime.libc_heap.fix_mmap_threshold`)."""
        libc_heap.fix_mmap_threshold()

    def __repr__(self) -> str:
        return f"UnmapLargeBlocks({self.label!r})"


class AdvisePages(HostMemoryPolicy):
    """``release_memory="advise"``: hand the whole pages of an offloaded activation (and of a
    read-back buffer backward is done with) back with ``madvise(MADV_DONTNEED)`` once the cache
    is its last owner, and trim the heap once per step that offloaded, within the plan's
    budget. The activation and then its read-back buffer fault in again."""

    label = "advise"
    refaults_per_offloaded_byte = 2
    trims_heap_per_step = True

    def let_go(self, storage: torch.UntypedStorage, memory: HostMemory) -> None:
        """Hand ``storage``'s pages back now, or once nobody else holds it. Only
        allocator-owned storages (resizable): memory someone else owns (``from_numpy``,
        ``frombuffer``) is only dropped."""
        if not storage.resizable():
            return
        if _sole_owner(storage):
            memory.hand_back(storage)
        else:
            memory.pending.append(storage)


class PeriodicTrim(HostMemoryPolicy):
    """``release_memory="trim"``: call ``malloc_trim`` each time :data:`TRIM_EVERY` bytes of
    offloaded activations were freed; about the offloaded bytes fault in again."""

    label = "trim"
    refaults_per_offloaded_byte = 1

    def freed_after_write(self, nbytes: int, memory: HostMemory) -> None:
        """Count the freed bytes; trim the heap once they reach :data:`TRIM_EVERY`."""
        memory.freed_since_trim += nbytes
        if memory.freed_since_trim >= TRIM_EVERY:
            memory.freed_since_trim = 0
            libc_heap.malloc_trim()


class CachingAllocatorReuse(HostMemoryPolicy):
    """``release_memory="allocator"``: freed activations go back to Hector's caching CPU
    allocator, which gives them to the next block of their size (nothing faults in again)."""

    label = "allocator"


_LEGACY: dict[bool | str, Callable[[], HostMemoryPolicy]] = {
    False: KeepInHeap,
    True: lambda: UnmapLargeBlocks(True),
    "mmap": UnmapLargeBlocks,
    "advise": AdvisePages,
    "trim": PeriodicTrim,
    "allocator": CachingAllocatorReuse,
}


def host_policy(release_memory: bool | str) -> HostMemoryPolicy:
    """The policy a legacy ``release_memory`` value names (not ``"auto"``).

    Raises:
        OffloadError: not one of :data:`RELEASE_MODES`.
    """
    if release_memory not in RELEASE_MODES or release_memory == "auto":
        raise OffloadError(f"release_memory must be one of {RELEASE_MODES}, got {release_memory!r}")
    factory = _LEGACY[release_memory]
    return factory()


def resolve_host_policy(
    release_memory: bool | str | HostMemoryPolicy, offloads: bool, module: nn.Module | None
) -> tuple[HostMemoryPolicy, str]:
    """The policy a cache follows for ``release_memory`` (a policy or a legacy value), and why
    ``"auto"`` could not install the caching allocator ("" if it did not try or could).

    ``offloads``: the cache may offload (its policy is not ``"none"``). ``"auto"`` and
    :class:`AdvisePages` become :class:`CachingAllocatorReuse` when Hector's caching CPU
    allocator serves the process (madvise would only make its reuse fault).

    Raises:
        OffloadError: an unknown value, :class:`CachingAllocatorReuse` without the allocator,
            or a bad ``$HECTOR_CPU_ALLOCATOR``.
    """
    note = ""
    if isinstance(release_memory, HostMemoryPolicy):
        policy = release_memory
    elif release_memory == "auto":
        policy, note = _auto_policy(offloads, module)
    else:
        policy = host_policy(release_memory)
    if isinstance(policy, AdvisePages) and cpu_allocator.installed():
        policy = CachingAllocatorReuse()
    elif isinstance(policy, CachingAllocatorReuse) and not cpu_allocator.installed():
        raise OffloadError(
            "release_memory='allocator' leaves freed activations to Hector's caching CPU "
            "allocator: call hector.offload.enable_caching_allocator() first"
        )
    return policy, note


def _auto_policy(offloads: bool, module: nn.Module | None) -> tuple[HostMemoryPolicy, str]:
    """``release_memory="auto"``: :class:`CachingAllocatorReuse` once Hector's caching CPU
    allocator serves the process (installed here, with its default limits, unless it already
    is), else :class:`AdvisePages`: when nothing is offloaded, when the module holds no CPU
    tensor, when ``$HECTOR_CPU_ALLOCATOR`` is ``pytorch``, or (with a warning and a note) when
    the allocator cannot be built here."""
    if cpu_allocator.installed():
        return CachingAllocatorReuse(), ""
    choice = os.environ.get(CPU_ALLOCATOR_ENV, "caching")
    if choice not in ("caching", "pytorch"):
        raise OffloadError(f"${CPU_ALLOCATOR_ENV} must be 'caching' or 'pytorch', got {choice!r}")
    if not offloads or choice == "pytorch":
        return AdvisePages(), ""
    if module is not None:
        devices = device_types(module)
        if devices and "cpu" not in devices:  # its activations never touch a CPU allocator
            return AdvisePages(), ""
    try:
        cpu_allocator.install()
    except cpu_allocator.CpuAllocatorError as err:
        warnings.warn(
            f"hector.offload: {err}; freed activations are handed back with madvise "
            '(release_memory="advise") instead, and the peak memory falls less '
            '(docs/offload.md, "Caching CPU allocator")',
            stacklevel=6,
        )
        return AdvisePages(), str(err)
    return CachingAllocatorReuse(), ""


def byte_weighted_median(sizes: list[int]) -> int | None:
    """The size that half of the bytes of ``sizes`` come in blocks of at most (None if empty)."""
    ordered = sorted(sizes)
    half, seen = sum(ordered) / 2, 0
    for size in ordered:
        seen += size
        if seen >= half:
            return size
    return None


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
    piece = max(min(piece_bytes or nbytes, nbytes), libc_heap.PAGE)
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
            if not drop_storage_pages(block.untyped_storage()):
                return 0.0
            block.fill_(3)
        costs.append(max(time.perf_counter_ns() - start - resident, 0) / total)
    return sorted(costs)[len(costs) // 2]


class ReleaseCostProbe:
    """Nanoseconds per byte that handing memory back and faulting it in again costs
    (:func:`measure_release_cost`), measured once, on first need: a plan given by the caller
    was not profiled here, and without it every trim would look free. Measured on blocks of
    the profiled step's byte-weighted median offloadable storage (one 16 MiB block without a
    profile): under huge-page allocation a model whose activations are smaller than 2 MiB
    refaults them a page at a time, and a 16 MiB probe said otherwise."""

    def __init__(self, piece_sizes: list[int]) -> None:
        """A probe measuring on the median of ``piece_sizes`` (read when it measures)."""
        self.piece_sizes = piece_sizes
        #: The measured figure (None until measured; may be set to skip the measurement).
        self.ns_per_byte: float | None = None

    def cost(self) -> float:
        """The measured nanoseconds per byte (measured now on first call)."""
        if self.ns_per_byte is None:
            piece = byte_weighted_median(self.piece_sizes)
            self.ns_per_byte = measure_release_cost(piece_bytes=piece)
        return self.ns_per_byte
