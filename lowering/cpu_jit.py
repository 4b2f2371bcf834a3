"""The CPU back end: JIT-compile LLVM-dialect modules with MLIR's ExecutionEngine and call them.

Functions are called through their C interface (``llvm.emit_c_interface``): every argument is a
memref descriptor built over a NumPy array that shares memory with the caller's tensor, so
outputs are written in place with no copy.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence

import numpy as np
from mlir import ir
from mlir.execution_engine import ExecutionEngine
from mlir.runtime import get_ranked_memref_descriptor


def mlir_library(name: str) -> str:
    """The path of one of MLIR's runtime libraries (``site-packages/mlir/lib/<name>``);
    ``FileNotFoundError`` naming it when the install lacks it."""
    import mlir

    path = os.path.join(list(mlir.__path__)[0], "lib", name)
    if not os.path.exists(path):
        raise FileNotFoundError(f"MLIR runtime library {name} not found at {path}")
    return path


class CpuKernel:
    """The compiled functions of an LLVM-dialect module, callable by name on NumPy arrays.

    ``shared_libs``: libraries whose symbols the module calls (e.g. ``rtclock`` from
    ``libmlir_c_runner_utils.so`` in a profiled module)."""

    def __init__(
        self, module: ir.Module, opt_level: int = 3, shared_libs: Sequence[str] = ()
    ) -> None:
        self.engine = ExecutionEngine(module, opt_level=opt_level, shared_libs=list(shared_libs))

    def __call__(self, name: str, *arrays: np.ndarray) -> None:
        """Run function ``name`` on ``arrays`` (inputs, then outputs), in its order."""
        descriptors = []
        for a in arrays:
            if not a.flags["C_CONTIGUOUS"]:
                raise ValueError("compiled functions take C-contiguous arrays")
            descriptors.append(ctypes.pointer(ctypes.pointer(get_ranked_memref_descriptor(a))))
        self.engine.invoke(name, *descriptors)
