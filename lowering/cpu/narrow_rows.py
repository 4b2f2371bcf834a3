"""Narrow GEMM rows in vector lanes along the reduction (CPU): ``xw`` products as dot
products, their weight gradients (``xty``) as vector sums over a transposed accumulator.

An ``xw`` product whose output is narrower than a vector (fewer than :data:`LANES` columns:
attention logits, a destination term ``x (W a)`` per head) has no register block, so it runs
row at a time; the element form (``k`` outer, ``j`` inner) adds each of its ``K`` products into
the row's outputs one after the other, a chain of dependent additions per output (MLPerf's
R-GAT twin, the per-edge destination term over 133,000 edges of 1,024 columns: 124 ms a step
at 9.5 GFLOP/s). Here the weight is transposed once per call into ``[S, N, K]`` f32 (each of
its ``N`` columns contiguous), and each row's ``N`` outputs are ``N`` running vector sums over
``a``'s row, :data:`LANES` columns at a time (``a`` read in its stored type and widened),
added across the lanes at the end. The sums are reassociated, as ``hector-vector-dots``' are:
the rounding differs from the element form's within f32's, and is the same on every run and
for every worker count (a row is one worker's). The epilogue is the element form's: the row
scale, then a store or one addition into ``out``.

The weight gradient of such a product, ``out[t] += a[r, :]ᵀ ⊗ g_i`` with ``g_i`` narrower than
:data:`LANES`, adds ``K × N`` products per row into ``out`` one element at a time (its
``N``-wide rows give no vector either: 111 ms a step for the twin's destination term). Here each
worker sums its rows into an f32 accumulator ``[S, N, K]`` of its own (zeroed), a vector of
:data:`LANES` columns of ``a`` times the broadcast ``g_i[j]`` at a time, and adds it, transposed,
into its output once after its rows (``out``, or its partial, which the workers combine as for
every weight gradient). Each element is the same sum of the same products in the same row
order, started from 0 and then added to ``out``.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, memref, scf, vector

from ...dialects import hector_intra as intra
from ...dialects.builders import OpAccess
from .. import templates as T

#: f32 lanes per running sum (one AVX2 vector).
LANES = 8


def applies(v: OpAccess, s: intra.Schedule) -> bool:
    """Whether the rows of an unpacked GEMM are computed here: an ``xw`` (with or without
    ``row_scale``) whose output is narrower than :data:`LANES` and whose reduction is a whole
    number of :data:`LANES`-wide vectors."""
    if v.attr("variant") != "xw" or s.pack:
        return False
    ops = T.operands(v)
    k_extent = T.static_dim(ops["a"], 1)
    return T.width(ops["out"]) < LANES and k_extent >= LANES and k_extent % LANES == 0


def applies_to_gradient(v: OpAccess, s: intra.Schedule) -> bool:
    """Whether the rows of an unpacked weight gradient (``xty``) are summed here: its row
    gradients narrower than :data:`LANES`, its reduction a whole number of vectors."""
    if v.attr("variant") != "xty" or s.pack:
        return False
    ops = T.operands(v)
    k_extent = T.static_dim(ops["a"], 1)
    return T.width(ops["weight"]) < LANES and k_extent >= LANES and k_extent % LANES == 0


def transposed_weight(b: T.Body) -> ir.Value:
    """``weight`` (``[K, N]`` or ``[S, K, N]``) as a new f32 ``[S, N, K]`` buffer (``S = 1``
    for a shared weight); the caller deallocates it."""
    w_type = ir.MemRefType(b.ops["weight"].type)
    *slices, k_extent, n_extent = w_type.shape
    count = slices[0] if slices else 1
    wt = memref.alloc(ir.MemRefType.get([count, n_extent, k_extent], T.f32_type()), [], [])
    c0, c1 = b.index(0), b.index(1)
    with b.loop(c0, b.index(count), c1) as t:
        with b.loop(c0, b.index(k_extent), c1) as k:
            for j in range(n_extent):
                cj = b.index(j)
                w = b.load("weight", *([t] if slices else []), k, cj)
                memref.store(w, wt, [t, cj, k])
    return wt


def dot_rows(b: T.Body, v: OpAccess, wt: ir.Value, lo: ir.Value, count: ir.Value) -> None:
    """Rows ``[lo, lo + count)`` of the product, each output a dot product with a column of
    ``wt`` (:func:`transposed_weight`)."""
    k_extent = T.static_dim(b.ops["a"], 1)
    n_extent = T.width(b.ops["out"])
    epilogue = v.attr("epilogue")
    c0, c1 = b.index(0), b.index(1)
    vt = ir.VectorType.get([LANES], T.f32_type())
    zero = arith.constant(vt, ir.DenseElementsAttr.get_splat(vt, ir.FloatAttr.get_f32(0.0)))
    row_map = ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(2, 1))
    col_map = ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(3, 1))
    pad = arith.constant(T.f32_type(), 0.0)
    reassoc = ir.Attribute.parse("#arith.fastmath<reassoc,contract>")
    with b.loop(c0, count, c1) as r:
        row = T.gemm_row_scale(b, T.gemm_row_prologue(b, arith.addi(lo, r), T.slice_rows(v)))
        t = row.t if row.t is not None else c0
        steps = scf.ForOp(c0, b.index(k_extent), b.index(LANES), [zero] * n_extent)
        with ir.InsertionPoint(steps.body):
            k = steps.induction_variable
            va = T.read_vector(vt, b.ops["a"], [row.r, k], row_map, [True])
            sums = []
            for j, acc in enumerate(steps.inner_iter_args):
                vw = vector.transfer_read(vt, wt, [t, b.index(j), k], col_map, pad, [True])
                sums.append(vector.fma(va, vw, acc))
            scf.yield_(sums)
        for j, acc in enumerate(steps.results):
            total = vector.reduction(T.f32_type(), vector.CombiningKind.ADD, acc, fastmath=reassoc)
            if row.scale is not None:
                total = arith.mulf(total, row.scale)
            if epilogue == "store":
                b.store("out", total, row.o, b.index(j))
            else:
                b.accumulate("out", total, False, row.o, b.index(j))


def gradient_rows(b: T.Body, v: OpAccess, lo: ir.Value, count: ir.Value) -> None:
    """Rows ``[lo, lo + count)`` of a weight gradient into ``b``'s ``out`` (module docstring):
    summed in a transposed accumulator, then added to ``out`` once."""
    k_extent = T.static_dim(b.ops["a"], 1)
    n_extent = T.width(b.ops["weight"])
    out_shape = ir.MemRefType(b.ops["out"].type).shape
    per_slice = len(out_shape) == 3
    slices = out_shape[0] if per_slice else 1
    c0, c1, ck = b.index(0), b.index(1), b.index(k_extent)
    vt = ir.VectorType.get([LANES], T.f32_type())
    acc_type = ir.MemRefType.get([slices, n_extent, k_extent], T.f32_type())
    acc = memref.alloc(acc_type, [], [])
    zero = arith.constant(vt, ir.DenseElementsAttr.get_splat(vt, ir.FloatAttr.get_f32(0.0)))
    col_map = ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(3, 1))
    row_map = ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(2, 1))
    lanes = b.index(LANES)
    with b.loop(c0, b.index(slices), c1) as t:
        with b.loop(c0, ck, lanes) as k:
            for j in range(n_extent):
                vector.transfer_write(None, zero, acc, [t, b.index(j), k], col_map, [True])
    pad = arith.constant(T.f32_type(), 0.0)
    with b.loop(c0, count, c1) as r:
        row = T.gemm_row_prologue(b, arith.addi(lo, r), T.slice_rows(v))
        t = row.t if row.t is not None else c0
        gs = [vector.broadcast(vt, T.xty_gradient(b, row.i, b.index(j))) for j in range(n_extent)]
        with b.loop(c0, ck, lanes) as k:
            va = T.read_vector(vt, b.ops["a"], [row.r, k], row_map, [True])
            for j, g in enumerate(gs):
                at = [t, b.index(j), k]
                cur = vector.transfer_read(vt, acc, at, col_map, pad, [True])
                vector.transfer_write(None, vector.fma(va, g, cur), acc, at, col_map, [True])
    with b.loop(c0, b.index(slices), c1) as t:
        with b.loop(c0, ck, c1) as k:
            for j in range(n_extent):
                cj = b.index(j)
                total = memref.load(acc, [t, cj, k])
                b.accumulate("out", total, False, *([t] if per_slice else []), k, cj)
    memref.dealloc(acc)
