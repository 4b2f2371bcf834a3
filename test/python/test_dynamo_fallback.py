"""Graphs the Hector backend declines run as Dynamo captured them, and say why.

A declined graph (one Hector cannot bind or import) must give what the model gives eagerly,
outputs and gradients, must not be imported again for every new size, and ``hector.explain``
must name the PyG layers in it and the reason. The probe model is a ``HeteroConv`` over a
random ``HeteroData`` graph, of a conv Hector has no program for (``TransformerConv``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch._dynamo
from torch_geometric.data import HeteroData
from torch_geometric.nn import HeteroConv, TransformerConv

import hector
from hector.dynamo.backend import HectorBackend, describe_layers, pyg_layers

TOL = 1e-5
RELATIONS = (("author", "writes", "paper"), ("paper", "cites", "paper"), ("paper", "by", "author"))


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _hetero_graph(papers: int, authors: int, seed: int) -> HeteroData:
    gen = torch.Generator().manual_seed(seed)
    data = HeteroData()
    counts = {"paper": papers, "author": authors}
    for t, n in counts.items():
        data[t].x = torch.randn(n, 8, generator=gen)
    for s, r, d in RELATIONS:
        e = 3 * counts[d]
        src = torch.randint(counts[s], (e,), generator=gen)
        dst = torch.randint(counts[d], (e,), generator=gen)
        data[s, r, d].edge_index = torch.stack([src, dst])
    return data


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = HeteroConv(
            {rel: TransformerConv((-1, -1), 6, heads=2) for rel in RELATIONS}, aggr="sum"
        )

    def forward(self, x_dict: Any, edge_index_dict: Any) -> Any:  # noqa: D102
        return {k: v.relu() for k, v in self.conv(x_dict, edge_index_dict).items()}


def _step(model: torch.nn.Module, fn: Any, data: HeteroData) -> list[torch.Tensor]:
    """Outputs, then the parameters' and the features' gradients of one training step."""
    model.zero_grad()
    xs = {t: data[t].x.clone().requires_grad_() for t in ("author", "paper")}
    out = fn(xs, data.edge_index_dict)
    sum(o.square().mean() for o in out.values()).backward()
    grads = [p.grad for p in model.parameters()] + [xs[t].grad for t in sorted(xs)]
    return [out[k].detach() for k in sorted(out)] + grads


def _model(data: HeteroData) -> _Net:
    torch.manual_seed(0)
    model = _Net()
    with torch.no_grad():
        model(data.x_dict, data.edge_index_dict)  # materialise the lazy (-1) shapes
    return model


def test_a_declined_heterogeneous_graph_matches_eager_and_runs_as_captured() -> None:
    data = _hetero_graph(30, 20, seed=1)
    model = _model(data)
    be = HectorBackend()
    compiled = torch.compile(model, backend=be)
    for _ in range(2):
        got, want = _step(model, compiled, data), _step(model, model, data)
        assert len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            assert (a is None) == (b is None)
            if a is not None:
                assert (a - b).abs().max().item() <= TOL
    assert be.graphs
    assert all(g.status == "fallback" for g in be.graphs)
    stats = be.stats()
    assert stats["hector_calls"] == 0
    assert stats["fallback_calls"] == 2 * len(be.graphs)
    assert stats["specializations"] == 0  # nothing imported: it was declined when compiled
    declined = stats["declined"]
    assert [d["graph"] for d in declined] == [g.index for g in be.graphs]
    assert declined[0]["layers"]["TransformerConv"] == [
        f"conv.convs.<{'___'.join(rel)}>" for rel in RELATIONS
    ]
    assert declined[0]["layers"]["HeteroConv"] == ["conv"]
    assert "edge_index inputs" in declined[0]["reason"]


def test_explain_names_the_declined_convs_and_the_reason() -> None:
    data = _hetero_graph(30, 20, seed=2)
    model = _model(data)
    text = str(hector.explain(model, data.x_dict, data.edge_index_dict))
    assert "fell back (eager): 3 edge_index inputs" in text
    assert "declined layer(s), run as captured: HeteroConv (conv); TransformerConv x3 (" in text
    assert "conv.convs.<author___writes___paper>" in text


def test_describe_layers_counts_and_shortens() -> None:
    layers = {"GATConv": [f"convs.{i}" for i in range(5)], "HeteroConv": ["hc"]}
    assert describe_layers(layers) == (
        "GATConv x5 (convs.0, convs.1, convs.2, ... 2 more); HeteroConv (hc)"
    )
    assert describe_layers({}) == ""


class _NoRelations(torch.nn.Module):
    """Reads ``edge_index`` but only in dense ops: nothing relational for Hector to raise (its
    linear layer and ReLU alone would be, and are left to PyTorch)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.lin(x).relu() + edge_index.float().mean()


def test_a_graph_declined_at_its_first_call_is_not_imported_again_for_new_sizes() -> None:
    """With symbolic sizes the backend imports at the first call; when that fails (here: only
    dense ops raised) the graph is declined, so later sizes run as captured without another
    import."""
    model = _NoRelations()
    be = HectorBackend()
    compiled = torch.compile(model, backend=be, dynamic=True)
    for n in (20, 27, 33):
        x = torch.randn(n, 8)
        ei = torch.randint(n, (2, 3 * n))
        assert torch.allclose(compiled(x, ei), model(x, ei), atol=TOL)
    assert len(be.graphs) == 1
    graph = be.graphs[0]
    assert graph.status == "fallback"
    assert "no relational op raised (only add, typed_linear, unary)" in (graph.reason or "")
    assert len(graph.specializations) == 1
    assert graph.fallback_calls == 3
    assert pyg_layers(graph.gm) == {}
