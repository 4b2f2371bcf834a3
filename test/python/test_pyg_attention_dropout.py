"""Attention dropout in training under ``torch.compile(backend="hector")``
(``hector.dynamo.pyg_attention_dropout``): ``GATConv`` relations of a ``HeteroConv`` (planned,
and traced with edge features), ``GATv2Conv`` relations, PyG's ``GAT`` model through
``to_hetero`` (its feature dropout between the layers as well) and ``HANConv`` run the
``:drop`` programs, drawing PyG's own
masks: with the same seed, outputs and gradients match eager PyG's and the generator ends in
the same state."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from test_pyg_hetero_route import _edges, _features
from test_pyg_route_configs import _fresh_dynamo  # noqa: F401  (autouse: Dynamo reset per test)
from torch_geometric.nn import GAT, GATConv, GATv2Conv, HANConv, HeteroConv, to_hetero

from hector.dynamo import pyg_attention_dropout, pyg_route
from hector.dynamo.backend import HectorBackend

SIZES = {"paper": 23, "author": 11}
WIDTHS = {"paper": 6, "author": 6}
RELATIONS = [
    ("paper", "cites", "paper"),
    ("author", "writes", "paper"),
    ("paper", "written_by", "author"),
]
#: Relative tolerance of outputs and gradients (float rounding of other summation orders).
RTOL = 1e-5


def _step(model: Any, fn: Any, x: Any, args: tuple[Any, ...], seed: int) -> list[Any]:
    """One training step of ``fn`` from generator state ``seed``: the outputs, the gradients
    of every parameter and of the features, and the generator's next draw."""
    model.zero_grad()
    xr = {k: v.clone().requires_grad_() for k, v in x.items()}
    torch.manual_seed(seed)
    out = fn(xr, *args)
    torch.stack([o.square().mean() for o in out.values() if o is not None]).sum().backward()
    grads = [p.grad for p in model.parameters()] + [xr[k].grad for k in sorted(xr)]
    return [*(out[k] for k in sorted(out)), *grads, torch.rand(1)]


def _close(a: Any, b: Any) -> None:
    assert (a is None) == (b is None)
    if a is not None:
        assert (a - b).abs().max().item() <= RTOL * max(1.0, b.abs().max().item())


def _same_draws(model: Any, x: Any, *args: Any) -> None:
    """Two training steps of the compiled model match eager PyG's from the same seeds; no
    layer fell back."""
    compiled = torch.compile(model, backend=HectorBackend())
    for seed in (3, 4):
        want = _step(model, model, x, args, seed)
        got = _step(model, compiled, x, args, seed)
        assert len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            _close(a, b)
    assert not pyg_route.FALLBACKS, pyg_route.FALLBACKS


def _ran(suffix: str) -> list[tuple[int, int]]:
    return [(s.calls, s.backward_calls) for n, s in pyg_route.STATS.items() if n.endswith(suffix)]


def test_mask_is_fdropouts() -> None:
    """The mask is what ``F.dropout`` multiplies by, from the same generator state, which it
    leaves where ``F.dropout`` does: no draw at ``p = 0``, ``p = 1`` or without edges."""
    like = torch.zeros(1)
    for p in (0.0, 0.3, 1.0):
        alpha = torch.rand(40, 3) + 0.5
        torch.manual_seed(7)
        want = torch.nn.functional.dropout(alpha, p, training=True) / alpha
        after = torch.random.get_rng_state()
        torch.manual_seed(7)
        got = pyg_attention_dropout.mask([p], [torch.zeros(2, 40)], 3, like)
        assert torch.allclose(got, want)
        assert torch.equal(torch.random.get_rng_state(), after)
    torch.manual_seed(7)
    before = torch.random.get_rng_state()
    empty = pyg_attention_dropout.mask([0.5, 0.0], [torch.zeros(2, 0), torch.zeros(2, 4)], 2, like)
    assert torch.equal(empty, torch.ones(4, 2))
    assert torch.equal(torch.random.get_rng_state(), before)


@pytest.mark.parametrize("heads", [1, 3])
def test_gat_relations_in_training_draw_pygs_masks(heads: int) -> None:
    """``HeteroConv`` of ``GATConv(dropout=...)`` (the relations' probabilities differ, one
    drops nothing, one has no edges: no draw for it, as in PyG) in training: the planned call
    runs ``hetero-gat:...:drop``."""
    torch.manual_seed(0)
    ps = (0.5, 0.0, 0.25)
    model = HeteroConv(
        {
            e: GATConv(6, 4, heads=heads, dropout=p, add_self_loops=False)
            for e, p in zip(RELATIONS, ps, strict=True)
        }
    )
    x, ei = _features(SIZES, WIDTHS), _edges(RELATIONS, SIZES, per=40)
    ei[RELATIONS[2]] = ei[RELATIONS[2]][:, :0]
    _same_draws(model, x, ei)
    assert _ran(":drop") == [(2, 2)]


def test_gatv2_relations_in_training_draw_pygs_masks() -> None:
    """``HeteroConv`` of ``GATv2Conv(dropout=0.3)``: ``hetero-gatv2:...:drop``."""
    torch.manual_seed(0)
    model = HeteroConv(
        {e: GATv2Conv(6, 4, heads=2, dropout=0.3, add_self_loops=False) for e in RELATIONS}
    )
    x, ei = _features(SIZES, WIDTHS), _edges(RELATIONS, SIZES, per=40)
    _same_draws(model, x, ei)
    assert [n for n in pyg_route.STATS if n.endswith(":drop")] == ["hetero-gatv2:0.2:drop"]


def test_gat_relations_with_edge_features() -> None:
    """The traced call (edge features): ``hetero-gat:...:edge:drop``."""
    torch.manual_seed(0)
    model = HeteroConv(
        {
            e: GATConv(6, 4, heads=2, dropout=0.4, edge_dim=3, add_self_loops=False)
            for e in RELATIONS
        }
    )
    x, ei = _features(SIZES, WIDTHS), _edges(RELATIONS, SIZES, per=30)
    gen = torch.Generator().manual_seed(5)
    attr = {e: torch.randn(v.shape[1], 3, generator=gen) for e, v in ei.items()}
    _same_draws(model, x, ei, attr)
    assert _ran(":edge:drop") == [(2, 2)]


def test_to_hetero_gat_with_dropout_trains_as_pyg() -> None:
    """PyG's ``GAT`` model with ``dropout`` (its convs' attention dropout and the feature
    dropout between its layers) through ``to_hetero``: each layer one ``:drop`` program."""
    torch.manual_seed(0)
    body = GAT((-1, -1), 8, num_layers=2, heads=2, dropout=0.3, add_self_loops=False)
    model = to_hetero(body, (list(SIZES), RELATIONS), aggr="sum")
    x, ei = _features(SIZES, WIDTHS), _edges(RELATIONS, SIZES, per=40)
    with torch.no_grad():
        model(x, ei)  # PyG's lazy widths
    _same_draws(model, x, ei)
    assert sum(c for c, _ in _ran(":drop")) == 4


def test_han_in_training_draws_pygs_masks() -> None:
    """``HANConv(dropout=0.6)`` (``han_imdb.py``'s) in training."""
    torch.manual_seed(0)
    model = HANConv(dict(WIDTHS), 8, (list(SIZES), RELATIONS), heads=2, dropout=0.6)
    x, ei = _features(SIZES, WIDTHS), _edges(RELATIONS, SIZES, per=40)
    _same_draws(model, x, ei)
    assert sum(c for c, _ in _ran(":drop")) == 2
