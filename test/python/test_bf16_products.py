"""bf16 products on the CPU (``lowering/cpu/bf16.py``): GEMMs with a bf16 operand multiply
bf16 pairs into f32 accumulators (AVX512-BF16's ``vdpbf16ps``) where the CPU has it, and the
f32 products where it has not or ``HECTOR_BF16_DOT=off``; the choice is part of the options,
so of the compilation cache's key."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from _typed_graph import META

import hector
from hector.lowering.cpu import features as cpu_features
from hector.models import HGTLayer, RGATLayer, RGCNLayer, _rgcn_layer
from hector.targets.options import Options

N, E, R, WIDTH = 200, 3000, 4, 32
#: Largest error allowed against float32, relative to the largest float32 value.
TOLERANCE = 2e-2


def test_the_feature_is_read_from_the_cpus_flags() -> None:
    """``avx512_bf16`` among the first processor's flags turns bf16 products on, unless
    ``HECTOR_BF16_DOT=off``; an unknown value is an error naming the variable."""
    info = "processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 avx512bw\n\nprocessor\t: 1\n"
    flags = cpu_features.flags_of(info)
    assert "avx512_bf16" in flags
    assert cpu_features.bf16_dot(flags, {})
    assert cpu_features.bf16_dot(flags, {cpu_features.ENV: "auto"})
    assert not cpu_features.bf16_dot(flags, {cpu_features.ENV: "off"})
    assert not cpu_features.bf16_dot(cpu_features.flags_of("flags : fpu avx512f"), {})
    assert not cpu_features.bf16_dot(cpu_features.flags_of("no flags here"), {})
    message = "HECTOR_BF16_DOT must be one of auto, off, emulate, got 'on'"
    with pytest.raises(ValueError, match=message):
        cpu_features.bf16_dot(flags, {cpu_features.ENV: "on"})


def test_the_choice_is_part_of_the_options_and_their_keys(monkeypatch) -> None:
    """Options resolve the choice when made (the environment, then the CPU); it is in their
    cache key and in the text the compilation cache hashes."""
    monkeypatch.setenv(cpu_features.ENV, "off")
    assert Options().bf16_dot is False
    monkeypatch.setenv(cpu_features.ENV, "auto")
    assert Options().bf16_dot is cpu_features.has_avx512_bf16()
    on, off = Options(bf16_dot=True), Options(bf16_dot=False)
    assert on.cache_key() != off.cache_key()
    assert repr(on) != repr(off)  # cpu_cache.key hashes repr(options)


@pytest.fixture(scope="module")
def g() -> hector.HeteroGraph:
    return hector.random_graph(N, E, R, seed=7)


def _case(name: str, g: hector.HeteroGraph) -> tuple[torch.nn.Module, Any, Any]:
    torch.manual_seed(3)
    if name == "rgcn":
        return RGCNLayer(WIDTH, WIDTH, R), g, torch.randn(N, WIDTH)
    if name == "rgat":
        return RGATLayer(WIDTH, WIDTH, R, heads=2), g, torch.randn(N, WIDTH)
    graph = _hetero_graph()
    x = {"paper": torch.randn(120, WIDTH), "author": torch.randn(80, WIDTH)}
    return HGTLayer(WIDTH, WIDTH, *META, heads=2), graph, x


def _hetero_graph() -> hector.HeteroGraph:
    gen = torch.Generator().manual_seed(5)
    counts = {"paper": 120, "author": 80}
    offset = {"paper": 0, "author": 120}
    src, dst, typ = [], [], []
    for r, (s, _, d) in enumerate(META[1]):
        src.append(torch.randint(counts[s], (800,), generator=gen) + offset[s])
        dst.append(torch.randint(counts[d], (800,), generator=gen) + offset[d])
        typ.append(torch.full((800,), r))
    ntype = torch.tensor([0] * 120 + [1] * 80)
    return hector.HeteroGraph.from_edge_index(
        torch.stack([torch.cat(src), torch.cat(dst)]),
        torch.cat(typ),
        node_type=ntype,
        num_etypes=len(META[1]),
    )


def _to(x: Any, dtype: torch.dtype) -> Any:
    return {k: v.to(dtype) for k, v in x.items()} if isinstance(x, dict) else x.to(dtype)


def _flat(out: Any) -> torch.Tensor:
    return torch.cat([out[k] for k in sorted(out)]) if isinstance(out, dict) else out


def _rel(have: torch.Tensor, want: torch.Tensor) -> float:
    return (have.float() - want).abs().max().item() / max(want.abs().max().item(), 1e-30)


def _infer(name: str, g: hector.HeteroGraph, dtype: torch.dtype) -> tuple[torch.Tensor, Any]:
    """The layer (weights and features in ``dtype``) under no_grad, and the layer."""
    layer, graph, x = _case(name, g)
    layer = layer.to(dtype)
    with torch.no_grad():
        return _flat(layer(graph, _to(x, dtype))).float(), layer


def _train(name: str, g: hector.HeteroGraph, dtype: torch.dtype) -> tuple[list[torch.Tensor], Any]:
    """Output and weight gradients of one step: features in ``dtype``, weights in float32."""
    layer, graph, x = _case(name, g)
    out = _flat(layer(graph, _to(x, dtype)))
    out.float().square().sum().backward()
    grads = [p.grad for _, p in sorted(layer.named_parameters()) if p.grad is not None]
    return [out.detach().float(), *grads], layer


def _products(layer: torch.nn.Module) -> set[str]:
    """The products every compiled kernel of the layer's schedules name."""
    found = set()
    for entry in layer._fn._cache.values():
        text = entry.staged.ir("schedule")
        found.add("bf16" if 'products = "bf16"' in text else "f32")
    return found


@pytest.mark.parametrize("name", ["rgcn", "rgat", "hgt"])
def test_bf16_inputs_match_float32_on_both_paths(g, name, monkeypatch) -> None:
    """Inference on bf16 weights and features, and a training step on bf16 features: against
    float32 values and arithmetic, the bf16 products are within 2e-2 (of the largest float32
    value) and at most twice the error of the f32 products on the same bf16 values. The f32
    path (``HECTOR_BF16_DOT=off``) compiles without bf16 products; the default path uses them
    exactly where the CPU has AVX512-BF16."""
    monkeypatch.setenv(cpu_features.ENV, "off")
    # The layer's compiled function is shared by the process: start from an empty memory of
    # it, so the products found are this test's (other files compile it with bf16 products).
    _case(name, g)[0]._fn._cache.clear()
    want_infer, _ = _infer(name, g, torch.float32)
    want_train, _ = _train(name, g, torch.float32)
    f32_infer, f32_layer = _infer(name, g, torch.bfloat16)
    f32_train, f32_trainer = _train(name, g, torch.bfloat16)
    assert _products(f32_layer) == _products(f32_trainer) == {"f32"}
    monkeypatch.setenv(cpu_features.ENV, "auto")
    dot_infer, dot_layer = _infer(name, g, torch.bfloat16)
    dot_train, dot_trainer = _train(name, g, torch.bfloat16)
    expected = "bf16" if cpu_features.has_avx512_bf16() else "f32"
    assert expected in _products(dot_layer)
    assert expected in _products(dot_trainer)

    # The precision benchmark's measures: the output's error, and the largest of the weights'
    # gradients' errors (each relative to that gradient's largest float32 value).
    errors = {
        "inference": (_rel(dot_infer, want_infer), _rel(f32_infer, want_infer)),
        "training output": (_rel(dot_train[0], want_train[0]), _rel(f32_train[0], want_train[0])),
        "gradients": (
            max(_rel(d, w) for d, w in zip(dot_train[1:], want_train[1:], strict=True)),
            max(_rel(f, w) for f, w in zip(f32_train[1:], want_train[1:], strict=True)),
        ),
    }
    for what, (err, base) in errors.items():
        assert err <= TOLERANCE, (what, err)
        assert err <= 2 * base, (what, err, base)


@hector.compile
def _times(g, x, w):
    return g.typed_linear(x, w, slice="none")


def test_bf16_products_keep_normal_values_and_flush_subnormals() -> None:
    """Every finite bf16 bit pattern multiplied by the identity: with bf16 products
    (``vdpbf16ps``) a normal value comes back exactly and a subnormal one as zero (the
    instruction treats subnormal inputs as zero); with the f32 products every value comes
    back exactly."""
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    x = bits.view(torch.bfloat16).reshape(4096, 16)
    rows = x[x.float().isfinite().all(dim=1)]
    g = hector.random_graph(rows.shape[0], 8, 1, seed=0)
    eye = torch.eye(16, dtype=torch.bfloat16)
    product = _times(g, rows, eye)
    entry = next(iter(_times._cache.values()))
    exact = rows.float() + 0.0
    if cpu_features.bf16_dot():  # the CPU's vdpbf16ps, or its emulation
        assert 'products = "bf16"' in entry.staged.ir("schedule")
        tiny = exact.abs() < torch.finfo(torch.bfloat16).tiny
        assert torch.equal(product[~tiny], exact[~tiny])
        assert torch.equal(product[tiny], torch.zeros_like(product[tiny]))
        assert bool(tiny.any())
    else:
        assert torch.equal(product, exact)


def test_weight_gradients_of_bf16_features_pair_their_rows_as_stored() -> None:
    """The weight gradient ``x^T dy`` of bf16 features with f32 row gradients: the features'
    rows are interleaved two by two as stored (no transpose, no rounding), the gradients
    rounded to bf16, so the result is the float64 product of those values within f32
    accumulation (a row paired with the wrong neighbour, or a gradient row with the wrong
    feature row, is off by the size of the values). 77 rows: the last tile ends part way,
    on an odd row. Without AVX512-BF16 the f32 products multiply the gradients unrounded."""
    torch.manual_seed(4)
    g = hector.random_graph(77, 901, 3, seed=5)
    x = torch.randn(77, 48).to(torch.bfloat16)
    w = (torch.randn(48, 32) / 7).requires_grad_()
    y = _times(g, x, w)
    dy = torch.randn(y.shape)
    y.backward(dy)
    assert w.grad is not None
    dot = cpu_features.bf16_dot()
    want = x.double().T @ (dy.to(torch.bfloat16) if dot else dy).double()
    texts = "".join(e.staged.ir("schedule") for e in _times._cache.values())
    assert ('products = "bf16"' in texts and 'variant = "xty"' in texts) is dot
    assert (w.grad.double() - want).abs().max() <= 1e-5 * want.abs().max()


@hector.compile
def _messages(g, x, w):
    return g.sum_to_dst(g.typed_linear(g.gather_src(x), w))


@pytest.mark.parametrize("mode", ["auto", "emulate"])
def test_input_gradients_through_frozen_bf16_weights(g, monkeypatch, mode) -> None:
    """Float32 features that take a gradient through frozen bf16 weights: the input gradient
    (``xwt``, the weight slice transposed and paired, its epilogue from the micro-kernel's
    registers) is within 2e-2 of float32 weights and at most twice the error of the f32
    products on the bf16 weights; on pair products where the CPU has them (``auto``) and on
    emulated ones anywhere (``emulate``)."""
    torch.manual_seed(2)
    x, w32 = torch.randn(N, WIDTH), torch.randn(R, WIDTH, WIDTH)
    w = w32.to(torch.bfloat16)

    def input_gradient(weight: torch.Tensor) -> torch.Tensor:
        leaf = x.clone().requires_grad_()
        _messages(g, leaf, weight).square().sum().backward()
        assert leaf.grad is not None
        return leaf.grad

    want = input_gradient(w32)
    monkeypatch.setenv(cpu_features.ENV, "off")
    f32 = input_gradient(w)
    _messages._cache.clear()
    monkeypatch.setenv(cpu_features.ENV, mode)
    dot = input_gradient(w)
    texts = [e.staged.ir("schedule") for e in _messages._cache.values()]
    pairs = mode == "emulate" or cpu_features.has_avx512_bf16()
    assert any('products = "bf16"' in t and 'variant = "xwt"' in t for t in texts) is pairs
    err, base = _rel(dot, want), _rel(f32, want)
    assert err <= TOLERANCE
    assert err <= 2 * base


_DOT_MODULE = """
llvm.func @dot(%acc: vector<16xf32>, %a: vector<32xbf16>, %b: vector<32xbf16>) -> vector<16xf32> {
  %r = llvm.call_intrinsic "llvm.x86.avx512bf16.dpbf16ps.512"(%acc, %a, %b)
      : (vector<16xf32>, vector<32xbf16>, vector<32xbf16>) -> vector<16xf32>
  llvm.return %r : vector<16xf32>
}
"""


def test_code_with_bf16_dot_products_is_refused_on_a_cpu_without_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A module calling ``vdpbf16ps`` (a hand-written ``products = "bf16"`` schedule) is
    refused before it runs on a CPU without AVX512-BF16, instead of ending the process with an
    illegal instruction; where the CPU has the feature it passes the check."""
    from mlir import ir

    from hector.lowering.cpu import codegen

    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(_DOT_MODULE)
        assert codegen.host_features_used(module) == {"avx512_bf16"}
        code = codegen.module_bytecode(module)
        assert codegen.host_features_used(module, code) == {"avx512_bf16"}
        monkeypatch.setattr(cpu_features, "host_flags", lambda: frozenset({"avx512f"}))
        with pytest.raises(codegen.UnsupportedCpuError, match=r"lacks \(avx512_bf16\)"):
            codegen.check_host_runs(module)
        with pytest.raises(codegen.UnsupportedCpuError, match=r"lacks \(avx512_bf16\)"):
            codegen.check_host_runs(module, code)
        monkeypatch.setattr(cpu_features, "host_flags", lambda: frozenset({"avx512_bf16"}))
        codegen.check_host_runs(module)
        plain = ir.Module.parse("llvm.func @f() {\n  llvm.return\n}")
        assert codegen.host_features_used(plain) == set()
        assert codegen.host_features_used(plain, codegen.module_bytecode(plain)) == set()


def _message_buffers(layer: torch.nn.Module) -> list[str]:
    """The half buffers the layer's compiled kernels allocate (``hector-half-messages``)."""
    found = []
    for entry in layer._fn._cache.values():
        for line in entry.staged.ir("schedule").splitlines():
            if "memref.alloc" in line and ("xbf16>" in line or "xf16>" in line):
                found.append(line.split(":")[-1].strip())
    return found


@pytest.mark.parametrize("name", ["rgat", "hgt"])
def test_messages_stored_in_bf16_stay_within_the_bounds(g, name) -> None:
    """Inference on bf16 weights and features stores the per-edge GEMM outputs only
    traversals read (RGAT's ``W_r h_j``, HGT's keys and values) in bf16, rounded once as
    written: against float32 values and arithmetic the output stays within 2e-2, and at most
    twice the error of float32 arithmetic on the same bf16 values (its result rounded to
    bf16)."""
    want, _ = _infer(name, g, torch.float32)
    have, layer = _infer(name, g, torch.bfloat16)
    assert any(t.startswith("memref<?x") and t.endswith("xbf16>") for t in _message_buffers(layer))
    wide, graph, x = _case(name, g)
    wide.load_state_dict({k: v.float() for k, v in layer.state_dict().items()})
    with torch.no_grad():
        base = _flat(wide(graph, _to(_to(x, torch.bfloat16), torch.float32)))
    assert _message_buffers(wide) == []  # float32 results: nothing narrowed
    err, base_err = _rel(have, want), _rel(base.to(torch.bfloat16), want)
    assert err <= TOLERANCE, err
    assert err <= 2 * base_err, (err, base_err)


def _eager_rgcn(g: hector.HeteroGraph, x, weight, root, bias) -> torch.Tensor:
    """RGCN in eager PyTorch ops, in the tensors' own type: each edge's ``W_r x_src`` scaled by
    ``1 / |N_r(dst)|`` and added into its destination, plus ``x @ root + bias``."""
    src, dst, etype = g.src.long(), g.dst.long(), g.etype.long()
    pair = dst * R + etype
    count = torch.bincount(pair, minlength=N * R).to(x.dtype)
    msg = torch.bmm(x[src].unsqueeze(1), weight[etype]).squeeze(1) / count[pair].unsqueeze(1)
    agg = torch.zeros(N, weight.shape[2], dtype=x.dtype).index_add_(0, dst, msg)
    return agg + x @ root + bias


def test_pair_sums_stored_in_bf16_match_eager_pytorch(g) -> None:
    """Aggregate-first RGCN inference on bf16 weights and features stores its sums into the
    (destination, relation) pairs in bf16, each pair's row written once by a segmented sum
    (``hector.segmented_sum``) and read by the GEMM over the pairs: against eager PyTorch on
    float32 values the output stays within 2e-2, within twice the error of float32
    arithmetic on the same bf16 values (its result rounded to bf16) and within the error of
    eager PyTorch's own bf16 ops. A float32 program keeps its accumulating f32 sum."""
    fn = hector.compile(_rgcn_layer, order="aggregate-first")
    torch.manual_seed(11)
    args = (
        torch.randn(N, WIDTH),
        torch.randn(R, WIDTH, WIDTH) / WIDTH**0.5,
        torch.randn(WIDTH, WIDTH) / WIDTH**0.5,
        torch.randn(WIDTH),
    )
    half = tuple(a.to(torch.bfloat16) for a in args)
    with torch.no_grad():
        have = fn(g, *half)
        fn(g, *args)
    texts = {e.traced.storage.get(0): e.staged.ir("schedule") for e in fn._cache.values()}
    assert "hector.segmented_sum" in texts["bf16"]
    assert f"memref<?x{WIDTH}xbf16>" in texts["bf16"]
    assert "hector.segmented_sum" not in texts[None]
    want = _eager_rgcn(g, *args)
    base = _eager_rgcn(g, *(a.float() for a in half)).to(torch.bfloat16)
    eager = _eager_rgcn(g, *half)
    assert have.dtype == torch.bfloat16
    err, base_err, eager_err = _rel(have, want), _rel(base, want), _rel(eager, want)
    assert err <= TOLERANCE, err
    assert err <= 2 * base_err, (err, base_err)
    assert err <= eager_err, (err, eager_err)


def _eager_gradients(g: hector.HeteroGraph, x: torch.Tensor, weights: list) -> list:
    """The weights' gradients of ``sum(rgcn(x)²)`` in eager PyTorch, float32 arithmetic."""
    params = [w.clone().requires_grad_() for w in weights]
    _eager_rgcn(g, x, *params).square().sum().backward()
    return [p.grad for p in params]


def _rgcn_step(g: hector.HeteroGraph, x: torch.Tensor, weights: list) -> tuple[Any, list]:
    """A compiled aggregate-first RGCN training step: its entry and the weights' gradients."""
    fn = hector.compile(_rgcn_layer, order="aggregate-first")
    params = [w.clone().requires_grad_() for w in weights]
    fn(g, x, *params).square().sum().backward()
    (entry,) = fn._cache.values()
    return entry, [p.grad for p in params]


def _saved_storage(entry: Any) -> tuple[str, ...]:
    return entry.staged.abi[f"{entry.traced.name}_train"].result_storage


def test_training_saves_bf16_pair_sums_and_matches_eager_gradients(g, monkeypatch) -> None:
    """A training step on bf16 features and float32 weights (aggregate-first RGCN) saves its
    sums into the (destination, relation) pairs in bf16 where the CPU computes on bf16 pairs
    (``hector-half-saved``: a bf16 result of ``_train``, written once by a segmented sum; the
    pair products round them to bf16 anyway). Against eager PyTorch on float32 values each
    weight's gradient stays within 2e-2, and the relation weights' gradient, computed from the
    saved sums, within twice the error of the f32 products on the same bf16 features
    (``HECTOR_BF16_DOT=off``), whose saved sums stay float32."""
    torch.manual_seed(13)
    x = torch.randn(N, WIDTH)
    weights = [
        torch.randn(R, WIDTH, WIDTH) / WIDTH**0.5,
        torch.randn(WIDTH, WIDTH) / WIDTH**0.5,
        torch.randn(WIDTH),
    ]
    half = x.to(torch.bfloat16)
    monkeypatch.setenv(cpu_features.ENV, "off")
    f32_entry, f32_grads = _rgcn_step(g, half, weights)
    assert "bf16" not in _saved_storage(f32_entry)
    assert "hector.segmented_sum" not in f32_entry.staged.ir("schedule")
    monkeypatch.setenv(cpu_features.ENV, "auto")
    entry, grads = _rgcn_step(g, half, weights)
    on_pairs = cpu_features.has_avx512_bf16()
    assert ("bf16" in _saved_storage(entry)) is on_pairs
    assert ("hector.segmented_sum" in entry.staged.ir("schedule")) is on_pairs
    want = _eager_gradients(g, x, weights)
    errors = [(_rel(h, w), _rel(f, w)) for h, f, w in zip(grads, f32_grads, want, strict=True)]
    assert all(err <= TOLERANCE for err, _ in errors), errors
    # The relation weights' gradient is the one computed from the saved sums.
    err, base_err = errors[0]
    assert err <= 2 * base_err, (err, base_err)


def test_a_memory_budget_keeps_the_saved_values_in_float32(g) -> None:
    """Under a memory budget (``placement-plan-saved`` places the saved values, which the plan
    and the runtime's store size as f32 rows) a bf16 training step saves nothing in bf16, and
    its gradients are those of the step without a budget to f32 rounding."""
    torch.manual_seed(17)
    half = torch.randn(N, WIDTH).to(torch.bfloat16)
    weights = [
        torch.randn(R, WIDTH, WIDTH) / WIDTH**0.5,
        torch.randn(WIDTH, WIDTH) / WIDTH**0.5,
        torch.randn(WIDTH),
    ]
    grads = {}
    for budget in (-1.0, 0.0):
        fn = hector.compile(_rgcn_layer, order="aggregate-first", memory_budget=budget)
        params = [w.clone().requires_grad_() for w in weights]
        fn(g, half, *params).square().sum().backward()
        (entry,) = fn._cache.values()
        grads[budget] = [p.grad for p in params]
        if budget >= 0:
            assert "bf16" not in _saved_storage(entry)
    for have, want in zip(grads[0.0], grads[-1.0], strict=True):
        assert _rel(have, want) <= 1e-3
