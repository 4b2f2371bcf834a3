"""The dataset Hector's loaders return: a heterogeneous graph with node ids grouped by type.

:class:`Dataset` holds the arrays and checks them; it converts to the graph Hector compiles
against and to the inputs PyG layers take. The loaders (:mod:`hector.datasets`) raise
:class:`DatasetError` on bad input and :class:`DatasetLimitError` on input over the int32
indexing of Hector's kernels or over the memory limit; the helpers here give every loader the
same size checks and count parsing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .edge_index import as_int_tensor
from .graph import HeteroGraph
from .limits import ResourceLimitError, SizeBudget, check_size

__all__ = ["Dataset", "DatasetError", "DatasetLimitError", "EdgeType"]


class DatasetError(ValueError):
    """A dataset could not be loaded or is malformed; the message names the problem."""


class DatasetLimitError(DatasetError, ResourceLimitError):
    """A dataset's ids or sizes exceed a resource limit; nothing of that size was allocated."""


#: Peak bytes a loader needs per node (int64 node types and the validation's masks), per edge
#: (int64 edge_index and edge_type, the per-relation copies :func:`torch.cat` joins, and the
#: validation's gathered types and masks) and per relation or node type (Python names, tuples).
_BYTES_PER_NODE = 32
_BYTES_PER_EDGE = 128
_BYTES_PER_NAME = 256


def dataset_budget(what: str) -> SizeBudget:
    """The sizes a loader's arrays take, for :func:`hector.data.edge_index.check_edge_index`."""
    return SizeBudget(
        what,
        bytes_per_node=_BYTES_PER_NODE,
        bytes_per_edge=_BYTES_PER_EDGE,
        bytes_per_relation=_BYTES_PER_NAME,
        bytes_per_node_type=_BYTES_PER_NAME,
    )


def check_dataset_size(
    what: str,
    *,
    nodes: int = 0,
    edges: int = 0,
    names: int = 0,
    bytes_per_edge: int = _BYTES_PER_EDGE,
) -> None:
    """:func:`hector.data.limits.check_size` with a loader's costs, raising DatasetLimitError."""
    try:
        check_size(
            what,
            nodes=nodes,
            edges=edges,
            relations=names,
            bytes_per_node=_BYTES_PER_NODE,
            bytes_per_edge=bytes_per_edge,
            bytes_per_relation=_BYTES_PER_NAME,
        )
    except ResourceLimitError as err:
        raise DatasetLimitError(str(err)) from None


def dataset_count(what: str, value: Any) -> int:
    """``value`` as a non-negative Python int, or DatasetError naming ``what``."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()  # PyG stores some counts as one-element tensors
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise DatasetError(f"{what} must be an int, got {type(value).__name__} {value!r}")
    if int(value) < 0:
        raise DatasetError(f"{what} must be >= 0, got {int(value)}")
    return int(value)


#: A relation: (source node type, relation name, destination node type).
EdgeType = tuple[str, str, str]


def with_inverse_relations(
    edge_index: torch.Tensor, edge_type: torch.Tensor, edge_types: list[EdgeType]
) -> tuple[torch.Tensor, torch.Tensor, list[EdgeType]]:
    """The edges and relations followed by their inverses: relation ``r`` gets a relation
    ``R + r`` named ``rev-<rel>`` from its destination type to its source type, holding every
    edge of ``r`` reversed (edges and relations double)."""
    flipped = edge_index.flip(0)
    inverse = [(d, f"rev-{rel}", s) for s, rel, d in edge_types]
    return (
        torch.cat([edge_index, flipped], 1),
        torch.cat([edge_type, edge_type + len(edge_types)]),
        [*edge_types, *inverse],
    )


# ---------------------------------------------------------------------------------------------
# The dataset
# ---------------------------------------------------------------------------------------------


def as_int64(name: str, value: Any) -> torch.Tensor:
    """Return ``value`` as a contiguous int64 CPU tensor, or raise DatasetError naming it."""
    try:
        return as_int_tensor(name, value).to(torch.int64).contiguous()
    except ValueError as err:
        raise DatasetError(str(err)) from None


@dataclass
class Dataset:
    """A heterogeneous graph with node ids grouped by node type.

    Attributes:
        name: where it came from (``"synthetic:aifb"``, ``"ogbn_mag_0.1"``, a path, ...).
        num_nodes: number of nodes N.
        node_type: int64 [N], the type of each node; non-decreasing (ids grouped by type in
            ``node_types`` order).
        node_types: node type names; ``node_type`` indexes this list.
        edge_index: int64 [2, E]; row 0 source, row 1 destination (global node ids).
        edge_type: int64 [E], relation id of each edge; indexes ``edge_types``.
        edge_types: ``(src_type, relation, dst_type)`` per relation id; every edge of relation
            ``r`` goes from a node of type ``edge_types[r][0]`` to one of ``edge_types[r][2]``.
        info: free-form provenance (generator parameters, source files, assumptions).

    Raises:
        DatasetError: from the constructor, when the arrays are inconsistent (shapes, ids or
            types out of range, node ids not grouped by type, an edge whose endpoint types do
            not match its relation).
    """

    name: str
    num_nodes: int
    node_type: torch.Tensor
    node_types: list[str]
    edge_index: torch.Tensor
    edge_type: torch.Tensor
    edge_types: list[EdgeType]
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Validate the arrays (see the class docstring)."""
        self.node_type = as_int64("node_type", self.node_type)
        self.edge_index = as_int64("edge_index", self.edge_index)
        self.edge_type = as_int64("edge_type", self.edge_type)
        self.node_types = [str(t) for t in self.node_types]
        self.edge_types = [tuple(str(p) for p in et) for et in self.edge_types]  # type: ignore[misc]
        n, nt = int(self.num_nodes), len(self.node_types)
        self.num_nodes = n
        if n < 0:
            raise DatasetError(f"num_nodes must be >= 0, got {n}")
        if len(set(self.node_types)) != nt:
            raise DatasetError(f"node type names must be unique, got {self.node_types}")
        if len(set(self.edge_types)) != len(self.edge_types):
            raise DatasetError("edge types (src_type, relation, dst_type) must be unique")
        if self.node_type.shape != (n,):
            raise DatasetError(
                f"node_type must have shape [{n}] (num_nodes), got {list(self.node_type.shape)}"
            )
        if self.edge_index.dim() != 2 or self.edge_index.shape[0] != 2:
            raise DatasetError(
                f"edge_index must have shape [2, E], got {list(self.edge_index.shape)}"
            )
        e = self.edge_index.shape[1]
        if self.edge_type.shape != (e,):
            raise DatasetError(
                f"edge_type must have shape [{e}] (one per edge), got {list(self.edge_type.shape)}"
            )
        if n > 0:
            lo, hi = int(self.node_type.min()), int(self.node_type.max())
            if lo < 0 or hi >= nt:
                bad = int(((self.node_type < 0) | (self.node_type >= nt)).nonzero()[0, 0])
                raise DatasetError(
                    f"node_type[{bad}] = {int(self.node_type[bad])} is out of range for "
                    f"{nt} node types"
                )
            if n > 1 and bool((self.node_type[1:] < self.node_type[:-1]).any()):
                raise DatasetError(
                    "node ids must be grouped by node type in node_types order "
                    "(node_type must be non-decreasing); use from_edge_index() to relabel"
                )
        for k, (s, _, d) in enumerate(self.edge_types):
            for t in (s, d):
                if t not in self.node_types:
                    raise DatasetError(
                        f"edge type #{k} {self.edge_types[k]} names unknown node type {t!r}"
                    )
        if e == 0:
            return
        for row, what in ((0, "source"), (1, "destination")):
            ids = self.edge_index[row]
            bad_mask = (ids < 0) | (ids >= n)
            if bool(bad_mask.any()):
                i = int(bad_mask.nonzero()[0, 0])
                raise DatasetError(
                    f"edge_index[{row}][{i}] = {int(ids[i])} ({what}) is out of range for "
                    f"num_nodes={n}"
                )
        bad_mask = (self.edge_type < 0) | (self.edge_type >= len(self.edge_types))
        if bool(bad_mask.any()):
            i = int(bad_mask.nonzero()[0, 0])
            raise DatasetError(
                f"edge_type[{i}] = {int(self.edge_type[i])} is out of range for "
                f"{len(self.edge_types)} edge types"
            )
        index = {t: i for i, t in enumerate(self.node_types)}
        want_src = torch.tensor([index[s] for s, _, _ in self.edge_types], dtype=torch.int64)
        want_dst = torch.tensor([index[d] for _, _, d in self.edge_types], dtype=torch.int64)
        for row, want, what in ((0, want_src, "source"), (1, want_dst, "destination")):
            bad_mask = self.node_type[self.edge_index[row]] != want[self.edge_type]
            if bool(bad_mask.any()):
                i = int(bad_mask.nonzero()[0, 0])
                node = int(self.edge_index[row, i])
                raise DatasetError(
                    f"edge {i} of relation {self.edge_types[int(self.edge_type[i])]} has "
                    f"{what} node {node} of type {self.node_types[int(self.node_type[node])]!r}"
                )

    # -- sizes ----------------------------------------------------------------------------------
    @property
    def num_edges(self) -> int:
        """Number of edges E."""
        return int(self.edge_index.shape[1])

    @property
    def num_relations(self) -> int:
        """Number of relations (edge types) R, including relations without edges."""
        return len(self.edge_types)

    def num_nodes_dict(self) -> dict[str, int]:
        """Number of nodes of each node type, in ``node_types`` order."""
        counts = torch.bincount(self.node_type, minlength=len(self.node_types))
        return {t: int(c) for t, c in zip(self.node_types, counts.tolist(), strict=True)}

    def type_offsets(self) -> dict[str, int]:
        """Global id of the first node of each node type (ids are grouped by type)."""
        offsets, start = {}, 0
        for t, c in self.num_nodes_dict().items():
            offsets[t] = start
            start += c
        return offsets

    def metadata(self) -> tuple[list[str], list[EdgeType]]:
        """``(node_types, edge_types)``, like ``HeteroData.metadata()`` (HGTConv takes it)."""
        return list(self.node_types), list(self.edge_types)

    def compaction_ratio(self) -> float:
        """#unique (source node, relation) pairs / #edges (1.0 for a graph without edges).

        Hector's compact materialization computes source-dependent edge values once per
        unique pair, so this is the fraction of per-edge work it keeps.
        """
        if self.num_edges == 0:
            return 1.0
        key = self.edge_index[0] * max(self.num_relations, 1) + self.edge_type
        return int(torch.unique(key).numel()) / self.num_edges

    def stats(self) -> dict[str, Any]:
        """Sizes and structure: nodes, edges, relations, node types, compaction ratio, degrees."""
        deg = torch.bincount(self.edge_index[1], minlength=self.num_nodes)
        return {
            "name": self.name,
            "nodes": self.num_nodes,
            "edges": self.num_edges,
            "relations": self.num_relations,
            "node_types": len(self.node_types),
            "nodes_per_type": self.num_nodes_dict(),
            "compaction_ratio": round(self.compaction_ratio(), 6),
            "max_in_degree": int(deg.max()) if self.num_nodes else 0,
            "isolated_nodes": int(
                (
                    (deg == 0) & (torch.bincount(self.edge_index[0], minlength=self.num_nodes) == 0)
                ).sum()
            )
            if self.num_nodes
            else 0,
        }

    # -- conversions ----------------------------------------------------------------------------
    def hetero_graph(self) -> HeteroGraph:
        """The graph as Hector compiles against it (:class:`hector.HeteroGraph`).

        Node ids are this dataset's (grouped by type in ``node_types`` order), edge type ids
        are indices into ``edge_types``; node-wise inputs and outputs need no permutation.
        """
        return HeteroGraph.from_edge_index(
            self.edge_index,
            self.edge_type,
            num_nodes=self.num_nodes,
            node_type=self.node_type,
            num_etypes=self.num_relations,
            num_ntypes=max(len(self.node_types), 1),
        )

    def pyg_homogeneous(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(edge_index [2, E], edge_type [E])`` (int64) for ``RGCNConv`` / ``RGATConv``."""
        return self.edge_index, self.edge_type

    def pyg_hetero(self) -> tuple[dict[str, int], dict[EdgeType, torch.Tensor]]:
        """``(num_nodes_dict, edge_index_dict)`` with per-type local ids, for ``HGTConv``.

        Every relation gets an entry (possibly with zero edges), keyed by its edge type triple.
        """
        offsets = self.type_offsets()
        order = torch.argsort(self.edge_type, stable=True)
        counts = torch.bincount(self.edge_type, minlength=self.num_relations).tolist()
        edge_index_dict: dict[EdgeType, torch.Tensor] = {}
        start = 0
        for r, (s, rel, d) in enumerate(self.edge_types):
            sel = order[start : start + counts[r]]
            start += counts[r]
            ei = self.edge_index[:, sel]
            local = torch.stack([ei[0] - offsets[s], ei[1] - offsets[d]])
            edge_index_dict[(s, rel, d)] = local.contiguous()
        return self.num_nodes_dict(), edge_index_dict

    def to_pyg_heterodata(self) -> Any:
        """This graph as a ``torch_geometric.data.HeteroData`` (structure only)."""
        from torch_geometric.data import HeteroData

        data = HeteroData()
        num_nodes, edge_index_dict = self.pyg_hetero()
        for t, c in num_nodes.items():
            data[t].num_nodes = c
        for et, ei in edge_index_dict.items():
            data[et].edge_index = ei
        return data

    def __repr__(self) -> str:
        """One line: name and sizes."""
        return (
            f"Dataset({self.name!r}, nodes={self.num_nodes}, edges={self.num_edges}, "
            f"relations={self.num_relations}, node_types={len(self.node_types)})"
        )
