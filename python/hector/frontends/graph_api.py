"""The graph API a traced forward function is written against, and the tracer behind it.

A forward function ``fn(g, *tensors)`` receives a :class:`GraphProxy` as ``g`` and a symbolic
:class:`Value` for each tensor: no arithmetic happens in Python. Each call of a relational
operator (``g.gather_src``, ``g.typed_linear``, ``g.sum_to_dst``, ...), of ``+``/``*`` on values,
or of an elementwise function (``x.relu()``, ``hector.relu(x)``, one per traced unary function
of ``hector_inter``) checks its operands' kinds and widths, raising :class:`TraceError` naming
the problem, and the :class:`Tracer` records it as a :class:`TracedOp` at the ``file:line:col``
of the user's line that made it (the innermost frame outside this module, so
``hector.models``' layers point into models.py as a user's layers point into theirs).
:func:`hector.frontends.trace.trace` turns the record into a ``hector_inter`` module.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from ..dialects import Kind

__all__ = [
    "GraphProxy",
    "SourceLoc",
    "TraceError",
    "TracedOp",
    "Tracer",
    "Value",
    "exp",
    "gelu",
    "leaky_relu",
    "relu",
    "shift_positive",
    "sigmoid",
    "silu",
    "tanh",
]


class TraceError(TypeError):
    """The forward function used the graph API in a way Hector cannot compile."""


@dataclass(eq=False)
class Value:
    """A symbolic tensor during tracing: rows are nodes, edges, or (for weights) nothing."""

    tracer: Tracer
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


def _is_graph_api(filename: str) -> bool:
    """Whether a frame's file is this module: the graph API's own frames are skipped."""
    return os.path.normcase(os.path.abspath(filename)) == _THIS_FILE


_THIS_FILE = os.path.normcase(os.path.abspath(__file__))


def _user_location() -> SourceLoc:
    """The ``(file, line, column)`` of the innermost frame outside this module: the line of
    the user's forward function that called the graph API (as torch-mlir's importer records
    each node's Python source line)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and _is_graph_api(frame.f_code.co_filename):
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


@dataclass
class TracedOp:
    """One recorded graph-API call: ``hector_inter.<name>`` on ``operands`` (the graph too
    where ``graph`` is set), with its attributes, result and source location."""

    name: str
    operands: dict[str, Value]  # by the op spec's operand names ("graph" added at build time)
    result: Value
    loc: SourceLoc
    attrs: dict[str, str | float] = field(default_factory=dict)
    graph: bool = False


class Tracer:
    """The record of one trace: every symbolic value made, every op in call order."""

    def __init__(self) -> None:
        """An empty record."""
        self.values: list[Value] = []
        self.ops: list[TracedOp] = []

    def new(self, width: tuple[int, ...], kind: Kind | None, **kw: Any) -> Value:
        """A new symbolic value (an argument where ``kw`` gives its ``arg`` and ``shape``)."""
        v = Value(self, len(self.values), width, kind, **kw)
        self.values.append(v)
        return v

    def check(self, v: Any, what: str) -> Value:
        """``v`` if it is a value of this trace; :class:`TraceError` naming ``what`` otherwise."""
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
        self.ops.append(TracedOp(name, operands, out, _user_location(), attrs, graph))
        return out

    # -- ops ----------------------------------------------------------------------------------
    def add(self, a: Any, b: Any) -> Value:
        """``a + b``: rows of one kind and width, or rows plus a bias vector."""
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
        """``a * b``: rows scaled by per-row (per-head) scalars."""
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
        """The elementwise function ``fn`` of the dialect on rows (``slope``: leaky ReLU's)."""
        x = self.check(x, fn)
        kind = x._rows(fn)
        self.claim(x, kind, fn)
        return self.emit("unary", {"x": x}, x.width, kind, fn=fn, slope=float(slope))


class GraphProxy:
    """The graph as seen by a traced forward function: relational operators."""

    def __init__(self, tracer: Tracer) -> None:
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
