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

Tracing records each graph-API call, then builds the ``hector_inter`` function through the MLIR
bindings (``func.FuncOp``, block arguments, the spec-generated ``hector_inter.OPS`` builders) in
a context of its own. Every op carries the ``file:line:col`` of the user's line that made it
(the innermost frame outside this module, so ``hector.models``' layers point into models.py as
a user's layers point into theirs) and the function the line of its ``def``: diagnostics of
every stage, and ``hector compile --debug-info``, point there. The target a program compiles
for is looked up in ``hector.targets.TARGETS``; this module imports no back end.
"""

from __future__ import annotations

import functools
import inspect
import linecache
import os
import re
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import TYPE_CHECKING, Any, cast

import torch

from ..data.graph import HeteroGraph
from ..dialects import Kind, make_context
from ..dialects import hector_inter as inter
from ..program import STORAGE_TYPES, Traced
from ..runtime.training import TrainingStep
from ..targets import Executable, GraphStats, Options
from ..targets import target as _target

if TYPE_CHECKING:  # the back end is imported through TARGETS, on first use only
    from mlir import ir

    from ..targets.cuda import GpuEntry

__all__ = [
    "CompiledFunction",
    "GraphProxy",
    "TraceError",
    "Traced",
    "Value",
    "compile",
    "exp",
    "gelu",
    "leaky_relu",
    "relu",
    "shift_positive",
    "sigmoid",
    "silu",
    "tanh",
    "trace",
]


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
    kind: Kind | None  # Kind.NODE | Kind.EDGE | Kind.WEIGHT | None (argument not used yet)
    arg: int | None = None  # position among the tensor arguments
    shape: tuple[int, ...] | None = None  # full shape of an argument

    def _rows(self, what: str) -> Kind:
        if self.kind == Kind.WEIGHT:
            raise TraceError(f"{what}: a weight cannot be used as node or edge rows")
        return self.kind or Kind.NODE

    def __add__(self, other: Value) -> Value:
        return self.tracer.add(self, other)

    def __radd__(self, other: Value) -> Value:
        return self.tracer.add(other, self)

    def __mul__(self, other: Value) -> Value:
        return self.tracer.scale(self, other)

    def __rmul__(self, other: Value) -> Value:
        return self.tracer.scale(other, self)

    def __neg__(self) -> Value:
        return self.tracer.unary(self, "neg")

    def relu(self) -> Value:
        """Elementwise ``max(x, 0)``."""
        return self.tracer.unary(self, "relu")

    def leaky_relu(self, negative_slope: float = 0.01) -> Value:
        """Elementwise ``x if x > 0 else negative_slope * x``."""
        return self.tracer.unary(self, "leaky_relu", negative_slope)

    def exp(self) -> Value:
        """Elementwise ``exp(x)``."""
        return self.tracer.unary(self, "exp")

    def tanh(self) -> Value:
        """Elementwise ``tanh(x)``."""
        return self.tracer.unary(self, "tanh")

    def sigmoid(self) -> Value:
        """Elementwise ``1 / (1 + exp(-x))``."""
        return self.tracer.unary(self, "sigmoid")

    def gelu(self) -> Value:
        """Elementwise exact GELU (PyTorch's default, erf form)."""
        return self.tracer.unary(self, "gelu")

    def silu(self) -> Value:
        """Elementwise SiLU (swish), ``x * sigmoid(x)``."""
        return self.tracer.unary(self, "silu")

    def shift_positive(self) -> Value:
        """Elementwise ``x + 1 if x > 0 else x`` (RGAT's f-additive attention)."""
        return self.tracer.unary(self, "shift_positive")


SourceLoc = tuple[str, int, int]  # (file, line, column), both 1-based


def _is_frontend(filename: str) -> bool:
    """Whether a frame's file is this module: the graph API's own frames are skipped."""
    return os.path.normcase(os.path.abspath(filename)) == _THIS_FILE


_THIS_FILE = os.path.normcase(os.path.abspath(__file__))


def _user_location() -> SourceLoc:
    """The ``(file, line, column)`` of the innermost frame outside this module: the line of
    the user's forward function that called the graph API (as torch-mlir's importer records
    each node's Python source line)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and _is_frontend(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return ("<unknown>", 0, 0)
    line, col = frame.f_lineno, 0
    if frame.f_lasti >= 0:
        positions = iter(frame.f_code.co_positions())
        for _ in range(frame.f_lasti // 2):
            next(positions, None)
        pos = next(positions, None)
        if pos is not None and pos[0] is not None:
            line, col = pos[0], pos[2] or 0
    return (frame.f_code.co_filename, line, col + 1)


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


@dataclass
class _Op:
    name: str
    operands: dict[str, Value]  # by the op spec's operand names ("graph" added at build time)
    result: Value
    loc: SourceLoc
    attrs: dict[str, str | float] = field(default_factory=dict)
    graph: bool = False


class _Tracer:
    def __init__(self) -> None:
        self.values: list[Value] = []
        self.ops: list[_Op] = []

    def new(self, width: tuple[int, ...], kind: Kind | None, **kw: Any) -> Value:
        v = Value(self, len(self.values), width, kind, **kw)
        self.values.append(v)
        return v

    def check(self, v: Any, what: str) -> Value:
        if not isinstance(v, Value) or v.tracer is not self:
            raise TraceError(f"{what} must be a traced tensor argument or result, got {type(v)}")
        return v

    def claim(self, v: Value, kind: Kind, what: str) -> None:
        """Fix the kind of an argument at its first use; reject a conflicting later use."""
        if v.kind is None:
            if (
                v.arg is not None
                and v.shape is not None
                and kind != Kind.WEIGHT
                and len(v.shape) != 2  # every op's rows are [rows, width] (hector-verify)
            ):
                raise TraceError(
                    f"{what}: argument #{v.arg} of shape {v.shape} is not a row tensor "
                    "[rows, width]"
                )
            if kind == Kind.WEIGHT and v.shape is not None and 0 in v.shape:
                raise TraceError(f"{what}: weight #{v.arg} of shape {list(v.shape)} is empty")
            v.kind = kind
        elif v.kind != kind:
            raise TraceError(f"{what} must be {kind}-wise but is {v.kind}")

    def emit(
        self,
        name: str,
        operands: dict[str, Value],
        width: tuple[int, ...],
        kind: Kind | None,
        graph: bool = False,
        **attrs: str | float,
    ) -> Value:
        """Record ``hector_inter.<name>`` at the user's current source line."""
        out = self.new(width, kind)
        self.ops.append(_Op(name, operands, out, _user_location(), attrs, graph))
        return out

    # -- ops ----------------------------------------------------------------------------------
    def add(self, a: Any, b: Any) -> Value:
        a, b = self.check(a, "left operand of +"), self.check(b, "right operand of +")
        if b.kind == Kind.WEIGHT or (b.kind is None and b.shape is not None and len(b.shape) == 1):
            if a.kind == Kind.WEIGHT:
                raise TraceError("cannot add two weights in a traced function")
            self.claim(b, Kind.WEIGHT, "bias")
            if b.shape is not None and len(b.shape) != 1:
                raise TraceError(f"bias must be a vector, got shape {b.shape}")
            if b.width[-1] != a.width[-1]:
                raise TraceError(f"bias width {b.width[-1]} != row width {a.width[-1]}")
            return self.emit("add", {"lhs": a, "rhs": b}, a.width, a._rows("+"))
        ka, kb = a.kind, b.kind
        kind = ka or kb or Kind.NODE
        self.claim(a, kind, "left operand of +")
        self.claim(b, kind, "right operand of +")
        if a.width != b.width:
            raise TraceError(f"cannot add rows of width {a.width} and {b.width}")
        return self.emit("add", {"lhs": a, "rhs": b}, a.width, kind)

    def scale(self, a: Any, b: Any) -> Value:
        a, b = self.check(a, "operand of *"), self.check(b, "operand of *")
        if len(a.width) == 1 and len(b.width) == 1 and a.width[0] < b.width[0]:
            a, b = b, a
        if len(a.width) != 1 or len(b.width) != 1 or a.width[0] % b.width[0]:
            raise TraceError(
                "* scales rows by per-row (per-head) scalars [M, H] where H divides the row "
                f"width (e.g. g.degree_norm() or attention weights); got widths {a.width} and "
                f"{b.width}"
            )
        kind = a.kind or b.kind or Kind.NODE
        self.claim(a, kind, "scaled rows")
        self.claim(b, kind, "scale")
        return self.emit("scale", {"x": a, "s": b}, a.width, kind)

    def unary(self, x: Any, fn: str, slope: float = 0.0) -> Value:
        x = self.check(x, fn)
        kind = x._rows(fn)
        self.claim(x, kind, fn)
        return self.emit("unary", {"x": x}, x.width, kind, fn=fn, slope=float(slope))


class GraphProxy:
    """The graph as seen by a traced forward function: relational operators."""

    def __init__(self, tracer: _Tracer) -> None:
        self._t = tracer

    def gather_src(self, x: Value) -> Value:
        """Each edge's source-node row: ``x[src(e)]`` (node-wise → edge-wise)."""
        x = self._t.check(x, "gather_src input")
        self._t.claim(x, Kind.NODE, "gather_src input")
        return self._t.emit("gather_src", {"x": x}, x.width, Kind.EDGE, graph=True)

    def gather_dst(self, x: Value) -> Value:
        """Each edge's destination-node row: ``x[dst(e)]`` (node-wise → edge-wise)."""
        x = self._t.check(x, "gather_dst input")
        self._t.claim(x, Kind.NODE, "gather_dst input")
        return self._t.emit("gather_dst", {"x": x}, x.width, Kind.EDGE, graph=True)

    def typed_linear(self, x: Value, weight: Value, slice: str = "etype") -> Value:
        """``x[i] @ weight[type(i)]``: per edge type (``"etype"``), node type (``"ntype"``) or
        shared (``"none"``)."""
        x = self._t.check(x, "typed_linear input")
        weight = self._t.check(weight, "typed_linear weight")
        if slice not in ("etype", "ntype", "none"):
            raise TraceError(f"slice must be 'etype', 'ntype' or 'none', got {slice!r}")
        self._t.claim(weight, Kind.WEIGHT, "typed_linear weight")
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
            kind = Kind.EDGE if slice == "etype" else Kind.NODE
        self._t.claim(x, kind, "typed_linear input")
        out_w = (weight.shape[-1],) if weight.shape is not None else weight.width
        return self._t.emit(
            "typed_linear", {"x": x, "weight": weight}, out_w, kind, graph=True, slice=slice
        )

    def linear(self, x: Value, weight: Value) -> Value:
        """``x @ weight`` with one shared weight (RGCN's self-loop ``W_0``)."""
        return self.typed_linear(x, weight, slice="none")

    def degree_norm(self, by: str = "dst_etype") -> Value:
        """Per-edge ``1/c``: ``c`` counts incoming edges of the same type (``"dst_etype"``)
        or all incoming edges (``"dst"``)."""
        if by not in ("dst_etype", "dst"):
            raise TraceError(f"by must be 'dst_etype' or 'dst', got {by!r}")
        return self._t.emit("degree_norm", {}, (1,), Kind.EDGE, graph=True, by=by)

    def sum_to_dst(self, x: Value) -> Value:
        """Sum edge rows onto destination nodes."""
        x = self._t.check(x, "sum_to_dst input")
        self._t.claim(x, Kind.EDGE, "sum_to_dst input")
        return self._t.emit("sum_to_dst", {"x": x}, x.width, Kind.NODE, graph=True)

    def sum_to_src(self, x: Value) -> Value:
        """Sum edge rows onto source nodes."""
        x = self._t.check(x, "sum_to_src input")
        self._t.claim(x, Kind.EDGE, "sum_to_src input")
        return self._t.emit("sum_to_src", {"x": x}, x.width, Kind.NODE, graph=True)

    def edge_softmax(self, x: Value, by: str = "dst") -> Value:
        """Softmax of edge scores ``[E, H]`` over each node's incoming edges, per head; with
        ``by="dst_etype"``, over its incoming edges of each edge type (RGAT's
        within-relation attention)."""
        if by not in ("dst", "dst_etype"):
            raise TraceError(f"by must be 'dst' or 'dst_etype', got {by!r}")
        x = self._t.check(x, "edge_softmax input")
        self._t.claim(x, Kind.EDGE, "edge_softmax input")
        return self._t.emit("edge_softmax", {"x": x}, x.width, Kind.EDGE, graph=True, by=by)

    def edge_max(self, x: Value, by: str = "dst") -> Value:
        """Each edge's row replaced by the elementwise maximum over its destination's incoming
        edges (``by="dst_etype"``: those of its edge type); max aggregation is
        ``g.sum_to_dst(g.edge_max(m) * g.degree_norm("dst"))``."""
        if by not in ("dst", "dst_etype"):
            raise TraceError(f"by must be 'dst' or 'dst_etype', got {by!r}")
        x = self._t.check(x, "edge_max input")
        self._t.claim(x, Kind.EDGE, "edge_max input")
        return self._t.emit("edge_max", {"x": x}, x.width, Kind.EDGE, graph=True, by=by)

    def dot(self, x: Value, y: Value, heads: int = 1) -> Value:
        """Per-head inner product of two row tensors of width ``D``: ``[M, heads]``."""
        x, y = self._t.check(x, "dot operand"), self._t.check(y, "dot operand")
        if x.width != y.width or len(x.width) != 1:
            raise TraceError(f"dot needs two row tensors of one width, got {x.width}, {y.width}")
        if heads <= 0 or x.width[0] % heads:
            raise TraceError(f"heads={heads} must divide the row width {x.width[0]}")
        kind = x.kind or y.kind or Kind.NODE
        self._t.claim(x, kind, "dot operand")
        self._t.claim(y, kind, "dot operand")
        return self._t.emit("dot", {"x": x, "y": y}, (heads,), kind)

    def typed_bias(self, x: Value, bias: Value) -> Value:
        """``x[i] + bias[type(i)]``: a bias per node type (node rows) or edge type (edge
        rows), ``bias`` of shape ``[T, D]``."""
        x, bias = self._t.check(x, "typed_bias rows"), self._t.check(bias, "typed_bias bias")
        kind = x._rows("typed_bias rows")
        self._t.claim(x, kind, "typed_bias rows")
        self._t.claim(bias, Kind.WEIGHT, "typed_bias bias")
        if bias.shape is not None and (len(bias.shape) != 2 or bias.shape[1] != x.width[-1]):
            raise TraceError(f"typed bias must be [T, {x.width[-1]}], got shape {bias.shape}")
        return self._t.emit("add", {"lhs": x, "rhs": bias}, x.width, kind, graph=True)


_FLOAT_TYPES = (torch.float32, torch.float16, torch.bfloat16)


def result_type(tensors: tuple[torch.Tensor, ...]) -> torch.dtype | None:
    """The half type a compiled function's results take for these arguments, or None for
    float32, as PyTorch promotes: a half type (float16 or bfloat16) when every argument is in
    it, float32 when any is float32 (float16 features with float32 weights give float32),
    else the autocast type where ``torch.autocast`` is on for their device (the templates are
    GEMMs, which autocast runs in its lower precision). Raises ValueError for arguments of
    both half types."""
    halves = {t.dtype for t in tensors if t.dtype != torch.float32}
    if len(halves) > 1:
        raise ValueError(
            f"arguments mix {sorted(str(h) for h in halves)}; give one half type (or float32)"
        )
    device = tensors[0].device.type if tensors else "cpu"
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    if halves and all(t.dtype != torch.float32 for t in tensors):
        return halves.pop()
    return None


def _traced(x: Any, what: str) -> Value:
    if not isinstance(x, Value):
        raise TraceError(f"hector.{what} takes a traced value")
    return x


def _elementwise(name: str, what: str) -> Callable[[Value], Value]:
    """The module-level form of ``Value.<name>``: ``hector.<name>(x)``."""

    def apply(x: Value) -> Value:
        return getattr(_traced(x, name), name)()

    apply.__name__ = apply.__qualname__ = name
    apply.__doc__ = f"Elementwise {what} inside a traced function."
    return apply


relu = _elementwise("relu", "``max(x, 0)``")
gelu = _elementwise("gelu", "exact GELU")
silu = _elementwise("silu", "SiLU (swish)")
sigmoid = _elementwise("sigmoid", "logistic sigmoid")
shift_positive = _elementwise("shift_positive", "``x + 1 if x > 0 else x``")
tanh = _elementwise("tanh", "tanh")
exp = _elementwise("exp", "exp")


def leaky_relu(x: Value, negative_slope: float = 0.01) -> Value:
    """Elementwise leaky ReLU inside a traced function."""
    return _traced(x, "leaky_relu").leaky_relu(negative_slope)


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
    t: _Tracer,
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


def _weight_slices(t: _Tracer) -> dict[int, str]:
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
    t = _Tracer()
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


def _used_args(t: _Tracer, results: list[Value]) -> frozenset[int]:
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


# ---------------------------------------------------------------------------------------------
# Compiled functions
# ---------------------------------------------------------------------------------------------


#: Orders of linear messages ``hector.compile(..., order=)`` accepts.
AGGREGATION_ORDERS = ("auto", "transform-first", "aggregate-first")


def _message_widths(entry: Any) -> list[tuple[int, int]]:
    """``(K, N)`` of each linear message ``hector-aggregation-order`` saw in ``entry``'s
    forward function, in program order (none when the stage did not run)."""
    try:
        text = entry.ir("aggregate")
    except (KeyError, AttributeError):
        return []
    name = re.escape(entry.traced.name)
    found = re.search(rf"@{name}\(.*?hector\.aggregation_widths = \[([^\]]*)\]", text)
    if found is None:
        return []
    values = [int(v.split(":")[0]) for v in found.group(1).split(",")]
    return list(zip(values[::2], values[1::2], strict=True))


def _check_order(order: str) -> str:
    """``order`` if it is one of :data:`AGGREGATION_ORDERS`; ``ValueError`` naming them."""
    if order not in AGGREGATION_ORDERS:
        raise ValueError(f"order must be one of {', '.join(AGGREGATION_ORDERS)}; got {order!r}")
    return order


def _check_budget(budget: float) -> float:
    """``budget`` if it is a valid ``memory_budget`` (a number >= 0, or -1 for none)."""
    if (
        isinstance(budget, bool)
        or not isinstance(budget, int | float)
        or not (budget == -1 or 0 <= budget < float("inf"))
    ):
        raise ValueError(
            "memory_budget must be a fraction of the saved bytes (0..1), a byte count (> 1) "
            f"or -1 (keep everything); got {budget!r}"
        )
    return float(budget)


@dataclass(frozen=True)
class _Signature:
    """What tracing tells of a call's arguments before any compilation: each one's kind and
    the positions of those the results depend on."""

    kinds: tuple[Kind | str, ...]
    used: frozenset[int]


class CompiledFunction:
    """A forward function compiled by Hector; call it like the original on a HeteroGraph."""

    def __init__(
        self,
        fn: Callable[..., Any],
        target: str = "cpu",
        *,
        compact: bool = True,
        reorder: bool = True,
        fuse: bool = True,
        order: str = "auto",
        memory_budget: float = -1.0,
    ) -> None:
        _target(target)  # unknown targets fail here, not at the first call
        self.fn = fn
        self.target = target
        self.optimizations = (compact, reorder, fuse)
        # Saved values kept resident in training (placement-plan-saved; -1: all).
        self.memory_budget = _check_budget(memory_budget)
        # Order of linear messages (hector-aggregation-order): "auto" lets the cost model pick
        # per layer and graph; "transform-first" / "aggregate-first" force one.
        self.order = _check_order(order)
        self._message_widths: dict[tuple, list[tuple[int, int]]] = {}
        self._cache: dict[tuple, Any] = {}
        self._signatures: dict[tuple, _Signature] = {}
        self.compile_seconds = 0.0  # of the last compilation
        self.compilations = 0  # kernels built (cache misses): one per mode once warmed up
        functools.update_wrapper(self, fn)
        params = list(inspect.signature(fn).parameters)
        if not params:
            raise TraceError(f"{fn.__name__} must take the graph as its first parameter")
        self._params = params[1:]

    def check_arguments(self, g: Any, tensors: tuple[Any, ...]) -> None:
        """Check the call's arguments (a graph, then float32, float16 or bfloat16 tensors on
        one CPU or CUDA device, as many as the function takes) before anything reads them."""
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
            if t.dtype not in _FLOAT_TYPES:
                raise ValueError(
                    f"argument '{name}' must be float32, float16 or bfloat16, got {t.dtype}"
                )
            if t.device.type not in ("cpu", "cuda"):
                raise ValueError(f"argument '{name}' is on {t.device}; Hector takes CPU or CUDA")
            if t.device != tensors[0].device:
                raise ValueError(
                    f"argument '{name}' is on {t.device} but '{self._params[0]}' is on "
                    f"{tensors[0].device}; put all tensors on one device"
                )

    def _signature(self, g: HeteroGraph, tensors: tuple[torch.Tensor, ...]) -> _Signature:
        """Each argument's kind and the arguments the results depend on, traced once per
        layout: the graph's schema and each argument's rank, trailing dims, dtype and device
        (what tracing reads; no row count and no weight's first dim)."""
        layout = (
            g.schema(),
            tuple((t.dim(), *t.shape[1:]) for t in tensors),
            tuple((t.dtype, t.device) for t in tensors),
        )
        sig = self._signatures.get(layout)
        if sig is None:
            traced = trace(self.fn, [tuple(t.shape) for t in tensors])
            used = traced.used_args if traced.used_args is not None else range(len(tensors))
            sig = self._signatures[layout] = _Signature(traced.arg_kinds, frozenset(used))
        return sig

    def _key(self, g: HeteroGraph, tensors: tuple[torch.Tensor, ...]) -> tuple:
        """The kernel cache's key of these arguments: the graph's schema and each argument's
        dtype, device and every dim its kernel is built with: all of them but the row count
        of a node- or edge-wise argument, which the kernel reads at run time (and
        :meth:`Executable.check` compares with the graph's)."""
        kinds = self._signature(g, tensors).kinds
        rows = (Kind.NODE, Kind.EDGE)
        return (
            g.schema(),
            tuple(
                (None, *t.shape[1:]) if k in rows else tuple(t.shape)
                for t, k in zip(tensors, kinds, strict=True)
            ),
            tuple((t.dtype, t.device) for t in tensors),
        )

    def compile_for(
        self,
        g: HeteroGraph,
        *tensors: torch.Tensor,
        train: bool = False,
        frozen: Collection[int] = (),
    ) -> Executable:
        """Compile (or fetch from the cache) the kernel for these argument shapes; with
        ``train``, the module also holds the ``_train`` and ``_backward`` functions, which
        give no gradient to the tensors at the ``frozen`` positions."""
        self.check_arguments(g, tensors)
        return self._compiled(g, tensors, train, tuple(sorted(frozen)))

    def _compiled(
        self,
        g: HeteroGraph,
        tensors: tuple[torch.Tensor, ...],
        train: bool,
        frozen: tuple[int, ...] = (),
        result: torch.dtype | None = None,
    ) -> Executable:
        """:meth:`compile_for` on arguments already checked; with ``train``, the tensors at the
        ``frozen`` positions (input features) get no gradient, and their backward kernels are
        not built. Without ``train``, a half ``result`` type is what the kernel writes its
        ``[rows, width]`` results in (rounded from f32 as they are written)."""
        written = None if train else STORAGE_TYPES.get(result) if result is not None else None
        options = self.options_for(g)
        if train and self.memory_budget >= 0:  # CPU target: the CUDA host code has no plan
            # placement-plan-saved weighs the saved values at this graph's sizes.
            sizes = replace(
                options.graph,
                nodes=g.num_nodes,
                edges=g.num_edges,
                compact_rows=g.num_compact,
                dst_compact_rows=g.num_dst_compact,
            )
            options = replace(options, memory_budget=self.memory_budget, graph=sizes)
        # CUDA tensors (or target='cuda') run on target cuda; the CPU path is unchanged.
        cuda = self.target == "cuda" or any(t.device.type == "cuda" for t in tensors)
        if cuda and options.memory_budget >= 0:
            raise NotImplementedError(
                "memory_budget plans CPU training only: the CUDA host code does not offload "
                "saved values yet (compile without memory_budget for CUDA tensors)"
            )
        # The switches and the graph statistics the code depends on (the compaction decision,
        # HGT's folding, the sizes a memory plan holds for; schedules are per worker count).
        base = (self._key(g, tensors), train, frozen, written, cuda, options.cache_key())
        # The aggregation order: key on the choices this graph's D/E makes for the messages
        # the kernel holds (their widths, learnt at the first compilation of these shapes).
        key = base + (self._orders(base, options, train),)
        entry = self._cache.get(key)
        if entry is None:
            start = time.perf_counter()
            storage = {
                i: STORAGE_TYPES[t.dtype] for i, t in enumerate(tensors) if t.dtype in STORAGE_TYPES
            }
            shapes = [tuple(t.shape) for t in tensors]
            traced = trace(self.fn, shapes, no_grad=frozen, storage=storage, written=written)
            back_end = _target("cuda" if cuda else self.target)
            entry = back_end.compile(traced, autodiff=train, options=options)
            self.compile_seconds = time.perf_counter() - start
            self.compilations += 1
            if base not in self._message_widths:
                self._message_widths[base] = _message_widths(entry)
                key = base + (self._orders(base, options, train),)
            self._cache[key] = entry
        return entry

    def _orders(self, base: tuple, options: Options, train: bool) -> tuple[str, ...] | None:
        """The order of each linear message in kernels of ``base`` on a graph with
        ``options.graph.dst_ratio``: a forced order, or the cost model's choice per message (None
        before the first compilation tells the messages' widths)."""
        if options.order != "auto":
            return (options.order,)
        widths = self._message_widths.get(base)
        if widths is None:
            return None
        from ..passes.aggregate_order import choose

        return tuple(
            choose(options.graph.dst_ratio, k, n, training=train, threads=options.threads)
            for k, n in widths
        )

    def options_for(self, g: HeteroGraph) -> Options:
        """The optimization options for graph ``g`` (its statistics feed the cost models)."""
        compact, reorder, fuse = self.optimizations
        # Reordering is judged per row (rows unknown): the decision then holds for every graph
        # of this schema, so one kernel serves them all.
        order = _check_order(self.order)
        # The aggregation-order cost model depends on the graph only through D/E.
        dst_ratio = g.dst_compaction_ratio if order == "auto" else -1.0
        stats = GraphStats(ratio=g.compaction_ratio, src_typed=g.src_typed, dst_ratio=dst_ratio)
        return Options(
            compact, reorder, fuse, order=order, threads=torch.get_num_threads(), graph=stats
        )

    def __call__(self, g: HeteroGraph, *tensors: torch.Tensor) -> Any:
        """Run the compiled function (compiling it first for new shapes); with a tensor that
        requires grad, the result is differentiable through ``loss.backward()``.

        Half-precision arguments (float16 or bfloat16) are computed in float32; the results
        come back in the type PyTorch would promote them to, or autocast's (:func:`result_type`).
        A half argument that takes no gradient is passed as it is (the templates convert it on
        load); one that does is cast, so its gradient reaches it in its own type."""
        self.check_arguments(g, tensors)  # before anything reads tensor attributes
        half = result_type(tensors)
        grad = torch.is_grad_enabled()
        args = tuple(t.float() if grad and t.requires_grad else t for t in tensors)
        outs = self._run(g, args, half)
        if half is None:
            return outs
        if isinstance(outs, torch.Tensor):
            return outs.to(half)
        return tuple(o.to(half) for o in outs)

    def _run(
        self, g: HeteroGraph, tensors: tuple[torch.Tensor, ...], half: torch.dtype | None = None
    ) -> Any:
        """:meth:`__call__` on checked arguments: float32, or half types taking no gradient;
        an inference kernel writes ``[rows, width]`` results in ``half`` where given."""
        # As in PyTorch, a result that depends on no tensor requiring grad takes no gradient.
        used = self._signature(g, tensors).used
        grads = any(t.requires_grad for i, t in enumerate(tensors) if i in used)
        train = torch.is_grad_enabled() and grads
        frozen = tuple(i for i, t in enumerate(tensors) if train and not t.requires_grad)
        entry = self._compiled(g, tensors, train, frozen, half)
        entry.check(g, tensors, self._params)  # against the graph, before the kernel runs
        if not train:
            outs = entry.call(entry.traced.name, g, list(tensors))
        else:
            outs = TrainingStep.apply(entry, g, *tensors)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def ir(self, stage: str, g: HeteroGraph, *tensors: torch.Tensor) -> str:
        """The IR after ``stage`` (``inter``, ``intra``, ``loops``, ``llvm``) for these shapes."""
        return self.compile_for(g, *tensors).ir(stage)

    def ptx(self, g: HeteroGraph, *tensors: torch.Tensor) -> str:
        """PTX for the GPU kernels of this function, one ``.entry`` per template."""
        entry = self.compile_for(g, *tensors)
        gpu = _target("gpu", runs=False)
        # Target.compile is typed for the targets that run (an Executable); the "gpu" target
        # (runs=False) returns the back end's GpuEntry, which holds the PTX.
        code = cast("GpuEntry", gpu.compile(entry.traced, options=self.options_for(g)))
        return code.ptx


def compile(  # noqa: A001
    fn: Callable[..., Any] | None = None,
    *,
    target: str = "cpu",
    compact: bool = True,
    reorder: bool = True,
    fuse: bool = True,
    order: str = "auto",
    memory_budget: float = -1.0,
) -> Any:
    """Decorator: compile a forward function ``fn(g, *tensors)`` with Hector.

    ``compact``, ``reorder`` and ``fuse`` switch compact materialization, linear operator
    reordering and template fusion (with DCE/CSE) on or off; ``order`` picks how linear
    messages are summed (``"auto"``: by the cost model of ``hector-aggregation-order``;
    ``"transform-first"``, ``"aggregate-first"``); results and gradients are the same either
    way, only time and memory change.

    ``memory_budget`` (CPU training) bounds the bytes of saved values the training step keeps
    resident between its forward and backward: a fraction of what it would save (``0.5``) or
    bytes (``> 1``); the rest is recomputed in the backward or offloaded to the store by the
    generated code (``placement-plan-saved``, docs/offload.md). ``-1`` keeps everything."""

    def make(f: Callable[..., Any]) -> CompiledFunction:
        cf = CompiledFunction(
            f, target=target, compact=compact, reorder=reorder, fuse=fuse, order=order
        )
        cf.memory_budget = _check_budget(memory_budget)
        return cf

    if fn is None:
        return make
    return make(fn)
