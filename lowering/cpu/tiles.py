"""Scheduled CPU form of a ``hector_intra.gemm_template``: packed tiles over workers.

``convert-hector-intra-to-scf`` calls into this module for a GEMM template that carries a
``schedule`` (``hector_intra.Schedule``, chosen by ``hector-schedule``):

* **Workers** (:mod:`~hector.lowering.cpu.workers`). With ``parallel = "rows"`` the rows are cut
  into static chunks, one per worker; a worker whose rows may meet others' in ``out`` writes a
  partial output, folded in worker order. A weight gradient per slice whose rows come sorted by
  slice (checked at run time) needs no partial copy of the whole gradient: each worker owns the
  slices of its rows but its first, which it sums in a ``[K, N]`` buffer of its own.
* **Tiles** (:mod:`~hector.lowering.cpu.packing`). A worker walks its rows ``tile_m`` at a
  time, packing gathered rows into a contiguous tile (zero rows past the end, so every product
  has static shapes), then one ``linalg.matmul`` multiplies the tile by its weight slice. A run
  of rows sharing a weight slice too short for a tile (a relation boundary when rows are sorted
  by type, or an unsorted ``weight_index``) falls back to the row-at-a-time form of
  ``templates``.
* **Micro-kernel** (:mod:`~hector.lowering.cpu.micro_kernel`). Each tile's product is rewritten
  to an ``unroll × tile_n`` register block of accumulators by a transform-dialect script, or
  multiplied in bf16 pairs (:mod:`~hector.lowering.cpu.bf16`). An f32 ``xw`` whose schedule
  says ``panels`` multiplies by its weight packed once per call in column panels
  (``packing.weight_panels``), panel by panel and in reduction blocks of the schedule's
  ``tile_k`` (``micro_kernel.panel_product``): read in place, each step of the reduction
  reads a weight row ``N`` elements past the last, and at a power-of-two width (a row of
  4 KiB at ``N = 1024``) those rows fall into the same few cache sets and a new page every
  step, which the hardware prefetchers do not cross.

Epilogues move whole rows as vectors; a tile of bf16 pair products writes its rows straight
from the micro-kernel's registers instead (:func:`_row_writer`: no f32 tile stored and read
back). The scheduled traversal template is
:mod:`~hector.lowering.cpu.traversal`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, linalg, memref, scf, vector

from ...dialects import hector_intra as intra
from ...dialects.builders import OpAccess
from .. import templates as T
from . import bf16, narrow_rows
from .in_place import in_place_applies, rows_in_place
from .micro_kernel import exact, marked_matmul, panel_product, product
from .packing import (
    TransposedSlice,
    pack_gradients,
    pack_row_pairs,
    pack_row_vectors,
    transpose_into,
    weight_panels,
    worker_buffer,
)
from .workers import Workers, leading_slice

Value = T.Value


def _workers_for_gemm(b: T.Body, v: OpAccess, s: intra.Schedule) -> Workers:
    """Workers for a GEMM, with partial outputs where the spec's rule asks for them
    (``hector_intra.worker_partials``: a scatter, or any weight gradient, that accumulates);
    without, its row tiles are cut into several chunks per worker (``workers.py``)."""
    partials = intra.worker_partials(v, s) > 0
    return Workers(b, intra.worker_threads(v, s), partials, split=not partials)


#: A run of rows sharing a weight slice shorter than this is multiplied row at a time: a
#: packed tile pads it with zero rows, which would cost more than the rows themselves.
MIN_PACKED_RUN = 8


def _slice_of(b: T.Body, i: Value, per_slice: int | None) -> Value:
    """The weight slice of row ``i``."""
    if per_slice is not None:
        return arith.divui(i, b.index(per_slice))
    return b.load_index("weight_index", i)


def _run_end(b: T.Body, start: Value, end: Value, t0: Value, per_slice: int | None) -> Value:
    """The first row in ``(start, end)`` whose slice is not ``t0`` (``end`` if none)."""
    if per_slice is not None:
        return arith.minui(end, arith.muli(arith.addi(t0, b.index(1)), b.index(per_slice)))

    def step(i: Value, first: Value) -> Value:
        other = arith.cmpi(arith.CmpIPredicate.ne, b.load_index("weight_index", i), t0)
        earlier = arith.cmpi(arith.CmpIPredicate.ult, i, first)
        return arith.select(arith.andi(other, earlier), i, first)

    return b.reduce(arith.addi(start, b.index(1)), end, b.index(1), end, step)


def _slice_runs(
    b: T.Body,
    i0: Value,
    mt: Value,
    per_slice: int | None,
    multiply: Callable[[Value, Value, Value], None],
    rows: Callable[[Value, Value], None],
) -> None:
    """Rows ``[i0, i0 + mt)`` of a sliced GEMM, run by run of rows sharing a weight slice:
    ``multiply(start, count, slice)`` packs a run into the tile (zero rows after it), a run
    shorter than :data:`MIN_PACKED_RUN` goes to ``rows(start, count)``. Rows sorted by type
    give one run per tile but at relation boundaries."""
    index = ir.IndexType.get()
    end = arith.addi(i0, mt)
    loop = scf.WhileOp([index], [i0])
    before = loop.before.blocks.append(index)
    with ir.InsertionPoint(before):
        start = before.arguments[0]
        more = arith.cmpi(arith.CmpIPredicate.ult, start, end)
        scf.ConditionOp(more, [start])
    after = loop.after.blocks.append(index)
    with ir.InsertionPoint(after):
        start = after.arguments[0]
        t0 = _slice_of(b, start, per_slice)
        stop = _run_end(b, start, end, t0, per_slice)
        count = arith.subi(stop, start)
        packed = arith.cmpi(arith.CmpIPredicate.uge, count, b.index(MIN_PACKED_RUN))
        branch = scf.IfOp(packed, has_else=True)
        with ir.InsertionPoint(branch.then_block):
            multiply(start, count, t0)
            scf.yield_([])
        with ir.InsertionPoint(branch.else_block):
            rows(start, count)
            scf.yield_([])
        scf.yield_([stop])


def _row_fallback(
    b: T.Body,
    v: OpAccess,
    i0: Value,
    mt: Value,
    scratch: Value | None,
) -> None:
    """Rows ``[i0, i0 + mt)`` one at a time (a run of rows too short for a packed tile)."""
    epilogue = v.attr("epilogue")
    variant = v.attr("variant")
    k_extent = T.static_dim(b.ops["a"], 1)
    n_extent = T.width(b.ops["weight"] if variant == "xty" else b.ops["out"])
    with b.loop(b.index(0), mt, b.index(1)) as r:
        row = T.gemm_row_prologue(b, arith.addi(i0, r), T.slice_rows(v))
        row = T.gemm_row_scale(b, row)
        T.gemm_row_cpu(b, row, k_extent, n_extent, epilogue, variant, scratch)


def _xwt_row_fallback(
    b: T.Body, v: OpAccess, i0: Value, mt: Value, scratch: Value | None, held: TransposedSlice
) -> None:
    """Rows ``[i0, i0 + mt)`` of an ``xwt`` one at a time: a row of the slice the worker holds
    transposed multiplies like an ``xw`` row (contiguous weight rows in the inner loop), any
    other by dot products over the weight's rows (no slice is transposed for a few rows)."""
    epilogue = v.attr("epilogue")
    k_extent = T.static_dim(b.ops["a"], 1)
    n_extent = T.width(b.ops["out"])
    plain = {r: x for r, x in b.ops.values.items() if r != "weight_index"}
    tb = T.Body(T.Operands({**plain, "weight": held.buf}))
    with b.loop(b.index(0), mt, b.index(1)) as r:
        row = T.gemm_row_scale(b, T.gemm_row_prologue(b, arith.addi(i0, r), T.slice_rows(v)))
        assert row.t is not None
        branch = scf.IfOp(held.holds(row.t), has_else=True)
        with ir.InsertionPoint(branch.then_block):
            flat = T.GemmRow(row.i, row.r, None, row.o, row.scale)
            T.gemm_row_cpu(tb, flat, k_extent, n_extent, epilogue, "xw", scratch)
            scf.yield_([])
        with ir.InsertionPoint(branch.else_block):
            T.gemm_row_cpu(b, row, k_extent, n_extent, epilogue, "xwt", scratch)
            scf.yield_([])


def _rows_over_workers(b: T.Body, v: OpAccess, s: intra.Schedule, m: Value) -> None:
    """An unpacked schedule: the row-at-a-time form, each worker on its chunk of rows (a
    narrow ``xw``'s rows, and a narrow weight gradient's, in vector lanes: :mod:`.narrow_rows`)."""
    workers = _workers_for_gemm(b, v, s)
    n_extent = T.width(b.ops["out"])
    if narrow_rows.applies(v, s):
        wt = narrow_rows.transposed_weight(b)
        workers.each(m, lambda lo, hi, wb: narrow_rows.dot_rows(wb, v, wt, lo, arith.subi(hi, lo)))
        workers.finish()
        memref.dealloc(wt)
        return
    if narrow_rows.applies_to_gradient(v, s):
        workers.each(m, lambda lo, hi, wb: narrow_rows.gradient_rows(wb, v, lo, arith.subi(hi, lo)))
        workers.finish()
        return

    def rows(lo: Value, hi: Value, wb: T.Body) -> None:
        scratch = None
        if v.attr("variant") == "xw" and T.sums_row_apart(v.attr("epilogue"), b.ops["out"]):
            scratch = memref.alloca(ir.MemRefType.get([n_extent], T.f32_type()), [], [])
        _row_fallback(wb, v, lo, arith.subi(hi, lo), scratch)

    workers.each(m, rows)
    workers.finish()


#: Widest register block row the micro-kernel takes (wider ones spill, or crash LLVM's
#: lowering of the vector ops).
MAX_TILE_N = 32


def check_gemm_schedule(v: OpAccess, s: intra.Schedule) -> None:
    """Refuse a packed GEMM schedule the micro-kernel cannot take (``ValueError``): its
    register block must divide the tile's product, so every block has static shapes."""
    variant = v.attr("variant")
    if s.panels and (not s.pack or variant != "xw" or s.products == bf16.BF16):
        raise ValueError("weight panels are for packed xw tiles of f32 products")
    if s.in_place and (not s.pack or s.panels or s.products == bf16.BF16):
        raise ValueError("in-place tiles are for packed f32 products without weight panels")
    if s.in_place and not in_place_applies(v):
        raise ValueError("in-place tiles are for an xw reading ungathered f32 rows of a")
    if not s.pack:
        if s.products == bf16.BF16:
            raise ValueError("bf16 products multiply packed tiles: the schedule must pack")
        return
    k_extent = T.static_dim(v.operand("a"), 1)
    n_extent = T.width(v.operand("weight") if variant == "xty" else v.operand("out"))
    rows = k_extent if variant == "xty" else s.tile_m
    tile_n = s.tile_n or n_extent
    if s.products == bf16.BF16:
        _check_bf16_block(k_extent if variant != "xty" else s.tile_m, tile_n, s.unroll)
    elif tile_n > MAX_TILE_N:
        raise ValueError(f"tile_n {tile_n} is wider than the micro-kernel's {MAX_TILE_N}")
    if rows % s.unroll or n_extent % tile_n:
        raise ValueError(
            f"the register block (unroll {s.unroll} x tile_n {tile_n}) must divide the "
            f"product ({rows} x {n_extent})"
        )


def _check_bf16_block(depth: int, tile_n: int, unroll: int) -> None:
    """Refuse a bf16 register block the pair micro-kernel cannot take (``ValueError``)."""
    if depth % 2:
        raise ValueError(f"bf16 products pair the reduction's steps: its extent {depth} is odd")
    if tile_n % bf16.LANES or tile_n > MAX_BF16_TILE_N:
        raise ValueError(
            f"bf16 products need tile_n a multiple of {bf16.LANES} up to {MAX_BF16_TILE_N}, "
            f"got {tile_n}"
        )
    if unroll * tile_n // bf16.LANES > MAX_BF16_ACCUMULATORS:
        raise ValueError(
            f"the bf16 register block (unroll {unroll} x tile_n {tile_n}) holds more than "
            f"{MAX_BF16_ACCUMULATORS} accumulator vectors"
        )


#: Widest register block row of the bf16 micro-kernel, and its most accumulator vectors (of
#: AVX-512's 32 registers; the rest hold the operands).
MAX_BF16_TILE_N, MAX_BF16_ACCUMULATORS = 64, 16


#: Where an ``xty`` tile of weight slice ``t`` (None: a shared weight) accumulates.
Destination = Callable[[T.Body, "Value | None"], Value]


def _out_slice(wb: T.Body, t: Value | None) -> Value:
    """``out[t]`` of the worker's output (``out`` itself for a shared weight)."""
    return wb.ops["out"] if t is None else leading_slice(wb.ops["out"], t)


def lower_gradient_pair(
    xwt: OpAccess, xty: OpAccess, s_xwt: intra.Schedule, s: intra.Schedule
) -> None:
    """An ``xwt`` and the ``xty`` reading the same gradient rows (``hector-pair-gradient-gemms``,
    :mod:`~hector.lowering.cpu.gradient_pairs`) as one loop over the ``xty``'s row tiles: each
    tile's gradient rows are packed once, for both products. Where the two row counts differ
    at run time (inputs no compiled program passes), the ``xwt`` runs alone first and the
    ``xty`` skips its part. ``s_xwt`` and ``s`` (the ``xty``'s) share their row tiles and
    workers; each product keeps its own register block."""
    check_gemm_schedule(xwt, s_xwt)
    c0 = arith.constant(ir.IndexType.get(), 0)
    m_xwt = T.gemm_rows(T.Body(T.operands(xwt)), c0)
    m_xty = T.gemm_rows(T.Body(T.operands(xty)), c0)
    same = arith.cmpi(arith.CmpIPredicate.eq, m_xwt, m_xty)
    alone = scf.IfOp(arith.xori(same, arith.constant(ir.IntegerType.get_signless(1), 1)))
    with ir.InsertionPoint(alone.then_block):
        lower_gemm(xwt, s_xwt)
        scf.yield_([])
    lower_gemm(xty, s, Partner(xwt, s_xwt, same))


@dataclass(frozen=True)
class Partner:
    """An ``xwt`` computed by an ``xty``'s tiles from their packed row gradients (its rows are
    the ``xty``'s), under its own ``schedule``, where ``when`` holds (an ``i1``, the same for
    every tile)."""

    v: OpAccess
    schedule: intra.Schedule
    when: Value


def lower_gemm(v: OpAccess, s: intra.Schedule, partner: Partner | None = None) -> None:
    """A GEMM template in scheduled form (module docstring); for an ``xty``, ``partner`` is an
    ``xwt`` reading the same gradient rows, computed from the same packed tiles."""
    check_gemm_schedule(v, s)
    ops = T.operands(v)
    per_slice = T.slice_rows(v)
    b = T.Body(ops)
    m = T.gemm_rows(b, b.index(0))
    if not s.pack:
        _rows_over_workers(b, v, s, m)
        return
    ntiles = arith.ceildivui(m, b.index(s.tile_m))
    if intra.reduction_split(v, s) != "slices":
        packed = _packed_weight(b, v, s)  # once per call, read by every tile
        workers = _workers_for_gemm(b, v, s)
        gemm_tiles = _GemmTiles.of(v, s, m, _out_slice, False, packed, partner)
        workers.each(ntiles, gemm_tiles.worker)
        workers.finish()
        if packed is not None:
            memref.dealloc(packed)
        return
    # A weight gradient per slice: with rows sorted by slice, each slice but a worker's first
    # is accumulated by that worker alone, straight into out (_sorted_weight_gradient); rows
    # in any order need the workers' partial copies of the whole gradient.
    if per_slice is not None:
        _sorted_weight_gradient(b, v, s, m, ntiles, partner)
        return
    some = arith.cmpi(arith.CmpIPredicate.ugt, m, b.index(0))
    branch = scf.IfOp(arith.andi(some, _sorted_index(b, "weight_index", m)), has_else=True)
    with ir.InsertionPoint(branch.then_block):
        _sorted_weight_gradient(b, v, s, m, ntiles, partner)
        scf.yield_([])
    with ir.InsertionPoint(branch.else_block):
        workers = _workers_for_gemm(b, v, s)
        workers.each(ntiles, _GemmTiles.of(v, s, m, _out_slice, False, None, partner).worker)
        workers.finish()
        scf.yield_([])


def uses_panels(v: OpAccess, s: intra.Schedule) -> bool:
    """Whether a packed GEMM multiplies by its weight in column panels: its schedule says
    ``panels`` (:func:`check_gemm_schedule` accepts that only of an f32 ``xw``)."""
    return s.panels and s.pack


def _packed_weight(b: T.Body, v: OpAccess, s: intra.Schedule) -> Value | None:
    """An ``xw``'s weight packed once per call for its tiles: in bf16 pairs for bf16
    products, in column panels where :func:`uses_panels`; else None (read in place)."""
    if s.products == bf16.BF16 and v.attr("variant") == "xw":
        return bf16.weight_pairs(b, b.ops["weight"])
    if uses_panels(v, s):
        return weight_panels(b, b.ops["weight"], s.tile_n)
    return None


def _sorted_index(b: T.Body, role: str, m: Value) -> Value:
    """Whether ``role[0:m]`` never decreases (``i1``)."""
    true = arith.constant(ir.IntegerType.get_signless(1), 1)

    def step(i: Value, ok: Value) -> Value:
        prev = memref.load(b.ops[role], [arith.subi(i, b.index(1))])
        here = memref.load(b.ops[role], [i])
        return arith.andi(ok, arith.cmpi(arith.CmpIPredicate.sle, prev, here))

    return b.reduce(b.index(1), m, b.index(1), true, step)


def _sorted_weight_gradient(
    b: T.Body,
    v: OpAccess,
    s: intra.Schedule,
    m: Value,
    ntiles: Value,
    partner: Partner | None = None,
) -> None:
    """An ``xty`` into ``out[R, K, N]`` whose rows come sorted by slice, over the workers
    without partial copies of ``out``: a worker's chunk of rows holds a run of slices, and only
    its first slice can be shared with the workers before it. Worker ``p > 0`` accumulates that
    slice in a ``[K, N]`` buffer of its own and every other slice straight into ``out``, which
    no other worker writes; the buffers are added into ``out`` in worker order afterwards. The
    result is the same on every run."""
    threads = intra.worker_threads(v, s)
    per_slice = T.slice_rows(v)
    out = b.ops["out"]
    shape = ir.MemRefType(out.type)
    k_extent, n_extent = shape.get_dim_size(1), shape.get_dim_size(2)
    own = memref.alloc(ir.MemRefType.get([threads - 1, k_extent, n_extent], T.f32_type()), [], [])
    linalg.fill(b.f32(0.0), outs=[own])
    workers = Workers(b, threads, partials=False)
    tm = b.index(s.tile_m)

    def first_slice(lo: Value) -> Value:
        return _slice_of(b, arith.muli(lo, tm), per_slice)

    def worker(p: Value, lo: Value, hi: Value) -> None:
        c1 = b.index(1)
        later = arith.cmpi(arith.CmpIPredicate.ugt, p, b.index(0))
        buffer = leading_slice(own, arith.subi(arith.maxui(p, c1), c1))  # unused by worker 0
        # an empty chunk reads row 0's slice (there are rows here) and never uses it
        start = arith.select(arith.cmpi(arith.CmpIPredicate.ult, lo, hi), lo, b.index(0))
        first = first_slice(start)

        def dest(wb: T.Body, t: Value | None) -> Value:
            assert t is not None
            mine = arith.andi(later, arith.cmpi(arith.CmpIPredicate.eq, t, first))
            target = leading_slice(wb.ops["out"], t)
            choice = scf.IfOp(mine, [target.type], has_else=True)
            with ir.InsertionPoint(choice.then_block):
                scf.yield_([memref.cast(target.type, buffer)])
            with ir.InsertionPoint(choice.else_block):
                scf.yield_([target])
            return choice.results[0]

        _GemmTiles.of(v, s, m, dest, True, None, partner).worker(lo, hi, b)

    workers.each_worker(ntiles, worker)
    for p in range(1, threads):
        lo, hi = workers.chunk(b.index(p), ntiles)
        with b.guard(arith.cmpi(arith.CmpIPredicate.ult, lo, hi)):
            _add_into(b, leading_slice(out, first_slice(lo)), leading_slice(own, b.index(p - 1)))
    memref.dealloc(own)


def _add_into(b: T.Body, dest: Value, src: Value) -> None:
    """``dest += src`` for ``[K, N]`` slices, a row as one vector."""
    rows, width = T.static_dim(dest, 0), T.width(dest)
    vtype = ir.VectorType.get([width], T.f32_type())
    last = ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(2, 1))
    c0, pad = b.index(0), b.f32(0.0)
    with b.loop(c0, b.index(rows), b.index(1)) as k:
        old = vector.transfer_read(vtype, dest, [k, c0], last, pad, [True])
        add = vector.transfer_read(vtype, src, [k, c0], last, pad, [True])
        vector.transfer_write(None, arith.addf(old, add), dest, [k, c0], last, [True])


@dataclass(frozen=True, eq=False)
class _GemmTiles:
    """What every worker's tiles of one scheduled GEMM share. ``dest_of`` gives where an
    ``xty`` run of slice ``t`` accumulates; with ``owned`` its short runs go row at a time into
    the same place. An ``xw`` multiplies by ``packed_weight`` where it has one: its weight in
    bf16 pairs, or in f32 column panels (``panels``), in reduction blocks of ``tile_k``; with
    ``in_place`` its whole tiles multiply where their rows lie (:mod:`.in_place`). An
    ``xty``'s ``partner`` is the plan of an ``xwt`` whose rows are its packed row gradients
    (:func:`lower_gradient_pair`)."""

    v: OpAccess
    rows: Value
    dest_of: Destination
    owned: bool
    packed_weight: Value | None
    panels: bool
    in_place: bool
    tile_k: int
    variant: str
    epilogue: str
    per_slice: int | None
    sliced: bool
    tile_m: int
    k_extent: int
    n_extent: int
    block: tuple[int, int]
    pairs: bool
    partner: _GemmTiles | None
    partner_when: Value | None

    @classmethod
    def of(
        cls,
        v: OpAccess,
        s: intra.Schedule,
        m: Value,
        dest_of: Destination,
        owned: bool,
        packed_weight: Value | None = None,
        partner: Partner | None = None,
    ) -> _GemmTiles:
        """The tiles of GEMM ``v`` under schedule ``s``, over its ``m`` rows (an ``xty``'s
        ``partner``: an ``xwt`` over the same rows, fed its packed row gradients)."""
        variant = v.attr("variant")
        per_slice = T.slice_rows(v)
        ops = T.operands(v)
        n_extent = T.width(ops["weight"] if variant == "xty" else ops["out"])
        return cls(
            v=v,
            rows=m,
            dest_of=dest_of,
            owned=owned,
            packed_weight=packed_weight,
            panels=packed_weight is not None and uses_panels(v, s),
            in_place=s.in_place,
            tile_k=s.tile_k,
            variant=variant,
            epilogue=v.attr("epilogue"),
            per_slice=per_slice,
            sliced=ops.has("weight_index") or per_slice is not None,
            tile_m=s.tile_m,
            k_extent=T.static_dim(ops["a"], 1),
            n_extent=n_extent,
            block=(s.unroll, s.tile_n or n_extent),
            pairs=s.products == bf16.BF16,
            partner=None
            if partner is None
            else cls.of(partner.v, partner.schedule, m, _out_slice, owned=False),
            partner_when=None if partner is None else partner.when,
        )

    def worker(self, lo: Value, hi: Value, wb: T.Body) -> None:
        """A worker's body: its tiles ``[lo, hi)``, each packed and multiplied run by run of
        rows sharing a weight slice."""
        _WorkerTiles(self, wb).run(lo, hi)


class _WorkerTiles:
    """One worker's tile buffers (on its own stack) and the code of its tiles."""

    def __init__(self, plan: _GemmTiles, wb: T.Body) -> None:
        self.plan, self.wb = plan, wb
        tm, k_extent, n_extent = plan.tile_m, plan.k_extent, plan.n_extent
        self.scratch = None
        if plan.variant != "xty" and T.sums_row_apart(plan.epilogue, wb.ops["out"]):
            # rows fall back to the xw form
            self.scratch = worker_buffer([n_extent])
        if plan.variant == "xty" and plan.pairs:
            # the tile's rows interleaved two by two, [tm / 2, K] pairs, read down its columns
            self.lhs = worker_buffer([tm // 2, 2 * k_extent], paired=True)
        elif plan.variant == "xty":
            self.packed = worker_buffer([tm, k_extent])
            self.lhs = worker_buffer([k_extent, tm])
        if plan.variant == "xty":
            # the row gradients in the right operand's pair layout: [tm / 2, N] pairs
            self.rhs = (
                worker_buffer([tm // 2, 2 * n_extent], paired=True)
                if plan.pairs
                else worker_buffer([tm, n_extent])
            )
        else:
            self.lhs = worker_buffer([tm, k_extent], paired=plan.pairs)
            # bf16 pair products write their results from registers (_row_writer)
            self.acc = None if plan.pairs else worker_buffer([tm, n_extent])
        self.transposed = None
        if plan.variant == "xwt":
            self.transposed = TransposedSlice(wb, wb.ops["weight"], plan.sliced, plan.pairs)
        self.partner, self.partner_when = None, plan.partner_when
        if plan.partner is not None:  # its own operands, whichever output this worker writes
            self.partner = _WorkerTiles(plan.partner, T.Body(T.operands(plan.partner.v)))

    def run(self, lo: Value, hi: Value) -> None:
        """Tiles ``[lo, hi)``, each multiplied whole or run by run of rows sharing a slice."""
        wb, plan = self.wb, self.plan
        with wb.loop(lo, hi, wb.index(1)) as tile:
            i0 = arith.muli(tile, wb.index(plan.tile_m))
            mt = arith.minui(wb.index(plan.tile_m), arith.subi(plan.rows, i0))
            if not plan.sliced:
                self.multiply(i0, mt, None)
            else:
                _slice_runs(wb, i0, mt, plan.per_slice, self.multiply, self.rows)

    def multiply(self, i0: Value, mt: Value, t: Value | None) -> None:
        """Rows ``[i0, i0 + mt)``, all of weight slice ``t``, packed and multiplied."""
        if self.plan.variant == "xty":
            self._weight_gradient(i0, mt, t)
        else:
            self._rows_by_weight(i0, mt, t)

    def _weight_gradient(self, i0: Value, mt: Value, t: Value | None) -> None:
        wb, plan = self.wb, self.plan
        a = wb.ops["a"]
        scale = self.gradient_scale if wb.ops.has("row_scale") else None
        if plan.pairs:  # rows interleaved in pairs: the micro-kernel reads them down columns
            pack_gradients(wb, self.rhs, i0, mt, plan.tile_m, self.gradient_row, scale)
            pack_row_pairs(wb, self.lhs, i0, mt, plan.tile_m, a, self.a_row)
            dest = plan.dest_of(wb, t)
            bf16.matmul(wb, self.lhs, self.rhs, dest, plan.block, lhs_by_step=True)
        else:
            # rows packed one vector each, then transposed block by block in registers into
            # the [K, tile_m] left operand (no scalar stores down its columns)
            pack_row_vectors(wb, self.packed, i0, mt, plan.tile_m, a, self.a_row)
            transpose_into(wb, self.packed, self.lhs)
            pack_gradients(wb, self.rhs, i0, mt, plan.tile_m, self.gradient_row, scale)
            product(wb, self.lhs, self.rhs, plan.dest_of(wb, t), plan.block)
        if self.partner is not None:  # the same tile of row gradients, times W[t]^T
            with wb.guard(self.partner_when):
                self.partner._rows_by_weight(i0, mt, t, packed=self.rhs)

    def _rows_by_weight(
        self, i0: Value, mt: Value, t: Value | None, packed: Value | None = None
    ) -> None:
        """Rows ``[i0, i0 + mt)`` of an ``xw``/``xwt``, packed here, or already ``packed`` (its
        ``xty`` partner's row gradients); with ``in_place`` a whole tile reads ``a``'s rows
        where they lie."""
        wb, plan = self.wb, self.plan
        if self.transposed is not None:
            rhs_slice = self.transposed.of(t)
        else:
            held = plan.packed_weight if plan.packed_weight is not None else wb.ops["weight"]
            rhs_slice = held if t is None else leading_slice(held, t)
        if not plan.in_place or packed is not None:
            self._product(i0, mt, rhs_slice, packed)
            return
        whole = arith.cmpi(arith.CmpIPredicate.eq, mt, wb.index(plan.tile_m))
        branch = scf.IfOp(whole, has_else=True)
        with ir.InsertionPoint(branch.then_block):
            self._product(i0, mt, rhs_slice, rows_in_place(wb, i0, plan.tile_m))
            scf.yield_([])
        with ir.InsertionPoint(branch.else_block):
            self._product(i0, mt, rhs_slice, None)
            scf.yield_([])

    def _product(self, i0: Value, mt: Value, rhs_slice: Value, packed: Value | None) -> None:
        """Rows ``[i0, i0 + mt)`` times ``rhs_slice``: packed here, or from ``packed`` (a
        partner's packed row gradients, or a whole tile of ``a``'s rows in place); the
        epilogue writes them to ``out``."""
        wb, plan = self.wb, self.plan
        lhs = self.lhs if packed is None else packed
        if packed is None:
            pack_row_vectors(wb, lhs, i0, mt, plan.tile_m, wb.ops["a"], self.a_row)
        if plan.pairs:  # the epilogue straight from the pair micro-kernel's registers
            write = _row_writer(wb, i0, mt, plan.epilogue)
            bf16.matmul(wb, lhs, rhs_slice, None, plan.block, write=write)
            return
        assert self.acc is not None
        linalg.fill(wb.f32(0.0), outs=[self.acc])
        if plan.panels:
            panel_product(wb, lhs, rhs_slice, self.acc, plan.block, plan.tile_k)
        else:
            marked_matmul(lhs, rhs_slice, self.acc, plan.block)
        _gemm_epilogue(wb, self.acc, i0, mt, plan.n_extent, plan.epilogue)

    def rows(self, i0: Value, mt: Value) -> None:
        """Rows ``[i0, i0 + mt)`` one at a time (a run too short for a packed tile)."""
        wb, plan = self.wb, self.plan
        if self.partner is not None:
            with wb.guard(self.partner_when):
                self.partner.rows(i0, mt)
        if self.transposed is not None:
            _xwt_row_fallback(wb, plan.v, i0, mt, self.scratch, self.transposed)
        elif plan.owned:
            _xty_rows_into(wb, plan.v, i0, mt, plan.dest_of)
        else:
            _row_fallback(wb, plan.v, i0, mt, self.scratch)

    def a_row(self, i: Value) -> Value:
        """The row of ``a`` tile row ``i`` reads (through ``gather_index`` if any)."""
        wb = self.wb
        return wb.load_index("gather_index", i) if wb.ops.has("gather_index") else i

    def gradient_row(self, i: Value) -> Value:
        """The row gradient row ``i`` of an ``xty`` reads."""
        return T.xty_gradient_row(self.wb, i)

    def gradient_scale(self, i: Value) -> Value:
        """Row ``i``'s scale of its gradient."""
        return self.wb.load("row_scale", i, self.wb.index(0))


def _xty_rows_into(b: T.Body, v: OpAccess, i0: Value, mt: Value, dest_of: Destination) -> None:
    """Rows ``[i0, i0 + mt)`` of an ``xty`` one at a time, each adding ``a[r, :]^T ⊗ g_i``
    into ``dest_of(t)`` (the row form of ``_templates``, ``k`` outer, ``j`` inner)."""
    k_extent = T.static_dim(b.ops["a"], 1)
    n_extent = T.width(b.ops["weight"])
    c0, c1 = b.index(0), b.index(1)
    with b.loop(c0, mt, c1) as r:
        row = T.gemm_row_prologue(b, arith.addi(i0, r), T.slice_rows(v))
        dest = dest_of(b, row.t)
        with b.loop(c0, b.index(k_extent), c1) as k:
            av = b.load("a", row.r, k)
            with b.loop(c0, b.index(n_extent), c1) as j:
                p = arith.mulf(av, T.xty_gradient(b, row.i, j))
                memref.store(arith.addf(memref.load(dest, [k, j]), p), dest, [k, j])


def _epilogue_value(
    b: T.Body, val: Value, row: T.GemmRow, col: Value, epilogue: str, element: ir.Type
) -> Value:
    """One vector of a result row as ``out[row.o, col:]`` receives it: scaled, added to what
    ``out`` holds unless the epilogue stores, rounded to ``element``."""
    vtype = ir.VectorType(val.type)
    last = ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(2, 1))
    if row.scale is not None:
        val = exact(arith.mulf(val, vector.broadcast(vtype, row.scale)))
    if epilogue != "store":
        cur = vector.transfer_read(vtype, b.ops["out"], [row.o, col], last, b.f32(0.0), [True])
        val = exact(arith.addf(cur, val))
    return T.from_f32(val, element)


def _row_writer(b: T.Body, i0: Value, mt: Value, epilogue: str) -> bf16.RowWriter:
    """The tile epilogue of :func:`_gemm_epilogue` for the pair micro-kernel's registers: tile
    row ``r < mt`` goes to ``out[o]`` vector by vector, with the same operations per element;
    the zero rows past ``mt`` are dropped."""
    out = b.ops["out"]
    element = ir.MemRefType(out.type).element_type  # f32, or a half type a store rounds to
    last = ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(2, 1))

    def write(r: Value, values: list[tuple[Value, Value]]) -> None:
        with b.guard(arith.cmpi(arith.CmpIPredicate.ult, r, mt)):
            row = T.gemm_row_scale(b, T.gemm_row_prologue(b, arith.addi(i0, r)))
            for col, val in values:
                val = _epilogue_value(b, val, row, col, epilogue, element)
                vector.transfer_write(None, val, out, [row.o, col], last, [True])

    return write


def _gemm_epilogue(
    b: T.Body, acc: Value, i0: Value, mt: Value, n_extent: int, epilogue: str
) -> None:
    """``out[o, :] (=, +=) scale * acc[r, :]`` for the tile's rows, a whole row as one vector
    (element by element the same operations as the row-at-a-time form)."""
    vtype = ir.VectorType.get([n_extent], T.f32_type())
    last = ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(2, 1))
    c0, c1, pad = b.index(0), b.index(1), b.f32(0.0)
    out = b.ops["out"]
    element = ir.MemRefType(out.type).element_type  # f32, or a half type a store rounds to
    with b.loop(c0, mt, c1) as r:
        row = T.gemm_row_scale(b, T.gemm_row_prologue(b, arith.addi(i0, r)))
        val = vector.transfer_read(vtype, acc, [r, c0], last, pad, [True])
        val = _epilogue_value(b, val, row, c0, epilogue, element)
        vector.transfer_write(None, val, out, [row.o, c0], last, [True])
