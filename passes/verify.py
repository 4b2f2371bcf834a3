"""``hector-verify``: the checks IRDL cannot express, run at the start of every pipeline.

IRDL checks each op on its own (operand types, attribute values). This pass checks what
relates operands to each other: shapes agree (``K`` of the rows matches ``K`` of the weight),
weights have the rank their slicing needs, element types are ``f32``, the optional operands a
template's attributes rely on are present, and every tensor is used as what it is — node-wise,
edge-wise or a weight. Kinds are inferred along the data flow: function arguments take the kind
of their first use (or the ``hector.kind`` argument attribute), and a later conflicting use is an
error at that use.

Sizes: only rows (dimension 0 of a tensor of rank 2 or more) may be dynamic; feature widths,
vectors and every dimension of a weight are static, since the templates are built for them.
Every static type must fit 64-bit sizes and strides (``sizes.size_problems``; every Hector
pass checks that of its input too, so ``--no-hector-verify`` cannot skip it). A template's
``schedule`` must be well formed, with bounded fields (``hector_intra.SCHEDULE_MAX``).

Each op is checked by one short handler registered under its name (``_HANDLERS``); the index
ops (gathers and sums) share one handler driven by the ``rowmap`` of their spec, so the kinds
they move between are stated once, in ``dialects/hector_inter.py``.

What MLIR's own parser would abort the process on is refused before parsing, by
:mod:`hector.passes.source_check`.
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir

from ..dialects import SPECS, Kind, hector_inter, hector_intra
from ..dialects.builders import OpAccess, OpHandlers
from .registry import PassFailure, register_pass
from .sizes import size_problems
from .walk import walk_ops

# Aliases of the one vocabulary (``hector.dialects.Kind``), for the modules that import them.
NODE, EDGE, WEIGHT, COMPACT = Kind.NODE, Kind.EDGE, Kind.WEIGHT, Kind.COMPACT

Shape = list[int | None]


# ---- shape checks -------------------------------------------------------------------------


def _shape(value: ir.Value, what: str, op: ir.Operation) -> Shape:
    t = value.type
    if not isinstance(t, ir.ShapedType):
        raise PassFailure(f"{what} must be a tensor or memref, got {t}", op.location)
    if not t.has_rank:
        raise PassFailure(f"{what} must be ranked, got {t}", op.location)
    dyn = ir.ShapedType.get_dynamic_size()
    return [None if d == dyn else d for d in t.shape]


def _f32(value: ir.Value, what: str, op: ir.Operation) -> Shape:
    shape = _shape(value, what, op)
    if not isinstance(value.type.element_type, ir.F32Type):
        raise PassFailure(f"{what} must have f32 elements, got {value.type}", op.location)
    return shape


#: Element types a template reads an input in (extended to f32 on load). Templates write f32,
#: but for a traversal without reduction and an ``xw`` GEMM that stores its product, which may
#: round each element to half storage.
INPUT_TYPES = (ir.F32Type, ir.F16Type, ir.BF16Type)


def _input(value: ir.Value, what: str, op: ir.Operation) -> Shape:
    """The shape of a template input: f32, or f16 / bf16 storage the template converts on
    load."""
    shape = _shape(value, what, op)
    if not isinstance(value.type.element_type, INPUT_TYPES):
        raise PassFailure(
            f"{what} must have f32, f16 or bf16 elements, got {value.type}", op.location
        )
    return shape


def _static(value: ir.Value, what: str, op: ir.Operation) -> None:
    """Every dimension of ``value`` (a weight: no rows) is static."""
    t = value.type
    if isinstance(t, ir.ShapedType) and t.has_rank and not t.has_static_shape:
        raise PassFailure(
            f"{what}: every dimension of {t} must be static (a weight has no rows)", op.location
        )


def _static_widths(v: OpAccess) -> None:
    """Only rows are dynamic: dimension 0 of each float operand and result of rank 2 or more.
    The templates are built for their widths (tiles, vector lanes, loop bounds), so every
    other dimension, and that of a vector, is static. Checked after the op's own rules."""
    values = [(f"operand '{o.name}'", v.operand(o.name)) for o in v.spec.operands]
    values += [(f"result #{i}", r) for i, r in enumerate(v.op.results)]
    for what, value in values:
        for one in value if isinstance(value, list) else [value]:
            t = one.type if one is not None else None
            if not isinstance(t, ir.ShapedType) or not t.has_rank:
                continue
            if isinstance(t.element_type, ir.IntegerType | ir.IndexType):
                continue  # index arrays: as long as the graph
            for i in range(t.rank):
                if t.is_dynamic_dim(i) and (i > 0 or t.rank == 1):
                    raise PassFailure(
                        f"{what}: dimension {i} of {t} must be static (only the rows, "
                        "dimension 0 of rank 2 or more, may be dynamic: the templates are "
                        "built for static widths)",
                        v.op.location,
                    )


def _rank(shape: Shape, rank: int, what: str, op: ir.Operation) -> None:
    if len(shape) != rank:
        raise PassFailure(f"{what} must have rank {rank}, got rank {len(shape)}", op.location)


def _same(a: int | None, b: int | None, what: str, op: ir.Operation) -> None:
    if a is not None and b is not None and a != b:
        raise PassFailure(f"{what}: {a} vs {b}", op.location)


def _same_shape(a: Shape, b: Shape, what: str, op: ir.Operation) -> None:
    if len(a) != len(b):
        raise PassFailure(f"{what}: rank {len(a)} vs {len(b)}", op.location)
    for p, q in zip(a, b, strict=True):
        _same(p, q, what, op)


def _divides(part: int | None, whole: int | None) -> bool:
    """Whether a head count ``part`` divides a width ``whole`` (unknown sizes pass)."""
    return part is None or whole is None or (part > 0 and whole % part == 0)


def _index(value: ir.Value, what: str, op: ir.Operation) -> None:
    t = value.type
    ok = isinstance(t, ir.MemRefType)
    if ok:
        mt = ir.MemRefType(t)
        et = mt.element_type
        ok = mt.rank == 1 and isinstance(et, ir.IntegerType) and ir.IntegerType(et).width == 32
    if not ok:
        raise PassFailure(f"{what} must be memref<?xi32>, got {t}", op.location)


# ---- kind inference -----------------------------------------------------------------------


def _declared_kind(func: ir.Operation, i: int, attrs: ir.DictAttr) -> Kind | None:
    """The ``hector.kind`` of argument ``i``, if declared; a malformed one fails at ``func``."""
    if "hector.kind" not in attrs:
        return None
    attr = attrs["hector.kind"]
    if not isinstance(attr, ir.StringAttr):
        raise PassFailure(
            f"argument #{i}: hector.kind must be a string (node, edge, weight), got {attr}",
            func.location,
        )
    try:
        return Kind(attr.value)
    except ValueError:
        raise PassFailure(
            f"argument #{i}: hector.kind must be one of node, edge, weight; got {attr.value!r}",
            func.location,
        ) from None


class _Kinds:
    """Kind inference over one function body."""

    def __init__(self, func: ir.Operation) -> None:
        self.kind: dict[ir.Value, Kind] = {}
        if "arg_attrs" not in func.attributes:
            return
        arg_attrs = ir.ArrayAttr(func.attributes["arg_attrs"])
        for i, arg in enumerate(func.regions[0].blocks[0].arguments):
            self.set(arg, _declared_kind(func, i, ir.DictAttr(arg_attrs[i])))

    def use(self, value: ir.Value, want: Kind, what: str, op: ir.Operation) -> None:
        have = self.kind.get(value)
        if have is None:
            self.kind[value] = want
        elif have != want:
            raise PassFailure(f"{what} must be {want.text}, but it is {have.text}", op.location)
        if want == WEIGHT:
            _static(value, what, op)

    def rows(self, value: ir.Value, what: str, op: ir.Operation) -> Kind | None:
        """The kind of a row tensor (node- or edge-wise); a weight here is an error."""
        have = self.kind.get(value)
        if have == WEIGHT:
            raise PassFailure(f"{what} must be node-wise or edge-wise, not a weight", op.location)
        return have

    def set(self, value: ir.Value, kind: Kind | None) -> None:
        if kind == WEIGHT and isinstance(value, ir.OpResult):
            _static(value, "result", value.owner)
        if kind is not None:
            self.kind[value] = kind


def _sliced_kind(kinds: _Kinds, x: ir.Value, slice_: str) -> Kind:
    """Rows a sliced weight applies to: nodes (``ntype``), or edges, compact rows or
    destination pairs (``etype``, all carry an edge type)."""
    if slice_ == "ntype":
        return NODE
    have = kinds.kind.get(x)
    return have if have in (COMPACT, Kind.DST_COMPACT) else EDGE


def _row_kind(kinds: _Kinds, x: ir.Value, slice_: str, what: str, op: ir.Operation) -> Kind | None:
    """The kind of the rows ``x`` of a typed linear (or its gradients) with ``slice_``."""
    if slice_ == "none":
        return kinds.rows(x, what, op)
    kind = _sliced_kind(kinds, x, slice_)
    kinds.use(x, kind, f'{what} of a slice = "{slice_}" op', op)
    return kind


def _same_rows(
    kinds: _Kinds, a: ir.Value, b: ir.Value, wa: str, wb: str, op: ir.Operation
) -> Kind | None:
    """Two row operands that must index the same rows: unify their kinds."""
    ka, kb = kinds.rows(a, wa, op), kinds.rows(b, wb, op)
    if ka is not None and kb is not None and ka != kb:
        raise PassFailure(f"{wa} are {ka.text} but {wb} are {kb.text}", op.location)
    kind = ka or kb
    if kind is not None:
        kinds.use(a, kind, wa, op)
        kinds.use(b, kind, wb, op)
    return kind


# ---- per-op handlers ----------------------------------------------------------------------

Handler = Callable[[OpAccess, _Kinds], None]

#: Full op name -> the handler that checks it.
_HANDLERS: OpHandlers[Handler] = OpHandlers("verifier")
_handles = _HANDLERS.register


def _inter(name: str) -> str:
    return f"{hector_inter.DIALECT.name}.{name}"


def _intra(name: str) -> str:
    return f"{hector_intra.DIALECT.name}.{name}"


def _index_op(v: OpAccess, kinds: _Kinds) -> None:
    """Gathers and sums: the rows ``x`` are of the rowmap's ``src`` kind, the result of its
    ``dst`` kind, and both have the same width."""
    op, rowmap = v.op, v.spec.rowmap
    assert rowmap is not None
    what = "summed rows" if rowmap.reduce else "gathered features"
    x = _f32(v.operand("x"), what, op)
    _rank(x, 2, what, op)
    kinds.use(v.operand("x"), rowmap.src, what, op)
    out = _f32(op.result, "result", op)
    _rank(out, 2, "result", op)
    _same(x[1], out[1], "feature width of input and result differ", op)
    kinds.set(op.result, rowmap.dst)


_handles(*(name for name, spec in SPECS.items() if spec.rowmap is not None))(_index_op)


@_handles(_inter("typed_linear"))
def _typed_linear(v: OpAccess, kinds: _Kinds) -> None:
    op, slice_, xv = v.op, v.attr("slice"), v.operand("x")
    x = _f32(xv, "input rows", op)
    w = _f32(v.operand("weight"), "weight", op)
    out = _f32(op.result, "result", op)
    _rank(x, 2, "input rows", op)
    _rank(out, 2, "result", op)
    kinds.use(v.operand("weight"), WEIGHT, "weight", op)
    _rank(w, 2 if slice_ == "none" else 3, f'weight of a typed_linear with slice = "{slice_}"', op)
    if slice_ == "none":
        kinds.set(op.result, kinds.rows(xv, "input rows", op))
    else:
        want = _sliced_kind(kinds, xv, slice_)
        kinds.use(xv, want, f'input rows of a typed_linear with slice = "{slice_}"', op)
        kinds.set(op.result, want)
    k, n = w[-2], w[-1]
    _same(x[1], k, "input width does not match the weight's input dimension", op)
    _same(out[1], n, "result width does not match the weight's output dimension", op)
    _same(x[0], out[0], "result rows do not match input rows", op)


@_handles(_inter("typed_linear_transposed"))
def _typed_linear_transposed(v: OpAccess, kinds: _Kinds) -> None:
    op, slice_ = v.op, v.attr("slice")
    dy = _f32(v.operand("dy"), "rows", op)
    w = _f32(v.operand("weight"), "weight", op)
    out = _f32(op.result, "result", op)
    _rank(dy, 2, "rows", op)
    kinds.use(v.operand("weight"), WEIGHT, "weight", op)
    _rank(w, 2 if slice_ == "none" else 3, "weight", op)
    _rank(out, 2, "rows", op)
    _same(dy[1], w[-1], "gradient width does not match the weight's output dimension", op)
    _same(out[1], w[-2], "result width does not match the weight's input dimension", op)
    kinds.set(op.result, _row_kind(kinds, v.operand("dy"), slice_, "rows", op))


@_handles(_inter("typed_linear_weight_grad"))
def _typed_linear_weight_grad(v: OpAccess, kinds: _Kinds) -> None:
    op, slice_ = v.op, v.attr("slice")
    x = _f32(v.operand("x"), "rows", op)
    dy = _f32(v.operand("dy"), "row gradients", op)
    out = _f32(op.result, "result", op)
    _rank(x, 2, "rows", op)
    _rank(out, 2 if slice_ == "none" else 3, "weight", op)
    _rank(dy, 2, "rows", op)
    _same(x[1], out[-2], "input width does not match the weight gradient", op)
    _same(dy[1], out[-1], "gradient width does not match the weight gradient", op)
    _same(x[0], dy[0], "rows of input and gradient differ", op)
    kind = _row_kind(kinds, v.operand("x"), slice_, "rows", op)
    if kind is not None:
        kinds.use(v.operand("dy"), kind, "row gradients", op)
    kinds.set(op.result, WEIGHT)


@_handles(_inter("degree_norm"))
def _degree_norm(v: OpAccess, kinds: _Kinds) -> None:
    op = v.op
    out = _f32(op.result, "result", op)
    if len(out) != 2 or out[1] != 1:
        raise PassFailure(
            f"result must be an edge-wise column [E, 1], got {op.result.type}", op.location
        )
    kinds.set(op.result, v.spec.result_kind)


@_handles(_inter("scale"))
def _scale(v: OpAccess, kinds: _Kinds) -> None:
    op = v.op
    x = _f32(v.operand("x"), "scaled rows", op)
    sc = _f32(v.operand("s"), "scale", op)
    out = _f32(op.result, "result", op)
    _rank(x, 2, "scaled rows", op)
    _rank(out, 2, "result", op)
    _rank(sc, 2, "scale", op)
    if not _divides(sc[1], x[1]):
        raise PassFailure(
            f"scale width {sc[1]} (heads) must divide the row width {x[1]}", op.location
        )
    _same(x[0], sc[0], "rows of the input and the scale differ", op)
    _same(x[1], out[1], "feature width of input and result differ", op)
    kind = _same_rows(kinds, v.operand("x"), v.operand("s"), "scaled rows", "scale", op)
    kinds.set(op.result, kind)


@_handles(_inter("dot"))
def _dot(v: OpAccess, kinds: _Kinds) -> None:
    op = v.op
    x = _f32(v.operand("x"), "left rows", op)
    y = _f32(v.operand("y"), "right rows", op)
    out = _f32(op.result, "result", op)
    for shape, what in ((x, "left rows"), (y, "right rows"), (out, "result")):
        _rank(shape, 2, what, op)
    _same(x[1], y[1], "operand widths differ", op)
    _same(x[0], y[0], "operand rows differ", op)
    if not _divides(out[1], x[1]):
        raise PassFailure(
            f"result width {out[1]} (heads) must divide the operand width {x[1]}", op.location
        )
    kind = _same_rows(kinds, v.operand("x"), v.operand("y"), "left rows", "right rows", op)
    kinds.set(op.result, kind)


@_handles(_inter("unary_grad"))
def _unary_grad(v: OpAccess, kinds: _Kinds) -> None:
    op = v.op
    r = _f32(v.operand("ref"), "ref", op)
    dy = _f32(v.operand("dy"), "dy", op)
    out = _f32(op.result, "result", op)
    _same_shape(r, dy, "ref and dy shapes differ", op)
    _same_shape(dy, out, "result shape differs from dy", op)
    kinds.set(op.result, _same_rows(kinds, v.operand("ref"), v.operand("dy"), "ref", "dy", op))


@_handles(
    _inter("edge_softmax"),
    _inter("edge_softmax_grad"),
    _inter("edge_max"),
    _inter("edge_max_grad"),
)
def _edge_groups(v: OpAccess, kinds: _Kinds) -> None:
    """Every operand but the graph, and the result, are edge rows of one shape."""
    op = v.op
    scores = list(op.operands)[1:]
    shapes = [_f32(s, f"operand #{i + 1}", op) for i, s in enumerate(scores)]
    out = _f32(op.result, "result", op)
    for shape in [*shapes, out]:
        _rank(shape, 2, "edge rows", op)
    for shape in shapes:
        _same_shape(shape, out, "operand and result shapes differ", op)
    for s in scores:
        kinds.use(s, EDGE, "edge rows", op)
    kinds.set(op.result, EDGE)


@_handles(_inter("weight_product"))
def _weight_product(v: OpAccess, kinds: _Kinds) -> None:
    op, variant = v.op, v.attr("variant")
    a = _f32(v.operand("a"), "a", op)
    b = _f32(v.operand("b"), "b", op)
    out = _f32(op.result, "result", op)
    for operand in op.operands:
        kinds.use(operand, WEIGHT, "operand of a weight_product", op)
    if len(a) not in (2, 3):
        raise PassFailure("a must be a weight of rank 2 or 3", op.location)
    per_slice = len(b) == 3 if variant != "xty" else len(out) == 3
    if variant == "xty":
        _same_shape(a[:-1], b[:-1], "a and b must share their leading dimensions", op)
        want = [a[0], a[-1], b[-1]] if per_slice else [a[-1], b[-1]]
        _same_shape(out, want, "result must be [N, H] (or [R, N, H] per slice)", op)
    else:
        if per_slice:
            _same(a[0], b[0], "per-slice product: a and b must have the same slice count", op)
        if len(b) not in (2, 3):
            raise PassFailure("b must be a weight of rank 2 or 3", op.location)
        rows, cols = (b[-2], b[-1]) if variant == "xw" else (b[-1], b[-2])
        _same(a[-1], rows, "a's output dimension does not match b's rows", op)
        _same_shape(out, [*a[:-1], cols], "result shape must be a's rows x b's columns", op)
    kinds.set(op.result, WEIGHT)


@_handles(_inter("etype_src_weight"), _inter("etype_src_weight_grad"))
def _etype_src_weight(v: OpAccess, kinds: _Kinds) -> None:
    """A typed weight in, a typed weight out, with the same per-type shape."""
    op = v.op
    wv = list(op.operands)[1]  # ``w`` or ``dw``
    w = _f32(wv, "weight", op)
    out = _f32(op.result, "result", op)
    kinds.use(wv, WEIGHT, f"operand of {v.spec.name}", op)
    if len(w) < 2:
        raise PassFailure("the weight must be typed: rank 2 or more ([T, ...])", op.location)
    _same_shape(out[1:], w[1:], "result must keep the weight's per-type shape", op)
    kinds.set(op.result, WEIGHT)


@_handles(_inter("sum_rows"))
def _sum_rows(v: OpAccess, kinds: _Kinds) -> None:
    op, by = v.op, v.attr("by")
    x = _f32(v.operand("x"), "rows", op)
    out = _f32(op.result, "result", op)
    _rank(x, 2, "rows", op)
    if by == "type" and not v.has("graph"):
        raise PassFailure('sum_rows with by = "type" needs the graph operand', op.location)
    _rank(out, 2 if by == "type" else 1, "result", op)
    _same(x[1], out[-1], "result width differs from the rows", op)
    kinds.rows(v.operand("x"), "rows", op)
    kinds.set(op.result, WEIGHT)


@_handles(_inter("add"))
def _add(v: OpAccess, kinds: _Kinds) -> None:
    op = v.op
    a = _f32(v.operand("lhs"), "left operand", op)
    b = _f32(v.operand("rhs"), "right operand", op)
    out = _f32(op.result, "result", op)
    _rank(a, 2, "left operand", op)
    ka = kinds.rows(v.operand("lhs"), "left operand", op)
    if len(b) == 1:
        kinds.use(v.operand("rhs"), WEIGHT, "bias", op)
        _same(a[1], b[0], "bias width does not match the rows", op)
    elif v.has("graph"):
        _typed_bias(v, a, b, ka, kinds)
    else:
        ka = _add_rows(v, a, b, ka, kinds)
    _rank(out, 2, "result", op)
    _same(a[1], out[1], "result width differs from operands", op)
    kinds.set(op.result, ka)


def _typed_bias(v: OpAccess, a: Shape, b: Shape, ka: Kind | None, kinds: _Kinds) -> None:
    """``add(rows, bias[T, D], graph)``: the bias row is picked by each row's type."""
    op = v.op
    _rank(b, 2, "typed bias", op)
    kinds.use(v.operand("rhs"), WEIGHT, "typed bias", op)
    _same(a[1], b[1], "typed bias width does not match the rows", op)
    if ka is None:
        raise PassFailure(
            "a typed bias needs rows of a known kind (node-wise or edge-wise)", op.location
        )


def _add_rows(v: OpAccess, a: Shape, b: Shape, ka: Kind | None, kinds: _Kinds) -> Kind | None:
    """``add(rows, rows)``: both index the same rows; return their kind."""
    op = v.op
    _rank(b, 2, "right operand", op)
    _same(a[1], b[1], "operand widths differ", op)
    _same(a[0], b[0], "operand rows differ", op)
    kb = kinds.rows(v.operand("rhs"), "right operand", op)
    if ka is not None and kb is not None and ka != kb:
        raise PassFailure(f"cannot add {ka.text} rows to {kb.text} rows", op.location)
    ka = ka or kb
    if ka is not None:
        kinds.use(v.operand("lhs"), ka, "left operand", op)
        kinds.use(v.operand("rhs"), ka, "right operand", op)
    return ka


@_handles(_inter("unary"))
def _unary(v: OpAccess, kinds: _Kinds) -> None:
    op = v.op
    x = _f32(v.operand("x"), "operand", op)
    out = _f32(op.result, "result", op)
    if len(x) != len(out):
        raise PassFailure(
            f"result rank {len(out)} differs from the operand's rank {len(x)}", op.location
        )
    for i, (p, q) in enumerate(zip(x, out, strict=True)):
        _same(p, q, f"result dimension {i} differs from the operand", op)
    kinds.set(op.result, kinds.rows(v.operand("x"), "operand", op))


# ---- hector_intra templates ---------------------------------------------------------------


@_handles(_intra("gemm_template"))
def _gemm_template(v: OpAccess, kinds: _Kinds) -> None:
    op, variant = v.op, v.attr("variant")
    for role in ("gather_index", "weight_index", "scatter_index"):
        if v.has(role):
            _index(v.operand(role), role, op)
    if v.has("row_scale"):
        rs = _f32(v.operand("row_scale"), "row_scale", op)
        if len(rs) != 2 or rs[1] != 1:
            raise PassFailure("row_scale must be a column [M, 1]", op.location)
    sliced = _gemm_slicing(v)
    sa = _input(v.operand("a"), "a", op)
    sw = _input(v.operand("weight"), "weight", op)
    # A product stored once per element may round it to half storage (hector-half-messages);
    # an accumulating epilogue re-reads out, in f32.
    stores = variant == "xw" and v.attr("epilogue") == "store"
    so = (_input if stores else _f32)(v.operand("out"), "out", op)
    _rank(sa, 2, "a", op)
    role = "out" if variant == "xty" else "weight"  # the weight (an xty's: its gradient)
    _static(v.operand(role), role, op)
    if variant == "xty":
        _gemm_xty(v, sa, sw, so, sliced)
    else:
        _rank(so, 2, "out", op)
        _rank(sw, 3 if sliced else 2, "weight" + sliced, op)
        k, n = (sw[-2], sw[-1]) if variant == "xw" else (sw[-1], sw[-2])
        _same(sa[1], k, "a's width does not match the weight's input dimension", op)
        _same(so[1], n, "out's width does not match the weight's output dimension", op)
    if v.attr("tile_n") <= 0 or v.attr("block_size") <= 0:
        raise PassFailure("tile_n and block_size must be positive", op.location)
    _block_size(v)
    _schedule(v)
    if v.attr("epilogue") == "store" and v.has("scatter_index") and variant != "xty":
        raise PassFailure(
            'a scattered GEMM must accumulate (epilogue "add" or "atomic_add"): '
            "several rows may land on one output row",
            op.location,
        )


#: The most threads a GPU block may have (CUDA's limit on every current chip).
MAX_BLOCK_SIZE = 1024


def _schedule(v: OpAccess) -> None:
    """A template's ``schedule`` (optional) has known fields of the right kinds and values."""
    try:
        hector_intra.schedule_of(v.op)
    except ValueError as err:
        raise PassFailure(f"invalid schedule: {err}", v.op.location) from None


def _block_size(v: OpAccess) -> None:
    """A template's ``block_size`` is a launchable number of threads per block."""
    block_size = v.attr("block_size")
    if not 1 <= block_size <= MAX_BLOCK_SIZE:
        raise PassFailure(
            f"block_size must be between 1 and {MAX_BLOCK_SIZE} (threads per block), "
            f"got {block_size}",
            v.op.location,
        )


def _gemm_slicing(v: OpAccess) -> str:
    """How a GEMM picks its weight slice per row, as a suffix for diagnostics ("" if shared).

    ``slice_rows`` (a discardable attribute: the slice of row ``i`` is ``i / slice_rows``)
    excludes a ``weight_index``."""
    op = v.op
    if "slice_rows" in op.attributes:
        attr = op.attributes["slice_rows"]
        if not isinstance(attr, ir.IntegerAttr):
            raise PassFailure(f"slice_rows must be an integer, got {attr}", op.location)
        per = attr.value
        if v.has("weight_index") or per <= 0:
            raise PassFailure(
                "slice_rows must be positive and excludes a weight_index", op.location
            )
        return " with slice_rows"
    return " with a weight_index" if v.has("weight_index") else ""


def _gemm_xty(v: OpAccess, sa: Shape, sw: Shape, so: Shape, sliced: str) -> None:
    """``out += a^T @ weight`` (a weight gradient): accumulating; a ``scatter_index`` picks
    the gradient row each row reads."""
    op = v.op
    _rank(sw, 2, "row gradients (weight operand of an xty GEMM)", op)
    _rank(so, 3 if sliced else 2, "out" + sliced, op)
    _same(sa[1], so[-2], "a's width does not match out's input dimension", op)
    _same(sw[1], so[-1], "gradient width does not match out's output dimension", op)
    if v.attr("epilogue") != "add":
        raise PassFailure('an xty GEMM accumulates (epilogue "add")', op.location)


@_handles(_intra("traversal_template"))
def _traversal_template(v: OpAccess, kinds: _Kinds) -> None:
    op, fn, reduce = v.op, v.attr("fn"), v.attr("reduce")
    if reduce == "max" and not v.has("scatter_index"):
        raise PassFailure('reduce = "max" needs a scatter_index operand', op.location)
    needs_y = fn in hector_intra.BINARY_FNS or fn.endswith("_grad")
    if needs_y and not v.has("y"):
        raise PassFailure(f'fn = "{fn}" needs a second input y', op.location)
    if not needs_y and v.has("y"):
        raise PassFailure(f'fn = "{fn}" takes no second input', op.location)
    if v.has("y_index") and not v.has("y"):
        raise PassFailure("y_index given without y", op.location)
    _block_size(v)
    _schedule(v)
    for role in ("gather_index", "scatter_index", "y_index"):
        if v.has(role):
            _index(v.operand(role), role, op)
    x = _input(v.operand("x"), "x", op)
    y = _input(v.operand("y"), "y", op) if v.has("y") else None
    # An elementwise write may round to half storage; a reduction re-reads out, in f32, but
    # for a segmented sum, which writes each output row once.
    segmented = hector_intra.SEGMENTED_SUM in op.attributes
    if segmented and (reduce != "sum" or not v.has("scatter_index")):
        raise PassFailure(
            'hector.segmented_sum needs reduce = "sum" and a scatter_index', op.location
        )
    if hector_intra.VECTOR_DOT in op.attributes and (fn != "dot" or reduce != "none"):
        raise PassFailure('hector.vector_dot needs fn = "dot" and reduce = "none"', op.location)
    out = (_input if reduce == "none" or segmented else _f32)(v.operand("out"), "out", op)
    _rank(x, 2, "x", op)
    if reduce in ("sum", "atomic_sum") and not v.has("scatter_index"):
        _rank(out, 1, "out of a sum over all rows", op)
    else:
        _rank(out, 2, "out", op)
    if fn == "dot":
        if not _divides(out[-1], x[1]):
            raise PassFailure("out width (heads) of a dot must divide x's width", op.location)
    else:
        _same(x[1], out[-1], "x and out widths differ", op)
    if y is not None:
        _traversal_y(op, fn, x, y)


def _traversal_y(op: ir.Operation, fn: str, x: Shape, y: Shape) -> None:
    """The second input's shape, as ``fn`` reads it."""
    if fn == "add_bias":
        if len(y) != 1 or y[0] != x[1]:
            raise PassFailure("y of an add_bias must be a vector of x's width", op.location)
    elif fn == "scale":
        _rank(y, 2, "y", op)
        if not _divides(y[1], x[1]):
            raise PassFailure("y width (heads) of a scale must divide x's width", op.location)
    else:
        _rank(y, 2, "y", op)
        _same(x[1], y[1], f"y of a {fn} must have x's width", op)


# ---- driver -------------------------------------------------------------------------------

_VIEWS = {
    hector_inter.DIALECT.name: hector_inter.view,
    hector_intra.DIALECT.name: hector_intra.view,
}


def verify_function(func: ir.Operation) -> dict[ir.Value, Kind]:
    """Check every Hector op of one function and return the inferred kind of each value
    (``NODE``, ``EDGE``, ``COMPACT`` or ``WEIGHT``); raise :class:`PassFailure` at the first
    error."""
    sizes = list(size_problems(func))
    if sizes:
        raise PassFailure(*sizes[0], more=sizes[1:])
    kinds = _Kinds(func)
    for op in walk_ops(func):
        _check_marks(op)
        handler = _HANDLERS.get(op.name)
        if handler is not None:
            view = _VIEWS[op.name.partition(".")[0]](op)
            handler(view, kinds)
            _static_widths(view)
    return kinds.kind


def _check_marks(op: ir.Operation) -> None:
    """The fusion mark ``hector.fuse`` (a discardable attribute hector-fuse sets and the
    lowering reads back) is a string when the input carries one."""
    mark = op.attributes["hector.fuse"] if "hector.fuse" in op.attributes else None
    if mark is not None and not isinstance(mark, ir.StringAttr):
        raise PassFailure(f"hector.fuse must be a string, got {mark}", op.location)


def verify_module(module_op: ir.Operation) -> None:
    """Check every Hector op in ``module_op``; raise :class:`PassFailure` at the first error."""
    for func in _functions(module_op):
        verify_function(func)


def _functions(module_op: ir.Operation) -> list[ir.Operation]:
    """The function definitions (not declarations) at the top of ``module_op``."""
    return [
        op.operation
        for op in module_op.regions[0].blocks[0].operations
        if op.operation.name == "func.func" and len(op.operation.regions[0].blocks)
    ]


@register_pass(
    "hector-verify",
    "Check shapes, element types and node/edge/weight kinds that IRDL cannot express",
)
def run(module_op: ir.Operation) -> None:
    """Pass entry point: verify the module (no rewriting)."""
    verify_module(module_op)
