"""PyG's ``HANConv`` under ``torch.compile(backend="hector")`` (``hector.dynamo.pyg_han``): the
node-level attention of every relation as one ``han`` program, PyG's semantic attention
after it; outputs, semantic attention weights and gradients (every parameter, the node
features) against eager PyG, and PyG's own forward where the program does not apply."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from test_pyg_hetero_route import TOL, _edges, _features
from test_pyg_route_configs import _fresh_dynamo  # noqa: F401  (autouse: Dynamo reset per test)
from torch_geometric.nn import HANConv

from hector.dynamo import pyg_route
from hector.dynamo.backend import HectorBackend

SIZES = {"movie": 13, "director": 7, "actor": 9}
WIDTHS = {"movie": 6, "director": 4, "actor": 5}
RELATIONS = [
    ("movie", "to", "director"),
    ("director", "to", "movie"),
    ("movie", "to", "actor"),
    ("actor", "to", "movie"),
    ("movie", "similar", "movie"),
]
METADATA = (list(SIZES), RELATIONS)


def _han(heads: int, width: int = 8, **kwargs: Any) -> HANConv:
    torch.manual_seed(0)
    return HANConv(dict(WIDTHS), width, METADATA, heads=heads, **kwargs)


def _run(model: Any, fn: Any, x: Any, ei: Any, **kwargs: Any) -> tuple[Any, list[Any]]:
    model.zero_grad()
    xr = {k: v.clone().requires_grad_() for k, v in x.items()}
    out = fn(xr, ei, **kwargs)
    rows = out[0] if isinstance(out, tuple) else out
    torch.stack([o.square().mean() for o in rows.values() if o is not None]).sum().backward()
    return out, [p.grad for p in model.parameters()] + [xr[k].grad for k in sorted(xr)]


def _close(got: Any, want: Any) -> None:
    assert list(got) == list(want)
    for k in want:
        assert (got[k] is None) == (want[k] is None)
        if want[k] is not None:
            assert (got[k] - want[k]).abs().max().item() <= TOL


def _matches(model: Any, x: Any, ei: Any, **kwargs: Any) -> None:
    """The compiled layer's outputs and gradients are eager PyG's; it did not fall back."""
    want, want_g = _run(model, model, x, ei, **kwargs)
    got, got_g = _run(model, torch.compile(model, backend=HectorBackend()), x, ei, **kwargs)
    if isinstance(want, tuple):
        for g, w in zip(got, want, strict=True):
            _close(g, w)
    else:
        _close(got, want)
    for a, b in zip(got_g, want_g, strict=True):
        assert (a is None) == (b is None)
        assert a is None or (a - b).abs().max().item() <= TOL
    assert not pyg_route.FALLBACKS, pyg_route.FALLBACKS


@pytest.mark.parametrize("heads", [1, 2, 4])
def test_han_runs_one_program(heads: int) -> None:
    """Every relation's attention (node types of three widths, a relation from a type to
    itself) in one ``han`` call forward and one backward."""
    model = _han(heads)
    x, ei = _features(SIZES, WIDTHS), _edges(RELATIONS, SIZES, per=25)
    _matches(model, x, ei)
    stats = [s for name, s in pyg_route.STATS.items() if name.startswith("han:0.2")]
    assert [(s.calls, s.backward_calls) for s in stats] == [(1, 1)]


def test_han_semantic_attention_weights_and_missing_relations() -> None:
    """``return_semantic_attention_weights=True``, a batch without some relations (a node
    type no relation reaches gets ``None``, as in PyG) and one relation without edges."""
    model = _han(2, negative_slope=0.1)
    x = _features(SIZES, WIDTHS)
    ei = _edges(RELATIONS[:3], SIZES, per=20)
    ei[RELATIONS[2]] = ei[RELATIONS[2]][:, :0]
    _matches(model, x, ei, return_semantic_attention_weights=True)


def test_han_model_in_eval_mode_with_dropout() -> None:
    """PyG's ``han_imdb.py`` model (``HANConv(dropout=0.6)`` and a classifier) in eval mode:
    the program (dropout is off), and one Dynamo graph over two graph sizes (``dynamic``)."""

    class Han(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = HANConv(-1, 16, METADATA, heads=4, dropout=0.6)
            self.lin = torch.nn.Linear(16, 3)

        def forward(self, x: Any, ei: Any) -> Any:
            return {"movie": self.lin(self.conv(x, ei)["movie"])}

    torch.manual_seed(0)
    model = Han()
    model(_features(SIZES, WIDTHS), _edges(RELATIONS, SIZES))  # sizes the lazy projections
    model.eval()
    compiled = torch.compile(model, backend=HectorBackend(), dynamic=True)
    torch._dynamo.utils.counters.clear()
    for seed, sizes in ((0, SIZES), (1, {"movie": 17, "director": 5, "actor": 11})):
        x, ei = _features(sizes, WIDTHS, seed=seed), _edges(RELATIONS, sizes, per=30, seed=seed)
        want, want_g = _run(model, model, x, ei)
        got, got_g = _run(model, compiled, x, ei)
        _close(got, want)
        for a, b in zip(got_g, want_g, strict=True):
            # one op for all relations: those feeding no loss (into director and actor) get
            # zero gradients where PyG's autograd leaves None (docs/import.md)
            assert a is None or (a - (0 if b is None else b)).abs().max().item() <= TOL
    assert not pyg_route.FALLBACKS, pyg_route.FALLBACKS
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1


def test_han_outside_the_program_runs_pygs_forward() -> None:
    """A lazy projection before its first call runs PyG's forward (the reason kept); an
    unknown relation gets PyG's own error."""
    x, ei = _features(SIZES, WIDTHS), _edges(RELATIONS, SIZES)
    lazy = HANConv(-1, 8, METADATA, heads=2)
    torch.compile(lazy, backend=HectorBackend())(x, ei)
    assert "lazy input width" in pyg_route.FALLBACKS["HANConv"]
    unknown = {**ei, ("actor", "knows", "actor"): ei[RELATIONS[0]]}
    with pytest.raises(AttributeError, match="actor__knows__actor"):  # PyG's own
        _han(2)(x, unknown)
    with pytest.raises(AttributeError, match="actor__knows__actor"):
        torch.compile(_han(2), backend=HectorBackend())(x, unknown)
    assert "does not know" in pyg_route.FALLBACKS["HANConv"]
