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

A sum marked ``hector.segmented_sum`` (``hector-half-messages``: a bf16 program's sum into the
(destination, relation) pairs that a GEMM reads) is built by :func:`lower_segmented_sum`
instead: its rows grouped by output row, each output row summed in a scratch row and written
once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, memref, scf, vector

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
    if intra.VECTOR_DOT in v.op.attributes:
        lower_vector_dot(v, intra.worker_threads(v, s))
        return
    if half_rows_fit(v):
        lower_half_rows(v, intra.worker_threads(v, s))
        return
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


def lower_segmented_sum(v: OpAccess, threads: int) -> None:
    """A sum (``reduce = "sum"`` with a ``scatter_index``) marked ``hector.segmented_sum``: a
    stable counting sort of its rows by output row (``starts[r]``: the first of row ``r``'s
    rows in ``order``), then each worker owns a static share of the output rows and, for each,
    sums its rows in order in f32 and writes the row once (rounded to ``out``'s type: f32, or
    bf16 / f16 rounded once, not per partial sum). Every output row is written, rows no input
    row reaches with zeros; within a row the rows are added in input order from zero, so an
    f32 ``out`` gets the bits of the accumulating form.

    A row of a ``copy`` or of a ``scale`` (per head, heads a multiple of :data:`LANES` wide),
    :data:`LANES` f32 wide at most :data:`REGISTER_VECTORS` times, is summed in vector
    registers (one ``LANES``-wide vector of ``x`` read per step); other rows in an f32 scratch
    row, an element at a time."""
    b = T.Body(T.operands(v))
    m = T.traversal_rows(b, b.index(0))
    n = memref_dims(b.ops["out"])[0]
    starts, order = _group_rows(b, m, n)
    seg = _Segments(T.RowFn.of(v), starts, order, T.width(b.ops["out"]))
    segments = seg.in_registers if seg.vectors(b) else seg.in_scratch
    Workers(b, threads, partials=False).each(n, segments)
    memref.dealloc(starts)
    memref.dealloc(order)


#: f32 lanes of the vectors a segmented sum keeps its row in, and the most vectors per row
#: (of the 32 vector registers, the rest for the loaded row and addresses).
LANES, REGISTER_VECTORS = 16, 16


@dataclass(frozen=True)
class _Segments:
    """The output rows of a segmented sum: its row function, the grouped rows (``starts``,
    ``order``) and the output width."""

    f: T.RowFn
    starts: Value
    order: Value
    width: int

    def vectors(self, b: T.Body) -> int:
        """Vectors per row when the row is summed in registers, else 0."""
        chunks, rest = divmod(self.width, LANES)
        whole = self.f.fn == "copy" or (self.f.fn == "scale" and self._head_width(b) % LANES == 0)
        return chunks if whole and not rest and chunks <= REGISTER_VECTORS else 0

    def _head_width(self, b: T.Body) -> int:
        """Columns of ``x`` one column of a scale's ``y`` multiplies (a head's width)."""
        return self.width // max(T.width(b.ops["y"]), 1)

    def _bounds(self, wb: T.Body, r: Value) -> tuple[Value, Value]:
        up = arith.addi(r, wb.index(1))
        return memref.load(self.starts, [r]), memref.load(self.starts, [up])

    def in_scratch(self, lo: Value, hi: Value, wb: T.Body) -> None:
        """Rows ``[lo, hi)``, each summed in an f32 scratch row an element at a time."""
        c0, c1, cols = wb.index(0), wb.index(1), wb.index(self.width)
        scratch = memref.alloca(ir.MemRefType.get([1, self.width], T.f32_type()), [], [])
        sb = T.Body(T.Operands({**wb.ops.values, "out": scratch}))
        with wb.loop(lo, hi, c1) as r:
            with wb.loop(c0, cols, c1) as j:
                memref.store(wb.f32(0.0), scratch, [c0, j])
            first, last = self._bounds(wb, r)
            with wb.loop(first, last, c1) as k:
                row = T.row_indices(sb, memref.load(self.order, [k]))
                row = T.Element(row.i, row.xr, row.yr, c0)
                with wb.loop(c0, cols, c1) as j:
                    T.traversal_element(sb, self.f, row.at(j), atomic=False)
            with wb.loop(c0, cols, c1) as j:
                wb.store("out", memref.load(scratch, [c0, j]), r, j)

    def in_registers(self, lo: Value, hi: Value, wb: T.Body) -> None:
        """Rows ``[lo, hi)``, each summed in :meth:`vectors` f32 vectors carried by the loop
        over its rows: ``acc + x * y[head]`` (``copy``: ``acc + x``), as the element form
        computes."""
        c1 = wb.index(1)
        vt = ir.VectorType.get([LANES], T.f32_type())
        rank2 = ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(2, 1))
        zero = arith.constant(vt, ir.DenseElementsAttr.get_splat(vt, ir.FloatAttr.get_f32(0.0)))
        cols = [wb.index(c * LANES) for c in range(self.vectors(wb))]
        with wb.loop(lo, hi, c1) as r:
            first, last = self._bounds(wb, r)
            rows = scf.ForOp(first, last, c1, [zero] * len(cols))
            with ir.InsertionPoint(rows.body):
                i = memref.load(self.order, [rows.induction_variable])
                row = T.row_indices(wb, i)
                scales: dict[int, Value] = {}  # per head: y[yr, head] broadcast
                sums = []
                for c, (acc, col) in enumerate(zip(rows.inner_iter_args, cols, strict=True)):
                    x = T.read_vector(vt, wb.ops["x"], [row.xr, col], rank2, [True])
                    if self.f.fn == "scale":
                        head = c * LANES // self._head_width(wb)
                        if head not in scales:
                            y = wb.load("y", row.yr, wb.index(head))
                            scales[head] = vector.broadcast(vt, y)
                        x = arith.mulf(x, scales[head])
                    sums.append(arith.addf(acc, x))
                scf.yield_(sums)
            out = wb.ops["out"]
            element = ir.MemRefType(out.type).element_type
            for acc, col in zip(rows.results, cols, strict=True):
                vector.transfer_write(None, T.from_f32(acc, element), out, [r, col], rank2, [True])


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


def lower_vector_dot(v: OpAccess, threads: int) -> None:
    """A per-head dot product (``fn = "dot"``, ``reduce = "none"``) marked
    ``hector.vector_dot``: its rows over the workers, and each head's inner product summed as
    :data:`LANES` partial sums (one vector product of ``x`` and ``y`` added per step), then
    added across the lanes. The sums are reassociated (``LANES`` running sums, then a tree),
    so the bits differ from the element form's sequential sum, as a BLAS dot's do."""
    b = T.Body(T.operands(v))
    m = T.traversal_rows(b, b.index(0))
    heads = T.width(b.ops["out"])
    head_width = T.width(b.ops["x"]) // heads
    vt = ir.VectorType.get([LANES], T.f32_type())
    rank2 = ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(2, 1))
    zero = arith.constant(vt, ir.DenseElementsAttr.get_splat(vt, ir.FloatAttr.get_f32(0.0)))
    reassoc = ir.Attribute.parse("#arith.fastmath<reassoc>")

    def rows(lo: Value, hi: Value, wb: T.Body) -> None:
        with wb.loop(lo, hi, wb.index(1)) as i:
            row = T.row_indices(wb, i)
            for h in range(heads):
                acc = zero
                for col in range(h * head_width, (h + 1) * head_width, LANES):
                    c = wb.index(col)
                    xv = T.read_vector(vt, wb.ops["x"], [row.xr, c], rank2, [True])
                    yv = T.read_vector(vt, wb.ops["y"], [row.yr, c], rank2, [True])
                    acc = arith.addf(acc, arith.mulf(xv, yv))
                total = vector.reduction(
                    T.f32_type(), vector.CombiningKind.ADD, acc, fastmath=reassoc
                )
                wb.store("out", total, i, wb.index(h))

    Workers(b, threads, partials=False).each(m, rows)


def vector_dot_fits(v: OpAccess) -> bool:
    """Whether :func:`lower_vector_dot` builds the traversal ``v``: a per-head dot that does
    not reduce, each head a whole number of :data:`LANES`-wide vectors."""
    if v.attr("fn") != "dot" or v.attr("reduce") != "none":
        return False
    heads, width = T.width(v.operand("out")), T.width(v.operand("x"))
    return heads > 0 and width % heads == 0 and (width // heads) % LANES == 0


#: Elementwise row functions :func:`lower_half_rows` builds: ``x`` and ``y`` each read as a
#: vector (``add_bias``: ``y`` a vector of the row's width; ``scale``: one column per head).
_VECTOR_ROW_FNS: dict[str, Callable[[Value, Value], Value]] = {
    "add": arith.addf,
    "add_bias": arith.addf,
    "sub": arith.subf,
    "mul": arith.mulf,
    "scale": arith.mulf,
}


def half_rows_fit(v: OpAccess) -> bool:
    """Whether :func:`lower_half_rows` builds the traversal ``v``: an elementwise ``copy``
    or :data:`_VECTOR_ROW_FNS` function that reads or writes f16 / bf16 rows a whole
    number of :data:`LANES`-wide vectors wide (a scale's heads too)."""
    fn = v.attr("fn")
    if v.attr("reduce") != "none" or (fn != "copy" and fn not in _VECTOR_ROW_FNS):
        return False
    rows = [v.operand("x"), v.operand("out")]
    if any(ir.MemRefType(r.type).rank != 2 for r in rows):
        return False
    halves = (ir.BF16Type, ir.F16Type)
    if not any(isinstance(ir.MemRefType(r.type).element_type, halves) for r in rows):
        return False
    width = T.width(rows[1])
    if fn == "scale":
        heads = T.width(v.operand("y"))
        return heads > 0 and width % heads == 0 and (width // heads) % LANES == 0
    return width % LANES == 0


def lower_half_rows(v: OpAccess, threads: int) -> None:
    """An elementwise traversal on half storage (:func:`half_rows_fit`), its rows over the
    workers and each row :data:`LANES` columns at a time: ``x`` (and ``y``) read as vectors
    and widened, the function applied, the vector rounded to ``out``'s type and written. The
    same operations per element as the element form (the same bits), in vector registers
    rather than one element's integer rounding at a time."""
    b = T.Body(T.operands(v))
    fn, width = v.attr("fn"), T.width(b.ops["out"])
    vt = ir.VectorType.get([LANES], T.f32_type())
    rank1 = ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(1, 1))
    rank2 = ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(2, 1))
    out = b.ops["out"]
    element = ir.MemRefType(out.type).element_type

    def second(wb: T.Body, row: T.Element, col: Value, c: int) -> Value:
        if fn == "add_bias":
            return T.read_vector(vt, wb.ops["y"], [col], rank1, [True])
        if fn == "scale":
            head = wb.index(c * LANES // (width // T.width(wb.ops["y"])))
            return vector.broadcast(vt, wb.load("y", row.yr, head))
        return T.read_vector(vt, wb.ops["y"], [row.yr, col], rank2, [True])

    def rows(lo: Value, hi: Value, wb: T.Body) -> None:
        with wb.loop(lo, hi, wb.index(1)) as i:
            row = T.row_indices(wb, i)
            for c in range(width // LANES):
                col = wb.index(c * LANES)
                x = T.read_vector(vt, wb.ops["x"], [row.xr, col], rank2, [True])
                if fn != "copy":
                    x = _VECTOR_ROW_FNS[fn](x, second(wb, row, col, c))
                vector.transfer_write(None, T.from_f32(x, element), out, [i, col], rank2, [True])

    Workers(b, threads, partials=False).each(T.traversal_rows(b, b.index(0)), rows)
