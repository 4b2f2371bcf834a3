"""PyG's ``to_hetero_with_bases`` models under ``torch.compile(backend="hector")``: each
``HeteroBasisConv`` one Hector program with the basis coefficients (``hector.dynamo.pyg_bases``,
issue 54 item 2).

Every case runs the model eagerly and compiled and compares the outputs and the gradients of
every parameter (the bases' weights, their coefficients ``edge_type_weight``, PyG's
``LinearAlign`` projections) and of every node type's features, within 1e-5 (float32), against
*eager* PyG: compiled PyG is not a reference (its ``propagate`` skips the message-forward hook
that applies the coefficients while Dynamo traces it). The graphs are bipartite (node types of
different sizes and widths, aligned by ``in_channels``) and one relation has no edges.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch._dynamo
from test_pyg_route_configs import _fresh_dynamo  # noqa: F401  (autouse: Dynamo reset per test)
from test_pyg_to_hetero import METADATA, RELATIONS, TOL, _batch, _run
from torch._dynamo.utils import counters
from torch_geometric.nn import GCNConv, GINEConv, GraphConv, SAGEConv, to_hetero_with_bases

import hector
from hector.dynamo import pyg_route
from hector.dynamo.backend import HectorBackend


class Net(torch.nn.Module):
    """Two message passing layers of one conv class, an activation between."""

    def __init__(self, conv: Any, **options: Any) -> None:
        super().__init__()
        self.conv1 = conv(8, 6, **options)
        self.conv2 = conv(6, 4, **options)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def _with_bases(model: torch.nn.Module, bases: int = 3) -> torch.nn.Module:
    """``to_hetero_with_bases`` of ``model``, ``x`` aligned to 8 columns (PyG's lazy
    ``LinearAlign``, sized by one eager call)."""
    torch.manual_seed(0)
    hetero = to_hetero_with_bases(model, METADATA, num_bases=bases, in_channels={"x": 8})
    with torch.no_grad():
        hetero(*_batch(seed=9))
    return hetero


def _assert_matches(model: torch.nn.Module, compiled: Any, x: Any, ei: Any) -> None:
    """As ``test_pyg_to_hetero``'s, and every gradient present (all relations feed the loss)."""
    got_k, got, got_g = _run(model, compiled, x, ei)
    want_k, want, want_g = _run(model, model, x, ei)
    assert got_k == want_k
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        assert (a - b).abs().max().item() <= TOL
    assert len(got_g) == len(want_g)
    for a, b in zip(got_g, want_g, strict=True):
        assert a is not None
        assert b is not None
        assert (a - b).abs().max().item() <= TOL


def _coefficients(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p for n, p in model.named_parameters() if n.endswith("edge_type_weight")]


def _routed(model: torch.nn.Module, program: str, **compile_options: Any) -> HectorBackend:
    """The compiled model matches eager PyG in one graph, each layer one ``program`` call
    forward and backward, no layer declined."""
    backend = HectorBackend()
    compiled = torch.compile(model, backend=backend, **compile_options)
    counters.clear()
    _assert_matches(model, compiled, *_batch())
    assert not dict(counters["graph_break"])
    assert backend.stats()["compilations"] == 1
    assert not pyg_route.FALLBACKS, pyg_route.FALLBACKS
    assert backend.graphs[0].layers.count(program) == 2
    stats = pyg_route.STATS[program]
    assert stats.calls == 2
    assert stats.backward_calls == 2
    return backend


CONVS = {
    "sage-mean": (SAGEConv, {}, "hetero-bases:mean"),
    "sage-sum-no-root": (SAGEConv, {"aggr": "sum", "root_weight": False}, "hetero-bases:sum"),
    "sage-no-bias": (SAGEConv, {"bias": False}, "hetero-bases:mean"),
    "graphconv-add": (GraphConv, {}, "hetero-bases:sum"),
    "graphconv-mean": (GraphConv, {"aggr": "mean"}, "hetero-bases:mean"),
}


@pytest.mark.parametrize("name", list(CONVS))
def test_routed_conv(name: str) -> None:
    """Each routed conv class and option: forward and every gradient against eager PyG."""
    conv, options, program = CONVS[name]
    _routed(_with_bases(Net(conv, **options)), program)


class WeightedNet(torch.nn.Module):
    """``GraphConv`` layers given edge weights (``edge_weight`` positionally, as PyG's
    ``GraphConv.forward`` takes it)."""

    def __init__(self, **options: Any) -> None:
        super().__init__()
        self.conv1 = GraphConv(8, 6, **options)
        self.conv2 = GraphConv(6, 4, **options)

    def forward(self, x: Any, edge_index: Any, edge_weight: Any) -> Any:
        return self.conv2(self.conv1(x, edge_index, edge_weight).relu(), edge_index, edge_weight)


@pytest.mark.parametrize("aggr", ["add", "mean"])
def test_graphconv_edge_weights(aggr: str) -> None:
    """``GraphConv`` with edge weights (``[E, 1]`` per relation, as PyG's grouping takes them):
    forward and every gradient, the weights' included, against eager PyG."""
    torch.manual_seed(0)
    model = to_hetero_with_bases(
        WeightedNet(aggr=aggr), METADATA, num_bases=3, in_channels={"x": 8}
    )
    x, ei = _batch()
    gen = torch.Generator().manual_seed(5)
    ew = {e: torch.rand(v.shape[1], 1, generator=gen) for e, v in ei.items()}
    with torch.no_grad():
        model(x, ei, ew)  # PyG's lazy alignment layers take their widths

    def run(fn: Any) -> list[torch.Tensor]:
        model.zero_grad()
        weights = {e: w.clone().requires_grad_() for e, w in ew.items()}
        out = fn(x, ei, weights)
        sum(v.square().mean() for v in out.values()).backward()
        grads = [p.grad for p in model.parameters()] + [weights[e].grad for e in RELATIONS]
        return [out[k].detach() for k in sorted(out)] + grads

    compiled = torch.compile(model, backend=HectorBackend())
    for a, b in zip(run(compiled), run(model), strict=True):
        assert a.shape == b.shape
        assert a.numel() == 0 or (a - b).abs().max().item() <= TOL  # employs: no edges
    assert not pyg_route.FALLBACKS, pyg_route.FALLBACKS
    program = f"hetero-bases:{'mean' if aggr == 'mean' else 'sum'}:w"
    assert pyg_route.STATS[program].backward_calls == 2


def test_coefficients_reach_the_output() -> None:
    """The basis coefficients are applied: other coefficients give other outputs (Dynamo's
    own capture of PyG's forward would ignore them), and the coefficients' gradients are
    not zero for relations with edges and zero for the one without."""
    model = _with_bases(Net(SAGEConv))
    compiled = torch.compile(model, backend=HectorBackend())
    x, ei = _batch()
    before = compiled(x, ei)["paper"].detach()
    with torch.no_grad():
        _coefficients(model)[0].mul_(2.0)
    after = compiled(x, ei)
    assert (after["paper"] - before).abs().max().item() > 1e-3
    assert (after["paper"] - model(x, ei)["paper"]).abs().max().item() <= TOL
    sum(v.sum() for v in after.values()).backward()
    grad = _coefficients(model)[0].grad
    assert grad is not None
    employs = RELATIONS.index(("institute", "employs", "author"))
    assert grad[0, employs].item() == 0.0
    assert grad[0, RELATIONS.index(("author", "writes", "paper"))].abs().item() > 0.0


def test_one_basis() -> None:
    """``num_bases=1`` (PyG leaves the one copy's coefficients uninitialised: set here)."""
    model = _with_bases(Net(SAGEConv), bases=1)
    with torch.no_grad():
        for att in _coefficients(model):
            att.uniform_(-1.0, 1.0)
    _routed(model, "hetero-bases:mean")


def test_static_graph_features() -> None:
    """Features with a batch dimension ``[B, N, F]`` over one graph (PyG's
    ``test_to_hetero_with_bases_on_static_graphs``): one program over B copies of the graph."""
    model = _with_bases(Net(SAGEConv))
    x, ei = _batch()
    gen = torch.Generator().manual_seed(3)
    xs = {t: torch.randn(2, v.shape[0], v.shape[1], generator=gen) for t, v in x.items()}
    backend = HectorBackend()
    _assert_matches(model, torch.compile(model, backend=backend), xs, ei)
    assert not pyg_route.FALLBACKS, pyg_route.FALLBACKS
    assert pyg_route.STATS["hetero-bases:mean"].backward_calls == 2


def test_dynamic_batch_sizes() -> None:
    """Three batch sizes under ``dynamic=True``: one Dynamo compilation, each matching."""
    model = _with_bases(Net(SAGEConv))
    backend = HectorBackend()
    compiled = torch.compile(model, backend=backend, dynamic=True)
    for scale in (1, 2, 3):
        _assert_matches(model, compiled, *_batch(seed=scale, scale=scale))
    assert backend.stats()["compilations"] == 1
    assert pyg_route.STATS["hetero-bases:mean"].calls == 6


@pytest.mark.parametrize(
    ("conv", "options", "label", "reason"),
    [
        (SAGEConv, {"normalize": True}, "(SAGEConv)", "normalize=True"),
        (SAGEConv, {"aggr": "max"}, "(SAGEConv)", "aggr='max'"),
        (GCNConv, {"add_self_loops": False}, "(GCNConv)", "a conv class the programs do not"),
    ],
)
def test_declined_with_reason(conv: Any, options: dict[str, Any], label: str, reason: str) -> None:
    """A layer the programs do not express runs PyG's own forward outside Dynamo, so its
    coefficients apply: the compiled model still matches eager PyG, and ``explain`` names the
    conv and the reason."""
    model = _with_bases(Net(conv, **options))
    _assert_matches(model, torch.compile(model, backend=HectorBackend()), *_batch())
    key = f"to_hetero_with_bases {label}"
    assert reason in pyg_route.FALLBACKS[key]
    assert not [n for n in pyg_route.STATS if n.startswith("hetero-bases")]
    explained = str(hector.explain(model, *_batch()))
    assert f"{key} ran PyG's own forward" in explained
    assert reason in explained


class _GineNet(torch.nn.Module):
    """Two ``GINEConv`` layers of one linear ``nn`` (a trainable ``ε``), edge features given
    positionally."""

    def __init__(self, edge_dim: int | None = None) -> None:
        super().__init__()
        self.conv1 = GINEConv(torch.nn.Linear(8, 8), eps=0.2, train_eps=True, edge_dim=edge_dim)
        self.conv2 = GINEConv(torch.nn.Linear(8, 4), eps=-0.1, edge_dim=edge_dim)

    def forward(self, x: Any, edge_index: Any, edge_attr: Any) -> Any:
        x = self.conv1(x, edge_index, edge_attr).relu()
        return self.conv2(x, edge_index, edge_attr)


@pytest.mark.parametrize("edge_dim", [None, 8])
def test_gine(edge_dim: int | None) -> None:
    """``GINEConv`` bases: one ``hetero-bases:sum:e`` program per layer, forward and every
    gradient (``ε``, the coefficients, the edge features) against eager PyG; with ``edge_dim``
    (a linear of the edge features per basis, not summed into ``W_r``) PyG's forward, the
    reason kept, matching too."""
    torch.manual_seed(0)
    model = to_hetero_with_bases(_GineNet(edge_dim), METADATA, num_bases=3, in_channels={"x": 8})
    x, ei = _batch()
    gen = torch.Generator().manual_seed(5)
    ea = {e: torch.randn(v.shape[1], 8, generator=gen) for e, v in ei.items()}
    with torch.no_grad():
        model(x, ei, ea)  # PyG's lazy alignment layers take their widths

    def run(fn: Any) -> list[torch.Tensor]:
        model.zero_grad()
        attrs = {e: a.clone().requires_grad_() for e, a in ea.items()}
        out = fn(x, ei, attrs)
        sum(v.square().mean() for v in out.values()).backward()
        grads = [p.grad for p in model.parameters()] + [attrs[e].grad for e in RELATIONS]
        return [out[k].detach() for k in sorted(out)] + grads

    compiled = torch.compile(model, backend=HectorBackend())
    for a, b in zip(run(compiled), run(model), strict=True):
        assert a.shape == b.shape
        assert torch.allclose(a, b, rtol=0.0, atol=TOL)
    if edge_dim is None:
        assert not pyg_route.FALLBACKS, pyg_route.FALLBACKS
        stats = pyg_route.STATS["hetero-bases:sum:e"]
        assert (stats.calls, stats.backward_calls) == (2, 2)
    else:
        assert "edge_dim" in pyg_route.FALLBACKS["to_hetero_with_bases (GINEConv)"]
