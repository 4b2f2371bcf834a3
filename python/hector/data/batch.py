"""One sampled mini-batch: :class:`Batch`, what :class:`~hector.data.loader.NeighborLoader`
yields.

A batch holds the sampled subgraph as Hector's kernels read it (a
:class:`~hector.data.graph.HeteroGraph` with local ids grouped by node type, the seeds leading
their type's block), the global ids behind the local ones, the gathered features and labels and
the time each phase took. It derives the graphs a deep model's layers need when only the seeds'
outputs count (:meth:`Batch.layer_graphs`), and converts to PyG inputs
(:meth:`Batch.to_pyg`, :meth:`Batch.to_pyg_hetero`) so PyG layers run on the very same
subgraphs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .graph import HeteroGraph

__all__ = ["Batch"]


@dataclass
class Batch:
    """One sampled mini-batch.

    Attributes:
        graph: the sampled subgraph as Hector's kernels read it (local ids grouped by node
            type; the seeds lead their type's block).
        node_ids: int64 [N], global (dataset) id of each local node.
        seed_local: int64 [B], local id of each seed (rows of the output to train on).
        ntype_ptr: int64 [T + 1], local id range of each node type.
        edge_ids: int64 [E], dataset edge id of each (sorted) edge.
        x: float32 [N, F] gathered input features (None without a feature store).
        y: int64 [B] labels of the seeds (None without labels).
        index: batch number within the epoch; epoch: the epoch.
        times: seconds spent ``sampling`` and in the feature ``gather``.
    """

    graph: HeteroGraph
    node_ids: torch.Tensor
    seed_local: torch.Tensor
    ntype_ptr: torch.Tensor
    edge_ids: torch.Tensor
    x: torch.Tensor | None = None
    y: torch.Tensor | None = None
    index: int = 0
    epoch: int = 0
    times: dict[str, float] = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        """Number of nodes N of the subgraph."""
        return self.graph.num_nodes

    @property
    def num_edges(self) -> int:
        """Number of edges E of the subgraph."""
        return self.graph.num_edges

    def hops(self) -> torch.Tensor:
        """int64 [N]: each node's distance in hops from the nearest seed along the sampled
        edges (messages flow from source to destination); N + 1 where none reaches one."""
        g = self.graph
        far = g.num_nodes + 1
        dist = torch.full((g.num_nodes,), far, dtype=torch.int64)
        dist[self.seed_local] = 0
        src, dst = g.src.long(), g.dst.long()
        for hop in range(g.num_nodes):
            reach = dist[dst] == hop
            if not bool(reach.any()):
                break
            step = torch.full_like(dist, far).index_fill_(0, src[reach], hop + 1)
            dist = torch.minimum(dist, step)
        return dist

    def layer_graphs(self, num_layers: int) -> list[HeteroGraph]:
        """The graph each layer of a ``num_layers``-layer model needs when only the seeds'
        outputs are used: layer ``l`` keeps the edges into nodes at most ``num_layers - 1 - l``
        hops from a seed, each such node with all its edges (its degree norms unchanged). No
        other edge can reach a seed's output, so the seeds' outputs and every gradient are those
        of the whole :attr:`graph`, while the last layers skip most edges (the outermost hop has
        most of them). Node ids are unchanged; a graph with every edge is :attr:`graph`."""
        g = self.graph
        into = self.hops()[g.dst.long()]
        graphs = []
        for layer in range(num_layers):
            keep = into <= num_layers - 1 - layer
            if bool(keep.all()):
                graphs.append(g)
                continue
            graphs.append(
                HeteroGraph.from_edge_index(
                    torch.stack([g.src[keep], g.dst[keep]]).long(),
                    g.etype[keep].long(),
                    num_nodes=g.num_nodes,
                    node_type=g.ntype,
                    num_etypes=g.num_etypes,
                    num_ntypes=g.num_ntypes,
                )
            )
        return graphs

    def x_dict(self, node_types: Sequence[str], x: torch.Tensor | None = None) -> dict:
        """``x`` (default: the batch's features) split into ``{node type: rows}`` in the
        graph's node type order (what ``hector.models.HGT`` and PyG's ``HGTConv`` take)."""
        x = self.x if x is None else x
        if x is None:
            raise ValueError("the batch has no features")
        ptr = self.ntype_ptr.tolist()
        return {t: x[ptr[i] : ptr[i + 1]] for i, t in enumerate(node_types)}

    def to_pyg(self) -> dict[str, torch.Tensor | None]:
        """PyG inputs of ``RGCNConv`` / ``RGATConv``: ``x``, ``edge_index`` [2, E] and
        ``edge_type`` [E] (int64), edges in the graph's order."""
        edge_index, edge_type = self.graph.edge_index_sorted()
        return {"x": self.x, "edge_index": edge_index, "edge_type": edge_type}

    def to_pyg_hetero(
        self, node_types: Sequence[str], edge_types: Sequence[tuple[str, str, str]]
    ) -> tuple[dict[str, torch.Tensor], dict[tuple[str, str, str], torch.Tensor]]:
        """PyG inputs of ``HGTConv``: ``(x_dict, edge_index_dict)`` with per-type local ids;
        ``node_types``/``edge_types`` in the dataset's order (``Dataset.metadata()``)."""
        g = self.graph
        ptr = self.ntype_ptr.tolist()
        eptr = g.etype_ptr.tolist()
        index = {t: i for i, t in enumerate(node_types)}
        src, dst = g.src.long(), g.dst.long()
        edge_index_dict = {}
        for r, (s, rel, d) in enumerate(edge_types):
            lo, hi = eptr[r], eptr[r + 1]
            edge_index_dict[(s, rel, d)] = torch.stack(
                [src[lo:hi] - ptr[index[s]], dst[lo:hi] - ptr[index[d]]]
            )
        return self.x_dict(node_types), edge_index_dict
