"""The per-op handlers of ``convert-hector-inter-to-intra``: each relational op to templates.

One handler per op name, in a registry (:data:`HANDLERS`, ``@_lowers("<op>")``); gathers and
sums are registered from their spec's ``RowMap`` (the graph array they read rows through, and
for sums the array whose length is the result's row count). A handler builds through the
:class:`~hector.lowering.inter_to_intra.function.FunctionLowering` of its function:

* ``typed_linear(gather_src|gather_dst(x), W)`` → one ``gemm_template`` whose left rows are
  gathered by ``src``/``dst`` (the gathered copy is never built when the gather has no other use),
  weight picked by ``etype`` / ``ntype`` / shared;
* ``sum_to_dst(scale(m, s))`` → one edge-parallel ``traversal_template`` (``fn = scale``,
  ``reduce = sum`` by ``dst``) when the scale has no other use; ``sum_to_dst(m)`` → ``fn = copy``;
* ``gather_*`` alone, ``scale``, ``add`` (or bias add), ``unary`` → row-parallel traversals;
* edge softmaxes and maxima → reducing traversals into per-group buffers, read back per edge.
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir

from ...dialects import RowMap
from ...dialects import hector_inter as inter
from ...dialects.builders import OpHandlers
from ...passes.fuse import SCATTER_LINEARS
from ...passes.registry import PassFailure
from .function import FunctionLowering, memref_of, producer, rank, width

#: A handler: builds the templates of one op.
Handler = Callable[[FunctionLowering, ir.Operation], None]
HANDLERS: OpHandlers[Handler] = OpHandlers("lowering", prefix="hector_inter.")
_lowers = HANDLERS.register

#: Ops whose handler writes their ``[rows, width]`` result with one traversal that does not
#: reduce (each element written once, from the f32 it computed), as do gathers that stand
#: alone: such a traversal can write a half-precision output itself, rounding each element as
#: it stores it, instead of an f32 buffer a copy then rounds.
ELEMENTWISE_WRITERS = frozenset(
    f"hector_inter.{name}" for name in ("add", "scale", "dot", "unary", "unary_grad")
)
#: Ops whose handler writes their result with one GEMM whose ``store`` epilogue writes each row
#: once (:func:`_linear`), rounding it from the f32 it summed: such a GEMM can write a
#: half-precision output itself as well.
STORING_GEMMS = frozenset(
    f"hector_inter.{name}" for name in ("typed_linear", "typed_linear_transposed")
)


def lower(lw: FunctionLowering, op: ir.Operation) -> None:
    """Lower one op with its handler, at the end of the new function."""
    handler = HANDLERS.get(op.name)
    if handler is not None:
        handler(lw, op)
    elif op.name.startswith("hector_inter."):
        raise PassFailure(f"no lowering for '{op.name}' yet", op.location)
    else:
        raise PassFailure(
            f"'{op.name}' cannot be lowered to hector_intra; only hector_inter ops may appear "
            "in a function with relational ops",
            op.location,
        )


def _linear(lw: FunctionLowering, op: ir.Operation, rows_name: str, variant: str) -> None:
    """``rows @ W[slice]`` (``xw``) or ``rows @ W[slice]^T`` (``xwt``) as one GEMM reading
    gathered rows in place."""
    v = inter.view(op)
    rows = v.operand(rows_name)
    a, gather, row_scale = lw.read_rows(rows, op)
    windex = lw.weight_index(op, rows)
    w = lw.buffers.src(v.operand("weight"))
    out = lw.buffers.out(op.results[0], gather if gather is not None else a)
    lw.emit.gemm(
        a, w, out, "store", variant, gather_index=gather, weight_index=windex, row_scale=row_scale
    )


@_lowers("typed_linear")
def _typed_linear(lw: FunctionLowering, op: ir.Operation) -> None:
    """The forward product ``x @ W[slice]``."""
    _linear(lw, op, "x", "xw")


@_lowers("typed_linear_transposed")
def _typed_linear_transposed(lw: FunctionLowering, op: ir.Operation) -> None:
    """The input gradient ``dy @ W[slice]^T``."""
    _linear(lw, op, "dy", "xwt")


@_lowers("typed_linear_weight_grad")
def _typed_linear_weight_grad(lw: FunctionLowering, op: ir.Operation) -> None:
    """``Σ rows^T ⊗ dy`` into each weight slice: one accumulating ``xty`` GEMM, reading
    gathered (and scaled) gradient rows in place."""
    v = inter.view(op)
    rows = v.operand("x")
    a, gather = lw.read(rows, op)
    windex = lw.weight_index(op, rows)
    g, g_rows, row_scale = lw.read_rows(v.operand("dy"), op)
    out = lw.buffers.out(op.results[0], a)
    lw.buffers.zero(out)
    lw.emit.gemm(
        a,
        g,
        out,
        "add",
        "xty",
        gather_index=gather,
        weight_index=windex,
        scatter_index=g_rows,
        row_scale=row_scale,
    )


def _gather(lw: FunctionLowering, op: ir.Operation, array: str) -> None:
    """A gather on its own: a row copy through the graph array ``array``."""
    index = lw.graph_array(array, op)
    x = lw.buffers.src(inter.view(op).operand("x"))
    lw.emit.trav("copy", lw.buffers.out(op.results[0], index), x, gather=index)


def _sum(lw: FunctionLowering, op: ir.Operation, array: str, rows: str) -> None:
    """A sum through the graph array ``array`` onto zeroed rows (as many as the graph array
    ``rows`` is long), with the scale (and the typed linear before it) it was fused with."""
    scatter = lw.graph_array(array, op)
    m = inter.view(op).operand("x")
    out = lw.buffers.out(op.results[0], lw.graph_array(rows, op))
    lw.buffers.zero(out)
    scale = lw.fused_producer(m, "hector_inter.scale")
    if scale is None:
        linear = _fused_linear(lw, m)
        if linear is not None:
            _scatter_gemm(lw, linear, None, scatter, out)
            return
        x, gather = lw.read(m, op)
        lw.emit.trav("copy", out, x, gather=gather, scatter=scatter, reduce="sum")
        return
    sv = inter.view(scale)
    linear = _fused_linear(lw, sv.operand("x"))
    if linear is not None:
        _scatter_gemm(lw, linear, scale, scatter, out)
        return
    x, gather = lw.read(sv.operand("x"), op)
    y, y_index = lw.read(sv.operand("s"), op)
    lw.emit.trav(
        "scale", out, x, y=y, gather=gather, y_index=y_index, scatter=scatter, reduce="sum"
    )


def _index_handler(name: str, rowmap: RowMap) -> Handler:
    """The handler of the index op ``name``, from its spec's row map."""
    array, rows = rowmap.array, rowmap.rows
    if not rowmap.reduce:
        return lambda lw, op: _gather(lw, op, array)
    if rows is None:
        raise ValueError(f"the row map of sum {name} must name the array giving its row count")
    return lambda lw, op: _sum(lw, op, array, rows)


# Gathers and sums are lowered from their spec's row map: one registration per index op.
for _op in inter.DIALECT.ops:
    if _op.rowmap is not None:
        _lowers(_op.name)(_index_handler(_op.name, _op.rowmap))


def _fused_linear(lw: FunctionLowering, value: ir.Value) -> ir.Operation | None:
    """``value``'s producer when it is a linear fused into a scatter-GEMM."""
    made_by = producer(value)
    if made_by is not None and made_by in lw.fused and made_by.name in SCATTER_LINEARS:
        return made_by
    return None


def _scatter_gemm(
    lw: FunctionLowering,
    linear: ir.Operation,
    scale: ir.Operation | None,
    scatter: ir.Value,
    out: ir.Value,
) -> None:
    """``sum((scale(linear(rows, W), s))`` as one GEMM: gathered rows times the typed weight
    (transposed for ``typed_linear_transposed``), scaled per row and accumulated into the
    scattered output rows."""
    rows_name, variant = SCATTER_LINEARS[linear.name]
    lv = inter.view(linear)
    rows = lv.operand(rows_name)
    a, gather, row_scale = lw.read_rows(rows, linear)
    if scale is not None:
        row_scale = lw.buffers.src(inter.view(scale).operand("s"))
    w = lw.buffers.src(lv.operand("weight"))
    windex = lw.weight_index(linear, rows)
    lw.emit.gemm(
        a,
        w,
        out,
        "add",
        variant,
        gather_index=gather,
        weight_index=windex,
        scatter_index=scatter,
        row_scale=row_scale,
    )


def _row_output(
    lw: FunctionLowering, op: ir.Operation, lhs: ir.Value
) -> tuple[ir.Value, ir.Value | None, ir.Value, str]:
    """A row-parallel op's left input (buffer and gather index), its output buffer (one row
    per row read) and whether its rows are edges or nodes."""
    x, gather = lw.read(lhs, op)
    out = lw.buffers.out(op.results[0], gather if gather is not None else x)
    return x, gather, out, lw.parallel(lhs)


def _two_rows(
    lw: FunctionLowering, op: ir.Operation, fn: str, lhs: ir.Value, rhs: ir.Value
) -> None:
    """``fn`` of two row sets, both read through their gathers."""
    x, gather, out, parallel = _row_output(lw, op, lhs)
    y, y_index = lw.read(rhs, op)
    lw.emit.trav(fn, out, x, y=y, gather=gather, y_index=y_index, parallel=parallel)


@_lowers("scale")
def _scale(lw: FunctionLowering, op: ir.Operation) -> None:
    """Rows times a per-row (or per-head) factor."""
    v = inter.view(op)
    _two_rows(lw, op, "scale", v.operand("x"), v.operand("s"))


@_lowers("dot")
def _dot(lw: FunctionLowering, op: ir.Operation) -> None:
    """Per-head inner products of two row sets."""
    v = inter.view(op)
    _two_rows(lw, op, "dot", v.operand("x"), v.operand("y"))


@_lowers("add")
def _add(lw: FunctionLowering, op: ir.Operation) -> None:
    """Rows plus rows, plus a bias vector, or plus a per-type bias row (with the graph)."""
    v = inter.view(op)
    lhs, rhs = v.operand("lhs"), v.operand("rhs")
    x, gather, out, parallel = _row_output(lw, op, lhs)
    if rank(rhs) == 1:
        lw.emit.trav("add_bias", out, x, y=lw.buffers.src(rhs), gather=gather, parallel=parallel)
    elif v.has("graph"):  # typed bias
        y_index = lw.type_array(lhs, op)
        lw.emit.trav(
            "add", out, x, y=lw.buffers.src(rhs), gather=gather, y_index=y_index, parallel=parallel
        )
    else:
        y, y_index = lw.read(rhs, op)
        lw.emit.trav("add", out, x, y=y, gather=gather, y_index=y_index, parallel=parallel)


@_lowers("unary")
def _unary(lw: FunctionLowering, op: ir.Operation) -> None:
    """An elementwise function of rows."""
    v = inter.view(op)
    x, gather, out, parallel = _row_output(lw, op, v.operand("x"))
    lw.emit.trav(v.attr("fn"), out, x, gather=gather, slope=v.attr("slope"), parallel=parallel)


@_lowers("unary_grad")
def _unary_grad(lw: FunctionLowering, op: ir.Operation) -> None:
    """``dy * f'(ref)``; ``copy`` and ``neg`` need no reference."""
    v = inter.view(op)
    x, gather, out, parallel = _row_output(lw, op, v.operand("dy"))
    y, y_index = lw.read(v.operand("ref"), op)
    base = v.attr("fn")
    if base in ("copy", "neg"):
        lw.emit.trav(base, out, x, gather=gather, parallel=parallel)
        return
    lw.emit.trav(
        f"{base}_grad",
        out,
        x,
        y=y,
        gather=gather,
        y_index=y_index,
        parallel=parallel,
        slope=v.attr("slope"),
    )


@_lowers("sum_rows")
def _sum_rows(lw: FunctionLowering, op: ir.Operation) -> None:
    """All rows summed into one (or one per type, through the rows' type array)."""
    v = inter.view(op)
    rows = v.operand("x")
    x, gather = lw.read(rows, op)
    out = lw.buffers.out(op.results[0], x)
    lw.buffers.zero(out)
    scatter = lw.type_array(rows, op) if v.attr("by") == "type" else None
    lw.emit.trav(
        "copy",
        out,
        x,
        gather=gather,
        scatter=scatter,
        reduce="sum",
        parallel=lw.parallel(rows),
    )


@_lowers("etype_src_weight", "etype_src_weight_grad")
def _etype_src_weight(lw: FunctionLowering, op: ir.Operation) -> None:
    """Per-relation weights picked from (or summed onto) source node types: one row copy
    per type through the graph's ``etype_src_ntype`` array."""
    grad = op.name.endswith("_grad")
    w = lw.buffers.src(inter.view(op).operand("dw" if grad else "w"))
    out = lw.buffers.out(op.results[0], w)
    index = lw.graph_array("etype_src_ntype", op)
    x, o = lw.buffers.collapse(w, per_type=True), lw.buffers.collapse(out, per_type=True)
    if grad:
        lw.buffers.zero(out)
        lw.emit.trav("copy", o, x, scatter=index, reduce="sum", parallel="node")
    else:
        lw.emit.trav("copy", o, x, gather=index, parallel="node")


@_lowers("weight_product")
def _weight_product(lw: FunctionLowering, op: ir.Operation) -> None:
    """``W[r] @ q`` and its gradients as one GEMM over the weight's rows ``[R*K, N]``; the
    per-slice form (``b`` or the ``xty`` result of rank 3) picks slice ``i / K`` for row
    ``i`` (the template's ``slice_rows``)."""
    v = inter.view(op)
    variant = v.attr("variant")
    a_in, b_in = v.operand("a"), v.operand("b")
    a, b = lw.buffers.src(a_in), lw.buffers.src(b_in)
    out = lw.buffers.out(op.results[0], a)
    per_slice = rank(op.results[0]) == 3 if variant == "xty" else rank(b_in) == 3
    slice_rows = None
    if per_slice:
        a_shape = ir.ShapedType(a_in.type).shape
        slice_rows = a_shape[1] if len(a_shape) == 3 else 1
    a = lw.buffers.collapse(a)
    if variant == "xty":
        lw.buffers.zero(out)
        b = lw.buffers.collapse(b)
        o, epilogue = out, "add"
    else:
        # per slice, the weight keeps its slices ([R, K, N]); otherwise b is a matrix
        o, epilogue = lw.buffers.collapse(out), "store"
    lw.emit.gemm(a, b, o, epilogue, variant, slice_rows=slice_rows)


def _group_memref(columns: int) -> ir.MemRefType:
    """A buffer of one f32 row of ``columns`` per group."""
    return ir.MemRefType.get([ir.ShapedType.get_dynamic_size(), columns], ir.F32Type.get())


def _edge_groups(lw: FunctionLowering, op: ir.Operation, by: str) -> tuple[ir.Value, ir.Value]:
    """Each edge's group (a softmax's, a maximum's) and the group count: its destination
    (``by = "dst"``), or its unique (destination, edge type) pair (``"dst_etype"``, the graph's
    ``dst_compact``)."""
    if by == "dst_etype":
        return lw.graph_array("edge_dst_compact", op), lw.count("dst_compact_dst", op)
    return lw.graph_array("dst", op), lw.count("ntype", op)


@_lowers("edge_softmax")
def _edge_softmax(lw: FunctionLowering, op: ir.Operation) -> None:
    """Softmax over each group's edges (a destination, or a (destination, edge type) pair):
    max per group, exp(x - max), sum per group, divide."""
    res = op.results[0]
    v = inter.view(op)
    x = lw.buffers.src(v.operand("x"))
    heads = width(res)
    dst, groups = _edge_groups(lw, op, v.attr("by"))
    nmax = lw.buffers.temp(_group_memref(heads), groups)
    lw.buffers.fill(nmax, float("-inf"))
    lw.emit.trav("copy", nmax, x, scatter=dst, reduce="max")
    ex = lw.buffers.temp(memref_of(res.type), lw.count("src", op))
    lw.emit.trav("exp_sub", ex, x, y=nmax, y_index=dst)
    nsum = lw.buffers.temp(_group_memref(heads), groups)
    lw.buffers.fill(nsum, 0.0)
    lw.emit.trav("copy", nsum, ex, scatter=dst, reduce="sum")
    out = lw.buffers.out(res, dst)
    lw.emit.trav("div", out, ex, y=nsum, y_index=dst)


@_lowers("edge_softmax_grad")
def _edge_softmax_grad(lw: FunctionLowering, op: ir.Operation) -> None:
    """``y * (dy - Σ_dst dy*y)``: one reducing traversal, then two row traversals."""
    res = op.results[0]
    v = inter.view(op)
    y, dy = lw.buffers.src(v.operand("y")), lw.buffers.src(v.operand("dy"))
    heads = width(res)
    dst, groups = _edge_groups(lw, op, v.attr("by"))
    nsum = lw.buffers.temp(_group_memref(heads), groups)
    lw.buffers.fill(nsum, 0.0)
    lw.emit.trav("mul", nsum, dy, y=y, scatter=dst, reduce="sum")
    diff = lw.buffers.temp(memref_of(res.type), lw.count("src", op))
    lw.emit.trav("sub", diff, dy, y=nsum, y_index=dst)
    out = lw.buffers.out(res, dst)
    lw.emit.trav("mul", out, diff, y=y)


@_lowers("edge_max")
def _edge_max(lw: FunctionLowering, op: ir.Operation) -> None:
    """Each group's maximum (a reducing traversal into ``-inf``), read back onto its edges."""
    res = op.results[0]
    v = inter.view(op)
    x = lw.buffers.src(v.operand("x"))
    group, groups = _edge_groups(lw, op, v.attr("by"))
    top = lw.buffers.temp(_group_memref(width(res)), groups)
    lw.buffers.fill(top, float("-inf"))
    lw.emit.trav("copy", top, x, scatter=group, reduce="max")
    lw.emit.trav("copy", lw.buffers.out(res, group), top, gather=group)


@_lowers("edge_max_grad")
def _edge_max_grad(lw: FunctionLowering, op: ir.Operation) -> None:
    """``[x = y] · Σ_group dy / Σ_group [x = y]``: which edges hold the maximum, per group the
    summed gradient and the count of holders, their quotient read back onto the holders."""
    res = op.results[0]
    v = inter.view(op)
    x, y, dy = (lw.buffers.src(v.operand(n)) for n in ("x", "y", "dy"))
    group, groups = _edge_groups(lw, op, v.attr("by"))
    columns = width(res)
    holds = lw.buffers.temp(memref_of(res.type), lw.count("src", op))
    lw.emit.trav("eq", holds, x, y=y)
    total, ties, share = (lw.buffers.temp(_group_memref(columns), groups) for _ in range(3))
    for sums, rows in ((total, dy), (ties, holds)):
        lw.buffers.fill(sums, 0.0)
        lw.emit.trav("copy", sums, rows, scatter=group, reduce="sum")
    lw.emit.trav("div", share, total, y=ties)
    lw.emit.trav("mul", lw.buffers.out(res, group), holds, y=share, y_index=group)
