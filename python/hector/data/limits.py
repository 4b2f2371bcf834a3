"""Resource limits: whether a graph fits Hector's kernels and this machine, checked before
anything of its size is allocated.

The compiled kernels index nodes, edges and types with int32 (:data:`MAX_COUNT`). Memory is
bounded by :func:`memory_limit`: ``HECTOR_MEMORY_LIMIT`` where set, else the memory available
now (``MemAvailable``, the cgroup's headroom). :func:`check_size` weighs a graph's counts with
the peak bytes a builder needs per node, edge and type (:class:`SizeBudget` holds a builder's
costs) and raises :class:`ResourceLimitError` naming the limit and where it comes from. Every
builder of graphs and datasets calls it first.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..runtime.settings import SettingError

__all__ = [
    "GRAPH_BYTES_PER_EDGE",
    "GRAPH_BYTES_PER_ETYPE",
    "GRAPH_BYTES_PER_NODE",
    "MAX_COUNT",
    "ResourceLimitError",
    "SizeBudget",
    "check_size",
    "memory_limit",
]

#: Largest node, edge or edge type count: the compiled kernels index with int32.
MAX_COUNT = 2**31 - 1


class ResourceLimitError(ValueError):
    """An input needs larger ids or more memory than Hector allows; nothing was allocated.

    The message names the limit (int32 indexing of the kernels, or the memory limit and where
    it comes from: ``HECTOR_MEMORY_LIMIT``, the cgroup, ``MemAvailable``).
    """


#: Peak bytes :meth:`HeteroGraph.from_edge_index` needs per node (int32 node type, the native
#: degree count's int64 offsets, the compaction's int32 stamp and int64 row), per edge (int64
#: copies of the inputs, the int64 permutation, int32 sorted arrays, two float32 normalizers,
#: the native int64 by-destination order and the int32 compaction map) and per edge type.
GRAPH_BYTES_PER_NODE = 24
GRAPH_BYTES_PER_EDGE = 96
GRAPH_BYTES_PER_ETYPE = 24

_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _parse_bytes(text: str) -> int:
    """``"123"``, ``"512M"``, ``"8G"`` (binary units) → bytes; ValueError otherwise."""
    spec = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = spec[-1:] if spec[-1:] in _UNITS else ""
    number = spec[: len(spec) - len(unit)]
    if not number.isdigit():
        raise SettingError(f"HECTOR_MEMORY_LIMIT must be a byte count such as 8G, got {text!r}")
    return int(number) * _UNITS[unit]


def _cgroup_headroom() -> int | None:
    """Bytes left under this process's cgroup (v2) memory limit, if it has one."""
    base = Path("/sys/fs/cgroup")
    try:
        limit = (base / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(int(limit) - int((base / "memory.current").read_text()), 0)
    except (OSError, ValueError):
        return None


def _mem_available() -> int | None:
    """``MemAvailable`` from ``/proc/meminfo`` in bytes, else physical memory, else None."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, AttributeError):
        return None


def memory_limit() -> tuple[int, str]:
    """The bytes an input may take and where that limit comes from.

    ``HECTOR_MEMORY_LIMIT`` (bytes, or with a K/M/G/T suffix) when set; else the memory
    available now: the smaller of ``MemAvailable`` and the cgroup's headroom.
    """
    env = os.environ.get("HECTOR_MEMORY_LIMIT")
    if env:
        return _parse_bytes(env), "HECTOR_MEMORY_LIMIT"
    found = [
        (b, how)
        for b, how in ((_mem_available(), "available memory"), (_cgroup_headroom(), "cgroup"))
        if b is not None
    ]
    if not found:
        return 2**63 - 1, "no limit known"
    return min(found)


def _gib(n: int) -> str:
    return f"{n / 2**30:.3g} GiB" if n >= 2**30 else f"{n / 2**20:.3g} MiB"


def check_size(
    what: str,
    *,
    nodes: int = 0,
    edges: int = 0,
    relations: int = 0,
    node_types: int = 0,
    bytes_per_node: int = GRAPH_BYTES_PER_NODE,
    bytes_per_edge: int = GRAPH_BYTES_PER_EDGE,
    bytes_per_relation: int = GRAPH_BYTES_PER_ETYPE,
    bytes_per_node_type: int = 0,
) -> None:
    """Check a graph's sizes before anything of that size is allocated.

    Args:
        what: names the input in the message (a file, ``"from_edge_index"``, ...).
        nodes: node count N (the largest node id + 1).
        edges: edge count E.
        relations: edge type count R.
        node_types: node type count.
        bytes_per_node: peak bytes the caller needs per node, and likewise
        bytes_per_edge: per edge,
        bytes_per_relation: per edge type and
        bytes_per_node_type: per node type.

    Raises:
        ResourceLimitError: a count exceeds :data:`MAX_COUNT` (int32 indexing) or the estimate
            exceeds :func:`memory_limit`.
    """
    counts = (("nodes", nodes), ("edges", edges), ("edge types", relations))
    for name, count in (*counts, ("node types", node_types)):
        if count > MAX_COUNT:
            raise ResourceLimitError(
                f"{what}: {count} {name} exceed the int32 limit of Hector's kernels "
                f"({MAX_COUNT} {name})"
            )
    need = nodes * bytes_per_node + edges * bytes_per_edge + relations * bytes_per_relation
    need += node_types * bytes_per_node_type
    limit, source = memory_limit()
    if need > limit:
        raise ResourceLimitError(
            f"{what}: {nodes} nodes, {edges} edges and {relations} edge types need about "
            f"{_gib(need)} of memory, over the limit of {_gib(limit)} ({source}; set "
            "HECTOR_MEMORY_LIMIT to change it)"
        )


@dataclass(frozen=True)
class SizeBudget:
    """What a builder of graphs from an edge index allocates, checked before it allocates.

    Attributes:
        what: names the builder (or its input) in limit messages.
        bytes_per_node: peak bytes the builder needs per node, and likewise
        bytes_per_edge: per edge,
        bytes_per_relation: per edge type and
        bytes_per_node_type: per node type.
    """

    what: str
    bytes_per_node: int = GRAPH_BYTES_PER_NODE
    bytes_per_edge: int = GRAPH_BYTES_PER_EDGE
    bytes_per_relation: int = GRAPH_BYTES_PER_ETYPE
    bytes_per_node_type: int = 0

    def check(self, *, nodes: int, edges: int, relations: int, node_types: int) -> None:
        """:func:`check_size` with this builder's costs; raises :class:`ResourceLimitError`."""
        check_size(
            self.what,
            nodes=nodes,
            edges=edges,
            relations=relations,
            node_types=node_types,
            bytes_per_node=self.bytes_per_node,
            bytes_per_edge=self.bytes_per_edge,
            bytes_per_relation=self.bytes_per_relation,
            bytes_per_node_type=self.bytes_per_node_type,
        )
