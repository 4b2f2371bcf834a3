"""``@hector.compile``: trace a forward function written against a small graph API into
``hector_inter``, compile it through the named stages, and run it on torch tensors.

A forward function takes the graph first and tensors after it::

    @hector.compile
    def rgcn_layer(g, x, weight, root, bias):
        msg = g.typed_linear(g.gather_src(x), weight)          # W_r h_j on every edge
        h = g.sum_to_dst(msg * g.degree_norm())                # Σ_r Σ_j 1/c_{i,r} ...
        return hector.relu(h + g.linear(x, root) + bias)       # + W_0 h_i, bias, σ

On the first call with a new graph schema and new feature shapes the function is traced with
symbolic values (no arithmetic happens in Python), lowered through ``lowering.pipelines`` and
JIT-compiled; later calls reuse the compiled kernel from the cache.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .graph import HeteroGraph

NODE, EDGE, WEIGHT = "node", "edge", "weight"


class TraceError(TypeError):
    """The forward function used the graph API in a way Hector cannot compile."""


# ---------------------------------------------------------------------------------------------
# Tracing
# ---------------------------------------------------------------------------------------------


@dataclass(eq=False)
class Value:
    """A symbolic tensor during tracing: rows are nodes, edges, or (for weights) nothing."""

    tracer: _Tracer
    index: int
    width: tuple[int, ...]  # static trailing dims
    kind: str | None  # NODE | EDGE | WEIGHT | None (argument not used yet)
    arg: int | None = None  # position among the tensor arguments
    shape: tuple[int, ...] | None = None  # full shape of an argument

    def _rows(self, what: str) -> str:
        if self.kind == WEIGHT:
            raise TraceError(f"{what}: a weight cannot be used as node or edge rows")
        return self.kind or NODE

    def __add__(self, other: Value) -> Value:
        return self.tracer.add(self, other)

    def __radd__(self, other: Value) -> Value:
        return self.tracer.add(other, self)

    def __mul__(self, other: Value) -> Value:
        return self.tracer.scale(self, other)

    def __rmul__(self, other: Value) -> Value:
        return self.tracer.scale(other, self)

    def relu(self) -> Value:
        """Elementwise ``max(x, 0)``."""
        return self.tracer.unary(self, "relu")


@dataclass
class _Op:
    name: str
    operands: list[Value]
    result: Value
    attrs: dict[str, str] = field(default_factory=dict)
    uses_graph: bool = False


class _Tracer:
    def __init__(self) -> None:
        self.values: list[Value] = []
        self.ops: list[_Op] = []

    def new(self, width: tuple[int, ...], kind: str | None, **kw: Any) -> Value:
        v = Value(self, len(self.values), width, kind, **kw)
        self.values.append(v)
        return v

    def check(self, v: Any, what: str) -> Value:
        if not isinstance(v, Value) or v.tracer is not self:
            raise TraceError(f"{what} must be a traced tensor argument or result, got {type(v)}")
        return v

    def claim(self, v: Value, kind: str, what: str) -> None:
        """Fix the kind of an argument at its first use; reject a conflicting later use."""
        if v.kind is None:
            if v.arg is not None and v.shape is not None and kind != WEIGHT and len(v.shape) < 2:
                raise TraceError(
                    f"{what}: argument #{v.arg} of shape {v.shape} is not a row tensor"
                )
            v.kind = kind
        elif v.kind != kind:
            raise TraceError(f"{what} must be {kind}-wise but is {v.kind}")

    def emit(
        self,
        name: str,
        operands: list[Value],
        width: tuple[int, ...],
        kind: str | None,
        graph: bool = False,
        **attrs: str,
    ) -> Value:
        out = self.new(width, kind)
        self.ops.append(_Op(name, operands, out, attrs, graph))
        return out

    # -- ops ----------------------------------------------------------------------------------
    def add(self, a: Any, b: Any) -> Value:
        a, b = self.check(a, "left operand of +"), self.check(b, "right operand of +")
        if b.kind == WEIGHT or (b.kind is None and b.shape is not None and len(b.shape) == 1):
            if a.kind == WEIGHT:
                raise TraceError("cannot add two weights in a traced function")
            self.claim(b, WEIGHT, "bias")
            if b.shape is not None and len(b.shape) != 1:
                raise TraceError(f"bias must be a vector, got shape {b.shape}")
            if b.width[-1] != a.width[-1]:
                raise TraceError(f"bias width {b.width[-1]} != row width {a.width[-1]}")
            return self.emit("add", [a, b], a.width, a._rows("+"))
        ka, kb = a.kind, b.kind
        kind = ka or kb or NODE
        self.claim(a, kind, "left operand of +")
        self.claim(b, kind, "right operand of +")
        if a.width != b.width:
            raise TraceError(f"cannot add rows of width {a.width} and {b.width}")
        return self.emit("add", [a, b], a.width, kind)

    def scale(self, a: Any, b: Any) -> Value:
        a, b = self.check(a, "operand of *"), self.check(b, "operand of *")
        if a.width == (1,) and b.width != (1,):
            a, b = b, a
        if b.width != (1,):
            raise TraceError("* scales rows by a per-row column [M, 1] (e.g. g.degree_norm())")
        kind = a.kind or b.kind or NODE
        self.claim(a, kind, "scaled rows")
        self.claim(b, kind, "scale")
        return self.emit("scale", [a, b], a.width, kind)

    def unary(self, x: Any, fn: str) -> Value:
        x = self.check(x, fn)
        kind = x._rows(fn)
        self.claim(x, kind, fn)
        return self.emit("unary", [x], x.width, kind, fn=fn)


class GraphProxy:
    """The graph as seen by a traced forward function: relational operators."""

    def __init__(self, tracer: _Tracer) -> None:
        self._t = tracer

    def gather_src(self, x: Value) -> Value:
        """Each edge's source-node row: ``x[src(e)]`` (node-wise → edge-wise)."""
        x = self._t.check(x, "gather_src input")
        self._t.claim(x, NODE, "gather_src input")
        return self._t.emit("gather_src", [x], x.width, EDGE, graph=True)

    def gather_dst(self, x: Value) -> Value:
        """Each edge's destination-node row: ``x[dst(e)]`` (node-wise → edge-wise)."""
        x = self._t.check(x, "gather_dst input")
        self._t.claim(x, NODE, "gather_dst input")
        return self._t.emit("gather_dst", [x], x.width, EDGE, graph=True)

    def typed_linear(self, x: Value, weight: Value, slice: str = "etype") -> Value:
        """``x[i] @ weight[type(i)]``: per edge type (``"etype"``), node type (``"ntype"``) or
        shared (``"none"``)."""
        x = self._t.check(x, "typed_linear input")
        weight = self._t.check(weight, "typed_linear weight")
        if slice not in ("etype", "ntype", "none"):
            raise TraceError(f"slice must be 'etype', 'ntype' or 'none', got {slice!r}")
        self._t.claim(weight, WEIGHT, "typed_linear weight")
        want_rank = 2 if slice == "none" else 3
        if weight.shape is not None and len(weight.shape) != want_rank:
            raise TraceError(
                f"typed_linear(slice={slice!r}) needs a rank-{want_rank} weight, "
                f"got shape {weight.shape}"
            )
        if weight.shape is not None and weight.shape[-2] != x.width[-1]:
            raise TraceError(
                f"typed_linear: input width {x.width[-1]} does not match weight shape "
                f"{weight.shape}"
            )
        if slice == "none":
            kind = x._rows("typed_linear input")
        else:
            kind = EDGE if slice == "etype" else NODE
        self._t.claim(x, kind, "typed_linear input")
        out_w = (weight.shape[-1],) if weight.shape is not None else weight.width
        return self._t.emit("typed_linear", [x, weight], out_w, kind, graph=True, slice=slice)

    def linear(self, x: Value, weight: Value) -> Value:
        """``x @ weight`` with one shared weight (RGCN's self-loop ``W_0``)."""
        return self.typed_linear(x, weight, slice="none")

    def degree_norm(self, by: str = "dst_etype") -> Value:
        """Per-edge ``1/c``: ``c`` counts incoming edges of the same type (``"dst_etype"``)
        or all incoming edges (``"dst"``)."""
        if by not in ("dst_etype", "dst"):
            raise TraceError(f"by must be 'dst_etype' or 'dst', got {by!r}")
        return self._t.emit("degree_norm", [], (1,), EDGE, graph=True, by=by)

    def sum_to_dst(self, x: Value) -> Value:
        """Sum edge rows onto destination nodes."""
        x = self._t.check(x, "sum_to_dst input")
        self._t.claim(x, EDGE, "sum_to_dst input")
        return self._t.emit("sum_to_dst", [x], x.width, NODE, graph=True)


def relu(x: Value) -> Value:
    """Elementwise ``max(x, 0)`` inside a traced function."""
    if not isinstance(x, Value):
        raise TraceError("hector.relu takes a traced value")
    return x.relu()


def _tensor_type(v: Value) -> str:
    if v.kind in (NODE, EDGE):
        dims = ["?", *map(str, v.width)]
    elif v.shape is not None:
        dims = [str(d) for d in v.shape]
    else:
        dims = [str(d) for d in v.width]
    return f"tensor<{'x'.join(dims)}xf32>"


@dataclass(frozen=True)
class Traced:
    """The result of tracing: hector_inter text and the ABI of the compiled function."""

    name: str
    text: str
    arg_kinds: tuple[str, ...]
    result_kinds: tuple[str, ...]
    result_widths: tuple[tuple[int, ...], ...]
    weight_slices: dict[int, str] = field(default_factory=dict)  # arg position → etype|ntype


def trace(fn: Callable[..., Any], shapes: list[tuple[int, ...]], name: str | None = None) -> Traced:
    """Trace ``fn(g, *tensors)`` for tensors of the given shapes into hector_inter text."""
    t = _Tracer()
    args = []
    for i, shape in enumerate(shapes):
        if len(shape) == 0:
            raise TraceError(f"tensor argument #{i} is a scalar; Hector takes rows or weights")
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
            a.kind = WEIGHT if len(a.shape or ()) != 2 else NODE
    if any(r.kind == WEIGHT for r in results):
        raise TraceError("returning a weight unchanged is not supported")
    fname = name or getattr(fn, "__name__", "forward")
    fname = "".join(c if c.isalnum() or c == "_" else "_" for c in fname)
    sig = ["%g: !hector_inter.graph"]
    for a in args:
        sig.append(f"%a{a.arg}: {_tensor_type(a)}")
    lines = []

    def ref(v: Value) -> str:
        return f"%a{v.arg}" if v.arg is not None else f"%v{v.index}"

    for op in t.ops:
        operands = (["%g"] if op.uses_graph else []) + [ref(v) for v in op.operands]
        types = (["!hector_inter.graph"] if op.uses_graph else []) + [
            _tensor_type(v) for v in op.operands
        ]
        attrs = ", ".join(f'{k} = "{v}"' for k, v in op.attrs.items())
        attrs = f" {{{attrs}}}" if attrs else ""
        lines.append(
            f'  {ref(op.result)} = "hector_inter.{op.name}"({", ".join(operands)}){attrs} : '
            f"({', '.join(types)}) -> {_tensor_type(op.result)}"
        )
    ret_types = ", ".join(_tensor_type(r) for r in results)
    lines.append(f"  return {', '.join(ref(r) for r in results)} : {ret_types}")
    text = (
        f"func.func @{fname}({', '.join(sig)}) -> ({ret_types}) {{\n" + "\n".join(lines) + "\n}\n"
    )
    weight_slices = {
        op.operands[1].arg: op.attrs["slice"]
        for op in t.ops
        if op.name == "typed_linear"
        and op.attrs["slice"] != "none"
        and op.operands[1].arg is not None
    }
    return Traced(
        fname,
        text,
        tuple(a.kind or WEIGHT for a in args),
        tuple(r.kind or NODE for r in results),
        tuple(r.width for r in results),
        weight_slices,
    )


# ---------------------------------------------------------------------------------------------
# Compiled functions
# ---------------------------------------------------------------------------------------------


class CompiledFunction:
    """A forward function compiled by Hector; call it like the original on a HeteroGraph."""

    def __init__(self, fn: Callable[..., Any], target: str = "cpu") -> None:
        if target not in ("cpu",):
            raise ValueError(
                f"target {target!r} cannot run here; use target='cpu' and .ptx() for GPU code"
            )
        self.fn = fn
        self.target = target
        self._cache: dict[tuple, Any] = {}
        functools.update_wrapper(self, fn)
        params = list(inspect.signature(fn).parameters)
        if not params:
            raise TraceError(f"{fn.__name__} must take the graph as its first parameter")
        self._params = params[1:]

    def _check_args(self, g: Any, tensors: tuple[Any, ...]) -> None:
        if not isinstance(g, HeteroGraph):
            raise TypeError(f"the first argument must be a hector.HeteroGraph, got {type(g)}")
        if len(tensors) != len(self._params):
            raise TypeError(
                f"{self.fn.__name__} takes {len(self._params)} tensors after the graph, "
                f"got {len(tensors)}"
            )
        for name, t in zip(self._params, tensors, strict=True):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"argument '{name}' must be a torch.Tensor, got {type(t)}")
            if t.dtype != torch.float32:
                raise ValueError(f"argument '{name}' must be float32, got {t.dtype}")
            if t.device.type != "cpu":
                raise ValueError(
                    f"argument '{name}' is on {t.device}; the CPU back end takes CPU tensors"
                )

    def _key(self, g: HeteroGraph, tensors: tuple[torch.Tensor, ...]) -> tuple:
        return (
            g.schema(),
            tuple(tuple(t.shape[1:]) if t.dim() == 2 else tuple(t.shape) for t in tensors),
        )

    def compile_for(self, g: HeteroGraph, *tensors: torch.Tensor) -> Any:
        """Compile (or fetch from the cache) the kernel for these argument shapes."""
        from . import compiler

        self._check_args(g, tensors)
        key = self._key(g, tensors)
        entry = self._cache.get(key)
        if entry is None:
            traced = trace(self.fn, [tuple(t.shape) for t in tensors])
            entry = compiler.compile_traced(traced, target=self.target)
            self._cache[key] = entry
        return entry

    def __call__(self, g: HeteroGraph, *tensors: torch.Tensor) -> Any:
        entry = self.compile_for(g, *tensors)
        return entry.run(g, tensors, self._params)

    def ir(self, stage: str, g: HeteroGraph, *tensors: torch.Tensor) -> str:
        """The IR after ``stage`` (``inter``, ``intra``, ``loops``, ``llvm``) for these shapes."""
        return self.compile_for(g, *tensors).ir(stage)

    def ptx(self, g: HeteroGraph, *tensors: torch.Tensor) -> str:
        """PTX for the GPU kernels of this function, one ``.entry`` per template."""
        from . import compiler

        entry = self.compile_for(g, *tensors)
        return compiler.compile_gpu(entry.traced).ptx


def compile(fn: Callable[..., Any] | None = None, *, target: str = "cpu") -> Any:  # noqa: A001
    """Decorator: compile a forward function ``fn(g, *tensors)`` with Hector."""
    if fn is None:
        return lambda f: CompiledFunction(f, target=target)
    return CompiledFunction(fn, target=target)
