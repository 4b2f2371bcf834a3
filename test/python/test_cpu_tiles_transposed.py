"""Scheduled CPU GEMMs that read a weight transposed (``xwt``, an input gradient) or pack rows
transposed (``xty``, a weight gradient): the workers' transposed weight slices and the packed
column blocks give the same gradients as eager PyTorch, whether rows come sorted by type (long
runs, a few short ones at relation boundaries) or unsorted (every row may change slice, so rows
of a slice the worker does not hold take the dot-product form)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import hector


@pytest.fixture
def threads() -> Iterator[None]:
    """Restore torch's thread count after a test changes it."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _grads(f, g, x: torch.Tensor, w: torch.Tensor, seed: int) -> list[torch.Tensor]:
    xx, ww = x.clone().requires_grad_(), w.clone().requires_grad_()
    out = f(g, xx, ww)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed))
    (out * weights).sum().backward()
    assert xx.grad is not None
    assert ww.grad is not None
    return [out.detach(), xx.grad, ww.grad]


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize(("in_dim", "out_dim"), [(64, 64), (32, 16), (24, 16)])
def test_typed_linear_gradients_by_edge_type(
    threads: None, workers: int, in_dim: int, out_dim: int
) -> None:
    # 37 relations over 3000 edges: runs of every length, relation boundaries inside tiles.
    torch.set_num_threads(workers)
    g = hector.random_graph(200, 3000, 37, seed=7)

    @hector.compile
    def f(g, x, w):
        return g.typed_linear(g.gather_src(x), w, slice="etype")

    def eager(g, x, w):
        return torch.bmm(x[g.src.long()].unsqueeze(1), w[g.etype.long()]).squeeze(1)

    x = torch.randn(200, in_dim, generator=torch.Generator().manual_seed(1))
    w = torch.randn(37, in_dim, out_dim, generator=torch.Generator().manual_seed(2))
    got, want = _grads(f, g, x, w, 3), _grads(eager, g, x, w, 3)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("workers", [1, 2])
def test_typed_linear_gradients_by_unsorted_node_type(threads: None, workers: int) -> None:
    torch.set_num_threads(workers)
    g = hector.random_graph(300, 600, 3, num_ntypes=5, seed=2)

    @hector.compile
    def f(g, x, w):
        return g.typed_linear(x, w, slice="ntype")

    def eager(g, x, w):
        return torch.bmm(x.unsqueeze(1), w[g.ntype.long()]).squeeze(1)

    x = torch.randn(300, 32, generator=torch.Generator().manual_seed(1))
    w = torch.randn(5, 32, 64, generator=torch.Generator().manual_seed(2))
    got, want = _grads(f, g, x, w, 4), _grads(eager, g, x, w, 4)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_sorted_weight_gradient_on_two_workers_repeats_exactly(threads: None) -> None:
    # Edges sorted by type: the weight gradient's workers own their slices but the first,
    # which they sum in a buffer of their own, added in worker order: the same bits every run.
    g = hector.random_graph(150, 2500, 11, seed=9)

    @hector.compile
    def f(g, x, w):
        return g.typed_linear(g.gather_src(x), w, slice="etype")

    x = torch.randn(150, 64, generator=torch.Generator().manual_seed(1))
    w = torch.randn(11, 64, 32, generator=torch.Generator().manual_seed(2))
    torch.set_num_threads(1)
    one = _grads(f, g, x, w, 5)
    torch.set_num_threads(2)
    first, second = _grads(f, g, x, w, 5), _grads(f, g, x, w, 5)
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)
    for a, b in zip(first, one, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
