"""Scheduled CPU form of a ``hector_intra.traversal_template``: its rows over workers.

A traversal with ``parallel = "rows"`` spreads its rows over :class:`~.workers.Workers`. A
reduction shares them as ``hector_intra.reduction_split`` says: each worker owning a static
share of the output rows (so each sums as one worker would), or each writing a partial output
folded in worker order afterwards; the result is the same on every run with the same thread
count.

A sum marked ``hector.segmented_sum`` (``hector-half-messages``: a bf16 program's sum into the
(destination, relation) pairs that a GEMM reads) is built by :func:`lower_segmented_sum`
instead: its rows grouped by output row, each output row summed in a scratch row and written
once.
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir
from mlir.dialects import arith, memref, scf

from ...dialects import hector_intra as intra
from ...dialects.builders import OpAccess
from .. import templates as T
from .workers import Workers, memref_dims

Value = T.Value


def lower_traversal(v: OpAccess, s: intra.Schedule) -> None:
    """A traversal template with its rows spread over workers. A reduction shares them as
    ``hector_intra.reduction_split`` says: by owned output rows, or by partials (a reduction
    into nearly as many rows as it reads then runs on one worker, decided at run time)."""
    if intra.SEGMENTED_SUM in v.op.attributes:
        lower_segmented_sum(v, intra.worker_threads(v, s))
        return
    b = T.Body(T.operands(v))
    f = T.RowFn.of(v)
    threads = intra.worker_threads(v, s)
    split = intra.reduction_split(v, s)
    m = T.traversal_rows(b, b.index(0))
    cols = b.index(T.width(b.ops["out"]))
    c0, c1 = b.index(0), b.index(1)

    def one_row(i: Value, wb: T.Body) -> None:
        row = T.row_indices(wb, i)
        with wb.loop(c0, cols, c1) as j:
            T.traversal_element(wb, f, row.at(j), atomic=False)

    def rows(lo: Value, hi: Value, wb: T.Body) -> None:
        with wb.loop(lo, hi, c1) as i:
            one_row(i, wb)

    if split == "owners":
        _owned_rows(b, threads, m, one_row)
        return

    def on_workers() -> None:
        init = float("-inf") if f.reduce == "max" else 0.0
        workers = Workers(b, threads, partials=split == "partials", init=init)
        workers.each(m, rows)
        workers.finish(arith.maximumf if f.reduce == "max" else arith.addf)

    if split != "partials":
        on_workers()
        return
    out_rows = memref_dims(b.ops["out"])[0]
    enough = arith.cmpi(
        arith.CmpIPredicate.uge, m, arith.muli(out_rows, b.index(intra.PARTIAL_ROWS_RATIO))
    )
    branch = scf.IfOp(enough, has_else=True)
    with ir.InsertionPoint(branch.then_block):
        on_workers()
        scf.yield_([])
    with ir.InsertionPoint(branch.else_block):
        rows(c0, m, b)
        scf.yield_([])


def _owned_rows(b: T.Body, threads: int, m: Value, row: Callable[[Value, T.Body], None]) -> None:
    """Each worker owns a static share of ``out``'s rows: it reads every row's
    ``scatter_index`` and builds ``row(i, b)`` only for the rows landing in its share, in row
    order, so no two workers touch one output row and each sums as one worker would."""
    c1 = b.index(1)

    def share(lo: Value, hi: Value, wb: T.Body) -> None:
        with wb.loop(b.index(0), m, c1) as i:
            d = wb.load_index("scatter_index", i)
            mine = arith.andi(
                arith.cmpi(arith.CmpIPredicate.uge, d, lo),
                arith.cmpi(arith.CmpIPredicate.ult, d, hi),
            )
            branch = scf.IfOp(mine)
            with ir.InsertionPoint(branch.then_block):
                row(i, wb)
                scf.yield_([])

    Workers(b, threads, partials=False).each(memref_dims(b.ops["out"])[0], share)


def lower_segmented_sum(v: OpAccess, threads: int) -> None:
    """A sum (``reduce = "sum"`` with a ``scatter_index``) marked ``hector.segmented_sum``: a
    stable counting sort of its rows by output row (``starts[r]``: the first of row ``r``'s
    rows in ``order``), then each worker owns a static share of the output rows and, for each,
    sums its rows in order into an f32 scratch row held in the core's cache and writes it once
    (rounded to ``out``'s type: f32, or bf16 / f16 rounded once, not per partial sum). Every
    output row is written, rows no input row reaches with zeros; within a row the rows are
    added in input order from zero, so an f32 ``out`` gets the bits of the accumulating form."""
    b = T.Body(T.operands(v))
    f = T.RowFn.of(v)
    c0, c1 = b.index(0), b.index(1)
    m = T.traversal_rows(b, c0)
    n = memref_dims(b.ops["out"])[0]
    starts, order = _group_rows(b, m, n)
    width = T.width(b.ops["out"])
    cols = b.index(width)

    def segments(lo: Value, hi: Value, wb: T.Body) -> None:
        scratch = memref.alloca(ir.MemRefType.get([1, width], T.f32_type()), [], [])
        sb = T.Body(T.Operands({**wb.ops.values, "out": scratch}))
        with wb.loop(lo, hi, c1) as r:
            with wb.loop(c0, cols, c1) as j:
                memref.store(wb.f32(0.0), scratch, [c0, j])
            first, last = memref.load(starts, [r]), memref.load(starts, [arith.addi(r, c1)])
            with wb.loop(first, last, c1) as k:
                row = T.row_indices(sb, memref.load(order, [k]))
                row = T.Element(row.i, row.xr, row.yr, c0)
                with wb.loop(c0, cols, c1) as j:
                    T.traversal_element(sb, f, row.at(j), atomic=False)
            with wb.loop(c0, cols, c1) as j:
                wb.store("out", memref.load(scratch, [c0, j]), r, j)

    Workers(b, threads, partials=False).each(n, segments)
    memref.dealloc(starts)
    memref.dealloc(order)


def _group_rows(b: T.Body, m: Value, n: Value) -> tuple[Value, Value]:
    """A stable counting sort of rows ``[0, m)`` by ``scatter_index`` (values in ``[0, n)``):
    ``starts`` (``[n + 1]``, each output row's first position in ``order``, ``m`` last) and
    ``order`` (``[m]``, the rows grouped by output row, in row order within one)."""
    c0, c1 = b.index(0), b.index(1)
    dyn = ir.ShapedType.get_dynamic_size()
    index = ir.IndexType.get()
    vec = ir.MemRefType.get([dyn], index)
    starts = memref.alloc(vec, [arith.addi(n, c1)], [])
    cursor = memref.alloc(vec, [n], [])
    order = memref.alloc(vec, [m], [])
    with b.loop(c0, arith.addi(n, c1), c1) as r:
        memref.store(c0, starts, [r])
    with b.loop(c0, m, c1) as i:  # row counts, one place up
        up = arith.addi(b.load_index("scatter_index", i), c1)
        memref.store(arith.addi(memref.load(starts, [up]), c1), starts, [up])
    with b.loop(c0, n, c1) as r:  # prefix sums; each row's cursor at its first position
        first = memref.load(starts, [r])
        memref.store(first, cursor, [r])
        up = arith.addi(r, c1)
        memref.store(arith.addi(memref.load(starts, [up]), first), starts, [up])
    with b.loop(c0, m, c1) as i:
        r = b.load_index("scatter_index", i)
        at = memref.load(cursor, [r])
        memref.store(i, order, [at])
        memref.store(arith.addi(at, c1), cursor, [r])
    memref.dealloc(cursor)
    return starts, order
