"""Every hector_inter operator, forward and backward, against PyTorch eager (and PyG's
softmax) on generated graphs: values within 1e-4 and gradients through ``hector-autodiff``
within 1e-4 (relative to the gradient's scale)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch_geometric.utils import softmax as pyg_softmax

import hector
from hector import random_graph
from hector.dialects.hector_inter import UNARY_FUNCTIONS

N, E, R, T = 40, 260, 5, 3


@pytest.fixture(scope="module")
def g() -> hector.HeteroGraph:
    # An empty edge type and isolated nodes: the corners where reductions see no rows.
    return random_graph(N, E, R, num_ntypes=T, empty_etypes=(2,), isolated_nodes=3, seed=7)


def _idx(g: hector.HeteroGraph) -> tuple[torch.Tensor, ...]:
    return g.src.long(), g.dst.long(), g.etype.long(), g.ntype.long()


def _sum(index: torch.Tensor, rows: torch.Tensor, n: int) -> torch.Tensor:
    return torch.zeros(n, rows.shape[1]).index_add(0, index, rows)


def _check(
    g: hector.HeteroGraph,
    compiled: Callable,
    eager: Callable,
    shapes: list[tuple[int, ...]],
    seed: int = 0,
    positive: tuple[int, ...] = (),
) -> None:
    """Compare outputs and gradients of every input for a random linear loss."""
    torch.manual_seed(seed)
    inputs = []
    for i, s in enumerate(shapes):
        t = torch.randn(*s)
        if i in positive:
            t = t.abs() + 0.1
        inputs.append(t)
    mine = [t.clone().requires_grad_() for t in inputs]
    ref = [t.clone().requires_grad_() for t in inputs]
    out = compiled(g, *mine)
    want = eager(g, *ref)
    outs = out if isinstance(out, tuple) else (out,)
    wants = want if isinstance(want, tuple) else (want,)
    loss_w = [torch.randn_like(w) for w in wants]
    for o, w in zip(outs, wants, strict=True):
        torch.testing.assert_close(o, w.detach(), atol=1e-4, rtol=1e-4)
    sum((o * lw).sum() for o, lw in zip(outs, loss_w, strict=True)).backward()
    sum((w * lw).sum() for w, lw in zip(wants, loss_w, strict=True)).backward()
    for k, (a, b) in enumerate(zip(mine, ref, strict=True)):
        assert a.grad is not None, f"input #{k} got no gradient"
        # assert_close's atol + rtol, rtol taken of the largest reference value: summed
        # gradients round in proportion to their size.
        tol = 1e-4 + 1e-5 * b.grad.abs().max().item()
        torch.testing.assert_close(
            a.grad, b.grad, rtol=0, atol=tol, msg=lambda m, k=k: f"input #{k} gradient: {m}"
        )


def test_gathers_and_sums(g: hector.HeteroGraph) -> None:
    @hector.compile
    def f(g, x):
        return g.sum_to_src(g.gather_dst(x)) + g.sum_to_dst(g.gather_src(x))

    def eager(g, x):
        src, dst, _, _ = _idx(g)
        return _sum(src, x[dst], N) + _sum(dst, x[src], N)

    _check(g, f, eager, [(N, 6)])


@pytest.mark.parametrize("slice_", ["etype", "none"])
def test_typed_linear_on_edges(g: hector.HeteroGraph, slice_: str) -> None:
    @hector.compile
    def f(g, x, w):
        return g.sum_to_dst(g.typed_linear(g.gather_src(x), w, slice=slice_))

    def eager(g, x, w):
        src, dst, et, _ = _idx(g)
        m = torch.bmm(x[src].unsqueeze(1), w[et]).squeeze(1) if slice_ == "etype" else x[src] @ w
        return _sum(dst, m, N)

    wshape = (R, 6, 5) if slice_ == "etype" else (6, 5)
    _check(g, f, eager, [(N, 6), wshape])


def test_typed_linear_by_node_type_and_typed_bias(g: hector.HeteroGraph) -> None:
    @hector.compile
    def f(g, x, w, b):
        return g.typed_bias(g.typed_linear(x, w, slice="ntype"), b)

    def eager(g, x, w, b):
        nt = g.ntype.long()
        return torch.bmm(x.unsqueeze(1), w[nt]).squeeze(1) + b[nt]

    _check(g, f, eager, [(N, 6), (T, 6, 4), (T, 4)])


def test_typed_bias_on_edges_and_shared_bias(g: hector.HeteroGraph) -> None:
    @hector.compile
    def f(g, x, be, b):
        return g.sum_to_dst(g.typed_bias(g.gather_src(x), be)) + b

    def eager(g, x, be, b):
        src, dst, et, _ = _idx(g)
        return _sum(dst, x[src] + be[et], N) + b

    _check(g, f, eager, [(N, 4), (R, 4), (4,)])


@pytest.mark.parametrize("fn", [f.name for f in UNARY_FUNCTIONS if f.name != "copy"])
def test_unary(g: hector.HeteroGraph, fn: str) -> None:
    """Every unary function the dialect declares, forward and gradient, against torch's."""

    def body(g, x):
        if fn == "leaky_relu":
            return x.leaky_relu(0.2)
        if fn == "neg":
            return -x
        return getattr(x, fn)()

    special = {
        "leaky_relu": lambda x: torch.nn.functional.leaky_relu(x, 0.2),
        "neg": torch.neg,
        "shift_positive": lambda x: torch.where(x > 0, x + 1, x),
    }
    eager = special.get(fn) or getattr(torch.nn.functional, fn, None) or getattr(torch, fn)
    f = hector.compile(body)
    _check(g, f, lambda g, x: eager(x), [(N, 7)], seed=3)


def test_dot_scale_softmax_attention(g: hector.HeteroGraph) -> None:
    """HGT-style attention: per-head dot products, edge softmax, per-head weighted sum."""
    heads = 2

    @hector.compile
    def f(g, q, k, v):
        logits = g.dot(g.gather_dst(q), g.gather_src(k), heads=heads)
        alpha = g.edge_softmax(logits.leaky_relu(0.2))
        return g.sum_to_dst(g.gather_src(v) * alpha)

    def eager(g, q, k, v):
        src, dst, _, _ = _idx(g)
        logits = (q[dst] * k[src]).view(-1, heads, 4).sum(-1)
        alpha = pyg_softmax(torch.nn.functional.leaky_relu(logits, 0.2), dst, num_nodes=N)
        msg = (v[src].view(-1, heads, 3) * alpha.unsqueeze(-1)).view(-1, heads * 3)
        return _sum(dst, msg, N)

    _check(g, f, eager, [(N, 8), (N, 8), (N, 6)], seed=5)


def test_within_relation_softmax(g: hector.HeteroGraph) -> None:
    """``edge_softmax(by="dst_etype")``: one softmax per (destination, edge type) pair, as
    RGAT's within-relation attention (PyG's softmax per relation's edges)."""

    @hector.compile
    def f(g, x, v):
        alpha = g.edge_softmax(g.gather_src(x), by="dst_etype")
        return g.sum_to_dst(g.gather_src(v) * alpha)

    def eager(g, x, v):
        src, dst, et, _ = _idx(g)
        alpha = pyg_softmax(x[src], dst * R + et, num_nodes=N * R)
        msg = (v[src].view(-1, 2, 3) * alpha.unsqueeze(-1)).view(-1, 6)
        return _sum(dst, msg, N)

    _check(g, f, eager, [(N, 2), (N, 6)], seed=11)


@pytest.mark.parametrize("by", ["dst", "dst_etype"])
def test_max_aggregation(g: hector.HeteroGraph, by: str) -> None:
    """``sum_to_dst(edge_max(m) * degree_norm)``: each node's elementwise maximum over its
    incoming edges (of each type with ``"dst_etype"``, summed over types), zero without edges,
    as PyTorch's ``scatter_reduce(..., "amax", include_self=False)``. Rows gathered twice by
    one node are ties, whose gradient is split evenly, as PyTorch splits it."""

    @hector.compile
    def f(g, x):
        return g.sum_to_dst(g.edge_max(g.gather_src(x), by=by) * g.degree_norm(by))

    def eager(g, x):
        src, dst, et, _ = _idx(g)
        group = dst if by == "dst" else dst * R + et
        rows = x[src]
        index = group.view(-1, 1).expand_as(rows)
        top = rows.new_zeros(N * R, rows.shape[1]).scatter_reduce(
            0, index, rows, "amax", include_self=False
        )
        return top.view(N, -1, rows.shape[1]).sum(1) if by == "dst_etype" else top[:N]

    src, dst = g.src.long(), g.dst.long()
    pairs = dst * N + src
    assert pairs.unique().numel() < pairs.numel()  # repeated (source, destination): ties
    _check(g, f, eager, [(N, 6)], seed=13)


def test_edge_softmax_rejects_an_unknown_grouping(g: hector.HeteroGraph) -> None:
    @hector.compile
    def f(g, x):
        return g.edge_softmax(g.gather_src(x), by="src")

    with pytest.raises(hector.TraceError, match="by must be 'dst' or 'dst_etype'"):
        f(g, torch.randn(N, 2))


def test_edge_softmax_is_stable_for_large_logits(g: hector.HeteroGraph) -> None:
    @hector.compile
    def f(g, x):
        return g.edge_softmax(g.gather_src(x))

    x = torch.randn(N, 2) * 200  # exp would overflow without the max subtraction
    out = f(g, x)
    want = pyg_softmax(x[g.src.long()], g.dst.long(), num_nodes=N)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-4)


def test_weight_used_twice_gets_summed_gradient(g: hector.HeteroGraph) -> None:
    """RGAT projects both endpoints with one W_r: the two partial gradients must add up."""

    @hector.compile
    def f(g, x, w):
        hs = g.typed_linear(g.gather_src(x), w)
        hd = g.typed_linear(g.gather_dst(x), w)
        return g.sum_to_dst(hs + hd)

    def eager(g, x, w):
        src, dst, et, _ = _idx(g)
        hs = torch.bmm(x[src].unsqueeze(1), w[et]).squeeze(1)
        hd = torch.bmm(x[dst].unsqueeze(1), w[et]).squeeze(1)
        return _sum(dst, hs + hd, N)

    _check(g, f, eager, [(N, 5), (R, 5, 3)])


def test_backward_ir_reuses_forward_values(g: hector.HeteroGraph) -> None:
    """The backward program re-emits gathers/degree norms instead of saving them, and saves
    the softmax output it needs."""

    def f(g, x, w):
        m = g.typed_linear(g.gather_src(x), w)
        return g.sum_to_dst(m * g.edge_softmax(g.dot(m, m)))

    f = hector.compile(f, compact=False)

    x = torch.randn(N, 4, requires_grad=True)
    w = torch.randn(R, 4, 4, requires_grad=True)
    f(g, x, w).sum().backward()
    entry = f.compile_for(g, x, w, train=True)
    ir_text = entry.ir("autodiff")
    backward = ir_text[ir_text.index("@f_backward") :]
    assert "hector_inter.edge_softmax_grad" in backward
    assert "hector_inter.gather_src" in backward  # re-emitted, then fused
    assert entry.staged.abi["f_train"].num_saved == 2  # m and the softmax output


def test_compact_backward_saves_compact_rows(g: hector.HeteroGraph) -> None:
    """With compact materialization the saved projection has one row per (source, edge type)
    pair, and the backward program re-reads it through the compaction map."""

    def f(g, x, w):
        m = g.typed_linear(g.gather_src(x), w)
        return g.sum_to_dst(m * g.edge_softmax(g.dot(m, m)))

    compiled = hector.compile(f)
    _check(g, compiled, lambda g, x, w: _eager_self_attention(g, x, w), [(N, 4), (R, 4, 4)])
    x = torch.randn(N, 4, requires_grad=True)
    w = torch.randn(R, 4, 4, requires_grad=True)
    entry = compiled.compile_for(g, x, w, train=True)
    abi = entry.staged.abi["f_train"]
    assert "compact" in abi.result_kinds[1:]  # a saved value is compact
    backward = entry.ir("autodiff")[entry.ir("autodiff").index("@f_backward") :]
    assert "hector_inter.expand_compact" in backward
    assert "hector_inter.sum_to_compact" in backward


def _eager_self_attention(g: hector.HeteroGraph, x: torch.Tensor, w: torch.Tensor):
    src, dst, et, _ = _idx(g)
    m = torch.bmm(x[src].unsqueeze(1), w[et]).squeeze(1)
    alpha = pyg_softmax((m * m).sum(-1, keepdim=True), dst, num_nodes=N)
    return _sum(dst, m * alpha, N)


def test_backward_without_relational_ops(g: hector.HeteroGraph) -> None:
    """``a + b`` has a backward program that only returns ``dy`` twice: it must still compile."""

    @hector.compile
    def f(g, a, b):
        return a + b

    _check(g, f, lambda g, a, b: a + b, [(N, 4), (N, 4)])
