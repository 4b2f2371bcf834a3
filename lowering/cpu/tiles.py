"""Scheduled CPU form of the hector_intra templates: packed tiles, micro-kernels, workers.

``convert-hector-intra-to-scf`` calls into this module for a template that carries a
``schedule`` (``hector_intra.Schedule``, chosen by ``hector-schedule``):

* **Workers.** With ``parallel = "rows"`` the template's rows are cut into ``threads`` static
  chunks, one per iteration of an ``scf.forall`` (``async-parallel-for`` turns it into tasks
  of MLIR's async runtime). A worker whose rows may meet others' in ``out`` (a scattering or
  weight-gradient accumulation, a sum or max reduction) writes its own partial output; the
  partials are then combined row by row in worker order. No atomics race, and the result is the
  same on every run with the same thread count. A weight gradient per slice whose rows come
  sorted by slice (checked at run time) needs no partial copy of the whole gradient: each worker
  owns the slices of its rows but its first, which it sums in a ``[K, N]`` buffer of its own.
* **Tiles.** A GEMM worker walks its rows ``tile_m`` at a time: gathered rows of ``a`` are
  packed into a contiguous ``[tile_m, K]`` tile (zero rows past the end, so every product has
  static shapes), then one ``linalg.matmul`` multiplies the tile by its weight slice. A tile
  whose rows use different weight slices (a relation boundary when rows are sorted by type, or
  an unsorted ``weight_index``) falls back to the row-at-a-time form of ``_templates``.
* **Micro-kernel.** Each tile's ``linalg.matmul`` is marked with its register block and
  rewritten by a transform-dialect script built here (``micro_kernel_script``): tiled to
  ``unroll × tile_n × 1``, vectorised, the contraction lowered to outer products (FMAs), and the
  accumulators hoisted out of the reduction loop, so they stay in registers.

Weight gradients (``xty``) multiply the transposed packed tile (rows packed a vector each, then
transposed in 16 × 16 register blocks) by the packed row gradients straight into the worker's
weight-gradient slice. ``xwt`` multiplies by the weight slice transposed into a buffer of the
worker's own (``TransposedSlice``), made again only when a run of rows needs another slice; no
copy of the whole weight is written per call. Epilogues and the fold of partials move whole rows
as vectors.
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir
from mlir.dialects import arith, linalg, memref, scf, transform, vector
from mlir.dialects.transform import interpreter, structured
from mlir.dialects.transform import vector as transform_vector

from ...dialects import hector_intra as intra
from ...dialects.builders import OpAccess
from ...passes.registry import PassFailure
from ...passes.walk import walk_ops
from .. import templates as T
from . import bf16

Value = T.Value

#: Attribute marking a tile's ``linalg.matmul`` with its register block ``[rows, cols, 1]``.
MICRO_KERNEL = "hector.micro_kernel"
#: Attribute marking vector arithmetic that must round like the scalar row-at-a-time form (an
#: epilogue's scale and add): :func:`apply_micro_kernels` does not let LLVM contract it.
EXACT = "hector.exact_rounding"


def _exact(value: Value) -> Value:
    """``value``, its defining op marked :data:`EXACT`."""
    value.owner.attributes[EXACT] = ir.UnitAttr.get()
    return value


def _i64_array(values: list[int]) -> ir.Attribute:
    return ir.DenseI64ArrayAttr.get(values)


def _dims(value: Value) -> list[Value]:
    """Every dimension of a memref, as ``index`` values (static ones as constants)."""
    shape = ir.MemRefType(value.type)
    out = []
    for i in range(shape.rank):
        d = shape.get_dim_size(i)
        if d == ir.ShapedType.get_dynamic_size():
            out.append(memref.dim(value, arith.constant(ir.IndexType.get(), i)))
        else:
            out.append(arith.constant(ir.IndexType.get(), d))
    return out


def _slice(source: Value, first: Value) -> Value:
    """``source[first]`` as a rank-reduced view (a weight slice, a worker's partial)."""
    shape = ir.MemRefType(source.type)
    dyn = ir.ShapedType.get_dynamic_size()
    rest = [shape.get_dim_size(i) for i in range(1, shape.rank)]
    strides, _ = shape.get_strides_and_offset()
    layout = ir.StridedLayoutAttr.get(dyn, list(strides[1:]))
    result = ir.MemRefType.get(rest, shape.element_type, layout)
    sizes: list[Value | int] = [1]
    for i, d in enumerate(rest):
        index = arith.constant(ir.IndexType.get(), i + 1)
        sizes.append(memref.dim(source, index) if d == dyn else d)
    offsets: list[Value | int] = [first] + [0] * len(rest)
    return memref.subview(source, offsets, sizes, [1] * shape.rank, result_type=result)


class Workers:
    """``threads`` static chunks of ``[0, count)`` and, when they may collide in ``out``, one
    partial output per worker after the first, combined into ``out`` in worker order."""

    def __init__(self, b: T.Body, threads: int, partials: bool, init: float = 0.0) -> None:
        self.b = b
        self.threads = threads
        self.partials: Value | None = None
        self.init = init
        self.combine = arith.addf
        if threads > 1 and partials:
            out = b.ops["out"]
            shape = ir.MemRefType(out.type)
            dyn = ir.ShapedType.get_dynamic_size()
            dims = [threads - 1] + [shape.get_dim_size(i) for i in range(shape.rank)]
            sizes = [d for i, d in enumerate(_dims(out)) if shape.get_dim_size(i) == dyn]
            self.partials = memref.alloc(ir.MemRefType.get(dims, shape.element_type), sizes, [])

    def each(self, count: Value, body: Callable[[Value, Value, T.Body], None]) -> None:
        """Build ``body(lo, hi, b)`` once for every worker: its chunk ``[lo, hi)`` of
        ``[0, count)`` and a body ``b`` writing to its own output. With partials the first
        worker writes to ``out`` and the others each fill their partial first (in parallel,
        and into their own core's cache); the body reads its output as the partials' strided
        type, so its code exists once. Called once."""
        b = self.b
        if self.threads == 1:
            body(b.index(0), count, b)
            return
        forall = scf.ForallOp([0], [self.threads], [1])
        with ir.InsertionPoint(forall.body):
            p = forall.induction_variables[0]
            lo, hi = self.chunk(p, count)
            if self.partials is None:
                body(lo, hi, b)
            else:
                body(lo, hi, T.Body(T.Operands({**b.ops.values, "out": self._output(p)})))
            scf.InParallelOp()

    def _output(self, p: Value) -> Value:
        """Worker ``p``'s output: ``out`` for the first, its partial (filled) for the others,
        both as the partial's type."""
        b = self.b
        assert self.partials is not None
        c1 = b.index(1)
        first = arith.cmpi(arith.CmpIPredicate.eq, p, b.index(0))
        partial = _slice(self.partials, arith.subi(arith.maxui(p, c1), c1))  # worker 0: unused
        choice = scf.IfOp(first, [partial.type], has_else=True)
        with ir.InsertionPoint(choice.then_block):
            scf.yield_([memref.cast(partial.type, b.ops["out"])])
        with ir.InsertionPoint(choice.else_block):
            linalg.fill(b.f32(self.init), outs=[partial])
            scf.yield_([partial])
        return choice.results[0]

    def chunk(self, p: Value, count: Value) -> tuple[Value, Value]:
        """Worker ``p``'s static chunk ``[lo, hi)`` of ``[0, count)``."""
        b, ct = self.b, self.b.index(self.threads)
        lo = arith.divui(arith.muli(p, count), ct)
        hi = arith.divui(arith.muli(arith.addi(p, b.index(1)), count), ct)
        return lo, hi

    def each_worker(self, count: Value, body: Callable[[Value, Value, Value], None]) -> None:
        """Build ``body(p, lo, hi)`` once for all workers (no partials): worker ``p`` and its
        chunk ``[lo, hi)`` of ``[0, count)``."""
        assert self.partials is None
        forall = scf.ForallOp([0], [self.threads], [1])
        with ir.InsertionPoint(forall.body):
            p = forall.induction_variables[0]
            body(p, *self.chunk(p, count))
            scf.InParallelOp()

    def finish(self, combine: Callable[[Value, Value], Value] = arith.addf) -> None:
        """Fold the partials into ``out`` (worker order), in parallel over its first dimension;
        free them."""
        if self.partials is None:
            return
        b, out = self.b, self.b.ops["out"]
        dims = _dims(out)
        c0, c1 = b.index(0), b.index(1)

        def rows(lo: Value, hi: Value, _: T.Body) -> None:
            with b.loop(lo, hi, c1) as i:
                self._combine_row(i, dims[1:], combine, c0, c1)

        Workers(b, self.threads, partials=False).each(dims[0], rows)
        memref.dealloc(self.partials)

    def _combine_row(
        self,
        i: Value,
        rest: list[Value],
        combine: Callable[[Value, Value], Value],
        c0: Value,
        c1: Value,
    ) -> None:
        b, out = self.b, self.b.ops["out"]
        assert self.partials is not None

        shape = ir.MemRefType(out.type)
        lanes = shape.get_dim_size(shape.rank - 1) if shape.rank > 1 else 1
        if lanes == ir.ShapedType.get_dynamic_size():
            lanes = 1
        if lanes > 1:  # a static last dimension folds a whole row as one vector
            rest = rest[:-1]
        vtype = ir.VectorType.get([lanes], shape.element_type)
        pad = arith.constant(shape.element_type, 0.0)

        def load(source: Value, idx: list[Value]) -> Value:
            if lanes == 1:
                return memref.load(source, idx)
            rank = ir.MemRefType(source.type).rank
            last = ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(rank, 1))
            return vector.transfer_read(vtype, source, [*idx, c0], last, pad, [True])

        def store(value: Value, idx: list[Value]) -> None:
            if lanes == 1:
                memref.store(value, out, idx)
                return
            last = ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(shape.rank, 1))
            vector.transfer_write(None, value, out, [*idx, c0], last, [True])

        def element(idx: list[Value]) -> None:
            acc = load(out, idx)
            for p in range(self.threads - 1):
                acc = combine(acc, load(self.partials, [b.index(p), *idx]))
            store(acc, idx)

        def nest(idx: list[Value], todo: list[Value]) -> None:
            if not todo:
                element(idx)
                return
            with b.loop(c0, todo[0], c1) as j:
                nest([*idx, j], todo[1:])

        nest([i], rest)


# ---- GEMM ------------------------------------------------------------------------------------


def _workers_for_gemm(b: T.Body, v: OpAccess, s: intra.Schedule) -> Workers:
    """Workers for a GEMM, with partial outputs where the spec's rule asks for them
    (``hector_intra.worker_partials``: a scatter, or any weight gradient, that accumulates)."""
    return Workers(b, intra.worker_threads(v, s), intra.worker_partials(v, s) > 0)


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


def _packed_row(
    b: T.Body,
    r: Value,
    i0: Value,
    mt: Value,
    source: Value,
    row_of: Callable[[Value], Value],
    scale_of: Callable[[Value], Value] | None = None,
    stored: bool = False,
) -> Value:
    """Row ``r`` of a tile of ``source``'s rows ``row_of(i0 + r)`` (times ``scale_of``),
    zeros for ``r >= mt``, as one f32 vector as wide as ``source``; with ``stored`` and no
    scale, in ``source``'s own element type (a bf16 row packed in pairs as it is)."""
    width = T.width(source)
    element = ir.MemRefType(source.type).element_type
    keep = stored and scale_of is None
    vtype = ir.VectorType.get([width], element if keep else T.f32_type())
    zero = ir.FloatAttr.get(vtype.element_type, 0.0)
    zeros = arith.constant(vtype, ir.DenseElementsAttr.get_splat(vtype, zero))
    last = ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(2, 1))
    c0 = b.index(0)
    inside = arith.cmpi(arith.CmpIPredicate.ult, r, mt)
    i = arith.select(inside, arith.addi(i0, r), i0)  # a safe row past the end
    if keep:
        pad = arith.constant(element, 0.0)
        row = vector.transfer_read(vtype, source, [row_of(i), c0], last, pad, [True])
    else:
        row = T.read_vector(vtype, source, [row_of(i), c0], last, [True])
    if scale_of is not None:
        row = arith.mulf(row, vector.broadcast(vtype, scale_of(i)))
    return arith.select(inside, row, zeros)


def _pack_row_vectors(
    b: T.Body,
    tile: Value,
    i0: Value,
    mt: Value,
    tm: int,
    source: Value,
    row_of: Callable[[Value], Value],
    scale_of: Callable[[Value], Value] | None = None,
) -> None:
    """``tile[r, :] = source[row_of(i0 + r), :]`` (times ``scale_of(i0 + r)``) for ``r < mt``
    and zeros after, a whole row as one vector: the rows of ``source`` and ``tile`` are
    contiguous and as wide as the tile, so packing costs a vector load and store per row. A
    tile of bf16 pairs (``i32``, half as wide) takes each row rounded to bf16
    (``bf16.row_pairs``)."""
    pairs = isinstance(ir.MemRefType(tile.type).element_type, ir.IntegerType)
    last = ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(2, 1))
    c0, c1 = b.index(0), b.index(1)
    with b.loop(c0, b.index(tm), c1) as r:
        row = _packed_row(b, r, i0, mt, source, row_of, scale_of, stored=pairs)
        if pairs:
            row = bf16.row_pairs(row)
        vector.transfer_write(None, row, tile, [r, c0], last, [True])


def _matmul(lhs: Value, rhs: Value, acc: Value, block: tuple[int, int]) -> None:
    """``acc += lhs @ rhs``, marked for the micro-kernel script with its register block."""
    op = linalg.matmul(lhs, rhs, outs=[acc])
    owner = op.owner if isinstance(op, ir.Value) else op
    owner.attributes[MICRO_KERNEL] = _i64_array([block[0], block[1], 1])


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
    """An unpacked schedule: the row-at-a-time form, each worker on its chunk of rows."""
    workers = _workers_for_gemm(b, v, s)
    n_extent = T.width(b.ops["out"])

    def rows(lo: Value, hi: Value, wb: T.Body) -> None:
        scratch = None
        if v.attr("variant") == "xw" and v.attr("epilogue") != "store":
            scratch = memref.alloca(ir.MemRefType.get([n_extent], T.f32_type()), [], [])
        _row_fallback(wb, v, lo, arith.subi(hi, lo), scratch)

    workers.each(m, rows)
    workers.finish()


#: Side of the square blocks a weight slice is transposed in (smaller when it does not divide).
TRANSPOSE_BLOCK = 16


def _block_side(extent: int) -> int:
    return next(c for c in (TRANSPOSE_BLOCK, 8, 4, 2, 1) if extent % c == 0)


def _identity(rank: int) -> ir.AffineMapAttr:
    return ir.AffineMapAttr.get(ir.AffineMap.get_identity(rank))


def _transpose_into(b: T.Body, src: Value, dst: Value) -> None:
    """``dst = src^T`` for a ``[rows, cols]`` weight slice, in blocks read as
    ``vector<bk x bn>``, transposed in registers and written as whole rows of ``dst`` (walking a
    column of a power-of-two-wide matrix an element at a time maps every element to the same few
    cache sets)."""
    rows, cols = T.static_dim(src, 0), T.static_dim(src, 1)
    bk, bn = _block_side(rows), _block_side(cols)
    f32, c0 = T.f32_type(), b.index(0)
    with b.loop(c0, b.index(rows), b.index(bk)) as k:
        with b.loop(c0, b.index(cols), b.index(bn)) as n:
            block = T.read_vector(
                ir.VectorType.get([bk, bn], f32), src, [k, n], _identity(2), [True, True]
            )
            flipped = vector.transpose(ir.VectorType.get([bn, bk], f32), block, [1, 0])
            vector.transfer_write(None, flipped, dst, [n, k], _identity(2), [True, True])


class TransposedSlice:
    """A worker's transposed copy of the weight slice its ``xwt`` rows multiply by: a
    ``[N, K]`` buffer of its own, made again only when a run of rows uses another slice (rows
    sorted by type change slice a few times per worker), so no copy of the whole weight is
    written and read back."""

    def __init__(self, b: T.Body, weight: Value, sliced: bool, pairs: bool = False) -> None:
        self.b, self.weight, self.sliced = b, weight, sliced
        shape = ir.MemRefType(weight.type)
        k_extent, n_extent = T.width(weight), T.static_dim(weight, shape.rank - 2)
        self.buf = memref.alloca(ir.MemRefType.get([k_extent, n_extent], T.f32_type()), [], [])
        # bf16 products multiply by the transposed slice in pairs (bf16.py)
        self.pairs = (
            memref.alloca(bf16.pairs_type([k_extent // 2, n_extent]), [], []) if pairs else None
        )
        if not sliced:
            self._make(weight)
            return
        self.current = memref.alloca(ir.MemRefType.get([1], ir.IndexType.get()), [], [])
        # no slice yet: the number of slices is never a slice
        memref.store(_dims(weight)[0], self.current, [b.index(0)])

    def holds(self, t: Value) -> Value:
        """Whether the buffer holds slice ``t`` (``i1``)."""
        held = memref.load(self.current, [self.b.index(0)])
        return arith.cmpi(arith.CmpIPredicate.eq, held, t)

    def _make(self, weight: Value) -> None:
        _transpose_into(self.b, weight, self.buf)
        if self.pairs is not None:
            bf16.pair_rows_of(self.b, self.buf, self.pairs)

    def of(self, t: Value | None) -> Value:
        """The transposed slice ``t`` (the shared weight's when ``t`` is None), made if the
        buffer holds another; in bf16 pairs when the tiles multiply pairs."""
        held = self.buf if self.pairs is None else self.pairs
        if t is None:
            return held
        other = arith.cmpi(arith.CmpIPredicate.ne, memref.load(self.current, [self.b.index(0)]), t)
        branch = scf.IfOp(other)
        with ir.InsertionPoint(branch.then_block):
            self._make(_slice(self.weight, t))
            memref.store(t, self.current, [self.b.index(0)])
            scf.yield_([])
        return held


#: Widest register block row the micro-kernel takes (wider ones spill, or crash LLVM's
#: lowering of the vector ops).
MAX_TILE_N = 32


def check_gemm_schedule(v: OpAccess, s: intra.Schedule) -> None:
    """Refuse a packed GEMM schedule the micro-kernel cannot take (``ValueError``): its
    register block must divide the tile's product, so every block has static shapes."""
    if not s.pack:
        if s.products == bf16.BF16:
            raise ValueError("bf16 products multiply packed tiles: the schedule must pack")
        return
    variant = v.attr("variant")
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
    return wb.ops["out"] if t is None else _slice(wb.ops["out"], t)


def lower_gemm(v: OpAccess, s: intra.Schedule) -> None:
    """A GEMM template in scheduled form (module docstring)."""
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
        pairs = None
        if s.products == bf16.BF16 and v.attr("variant") == "xw":
            pairs = bf16.weight_pairs(b, b.ops["weight"])  # once per call, read by every tile
        workers = _workers_for_gemm(b, v, s)
        workers.each(ntiles, _tiles(v, s, m, _out_slice, owned=False, weight_pairs=pairs))
        workers.finish()
        if pairs is not None:
            memref.dealloc(pairs)
        return
    # A weight gradient per slice: with rows sorted by slice, each slice but a worker's first
    # is accumulated by that worker alone, straight into out (_sorted_weight_gradient); rows
    # in any order need the workers' partial copies of the whole gradient.
    if per_slice is not None:
        _sorted_weight_gradient(b, v, s, m, ntiles)
        return
    some = arith.cmpi(arith.CmpIPredicate.ugt, m, b.index(0))
    branch = scf.IfOp(arith.andi(some, _sorted_index(b, "weight_index", m)), has_else=True)
    with ir.InsertionPoint(branch.then_block):
        _sorted_weight_gradient(b, v, s, m, ntiles)
        scf.yield_([])
    with ir.InsertionPoint(branch.else_block):
        workers = _workers_for_gemm(b, v, s)
        workers.each(ntiles, _tiles(v, s, m, _out_slice, owned=False))
        workers.finish()
        scf.yield_([])


def _sorted_index(b: T.Body, role: str, m: Value) -> Value:
    """Whether ``role[0:m]`` never decreases (``i1``)."""
    true = arith.constant(ir.IntegerType.get_signless(1), 1)

    def step(i: Value, ok: Value) -> Value:
        prev = memref.load(b.ops[role], [arith.subi(i, b.index(1))])
        here = memref.load(b.ops[role], [i])
        return arith.andi(ok, arith.cmpi(arith.CmpIPredicate.sle, prev, here))

    return b.reduce(b.index(1), m, b.index(1), true, step)


def _sorted_weight_gradient(
    b: T.Body, v: OpAccess, s: intra.Schedule, m: Value, ntiles: Value
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
        buffer = _slice(own, arith.subi(arith.maxui(p, c1), c1))  # unused by worker 0
        # an empty chunk reads row 0's slice (there are rows here) and never uses it
        start = arith.select(arith.cmpi(arith.CmpIPredicate.ult, lo, hi), lo, b.index(0))
        first = first_slice(start)

        def dest(wb: T.Body, t: Value | None) -> Value:
            assert t is not None
            mine = arith.andi(later, arith.cmpi(arith.CmpIPredicate.eq, t, first))
            target = _slice(wb.ops["out"], t)
            choice = scf.IfOp(mine, [target.type], has_else=True)
            with ir.InsertionPoint(choice.then_block):
                scf.yield_([memref.cast(target.type, buffer)])
            with ir.InsertionPoint(choice.else_block):
                scf.yield_([target])
            return choice.results[0]

        _tiles(v, s, m, dest, owned=True)(lo, hi, b)

    workers.each_worker(ntiles, worker)
    for p in range(1, threads):
        lo, hi = workers.chunk(b.index(p), ntiles)
        with b.guard(arith.cmpi(arith.CmpIPredicate.ult, lo, hi)):
            _add_into(b, _slice(out, first_slice(lo)), _slice(own, b.index(p - 1)))
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


def _buffer(shape: list[int], paired: bool = False) -> Value:
    """A worker's f32 buffer, or (``paired``) one of bf16 pairs half as wide."""
    if paired:
        return memref.alloca(bf16.pairs_type([*shape[:-1], shape[-1] // 2]), [], [])
    return memref.alloca(ir.MemRefType.get(shape, T.f32_type()), [], [])


def _product(b: T.Body, lhs: Value, rhs: Value, acc: Value, block: tuple[int, int]) -> None:
    """``acc += lhs @ rhs``: f32 operands through the micro-kernel script, bf16 pairs
    (``i32`` buffers) through the pair dot-product micro-kernel."""
    if isinstance(ir.MemRefType(lhs.type).element_type, ir.IntegerType):
        bf16.matmul(b, lhs, rhs, acc, block)
    else:
        _matmul(lhs, rhs, acc, block)


def _pack_gradients(
    b: T.Body,
    rhs: Value,
    i0: Value,
    mt: Value,
    tm: int,
    row_of: Callable[[Value], Value],
    scale_of: Callable[[Value], Value] | None,
) -> None:
    """An ``xty``'s right operand: the tile's row gradients ``[tm, N]`` in f32, or in bf16
    pairs ``[tm / 2, N]`` when ``rhs`` holds pairs."""
    weight = b.ops["weight"]
    if not isinstance(ir.MemRefType(rhs.type).element_type, ir.IntegerType):
        _pack_row_vectors(b, rhs, i0, mt, tm, weight, row_of, scale_of)
        return

    def row(r: Value, _: Value) -> Value:
        return _packed_row(b, r, i0, mt, weight, row_of, scale_of)

    bf16.pack_rows_in_pairs(b, rhs, tm, row)


def _tiles(
    v: OpAccess,
    s: intra.Schedule,
    m: Value,
    dest_of: Destination,
    owned: bool,
    weight_pairs: Value | None = None,
) -> Callable[[Value, Value, T.Body], None]:
    """A worker's body: its tiles ``[lo, hi)``, each packed and multiplied run by run of rows
    sharing a weight slice. ``dest_of`` gives where an ``xty`` run of slice ``t`` accumulates;
    with ``owned`` its short runs go row at a time into the same place. With bf16 products an
    ``xw`` multiplies by ``weight_pairs``, its weight in pairs."""
    variant, epilogue = v.attr("variant"), v.attr("epilogue")
    per_slice = T.slice_rows(v)
    tm = s.tile_m
    ops = T.operands(v)
    sliced = ops.has("weight_index") or per_slice is not None
    k_extent = T.static_dim(ops["a"], 1)
    n_extent = T.width(ops["weight"] if variant == "xty" else ops["out"])
    block = (s.unroll, s.tile_n or n_extent)

    pairs = s.products == bf16.BF16
    buffer = _buffer

    def tiles(lo: Value, hi: Value, wb: T.Body) -> None:
        weight = wb.ops["weight"]
        scratch = None
        if variant != "xty" and epilogue != "store":  # rows fall back to the xw row form
            scratch = buffer([n_extent])
        if variant == "xty":
            packed = buffer([tm, k_extent])
            lhs = buffer([k_extent, tm])
            lhs_pairs = buffer([k_extent, tm], paired=True) if pairs else lhs
            # the row gradients in the right operand's pair layout: [tm / 2, N] pairs
            rhs = buffer([tm // 2, 2 * n_extent], paired=True) if pairs else buffer([tm, n_extent])
        else:
            lhs = buffer([tm, k_extent], paired=pairs)
            acc = buffer([tm, n_extent])
        transposed = TransposedSlice(wb, weight, sliced, pairs) if variant == "xwt" else None
        with wb.loop(lo, hi, wb.index(1)) as tile:
            i0 = arith.muli(tile, wb.index(tm))
            mt = arith.minui(wb.index(tm), arith.subi(m, i0))

            def a_row(i: Value, wb: T.Body = wb) -> Value:
                return wb.load_index("gather_index", i) if wb.ops.has("gather_index") else i

            def gradient_row(i: Value, wb: T.Body = wb) -> Value:
                return T.xty_gradient_row(wb, i)

            def gradient_scale(i: Value, wb: T.Body = wb) -> Value:
                return wb.load("row_scale", i, wb.index(0))

            def multiply(i0: Value, mt: Value, t: Value | None) -> None:
                if variant == "xty":
                    # rows packed one vector each, then transposed block by block in registers
                    # into the [K, tile_m] left operand (no scalar stores down its columns)
                    _pack_row_vectors(wb, packed, i0, mt, tm, wb.ops["a"], a_row)
                    _transpose_into(wb, packed, lhs)
                    scale = gradient_scale if wb.ops.has("row_scale") else None
                    if pairs:
                        bf16.pair_columns_of(wb, lhs, lhs_pairs)
                    _pack_gradients(wb, rhs, i0, mt, tm, gradient_row, scale)
                    _product(wb, lhs_pairs, rhs, dest_of(wb, t), block)
                    return
                _pack_row_vectors(wb, lhs, i0, mt, tm, wb.ops["a"], a_row)
                if transposed is not None:
                    rhs_slice = transposed.of(t)
                else:
                    held = weight_pairs if weight_pairs is not None else weight
                    rhs_slice = held if t is None else _slice(held, t)
                if pairs:  # the pair micro-kernel starts its accumulators at zero
                    bf16.matmul(wb, lhs, rhs_slice, acc, block, fresh=True)
                else:
                    linalg.fill(wb.f32(0.0), outs=[acc])
                    _matmul(lhs, rhs_slice, acc, block)
                _gemm_epilogue(wb, acc, i0, mt, n_extent, epilogue)

            def rows(i0: Value, mt: Value, wb: T.Body = wb) -> None:
                if transposed is not None:
                    _xwt_row_fallback(wb, v, i0, mt, scratch, transposed)
                elif owned:
                    _xty_rows_into(wb, v, i0, mt, dest_of)
                else:
                    _row_fallback(wb, v, i0, mt, scratch)

            if not sliced:
                multiply(i0, mt, None)
            else:
                _slice_runs(wb, i0, mt, per_slice, multiply, rows)

    return tiles


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


def _gemm_epilogue(
    b: T.Body, acc: Value, i0: Value, mt: Value, n_extent: int, epilogue: str
) -> None:
    """``out[o, :] (=, +=) scale * acc[r, :]`` for the tile's rows, a whole row as one vector
    (element by element the same operations as the row-at-a-time form)."""
    vtype = ir.VectorType.get([n_extent], T.f32_type())
    last = ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(2, 1))
    c0, c1, pad = b.index(0), b.index(1), b.f32(0.0)
    out = b.ops["out"]
    with b.loop(c0, mt, c1) as r:
        row = T.gemm_row_scale(b, T.gemm_row_prologue(b, arith.addi(i0, r)))
        val = vector.transfer_read(vtype, acc, [r, c0], last, pad, [True])
        if row.scale is not None:
            val = _exact(arith.mulf(val, vector.broadcast(vtype, row.scale)))
        if epilogue != "store":
            cur = vector.transfer_read(vtype, out, [row.o, c0], last, pad, [True])
            val = _exact(arith.addf(cur, val))
        vector.transfer_write(None, val, out, [row.o, c0], last, [True])


# ---- traversal -------------------------------------------------------------------------------


def lower_traversal(v: OpAccess, s: intra.Schedule) -> None:
    """A traversal template with its rows spread over workers. A reduction shares them as
    ``hector_intra.reduction_split`` says: by owned output rows, or by partials (a reduction
    into nearly as many rows as it reads then runs on one worker, decided at run time)."""
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
    out_rows = _dims(b.ops["out"])[0]
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

    Workers(b, threads, partials=False).each(_dims(b.ops["out"])[0], share)


# ---- the micro-kernel script -----------------------------------------------------------------


def micro_kernel_blocks(module_op: ir.Operation) -> list[list[int]]:
    """The distinct register blocks of the marked matmuls in ``module_op``."""
    found: list[list[int]] = []
    for op in walk_ops(module_op):
        if op.name == "linalg.matmul" and MICRO_KERNEL in op.attributes:
            attr = op.attributes[MICRO_KERNEL]
            if not isinstance(attr, ir.DenseI64ArrayAttr) or any(n <= 0 for n in attr):
                raise PassFailure(
                    f"{MICRO_KERNEL} must be an array<i64: ...> of positive tile sizes, got {attr}",
                    op.location,
                )
            block = list(attr)
            if block not in found:
                found.append(block)
    return found


def micro_kernel_script(blocks: list[list[int]]) -> tuple[ir.Module, ir.Operation]:
    """A transform module whose ``__transform_main`` tiles every marked matmul to its register
    block, vectorises it, lowers the contraction to outer products and hoists the accumulators
    out of the reduction loop."""
    script = ir.Module.create()
    script.operation.attributes["transform.with_named_sequence"] = ir.UnitAttr.get()
    any_op = transform.AnyOpType.get()
    with ir.InsertionPoint(script.body):
        seq = transform.NamedSequenceOp(
            "__transform_main", [any_op], [], arg_attrs=[{"transform.readonly": ir.UnitAttr.get()}]
        )
    with ir.InsertionPoint(seq.body):
        root = seq.bodyTarget
        for block in blocks:
            attrs = ir.DictAttr.get({MICRO_KERNEL: _i64_array(block)})
            matmuls = structured.MatchOp(any_op, root, ops=["linalg.matmul"], op_attrs=attrs)
            tiled = structured.TileUsingForOp(matmuls.result, sizes=block)
            structured.VectorizeOp(tiled.tiled_linalg_op)
        funcs = structured.MatchOp(any_op, root, ops=["func.func"])
        # First the weight-slice transposes (TransposedSlice; the only vector.transpose ops so
        # far) into shuffles of whole 16-lane rows, instead of one element at a time.
        apply = transform.ApplyPatternsOp(funcs.result)
        with ir.InsertionPoint(apply.patterns):
            transform_vector.ApplyLowerTransposePatternsOp(
                lowering_strategy=transform_vector.VectorTransposeLowering.Shuffle16x16
            )
        apply = transform.ApplyPatternsOp(funcs.result)
        with ir.InsertionPoint(apply.patterns):
            transform_vector.ApplyLowerContractionPatternsOp(
                lowering_strategy=transform_vector.VectorContractLowering.OuterProduct
            )
            transform_vector.ApplyTransferPermutationPatternsOp()
            transform_vector.ApplyLowerOuterProductPatternsOp()
            transform.ApplyCanonicalizationPatternsOp()

        structured.HoistRedundantVectorTransfersOp(any_op, funcs.result)
        transform.YieldOp()
    return script, seq.operation


def apply_micro_kernels(module_op: ir.Operation) -> None:
    """Run the micro-kernel script on every marked matmul of ``module_op``."""
    blocks = micro_kernel_blocks(module_op)
    if not blocks:
        return
    script, main = micro_kernel_script(blocks)
    interpreter.apply_named_sequence(module_op, main, script)
    _contract_vector_math(module_op)


def _contract_vector_math(module_op: ir.Operation) -> None:
    """Let LLVM fuse the micro-kernels' vector multiply-adds into FMAs (``fastmath<contract>``
    on vector ``mulf``/``addf``; scalar code, and vector code marked :data:`EXACT`, keeps its
    exact rounding)."""
    contract = ir.Attribute.parse("#arith.fastmath<contract>")
    for op in walk_ops(module_op):
        if op.name in ("arith.mulf", "arith.addf") and isinstance(
            op.results[0].type, ir.VectorType
        ):
            if EXACT in op.attributes:
                del op.attributes[EXACT]
            else:
                op.attributes["fastmath"] = contract
