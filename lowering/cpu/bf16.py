"""bf16 products with f32 accumulation in the scheduled CPU GEMM: AVX512-BF16's ``vdpbf16ps``.

A GEMM template whose schedule has ``products = "bf16"`` (``hector-schedule{bf16_dot=true}``
chooses it where the CPU has AVX512-BF16 and an operand, or an argument of the function, is
stored in bf16) multiplies its packed tiles with ``x86vector.avx512.dot``, which
``convert-vector-to-llvm{enable-x86vector}`` lowers to ``llvm.x86.avx512bf16.dpbf16ps.512``:
each of the 16 f32 lanes adds the products of one pair of bf16 values from each operand,
``acc[i] += a[2i] * b[2i] + a[2i+1] * b[2i+1]``.
The pairs run along the reduction, so both operands are packed as **pairs**: an ``i32`` holds
two consecutive reduction steps of one row or column, the earlier in its low half.

* the left operand ``[rows, K]`` becomes ``[rows, K / 2]`` pairs: a row rounded to bf16 is
  already its pairs (one vector bitcast); the micro-kernel broadcasts one pair to all lanes;
* the right operand ``[K, N]`` becomes ``[K / 2, N]`` pairs (VNNI layout): rows ``2k`` and
  ``2k + 1`` rounded to bf16 and interleaved lane by lane, so a vector of 16 pairs is the
  dot's second operand for 16 output columns;
* a weight gradient's left operand ``x^T`` (``[K, rows]``, reduced over the tile's rows) is
  the same interleaving of the tile's rows of ``x``, ``[rows / 2, K]`` pairs, read down a
  column for the broadcast (:func:`matmul`'s ``lhs_by_step``): no transpose, and rows of
  bf16 features are interleaved as stored, without widening or rounding.

Values stored in f32 (weights in training, row gradients, intermediate activations) are
rounded to bf16 to the nearest even as they are packed (:func:`operand_half`,
``vcvtneps2bf16``), as PyTorch's autocast rounds the inputs of a bf16 matmul; values stored
in bf16 are packed as they are. Accumulation is f32 throughout: each ``vdpbf16ps`` adds its
two exact products to the f32 lane.

The micro-kernel (:func:`matmul`) holds an ``unroll × tile_n`` block of f32 accumulators in
registers (``unroll × tile_n / 16`` vectors) across the whole reduction, loads ``tile_n / 16``
vectors of right-hand pairs per pair of reduction steps and broadcasts one left-hand pair per
row.
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir
from mlir.dialects import arith, memref, scf, vector

from .. import templates as T

Value = T.Value

#: f32 accumulator lanes of one ``vdpbf16ps`` (a 512-bit register).
LANES = 16
#: Schedule value of ``products`` computing bf16 pair products (the other is ``"f32"``).
BF16 = "bf16"
#: The op computing one vector of pair products.
DOT_OP = "x86vector.avx512.dot"


def operand_half(value: Value) -> Value:
    """A vector of a product's operand in bf16: f32 rounded to the nearest even by
    ``arith.truncf``, which LLVM lowers to AVX512-BF16's ``vcvtneps2bf16`` (16 lanes an
    instruction, where ``templates.from_f32``'s integer rounding takes about eight), bf16 as
    it is. The two differ only where ``vdpbf16ps`` cannot tell: an f32 subnormal becomes zero
    (``from_f32``: a bf16 subnormal, which the dot product reads as zero) and a NaN keeps its
    payload (still a NaN)."""
    vtype = ir.VectorType(value.type)
    if not isinstance(vtype.element_type, ir.F32Type):
        return value
    return arith.truncf(ir.VectorType.get(vtype.shape, ir.BF16Type.get()), value)


def _i32() -> ir.Type:
    return ir.IntegerType.get_signless(32)


def _bf16_pairs_type() -> ir.VectorType:
    return ir.VectorType.get([2 * LANES], ir.BF16Type.get())


def pairs_type(shape: list[int]) -> ir.MemRefType:
    """A buffer of bf16 pairs (``i32``) of ``shape``."""
    return ir.MemRefType.get(shape, _i32())


def row_pairs(row: Value) -> Value:
    """A vector of ``2n`` values (f32, or bf16 as stored) as ``n`` pairs of bf16 (``i32``): the
    elements rounded to bf16, two neighbours to a lane, the first in its low half."""
    vtype = ir.VectorType(row.type)
    row = operand_half(row)
    (n,) = vtype.shape
    return vector.bitcast(ir.VectorType.get([n // 2], _i32()), row)


def interleave_pairs(low: Value, high: Value) -> Value:
    """Two vectors (rows ``2k`` and ``2k + 1`` of a right operand), f32 rounded to bf16 or
    bf16 as stored, joined lane by lane: lane ``j`` holds ``low[j]`` in its low half and
    ``high[j]`` above."""
    vtype = ir.VectorType(low.type)
    i16, i32 = ir.IntegerType.get_signless(16), _i32()
    wide = ir.VectorType.get(vtype.shape, i32)

    def bits(value: Value) -> Value:
        half = operand_half(value)
        return arith.extui(wide, arith.bitcast(ir.VectorType.get(vtype.shape, i16), half))

    splat = ir.DenseElementsAttr.get_splat(wide, ir.IntegerAttr.get(i32, 16))
    sixteen = arith.constant(wide, splat)
    return arith.ori(bits(low), arith.shli(bits(high), sixteen))


#: Builds row ``i`` of a right operand as an f32 vector (given ``i`` and the index 0).
RowOf = Callable[[Value, Value], Value]


def pack_rows_in_pairs(b: T.Body, dst: Value, rows: int, row_of: RowOf) -> None:
    """``dst[k, :] = pairs(row_of(2k), row_of(2k + 1))`` for ``k < rows / 2``: ``row_of(i)``
    builds row ``i`` (an f32 vector, or a bf16 one as stored, as wide as ``dst``), here
    interleaved into the right operand's pair layout."""
    last = ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(2, 1))
    c0, c1, c2 = b.index(0), b.index(1), b.index(2)
    with b.loop(c0, b.index(rows // 2), c1) as k:
        first = arith.muli(k, c2)
        low, high = row_of(first, c0), row_of(arith.addi(first, c1), c0)
        vector.transfer_write(None, interleave_pairs(low, high), dst, [k, c0], last, [True])


def pair_rows_of(b: T.Body, src: Value, dst: Value) -> None:
    """``dst = pairs(src)`` for an f32 ``src`` ``[R, C]`` into ``dst`` ``[R / 2, C]``: the
    right operand's pair layout of a matrix already in f32 (a transposed weight slice)."""
    rows, cols = T.static_dim(src, 0), T.static_dim(src, 1)
    vtype = ir.VectorType.get([cols], T.f32_type())
    last = ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(2, 1))

    def row(i: Value, c0: Value) -> Value:
        return T.read_vector(vtype, src, [i, c0], last, [True])

    pack_rows_in_pairs(b, dst, rows, row)


def weight_pairs(b: T.Body, weight: Value) -> Value:
    """A new buffer holding ``weight`` (``[K, N]`` or ``[R, K, N]``, any stored type) in the
    right operand's pair layout, ``[K / 2, N]`` per slice; the caller frees it."""
    shape = ir.MemRefType(weight.type)
    dims = [shape.get_dim_size(i) for i in range(shape.rank)]
    pairs = memref.alloc(pairs_type([*dims[:-2], dims[-2] // 2, dims[-1]]), [], [])
    vtype = ir.VectorType.get([dims[-1]], T.f32_type())
    last = ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(shape.rank, 1))
    c1 = b.index(1)

    def fill(lead: list[Value]) -> None:
        def row(i: Value, c0: Value) -> Value:
            return T.read_vector(vtype, weight, [*lead, i, c0], last, [True])

        dst = pairs if not lead else _slice(pairs, lead[0])
        pack_rows_in_pairs(b, dst, dims[-2], row)

    if shape.rank == 2:
        fill([])
    else:
        with b.loop(b.index(0), b.index(dims[0]), c1) as t:
            fill([t])
    return pairs


def _slice(source: Value, first: Value) -> Value:
    """``source[first]`` of a ``[R, K, N]`` buffer as a ``[K, N]`` view."""
    shape = ir.MemRefType(source.type)
    rest = [shape.get_dim_size(i) for i in range(1, shape.rank)]
    strides, _ = shape.get_strides_and_offset()
    layout = ir.StridedLayoutAttr.get(ir.ShapedType.get_dynamic_size(), list(strides[1:]))
    result = ir.MemRefType.get(rest, shape.element_type, layout)
    return memref.subview(source, [first, 0, 0], [1, *rest], [1] * shape.rank, result_type=result)


def dot(acc: Value, a: Value, b: Value) -> Value:
    """``acc + pair products of a and b`` (``x86vector.avx512.dot``, ``vdpbf16ps``)."""
    op = ir.Operation.create(DOT_OP, results=[acc.type], operands=[acc, a, b])
    return op.results[0]


#: Takes one row of a register block's results straight from registers: the row's index in
#: the tile and its ``(first column, 16-lane f32 vector)`` pairs, in column order.
RowWriter = Callable[[Value, list[tuple[Value, Value]]], None]


def matmul(
    b: T.Body,
    lhs: Value,
    rhs: Value,
    acc: Value | None,
    block: tuple[int, int],
    fresh: bool = False,
    lhs_by_step: bool = False,
    write: RowWriter | None = None,
) -> None:
    """``acc += lhs @ rhs`` for ``lhs`` ``[M, K / 2]`` and ``rhs`` ``[K / 2, N]`` in pairs
    and an f32 ``acc`` ``[M, N]``, in register blocks of ``block = (rows, columns)`` (columns
    a multiple of 16, both dividing the product); with ``fresh``, ``acc = lhs @ rhs`` (the
    accumulators start at zero instead of ``acc``'s values). With ``lhs_by_step``, ``lhs`` is
    held ``[K / 2, M]`` (the right operand's pair layout: a weight gradient's rows of features
    interleaved two by two, no transpose): the broadcast pair is read down a column.

    With ``write`` (and no ``acc``: the accumulators start at zero), each register block's
    rows go from registers to ``write`` once its reduction ends (no f32 tile stored and read
    back): the caller's epilogue, row by row in tile order within each column block."""
    if (write is None) == (acc is None):
        raise ValueError("bf16.matmul takes exactly one of acc and write")
    rows_dim, depth_dim = (1, 0) if lhs_by_step else (0, 1)
    rows, cols = T.static_dim(lhs, rows_dim), T.width(rhs if acc is None else acc)
    depth = T.static_dim(lhs, depth_dim)
    unroll, tile_n = block
    f32v = ir.VectorType.get([LANES], T.f32_type())
    i32v = ir.VectorType.get([LANES], _i32())
    last = ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(2, 1))
    pad = b.f32(0.0)
    c0, c1 = b.index(0), b.index(1)
    with b.loop(c0, b.index(cols), b.index(tile_n)) as j:
        with b.loop(c0, b.index(rows), b.index(unroll)) as i:
            at = [
                (arith.addi(i, b.index(r)), arith.addi(j, b.index(LANES * c)))
                for r in range(unroll)
                for c in range(tile_n // LANES)
            ]
            if fresh or acc is None:
                zero = ir.DenseElementsAttr.get_splat(f32v, ir.FloatAttr.get(T.f32_type(), 0.0))
                init = [arith.constant(f32v, zero)] * len(at)
            else:
                init = [vector.transfer_read(f32v, acc, [r, c], last, pad, [True]) for r, c in at]
            loop = scf.ForOp(c0, b.index(depth), c1, init)
            with ir.InsertionPoint(loop.body):
                k = loop.induction_variable
                bs = [
                    vector.bitcast(_bf16_pairs_type(), vector.load(i32v, rhs, [k, col]))
                    for col in (at[c][1] for c in range(tile_n // LANES))
                ]
                sums = []
                for r in range(unroll):
                    row = at[r * (tile_n // LANES)][0]
                    pair = memref.load(lhs, [k, row] if lhs_by_step else [row, k])
                    a = vector.bitcast(_bf16_pairs_type(), vector.broadcast(i32v, pair))
                    for c, bv in enumerate(bs):
                        sums.append(dot(loop.inner_iter_args[r * len(bs) + c], a, bv))
                scf.yield_(sums)
            if write is not None:
                per_row = tile_n // LANES
                for r in range(unroll):
                    values = list(loop.results)[r * per_row : (r + 1) * per_row]
                    cols_of = [at[r * per_row + c][1] for c in range(per_row)]
                    write(at[r * per_row][0], list(zip(cols_of, values, strict=True)))
            else:
                for (r, c), value in zip(at, loop.results, strict=True):
                    vector.transfer_write(None, value, acc, [r, c], last, [True])
