"""Packing the operands of a scheduled CPU GEMM tile into contiguous worker buffers.

A GEMM worker walks its rows ``tile_m`` at a time: gathered rows of ``a`` are packed into a
contiguous ``[tile_m, K]`` tile (zero rows past the end, so every product has static shapes), a
whole row as one vector. Weight gradients (``xty``) multiply the transposed packed tile (rows
packed a vector each, then transposed in 16 × 16 register blocks) by the packed row gradients.
``xwt`` multiplies by the weight slice transposed into a buffer of the worker's own
(:class:`TransposedSlice`), made again only when a run of rows needs another slice; no copy of
the whole weight is written per call. With bf16 products the buffers hold bf16 pairs
(:mod:`~hector.lowering.cpu.bf16`), and a weight gradient's tile is not transposed: its rows
are interleaved two by two (:func:`pack_row_pairs`), which the pair micro-kernel reads down
its columns.
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir
from mlir.dialects import arith, memref, scf, vector

from .. import templates as T
from . import bf16
from .workers import leading_slice, memref_dims

Value = T.Value


def packed_row(
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


def pack_row_vectors(
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
        row = packed_row(b, r, i0, mt, source, row_of, scale_of, stored=pairs)
        if pairs:
            row = bf16.row_pairs(row)
        vector.transfer_write(None, row, tile, [r, c0], last, [True])


def pack_gradients(
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
        pack_row_vectors(b, rhs, i0, mt, tm, weight, row_of, scale_of)
        return
    pack_row_pairs(b, rhs, i0, mt, tm, weight, row_of, scale_of)


def pack_row_pairs(
    b: T.Body,
    dst: Value,
    i0: Value,
    mt: Value,
    tm: int,
    source: Value,
    row_of: Callable[[Value], Value],
    scale_of: Callable[[Value], Value] | None = None,
) -> None:
    """``dst[k, :] = pairs(tile row 2k, tile row 2k + 1)`` for a tile of ``tm`` rows of
    ``source`` (``row_of(i0 + r)``, times ``scale_of``; zeros for ``r >= mt``) into ``dst``
    ``[tm / 2, width]`` of bf16 pairs: two rows interleaved lane by lane
    (``bf16.interleave_pairs``), rounded to bf16 from f32, or as stored when ``source`` holds
    bf16 and there is no scale. The right operand's pair layout of the tile's rows, and the
    left operand of a weight gradient read down its columns (``bf16.matmul``'s
    ``lhs_by_step``), which needs no transpose."""

    def row(r: Value, _: Value) -> Value:
        return packed_row(b, r, i0, mt, source, row_of, scale_of, stored=True)

    bf16.pack_rows_in_pairs(b, dst, tm, row)


def worker_buffer(shape: list[int], paired: bool = False) -> Value:
    """A worker's f32 buffer, or (``paired``) one of bf16 pairs half as wide."""
    if paired:
        return memref.alloca(bf16.pairs_type([*shape[:-1], shape[-1] // 2]), [], [])
    return memref.alloca(ir.MemRefType.get(shape, T.f32_type()), [], [])


#: Side of the square blocks a weight slice is transposed in (smaller when it does not divide).
TRANSPOSE_BLOCK = 16


def _block_side(extent: int) -> int:
    return next(c for c in (TRANSPOSE_BLOCK, 8, 4, 2, 1) if extent % c == 0)


def _identity(rank: int) -> ir.AffineMapAttr:
    return ir.AffineMapAttr.get(ir.AffineMap.get_identity(rank))


def transpose_into(b: T.Body, src: Value, dst: Value) -> None:
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
        memref.store(memref_dims(weight)[0], self.current, [b.index(0)])

    def holds(self, t: Value) -> Value:
        """Whether the buffer holds slice ``t`` (``i1``)."""
        held = memref.load(self.current, [self.b.index(0)])
        return arith.cmpi(arith.CmpIPredicate.eq, held, t)

    def _make(self, weight: Value) -> None:
        transpose_into(self.b, weight, self.buf)
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
            self._make(leading_slice(self.weight, t))
            memref.store(t, self.current, [self.b.index(0)])
            scf.yield_([])
        return held


def view(source: Value, offsets: list[Value | int], sizes: list[int]) -> Value:
    """``source[offsets : offsets + sizes]`` (unit steps) as a strided view of static
    ``sizes``, its offset dynamic."""
    shape = ir.MemRefType(source.type)
    strides, _ = shape.get_strides_and_offset()
    dyn = ir.ShapedType.get_dynamic_size()
    layout = ir.StridedLayoutAttr.get(dyn, list(strides))
    result = ir.MemRefType.get(sizes, shape.element_type, layout)
    return memref.subview(source, offsets, sizes, [1] * shape.rank, result_type=result)


def weight_panels(b: T.Body, weight: Value, tile_n: int) -> Value:
    """A new buffer holding ``weight`` (``[K, N]`` or ``[R, K, N]``, any stored type) in
    column panels ``[N / tile_n, K, tile_n]`` per slice, in f32: the register block's
    right-hand rows, contiguous down the reduction; the caller frees it."""
    shape = ir.MemRefType(weight.type)
    dims = [shape.get_dim_size(i) for i in range(shape.rank)]
    k_extent, n_extent = dims[-2], dims[-1]
    lead = dims[:-2]
    panels = memref.alloc(
        ir.MemRefType.get([*lead, n_extent // tile_n, k_extent, tile_n], T.f32_type()), [], []
    )
    vtype = ir.VectorType.get([tile_n], T.f32_type())
    src_map = ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(shape.rank, 1))
    dst_map = ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(shape.rank + 1, 1))
    c0, c1 = b.index(0), b.index(1)

    def fill(at: list[Value]) -> None:
        with b.loop(c0, b.index(k_extent), c1) as k:
            with b.loop(c0, b.index(n_extent // tile_n), c1) as j:
                col = arith.muli(j, b.index(tile_n))
                row = T.read_vector(vtype, weight, [*at, k, col], src_map, [True])
                vector.transfer_write(None, row, panels, [*at, j, k, c0], dst_map, [True])

    if not lead:
        fill([])
    else:
        with b.loop(c0, b.index(lead[0]), c1) as t:
            fill([t])
    return panels
