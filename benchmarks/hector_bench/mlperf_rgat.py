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

    from hector import models

    if hidden % heads:
        raise ValueError(f"--hidden {hidden} must be a multiple of --heads {heads}")
    torch.manual_seed(seed)
    node_types, edge_types = ds.metadata()
    target = "paper" if "paper" in node_types else node_types[0]

    class PygRgat(nn.Module):
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

        def forward(self, batch: Any) -> Any:
            x, edges = batch.to_pyg_hetero(node_types, edge_types)
            x = {t: v.float() for t, v in x.items()}
            for i, conv in enumerate(self.convs):
                x = conv(x, edges)
                if i + 1 < len(self.convs):
                    x = {t: self.dropout(nn.functional.leaky_relu(v)) for t, v in x.items()}
            return self.lin(x[target][: len(batch.seed_local)])

    class HectorRgat(nn.Module):
        def __init__(self, ref: PygRgat) -> None:
            super().__init__()
            self.layers = nn.ModuleList(
                models.HeteroGATLayer.from_pyg(conv, node_types) for conv in ref.convs
            )
            self.dropout = nn.Dropout(DROPOUT)
            self.lin = nn.Linear(hidden, classes)
            self.lin.load_state_dict(ref.lin.state_dict())

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

    pyg = PygRgat()
    return HectorRgat(pyg), pyg
