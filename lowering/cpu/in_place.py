"""Tiles of an f32 ``xw`` whose rows of ``a`` are read where they lie (``Schedule.in_place``).

A packed tile copies ``tile_m`` rows of ``a`` into a contiguous ``[tile_m, K]`` buffer before
the micro-kernel multiplies it. Where the rows are not gathered (no ``gather_index``) and ``a``
holds f32, rows ``[i0, i0 + tile_m)`` of ``a`` already have that layout (contiguous rows of
``K``), so a whole tile multiplies them in place: the micro-kernel reads the same values in the
same order, and results are bit for bit the packed ones. The accumulator tile and the epilogue
(scale, scatter, store or add) are unchanged. A tile cut short (the last rows, or a weight
slice's run ending inside the tile) is packed as before, so the product keeps static shapes.

Where the tile's output rows are its own (no ``scatter_index``), they are prefetched for
writing before the product: the epilogue's stores into rows not yet in cache (a result of
megabytes, written once) then overlap the micro-kernel instead of following it.

At a reduction of 64, reading the rows in place and prefetching took 14% off a call's time (one
thread); ``hector-schedule`` chooses in-place tiles up to ``K = IN_PLACE_MAX_K``
(``lowering/schedule.py``, with the measurements).
"""

from __future__ import annotations

import dataclasses

from mlir import ir
from mlir.dialects import arith, memref

from ...dialects import hector_intra as intra
from ...dialects.builders import OpAccess
from ...passes.walk import walk_ops
from .. import templates as T
from .packing import view

Value = T.Value

_GEMM = "hector_intra.gemm_template"


def in_place_applies(v: OpAccess) -> bool:
    """Whether GEMM template ``v`` can multiply whole tiles of ``a``'s rows in place: an
    ``xw`` reading its rows of ``a`` (f32) in order, not through a ``gather_index``."""
    ops = T.operands(v)
    stored = ir.MemRefType(ops["a"].type).element_type
    return (
        v.attr("variant") == "xw" and not ops.has("gather_index") and isinstance(stored, ir.F32Type)
    )


def rows_in_place(b: T.Body, i0: Value, tile_m: int) -> Value:
    """Rows ``[i0, i0 + tile_m)`` of ``a`` as a ``[tile_m, K]`` view: the tile the micro-kernel
    multiplies, unpacked. Where ``out``'s rows are the tile's own (no ``scatter_index``), they
    are prefetched for writing first, so the epilogue's stores find them in cache."""
    if not b.ops.has("scatter_index"):
        _prefetch_rows(b, i0, tile_m)
    a = b.ops["a"]
    return view(a, [i0, 0], [tile_m, T.static_dim(a, 1)])


#: Bytes of a cache line: the step of the output rows' prefetches.
LINE_BYTES = 64


def _prefetch_rows(b: T.Body, i0: Value, rows: int) -> None:
    """Prefetch rows ``[i0, i0 + rows)`` of ``out`` for writing, a cache line at a time."""
    out = b.ops["out"]
    step = LINE_BYTES * 8 // ir.FloatType(ir.MemRefType(out.type).element_type).width
    c0, c1 = b.index(0), b.index(1)
    near = ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 3)  # keep in all cache levels
    with b.loop(c0, b.index(rows), c1) as r:
        row = arith.addi(i0, r)
        with b.loop(c0, b.index(T.width(out)), b.index(step)) as col:
            memref.prefetch(out, [row, col], True, near, True)


def pack_narrowed(fn: ir.Operation) -> None:
    """Clear ``in_place`` from the schedule of every GEMM of ``fn`` it no longer applies to:
    ``hector-half-messages`` (after ``hector-schedule``) may store a GEMM's rows of ``a`` in
    a half type, which its tiles then widen as they pack them."""
    for op in walk_ops(fn):
        if op.name != _GEMM:
            continue
        s = intra.schedule_of(op)
        if s is not None and s.in_place and not in_place_applies(intra.view(op)):
            op.attributes["schedule"] = dataclasses.replace(s, in_place=False).to_attr()
