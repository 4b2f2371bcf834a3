"""Kernel launch without a GPU: argument packing, module caching and errors, on a fake driver."""

from __future__ import annotations

import ctypes

import pytest
import torch
from _fake_driver import FakeDriver, read_u64
from _no_mlir import run_python

from hector.runtime import launch
from hector.runtime.launch import Launcher, LaunchError, MemRef

PTX = """
.version 8.0
.target sm_90
.address_size 64
.visible .entry k(
\t.param .u64 .ptr .align 1 k_param_0,
\t.param .u64 .ptr .align 1 k_param_1,
\t.param .u64 k_param_2,
\t.param .u64 k_param_3,
\t.param .u64 k_param_4,
\t.param .u64 k_param_5
)
{
\tret;
}
"""


def test_memref_expansion_follows_gpu_to_nvvm() -> None:
    m = MemRef.from_pointer(0x1000, (7, 100), (100, 1))
    assert m.values() == [0x1000, 0x1000, 0, 7, 100, 100, 1]
    assert launch.param_count([m]) == 7
    v = MemRef.from_pointer(0x2000, (5,), (1,), offset=3)
    assert launch.param_count([v, m, 42, 1.5]) == 5 + 7 + 1 + 1
    params, keep = launch.pack_params([v, 42])
    assert read_u64(params, 6) == [0x2000, 0x2000, 3, 5, 1, 42]
    params, keep = launch.pack_params([2.5])
    assert ctypes.c_float.from_address(params[0]).value == 2.5
    del keep


def test_pack_params_rejects_unknown_arguments() -> None:
    with pytest.raises(LaunchError, match="unsupported kernel argument of type str"):
        launch.pack_params(["x"])
    with pytest.raises(LaunchError, match="bool kernel argument is ambiguous"):
        launch.pack_params([True])
    with pytest.raises(LaunchError, match="one stride per size"):
        MemRef(1, 1, 0, (2, 3), (1,))


def test_memref_from_cpu_tensor_is_rejected() -> None:
    with pytest.raises(LaunchError, match="kernel arguments must be CUDA tensors"):
        MemRef.from_tensor(torch.zeros(3))


def test_ptx_entries_and_param_counts() -> None:
    assert launch.ptx_entries(PTX) == ["k"]
    assert launch.ptx_param_counts(PTX) == {"k": 6}


def test_launch_packs_and_caches_per_architecture() -> None:
    drv = FakeDriver()
    lau = Launcher(drv)
    a = MemRef.from_pointer(0xABC0, (4,), (1,))
    lau.launch(PTX, "k", (3, 1, 1), (128, 1, 1), [a, 9], stream=5, sync=True)
    lau.launch(PTX, "k", (1, 1, 1), (32, 1, 1), [a, 10])
    assert len(drv.loaded) == 1
    assert drv.loaded[0].endswith(b"\0")
    assert drv.syncs == 1
    first = drv.launches[0]
    assert first["grid"] == (3, 1, 1)
    assert first["block"] == (128, 1, 1)
    assert first["stream"] == 5
    # a different architecture (another device) loads the module again
    drv._arch = "sm_80"
    lau.launch(PTX, "k", (1, 1, 1), (32, 1, 1), [a, 11])
    assert len(drv.loaded) == 2
    assert len(lau.modules) == 2


def test_launch_checks_arguments_against_the_ptx() -> None:
    lau = Launcher(FakeDriver())
    a = MemRef.from_pointer(0xABC0, (4,), (1,))
    with pytest.raises(LaunchError, match="takes 6 parameters, but the arguments expand to 5"):
        lau.launch(PTX, "k", (1, 1, 1), (32, 1, 1), [a])
    with pytest.raises(LaunchError, match=r"PTX has no entry 'nope' \(entries: k\)"):
        lau.launch(PTX, "nope", (1, 1, 1), (32, 1, 1), [a, 1])
    with pytest.raises(LaunchError, match="grid and block sizes must be positive"):
        lau.launch(PTX, "k", (0, 1, 1), (32, 1, 1), [a, 1])


def test_gather_kernel_signature_matches_the_packing() -> None:
    from hector.data.unified import gather_kernel_name, gather_kernel_ptx

    ptx = gather_kernel_ptx(100, "warp128")
    name = gather_kernel_name("warp128")
    idx = MemRef.from_pointer(0x10, (8,), (1,))
    table = MemRef.from_pointer(0x20, (1000, 100), (100, 1))
    out = MemRef.from_pointer(0x30, (8, 100), (100, 1))
    assert launch.ptx_param_counts(ptx)[name] == launch.param_count([idx, table, out]) == 19
    drv = FakeDriver()
    Launcher(drv).launch(ptx, name, (1, 1, 1), (256, 1, 1), [idx, table, out])
    assert drv.launches[0]["values"][5:12] == [0x20, 0x20, 0, 1000, 100, 100, 1]


_WITHOUT_BINDINGS = """
import sys
from hector.runtime.launch import Launcher, LaunchError, MemRef, CudaDriver
try:
    CudaDriver()
except LaunchError as err:
    print("driver:", err)
lau = Launcher()  # costs nothing until used
try:
    lau.launch(sys.argv[1], "k", (1, 1, 1), (1, 1, 1), [MemRef.from_pointer(1, (1,), (1,)), 1])
except LaunchError as err:
    print("launch:", err)
"""


def test_cuda_driver_without_bindings_is_a_clear_error() -> None:
    # cuda-bindings blocked in a subprocess, so this runs whether or not it is installed here.
    proc = run_python("-c", _WITHOUT_BINDINGS, PTX, blocked=("cuda",))
    assert proc.returncode == 0, proc.stderr
    driver, launched = proc.stdout.splitlines()
    assert driver.startswith("driver: launching Hector's kernels needs the CUDA driver bindings")
    assert "pip install cuda-bindings" in driver
    assert launched.startswith("launch: launching Hector's kernels needs the CUDA driver bindings")


def test_device_arch_defaults_without_cuda() -> None:
    if not torch.cuda.is_available():
        assert launch.device_arch() == "sm_90"
    else:
        assert launch.device_arch().startswith("sm_")
