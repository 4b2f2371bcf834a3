"""Tests of hector.data.graph: HeteroGraph construction, validation and random graphs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from test_datasets import capped_memory

from hector.data.graph import GRAPH_ARRAYS, HeteroGraph, random_graph
from hector.data.limits import ResourceLimitError, memory_limit


def _small_graph() -> HeteroGraph:
    """A hand-built graph: 4 nodes, 6 edges, 3 edge types (type 1 empty)."""
    edge_index = torch.tensor([[0, 1, 2, 3, 0, 2], [1, 1, 1, 0, 1, 3]])
    edge_type = torch.tensor([2, 0, 2, 0, 2, 0])
    return HeteroGraph.from_edge_index(edge_index, edge_type, num_etypes=3)


def _reference_rgcn_mean(
    x: torch.Tensor,
    weight: torch.Tensor,
    edge_index: torch.Tensor,
    edge_type: torch.Tensor,
    num_nodes: int,
) -> torch.Tensor:
    """out[i] = sum_r mean_{j in N_r(i)} x[j] @ W[r], computed relation by relation."""
    out = torch.zeros(num_nodes, weight.shape[2], dtype=x.dtype)
    for r in range(weight.shape[0]):
        mask = edge_type == r
        src, dst = edge_index[0, mask], edge_index[1, mask]
        summed = torch.zeros(num_nodes, x.shape[1], dtype=x.dtype).index_add_(0, dst, x[src])
        count = torch.bincount(dst, minlength=num_nodes).clamp(min=1).unsqueeze(1)
        out += (summed / count) @ weight[r]
    return out


# --------------------------------------------------------------------------- construction


def test_small_graph_sorted_arrays() -> None:
    g = _small_graph()
    assert (g.num_nodes, g.num_edges, g.num_etypes, g.num_ntypes) == (4, 6, 3, 1)
    # Stable sort by type: type 0 -> original edges 1, 3, 5; type 2 -> 0, 2, 4.
    assert g.perm.tolist() == [1, 3, 5, 0, 2, 4]
    assert g.src.tolist() == [1, 3, 2, 0, 2, 0]
    assert g.dst.tolist() == [1, 0, 3, 1, 1, 1]
    assert g.etype.tolist() == [0, 0, 0, 2, 2, 2]
    assert g.etype_ptr.tolist() == [0, 3, 3, 6]
    assert g.ntype.tolist() == [0, 0, 0, 0]
    # Node 1 receives one type-0 edge and three type-2 edges (in-degree 4).
    assert g.norm_dst_etype.flatten().tolist() == pytest.approx([1, 1, 1, 1 / 3, 1 / 3, 1 / 3])
    assert g.norm_dst.flatten().tolist() == pytest.approx([1 / 4, 1, 1, 1 / 4, 1 / 4, 1 / 4])


def test_arrays_order_dtypes_and_layout() -> None:
    g = random_graph(50, 400, 4, num_ntypes=3, seed=3)
    assert GRAPH_ARRAYS == (
        "src",
        "dst",
        "etype",
        "ntype",
        "etype_ptr",
        "norm_dst_etype",
        "norm_dst",
        "compact_src",
        "compact_etype",
        "edge_compact",
        "etype_src_ntype",
        "dst_compact_dst",
        "dst_compact_etype",
        "edge_dst_compact",
    )
    arrays = g.arrays()
    assert len(arrays) == len(GRAPH_ARRAYS)
    for name, array in zip(GRAPH_ARRAYS, arrays, strict=True):
        assert array is getattr(g, name)
        assert array.device.type == "cpu"
        assert array.is_contiguous()
    dtypes = [a.dtype for a in arrays]
    assert dtypes == [torch.int32] * 5 + [torch.float32] * 2 + [torch.int32] * 7
    shapes = [tuple(a.shape) for a in arrays]
    c, d = g.num_compact, g.num_dst_compact
    assert shapes == [
        (400,), (400,), (400,), (50,), (5,), (400, 1), (400, 1), (c,), (c,), (400,), (4,),
        (d,), (d,), (400,),
    ]  # fmt: skip
    assert g.perm.dtype == torch.int64
    assert tuple(g.perm.shape) == (400,)


def test_perm_maps_sorted_edges_to_original_edges() -> None:
    gen = torch.Generator().manual_seed(7)
    edge_index = torch.randint(0, 30, (2, 500), generator=gen)
    edge_type = torch.randint(0, 6, (500,), generator=gen)
    g = HeteroGraph.from_edge_index(edge_index, edge_type)
    perm = g.perm
    assert torch.equal(g.src.long(), edge_index[0, perm])
    assert torch.equal(g.dst.long(), edge_index[1, perm])
    assert torch.equal(g.etype.long(), edge_type[perm])
    assert torch.equal(perm, torch.argsort(edge_type, stable=True))
    # Sorted by type, and each type's slice is where etype_ptr says.
    assert bool((g.etype[1:] >= g.etype[:-1]).all())
    counts = torch.bincount(edge_type, minlength=6)
    assert g.etype_ptr.tolist() == [0, *torch.cumsum(counts, 0).tolist()]
    # inverse_perm: where each original edge went.
    assert torch.equal(g.perm[g.inverse_perm], torch.arange(500))
    assert torch.equal(g.src[g.inverse_perm].long(), edge_index[0])


def test_grouped_by_destination_orders_each_types_edges_by_destination() -> None:
    gen = torch.Generator().manual_seed(8)
    edge_index = torch.randint(0, 30, (2, 500), generator=gen)
    edge_type = torch.randint(0, 6, (500,), generator=gen)
    node_type = torch.randint(0, 2, (30,), generator=gen)
    g = HeteroGraph.from_edge_index(edge_index, edge_type, node_type=node_type)
    grouped = g.grouped_by_destination()
    # Sorted by (type, destination), stably: equal pairs keep the input order.
    key = edge_type * 30 + edge_index[1]
    assert torch.equal(grouped.perm, torch.sort(key, stable=True).indices)
    perm = grouped.perm
    assert torch.equal(grouped.src.long(), edge_index[0, perm])
    assert torch.equal(grouped.dst.long(), edge_index[1, perm])
    assert torch.equal(grouped.etype.long(), edge_type[perm])
    assert torch.equal(grouped.etype_ptr, g.etype_ptr)
    assert torch.equal(grouped.ntype, g.ntype)
    assert grouped.num_ntypes == g.num_ntypes
    # The per-edge normalisers travel with their edges.
    back = g.inverse_perm[perm]  # each grouped edge's position in g
    assert torch.equal(grouped.norm_dst_etype, g.norm_dst_etype[back])
    assert torch.equal(grouped.norm_dst, g.norm_dst[back])
    # The (destination, type) rows an edge reduces into now come in order, and are the same pairs.
    assert bool((grouped.edge_dst_compact[1:] >= grouped.edge_dst_compact[:-1]).all())
    assert torch.equal(grouped.dst_compact_dst, g.dst_compact_dst)
    assert torch.equal(grouped.dst_compact_etype, g.dst_compact_etype)
    assert grouped.grouped_by_destination() is grouped  # already grouped: itself


def test_grouped_by_destination_keeps_the_rgcn_mean() -> None:
    gen = torch.Generator().manual_seed(9)
    edge_index = torch.randint(0, 25, (2, 400), generator=gen)
    edge_type = torch.randint(0, 4, (400,), generator=gen)
    x, weight = torch.randn(25, 5, generator=gen), torch.randn(4, 5, 3, generator=gen)
    grouped = HeteroGraph.from_edge_index(edge_index, edge_type).grouped_by_destination()
    ei, et = grouped.edge_index_sorted()
    msg = torch.einsum("ef,efo->eo", x[ei[0]], weight[et]) * grouped.norm_dst_etype
    got = torch.zeros(25, 3).index_add_(0, ei[1], msg)
    want = _reference_rgcn_mean(x, weight, edge_index, edge_type, 25)
    assert torch.allclose(got, want, atol=1e-5)


def test_an_empty_graph_grouped_by_destination_is_itself() -> None:
    g = HeteroGraph.from_edge_index(torch.zeros(2, 0, dtype=torch.long), torch.zeros(0).long())
    assert g.grouped_by_destination() is g


def test_edge_index_sorted() -> None:
    g = _small_graph()
    edge_index, edge_type = g.edge_index_sorted()
    assert edge_index.dtype == torch.int64
    assert edge_type.dtype == torch.int64
    assert edge_index.tolist() == [g.src.tolist(), g.dst.tolist()]
    assert edge_type.tolist() == g.etype.tolist()


def test_inferred_sizes() -> None:
    g = HeteroGraph.from_edge_index(torch.tensor([[0, 4], [2, 1]]), torch.tensor([0, 2]))
    assert (g.num_nodes, g.num_etypes, g.num_ntypes) == (5, 3, 1)
    g = HeteroGraph.from_edge_index(
        torch.tensor([[0], [1]]), torch.tensor([0]), node_type=torch.tensor([0, 3, 1, 1, 0, 2])
    )
    assert (g.num_nodes, g.num_ntypes) == (6, 4)
    assert g.ntype.tolist() == [0, 3, 1, 1, 0, 2]


def test_explicit_sizes_allow_unused_nodes_and_types() -> None:
    g = HeteroGraph.from_edge_index(
        torch.tensor([[0], [1]], dtype=torch.int32),
        torch.tensor([1], dtype=torch.int16),
        num_nodes=10,
        num_etypes=5,
        num_ntypes=2,
    )
    assert g.schema() == (5, 2)
    assert g.etype_ptr.tolist() == [0, 0, 1, 1, 1, 1]
    assert g.ntype.tolist() == [0] * 10


def test_empty_graph() -> None:
    g = HeteroGraph.from_edge_index(
        torch.empty(2, 0, dtype=torch.int64), torch.empty(0, dtype=torch.int64)
    )
    assert (g.num_nodes, g.num_edges, g.num_etypes) == (0, 0, 0)
    assert g.etype_ptr.tolist() == [0]
    assert tuple(g.norm_dst_etype.shape) == (0, 1)


def test_inputs_are_not_aliased() -> None:
    edge_index = torch.tensor([[0, 1], [1, 0]], dtype=torch.int32)
    edge_type = torch.tensor([0, 0], dtype=torch.int32)
    node_type = torch.tensor([0, 1], dtype=torch.int32)
    g = HeteroGraph.from_edge_index(edge_index, edge_type, node_type=node_type)
    edge_index.fill_(5)
    edge_type.fill_(5)
    node_type.fill_(5)
    assert g.src.tolist() == [0, 1]
    assert g.etype.tolist() == [0, 0]
    assert g.ntype.tolist() == [0, 1]


def test_numpy_inputs_are_accepted() -> None:
    g = HeteroGraph.from_edge_index(np.array([[0, 1], [1, 2]]), np.array([1, 0]))
    assert g.etype.tolist() == [0, 1]


def test_schema_and_repr() -> None:
    g = random_graph(20, 60, 3, num_ntypes=2, seed=1)
    assert g.schema() == (3, 2)
    assert hash(g.schema()) == hash((3, 2))
    assert repr(g) == "HeteroGraph(num_nodes=20, num_edges=60, num_etypes=3, num_ntypes=2)"


# --------------------------------------------------------------------------- validation

EI = torch.tensor([[0, 1, 2], [1, 2, 0]])
ET = torch.tensor([0, 1, 0])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(edge_index=EI.float()), r"edge_index must have an integer dtype, got torch\.float32"),
        (dict(edge_index=EI.bool()), r"edge_index must have an integer dtype"),
        (dict(edge_type=ET.double()), r"edge_type must have an integer dtype, got torch\.float64"),
        (dict(edge_index=[[0, 1], [1, 0]]), r"edge_index must be a torch\.Tensor"),
        (dict(edge_index=EI.t()), r"edge_index must have shape \[2, E\], got \[3, 2\]"),
        (dict(edge_index=EI[0]), r"edge_index must have shape \[2, E\], got \[3\]"),
        (dict(edge_index=torch.zeros(3, 3, dtype=torch.long)), r"shape \[2, E\]"),
        (dict(edge_type=ET[:2]), r"edge_type has 2 entries but edge_index has 3 edges"),
        (dict(edge_type=ET.view(3, 1)), r"edge_type must have shape \[E\]"),
        (dict(num_nodes=-1), r"num_nodes must be >= 0, got -1"),
        (dict(num_nodes=2.5), r"num_nodes must be an int"),
        # Edges are checked in order: edge 1's destination (2) fails before edge 2's source.
        (dict(num_nodes=2), r"edge_index\[1\]\[1\] = 2 is out of range for num_nodes=2"),
        (
            dict(edge_index=torch.tensor([[0, 1, 2], [1, 7, 0]]), num_nodes=3),
            r"edge_index\[1\]\[1\] = 7 is out of range for num_nodes=3",
        ),
        (
            dict(edge_index=torch.tensor([[0, -4, 2], [1, 2, 0]])),
            r"edge_index\[0\]\[1\] = -4 is out of range",
        ),
        (dict(edge_type=torch.tensor([0, -2, 0])), r"edge_type\[1\] = -2 is negative"),
        (
            dict(edge_type=torch.tensor([0, 1, 5]), num_etypes=2),
            r"edge_type\[2\] = 5 is out of range for num_etypes=2",
        ),
        (dict(num_etypes=-1), r"num_etypes must be >= 0, got -1"),
        (
            dict(node_type=torch.tensor([0, 1])),
            r"edge_index\[1\]\[1\] = 2 is out of range for num_nodes=2",
        ),
        (
            dict(node_type=torch.tensor([0, 1]), num_nodes=3),
            r"node_type has 2 entries but num_nodes=3",
        ),
        (dict(node_type=torch.tensor([0.0, 1.0, 0.0])), r"node_type must have an integer dtype"),
        (dict(node_type=torch.zeros(3, 1, dtype=torch.long)), r"node_type must have shape \[N\]"),
        (
            dict(node_type=torch.tensor([0, 2, 1]), num_ntypes=2),
            r"node_type\[1\] = 2 is out of range for num_ntypes=2",
        ),
        (dict(node_type=torch.tensor([0, 0, -1])), r"node_type\[2\] = -1 is negative"),
        (dict(num_ntypes=-3), r"num_ntypes must be >= 0, got -3"),
        (dict(num_ntypes=0), r"num_ntypes must be >= 1 for a graph with 3 nodes"),
        (dict(num_nodes=2**31), r"num_nodes = 2147483648 does not fit in int32"),
    ],
)
def test_from_edge_index_rejects_bad_input(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = dict(edge_index=EI, edge_type=ET)
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        HeteroGraph.from_edge_index(**args)


def test_huge_node_ids_are_range_checked() -> None:
    edge_index = torch.tensor([[0, 2**40], [1, 0]])
    with pytest.raises(ValueError, match=r"edge_index\[0\]\[1\] = 1099511627776 is out of range"):
        HeteroGraph.from_edge_index(edge_index, torch.tensor([0, 0]), num_nodes=3)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(num_nodes=2**31 - 1),
        dict(num_etypes=2**31 - 1),
        dict(
            node_type=torch.zeros(3, dtype=torch.long), num_ntypes=1, num_nodes=3, num_etypes=10**8
        ),
    ],
)
def test_sizes_over_the_memory_limit_are_rejected_before_allocating(
    monkeypatch, kwargs: dict[str, Any]
) -> None:
    # Issue 18: counts were checked against int32 only; 2**31 - 1 nodes allocated ~40 GB.
    monkeypatch.setenv("HECTOR_MEMORY_LIMIT", "1G")
    with (
        capped_memory(),
        pytest.raises(
            ResourceLimitError,
            match=r"HeteroGraph\.from_edge_index: .* over the limit of 1 GiB \(HECTOR_MEMORY_LIMIT",
        ),
    ):
        HeteroGraph.from_edge_index(EI, ET, **kwargs)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((2**31 - 1, 10, 2), "random_graph: 2147483647 nodes, 10 edges and 2 edge types need"),
        ((10, 2**31 - 1, 2), "random_graph: 10 nodes, 2147483647 edges"),
        ((10, 10, 2**31 - 1), "random_graph: 10 nodes, 10 edges and 2147483647 edge types"),
    ],
)
def test_random_graph_sizes_are_checked_before_generating(
    monkeypatch, args: tuple[int, int, int], match: str
) -> None:
    monkeypatch.setenv("HECTOR_MEMORY_LIMIT", "1G")
    with capped_memory(), pytest.raises(ResourceLimitError, match=match):
        random_graph(*args)


def test_memory_limit_sources(monkeypatch) -> None:
    monkeypatch.setenv("HECTOR_MEMORY_LIMIT", "8G")
    assert memory_limit() == (8 * 2**30, "HECTOR_MEMORY_LIMIT")
    monkeypatch.setenv("HECTOR_MEMORY_LIMIT", "1234")
    assert memory_limit() == (1234, "HECTOR_MEMORY_LIMIT")
    monkeypatch.setenv("HECTOR_MEMORY_LIMIT", "lots")
    with pytest.raises(ValueError, match="HECTOR_MEMORY_LIMIT must be a byte count"):
        memory_limit()
    monkeypatch.delenv("HECTOR_MEMORY_LIMIT")
    limit, source = memory_limit()
    assert 0 < limit < 2**63 - 1
    assert source in ("available memory", "cgroup")


# --------------------------------------------------------------------------- random graphs


def test_random_graph_sizes_and_ranges() -> None:
    g = random_graph(300, 5000, 9, num_ntypes=4, seed=11)
    assert (g.num_nodes, g.num_edges, g.num_etypes, g.num_ntypes) == (300, 5000, 9, 4)
    for t in (g.src, g.dst):
        assert int(t.min()) >= 0
        assert int(t.max()) < 300
    assert int(g.ntype.min()) >= 0
    assert int(g.ntype.max()) < 4


def test_random_graph_is_deterministic() -> None:
    a = random_graph(100, 1000, 5, num_ntypes=2, seed=5)
    b = random_graph(100, 1000, 5, num_ntypes=2, seed=5)
    c = random_graph(100, 1000, 5, num_ntypes=2, seed=6)
    for x, y in zip(a.arrays(), b.arrays(), strict=True):
        assert torch.equal(x, y)
    assert torch.equal(a.perm, b.perm)
    assert not torch.equal(a.src, c.src)


def test_random_graph_empty_etypes_have_no_edges() -> None:
    empty = (0, 3, 7)
    g = random_graph(200, 4000, 8, empty_etypes=empty, seed=2)
    counts = (g.etype_ptr[1:] - g.etype_ptr[:-1]).tolist()
    for r in range(8):
        if r in empty:
            assert counts[r] == 0
        else:
            assert counts[r] > 0  # 4000 edges over 5 types: every other type gets some
    assert not bool(torch.isin(g.etype, torch.tensor(empty, dtype=torch.int32)).any())


def test_random_graph_isolated_nodes_have_no_edges() -> None:
    g = random_graph(100, 3000, 3, isolated_nodes=15, seed=4)
    assert int(g.src.max()) < 85
    assert int(g.dst.max()) < 85
    degree = torch.bincount(torch.cat([g.src, g.dst]).long(), minlength=100)
    assert bool((degree[85:] == 0).all())
    assert bool((degree[:85] > 0).any())


def test_random_graph_degree_is_skewed() -> None:
    g = random_graph(1000, 20000, 4, seed=0)
    out_degree = torch.bincount(g.src.long(), minlength=1000).float()
    assert float(out_degree.max()) > 10 * float(out_degree.mean())


def test_random_graph_edge_cases() -> None:
    g = random_graph(10, 0, 2)
    assert g.num_edges == 0
    assert g.etype_ptr.tolist() == [0, 0, 0]
    g = random_graph(10, 10, 2, isolated_nodes=9, seed=0)
    assert g.src.tolist() == [0] * 10
    assert g.dst.tolist() == [0] * 10


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((10, 5, 2), dict(empty_etypes=(0, 1)), "every edge type is empty"),
        ((10, 5, 2), dict(isolated_nodes=10), "every node is isolated"),
        ((10, 5, 2), dict(isolated_nodes=11), "isolated_nodes=11 exceeds num_nodes=10"),
        ((10, 5, 2), dict(empty_etypes=(2,)), "empty_etypes entry 2 is out of range"),
        ((10, 5, 2), dict(num_ntypes=0), "num_ntypes must be >= 1"),
        ((-1, 5, 2), {}, "num_nodes must be >= 0"),
        ((10, 5, 2), dict(seed=2**70), r"seed must be an int in \[0, 2\*\*63\)"),
        ((10, 5, 2), dict(seed=-1), "seed must be an int"),
        ((10, 5, 2), dict(empty_etypes=(-1,)), "empty_etypes entry must be >= 0"),
    ],
)
def test_random_graph_rejects_bad_arguments(
    args: tuple[int, int, int], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        random_graph(*args, **kwargs)


# --------------------------------------------------------------------------- norm semantics


def test_norm_dst_etype_is_per_relation_mean() -> None:
    """sum_e norm_dst_etype[e] * x[src] @ W[etype] scattered to dst == RGCN mean per relation."""
    g = random_graph(60, 900, 5, empty_etypes=(2,), isolated_nodes=4, seed=9)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(60, 8, generator=gen, dtype=torch.float64)
    weight = torch.randn(5, 8, 3, generator=gen, dtype=torch.float64)
    src, dst, etype = g.src.long(), g.dst.long(), g.etype.long()
    msg = torch.bmm(x[src].unsqueeze(1), weight[etype]).squeeze(1) * g.norm_dst_etype.double()
    out = torch.zeros(60, 3, dtype=torch.float64).index_add_(0, dst, msg)
    edge_index, edge_type = g.edge_index_sorted()
    expected = _reference_rgcn_mean(x, weight, edge_index, edge_type, 60)
    torch.testing.assert_close(out, expected)


def test_norm_dst_is_mean_over_all_in_edges() -> None:
    g = random_graph(40, 500, 3, isolated_nodes=2, seed=8)
    x = torch.randn(40, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    src, dst = g.src.long(), g.dst.long()
    out = torch.zeros(40, 4, dtype=torch.float64).index_add_(0, dst, x[src] * g.norm_dst.double())
    summed = torch.zeros(40, 4, dtype=torch.float64).index_add_(0, dst, x[src])
    degree = torch.bincount(dst, minlength=40).clamp(min=1).unsqueeze(1)
    torch.testing.assert_close(out, summed / degree)


def test_norm_dst_etype_matches_pyg_rgcnconv_mean() -> None:
    from torch_geometric import nn as pyg_nn

    g = random_graph(80, 1500, 6, empty_etypes=(4,), isolated_nodes=5, seed=12)
    torch.manual_seed(0)
    conv = pyg_nn.RGCNConv(7, 5, num_relations=6, aggr="mean", root_weight=False, bias=False)
    x = torch.randn(80, 7)
    edge_index, edge_type = g.edge_index_sorted()
    expected = conv(x, edge_index, edge_type)
    src, dst, etype = g.src.long(), g.dst.long(), g.etype.long()
    msg = torch.bmm(x[src].unsqueeze(1), conv.weight[etype]).squeeze(1) * g.norm_dst_etype
    out = torch.zeros(80, 5).index_add_(0, dst, msg)
    torch.testing.assert_close(out, expected.detach(), rtol=1e-4, atol=1e-5)


def test_compaction_map_is_the_unique_source_etype_pairs() -> None:
    """Compact rows are exactly the distinct (source, edge type) pairs, and every edge points
    to the row of its own pair."""
    g = random_graph(30, 300, 3, seed=4)
    pairs = torch.stack([g.compact_src, g.compact_etype], 1)
    assert len({tuple(p) for p in pairs.tolist()}) == g.num_compact  # no duplicates
    want = {tuple(p) for p in torch.stack([g.src, g.etype], 1).tolist()}
    assert {tuple(p) for p in pairs.tolist()} == want
    ec = g.edge_compact.long()
    assert torch.equal(g.compact_src[ec], g.src)
    assert torch.equal(g.compact_etype[ec], g.etype)
    assert g.compaction_ratio == g.num_compact / g.num_edges < 1.0


def test_etype_src_ntype_and_src_typed() -> None:
    """Each relation's source node type; src_typed only when no relation mixes source types
    (an empty relation reads type 0 and does not count as mixed)."""
    node_type = torch.tensor([0, 0, 1, 1, 2])
    # relation 0: sources 0, 1 (type 0); relation 1: empty; relation 2: source 4 (type 2)
    edge_index = torch.tensor([[0, 1, 4, 1], [2, 3, 0, 4]])
    edge_type = torch.tensor([0, 0, 2, 0])
    g = HeteroGraph.from_edge_index(edge_index, edge_type, node_type=node_type, num_etypes=3)
    assert g.etype_src_ntype.tolist() == [0, 0, 2]
    assert g.etype_src_ntype.dtype == torch.int32
    assert g.src_typed
    mixed = HeteroGraph.from_edge_index(
        torch.tensor([[0, 2], [1, 3]]), torch.tensor([0, 0]), node_type=node_type[:4]
    )
    assert not mixed.src_typed
    assert mixed.etype_src_ntype.tolist() == [0]
