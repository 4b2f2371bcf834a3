"""``GATConv``/``GATv2Conv(add_self_loops=True)`` (PyG's default) on relations from a node type
to itself under ``torch.compile(backend="hector")`` (:mod:`hector.dynamo.pyg_gat_loops`): the
loops PyG appends are appended to the program's edges, the relation's own loops (which PyG
removes) weighed out by ``-inf`` logits (``hetero-gat:<slope>:edge``,
``hetero-gatv2:<slope>:edge``), the loops' edge features made by the conv's ``fill_value``;
outputs and gradients (of the parameters, the node and the edge features) against eager PyG,
on batches with loops of their own and nodes that no other edge enters, attention dropout in
training (PyG's masks over PyG's edges), and what is declined."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from test_pyg_attention_dropout import RELATIONS, WIDTHS, _same_draws
from test_pyg_hetero_route import _assert_matches, _edges, _features
from test_pyg_route_configs import _fresh_dynamo  # noqa: F401  (autouse: Dynamo reset per test)
from torch_geometric.nn import GAT, GATConv, GATv2Conv, HeteroConv, to_hetero

from hector.dynamo import pyg_route
from hector.dynamo.backend import HectorBackend

SIZES = {"paper": 13, "author": 9}


def _with_own_loops(ei: dict[Any, torch.Tensor]) -> dict[Any, torch.Tensor]:
    """``ei`` with two loops on ``paper`` node 0 and one on node 3 among the citations."""
    own = torch.tensor([[0, 0, 3], [0, 0, 3]])
    return {**ei, RELATIONS[0]: torch.cat([ei[RELATIONS[0]], own], dim=1)}


def _loops_and_sinks(ei: dict[Any, torch.Tensor]) -> dict[Any, torch.Tensor]:
    """``ei`` whose citations enter no ``paper`` node from 11 on, plus loops of their own: two
    on node 0, one on 3 and one on 11 (so 11 has only its loop, 12 no edge, before PyG's)."""
    cites = ei[RELATIONS[0]]
    cites = cites[:, cites[1] < 11]
    own = torch.tensor([[0, 0, 3, 11], [0, 0, 3, 11]])
    return {**ei, RELATIONS[0]: torch.cat([cites[:, :10], own, cites[:, 10:]], dim=1)}


def _ran() -> list[str]:
    return [n for n in pyg_route.STATS if n.startswith("hetero-gat")]


def _assert_routed_as_pyg(model: HeteroConv, x: Any, ei: Any, attr: Any, program: str) -> None:
    """One training step of ``model`` under the backend runs ``program`` alone, no fallback,
    with outputs and every gradient as eager PyG's."""
    got = _step(model, torch.compile(model, backend=HectorBackend()), x, ei, attr)
    want = _step(model, model, x, ei, attr)
    assert not pyg_route.FALLBACKS, pyg_route.FALLBACKS
    assert _ran() == [program]
    _assert_close(got, want)


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


@pytest.mark.parametrize("share_weights", [False, True])
@pytest.mark.parametrize(("aggr", "heads"), [("sum", 1), ("max", 2)])
def test_gatv2_self_loops_run_the_program(share_weights: bool, aggr: str, heads: int) -> None:
    """``GATv2Conv``'s loops, shared weights or not: ``hetero-gatv2:<slope>:edge``."""
    torch.manual_seed(0)
    options = {"heads": heads, "share_weights": share_weights}
    model = HeteroConv(
        {e: GATv2Conv(6, 4, **options, add_self_loops=e[0] == e[2]) for e in RELATIONS}, aggr=aggr
    )
    x, ei = _features(SIZES, WIDTHS), _loops_and_sinks(_edges(RELATIONS, SIZES, per=30))
    _assert_matches(model, torch.compile(model, backend=HectorBackend()), x, ei)
    assert not pyg_route.FALLBACKS, pyg_route.FALLBACKS
    assert _ran() == ["hetero-gatv2:0.2:edge"]


@pytest.mark.parametrize("v2", [False, True])
def test_to_hetero_gat_with_its_default_self_loops(v2: bool) -> None:
    """PyG's ``GAT`` model as its docs build it (self-loops on; ``v2``: of ``GATv2Conv``)
    through ``to_hetero`` over one node type: each layer one program, in training."""
    torch.manual_seed(0)
    metadata = (["paper"], [RELATIONS[0]])
    model = to_hetero(GAT((-1, -1), 8, num_layers=2, heads=2, v2=v2), metadata, aggr="sum")
    x = _features({"paper": 13}, WIDTHS)
    ei = _with_own_loops(_edges([RELATIONS[0]], SIZES, per=30))
    with torch.no_grad():
        model(x, ei)  # PyG's lazy widths
    _assert_matches(model, torch.compile(model, backend=HectorBackend()), x, ei)
    assert not pyg_route.FALLBACKS, pyg_route.FALLBACKS
    assert pyg_route.STATS[f"hetero-gat{'v2' if v2 else ''}:0.2:edge"].calls == 2


def _step(model: Any, fn: Any, x: Any, ei: Any, attr: Any) -> list[torch.Tensor]:
    """The outputs of one step (by type, sorted), then the gradients of every parameter, of
    the node features and of the edge features."""
    model.zero_grad()
    xr = {k: v.clone().requires_grad_() for k, v in x.items()}
    ar = {k: v.clone().requires_grad_() for k, v in attr.items()}
    out = fn(xr, ei, ar)
    torch.stack([out[k].square().mean() for k in sorted(out)]).sum().backward()
    return [
        *(out[k].detach() for k in sorted(out)),
        *(p.grad for p in model.parameters()),
        *(v.grad for v in [*xr.values(), *ar.values()]),
    ]


def _assert_close(got: list[Any], want: list[Any]) -> None:
    """Each tensor within 1e-5 of eager's (a gradient None in both or in neither)."""
    for a, b in zip(got, want, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            assert (a - b).abs().max().item() <= 1e-5


#: ``fill_value`` of each kind ``compute_loop_attr`` takes (PyG's default ``"mean"`` first).
FILLS = ["mean", "add", "max", "min", "mul", "any", None, 0.5, 2, torch.tensor([1.0, -2.0, 0.5])]


@pytest.mark.parametrize(
    ("conv", "fill", "loops", "program"),
    [(GATConv, f, True, "hetero-gat:0.2:edge") for f in FILLS]
    + [(GATv2Conv, f, True, "hetero-gatv2:0.2:feat:edge") for f in ("mean", "max", "any", 0.5)]
    + [(GATv2Conv, "mean", False, "hetero-gatv2:0.2:feat")],
    ids=str,
)
def test_self_loops_with_edge_features(conv: Any, fill: Any, loops: bool, program: str) -> None:
    """``edge_dim=3``: the loops with their features by ``fill_value``, edge features on every
    relation (gradients of the edge features too); ``GATv2Conv``'s enter its nonlinearity
    (``:feat``), with loops or without."""
    torch.manual_seed(0)
    model = HeteroConv(
        {
            e: conv(
                6, 4, heads=2, edge_dim=3, fill_value=fill, add_self_loops=loops and e[0] == e[2]
            )
            for e in RELATIONS
        }
    )
    x, ei = _features(SIZES, WIDTHS), _loops_and_sinks(_edges(RELATIONS, SIZES, per=30))
    gen = torch.Generator().manual_seed(2)
    attr = {e: torch.randn(v.shape[1], 3, generator=gen) for e, v in ei.items()}
    _assert_routed_as_pyg(model, x, ei, attr, program)


def test_gatv2_edge_features_on_some_relations() -> None:
    """``GATv2Conv`` with ``edge_dim`` on the relations into ``paper`` only, features given to
    one of them (zeros in the program for the others), shared weights, self-loops."""
    torch.manual_seed(0)

    def conv(e: tuple[str, str, str]) -> GATv2Conv:
        same = e[0] == e[2]
        dim = 2 if e[2] == "paper" else None
        return GATv2Conv(6, 4, edge_dim=dim, share_weights=same, add_self_loops=same)

    model = HeteroConv({e: conv(e) for e in RELATIONS})
    x, ei = _features(SIZES, WIDTHS), _loops_and_sinks(_edges(RELATIONS, SIZES, per=30))
    attr = {RELATIONS[1]: torch.randn(ei[RELATIONS[1]].shape[1], 2)}
    _assert_routed_as_pyg(model, x, ei, attr, "hetero-gatv2:0.2:feat:edge")


@pytest.mark.parametrize("fill", ["mean", 0.5, torch.tensor(3.0)], ids=str)
def test_self_loops_with_one_edge_weight(fill: Any) -> None:
    """``edge_dim=1`` with one value per edge (``[E]`` edge features), only on the relation
    from ``paper`` to itself."""
    torch.manual_seed(0)
    model = HeteroConv({RELATIONS[0]: GATConv(6, 4, heads=2, edge_dim=1, fill_value=fill)})
    x, ei = _features(SIZES, WIDTHS), _loops_and_sinks(_edges([RELATIONS[0]], SIZES, per=30))
    attr = {RELATIONS[0]: torch.rand(ei[RELATIONS[0]].shape[1])}
    _assert_routed_as_pyg(model, x, ei, attr, "hetero-gat:0.2:edge")


@pytest.mark.parametrize(
    ("conv", "edge_dim"), [(GATConv, None), (GATv2Conv, None), (GATConv, 3), (GATv2Conv, 3)]
)
def test_self_loops_with_attention_dropout_draw_pygs_masks(conv: Any, edge_dim: Any) -> None:
    """Attention dropout in training over PyG's edges (own loops removed, loops appended; the
    relations' probabilities differ): two steps from two seeds match eager PyG's outputs,
    gradients and generator state (``:edge:drop``)."""
    torch.manual_seed(0)
    ps = (0.4, 0.0, 0.25)
    options = {"heads": 2} if edge_dim is None else {"heads": 2, "edge_dim": edge_dim}
    model = HeteroConv(
        {
            e: conv(6, 4, dropout=p, add_self_loops=e[0] == e[2], **options)
            for e, p in zip(RELATIONS, ps, strict=True)
        }
    )
    x, ei = _features(SIZES, WIDTHS), _loops_and_sinks(_edges(RELATIONS, SIZES, per=30))
    gen = torch.Generator().manual_seed(2)
    attr = {e: torch.randn(v.shape[1], 3, generator=gen) for e, v in ei.items()}
    _same_draws(model, x, ei, *([attr] if edge_dim else []))
    v2 = conv is GATv2Conv
    program = f"hetero-gat{'v2' if v2 else ''}:0.2{':feat' if v2 and edge_dim else ''}:edge:drop"
    assert [n for n in pyg_route.STATS if "hetero-gat" in n] == [program]


def test_to_hetero_gat_with_dropout_and_its_default_self_loops() -> None:
    """PyG's ``GAT`` model with ``dropout`` and its default self-loops through ``to_hetero``:
    each layer one ``:edge:drop`` program, PyG's masks."""
    torch.manual_seed(0)
    body = GAT((-1, -1), 8, num_layers=2, heads=2, dropout=0.3)
    model = to_hetero(body, (["paper"], [RELATIONS[0]]), aggr="sum")
    x = {"paper": _features(SIZES, WIDTHS)["paper"]}
    ei = _loops_and_sinks(_edges([RELATIONS[0]], SIZES, per=30))
    with torch.no_grad():
        model(x, ei)  # PyG's lazy widths
    _same_draws(model, x, ei)
    assert pyg_route.STATS["hetero-gat:0.2:edge:drop"].calls == 4


@pytest.mark.parametrize(
    ("conv", "edge_dim", "program"),
    [
        (GATConv, None, "hetero-gat:0.2:edge:kept-mean"),
        (GATv2Conv, 3, "hetero-gatv2:0.2:feat:edge:kept-mean"),
    ],
    ids=["gat", "gatv2-edge-features"],
)
def test_mean_over_the_edges_pyg_keeps(conv: Any, edge_dim: Any, program: str) -> None:
    """``aggr="mean"`` with self-loops: each node's weighted messages over the edges PyG
    aggregates (its own loops removed, one appended; a node with only its own loop, one with
    none), not the program's edge count; outputs and every gradient against eager PyG."""
    torch.manual_seed(0)
    model = HeteroConv(
        {
            e: conv(6, 4, heads=2, edge_dim=edge_dim, aggr="mean", add_self_loops=e[0] == e[2])
            for e in RELATIONS
        }
    )
    x, ei = _features(SIZES, WIDTHS), _loops_and_sinks(_edges(RELATIONS, SIZES, per=30))
    gen = torch.Generator().manual_seed(2)
    attr = {e: torch.randn(v.shape[1], 3, generator=gen) for e, v in ei.items()}
    attr = attr if edge_dim else {}
    _assert_routed_as_pyg(model, x, ei, attr, program)


def test_mean_over_the_edges_pyg_keeps_with_attention_dropout() -> None:
    """``aggr="mean"``, self-loops and attention dropout in training: the mean's factors and
    PyG's masks both reach the program (``:kept-mean:drop``), two steps from two seeds."""
    torch.manual_seed(0)
    model = HeteroConv(
        {
            e: GATConv(6, 4, heads=2, dropout=0.3, aggr="mean", add_self_loops=e[0] == e[2])
            for e in RELATIONS
        }
    )
    x, ei = _features(SIZES, WIDTHS), _loops_and_sinks(_edges(RELATIONS, SIZES, per=30))
    _same_draws(model, x, ei)
    assert _ran() == ["hetero-gat:0.2:edge:kept-mean:drop"]


@pytest.mark.parametrize("conv", [GATConv, GATv2Conv])
def test_self_loops_with_an_unknown_fill_declined(conv: Any) -> None:
    """Self-loops with edge features and a ``fill_value`` string PyG's ``scatter`` does not
    know: PyG's forward runs, with PyG's error, and the reason is kept."""
    torch.manual_seed(0)
    model = HeteroConv({RELATIONS[0]: conv(6, 4, edge_dim=3, fill_value="median")})
    x, ei = _features(SIZES, WIDTHS), _edges([RELATIONS[0]], SIZES, per=30)
    attr = {RELATIONS[0]: torch.randn(30, 3)}
    with pytest.raises(ValueError, match="median"):
        model(x, ei, attr)
    with pytest.raises(ValueError, match="median"):
        torch.compile(model, backend=HectorBackend())(x, ei, attr)
    assert "fill_value='median'" in pyg_route.FALLBACKS["HeteroConv"]


def test_gatv2_edge_features_without_edge_dim_declined() -> None:
    """Edge features given to a ``GATv2Conv`` without ``edge_dim``: PyG's forward, and its
    error."""
    model = HeteroConv({RELATIONS[0]: GATv2Conv(6, 4)})
    x, ei = _features(SIZES, WIDTHS), _edges([RELATIONS[0]], SIZES, per=30)
    with pytest.raises(AssertionError):
        torch.compile(model, backend=HectorBackend())(x, ei, {RELATIONS[0]: torch.randn(30, 3)})
    assert "without edge_dim" in pyg_route.FALLBACKS["HeteroConv"]


def test_self_loops_under_dynamic_shapes() -> None:
    """``dynamic=True``: batches of other node and edge counts (loops, their features, the
    dropout mask) run one captured graph, each matching eager PyG from the same seed."""
    torch.manual_seed(0)
    model = HeteroConv(
        {
            e: GATConv(6, 4, heads=2, edge_dim=3, dropout=0.3, add_self_loops=e[0] == e[2])
            for e in RELATIONS
        }
    )
    compiled = torch.compile(model, backend=HectorBackend(), dynamic=True)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for sizes, per in [(SIZES, 30), ({"paper": 17, "author": 7}, 41)]:
        x, ei = _features(sizes, WIDTHS), _loops_and_sinks(_edges(RELATIONS, sizes, per=per))
        attr = {e: torch.randn(v.shape[1], 3) for e, v in ei.items()}
        torch.manual_seed(5)
        want = model(x, ei, attr)
        torch.manual_seed(5)
        got = compiled(x, ei, attr)
        _assert_close([got[k] for k in sorted(got)], [want[k] for k in sorted(want)])
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs == 1
    assert pyg_route.STATS["hetero-gat:0.2:edge:drop"].calls == 2
