"""Heterogeneous graphs as the compiled code sees them.

A :class:`HeteroGraph` is a COO edge list sorted (stably) by edge type, with node types and the
per-edge degree normalizers RGCN-style models need, all as contiguous CPU tensors, and the
compaction maps derived from them on first use (:mod:`hector.data.compaction`). It is built
from PyG-style ``edge_index`` / ``edge_type`` tensors by :meth:`HeteroGraph.from_edge_index`,
which validates its inputs (:func:`hector.data.edge_index.check_edge_index`, within the
limits of :mod:`hector.data.limits`) and raises :class:`ValueError` naming the problem;
preprocessing (range checks, sorting, degree counts) runs in the native runtime.
:func:`random_graph` draws one with skewed degrees, for tests and benchmarks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from hector.dialects.hector_intra import GRAPH_ARRAYS as _GRAPH_ARRAYS
from hector.runtime import native

from .compaction import CompactionMaps
from .edge_index import as_count, check_edge_index
from .limits import GRAPH_BYTES_PER_EDGE, GRAPH_BYTES_PER_NODE, SizeBudget, check_size

__all__ = ["GRAPH_ARRAYS", "HeteroGraph", "random_graph"]

#: Names of the graph tensors passed to compiled code, in exactly this order (see
#: :meth:`HeteroGraph.arrays`); defined once, with the dialect that takes them.
GRAPH_ARRAYS = _GRAPH_ARRAYS


#: What :meth:`HeteroGraph.from_edge_index` allocates.
_FROM_EDGE_INDEX = SizeBudget("HeteroGraph.from_edge_index")


class HeteroGraph(CompactionMaps):
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

    The compaction maps and the ratios the cost models read are properties of
    :class:`~hector.data.compaction.CompactionMaps`.
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
        self._inverse_perm: torch.Tensor | None = None  # built on first use

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
    def inverse_perm(self) -> torch.Tensor:
        """int64 [E]: the sorted position of each original edge (``perm``'s inverse), cached."""
        cached = getattr(self, "_inverse_perm", None)
        if cached is None:
            cached = torch.empty_like(self.perm)
            cached[self.perm] = torch.arange(self.perm.numel())
            self._inverse_perm = cached
        return cached

    def arrays(self) -> tuple[torch.Tensor, ...]:
        """Return the graph tensors in :data:`GRAPH_ARRAYS` order, as compiled code takes them."""
        return tuple(getattr(self, name) for name in GRAPH_ARRAYS)

    def schema(self) -> tuple[int, int]:
        """Return ``(num_etypes, num_ntypes)``: the part of the graph compiled code depends on."""
        return (self.num_etypes, self.num_ntypes)

    def grouped_by_destination(self) -> HeteroGraph:
        """This graph with each edge type's edges ordered by destination (stably, so edges of
        one ``(destination, type)`` pair keep their order); ``self`` when they already are.

        The same graph, edge for edge (``perm`` still maps each edge to its input id), laid
        out so that a reduction over the edges into ``(destination, type)`` rows, or into
        destination rows within a type, writes its output rows in order, and one that reads
        those rows back reads them in order: sequential memory traffic where the
        type-sorted input order scatters at random, and contiguous row ranges for the CPU
        workers that own output rows."""
        key = self.etype.to(torch.int64) * max(self.num_nodes, 1) + self.dst.to(torch.int64)
        order = torch.sort(key, stable=True).indices
        if torch.equal(order, torch.arange(self.num_edges)):
            return self
        return HeteroGraph(
            src=self.src[order],
            dst=self.dst[order],
            etype=self.etype[order],
            ntype=self.ntype,
            etype_ptr=self.etype_ptr,
            norm_dst_etype=self.norm_dst_etype[order],
            norm_dst=self.norm_dst[order],
            perm=self.perm[order],
            num_ntypes=self.num_ntypes,
        )

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
    num_nodes = as_count("num_nodes", num_nodes)
    num_edges = as_count("num_edges", num_edges)
    num_etypes = as_count("num_etypes", num_etypes)
    num_ntypes = as_count("num_ntypes", num_ntypes, minimum=1)
    isolated_nodes = as_count("isolated_nodes", isolated_nodes)
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or not 0 <= seed < 2**63:
        raise ValueError(f"seed must be an int in [0, 2**63), got {seed!r}")
    empty = _edge_types("empty_etypes", empty_etypes, num_etypes)
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
    edge_index, edge_type = _skewed_edges(gen, num_edges, active, allowed)
    return HeteroGraph.from_edge_index(
        edge_index,
        edge_type,
        num_nodes=num_nodes,
        node_type=node_type,
        num_etypes=num_etypes,
        num_ntypes=num_ntypes,
    )


def _edge_types(what: str, types: Iterable[int], num_etypes: int) -> set[int]:
    """The edge types ``what`` lists, each checked to be in ``[0, num_etypes)``."""
    found = {as_count(f"{what} entry", r) for r in types}
    for r in sorted(found):
        if not 0 <= r < num_etypes:
            raise ValueError(f"{what} entry {r} is out of range for num_etypes={num_etypes}")
    return found


def _skewed_edges(
    gen: torch.Generator, num_edges: int, active: int, allowed: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``num_edges`` edges among the first ``active`` nodes, of the ``allowed`` types, drawn
    from ``gen``: sources from a power law (a few hubs emit many edges), types skewed (some
    relations rare), destinations uniform. Returns int64 ``edge_index`` [2, E], ``edge_type``."""
    if num_edges == 0:
        return torch.empty(2, 0, dtype=torch.int64), torch.empty(0, dtype=torch.int64)
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
    return torch.stack([src, dst]), type_order[type_rank]
