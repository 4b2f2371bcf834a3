"""The RGCN backward with hector-pair-gradient-gemms: each input-gradient GEMM (``xwt``) lowered
with the weight-gradient GEMM (``xty``) that reads the same gradient rows, from one packed tile
of them. Its gradients match eager PyTorch, and are the same bits as the two templates lowered
apart."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import torch

import hector
from hector.frontends.graph_api import GraphProxy, Value
from hector.lowering import pipelines

# Relation 2 gets few edges: its (destination, relation) rows form runs shorter than a packed
# tile, which both products take row by row.
GRAPH = dict(num_nodes=300, num_edges=4000, num_etypes=5, empty_etypes=(4,), isolated_nodes=9)
ATOL, RTOL = 1e-4, 1e-5


def _layer(g: GraphProxy, x: Value, weight: Value, root: Value, bias: Value) -> Value:
    """RGCN (mean per node and relation, root weight, bias), as ``hector.models``."""
    msg = g.typed_linear(g.gather_src(x), weight)
    agg = g.sum_to_dst(msg * g.degree_norm("dst_etype"))
    return agg + g.linear(x, root) + bias


def _eager(
    g: hector.HeteroGraph, x: torch.Tensor, w: torch.Tensor, root: torch.Tensor, b: torch.Tensor
) -> torch.Tensor:
    """The same layer in eager PyTorch."""
    (src, dst), et = g.edge_index_sorted()
    r = w.shape[0]
    key = dst * r + et
    count = torch.zeros(g.num_nodes * r).index_add_(0, key, torch.ones(len(key)))
    msg = torch.bmm(x[src].unsqueeze(1), w[et]).squeeze(1) / count[key].unsqueeze(1)
    agg = torch.zeros(g.num_nodes, w.shape[2]).index_add_(0, dst, msg)
    return agg + x @ root + b


def _step(fn: object, g: hector.HeteroGraph, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Output and gradients of ``sum(out * c)`` for a fixed, non-uniform ``c``."""
    leaves = [t.detach().clone().requires_grad_() for t in tensors]
    out = fn(g, *leaves)  # type: ignore[operator]
    c = torch.linspace(-1.0, 2.0, out.numel()).reshape(out.shape)
    (out * c).sum().backward()
    return [out.detach()] + [t.grad for t in leaves]  # type: ignore[misc]


@pytest.fixture
def two_threads() -> Iterator[None]:
    """Two workers, so the pair's tiles are spread over them (the schedule's ``threads``)."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def _inputs() -> tuple[hector.HeteroGraph, list[torch.Tensor]]:
    torch.manual_seed(0)
    g = hector.random_graph(**GRAPH, seed=5)
    k, n, r = 16, 32, GRAPH["num_etypes"]
    tensors = [torch.randn(g.num_nodes, k), torch.randn(r, k, n), torch.randn(k, n), torch.randn(n)]
    return g, tensors


def _backward_templates(fn: object, g: hector.HeteroGraph, tensors: list[torch.Tensor]) -> int:
    """How many outlined template functions the backward has (a pair is one)."""
    entry = fn.compile_for(g, *tensors, train=True)  # type: ignore[attr-defined]
    names = re.findall(r"func\.func private @\w*_backward_template\d+\(", entry.ir("loops"))
    return len(set(names))


@pytest.mark.parametrize(("order", "pairs"), [("aggregate-first", 2), ("transform-first", 1)])
def test_paired_backward_matches_eager_pytorch(two_threads: None, order: str, pairs: int) -> None:
    """Aggregate-first: the root weight's pair and the per-(destination, relation) pair;
    transform-first: the root weight's (the per-edge input gradient scatters onto sources and
    stays alone)."""
    g, tensors = _inputs()
    fn = hector.compile(_layer, order=order)
    got = _step(fn, g, tensors)
    want = _step(lambda g, *t: _eager(g, *t), g, tensors)
    for a, e in zip(got, want, strict=True):
        scale = e.abs().max().item()
        torch.testing.assert_close(a, e, rtol=0, atol=ATOL + RTOL * scale)
    unpaired = {"aggregate-first": 6, "transform-first": 5}[order]
    assert _backward_templates(fn, g, tensors) == unpaired - pairs


def test_pairs_change_no_bit(two_threads: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every product is computed as the templates compute it apart: the same bits."""
    g, tensors = _inputs()
    paired = _step(hector.compile(_layer, order="aggregate-first"), g, tensors)
    intra, schedule, _loops, llvm = pipelines.TARGET_STAGES["cpu"]
    lower = "hector-outline-templates, convert-hector-intra-to-scf"  # no pairing
    apart = pipelines.Stage("loops", "templates apart", lambda _p: lower)
    monkeypatch.setitem(pipelines.TARGET_STAGES, "cpu", (intra, schedule, apart, llvm))
    monkeypatch.setenv("HECTOR_COMPILE_CACHE", "0")
    fn = hector.compile(_layer, order="aggregate-first")
    alone = _step(fn, g, tensors)
    assert _backward_templates(fn, g, tensors) == 6
    for a, b in zip(paired, alone, strict=True):
        assert torch.equal(a, b)
