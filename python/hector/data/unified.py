"""Unified tensors: pinned host memory that GPU kernels read directly (zero-copy).

``hector.unified(t, affinity="gpu")`` (:func:`make_unified`) copies ``t`` into page-locked host
memory allocated by the CUDA host allocator. On every 64-bit CUDA platform (unified virtual
addressing) such memory is mapped into the GPU's address space, so a kernel given its device
pointer reads it over PCIe without a staging copy. The result is an ordinary CPU
``torch.Tensor``; views and slices of it share its storage, which keeps the pinned memory alive
for as long as any of them exists, and carry the same unified metadata (affinity, device
pointer), looked up through the storage.

The *affinity* says where operators on the tensor run (docs/unified.md, "Placement rules";
the compiler side is the ``placement-infer-unified`` pass): ``"gpu"`` → GPU kernels
read it zero-copy, ``"host"`` → host code uses it in place.

Without CUDA, ``hector.unified`` raises :class:`UnifiedError` unless
``allow_host_fallback=True``, in which case the tensor stays in ordinary host memory, flagged
as unified with its affinity recorded and ``mapped = False`` (no device pointer): code written
for unified tensors runs unchanged, gathers fall back to ``index_select``. This module never
needs CUDA to import.

:func:`gather` reads rows of a unified table by an index into GPU memory with Hector's
zero-copy gather kernel (a ``hector_intra.traversal_template``, ``fn = "copy"``, compiled to PTX
by :func:`gather_kernel_ptx` and launched through :mod:`hector.runtime.launch`). Where MLIR is
not installed (a GPU node), the kernel's PTX is read from the folder named by
``$HECTOR_PREBUILT_KERNELS`` (``scripts/build_carry.sh`` fills one), so gathering needs no
compiler there; this module imports nothing from MLIR at module level.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any

import torch

from ..dialects.hector_intra import ALIGN_MODES

AFFINITIES = ("gpu", "host")
#: Environment variable naming a folder of prebuilt gather kernels (:func:`gather_kernel_file`).
PREBUILT_KERNELS_ENV = "HECTOR_PREBUILT_KERNELS"
_ATTR = "_hector_unified"


class UnifiedError(RuntimeError):
    """A unified tensor cannot be made or used as asked (no CUDA, bad arguments)."""


@dataclass(frozen=True)
class UnifiedInfo:
    """What Hector knows about a unified tensor's storage.

    ``mapped`` is true when GPU kernels can read the storage (pinned, mapped host memory);
    ``device_ptr`` is then the GPU address of the storage's first byte (``None`` otherwise).
    """

    affinity: str
    mapped: bool
    device_ptr: int | None
    nbytes: int


def cuda_available() -> bool:
    """Whether PyTorch sees a CUDA device (False on CPU builds, never raises)."""
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # a broken driver install must not break CPU users
        return False


def _mapped_device_pointer(host_ptr: int) -> int:
    """The GPU address of pinned host memory at ``host_ptr``.

    Asks the CUDA runtime (``cudaHostGetDevicePointer``) through ``cuda-bindings`` when it is
    installed; otherwise relies on unified virtual addressing, under which the device pointer of
    pinned host memory equals its host pointer (every 64-bit CUDA platform).
    """
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:
        return host_ptr
    err, dptr = cudart.cudaHostGetDevicePointer(host_ptr, 0)
    if int(err) != 0:
        raise UnifiedError(f"cudaHostGetDevicePointer failed ({err}): memory is not mapped")
    return int(dptr)


def make_unified(
    t: torch.Tensor, affinity: str = "gpu", *, allow_host_fallback: bool = False
) -> torch.Tensor:
    """``hector.unified(t, affinity)``: a unified copy of ``t``, in pinned host memory mapped
    into the GPU's address space.

    ``affinity`` (``"gpu"`` or ``"host"``) is where operators on it should run. Without CUDA
    this raises :class:`UnifiedError`, or with ``allow_host_fallback=True`` returns a host copy
    flagged as unified (``mapped = False``). ``t`` may live anywhere; the result is a contiguous
    CPU tensor with ``t``'s shape and dtype.
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"hector.unified expects a torch.Tensor, got {type(t).__name__}")
    if affinity not in AFFINITIES:
        raise ValueError(f"affinity must be 'gpu' or 'host', got {affinity!r}")
    if t.is_sparse or t.layout != torch.strided:
        raise ValueError(f"hector.unified needs a dense (strided) tensor, got layout {t.layout}")
    if cuda_available():
        host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        host.copy_(t)
        storage = host.untyped_storage()
        dptr = _mapped_device_pointer(storage.data_ptr())
        info = UnifiedInfo(affinity, True, dptr, storage.nbytes())
    elif allow_host_fallback:
        host = t.detach().to("cpu", copy=True).contiguous()
        info = UnifiedInfo(affinity, False, None, host.untyped_storage().nbytes())
    else:
        raise UnifiedError(
            "hector.unified needs CUDA (pinned host memory mapped into the GPU's address "
            "space), and PyTorch sees no CUDA device here; pass allow_host_fallback=True to "
            "keep the tensor in host memory, flagged as unified"
        )
    setattr(host.untyped_storage(), _ATTR, info)
    return host


def unified_info(t: torch.Tensor) -> UnifiedInfo | None:
    """The unified metadata of ``t`` or of any tensor viewing its storage (None if not one)."""
    if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
        return None
    return getattr(t.untyped_storage(), _ATTR, None)


def is_unified(t: torch.Tensor) -> bool:
    """Whether ``t`` is a unified tensor or a view of one."""
    return unified_info(t) is not None


def affinity(t: torch.Tensor) -> str:
    """The affinity (``"gpu"`` or ``"host"``) of a unified tensor."""
    info = unified_info(t)
    if info is None:
        raise UnifiedError("not a unified tensor (make one with hector.unified)")
    return info.affinity


def device_pointer(t: torch.Tensor) -> int:
    """The GPU address of ``t``'s first element (``t`` a unified tensor or a view of one)."""
    info = unified_info(t)
    if info is None:
        raise UnifiedError("not a unified tensor (make one with hector.unified)")
    if not info.mapped or info.device_ptr is None:
        raise UnifiedError(
            "this unified tensor is a host fallback (made without CUDA): it has no device pointer"
        )
    return info.device_ptr + int(t.storage_offset()) * t.element_size()


# ---- the zero-copy gather kernel -------------------------------------------------------------


def gather_kernel_name(align: str) -> str:
    """Entry name of the standalone gather kernel for ``align``."""
    return f"hector_gather_{align}_0_traversal"


def _check_gather_args(width: int, align: str, block_size: int) -> None:
    if align not in ALIGN_MODES:
        raise ValueError(f"align must be one of {', '.join(ALIGN_MODES)}, got {align!r}")
    if width <= 0 or block_size <= 0:
        raise ValueError("width and block_size must be positive")


def gather_kernel_module(width: int, align: str = "warp128", block_size: int = 256) -> Any:
    """A ``hector_intra`` module (in a fresh context with Hector's dialects) holding the
    standalone gather ``out[i, :] = x[index[i], :]`` over f32 rows of ``width`` columns: one
    ``traversal_template`` with ``fn = "copy"``, ``reduce = "none"``, built through the spec's
    typed builder (so it follows the template's operands and attributes as they grow)."""
    _check_gather_args(width, align, block_size)
    from mlir import ir
    from mlir.dialects import func

    from ..dialects import hector_intra, make_context

    ctx = make_context()
    with ctx, ir.Location.name(f"hector_gather_{align}"):
        f32 = ir.F32Type.get()
        dyn = ir.ShapedType.get_dynamic_size()
        row_t = ir.MemRefType.get([dyn, width], f32)
        idx_t = ir.MemRefType.get([dyn], ir.IntegerType.get_signless(32))
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            fn = func.FuncOp(f"hector_gather_{align}", ([idx_t, row_t, row_t], []))
            with ir.InsertionPoint(fn.add_entry_block()):
                idx, x, out = fn.arguments
                hector_intra.OPS.traversal_template(
                    gather_index=idx,
                    x=x,
                    out=out,
                    parallel="node",
                    fn="copy",
                    reduce="none",
                    slope=0.0,
                    block_size=block_size,
                    extra={"align": align},  # optional attribute, read by the GPU lowering
                )
                func.ReturnOp([])
    return module


def gather_kernel_source(width: int, align: str = "warp128", block_size: int = 256) -> str:
    """The gather kernel's ``hector_intra`` module (:func:`gather_kernel_module`) as text."""
    return str(gather_kernel_module(width, align, block_size))


def gather_kernel_file(width: int, align: str, block_size: int, chip: str) -> str:
    """File name of the prebuilt PTX of one gather kernel in ``$HECTOR_PREBUILT_KERNELS``."""
    return f"{gather_kernel_name(align)}_w{width}_b{block_size}_{chip}.ptx"


def gather_kernel_ptx(
    width: int, align: str = "warp128", block_size: int = 256, chip: str = "sm_90"
) -> str:
    """PTX of the standalone gather kernel (entry :func:`gather_kernel_name`).

    Read from ``$HECTOR_PREBUILT_KERNELS/<gather_kernel_file(...)>`` when that file exists;
    otherwise compiled on the CPU through ``convert-hector-intra-to-gpu`` and the NVPTX back end
    (which needs MLIR), cached per arguments.

    Raises:
        UnifiedError: if the kernel is not prebuilt and MLIR is not installed to compile it.
    """
    _check_gather_args(width, align, block_size)
    folder = os.environ.get(PREBUILT_KERNELS_ENV)
    if folder:
        path = os.path.join(folder, gather_kernel_file(width, align, block_size, chip))
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                return f.read()
    try:
        return _compile_gather_kernel_ptx(width, align, block_size, chip)
    except ModuleNotFoundError as err:
        if err.name != "mlir":
            raise
        where = f"in {folder}" if folder else f"(${PREBUILT_KERNELS_ENV} is not set)"
        raise UnifiedError(
            f"the gather kernel {gather_kernel_file(width, align, block_size, chip)} is not "
            f"prebuilt {where}, and MLIR is not installed to compile it; build it where MLIR "
            "is (scripts/build_carry.sh) and point $HECTOR_PREBUILT_KERNELS at the folder"
        ) from err


@functools.lru_cache(maxsize=64)
def _compile_gather_kernel_ptx(width: int, align: str, block_size: int, chip: str) -> str:
    module = gather_kernel_module(width, align, block_size)
    from ..lowering import pipelines
    from ..lowering.gpu.ptx import extract_ptx
    from ..passes.pipeline import run_pipeline

    with module.context:
        run_pipeline(
            module,
            "convert-hector-intra-to-gpu, " + pipelines.ptx_pipeline(chip=chip),
            reproducer=False,
        )
        return "\n".join(extract_ptx(module).values())


def gather(
    table: torch.Tensor,
    index: torch.Tensor,
    *,
    align: str = "warp128",
    out: torch.Tensor | None = None,
    launcher: Any = None,
) -> torch.Tensor:
    """Rows ``table[index]`` gathered into GPU memory by Hector's zero-copy kernel.

    ``table`` is a 2-D float32 unified tensor (GPU-readable), ``index`` integer row numbers
    (moved to the GPU as int32). With a host-fallback table (no CUDA) this is
    ``table.index_select(0, index)`` on the host. ``launcher`` overrides the kernel launcher
    (a :class:`hector.runtime.launch.Launcher`; tests pass a fake one).
    """
    info = unified_info(table)
    if info is None:
        raise UnifiedError("gather reads a unified table; make it with hector.unified")
    if table.dim() != 2 or table.dtype != torch.float32 or not table.is_contiguous():
        raise ValueError(
            f"gather needs a contiguous 2-D float32 table, got {tuple(table.shape)} {table.dtype}"
        )
    if index.dim() != 1 or index.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"index must be a 1-D int32/int64 tensor, got {index.dtype}")
    if not info.mapped:
        return table.index_select(0, index.to("cpu", torch.int64))
    from ..runtime import launch

    idx = index.to(device="cuda", dtype=torch.int32)
    rows, width = idx.shape[0], table.shape[1]
    if out is None:
        out = torch.empty((rows, width), dtype=torch.float32, device="cuda")
    block = 256
    chip = launch.device_arch()
    ptx = gather_kernel_ptx(width, align, block, chip)
    threads = rows * (32 if align == "warp128" else width)
    grid = max(1, (threads + block - 1) // block)
    launcher = launcher or launch.default_launcher()
    table_arg = launch.MemRef.from_pointer(
        device_pointer(table), tuple(table.shape), tuple(table.stride())
    )
    launcher.launch(
        ptx,
        gather_kernel_name(align),
        grid=(grid, 1, 1),
        block=(block, 1, 1),
        args=[launch.MemRef.from_tensor(idx), table_arg, launch.MemRef.from_tensor(out)],
        stream=torch.cuda.current_stream().cuda_stream,
    )
    return out


#: ``hector.unified``: the public name of :func:`make_unified`.
unified = make_unified
