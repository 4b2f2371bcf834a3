"""``GATConv(add_self_loops=True)`` (PyG's default) on relations from a node type to itself
under ``torch.compile(backend="hector")``: the loops PyG appends are appended to the program's
edges, the relation's own loops (which PyG removes) weighed out by ``-inf`` logits
(``hetero-gat:<slope>:edge``); outputs and gradients against eager PyG, and what is declined."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from test_pyg_attention_dropout import RELATIONS, WIDTHS
from test_pyg_hetero_route import _assert_matches, _edges, _features
from test_pyg_route_configs import _fresh_dynamo  # noqa: F401  (autouse: Dynamo reset per test)
from torch_geometric.nn import GAT, GATConv, HeteroConv, to_hetero

from hector.dynamo import pyg_route
from hector.dynamo.backend import HectorBackend

SIZES = {"paper": 13, "author": 9}


def _with_own_loops(ei: dict[Any, torch.Tensor]) -> dict[Any, torch.Tensor]:
    """``ei`` with two loops on ``paper`` node 0 and one on node 3 among the citations."""
    own = torch.tensor([[0, 0, 3], [0, 0, 3]])
    return {**ei, RELATIONS[0]: torch.cat([ei[RELATIONS[0]], own], dim=1)}


def _ran() -> list[str]:
    return [n for n in pyg_route.STATS if n.startswith("hetero-gat")]


@pytest.mark.parametrize(("aggr", "heads"), [("sum", 1), ("mean", 2), ("max", 2)])
def test_self_loops_run_the_program(aggr: str, heads: int) -> None:
    """Loops on the relation from ``paper`` to itself (PyG refuses them on the others), with
    loops of its own in the batch; every ``aggr`` layout."""
    torch.manual_seed(0)
    model = HeteroConv(
        {e: GATConv(6, 4, heads=heads, add_self_loops=e[0] == e[2]) for e in RELATIONS},
        aggr=aggr,
    )
    x, ei = _features(SIZES, WIDTHS), _with_own_loops(_edges(RELATIONS, SIZES, per=30))
    _assert_matches(model, torch.compile(model, backend=HectorBackend()), x, ei)
    assert not pyg_route.FALLBACKS, pyg_route.FALLBACKS
    assert _ran() == ["hetero-gat:0.2:edge"]


def test_to_hetero_gat_with_its_default_self_loops() -> None:
    """PyG's ``GAT`` model as its docs build it (self-loops on) through ``to_hetero`` over
    one node type: each layer one program, in training."""
    torch.manual_seed(0)
    metadata = (["paper"], [RELATIONS[0]])
    model = to_hetero(GAT((-1, -1), 8, num_layers=2, heads=2), metadata, aggr="sum")
    x = _features({"paper": 13}, WIDTHS)
    ei = _with_own_loops(_edges([RELATIONS[0]], SIZES, per=30))
    with torch.no_grad():
        model(x, ei)  # PyG's lazy widths
    _assert_matches(model, torch.compile(model, backend=HectorBackend()), x, ei)
    assert not pyg_route.FALLBACKS, pyg_route.FALLBACKS
    assert pyg_route.STATS["hetero-gat:0.2:edge"].calls == 2


@pytest.mark.parametrize(
    ("options", "reason"),
    [({"edge_dim": 2}, "PyG fills the loops' features"), ({"dropout": 0.5}, "dropout")],
)
def test_self_loops_declined(options: dict[str, Any], reason: str) -> None:
    """Self-loops with edge features (PyG fills the loops' features with a mean) or with
    attention dropout in training run PyG's forward, the reason kept."""
    torch.manual_seed(0)
    model = HeteroConv({RELATIONS[0]: GATConv(6, 4, **options)})
    x, ei = _features(SIZES, WIDTHS), _edges([RELATIONS[0]], SIZES, per=30)
    torch.manual_seed(1)
    want = model(x, ei)
    torch.manual_seed(1)
    got = torch.compile(model, backend=HectorBackend())(x, ei)
    assert (got["paper"] - want["paper"]).abs().max().item() <= 1e-5
    assert reason in pyg_route.FALLBACKS["HeteroConv"]
