"""``HeteroConv`` calls as PyG's own tests make them (``hector.dynamo.pyg_hetero_call``, issue 54):
per-relation convs of several classes in one layer (one Hector program per class, combined by
the layer's ``aggr``) and edge data passed as a third positional dict.

Each case runs the same module eagerly and compiled and compares the outputs and the gradients
of every parameter and node type's features within 1e-5, and checks that every class's program
ran forward and backward without a fallback.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from test_pyg_hetero_route import TOL, _edges, _features
from test_pyg_route_configs import _fresh_dynamo  # noqa: F401  (autouse: Dynamo reset per test)
from torch_geometric.nn import (
    GATConv,
    GCN2Conv,
    GCNConv,
    GINEConv,
    HeteroConv,
    MessagePassing,
    SAGEConv,
)
from torch_geometric.nn import Linear as PygLinear

from hector.dynamo import pyg_route
from hector.dynamo.backend import HectorBackend

SIZES = {"paper": 13, "author": 9}
WIDTHS = {"paper": 5, "author": 7}
CITES = ("paper", "cites", "paper")
WRITES = ("author", "writes", "paper")
WRITTEN = ("paper", "written_by", "author")


def _mixed(aggr: Any) -> HeteroConv:
    """PyG's ``test_hetero_conv`` layer: ``GCNConv``, ``SAGEConv`` and ``GATConv`` (edge
    features) on three relations, two into ``paper``."""
    torch.manual_seed(0)
    return HeteroConv(
        {
            CITES: GCNConv(5, 8),
            WRITES: SAGEConv((7, 5), 8),
            WRITTEN: GATConv((5, 7), 8, edge_dim=3, add_self_loops=False),
        },
        aggr=aggr,
    )


def _inputs() -> tuple[dict[str, torch.Tensor], dict[Any, torch.Tensor], dict[Any, Any]]:
    x = _features(SIZES, WIDTHS)
    ei = _edges([CITES, WRITES, WRITTEN], SIZES, per=20)
    gen = torch.Generator().manual_seed(3)
    return x, ei, {WRITTEN: torch.randn(20, 3, generator=gen)}


def _run(model: Any, fn: Any, x: Any, ei: Any, third: Any, weights: Any) -> tuple[Any, Any]:
    model.zero_grad()
    xr = {k: v.clone().requires_grad_() for k, v in x.items()}
    out = fn(xr, ei, third, edge_weight_dict=weights)
    torch.stack([o.square().mean() for o in out.values()]).sum().backward()
    grads = [p.grad for p in model.parameters()] + [xr[k].grad for k in sorted(xr)]
    return out, grads


@pytest.mark.parametrize("aggr", ["sum", "mean", "max", "cat", None])
def test_mixed_classes_run_one_program_each(aggr: Any) -> None:
    """Every relation's class runs its program; outputs (in PyG's key order) and gradients
    match eager PyG, the edge features given positionally reaching ``GATConv``'s program and
    the edge weights ``GCNConv``'s."""
    model = _mixed(aggr)
    x, ei, edge_attr = _inputs()
    weights = {CITES: torch.rand(20, generator=torch.Generator().manual_seed(4))}
    want, want_g = _run(model, model, x, ei, edge_attr, weights)
    pyg_route.STATS.clear()
    compiled = torch.compile(model, backend=HectorBackend())
    got, got_g = _run(model, compiled, x, ei, edge_attr, weights)
    assert list(got) == list(want)
    for k in want:
        assert got[k].shape == want[k].shape
        assert (got[k] - want[k]).abs().max().item() <= TOL
    for a, b in zip(got_g, want_g, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            assert (a - b).abs().max().item() <= TOL
    assert "HeteroConv" not in pyg_route.FALLBACKS, pyg_route.FALLBACKS
    ran = {n.split(":")[0] for n, s in pyg_route.STATS.items() if s.calls and s.backward_calls}
    assert ran == {"hetero-gcn", "hetero-sage", "hetero-gat"}


def test_batch_without_a_class_runs_the_others() -> None:
    """A batch without the ``GATConv`` relation: the two other classes' programs."""
    model = _mixed("sum")
    x, ei, _ = _inputs()
    del ei[WRITTEN]
    want, want_g = _run(model, model, x, ei, {}, {})
    pyg_route.STATS.clear()
    got, got_g = _run(model, torch.compile(model, backend=HectorBackend()), x, ei, {}, {})
    assert list(got) == list(want) == ["paper"]
    assert (got["paper"] - want["paper"]).abs().max().item() <= TOL
    ran = {n.split(":")[0] for n, s in pyg_route.STATS.items() if s.calls}
    assert ran == {"hetero-gcn", "hetero-sage"}


@pytest.mark.parametrize(
    ("third", "reason"),
    [
        ({WRITES: (9, 13)}, "reads a third positional dict as 'size'"),
        ({"paper": None}, "keyed by node type"),
    ],
)
def test_positional_dicts_outside_the_programs_run_pygs_forward(third: Any, reason: str) -> None:
    """A third positional dict a conv reads as another parameter, or keyed by node type:
    PyG's forward, the reason kept (the result then is PyG's own)."""
    torch.manual_seed(0)
    model = HeteroConv({CITES: SAGEConv(5, 8), WRITES: SAGEConv((7, 5), 8)})
    x, ei, _ = _inputs()
    del ei[WRITTEN]
    compiled = torch.compile(model, backend=HectorBackend())
    got, want = compiled(x, ei, third), model(x, ei, third)
    assert (got["paper"] - want["paper"]).abs().max().item() <= TOL
    assert reason in pyg_route.FALLBACKS["HeteroConv"]


class GraphConv(MessagePassing):
    """PyG's test's conv of PyG's name, defined here: its messages are not known to Hector."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__(aggr="add")
        self.lin = torch.nn.Linear(in_channels, out_channels, bias=False)

    def forward(self, x: Any, edge_index: torch.Tensor) -> torch.Tensor:
        x = (x, x) if isinstance(x, torch.Tensor) else x
        return self.propagate(edge_index, x=(self.lin(x[0]), x[1]))


class OwnGCN2Conv(GCN2Conv):
    """A user's subclass of ``GCN2Conv`` (it may compute otherwise: no program for it)."""


def test_unrouted_classes_are_named_before_the_call_s_dicts() -> None:
    """A layer whose convs no program computes, called with dicts keyed by node type (PyG's
    ``GCN2Conv`` test's call, ``(x_dict, x_0_dict, edge_index_dict)``, to a subclass), or a
    class of PyG's name defined elsewhere: the reason names the classes; the result is PyG's
    own."""
    torch.manual_seed(0)
    x, ei, _ = _inputs()
    gcn2 = HeteroConv({CITES: OwnGCN2Conv(5, alpha=0.1)})
    compiled = torch.compile(gcn2, backend=HectorBackend())
    x_0 = {t: v.clone() for t, v in x.items()}
    got, want = compiled(x, x_0, ei), gcn2(x, x_0, ei)
    assert torch.allclose(got["paper"], want["paper"], rtol=0.0, atol=TOL)
    assert "['OwnGCN2Conv']" in pyg_route.FALLBACKS["HeteroConv"]
    torch._dynamo.reset()
    local = HeteroConv({CITES: GraphConv(5, 8), WRITES: GraphConv(7, 8)})
    got = torch.compile(local, backend=HectorBackend())(x, ei)
    assert torch.allclose(got["paper"], local(x, ei)["paper"], rtol=0.0, atol=TOL)
    reason = pyg_route.FALLBACKS["HeteroConv"]
    assert f"GraphConv of {__name__}, not PyG's" in reason


def _gine(aggr: Any, edge_dim: int | None, nn: Any = torch.nn.Linear) -> HeteroConv:
    """``GINEConv`` per relation (a trainable ``ε``, PyG's ``Linear``, no bias), edge
    features of the nodes' width or through ``edge_dim``."""
    torch.manual_seed(0)
    return HeteroConv(
        {
            CITES: GINEConv(nn(6, 8), eps=0.2, train_eps=True, edge_dim=edge_dim),
            WRITES: GINEConv(PygLinear(6, 8), edge_dim=edge_dim),
            WRITTEN: GINEConv(nn(6, 8, bias=False), eps=-0.5, edge_dim=edge_dim),
        },
        aggr=aggr,
    )


def _gine_inputs(edge_dim: int | None) -> tuple[Any, Any, Any]:
    x = _features(SIZES, {"paper": 6, "author": 6})
    ei = _edges([CITES, WRITES, WRITTEN], SIZES, per=20)
    gen = torch.Generator().manual_seed(5)
    attr = {e: torch.randn(20, edge_dim or 6, generator=gen) for e in ei}
    return x, ei, attr


@pytest.mark.parametrize("aggr", ["sum", "mean", "max"])
@pytest.mark.parametrize("edge_dim", [None, 3])
@pytest.mark.parametrize("missing", [False, True])
def test_gine_runs_one_program(aggr: Any, edge_dim: int | None, missing: bool) -> None:
    """``GINEConv`` relations (bipartite, edge features given positionally, a batch without
    one relation): one ``hetero-gine`` program, outputs and gradients (``ε``, ``lin``, the
    node features) as eager PyG's."""
    model = _gine(aggr, edge_dim)
    x, ei, attr = _gine_inputs(edge_dim)
    if missing:
        del ei[WRITTEN], attr[WRITTEN]
    want, want_g = _run(model, model, x, ei, attr, {})
    pyg_route.STATS.clear()
    got, got_g = _run(model, torch.compile(model, backend=HectorBackend()), x, ei, attr, {})
    assert list(got) == list(want)
    for k in want:
        assert torch.allclose(got[k], want[k], rtol=0.0, atol=TOL)
    for a, b in zip(got_g, want_g, strict=True):
        assert (a is None) == (b is None)
        assert a is None or torch.allclose(a, b, rtol=0.0, atol=TOL)
    assert "HeteroConv" not in pyg_route.FALLBACKS, pyg_route.FALLBACKS
    stats = pyg_route.STATS["hetero-gine"]
    assert (stats.calls, stats.backward_calls) == (1, 1)


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        ("no_attr", "without edge_attr"),
        ("narrow_attr", "is not [E, 6]"),
    ],
)
def test_gine_outside_the_program_runs_pygs_forward(edit: str, reason: str) -> None:
    """No edge features, edge features of another width: PyG's forward (its error), the
    reason kept (an MLP ``nn``: ``test_pyg_gin.py``)."""
    model = _gine("sum", None)
    x, ei, attr = _gine_inputs(None)
    attr = {} if edit == "no_attr" else attr
    if edit == "narrow_attr":
        attr = {e: v[:, :5] for e, v in attr.items()}
    compiled = torch.compile(model, backend=HectorBackend())
    with pytest.raises((AttributeError, ValueError)):  # PyG's own: no edge_attr, its check
        compiled(x, ei, attr)
    assert reason in pyg_route.FALLBACKS["HeteroConv"]
