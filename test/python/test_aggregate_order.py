"""Aggregation order of linear messages (``hector-aggregation-order``): both orders give PyG's
RGCNConv outputs and every gradient; the cost model's choice follows the graph."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.nn import RGCNConv

import hector
from hector.frontends import compiled as frontend
from hector.models import RGCNLayer
from hector.passes import aggregate_order

ORDERS = ("transform-first", "aggregate-first")
ATOL, RTOL = 1e-4, 1e-5


def _close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """``max|actual - expected| <= ATOL + RTOL * max|expected|`` (float32 sums over hubs)."""
    scale = expected.detach().abs().max().item() if expected.numel() else 0.0
    torch.testing.assert_close(actual.detach(), expected.detach(), rtol=0, atol=ATOL + RTOL * scale)


def _knowledge_graph(seed: int = 0) -> hector.HeteroGraph:
    """Few entities, many triples per (entity, relation): D/E well below 1, an empty relation
    and isolated entities."""
    gen = torch.Generator().manual_seed(seed)
    n, e, r = 40, 2000, 5
    src = torch.randint(0, n - 4, (e,), generator=gen)
    dst = torch.randint(0, n - 4, (e,), generator=gen)
    et = torch.randint(0, r - 1, (e,), generator=gen)  # relation r - 1 has no edges
    return hector.HeteroGraph.from_edge_index(
        torch.stack([src, dst]), et, num_nodes=n, num_etypes=r
    )


GRAPHS = {
    "knowledge": _knowledge_graph,
    "sparse": lambda: hector.random_graph(300, 900, 6, empty_etypes=(2,), isolated_nodes=10),
}


def test_dst_pairs_follow_the_layout_contract() -> None:
    g = _knowledge_graph()
    pairs = torch.stack([g.dst_compact_etype.long(), g.dst_compact_dst.long()], 1)
    unique = torch.unique(torch.stack([g.etype.long(), g.dst.long()], 1), dim=0)
    assert torch.equal(pairs, unique)  # every pair once, sorted by (edge type, destination)
    owner = g.edge_dst_compact.long()
    assert torch.equal(g.dst_compact_dst[owner], g.dst)
    assert torch.equal(g.dst_compact_etype[owner], g.etype)
    assert g.num_dst_compact == len(unique) < g.num_edges
    assert g.dst_compaction_ratio == pytest.approx(len(unique) / g.num_edges)
    for name in ("dst_compact_dst", "dst_compact_etype", "edge_dst_compact"):
        assert getattr(g, name).dtype == torch.int32
        assert getattr(g, name).is_contiguous()
    empty = hector.HeteroGraph.from_edge_index(
        torch.empty(2, 0, dtype=torch.long), torch.empty(0, dtype=torch.long), num_nodes=3
    )
    assert empty.num_dst_compact == 0
    assert empty.dst_compaction_ratio == 1.0


@pytest.mark.parametrize("graph", sorted(GRAPHS))
@pytest.mark.parametrize("order", ORDERS)
def test_rgcn_matches_pyg_in_both_orders(graph: str, order: str) -> None:
    """Output, input gradient and the gradients of weight, root and bias."""
    torch.manual_seed(0)
    g = GRAPHS[graph]()
    conv = RGCNConv(12, 7, g.num_etypes, aggr="mean")
    torch.nn.init.normal_(conv.bias)
    layer = RGCNLayer.from_pyg(conv).optimize()  # its own compiled core: set its order
    layer.compiled.order = order
    ei, et = g.edge_index_sorted()
    x1 = torch.randn(g.num_nodes, 12, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    want = conv(x1, ei, et)
    have = layer(g, x2)
    _close(have, want)
    upstream = torch.randn_like(want)
    (want * upstream).sum().backward()
    (have * upstream).sum().backward()
    _close(x2.grad, x1.grad)
    for name in ("weight", "root", "bias"):
        _close(getattr(layer, name).grad, getattr(conv, name).grad)
    fn = layer.compiled
    chosen = "aggregate-first" in fn.ir("intra", g, x2, layer.weight, layer.root, layer.bias)
    assert chosen == (order == "aggregate-first")


def _attention_messages(g, x, w, a):  # type: ignore[no-untyped-def]
    """A message scaled by a learned per-edge factor (its gradient flows through the scale)."""
    return g.sum_to_dst(g.typed_linear(g.gather_src(x), w) * a)


@pytest.mark.parametrize("order", ORDERS)
def test_weighted_messages_and_the_scale_gradient(order: str) -> None:
    """The general form: any per-edge factor, whose gradient aggregate-first computes from
    the rows before the product."""
    torch.manual_seed(1)
    g = _knowledge_graph(2)
    fn = frontend.compile(_attention_messages, order=order)
    x = torch.randn(g.num_nodes, 6, requires_grad=True)
    w = torch.randn(g.num_etypes, 6, 5, requires_grad=True)
    a = torch.rand(g.num_edges, 1, requires_grad=True)
    out = fn(g, x, w, a)
    src, dst, et = (t.long() for t in (g.src, g.dst, g.etype))
    xr, wr, ar = (t.detach().double().requires_grad_(True) for t in (x, w, a))
    msg = torch.einsum("ek,ekn->en", xr[src], wr[et]) * ar
    ref = torch.zeros(g.num_nodes, 5, dtype=torch.float64).index_add(0, dst, msg)
    _close(out, ref.float())
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    (ref * upstream.double()).sum().backward()
    for mine, theirs in ((x, xr), (w, wr), (a, ar)):
        _close(mine.grad, theirs.grad.float())
    assert ("aggregate-first" in fn.ir("intra", g, x, w, a)) == (order == "aggregate-first")


@pytest.fixture
def two_threads():  # type: ignore[no-untyped-def]
    """The cost model counts one partial block per worker: fix the worker count."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.mark.usefixtures("two_threads")
def test_auto_picks_by_the_graph() -> None:
    """The cost model aggregates first on a dense knowledge graph (D/E = 0.01) and transforms
    first on a sparse one (D/E ~ 0.8), for the same layer."""
    conv = RGCNConv(64, 64, 5, aggr="mean")
    layer = RGCNLayer.from_pyg(conv)
    dense = hector.random_graph(40, 20000, 5, seed=0)
    sparse = hector.random_graph(2000, 2500, 5, seed=1)
    assert dense.dst_compaction_ratio < 0.02 < 0.8 < sparse.dst_compaction_ratio
    for g, want in ((dense, "aggregate-first"), (sparse, "transform-first")):
        x = torch.randn(g.num_nodes, 64)
        w = (layer.weight[: g.num_etypes].detach(), layer.root.detach(), layer.bias.detach())
        intra = layer.compiled.ir("intra", g, x, *w)
        assert f'hector.aggregation_order = ["{want}"]' in intra


def test_cost_model_is_monotone_in_the_ratio() -> None:
    """Fewer pairs per edge never makes aggregate-first lose; training (two backward GEMMs
    per edge to save) raises the ratio up to which it wins."""
    for k, n in ((64, 64), (16, 128), (4, 4)):
        for training in (False, True):
            picks = [aggregate_order.choose(r / 20, k, n, training=training) for r in range(0, 21)]
            first_tf = picks.index("transform-first") if "transform-first" in picks else 21
            assert all(p == "aggregate-first" for p in picks[:first_tf])
            assert all(p == "transform-first" for p in picks[first_tf:])
        assert aggregate_order.choose(1.0, k, n) == "transform-first"  # D = E: nothing saved
        assert aggregate_order.choose(1.0, k, n, training=True) == "transform-first"
        assert aggregate_order.choose(0.05, k, n, training=True) == "aggregate-first"

        assert aggregate_order.choose(-1.0, k, n) == "transform-first"  # unknown graph
    # Each worker's partial block of the pairs costs: more workers, a lower ratio to win.
    few = aggregate_order.choose(0.5, 64, 64, training=True, threads=2)
    many = aggregate_order.choose(0.5, 64, 64, training=True, threads=64)
    assert (few, many) == ("aggregate-first", "transform-first")
    wide = [aggregate_order.choose(r / 100, 64, 64) for r in range(101)]
    trained = [aggregate_order.choose(r / 100, 64, 64, training=True) for r in range(101)]
    assert wide.count("aggregate-first") < trained.count("aggregate-first")


def test_unknown_order_is_refused() -> None:
    with pytest.raises(ValueError, match="order must be one of auto, transform-first"):
        frontend.compile(_attention_messages, order="sideways")


@pytest.mark.usefixtures("two_threads")
def test_one_kernel_per_decision() -> None:
    """Graphs whose D/E leads the cost model to the same orders share a kernel; a graph that
    flips the choice gets its own."""
    layer = RGCNLayer(64, 64, 5).optimize()
    fn = layer.compiled
    w = (layer.weight.detach(), layer.root.detach(), layer.bias.detach())

    def kernel(g: hector.HeteroGraph):  # type: ignore[no-untyped-def]
        return fn.compile_for(g, torch.randn(g.num_nodes, 64), *w)

    dense_a = hector.random_graph(40, 20000, 5, seed=0)
    dense_b = hector.random_graph(60, 20000, 5, seed=1)
    sparse = hector.random_graph(3000, 3000, 5, seed=2)
    assert dense_a.dst_compaction_ratio != dense_b.dst_compaction_ratio
    assert kernel(dense_a) is kernel(dense_b)
    assert kernel(sparse) is not kernel(dense_a)
    assert fn.compilations == 2


@pytest.mark.parametrize("order", ORDERS)
def test_bench_rows_carry_the_order(order: str) -> None:
    """``hector bench gnn`` reads each layer's choice off the compiled forward function."""
    from hector_bench import gnn

    g = _knowledge_graph()
    layer = RGCNLayer(8, 8, g.num_etypes).optimize()
    layer.compiled.order = order
    assert gnn.aggregation_order(layer) is None  # nothing compiled yet
    with torch.no_grad():
        layer(g, torch.randn(g.num_nodes, 8))
    assert gnn.aggregation_order(layer) == [order]
