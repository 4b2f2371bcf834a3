"""The HeteroGraphs of PyG index tensors, cached per tensor, shared by the Dynamo backend
(``hector.dynamo``) and the recognised-layer route (``hector.pyg_route``)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch

from .graph import HeteroGraph

#: Graphs kept, most recently used last.
_GRAPH_CACHE_SIZE = 8
#: HeteroGraphs built from index tensors, most recently used last (see :func:`graph_for`).
_GRAPHS: OrderedDict[tuple[Any, ...], tuple[Any, HeteroGraph, str]] = OrderedDict()
_GRAPH_BUILDS = [0]


def graph_for(
    edge_index: torch.Tensor, edge_type: torch.Tensor | None, num_nodes: int
) -> tuple[HeteroGraph, str]:
    """The :class:`HeteroGraph` of ``edge_index``/``edge_type`` (all one type when None) with
    ``num_nodes`` nodes, and the order the inputs are in (``"sorted"`` when already sorted by
    type, else ``"original"``). Cached by the tensors' data pointer, shape, stride and version
    counter, so repeated calls with the same tensors do not rebuild it."""

    def sig(t: torch.Tensor | None) -> Any:
        if t is None:
            return None
        return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype, t._version)

    key = (sig(edge_index), sig(edge_type), num_nodes)
    hit = _GRAPHS.get(key)
    if hit is not None:
        _GRAPHS.move_to_end(key)
        return hit[1], hit[2]
    et = edge_type if edge_type is not None else torch.zeros(edge_index.shape[1], dtype=torch.long)
    graph = HeteroGraph.from_edge_index(edge_index, et, num_nodes=num_nodes)
    order = "sorted" if torch.equal(graph.perm, torch.arange(graph.num_edges)) else "original"
    _GRAPH_BUILDS[0] += 1
    # The entry holds the tensors: their storage cannot be freed and reused while cached.
    _GRAPHS[key] = ((edge_index, edge_type), graph, order)
    while len(_GRAPHS) > _GRAPH_CACHE_SIZE:
        _GRAPHS.popitem(last=False)
    return graph, order


def graph_builds() -> int:
    """How many HeteroGraphs the backend has built (cache misses) in this process."""
    return _GRAPH_BUILDS[0]
