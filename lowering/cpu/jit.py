"""The CPU back end: JIT-compile LLVM-dialect modules with MLIR's ExecutionEngine and call them.

Functions are called through their C interface (``llvm.emit_c_interface``): every argument is a
memref descriptor built over a NumPy array that shares memory with the caller's tensor, so
outputs are written in place with no copy.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np
from mlir import ir
from mlir.execution_engine import ExecutionEngine

from ...runtime import host_memory, native, team_calls


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
    of being faulted in again; and the async runtime's task hand-over and join bound to the
    team calls' (``runtime/team_calls.py``), which forward to MLIR's outside a team call."""
    asynchronous = _local_symbols(ASYNC_RUNTIME, ASYNC_SYMBOLS)
    team_calls.set_fallbacks(asynchronous)
    return {
        **asynchronous,
        **_local_symbols(RUNNER_UTILS, RUNNER_SYMBOLS),
        **host_memory.engine_symbols(),
        **team_calls.engine_symbols(),
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
        self,
        module: ir.Module,
        opt_level: int = 3,
        shared_libs: Sequence[str] = (),
        *,
        relocatable: bool = False,
    ) -> None:
        release_retired_engines()
        own = {mlir_library(RUNNER_UTILS), mlir_library(ASYNC_RUNTIME)}
        libs = [lib for lib in shared_libs if lib not in own]
        # relocatable: position-independent code, so write_library can link it into a library.
        self.engine = ExecutionEngine(
            module, opt_level=opt_level, shared_libs=libs, enable_pic=relocatable
        )
        for name, address in runtime_symbols().items():
            self.engine.raw_register_runtime(name, address)
        self._entries: dict[str, Any] = {}

    def __call__(self, name: str, *arrays: np.ndarray) -> None:
        """Run function ``name`` on ``arrays`` (inputs, then outputs), in its order, through the
        engine's packed wrapper of its C interface (looked up once: ``engine.invoke`` looks it
        up and builds its ctypes prototype on every call)."""
        self.run_pointers(name, descriptor_pointers(arrays))

    def run_pointers(self, name: str, pointers: Sequence[Any]) -> None:
        """Run function ``name`` on arguments given as pointers to their memref descriptors
        (:func:`descriptor_pointers`; the arrays they describe kept alive by the caller)."""
        entry = self._entries.get(name)
        if entry is None:
            entry = self._entries[name] = self.engine.lookup(name)
        packed = (ctypes.c_void_p * len(pointers))(*map(ctypes.addressof, pointers))
        team_calls.call(lambda: entry(packed))

    def write_library(
        self, functions: Sequence[str], path: str, shared_libs: Sequence[str]
    ) -> None:
        """Write the compiled code (``functions`` and what they call) as a shared library at
        ``path`` that :class:`LibraryKernel` loads (the kernel must be ``relocatable``);
        ``shared_libs``: the libraries its code calls, linked by path. ``OSError`` when the
        system's ``objcopy`` or C compiler is missing or fails."""
        for name in functions:  # the engine generates code on first lookup
            self.engine.lookup(name)
        with tempfile.TemporaryDirectory(prefix="hector-link-") as tmp:
            obj = os.path.join(tmp, "kernel.o")
            self.engine.dump_to_object_file(obj)
            link_library([obj], path, shared_libs)

    def __del__(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is None:
            return
        try:
            _retire(engine)  # its code may still be under a worker's feet
        except TypeError:
            pass  # interpreter shutdown: this module's globals are gone, no worker runs


@functools.cache
def _descriptor_type(rank: int) -> Any:
    """The ctypes layout of a rank-``rank`` memref descriptor (MLIR's: allocated and aligned
    pointers, offset, then sizes and strides in elements), one class per rank: building a class
    per call, as ``mlir.runtime.get_ranked_memref_descriptor`` does, cost more than a small
    kernel's run."""
    i64 = ctypes.c_longlong
    fields = [("allocated", i64), ("aligned", ctypes.c_void_p), ("offset", i64)]
    if rank:
        fields += [("shape", i64 * rank), ("strides", i64 * rank)]
    return type(f"MemRef{rank}Descriptor", (ctypes.Structure,), {"_fields_": fields})


def _descriptor_structs(arrays: Sequence[np.ndarray]) -> list[Any]:
    """Memref descriptors over C-contiguous ``arrays``."""
    out = []
    for a in arrays:
        if not a.flags["C_CONTIGUOUS"]:
            raise ValueError("compiled functions take C-contiguous arrays")
        address = a.ctypes.data
        d = _descriptor_type(a.ndim)(address, address, 0)
        if a.ndim:
            d.shape[:] = a.shape
            d.strides[:] = [st // a.itemsize for st in a.strides]
        out.append(d)
    return out


def descriptor_pointers(arrays: Sequence[np.ndarray]) -> list[Any]:
    """A pointer to a memref descriptor over each of the C-contiguous ``arrays``, as a compiled
    function's C interface takes its arguments (each pointer keeps its descriptor alive; the
    arrays must outlive the call). Built once, they serve every call on the same arrays."""
    return [ctypes.pointer(d) for d in _descriptor_structs(arrays)]


def _run_tool(argv: list[str]) -> None:
    tool = shutil.which(argv[0])
    if tool is None:
        raise OSError(f"{argv[0]} not found on PATH")
    done = subprocess.run([tool, *argv[1:]], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise OSError(f"{argv[0]} failed: {done.stderr.strip()[-500:]}")


def link_library(objects: Sequence[str], path: str, shared_libs: Sequence[str]) -> None:
    """Link object files of generated code (the engine's or ``llc``'s) into the shared library
    ``path``: MLIR's generic allocation functions renamed to the host memory cache's (as the
    engine binds them), and the runtime libraries it calls (MLIR's async runtime and runner
    utilities, Hector's native runtime) linked by path, so the library resolves them to the
    copies already loaded."""
    renamed = {**host_memory.GENERIC, **team_calls.REPLACED}
    renames = [f"--redefine-sym={ours}={host}" for ours, host in renamed.items()]
    for obj in objects:
        _run_tool(["objcopy", *renames, obj])
    libs = [mlir_library(ASYNC_RUNTIME), mlir_library(RUNNER_UTILS), *shared_libs]
    libs.append(native.library_path())
    rpaths = [f"-Wl,-rpath,{os.path.dirname(lib)}" for lib in dict.fromkeys(libs)]
    _run_tool(["cc", "-shared", "-o", path, *objects, *dict.fromkeys(libs), *rpaths])


class LibraryKernel:
    """Compiled functions in a shared library (:func:`link_library`'s: written by
    :meth:`CpuKernel.write_library` or by ``cpu_codegen.build_library``), callable by name like
    :class:`CpuKernel`: each through its C interface (``_mlir_ciface_<name>``), which takes a
    pointer to each argument's memref descriptor."""

    def __init__(self, path: str) -> None:
        runtime_symbols()  # MLIR's runtime libraries and the host memory cache, loaded first
        self.library = ctypes.CDLL(path, mode=os.RTLD_LOCAL)
        self._entries: dict[str, Any] = {}

    def __call__(self, name: str, *arrays: np.ndarray) -> None:
        """Run function ``name`` on ``arrays`` (inputs, then outputs), in its order."""
        self.run_pointers(name, descriptor_pointers(arrays))

    def run_pointers(self, name: str, pointers: Sequence[Any]) -> None:
        """Run function ``name`` on arguments given as pointers to their memref descriptors
        (:func:`descriptor_pointers`; the arrays they describe kept alive by the caller)."""
        entry = self._entries.get(name)
        if entry is None:
            entry = getattr(self.library, f"_mlir_ciface_{name}", None)
            if entry is None:
                raise RuntimeError(f"Unknown function {name}")
            entry.restype = None
            self._entries[name] = entry
        team_calls.call(lambda: entry(*pointers))
