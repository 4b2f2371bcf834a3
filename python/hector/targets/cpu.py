"""Target ``cpu``: hector_inter through the CPU stages (``inter → intra → schedule → loops →
llvm``), compiled by :func:`hector.lowering.cpu.codegen.compile_module` and called on NumPy views
of the tensors (:class:`CpuEntry`).

After ``intra`` the templates are timed when profiling (``Options(profile=True)`` or
``$HECTOR_PROFILE_KERNELS``); after ``schedule``, a training module compiled under a memory budget
gets its placement plan (``placement-plan-saved``) lowered to calls of the native runtime.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from ..data.graph import HeteroGraph
from ..lowering import placement_to_runtime, profile_kernels
from ..lowering.cpu import codegen as cpu_codegen
from ..lowering.cpu.jit import CpuKernel, LibraryKernel, descriptor_pointers, mlir_library
from ..passes.pipeline import run_pipeline
from ..program import Traced
from ..runtime import compile_cache, host_memory, native
from ..runtime.placement import PlacementFrame
from . import cpu_cache
from .base import Backend, Executable, FunctionAbi, StagedModule
from .driver import run_stages
from .options import Options

__all__ = ["CPU", "CpuBackend", "CpuEntry", "compile_traced", "drop_saved"]


def drop_saved(abi: dict[str, FunctionAbi], dropped: dict[str, tuple[int, ...]]) -> None:
    """Take the saved values placement-plan-saved moved out of the ABI (offloaded or
    recomputed: no longer results of ``<f>_train``) out of its ``FunctionAbi``."""
    for name, slots in dropped.items():
        if name not in abi or not abi[name].num_saved:
            continue
        a = abi[name]
        first = len(a.result_kinds) - a.num_saved
        keep = [i for i in range(len(a.result_kinds)) if i < first or i - first not in slots]
        abi[name] = FunctionAbi(
            a.name,
            tuple(a.result_kinds[i] for i in keep),
            tuple(a.result_shapes[i] for i in keep),
            a.grad_of,
            a.num_saved - len(slots),
            tuple(a.storage_of(i) for i in keep) if a.result_storage else (),
        )


class CpuBackend(Backend):
    """The CPU target's steps between its stages (profile timers, placement plan) and its
    compile step."""

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
        """Time the templates after ``intra`` (when profiling) and place the saved values of a
        training module after ``schedule`` (under a memory budget)."""
        if stage == "intra" and options.profile:
            # Timers around the templates before any back end lowers them.
            run_pipeline(module, profile_kernels.PASS, verify=False)
            staged.stages["profile"] = show()
        if stage == "schedule" and autodiff and options.memory_budget >= 0:
            # Place each value <f>_train saves (keep, offload, recompute) on the scheduled
            # memref form (the workers' partial outputs count at the peak), then lower the
            # decisions to runtime calls on the same form: the plan's kernel counts (write
            # lags, prefetch leads) and frees are those of the templates it modelled, not of
            # the loop nests they become.
            run_pipeline(module, options.placement_pipeline(), verify=False)
            staged.stages["placement"] = show()
            run_pipeline(module, placement_to_runtime.PASS, verify=False)
            drop_saved(staged.abi, placement_to_runtime.dropped_slots(module))

    def compile(
        self, traced: Traced, *, autodiff: bool = False, options: Options | None = None
    ) -> CpuEntry:
        """Lower ``traced`` through the CPU stages and JIT-compile it."""
        return compile_traced(traced, autodiff=autodiff, options=options)


#: The CPU target's back end (``TARGETS["cpu"]``).
CPU = CpuBackend()


@dataclass
class CpuEntry(Executable):
    """A compiled CPU kernel plus the ABI needed to call it on a graph and tensors.

    ``profiled``: its templates, when compiled with ``Options(profile=True)`` (else empty);
    :meth:`kernel_profile` reads their timers."""

    traced: Traced
    staged: StagedModule
    kernel: CpuKernel | LibraryKernel  # LibraryKernel: loaded from the compilation cache
    profiled: list[profile_kernels.KernelInfo] = field(default_factory=list)
    offloads: bool = False  # its training step writes saved values to the store itself
    # Compiled under a memory budget: the host memory cache keeps no idle block during a call
    # (and releases those freed before it), so the step's resident memory is what its memory
    # model counts live — reused blocks would sit resident next to live ones and the caller's
    # tensors (the loss, autograd's gradients).
    trims_idle: bool = False

    def placement_frame(self) -> PlacementFrame | None:
        """A frame of the store for one training step, when the step offloads saved values."""
        return PlacementFrame() if self.offloads else None

    def kernel_profile(self) -> list[profile_kernels.KernelTiming]:
        """Every template's time, rows and calls since the last read (then zeroed); ``[]``
        when compiled without profiling."""
        return profile_kernels.take(self.kernel, self.profiled)

    def call(self, fname: str, g: HeteroGraph, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """Run compiled function ``fname`` on the graph and tensors; return its results (over
        blocks of the host memory cache, like the generated code's own buffers)."""
        idle = host_memory.keeping_no_idle() if self.trims_idle else contextlib.nullcontext()
        with idle:  # (results too: a reused block would be resident before the call writes it)
            shapes, dtypes = self.output_shapes(fname, g), self.output_dtypes(fname)
            outs = [_host_empty(d, t) for d, t in zip(shapes, dtypes, strict=True)]
            arrays = [_bits(t.detach().contiguous()).numpy() for t in tensors]
            arrays += [_bits(o).numpy() for o in outs]
            pointers = graph_pointers(g) + descriptor_pointers(arrays)
            self.kernel.run_pointers(fname, pointers)
        return outs


#: Per graph: its arrays' addresses, shapes and strides, the NumPy arrays over them and the
#: pointers to their memref descriptors (:func:`graph_pointers`).
_GRAPH_POINTERS: weakref.WeakKeyDictionary[HeteroGraph, tuple[Any, list[Any], list[Any]]] = (
    weakref.WeakKeyDictionary()
)


def graph_pointers(g: HeteroGraph) -> list[Any]:
    """The memref descriptor pointers of ``g``'s arrays (:meth:`HeteroGraph.arrays`, in
    order), built on the first call with the graph and kept with it: a graph's arrays do not
    change between calls, and building their descriptors (NumPy views, one ctypes structure
    each) cost more than a small kernel's run. Rebuilt if an array's storage, shape or strides
    changed (a graph whose tensors were replaced)."""
    tensors = g.arrays()
    layout = tuple((t.data_ptr(), t.shape, t.stride()) for t in tensors)
    kept = _GRAPH_POINTERS.get(g)
    if kept is not None and kept[0] == layout:
        return list(kept[2])
    arrays = [np.ascontiguousarray(t.numpy()) for t in tensors]
    pointers = descriptor_pointers(arrays)
    _GRAPH_POINTERS[g] = (layout, arrays, pointers)
    return list(pointers)


def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t`` as NumPy can hold it: bfloat16 has no NumPy type, so its bits pass as int16 (the
    kernel reads and writes bf16)."""
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t


def _host_empty(shape: list[int], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised result over a block of the host memory cache."""
    array = host_memory.empty(shape, _bits(torch.empty(0, dtype=dtype)).numpy().dtype)
    return torch.from_numpy(array).view(dtype)


def compile_traced(
    traced: Traced, autodiff: bool = False, options: Options | None = None
) -> CpuEntry:
    """Lower a traced program through the CPU stages and compile it (with its
    ``_train``/``_backward`` functions when ``autodiff``)."""
    if os.environ.get(profile_kernels.ENV, "") not in ("", "0"):
        options = replace(options or Options(), profile=True)
    cache = None if options is not None and options.profile else compile_cache.default_cache()
    k = cpu_cache.key(traced, autodiff, options) if cache is not None else ""
    if cache is not None and (hit := cpu_cache.load(cache, k)) is not None:
        return CpuEntry(traced, hit.staged, hit.kernel, [], hit.offloads, trims_idle=hit.trims_idle)
    staged = run_stages(traced, "cpu", autodiff=autodiff, options=options)
    budgeted = autodiff and options is not None and options.memory_budget >= 0
    with staged.context, tempfile.TemporaryDirectory(prefix="hector-kernel-") as tmp:
        profiled = profile_kernels.read_kernels(staged.module.operation)
        libs = [mlir_library(profile_kernels.CLOCK_LIBRARY)] if profiled else []
        offloads = placement_to_runtime.has_placement_calls(staged.module)
        if offloads:  # the generated code calls hector_place_* itself
            libs.append(native.library_path())
        library = os.path.join(tmp, cpu_cache.LIBRARY)
        bytecode = staged.stages.get("llvm")  # run_stages keeps it so: nothing to print
        cached = cache is not None
        kernel = cpu_codegen.compile_module(
            staged.module, list(staged.abi), libs, library, bytecode, bool(profiled), cached
        )
        if cache is not None and os.path.exists(library):
            program = cpu_cache.Program(staged, kernel, offloads, budgeted)
            cpu_cache.store(cache, k, program, library)
    return CpuEntry(traced, staged, kernel, profiled, offloads, trims_idle=budgeted)
