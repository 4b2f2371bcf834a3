"""``to_hetero_with_bases`` models of PyG's ``GINConv`` under ``torch.compile(backend="hector")``
(``hector.dynamo.pyg_bases_gin``, issue 54 item 2): each layer's relation sums one
``bases-gin:sum`` program, each basis' ``nn`` as written.

Every case compares the compiled model's outputs and the gradients of every parameter (the
bases' ``nn``, their coefficients ``edge_type_weight``, a trainable ``ε``, PyG's
``LinearAlign`` projections) and of every node type's features against *eager* PyG (compiled
PyG skips the message-forward hook that applies the coefficients), within 1e-4. PyG's own
``GIN`` model class cannot be transformed by ``to_hetero_with_bases`` (the transformer fails on
its optional arguments), so the models here are user-written stacks of ``GINConv``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch._dynamo
from test_pyg_route_configs import _fresh_dynamo  # noqa: F401  (autouse: Dynamo reset per test)
from test_pyg_to_hetero import METADATA, RELATIONS, _batch
from test_pyg_to_hetero import _run as run_step
from torch._dynamo.utils import counters
from torch_geometric.nn import MLP, GATConv, GINConv, to_hetero_with_bases

import hector
from hector.dynamo import pyg_bases_gin, pyg_route
from hector.dynamo.backend import HectorBackend

TOL = 1e-4


class GinNet(torch.nn.Module):
    """Two ``GINConv`` layers: PyG's ``MLP([8, 16, 16])`` (batch norm, ReLU) and a
    ``Sequential``, an activation between."""

    def __init__(self, train_eps: bool = False, norm: str | None = "batch_norm") -> None:
        super().__init__()
        self.conv1 = GINConv(MLP([8, 16, 16], norm=norm), eps=0.25, train_eps=train_eps)
        nn = torch.nn.Sequential(torch.nn.Linear(16, 6), torch.nn.Tanh(), torch.nn.Linear(6, 4))
        self.conv2 = GINConv(nn, eps=-0.5, train_eps=train_eps)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def _with_bases(model: torch.nn.Module, bases: int) -> torch.nn.Module:
    """``to_hetero_with_bases`` of ``model``, ``x`` aligned to 8 columns (PyG's lazy
    ``LinearAlign``, sized by one eager call); one basis' coefficients set (PyG leaves them
    uninitialised) before that call, whose batch norm in train mode updates its running
    statistics from the outputs: uninitialised memory holding a NaN made them, and every
    output in eval mode, NaN."""
    torch.manual_seed(0)
    hetero = to_hetero_with_bases(model, METADATA, num_bases=bases, in_channels={"x": 8})
    with torch.no_grad():
        for name, p in hetero.named_parameters():
            if bases == 1 and name.endswith("edge_type_weight"):
                p.uniform_(-1.0, 1.0)
        hetero(*_batch(seed=9))
    assert all(bool(b.isfinite().all()) for b in hetero.buffers())
    return hetero


def _run(model: torch.nn.Module, fn: Any, x: Any, ei: Any) -> list[torch.Tensor]:
    """Outputs (by type, sorted), then the gradients of the parameters and the features."""
    _, outs, grads = run_step(model, fn, x, ei)
    return [*outs, *grads]


def _assert_matches(model: torch.nn.Module, compiled: Any, x: Any, ei: Any) -> None:
    got, want = _run(model, compiled, x, ei), _run(model, model, x, ei)
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a is not None
        assert b is not None
        assert a.shape == b.shape
        assert torch.allclose(a, b, rtol=0.0, atol=TOL)


def _assert_routed(backend: HectorBackend, calls: int = 2) -> None:
    """One graph, no break, nothing declined, each layer one program forward and backward."""
    assert not dict(counters["graph_break"])
    assert backend.stats()["compilations"] == 1
    assert not pyg_route.FALLBACKS, pyg_route.FALLBACKS
    assert backend.graphs[0].layers.count(pyg_bases_gin.PROGRAM) == 2
    stats = pyg_route.STATS[pyg_bases_gin.PROGRAM]
    assert (stats.calls, stats.backward_calls) == (calls, calls)


@pytest.mark.parametrize("bases", [1, 2, 3])
@pytest.mark.parametrize("train_eps", [False, True])
@pytest.mark.parametrize("training", [True, False])
def test_gin_bases(bases: int, train_eps: bool, training: bool) -> None:
    """Outputs and every gradient against eager PyG: ``num_bases`` 1 to 3, ``ε`` fixed or
    trained, the ``MLP``'s batch norm in train mode (batch statistics) and eval mode (running
    statistics)."""
    model = _with_bases(GinNet(train_eps), bases)
    model.train(training)
    backend = HectorBackend()
    compiled = torch.compile(model, backend=backend)
    counters.clear()
    _assert_matches(model, compiled, *_batch())
    _assert_routed(backend)
    eps = [p for n, p in model.named_parameters() if n.endswith(".eps")]
    assert len(eps) == (2 * bases if train_eps else 0)


def test_coefficients_and_eps_reach_the_output() -> None:
    """Other coefficients and another ``ε`` give other outputs, matching eager PyG: the
    program's sums are mixed by the current values, not by ones captured once."""
    model = _with_bases(GinNet(train_eps=True, norm=None), 2)
    compiled = torch.compile(model, backend=HectorBackend())
    x, ei = _batch()
    before = compiled(x, ei)["paper"].detach()
    for name, p in model.named_parameters():
        if name.endswith("edge_type_weight") or name.endswith(".eps"):
            with torch.no_grad():
                p.add_(0.5)
            after = compiled(x, ei)["paper"].detach()
            assert (after - before).abs().max().item() > 1e-3, name
            assert torch.allclose(after, model(x, ei)["paper"], rtol=0.0, atol=TOL), name
            before = after
    employs = RELATIONS.index(("institute", "employs", "author"))
    model.zero_grad()
    sum(v.sum() for v in compiled(x, ei).values()).backward()
    att = next(p for n, p in model.named_parameters() if n.endswith("edge_type_weight"))
    assert att.grad is not None
    assert att.grad[0, employs].item() == 0.0  # a relation without edges


def test_static_graph_features() -> None:
    """Features with a batch dimension ``[B, N, F]`` over one graph: one program over ``B``
    copies of the graph, ``nn`` given ``[B, N, K]`` rows as PyG gives them."""
    model = _with_bases(GinNet(train_eps=True, norm=None), 2)
    x, ei = _batch()
    gen = torch.Generator().manual_seed(3)
    xs = {t: torch.randn(2, v.shape[0], v.shape[1], generator=gen) for t, v in x.items()}
    backend = HectorBackend()
    counters.clear()
    _assert_matches(model, torch.compile(model, backend=backend), xs, ei)
    _assert_routed(backend)


def test_dynamic_batch_sizes() -> None:
    """Three graph sizes under ``dynamic=True``: one Dynamo compilation, each matching."""
    model = _with_bases(GinNet(train_eps=True), 2)
    backend = HectorBackend()
    compiled = torch.compile(model, backend=backend, dynamic=True)
    for scale in (1, 2, 3):
        _assert_matches(model, compiled, *_batch(seed=scale, scale=scale))
    assert backend.stats()["compilations"] == 1
    assert pyg_route.STATS[pyg_bases_gin.PROGRAM].calls == 6


class _MaxGinNet(torch.nn.Module):
    """One ``GINConv(aggr="max")`` layer."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = GINConv(torch.nn.Linear(8, 4), aggr="max")

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.conv1(x, edge_index)


def test_max_aggregation_declined_with_reason() -> None:
    """``GINConv(aggr="max")`` runs PyG's own forward outside Dynamo (its hooks apply): the
    compiled model matches eager PyG, and ``explain`` names the reason."""
    model = _with_bases(_MaxGinNet(), 2)
    _assert_matches(model, torch.compile(model, backend=HectorBackend()), *_batch())
    key = "to_hetero_with_bases (GINConv)"
    assert "aggr='max'" in pyg_route.FALLBACKS[key]
    assert pyg_bases_gin.PROGRAM not in pyg_route.STATS
    explained = str(hector.explain(model, *_batch()))
    assert f"{key} ran PyG's own forward" in explained


class _GatNet(torch.nn.Module):
    """One ``GATConv`` layer."""

    def __init__(self, **options: Any) -> None:
        super().__init__()
        self.conv1 = GATConv(8, 4, **options)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.conv1(x, edge_index)


@pytest.mark.parametrize("options", [{}, {"add_self_loops": False, "heads": 2}])
def test_gat_raises_as_pyg_does(options: dict[str, Any]) -> None:
    """PyG's ``to_hetero_with_bases`` cannot run ``GATConv``: its message hook refuses GAT's
    ``[E, H, F]`` messages (and the self-loops GAT adds). The compiled model raises PyG's
    ``ValueError``, with PyG's message, and records why the layer was not routed."""
    torch.manual_seed(0)
    model = to_hetero_with_bases(_GatNet(**options), METADATA, num_bases=2, in_channels={"x": 8})
    x, ei = _batch()
    with pytest.raises(ValueError, match="Number of messages") as eager:
        model(x, ei)
    compiled = torch.compile(model, backend=HectorBackend())
    with pytest.raises(ValueError, match="Number of messages") as got:
        compiled(x, ei)
    assert str(got.value) == str(eager.value)
    reason = pyg_route.FALLBACKS["to_hetero_with_bases (GATConv)"]
    assert "a conv class the programs do not express" in reason


def test_one_relation_and_inference() -> None:
    """One node type and one relation (the program's rows are ``x`` itself, nothing padded),
    with gradients and under ``torch.no_grad`` (the program's plain forward)."""
    metadata = (["n"], [("n", "to", "n")])
    gen = torch.Generator().manual_seed(4)
    x = {"n": torch.randn(9, 8, generator=gen)}
    ei = {("n", "to", "n"): torch.randint(9, (2, 30), generator=gen)}
    torch.manual_seed(0)
    model = to_hetero_with_bases(GinNet(train_eps=True), metadata, num_bases=2)
    backend = HectorBackend()
    compiled = torch.compile(model, backend=backend)
    counters.clear()
    _assert_matches(model, compiled, x, ei)
    _assert_routed(backend)
    model.eval()
    with torch.no_grad():
        got, want = compiled(x, ei)["n"], model(x, ei)["n"]
    assert torch.allclose(got, want, rtol=0.0, atol=TOL)
    assert pyg_route.STATS[pyg_bases_gin.PROGRAM].calls == 4
