"""Heterogeneous graphs as the compiled code sees them.

A :class:`HeteroGraph` is a COO edge list sorted (stably) by edge type, with node types and the
per-edge degree normalizers RGCN-style models need, all as contiguous CPU tensors. It is built
from PyG-style ``edge_index`` / ``edge_type`` tensors by :meth:`HeteroGraph.from_edge_index`,
which validates its inputs and raises :class:`ValueError` naming the problem; preprocessing
(range checks, sorting, degree counts) runs in the native runtime. :func:`check_edge_index` is
that validation, shared by every builder from an edge index (``hector.datasets`` too).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hector.dialects.hector_intra import GRAPH_ARRAYS as _GRAPH_ARRAYS
from hector.runtime import native

__all__ = [
    "GRAPH_ARRAYS",
    "MAX_COUNT",
    "HeteroGraph",
    "EdgeIndexInput",
    "ResourceLimitError",
    "SizeBudget",
    "as_int_tensor",
    "check_edge_index",
    "check_size",
    "memory_limit",
    "random_graph",
]

#: Names of the graph tensors passed to compiled code, in exactly this order (see
#: :meth:`HeteroGraph.arrays`); defined once, with the dialect that takes them.
GRAPH_ARRAYS = _GRAPH_ARRAYS

_INT32_MAX = 2**31 - 1

#: Largest node, edge or edge type count: the compiled kernels index with int32.
MAX_COUNT = _INT32_MAX


# ---------------------------------------------------------------------------------------------
# Resource limits: sizes are checked against what the machine can hold before allocating
# ---------------------------------------------------------------------------------------------


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
        raise ValueError(f"HECTOR_MEMORY_LIMIT must be a byte count such as 8G, got {text!r}")
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


#: Unsigned tensor dtypes few torch operators support (no min/max/comparisons): made int64.
_WIDE_UNSIGNED = (torch.uint16, torch.uint32, torch.uint64)
_INT64_MAX = 2**63 - 1


def as_int_tensor(name: str, value: Any) -> torch.Tensor:
    """``value`` (a tensor or NumPy array of integers) as a CPU integer tensor.

    Unsigned 16/32/64-bit values become int64 (torch cannot compare them), checked to fit.

    Raises:
        ValueError: naming ``name``, for another type, a non-integer dtype, or a value over
            the int64 range.
    """
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "iu":
            raise ValueError(f"{name} must have an integer dtype, got numpy {value.dtype}")
        value = torch.from_numpy(np.ascontiguousarray(value))  # from_numpy rejects <0 strides
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of integers, got {type(value).__name__}")
    if value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool:
        raise ValueError(f"{name} must have an integer dtype, got {value.dtype}")
    value = value.detach().cpu()
    if value.dtype in _WIDE_UNSIGNED:
        flat = value.numpy().reshape(-1)
        if flat.size and int(flat.max()) > _INT64_MAX:
            i = int(np.argmax(flat > _INT64_MAX))
            raise ValueError(f"{name} entry {i} = {int(flat[i])} does not fit in int64")
        value = torch.from_numpy(value.numpy().astype(np.int64))
    return value


def _as_count(name: str, value: Any, *, minimum: int = 0) -> int:
    """Return ``value`` as a Python int in ``[minimum, 2**31 - 1]``.

    Raises:
        ValueError: naming ``name``, for a value that is not an int or is below ``minimum``;
            a :class:`ResourceLimitError` for one over the int32 range.
    """
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if value > _INT32_MAX:
        raise ResourceLimitError(f"{name} = {value} does not fit in int32 (max {_INT32_MAX})")
    return value


def _int64_numpy(t: torch.Tensor) -> np.ndarray:
    """Return a contiguous int64 numpy view/copy of an integer CPU tensor."""
    return np.ascontiguousarray(t.to(torch.int64).numpy())


# ---------------------------------------------------------------------------------------------
# Edge-index input: the one validator of PyG-style edge_index / edge_type / node_type tensors
# ---------------------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class EdgeIndexInput:
    """PyG-style graph input that :func:`check_edge_index` accepted: every id and type in range.

    Attributes:
        edge_index: integer CPU tensor [2, E] (the caller's dtype; unsigned wide ints as int64).
        edge_type: integer CPU tensor [E].
        node_type: integer CPU tensor [N], or None when the caller gave none (one node type).
        num_nodes: N.
        num_etypes: number of edge types R; every ``edge_type`` entry is in ``[0, R)``.
        num_ntypes: number of node types; every ``node_type`` entry is in ``[0, num_ntypes)``.
        src, dst, etype: int64 NumPy arrays [E] of the edges (rows of ``edge_index``, and
            ``edge_type``), as the native runtime takes them.
    """

    edge_index: torch.Tensor
    edge_type: torch.Tensor
    node_type: torch.Tensor | None
    num_nodes: int
    num_etypes: int
    num_ntypes: int
    src: np.ndarray
    dst: np.ndarray
    etype: np.ndarray


def _edge_tensors(edge_index: Any, edge_type: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``edge_index`` [2, E] and ``edge_type`` [E] as integer tensors, or ValueError."""
    edge_index = as_int_tensor("edge_index", edge_index)
    edge_type = as_int_tensor("edge_type", edge_type)
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must have shape [2, E], got {list(edge_index.shape)}")
    if edge_type.dim() != 1:
        raise ValueError(f"edge_type must have shape [E], got {list(edge_type.shape)}")
    num_edges = edge_index.shape[1]
    if edge_type.shape[0] != num_edges:
        raise ValueError(
            f"edge_type has {edge_type.shape[0]} entries but edge_index has {num_edges} edges"
        )
    return edge_index, edge_type


def _check_edge_ranges(
    src: np.ndarray,
    dst: np.ndarray,
    etype: np.ndarray,
    num_nodes: int,
    num_etypes: int,
    etypes: str,
) -> None:
    """Range-check the edges in the native runtime, edge by edge (source, destination, type)."""
    code, bad = native.graph_validate(src, dst, etype, num_nodes, num_etypes)
    if code == native.ERR_SRC_RANGE:
        raise ValueError(
            f"edge_index[0][{bad}] = {int(src[bad])} is out of range for num_nodes={num_nodes}"
        )
    if code == native.ERR_DST_RANGE:
        raise ValueError(
            f"edge_index[1][{bad}] = {int(dst[bad])} is out of range for num_nodes={num_nodes}"
        )
    if code == native.ERR_ETYPE_RANGE:
        value = int(etype[bad])
        if value < 0:
            raise ValueError(f"edge_type[{bad}] = {value} is negative")
        raise ValueError(f"edge_type[{bad}] = {value} is out of range for {etypes}={num_etypes}")


def _check_node_types(node_type: torch.Tensor | None, num_nodes: int, num_ntypes: int) -> None:
    """Every node type in ``[0, num_ntypes)``, and at least one node type when there are nodes."""
    if node_type is not None:
        ntype64 = node_type.to(torch.int64)
        bad_nodes = ((ntype64 < 0) | (ntype64 >= num_ntypes)).nonzero()
        if bad_nodes.numel() > 0:
            i = int(bad_nodes[0, 0])
            value = int(ntype64[i])
            if value < 0:
                raise ValueError(f"node_type[{i}] = {value} is negative")
            raise ValueError(
                f"node_type[{i}] = {value} is out of range for num_ntypes={num_ntypes}"
            )
    if num_nodes > 0 and num_ntypes == 0:
        raise ValueError(f"num_ntypes must be >= 1 for a graph with {num_nodes} nodes")


def check_edge_index(
    edge_index: Any,
    edge_type: Any,
    *,
    budget: SizeBudget,
    num_nodes: Any = None,
    node_type: Any = None,
    num_etypes: Any = None,
    num_ntypes: Any = None,
    etypes: str = "num_etypes",
) -> EdgeIndexInput:
    """Validate PyG-style graph input: the one check behind every builder from an edge index.

    Dtypes and shapes first, then the counts (given ones must be ints in ``[0, 2**31 - 1]``;
    missing ones are read off the tensors), then the sizes against ``budget`` (before anything
    of that size is allocated), then every edge's endpoints and type (edge by edge) and every
    node's type.

    Args:
        edge_index: integer [2, E]: sources in row 0, destinations in row 1.
        edge_type: integer [E], the type of each edge.
        budget: what the caller allocates, to check the sizes against the limits.
        num_nodes: N; defaults to ``len(node_type)`` when given, else ``edge_index.max() + 1``
            (0 without edges).
        node_type: integer [N] node types; None means one node type.
        num_etypes: number of edge types R; defaults to ``edge_type.max() + 1``.
        num_ntypes: number of node types; defaults to ``node_type.max() + 1`` (1 without
            ``node_type`` or nodes).
        etypes: the caller's name for the edge type count, used in messages.

    Returns:
        The accepted input.

    Raises:
        ValueError: naming the offending argument or entry: a non-integer dtype, a wrong shape,
            mismatched lengths, a negative count, a node id, edge type or node type out of
            range. :class:`ResourceLimitError` (a ValueError) for counts over the int32
            indexing of the kernels or sizes over :func:`memory_limit`.
    """
    edge_index, edge_type = _edge_tensors(edge_index, edge_type)
    num_edges = int(edge_index.shape[1])
    if node_type is not None:
        node_type = as_int_tensor("node_type", node_type)
        if node_type.dim() != 1:
            raise ValueError(f"node_type must have shape [N], got {list(node_type.shape)}")
    if num_nodes is not None:
        num_nodes = _as_count("num_nodes", num_nodes)
    elif node_type is not None:
        num_nodes = int(node_type.shape[0])
    else:  # a negative id is reported below
        num_nodes = max(int(edge_index.max()) + 1, 0) if num_edges > 0 else 0
    if node_type is not None and node_type.shape[0] != num_nodes:
        raise ValueError(f"node_type has {node_type.shape[0]} entries but num_nodes={num_nodes}")
    if num_etypes is not None:
        num_etypes = _as_count(etypes, num_etypes)
    else:  # a negative type is reported below
        num_etypes = max(int(edge_type.max()) + 1, 0) if num_edges > 0 else 0
    if num_ntypes is not None:
        num_ntypes = _as_count("num_ntypes", num_ntypes)
    elif node_type is not None and num_nodes > 0:  # a negative type is reported below
        num_ntypes = max(int(node_type.max()) + 1, 1)
    else:
        num_ntypes = 1
    budget.check(nodes=num_nodes, edges=num_edges, relations=num_etypes, node_types=num_ntypes)
    src, dst = _int64_numpy(edge_index[0]), _int64_numpy(edge_index[1])
    etype = _int64_numpy(edge_type)
    _check_edge_ranges(src, dst, etype, num_nodes, num_etypes, etypes)
    _check_node_types(node_type, num_nodes, num_ntypes)
    return EdgeIndexInput(
        edge_index, edge_type, node_type, num_nodes, num_etypes, num_ntypes, src, dst, etype
    )


#: What :meth:`HeteroGraph.from_edge_index` allocates.
_FROM_EDGE_INDEX = SizeBudget("HeteroGraph.from_edge_index")


class HeteroGraph:
    """A heterogeneous graph with edges sorted by edge type.

    Build one with :meth:`from_edge_index` (or :func:`random_graph`); the constructor takes
    already-validated, already-sorted arrays and is not meant to be called directly.

    Attributes (all contiguous CPU tensors; E edges, N nodes, R edge types):
        src, dst, etype: int32 [E], edge endpoints and types in edge-type-sorted order.
        ntype: int32 [N], the type of every node.
        etype_ptr: int32 [R + 1], edges of type r are ``[etype_ptr[r], etype_ptr[r + 1])``.
        norm_dst_etype: float32 [E, 1], ``1 / #edges with the same (dst, etype)``: RGCN's
            1/c_{i,r}, i.e. a mean over the in-neighbours of each relation.
        norm_dst: float32 [E, 1], ``1 / in-degree(dst)``.
        perm: int64 [E], the original (input) id of each sorted edge.
        compact_src, compact_etype: int32 [C], the unique (source, edge type) pairs; and
        edge_compact: int32 [E], each edge's pair (built on first use, cached).
        dst_compact_dst, dst_compact_etype: int32 [D], the unique (destination, edge type)
        pairs sorted by (edge type, destination); edge_dst_compact: int32 [E], each edge's
        pair (built on first use, cached).
    """

    def __init__(
        self,
        *,
        src: torch.Tensor,
        dst: torch.Tensor,
        etype: torch.Tensor,
        ntype: torch.Tensor,
        etype_ptr: torch.Tensor,
        norm_dst_etype: torch.Tensor,
        norm_dst: torch.Tensor,
        perm: torch.Tensor,
        num_ntypes: int,
    ) -> None:
        """Store preprocessed arrays; use :meth:`from_edge_index` to build a graph."""
        self.src = src
        self.dst = dst
        self.etype = etype
        self.ntype = ntype
        self.etype_ptr = etype_ptr
        self.norm_dst_etype = norm_dst_etype
        self.norm_dst = norm_dst
        self.perm = perm
        self._num_ntypes = num_ntypes
        # Derived maps, built on first use (or handed in by from_layout) and cached here.
        self._compact_map: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self._dst_compact_map: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self._src_type_map: tuple[torch.Tensor, bool] | None = None
        self._inverse_perm: torch.Tensor | None = None

    @classmethod
    def from_edge_index(
        cls,
        edge_index: torch.Tensor,
        edge_type: torch.Tensor,
        num_nodes: int | None = None,
        node_type: torch.Tensor | None = None,
        num_etypes: int | None = None,
        num_ntypes: int | None = None,
    ) -> HeteroGraph:
        """Build a graph from PyG-style tensors, validating them first.

        Args:
            edge_index: integer [2, E] tensor; row 0 holds source and row 1 destination ids.
            edge_type: integer [E] tensor of edge types.
            num_nodes: number of nodes N; defaults to ``len(node_type)`` when given, else
                ``edge_index.max() + 1`` (0 without edges).
            node_type: integer [N] tensor of node types; defaults to all zeros.
            num_etypes: number of edge types R; defaults to ``edge_type.max() + 1``.
            num_ntypes: number of node types; defaults to ``node_type.max() + 1`` (1 without
                ``node_type``).

        Returns:
            The graph, with edges stably sorted by edge type.

        Raises:
            ValueError: on a non-integer dtype, a wrong shape, mismatched lengths, a negative
                count, or a node id, edge type or node type out of range; the message names the
                offending entry.
        """
        checked = check_edge_index(
            edge_index,
            edge_type,
            budget=_FROM_EDGE_INDEX,
            num_nodes=num_nodes,
            node_type=node_type,
            num_etypes=num_etypes,
            num_ntypes=num_ntypes,
        )
        if checked.node_type is None:
            ntype = torch.zeros(checked.num_nodes, dtype=torch.int32)
        else:
            ntype = checked.node_type.to(torch.int32, copy=True).contiguous()
        num_nodes, num_etypes, num_edges = checked.num_nodes, checked.num_etypes, len(checked.src)

        # Stable sort by edge type, then degree normalizers on the sorted edges.
        perm_np, etype_ptr_np = native.graph_sort_by_etype(checked.etype, num_etypes)
        src32 = np.ascontiguousarray(checked.src[perm_np].astype(np.int32))
        dst32 = np.ascontiguousarray(checked.dst[perm_np].astype(np.int32))
        etype32 = np.ascontiguousarray(checked.etype[perm_np].astype(np.int32))
        norm_dst_etype, norm_dst = native.graph_degree_norm(dst32, etype32, num_nodes, num_etypes)
        return cls(
            src=torch.from_numpy(src32),
            dst=torch.from_numpy(dst32),
            etype=torch.from_numpy(etype32),
            ntype=ntype,
            etype_ptr=torch.from_numpy(etype_ptr_np.astype(np.int32)),
            norm_dst_etype=torch.from_numpy(norm_dst_etype).reshape(num_edges, 1),
            norm_dst=torch.from_numpy(norm_dst).reshape(num_edges, 1),
            perm=torch.from_numpy(perm_np),
            num_ntypes=checked.num_ntypes,
        )

    @classmethod
    def from_layout(cls, arrays: Any, num_ntypes: int) -> HeteroGraph:
        """Wrap arrays already in this class's layout, as the native sampler writes them
        (:class:`hector.runtime.sampler.SampledArrays`): nothing is validated or recomputed,
        and the compaction map and source node types come precomputed.

        Args:
            arrays: an object with numpy attributes ``src``, ``dst``, ``etype``, ``ntype``,
                ``etype_ptr`` (int32), ``norm_dst_etype``, ``norm_dst`` (float32), ``perm``
                (int64), ``compact_src``, ``compact_etype``, ``edge_compact``,
                ``etype_src_ntype`` (int32) and ``src_typed`` (bool).
            num_ntypes: number of node types.
        """
        e = len(arrays.src)
        g = cls(
            src=torch.from_numpy(arrays.src),
            dst=torch.from_numpy(arrays.dst),
            etype=torch.from_numpy(arrays.etype),
            ntype=torch.from_numpy(arrays.ntype),
            etype_ptr=torch.from_numpy(arrays.etype_ptr),
            norm_dst_etype=torch.from_numpy(arrays.norm_dst_etype).reshape(e, 1),
            norm_dst=torch.from_numpy(arrays.norm_dst).reshape(e, 1),
            perm=torch.from_numpy(arrays.perm),
            num_ntypes=num_ntypes,
        )
        g._compact_map = (
            torch.from_numpy(arrays.compact_src),
            torch.from_numpy(arrays.compact_etype),
            torch.from_numpy(arrays.edge_compact),
        )
        g._src_type_map = (torch.from_numpy(arrays.etype_src_ntype), bool(arrays.src_typed))
        return g

    @property
    def num_nodes(self) -> int:
        """Number of nodes N."""
        return int(self.ntype.shape[0])

    @property
    def num_edges(self) -> int:
        """Number of edges E."""
        return int(self.src.shape[0])

    @property
    def num_etypes(self) -> int:
        """Number of edge types R (including types without edges)."""
        return int(self.etype_ptr.shape[0]) - 1

    @property
    def num_ntypes(self) -> int:
        """Number of node types (including types without nodes)."""
        return self._num_ntypes

    @property
    def compact_src(self) -> torch.Tensor:
        """int32 [C]: source node of each unique (source, edge type) pair, grouped by type."""
        return _cached(self, "_compact_map", _source_compaction)[0]

    @property
    def compact_etype(self) -> torch.Tensor:
        """int32 [C]: edge type of each unique (source, edge type) pair."""
        return _cached(self, "_compact_map", _source_compaction)[1]

    @property
    def edge_compact(self) -> torch.Tensor:
        """int32 [E]: the compact row (unique (source, edge type) pair) of each edge."""
        return _cached(self, "_compact_map", _source_compaction)[2]

    @property
    def num_compact(self) -> int:
        """Number of unique (source node, edge type) pairs C."""
        return int(self.compact_src.shape[0])

    @property
    def compaction_ratio(self) -> float:
        """``C / E``: how much compact materialization shrinks edge-wise values (1 if no
        edges)."""
        return self.num_compact / self.num_edges if self.num_edges else 1.0

    @property
    def dst_compact_dst(self) -> torch.Tensor:
        """int32 [D]: destination node of each unique (destination, edge type) pair; pairs are
        sorted by (edge type, destination), so each relation's pairs are contiguous."""
        return _cached(self, "_dst_compact_map", _destination_compaction)[0]

    @property
    def dst_compact_etype(self) -> torch.Tensor:
        """int32 [D]: edge type of each unique (destination, edge type) pair (non-decreasing)."""
        return _cached(self, "_dst_compact_map", _destination_compaction)[1]

    @property
    def edge_dst_compact(self) -> torch.Tensor:
        """int32 [E]: the (destination, edge type) pair of each edge."""
        return _cached(self, "_dst_compact_map", _destination_compaction)[2]

    @property
    def num_dst_compact(self) -> int:
        """Number of unique (destination node, edge type) pairs D."""
        return int(self.dst_compact_dst.shape[0])

    @property
    def dst_compaction_ratio(self) -> float:
        """``D / E``: unique (destination, edge type) pairs per edge (1 if no edges); the
        aggregation-order cost model reads it (``hector-aggregation-order``)."""
        return self.num_dst_compact / self.num_edges if self.num_edges else 1.0

    @property
    def inverse_perm(self) -> torch.Tensor:
        """int64 [E]: the sorted position of each original edge (``perm``'s inverse), cached."""
        cached = getattr(self, "_inverse_perm", None)
        if cached is None:
            cached = torch.empty_like(self.perm)
            cached[self.perm] = torch.arange(self.perm.numel())
            self._inverse_perm = cached
        return cached

    @property
    def etype_src_ntype(self) -> torch.Tensor:
        """int32 [R]: the node type of the sources of each edge type (0 for a relation without
        edges; the smallest one when a relation's sources mix types — see :attr:`src_typed`)."""
        return _cached(self, "_src_type_map", _source_types)[0]

    @property
    def src_typed(self) -> bool:
        """Whether every edge type's sources share one node type (relations of a
        heterogeneous schema); HGT's chained-linear fold needs it."""
        return _cached(self, "_src_type_map", _source_types)[1]

    def arrays(self) -> tuple[torch.Tensor, ...]:
        """Return the graph tensors in :data:`GRAPH_ARRAYS` order, as compiled code takes them."""
        return tuple(getattr(self, name) for name in GRAPH_ARRAYS)

    def schema(self) -> tuple[int, int]:
        """Return ``(num_etypes, num_ntypes)``: the part of the graph compiled code depends on."""
        return (self.num_etypes, self.num_ntypes)

    def edge_index_sorted(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Return int64 ``edge_index`` [2, E] and ``edge_type`` [E] in the sorted edge order.

        Feeding these to a PyG layer makes its edges line up with this graph's edges.
        """
        edge_index = torch.stack([self.src, self.dst]).to(torch.int64)
        return edge_index, self.etype.to(torch.int64)

    def __repr__(self) -> str:
        """Return a one-line summary of the graph's sizes."""
        return (
            f"HeteroGraph(num_nodes={self.num_nodes}, num_edges={self.num_edges}, "
            f"num_etypes={self.num_etypes}, num_ntypes={self.num_ntypes})"
        )


# ---------------------------------------------------------------------------------------------
# Maps derived from a graph's arrays, built on first use and cached with the graph
# ---------------------------------------------------------------------------------------------


def _cached(graph: HeteroGraph, attr: str, build: Callable[[HeteroGraph], Any]) -> Any:
    """``build(graph)``, computed on first use and kept on the graph as ``attr``."""
    cached = getattr(graph, attr, None)
    if cached is None:
        cached = build(graph)
        setattr(graph, attr, cached)
    return cached


def _source_compaction(g: HeteroGraph) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The unique (source, edge type) pairs and each edge's pair, built natively."""
    cs, ce, ec = native.graph_compact(g.src.numpy(), g.etype.numpy(), g.num_nodes, g.num_etypes)
    return torch.from_numpy(cs), torch.from_numpy(ce), torch.from_numpy(ec)


def _destination_compaction(g: HeteroGraph) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The unique (destination, edge type) pairs, sorted by (edge type, destination), and each
    edge's pair: one vectorised sort of ``etype * N + dst``."""
    n = max(g.num_nodes, 1)
    key = g.etype.to(torch.int64) * n + g.dst.to(torch.int64)
    pairs, inverse = torch.unique(key, sorted=True, return_inverse=True)
    return (
        (pairs % n).to(torch.int32).contiguous(),
        torch.div(pairs, n, rounding_mode="floor").to(torch.int32).contiguous(),
        inverse.to(torch.int32).contiguous(),
    )


def _source_types(g: HeteroGraph) -> tuple[torch.Tensor, bool]:
    """Per edge type, the node type of its sources (the smallest one when they mix; 0 for a
    relation without edges), and whether each relation has only one."""
    r = g.num_etypes
    src_types = g.ntype.long()[g.src.long()]
    etype = g.etype.long()
    lo = torch.full((r,), g.num_ntypes, dtype=torch.long)
    hi = torch.full((r,), -1, dtype=torch.long)
    lo.scatter_reduce_(0, etype, src_types, "amin")
    hi.scatter_reduce_(0, etype, src_types, "amax")
    empty = hi < 0
    uniform = bool(((lo == hi) | empty).all())
    return torch.where(empty, 0, lo).to(torch.int32).contiguous(), uniform


def random_graph(
    num_nodes: int,
    num_edges: int,
    num_etypes: int,
    *,
    num_ntypes: int = 1,
    empty_etypes: Iterable[int] = (),
    isolated_nodes: int = 0,
    seed: int = 0,
) -> HeteroGraph:
    """Generate a random heterogeneous graph with a skewed degree distribution.

    Sources follow a power-law-like distribution (a few hub nodes emit many edges), edge types
    are skewed too (some relations are rare), destinations and node types are uniform.
    Self-loops and duplicate edges may occur.

    Args:
        num_nodes: number of nodes N.
        num_edges: number of edges E.
        num_etypes: number of edge types R.
        num_ntypes: number of node types; each node gets a uniformly random one.
        empty_etypes: edge types that must have no edges.
        isolated_nodes: the last ``isolated_nodes`` nodes get no incident edge.
        seed: seed of the ``torch.Generator``; equal arguments give equal graphs.

    Returns:
        The graph.

    Raises:
        ValueError: if the arguments are inconsistent (e.g. edges requested but every edge type
            is empty or every node is isolated).
    """
    num_nodes = _as_count("num_nodes", num_nodes)
    num_edges = _as_count("num_edges", num_edges)
    num_etypes = _as_count("num_etypes", num_etypes)
    num_ntypes = _as_count("num_ntypes", num_ntypes, minimum=1)
    isolated_nodes = _as_count("isolated_nodes", isolated_nodes)
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or not 0 <= seed < 2**63:
        raise ValueError(f"seed must be an int in [0, 2**63), got {seed!r}")
    empty = {_as_count("empty_etypes entry", r) for r in empty_etypes}
    for r in sorted(empty):
        if not 0 <= r < num_etypes:
            raise ValueError(f"empty_etypes entry {r} is out of range for num_etypes={num_etypes}")
    if isolated_nodes > num_nodes:
        raise ValueError(f"isolated_nodes={isolated_nodes} exceeds num_nodes={num_nodes}")
    # The generator's own int64/float64 arrays come on top of what the graph needs.
    check_size(
        "random_graph",
        nodes=num_nodes,
        edges=num_edges,
        relations=num_etypes,
        bytes_per_node=GRAPH_BYTES_PER_NODE + 16,
        bytes_per_edge=GRAPH_BYTES_PER_EDGE + 72,
    )
    active = num_nodes - isolated_nodes
    keep = torch.ones(num_etypes, dtype=torch.bool)
    keep[sorted(empty)] = False
    allowed = keep.nonzero().flatten()
    if num_edges > 0 and active == 0:
        raise ValueError("cannot place edges: every node is isolated")
    if num_edges > 0 and allowed.numel() == 0:
        raise ValueError("cannot place edges: every edge type is empty")

    gen = torch.Generator().manual_seed(int(seed))
    node_type = torch.randint(0, num_ntypes, (num_nodes,), generator=gen, dtype=torch.int64)
    if num_edges == 0:
        edge_index = torch.empty(2, 0, dtype=torch.int64)
        edge_type = torch.empty(0, dtype=torch.int64)
    else:
        # Rank r = floor(n * u^3) has density ~ r^(-2/3): low ranks (hubs) are drawn far more
        # often. A random permutation maps ranks to node ids so hubs are spread over the graph.
        hubs = torch.randperm(active, generator=gen)
        u = torch.rand(num_edges, generator=gen, dtype=torch.float64)
        rank = (u.pow(3) * active).to(torch.int64).clamp_(max=active - 1)
        src = hubs[rank]
        dst = torch.randint(0, active, (num_edges,), generator=gen, dtype=torch.int64)
        u = torch.rand(num_edges, generator=gen, dtype=torch.float64)
        type_rank = (u.pow(2) * allowed.numel()).to(torch.int64).clamp_(max=allowed.numel() - 1)
        type_order = allowed[torch.randperm(allowed.numel(), generator=gen)]
        edge_type = type_order[type_rank]
        edge_index = torch.stack([src, dst])
    return HeteroGraph.from_edge_index(
        edge_index,
        edge_type,
        num_nodes=num_nodes,
        node_type=node_type,
        num_etypes=num_etypes,
        num_ntypes=num_ntypes,
    )
