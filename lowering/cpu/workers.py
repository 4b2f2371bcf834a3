"""Deterministic workers of a scheduled CPU template: static row chunks and partial outputs.

With ``parallel = "rows"`` (``hector_intra.Schedule``) a template's rows are cut into ``threads``
static chunks, one per iteration of an ``scf.forall`` (``async-parallel-for`` turns it into tasks
of MLIR's async runtime). A worker whose rows may meet others' in ``out`` (a scattering or
weight-gradient accumulation, a sum or max reduction) writes its own partial output; the
partials are then combined row by row in worker order. No atomics race, and the result is the
same on every run with the same thread count.

A kernel whose chunks are independent (each writes rows of ``out`` no other chunk writes, with
no partials: a GEMM's row tiles) may cut its rows into :data:`CHUNKS_PER_WORKER` static chunks
per worker instead. The runtime hands chunks to whichever of the workers is free
(``runtime/team_calls.py``), so a worker that starts late, or shares its core with another
process, leaves its later chunks to the others instead of holding the join. A row's result does
not depend on which chunk holds it, so the bits are those of one chunk per worker.
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir
from mlir.dialects import arith, linalg, memref, scf, vector

from .. import templates as T

Value = T.Value

#: Static chunks per worker of a kernel that opts in (``Workers(..., split=True)``).
CHUNKS_PER_WORKER = 4


def memref_dims(value: Value) -> list[Value]:
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


def leading_slice(source: Value, first: Value) -> Value:
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
    partial output per worker after the first, combined into ``out`` in worker order. With
    ``split`` and no partials, :meth:`each` cuts ``threads`` × :data:`CHUNKS_PER_WORKER`
    chunks instead (chunks that write disjoint rows of ``out``)."""

    def __init__(
        self, b: T.Body, threads: int, partials: bool, init: float = 0.0, split: bool = False
    ) -> None:
        self.b = b
        self.threads = threads
        partial_outputs = threads > 1 and partials
        self.chunks = threads * CHUNKS_PER_WORKER if split and not partial_outputs else threads
        self.partials: Value | None = None
        self.init = init
        self.combine = arith.addf
        if partial_outputs:
            out = b.ops["out"]
            shape = ir.MemRefType(out.type)
            dyn = ir.ShapedType.get_dynamic_size()
            dims = [threads - 1] + [shape.get_dim_size(i) for i in range(shape.rank)]
            sizes = [d for i, d in enumerate(memref_dims(out)) if shape.get_dim_size(i) == dyn]
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
        forall = scf.ForallOp([0], [self.chunks], [1])
        with ir.InsertionPoint(forall.body):
            p = forall.induction_variables[0]
            lo, hi = _static_chunk(b, p, count, self.chunks)
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
        # worker 0 writes to out: its partial (index 0 too) is never used
        partial = leading_slice(self.partials, arith.subi(arith.maxui(p, c1), c1))
        choice = scf.IfOp(first, [partial.type], has_else=True)
        with ir.InsertionPoint(choice.then_block):
            scf.yield_([memref.cast(partial.type, b.ops["out"])])
        with ir.InsertionPoint(choice.else_block):
            linalg.fill(b.f32(self.init), outs=[partial])
            scf.yield_([partial])
        return choice.results[0]

    def chunk(self, p: Value, count: Value) -> tuple[Value, Value]:
        """Worker ``p``'s static chunk ``[lo, hi)`` of ``[0, count)`` (one per worker)."""
        return _static_chunk(self.b, p, count, self.threads)

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
        dims = memref_dims(out)
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


def _static_chunk(b: T.Body, p: Value, count: Value, chunks: int) -> tuple[Value, Value]:
    """Chunk ``p``'s ``[lo, hi)`` of ``[0, count)`` cut into ``chunks`` static chunks."""
    ct = b.index(chunks)
    lo = arith.divui(arith.muli(p, count), ct)
    hi = arith.divui(arith.muli(arith.addi(p, b.index(1)), count), ct)
    return lo, hi
