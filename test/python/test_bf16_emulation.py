"""``HECTOR_BF16_DOT=emulate``: the bf16 pair products (``lowering/cpu/bf16.py``) compiled on
any CPU, each ``vdpbf16ps`` rewritten into f32 vector arithmetic with the same results
(``lowering/cpu/bf16_emulation.py``), so the pair path's code runs where the CPU lacks
AVX512-BF16."""

from __future__ import annotations

import pytest
import torch

import hector
from hector.lowering.cpu import features as cpu_features
from hector.lowering.pipelines import LLVM, LoweringParams
from hector.models import RGCNLayer
from hector.targets.options import Options

#: Largest error allowed against float32, relative to the largest float32 value.
TOLERANCE = 2e-2


def test_the_mode_is_read_from_the_environment_and_keyed() -> None:
    """``emulate`` turns the bf16 products on whatever the CPU, and their emulation; it is part
    of the options' cache key and adds the rewrite to the ``llvm`` stage."""
    none: frozenset[str] = frozenset()
    assert cpu_features.bf16_dot(none, {cpu_features.ENV: "emulate"})
    assert cpu_features.bf16_emulated({cpu_features.ENV: "Emulate "})
    assert not cpu_features.bf16_emulated({cpu_features.ENV: "auto"})
    assert not cpu_features.bf16_dot(none, {cpu_features.ENV: "auto"})
    with pytest.raises(ValueError, match="one of auto, off, emulate, got 'on'"):
        cpu_features.bf16_emulated({cpu_features.ENV: "on"})
    real = Options(bf16_dot=True, bf16_emulated=False)
    assert real.cache_key() != Options(bf16_dot=True, bf16_emulated=True).cache_key()
    assert "hector-emulate-bf16-dot" in LLVM.pipeline_for(LoweringParams(bf16_emulated=True))
    assert "hector-emulate-bf16-dot" not in LLVM.pipeline


@hector.compile
def _times(g, x, w):
    return g.typed_linear(x, w, slice="none")


def _pair_sums(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``x @ w`` as ``vdpbf16ps`` sums it in f32: per pair of reduction steps the odd
    product, then the even one (each exact: two bf16 factors)."""
    xf, wf = x.float(), w.float()
    acc = torch.zeros(x.shape[0], w.shape[1])
    for p in range(x.shape[1] // 2):
        acc = acc + xf[:, 2 * p + 1, None] * wf[2 * p + 1]
        acc = acc + xf[:, 2 * p, None] * wf[2 * p]
    return acc


@pytest.mark.parametrize("rows", [100, 64])
def test_emulated_products_are_the_pair_sums_bit_for_bit(monkeypatch, rows) -> None:
    """A bf16 typed linear on emulated pair products: the sums of ``vdpbf16ps`` in order,
    rounded to bf16 by the GEMM's epilogue, to the bit (100 rows: the last tile is partly
    rows past the end, which the epilogue drops)."""
    monkeypatch.setenv(cpu_features.ENV, "emulate")
    _times._cache.clear()
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(rows, 64, generator=gen).to(torch.bfloat16)
    w = (torch.randn(64, 96, generator=gen) / 8).to(torch.bfloat16)
    g = hector.random_graph(rows, 8, 1, seed=0)
    with torch.no_grad():
        out = _times(g, x, w)
    entry = next(iter(_times._cache.values()))
    assert 'products = "bf16"' in entry.staged.ir("schedule")
    assert "avx512bf16" not in entry.staged.ir("llvm")
    want = _pair_sums(x, w).to(torch.bfloat16)
    assert torch.equal(out.view(torch.int16), want.view(torch.int16))


def _step(layer: torch.nn.Module, g: hector.HeteroGraph, x: torch.Tensor) -> list[torch.Tensor]:
    """One training step's output and weight gradients (features frozen)."""
    out = layer(g, x)
    out.float().square().sum().backward()
    grads = [p.grad.clone() for _, p in sorted(layer.named_parameters()) if p.grad is not None]
    layer.zero_grad()
    return [out.detach().float(), *grads]


def test_rgcn_on_emulated_products_matches_float32(monkeypatch) -> None:
    """RGCN inference on bf16 weights and features and a training step on frozen bf16
    features, on emulated pair products (the forward GEMMs and the weight gradients): within
    2e-2 of float32, relative to the largest float32 value."""
    g = hector.random_graph(200, 3000, 4, seed=7)
    torch.manual_seed(3)
    layer, x = RGCNLayer(32, 32, 4), torch.randn(200, 32)
    layer._fn._cache.clear()
    monkeypatch.setenv(cpu_features.ENV, "off")
    with torch.no_grad():
        want = layer(g, x)
    want_step = _step(layer, g, x)
    monkeypatch.setenv(cpu_features.ENV, "emulate")
    half = RGCNLayer(32, 32, 4)
    half.load_state_dict(layer.state_dict())
    half = half.to(torch.bfloat16)
    with torch.no_grad():
        got = half(g, x.to(torch.bfloat16)).float()
    step = _step(layer, g, x.to(torch.bfloat16))
    lines = [
        line
        for e in layer._fn._cache.values()
        for line in e.staged.ir("schedule").splitlines()
        if 'products = "bf16"' in line
    ]
    assert any('variant = "xty"' in line for line in lines)

    def rel(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a.float() - b).abs().max() / b.abs().max())

    assert rel(got, want) <= TOLERANCE
    for have, expected in zip(step, want_step, strict=True):
        assert rel(have, expected) <= TOLERANCE
