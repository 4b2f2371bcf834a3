"""Kernel launch: load Hector's PTX with the CUDA driver and launch it on device pointers.

Hector's GPU kernels follow the calling convention of MLIR's ``convert-gpu-to-nvvm``: each
``memref<...>`` argument expands to ``(allocated ptr, aligned ptr, offset, sizes..., strides...)``
(pointers and ``index`` values 64-bit), so a ``memref<?x100xf32>`` is 7 kernel parameters and a
``memref<?xi32>`` is 5. :class:`MemRef` describes one such argument and :func:`pack_params`
builds the ``void**`` array ``cuLaunchKernel`` takes.

:class:`Launcher` loads PTX through a *driver* object (by default :class:`CudaDriver`, over
``cuda.bindings.driver`` from the ``cuda-bindings`` package) and caches one module per
``(architecture, PTX)`` pair and one function handle per entry, so a kernel is JIT-compiled by
the driver once per GPU architecture. The driver is an object with five methods (``arch``,
``load_module``, ``get_function``, ``launch``, ``synchronize``), so tests substitute a fake one
and check argument packing without a GPU.

This module is part of the runtime layer: it imports nothing from Hector above it, and neither
CUDA nor PyTorch at import time.
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class LaunchError(RuntimeError):
    """A kernel could not be loaded or launched (no driver, bad PTX, bad arguments)."""


@dataclass(frozen=True)
class MemRef:
    """One memref kernel argument, as ``convert-gpu-to-nvvm`` expands it."""

    allocated: int
    aligned: int
    offset: int
    sizes: tuple[int, ...]
    strides: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.sizes) != len(self.strides):
            raise LaunchError(
                f"a memref needs one stride per size, got sizes {self.sizes} "
                f"and strides {self.strides}"
            )

    @classmethod
    def from_pointer(
        cls, ptr: int, sizes: Sequence[int], strides: Sequence[int], offset: int = 0
    ) -> MemRef:
        """A memref over device-visible memory at ``ptr`` (sizes and strides in elements)."""
        return cls(int(ptr), int(ptr), int(offset), tuple(sizes), tuple(strides))

    @classmethod
    def from_tensor(cls, t: Any) -> MemRef:
        """A memref over a CUDA ``torch.Tensor`` (its storage start and element offset)."""
        if getattr(getattr(t, "device", None), "type", None) != "cuda":
            raise LaunchError(
                f"kernel arguments must be CUDA tensors, got one on {getattr(t, 'device', '?')}"
            )
        base = t.data_ptr() - t.storage_offset() * t.element_size()
        return cls(base, base, int(t.storage_offset()), tuple(t.shape), tuple(t.stride()))

    def values(self) -> list[int]:
        """The flat parameter values: pointers, offset, sizes, strides."""
        return [self.allocated, self.aligned, self.offset, *self.sizes, *self.strides]

    @property
    def rank(self) -> int:
        """Number of dimensions."""
        return len(self.sizes)


def param_count(args: Sequence[Any]) -> int:
    """How many kernel parameters ``args`` expand to (``3 + 2·rank`` per memref, 1 per scalar)."""
    return sum(3 + 2 * a.rank if isinstance(a, MemRef) else 1 for a in args)


def pack_params(args: Sequence[Any]) -> tuple[Any, list[Any]]:
    """``(void** array, keep-alive list)`` for ``cuLaunchKernel``'s ``kernelParams``.

    Memrefs expand to 64-bit pointers and integers; Python ints become 64-bit integers
    (``index``), floats 32-bit floats (``f32``). Keep the second value alive until the launch
    call returns.
    """
    cells: list[Any] = []
    for a in args:
        if isinstance(a, MemRef):
            cells.append(ctypes.c_uint64(a.allocated))
            cells.append(ctypes.c_uint64(a.aligned))
            cells += [ctypes.c_int64(v) for v in (a.offset, *a.sizes, *a.strides)]
        elif isinstance(a, bool):
            raise LaunchError("a bool kernel argument is ambiguous; pass an int")
        elif isinstance(a, int):
            cells.append(ctypes.c_int64(a))
        elif isinstance(a, float):
            cells.append(ctypes.c_float(a))
        else:
            raise LaunchError(f"unsupported kernel argument of type {type(a).__name__}")
    array = (ctypes.c_void_p * max(1, len(cells)))(*[ctypes.addressof(c) for c in cells])
    return array, cells


def ptx_entries(ptx: str) -> list[str]:
    """Names of the ``.entry`` kernels in PTX text."""
    out = []
    for line in ptx.splitlines():
        line = line.strip()
        if ".entry" in line and line.startswith((".visible", ".entry", ".weak")):
            name = line.split(".entry", 1)[1].strip().split("(", 1)[0].strip()
            out.append(name)
    return out


def ptx_param_counts(ptx: str) -> dict[str, int]:
    """Parameter count of each ``.entry`` in PTX text (to check a launch against it)."""
    counts: dict[str, int] = {}
    current: str | None = None
    for line in ptx.splitlines():
        s = line.strip()
        if ".entry" in s and "(" in s:
            current = s.split(".entry", 1)[1].split("(", 1)[0].strip()
            counts[current] = 0
        elif current is not None and s.startswith(".param"):
            counts[current] += 1
        elif current is not None and s.startswith(")"):
            current = None
    return counts


class Driver(Protocol):
    """What :class:`Launcher` needs from a CUDA driver."""

    def arch(self) -> str:
        """The current device's architecture, e.g. ``"sm_90"``."""

    def load_module(self, ptx: bytes) -> Any:
        """Load NUL-terminated PTX into the current context; return a module handle."""

    def get_function(self, module: Any, name: str) -> Any:
        """The function handle of entry ``name``."""

    def launch(
        self,
        function: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        params: Any,
        shared: int,
        stream: int,
    ) -> None:
        """Launch ``function`` with the packed ``params`` (a ``void**`` array)."""

    def synchronize(self) -> None:
        """Wait for the current context's work to finish."""


class CudaDriver:
    """:class:`Driver` over ``cuda.bindings.driver`` (the ``cuda-bindings`` package).

    Uses the device's primary context, the one PyTorch uses, so kernels see torch's
    allocations and run on its streams.
    """

    def __init__(self, device: int = 0) -> None:
        try:
            from cuda.bindings import driver
        except ImportError as err:
            raise LaunchError(
                "launching Hector's kernels needs the CUDA driver bindings: "
                "pip install cuda-bindings (or pip install 'hector[gpu]')"
            ) from err
        self.cu = driver
        self._check(driver.cuInit(0), "cuInit")
        self.device = self._check(driver.cuDeviceGet(device), "cuDeviceGet")
        self.context = self._check(driver.cuDevicePrimaryCtxRetain(self.device), "primary context")
        self._check(driver.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def _check(self, result: Any, what: str) -> Any:
        if not isinstance(result, tuple):
            result = (result,)
        err, rest = result[0], result[1:]
        if int(err) != 0:
            _, name = self.cu.cuGetErrorName(err)
            raise LaunchError(f"{what} failed: {name.decode() if name else err}")
        if not rest:
            return None
        return rest[0] if len(rest) == 1 else rest

    def arch(self) -> str:
        """``sm_<major><minor>`` of the device."""
        attr = self.cu.CUdevice_attribute
        major = self._check(
            self.cu.cuDeviceGetAttribute(
                attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.device
            ),
            "compute capability",
        )
        minor = self._check(
            self.cu.cuDeviceGetAttribute(
                attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.device
            ),
            "compute capability",
        )
        return f"sm_{major}{minor}"

    def load_module(self, ptx: bytes) -> Any:
        """``cuModuleLoadData`` (the driver JIT-compiles PTX for the device)."""
        self._check(self.cu.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        buf = ctypes.create_string_buffer(ptx)
        module = self._check(self.cu.cuModuleLoadData(ctypes.addressof(buf)), "cuModuleLoadData")
        return module

    def get_function(self, module: Any, name: str) -> Any:
        """``cuModuleGetFunction``."""
        return self._check(self.cu.cuModuleGetFunction(module, name.encode()), f"entry {name}")

    def launch(
        self,
        function: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        params: Any,
        shared: int,
        stream: int,
    ) -> None:
        """``cuLaunchKernel`` (``stream`` is a raw ``CUstream`` handle, 0 = default stream)."""
        handle = self.cu.CUstream(stream) if stream else 0
        self._check(
            self.cu.cuLaunchKernel(
                function, *grid, *block, shared, handle, ctypes.addressof(params), 0
            ),
            "cuLaunchKernel",
        )

    def synchronize(self) -> None:
        """``cuCtxSynchronize``."""
        self._check(self.cu.cuCtxSynchronize(), "cuCtxSynchronize")


class Launcher:
    """Loads PTX once per (architecture, PTX text) and launches its entries."""

    def __init__(self, driver: Driver | None = None) -> None:
        self._driver = driver
        self._lock = threading.Lock()
        self.modules: dict[tuple[str, str], Any] = {}
        self.functions: dict[tuple[str, str, str], Any] = {}
        self.params: dict[str, dict[str, int]] = {}

    @property
    def driver(self) -> Driver:
        """The driver, created on first use (so a Launcher costs nothing without a GPU)."""
        if self._driver is None:
            self._driver = CudaDriver()
        return self._driver

    def function(self, ptx: str, name: str) -> Any:
        """The handle of entry ``name`` of ``ptx``, loading the module on first use."""
        digest = hashlib.sha256(ptx.encode()).hexdigest()
        with self._lock:
            arch = self.driver.arch()
            key = (arch, digest)
            if digest not in self.params:
                self.params[digest] = ptx_param_counts(ptx)
            if name not in self.params[digest]:
                entries = ", ".join(self.params[digest]) or "none"
                raise LaunchError(f"PTX has no entry {name!r} (entries: {entries})")
            if key not in self.modules:
                self.modules[key] = self.driver.load_module(ptx.encode() + b"\0")
            fkey = (arch, digest, name)
            if fkey not in self.functions:
                self.functions[fkey] = self.driver.get_function(self.modules[key], name)
            return self.functions[fkey]

    def launch(
        self,
        ptx: str,
        name: str,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: Sequence[Any],
        *,
        shared: int = 0,
        stream: int = 0,
        sync: bool = False,
    ) -> None:
        """Launch entry ``name`` of ``ptx`` on ``grid`` × ``block`` with ``args`` (memrefs and
        scalars, in the kernel's argument order)."""
        if any(g <= 0 for g in (*grid, *block)):
            raise LaunchError(f"grid and block sizes must be positive, got {grid} and {block}")
        fn = self.function(ptx, name)
        digest = hashlib.sha256(ptx.encode()).hexdigest()
        want = self.params.get(digest, {}).get(name)
        have = param_count(args)
        if want is not None and want != have:
            raise LaunchError(
                f"entry {name!r} takes {want} parameters, but the arguments expand to {have}"
            )
        params, keep = pack_params(args)
        # Callers may pass lists; the driver takes exact 3-tuples.
        gx, gy, gz = grid
        bx, by, bz = block
        self.driver.launch(fn, (gx, gy, gz), (bx, by, bz), params, shared, stream)
        del keep
        if sync:
            self.driver.synchronize()


_DEFAULT: Launcher | None = None


def default_launcher() -> Launcher:
    """The process-wide launcher over the CUDA driver (created on first use)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Launcher()
    return _DEFAULT


def device_arch() -> str:
    """Architecture of the current CUDA device as ``sm_XY`` (via PyTorch; ``sm_90`` if none)."""
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"sm_{major}{minor}"
    except Exception:
        pass
    return "sm_90"
