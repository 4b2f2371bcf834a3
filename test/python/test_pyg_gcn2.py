"""PyG's ``GCN2Conv`` per relation of a ``HeteroConv`` under ``torch.compile(backend="hector")``:
one Hector program, ``hetero-gcn2`` (``hector.dynamo.pyg_gcn2``, issue 54).

Every case runs the same module eagerly and compiled and compares the outputs and the gradients
of every parameter, of the features and of the initial features (and of the edge weights where
they take one) within 1e-4 (float32), then checks that Hector's program ran forward and backward
without a fallback. The node types differ in width and size (two relations into ``paper``, one
into ``author``), the graph has self-loops (two on one node) and a node without edges, and the
initial features of ``paper`` have more rows than its features (PyG reads the first).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from test_pyg_hetero_route import _assert_same
from test_pyg_route_configs import _fresh_dynamo  # noqa: F401  (autouse: Dynamo reset per test)
from torch_geometric.nn import GCN2Conv, GCNConv, HeteroConv

from hector.dynamo import pyg_route
from hector.dynamo.backend import HectorBackend

TOL = 1e-4
RELATIONS = [
    ("paper", "cites", "paper"),
    ("paper", "rev_cites", "paper"),
    ("author", "knows", "author"),
]
SIZES = {"paper": 11, "author": 7}
WIDTHS = {"paper": 6, "author": 4}


def _features(extra_rows: int = 0, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {t: torch.randn(n + extra_rows, WIDTHS[t], generator=gen) for t, n in SIZES.items()}


def _edges(seed: int = 1, per: int = 15) -> dict[Any, torch.Tensor]:
    """Random edges per relation; self-loops (two on ``paper`` 0), ``author`` 6 without edges."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for s, r, d in RELATIONS:
        out[(s, r, d)] = torch.stack(
            [torch.randint(SIZES[s], (per,), generator=gen) for _ in range(2)]
        )
    first = out[RELATIONS[0]]
    first[1, :3] = first[0, :3]
    first[:, 3:5] = 0
    out[RELATIONS[2]] = out[RELATIONS[2]].clamp(max=5)
    return out


def _weights(edges: dict[Any, torch.Tensor], seed: int = 3) -> dict[Any, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {e: torch.rand(v.shape[1], generator=gen) for e, v in edges.items()}


def _layer(aggr: str = "sum", **options: Any) -> HeteroConv:
    torch.manual_seed(0)
    alphas = {"paper": 0.1, "author": 0.3}
    return HeteroConv(
        {e: GCN2Conv(WIDTHS[e[0]], alpha=alphas[e[0]], **options) for e in RELATIONS}, aggr=aggr
    )


def _step(
    model: torch.nn.Module, fn: Any, x: Any, x0: Any, call: Any
) -> tuple[list[str], list[torch.Tensor], list[Any]]:
    """Outputs (by type, sorted), then the gradients of the parameters, the features and the
    initial features of a training step; ``call(fn, x, x0)`` makes the layer's call."""
    model.zero_grad()
    xr = {k: v.clone().requires_grad_() for k, v in x.items()}
    x0r = {k: v.clone().requires_grad_() for k, v in x0.items()}
    out = call(fn, xr, x0r)
    keys = sorted(out)
    torch.stack([out[k].square().mean() for k in keys]).sum().backward()
    grads = [p.grad for p in model.parameters()]
    grads += [xr[k].grad for k in sorted(xr)] + [x0r[k].grad for k in sorted(x0r)]
    return keys, [out[k].detach() for k in keys], grads


def _assert_matches(model: torch.nn.Module, x: Any, x0: Any, call: Any) -> None:
    """The compiled layer's outputs and gradients are eager PyG's; Hector's program ran."""
    compiled = torch.compile(model, backend=HectorBackend())
    got, want = _step(model, compiled, x, x0, call), _step(model, model, x, x0, call)
    _assert_same(got, want, TOL)
    assert "HeteroConv" not in pyg_route.FALLBACKS, pyg_route.FALLBACKS
    stats = pyg_route.STATS["hetero-gcn2"]
    assert stats.calls > 0
    assert stats.backward_calls > 0


def _keyword_weights(weights: Any) -> Any:
    """The call ``(x_dict, x_0_dict, edge_index_dict)``, ``edge_weight_dict=weights`` if any."""
    kwargs = {} if weights is None else {"edge_weight_dict": weights}
    return lambda fn, x, x0: fn(x, x0, _edges(), **kwargs)


def test_pygs_hetero_conv_test_layer() -> None:
    """PyG's ``test_gcn2_hetero_conv``: 32- and 64-wide relations, edge weights on one, the
    features passed as both ``x`` and ``x_0``."""
    torch.manual_seed(0)
    papers, authors = ("paper", "to", "paper"), ("author", "to", "author")
    model = HeteroConv(
        {papers: GCN2Conv(32, alpha=0.1), authors: GCN2Conv(64, alpha=0.2)},
    )
    gen = torch.Generator().manual_seed(0)
    x = {"paper": torch.randn(50, 32, generator=gen), "author": torch.randn(30, 64, generator=gen)}
    edges = {
        papers: torch.randint(50, (2, 200), generator=gen),
        authors: torch.randint(30, (2, 100), generator=gen),
    }
    weights = {papers: torch.rand(200, generator=gen)}

    def call(fn: Any, xr: Any, x0r: Any) -> Any:
        return fn(xr, xr, edges, edge_weight_dict=weights)

    _assert_matches(model, x, {}, call)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"theta": 0.5, "layer": 2},
        {"shared_weights": False},
        {"theta": 1.5, "layer": 1, "shared_weights": False},
        {"add_self_loops": False},
        {"normalize": False},
    ],
)
@pytest.mark.parametrize("weighted", [False, True])
def test_gcn2_options(options: dict[str, Any], weighted: bool) -> None:
    """``alpha`` per relation, ``theta``/``layer`` (``β < 1``, the identity mixed in),
    separate ``x_0`` weights, ``gcn_norm`` without self-loops or none; with and without edge
    weights; separate initial features with more rows than the features."""
    weights = _weights(_edges()) if weighted else None
    model = _layer(**options)
    _assert_matches(model, _features(), _features(3, seed=5), _keyword_weights(weights))


@pytest.mark.parametrize("aggr", ["mean", "max", "cat"])
def test_gcn2_across_relations(aggr: str) -> None:
    """The layer's ``aggr``: the mean of the program's sum, or each relation's rows (its own
    destination type in the program) reduced by PyG's ``group``."""
    weights = _weights(_edges())
    model = _layer(aggr, theta=0.5, layer=3, shared_weights=False)
    _assert_matches(model, _features(), _features(seed=5), _keyword_weights(weights))


def test_gcn2_edge_weight_gradients_and_positional_forms() -> None:
    """Edge weights as a fourth positional dict take their gradient as in PyG; a batch without
    a relation; ``x_0`` by the keyword ``x_0_dict`` fails as in PyG; inference under
    ``no_grad``."""
    model = _layer(theta=0.5, layer=2)
    x, x0, edges = _features(), _features(seed=5), _edges()
    compiled = torch.compile(model, backend=HectorBackend())
    grads = []
    for fn in (compiled, model):
        w = {e: v.clone().requires_grad_() for e, v in _weights(edges).items()}
        out = fn(x, x0, edges, w)
        torch.stack([o.square().sum() for o in out.values()]).sum().backward()
        grads.append([w[e].grad for e in RELATIONS])
    for a, b in zip(*grads, strict=True):  # 1/sqrt(degree) makes some large: relative
        torch.testing.assert_close(a, b, rtol=TOL, atol=TOL)
    partial = {e: v for e, v in edges.items() if e != RELATIONS[1]}
    _assert_matches(model, x, x0, lambda fn, xr, x0r: fn(xr, x0r, partial))
    with pytest.raises(TypeError, match="multiple values"):  # PyG's: x_0 after edge_index
        model(x, partial, x_0_dict=x0)
    with pytest.raises(Exception, match="multiple values"):
        compiled(x, partial, x_0_dict=x0)
    assert "keyword x_0_dict" in pyg_route.FALLBACKS["HeteroConv"]
    pyg_route.FALLBACKS.clear()
    with torch.no_grad():
        got, want = compiled(x, x0, edges), model(x, x0, edges)
    for t in want:
        assert (got[t] - want[t]).abs().max().item() <= TOL


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda: GCN2Conv(6, alpha=0.1, cached=True), "GCN2Conv(cached=True)"),
        (lambda: GCN2Conv(6, alpha=0.1, aggr="mean"), "GCN2Conv(aggr='mean')"),
    ],
)
def test_gcn2_declined_runs_pygs_forward_with_reason(make: Any, reason: str) -> None:
    """What the program does not compute runs PyG's forward, matching, the reason kept."""
    torch.manual_seed(0)
    relations = RELATIONS[:2]
    model = HeteroConv({e: make() for e in relations})
    compiled = torch.compile(model, backend=HectorBackend())
    x, x0 = {"paper": _features()["paper"]}, {"paper": _features(seed=5)["paper"]}
    edges = {e: v for e, v in _edges().items() if e in relations}
    for _ in range(2):  # cached: the first call fills PyG's cache, the second reads it
        got, want = compiled(x, x0, edges), model(x, x0, edges)
        assert (got["paper"] - want["paper"]).abs().max().item() <= TOL
    assert reason in pyg_route.FALLBACKS["HeteroConv"]


def test_gcn2_between_two_node_types_and_mixed_classes() -> None:
    """A relation between two node types fails compiled as eagerly (PyG's ``GCN2Conv`` takes
    one node set), the reason kept; ``GCN2Conv`` beside a conv without ``x_0`` runs PyG's
    forward (which hands every conv ``x_0``, and fails as eagerly)."""
    relation = ("author", "writes", "paper")
    model = HeteroConv({relation: GCN2Conv(6, alpha=0.1, add_self_loops=False)})
    x = {"paper": torch.randn(11, 6), "author": torch.randn(7, 6)}
    edges = {relation: torch.stack([torch.randint(7, (9,)), torch.randint(11, (9,))])}
    with pytest.raises(AttributeError, match="size"):  # x is a pair
        model(x, x, edges)
    with pytest.raises(Exception, match="size"):
        torch.compile(model, backend=HectorBackend())(x, x, edges)
    assert "two node types" in pyg_route.FALLBACKS["HeteroConv"]
    torch._dynamo.reset()
    pyg_route.FALLBACKS.clear()
    mixed = HeteroConv({RELATIONS[0]: GCN2Conv(6, alpha=0.1), RELATIONS[1]: GCNConv(6, 6)})
    x = _features()
    edges = {e: v for e, v in _edges().items() if e in RELATIONS[:2]}
    with pytest.raises(IndexError, match="mask"):  # GCNConv(x, x_0, edge_index)
        mixed(x, x, edges)
    with pytest.raises(Exception, match="mask"):
        torch.compile(mixed, backend=HectorBackend())(x, x, edges)
    assert "second dict keyed by node type" in pyg_route.FALLBACKS["HeteroConv"]


class _Gcnii(torch.nn.Module):
    """A GCNII model as PyG's ``examples/gcn2_cora.py`` writes it: a linear, then
    ``GCN2Conv(x, x_0, edge_index, edge_weight)`` layers, ``x_0`` the linear's output."""

    def __init__(self, **options: Any) -> None:
        super().__init__()
        self.lin = torch.nn.LazyLinear(8)
        self.conv1 = GCN2Conv(8, alpha=0.1, theta=0.5, layer=1, **options)
        self.conv2 = GCN2Conv(8, alpha=0.2, theta=0.5, layer=2, shared_weights=False, **options)

    def forward(self, x: Any, edge_index: Any, edge_weight: Any) -> Any:
        x = x_0 = self.lin(x).relu()
        x = self.conv1(x, x_0, edge_index).relu()
        return self.conv2(x, x_0, edge_index, edge_weight)


def _gcnii(**options: Any) -> torch.nn.Module:
    from torch_geometric.nn import to_hetero

    torch.manual_seed(0)
    model = to_hetero(_Gcnii(**options), (list(SIZES), RELATIONS), aggr="sum")
    with torch.no_grad():
        model(_features(), _edges(), _weights(_edges()))  # the lazy linears' widths
    return model


def _gcnii_step(model: torch.nn.Module, fn: Any) -> tuple[list[str], list[Any], list[Any]]:
    """Outputs (by type, sorted), then the gradients of the parameters, the features and the
    edge weights of a training step."""
    model.zero_grad()
    x = {k: v.requires_grad_() for k, v in _features().items()}
    weights = {k: v.requires_grad_() for k, v in _weights(_edges()).items()}
    out = fn(x, _edges(), weights)
    keys = sorted(out)
    torch.stack([out[k].square().mean() for k in keys]).sum().backward()
    grads = [p.grad for p in model.parameters()]
    grads += [x[k].grad for k in sorted(x)] + [weights[e].grad for e in RELATIONS]
    return keys, [out[k].detach() for k in keys], grads


def test_to_hetero_gcnii_runs_one_program_per_layer() -> None:
    """``to_hetero`` of a GCNII model: each ``GCN2Conv`` layer, ``x_0`` passed second and the
    edge weights fourth, one ``hetero-gcn2`` program over its relations, in one graph without
    a fallback; outputs and every gradient (the edge weights' too) are eager PyG's."""
    from torch._dynamo.utils import counters

    model = _gcnii()
    backend = HectorBackend()
    counters.clear()
    got = _gcnii_step(model, torch.compile(model, backend=backend))
    _assert_same(got, _gcnii_step(model, model), TOL)
    assert not pyg_route.FALLBACKS, pyg_route.FALLBACKS
    assert not dict(counters["graph_break"])
    assert backend.stats()["compilations"] == 1
    assert backend.graphs[0].layers.count("hetero-gcn2") == 2
    stats = pyg_route.STATS["hetero-gcn2"]
    assert (stats.calls, stats.backward_calls) == (2, 2)


def test_to_hetero_gcnii_declined_runs_each_relation_as_written() -> None:
    """A layer the program declines (``cached=True``, which PyG's forward fills) runs each
    relation's ``GCN2Conv(x, x_0, edge_index, edge_weight)`` as ``to_hetero`` wrote it,
    matching eager PyG, the reason kept under the layer's name."""
    model = _gcnii(cached=True)
    compiled = torch.compile(model, backend=HectorBackend())
    for _ in range(2):  # cached: the first call fills PyG's cache, the second reads it
        got, want = compiled(_features(), _edges(), None), model(_features(), _edges(), None)
        for k in want:
            assert (got[k] - want[k]).abs().max().item() <= TOL
    assert "GCN2Conv(cached=True)" in pyg_route.FALLBACKS["to_hetero conv1 (GCN2Conv)"]
