"""Take a hector_inter program through the named stages of a target: the driver every target
(:mod:`hector.targets`) compiles with.

:func:`run_stages` verifies the program, runs the optimizations the options enable (in the one
:data:`~hector.passes.optimizations.OPTIMIZATION_ORDER`) and then the target's stages (its one
list, :data:`hector.lowering.pipelines.TARGET_STAGES`), keeping each stage's IR for
inspection and reading each function's ABI. Any stage failure raises
:class:`hector.passes.diagnostics.PipelineError`, whose message names a reproducer file and the
``hector-opt`` command that replays it.
"""

from __future__ import annotations

import time
from typing import Any

from mlir import ir

from ..dialects.hector_inter import STORAGE
from ..lowering.cpu.codegen import module_bytecode
from ..lowering.pipelines import GPU_CHIP, LoweringParams
from ..passes.pipeline import run_pipeline
from ..passes.verify import verify_function
from ..program import Kind, Traced, instantiate
from . import TARGETS
from .base import FunctionAbi, StagedModule
from .options import Options

__all__ = ["function_abis", "run_stages"]

# The verifier names kinds as diagnostics do ("node-wise") or by value ("node"): either reads.
_KINDS: dict[str, Kind] = {**{k.text: k for k in Kind}, **{k.value: k for k in Kind}}


def function_abis(module: Any) -> dict[str, FunctionAbi]:
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
        out[name] = FunctionAbi(name, kinds, shapes, grad_of, saved, _result_storage(op))
    return out


def _result_storage(fn: Any) -> tuple[str, ...]:
    """The ``hector.storage`` of each result of ``fn`` (``"f32"`` where none is given); empty
    when no result carries one."""
    if "res_attrs" not in fn.attributes:
        return ()
    names = []
    for attrs in ir.ArrayAttr(fn.attributes["res_attrs"]):
        d = ir.DictAttr(attrs)
        names.append(str(ir.TypeAttr(d[STORAGE]).value) if STORAGE in d else "f32")
    return tuple(names) if any(n != "f32" for n in names) else ()


def run_stages(
    program: Traced | ir.Module | str,
    target: str,
    until: str | None = None,
    autodiff: bool = False,
    options: Options | None = None,
    *,
    debug_info: bool = False,
    chip: str = GPU_CHIP,
) -> StagedModule:
    """Run the stages of ``target`` (up to ``until``) on a hector_inter program: first the
    optimizations ``options`` enables (default: all, as ``hector.compile``; pass
    ``Options(False, False, False)`` to lower the IR as written) and, with ``autodiff``, the
    ``_train``/``_backward`` functions; each is a named stage.

    ``program`` is a :class:`Traced` (compiled from its own copy, locations and all), a module
    (transformed in place) or text a user wrote (parsed). With ``debug_info`` the IR kept for
    each stage shows every op's location inline, as ``mlir-opt --mlir-print-debuginfo
    --mlir-print-local-scope`` does; without it, a target that says so
    (``Backend.last_stage_as_bytecode``) keeps its last stage's IR as bytecode, which
    :meth:`StagedModule.ir` prints when asked. ``chip`` is the GPU architecture the GPU
    targets' ``ptx`` stage compiles for."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; targets: {', '.join(TARGETS)}")
    backend = TARGETS[target].backend()
    stages = TARGETS[target].stages
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
        staged.abi = function_abis(module)
        params = LoweringParams(
            opts.threads, opts.bf16_dot, chip, opts.bf16_emulated, opts.vector_bits
        )
        for stage in stages:
            run_pipeline(module, stage.pipeline_for(params), verify=False)
            last = stage is stages[-1] and backend.last_stage_as_bytecode
            staged.stages[stage.name] = (
                module_bytecode(module) if last and not debug_info else show()
            )
            if stage.name == until:
                break
            backend.after_stage(stage.name, module, staged, opts, autodiff, show)
    staged.seconds = time.perf_counter() - start
    return staged
