"""Graph datasets for Hector: loaders for data users have on disk and generated replicas.

Every loader returns a :class:`Dataset`: a heterogeneous graph whose node ids are *grouped by
node type* (all nodes of ``node_types[0]`` first, then ``node_types[1]``, ...), whose edges
carry a relation id, and whose relations each connect one fixed source node type to one fixed
destination node type (``edge_types[r] = (src_type, rel, dst_type)``). From it come the graph
Hector compiles against (:meth:`Dataset.hetero_graph`) and the inputs PyG layers take
(:meth:`Dataset.pyg_homogeneous` for ``RGCNConv``/``RGATConv``, :meth:`Dataset.pyg_hetero` for
``HGTConv``), so every system in a benchmark sees the same graph.

Sources (all through :func:`load` or the ``from_*``/``load_*`` functions):

* PyG ``HeteroData`` or ``edge_index`` + ``edge_type`` tensors: :func:`from_pyg`,
  :func:`from_edge_index`;
* triple files (``head<TAB>relation<TAB>tail``, names mapped to ids): :func:`load_triples`;
* a directory of NumPy COO arrays, one ``<rel>_coo*.npy`` file (int [2, E]) per relation:
  :func:`load_coo_dir`; the 10% ogbn-mag sample in ``../shared/data/ogbn_mag_0.1`` loads as
  ``load("ogbn_mag_0.1")`` straight from the shared folder (never copied);
* generated replicas of published graphs, ``load("synthetic:<name>", scale=, seed=)``, see
  :data:`SYNTHETIC_SPECS`. They match the published node / edge / relation counts (scaled) but
  not the real structure, hence the ``synthetic:`` prefix that the dataset name always keeps.

Bad input raises :class:`DatasetError` (a ``ValueError``) naming the file, line or entry; an
input whose ids or sizes exceed the int32 indexing of Hector's kernels, or whose arrays would not
fit in memory (:func:`hector.graph.memory_limit`), raises :class:`DatasetLimitError` before
anything of that size is allocated.
"""

from __future__ import annotations

import math
import os
import tokenize
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .graph import MAX_COUNT, HeteroGraph, ResourceLimitError, as_int_tensor, check_size

__all__ = [
    "MAG_SAMPLE_RELATIONS",
    "SYNTHETIC_SPECS",
    "Dataset",
    "DatasetError",
    "DatasetLimitError",
    "SyntheticSpec",
    "available",
    "data_root",
    "from_edge_index",
    "from_pyg",
    "load",
    "load_coo_dir",
    "load_triples",
    "synthetic",
]


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
_SYNTHETIC_BYTES_PER_EDGE = 256


def _check_size(
    what: str,
    *,
    nodes: int = 0,
    edges: int = 0,
    names: int = 0,
    bytes_per_edge: int = _BYTES_PER_EDGE,
) -> None:
    """:func:`hector.graph.check_size` with a loader's costs, raising DatasetLimitError."""
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


def _count(what: str, value: Any) -> int:
    """``value`` as a non-negative Python int, or DatasetError naming ``what``."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()  # PyG stores some counts as one-element tensors
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise DatasetError(f"{what} must be an int, got {type(value).__name__} {value!r}")
    if int(value) < 0:
        raise DatasetError(f"{what} must be >= 0, got {int(value)}")
    return int(value)


EdgeType = tuple[str, str, str]


# ---------------------------------------------------------------------------------------------
# The dataset
# ---------------------------------------------------------------------------------------------


def _int64(name: str, value: Any) -> torch.Tensor:
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
        self.node_type = _int64("node_type", self.node_type)
        self.edge_index = _int64("edge_index", self.edge_index)
        self.edge_type = _int64("edge_type", self.edge_type)
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


# ---------------------------------------------------------------------------------------------
# Loaders: tensors, PyG, triples, NumPy COO
# ---------------------------------------------------------------------------------------------


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
    edge_index = _int64("edge_index", edge_index)
    edge_type = _int64("edge_type", edge_type)
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise DatasetError(f"edge_index must have shape [2, E], got {list(edge_index.shape)}")
    if edge_type.dim() != 1 or edge_type.shape[0] != edge_index.shape[1]:
        raise DatasetError(
            f"edge_type must have shape [{edge_index.shape[1]}] (one per edge), "
            f"got {list(edge_type.shape)}"
        )
    e = edge_index.shape[1]
    if node_type is not None:
        node_type = _int64("node_type", node_type)
        if node_type.dim() != 1:
            raise DatasetError(f"node_type must have shape [N], got {list(node_type.shape)}")
    if num_nodes is None:
        if node_type is not None:
            num_nodes = int(node_type.shape[0])
        else:  # a negative id is reported below
            num_nodes = max(int(edge_index.max()) + 1, 0) if e else 0
    num_nodes = _count("num_nodes", num_nodes)
    if num_relations is not None:
        num_relations = _count("num_relations", num_relations)
    _check_size(name, nodes=num_nodes, edges=e, names=num_relations or 0)
    if node_type is None:
        node_type = torch.zeros(num_nodes, dtype=torch.int64)
    if node_type.shape[0] != num_nodes:
        raise DatasetError(f"node_type has {node_type.shape[0]} entries but num_nodes={num_nodes}")
    if num_nodes and int(node_type.min()) < 0:
        i = int((node_type < 0).nonzero()[0, 0])
        raise DatasetError(f"node_type[{i}] = {int(node_type[i])} is negative")
    n_ntypes = int(node_type.max()) + 1 if num_nodes else 1
    _check_size(f"{name} (node types)", names=n_ntypes)
    if node_types is None:
        node_types = ["node"] if n_ntypes == 1 else [f"type{k}" for k in range(n_ntypes)]
    node_types = list(node_types)
    if n_ntypes > len(node_types):
        raise DatasetError(
            f"node_type has values up to {n_ntypes - 1} but only {len(node_types)} node type "
            "names were given"
        )
    if e:
        for row in (0, 1):
            bad = (edge_index[row] < 0) | (edge_index[row] >= num_nodes)
            if bool(bad.any()):
                i = int(bad.nonzero()[0, 0])
                raise DatasetError(
                    f"edge_index[{row}][{i}] = {int(edge_index[row, i])} is out of range for "
                    f"num_nodes={num_nodes}"
                )
        if int(edge_type.min()) < 0:
            i = int((edge_type < 0).nonzero()[0, 0])
            raise DatasetError(f"edge_type[{i}] = {int(edge_type[i])} is negative")

    info: dict[str, Any] = {}
    if num_nodes > 1 and bool((node_type[1:] < node_type[:-1]).any()):
        perm = torch.argsort(node_type, stable=True)  # new id -> old id
        inverse = torch.empty_like(perm)
        inverse[perm] = torch.arange(num_nodes)
        node_type = node_type[perm]
        edge_index = inverse[edge_index]
        info["node_perm"] = perm

    if edge_types is None:
        if num_relations is None:
            num_relations = int(edge_type.max()) + 1 if e else 0
            _check_size(f"{name} (relations)", names=num_relations)
        if e and int(edge_type.max()) >= num_relations:
            i = int((edge_type >= num_relations).nonzero()[0, 0])
            raise DatasetError(
                f"edge_type[{i}] = {int(edge_type[i])} is out of range for "
                f"num_relations={num_relations}"
            )
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
        counts.append(_count(f"num_nodes of HeteroData node type {t!r}", c))
    _check_size(name, nodes=sum(counts), names=len(node_types) + len(edge_types))
    offsets = np.concatenate([[0], np.cumsum(counts)]).tolist()
    index = {t: i for i, t in enumerate(node_types)}
    eis, ets = [], []
    for r, (s, rel, d) in enumerate(edge_types):
        ei = getattr(data[(s, rel, d)], "edge_index", None)
        if ei is None:
            raise DatasetError(f"HeteroData edge type {(s, rel, d)} has no edge_index")
        ei = _int64(f"edge_index of {(s, rel, d)}", ei)
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


def _text_lines(path: Path, encoding: str) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of a text file; DatasetError naming the file and line on an
    unreadable file or bytes that are not text in ``encoding``."""
    hint = "pass encoding= to read another encoding"
    lineno = 0
    try:
        # surrogateescape keeps undecodable bytes so the exact line and byte can be reported
        with path.open(encoding=encoding, errors="surrogateescape") as f:
            for lineno, line in enumerate(f, 1):
                if not line.isascii():
                    try:
                        line.encode(encoding)
                    except UnicodeEncodeError as err:
                        bad = ord(line[err.start])
                        what = f"byte 0x{bad - 0xDC00:02x}" if bad >= 0xDC80 else f"U+{bad:04X}"
                        raise DatasetError(
                            f"{path}:{lineno}: not {encoding} text ({what} at column "
                            f"{err.start + 1}); {hint}"
                        ) from None
                yield lineno, line
    except UnicodeError as err:  # what surrogateescape cannot carry (UTF-16 input, no BOM)
        reason = err.reason if isinstance(err, UnicodeDecodeError) else err
        raise DatasetError(f"{path}:{lineno + 1}: not {encoding} text ({reason}); {hint}") from None
    except LookupError:
        raise DatasetError(f"unknown text encoding {encoding!r} for '{path}'") from None
    except OSError as err:
        raise DatasetError(f"cannot read triple file '{path}': {err.strerror or err}") from None


def load_triples(
    path: str | os.PathLike[str],
    *,
    sep: str | None = "\t",
    add_inverse: bool = False,
    name: str | None = None,
    encoding: str = "utf-8",
) -> Dataset:
    """Load a triple file: one ``head<sep>relation<sep>tail`` per line (TSV by default).

    Entity and relation names are mapped to ids in order of first appearance (entities: one
    node type ``"entity"``). Blank lines and lines starting with ``#`` are skipped.

    Args:
        path: the file.
        sep: field separator; ``None`` splits on any whitespace.
        add_inverse: add relation ``rev-<rel>`` with every edge reversed.
        name: dataset name (default: the path).
        encoding: the file's text encoding.

    Raises:
        DatasetError: if the file is missing or unreadable, empty, not text in ``encoding``
            (the message gives the line and byte), or a line does not have three fields.
    """
    p = Path(path)
    if not p.is_file():
        raise DatasetError(f"triple file '{p}' does not exist")
    if sep is not None and (not isinstance(sep, str) or not sep):
        raise DatasetError(f"sep must be a non-empty string or None, got {sep!r}")
    entities: dict[str, int] = {}
    relations: dict[str, int] = {}
    heads: list[int] = []
    rels: list[int] = []
    tails: list[int] = []
    for lineno, line in _text_lines(p, encoding):
        line = line.rstrip("\r\n")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = [x.strip() for x in (line.split(sep) if sep is not None else line.split())]
        if len(parts) != 3 or not all(parts):
            raise DatasetError(
                f"{p}:{lineno}: expected 3 fields (head, relation, tail), got {len(parts)}: "
                f"{line[:80]!r}"
            )
        h, r, t = parts
        heads.append(entities.setdefault(h, len(entities)))
        rels.append(relations.setdefault(r, len(relations)))
        tails.append(entities.setdefault(t, len(entities)))
    if not heads:
        raise DatasetError(f"triple file '{p}' has no triples")
    n, num_rel = len(entities), len(relations)
    src, dst, et = (torch.tensor(v, dtype=torch.int64) for v in (heads, tails, rels))
    rel_names = list(relations)
    if add_inverse:
        src, dst = torch.cat([src, dst]), torch.cat([dst, src])
        et = torch.cat([et, et + num_rel])
        rel_names += [f"rev-{r}" for r in rel_names]
    return Dataset(
        name=name or str(p),
        num_nodes=n,
        node_type=torch.zeros(n, dtype=torch.int64),
        node_types=["entity"],
        edge_index=torch.stack([src, dst]),
        edge_type=et,
        edge_types=[("entity", r, "entity") for r in rel_names],
        info={"source": str(p), "entity_names": list(entities)},
    )


#: Endpoint node types of the relations in ``ogbn_mag_0.1`` (a 10% ogbn-mag sample), derived
#: from the data: each file is the inverse of its partner; ``cited``/``citing`` ids span one id
#: space (papers, max id 73637); ``has`` row 0 uses ids 0..6000 with a few very high-degree
#: nodes (up to 4391 papers each) — fields of study — while its row 1 spans the paper ids with
#: at most 6 entries per paper; ``writing`` row 1 has papers with up to 247 entries (authors per
#: paper) and row 0 up to 81 (papers per author). Ids are local to each node type (author ids
#: and paper ids overlap numerically). There is no affiliation relation, so no institutions.
MAG_SAMPLE_RELATIONS: dict[str, tuple[str, str]] = {
    "cited": ("paper", "paper"),
    "citing": ("paper", "paper"),
    "has": ("field_of_study", "paper"),
    "is-about": ("paper", "field_of_study"),
    "writing": ("author", "paper"),
    "written-by": ("paper", "author"),
}
_MAG_SAMPLE_NODE_TYPES = ["paper", "author", "field_of_study"]


def _coo_files(directory: Path) -> dict[str, Path]:
    """``{relation: file}`` for the ``<rel>_coo*.npy`` files of a directory (sorted by name)."""
    files: dict[str, Path] = {}
    for f in sorted(directory.glob("*_coo*.npy")):
        rel = f.name[: f.name.index("_coo")]
        if rel in files:
            raise DatasetError(f"relation {rel!r} has two files: {files[rel].name}, {f.name}")
        files[rel] = f
    return files


#: What np.load raises on a truncated or corrupt file (numpy parses the header with tokenize and
#: ast.literal_eval, and memory-maps the data).
_NPY_ERRORS = (OSError, ValueError, EOFError, SyntaxError, tokenize.TokenError, OverflowError)


def _open_coo(f: Path) -> np.ndarray:
    """Memory-map one COO file, which must hold an integer array of shape (2, E)."""
    try:
        a = np.load(f, mmap_mode="r", allow_pickle=False)
    except _NPY_ERRORS as err:
        raise DatasetError(f"{f}: not a readable .npy file ({type(err).__name__}: {err})") from None
    if not isinstance(a, np.ndarray):  # np.load opens an .npz archive whatever the name
        a.close()
        raise DatasetError(f"{f}: is an .npz archive, expected one .npy array")
    if a.ndim != 2 or a.shape[0] != 2 or not np.issubdtype(a.dtype, np.integer):
        raise DatasetError(
            f"{f.name}: expected an integer array of shape (2, E), got {a.dtype} {a.shape}"
        )
    return a


def _max_coo_id(f: Path, a: np.ndarray, row: int) -> int:
    """The largest id in row ``row`` of a COO array (-1 if empty), checked to be a node id
    Hector's int32 kernels can index; DatasetError on a negative id."""
    if a.shape[1] == 0:
        return -1
    ids = a[row]
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0:
        col = int(np.argmax(ids < 0))
        raise DatasetError(f"{f.name}: entry [{row}, {col}] = {int(ids[col])} < 0")
    if hi >= MAX_COUNT:
        col = int(np.argmax(ids == hi))
        raise DatasetLimitError(
            f"{f}: node id {hi} at [{row}, {col}] exceeds the int32 limit of Hector's kernels "
            f"(ids must be < {MAX_COUNT})"
        )
    return hi


def load_coo_dir(
    path: str | os.PathLike[str],
    *,
    relations: Mapping[str, tuple[str, str]] | None = None,
    num_nodes: Mapping[str, int] | None = None,
    node_types: Sequence[str] | None = None,
    name: str | None = None,
) -> Dataset:
    """Load a directory of NumPy COO arrays, one ``<rel>_coo*.npy`` (int [2, E]) per relation.

    Row 0 holds source ids and row 1 destination ids, local to their node type. The files are
    read in place (memory-mapped), never copied.

    Args:
        path: the directory.
        relations: ``{rel: (src_type, dst_type)}``; default: :data:`MAG_SAMPLE_RELATIONS` when
            the file set is exactly the ogbn-mag sample's, else one node type ``"node"``.
        num_nodes: nodes per type; default (and minimum): the largest id used + 1.
        node_types: node type order (default: order of first mention in ``relations``; for the
            ogbn-mag sample ``paper, author, field_of_study``).
        name: dataset name (default: the directory's name).

    Raises:
        DatasetError: on a missing directory, no ``*_coo*.npy`` files, an array that is not an
            integer [2, E] array, a negative id or an id ``>= num_nodes[type]``, or a relation
            missing from ``relations``.
    """
    d = Path(path)
    if not d.is_dir():
        raise DatasetError(f"COO directory '{d}' does not exist")
    files = _coo_files(d)
    if not files:
        raise DatasetError(f"'{d}' has no <relation>_coo*.npy files")
    assumption = None
    if relations is None:
        if set(files) == set(MAG_SAMPLE_RELATIONS):
            relations = MAG_SAMPLE_RELATIONS
            node_types = node_types or _MAG_SAMPLE_NODE_TYPES
            assumption = "ogbn-mag sample schema (hector.datasets.MAG_SAMPLE_RELATIONS)"
        else:
            relations = {rel: ("node", "node") for rel in files}
            assumption = "one node type; ids shared by all relations"
    for rel in files:
        if rel not in relations:
            raise DatasetError(f"relation {rel!r} ({files[rel].name}) is not in relations")
    if node_types is None:
        node_types = list(dict.fromkeys(t for rel in files for t in relations[rel]))
    node_types = list(node_types)
    for rel in files:
        for t in relations[rel]:
            if t not in node_types:
                raise DatasetError(f"relation {rel!r} uses node type {t!r} not in node_types")

    # Headers first (memory-mapped, nothing read): every size is checked before allocating.
    arrays = {rel: _open_coo(f) for rel, f in files.items()}
    num_edges = sum(int(a.shape[1]) for a in arrays.values())
    _check_size(str(d), edges=num_edges, names=len(arrays) + len(node_types))
    max_id = dict.fromkeys(node_types, -1)
    for rel, a in arrays.items():
        for row, t in enumerate(relations[rel]):
            max_id[t] = max(max_id[t], _max_coo_id(files[rel], a, row))
    counts = {t: max_id[t] + 1 for t in node_types}
    if num_nodes is not None:
        for t, c in num_nodes.items():
            if t not in counts:
                raise DatasetError(f"num_nodes names unknown node type {t!r}")
            c = _count(f"num_nodes[{t!r}]", c)
            if c < counts[t]:
                raise DatasetError(
                    f"num_nodes[{t!r}] = {c} but the files use id {counts[t] - 1} for that type"
                )
            counts[t] = c
    _check_size(str(d), nodes=sum(counts.values()), edges=num_edges)
    starts = np.cumsum([0] + [counts[t] for t in node_types]).tolist()
    offsets = dict(zip(node_types, starts[:-1], strict=True))
    eis, ets, edge_types = [], [], []
    for r, (rel, a) in enumerate(arrays.items()):
        s, t = relations[rel]
        shift = np.array([[offsets[s]], [offsets[t]]], dtype=np.int64)
        # ids shifted to global ones in a new int64 array (the memory map stays read-only)
        eis.append(torch.from_numpy(np.asarray(a, dtype=np.int64) + shift))
        ets.append(torch.full((a.shape[1],), r, dtype=torch.int64))
        edge_types.append((s, rel, t))
    node_type = torch.repeat_interleave(
        torch.arange(len(node_types)), torch.tensor([counts[t] for t in node_types])
    )
    return Dataset(
        name=name or d.name,
        num_nodes=int(node_type.shape[0]),
        node_type=node_type,
        node_types=node_types,
        edge_index=torch.cat(eis, 1),
        edge_type=torch.cat(ets),
        edge_types=edge_types,
        info={
            "source": str(d),
            "files": {rel: f.name for rel, f in files.items()},
            "assumption": assumption,
            "num_nodes": "given" if num_nodes is not None else "largest id + 1 per node type",
        },
    )


# ---------------------------------------------------------------------------------------------
# Generated replicas
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SyntheticSpec:
    """Published size of a graph that ``synthetic:<name>`` replicates.

    ``edges`` and ``relations`` are the published counts *before* inverse edges; the replica
    adds one inverse relation per relation (doubling both). ``node_types`` is the number of node
    types (names generated unless ``type_names`` is given); ``relation_names`` and
    ``relation_ends`` pin a real schema where there is a small one (mag).
    """

    nodes: int
    edges: int
    relations: int
    node_types: int
    source: str
    type_names: tuple[str, ...] = ()
    type_fractions: tuple[float, ...] = ()
    relation_names: tuple[str, ...] = ()
    relation_ends: tuple[tuple[int, int], ...] = ()
    relation_fractions: tuple[float, ...] = ()


#: Replicated graphs: counts from DESIGN.md's reference table (node type counts of the DGL
#: heterogeneous versions of the RDF graphs: AIFB 7, MUTAG 5, BGS 27, AM 7).
SYNTHETIC_SPECS: dict[str, SyntheticSpec] = {
    "aifb": SyntheticSpec(8_285, 29_043, 45, 7, "RDF (AIFB)"),
    "mutag": SyntheticSpec(23_644, 74_227, 23, 5, "RDF (MUTAG)"),
    "bgs": SyntheticSpec(333_845, 916_199, 103, 27, "RDF (BGS)"),
    "am": SyntheticSpec(1_666_764, 5_988_321, 133, 7, "RDF (AM)"),
    "fb15k": SyntheticSpec(14_541, 310_116, 237, 1, "knowledge graph (FB15k-237)"),
    "biokg": SyntheticSpec(
        93_773,
        5_088_434,
        51,
        5,
        "knowledge graph (ogbl-biokg)",
        type_names=("disease", "drug", "function", "protein", "sideeffect"),
        type_fractions=(0.11, 0.11, 0.48, 0.19, 0.11),
    ),
    "mag": SyntheticSpec(
        1_939_743,
        21_111_007,
        4,
        4,
        "ogbn-mag",
        type_names=("paper", "author", "institution", "field_of_study"),
        type_fractions=(0.3796, 0.5849, 0.0045, 0.0310),
        relation_names=("cites", "writes", "affiliated_with", "has_topic"),
        relation_ends=((0, 0), (1, 0), (1, 2), (0, 3)),
        relation_fractions=(0.2566, 0.3385, 0.0494, 0.3555),
    ),
    "wikikg2": SyntheticSpec(2_500_604, 17_137_181, 535, 1, "knowledge graph (ogbl-wikikg2)"),
}


def _skewed_ids(rng: np.random.Generator, n: int, size: int, power: float) -> np.ndarray:
    """``size`` ranks in ``[0, n)``, rank ``floor(n u^power)``: density ~ r^(1/power - 1)."""
    u = rng.random(size)
    return np.minimum((n * u**power).astype(np.int64), n - 1)


def synthetic(name: str, scale: float = 1.0, seed: int = 0) -> Dataset:
    """Generate ``synthetic:<name>``: a graph with the published sizes of ``name``, scaled.

    Nodes ``round(nodes * scale)`` split into the spec's node types (skewed sizes); relations
    each get a fixed (source type, destination type) and a skewed share of the
    ``round(edges * scale)`` edges; sources follow a power law (a few hubs emit many edges of a
    relation, so unique (source, relation) pairs are far fewer than edges — compaction ratio
    below 1 as in real RDF graphs), destinations a milder one. Duplicate edges and self loops
    are removed. Then every relation gets an inverse ``rev-<rel>`` (edges and relations double).

    Args:
        name: a key of :data:`SYNTHETIC_SPECS` (with or without the ``synthetic:`` prefix).
        scale: size factor in (0, 1e3]; node and edge counts scale, relation counts do not
            (they shrink only if there would be fewer edges than relations).
        seed: generator seed; equal arguments give equal graphs.

    Raises:
        DatasetError: on an unknown name or a scale that leaves no nodes.
    """
    key = name.removeprefix("synthetic:")
    if key not in SYNTHETIC_SPECS:
        raise DatasetError(
            f"unknown synthetic dataset {name!r}; valid: "
            + ", ".join(f"synthetic:{k}" for k in SYNTHETIC_SPECS)
        )
    if (
        isinstance(scale, bool)
        or not isinstance(scale, int | float)
        or not math.isfinite(scale)
        or not 0 < scale <= 1e3
    ):
        raise DatasetError(f"scale must be a number in (0, 1000], got {scale!r}")
    spec = SYNTHETIC_SPECS[key]
    rng = np.random.default_rng(seed)
    n = round(spec.nodes * scale)
    n_types = spec.node_types
    if n < 2 * n_types:
        raise DatasetError(
            f"scale={scale} leaves {n} nodes for synthetic:{key}; it needs at least "
            f"{2 * n_types} ({n_types} node types)"
        )
    e_base = max(round(spec.edges * scale), 1)
    # Drawing candidates (1.3x, int64 pairs, float64 draws, np.unique's sort) costs more per
    # edge than holding the result; the inverse edges double the count.
    _check_size(
        f"synthetic:{key} at scale={scale}",
        nodes=n,
        edges=2 * e_base,
        names=2 * spec.relations,
        bytes_per_edge=_SYNTHETIC_BYTES_PER_EDGE,
    )

    # Node type sizes: the spec's fractions, else a Zipf-like split (type k ~ 1/(k+1)).
    frac = np.array(spec.type_fractions or [1.0 / (k + 1) for k in range(n_types)])
    sizes = np.maximum(np.floor(frac / frac.sum() * n).astype(np.int64), 2)
    sizes[0] += n - sizes.sum()
    type_names = list(spec.type_names) or (
        ["entity"] if n_types == 1 else [f"type{k}" for k in range(n_types)]
    )
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    # A per-type permutation maps degree ranks to ids: hubs are shared by every relation of a
    # type (as a class node in RDF is the hub of many relations) but scattered over the ids.
    hub_order = [rng.permutation(int(s)) for s in sizes]

    # Relations: endpoint types and edge shares.
    n_rel = min(spec.relations, e_base)
    if spec.relation_ends:
        ends = list(spec.relation_ends)
        shares = np.array(spec.relation_fractions)
        rel_names = list(spec.relation_names)
    else:
        p = sizes / sizes.sum()
        ends = [
            (int(rng.choice(n_types, p=p)), int(rng.choice(n_types, p=p))) for _ in range(n_rel)
        ]
        shares = 1.0 / (np.arange(n_rel) + 1.0) ** 1.1  # skewed: a few relations dominate
        shares = shares[rng.permutation(n_rel)]
        rel_names = [f"rel{r}" for r in range(n_rel)]
    shares = shares / shares.sum()
    counts = np.maximum(np.floor(shares * e_base).astype(np.int64), 1)
    counts[np.argmax(counts)] += e_base - counts.sum()
    # Keep each relation at most half as dense as its (src type, dst type) block allows and
    # move the excess to relations with room; a graph too small for its edges gets fewer.
    cap = np.maximum(np.array([sizes[s] * sizes[d] for s, d in ends], dtype=np.int64) // 2, 1)
    counts = np.minimum(counts, cap)
    deficit = e_base - int(counts.sum())
    room = cap - counts
    if deficit > 0 and room.sum() > 0:
        add = np.minimum(np.floor(room / room.sum() * deficit).astype(np.int64), room)
        counts += add
        rest = deficit - int(add.sum())
        for r in np.argsort(-(cap - counts))[: max(rest, 0)]:
            if counts[r] < cap[r]:
                counts[r] += 1

    srcs, dsts, rels = [], [], []
    for r, ((s, d), c) in enumerate(zip(ends, counts.tolist(), strict=True)):
        got = np.empty((2, 0), dtype=np.int64)
        for attempt in range(12):  # top up after removing duplicates and self loops
            need = c - got.shape[1]
            if need <= 0:
                break
            m = int(need * 1.3) + 16
            # skewed draws first; uniform ones fill what skew cannot reach in a dense block
            ps, pd = (3.0, 1.6) if attempt < 6 else (1.0, 1.0)
            a = hub_order[s][_skewed_ids(rng, int(sizes[s]), m, ps)] + offsets[s]
            b = hub_order[d][_skewed_ids(rng, int(sizes[d]), m, pd)] + offsets[d]
            cand = np.concatenate([got, np.stack([a, b])], axis=1)
            cand = cand[:, cand[0] != cand[1]]
            _, first = np.unique(cand[0] * n + cand[1], return_index=True)
            got = cand[:, np.sort(first)]
        got = got[:, :c]
        srcs.append(got[0])
        dsts.append(got[1])
        rels.append(np.full(got.shape[1], r, dtype=np.int64))
    src, dst, et = np.concatenate(srcs), np.concatenate(dsts), np.concatenate(rels)
    edge_index = np.stack([np.concatenate([src, dst]), np.concatenate([dst, src])])
    edge_type = np.concatenate([et, et + n_rel])
    edge_types = [(type_names[s], rel_names[r], type_names[d]) for r, (s, d) in enumerate(ends)]
    edge_types += [(d, f"rev-{rel}", s) for s, rel, d in edge_types]
    return Dataset(
        name=f"synthetic:{key}",
        num_nodes=n,
        node_type=torch.from_numpy(np.repeat(np.arange(n_types), sizes)),
        node_types=type_names,
        edge_index=torch.from_numpy(edge_index),
        edge_type=torch.from_numpy(edge_type),
        edge_types=edge_types,
        info={
            "replica_of": spec.source,
            "scale": scale,
            "seed": seed,
            "published": {"nodes": spec.nodes, "edges": spec.edges, "relations": spec.relations},
            "inverse_edges": True,
        },
    )


# ---------------------------------------------------------------------------------------------
# load()
# ---------------------------------------------------------------------------------------------

#: Real datasets found under the shared data folder by name.
SHARED_DATASETS = ("ogbn_mag_0.1",)


def data_root() -> Path | None:
    """The shared data folder: ``$HECTOR_DATA_DIR``, else ``../shared/data`` next to the repo.

    Returns ``None`` when none exists.
    """
    env = os.environ.get("HECTOR_DATA_DIR")
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[2]
    for cand in (repo.parent / "shared" / "data", repo / "shared" / "data"):
        if cand.is_dir():
            return cand
    return None


def available() -> list[str]:
    """Names :func:`load` accepts (besides paths)."""
    return [*SHARED_DATASETS, *(f"synthetic:{k}" for k in SYNTHETIC_SPECS)]


def load(name: str | os.PathLike[str], *, scale: float = 1.0, seed: int = 0) -> Dataset:
    """Load a dataset by name or path.

    Args:
        name: ``"synthetic:<graph>"`` (generated, see :func:`synthetic`), ``"ogbn_mag_0.1"``
            (read from the shared data folder, see :func:`data_root`), a directory of
            ``<rel>_coo*.npy`` files (:func:`load_coo_dir`) or a triple file
            (:func:`load_triples`, ``.tsv``/``.txt``/``.csv``-less text with three fields).
        scale: size factor, for synthetic graphs only.
        seed: random seed, for synthetic graphs only.

    Raises:
        DatasetError: on an unknown name (the message lists the valid ones) or bad files.
    """
    s = os.fspath(name)
    if s.startswith("synthetic:"):
        return synthetic(s, scale=scale, seed=seed)
    if s in SHARED_DATASETS:
        root = data_root()
        where = root / s if root is not None else None
        if where is None or not where.is_dir():
            raise DatasetError(
                f"dataset {s!r} not found (looked in {where or '../shared/data'}); set "
                "HECTOR_DATA_DIR to the folder that holds it"
            )
        return load_coo_dir(where, name=s)
    p = Path(s)
    if p.is_dir():
        return load_coo_dir(p)
    if p.is_file():
        return load_triples(p)
    raise DatasetError(
        f"unknown dataset {s!r}: not a file or directory; valid names: {', '.join(available())}"
    )
