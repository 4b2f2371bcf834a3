"""Import layering: the runtime layer imports and runs where MLIR and torch-mlir are absent.

A GPU node carries PyTorch and the CUDA driver, not the compiler. Each test runs a child Python
in which importing ``mlir`` / ``torch_mlir`` fails as if they were not installed
(``_no_mlir.run_python``) and checks that ``import hector``, the runtime (native library, PTX
launcher), unified tensors, graphs and the dialect specs import and do real work there, while the
compiler's entry points fail with the missing module named. (Where MLIR is installed,
``import hector`` still loads MLIR's library first: test_import_patterns.py checks that.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _no_mlir import ALREADY_IMPORTED, run_python

from hector.data import unified as U

TESTS = str(Path(__file__).resolve().parent)

# The child prints one JSON object; run_child returns it.
_RUNTIME_LAYER = """
import json, sys
import numpy as np
import torch

import hector, hector.dialects, hector.data.graph, hector.data.unified
import hector.runtime, hector.runtime.launch, hector.runtime.native, hector.runtime.offload
from hector.runtime import native
from hector.runtime.launch import Launcher, MemRef
from _fake_driver import FakeDriver

g = hector.random_graph(200, 1000, 5, seed=4)
ei, et = g.edge_index_sorted()
h = hector.HeteroGraph.from_edge_index(ei, et, num_nodes=200, num_etypes=5)
code, bad = native.graph_validate(
    np.array([0, 1], np.int64), np.array([1, 7], np.int64), None, num_nodes=5, num_etypes=1
)
ptx = sys.argv[1]
driver = FakeDriver()
Launcher(driver).launch(
    ptx, "k", (3, 1, 1), (128, 1, 1), [MemRef.from_pointer(0xABC0, (4,), (1,)), 9]
)
print(json.dumps({
    "edges": [g.num_edges, h.num_edges],
    "same_order": bool(torch.equal(h.edge_index_sorted()[0], ei)),
    "validate": [code == native.ERR_DST_RANGE, bad],
    "abi": native.abi_version() == native.ABI_VERSION,
    "launch": [len(driver.loaded), driver.launches[0]["grid"],
               driver.launches[0]["values"]],
    "specs": len(hector.dialects.SPECS),
    "unified_callable": callable(hector.unified),
    "host_fallback": hector.data.unified.is_unified(  # CUDA_VISIBLE_DEVICES="" in run_child
        hector.unified(torch.ones(3, 2), allow_host_fallback=True)
    ),
}))
"""

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


def run_child(code: str, *args: str, env: dict[str, str] | None = None) -> dict:
    """Run ``code`` without MLIR (``_fake_driver`` importable); return the JSON it prints."""
    env = {"PYTHONPATH": TESTS, "CUDA_VISIBLE_DEVICES": "", **(env or {})}
    proc = run_python("-c", code, *args, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_the_block_makes_mlir_look_uninstalled() -> None:
    code = """
import importlib, json
out = {}
for name in ("mlir", "mlir.ir", "torch_mlir", "torch_mlir.dialects"):
    try:
        importlib.import_module(name)
        out[name] = "imported"
    except ModuleNotFoundError as err:
        out[name] = err.name
print(json.dumps(out))
"""
    assert run_child(code) == {
        "mlir": "mlir",
        "mlir.ir": "mlir",
        "torch_mlir": "torch_mlir",
        "torch_mlir.dialects": "torch_mlir",
    }


def test_a_package_imported_before_the_block_is_reported() -> None:
    # A child that already holds the blocked module cannot pretend it is absent.
    proc = run_python("-c", "pass", blocked=("sys",))
    assert proc.returncode == ALREADY_IMPORTED
    assert "already imported before the block: ['sys']" in proc.stderr


def test_runtime_layer_imports_and_runs_without_the_compiler() -> None:
    got = run_child(_RUNTIME_LAYER, PTX)
    assert got["edges"] == [1000, 1000]
    assert got["same_order"]
    assert got["validate"] == [True, 1]  # edge 1's destination 7 is out of range
    assert got["abi"]
    assert got["launch"] == [1, [3, 1, 1], [0xABC0, 0xABC0, 0, 4, 1, 9]]
    assert got["specs"] == len(__import__("hector.dialects").dialects.SPECS)
    assert got["unified_callable"]
    assert got["host_fallback"]


def test_compiler_entry_points_name_the_missing_module() -> None:
    """The graph API and the models import without MLIR; compiling says what is missing."""
    code = """
import json
import torch
import hector
out = {}
try:
    hector.import_model
    out["import_model"] = "loaded"
except ModuleNotFoundError as err:
    out["import_model"] = err.name
f = hector.compile(lambda g, x: g.sum_to_dst(g.gather_src(x)))
try:
    f(hector.random_graph(4, 8, 2, seed=0), torch.ones(4, 3))
    out["compile"] = "ran"
except ModuleNotFoundError as err:
    out["compile"] = err.name
    out["hint"] = "hector.bundle.load" in str(err)
print(json.dumps(out))
"""
    assert run_child(code) == {"compile": "mlir", "hint": True, "import_model": "mlir"}


def test_a_broken_mlir_install_still_fails_loudly() -> None:
    # mlir present but its native library missing is not "no compiler here".
    proc = run_python("-c", "import hector", blocked=("mlir._mlir_libs",))
    assert proc.returncode == 1
    assert "No module named 'mlir._mlir_libs'" in proc.stderr


def test_prebuilt_gather_kernel_runs_without_the_compiler(tmp_path: Path) -> None:
    width, align = 100, "warp128"
    ptx = U.gather_kernel_ptx(width, align)  # compiled here, where MLIR is installed
    (tmp_path / U.gather_kernel_file(width, align, 256, "sm_90")).write_text(ptx)
    code = """
import json
from hector.data import unified as U
from hector.runtime.launch import Launcher, MemRef, ptx_param_counts
from _fake_driver import FakeDriver

ptx = U.gather_kernel_ptx(100, "warp128")
driver = FakeDriver()
args = [MemRef.from_pointer(0x10, (8,), (1,)), MemRef.from_pointer(0x20, (1000, 100), (100, 1)),
        MemRef.from_pointer(0x30, (8, 100), (100, 1))]
Launcher(driver).launch(ptx, U.gather_kernel_name("warp128"), (1, 1, 1), (256, 1, 1), args)
try:
    U.gather_kernel_ptx(64, "warp128")
    missing = "compiled"
except U.UnifiedError as err:
    missing = str(err)
print(json.dumps({"ptx": ptx, "table": driver.launches[0]["values"][5:12],
                  "missing": missing}))
"""
    got = run_child(code, env={U.PREBUILT_KERNELS_ENV: str(tmp_path)})
    assert got["ptx"] == ptx
    assert got["table"] == [0x20, 0x20, 0, 1000, 100, 100, 1]
    assert got["missing"].startswith(
        f"the gather kernel {U.gather_kernel_file(64, 'warp128', 256, 'sm_90')} is not prebuilt "
        f"in {tmp_path}, and MLIR is not installed to compile it"
    )


def test_prebuilt_gather_kernel_wins_over_compiling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = U.gather_kernel_file(64, "none", 128, "sm_80")
    (tmp_path / name).write_text("// prebuilt\n")
    monkeypatch.setenv(U.PREBUILT_KERNELS_ENV, str(tmp_path))
    assert U.gather_kernel_ptx(64, "none", 128, "sm_80") == "// prebuilt\n"
    # another shape is compiled as before
    assert ".target sm_80" in U.gather_kernel_ptx(32, "none", 128, "sm_80")


# What a GPU node imports: the runtime layer and what the GPU check and bundle checks use.
MLIR_FREE = (
    "hector",
    "hector.tools.cli",
    "hector.datasets",
    "hector.dialects",
    "hector.data.graph",
    "hector.models",
    "hector.offload",
    "hector_bench.request_model",
    "hector.runtime",
    "hector.runtime.bundle",
    "hector_bench.bundle_check",
    "hector.runtime.launch",
    "hector.runtime.native",
    "hector.runtime.offload",
    "hector.data.unified",
)


def test_what_a_gpu_node_imports_needs_no_compiler() -> None:
    code = f"import importlib\nfor name in {MLIR_FREE!r}:\n    importlib.import_module(name)\n"
    proc = run_python("-c", code)
    assert proc.returncode == 0, proc.stderr
