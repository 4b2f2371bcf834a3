"""Unified tensors: no-CUDA behaviour (here), and zero-copy gathers on a GPU (marked ``gpu``)."""

from __future__ import annotations

import gc
import shutil
import subprocess
import sys

import pytest
import torch

import hector
from hector.data import unified as U

HAS_CUDA = torch.cuda.is_available()
gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")


def test_import_without_cuda_is_clean() -> None:
    code = (
        "import hector, hector.data.unified, hector.runtime.launch; print(callable(hector.unified))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"},
        check=True,
    )
    assert out.stdout.strip() == "True"


def test_hector_unified_is_callable_whatever_the_import_order() -> None:
    from hector.data.unified import gather, make_unified

    assert hector.unified is make_unified
    assert callable(gather)


@pytest.mark.skipif(HAS_CUDA, reason="checks the no-CUDA error")
def test_without_cuda_is_a_clear_error() -> None:
    with pytest.raises(U.UnifiedError, match="needs CUDA.*allow_host_fallback=True"):
        hector.unified(torch.ones(4, 3))


@pytest.mark.skipif(HAS_CUDA, reason="checks the no-CUDA fallback")
def test_host_fallback_is_flagged_and_views_share_it() -> None:
    x = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    u = hector.unified(x, "host", allow_host_fallback=True)
    assert torch.equal(u, x)
    assert u.data_ptr() != x.data_ptr()
    x.zero_()
    assert u[3, 2].item() == 11.0
    info = U.unified_info(u)
    assert info == U.UnifiedInfo("host", False, None, 48)
    view = u[1:]
    del u
    gc.collect()
    assert U.is_unified(view)
    assert U.affinity(view) == "host"
    assert view[0, 0].item() == 3.0
    with pytest.raises(U.UnifiedError, match="host fallback .* no device pointer"):
        U.device_pointer(view)
    assert not U.is_unified(x)
    assert not U.is_unified(view.clone())  # a copy is ordinary memory


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="affinity must be 'gpu' or 'host', got 'cpu'"):
        hector.unified(torch.ones(2), "cpu", allow_host_fallback=True)
    with pytest.raises(TypeError, match="expects a torch.Tensor, got list"):
        hector.unified([1.0, 2.0], allow_host_fallback=True)
    with pytest.raises(ValueError, match="dense"):
        hector.unified(torch.eye(3).to_sparse(), allow_host_fallback=True)
    with pytest.raises(U.UnifiedError, match="not a unified tensor"):
        U.affinity(torch.ones(2))
    with pytest.raises(U.UnifiedError, match="not a unified tensor"):
        U.device_pointer(torch.ones(2))


@pytest.mark.skipif(HAS_CUDA, reason="checks the no-CUDA fallback")
def test_gather_falls_back_to_index_select() -> None:
    table = hector.unified(torch.randn(50, 7), allow_host_fallback=True)
    index = torch.tensor([3, 0, 49, 3], dtype=torch.int32)
    assert torch.equal(U.gather(table, index), table.index_select(0, index.long()))


def test_gather_rejects_bad_inputs() -> None:
    table = torch.randn(5, 4)
    with pytest.raises(U.UnifiedError, match="gather reads a unified table"):
        U.gather(table, torch.tensor([0]))
    ut = hector.unified(torch.randn(5, 4), allow_host_fallback=not HAS_CUDA)
    with pytest.raises(ValueError, match="index must be a 1-D int32/int64 tensor"):
        U.gather(ut, torch.tensor([0.0]))
    u3 = hector.unified(torch.randn(2, 2, 2), allow_host_fallback=not HAS_CUDA)
    with pytest.raises(ValueError, match="contiguous 2-D float32 table"):
        U.gather(u3, torch.tensor([0]))


def test_gather_kernel_source_follows_the_spec() -> None:
    text = U.gather_kernel_source(64, "none", 128)
    assert '"hector_intra.traversal_template"(%arg0, %arg1, %arg2)' in text
    assert "operandSegmentSizes = array<i32: 1, 0, 0, 1, 0, 1>" in text  # index, x, out
    assert 'fn = "copy"' in text
    assert 'align = "none"' in text
    assert "block_size = 128" in text
    with pytest.raises(ValueError, match="align must be one of none, warp128"):
        U.gather_kernel_source(64, "warp64")
    with pytest.raises(ValueError, match="must be positive"):
        U.gather_kernel_source(0)


def test_gather_kernel_ptx() -> None:
    ptx = U.gather_kernel_ptx(100, "warp128")
    assert ".target sm_90" in ptx
    assert f".visible .entry {U.gather_kernel_name('warp128')}(" in ptx
    flat = U.gather_kernel_ptx(64, "none", 128)
    assert f".visible .entry {U.gather_kernel_name('none')}(" in flat


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not installed")
@pytest.mark.parametrize("align", U.ALIGN_MODES)
def test_gather_kernel_ptx_assembles(align: str, tmp_path) -> None:
    src = tmp_path / "k.ptx"
    src.write_text(U.gather_kernel_ptx(100, align))
    res = subprocess.run(
        ["ptxas", "-arch=sm_90", str(src), "-o", str(tmp_path / "k.cubin")],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr


# ---- on a GPU ------------------------------------------------------------------------------


@gpu
@needs_cuda
def test_unified_tensor_is_mapped_pinned_memory() -> None:
    x = torch.randn(1000, 64)
    u = hector.unified(x, "gpu")
    assert u.is_pinned()
    assert u.device.type == "cpu"
    info = U.unified_info(u)
    assert info is not None
    assert info.mapped
    assert info.device_ptr
    assert U.device_pointer(u[10]) == info.device_ptr + 10 * 64 * 4


@gpu
@needs_cuda
@pytest.mark.parametrize("align", U.ALIGN_MODES)
@pytest.mark.parametrize("width", [1, 64, 100, 129, 512])
def test_zero_copy_gather_matches_index_select(align: str, width: int) -> None:
    pytest.importorskip("cuda.bindings")
    torch.manual_seed(0)
    table = hector.unified(torch.randn(5000, width))
    index = torch.randint(0, 5000, (777,), device="cuda")
    out = U.gather(table, index, align=align)
    torch.cuda.synchronize()
    assert out.device.type == "cuda"
    assert torch.equal(out.cpu(), table.index_select(0, index.cpu()))


@gpu
@needs_cuda
def test_views_keep_the_pinned_storage_alive() -> None:
    pytest.importorskip("cuda.bindings")
    table = hector.unified(torch.arange(300 * 8, dtype=torch.float32).reshape(300, 8))
    tail = table[100:]
    del table
    gc.collect()
    torch.cuda.empty_cache()
    assert U.is_unified(tail)
    out = U.gather(tail, torch.tensor([0, 5]))
    torch.cuda.synchronize()
    assert out[1, 0].item() == 105 * 8
