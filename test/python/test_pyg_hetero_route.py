"""PyG's ``HeteroConv`` under ``torch.compile(backend="hector")``: one Hector program per layer
(``hector.dynamo.pyg_hetero``, issue 54).

Every case runs the same module eagerly and compiled, and compares the outputs, the gradients of
every parameter (``None`` where PyG leaves one) and of every node type's features, within 1e-5
(float32). The graphs are bipartite (node types of different sizes and widths), and batches
lack relations or node types. Each routed case also checks that Hector's program ran and that
the layer did not fall back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch._dynamo
from test_pyg_route_configs import _fresh_dynamo  # noqa: F401  (autouse: Dynamo reset per test)
from torch_geometric.nn import GATConv, GATv2Conv, GCNConv, GraphConv, HeteroConv, SAGEConv

from hector.dynamo import pyg_route
from hector.dynamo.backend import HectorBackend

TOL = 1e-5
SIZES = {"paper": 11, "author": 7, "institute": 4}
WIDTHS = {"paper": 6, "author": 6, "institute": 6}
RELATIONS = [
    ("paper", "cites", "paper"),
    ("author", "writes", "paper"),
    ("paper", "rev_writes", "author"),
    ("author", "affiliated", "institute"),
]


def _features(sizes: dict[str, int], widths: dict[str, int], seed: int = 0) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(seed)
    return {t: torch.randn(n, widths[t], generator=gen) for t, n in sizes.items()}


def _edges(
    relations: list[tuple[str, str, str]], sizes: dict[str, int], per: int = 15, seed: int = 1
) -> dict[Any, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for s, r, d in relations:
        src = torch.randint(sizes[s], (per,), generator=gen)
        dst = torch.randint(sizes[d], (per,), generator=gen)
        out[(s, r, d)] = torch.stack([src, dst])
    return out


def _run(
    model: torch.nn.Module, fn: Any, x: dict[str, Any], ei: Any, **kwargs: Any
) -> tuple[list[Any], ...]:
    """Outputs (by type, sorted), then the gradients of the parameters and the features."""
    model.zero_grad()
    xr = {k: v.clone().requires_grad_() for k, v in x.items()}
    out = fn(xr, ei, **kwargs)
    keys = sorted(out)
    torch.stack([out[k].square().mean() for k in keys]).sum().backward()
    grads = [p.grad for p in model.parameters()] + [xr[k].grad for k in sorted(xr)]
    return keys, [out[k].detach() for k in keys], grads


def _assert_matches(model: torch.nn.Module, compiled: Any, x: Any, ei: Any, **kw: Any) -> None:
    _assert_same(_run(model, compiled, x, ei, **kw), _run(model, model, x, ei, **kw))


def _assert_same(got_step: tuple[Any, ...], want_step: tuple[Any, ...], tol: float = TOL) -> None:
    """Two steps' ``(keys, outputs, gradients)`` agree within ``tol`` (a gradient is None in
    both or in neither)."""
    got_k, got, got_g = got_step
    want_k, want, want_g = want_step
    assert got_k == want_k
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        assert (a - b).abs().max().item() <= tol
    assert len(got_g) == len(want_g)
    for a, b in zip(got_g, want_g, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            assert (a - b).abs().max().item() <= tol


def _assert_routed(prefix: str) -> None:
    assert "HeteroConv" not in pyg_route.FALLBACKS, pyg_route.FALLBACKS
    calls = {n: s for n, s in pyg_route.STATS.items() if n.startswith(prefix)}
    assert calls
    assert all(s.calls > 0 and s.backward_calls > 0 for s in calls.values())


def _check(layer: Callable[[tuple[str, str, str]], Any], prefix: str, aggr: str = "sum") -> None:
    """The layer of ``layer`` per relation: full batch, a batch without two relations."""
    torch.manual_seed(0)
    model = HeteroConv({e: layer(e) for e in RELATIONS}, aggr=aggr)
    x = _features(SIZES, WIDTHS)
    compiled = torch.compile(model, backend=HectorBackend())
    _assert_matches(model, compiled, x, _edges(RELATIONS, SIZES))
    _assert_routed(prefix)
    partial = _edges([RELATIONS[1], RELATIONS[2]], SIZES)  # no institute: a type missing
    del x["institute"]
    _assert_matches(model, compiled, x, partial)
    _assert_routed(prefix)


# -- GATConv --------------------------------------------------------------------------------


def test_mlperf_rgat_layer_runs_one_program() -> None:
    """MLPerf's R-GAT layer: ``GATConv(in, h // heads, heads, add_self_loops=False)``, summed;
    in inference too (``no_grad``: the program's plain forward)."""
    _check(lambda e: GATConv(6, 4, heads=2, add_self_loops=False), "hetero-gat")
    torch.manual_seed(0)
    model = HeteroConv({e: GATConv(6, 4, heads=2, add_self_loops=False) for e in RELATIONS})
    x, ei = _features(SIZES, WIDTHS), _edges(RELATIONS, SIZES)
    with torch.no_grad():
        got = torch.compile(model, backend=HectorBackend())(x, ei)
        want = model(x, ei)
    assert list(got) == list(want)
    for t in want:
        assert (got[t] - want[t]).abs().max().item() <= TOL
    # two training calls, one inference; 2 heads x 2 relations into paper < 6-wide rows: the
    # destinations' terms per node
    assert pyg_route.STATS["hetero-gat:0.2:dst"].calls == 3


def test_gat_destination_terms_per_edge_where_the_rows_are_narrower() -> None:
    """4 heads x 2 relations into ``paper`` are not below the 6-wide rows: the destination's
    logit term stays per edge (``hetero-gat:<slope>``), with the same numbers; the batch
    of two relations (one into each of its types: 4 < 6) runs per node."""
    _check(lambda e: GATConv(6, 2, heads=4, add_self_loops=False), "hetero-gat")
    assert pyg_route.STATS["hetero-gat:0.2"].calls == 1
    assert pyg_route.STATS["hetero-gat:0.2:dst"].calls == 1


@pytest.mark.parametrize(
    ("aggr", "concat", "bias"),
    [("sum", True, True), ("mean", True, False), ("sum", False, False), ("mean", False, True)],
)
def test_gat_options(aggr: str, concat: bool, bias: bool) -> None:
    """Concatenated or averaged heads, bias or none, relations summed or averaged: every
    pair of two options' values in one of the four cases."""
    _check(
        lambda e: GATConv(6, 3, heads=2, concat=concat, bias=bias, add_self_loops=False),
        "hetero-gat",
        aggr,
    )


@pytest.mark.parametrize(
    ("make", "aggr"),
    [
        (lambda e: GATConv(6, 3, heads=2, residual=True, add_self_loops=False), "sum"),
        (
            lambda e: GATConv(6, 3, heads=2, concat=False, residual=True, add_self_loops=False),
            "max",
        ),
        (lambda e: GATv2Conv(6, 3, heads=2, residual=e[0] != e[2], add_self_loops=False), "mean"),
    ],
    ids=["gat-sum", "gat-mean-heads-max", "gatv2-some-relations-mean"],
)
def test_gat_residual(make: Any, aggr: str) -> None:
    """``residual=True``: each relation's ``res(x_dst)`` added to its output after the heads
    are combined (its weight's gradient too), with every cross-relation layout (summed in the
    program, averaged, per relation for ``max``), on some relations only."""
    _check(make, "hetero-gat", aggr)


def test_gat_bipartite_widths_and_projections() -> None:
    """Node types of different widths, ``in_channels`` pairs (separate source and destination
    projections) and a negative slope of the layer's own."""
    widths = {"paper": 5, "author": 3, "institute": 7}
    torch.manual_seed(0)
    convs = {
        e: GATConv(
            (widths[e[0]], widths[e[2]]), 4, heads=3, negative_slope=0.1, add_self_loops=False
        )
        for e in RELATIONS
    }
    model = HeteroConv(convs)
    compiled = torch.compile(model, backend=HectorBackend())
    _assert_matches(model, compiled, _features(SIZES, widths), _edges(RELATIONS, SIZES))
    _assert_routed("hetero-gat")


@pytest.mark.parametrize("edge_dim", [1, 3])
def test_gat_edge_features(edge_dim: int) -> None:
    """``GATConv(edge_dim=...)`` with the call's ``edge_attr_dict`` (one relation without edge
    features: no edge term there, as in PyG)."""
    torch.manual_seed(0)
    model = HeteroConv(
        {e: GATConv(6, 4, heads=2, edge_dim=edge_dim, add_self_loops=False) for e in RELATIONS}
    )
    ei = _edges(RELATIONS, SIZES)
    gen = torch.Generator().manual_seed(3)
    shape = (15,) if edge_dim == 1 else (15, edge_dim)
    attrs = {e: torch.randn(*shape, generator=gen) for e in RELATIONS[:3]}
    compiled = torch.compile(model, backend=HectorBackend())
    x = _features(SIZES, WIDTHS)
    _assert_matches(model, compiled, x, ei, edge_attr_dict=attrs)
    _assert_routed("hetero-gat")
    assert any(n.endswith(":edge") for n in pyg_route.STATS)


def _gat_edge_attrs(edge_dim: int) -> dict[Any, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    return {e: torch.randn(15, edge_dim, generator=gen) for e in RELATIONS[:3]}


@pytest.mark.parametrize(
    ("make", "aggr", "program"),
    [
        (lambda e: GATConv(6, 3, heads=2, add_self_loops=False, aggr="mean"), "sum", ":dst:mean"),
        (
            lambda e: GATConv(6, 2, heads=4, concat=False, add_self_loops=False, aggr="mean"),
            "mean",
            "hetero-gat:0.2:mean",  # 4 heads x 2 relations: the term per edge (full batch)
        ),
        (lambda e: GATv2Conv(6, 3, heads=2, add_self_loops=False, aggr="mean"), "sum", ":mean"),
    ],
    ids=["gat-dst-terms", "gat-heads-averaged", "gatv2"],
)
def test_gat_mean_over_each_relations_edges(make: Any, aggr: str, program: str) -> None:
    """``aggr="mean"``: each relation's weighted messages averaged over the destination's
    in-degree in that relation, the bias after, the relations then summed or averaged; on
    the batch without two relations too (a node without edges in a relation gets 0 there)."""
    _check(make, "hetero-gat", aggr)
    assert all(n.endswith(":mean") for n in pyg_route.STATS), pyg_route.STATS
    assert any(n.endswith(program) for n in pyg_route.STATS), pyg_route.STATS


def test_gat_mean_with_edge_features() -> None:
    """``aggr="mean"`` with the edge logits of ``edge_dim`` (``hetero-gat:<slope>:edge:mean``)."""
    torch.manual_seed(0)
    model = HeteroConv(
        {
            e: GATConv(6, 4, heads=2, edge_dim=2, add_self_loops=False, aggr="mean")
            for e in RELATIONS
        }
    )
    compiled = torch.compile(model, backend=HectorBackend())
    x, ei = _features(SIZES, WIDTHS), _edges(RELATIONS, SIZES)
    _assert_matches(model, compiled, x, ei, edge_attr_dict=_gat_edge_attrs(2))
    _assert_routed("hetero-gat")
    assert list(pyg_route.STATS) == ["hetero-gat:0.2:edge:mean"]


@pytest.mark.parametrize("concat", [True, False])
@pytest.mark.parametrize("share", [True, False])
def test_gatv2(concat: bool, share: bool) -> None:
    """``GATv2Conv``: biased projections, attention on ``leaky_relu(x_j' + x_i')``."""
    _check(
        lambda e: GATv2Conv(
            6, 3, heads=2, concat=concat, share_weights=share, add_self_loops=False
        ),
        "hetero-gatv2",
    )


def test_relation_without_edges_gives_bias() -> None:
    """A relation in ``edge_index_dict`` with no edges contributes its bias (as in PyG)."""
    torch.manual_seed(0)
    model = HeteroConv({e: GATConv(6, 4, heads=2, add_self_loops=False) for e in RELATIONS})
    for p in model.parameters():
        torch.nn.init.normal_(p)  # non-zero biases
    ei = _edges(RELATIONS, SIZES)
    ei[RELATIONS[3]] = torch.empty(2, 0, dtype=torch.long)
    compiled = torch.compile(model, backend=HectorBackend())
    _assert_matches(model, compiled, _features(SIZES, WIDTHS), ei)
    _assert_routed("hetero-gat")


def test_batch_sizes_share_one_compilation() -> None:
    """Under ``dynamic=True`` batches of other sizes run without recompiling."""
    torch.manual_seed(0)
    model = HeteroConv({e: GATConv(6, 4, heads=2, add_self_loops=False) for e in RELATIONS})
    backend = HectorBackend()
    compiled = torch.compile(model, backend=backend, dynamic=True)
    for scale, per in ((1, 15), (2, 31), (3, 40)):
        sizes = {t: n * scale for t, n in SIZES.items()}
        x = _features(sizes, WIDTHS, seed=scale)
        _assert_matches(model, compiled, x, _edges(RELATIONS, sizes, per=per, seed=scale))
    assert backend.stats()["compilations"] == 1
    _assert_routed("hetero-gat")


# -- SAGEConv -------------------------------------------------------------------------------


@pytest.mark.parametrize("sage_aggr", ["mean", "sum", "max"])
@pytest.mark.parametrize("root", [True, False])
def test_sage_options(sage_aggr: str, root: bool) -> None:
    """MLPerf's ``rsage`` (``root_weight=False``), PyG's DBLP example (mean, root weight)."""
    _check(lambda e: SAGEConv(6, 5, aggr=sage_aggr, root_weight=root), "hetero-sage")


def test_sage_bipartite_widths_and_mean_over_relations() -> None:
    widths = {"paper": 5, "author": 3, "institute": 7}
    torch.manual_seed(0)
    model = HeteroConv({e: SAGEConv((widths[e[0]], widths[e[2]]), 4) for e in RELATIONS}, "mean")
    compiled = torch.compile(model, backend=HectorBackend())
    _assert_matches(model, compiled, _features(SIZES, widths), _edges(RELATIONS, SIZES))
    _assert_routed("hetero-sage")


@pytest.mark.parametrize("graph_aggr", ["add", "mean", "max"])
def test_graphconv(graph_aggr: str) -> None:
    """``GraphConv``: ``lin_rel`` of the aggregate plus ``lin_root`` of the destination."""
    _check(lambda e: GraphConv(6, 5, aggr=graph_aggr), "hetero-sage")


# -- fallbacks ------------------------------------------------------------------------------


_SAME_TYPE = [("paper", "cites", "paper"), ("author", "knows", "author")]


@pytest.mark.parametrize(
    ("make", "aggr", "reason", "relations"),
    [
        (
            lambda e: GATConv(6, 4, add_self_loops=False, aggr="mean" if e[0] == e[2] else "add"),
            "sum",
            "differ in aggr",
            RELATIONS[:3],
        ),
        (
            lambda e: GATConv(6, 4, add_self_loops=False, aggr="max"),
            "sum",
            "aggr='max'",
            _SAME_TYPE,
        ),
        (lambda e: SAGEConv(6, 4, normalize=True), "sum", "normalize", RELATIONS[:3]),
        (lambda e: GATConv(6, 4, add_self_loops=False), "std", "aggr='std'", RELATIONS[:3]),
        (
            lambda e: (
                GATConv(6, 4, add_self_loops=False)
                if e[0] == e[2]
                else SAGEConv(6, 4, normalize=True)
            ),
            "sum",
            "SAGEConv relations: SAGEConv(normalize=True)",
            RELATIONS[:3],
        ),
        (lambda e: GCNConv(6, 4, aggr="mean"), "sum", "GCNConv(aggr='mean')", _SAME_TYPE),
    ],
)
def test_unsupported_runs_pygs_forward_with_reason(
    make: Any, aggr: str, reason: str, relations: list[Any]
) -> None:
    """What the programs do not compute runs PyG's forward, matching, the reason kept."""
    torch.manual_seed(0)
    model = HeteroConv({e: make(e) for e in relations}, aggr=aggr)
    compiled = torch.compile(model, backend=HectorBackend())
    sizes = {"paper": 11, "author": 11}
    _assert_matches(model, compiled, _features(sizes, WIDTHS), _edges(relations, sizes))
    assert reason in pyg_route.FALLBACKS["HeteroConv"]


# -- MLPerf's model with trim_to_layer -------------------------------------------------------

_HOP_NODES = {"paper": [4, 6, 10], "author": [2, 5, 8]}
_HOP_RELATIONS = RELATIONS[:3]
_HOP_EDGES = dict(zip(_HOP_RELATIONS, ([6, 12], [5, 9], [4, 7]), strict=True))


def _hop_batch() -> tuple[dict[str, torch.Tensor], dict[Any, torch.Tensor]]:
    """A sampled batch in hop order: the edges of hop ``h`` end in nodes of hops ``≤ h`` and
    start in nodes of hops ``≤ h + 1`` (as PyG's ``NeighborLoader`` numbers them)."""
    gen = torch.Generator().manual_seed(5)
    x = {t: torch.randn(sum(n), 6, generator=gen) for t, n in _HOP_NODES.items()}
    ei = {}
    for (s, r, d), counts in _HOP_EDGES.items():
        parts = []
        for hop, c in enumerate(counts):
            src = torch.randint(sum(_HOP_NODES[s][: hop + 2]), (c,), generator=gen)
            dst = torch.randint(sum(_HOP_NODES[d][: hop + 1]), (c,), generator=gen)
            parts.append(torch.stack([src, dst]))
        ei[(s, r, d)] = torch.cat(parts, dim=1)
    return x, ei


def test_mlperf_model_with_trim_to_layer() -> None:
    """MLPerf's ``rgnn.py`` with ``trim_to_layer`` between layers: each layer one program on
    the trimmed batch. The last layer's relations into ``author`` feed no loss: PyG leaves
    their parameters without gradient, the one program gives them zeros."""
    from torch_geometric.utils import trim_to_layer

    class Rgnn(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.convs = torch.nn.ModuleList(
                HeteroConv({e: GATConv(6, 3, heads=2, add_self_loops=False) for e in RELATIONS})
                for _ in range(2)
            )

        def forward(self, x: Any, ei: Any) -> Any:
            for i, conv in enumerate(self.convs):
                x, ei, _ = trim_to_layer(i, _HOP_NODES, _HOP_EDGES, x, ei)
                x = {t: v.relu() for t, v in conv(x, ei).items()}
            return {"paper": x["paper"]}

    torch.manual_seed(0)
    model = Rgnn()
    x, ei = _hop_batch()
    compiled = torch.compile(model, backend=HectorBackend())
    _, got, got_g = _run(model, compiled, x, ei)
    _, want, want_g = _run(model, model, x, ei)
    assert (got[0] - want[0]).abs().max().item() <= TOL
    unused = 0
    for a, b in zip(got_g, want_g, strict=True):
        if b is None:
            unused += 1
            assert a is None or not a.any()
        else:
            assert (a - b).abs().max().item() <= TOL
    # both layers' ("author", "affiliated", "institute") convs (no edges in the batch: never
    # called), the last layer's ("paper", "rev_writes", "author") conv: 4 parameters each
    assert unused == 12
    _assert_routed("hetero-gat")
    assert pyg_route.STATS["hetero-gat:0.2:dst"].calls == 2


def test_relations_named_underscore_are_left_out_as_pyg_does() -> None:
    """Edge types named as in PyG's ``test_to_hetero_and_rgcn_equal_output``
    (``("paper", "_", "author")``): PyG's ``ModuleDict`` gives them back from ``keys()`` as
    ``("paper", "", "_author")`` and ``HeteroConv.forward`` leaves them out; the program does
    too (the other relations still run as one program)."""
    relations = [("paper", "cites", "paper"), ("paper", "_", "author"), ("author", "_", "paper")]
    torch.manual_seed(0)
    model = HeteroConv({e: GraphConv(6, 5) for e in relations})
    assert ("paper", "", "_author") in list(model.convs.keys())  # PyG's spelling, not the call's
    sizes = {"paper": 11, "author": 7}
    x, ei = _features(sizes, WIDTHS), _edges(relations, sizes)
    assert list(model(x, ei)) == ["paper"]
    _assert_matches(model, torch.compile(model, backend=HectorBackend()), x, ei)
    _assert_routed("hetero-sage")
