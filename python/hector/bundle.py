"""Ahead-of-time bundles: everything a compiled model needs to run on a GPU without the compiler.

:func:`build` lowers a function (or a Hector layer) through the ``cuda`` stages for one GPU
architecture and writes a directory holding

* ``kernels.ptx`` — the PTX of every kernel (the one ``gpu.binary`` of the module), and
* ``plan.json`` — a versioned launch plan (``"version": 1``) read off the host functions that
  ``convert-hector-intra-to-gpu`` produced: for each function (the forward, and for training
  ``<f>_train`` and ``<f>_backward``) its arguments, its temporaries with their shapes, and the
  ordered steps (``alloc``, ``memset``, ``copy``, ``launch``, ``free``), every size a small
  expression over the arguments' dimensions (see :data:`BINARY_OPS`).

:func:`load` returns a callable with the signature of the compiled function, run by the
pure-Python executor :mod:`hector.runtime.bundle` (PyTorch tensors and stream, the CUDA
driver through ``cuda-bindings``); loading imports neither MLIR nor torch-mlir.

The plan is derived by walking each host function's ops (:func:`plan_function`); an op the
expression language cannot say is refused with :class:`BundleError` naming it and its location,
so a bundle never silently differs from the compiled path. :func:`write` validates the plan as
the loader does (:func:`hector.runtime.bundle.validate_plan`) before writing it. See
docs/bundles.md.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .runtime.bundle import BundleFunction
from .runtime.bundle import load as _load_bundle
from .runtime.bundle_plan import (
    BINARY_OPS,
    PLAN_FILE,
    PLAN_VERSION,
    PTX_FILE,
    BundleError,
    Expr,
    parse_plan,
    validate_plan,
)
from .runtime.launch import ptx_param_counts

if TYPE_CHECKING:
    import torch

    from ._program import Options, StagedModule, Traced
    from .graph import HeteroGraph

__all__ = [
    "CHECK_CASES",
    "BundleError",
    "build",
    "build_check_bundles",
    "build_program",
    "load",
    "plan_function",
    "plan_module",
    "write",
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


def load(path: str | os.PathLike[str]) -> BundleFunction:
    """Load the bundle in directory ``path``: a callable ``fn(g, *tensors)`` with the signature
    of the compiled function (differentiable when the bundle was built for training). Imports
    neither MLIR nor torch-mlir."""
    return _load_bundle(path)


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
        from mlir import ir

        shape = ir.ShapedType(arg.type)
        dyn = ir.ShapedType.get_dynamic_size()
        return [["dim", ref["arg"], i] if d == dyn else d for i, d in enumerate(shape.shape)]


def _memref_type(t: Any) -> tuple[list[int | None], str]:
    from mlir import ir

    shape = ir.ShapedType(t)
    dyn = ir.ShapedType.get_dynamic_size()
    dtype = _DTYPES.get(str(shape.element_type))
    if dtype is None:
        raise BundleError(f"element type {shape.element_type} has no place in a bundle")
    return [None if d == dyn else d for d in shape.shape], dtype


def _constant(w: _Walk, op: Any) -> None:
    from mlir import ir

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
    from mlir import ir

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
    from mlir import ir

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
    from mlir import ir

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
    from mlir import ir

    plans = {}
    for op in module.body.operations:
        op = op.operation
        if op.name != "func.func" or not len(op.regions[0].blocks):
            continue
        plans[ir.StringAttr(op.attributes["sym_name"]).value] = plan_function(op)
    return plans


# ---------------------------------------------------------------------------------------------
# Building and writing
# ---------------------------------------------------------------------------------------------


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


def _check_written(plan: dict[str, Any], ptx: str) -> None:
    """Refuse to write a plan the loader would refuse (a bug of the plan's derivation)."""
    try:
        text = json.dumps(plan).encode("utf-8")
        validate_plan(parse_plan(text), ptx_param_counts(ptx))
    except (BundleError, TypeError, ValueError) as err:
        raise BundleError(f"the plan built is not a valid version-1 plan: {err}") from None


def write(out: str | os.PathLike[str], plan: dict[str, Any], ptx: str) -> str:
    """Write ``plan.json`` and ``kernels.ptx`` into directory ``out`` atomically (a temporary
    directory beside it renamed into place): a failed write leaves no partial bundle. The plan
    is validated as :func:`load` validates it first, so a bundle written always loads."""
    target = os.path.abspath(os.fspath(out))
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    if os.path.exists(target) and not os.path.isfile(os.path.join(target, PLAN_FILE)):
        if os.listdir(target):
            raise BundleError(f"'{target}' exists and is not a bundle; refusing to overwrite it")
    _check_written(plan, ptx)
    tmp = tempfile.mkdtemp(prefix=".bundle-", dir=parent)
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700 is for the name race, not the bundle
        with open(os.path.join(tmp, PTX_FILE), "w", encoding="utf-8") as f:
            f.write(ptx)
        with open(os.path.join(tmp, PLAN_FILE), "w", encoding="utf-8") as f:
            json.dump(plan, f, indent=1)
            f.write("\n")
        if os.path.exists(target):
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def plan_from_staged(
    staged: StagedModule, traced: Traced | None, chip: str, training: bool
) -> tuple[dict[str, Any], str]:
    """(plan, PTX) of a module taken through the ``cuda`` stages up to ``ptx``."""
    from .lowering.ptx import extract_ptx

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
    """Run the ``cuda`` stages for ``chip`` up to ``ptx`` (the host stays in the func/gpu
    dialects, which the plan is read from)."""
    from mlir import ir

    from .compiler import run_stages
    from .lowering import pipelines
    from .passes._pipeline import run_pipeline

    staged = run_stages(program, "cuda", until="gpu", autodiff=training, options=options)
    with staged.context, ir.Location.unknown():
        stage = pipelines.cuda_stages(chip)[2]
        run_pipeline(staged.module, stage.pipeline, verify=False)
        staged.stages[stage.name] = str(staged.module)
    return staged


def build_program(
    program: Traced | str | Any,
    *,
    out: str | os.PathLike[str],
    chip: str = "sm_90",
    training: bool = True,
    options: Options | None = None,
) -> str:
    """Build a bundle from a traced program, hector_inter text or a module (``hector compile
    --target cuda --bundle``); without a graph, the optimizations decide as for unknown graph
    statistics. Returns the bundle's path."""
    from ._program import Traced
    from .gpu_exec import _CHIP

    if not _CHIP.match(chip):
        raise BundleError(f"chip must look like 'sm_90', got {chip!r}")
    staged = compile_staged(program, chip, training, options)
    traced = program if isinstance(program, Traced) else None
    plan, ptx = plan_from_staged(staged, traced, chip, training)
    return write(out, plan, ptx)


def _capture(model: Any, graph: HeteroGraph, inputs: Sequence[Any]) -> tuple[Any, tuple]:
    """The compiled core of a Hector layer and the tensors its forward passes to it (the
    forward runs once with the core replaced by a recorder returning zeros)."""
    import torch

    from .frontend import CompiledFunction, trace

    core: CompiledFunction = model.compiled
    seen: list[tuple] = []

    class _Recorder:
        def __call__(self, g: Any, *tensors: torch.Tensor) -> Any:
            seen.append(tensors)
            traced = trace(core.fn, [tuple(t.shape) for t in tensors])
            outs = [
                torch.zeros(g.num_nodes if k == "node" else g.num_edges, *w)
                for k, w in zip(
                    (str(getattr(k, "value", k)) for k in traced.result_kinds),
                    traced.result_widths,
                    strict=True,
                )
            ]
            return outs[0] if len(outs) == 1 else tuple(outs)

    saved = model._fn
    model._fn = _Recorder()
    try:
        with torch.no_grad():
            model(graph, *inputs)
    finally:
        model._fn = saved
    if len(seen) != 1:
        raise BundleError(f"the layer's forward called its compiled core {len(seen)} times")
    return core, tuple(t.detach() for t in seen[0])


def build(
    fn_or_model: Any,
    graph: HeteroGraph,
    *inputs: Any,
    out: str | os.PathLike[str],
    chip: str = "sm_90",
    training: bool = True,
    target: str = "cuda",
) -> str:
    """Build a bundle for ``fn_or_model`` on graphs like ``graph`` and write it to ``out``.

    ``fn_or_model`` is a function ``f(g, *tensors)`` written against the graph API, a
    ``hector.compile``-d one, or a Hector layer (``RGCNLayer``, ``RGATLayer``,
    ``HGTLayer``: anything with a ``compiled`` core); ``inputs`` are example tensors (for a layer,
    its forward's inputs); a tuple of ints stands for a tensor of that shape. The kernels are
    compiled for GPU architecture ``chip``; with
    ``training`` the bundle also holds ``<f>_train`` and ``<f>_backward``. The optimizations
    decided from the graph's statistics (compaction, HGT's folding) are those
    ``hector.compile`` makes for ``graph``. Returns the bundle's path."""
    from .frontend import CompiledFunction, trace
    from .gpu_exec import _CHIP

    if target != "cuda":
        raise BundleError(f"bundles are built for target 'cuda', got {target!r}")
    if not _CHIP.match(chip):
        raise BundleError(f"chip must look like 'sm_90', got {chip!r}")
    import torch

    # Shapes stand for example tensors (zeros: only shapes reach the bundle).
    inputs = tuple(torch.zeros(tuple(x)) if isinstance(x, tuple | list) else x for x in inputs)
    if hasattr(fn_or_model, "compiled") and callable(fn_or_model):
        core, tensors = _capture(fn_or_model, graph, inputs)
    else:
        core = fn_or_model if isinstance(fn_or_model, CompiledFunction) else None
        core = core or CompiledFunction(fn_or_model)
        tensors = tuple(inputs)
    core._check_args(graph, tensors)
    traced = trace(core.fn, [tuple(t.shape) for t in tensors])
    staged = compile_staged(traced, chip, training, core.options_for(graph))
    plan, ptx = plan_from_staged(staged, traced, chip, training)
    return write(out, plan, ptx)


# ---------------------------------------------------------------------------------------------
# The bundles the GPU check runs (scripts/build_carry.sh → hector.bundle_check)
# ---------------------------------------------------------------------------------------------

#: (model, dataset) pairs of the GPU check: RGCN, RGAT and HGT training on the replicas of AIFB,
#: MUTAG and BGS, 32 features in and out, 2 heads for RGAT and HGT.
CHECK_CASES: tuple[tuple[str, str], ...] = tuple(
    (m, d) for d in ("aifb", "mutag", "bgs") for m in ("rgcn", "rgat", "hgt")
)


def check_layer(model: str, ds: Any, in_dim: int, hidden: int, heads: int) -> Any:
    """The Hector layer of a check case (its weights do not matter: only shapes reach the
    bundle; the check derives the arguments from the PyG layer)."""
    from .models import HGTLayer, RGATLayer, RGCNLayer

    if model == "rgcn":
        return RGCNLayer(in_dim, hidden, ds.num_relations)
    if model == "rgat":
        return RGATLayer(in_dim, hidden, ds.num_relations, heads=heads)
    types, relations = ds.metadata()
    return HGTLayer(in_dim, hidden, types, relations, heads=heads)


def build_check_bundles(
    out_dir: str | os.PathLike[str],
    *,
    cases: Sequence[tuple[str, str]] = CHECK_CASES,
    scale: float = 1.0,
    seed: int = 0,
    in_dim: int = 32,
    hidden: int = 32,
    heads: int = 2,
    chip: str = "sm_90",
) -> list[dict[str, Any]]:
    """Build a training bundle per ``(model, dataset)`` under ``out_dir`` and the manifest
    ``check.json`` that ``python3 -m hector.bundle_check --bundles out_dir`` reads;
    returns the cases."""
    import torch

    from . import datasets
    from .bundle_check import CHECK_FILE

    os.makedirs(out_dir, exist_ok=True)
    records = []
    for model, name in cases:
        ds = datasets.load(f"synthetic:{name}", scale=scale, seed=seed)
        g = ds.hetero_graph()
        torch.manual_seed(seed)
        layer = check_layer(model, ds, in_dim, hidden, heads)
        if model == "hgt":
            counts, _ = ds.pyg_hetero()
            x: Any = {t: torch.randn(n, in_dim) for t, n in counts.items()}
        else:
            x = torch.randn(ds.num_nodes, in_dim)
        bundle_name = f"{model}-{name}"
        build(layer, g, x, out=os.path.join(out_dir, bundle_name), chip=chip)
        records.append(
            {
                "model": model,
                "dataset": name,
                "scale": scale,
                "seed": seed,
                "in_dim": in_dim,
                "hidden": hidden,
                "heads": heads if model != "rgcn" else 1,
                "bundle": bundle_name,
            }
        )
    with open(os.path.join(out_dir, CHECK_FILE), "w", encoding="utf-8") as f:
        json.dump({"version": 1, "chip": chip, "cases": records}, f, indent=1)
    return records
