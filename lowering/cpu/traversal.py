"""Scheduled CPU form of a ``hector_intra.traversal_template``: its rows over workers.

A traversal with ``parallel = "rows"`` spreads its rows over :class:`~.workers.Workers`. A
reduction shares them as ``hector_intra.reduction_split`` says: each worker owning a static
share of the output rows (so each sums as one worker would), or each writing a partial output
folded in worker order afterwards; the result is the same on every run with the same thread
count.

Each row is computed in two column loops through a row of scratch (``memref<N x f32>``, one
per worker, on its stack; rows of up to ``SCRATCH_MAX_WIDTH`` elements): the row function's
values into the scratch, then the scratch into ``out`` (stored, summed or maxed). Written
element by element into ``out`` directly, every store could alias the next element's inputs
as far as LLVM can tell (``out`` and ``x`` are memrefs of unknown provenance), so it kept the
row scalar; the scratch aliases nothing, and both loops vectorise. The values are the same: an
element reads only its own column of ``x`` and ``out``, and each row's inputs are read before
its output is written.
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
    b = T.Body(T.operands(v))
    f = T.RowFn.of(v)
    threads = intra.worker_threads(v, s)
    split = intra.reduction_split(v, s)
    m = T.traversal_rows(b, b.index(0))
    width = T.width(b.ops["out"])
    cols = b.index(width)
    c0, c1 = b.index(0), b.index(1)

    def one_row(i: Value, wb: T.Body, scratch: Value | None) -> None:
        row = T.row_indices(wb, i)
        if scratch is None:  # a row too wide for the stack: element by element into out
            with wb.loop(c0, cols, c1) as j:
                T.traversal_element(wb, f, row.at(j), atomic=False)
            return
        with wb.loop(c0, cols, c1) as j:
            memref.store(T.row_value(wb, row.at(j), f), scratch, [j])
        with wb.loop(c0, cols, c1) as j:
            T.REDUCE[f.reduce](wb, row.at(j), memref.load(scratch, [j]), False)

    def rows(lo: Value, hi: Value, wb: T.Body) -> None:
        scratch = scratch_row(width)
        with wb.loop(lo, hi, c1) as i:
            one_row(i, wb, scratch)

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


#: Widest row (f32 elements) computed through a scratch row on a worker's stack (16 KiB);
#: wider rows are written into ``out`` element by element.
SCRATCH_MAX_WIDTH = 4096


def scratch_row(width: int) -> Value | None:
    """A row of ``width`` f32 on the stack, at the insertion point (before the row loop: one
    per worker, reused by each of its rows); None over :data:`SCRATCH_MAX_WIDTH`."""
    if width > SCRATCH_MAX_WIDTH:
        return None
    return memref.alloca(ir.MemRefType.get([width], T.f32_type()), [], [])


def _owned_rows(
    b: T.Body, threads: int, m: Value, row: Callable[[Value, T.Body, Value | None], None]
) -> None:
    """Each worker owns a static share of ``out``'s rows: it reads every row's
    ``scatter_index`` and builds ``row(i, b, scratch)`` (its own scratch row) only for the rows
    landing in its share, in row order, so no two workers touch one output row and each sums
    as one worker would."""
    c1 = b.index(1)

    def share(lo: Value, hi: Value, wb: T.Body) -> None:
        scratch = scratch_row(T.width(b.ops["out"]))
        with wb.loop(b.index(0), m, c1) as i:
            d = wb.load_index("scatter_index", i)
            mine = arith.andi(
                arith.cmpi(arith.CmpIPredicate.uge, d, lo),
                arith.cmpi(arith.CmpIPredicate.ult, d, hi),
            )
            branch = scf.IfOp(mine)
            with ir.InsertionPoint(branch.then_block):
                row(i, wb, scratch)
                scf.yield_([])

    Workers(b, threads, partials=False).each(memref_dims(b.ops["out"])[0], share)
