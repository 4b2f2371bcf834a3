"""Target ``cuda`` (hector.targets.cuda): the host path checked on the CPU with an emulated CUDA
runtime (argument packing, launches, autograd plumbing, errors), and numerics on a real GPU
(marked ``gpu``: RGCN/RGAT/HGT on CUDA against PyG on CUDA, and the GNN benchmark)."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from typing import Any

import pytest
import torch
from _typed_graph import META, hetero

import hector
from hector.frontends import trace as frontend
from hector.frontends.compiled import CompiledFunction
from hector.models import _rgcn_layer
from hector.runtime.launch import ptx_entries, ptx_param_counts
from hector.targets import cuda as cuda_target

HAS_CUDA = torch.cuda.is_available()
gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
N, E, R, IN, OUT = 30, 100, 3, 8, 4
NAMES = ["x", "weight", "root", "bias"]


@pytest.fixture(scope="module")
def g() -> hector.HeteroGraph:
    return hector.random_graph(N, E, R, seed=1)


@pytest.fixture(scope="module")
def traced() -> frontend.Traced:
    shapes = [(N, IN), (R, IN, OUT), (IN, OUT), (OUT,)]
    return frontend.trace(_rgcn_layer, shapes, name="rgcn_layer")


def _inputs() -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(N, IN), torch.randn(R, IN, OUT), torch.randn(IN, OUT), torch.randn(OUT)]


# ---------------------------------------------------------------------------------------------
# Without a GPU
# ---------------------------------------------------------------------------------------------


def test_import_without_cuda_is_clean() -> None:
    code = (
        "import sys, hector, hector.targets.cuda; "
        "print(any(m.startswith('cuda') for m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"},
        check=True,
    )
    assert out.stdout.strip() == "False"


@pytest.mark.skipif(HAS_CUDA, reason="checks the no-CUDA error")
def test_cuda_target_without_cuda_is_a_clear_error(g: hector.HeteroGraph) -> None:
    fn = hector.compile(_rgcn_layer, target="cuda")
    with pytest.raises(cuda_target.GpuUnavailableError, match="device 'cuda' needs a CUDA build"):
        fn(g, *_inputs())
    # compiling needs no GPU: every stage's IR is there
    entry = fn.compile_for(g, *_inputs())
    assert ".target sm_" in entry.ptx
    assert "mgpuLaunchKernel" not in entry.ir("host")
    assert "gpu.launch_func" in entry.ir("host")
    assert "llvm.func @_rgcn_layer(" in entry.ir("host")
    with pytest.raises(cuda_target.GpuUnavailableError, match="is_available|CUDA build"):
        cuda_target.require_cuda()


def test_bad_targets_and_devices_are_rejected(g: hector.HeteroGraph) -> None:
    with pytest.raises(ValueError, match="unknown target 'tpu': use 'cpu' or 'cuda'"):
        hector.compile(_rgcn_layer, target="tpu")
    fn = hector.compile(_rgcn_layer)
    x, *rest = _inputs()
    with pytest.raises(ValueError, match="argument 'x' is on meta; Hector takes CPU or CUDA"):
        fn(g, x.to("meta"), *rest)


def test_gpu_chip_from_env_and_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HECTOR_GPU_CHIP", "sm_80")
    assert cuda_target.gpu_chip() == "sm_80"
    monkeypatch.setenv("HECTOR_GPU_CHIP", "ampere")
    with pytest.raises(ValueError, match="HECTOR_GPU_CHIP: unknown GPU architecture 'ampere'"):
        cuda_target.gpu_chip()
    monkeypatch.setenv("HECTOR_GPU_CHIP", "sm_90z")  # the right shape, but no such chip
    with pytest.raises(ValueError, match="unknown GPU architecture 'sm_90z'; Hector compiles for"):
        cuda_target.gpu_chip()
    monkeypatch.delenv("HECTOR_GPU_CHIP")
    if not HAS_CUDA:
        assert cuda_target.gpu_chip() == "sm_90"


def test_kernels_are_compiled_and_cached_per_architecture(traced: frontend.Traced) -> None:
    a = cuda_target.compile_cuda(traced, chip="sm_80")
    assert cuda_target.compile_cuda(traced, chip="sm_80") is a
    b = cuda_target.compile_cuda(traced, chip="sm_90")
    assert b is not a
    assert (a.chip, b.chip) == ("sm_80", "sm_90")
    assert ".target sm_80" in a.ptx
    assert ".target sm_90" in b.ptx
    assert 'chip = "sm_80"' in a.ir("host")
    assert ptx_entries(a.ptx) == ptx_entries(b.ptx)
    assert len(ptx_entries(a.ptx)) == a.ir("gpu").count("gpu.launch_func") > 0
    with pytest.raises(ValueError, match="unknown GPU architecture 'sm90'"):
        cuda_target.compile_cuda(traced, chip="sm90")


def test_memref_descriptor_packs_pointer_sizes_strides() -> None:
    t = torch.zeros(5, 3)
    d = cuda_target.memref_descriptor(t)
    assert d.allocated == d.aligned == t.data_ptr()
    assert d.offset == 0
    assert list(d.shape) == [5, 3]
    assert list(d.strides) == [3, 1]
    with pytest.raises(ValueError, match="contiguous"):
        cuda_target.memref_descriptor(t.t())
    with pytest.raises(ValueError, match="rank ≥ 1"):
        cuda_target.memref_descriptor(torch.tensor(1.0))


def _function_of(kernel: str) -> str:
    """The host function a kernel belongs to (``<function>_<n>_<template>[_reduce]``)."""
    return re.sub(r"_[0-9]+_(gemm|traversal)(_reduce)?$", "", kernel)


def _launch_ranks(gpu_ir: str) -> dict[str, list[int]]:
    """Rank of each memref argument of each kernel, from the launches in the ``gpu`` stage."""
    out = {}
    for m in re.finditer(r"gpu.launch_func\s+@\w+::@(\w+) .*? args\((.*)\)", gpu_ir):
        types = re.findall(r"memref<([^>]*)>", m.group(2))
        out[m.group(1)] = [t.count("x") for t in types]
    return out


def _memrefs(params: tuple[int, ...], ranks: list[int]) -> list[tuple[int, list[int]]]:
    """Split a launch's flat parameters into (aligned pointer, sizes) per memref."""
    out, i = [], 0
    for r in ranks:
        out.append((params[i + 1], list(params[i + 3 : i + 3 + r])))
        i += 3 + 2 * r
    assert i == len(params)
    return out


def test_emulated_launches_carry_the_tensors(g: hector.HeteroGraph, traced) -> None:
    rt = cuda_target.FakeCudaRuntime()
    entry = cuda_target.compile_cuda(traced, runtime=rt)
    tensors = _inputs()
    out = entry.run(g, tuple(tensors), NAMES)
    assert out.shape == (N, OUT)
    # the PTX module is loaded once, at start-up, and holds every launched kernel
    assert rt.events[0] == "mgpuModuleLoadJIT"
    assert len(rt.modules) == 1
    assert ptx_entries(rt.modules[0]) == ptx_entries(entry.ptx)
    counts = ptx_param_counts(entry.ptx)
    assert [launch.kernel for launch in rt.launches] == ptx_entries(entry.ptx)
    for launch in rt.launches:
        assert len(launch.params) == counts[launch.kernel]
        assert launch.block == (256, 1, 1)
        assert launch.grid[0] >= 1
    # every memref a kernel gets is a graph array, an argument, the output or a temporary,
    # and the caller's tensors arrive with their own shapes
    arrays = cuda_target.device_graph_arrays(g, "cpu")
    shapes = {t.data_ptr(): list(t.shape) for t in (*arrays, *tensors, out)}
    temporaries = {addr for addr, _ in rt.history}
    ranks = _launch_ranks(entry.ir("gpu"))
    seen = set()
    for launch in rt.launches:
        for ptr, sizes in _memrefs(launch.params, ranks[launch.kernel]):
            assert ptr in shapes or ptr in temporaries, launch.kernel
            if ptr in shapes:
                assert sizes == shapes[ptr], launch.kernel
                seen.add(ptr)
    assert {tensors[0].data_ptr(), tensors[1].data_ptr(), out.data_ptr()} <= seen
    # temporaries: allocated, zero-filled where summed into, all freed; one stream, synced
    assert rt.history
    assert not rt.allocations
    assert "mgpuMemset32" in rt.events
    assert rt.events[-2:] == ["mgpuStreamSynchronize", "mgpuStreamDestroy"]
    # a second call reuses the loaded module and the cached device graph arrays
    entry.run(g, tuple(tensors), NAMES)
    assert len(rt.modules) == 1
    assert len(rt.launches) == 2 * len(ptx_entries(entry.ptx))
    assert cuda_target.device_graph_arrays(g, "cpu") is arrays


def test_emulated_memset_zeroes_device_memory() -> None:
    rt = cuda_target.FakeCudaRuntime()
    text = """
    module {
      func.func @fill(%out: memref<?xf32>) {
        %c0 = arith.constant 0 : index
        %n = memref.dim %out, %c0 : memref<?xf32>
        %tmp = gpu.alloc (%n) : memref<?xf32>
        %v = arith.constant 2.5 : f32
        gpu.memset %tmp, %v : memref<?xf32>, f32
        gpu.memcpy %out, %tmp : memref<?xf32>, memref<?xf32>
        gpu.dealloc %tmp : memref<?xf32>
        return
      }
    }
    """
    from mlir import ir

    from hector.dialects import make_context
    from hector.lowering.pipelines import LLVM_GPU_HOST
    from hector.passes.pipeline import run_pipeline

    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        run_pipeline(module, LLVM_GPU_HOST, verify=False)
        kernel = cuda_target.GpuKernel(module, rt)
        out = torch.zeros(6)
        kernel("fill", out)
    assert out.tolist() == [2.5] * 6
    assert rt.events == [
        "mgpuStreamCreate",
        "mgpuMemAlloc",
        "mgpuMemset32",
        "mgpuMemcpy",
        "mgpuMemFree",
        "mgpuStreamSynchronize",
        "mgpuStreamDestroy",
    ]


def test_hooks_put_the_host_code_on_the_callers_stream_and_allocator(
    g: hector.HeteroGraph, traced
) -> None:
    """With StreamAllocatorHooks (what a real GPU gets, over PyTorch's caching allocator) no
    stream is created, synchronized or destroyed and no device memory is allocated or freed
    through the CUDA wrappers: every temporary comes from the hooks' allocator and goes back
    to it, on the caller's stream."""
    rt = cuda_target.FakeCudaRuntime()
    live: dict[int, torch.Tensor] = {}
    log: list[tuple[str, int, int]] = []

    def alloc(size: int, stream: int) -> int:
        buf = torch.empty(max(size, 1), dtype=torch.uint8)
        live[buf.data_ptr()] = buf
        log.append(("alloc", size, stream))
        return buf.data_ptr()

    def free(ptr: int, stream: int) -> None:
        del live[ptr]
        log.append(("free", ptr, stream))

    hooks = cuda_target.StreamAllocatorHooks(alloc, free)
    staged_entry = cuda_target.compile_cuda(traced, runtime=cuda_target.FakeCudaRuntime())
    kernel = cuda_target.GpuKernel(staged_entry.kernel.module, rt, hooks=hooks)
    outs = [torch.empty(N, OUT)]
    arrays = [*cuda_target.device_graph_arrays(g, "cpu"), *_inputs(), *outs]
    kernel("rgcn_layer", *arrays, stream=0x57)
    kernel("rgcn_layer", *arrays, stream=0x57)
    assert rt.launches
    banned = {"mgpuStreamCreate", "mgpuStreamDestroy", "mgpuStreamSynchronize"}
    assert not banned & set(rt.events)
    assert not {"mgpuMemAlloc", "mgpuMemFree"} & set(rt.events)
    allocs = [e for e in log if e[0] == "alloc"]
    assert allocs
    assert all(stream == 0x57 for _, _, stream in log)
    assert len(allocs) == len(log) - len(allocs)  # every temporary freed
    assert not live
    assert hooks.events.count("stream") == 2  # one per call, handing out the caller's stream


def test_empty_graph_skips_launches_instead_of_zero_block_grids(traced) -> None:
    """A launch over an empty index array is skipped (hector-skip-empty-launches): no launch
    asks for a zero-block grid; launches over nodes still run."""
    empty = hector.random_graph(N, 0, R, seed=1)
    rt = cuda_target.FakeCudaRuntime()
    entry = cuda_target.compile_cuda(traced, runtime=rt)
    out = entry.run(empty, tuple(_inputs()), NAMES)
    assert out.shape == (N, OUT)
    assert rt.launches
    assert all(min(launch.grid) >= 1 for launch in rt.launches)
    launched = [launch.kernel for launch in rt.launches]
    assert len(launched) < len(ptx_entries(entry.ptx))  # the edge-wise GEMM was skipped
    assert not rt.allocations


def test_driver_errors_become_exceptions(g: hector.HeteroGraph, traced) -> None:
    rt = cuda_target.FakeCudaRuntime(fail=("mgpuLaunchKernel",))
    entry = cuda_target.compile_cuda(traced, runtime=rt)
    with pytest.raises(cuda_target.GpuRuntimeError, match="running rgcn_layer: CUDA driver call"):
        entry.run(g, tuple(_inputs()), NAMES)
    rt = cuda_target.FakeCudaRuntime(fail=("mgpuModuleLoadJIT",))
    with pytest.raises(cuda_target.GpuRuntimeError, match="loading the PTX module"):
        cuda_target.compile_cuda(traced, runtime=rt)


def test_rows_are_checked_before_anything_runs(g: hector.HeteroGraph, traced) -> None:
    rt = cuda_target.FakeCudaRuntime()
    entry = cuda_target.compile_cuda(traced, runtime=rt)
    x, *rest = _inputs()
    with pytest.raises(ValueError, match=f"argument 'x' is node-wise: expected {N} rows"):
        entry.run(g, (x[:5], *rest), NAMES)
    assert not rt.launches


def test_training_through_autograd_on_the_cuda_target(g: hector.HeteroGraph) -> None:
    fn = hector.compile(_rgcn_layer, target="cuda")
    x, w, w0, b = (t.requires_grad_() for t in _inputs())
    with cuda_target.emulate() as rt:
        out = fn(g, x, w, w0, b)
        out.sum().backward()
    kernels = {_function_of(launch.kernel) for launch in rt.launches}
    assert kernels == {"_rgcn_layer_train", "_rgcn_layer_backward"}
    assert out.shape == (N, OUT)
    assert [t.grad.shape for t in (x, w, w0, b)] == [t.shape for t in (x, w, w0, b)]
    entry = next(iter(fn._cache.values()))
    assert isinstance(entry, cuda_target.GpuExecEntry)
    assert set(entry.staged.stages) >= {"inter", "intra", "gpu", "ptx", "host"}


def _gpu_kernels_on_cpu(traced: frontend.Traced, options: Any) -> Any:
    """The GPU lowering of ``traced`` (training) with its kernels run on the CPU: every launch
    a sequential loop over blocks and threads (hector-gpu-kernels-on-host), JIT-compiled like
    the CPU back end. Real numbers from the GPU kernels' own code, without a GPU."""
    from mlir import ir

    from hector.lowering.cpu.jit import CpuKernel
    from hector.lowering.pipelines import LLVM_CPU
    from hector.passes.pipeline import run_pipeline
    from hector.targets.cpu import CpuEntry
    from hector.targets.driver import run_stages

    staged = run_stages(traced, "gpu", until="gpu", autodiff=True, options=options)
    with staged.context, ir.Location.unknown():
        run_pipeline(staged.module, "hector-gpu-kernels-on-host", verify=False)
        for op in staged.module.body.operations:
            if "hector.outputs" in op.operation.attributes:
                op.operation.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
        run_pipeline(staged.module, LLVM_CPU, verify=False)
        return CpuEntry(traced, staged, CpuKernel(staged.module))


@pytest.mark.parametrize("model", ["rgcn", "rgat", "hgt"])
def test_gpu_kernels_compute_what_the_cpu_path_computes(g: hector.HeteroGraph, model: str) -> None:
    """Forward (``_train``) and backward of each model through the GPU kernels (run on the
    CPU, thread by thread) equal the CPU back end's: the weight gradients' partials and
    reduction, the atomics, the guards and the grid arithmetic compute the right numbers."""
    from hector import bundle
    from hector.models import HGTLayer, RGATLayer
    from hector.targets.cpu import compile_traced

    torch.manual_seed(0)
    if model == "rgcn":
        graph, inputs = g, tuple(_inputs())
        fn = hector.compile(_rgcn_layer)
    else:
        if model == "hgt":
            graph, _, x = hetero("cpu")
            layer: Any = HGTLayer(8, 8, *META, heads=2)
        else:
            graph, x = g, torch.randn(N, IN)
            layer = RGATLayer(IN, 4, R, heads=2)
        fn, inputs = bundle._capture(layer, graph, (x,))
    traced = frontend.trace(fn.fn, [tuple(t.shape) for t in inputs])
    options = fn.options_for(graph)
    gpu = _gpu_kernels_on_cpu(traced, options)
    cpu = compile_traced(traced, autodiff=True, options=options)
    name = traced.name
    want_fwd = cpu.call(f"{name}_train", graph, list(inputs))
    have_fwd = gpu.call(f"{name}_train", graph, list(inputs))
    for have, want in zip(have_fwd, want_fwd, strict=True):
        torch.testing.assert_close(have, want, rtol=1e-4, atol=1e-5)
    n = len(traced.result_kinds)
    d_out = [torch.randn_like(t) for t in want_fwd[:n]]
    args = [*inputs, *want_fwd[n:], *d_out]
    want_bwd = cpu.call(f"{name}_backward", graph, args)
    have_bwd = gpu.call(f"{name}_backward", graph, args)
    assert len(have_bwd) == len(want_bwd) > 1
    for have, want in zip(have_bwd, want_bwd, strict=True):
        torch.testing.assert_close(have, want, rtol=1e-4, atol=1e-4)


def test_weight_gradient_over_many_chunks_and_an_empty_graph() -> None:
    """The weight gradient's partials over many chunks (more rows than one chunk holds), and
    over none (an empty graph: the gradient is zero, not garbage)."""
    from hector.targets.cpu import compile_traced

    traced = frontend.trace(
        _rgcn_layer, [(N, IN), (R, IN, OUT), (IN, OUT), (OUT,)], name="rgcn_layer"
    )
    for graph in (hector.random_graph(600, 3000, R, seed=2), hector.random_graph(N, 0, R, seed=1)):
        torch.manual_seed(1)
        inputs = [torch.randn(graph.num_nodes, IN), *(_inputs()[1:])]
        options = CompiledFunction(_rgcn_layer).options_for(graph)
        gpu = _gpu_kernels_on_cpu(traced, options)
        cpu = compile_traced(traced, autodiff=True, options=options)
        fwd = cpu.call("rgcn_layer_train", graph, inputs)
        args = [*inputs, *fwd[1:], torch.randn_like(fwd[0])]
        for have, want in zip(
            gpu.call("rgcn_layer_backward", graph, args),
            cpu.call("rgcn_layer_backward", graph, args),
            strict=True,
        ):
            torch.testing.assert_close(have, want, rtol=1e-4, atol=1e-4)


# ---- scheduled GEMMs: the shared-memory tiled kernels (lowering/gpu/gemm.py, xty.py) --------


def _gemm_function(
    variant: str,
    epilogue: str,
    roles: tuple[str, ...],
    k: int,
    n: int,
    slices: int | None,
    schedule: Any,
    slice_rows: int | None = None,
) -> tuple[Any, list[str]]:
    """A module with one ``@gemm`` function around one ``gemm_template`` (operands ``a``,
    ``weight``, the optional ``roles``, ``out``), built through the builders; returns it and
    its arguments' roles in order."""
    from mlir import ir
    from mlir.dialects import func

    from hector.dialects import hector_intra as intra

    dyn = ir.ShapedType.get_dynamic_size()
    f32, i32 = ir.F32Type.get(), ir.IntegerType.get_signless(32)
    wshape = [n, k] if variant == "xwt" else [k, n]
    sliced = [slices] if slices else []
    types = {
        "a": ir.MemRefType.get([dyn, k], f32),
        # xty: the row gradients [M, N]; else the (sliced) weight
        "weight": ir.MemRefType.get([dyn, n] if variant == "xty" else sliced + wshape, f32),
    }
    for role in ("gather_index", "weight_index", "scatter_index"):
        if role in roles:
            types[role] = ir.MemRefType.get([dyn], i32)
    if "row_scale" in roles:
        types["row_scale"] = ir.MemRefType.get([dyn, 1], f32)
    out_shape = sliced + [k, n] if variant == "xty" else [dyn, n]
    types["out"] = ir.MemRefType.get(out_shape, f32)
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        fn = func.FuncOp("gemm", ir.FunctionType.get(list(types.values()), []))
        fn.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
        block = fn.add_entry_block()
        with ir.InsertionPoint(block):
            extra = {} if schedule is None else {"schedule": schedule.to_attr()}
            if slice_rows is not None:
                extra["slice_rows"] = ir.IntegerAttr.get(
                    ir.IntegerType.get_signless(64), slice_rows
                )
            operands = dict(zip(types, block.arguments, strict=True))
            intra.OPS.gemm_template(
                **operands, variant=variant, epilogue=epilogue, tile_n=4, block_size=64, extra=extra
            )
            func.ReturnOp([])
    return module, list(types)


def _gemm_on_host(case: dict[str, Any], schedule: Any, arrays: dict[str, torch.Tensor]) -> Any:
    """Run ``case``'s GEMM through the GPU lowering, its kernel executed on the CPU (block by
    block, phase by phase for the tiled kernel); returns ``out`` after it."""
    from mlir import ir

    from hector.dialects import make_context
    from hector.lowering.cpu.jit import CpuKernel
    from hector.lowering.pipelines import LLVM_CPU
    from hector.passes.pipeline import run_pipeline

    with make_context(), ir.Location.unknown():
        module, order = _gemm_function(**case, schedule=schedule)
        run_pipeline(module, "convert-hector-intra-to-gpu, hector-gpu-kernels-on-host")
        run_pipeline(module, LLVM_CPU, verify=False)
        out = arrays["out"].clone()
        args = [arrays[r].contiguous().numpy() for r in order[:-1]] + [out.numpy()]
        CpuKernel(module)("gemm", *args)
    return out


def _gemm_reference(case: dict[str, Any], arrays: dict[str, torch.Tensor]) -> torch.Tensor:
    """What the template's description says ``out`` becomes, in eager PyTorch."""
    a, w, out = arrays["a"], arrays["weight"], arrays["out"].clone()
    m = len(arrays["gather_index"]) if "gather_index" in arrays else a.shape[0]
    if "weight_index" in arrays:
        m = len(arrays["weight_index"])
    rows = arrays["gather_index"].long() if "gather_index" in arrays else torch.arange(m)
    x = a[rows]
    if case["variant"] == "xty":  # out[t] += x_i^T ⊗ g_i
        if out.dim() == 2:
            return (out.double() + x.double().T @ w.double()).float()
        t = arrays["weight_index"].long() if "weight_index" in arrays else None
        if t is None:
            t = torch.arange(m) // case["slice_rows"]
        outer = torch.einsum("mk,mn->mkn", x.double(), w.double())
        return out.double().index_add(0, t, outer).float()
    if case["variant"] == "xwt":
        w = w.transpose(-1, -2)
    if w.dim() == 3:
        if "weight_index" in arrays:
            t = arrays["weight_index"].long()
        else:
            t = torch.arange(m) // case["slice_rows"]
        v = torch.einsum("mk,mkn->mn", x.double(), w[t].double())
    else:
        v = x.double() @ w.double()
    if "row_scale" in arrays:
        v = v * arrays["row_scale"].double()
    dest = arrays["scatter_index"].long() if "scatter_index" in arrays else torch.arange(m)
    if case["epilogue"] == "store":
        out[dest] = v.float()
    else:
        out = out.double().index_add(0, dest, v).float()
    return out


TILED_CASES = {
    # RGCN's scatter-GEMM: gathered rows, edge types sorted (tiles of one slice and tiles
    # spanning two), row_scale, an atomic add into destinations; M, N and K not multiples of
    # the tiles.
    "messages": (
        dict(variant="xw", epilogue="add", k=20, n=12, slices=3),
        ("gather_index", "weight_index", "scatter_index", "row_scale"),
        dict(tile_m=16, tile_n=8, tile_k=8, unroll=2, vector=2),
        True,
    ),
    # Unsorted types: every tile mixes slices (each row reads its own slice).
    "mixed_slices": (
        dict(variant="xw", epilogue="store", k=16, n=8, slices=4),
        ("gather_index", "weight_index"),
        dict(tile_m=8, tile_n=8, tile_k=4, unroll=4, vector=1),
        False,
    ),
    # Input gradient: the weight read transposed.
    "xwt": (
        dict(variant="xwt", epilogue="store", k=12, n=10, slices=3),
        ("weight_index",),
        dict(tile_m=4, tile_n=4, tile_k=5, unroll=2, vector=2),
        True,
    ),
    # A shared weight, one row per block (nothing staged but the row), accumulating in place.
    "shared_weight_add": (
        dict(variant="xw", epilogue="add", k=7, n=9, slices=None),
        (),
        dict(tile_m=1, tile_n=0, tile_k=0, unroll=1, vector=3),
        False,
    ),
    # Weight gradients: sorted slices (runs flushed at each change), unsorted slices (a
    # slice's runs come back within a chunk), a shared weight; more rows than one chunk.
    "xty_sorted": (
        dict(variant="xty", epilogue="add", k=20, n=12, slices=3),
        ("gather_index", "weight_index"),
        dict(tile_m=16, tile_k=8, tile_n=8, unroll=2, vector=2),
        True,
    ),
    "xty_unsorted": (
        dict(variant="xty", epilogue="add", k=20, n=12, slices=3),
        ("gather_index", "weight_index"),
        dict(tile_m=8, tile_k=0, tile_n=0, unroll=4, vector=4),
        False,
    ),
    "xty_shared": (
        dict(variant="xty", epilogue="add", k=9, n=5, slices=None),
        ("gather_index",),
        dict(tile_m=32, tile_k=4, tile_n=5, unroll=2, vector=5),
        False,
    ),
    # Per-slice products (HGT's fold): row i uses slice i / slice_rows.
    "slice_rows": (
        dict(variant="xw", epilogue="store", k=6, n=5, slices=4, slice_rows=6),
        (),
        dict(tile_m=4, tile_n=5, tile_k=3, unroll=1, vector=5),
        False,
    ),
}


def _tiled_arrays(case: dict[str, Any], roles: tuple[str, ...], sorted_types: bool) -> dict:
    torch.manual_seed(7)
    k, n, slices, variant = case["k"], case["n"], case["slices"], case["variant"]
    m = 45 if case.get("slice_rows") is None else slices * case["slice_rows"]
    wshape = (n, k) if variant == "xwt" else (k, n)
    sliced = (slices,) if slices else ()
    arrays = {
        "a": torch.randn(60 if "gather_index" in roles else m, k),
        "weight": torch.randn(*(sliced + wshape)),
        "out": torch.randn(50 if "scatter_index" in roles else m, n),
    }
    if variant == "xty":  # 600 rows: three chunks of the weight gradient's 256
        m = 600
        arrays["weight"], arrays["out"] = torch.randn(m, n), torch.randn(*sliced, k, n)
    if "gather_index" in roles:
        arrays["gather_index"] = torch.randint(0, 60, (m,), dtype=torch.int32)
    if "weight_index" in roles:
        types = torch.randint(0, slices, (m,), dtype=torch.int32)
        arrays["weight_index"] = torch.sort(types).values if sorted_types else types
    if "scatter_index" in roles:
        arrays["scatter_index"] = torch.randint(0, 50, (m,), dtype=torch.int32)
    if "row_scale" in roles:
        arrays["row_scale"] = torch.rand(m, 1)
    return arrays


@pytest.mark.parametrize("name", sorted(TILED_CASES))
def test_tiled_gemm_kernels_compute_the_template(name: str) -> None:
    """The tiled kernel, run on the CPU block by block (every thread up to a barrier, then the
    next phase), computes what the template says (eager PyTorch in float64) and what the
    untiled kernel computes."""
    from hector.dialects.hector_intra import Schedule

    case, roles, sched, sorted_types = TILED_CASES[name]
    case = {**case, "roles": roles}
    arrays = _tiled_arrays(case, roles, sorted_types)
    want = _gemm_reference(case, arrays)
    tiled = _gemm_on_host(case, Schedule(**sched), arrays)
    plain = _gemm_on_host(case, None, arrays)
    torch.testing.assert_close(tiled, want, rtol=1e-5, atol=1e-5)
    # Same order of products; the tiled kernel's may fuse into FMAs (one rounding fewer).
    torch.testing.assert_close(tiled, plain, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["messages", "xty_sorted", "xty_shared"])
def test_tiled_gemm_over_no_rows_leaves_out_alone(name: str) -> None:
    """An empty index array: a zero-block grid runs nothing; a weight gradient adds zeros
    (one chunk of no rows)."""
    from hector.dialects.hector_intra import Schedule

    case, roles, sched, _ = TILED_CASES[name]
    case = {**case, "roles": roles}
    arrays = _tiled_arrays(case, roles, True)
    for role in ("gather_index", "weight_index", "scatter_index", "row_scale"):
        if role in arrays:
            arrays[role] = arrays[role][:0]
    if case["variant"] == "xty":
        arrays["weight"] = arrays["weight"][:0]
    assert torch.equal(_gemm_on_host(case, Schedule(**sched), arrays), arrays["out"])


def test_tiled_launch_geometry_follows_the_schedule() -> None:
    """Through the host stage and the emulated driver: one block per tile_m × tile_n output
    tile, (tile_m / unroll) × (tile_n / vector) threads per block."""
    from mlir import ir

    from hector.dialects import make_context
    from hector.dialects.hector_intra import Schedule
    from hector.lowering.pipelines import LLVM_GPU_HOST, ptx_pipeline
    from hector.passes.pipeline import run_pipeline

    case, roles, _, _ = TILED_CASES["messages"]
    case = {**case, "roles": roles}
    arrays = _tiled_arrays(case, roles, True)  # M = 45 rows, N = 12 columns
    geometry = {}
    for sched in (dict(tile_m=16, tile_n=8, unroll=2, vector=2), dict(tile_m=32, tile_n=0)):
        rt = cuda_target.FakeCudaRuntime()
        with make_context(), ir.Location.unknown():
            module, order = _gemm_function(**case, schedule=Schedule(**sched))
            run_pipeline(module, "convert-hector-intra-to-gpu")
            run_pipeline(module, ptx_pipeline(), verify=False)
            run_pipeline(module, LLVM_GPU_HOST, verify=False)
            kernel = cuda_target.GpuKernel(module, rt)
            kernel("gemm", *(arrays[r] for r in order))
        (launch,) = rt.launches
        geometry[launch.kernel, launch.grid, launch.block] = 1
    assert list(geometry) == [
        ("gemm_0_gemm", (3 * 2, 1, 1), (8 * 4, 1, 1)),  # ceil(45/16) × ceil(12/8); 8 × 4
        ("gemm_0_gemm", (2 * 1, 1, 1), (32 * 12, 1, 1)),  # ceil(45/32) × 1; 32 × 12
    ]


@pytest.mark.parametrize(("variant", "dtype"), [("xw", "f32"), ("xty", "f32"), ("xw", "bf16")])
def test_gpu_check_kernels_launch_as_the_lowering_does(tmp_path, variant: str, dtype: str) -> None:
    """The kernels scripts/gpu_check.sh times (tiled and untiled, from
    ``write_bench_kernels``, and the tensor-core kernel first for bf16) carry the launches the
    lowering's own host code makes (checked through the emulated driver on a small shape:
    kernels, grids, blocks, in order), and the GPU chooser's schedule."""
    from mlir import ir

    from hector.dialects import make_context
    from hector.lowering.pipelines import LLVM_GPU_HOST, ptx_pipeline
    from hector.passes.pipeline import run_pipeline
    from hector_bench import tiled_gemm_kernels as G

    shape = G.BenchShape(1000, 100, 64, 96, 3, variant=variant, dtype=dtype)
    files = G.write_bench_kernels(str(tmp_path), "sm_90", (shape,))
    assert files[-1] == "kernels.json"
    index = json.loads((tmp_path / "kernels.json").read_text())
    kinds = ["tiled", "untiled"] if dtype == "f32" else ["mma", "tiled", "untiled"]
    assert [r["kind"] for r in index] == kinds
    assert index[0]["schedule"]["tile_m"] == (32 if variant == "xty" else 64)
    torch.manual_seed(0)
    xty = variant == "xty"
    half = torch.bfloat16 if dtype == "bf16" else torch.float32
    tensors = [
        torch.randn(shape.nodes, shape.k).to(half),
        torch.randn(shape.rows, shape.n) if xty else torch.randn(shape.slices, shape.k, shape.n),
        torch.randint(0, shape.nodes, (shape.rows,), dtype=torch.int32),
        torch.sort(torch.randint(0, shape.slices, (shape.rows,), dtype=torch.int32)).values,
        torch.zeros(shape.slices, shape.k, shape.n) if xty else torch.zeros(shape.rows, shape.n),
    ]
    tensors[1] = tensors[1].to(half)
    for rec in index:
        ptx = (tmp_path / rec["file"]).read_text()
        assert ptx_entries(ptx) == [launch["entry"] for launch in rec["launches"]]
        assert ("bar.sync" in ptx) == (rec["kind"] != "untiled")
        assert ("mma.sync.aligned.m16n8k16" in ptx) == (rec["kind"] == "mma")
        sched = None if rec["schedule"] is None else G.Schedule(**rec["schedule"])
        rt = cuda_target.FakeCudaRuntime()
        with make_context(), ir.Location.unknown():
            module = G.bench_module(shape, sched)
            mma = "{mma=true}" if rec["kind"] == "mma" else ""
            run_pipeline(module, f"convert-hector-intra-to-gpu{mma}")
            run_pipeline(module, ptx_pipeline(), verify=False)
            run_pipeline(module, LLVM_GPU_HOST, verify=False)
            cuda_target.GpuKernel(module, rt)("gemm", *tensors)
        have = [(launch.kernel, launch.grid, launch.block) for launch in rt.launches]
        want = [(x["entry"], (x["grid"], 1, 1), (x["block"], 1, 1)) for x in rec["launches"]]
        assert have == want
        if xty:  # the partials temporary: the size the record asks the check to allocate
            (size,) = [n for _, n in rt.history]
            assert size == 4 * math.prod(rec["temps"]["partials"])


def test_gpu_check_launches_through_the_launcher(tmp_path) -> None:
    """gpu_check.sh's tiled-gemm section launches each record through
    ``hector.runtime.launch.Launcher``: with the fake driver, every launch's arguments expand
    to exactly the parameters of its PTX entry (the Launcher checks), and the driver sees the
    record's grid and block."""
    from _fake_driver import FakeDriver

    from hector.runtime.launch import Launcher, MemRef
    from hector_bench import tiled_gemm_kernels as G

    shapes = (G.BenchShape(1000, 100, 16, 8, 3), G.BenchShape(1000, 100, 16, 8, 3, "xty"))
    G.write_bench_kernels(str(tmp_path), "sm_90", shapes)
    index = json.loads((tmp_path / "kernels.json").read_text())
    for rec in index:
        rows, k, n, s = rec["rows"], rec["k"], rec["n"], rec["slices"]
        xty = rec["variant"] == "xty"
        dims = {
            "a": [rec["nodes"], k],
            "weight": [rows, n] if xty else [s, k, n],
            "gather_index": [rows],
            "weight_index": [rows],
            "out": [s, k, n] if xty else [rows, n],
            **rec["temps"],
        }
        mems = {
            role: MemRef.from_pointer(
                0x1000 * (i + 1), d, [math.prod(d[j + 1 :]) for j in range(len(d))]
            )
            for i, (role, d) in enumerate(dims.items())
        }
        driver = FakeDriver()
        launcher = Launcher(driver)
        ptx = (tmp_path / rec["file"]).read_text()
        for x in rec["launches"]:
            launcher.launch(
                ptx, x["entry"], (x["grid"], 1, 1), (x["block"], 1, 1), [mems[r] for r in x["args"]]
            )
        want = [((x["grid"], 1, 1), (x["block"], 1, 1)) for x in rec["launches"]]
        assert [(launch["grid"], launch["block"]) for launch in driver.launches] == want
        assert [launch["function"][1] for launch in driver.launches] == [
            x["entry"] for x in rec["launches"]
        ]


def test_gpu_chooser_schedules_fit_the_gpu() -> None:
    """``gpu_gemm_schedule`` gives every width and depth a schedule within the block, shared
    memory and register limits."""
    from mlir import ir

    from hector.dialects import make_context
    from hector.lowering.gpu.gemm import gemm_tiling
    from hector.lowering.gpu.schedule_choice import gpu_gemm_schedule
    from hector.lowering.gpu.tile_support import MAX_THREADS, SHARED_BYTES_LIMIT
    from hector.lowering.gpu.xty import xty_tiling

    with make_context(), ir.Location.unknown():
        for n in (1, 2, 3, 4, 7, 8, 16, 33, 64, 100, 128, 256):
            for k in (1, 8, 64, 512):
                for variant in ("xw", "xwt", "xty"):
                    sched = gpu_gemm_schedule(variant, k, n)
                    resolve = xty_tiling if variant == "xty" else gemm_tiling
                    tiling = resolve(sched, k, n, True, ir.Location.unknown())
                    assert 1 <= tiling.threads <= MAX_THREADS
                    assert tiling.shared_bytes <= SHARED_BYTES_LIMIT


def _schedule_gemms(module: Any, schedule: Any) -> int:
    """Give every gemm_template of ``module`` ``schedule``; returns how many."""
    count = 0
    for op in _ops(module.operation, "hector_intra.gemm_template"):
        op.attributes["schedule"] = schedule.to_attr()
        count += 1
    return count


def _ops(root: Any, name: str) -> list[Any]:
    from mlir import ir

    found = []

    def visit(op: Any) -> Any:
        if op.name == name:
            found.append(op)
        return ir.WalkResult.ADVANCE

    root.walk(visit)
    return found


@pytest.mark.parametrize(
    ("model", "schedules"), [("rgcn", "small"), ("hgt", "small"), ("rgcn", "chooser")]
)
def test_tiled_gpu_kernels_train_like_the_cpu_path(
    g: hector.HeteroGraph, model: str, schedules: str
) -> None:
    """Forward and backward of RGCN and HGT with every GEMM scheduled (weight gradients
    included; small tiles, or the GPU chooser's through ``{tile=true}``), the GPU kernels run
    on the CPU: the same results as the CPU back end."""
    from mlir import ir

    from hector import bundle
    from hector.dialects.hector_intra import Schedule
    from hector.lowering.cpu.jit import CpuKernel
    from hector.lowering.pipelines import LLVM_CPU
    from hector.models import HGTLayer
    from hector.passes.pipeline import run_pipeline
    from hector.targets.cpu import CpuEntry, compile_traced
    from hector.targets.driver import run_stages

    torch.manual_seed(0)
    if model == "rgcn":
        graph, inputs = g, tuple(_inputs())
        fn = hector.compile(_rgcn_layer)
    else:
        graph, _, x = hetero("cpu")
        fn, inputs = bundle._capture(HGTLayer(8, 8, *META, heads=2), graph, (x,))
    traced = frontend.trace(fn.fn, [tuple(t.shape) for t in inputs])
    options = fn.options_for(graph)
    staged = run_stages(traced, "gpu", until="intra", autodiff=True, options=options)
    with staged.context, ir.Location.unknown():
        if schedules == "small":
            schedule = Schedule(tile_m=8, tile_n=4, tile_k=4, unroll=2, vector=2)
            assert _schedule_gemms(staged.module, schedule) >= 3
            run_pipeline(staged.module, "convert-hector-intra-to-gpu", verify=False)
        else:
            run_pipeline(staged.module, "convert-hector-intra-to-gpu{tile=true}", verify=False)
        assert "gpu.barrier" in str(staged.module)
        run_pipeline(staged.module, "hector-gpu-kernels-on-host", verify=False)
        for op in staged.module.body.operations:
            if "hector.outputs" in op.operation.attributes:
                op.operation.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
        run_pipeline(staged.module, LLVM_CPU, verify=False)
        tiled = CpuEntry(traced, staged, CpuKernel(staged.module))
    cpu = compile_traced(traced, autodiff=True, options=options)
    name = traced.name
    want_fwd = cpu.call(f"{name}_train", graph, list(inputs))
    have_fwd = tiled.call(f"{name}_train", graph, list(inputs))
    for have, want in zip(have_fwd, want_fwd, strict=True):
        torch.testing.assert_close(have, want, rtol=1e-4, atol=1e-5)
    n = len(traced.result_kinds)
    args = [*inputs, *want_fwd[n:], *(torch.randn_like(t) for t in want_fwd[:n])]
    for have, want in zip(
        tiled.call(f"{name}_backward", graph, args),
        cpu.call(f"{name}_backward", graph, args),
        strict=True,
    ):
        torch.testing.assert_close(have, want, rtol=1e-4, atol=1e-4)


def test_tiled_ptx_assembles_without_spills(tmp_path) -> None:
    """The tiled kernel's PTX (sm_90) goes through ptxas: shared memory and one barrier, no
    register spills (where ptxas is installed)."""
    from mlir import ir

    from hector.dialects import make_context
    from hector.dialects.hector_intra import Schedule
    from hector.lowering.gpu.ptx import extract_ptx
    from hector.lowering.pipelines import ptx_pipeline
    from hector.passes.pipeline import run_pipeline

    case, roles, _, _ = TILED_CASES["messages"]
    with make_context(), ir.Location.unknown():
        sched = Schedule(tile_m=64, tile_n=0, tile_k=16, unroll=4, vector=4)
        module, _ = _gemm_function(**{**case, "n": 64, "k": 64}, roles=roles, schedule=sched)
        run_pipeline(module, "convert-hector-intra-to-gpu")
        run_pipeline(module, ptx_pipeline(), verify=False)
        ptx = "\n".join(extract_ptx(module).values())
    for instruction in ("bar.sync", "ld.shared", "st.shared"):
        assert instruction in ptx
    assert ".local" not in ptx
    if shutil.which("ptxas") is None:
        pytest.skip("ptxas (CUDA toolkit) not found: the PTX was not assembled")
    src = tmp_path / "tiled.ptx"
    src.write_text(ptx)
    proc = subprocess.run(
        ["ptxas", "-arch=sm_90", "-v", str(src), "-o", str(tmp_path / "tiled.cubin")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "0 bytes spill stores" in proc.stderr
    assert "used 1 barriers" in proc.stderr
