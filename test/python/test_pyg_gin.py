"""PyG's ``GINConv`` and ``GINEConv`` with an MLP ``nn`` in ``HeteroConv`` and ``to_hetero``
layers under ``torch.compile(backend="hector")`` (``hector.dynamo.pyg_gin``): the relations'
sums as one ``hetero-gin`` program, each ``nn`` as written, outputs and gradients (every
parameter, ``ε``, the node features) against eager PyG."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from test_pyg_hetero_route import TOL, _edges, _features
from test_pyg_route_configs import _fresh_dynamo  # noqa: F401  (autouse: Dynamo reset per test)
from torch_geometric.nn import MLP, GINConv, GINEConv, HeteroConv, to_hetero
from torch_geometric.nn.models import GIN

from hector.dynamo import pyg_route
from hector.dynamo.backend import HectorBackend

SIZES = {"paper": 13, "author": 9}
CITES = ("paper", "cites", "paper")
WRITES = ("author", "writes", "paper")
WRITTEN = ("paper", "written_by", "author")


def _gin(aggr: Any) -> HeteroConv:
    """``GINConv`` per relation: PyG's ``MLP`` (with a trainable ``ε``, and with batch norm), a
    ``Sequential`` ending in a nonlinearity."""
    torch.manual_seed(0)
    seq = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU())
    return HeteroConv(
        {
            CITES: GINConv(MLP([6, 8, 8]), eps=0.3, train_eps=True),
            WRITES: GINConv(MLP([6, 8, 8], norm="batch_norm")),
            WRITTEN: GINConv(seq, eps=-0.2),
        },
        aggr=aggr,
    )


def _gine(edge_dim: int | None) -> HeteroConv:
    torch.manual_seed(0)
    return HeteroConv(
        {e: GINEConv(MLP([6, 8, 8]), train_eps=True, edge_dim=edge_dim) for e in _RELATIONS},
        aggr="sum",
    )


_RELATIONS = [CITES, WRITES, WRITTEN]


def _run(model: Any, fn: Any, x: Any, *args: Any) -> tuple[Any, list[Any]]:
    model.zero_grad()
    xr = {k: v.clone().requires_grad_() for k, v in x.items()}
    out = fn(xr, *args)
    torch.stack([o.square().mean() for o in out.values()]).sum().backward()
    return out, [p.grad for p in model.parameters()] + [xr[k].grad for k in sorted(xr)]


def _matches(model: Any, x: Any, *args: Any) -> None:
    """The compiled model's outputs and gradients are eager PyG's; no layer fell back."""
    want, want_g = _run(model, model, x, *args)
    got, got_g = _run(model, torch.compile(model, backend=HectorBackend()), x, *args)
    assert list(got) == list(want)
    for k in want:
        assert (got[k] - want[k]).abs().max().item() <= TOL
    for a, b in zip(got_g, want_g, strict=True):
        assert (a is None) == (b is None)
        assert a is None or (a - b).abs().max().item() <= TOL
    assert not pyg_route.FALLBACKS, pyg_route.FALLBACKS


@pytest.mark.parametrize(("aggr", "missing"), [("sum", False), ("mean", True), ("max", False)])
def test_gin_runs_one_program(aggr: Any, missing: bool) -> None:
    """``GINConv`` relations (bipartite, a batch without one relation, the layer's ``aggr``
    over relations): one ``hetero-gin:0`` call forward and backward."""
    model = _gin(aggr)
    x, ei = _features(SIZES, {"paper": 6, "author": 6}), _edges(_RELATIONS, SIZES, per=20)
    if missing:
        del ei[WRITTEN]
    _matches(model, x, ei)
    stats = pyg_route.STATS["hetero-gin:0"]
    assert (stats.calls, stats.backward_calls) == (1, 1)


@pytest.mark.parametrize("edge_dim", [None, 3])
def test_gine_with_an_mlp_runs_one_program(edge_dim: int | None) -> None:
    """``GINEConv`` whose ``nn`` is an MLP: ``relu(x_j + e'_ji)`` summed in ``hetero-gin:1``
    (``e'`` through the conv's ``lin`` with ``edge_dim``), the MLP per relation after it."""
    model = _gine(edge_dim)
    x, ei = _features(SIZES, {"paper": 6, "author": 6}), _edges(_RELATIONS, SIZES, per=20)
    gen = torch.Generator().manual_seed(5)
    attr = {e: torch.randn(20, edge_dim or 6, generator=gen) for e in ei}
    _matches(model, x, ei, attr)
    stats = pyg_route.STATS["hetero-gin:1"]
    assert (stats.calls, stats.backward_calls) == (1, 1)


def test_to_hetero_gin_runs_one_program_per_layer() -> None:
    """PyG's ``GIN`` model through ``to_hetero`` (relations summed): each of its two layers
    one ``hetero-gin:0`` call, and one Dynamo graph for two batch sizes under
    ``dynamic=True``."""
    torch.manual_seed(0)
    model = to_hetero(GIN(6, 16, 2, 8), (list(SIZES), _RELATIONS), aggr="sum")
    compiled = torch.compile(model, backend=HectorBackend(), dynamic=True)
    torch._dynamo.utils.counters.clear()
    for seed, sizes in ((0, SIZES), (1, {"paper": 17, "author": 5})):
        x = _features(sizes, {"paper": 6, "author": 6}, seed=seed)
        ei = _edges(_RELATIONS, sizes, per=25, seed=seed + 1)
        want, want_g = _run(model, model, x, ei)
        got, got_g = _run(model, compiled, x, ei)
        for k in want:
            assert (got[k] - want[k]).abs().max().item() <= TOL
        for a, b in zip(got_g, want_g, strict=True):
            assert a is None or (a - b).abs().max().item() <= TOL
    assert pyg_route.STATS["hetero-gin:0"].calls == 4
    assert not pyg_route.FALLBACKS, pyg_route.FALLBACKS
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1


def test_gin_outside_the_program_runs_pygs_forward() -> None:
    """Node types of different widths: PyG's forward (its result where the widths of each
    relation agree), the reason kept; a lazy ``nn`` before its first call likewise."""
    torch.manual_seed(0)
    model = HeteroConv({CITES: GINConv(MLP([6, 8])), WRITTEN: GINConv(MLP([6, 8]))})
    x = _features(SIZES, {"paper": 6, "author": 4})
    ei = _edges([CITES, WRITTEN], SIZES, per=20)
    with pytest.raises(RuntimeError):  # PyG's own: out (6 wide) + x_author (4 wide)
        torch.compile(model, backend=HectorBackend())(x, ei)
    assert "differ in width" in pyg_route.FALLBACKS["HeteroConv"]
    torch._dynamo.reset()
    pyg_route.FALLBACKS.clear()
    lazy = HeteroConv({CITES: GINConv(MLP([-1, 8]))})
    x = _features(SIZES, {"paper": 6, "author": 6})
    got = torch.compile(lazy, backend=HectorBackend())(x, {CITES: ei[CITES]})
    want = lazy(x, {CITES: ei[CITES]})
    assert (got["paper"] - want["paper"]).abs().max().item() <= TOL
    assert "lazy" in pyg_route.FALLBACKS["HeteroConv"]
