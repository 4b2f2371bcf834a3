"""Narrow ``xw`` GEMM rows as dot products in vector lanes (``lowering/cpu/narrow_rows.py``):
outputs of fewer than 8 columns against PyTorch, shared and per-relation weights, f32 and f16
rows, gathered and scattered rows, one and two workers, and their gradients."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import hector

ROWS, EDGES, RELATIONS = 300, 4000, 5


@pytest.fixture
def threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("k", "n", "dtype", "workers"),
    [(64, 4, torch.float32, 2), (1024, 1, torch.float32, 1), (32, 7, torch.float16, 2)],
)
def test_narrow_products_match_torch(
    threads: None, k: int, n: int, dtype: torch.dtype, workers: int
) -> None:
    """Per-relation weights on gathered rows (the per-edge destination term of an attention
    layer), a shared weight on rows in place, and a sum onto destinations (an accumulating
    epilogue): PyTorch's products within f32 rounding of a K-term sum."""
    torch.set_num_threads(workers)
    g = hector.random_graph(ROWS, EDGES, RELATIONS, seed=3)
    gen = torch.Generator().manual_seed(k + n)
    x = torch.randn(ROWS, k, generator=gen).to(dtype)
    w = torch.randn(RELATIONS, k, n, generator=gen)
    shared_w = torch.randn(k, n, generator=gen)

    @hector.compile
    def per_relation(g, x, w):
        return g.typed_linear(g.gather_dst(x), w, slice="etype")

    @hector.compile
    def shared(g, x, w):
        return g.typed_linear(x, w, slice="none")

    @hector.compile
    def summed(g, x, w):
        return g.sum_to_dst(g.typed_linear(g.gather_src(x), w, slice="etype"))

    xf = x.float()
    src, dst, et = g.src.long(), g.dst.long(), g.etype.long()
    per_edge = torch.bmm(xf[dst].unsqueeze(1), w[et]).squeeze(1)
    tol = {"rtol": 1e-4, "atol": 1e-4 * k**0.5}
    with torch.no_grad():
        torch.testing.assert_close(per_relation(g, x, w), per_edge, **tol)
        torch.testing.assert_close(shared(g, x, shared_w), xf @ shared_w, **tol)
        messages = torch.bmm(xf[src].unsqueeze(1), w[et]).squeeze(1)
        want = torch.zeros(ROWS, n).index_add_(0, dst, messages)
        torch.testing.assert_close(summed(g, x, w), want, **tol)


def test_narrow_product_gradients_match_torch() -> None:
    """Training through a narrow product: the input's and the weight's gradients as
    PyTorch's."""
    g = hector.random_graph(ROWS, EDGES, RELATIONS, seed=5)
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(ROWS, 48, generator=gen, requires_grad=True)
    w = torch.randn(RELATIONS, 48, 3, generator=gen, requires_grad=True)

    @hector.compile
    def logits(g, x, w):
        return g.typed_linear(g.gather_dst(x), w, slice="etype")

    got = logits(g, x, w)
    got.square().sum().backward()
    got_grads = (x.grad.clone(), w.grad.clone())
    x.grad, w.grad = None, None
    want = torch.bmm(x[g.dst.long()].unsqueeze(1), w[g.etype.long()]).squeeze(1)
    want.square().sum().backward()
    torch.testing.assert_close(got.detach(), want.detach(), rtol=1e-4, atol=1e-4)
    for a, b in zip(got_grads, (x.grad, w.grad), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-3)
