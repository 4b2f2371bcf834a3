"""Compile traced hector_inter programs through the named stages of a target.

``compile_traced`` runs the CPU stages (``inter → intra → loops → llvm``), keeps each stage's IR
for inspection, and JIT-compiles the result; ``compile_gpu`` runs the GPU stages
(``inter → intra → gpu → ptx``) and returns the PTX. Any stage failure raises
:class:`hector.passes._pipeline.PipelineError`, whose message names a reproducer file and the
``hector-opt`` command that replays the failure.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from mlir import ir

from ._program import (
    Executable,
    FunctionAbi,
    Kind,
    Options,
    StagedModule,
    Traced,
    instantiate,
)
from .graph import HeteroGraph
from .lowering import pipelines, placement_to_runtime, profile_kernels
from .lowering.cpu_jit import CpuKernel, mlir_library
from .lowering.ptx import extract_ptx
from .passes._pipeline import run_pipeline
from .passes.verify import verify_function
from .runtime import host_memory, native
from .runtime.placement import PlacementFrame

__all__ = [
    "CpuEntry",
    "FunctionAbi",
    "GpuEntry",
    "Options",
    "StagedModule",
    "compile_gpu",
    "compile_traced",
    "run_stages",
]

# The verifier names kinds as diagnostics do ("node-wise") or by value ("node"): either reads.
_KINDS: dict[str, Kind] = {**{k.text: k for k in Kind}, **{k.value: k for k in Kind}}


def _abis(module: Any) -> dict[str, FunctionAbi]:
    """Read every function's result ABI from the hector_inter module (kinds from the
    ``hector.result_kinds`` attribute of generated functions, else inferred by the verifier)."""
    out = {}
    dyn = ir.ShapedType.get_dynamic_size()
    for op in module.body.operations:
        op = op.operation
        if op.name != "func.func" or not len(op.regions[0].blocks):
            continue
        name = ir.StringAttr(op.attributes["sym_name"]).value
        ret = list(op.regions[0].blocks[0].operations)[-1].operation
        shapes = tuple(
            tuple(None if d == dyn else d for d in ir.ShapedType(v.type).shape)
            for v in ret.operands
        )
        if "hector.result_kinds" in op.attributes:
            kinds = tuple(
                _KINDS[ir.StringAttr(a).value]
                for a in ir.ArrayAttr(op.attributes["hector.result_kinds"])
            )
        else:
            inferred = verify_function(op)
            kinds = tuple(
                _KINDS.get(str(inferred.get(v, Kind.NODE)), Kind.NODE) for v in ret.operands
            )
        grad_of: tuple[int, ...] = ()
        if "hector.grad_of" in op.attributes:
            grad_of = tuple(
                ir.IntegerAttr(a).value for a in ir.ArrayAttr(op.attributes["hector.grad_of"])
            )
        saved = 0
        if "hector.num_saved" in op.attributes:
            saved = ir.IntegerAttr(op.attributes["hector.num_saved"]).value
        out[name] = FunctionAbi(name, kinds, shapes, grad_of, saved)
    return out


def _drop_saved(abi: dict[str, FunctionAbi], dropped: dict[str, tuple[int, ...]]) -> None:
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
        )


def run_stages(
    program: Traced | ir.Module | str,
    target: str,
    until: str | None = None,
    autodiff: bool = False,
    options: Options | None = None,
    *,
    debug_info: bool = False,
) -> StagedModule:
    """Run the stages of ``target`` (up to ``until``) on a hector_inter program: first the
    optimizations ``options`` enables (default: all, as ``hector.compile``; pass
    ``Options(False, False, False)`` to lower the IR as written) and, with ``autodiff``, the
    ``_train``/``_backward`` functions; each is a named stage.

    ``program`` is a :class:`Traced` (compiled from its own copy, locations and all), a module
    (transformed in place) or text a user wrote (parsed). With ``debug_info`` the IR kept for
    each stage shows every op's location inline, as ``mlir-opt --mlir-print-debuginfo
    --mlir-print-local-scope`` does."""
    if target not in pipelines.TARGETS:
        raise ValueError(f"unknown target {target!r}; targets: {', '.join(pipelines.TARGETS)}")
    start = time.perf_counter()
    if isinstance(program, Traced):
        module = program.instantiate()
    elif isinstance(program, str):
        module = instantiate(program)
    else:
        module = program
    ctx = module.context

    def show() -> str:
        # Locations inline (no #loc aliases), so each op's line shows where it came from.
        return module.operation.get_asm(enable_debug_info=debug_info, use_local_scope=debug_info)

    with ctx, ir.Location.unknown():
        staged = StagedModule(ctx, module, {"inter": show()})
        # Bad input is reported against the user's own file: no reproducer for the verifier.
        run_pipeline(module, "hector-verify", verify=False, reproducer=False)
        opts = options if options is not None else Options()
        for name, pipeline in opts.pipelines(autodiff):
            run_pipeline(module, pipeline, verify=False)
            staged.stages[name] = show()
        staged.abi = _abis(module)
        for stage in pipelines.TARGETS[target]:
            run_pipeline(module, stage.pipeline_for(opts.threads), verify=False)
            staged.stages[stage.name] = show()
            if stage.name == until:
                break
            if stage.name == "intra" and opts.profile and target == "cpu":
                # Timers around the templates before any back end lowers them.
                run_pipeline(module, profile_kernels.PASS, verify=False)
                staged.stages["profile"] = show()
            if stage.name == "schedule" and autodiff and opts.memory_budget >= 0:
                # Place each value <f>_train saves (keep, offload, recompute) on the scheduled
                # memref form (the workers' partial outputs count at the peak), then lower the
                # decisions to runtime calls on the same form: the plan's kernel counts (write
                # lags, prefetch leads) and frees are those of the templates it modelled, not of
                # the loop nests they become.
                run_pipeline(module, opts.placement_pipeline(), verify=False)
                staged.stages["placement"] = show()
                run_pipeline(module, placement_to_runtime.PASS, verify=False)
                _drop_saved(staged.abi, placement_to_runtime.dropped_slots(module))
    staged.seconds = time.perf_counter() - start
    return staged


@dataclass
class CpuEntry(Executable):
    """A compiled CPU kernel plus the ABI needed to call it on a graph and tensors.

    ``profiled``: its templates, when compiled with ``Options(profile=True)`` (else empty);
    :meth:`kernel_profile` reads their timers."""

    traced: Traced
    staged: StagedModule
    kernel: CpuKernel
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
            outs = [torch.from_numpy(host_memory.empty(d)) for d in self.output_shapes(fname, g)]
            arrays = [np.ascontiguousarray(a.numpy()) for a in g.arrays()]
            arrays += [t.detach().contiguous().numpy() for t in tensors]
            arrays += [o.numpy() for o in outs]
            self.kernel(fname, *arrays)
        return outs


def compile_traced(
    traced: Traced, target: str = "cpu", autodiff: bool = False, options: Options | None = None
) -> CpuEntry:
    """Lower a traced program through the CPU stages and JIT-compile it (with its
    ``_train``/``_backward`` functions when ``autodiff``)."""
    if os.environ.get(profile_kernels.ENV, "") not in ("", "0"):
        options = replace(options or Options(), profile=True)
    staged = run_stages(traced, target, autodiff=autodiff, options=options)
    with staged.context:
        profiled = profile_kernels.read_kernels(staged.module.operation)
        libs = [mlir_library(profile_kernels.CLOCK_LIBRARY)] if profiled else []
        offloads = placement_to_runtime.has_placement_calls(staged.module)
        if offloads:  # the generated code calls hector_place_* itself
            libs.append(native.library_path())
        kernel = CpuKernel(staged.module, shared_libs=libs)
    budgeted = autodiff and options is not None and options.memory_budget >= 0
    return CpuEntry(traced, staged, kernel, profiled, offloads, trims_idle=budgeted)


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
