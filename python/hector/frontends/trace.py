"""Tracing: a forward function ``fn(g, *tensors)`` run on symbolic values and built into a
``hector_inter`` module (:func:`trace`, which returns a :class:`~hector.program.Traced`).

The function runs once on the graph API (:mod:`hector.frontends.graph_api`), which records each
call; the record is then built through the MLIR bindings (``func.FuncOp``, block arguments, the
spec-generated ``hector_inter.OPS`` builders) in a context of its own. Every op carries the
``file:line:col`` of the user's line that made it, and the function the line of its ``def``:
diagnostics of every stage, and ``hector compile --debug-info``, point there. Each argument's
kind (node rows, edge rows or weight), the weights sliced by type, the half storage types and
the arguments the results depend on go with the module, for the compile step
(:mod:`hector.frontends.compiled`) and the back ends.
"""

from __future__ import annotations

import linecache
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from ..dialects import Kind, make_context
from ..dialects import hector_inter as inter
from ..program import Traced
from .graph_api import GraphProxy, SourceLoc, TraceError, Tracer, Value

if TYPE_CHECKING:
    from mlir import ir

__all__ = ["Traced", "trace"]


def _def_location(fn: Callable[..., Any]) -> SourceLoc:
    """The ``(file, line, column)`` of ``fn``'s ``def`` (after its decorators)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return ("<unknown>", 0, 0)
    line = code.co_firstlineno
    for candidate in range(line, line + 50):  # skip the decorator lines
        text = linecache.getline(code.co_filename, candidate)
        stripped = text.lstrip()
        if stripped.startswith(("def ", "async def ")):
            return (code.co_filename, candidate, len(text) - len(stripped) + 1)
        if not text:
            break
    return (code.co_filename, line, 1)


def _tensor_type(v: Value) -> ir.RankedTensorType:
    """Rows are dynamic (``?``); weights keep their full static shape."""
    from mlir import ir

    if v.kind in (Kind.NODE, Kind.EDGE):
        dims = [ir.ShapedType.get_dynamic_size(), *v.width]
    elif v.shape is not None:
        dims = list(v.shape)
    else:
        dims = list(v.width)
    return ir.RankedTensorType.get(dims, ir.F32Type.get())


def _location(loc: SourceLoc) -> ir.Location:
    from mlir import ir

    file, line, col = loc
    return ir.Location.file(file, line, col)


def _symbol(fn: Callable[..., Any], name: str | None) -> str:
    fname: str = name if name else getattr(fn, "__name__", "forward")
    return "".join(c if c.isalnum() or c == "_" else "_" for c in fname)


def _build(
    t: Tracer,
    args: list[Value],
    results: list[Value],
    name: str,
    where: SourceLoc,
    no_grad: Collection[int] = (),
    storage: dict[int, str] | None = None,
    written: str | None = None,
) -> ir.Module:
    """The traced function as a hector_inter module, built through the bindings in a context
    of its own: ``func.func @name(%g: !hector_inter.graph, %a0, ...)``, each argument's kind in
    a ``hector.kind`` argument attribute (so every pass agrees with the tracer), the arguments
    at ``no_grad`` positions marked ``hector.no_grad`` (``hector-autodiff`` gives them no
    gradient), those in ``storage`` marked ``hector.storage`` (passed in that half type), the
    ``[rows, width]`` results too when ``written`` names a half type, each op at the user's
    source line and the function at its ``def``."""
    # The compiler loads on first use, so that bundles run where MLIR is not installed.
    try:
        from mlir import ir
        from mlir.dialects import func
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            f"compiling needs MLIR's Python bindings ({err.name!r} is not installed); on a "
            "machine without the compiler, run an ahead-of-time bundle (hector.bundle.load)",
            name=err.name,
        ) from err

    half = {"f16": ir.F16Type.get, "bf16": ir.BF16Type.get}  # hector.storage's element types
    ctx = make_context()
    with ctx:
        fn_loc = _location(where)
    with ctx, fn_loc:
        graph_type = inter.graph_type()
        module = ir.Module.create()
        inputs = [graph_type, *(_tensor_type(a) for a in args)]
        outputs = [_tensor_type(r) for r in results]
        with ir.InsertionPoint(module.body):
            f = func.FuncOp(name, ir.FunctionType.get(inputs, outputs))
        f.arg_attrs = ir.ArrayAttr.get(
            [ir.DictAttr.get({})]
            + [
                ir.DictAttr.get(
                    {"hector.kind": ir.StringAttr.get(a.kind or Kind.WEIGHT)}
                    | ({"hector.no_grad": ir.UnitAttr.get()} if i in no_grad else {})
                    | (
                        {inter.STORAGE: ir.TypeAttr.get(half[storage[i]]())}
                        if storage and i in storage
                        else {}
                    )
                )
                for i, a in enumerate(args)
            ]
        )
        if written is not None:
            stored = {inter.STORAGE: ir.TypeAttr.get(half[written]())}
            f.result_attrs = ir.ArrayAttr.get(
                [ir.DictAttr.get(stored if t.rank == 2 else {}) for t in outputs]
            )
        block = f.add_entry_block([fn_loc] * len(inputs))
        env: dict[int, ir.Value] = {a.index: block.arguments[i + 1] for i, a in enumerate(args)}
        with ir.InsertionPoint(block):
            for op in t.ops:
                operands = {k: env[v.index] for k, v in op.operands.items()}
                if op.graph:
                    operands["graph"] = block.arguments[0]
                build = getattr(inter.OPS, op.name)
                env[op.result.index] = build(
                    **operands, **op.attrs, result=_tensor_type(op.result), loc=_location(op.loc)
                )
            # The Python ``return`` is not traced: the return sits at the function's ``def``.
            func.ReturnOp([env[r.index] for r in results], loc=fn_loc)
    return module


def _weight_slices(t: Tracer) -> dict[int, str]:
    """Argument position → ``etype``/``ntype`` for every weight sliced by type."""
    slices: dict[int, str] = {}
    for op in t.ops:
        if op.name == "typed_linear" and op.attrs["slice"] != "none":
            weight = op.operands["weight"]
            if weight.arg is not None:
                slices[weight.arg] = str(op.attrs["slice"])
    for op in t.ops:  # typed biases are sliced by the type of their rows
        if op.name == "add" and op.graph and op.operands["rhs"].arg is not None:
            rows = op.operands["lhs"].kind
            slices[op.operands["rhs"].arg] = "etype" if rows == Kind.EDGE else "ntype"
    return slices


def trace(
    fn: Callable[..., Any],
    shapes: list[tuple[int, ...]],
    name: str | None = None,
    no_grad: Collection[int] = (),
    storage: dict[int, str] | None = None,
    written: str | None = None,
) -> Traced:
    """Trace ``fn(g, *tensors)`` for tensors of the given shapes into a hector_inter module
    whose ops carry the ``file:line:col`` of the user's source line that made them; the tensor
    arguments at ``no_grad`` positions take no gradient when it is differentiated, those in
    ``storage`` are passed in that half type (``"f16"``, ``"bf16"``), read as such, and the
    ``[rows, width]`` results are written in the half type ``written`` where given."""
    t = Tracer()
    args = []
    for i, shape in enumerate(shapes):
        if len(shape) == 0:
            raise TraceError(f"tensor argument #{i} is a scalar; Hector takes rows or weights")
        if 0 in shape[1:] or shape[0] == 0 and len(shape) == 1:  # no template has width 0
            raise TraceError(
                f"tensor argument #{i} has shape {list(shape)}: every dim but the rows must "
                "be at least 1"
            )
        args.append(
            t.new(
                tuple(shape[1:]) if len(shape) > 1 else tuple(shape),
                None,
                arg=i,
                shape=tuple(shape),
            )
        )
    out = fn(GraphProxy(t), *args)
    results = list(out) if isinstance(out, (tuple, list)) else [out]
    for r in results:
        t.check(r, "the returned value")
    for a in args:
        if a.kind is None:
            a.kind = Kind.WEIGHT if len(a.shape or ()) != 2 else Kind.NODE
    if any(r.kind == Kind.WEIGHT for r in results):
        raise TraceError("returning a weight unchanged is not supported")
    fname = _symbol(fn, name)
    module = _build(t, args, results, fname, _def_location(fn), no_grad, storage, written)
    return Traced(
        fname,
        module,
        tuple(a.kind or Kind.WEIGHT for a in args),
        tuple(r.kind or Kind.NODE for r in results),
        tuple(r.width for r in results),
        _weight_slices(t),
        dict(storage or {}),
        tuple(_built_shape(a) for a in args),
        _used_args(t, results),
    )


def _built_shape(a: Value) -> tuple[int | None, ...]:
    """Argument ``a``'s shape as its kernel is built (:func:`_tensor_type`): rows dynamic
    (None) for node and edge rows, every dim of a weight static."""
    shape = a.shape or a.width
    return (None, *shape[1:]) if a.kind in (Kind.NODE, Kind.EDGE) else tuple(shape)


def _used_args(t: Tracer, results: list[Value]) -> frozenset[int]:
    """Positions of the arguments ``results`` depend on (through any chain of ops)."""
    made = {op.result.index: op for op in t.ops}
    seen: set[int] = set()
    todo = [r.index for r in results]
    while todo:
        index = todo.pop()
        if index in seen:
            continue
        seen.add(index)
        if index in made:
            todo.extend(v.index for v in made[index].operands.values())
    return frozenset(v.arg for v in t.values if v.arg is not None and v.index in seen)
