"""Half-precision storage: float16 and bfloat16 arguments that take no gradient reach the
templates as they are (``hector.storage``), which extend each element to float32 on load."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from _typed_graph import META, hetero

import hector
from hector.models import HGTLayer, RGATLayer, RGCNLayer, _rgcn_layer, rgcn_layer

HALVES = (torch.bfloat16, torch.float16)
STORED = {torch.bfloat16: "bf16", torch.float16: "f16"}
N, E, R = 60, 400, 4


@pytest.fixture(scope="module")
def g() -> hector.HeteroGraph:
    return hector.random_graph(N, E, R, empty_etypes=(1,), seed=4)


def _rgcn_args(half: torch.dtype) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    shapes = ((N, 16), (R, 16, 8), (16, 8), (8,))
    return tuple(torch.randn(*s).to(half) for s in shapes)


@pytest.mark.parametrize("half", HALVES)
def test_stored_arguments_compute_what_their_float32_copies_do(g, half) -> None:
    """The kernel reads the half tensors themselves: its float32 results are those of the
    float32 copies (the extension is exact) to float32 rounding, and its program takes them
    in their storage type."""
    args = _rgcn_args(half)
    with torch.no_grad():
        have = rgcn_layer._run(g, args)
        want = rgcn_layer._run(g, tuple(a.float() for a in args))
    assert have.dtype == torch.float32
    assert (have - want).abs().max().item() <= 1e-6 * want.abs().max().item()
    entry = rgcn_layer.compile_for(g, *args)
    name = STORED[half]
    assert entry.traced.storage == dict.fromkeys(range(4), name)
    assert f"memref<?x16x{name}>" in entry.staged.ir("intra")


def test_a_kernel_for_stored_halves_refuses_float32_arguments(g) -> None:
    """The dtype is part of the kernel: one compiled for bfloat16 storage refuses float32
    tensors rather than reading their bytes as bfloat16."""
    args = _rgcn_args(torch.bfloat16)
    entry = rgcn_layer.compile_for(g, *args)
    names = ["x", "weight", "root", "bias"]
    with pytest.raises(ValueError, match="argument 'x' must be torch.bfloat16 for this kernel"):
        entry.check(g, (args[0].float(), *args[1:]), names)


def _case(name: str, g: hector.HeteroGraph) -> tuple[torch.nn.Module, Any, Any]:
    torch.manual_seed(5)
    if name == "rgcn":
        return RGCNLayer(6, 4, R), g, torch.randn(N, 6)
    if name == "rgat":
        return RGATLayer(6, 4, R, heads=2), g, torch.randn(N, 6)
    graph, _, x = hetero("cpu")
    return HGTLayer(8, 8, *META, heads=2), graph, x


def _to(x: Any, dtype: torch.dtype) -> Any:
    return {k: v.to(dtype) for k, v in x.items()} if isinstance(x, dict) else x.to(dtype)


def _flat(out: Any) -> torch.Tensor:
    return torch.cat([out[k] for k in sorted(out)]) if isinstance(out, dict) else out


def _stored(layer: torch.nn.Module) -> list[dict[int, str]]:
    """The storage of every kernel the layer's compiled function holds."""
    return [e.traced.storage for e in layer._fn._cache.values()]


@pytest.mark.parametrize("half", HALVES)
@pytest.mark.parametrize("name", ["rgcn", "rgat", "hgt"])
def test_half_layers_infer_from_their_storage(g, name, half) -> None:
    """A layer in a half type (``layer.to(half)``) under no_grad passes its weights and
    features as they are stored; outputs match the float32 layer on the same values within
    the half type's rounding."""
    layer, graph, x = _case(name, g)
    ref, _, _ = _case(name, g)
    layer = layer.to(half)
    ref.load_state_dict({k: v.float() for k, v in layer.state_dict().items()})
    xh = _to(x, half)
    with torch.no_grad():
        have = _flat(layer(graph, xh))
        want = _flat(ref(graph, _to(xh, torch.float32)))
    assert have.dtype == half
    eps = torch.finfo(half).eps
    assert (have.float() - want).abs().max().item() <= eps * want.abs().max().item()
    assert {STORED[half]} in [set(s.values()) for s in _stored(layer)]
    assert (STORED[half],) in _written(layer)  # the kernel writes the half type itself


def _written(layer: torch.nn.Module) -> list[tuple[str, ...]]:
    """The result storage of every forward function the layer's compiled function holds."""
    return [e.staged.abi[e.traced.name].result_storage for e in layer._fn._cache.values()]


@pytest.mark.parametrize("half", HALVES)
@pytest.mark.parametrize("name", ["rgcn", "rgat", "hgt"])
def test_half_features_train_float32_weights_without_a_float32_copy(g, name, half) -> None:
    """MLPerf's case: features stored in a half type (no gradient), weights in float32. The
    features reach the kernels as they are; outputs (float32, as PyTorch promotes) and the
    weights' gradients are those of training on the features' float32 copy."""
    layer, graph, x = _case(name, g)
    ref, _, _ = _case(name, g)
    xh = _to(x, half)
    have = _flat(layer(graph, xh))
    assert have.dtype == torch.float32
    have.square().sum().backward()
    want = _flat(ref(graph, _to(xh, torch.float32)))
    want.square().sum().backward()
    assert torch.equal(have, want)
    for (n, p), (_, q) in zip(layer.named_parameters(), ref.named_parameters(), strict=True):
        if q.grad is None:
            continue
        scale = max(q.grad.abs().max().item(), 1e-6)
        assert (p.grad - q.grad).abs().max().item() <= 1e-5 * scale, n
    assert {0: STORED[half]} in _stored(layer)  # the features, and nothing else


@hector.compile
def _plus(g, x, y):
    return x + y


@hector.compile
def _times(g, x, w):
    return g.typed_linear(x, w, slice="none")


@pytest.mark.parametrize("half", HALVES)
def test_every_half_value_widens_exactly(half, monkeypatch) -> None:
    """All 65,536 bit patterns, read by a traversal (element loads) and by a GEMM (packed
    vector rows), widen to PyTorch's float32 values: NaNs stay NaN, infinities, subnormals
    and signed zeros keep their values. The GEMM runs on its f32 products: bf16 pair products
    flush subnormal inputs (test_bf16_products.py)."""
    monkeypatch.setenv("HECTOR_BF16_DOT", "off")
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    x = bits.view(half).reshape(4096, 16)
    g = hector.random_graph(4096, 8, 1, seed=0)
    zero = torch.zeros(4096, 16)
    have, want = _plus(g, x, zero), x.float() + zero
    nan = want.isnan()
    assert torch.equal(have.isnan(), nan)
    assert torch.equal(have[~nan], want[~nan])
    finite = x.float().isfinite().all(dim=1)
    rows = x[finite]  # a GEMM by the identity: x's finite rows come back as they are
    sub = hector.random_graph(rows.shape[0], 8, 1, seed=0)
    product = _times(sub, rows, torch.eye(16))
    assert torch.equal(product, rows.float() + 0.0)


def _float32_patterns() -> torch.Tensor:
    """Every float32 high half with low halves at and around bf16's rounding ties (0x8000),
    and at f16's (the top 13 mantissa bits kept)."""
    high = torch.arange(0, 1 << 16, dtype=torch.int64) << 16
    low = torch.tensor([0, 1, 0x0FFF, 0x1000, 0x1001, 0x7FFF, 0x8000, 0x8001, 0xFFFF])
    bits = (high[:, None] | low[None, :]).flatten()
    return (bits - ((bits >> 31) << 32)).to(torch.int32).view(torch.float32).reshape(-1, 16)


@pytest.mark.parametrize("half", HALVES)
def test_every_float32_value_rounds_as_pytorch_rounds(half) -> None:
    """Under autocast the result type is the half one, and the kernel writes it: one
    traversal rounds each float32 to the nearest even, as ``Tensor.to`` does, over every
    sign, exponent and rounding tie (NaN stays NaN; overflow gives infinity)."""
    x = _float32_patterns()
    g = hector.random_graph(x.shape[0], 8, 1, seed=0)
    zero = torch.zeros(x.shape)
    with torch.no_grad(), torch.autocast("cpu", dtype=half):
        have = _plus(g, x, zero)
    want = (x + zero).to(half)
    assert have.dtype == half
    nan = want.isnan()
    assert torch.equal(have.isnan(), nan)
    assert torch.equal(have[~nan].view(torch.int16), want[~nan].view(torch.int16))
    written = {e.staged.abi["_plus"].result_storage: e for e in _plus._cache.values()}
    assert (STORED[half],) in written
    assert f"memref<?x16x{STORED[half]}>" in written[STORED[half],].staged.ir("intra")


def test_the_cuda_target_passes_stored_halves_to_its_kernels(g) -> None:
    """Target ``cuda`` (host path emulated): a bfloat16 input that takes no gradient reaches
    the kernels as stored; their PTX loads 16-bit elements."""
    from hector.targets import cuda as cuda_target

    fn = hector.compile(_rgcn_layer)
    fn.target = "cuda"
    x = torch.randn(N, 16).bfloat16()
    w, w0, b = (torch.randn(*s, requires_grad=True) for s in ((R, 16, 8), (16, 8), (8,)))
    with cuda_target.emulate() as rt:
        fn(g, x, w, w0, b).sum().backward()
    entry = next(iter(fn._cache.values()))
    assert isinstance(entry, cuda_target.GpuExecEntry)
    assert entry.traced.storage == {0: "bf16"}
    assert rt.launches
    assert not rt.allocations
    assert "ld.global.b16" in entry.ptx
    assert w.grad is not None
    assert w.grad.dtype == torch.float32


def test_the_cuda_target_writes_half_results_in_its_kernels(g) -> None:
    """Target ``cuda`` (host path emulated: the kernels do not run), inference on bfloat16
    arguments: the results are allocated in bfloat16 and the kernel stores 16-bit values."""
    from hector.targets import cuda as cuda_target

    fn = hector.compile(_rgcn_layer)
    fn.target = "cuda"
    args = _rgcn_args(torch.bfloat16)
    with cuda_target.emulate() as rt, torch.no_grad():
        have = fn(g, *args)
    entry = next(iter(fn._cache.values()))
    assert entry.staged.abi[entry.traced.name].result_storage == ("bf16",)
    assert "st.global.b16" in entry.ptx
    assert rt.launches
    assert have.dtype == torch.bfloat16
    assert have.shape == (N, 8)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("half", HALVES)
def test_stored_halves_on_a_gpu_compute_what_float32_copies_do(g, half) -> None:
    """On a GPU: the kernels read half storage (features and weights) and agree with the
    same values in float32 to float32 rounding."""
    args = tuple(a.cuda() for a in _rgcn_args(half))
    with torch.no_grad():
        have = rgcn_layer._run(g, args)
        want = rgcn_layer._run(g, tuple(a.float() for a in args))
    assert (have - want).abs().max().item() <= 1e-5 * want.abs().max().item()


@pytest.mark.parametrize("half", HALVES)
def test_the_last_elementwise_traversal_writes_the_half_result(g, half) -> None:
    """An inference kernel whose result is a half type writes it from the traversal computing
    it (RGCN's bias add), rounding each element once: no float32 result buffer and no copy
    after it, and the same bits as the float32 result of the same kernel rounded by
    ``Tensor.to``."""
    args = _rgcn_args(half)
    promoted = (*args[:3], args[3].float())  # a float32 bias of the same values
    with torch.no_grad():
        have = rgcn_layer(g, *args)
        want = rgcn_layer(g, *promoted)
    assert have.dtype == half
    assert want.dtype == torch.float32
    assert torch.equal(have.view(torch.int16), want.to(half).view(torch.int16))
    written = {e.staged.abi[e.traced.name].result_storage: e for e in rgcn_layer._cache.values()}
    intra = written[STORED[half],].staged.ir("intra")
    bias_add = [line for line in intra.splitlines() if 'fn = "add_bias"' in line]
    assert len(bias_add) == 1
    assert bias_add[0].endswith(f"memref<?x8x{STORED[half]}>) -> ()")
    assert 'fn = "copy"' not in intra
