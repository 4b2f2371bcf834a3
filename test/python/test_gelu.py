"""A compiled GELU and its gradient against PyTorch's exact GELU (``approximate="none"``).

Both compute ``exp`` in arith alone (``templates._exp``, vectorised with their loops on the
CPU); the values must stay those of an f32 ``expf`` to within the erf approximation's
error, over the whole range: where ``exp(-v²)`` underflows, at infinities and NaN.
"""

from __future__ import annotations

import torch

import hector
from hector.frontends import compiled as frontend


@frontend.compile
def gelu(g: object, x: object) -> object:
    return x.gelu()  # type: ignore[attr-defined]


def _inputs() -> torch.Tensor:
    torch.manual_seed(0)
    edges = [0.0, 1e-30, -1e-30, 9.0, -9.0, 13.3, -13.3, 13.4, -13.4, 88.0, -88.0, 89.0]
    edges += [-89.0, 1e4, -1e4, 1e30, -1e30]
    spread = torch.cat([torch.linspace(-20.0, 20.0, 4001), 4.0 * torch.randn(3982)])
    return torch.cat([spread, torch.tensor(edges)]).reshape(-1, 16)


def test_gelu_matches_pytorch_over_the_range() -> None:
    x = _inputs()
    g = hector.random_graph(x.shape[0], 8, 1, seed=0)
    got, want = gelu(g, x), torch.nn.functional.gelu(x.double())
    err = (got.double() - want).abs() / want.abs().clamp(min=1.0)
    assert float(err.max()) < 1e-6
    special = x.clone()
    special[0, :2] = torch.tensor([float("inf"), float("nan")])
    out = gelu(g, special)[0, :2]
    assert out[0] == float("inf")
    assert out[1].isnan()


def test_gelu_gradient_matches_pytorch_over_the_range() -> None:
    x = _inputs()
    x = x.masked_fill(x.abs() > 100.0, 0.5)  # PyTorch's gradient is NaN at ±1e30 (inf · 0)
    g = hector.random_graph(x.shape[0], 8, 1, seed=0)
    mine, ref = x.clone().requires_grad_(), x.double().requires_grad_()
    dy = torch.randn_like(x)
    gelu(g, mine).backward(dy)
    torch.nn.functional.gelu(ref).backward(dy.double())
    assert mine.grad is not None
    assert ref.grad is not None
    err = (mine.grad.double() - ref.grad).abs() / dy.abs().double().clamp(min=1.0)
    assert float(err.max()) < 2e-6


def test_gelu_on_bf16_storage_rounds_the_f32_value_once() -> None:
    x = _inputs().to(torch.bfloat16)
    g = hector.random_graph(x.shape[0], 8, 1, seed=0)
    got = gelu(g, x)
    assert got.dtype == torch.bfloat16
    want = torch.nn.functional.gelu(x.double())
    # one rounding to bf16 (half a unit: 2^-8 relative) of a value within 1e-6 of the exact
    # one (relative to max(|value|, 1), as above: erf's 1 - y cancels in f32 far out)
    err = (got.double() - want).abs() / want.abs().clamp(min=1.0)
    assert float(err.max()) < 2.0**-8 + 1e-6
