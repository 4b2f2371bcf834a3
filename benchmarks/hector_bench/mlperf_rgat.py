"""MLPerf Training's R-GAT as ``hector bench minibatch --workload mlperf-rgat`` trains it.

The model of MLPerf's reference (``graph_neural_network`` in mlcommons/training, built on PyG):
``layers`` ``HeteroConv`` layers, each one ``GATConv(in, hidden // heads, heads=heads,
add_self_loops=False)`` per relation with the relations' outputs summed; leaky ReLU and dropout
(0.2) between layers; a linear classifier on the seed (paper) nodes. Its defaults: 3 layers,
hidden 512, 4 heads, fan-outs 15, 10, 5, batch size 1024, 1024-wide features stored in float16,
2983 classes (IGBH's fine labels; 19 coarse). Hector's twin runs the same weights through
:class:`hector.models.HeteroGATLayer` (one compiled function per layer).

Both models convert the batch's features to float32 at the first layer (a float16 feature file
halves the bytes read and gathered; compute is in float32), and classify only the seeds (the
reference classifies every paper node of the batch and takes the seeds' rows). Hector's twin
runs each layer on :meth:`hector.data.loader.Batch.layer_graphs` (the edges that reach the seeds;
the same logits and gradients), and the activation and dropout between layers only on the rows the
next layer reads (dropout then draws other masks than PyG's, from the same distribution); the
PyG model runs every layer on the whole batch, as the
reference does (``with_trim=False``; PyG's ``trim_to_layer`` is the equivalent it leaves off).
"""

from __future__ import annotations

from typing import Any

#: MLPerf's reference configuration (its ``train_rgnn_multi_gpu.py`` defaults), as the
#: ``hector bench minibatch`` options it sets.
WORKLOAD = {
    "models": "mlperf-rgat",
    "datasets": "synthetic:igbh-small",
    "fanouts": "15,10,5",
    "batch_size": 1024,
    "feat": 1024,
    "feat_dtype": "float16",
    "hidden": 512,
    "heads": 4,
    "classes": 2983,
}
LAYERS = 3
DROPOUT = 0.2


def build_models(
    ds: Any, feat: int, hidden: int, classes: int, heads: int, seed: int
) -> tuple[Any, Any]:
    """``(hector_model, pyg_model)``: the reference R-GAT in PyG and Hector's twin holding the
    same weights; both map a :class:`~hector.data.loader.Batch` to the seeds' logits."""
    import torch
    from torch import nn
    from torch_geometric import nn as pyg_nn
    from torch_geometric.utils import trim_to_layer

    from hector import models

    if hidden % heads:
        raise ValueError(f"--hidden {hidden} must be a multiple of --heads {heads}")
    torch.manual_seed(seed)
    node_types, edge_types = ds.metadata()
    target = "paper" if "paper" in node_types else node_types[0]

    class PygRgat(nn.Module):
        """``RGNN`` of MLPerf's ``rgnn.py`` (``rgat``): ``forward(x_dict, edge_index_dict,
        num_sampled_edges_dict, num_sampled_nodes_dict)``, trimming each layer's inputs with
        PyG's ``trim_to_layer`` where the counts are given (the reference's ``with_trim``)."""

        def __init__(self) -> None:
            super().__init__()
            self.convs = nn.ModuleList(
                pyg_nn.HeteroConv(
                    {
                        e: pyg_nn.GATConv(
                            feat if i == 0 else hidden,
                            hidden // heads,
                            heads=heads,
                            add_self_loops=False,
                        )
                        for e in edge_types
                    }
                )
                for i in range(LAYERS)
            )
            self.dropout = nn.Dropout(DROPOUT)
            self.lin = nn.Linear(hidden, classes)

        def forward(
            self,
            x_dict: dict[str, Any],
            edge_index_dict: dict[Any, Any],
            num_sampled_edges_dict: Any = None,
            num_sampled_nodes_dict: Any = None,
        ) -> Any:
            x_dict = {t: v.float() for t, v in x_dict.items()}  # float16 file, float32 compute
            for i, conv in enumerate(self.convs):
                if num_sampled_nodes_dict is not None:
                    x_dict, edge_index_dict, _ = trim_to_layer(
                        i, num_sampled_nodes_dict, num_sampled_edges_dict, x_dict, edge_index_dict
                    )
                x_dict = conv(x_dict, edge_index_dict)
                if i + 1 < len(self.convs):
                    x_dict = {
                        t: self.dropout(nn.functional.leaky_relu(v)) for t, v in x_dict.items()
                    }
            return self.lin(x_dict[target])

    class HectorRgat(nn.Module):
        def __init__(self, ref: Any) -> None:
            super().__init__()
            self.layers = nn.ModuleList(
                models.HeteroGATLayer.from_pyg(conv, node_types) for conv in ref.convs
            )
            self.dropout = nn.Dropout(DROPOUT)
            self.lin = nn.Linear(hidden, classes)
            self.lin.load_state_dict(ref.rgnn.lin.state_dict())

        def forward(self, batch: Any) -> Any:
            x = batch.x  # float16 rows as gathered: the first layer's kernels read them
            # Each layer on the edges that reach the seeds (the seeds' logits are all that is
            # used): the same logits and gradients, fewer edges in the later layers.
            layers = len(self.layers)
            graphs, hops = batch.layer_graphs(layers), batch.hops()
            for i, layer in enumerate(self.layers):
                x = layer(graphs[i], x)
                if i + 1 < layers:  # only the rows the next layer reads (the others stay 0)
                    rows = (hops <= layers - 1 - i).nonzero().squeeze(1)
                    kept = self.dropout(nn.functional.leaky_relu(x[rows]))
                    x = torch.zeros_like(x).index_copy(0, rows, kept)
            return self.lin(x[batch.seed_local])

    pyg = batch_model(PygRgat(), node_types, edge_types)
    return HectorRgat(pyg), pyg


def batch_model(rgnn: Any, node_types: list[str], edge_types: list[Any]) -> Any:
    """The reference module ``rgnn`` on a :class:`~hector.data.loader.Batch`."""
    from torch import nn

    class PygBatch(nn.Module):
        """The reference model on a :class:`~hector.data.loader.Batch`: its PyG inputs (hop
        ordered with the per-hop counts when ``trim``), ``rgnn`` (or ``compiled``, the same
        module under ``torch.compile``) on them, the seeds' rows of the logits."""

        def __init__(self) -> None:
            super().__init__()
            self.rgnn = rgnn
            self.convs = self.rgnn.convs
            self.trim = False
            self.compiled: list[Any] = []  # a list: not a second registered module

        def forward(self, batch: Any) -> Any:
            args = pyg_inputs(batch, node_types, edge_types, LAYERS, self.trim)
            run = self.compiled[0] if self.compiled else self.rgnn
            return run(*args)[: len(batch.seed_local)]

    return PygBatch()


def pyg_inputs(
    batch: Any, node_types: list[str], edge_types: list[Any], layers: int, trim: bool
) -> tuple[Any, ...]:
    """``(x_dict, edge_index_dict)`` of ``batch`` for the reference model; with ``trim``, as
    PyG's ``NeighborLoader`` orders them for ``trim_to_layer``: each type's nodes by hop from
    the seeds (stable: the seeds first, in order), each relation's edges by the hop of their
    destination, and the per-hop counts ``num_sampled_edges_dict``, ``num_sampled_nodes_dict``
    (``layers + 1`` node hops, ``layers`` edge hops)."""
    import torch

    x, edges = batch.to_pyg_hetero(node_types, edge_types)
    if not trim:
        return x, edges
    hops = batch.hops().clamp(max=layers)
    ptr = batch.ntype_ptr.tolist()
    rank, hop_of, nodes = {}, {}, {}
    for i, t in enumerate(node_types):
        h = hops[ptr[i] : ptr[i + 1]]
        order = torch.argsort(h, stable=True)
        x[t] = x[t][order]
        rank[t] = torch.empty_like(order).index_copy_(0, order, torch.arange(len(order)))
        hop_of[t] = h
        nodes[t] = torch.bincount(h, minlength=layers + 1).tolist()
    counts = {}
    for (s, r, d), ei in edges.items():
        eh = hop_of[d][ei[1]].clamp(max=layers - 1)
        order = torch.argsort(eh, stable=True)
        edges[(s, r, d)] = torch.stack([rank[s][ei[0]], rank[d][ei[1]]])[:, order]
        counts[(s, r, d)] = torch.bincount(eh, minlength=layers).tolist()
    return x, edges, counts, nodes


#: The reference model's systems beside eager ``pyg``: ``-trim`` runs ``trim_to_layer``
#: between layers; ``pyg-hector`` / ``pyg-inductor`` run it under ``torch.compile``.
SYSTEMS = ("pyg-trim", "pyg-hector", "pyg-hector-trim", "pyg-inductor", "pyg-inductor-trim")


def prepare_system(model: Any, system: str, dynamic: bool = False) -> None:
    """Set the reference ``model`` (:func:`build_models`' second) up as ``system`` runs it:
    trimmed or not, eager or under ``torch.compile(backend=..., dynamic=dynamic or None)`` (a
    fresh Dynamo state, so the run's first step holds its whole compilation)."""
    import torch

    if not hasattr(model, "compiled"):
        raise ValueError(f"system {system} runs only the mlperf-rgat model")
    model.trim = system.endswith("-trim")
    backend = system.removesuffix("-trim").removeprefix("pyg").removeprefix("-")
    model.compiled.clear()
    if backend:
        from torch._dynamo.utils import counters

        torch._dynamo.reset()
        counters.clear()  # reset() keeps them: a record counts its own system's graphs
        model.compiled.append(
            torch.compile(model.rgnn, backend=backend, dynamic=True if dynamic else None)
        )
    if backend == "hector":
        from hector.dynamo import pyg_route

        pyg_route.reset_stats()
        pyg_route.FALLBACKS.clear()


def compiled_stats(system: str) -> dict[str, Any]:
    """Dynamo's graphs so far (one per compilation: a second one is the recompilation for
    the next batch's other sizes) and, under Hector, the layer programs' calls, graph builds,
    seconds in Hector's kernels and the fallbacks' reasons."""
    from torch._dynamo.utils import counters

    out: dict[str, Any] = {
        "dynamo_graphs": int(counters["stats"]["unique_graphs"]),
    }
    if system.startswith("pyg-hector"):
        from hector.dynamo import pyg_route

        out["hector_programs"] = {
            name: {
                "calls": s.calls,
                "backward_calls": s.backward_calls,
                "graph_builds": s.graph_builds,
                "kernels": len(s.kernels),
                "seconds": round(s.seconds, 4),
            }
            for name, s in pyg_route.STATS.items()
        }
        out["fallbacks"] = dict(pyg_route.FALLBACKS)
    return out
