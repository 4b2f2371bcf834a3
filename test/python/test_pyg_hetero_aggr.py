"""Cross-relation aggregations other than a sum or mean, and ``GCNConv`` per relation, in the
``HeteroConv`` and ``to_hetero`` routes (``hector.dynamo.pyg_hetero``, ``pyg_to_hetero``;
issue 54 items 1-2).

Every case runs the same module eagerly and compiled and compares the outputs and the gradients
of every parameter and node type's features within 1e-5 (``test_pyg_hetero_route``'s and
``test_pyg_to_hetero``'s checks), on bipartite graphs and batches without some relations, and
checks that Hector's program ran forward and backward without a fallback. Ties of ``max`` are
made exact (two relations with equal weights and edges) so that which relation takes the
gradient is PyG's choice.
"""

from __future__ import annotations

from typing import Any

import pytest
import test_pyg_to_hetero as hetero_model
import torch
from test_pyg_hetero_route import (
    RELATIONS,
    SIZES,
    TOL,
    WIDTHS,
    _assert_matches,
    _assert_routed,
    _check,
    _edges,
    _features,
    _run,
)
from test_pyg_route_configs import _fresh_dynamo  # noqa: F401  (autouse: Dynamo reset per test)
from torch_geometric.nn import (
    GAT,
    GATConv,
    GCNConv,
    GraphConv,
    GraphSAGE,
    HeteroConv,
    SAGEConv,
    to_hetero,
)

from hector.dynamo import pyg_route
from hector.dynamo.backend import HectorBackend

# -- HeteroConv(aggr=...) -------------------------------------------------------------------


@pytest.mark.parametrize("aggr", ["max", "min", "cat", None, "prod"])
def test_sage_across_relations(aggr: str | None) -> None:
    """``SAGEConv`` (root weight: each relation's destination copy reads its features)."""
    _check(lambda e: SAGEConv(6, 5), "hetero-sage", aggr)  # type: ignore[arg-type]


@pytest.mark.parametrize("aggr", ["max", "cat"])
def test_gat_averaged_heads_across_relations(aggr: str) -> None:
    """Averaged heads: each relation's mean plus its own bias, before the reduction."""
    _check(lambda e: GATConv(6, 3, heads=2, concat=False, add_self_loops=False), "hetero-gat", aggr)


def test_graphconv_min() -> None:
    _check(lambda e: GraphConv(6, 5, aggr="max"), "hetero-sage", "min")


def _tied(make: Any) -> tuple[dict[Any, Any], dict[str, Any], dict[Any, torch.Tensor]]:
    """Two relations into ``paper`` with equal convs and edges (their outputs tie exactly),
    one from ``author``."""
    torch.manual_seed(0)
    relations = [("paper", "cites", "paper"), ("paper", "cites_too", "paper"), RELATIONS[1]]
    convs = {e: make() for e in relations}
    convs[relations[1]].load_state_dict(convs[relations[0]].state_dict())
    sizes = {"paper": 11, "author": 7}
    ei = _edges(relations, sizes)
    ei[relations[1]] = ei[relations[0]].clone()
    return convs, _features(sizes, WIDTHS), ei


@pytest.mark.parametrize("aggr", ["max", "min"])
def test_ties_take_pygs_gradient(aggr: str) -> None:
    """Exactly tied relations: the gradient goes where ``torch.max(dim=0)`` sends it in PyG."""
    convs, x, ei = _tied(lambda: SAGEConv(6, 4))
    model = HeteroConv(convs, aggr=aggr)
    _assert_matches(model, torch.compile(model, backend=HectorBackend()), x, ei)
    _assert_routed("hetero-sage")


# -- GCNConv in HeteroConv ------------------------------------------------------------------

_SAME = [
    ("paper", "cites", "paper"),
    ("paper", "rev_cites", "paper"),
    ("author", "knows", "author"),
]
_SAME_SIZES = {"paper": 11, "author": 7}


def _loopy_edges(seed: int = 1) -> dict[Any, torch.Tensor]:
    """Edges with self-loops (two on node 0 of ``paper``) and a node without edges."""
    ei = _edges(_SAME, _SAME_SIZES, seed=seed)
    first = ei[_SAME[0]]
    first[1, :3] = first[0, :3]
    first[:, 3:5] = first[0, 0]
    ei[_SAME[2]] = ei[_SAME[2]].clamp(max=5)  # author 6: no edges
    return ei


@pytest.mark.parametrize(
    "options",
    [{}, {"improved": True}, {"add_self_loops": False}, {"normalize": False}, {"bias": False}],
)
@pytest.mark.parametrize("weighted", [False, True])
def test_gcn_options(options: dict[str, Any], weighted: bool) -> None:
    """PyG's ``gcn_norm``: self-loops (existing ones' weights kept), ``improved``, none,
    unnormalised; with and without ``edge_weight_dict`` (its weights' gradients compared)."""
    torch.manual_seed(0)
    model = HeteroConv({e: GCNConv(6, 4, **options) for e in _SAME})
    ei = _loopy_edges()
    x = _features(_SAME_SIZES, WIDTHS)
    compiled = torch.compile(model, backend=HectorBackend())
    if not weighted:
        _assert_matches(model, compiled, x, ei)
        _assert_routed("hetero-gcn")
        return
    gen = torch.Generator().manual_seed(3)
    weights = {e: torch.rand(v.shape[1], generator=gen) for e, v in ei.items()}
    _assert_matches(model, compiled, x, ei, edge_weight_dict=weights)
    grads = []
    for fn in (compiled, model):
        w = {e: v.clone().requires_grad_() for e, v in weights.items()}
        out = fn(x, ei, edge_weight_dict=w)
        torch.stack([o.square().sum() for o in out.values()]).sum().backward()
        grads.append([w[e].grad for e in _SAME])
    for a, b in zip(*grads, strict=True):  # 1/sqrt(degree) makes some large: relative
        torch.testing.assert_close(a, b, rtol=TOL, atol=TOL)
    _assert_routed("hetero-gcn")


def test_gcn_cached_and_missing_relation() -> None:
    """``cached=True`` after an eager call (the cache's edges), a batch without a relation."""
    torch.manual_seed(0)
    model = HeteroConv({e: GCNConv(6, 4, cached=True) for e in _SAME}, aggr="max")
    x, ei = _features(_SAME_SIZES, WIDTHS), _loopy_edges()
    model(x, ei)
    compiled = torch.compile(model, backend=HectorBackend())
    _assert_matches(model, compiled, x, ei)
    _assert_routed("hetero-gcn")
    del ei[_SAME[1]]
    model_fresh = HeteroConv({e: GCNConv(6, 4) for e in _SAME}, aggr="sum")
    _assert_matches(model_fresh, torch.compile(model_fresh, backend=HectorBackend()), x, ei)
    _assert_routed("hetero-gcn")


def test_gcn_between_two_node_types_fails_as_in_pyg() -> None:
    """PyG's ``GCNConv`` takes one node set: compiled, the call fails as eagerly, and the
    reason is kept."""
    model = HeteroConv({RELATIONS[1]: GCNConv(6, 4, add_self_loops=False)})
    x, ei = _features(SIZES, WIDTHS), _edges([RELATIONS[1]], SIZES)
    with pytest.raises(ValueError, match="bipartite"):
        model(x, ei)
    with pytest.raises(Exception, match="bipartite"):
        torch.compile(model, backend=HectorBackend())(x, ei)
    assert "two node types" in pyg_route.FALLBACKS["HeteroConv"]


@pytest.mark.parametrize("gcn", [False, True])
def test_batch_sizes_share_one_compilation(gcn: bool) -> None:
    """``aggr="max"`` under ``dynamic=True`` (``SAGEConv``; ``GCNConv`` with edge weights, its
    ``gcn_norm`` in symbolic shapes): other batch sizes without recompiling."""
    torch.manual_seed(0)
    relations = _SAME if gcn else RELATIONS
    model = HeteroConv({e: GCNConv(6, 4) if gcn else SAGEConv(6, 4) for e in relations}, "max")
    backend = HectorBackend()
    compiled = torch.compile(model, backend=backend, dynamic=True)
    for scale, per in ((1, 15), (2, 31), (3, 40)):
        sizes = {t: n * scale for t, n in SIZES.items()}
        x = _features(sizes, WIDTHS, seed=scale)
        ei = _edges(relations, sizes, per=per, seed=scale)
        kw = {"edge_weight_dict": {e: torch.rand(v.shape[1]) for e, v in ei.items()}} if gcn else {}
        _assert_matches(model, compiled, x, ei, **kw)
    assert backend.stats()["compilations"] == 1
    _assert_routed("hetero-gcn" if gcn else "hetero-sage")


def test_edge_weights_to_graphconv_are_declined() -> None:
    """``GraphConv`` reads edge weights; its program does not: PyG's forward, with the reason."""
    torch.manual_seed(0)
    model = HeteroConv({e: GraphConv(6, 4) for e in _SAME})
    ei = _edges(_SAME, _SAME_SIZES)
    weights = {e: torch.rand(v.shape[1]) for e, v in ei.items()}
    compiled = torch.compile(model, backend=HectorBackend())
    _assert_matches(model, compiled, _features(_SAME_SIZES, WIDTHS), ei, edge_weight_dict=weights)
    assert "edge_weight_dict given to GraphConv" in pyg_route.FALLBACKS["HeteroConv"]


# -- to_hetero(aggr=...) and GCNConv in to_hetero -------------------------------------------


@pytest.mark.parametrize("aggr", ["max", "min", "mul"])
def test_to_hetero_graphsage(aggr: str) -> None:
    torch.manual_seed(0)
    model = hetero_model._hetero(GraphSAGE((-1, -1), 8, num_layers=2), aggr)
    hetero_model._compiled_matches(model, "hetero-sage", 2)


def test_to_hetero_gat_max() -> None:
    torch.manual_seed(0)
    gat = GAT((-1, -1), 8, num_layers=2, heads=2, add_self_loops=False)
    model = hetero_model._hetero(gat, "max")
    hetero_model._compiled_matches(model, "hetero-gat", 2)


class _Gcn(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = GCNConv(6, 8)
        self.conv2 = GCNConv(8, 4, improved=True)

    def forward(self, x: Any, edge_index: Any, edge_weight: Any) -> Any:
        x = self.conv1(x, edge_index, edge_weight=edge_weight).relu()
        return self.conv2(x, edge_index, edge_weight=edge_weight)


@pytest.mark.parametrize("aggr", ["sum", "mean", "max"])
def test_to_hetero_gcn_with_edge_weight(aggr: str) -> None:
    """A user's GCN stack, ``edge_weight`` by keyword: each layer one ``hetero-gcn`` program."""
    torch.manual_seed(0)
    model = to_hetero(_Gcn(), (list(_SAME_SIZES), _SAME), aggr=aggr)
    x, ei = _features(_SAME_SIZES, WIDTHS), _loopy_edges()
    weights = {e: torch.rand(v.shape[1]) for e, v in ei.items()}
    backend = HectorBackend()
    compiled = torch.compile(model, backend=backend)
    got = _run(model, lambda x, ei: compiled(x, ei, weights), x, ei)
    want = _run(model, lambda x, ei: model(x, ei, weights), x, ei)
    assert got[0] == want[0]
    for a, b in zip([*got[1], *got[2]], [*want[1], *want[2]], strict=True):
        assert (a - b).abs().max().item() <= TOL
    assert not [k for k in pyg_route.FALLBACKS if "to_hetero" in k], pyg_route.FALLBACKS
    assert len([n for n in backend.graphs[0].layers if n == "hetero-gcn"]) == 2
    assert pyg_route.STATS["hetero-gcn"].backward_calls > 0
