"""glibc's heap through ctypes, and host buffers laid out for the native store.

The offloading runtime controls what the C library does with freed memory: it hands whole pages
of dead memory back to the operating system (``madvise(MADV_DONTNEED)``, :func:`drop_pages`),
returns the free pages of glibc's heaps (``malloc_trim``, :func:`trim_heap`), fixes glibc's
mmap threshold so large blocks are unmapped when freed (``mallopt``,
:func:`fix_mmap_threshold`) and reads how much of the heap is free (``mallinfo2``,
:func:`heap_free_bytes`). Where the C library is not glibc these do nothing (its allocator's
own policy applies) and the figures are None.

:func:`in_phase_buffer` allocates read-back buffers whose address has the phase the store's
file layout wants (:data:`BLOCK`), so reads move whole blocks straight into memory.

This module imports only ctypes, os and torch, like the rest of the runtime binding.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch

__all__ = [
    "BLOCK",
    "MMAP_THRESHOLD",
    "PAGE",
    "PHASE_ALIGN",
    "drop_pages",
    "fix_mmap_threshold",
    "heap_free_bytes",
    "in_phase_buffer",
    "libc",
    "malloc_trim",
    "mallinfo2",
    "process_resident_bytes",
    "trim_heap",
]

#: The size of a page of memory.
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_MADV_DONTNEED = 4  # <sys/mman.h>

#: glibc's initial mmap threshold, fixed (``mallopt`` turns its dynamic raising off): blocks of
#: at least this size are mapped on their own and unmapped when freed.
MMAP_THRESHOLD = 128 << 10
_M_MMAP_THRESHOLD = -3  # <malloc.h>
_mmap_threshold_fixed = False

#: The store's O_DIRECT block: it keeps byte i of an object at file offset (the written
#: address mod BLOCK) + i, so a read into an address in that same phase moves whole blocks
#: straight into memory, and any other address goes through a chunk-sized copy buffer.
BLOCK = 4096
#: Phases that keep every dtype's elements aligned in a shifted buffer (allocators give 64).
PHASE_ALIGN = 64


@functools.cache
def libc() -> Any:
    """The C library (glibc) through ctypes, or None where it is not glibc (its allocator's
    own policy applies there)."""
    try:
        import ctypes

        lib = ctypes.CDLL("libc.so.6", use_errno=True)
        lib.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        return lib
    except (OSError, AttributeError):
        return None


def drop_pages(address: int, nbytes: int) -> int:
    """Hand the whole pages inside the ``nbytes`` of memory at ``address`` back to the
    operating system (``madvise(MADV_DONTNEED)``); the bytes released. Only for memory whose
    contents are dead: the caller is its last owner and frees it next, and the allocator's
    chunk headers lie outside the whole pages of the data (or are rewritten by ``free``,
    reading as zero)."""
    lib = libc()
    start = -(-address // PAGE) * PAGE
    end = (address + nbytes) // PAGE * PAGE
    if lib is None or end <= start:
        return 0
    return end - start if lib.madvise(start, end - start, _MADV_DONTNEED) == 0 else 0


@functools.cache
def mallinfo2() -> Any:
    """The C library's ``mallinfo2`` with its result type declared, or None (not glibc, or
    glibc before 2.33)."""
    import ctypes

    lib = libc()
    if lib is None or not hasattr(lib, "mallinfo2"):
        return None
    names = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"

    class _MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in names.split()]  # noqa: RUF012

    lib.mallinfo2.restype = _MallInfo2
    return lib.mallinfo2


def heap_free_bytes() -> int | None:
    """Free bytes in glibc's heaps now (``mallinfo2().fordblks``: freed, still resident until
    trimmed), or None where that is not known."""
    info = mallinfo2()
    return None if info is None else int(info().fordblks)


def malloc_trim() -> None:
    """Return the free pages of glibc's heaps to the operating system."""
    lib = libc()
    if lib is not None:
        lib.malloc_trim(0)


def process_resident_bytes() -> int | None:
    """The process's resident memory now (``/proc/self/statm``), or None where unknown."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return None


def trim_heap() -> float | None:
    """``malloc_trim``, and the fraction of the heap's free bytes it handed back (measured
    as the fall of resident memory; None where either is unknown). Free chunks whose pages
    were already dropped count in glibc's free bytes but are not resident: a trim after an
    offloading forward hands back 39-62% of them on the heavier GPT."""
    free, before = heap_free_bytes(), process_resident_bytes()
    malloc_trim()
    after = process_resident_bytes()
    if not free or before is None or after is None:
        return None
    return min(max(before - after, 0) / free, 1.0)


def fix_mmap_threshold() -> None:
    """Fix glibc's mmap threshold at :data:`MMAP_THRESHOLD`, once per process
    (``mallopt(M_MMAP_THRESHOLD)``): large blocks are then unmapped when freed, where glibc
    would otherwise raise the threshold after the first large free and keep them in its heap."""
    global _mmap_threshold_fixed
    if _mmap_threshold_fixed:
        return
    _mmap_threshold_fixed = True
    lib = libc()
    if lib is not None:
        lib.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def in_phase_buffer(nbytes: int, phase: int, pin: bool) -> tuple[torch.Tensor, int]:
    """A ``nbytes`` uint8 read-back buffer whose address is ``phase`` mod :data:`BLOCK`, and
    its byte offset in its storage: one block more, shifted (pinned memory: a plain
    allocation when it is in phase already, as page-aligned pinned blocks are). A phase that
    is not a multiple of :data:`PHASE_ALIGN` gets a plain buffer (the store then copies)."""
    if phase % PHASE_ALIGN:
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin), 0
    if pin:  # page-aligned blocks, rounded up in size: in phase with page-aligned staging
        plain = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        if plain.data_ptr() % BLOCK == phase:
            return plain, 0
        del plain
    # Host memory: always one block more (its untouched pages cost nothing), one allocation.
    raw = torch.empty(nbytes + BLOCK, dtype=torch.uint8, pin_memory=pin)
    shift = (phase - raw.data_ptr()) % BLOCK
    return raw[shift : shift + nbytes], shift
