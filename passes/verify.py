"""``hector-verify``: the checks IRDL cannot express, run at the start of every pipeline.

IRDL checks each op on its own (operand types, attribute values). This pass checks what
relates operands to each other: shapes agree (``K`` of the rows matches ``K`` of the weight),
weights have the rank their slicing needs, element types are ``f32``, the optional operands a
template's attributes rely on are present, and every tensor is used as what it is — node-wise,
edge-wise or a weight. Kinds are inferred along the data flow: function arguments take the kind
of their first use (or the ``hector.kind`` argument attribute), and a later conflicting use is an
error at that use.
"""

from __future__ import annotations

from mlir import ir

from ._registry import PassFailure, register_pass

NODE, EDGE, WEIGHT = "node-wise", "edge-wise", "weight"
COMPACT = "compact"  # one row per unique (source node, edge type) pair

# Ops that move rows between index spaces: name → (input kind, result kind).
INDEX_OPS = {
    "gather_src": (NODE, EDGE),
    "gather_dst": (NODE, EDGE),
    "sum_to_dst": (EDGE, NODE),
    "sum_to_src": (EDGE, NODE),
    "compact_gather_src": (NODE, COMPACT),
    "expand_compact": (COMPACT, EDGE),
    "sum_to_compact": (EDGE, COMPACT),
    "sum_compact_to_src": (COMPACT, NODE),
}


def _shape(value: ir.Value, what: str, op: ir.Operation) -> list[int | None]:
    t = value.type
    if not isinstance(t, ir.ShapedType):
        raise PassFailure(f"{what} must be a tensor or memref, got {t}", op.location)
    if not t.has_rank:
        raise PassFailure(f"{what} must be ranked, got {t}", op.location)
    dyn = ir.ShapedType.get_dynamic_size()
    return [None if d == dyn else d for d in t.shape]


def _f32(value: ir.Value, what: str, op: ir.Operation) -> list[int | None]:
    shape = _shape(value, what, op)
    if not isinstance(value.type.element_type, ir.F32Type):
        raise PassFailure(f"{what} must have f32 elements, got {value.type}", op.location)
    return shape


def _rank(shape: list[int | None], rank: int, what: str, op: ir.Operation) -> None:
    if len(shape) != rank:
        raise PassFailure(f"{what} must have rank {rank}, got rank {len(shape)}", op.location)


def _same(a: int | None, b: int | None, what: str, op: ir.Operation) -> None:
    if a is not None and b is not None and a != b:
        raise PassFailure(f"{what}: {a} vs {b}", op.location)


def _index(value: ir.Value, what: str, op: ir.Operation) -> None:
    t = value.type
    ok = isinstance(t, ir.MemRefType)
    if ok:
        mt = ir.MemRefType(t)
        et = mt.element_type
        ok = mt.rank == 1 and isinstance(et, ir.IntegerType) and ir.IntegerType(et).width == 32
    if not ok:
        raise PassFailure(f"{what} must be memref<?xi32>, got {t}", op.location)


class _Kinds:
    """Kind inference over one function body."""

    def __init__(self, func: ir.Operation) -> None:
        self.kind: dict[ir.Value, str] = {}
        block = func.regions[0].blocks[0]
        arg_attrs = None
        if "arg_attrs" in func.attributes:
            arg_attrs = ir.ArrayAttr(func.attributes["arg_attrs"])
        for i, arg in enumerate(block.arguments):
            if arg_attrs is None:
                continue
            d = ir.DictAttr(arg_attrs[i])
            if "hector.kind" in d:
                text = ir.StringAttr(d["hector.kind"]).value
                mapping = {"node": NODE, "edge": EDGE, "weight": WEIGHT, "compact": COMPACT}
                if text not in mapping:
                    raise PassFailure(
                        f"argument #{i}: hector.kind must be one of node, edge, weight; "
                        f"got {text!r}",
                        func.location,
                    )
                self.kind[arg] = mapping[text]

    def use(self, value: ir.Value, want: str, what: str, op: ir.Operation) -> None:
        have = self.kind.get(value)
        if have is None:
            self.kind[value] = want
        elif have != want:
            raise PassFailure(f"{what} must be {want}, but it is {have}", op.location)

    def rows(self, value: ir.Value, what: str, op: ir.Operation) -> str | None:
        """The kind of a row tensor (node- or edge-wise); a weight here is an error."""
        have = self.kind.get(value)
        if have == WEIGHT:
            raise PassFailure(f"{what} must be node-wise or edge-wise, not a weight", op.location)
        return have

    def set(self, value: ir.Value, kind: str | None) -> None:
        if kind is not None:
            self.kind[value] = kind


def _sliced_kind(kinds: _Kinds, x: ir.Value, slice_: str, op: ir.Operation) -> str:
    """Rows a sliced weight applies to: nodes (``ntype``), or edges or compact rows (``etype``,
    both carry an edge type)."""
    if slice_ == "ntype":
        return NODE
    have = kinds.kind.get(x)
    return COMPACT if have == COMPACT else EDGE


def _same_rows(
    kinds: _Kinds, a: ir.Value, b: ir.Value, wa: str, wb: str, op: ir.Operation
) -> str | None:
    """Two row operands that must index the same rows: unify their kinds."""
    ka, kb = kinds.rows(a, wa, op), kinds.rows(b, wb, op)
    if ka is not None and kb is not None and ka != kb:
        raise PassFailure(f"{wa} are {ka} but {wb} are {kb}", op.location)
    kind = ka or kb
    if kind is not None:
        kinds.use(a, kind, wa, op)
        kinds.use(b, kind, wb, op)
    return kind


def _same_shape(a: list[int | None], b: list[int | None], what: str, op: ir.Operation) -> None:
    if len(a) != len(b):
        raise PassFailure(f"{what}: rank {len(a)} vs {len(b)}", op.location)
    for p, q in zip(a, b, strict=True):
        _same(p, q, what, op)


def _segments(op: ir.Operation) -> list[int]:
    return list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))


def _str(op: ir.Operation, name: str) -> str:
    return ir.StringAttr(op.attributes[name]).value


def _verify_inter(op: ir.Operation, kinds: _Kinds) -> None:
    name = op.name.removeprefix("hector_inter.")
    ops = list(op.operands)
    res = op.results[0] if len(op.results) else None
    if name in INDEX_OPS:
        want, result_kind = INDEX_OPS[name]
        what = "summed rows" if name.startswith("sum") else "gathered features"
        x = _f32(ops[1], what, op)
        _rank(x, 2, what, op)
        kinds.use(ops[1], want, what, op)
        out = _f32(res, "result", op)
        _rank(out, 2, "result", op)
        _same(x[1], out[1], "feature width of input and result differ", op)
        kinds.set(res, result_kind)
    elif name == "typed_linear":
        slice_ = _str(op, "slice")
        x = _f32(ops[1], "input rows", op)
        w = _f32(ops[2], "weight", op)
        out = _f32(res, "result", op)
        _rank(x, 2, "input rows", op)
        _rank(out, 2, "result", op)
        kinds.use(ops[2], WEIGHT, "weight", op)
        if slice_ == "none":
            _rank(w, 2, 'weight of a typed_linear with slice = "none"', op)
            k, n = w
            kinds.set(res, kinds.rows(ops[1], "input rows", op))
        else:
            _rank(w, 3, f'weight of a typed_linear with slice = "{slice_}"', op)
            _, k, n = w
            want = _sliced_kind(kinds, ops[1], slice_, op)
            kinds.use(ops[1], want, f'input rows of a typed_linear with slice = "{slice_}"', op)
            kinds.set(res, want)
        _same(x[1], k, "input width does not match the weight's input dimension", op)
        _same(out[1], n, "result width does not match the weight's output dimension", op)
        _same(x[0], out[0], "result rows do not match input rows", op)
    elif name == "degree_norm":
        out = _f32(res, "result", op)
        if out != [None, 1] and not (len(out) == 2 and out[1] == 1):
            raise PassFailure(
                f"result must be an edge-wise column [E, 1], got {res.type}", op.location
            )
        kinds.set(res, EDGE)
    elif name == "scale":
        x = _f32(ops[0], "scaled rows", op)
        sc = _f32(ops[1], "scale", op)
        out = _f32(res, "result", op)
        _rank(x, 2, "scaled rows", op)
        _rank(out, 2, "result", op)
        _rank(sc, 2, "scale", op)
        if sc[1] is not None and x[1] is not None and (sc[1] <= 0 or x[1] % sc[1]):
            raise PassFailure(
                f"scale width {sc[1]} (heads) must divide the row width {x[1]}", op.location
            )
        _same(x[0], sc[0], "rows of the input and the scale differ", op)
        _same(x[1], out[1], "feature width of input and result differ", op)
        kinds.set(res, _same_rows(kinds, ops[0], ops[1], "scaled rows", "scale", op))
    elif name == "dot":
        x = _f32(ops[0], "left rows", op)
        y = _f32(ops[1], "right rows", op)
        out = _f32(res, "result", op)
        for v, what in ((x, "left rows"), (y, "right rows"), (out, "result")):
            _rank(v, 2, what, op)
        _same(x[1], y[1], "operand widths differ", op)
        _same(x[0], y[0], "operand rows differ", op)
        if out[1] is not None and x[1] is not None and (out[1] <= 0 or x[1] % out[1]):
            raise PassFailure(
                f"result width {out[1]} (heads) must divide the operand width {x[1]}",
                op.location,
            )
        kinds.set(res, _same_rows(kinds, ops[0], ops[1], "left rows", "right rows", op))
    elif name in ("unary_grad",):
        r = _f32(ops[0], "ref", op)
        dy = _f32(ops[1], "dy", op)
        out = _f32(res, "result", op)
        _same_shape(r, dy, "ref and dy shapes differ", op)
        _same_shape(dy, out, "result shape differs from dy", op)
        kinds.set(res, _same_rows(kinds, ops[0], ops[1], "ref", "dy", op))
    elif name in ("edge_softmax", "edge_softmax_grad"):
        vals = ops[1:]
        shapes = [_f32(v, f"operand #{i + 1}", op) for i, v in enumerate(vals)]
        out = _f32(res, "result", op)
        for sh in [*shapes, out]:
            _rank(sh, 2, "edge scores", op)
        for sh in shapes:
            _same_shape(sh, out, "operand and result shapes differ", op)
        for v in vals:
            kinds.use(v, EDGE, "edge scores", op)
        kinds.set(res, EDGE)
    elif name in ("typed_linear_transposed", "typed_linear_weight_grad"):
        slice_ = _str(op, "slice")
        grad = name == "typed_linear_weight_grad"
        a = _f32(ops[1], "rows", op)
        b = _f32(ops[2], "weight" if not grad else "row gradients", op)
        out = _f32(res, "result", op)
        _rank(a, 2, "rows", op)
        w, rows = (out, [a, b]) if grad else (b, [a, out])
        if not grad:
            kinds.use(ops[2], WEIGHT, "weight", op)
        _rank(w, 2 if slice_ == "none" else 3, "weight", op)
        for r in rows:
            _rank(r, 2, "rows", op)
        k, n = w[-2], w[-1]
        if grad:
            _same(a[1], k, "input width does not match the weight gradient", op)
            _same(b[1], n, "gradient width does not match the weight gradient", op)
            _same(a[0], b[0], "rows of input and gradient differ", op)
        else:
            _same(a[1], n, "gradient width does not match the weight's output dimension", op)
            _same(out[1], k, "result width does not match the weight's input dimension", op)
        if slice_ == "none":
            kind = kinds.rows(ops[1], "rows", op)
        else:
            kind = _sliced_kind(kinds, ops[1], slice_, op)
            kinds.use(ops[1], kind, f'rows of a slice = "{slice_}" op', op)
        if grad:
            kinds.use(ops[2], kind, "row gradients", op) if kind else None
            kinds.set(res, WEIGHT)
        else:
            kinds.set(res, kind)
    elif name == "weight_product":
        a = _f32(ops[0], "a", op)
        b = _f32(ops[1], "b", op)
        out = _f32(res, "result", op)
        variant = _str(op, "variant")
        for v in ops:
            kinds.use(v, WEIGHT, "operand of a weight_product", op)
        if len(a) not in (2, 3):
            raise PassFailure("a must be a weight of rank 2 or 3", op.location)
        per_slice = len(b) == 3 if variant != "xty" else len(out) == 3
        if per_slice and variant != "xty":
            _same(a[0], b[0], "per-slice product: a and b must have the same slice count", op)
        if variant in ("xw", "xwt"):
            if len(b) not in (2, 3):
                raise PassFailure("b must be a weight of rank 2 or 3", op.location)
            rows, cols = (b[-2], b[-1]) if variant == "xw" else (b[-1], b[-2])
            _same(a[-1], rows, "a's output dimension does not match b's rows", op)
            _same_shape(out, [*a[:-1], cols], "result shape must be a's rows x b's columns", op)
        else:
            _same_shape(a[:-1], b[:-1], "a and b must share their leading dimensions", op)
            want = [a[0], a[-1], b[-1]] if per_slice else [a[-1], b[-1]]
            _same_shape(out, want, "result must be [N, H] (or [R, N, H] per slice)", op)
        kinds.set(res, WEIGHT)
    elif name in ("etype_src_weight", "etype_src_weight_grad"):
        w = _f32(ops[1], "weight", op)
        out = _f32(res, "result", op)
        kinds.use(ops[1], WEIGHT, f"operand of {name}", op)
        if len(w) < 2:
            raise PassFailure("the weight must be typed: rank 2 or more ([T, ...])", op.location)
        _same_shape(out[1:], w[1:], "result must keep the weight's per-type shape", op)
        kinds.set(res, WEIGHT)
    elif name == "sum_rows":
        x = _f32(ops[0], "rows", op)
        out = _f32(res, "result", op)
        _rank(x, 2, "rows", op)
        by = _str(op, "by")
        has_graph = len(ops) > 1
        if by == "type" and not has_graph:
            raise PassFailure('sum_rows with by = "type" needs the graph operand', op.location)
        _rank(out, 2 if by == "type" else 1, "result", op)
        _same(x[1], out[-1], "result width differs from the rows", op)
        kinds.rows(ops[0], "rows", op)
        kinds.set(res, WEIGHT)
    elif name == "add":
        a = _f32(ops[0], "left operand", op)
        b = _f32(ops[1], "right operand", op)
        out = _f32(res, "result", op)
        _rank(a, 2, "left operand", op)
        ka = kinds.rows(ops[0], "left operand", op)
        if len(b) == 1:
            kinds.use(ops[1], WEIGHT, "bias", op)
            _same(a[1], b[0], "bias width does not match the rows", op)
        elif len(ops) > 2:  # typed bias [T, D] picked by each row's type
            _rank(b, 2, "typed bias", op)
            kinds.use(ops[1], WEIGHT, "typed bias", op)
            _same(a[1], b[1], "typed bias width does not match the rows", op)
            if ka is None:
                raise PassFailure(
                    "a typed bias needs rows of a known kind (node-wise or edge-wise)",
                    op.location,
                )
        else:
            _rank(b, 2, "right operand", op)
            _same(a[1], b[1], "operand widths differ", op)
            _same(a[0], b[0], "operand rows differ", op)
            kb = kinds.rows(ops[1], "right operand", op)
            if ka is not None and kb is not None and ka != kb:
                raise PassFailure(f"cannot add {ka} rows to {kb} rows", op.location)
            ka = ka or kb
            if ka is not None:
                kinds.use(ops[0], ka, "left operand", op)
                kinds.use(ops[1], ka, "right operand", op)
        _rank(out, 2, "result", op)
        _same(a[1], out[1], "result width differs from operands", op)
        kinds.set(res, ka)
    elif name == "unary":
        x = _f32(ops[0], "operand", op)
        out = _f32(res, "result", op)
        if len(x) != len(out):
            raise PassFailure(
                f"result rank {len(out)} differs from the operand's rank {len(x)}", op.location
            )
        if x != out:
            for i, (p, q) in enumerate(zip(x, out, strict=True)):
                _same(p, q, f"result dimension {i} differs from the operand", op)
        kinds.set(res, kinds.rows(ops[0], "operand", op))


def _verify_intra(op: ir.Operation) -> None:
    name = op.name.removeprefix("hector_intra.")
    seg = _segments(op)
    ops = list(op.operands)
    if name == "gemm_template":
        a, w, gather, widx, scatter, rscale, out = seg
        variant = _str(op, "variant")
        it = iter(ops)
        a_v, w_v = next(it), next(it)
        if gather:
            _index(next(it), "gather_index", op)
        if widx:
            _index(next(it), "weight_index", op)
        if scatter:
            _index(next(it), "scatter_index", op)
        if rscale:
            rs = _f32(next(it), "row_scale", op)
            if len(rs) != 2 or rs[1] != 1:
                raise PassFailure("row_scale must be a column [M, 1]", op.location)
            if variant != "xw":
                raise PassFailure('row_scale needs variant = "xw"', op.location)
        out_v = next(it)
        if "slice_rows" in op.attributes:
            per = ir.IntegerAttr(op.attributes["slice_rows"]).value
            if widx or per <= 0:
                raise PassFailure(
                    "slice_rows must be positive and excludes a weight_index", op.location
                )
            widx = 1  # the slice of row i is i / slice_rows
        sliced = " with slice_rows" if "slice_rows" in op.attributes else " with a weight_index"
        sa = _f32(a_v, "a", op)
        sw = _f32(w_v, "weight", op)
        so = _f32(out_v, "out", op)
        _rank(sa, 2, "a", op)
        if variant == "xty":
            _rank(sw, 2, "row gradients (weight operand of an xty GEMM)", op)
            _rank(so, 3 if widx else 2, "out" + (sliced if widx else ""), op)
            _same(sa[1], so[-2], "a's width does not match out's input dimension", op)
            _same(sw[1], so[-1], "gradient width does not match out's output dimension", op)
            if _str(op, "epilogue") != "add" or scatter:
                raise PassFailure(
                    'an xty GEMM accumulates (epilogue "add") and takes no scatter_index',
                    op.location,
                )
        else:
            _rank(so, 2, "out", op)
            _rank(sw, 3 if widx else 2, "weight" + (sliced if widx else ""), op)
            k, n = (sw[-2], sw[-1]) if variant == "xw" else (sw[-1], sw[-2])
            _same(sa[1], k, "a's width does not match the weight's input dimension", op)
            _same(so[1], n, "out's width does not match the weight's output dimension", op)
        tile = ir.IntegerAttr(op.attributes["tile_n"]).value
        if tile <= 0 or ir.IntegerAttr(op.attributes["block_size"]).value <= 0:
            raise PassFailure("tile_n and block_size must be positive", op.location)
        if _str(op, "epilogue") == "store" and scatter:
            raise PassFailure(
                'a scattered GEMM must accumulate (epilogue "add" or "atomic_add"): '
                "several rows may land on one output row",
                op.location,
            )
    elif name == "traversal_template":
        has_gather, has_index, has_yidx, _, has_y, _ = seg
        fn, reduce = _str(op, "fn"), _str(op, "reduce")
        if reduce == "max" and not has_index:
            raise PassFailure('reduce = "max" needs a scatter_index operand', op.location)
        needs_y = fn in _BINARY or fn.endswith("_grad")
        if needs_y and not has_y:
            raise PassFailure(f'fn = "{fn}" needs a second input y', op.location)
        if not needs_y and has_y:
            raise PassFailure(f'fn = "{fn}" takes no second input', op.location)
        if has_yidx and not has_y:
            raise PassFailure("y_index given without y", op.location)
        it = iter(ops)
        for present, role in (
            (has_gather, "gather_index"),
            (has_index, "scatter_index"),
            (has_yidx, "y_index"),
        ):
            if present:
                _index(next(it), role, op)
        x = _f32(next(it), "x", op)
        y = _f32(next(it), "y", op) if has_y else None
        out = _f32(next(it), "out", op)
        _rank(x, 2, "x", op)
        if reduce in ("sum", "atomic_sum") and not has_index:
            _rank(out, 1, "out of a sum over all rows", op)
        else:
            _rank(out, 2, "out", op)
        if fn == "dot":
            if out[-1] is not None and x[1] is not None and (out[-1] <= 0 or x[1] % out[-1]):
                raise PassFailure("out width (heads) of a dot must divide x's width", op.location)
        else:
            _same(x[1], out[-1], "x and out widths differ", op)
        if y is None:
            return
        if fn == "add_bias":
            if len(y) != 1 or y[0] != x[1]:
                raise PassFailure("y of an add_bias must be a vector of x's width", op.location)
        elif fn == "scale":
            _rank(y, 2, "y", op)
            if y[1] is not None and x[1] is not None and (y[1] <= 0 or x[1] % y[1]):
                raise PassFailure("y width (heads) of a scale must divide x's width", op.location)
        else:
            _rank(y, 2, "y", op)
            _same(x[1], y[1], f"y of a {fn} must have x's width", op)


_BINARY = ("scale", "add", "add_bias", "mul", "sub", "div", "exp_sub", "dot")


def verify_function(func: ir.Operation) -> dict[ir.Value, str]:
    """Check every Hector op of one function and return the inferred kind of each value
    (``NODE``, ``EDGE`` or ``WEIGHT``); raise :class:`PassFailure` at the first error."""
    kinds = _Kinds(func)
    for op in _walk(func):
        if op.name.startswith("hector_inter."):
            _verify_inter(op, kinds)
        elif op.name.startswith("hector_intra."):
            _verify_intra(op)
    return kinds.kind


def verify_module(module_op: ir.Operation) -> None:
    """Check every Hector op in ``module_op``; raise :class:`PassFailure` at the first error."""
    for func in _functions(module_op):
        verify_function(func)


def _functions(module_op: ir.Operation) -> list[ir.Operation]:
    out = []
    for op in module_op.regions[0].blocks[0].operations:
        if op.operation.name == "func.func" and len(op.operation.regions[0].blocks):
            out.append(op.operation)
    return out


def _walk(op: ir.Operation):
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield inner.operation
                yield from _walk(inner.operation)


@register_pass(
    "hector-verify",
    "Check shapes, element types and node/edge/weight kinds that IRDL cannot express",
)
def run(module_op: ir.Operation) -> None:
    """Pass entry point: verify the module (no rewriting)."""
    verify_module(module_op)
