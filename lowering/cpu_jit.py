"""The CPU back end: JIT-compile LLVM-dialect modules with MLIR's ExecutionEngine and call them.

Functions are called through their C interface (``llvm.emit_c_interface``): every argument is a
memref descriptor built over a NumPy array that shares memory with the caller's tensor, so
outputs are written in place with no copy.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections import deque
from collections.abc import Sequence

import numpy as np
from mlir import ir
from mlir.execution_engine import ExecutionEngine
from mlir.runtime import get_ranked_memref_descriptor

from ..runtime import host_memory


def mlir_library(name: str) -> str:
    """The path of one of MLIR's runtime libraries (``site-packages/mlir/lib/<name>``);
    ``FileNotFoundError`` naming it when the install lacks it."""
    import mlir

    path = os.path.join(list(mlir.__path__)[0], "lib", name)
    if not os.path.exists(path):
        raise FileNotFoundError(f"MLIR runtime library {name} not found at {path}")
    return path


#: MLIR's C runner utilities (``memrefCopy``, ``rtclock``), loaded by every CPU engine.
RUNNER_UTILS = "libmlir_c_runner_utils.so"
#: MLIR's async runtime: the workers of scheduled kernels.
ASYNC_RUNTIME = "libmlir_async_runtime.so"
#: The runtime's entry points generated code calls (``convert-async-to-llvm``); the library's
#: own spelling, typo included, for the worker count.
ASYNC_SYMBOLS = (
    "mlirAsyncRuntimeAddRef", "mlirAsyncRuntimeDropRef", "mlirAsyncRuntimeCreateToken",
    "mlirAsyncRuntimeCreateValue", "mlirAsyncRuntimeCreateGroup", "mlirAsyncRuntimeEmplaceToken",
    "mlirAsyncRuntimeEmplaceValue", "mlirAsyncRuntimeSetTokenError",
    "mlirAsyncRuntimeSetValueError", "mlirAsyncRuntimeIsTokenError",
    "mlirAsyncRuntimeIsValueError", "mlirAsyncRuntimeIsGroupError",
    "mlirAsyncRuntimeAwaitToken", "mlirAsyncRuntimeAwaitValue",
    "mlirAsyncRuntimeAwaitAllInGroup", "mlirAsyncRuntimeExecute",
    "mlirAsyncRuntimeGetValueStorage", "mlirAsyncRuntimeAddTokenToGroup",
    "mlirAsyncRuntimeAwaitTokenAndExecute", "mlirAsyncRuntimeAwaitValueAndExecute",
    "mlirAsyncRuntimeAwaitAllInGroupAndExecute", "mlirAsyncRuntimGetNumWorkerThreads",
    "mlirAsyncRuntimePrintCurrentThreadId",
)  # fmt: skip
#: What generated code may call in the runner utilities (the profiler's clock, copies).
RUNNER_SYMBOLS = ("rtclock", "memrefCopy")
_local_libraries: dict[str, ctypes.CDLL] = {}


def _local_symbols(library: str, names: Sequence[str]) -> dict[str, ctypes.c_void_p]:
    """Addresses of ``names`` in one of MLIR's runtime libraries, loaded once per process with
    local symbols (those it lacks are left out)."""
    lib = _local_libraries.get(library)
    if lib is None:
        lib = _local_libraries[library] = ctypes.CDLL(mlir_library(library), mode=os.RTLD_LOCAL)
    found = {}
    for name in names:
        entry = getattr(lib, name, None)
        if entry is not None:
            found[name] = ctypes.cast(entry, ctypes.c_void_p)
    return found


def runtime_symbols() -> dict[str, ctypes.c_void_p]:
    """MLIR's async runtime and runner utilities, as addresses handed to each engine rather
    than libraries it loads: an engine that loads the async runtime (``shared_libs``) tears
    its default runtime (the thread pool) down when it is destroyed, so the next engine's
    workers crash; and the engine loads its libraries with global symbols, which clash with
    torch-mlir's copy of LLVM (its command-line options register twice and abort the
    process). With them, MLIR's generic allocation functions, bound to Hector's host memory
    cache (``runtime/host_memory.py``): a step's buffers are reused by the next step instead
    of being faulted in again."""
    return {
        **_local_symbols(ASYNC_RUNTIME, ASYNC_SYMBOLS),
        **_local_symbols(RUNNER_UTILS, RUNNER_SYMBOLS),
        **host_memory.engine_symbols(),
    }


#: Seconds an engine outlives its last owner. A worker of MLIR's async runtime that has just
#: set a task's token (waking the caller, whose call then returns) is still returning through
#: the engine's code for a moment; destroying the engine at once unmaps that code under it.
ENGINE_GRACE_S = 2.0
_retired: deque[tuple[float, ExecutionEngine]] = deque()
_retired_lock = threading.Lock()


def _retire(engine: ExecutionEngine) -> None:
    """Keep ``engine`` alive for :data:`ENGINE_GRACE_S` more seconds."""
    with _retired_lock:
        _retired.append((time.monotonic(), engine))


def release_retired_engines(older_than_s: float = ENGINE_GRACE_S) -> int:
    """Destroy the retired engines retired more than ``older_than_s`` seconds ago; return how
    many are still kept."""
    now = time.monotonic()
    with _retired_lock:
        while _retired and now - _retired[0][0] >= older_than_s:
            _retired.popleft()
        return len(_retired)


class CpuKernel:
    """The compiled functions of an LLVM-dialect module, callable by name on NumPy arrays.

    ``shared_libs``: further libraries whose symbols the module calls (MLIR's runner utilities
    and async runtime are always available, through :func:`runtime_symbols`)."""

    def __init__(
        self, module: ir.Module, opt_level: int = 3, shared_libs: Sequence[str] = ()
    ) -> None:
        release_retired_engines()
        own = {mlir_library(RUNNER_UTILS), mlir_library(ASYNC_RUNTIME)}
        libs = [lib for lib in shared_libs if lib not in own]
        self.engine = ExecutionEngine(module, opt_level=opt_level, shared_libs=libs)
        for name, address in runtime_symbols().items():
            self.engine.raw_register_runtime(name, address)

    def __call__(self, name: str, *arrays: np.ndarray) -> None:
        """Run function ``name`` on ``arrays`` (inputs, then outputs), in its order."""
        descriptors = []
        for a in arrays:
            if not a.flags["C_CONTIGUOUS"]:
                raise ValueError("compiled functions take C-contiguous arrays")
            descriptors.append(ctypes.pointer(ctypes.pointer(get_ranked_memref_descriptor(a))))
        self.engine.invoke(name, *descriptors)

    def __del__(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is None:
            return
        try:
            _retire(engine)  # its code may still be under a worker's feet
        except TypeError:
            pass  # interpreter shutdown: this module's globals are gone, no worker runs
