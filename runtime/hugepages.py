"""Transparent huge pages for PyTorch's CPU allocations, the cheap way back for offloaded memory.

Offloading on CPU hands the memory of offloaded activations back to the operating system, and
whatever reuses it (the next forward's activations, backward's gradients and read-back
buffers) faults it in again. With 4 KiB pages a fault costs 2-3 us on the VMs Hector is
measured on, 0.45-0.9 ns per byte; with 2 MiB transparent huge pages the same refill costs
0.09-0.2 ns per byte (``measure_release_cost``). PyTorch backs its CPU blocks of 2 MiB or
more with huge pages (``madvise(MADV_HUGEPAGE)``) when ``THP_MEM_ALLOC_ENABLE=1`` is set
before its first CPU allocation; :func:`enable_huge_pages` sets it and checks that it took.
"""

from __future__ import annotations

import os

__all__ = [
    "THP_ENV",
    "enable_huge_pages",
    "huge_page_mode",
    "huge_pages_advice",
    "huge_pages_in_effect",
]

#: PyTorch's switch, read once, at the process's first CPU allocation (c10's ``alloc_cpu``).
THP_ENV = "THP_MEM_ALLOC_ENABLE"
_THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"
#: PyTorch's threshold for huge-page allocations (``gAlloc_threshold_thp``).
HUGE_PAGE_ALLOC_BYTES = 2 << 20
#: The probe: over that threshold, and over glibc's largest mmap threshold (32 MiB), so it is
#: a fresh mapping that only PyTorch's own ``madvise`` can have marked. A smaller one may land
#: in heap memory NumPy marked (it marks its arrays of 4 MiB or more, and the heap it frees
#: them to stays marked): in a process that never asked for huge pages, 2 of 4 benchmark runs
#: read as having them. Allocated, never touched: it costs no memory.
_PROBE_BYTES = 64 << 20


def huge_page_mode() -> str:
    """The kernel's transparent huge page mode: ``"always"``, ``"madvise"`` or ``"never"``,
    or ``"unavailable"`` (no THP, or not Linux). Under ``"never"`` nothing is backed by huge
    pages whatever PyTorch asks."""
    try:
        with open(_THP_ENABLED, encoding="ascii") as f:
            text = f.read()
    except OSError:
        return "unavailable"
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else "unavailable"


def _mapping_flags(address: int) -> list[str]:
    """``VmFlags`` of the mapping holding ``address`` (``/proc/self/smaps``), [] if unknown."""
    inside = False
    try:
        with open("/proc/self/smaps", encoding="ascii") as f:
            for line in f:
                head = line.split(maxsplit=1)[0]
                if "-" in head and ":" not in head:
                    lo, hi = (int(x, 16) for x in head.split("-"))
                    inside = lo <= address < hi
                elif inside and line.startswith("VmFlags:"):
                    return line.split()[1:]
    except (OSError, ValueError):
        pass
    return []


def huge_pages_in_effect() -> bool:
    """Whether PyTorch's CPU allocations of 2 MiB or more get huge pages in this process: a
    probe allocation's own mapping (64 MiB: see ``_PROBE_BYTES``) is marked ``MADV_HUGEPAGE``
    (``hg``) and the kernel's mode lets that count."""
    import torch

    mode = huge_page_mode()
    if mode != "madvise":
        return mode == "always"  # "always": every anonymous mapping may get huge pages
    probe = torch.empty(_PROBE_BYTES, dtype=torch.uint8)
    return "hg" in _mapping_flags(probe.data_ptr())


def enable_huge_pages() -> bool:
    """Ask PyTorch to back CPU allocations of 2 MiB or more with transparent huge pages, and
    return whether that is in effect (:func:`huge_pages_in_effect`).

    Call it at the top of a training script, before any tensor exists: PyTorch reads
    ``THP_MEM_ALLOC_ENABLE`` once, at the process's first CPU allocation, so afterwards it
    returns False (as it does under the kernel's ``"never"`` mode). A value the caller already
    set is left alone. It changes every large CPU allocation of the process, not only the
    offloaded ones; numerics are unchanged.
    """
    os.environ.setdefault(THP_ENV, "1")
    return huge_pages_in_effect()


def huge_pages_advice(piece_bytes: int | None) -> str | None:
    """What to tell the user of a CPU offload whose activations come in blocks of
    ``piece_bytes`` (the profiled step's byte-weighted median): to enable huge pages, when
    those blocks are large enough for PyTorch's huge-page allocation (2 MiB or more), the
    kernel would back them (``"madvise"`` mode) and this process does not have it. None
    otherwise.

    Measured on the heavier GPT (12 MiB activations; docs/offload.md, the huge pages'
    measured results), the same plan under huge pages faulted 5x less and its peak RSS fell
    56-62% against plain keep-all instead of 40-46%, in four interleaved records; its step
    was 4-7 points faster in three of them and 6 points slower in the fourth. On the small
    GPT (1.5 MiB activations) huge pages made plain training about 10% slower: advice, for
    large activations only, never a default.
    """
    if piece_bytes is None or piece_bytes < HUGE_PAGE_ALLOC_BYTES:
        return None
    if huge_page_mode() != "madvise" or huge_pages_in_effect():
        return None  # "always": every mapping may get them already; "never": none can
    return (
        f"offloaded activations come in blocks of {piece_bytes / 2**20:.0f} MiB: huge pages "
        "would make handing their memory back and faulting it in again cheaper. Call "
        "hector.offload.enable_huge_pages() at the top of the script, before any tensor "
        f'exists, or start the process with {THP_ENV}=1 (docs/offload.md, "Huge pages")'
    )
