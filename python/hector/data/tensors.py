"""Datasets from graphs already in memory: PyG-style ``edge_index`` / ``edge_type`` tensors
(:func:`from_edge_index`) and PyG ``HeteroData`` / ``Data`` objects (:func:`from_pyg`).

Both return a :class:`~hector.data.dataset.Dataset` (node ids grouped by type); the edge-index input
is checked by :func:`hector.data.edge_index.check_edge_index`, the validator HeteroGraph uses too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .dataset import (
    Dataset,
    DatasetError,
    DatasetLimitError,
    EdgeType,
    as_int64,
    check_dataset_size,
    dataset_budget,
    dataset_count,
)
from .edge_index import EdgeIndexInput, check_edge_index
from .limits import ResourceLimitError

__all__ = ["from_edge_index", "from_pyg"]


def from_edge_index(
    edge_index: Any,
    edge_type: Any,
    *,
    num_nodes: int | None = None,
    node_type: Any | None = None,
    node_types: Sequence[str] | None = None,
    edge_types: Sequence[EdgeType] | None = None,
    num_relations: int | None = None,
    name: str = "edge_index",
) -> Dataset:
    """Build a dataset from PyG-style ``edge_index`` [2, E] and ``edge_type`` [E] tensors.

    Args:
        edge_index: integer [2, E]: sources in row 0, destinations in row 1.
        edge_type: integer [E]: relation id of each edge.
        num_nodes: N; defaults to ``len(node_type)`` or ``edge_index.max() + 1``.
        node_type: integer [N] node types (default: one type). Ids that are not grouped by type
            are relabelled by a stable sort on the type; ``info["node_perm"]`` then maps each
            new id to the original one.
        node_types: names of the node types (default ``"node"`` / ``"type<k>"``).
        edge_types: ``(src_type, rel, dst_type)`` per relation; by default inferred from the
            edges (named ``"rel<r>"``), which requires every relation to connect one source type
            to one destination type.
        num_relations: R when ``edge_types`` is not given (default ``edge_type.max() + 1``).
        name: the dataset's name.

    Returns:
        The dataset.

    Raises:
        DatasetError: on malformed or inconsistent input.
    """
    checked = _checked_edge_index(edge_index, edge_type, num_nodes, node_type, num_relations, name)
    num_nodes, num_relations = checked.num_nodes, checked.num_etypes
    edge_index = checked.edge_index.to(torch.int64).contiguous()
    edge_type = checked.edge_type.to(torch.int64).contiguous()
    if checked.node_type is None:
        node_type = torch.zeros(num_nodes, dtype=torch.int64)
    else:
        node_type = checked.node_type.to(torch.int64).contiguous()
    n_ntypes = checked.num_ntypes
    if node_types is None:
        node_types = ["node"] if n_ntypes == 1 else [f"type{k}" for k in range(n_ntypes)]
    node_types = list(node_types)
    if n_ntypes > len(node_types):
        raise DatasetError(
            f"node_type has values up to {n_ntypes - 1} but only {len(node_types)} node type "
            "names were given"
        )

    info: dict[str, Any] = {}
    if num_nodes > 1 and bool((node_type[1:] < node_type[:-1]).any()):
        perm = torch.argsort(node_type, stable=True)  # new id -> old id
        inverse = torch.empty_like(perm)
        inverse[perm] = torch.arange(num_nodes)
        node_type = node_type[perm]
        edge_index = inverse[edge_index]
        info["node_perm"] = perm

    if edge_types is None:
        edge_types = _infer_edge_types(edge_index, edge_type, node_type, node_types, num_relations)
    return Dataset(
        name=name,
        num_nodes=num_nodes,
        node_type=node_type,
        node_types=node_types,
        edge_index=edge_index,
        edge_type=edge_type,
        edge_types=list(edge_types),
        info=info,
    )


def _checked_edge_index(
    edge_index: Any,
    edge_type: Any,
    num_nodes: Any,
    node_type: Any,
    num_relations: Any,
    name: str,
) -> EdgeIndexInput:
    """:func:`hector.data.edge_index.check_edge_index` with a loader's costs, its errors as
    :class:`DatasetError` (:class:`DatasetLimitError` for the limits)."""
    try:
        return check_edge_index(
            edge_index,
            edge_type,
            budget=dataset_budget(name),
            num_nodes=num_nodes,
            node_type=node_type,
            num_etypes=num_relations,
            etypes="num_relations",
        )
    except ResourceLimitError as err:
        raise DatasetLimitError(str(err)) from None
    except ValueError as err:
        raise DatasetError(str(err)) from None


def _infer_edge_types(
    edge_index: torch.Tensor,
    edge_type: torch.Tensor,
    node_type: torch.Tensor,
    node_types: list[str],
    num_relations: int,
) -> list[EdgeType]:
    """Name relation ``r`` ``rel<r>`` and read its endpoint types off its edges (O(E + R))."""
    ends: list[list[int]] = []
    for row, what in ((0, "source"), (1, "destination")):
        types = node_type[edge_index[row]]
        lo = torch.full((num_relations,), len(node_types), dtype=torch.int64)
        hi = torch.full((num_relations,), -1, dtype=torch.int64)
        lo.scatter_reduce_(0, edge_type, types, "amin")
        hi.scatter_reduce_(0, edge_type, types, "amax")
        mixed = (lo < hi).nonzero()
        if mixed.numel():
            r = int(mixed[0, 0])
            uniq = torch.unique(types[edge_type == r]).tolist()
            raise DatasetError(
                f"relation {r} has {what} nodes of several types "
                f"{[node_types[u] for u in uniq]}; give edge_types or split the relation"
            )
        ends.append(torch.where(hi < 0, 0, hi).tolist())  # a relation without edges: type 0
    return [
        (node_types[s], f"rel{r}", node_types[d])
        for r, (s, d) in enumerate(zip(ends[0], ends[1], strict=True))
    ]


def from_pyg(data: Any, name: str = "pyg") -> Dataset:
    """Build a dataset from a PyG ``HeteroData`` (or a homogeneous ``Data`` with ``edge_type``).

    ``HeteroData``: node types in ``data.node_types`` order, relations in ``data.edge_types``
    order; node counts from ``data[t].num_nodes``. ``Data``: ``edge_index``, ``edge_type`` and
    optionally ``node_type``, as in :func:`from_edge_index`.

    Raises:
        DatasetError: on a missing ``edge_index`` / ``edge_type`` or inconsistent arrays.
    """
    is_hetero = type(data).__name__ == "HeteroData"
    if not is_hetero:
        if getattr(data, "edge_index", None) is None or getattr(data, "edge_type", None) is None:
            raise DatasetError("a homogeneous PyG Data needs both edge_index and edge_type")
        return from_edge_index(
            data.edge_index,
            data.edge_type,
            num_nodes=data.num_nodes,
            node_type=getattr(data, "node_type", None),
            name=name,
        )
    node_types = list(data.node_types)
    edge_types = [tuple(et) for et in data.edge_types]
    counts = []
    for t in node_types:
        c = data[t].num_nodes
        if c is None:
            raise DatasetError(f"HeteroData node type {t!r} has no num_nodes")
        counts.append(dataset_count(f"num_nodes of HeteroData node type {t!r}", c))
    check_dataset_size(name, nodes=sum(counts), names=len(node_types) + len(edge_types))
    offsets = np.concatenate([[0], np.cumsum(counts)]).tolist()
    index = {t: i for i, t in enumerate(node_types)}
    eis, ets = [], []
    for r, (s, rel, d) in enumerate(edge_types):
        ei = getattr(data[(s, rel, d)], "edge_index", None)
        if ei is None:
            raise DatasetError(f"HeteroData edge type {(s, rel, d)} has no edge_index")
        ei = as_int64(f"edge_index of {(s, rel, d)}", ei)
        if ei.dim() != 2 or ei.shape[0] != 2:
            raise DatasetError(
                f"edge_index of {(s, rel, d)} must have shape [2, E], got {list(ei.shape)}"
            )
        for row, t in ((0, s), (1, d)):
            if ei.shape[1] and (int(ei[row].min()) < 0 or int(ei[row].max()) >= counts[index[t]]):
                bad = int(((ei[row] < 0) | (ei[row] >= counts[index[t]])).nonzero()[0, 0])
                raise DatasetError(
                    f"edge_index of {(s, rel, d)}[{row}][{bad}] = {int(ei[row, bad])} is out "
                    f"of range for {counts[index[t]]} nodes of type {t!r}"
                )
        eis.append(torch.stack([ei[0] + offsets[index[s]], ei[1] + offsets[index[d]]]))
        ets.append(torch.full((ei.shape[1],), r, dtype=torch.int64))
    node_type = torch.repeat_interleave(
        torch.arange(len(node_types)), torch.tensor(counts, dtype=torch.int64)
    )
    return Dataset(
        name=name,
        num_nodes=int(offsets[-1]),
        node_type=node_type,
        node_types=node_types,
        edge_index=torch.cat(eis, 1) if eis else torch.empty(2, 0, dtype=torch.int64),
        edge_type=torch.cat(ets) if ets else torch.empty(0, dtype=torch.int64),
        edge_types=edge_types,
    )
