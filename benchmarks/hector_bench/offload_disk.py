"""The disk's bandwidth as ``hector bench offload`` records it, next to what the store achieved.

Both probes are :mod:`hector.runtime.bandwidth`'s: :func:`raw_disk_bandwidth` writes then reads
one file sequentially in 4 MiB ``O_DIRECT`` blocks (buffered where refused),
:func:`engine_bandwidth` moves 16 MiB objects through the native store alone, and
:func:`raw_around` pools the raw probes taken around one system's run.
"""

from __future__ import annotations

import statistics
from typing import Any

__all__ = ["engine_bandwidth", "raw_around", "raw_disk_bandwidth"]


def raw_disk_bandwidth(directory: str, total_mib: int = 256, block_mib: int = 4) -> dict[str, Any]:
    """Sequential write then read of one file with ``O_DIRECT`` (buffered where refused):
    ``bytes``, ``direct``, ``write_bandwidth`` and ``read_bandwidth`` (bytes/s)."""
    from hector.runtime.bandwidth import disk_bandwidth

    return disk_bandwidth(directory, total_mib << 20, block_mib << 20).as_record()


def engine_bandwidth(root: str, total_mib: int = 256, piece_mib: int = 16) -> dict[str, Any]:
    """Write then read ``total_mib`` through the native store alone (16 MiB objects)."""
    from hector.runtime.bandwidth import store_bandwidth
    from hector.runtime.offload import TensorStore

    with TensorStore(root) as store:
        pieces = max(total_mib // piece_mib, 1)
        total = pieces * (piece_mib << 20)
        measured = store_bandwidth(store, total, pieces)
        return {
            "bytes": total,
            "direct": store.direct,
            "threads": store.threads,
            "write_bandwidth": measured.write,
            "read_bandwidth": measured.read,
        }


def raw_around(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> dict[str, Any]:
    """The raw disk probes taken just before and just after one system's run, and their
    medians (``write_bandwidth``, ``read_bandwidth``): what that run's I/O is compared with.

    On these shared disks one probe says more about its moment than about the disk: the write
    figure taken at the start of one benchmark was 1522 MB/s and those of the next half hour
    799-1497; two probes taken back to back read 893 and 2367 MB/s. The median of several
    probes (``--raw-probes`` each side) is the run's raw figure; the record keeps every probe
    and their range (``write_range``, ``read_range``)."""
    probes = [*before, *after]
    out: dict[str, Any] = {"before": before, "after": after}
    for what in ("write", "read"):
        values = [p[f"{what}_bandwidth"] for p in probes]
        out[f"{what}_bandwidth"] = statistics.median(values)
        out[f"{what}_range"] = [min(values), max(values)]
    return out
