"""``RGATConv`` under ``torch.compile(backend="hector")``: every option PyG documents runs
Hector's program (:mod:`hector.dynamo.pyg_rgat`), forward, attention weights and gradients equal to
the same layer run eagerly.

The configurations cover each value of each option at least once (attention mode and
mechanism, the four ``mod`` values and none, edge features, averaged heads, bases and blocks,
dropout in training), on a batch whose edges are not sorted by relation and that lacks the
highest relation id.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch._dynamo
from torch_geometric.nn import RGATConv

from hector.dynamo import pyg_route
from hector.dynamo.backend import HectorBackend
from hector.dynamo.pyg_rgat import RgatConfig

N, R, F, H, EDGE_DIM = 12, 4, 8, 2, 3
TOL = 1e-5

_CONFIGS = [  # (mode, mechanism, mod, concat, edge_dim, decomposition)
    ("additive", "across", None, True, None, None),
    ("additive", "within", "additive", False, EDGE_DIM, "bases"),
    ("multiplicative", "across", "scaled", True, EDGE_DIM, "blocks"),
    ("multiplicative", "within", "f-additive", False, None, None),
    ("additive", "within", "f-scaled", True, None, "blocks"),
]


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    pyg_route.FALLBACKS.clear()
    yield
    torch._dynamo.reset()


def _layer(
    mode: str, mechanism: str, mod: Any, concat: bool, edge_dim: Any, dec: Any, **kw: Any
) -> Any:
    torch.manual_seed(0)
    kw |= {"num_bases": 3} if dec == "bases" else {"num_blocks": 2} if dec == "blocks" else {}
    conv = RGATConv(
        F,
        6,
        R,
        mod=mod,
        attention_mode=f"{mode}-self-attention",
        attention_mechanism=f"{mechanism}-relation",
        heads=H,
        concat=concat,
        edge_dim=edge_dim,
        **kw,
    )
    with torch.no_grad():  # PyG leaves l2 uninitialised, and zeros or ones elsewhere
        for p in conv.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    return conv


def _inputs(edge_dim: Any, edges: int = 30) -> tuple[Any, ...]:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(N, F, generator=gen)
    ei = torch.randint(0, N, (2, edges), generator=gen)
    et = torch.randint(0, R - 1, (edges,), generator=gen)  # unsorted, no relation R - 1
    attr = torch.randn(edges, edge_dim, generator=gen) if edge_dim else None
    return x, ei, et, attr


def _step(conv: Any, fn: Any, x: torch.Tensor, *rest: Any) -> tuple[list[Any], list[Any]]:
    """Output, attention weights, then the gradients of the parameters and the features."""
    conv.zero_grad()
    xr = x.clone().requires_grad_()
    out, (_, alpha) = fn(xr, *rest, return_attention_weights=True)
    (out.square().mean() + alpha.square().sum()).backward()
    return [out.detach(), alpha.detach()], [p.grad for p in conv.parameters()] + [xr.grad]


def _assert_matches(conv: Any, compiled: Any, *inputs: Any) -> None:
    got, got_g = _step(conv, compiled, *inputs)
    want, want_g = _step(conv, conv, *inputs)
    for a, b in zip(got + got_g, want + want_g, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.shape == b.shape
            # float32 rounding grows with the values' scale (products of three logits)
            assert (a - b).abs().max().item() <= TOL + 1e-4 * b.abs().max().item()


@pytest.mark.parametrize(("mode", "mechanism", "mod", "concat", "edge_dim", "dec"), _CONFIGS)
def test_rgatconv_configurations_run_hectors_program(mode, mechanism, mod, concat, edge_dim, dec):
    conv = _layer(mode, mechanism, mod, concat, edge_dim, dec)
    be = HectorBackend()
    x, ei, et, attr = _inputs(edge_dim)
    _assert_matches(conv, torch.compile(conv, backend=be), x, ei, et, attr)
    programs = [name for g in be.graphs for name in g.layers]
    assert [RgatConfig.parse(p).alpha for p in programs] == [False, True]
    assert pyg_route.FALLBACKS == {}


def test_dropout_in_training_draws_pytorchs_mask() -> None:
    """Dropout on the attention weights runs Hector's program with a mask drawn from
    PyTorch's generator as ``F.dropout`` draws it: the same seed gives PyG's own output."""
    torch.manual_seed(0)
    conv = RGATConv(F, 6, R, heads=H, dropout=0.5).train()
    be = HectorBackend()
    compiled = torch.compile(conv, backend=be)
    x, ei, et, _ = _inputs(None)
    torch.manual_seed(7)
    got = compiled(x, ei, et)
    torch.manual_seed(7)
    want = conv(x, ei, et)
    torch.manual_seed(8)
    other = compiled(x, ei, et)
    assert (got - want).abs().max().item() <= TOL
    assert (got - other).abs().max().item() > 1e-3  # a new draw, a new mask
    assert RgatConfig.parse(be.graphs[0].layers[0]).dropout
    conv.eval()  # no dropout outside training: another program, without a mask
    torch.testing.assert_close(compiled(x, ei, et), conv(x, ei, et), atol=TOL, rtol=0)


@pytest.mark.parametrize("concat", [True, False])
@pytest.mark.parametrize("aggr", ["mean", "sum", "max"])
def test_averaged_summed_and_largest_messages_run_hectors_program(aggr: str, concat: bool) -> None:
    """``aggr="mean"``: the program's sums over each node's in-degree (isolated nodes keep
    zero), then the bias; ``"sum"`` is PyG's other name for the default ``"add"``; ``"max"``:
    each node's elementwise maximum message (``edge_max``), zero without edges."""
    conv = _layer("additive", "across", None, concat, EDGE_DIM, None, aggr=aggr)
    be = HectorBackend()
    x, ei, et, attr = _inputs(EDGE_DIM, edges=20)  # 20 edges on 12 nodes: some have none
    _assert_matches(conv, torch.compile(conv, backend=be), x, ei, et, attr)
    assert len([name for g in be.graphs for name in g.layers]) == 2
    assert pyg_route.FALLBACKS == {}


@pytest.mark.parametrize("concat", [True, False])
@pytest.mark.parametrize("mod", [None, "additive", "scaled", "f-scaled"])
def test_several_attention_channels_per_head_run_hectors_program(mod: Any, concat: bool) -> None:
    """Multiplicative attention with ``dim=2``: ``[E, H*dim]`` weights, each scaling its
    head's message (the weight's columns repeated per channel), ``H*dim*F`` columns out (or
    ``dim*F`` averaged over heads)."""
    conv = _layer("multiplicative", "across", mod, concat, EDGE_DIM, None, dim=2)
    be = HectorBackend()
    x, ei, et, attr = _inputs(EDGE_DIM)
    _assert_matches(conv, torch.compile(conv, backend=be), x, ei, et, attr)
    configs = [RgatConfig.parse(name) for g in be.graphs for name in g.layers]
    assert [(c.dim, c.alpha) for c in configs] == [(2, False), (2, True)]
    assert pyg_route.FALLBACKS == {}


def test_dropout_over_several_channels_draws_pytorchs_mask() -> None:
    torch.manual_seed(0)
    conv = RGATConv(
        F, 6, R, heads=H, dim=2, dropout=0.5, attention_mode="multiplicative-self-attention"
    ).train()
    compiled = torch.compile(conv, backend=HectorBackend())
    x, ei, et, _ = _inputs(None)
    torch.manual_seed(7)
    got = compiled(x, ei, et)
    torch.manual_seed(7)
    want = conv(x, ei, et)
    assert (got - want).abs().max().item() <= TOL
    assert pyg_route.FALLBACKS == {}


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"aggr": "min"}, "aggr='min'"),
    ],
)
def test_configurations_without_a_program_fall_back_and_say_why(kwargs, reason) -> None:
    torch.manual_seed(0)
    conv = RGATConv(F, 6, R, heads=H, **kwargs)
    x, ei, et, _ = _inputs(None)
    out = torch.compile(conv, backend=HectorBackend())(x, ei, et)
    torch.testing.assert_close(out, conv(x, ei, et), atol=TOL, rtol=0)
    assert reason in pyg_route.FALLBACKS["RGATConv"]


def test_program_names_round_trip() -> None:
    c = RgatConfig(2, True, False, "f-scaled", True, False, True, 0.2, alpha=True)
    assert RgatConfig.parse(c.name) == c
    with pytest.raises(ValueError, match="not an RGAT program name"):
        RgatConfig.parse("rgat:2:101:bogus:0.2:0")


def test_a_layer_with_edge_dim_called_without_edge_features_has_no_edge_term() -> None:
    """As in PyG: the edge term needs the call's ``edge_attr``; without it the layer attends
    on the nodes alone."""
    conv = _layer("additive", "across", None, True, EDGE_DIM, None)
    be = HectorBackend()
    x, ei, et, _ = _inputs(None)
    out = torch.compile(conv, backend=be)(x, ei, et)
    assert (out - conv(x, ei, et)).abs().max().item() <= TOL
    assert not RgatConfig.parse(be.graphs[0].layers[0]).edge


def test_an_overflowed_additive_weight_stays_in_its_column_as_in_pyg() -> None:
    """``mod="additive"`` adds ``outj ⊙ w``: an infinite entry of ``w`` makes its own output
    column non-finite, in PyG and in Hector's program alike, and leaves the others finite (a
    product by ``diag(w)`` would have spread NaN through its zeros)."""
    conv = _layer("additive", "across", "additive", True, None, None)
    with torch.no_grad():
        conv.w[1] = float("inf")
    x, ei, et, _ = _inputs(None)
    got = torch.compile(conv, backend=HectorBackend())(x, ei, et).detach()
    want = conv(x, ei, et).detach()
    assert torch.equal(got.isfinite(), want.isfinite())
    assert not want[:, 1].isfinite().all()
    assert want[:, [0, 2, 3, 4, 5]].isfinite().all()
    finite = want.isfinite()
    assert (got[finite] - want[finite]).abs().max().item() <= TOL
