"""The index maps derived from a graph's sorted edges for compact materialization and the cost
models: built on first use, then kept with the graph.

Compact materialization computes an edge-wise value once per unique (source node, edge type)
pair instead of once per edge (``compact_src``, ``compact_etype``, and ``edge_compact``, each
edge's pair; their ratio ``C / E`` decides whether it pays). The aggregation-order cost model
reads the unique (destination node, edge type) pairs (``D / E``), and HGT's chained-linear fold
needs every relation's sources to share one node type (``src_typed``). :class:`CompactionMaps`,
a base of :class:`~hector.data.graph.HeteroGraph`, offers these maps as properties of the graph;
the native sampler hands its own in ready-made (:meth:`HeteroGraph.from_layout`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

import torch

from hector.runtime import native

__all__ = ["CompactionMaps"]

_Map = TypeVar("_Map")


class _SortedEdges(Protocol):
    """What the maps are derived from: a graph's edges sorted by type, and its sizes."""

    src: torch.Tensor
    dst: torch.Tensor
    etype: torch.Tensor
    ntype: torch.Tensor

    @property
    def num_nodes(self) -> int: ...

    @property
    def num_edges(self) -> int: ...

    @property
    def num_etypes(self) -> int: ...

    @property
    def num_ntypes(self) -> int: ...


class CompactionMaps:
    """The maps of unique (source, edge type) and (destination, edge type) pairs and of each
    relation's source node types, as properties of the graph they derive from (each built on
    first use and cached on the graph)."""

    # The maps, built on first use (or handed in by HeteroGraph.from_layout).
    _compact_map: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    _dst_compact_map: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    _src_type_map: tuple[torch.Tensor, bool] | None = None

    @property
    def compact_src(self: _SortedEdges) -> torch.Tensor:
        """int32 [C]: source node of each unique (source, edge type) pair, grouped by type."""
        return _cached(self, "_compact_map", _source_compaction)[0]

    @property
    def compact_etype(self: _SortedEdges) -> torch.Tensor:
        """int32 [C]: edge type of each unique (source, edge type) pair."""
        return _cached(self, "_compact_map", _source_compaction)[1]

    @property
    def edge_compact(self: _SortedEdges) -> torch.Tensor:
        """int32 [E]: the compact row (unique (source, edge type) pair) of each edge."""
        return _cached(self, "_compact_map", _source_compaction)[2]

    @property
    def num_compact(self: _SortedEdges) -> int:
        """Number of unique (source node, edge type) pairs C."""
        return int(_cached(self, "_compact_map", _source_compaction)[0].shape[0])

    @property
    def compaction_ratio(self: _SortedEdges) -> float:
        """``C / E``: how much compact materialization shrinks edge-wise values (1 if no
        edges)."""
        return _per_edge(_cached(self, "_compact_map", _source_compaction)[0], self.num_edges)

    @property
    def dst_compact_dst(self: _SortedEdges) -> torch.Tensor:
        """int32 [D]: destination node of each unique (destination, edge type) pair; pairs are
        sorted by (edge type, destination), so each relation's pairs are contiguous."""
        return _cached(self, "_dst_compact_map", _destination_compaction)[0]

    @property
    def dst_compact_etype(self: _SortedEdges) -> torch.Tensor:
        """int32 [D]: edge type of each unique (destination, edge type) pair (non-decreasing)."""
        return _cached(self, "_dst_compact_map", _destination_compaction)[1]

    @property
    def edge_dst_compact(self: _SortedEdges) -> torch.Tensor:
        """int32 [E]: the (destination, edge type) pair of each edge."""
        return _cached(self, "_dst_compact_map", _destination_compaction)[2]

    @property
    def num_dst_compact(self: _SortedEdges) -> int:
        """Number of unique (destination node, edge type) pairs D."""
        return int(_cached(self, "_dst_compact_map", _destination_compaction)[0].shape[0])

    @property
    def dst_compaction_ratio(self: _SortedEdges) -> float:
        """``D / E``: unique (destination, edge type) pairs per edge (1 if no edges); the
        aggregation-order cost model reads it (``hector-aggregation-order``)."""
        pairs = _cached(self, "_dst_compact_map", _destination_compaction)[0]
        return _per_edge(pairs, self.num_edges)

    @property
    def etype_src_ntype(self: _SortedEdges) -> torch.Tensor:
        """int32 [R]: the node type of the sources of each edge type (0 for a relation without
        edges; the smallest one when a relation's sources mix types — see :attr:`src_typed`)."""
        return _cached(self, "_src_type_map", _source_types)[0]

    @property
    def src_typed(self: _SortedEdges) -> bool:
        """Whether every edge type's sources share one node type (relations of a
        heterogeneous schema); HGT's chained-linear fold needs it."""
        return _cached(self, "_src_type_map", _source_types)[1]


def _per_edge(pairs: torch.Tensor, edges: int) -> float:
    """Pairs per edge, 1 for a graph without edges."""
    return int(pairs.shape[0]) / edges if edges else 1.0


def _cached(graph: _SortedEdges, attr: str, build: Callable[[_SortedEdges], _Map]) -> _Map:
    """``build(graph)``, computed on first use and kept on the graph as ``attr``."""
    cached: _Map | None = getattr(graph, attr, None)
    if cached is None:
        cached = build(graph)
        setattr(graph, attr, cached)
    return cached


def _source_compaction(g: _SortedEdges) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The unique (source, edge type) pairs and each edge's pair, built natively."""
    cs, ce, ec = native.graph_compact(g.src.numpy(), g.etype.numpy(), g.num_nodes, g.num_etypes)
    return torch.from_numpy(cs), torch.from_numpy(ce), torch.from_numpy(ec)


def _destination_compaction(g: _SortedEdges) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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


def _source_types(g: _SortedEdges) -> tuple[torch.Tensor, bool]:
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
