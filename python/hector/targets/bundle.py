"""Target ``bundle``: a program compiled ahead of time for one GPU architecture into PTX and a
versioned launch plan, which :mod:`hector.runtime.bundle` runs without the compiler
(``hector.bundle`` builds, writes and loads bundles; docs/bundles.md).

The stages are target ``cuda``'s up to ``ptx`` for the bundle's chip: the host stays in the
func/gpu dialects, and the plan is read off each host function by walking its ops
(:func:`plan_function`): its arguments, its temporaries with their shapes, and the ordered
steps (``alloc``, ``memset``, ``copy``, ``launch``, ``free``), every size a small expression
over the arguments' dimensions (see :data:`~hector.runtime.bundle_plan.BINARY_OPS`). An op the
expression language cannot say is refused with :class:`BundleError` naming it and its location,
so a bundle never silently differs from the compiled path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mlir import ir

from ..lowering import pipelines
from ..lowering.gpu.ptx import extract_ptx
from ..program import Traced
from ..runtime.bundle_plan import BINARY_OPS, PLAN_VERSION, BundleError, Expr
from .base import Backend, StagedModule
from .driver import run_stages
from .options import Options

__all__ = [
    "BUNDLE",
    "BundleBackend",
    "BundleCode",
    "compile_staged",
    "plan_from_staged",
    "plan_function",
    "plan_module",
]

# arith ops of the host code, by the expression operator they become.
_ARITH: dict[str, str] = {
    "arith.addi": "add",
    "arith.subi": "sub",
    "arith.muli": "mul",
    "arith.divui": "divu",
    "arith.remui": "remu",
    "arith.ceildivui": "ceildivu",
    "arith.maxui": "max",
    "arith.minui": "min",
}
assert set(_ARITH.values()) <= set(BINARY_OPS)

_DTYPES = {"f32": "f32", "i32": "i32", "i64": "i64", "index": "i64"}


# ---------------------------------------------------------------------------------------------
# Expressions
# ---------------------------------------------------------------------------------------------


def _fold(op: str, a: Expr, b: Expr) -> Expr:
    """``[op, a, b]`` with constants folded and identities (``x*1``, ``x+0``) removed."""
    if isinstance(a, int) and isinstance(b, int):
        return BINARY_OPS[op](a, b)
    if op == "mul" and (a == 1 or b == 1):
        return b if a == 1 else a
    if op in ("add", "sub") and b == 0:
        return a
    if op == "add" and a == 0:
        return b
    if op in ("divu", "ceildivu") and b == 1:
        return a
    return [op, a, b]


@dataclass
class _Walk:
    """The state of one host function's walk: what each SSA value is."""

    body: Any  # the function's entry block
    values: dict[Any, Expr] = field(default_factory=dict)  # index values → expression
    floats: dict[Any, float] = field(default_factory=dict)  # f32 constants
    buffers: dict[Any, dict[str, Any]] = field(default_factory=dict)  # memref → {"arg"|"temp"}
    temps: list[dict[str, Any]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)

    def fail(self, op: Any, why: str) -> BundleError:
        return BundleError(f"cannot put '{op.name}' in a launch plan: {why} (at {op.location})")

    def expr(self, op: Any, value: Any) -> Expr:
        if value not in self.values:
            raise self.fail(op, "an operand is not a size the plan can compute")
        return self.values[value]

    def buffer(self, op: Any, value: Any) -> dict[str, Any]:
        if value not in self.buffers:
            raise self.fail(op, "a buffer is neither an argument nor a temporary")
        return self.buffers[value]

    def shape(self, ref: dict[str, Any]) -> list[Expr]:
        """The shape of a buffer as expressions (an argument's dims are read at run time)."""
        if "shape" in ref:  # a view
            return list(ref["shape"])
        if "temp" in ref:
            return list(self.temps[ref["temp"]]["shape"])
        arg = self.body.arguments[ref["arg"]]
        shape = ir.ShapedType(arg.type)
        dyn = ir.ShapedType.get_dynamic_size()
        return [["dim", ref["arg"], i] if d == dyn else d for i, d in enumerate(shape.shape)]


def _memref_type(t: Any) -> tuple[list[int | None], str]:
    shape = ir.ShapedType(t)
    dyn = ir.ShapedType.get_dynamic_size()
    dtype = _DTYPES.get(str(shape.element_type))
    if dtype is None:
        raise BundleError(f"element type {shape.element_type} has no place in a bundle")
    return [None if d == dyn else d for d in shape.shape], dtype


def _constant(w: _Walk, op: Any) -> None:
    attr = op.attributes["value"]
    if isinstance(attr, ir.IntegerAttr):
        w.values[op.results[0]] = int(attr.value)
    elif isinstance(attr, ir.FloatAttr):
        w.floats[op.results[0]] = float(attr.value)
    else:
        raise w.fail(op, f"constant {attr} is neither an integer nor a float")


def _dim(w: _Walk, op: Any) -> None:
    axis = w.expr(op, op.operands[1])
    if not isinstance(axis, int):
        raise w.fail(op, "the dimension index is not a constant")
    w.values[op.results[0]] = w.shape(w.buffer(op, op.operands[0]))[axis]


def _alloc(w: _Walk, op: Any) -> None:
    dims, dtype = _memref_type(op.results[0].type)
    sizes = iter(op.operands)
    shape = [w.expr(op, next(sizes)) if d is None else d for d in dims]
    w.buffers[op.results[0]] = {"temp": len(w.temps)}
    w.steps.append({"op": "alloc", "temp": len(w.temps)})
    w.temps.append({"shape": shape, "dtype": dtype})


def _collapse_shape(w: _Walk, op: Any) -> None:
    """A view of a buffer with groups of dimensions merged (contiguous: a reshape)."""
    source = w.buffer(op, op.operands[0])
    src_shape = w.shape(source)
    dims, _ = _memref_type(op.results[0].type)
    shape: list[Expr] = []
    for group, static in zip(ir.ArrayAttr(op.attributes["reassociation"]), dims, strict=True):
        size: Expr = 1
        for axis in ir.ArrayAttr(group):
            size = _fold("mul", size, src_shape[ir.IntegerAttr(axis).value])
        if static is not None and size != static:
            raise w.fail(op, f"a merged dimension is {size}, the type says {static}")
        shape.append(size)
    base = {k: v for k, v in source.items() if k != "shape"}
    w.buffers[op.results[0]] = {**base, "shape": shape}


def _memset(w: _Walk, op: Any) -> None:
    value = op.operands[1]
    if value not in w.floats and value not in w.values:
        raise w.fail(op, "the fill value is not a constant")
    fill = w.floats.get(value, w.values.get(value))
    w.steps.append({"op": "memset", "dst": w.buffer(op, op.operands[0]), "value": fill})


def _memcpy(w: _Walk, op: Any) -> None:
    dst, src = (w.buffer(op, v) for v in op.operands)
    w.steps.append({"op": "copy", "dst": dst, "src": src})


def _dealloc(w: _Walk, op: Any) -> None:
    ref = w.buffer(op, op.operands[0])
    if "temp" not in ref:
        raise w.fail(op, "it frees an argument")
    w.steps.append({"op": "free", "temp": ref["temp"]})


def _launch(w: _Walk, op: Any) -> None:
    view = op.opview
    if len(view.asyncDependencies) or view.clusterSizeX is not None:
        raise w.fail(op, "async tokens and clusters are not part of plan version 1")
    kernel = ir.SymbolRefAttr(op.attributes["kernel"]).value[-1]
    grid = [w.expr(op, v) for v in (view.gridSizeX, view.gridSizeY, view.gridSizeZ)]
    block = [w.expr(op, v) for v in (view.blockSizeX, view.blockSizeY, view.blockSizeZ)]
    shared = view.dynamicSharedMemorySize
    args: list[dict[str, Any]] = []
    for v in view.kernelOperands:
        if isinstance(v.type, ir.MemRefType):
            args.append(w.buffer(op, v))
        elif v in w.values:
            args.append({"index": w.values[v]})
        elif v in w.floats:
            args.append({"f32": w.floats[v]})
        else:
            raise w.fail(op, f"kernel operand of type {v.type} is not a buffer or a constant")
    step: dict[str, Any] = {"op": "launch", "kernel": kernel, "grid": grid, "block": block}
    step["shared"] = 0 if shared is None else w.expr(op, shared)
    step["args"] = args
    w.steps.append(step)


def _arith(w: _Walk, op: Any) -> None:
    a, b = (w.expr(op, v) for v in op.operands)
    w.values[op.results[0]] = _fold(_ARITH[op.name], a, b)


def _index_cast(w: _Walk, op: Any) -> None:
    w.values[op.results[0]] = w.expr(op, op.operands[0])


_OPS: dict[str, Callable[[_Walk, Any], None]] = {
    "arith.constant": _constant,
    "memref.dim": _dim,
    "gpu.alloc": _alloc,
    "gpu.memset": _memset,
    "memref.collapse_shape": _collapse_shape,
    "gpu.memcpy": _memcpy,
    "gpu.dealloc": _dealloc,
    "gpu.launch_func": _launch,
    "arith.index_cast": _index_cast,
    "arith.index_castui": _index_cast,
    **dict.fromkeys(_ARITH, _arith),
}


def plan_function(func: Any) -> dict[str, Any]:
    """The launch plan of one host function (a ``func.func`` after
    ``convert-hector-intra-to-gpu``): its arguments, temporaries and steps. Raises
    :class:`BundleError` at the first op the plan cannot express."""
    body = func.regions[0].blocks[0]
    w = _Walk(body)
    args = []
    for i, a in enumerate(body.arguments):
        dims, dtype = _memref_type(a.type)
        args.append({"shape": dims, "dtype": dtype})
        w.buffers[a] = {"arg": i}
    for op in body.operations:
        op = op.operation
        if op.name == "func.return":
            if len(op.operands):
                raise w.fail(op, "host functions return through their output arguments")
            break
        handler = _OPS.get(op.name)
        if handler is None:
            raise w.fail(op, "the plan has no step or expression for it")
        handler(w, op)
    outputs = 0
    if "hector.outputs" in func.attributes:
        outputs = ir.IntegerAttr(func.attributes["hector.outputs"]).value
    return {"args": args, "outputs": outputs, "temps": w.temps, "steps": w.steps}


def plan_module(module: Any) -> dict[str, dict[str, Any]]:
    """The plan of every host function of a module after the GPU stages, by name."""
    plans = {}
    for op in module.body.operations:
        op = op.operation
        if op.name != "func.func" or not len(op.regions[0].blocks):
            continue
        plans[ir.StringAttr(op.attributes["sym_name"]).value] = plan_function(op)
    return plans


def _abi(traced: Traced | None, staged: StagedModule) -> dict[str, Any]:
    """The calling convention the executor needs (kinds, result shapes, gradients)."""
    functions = {
        name: {
            "result_kinds": [str(k.value) for k in abi.result_kinds],
            "result_shapes": [list(s) for s in abi.result_shapes],
            "grad_of": list(abi.grad_of),
            "num_saved": abi.num_saved,
        }
        for name, abi in staged.abi.items()
    }
    out: dict[str, Any] = {"functions": functions}
    forward = [n for n in staged.abi if not n.endswith(("_train", "_backward"))]
    if forward:  # a program given as IR: its first forward function, no argument kinds
        out["name"] = forward[0]
        out["result_kinds"] = functions[forward[0]]["result_kinds"]
    if traced is not None:
        out["name"] = traced.name
        out["arg_kinds"] = [str(getattr(k, "value", k)) for k in traced.arg_kinds]
        out["result_kinds"] = [str(getattr(k, "value", k)) for k in traced.result_kinds]
        out["weight_slices"] = {str(k): v for k, v in traced.weight_slices.items()}
    return out


@dataclass(frozen=True)
class BundleCode:
    """What target ``bundle`` compiles a program to: the launch plan and the PTX it launches
    (:func:`hector.bundle.write` puts them in a directory)."""

    plan: dict[str, Any]
    ptx: str


def plan_from_staged(
    staged: StagedModule, traced: Traced | None, chip: str, training: bool
) -> tuple[dict[str, Any], str]:
    """(plan, PTX) of a module taken through the ``bundle`` stages and ``ptx``."""
    with staged.context:
        ptx = "\n".join(extract_ptx(staged.module).values())
        functions = plan_module(staged.module)
    plan = {
        "version": PLAN_VERSION,
        "chip": chip,
        "training": training,
        "abi": _abi(traced, staged),
        "functions": functions,
    }
    return plan, ptx


def compile_staged(
    program: Traced | Any, chip: str, training: bool, options: Options | None
) -> StagedModule:
    """Run the ``bundle`` stages, ``ptx`` for ``chip`` last (the host stays in the func/gpu
    dialects, which the plan is read from)."""
    return run_stages(program, "bundle", autodiff=training, options=options, chip=chip)


class BundleBackend(Backend):
    """Target ``bundle``'s compile step: its stages' kernels in PTX for the bundle's chip, and
    the launch plan read off the host functions."""

    def compile(
        self,
        traced: Traced | Any,
        *,
        autodiff: bool = False,
        options: Options | None = None,
        chip: str = pipelines.GPU_CHIP,
    ) -> BundleCode:
        """The plan and PTX of a traced program, hector_inter text or a module, for ``chip``
        (with ``<f>_train``/``<f>_backward`` when ``autodiff``)."""
        try:
            pipelines.check_gpu_chip(chip)
        except ValueError as err:
            raise BundleError(str(err)) from None
        staged = compile_staged(traced, chip, autodiff, options)
        plan, ptx = plan_from_staged(
            staged, traced if isinstance(traced, Traced) else None, chip, autodiff
        )
        return BundleCode(plan, ptx)


#: Target ``bundle``'s back end (``TARGETS["bundle"]``).
BUNDLE = BundleBackend()
