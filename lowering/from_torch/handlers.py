"""The per-op handlers of ``raise-torch-to-hector``: one per torch op name, in the table
:data:`RAISE_HANDLERS` (filled by ``@_handles``), each recognising the patterns rooted at its
op in a :class:`.function.RaisingFunction` and returning the hector_inter node
they raise to, or None."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...dialects import Kind
from ...dialects import hector_inter as inter
from ...dialects.builders import OpHandlers
from .function import RaisingFunction
from .nodes import (
    GATHER_BY_ARRAY,
    LEAF,
    SUM_BY_ARRAY,
    TYPE_ARRAY_ROWS,
    HNode,
    Shape,
    defining_op,
    op_name,
    value_shape,
)

Handler = Callable[[RaisingFunction, Any, Shape], "HNode | None"]
#: torch op name → the handler that raises the patterns rooted at that op.
RAISE_HANDLERS: OpHandlers[Handler] = OpHandlers("raise handler")
_handles = RAISE_HANDLERS.register


# torch op → hector_inter unary function, from the functions' declarations in the spec.
_UNARY_FN = {f.torch: f.name for f in inter.UNARY_FUNCTIONS if f.torch is not None}


def raise_op(f: RaisingFunction, op: Any) -> HNode | None:
    """The node raised from ``op`` of ``f`` by its name's handler, or None."""
    handler = RAISE_HANDLERS.get(op.name)
    if handler is None or len(op.results) != 1:
        return None
    s = value_shape(op.results[0])
    return None if s is None else handler(f, op, s[0])


@_handles(
    "torch.aten.index_select", "torch.aten.index.Tensor", "torch.aten.index.Tensor_hacked_twin"
)
def raise_gather(f: RaisingFunction, op: Any, shape: Shape) -> HNode | None:
    """``x[I]`` / ``index_select(x, 0, I)`` with ``I`` the src (dst) index → ``gather_*``."""
    g = f.graph.gathered(op.results[0])
    if g is None or g[1] not in GATHER_BY_ARRAY:
        return None
    x = f.rows(g[0], Kind.NODE)
    if x is None or len(shape) != 2:
        return None
    return f.node(GATHER_BY_ARRAY[g[1]], Kind.EDGE, shape, x=x)


@_handles(
    "torch.aten.index_put",
    "torch.aten.index_put.hacked_twin",
    "torch.aten.scatter_add",
    "torch.aten.scatter_reduce.two",
)
def raise_sum(f: RaisingFunction, op: Any, shape: Shape) -> HNode | None:
    """Edge rows summed onto zeros by the dst (src) index → ``sum_to_*``."""
    s = f.graph.summed(op.results[0])
    if s is None or s[1] not in SUM_BY_ARRAY:
        return None
    m = f.rows(s[0], Kind.EDGE)
    if m is None or len(shape) != 2 or shape[0] != f.graph.N:
        return None
    return f.node(SUM_BY_ARRAY[s[1]], Kind.NODE, shape, x=m)


@_handles("torch.aten.squeeze.dim")
def raise_typed_linear(f: RaisingFunction, op: Any, shape: Shape) -> HNode | None:
    """``bmm(X.unsqueeze(1), W[I]).squeeze(1)`` with ``I`` the edge (node) types →
    ``typed_linear {slice = "etype"}`` (``"ntype"``)."""
    if f.values.const(op.operands[1]) not in (1, -2):
        return None
    bmm = defining_op(f.values.skip_views(op.operands[0]))
    if op_name(bmm) not in ("torch.aten.bmm", "torch.aten.matmul"):
        return None
    un = defining_op(f.values.skip_views(bmm.operands[0]))
    if op_name(un) != "torch.aten.unsqueeze" or f.values.const(un.operands[1]) not in (1, -2):
        return None
    wg = f.graph.gathered(bmm.operands[1])
    if wg is None or wg[1] not in TYPE_ARRAY_ROWS:
        return None
    kind = TYPE_ARRAY_ROWS[wg[1]]
    x, w = f.rows(un.operands[0], kind), f.weight(wg[0], 3)
    if x is None or w is None:
        return None
    return f.node("typed_linear", kind, shape, x=x, weight=w, slice=wg[1])


@_handles("torch.aten.mm", "torch.aten.matmul")
def raise_mm(f: RaisingFunction, op: Any, shape: Shape) -> HNode | None:
    """``X @ W`` with a rank-2 weight → ``typed_linear {slice = "none"}``."""
    x, w = f.rows(op.operands[0]), f.weight(op.operands[1], 2)
    if x is None or w is None:
        return None
    return f.node("typed_linear", x.kind, shape, x=x, weight=w, slice="none")


@_handles("torch.aten.linear")
def raise_linear(f: RaisingFunction, op: Any, shape: Shape) -> HNode | None:
    """``linear(X, W, b)`` → ``typed_linear`` on ``W.t()`` plus a bias ``add``."""
    x, w = f.rows(op.operands[0]), f.weight(op.operands[1], 2)
    if x is None or w is None:
        return None
    w.glue_t, w.shape = True, (w.shape[1], w.shape[0])
    out = f.node("typed_linear", x.kind, shape, x=x, weight=w, slice="none")
    if f.values.const(op.operands[2]) is None:
        return out
    b = f.weight(op.operands[2], 1)
    return f.node("add", x.kind, shape, lhs=out, rhs=b) if b is not None else None


@_handles("torch.aten.div.Tensor")
def raise_div(f: RaisingFunction, op: Any, shape: Shape) -> HNode | None:
    """A segment softmax, or a mean over incoming edges."""
    return (
        match_softmax(f, op, shape)
        or match_div_count(f, op, shape)
        or match_mean_of_sum(f, op, shape)
    )


def match_mean_of_sum(f: RaisingFunction, op: Any, shape: Shape) -> HNode | None:
    """``sum_to_dst(M) / count.clamp(min=1).view(-1, 1).expand_as(...)`` with ``count`` the
    in-degree (PyG's mean aggregation: ``scatter(..., reduce="mean")``) →
    ``sum_to_dst(scale(M, degree_norm {by = "dst"}))``. The clamp is required: without it
    an isolated node divides 0 by 0 (NaN), which ``degree_norm`` would turn into 0."""
    if len(shape) != 2 or shape[0] != f.graph.N:
        return None
    total = f.H.get(op.operands[0])
    if total is None or total.op != SUM_BY_ARRAY["dst"]:
        return None
    den = op.operands[1]
    for names in (
        ("torch.aten.broadcast_to", "torch.aten.expand", "torch.aten.expand_as"),
        ("torch.aten.view", "torch.aten.reshape", "torch.aten.unsqueeze"),
    ):
        d = defining_op(den)
        if op_name(d) in names:
            den = d.operands[0]
    clamp, sd = defining_op(den), value_shape(den)
    nodes = f.graph.N
    if op_name(clamp) != "torch.aten.clamp" or sd is None or sd[0] not in ((nodes,), (nodes, 1)):
        return None
    if f.graph.counted(den) != "dst":
        return None
    m = total.operands["x"]
    norm = f.node("degree_norm", Kind.EDGE, (f.graph.E, 1), by="dst")
    scaled = f.node("scale", Kind.EDGE, m.shape, x=m, s=norm)
    return f.node(SUM_BY_ARRAY["dst"], Kind.NODE, shape, x=scaled)


def match_softmax(f: RaisingFunction, op: Any, shape: Shape) -> HNode | None:
    """``exp(s - max_by_dst(s)[dst]) / sum_by_dst(exp(...))[dst]`` → ``edge_softmax``."""
    ex, den = op.operands
    exp = defining_op(ex)
    if op_name(exp) != "torch.aten.exp":
        return None
    t = exp.operands[0]
    sub = defining_op(t)
    s = t
    if op_name(sub) == "torch.aten.sub.Tensor" and f.values.const(sub.operands[2]) == 1:
        gm = f.graph.gathered(sub.operands[1])
        mx = defining_op(gm[0]) if gm else None
        if (
            gm is not None
            and gm[1] == "dst"
            and mx is not None
            and op_name(mx) == "torch.aten.scatter_reduce.two"
            and f.values.const(mx.operands[4]) in ("amax", "max")
            and f.graph.broadcast_role(mx.operands[2]) == "dst"
            and mx.operands[3] == sub.operands[0]
        ):
            s = sub.operands[0]
    gd = f.graph.gathered(den)
    if gd is None or gd[1] != "dst":
        return None
    base = gd[0]
    add = defining_op(base)
    if op_name(add) == "torch.aten.add.Scalar":
        eps = f.values.const(add.operands[1])
        if not isinstance(eps, float | int) or abs(eps) > 1e-6:
            return None
        base = add.operands[0]
    summed = f.graph.summed(base)
    if summed is None or summed[1] != "dst" or summed[0] != ex:
        return None
    x = f.rows(s, Kind.EDGE)
    if x is None or len(shape) != 2:
        return None
    return f.node("edge_softmax", Kind.EDGE, shape, x=x, by="dst")


def match_div_count(f: RaisingFunction, op: Any, shape: Shape) -> HNode | None:
    """``X / count[I].unsqueeze(-1)`` (a mean over the dst's or (dst, etype)'s incoming
    edges) → ``scale(X, degree_norm)``."""
    if len(shape) != 2 or shape[0] != f.graph.E:
        return None
    d = value_shape(op.operands[1])
    if d is None or d[0] != (f.graph.E, 1):
        return None
    by = f.graph.norm_by(op.operands[1], reciprocal=False)
    x = f.rows(op.operands[0], Kind.EDGE) if by else None
    if x is None:
        return None
    norm = f.node("degree_norm", Kind.EDGE, (f.graph.E, 1), by=by)
    return f.node("scale", Kind.EDGE, shape, x=x, s=norm)


@_handles("torch.aten.mul.Tensor")
def raise_scale(f: RaisingFunction, op: Any, shape: Shape) -> HNode | None:
    """``X * s`` with per-row ``s [M, 1]`` → ``scale``."""
    a, b = op.operands
    sa, sb = value_shape(a), value_shape(b)
    if not sa or not sb or len(sa[0]) != 2 or len(sb[0]) != 2:
        return None
    if sa[0][1] == 1 and sb[0][1] != 1:
        a, b, sa, sb = b, a, sb, sa
    if sb[0][1] != 1 or sa[0][0] != sb[0][0]:
        return None
    x, s = f.rows(a), f.rows(b)
    if x is None or s is None or x.kind != s.kind or (x.op == LEAF and s.op == LEAF):
        return None
    return f.node("scale", x.kind, shape, x=x, s=s)


@_handles("torch.aten.mul.Scalar")
def raise_mul_one(f: RaisingFunction, op: Any, shape: Shape) -> HNode | None:
    """``1.0 * x`` (how ``1.0 / t`` is exported) is ``x``."""
    if f.values.const(op.operands[1]) not in (1, 1.0):
        return None
    return f.H.get(op.operands[0])


@_handles("torch.aten.view")
def raise_head_scale(f: RaisingFunction, op: Any, shape: Shape) -> HNode | None:
    """``(X.view(M, H, Dh) * A.unsqueeze(-1)).view(M, D)`` → ``scale`` per head; and the
    per-head weighted sum as PyG's ``RGATConv`` writes it, ``zeros(N, H, Dh).scatter_add(0,
    I.view(-1, 1, 1).expand_as(P), P).view(N, D)`` with ``P`` that product (``A`` also as
    ``A.view(M, H, 1)``) → ``sum_to_dst(scale(X, A))`` (``sum_to_src`` by the src index)."""
    if len(shape) != 2:
        return None
    inner = defining_op(op.operands[0])
    if op_name(inner) == "torch.aten.mul.Tensor":
        return head_scale(f, inner, shape)
    summed = f.graph.summed(op.operands[0])
    if summed is None or summed[1] not in SUM_BY_ARRAY or shape[0] != f.graph.N:
        return None
    mul, s3 = defining_op(summed[0]), value_shape(summed[0])
    if op_name(mul) != "torch.aten.mul.Tensor" or s3 is None or len(s3[0]) != 3:
        return None
    m = head_scale(f, mul, (s3[0][0], shape[1]))
    if m is None or m.kind != Kind.EDGE:
        return None
    return f.node(SUM_BY_ARRAY[summed[1]], Kind.NODE, shape, x=m)


def head_scale(f: RaisingFunction, mul: Any, shape: Shape) -> HNode | None:
    """``X.view(M, H, Dh) * A.unsqueeze(-1)`` (or ``* A.view(M, H, 1)``), in either order,
    as a ``scale`` of ``X [M, H * Dh]`` by ``A [M, H]``; ``shape`` is ``[M, H * Dh]``."""
    for xv, av in (mul.operands, reversed(list(mul.operands))):
        xview, un = defining_op(xv), defining_op(av)
        sx, sa = value_shape(xv), value_shape(av)
        if op_name(xview) != "torch.aten.view" or sx is None or sa is None:
            continue
        s3 = sx[0]
        if len(s3) != 3:
            continue
        if op_name(un) == "torch.aten.unsqueeze":
            if f.values.const(un.operands[1]) not in (-1, 2):
                continue
        elif op_name(un) != "torch.aten.view" or tuple(sa[0]) != (s3[0], s3[1], 1):
            continue
        x, a = f.rows(xview.operands[0]), f.rows(un.operands[0])
        if x is None or a is None or x.kind != a.kind or (x.op == a.op == LEAF):
            continue
        if a.shape[1] != s3[1] or x.shape[1] != s3[1] * s3[2] or tuple(shape) != x.shape:
            continue
        return f.node("scale", x.kind, shape, x=x, s=a)
    return None


@_handles("torch.aten.sum.dim_IntList")
def raise_dot(f: RaisingFunction, op: Any, shape: Shape) -> HNode | None:
    """``(X * Y).sum(-1, keepdim=True)`` and ``(X * Y).view(M, H, Dh).sum(-1)`` → ``dot``."""
    dims, keep = f.values.const(op.operands[1]), f.values.const(op.operands[2])
    sv = value_shape(op.operands[0])
    if sv is None:
        return None
    src = sv[0]
    if not isinstance(dims, list) or len(dims) != 1 or dims[0] not in (-1, len(src) - 1):
        return None
    if f.values.const(op.operands[3]) is not None:
        return None
    pair = dot_pair(f, defining_op(op.operands[0]), len(src), keep)
    if pair is None:
        return None
    x, y = f.rows(pair[0]), f.rows(pair[1])
    if x is None or y is None or x.kind != y.kind or x.shape != y.shape:
        return None
    if x.op == LEAF and y.op == LEAF:
        return None
    return f.node("dot", x.kind, shape, x=x, y=y)


def dot_pair(f: RaisingFunction, inner: Any, rank: int, keep: Any) -> list[Any] | None:
    """The two row operands multiplied under a ``sum(-1)`` of ``rank``, or None."""
    if rank == 2 and keep is True and op_name(inner) == "torch.aten.mul.Tensor":
        return list(inner.operands)
    if rank != 3 or keep is not False:
        return None
    if op_name(inner) == "torch.aten.view" and op_name(defining_op(inner.operands[0])) == (
        "torch.aten.mul.Tensor"
    ):
        return list(defining_op(inner.operands[0]).operands)
    if op_name(inner) == "torch.aten.mul.Tensor":
        vs = [defining_op(v) for v in inner.operands]
        if any(op_name(v) != "torch.aten.view" for v in vs):
            return None
        return [v.operands[0] for v in vs]
    return None


@_handles("torch.aten.unsqueeze", "torch.aten.reciprocal")
def raise_degree_norm(f: RaisingFunction, op: Any, shape: Shape) -> HNode | None:
    """``(1 / count[I]).unsqueeze(-1)`` (``I`` = dst or a (dst, etype) key, ``count`` its
    occurrence count from an index_add/scatter_add of ones) → ``degree_norm``."""
    if len(shape) != 2 or shape[1] != 1 or shape[0] != f.graph.E:
        return None
    by = f.graph.norm_by(op.results[0], reciprocal=True)
    if by is None:
        return None
    return f.node("degree_norm", Kind.EDGE, shape, by=by)


@_handles("torch.aten.add.Tensor", "torch.aten.sub.Tensor")
def raise_add(f: RaisingFunction, op: Any, shape: Shape) -> HNode | None:
    """Sum or difference of rows, a bias ``[D]`` or a typed bias ``B[etype]``/``B[ntype]``
    → ``add`` (of a ``neg`` for ``sub``)."""
    sub = op.name == "torch.aten.sub.Tensor"
    if f.values.const(op.operands[2]) not in (1, 1.0):
        return None
    a, b = op.operands[0], op.operands[1]
    if not sub and a not in f.H and b in f.H:
        a, b = b, a
    x = f.rows(a)
    if x is None or len(shape) != 2:
        return None
    gb = f.graph.gathered(b)
    if gb is not None and gb[1] in TYPE_ARRAY_ROWS and not sub:
        tb = f.weight(gb[0], 2)
        if x.kind != TYPE_ARRAY_ROWS[gb[1]] or tb is None or x.op == LEAF:
            return None
        return f.node("add", x.kind, shape, graph=True, lhs=x, rhs=tb)
    sb = value_shape(b)
    if sb and len(sb[0]) == 1 and b not in f.H:
        bias = f.weight(b, 1)
        if bias is None or x.op == LEAF or sub:
            return None  # a negated weight is not a hector value
        return f.node("add", x.kind, shape, lhs=x, rhs=bias)
    y = f.rows(b, x.kind)
    if y is None or y.shape != x.shape or (x.op == LEAF and y.op == LEAF):
        return None
    if sub:
        y = f.node("unary", y.kind, y.shape, x=y, fn="neg", slope=0.0)
    return f.node("add", x.kind, shape, lhs=x, rhs=y)


@_handles(*_UNARY_FN)
def raise_unary(f: RaisingFunction, op: Any, shape: Shape) -> HNode | None:
    """An elementwise function of a raised row value → ``unary``."""
    x = f.H.get(op.operands[0])
    if x is None or x.kind == Kind.WEIGHT:
        return None
    slope = 0.0
    if op.name == "torch.aten.leaky_relu":
        slope = f.values.const(op.operands[1])
    if op.name == "torch.aten.gelu" and f.values.const(op.operands[1]) != "none":
        return None  # only the exact (erf) GELU is hector's
    return f.node("unary", x.kind, shape, x=x, fn=_UNARY_FN[op.name], slope=float(slope))
