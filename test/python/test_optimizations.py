"""Every combination of compact materialization, linear reordering and fusion computes the same
outputs and gradients as the unoptimized program (within 1e-4), for the three models; and each
optimization changes the program the way it should (kernel count, compact rows)."""

from __future__ import annotations

import itertools

import pytest
import torch

import hector
from hector.models import HGTLayer, RGATLayer, RGCNLayer

N, E, R = 50, 400, 4
COMBOS = list(itertools.product([False, True], repeat=3))


@pytest.fixture(scope="module")
def g() -> hector.HeteroGraph:
    # Repeated (source, edge type) pairs so compaction has something to share.
    return hector.random_graph(N, E, R, num_ntypes=2, isolated_nodes=2, seed=5)


def _layer(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if name == "rgcn":
        return RGCNLayer(6, 6, R)
    if name == "rgat":
        return RGATLayer(6, 4, R, heads=2)
    etypes = [("a", f"r{i}", "a" if i % 2 else "b") for i in range(R)]
    return HGTLayer(6, 6, ["a", "b"], etypes, heads=2)


def _run(layer: torch.nn.Module, g: hector.HeteroGraph, x: torch.Tensor, hgt: bool):
    layer.zero_grad()
    xi = x.clone().requires_grad_()
    inp = {"a": xi[: _count(g, 0)], "b": xi[_count(g, 0) :]} if hgt else xi
    out = layer(g, inp)
    out = torch.cat([out[k] for k in sorted(out)]) if hgt else out
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    grads = {n: p.grad.clone() for n, p in layer.named_parameters()}
    return out.detach(), xi.grad, grads


def _assert_same(got: tuple, ref: tuple, label: str) -> None:
    """Outputs, input gradients and every parameter gradient within 1e-4."""
    torch.testing.assert_close(got[0], ref[0], atol=1e-4, rtol=1e-4, msg=label)
    torch.testing.assert_close(got[1], ref[1], atol=1e-4, rtol=1e-4, msg=label)
    for p in ref[2]:
        torch.testing.assert_close(got[2][p], ref[2][p], atol=1e-4, rtol=1e-4, msg=label)


def _count(g: hector.HeteroGraph, t: int) -> int:
    return int((g.ntype == t).sum())


@pytest.mark.parametrize("name", ["rgcn", "rgat", "hgt"])
def test_all_combinations_agree(g: hector.HeteroGraph, name: str) -> None:
    hgt = name == "hgt"
    graph = g
    if hgt:  # HGT numbers nodes by type: sort node ids so type 0 comes first
        order = torch.argsort(g.ntype, stable=True)
        inv = torch.empty_like(order)
        inv[order] = torch.arange(N)
        ei, et = g.edge_index_sorted()
        graph = hector.HeteroGraph.from_edge_index(
            inv[ei.long()],
            et.long(),
            node_type=g.ntype[order],
            num_etypes=R,
        )
    x = torch.randn(N, 6)
    layer = _layer(name)
    ref = _run(layer.optimize(False, False, False), graph, x, hgt)
    for compact, reorder, fuse in COMBOS[1:]:
        got = _run(layer.optimize(compact, reorder, fuse), graph, x, hgt)
        _assert_same(got, ref, f"{name} C={compact} R={reorder} F={fuse}")


def _templates(layer: torch.nn.Module, g: hector.HeteroGraph, *args: torch.Tensor) -> int:
    text = layer.compiled.compile_for(g, *args).ir("intra")
    return text.count("hector_intra.gemm_template") + text.count("hector_intra.traversal_template")


def test_fusion_reduces_kernels_and_compaction_uses_compact_rows(g: hector.HeteroGraph) -> None:
    layer = _layer("rgat")
    args = (torch.randn(N, 6), layer.weight, layer.q, layer.k, layer.bias)
    unfused = _templates(layer.optimize(False, False, False), g, *args)
    fused = _templates(layer.optimize(False, False, True), g, *args)
    assert fused < unfused
    text = layer.optimize(True, False, False).compiled.compile_for(g, *args).ir("compact")
    assert "hector_inter.compact_gather_src" in text
    reordered = layer.optimize(False, True, False).compiled.compile_for(g, *args).ir("reorder")
    assert "hector_inter.weight_product" in reordered


def test_compaction_skipped_when_it_would_not_pay() -> None:
    """A graph where every edge has its own (source, edge type) pair: ratio 1, no compaction."""
    src = torch.arange(30)
    g = hector.HeteroGraph.from_edge_index(
        torch.stack([src, (src + 1) % 30]), torch.zeros(30, dtype=torch.long)
    )
    assert g.compaction_ratio == 1.0
    layer = RGATLayer(4, 4, 1)
    args = (torch.randn(30, 4), layer.weight, layer.q, layer.k, layer.bias)
    staged = layer.compiled.compile_for(g, *args).staged
    assert "compact_gather_src" not in staged.ir("compact")


def _src_typed_graph() -> hector.HeteroGraph:
    """Two node types (a: 0..29, b: 30..49); relation r draws its sources from one type."""
    gen = torch.Generator().manual_seed(11)
    etype = torch.randint(0, R, (E,), generator=gen)
    a_src = torch.randint(0, 30, (E,), generator=gen)
    b_src = torch.randint(30, N, (E,), generator=gen)
    src = torch.where(etype % 2 == 1, a_src, b_src)  # r odd: sources of type a, else b
    dst = torch.randint(0, N, (E,), generator=gen)
    node_type = (torch.arange(N) >= 30).long()
    return hector.HeteroGraph.from_edge_index(
        torch.stack([src, dst]), etype, node_type=node_type, num_etypes=R
    )


def test_hgt_chained_fold_matches_unoptimized() -> None:
    """On a graph whose relations each have one source type, reorder folds HGT's node-typed
    K/V projections into per-relation weights; outputs and every gradient are unchanged."""
    graph = _src_typed_graph()
    assert graph.src_typed
    x = torch.randn(N, 6)
    layer = _layer("hgt")
    ref = _run(layer.optimize(False, False, False), graph, x, True)
    for compact, reorder, fuse in [(False, True, False), (True, True, True)]:
        got = _run(layer.optimize(compact, reorder, fuse), graph, x, True)
        _assert_same(got, ref, f"hgt C={compact} R={reorder} F={fuse}")
    entry = next(iter(layer.compiled._cache.values()))
    inter = entry.ir("fuse")
    forward = inter.split("_train(")[0]
    assert forward.count('"hector_inter.etype_src_weight"') == 4  # K, V: weights and biases
    assert forward.count('slice = "ntype"') == 2  # only Q and the output projection remain


def test_hgt_fold_needs_src_typed_graph(g: hector.HeteroGraph) -> None:
    """A graph whose relations mix source node types must not be folded."""
    assert not g.src_typed
    layer = _layer("hgt")
    order = torch.argsort(g.ntype, stable=True)
    inv = torch.empty_like(order)
    inv[order] = torch.arange(N)
    ei, et = g.edge_index_sorted()
    graph = hector.HeteroGraph.from_edge_index(
        inv[ei.long()], et.long(), node_type=g.ntype[order], num_etypes=R
    )
    assert not graph.src_typed
    _run(layer, graph, torch.randn(N, 6), True)
    entry = next(iter(layer.compiled._cache.values()))
    assert "etype_src_weight" not in entry.ir("fuse")
