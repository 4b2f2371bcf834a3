"""Relations into rows nothing reads, left out of a layer program's call
(``hector.dynamo.pyg_unread``): the outputs and every gradient as eager PyG's, and the last
layer's call without the relations into the types the model does not return."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from test_pyg_hetero_route import RELATIONS, SIZES, WIDTHS, _edges, _features
from test_pyg_route_configs import _fresh_dynamo  # noqa: F401  (autouse: Dynamo reset per test)
from torch_geometric.nn import GATConv, HeteroConv, SAGEConv

from hector.dynamo import pyg_route
from hector.dynamo.backend import HectorBackend

TOL = 1e-5


class _PaperRows(torch.nn.Module):
    """Two ``HeteroConv`` layers, the ``paper`` rows of the last one (in place ``relu_`` on
    the first layer's rows: a side effect the pass keeps)."""

    def __init__(self, conv: Any) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(
            HeteroConv({e: conv() for e in RELATIONS}) for _ in range(2)
        )

    def forward(self, x: Any, ei: Any) -> Any:
        x = {**x, **{t: v.relu_() for t, v in self.layers[0](x, ei).items()}}
        return self.layers[1](x, ei)["paper"]


def _relation_counts(backend: HectorBackend) -> list[int]:
    calls = [
        n
        for g in backend.graphs
        for n in g.gm.graph.nodes
        if n.op == "call_function" and n.target in pyg_route.LAYER_CALLS
    ]
    return [len(n.args[2]) for n in calls]


@pytest.mark.parametrize(
    "conv",
    [
        lambda: SAGEConv((-1, -1), 6),
        lambda: GATConv(6, 3, heads=2, add_self_loops=False),
        lambda: GATConv(6, 3, heads=2, add_self_loops=False, aggr="mean"),
    ],
    ids=["sage", "gat", "gat-mean"],
)
def test_unread_relations_left_out(conv: Any) -> None:
    """The second layer's call keeps the two relations into ``paper``; the first keeps all
    four; outputs and gradients (zeros where PyG gives none) match eager PyG."""
    torch.manual_seed(0)
    model = _PaperRows(conv)
    x, ei = _features(SIZES, WIDTHS), _edges(RELATIONS, SIZES)
    model(x, ei)  # the lazy widths
    backend = HectorBackend()
    compiled = torch.compile(model, backend=backend)
    results = []
    for fn in (compiled, model):
        model.zero_grad()
        xr = {k: v.clone().requires_grad_() for k, v in x.items()}
        out = fn(xr, ei)
        out.square().mean().backward()
        grads = [p.grad for p in model.parameters()] + [xr[k].grad for k in sorted(xr)]
        results.append((out.detach(), grads))
    (got, got_g), (want, want_g) = results
    assert (got - want).abs().max().item() <= TOL
    for a, b in zip(got_g, want_g, strict=True):
        if b is None:
            assert a is None or not a.any()
        else:
            assert (a - b).abs().max().item() <= TOL
    assert _relation_counts(backend) == [4, 2]
