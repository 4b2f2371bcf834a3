"""Tensor-core GEMM kernels (``lowering/gpu/mma.py``): scheduled ``xw``/``xwt`` templates on
bf16/f16 operands lowered with ``convert-hector-intra-to-gpu{mma=true}``, run on the CPU by the
host emulation (``hector-gpu-kernels-on-host``: a block's threads phase by phase, each
``nvgpu.mma.sync`` a software m16n8k16 reading the fragments from the lanes that hold them,
``lowering/gpu/mma_on_host.py``). A fragment index wrong in the kernel or in the emulation
puts values in the wrong places, which these comparisons against PyTorch catch; that the
hardware's layout is the PTX ISA's, which both encode, is checked only on a device."""

from __future__ import annotations

from typing import Any

import pytest
import torch

HALF = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def _memref(dims: list[int | None], dtype: str) -> Any:
    from mlir import ir

    element = {
        "bf16": ir.BF16Type.get(),
        "f16": ir.F16Type.get(),
        "f32": ir.F32Type.get(),
        "i32": ir.IntegerType.get_signless(32),
    }[dtype]
    dyn = ir.ShapedType.get_dynamic_size()
    return ir.MemRefType.get([dyn if d is None else d for d in dims], element)


def _module(case: dict[str, Any], roles: tuple[str, ...], schedule: Any) -> tuple[Any, list[str]]:
    """``@gemm`` around one scheduled ``gemm_template``; returns it and its arguments'
    roles."""
    from mlir import ir
    from mlir.dialects import func

    from hector.dialects import hector_intra as intra

    k, n, slices = case["k"], case["n"], case["slices"]
    wshape = [n, k] if case["variant"] == "xwt" else [k, n]
    types = {
        "a": _memref([None, k], case["a"]),
        "weight": _memref(([slices] if slices else []) + wshape, case["w"]),
    }
    for role in ("gather_index", "weight_index", "scatter_index"):
        if role in roles:
            types[role] = _memref([None], "i32")
    if "row_scale" in roles:
        types["row_scale"] = _memref([None, 1], "f32")
    types["out"] = _memref([None, n], "f32")
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        fn = func.FuncOp("gemm", ir.FunctionType.get(list(types.values()), []))
        fn.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
        block = fn.add_entry_block()
        with ir.InsertionPoint(block):
            extra = {"schedule": schedule.to_attr()}
            if case.get("slice_rows"):
                i64 = ir.IntegerType.get_signless(64)
                extra["slice_rows"] = ir.IntegerAttr.get(i64, case["slice_rows"])
            operands = dict(zip(types, block.arguments, strict=True))
            intra.OPS.gemm_template(
                **operands,
                variant=case["variant"],
                epilogue=case["epilogue"],
                tile_n=4,
                block_size=64,
                extra=extra,
            )
            func.ReturnOp([])
    return module, list(types)


def _numpy(t: torch.Tensor) -> Any:
    """The tensor's bytes as numpy sees them (bf16 as int16: the kernel reads the bits)."""
    t = t.contiguous()
    return t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy()


def _on_host(case: dict[str, Any], roles: tuple[str, ...], sched: dict, arrays: dict) -> tuple:
    """Lower with ``mma=true``, run on the CPU; returns ``out`` and the GPU stage's text."""
    from mlir import ir

    from hector.dialects import make_context
    from hector.dialects.hector_intra import Schedule
    from hector.lowering.cpu.jit import CpuKernel
    from hector.lowering.pipelines import LLVM_CPU
    from hector.passes.pipeline import run_pipeline

    with make_context(), ir.Location.unknown():
        module, order = _module(case, roles, Schedule(**sched))
        run_pipeline(module, "convert-hector-intra-to-gpu{mma=true}")
        gpu_ir = str(module)
        run_pipeline(module, "hector-gpu-kernels-on-host")
        run_pipeline(module, LLVM_CPU, verify=False)
        out = arrays["out"].clone()
        CpuKernel(module)("gemm", *[_numpy(arrays[r]) for r in order[:-1]], out.numpy())
    return out, gpu_ir


def _reference(case: dict[str, Any], arrays: dict) -> torch.Tensor:
    """The template in float64 on the 16-bit values the tensor cores multiply (an f32 operand
    rounded to the other's type)."""
    half = HALF[case["a"] if case["a"] != "f32" else case["w"]]
    a = arrays["a"].to(half).double()
    w = arrays["weight"].to(half).double()
    m = len(arrays["weight_index"]) if "weight_index" in arrays else a.shape[0]
    if "gather_index" in arrays:
        m = len(arrays["gather_index"])
    x = a[arrays["gather_index"].long()] if "gather_index" in arrays else a[:m]
    if case["variant"] == "xwt":
        w = w.transpose(-1, -2)
    if w.dim() == 3:
        t = arrays["weight_index"].long() if "weight_index" in arrays else None
        if t is None:
            t = torch.arange(m) // case["slice_rows"]
        v = torch.einsum("mk,mkn->mn", x, w[t])
    else:
        v = x @ w
    if "row_scale" in arrays:
        v = v * arrays["row_scale"].double()
    out = arrays["out"].clone().double()
    dest = arrays["scatter_index"].long() if "scatter_index" in arrays else torch.arange(m)
    if case["epilogue"] == "store":
        out[dest] = v
        return out.float()
    return out.index_add(0, dest, v).float()


CASES = {
    # RGCN's scatter-GEMM on bf16: gathered rows, sorted edge types (tiles of one slice and
    # tiles spanning two: the second slice's rows through the FMA fallback), row_scale,
    # atomic add; M = 45, N = 12, K = 20 all ragged against the 16 × 8 × 16 tiles.
    "messages": (
        dict(variant="xw", epilogue="add", k=20, n=12, slices=3, a="bf16", w="bf16"),
        ("gather_index", "weight_index", "scatter_index", "row_scale"),
        dict(tile_m=16, tile_n=8, tile_k=16, unroll=1, vector=1),
        True,
    ),
    # Unsorted types: nearly every row of every tile through the fallback.
    "mixed_slices": (
        dict(variant="xw", epilogue="store", k=16, n=8, slices=4, a="bf16", w="bf16"),
        ("gather_index", "weight_index"),
        dict(tile_m=16, tile_n=8, tile_k=16, unroll=1, vector=1),
        False,
    ),
    # Input gradient: the weight read transposed, f32 (rounded to bf16 as it is staged).
    "xwt_f32_weight": (
        dict(variant="xwt", epilogue="store", k=40, n=24, slices=3, a="bf16", w="f32"),
        ("weight_index",),
        dict(tile_m=32, tile_n=16, tile_k=32, unroll=1, vector=1),
        True,
    ),
    # A shared weight on 4 warps (2 × 2, 32 × 32 each: 2 × 4 fragments), K across steps.
    "shared_weight_warps": (
        dict(variant="xw", epilogue="add", k=72, n=70, slices=None, a="bf16", w="bf16"),
        (),
        dict(tile_m=64, tile_n=64, tile_k=32, unroll=4, vector=4),
        False,
    ),
    # f16 on both sides; per-slice products (row i uses slice i / slice_rows).
    "f16_slice_rows": (
        dict(variant="xw", epilogue="store", k=24, n=16, slices=4, a="f16", w="f16", slice_rows=12),
        (),
        dict(tile_m=16, tile_n=16, tile_k=0, unroll=1, vector=1),
        False,
    ),
}


def _arrays(case: dict[str, Any], roles: tuple[str, ...], sorted_types: bool) -> dict:
    gen = torch.Generator().manual_seed(11)
    k, n, slices = case["k"], case["n"], case["slices"]
    m = 45 if not case.get("slice_rows") else slices * case["slice_rows"]
    if case["k"] == 72:
        m = 150
    wshape = (n, k) if case["variant"] == "xwt" else (k, n)
    nodes = 60 if "gather_index" in roles else m
    arrays = {
        "a": torch.randn(nodes, k, generator=gen).to(HALF[case["a"]]),
        "weight": torch.randn(*((slices,) if slices else ()), *wshape, generator=gen),
        "out": torch.randn(50 if "scatter_index" in roles else m, n, generator=gen),
    }
    arrays["weight"] = arrays["weight"].to(HALF[case["w"]])
    if "gather_index" in roles:
        arrays["gather_index"] = torch.randint(0, nodes, (m,), generator=gen, dtype=torch.int32)
    if "weight_index" in roles:
        types = torch.randint(0, slices, (m,), generator=gen, dtype=torch.int32)
        arrays["weight_index"] = torch.sort(types).values if sorted_types else types
    if "scatter_index" in roles:
        arrays["scatter_index"] = torch.randint(0, 50, (m,), generator=gen, dtype=torch.int32)
    if "row_scale" in roles:
        arrays["row_scale"] = torch.rand(m, 1, generator=gen)
    return arrays


@pytest.mark.parametrize("name", sorted(CASES))
def test_tensor_core_kernels_compute_the_template(name: str) -> None:
    """The tensor-core kernel (its GPU stage holds ``nvgpu.mma.sync``), emulated, computes
    the template on the 16-bit values to f32 rounding."""
    case, roles, sched, sorted_types = CASES[name]
    arrays = _arrays(case, roles, sorted_types)
    out, gpu_ir = _on_host(case, roles, sched, arrays)
    assert "nvgpu.mma.sync" in gpu_ir
    torch.testing.assert_close(out, _reference(case, arrays), rtol=1e-5, atol=1e-4)


def test_bf16_gemm_matches_torch_mm() -> None:
    """A plain bf16 product ``[M, K] × [K, N]`` (M, N, K ragged against the tiles) agrees with
    ``torch.mm`` on the bf16 tensors within bf16's rounding, and with ``torch.mm`` in float32
    on the same values to f32 rounding."""
    case = dict(variant="xw", epilogue="store", k=56, n=40, slices=None, a="bf16", w="bf16")
    gen = torch.Generator().manual_seed(3)
    a = torch.randn(77, 56, generator=gen).bfloat16()
    w = torch.randn(56, 40, generator=gen).bfloat16()
    arrays = {"a": a, "weight": w, "out": torch.zeros(77, 40)}
    sched = dict(tile_m=32, tile_n=32, tile_k=32, unroll=1, vector=1)
    out, _ = _on_host(case, (), sched, arrays)
    torch.testing.assert_close(out.bfloat16(), torch.mm(a, w), rtol=1.6e-2, atol=1e-2)
    torch.testing.assert_close(out, torch.mm(a.float(), w.float()), rtol=1e-5, atol=1e-4)


def test_f32_operands_keep_the_fma_kernel() -> None:
    """f32 operands (and f16 with f32) take the FMA kernel even with ``mma=true``."""
    case, roles, sched, _ = CASES["messages"]
    for a, w in (("f32", "f32"), ("f16", "f32")):
        c = {**case, "a": a, "w": w}
        arrays = _arrays(c, roles, True)
        out, gpu_ir = _on_host(c, roles, sched, arrays)
        assert "nvgpu.mma.sync" not in gpu_ir
        assert "fastmath<contract>" in gpu_ir  # the FMA kernel's multiply-adds
        torch.testing.assert_close(out, _reference({**c, "a": "f32", "w": "f32"}, arrays))


def test_the_tensor_core_choice_is_in_the_cuda_cache_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``cuda`` target's stages depend on the chip: ``mma=true`` in the GPU stage from
    sm_80 on, the chip in the PTX stage's MMA lowering; the compilation cache's key hashes
    every stage's pipeline with the chip (``targets/cuda_cache.py``), and the program's text,
    where each argument's storage type is, so a kernel built for tensor cores is never
    loaded for a chip without them, nor for other operand types."""
    from hector.frontends import trace as frontend
    from hector.models import _rgcn_layer
    from hector.targets import cuda_cache

    seen: dict[str, dict[str, str]] = {}

    def key(traced: Any, autodiff: bool, options: Any, chip: str, stages: Any) -> str:
        seen[chip] = dict(stages)
        return chip

    monkeypatch.setattr(cuda_cache.CACHE, "key", key)
    traced = frontend.trace(_rgcn_layer, [(30, 8), (3, 8, 4), (8, 4), (4,)], name="rgcn_layer")
    for chip in ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100"):
        assert cuda_cache.key(traced, False, None, chip) == chip
    assert seen["sm_75"]["gpu"] == "convert-hector-intra-to-gpu"
    for chip in ("sm_80", "sm_86", "sm_90", "sm_100"):
        assert seen[chip]["gpu"] == "convert-hector-intra-to-gpu{mma=true}"
        assert seen[chip]["ptx"].startswith(f"hector-mma-to-nvvm{{chip={chip}}}, ")


@pytest.mark.parametrize("chip", ["sm_80", "sm_90"])
def test_tensor_core_ptx_assembles_without_spills(tmp_path: Any, chip: str) -> None:
    """RGCN's bf16 message GEMM under the GPU chooser's schedule (64 × 64 tiles: 4 warps of
    2 × 4 fragments) in PTX for ``chip``: 8 ``mma.sync`` per warp and 16-deep step, nothing
    in local memory; ``ptxas`` assembles it for the chip without spills (where it is installed)."""
    import shutil
    import subprocess

    from mlir import ir

    from hector.dialects import make_context
    from hector.lowering.gpu.ptx import extract_ptx
    from hector.lowering.gpu.schedule_choice import gpu_gemm_schedule
    from hector.lowering.pipelines import gpu_pipeline, ptx_pipeline
    from hector.passes.pipeline import run_pipeline

    case, roles, _, _ = CASES["messages"]
    case = {**case, "k": 64, "n": 64}
    sched = gpu_gemm_schedule("xw", 64, 64)
    with make_context(), ir.Location.unknown():
        module, _ = _module(case, roles, sched)
        run_pipeline(module, gpu_pipeline(chip))
        run_pipeline(module, ptx_pipeline(chip), verify=False)
        ptx = "\n".join(extract_ptx(module).values())
    assert ptx.count("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") == 8
    assert ".local" not in ptx
    if shutil.which("ptxas") is None:
        pytest.skip("ptxas (CUDA toolkit) not found: the PTX was not assembled")
    src = tmp_path / "mma.ptx"
    src.write_text(ptx)
    cmd = ["ptxas", f"-arch={chip}", "-v", str(src), "-o", str(tmp_path / "mma.cubin")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "0 bytes spill stores" in proc.stderr
