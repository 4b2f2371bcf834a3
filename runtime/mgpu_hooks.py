"""MLIR's CUDA runtime wrappers replaced for a JIT-compiled host module: memref descriptors
over tensors (:func:`memref_descriptor`), :class:`StreamAllocatorHooks` (the host code on
PyTorch's current stream and caching allocator) and :class:`FakeCudaRuntime` (no GPU: host
memory for device allocations, every kernel launch recorded as a :class:`Launch`).

Each installs ``ctypes`` callbacks as an ``ExecutionEngine``'s runtime symbols; nothing here
imports MLIR or CUDA (the engine is passed in), so the runtime layer holds it.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch

if TYPE_CHECKING:
    from mlir.execution_engine import ExecutionEngine

__all__ = ["FakeCudaRuntime", "Launch", "StreamAllocatorHooks", "memref_descriptor"]

# ---------------------------------------------------------------------------------------------
# Memref descriptors over tensors
# ---------------------------------------------------------------------------------------------

_DESCRIPTOR_TYPES: dict[int, type] = {}


def memref_descriptor(t: torch.Tensor) -> ctypes.Structure:
    """A ranked memref descriptor over ``t``'s memory (``t`` contiguous, rank ≥ 1): both
    pointers are ``t.data_ptr()``, offset 0, sizes and strides in elements. Works for CPU and
    CUDA tensors alike: the host code never dereferences the pointers, the kernels do."""
    if t.dim() == 0:
        raise ValueError("compiled functions take tensors of rank ≥ 1, got a scalar")
    if not t.is_contiguous():
        raise ValueError("compiled functions take contiguous tensors")
    rank = t.dim()
    cls = _DESCRIPTOR_TYPES.get(rank)
    if cls is None:
        dims = ctypes.c_int64 * rank
        fields = [
            ("allocated", ctypes.c_void_p),
            ("aligned", ctypes.c_void_p),
            ("offset", ctypes.c_int64),
            ("shape", dims),
            ("strides", dims),
        ]
        cls = type(f"MemRefDescriptor{rank}D", (ctypes.Structure,), {"_fields_": fields})
        _DESCRIPTOR_TYPES[rank] = cls
    ptr = t.data_ptr()
    return cls(ptr, ptr, 0, (ctypes.c_int64 * rank)(*t.shape), (ctypes.c_int64 * rank)(*t.stride()))


# ---------------------------------------------------------------------------------------------
# A stand-in for MLIR's CUDA runtime wrappers
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    """One recorded ``mgpuLaunchKernel``: kernel name, grid, block and the 64-bit kernel
    parameters (each memref as allocated ptr, aligned ptr, offset, sizes..., strides...)."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    params: tuple[int, ...]


_VOIDP = ctypes.c_void_p
_I64 = ctypes.c_int64
# The signatures of the wrappers gpu-to-llvm calls (LLVM 22), as ctypes callback types.
_SIGNATURES: dict[str, Any] = {
    "mgpuStreamCreate": ctypes.CFUNCTYPE(_VOIDP),
    "mgpuStreamDestroy": ctypes.CFUNCTYPE(None, _VOIDP),
    "mgpuStreamSynchronize": ctypes.CFUNCTYPE(None, _VOIDP),
    "mgpuStreamWaitEvent": ctypes.CFUNCTYPE(None, _VOIDP, _VOIDP),
    "mgpuEventCreate": ctypes.CFUNCTYPE(_VOIDP),
    "mgpuEventDestroy": ctypes.CFUNCTYPE(None, _VOIDP),
    "mgpuEventSynchronize": ctypes.CFUNCTYPE(None, _VOIDP),
    "mgpuEventRecord": ctypes.CFUNCTYPE(None, _VOIDP, _VOIDP),
    "mgpuMemAlloc": ctypes.CFUNCTYPE(_VOIDP, ctypes.c_uint64, _VOIDP, ctypes.c_int8),
    "mgpuMemFree": ctypes.CFUNCTYPE(None, _VOIDP, _VOIDP),
    "mgpuMemcpy": ctypes.CFUNCTYPE(None, _VOIDP, _VOIDP, ctypes.c_uint64, _VOIDP),
    "mgpuMemset32": ctypes.CFUNCTYPE(None, _VOIDP, ctypes.c_uint32, ctypes.c_uint64, _VOIDP),
    "mgpuMemset16": ctypes.CFUNCTYPE(None, _VOIDP, ctypes.c_uint16, ctypes.c_uint64, _VOIDP),
    "mgpuModuleLoad": ctypes.CFUNCTYPE(_VOIDP, _VOIDP, ctypes.c_uint64),
    "mgpuModuleLoadJIT": ctypes.CFUNCTYPE(_VOIDP, _VOIDP, ctypes.c_int32),
    "mgpuModuleUnload": ctypes.CFUNCTYPE(None, _VOIDP),
    "mgpuModuleGetFunction": ctypes.CFUNCTYPE(_VOIDP, _VOIDP, ctypes.c_char_p),
    "mgpuLaunchKernel": ctypes.CFUNCTYPE(
        None,
        _VOIDP,
        _I64,
        _I64,
        _I64,
        _I64,
        _I64,
        _I64,
        ctypes.c_int32,
        _VOIDP,
        _VOIDP,
        _VOIDP,
        _I64,
    ),
}
# Callbacks must outlive every engine that may call them (global destructors run late).
_KEEP_ALIVE: list[Any] = []


@dataclass
class FakeCudaRuntime:
    """MLIR's CUDA runtime wrappers emulated on the host, for testing without a GPU.

    Device allocations are host buffers (so ``gpu.memset``/``gpu.memcpy`` really happen),
    kernels are not run: each launch is recorded as a :class:`Launch` with its grid, block and
    unpacked parameters. ``fail`` names wrappers that report a driver error the way the real
    library does (a line on stderr), to test error detection."""

    modules: list[str] = field(default_factory=list)  # the PTX text of each loaded module
    launches: list[Launch] = field(default_factory=list)
    allocations: dict[int, int] = field(default_factory=dict)  # live: address → bytes
    history: list[tuple[int, int]] = field(default_factory=list)  # every (address, bytes)
    events: list[str] = field(default_factory=list)  # every wrapper called, in order
    fail: tuple[str, ...] = ()
    _buffers: dict[int, Any] = field(default_factory=dict, repr=False)
    _functions: dict[int, str] = field(default_factory=dict, repr=False)

    def _report(self, name: str) -> None:
        self.events.append(name)
        if name in self.fail:
            os.write(2, f"'{name}' failed with 'CUDA_ERROR_FAKE'\n".encode())

    # -- wrappers -----------------------------------------------------------------------------
    def _stream_create(self) -> int:
        self._report("mgpuStreamCreate")
        return 0x5EA

    def _void(self, name: str) -> Any:
        return lambda *_: self._report(name)

    def _alloc(self, size: int, _stream: int, _shared: int) -> int:
        self._report("mgpuMemAlloc")
        buf = ctypes.create_string_buffer(max(int(size), 1))
        addr = ctypes.addressof(buf)
        self._buffers[addr] = buf
        self.allocations[addr] = int(size)
        self.history.append((addr, int(size)))
        return addr

    def _free(self, ptr: int, _stream: int) -> None:
        self._report("mgpuMemFree")
        self._buffers.pop(ptr or 0, None)
        self.allocations.pop(ptr or 0, None)

    def _memcpy(self, dst: int, src: int, size: int, _stream: int) -> None:
        self._report("mgpuMemcpy")
        ctypes.memmove(dst, src, size)

    def _memset(self, width: int) -> Any:
        ctype = ctypes.c_uint32 if width == 32 else ctypes.c_uint16

        def memset(dst: int, value: int, count: int, _stream: int) -> None:
            self._report(f"mgpuMemset{width}")
            (ctype * count).from_address(dst)[:] = [value] * count

        return memset

    def _module_load(self, data: int, *_: int) -> int:
        self._report("mgpuModuleLoadJIT")
        self.modules.append(ctypes.string_at(data).decode())
        return len(self.modules)

    def _get_function(self, _module: int, name: bytes) -> int:
        self._report("mgpuModuleGetFunction")
        handle = 0x1000 + len(self._functions)
        self._functions[handle] = name.decode()
        return handle

    def _launch(self, fn: int, *args: int) -> None:
        # (grid x, y, z, block x, y, z, shared bytes, stream, params, extra, param count)
        self._report("mgpuLaunchKernel")
        gx, gy, gz, bx, by, bz, _smem, _stream, params, _extra, count = args
        # Each parameter slot holds the address of one argument's value (never null).
        slots: list[int] = list((ctypes.c_void_p * count).from_address(params)) if count else []
        values = tuple(ctypes.c_int64.from_address(p).value for p in slots)
        name = self._functions.get(fn, f"<unknown {fn:#x}>")
        self.launches.append(Launch(name, (gx, gy, gz), (bx, by, bz), values))

    def install(self, engine: ExecutionEngine, skip: tuple[str, ...] = ()) -> None:
        """Register the emulated wrappers as the engine's ``mgpu*`` symbols (before the
        engine's first lookup), all but those named in ``skip`` (provided by other hooks)."""
        impls = {
            "mgpuStreamCreate": self._stream_create,
            "mgpuEventCreate": self._stream_create,
            "mgpuMemAlloc": self._alloc,
            "mgpuMemFree": self._free,
            "mgpuMemcpy": self._memcpy,
            "mgpuMemset32": self._memset(32),
            "mgpuMemset16": self._memset(16),
            "mgpuModuleLoad": self._module_load,
            "mgpuModuleLoadJIT": self._module_load,
            "mgpuModuleGetFunction": self._get_function,
            "mgpuLaunchKernel": self._launch,
        }
        for name, sig in _SIGNATURES.items():
            if name in skip:
                continue
            callback = sig(impls.get(name) or self._void(name))
            _KEEP_ALIVE.append(callback)
            engine.raw_register_runtime(name, ctypes.cast(callback, ctypes.c_void_p))


@dataclass
class StreamAllocatorHooks:
    """Five of MLIR's CUDA runtime wrappers replaced so the JIT-compiled host code neither
    creates a stream nor allocates device memory per call.

    ``gpu-async-region`` makes each host function create a stream, allocate its temporaries
    (``cuMemAlloc``), free them (``cuMemFree``, a device-wide synchronization) and synchronize
    and destroy the stream before it returns. With these hooks ``mgpuStreamCreate`` hands out
    :attr:`stream` (PyTorch's current stream, set per call), destroying and synchronizing it are
    no-ops (the call is stream-ordered like any PyTorch op), and ``mgpuMemAlloc``/``mgpuMemFree``
    go to ``alloc``/``free`` (PyTorch's caching allocator: :meth:`torch_cuda`)."""

    alloc: Callable[[int, int], int]  # (bytes, stream) → device pointer
    free: Callable[[int, int], None]  # (pointer, stream)
    stream: int = 0
    events: list[str] = field(default_factory=list)

    NAMES: ClassVar[tuple[str, ...]] = (
        "mgpuStreamCreate",
        "mgpuStreamDestroy",
        "mgpuStreamSynchronize",
        "mgpuMemAlloc",
        "mgpuMemFree",
    )

    @classmethod
    def torch_cuda(cls) -> StreamAllocatorHooks:
        """Hooks over PyTorch's caching allocator on the current device."""

        def alloc(size: int, stream: int) -> int:
            if size == 0:
                return 0
            device = torch.cuda.current_device()
            return int(torch.cuda.caching_allocator_alloc(int(size), device, stream))

        def free(ptr: int, _stream: int) -> None:
            if ptr:
                torch.cuda.caching_allocator_delete(ptr)

        return cls(alloc, free)

    def _stream(self) -> int:
        self.events.append("stream")
        return self.stream

    def _alloc(self, size: int, stream: int, _shared: int) -> int:
        self.events.append("alloc")
        return self.alloc(int(size), int(stream or 0))

    def _free(self, ptr: int, stream: int) -> None:
        self.events.append("free")
        self.free(int(ptr or 0), int(stream or 0))

    def install(self, engine: ExecutionEngine) -> None:
        """Register the hooks as the engine's symbols of those names (before its first
        lookup): they take precedence over the runtime library's."""
        impls: dict[str, Any] = {
            "mgpuStreamCreate": self._stream,
            "mgpuStreamDestroy": lambda _s: None,
            "mgpuStreamSynchronize": lambda _s: None,
            "mgpuMemAlloc": self._alloc,
            "mgpuMemFree": self._free,
        }
        for name in self.NAMES:
            callback = _SIGNATURES[name](impls[name])
            _KEEP_ALIVE.append(callback)
            engine.raw_register_runtime(name, ctypes.cast(callback, ctypes.c_void_p))
