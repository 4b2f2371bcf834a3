"""What the two hector_intra templates compute, as loop bodies shared by the CPU and GPU lowerings.

``intra_to_scf`` wraps these bodies in ``scf.for`` loops; ``intra_to_gpu`` wraps them in one
kernel per template with a thread→(row, column) mapping. Keeping the element-level semantics in
one place means the two back ends cannot drift apart.

Everything here builds ops through MLIR's dialect builders (``arith``, ``math``, ``memref``,
``scf``) at the current ``ir.InsertionPoint``, under the current ``ir.Location`` (the lowerings
enter the template's location, so every op they generate carries it). Values are ``ir.Value``.
The order in which ops are built is part of the contract: it fixes the accumulation order, so
the CPU and GPU results stay bit-identical to what they were.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeAlias

from mlir import ir
from mlir.dialects import arith, math, memref, scf, vector

from ..dialects import hector_intra as intra
from ..dialects.builders import OpAccess

# Operand roles of the templates, in their spec's order (inter_to_intra builds with them).
GEMM_OPERANDS: tuple[str, ...] = tuple(o.name for o in intra.GEMM_TEMPLATE.operands)
TRAVERSAL_OPERANDS: tuple[str, ...] = tuple(o.name for o in intra.TRAVERSAL_TEMPLATE.operands)

Value: TypeAlias = ir.Value
Stepper: TypeAlias = Callable[[Value, Value], Value]  # (induction variable, carried) -> next


@dataclass(frozen=True)
class Operands:
    """A template's present operands by role, in the spec's order."""

    values: dict[str, Value]

    def has(self, role: str) -> bool:
        """Whether the optional operand ``role`` is present."""
        return role in self.values

    def __getitem__(self, role: str) -> Value:
        return self.values[role]

    def rebound(self, values: Sequence[Value]) -> Operands:
        """The same roles bound to ``values`` (a kernel's arguments, in role order)."""
        return Operands(dict(zip(self.values, values, strict=True)))


def operands(v: OpAccess) -> Operands:
    """A template's operands by role, read through its spec (absent optional ones left out)."""
    return Operands({o.name: v.operand(o.name) for o in v.spec.operands if v.has(o.name)})


def static_dim(value: Value, i: int) -> int:
    """A static dimension of a shaped value (feature widths are static in Hector)."""
    shape = ir.ShapedType(value.type)
    d = shape.get_dim_size(i)
    if d == ir.ShapedType.get_dynamic_size():
        raise ValueError(f"dimension {i} of {value.type} must be static")
    return d


def width(value: Value) -> int:
    """The static width (last dimension) of a row tensor or vector."""
    return static_dim(value, ir.ShapedType(value.type).rank - 1)


def f32_type() -> ir.Type:
    """``f32`` in the current context."""
    return ir.F32Type.get()


def _like(t: ir.Type, element: ir.Type) -> ir.Type:
    """``element``, or a vector of it shaped like ``t`` when ``t`` is a vector."""
    return (
        ir.VectorType.get(ir.VectorType(t).shape, element)
        if isinstance(t, ir.VectorType)
        else element
    )


def to_f32(value: Value) -> Value:
    """``value`` (a scalar or vector of f16, bf16 or f32) as f32: extended exactly, so a
    template reading half-precision storage computes what it would on the f32 copy.

    bf16 is the top half of an f32, so it widens as integers (a shift left by 16), one vector
    instruction (through ``arith.extf`` an RGCN layer on bf16 features took 1.2x as long).
    f16 goes through ``arith.extf`` (F16C's ``vcvtph2ps``, the GPU's ``cvt.f32.f16``)."""
    t = value.type
    element = ir.VectorType(t).element_type if isinstance(t, ir.VectorType) else t
    if isinstance(element, ir.F32Type):
        return value
    f32 = f32_type()
    if not isinstance(element, ir.BF16Type):
        return arith.extf(_like(t, f32), value)
    i16, i32 = ir.IntegerType.get_signless(16), ir.IntegerType.get_signless(32)
    bits = arith.extui(_like(t, i32), arith.bitcast(_like(t, i16), value))
    shift = arith.constant(_like(t, i32), _splat(t, i32, 16))
    return arith.bitcast(_like(t, f32), arith.shli(bits, shift))


def from_f32(value: Value, element: ir.Type) -> Value:
    """The f32 ``value`` (scalar or vector) rounded to ``element`` (f16 or bf16; other types
    take it as it is), to the nearest even as PyTorch's ``.to()`` rounds: a template writes
    half-precision storage from the f32 it computed.

    f16 goes through ``arith.truncf`` (``vcvtps2ph``, the GPU's ``cvt.rn.f16.f32``). bf16 rounds
    as integers (LLVM may lower an f32-to-bf16 ``fptrunc`` to a library call): the top half of
    the f32 plus the rounding bias ``0x7FFF`` and the kept lowest bit, NaN as ``0x7FC0``."""
    t = value.type
    scalar = ir.VectorType(t).element_type if isinstance(t, ir.VectorType) else t
    if not isinstance(scalar, ir.F32Type) or not isinstance(element, ir.F16Type | ir.BF16Type):
        return value
    if isinstance(element, ir.F16Type):
        return arith.truncf(_like(t, element), value)
    i16, i32 = ir.IntegerType.get_signless(16), ir.IntegerType.get_signless(32)

    def const(bits: int, element: ir.Type = i32) -> Value:
        return arith.constant(_like(t, element), _splat(t, element, bits))

    bits = arith.bitcast(_like(t, i32), value)
    lowest = arith.andi(arith.shrui(bits, const(16)), const(1))
    rounded = arith.shrui(arith.addi(bits, arith.addi(lowest, const(0x7FFF))), const(16))
    nan = arith.cmpf(arith.CmpFPredicate.UNO, value, value)
    half = arith.select(nan, const(0x7FC0, i16), arith.trunci(_like(t, i16), rounded))
    return arith.bitcast(_like(t, element), half)


def _splat(t: ir.Type, element: ir.Type, value: int) -> ir.Attribute:
    """The integer ``value`` as an attribute of ``element`` (splat over ``t``'s shape)."""
    scalar = ir.IntegerAttr.get(element, value)
    if isinstance(t, ir.VectorType):
        return ir.DenseElementsAttr.get_splat(ir.VectorType(_like(t, element)), scalar)
    return scalar


def read_vector(
    vtype: ir.VectorType,
    source: Value,
    idx: list[Value],
    perm: ir.AffineMapAttr,
    in_bounds: list[bool],
) -> Value:
    """``vector.transfer_read`` of an f32 ``vtype`` from ``source`` in its own element type
    (f32, f16 or bf16), extended to f32: half-precision storage converted on load."""
    element = ir.MemRefType(source.type).element_type
    stored = ir.VectorType.get(vtype.shape, element)
    pad = arith.constant(element, 0.0)
    return to_f32(vector.transfer_read(stored, source, idx, perm, pad, in_bounds))


class Body:
    """Builds the scalar code of one template at the current insertion point.

    ``ops`` are the template's operands as seen where the code runs (the host function's values
    on the CPU, the kernel's arguments on the GPU)."""

    def __init__(self, ops: Operands) -> None:
        self.ops = ops
        self._index = ir.IndexType.get()
        self._f32 = f32_type()

    def index(self, value: int) -> Value:
        """An ``index`` constant."""
        return arith.constant(self._index, value)

    def f32(self, value: float) -> Value:
        """An ``f32`` constant."""
        return arith.constant(self._f32, float(value))

    def load_index(self, role: str, i: Value) -> Value:
        """``index_cast(role[i])``: a row number read from an i32 index array."""
        raw = memref.load(self.ops[role], [i])
        return arith.index_cast(self._index, raw)

    def load(self, role: str, *idx: Value) -> Value:
        """Load one element of operand ``role`` as f32 (an f16 or bf16 input is extended on
        load: the templates compute in f32 whatever type their inputs are stored in)."""
        return to_f32(memref.load(self.ops[role], list(idx)))

    def store(self, role: str, v: Value, *idx: Value) -> None:
        """Store one element of operand ``role``, rounded to its element type (an f16 or bf16
        output is written from the f32 the template computed)."""
        target = self.ops[role]
        element = ir.MemRefType(target.type).element_type
        memref.store(from_f32(v, element), target, list(idx))

    def accumulate(self, role: str, v: Value, atomic: bool, *idx: Value) -> None:
        """``role[idx] += v``, atomically when several threads may hit one element."""
        if atomic:
            memref.atomic_rmw(arith.AtomicRMWKind.addf, v, self.ops[role], list(idx))
            return
        cur = self.load(role, *idx)
        self.store(role, arith.addf(cur, v), *idx)

    @contextmanager
    def loop(self, lo: Value, hi: Value, step: Value) -> Iterator[Value]:
        """An ``scf.for`` whose body is built inside the ``with``; yields the induction
        variable."""
        for_op = scf.ForOp(lo, hi, step)
        with ir.InsertionPoint(for_op.body):
            yield for_op.induction_variable
            scf.yield_([])

    def reduce(self, lo: Value, hi: Value, step: Value, init: Value, step_fn: Stepper) -> Value:
        """``scf.for`` carrying one value: ``acc = step_fn(iv, acc)`` from ``init``; returns the
        final value."""
        for_op = scf.ForOp(lo, hi, step, [init])
        with ir.InsertionPoint(for_op.body):
            scf.yield_([step_fn(for_op.induction_variable, for_op.inner_iter_args[0])])
        return for_op.results[0]

    @contextmanager
    def guard(self, cond: Value) -> Iterator[None]:
        """An ``scf.if`` without else, its body built inside the ``with``."""
        if_op = scf.IfOp(cond)
        with ir.InsertionPoint(if_op.then_block):
            yield
            scf.yield_([])


# ---- GEMM -------------------------------------------------------------------------------------


def gemm_rows(b: Body, c0: Value) -> Value:
    """The row count ``M`` of a GEMM template: the first index operand's length, else ``a``'s."""
    role = next((r for r in ("gather_index", "weight_index") if b.ops.has(r)), "a")
    return memref.dim(b.ops[role], c0)


def slice_rows(v: OpAccess) -> int | None:
    """A GEMM template's optional ``slice_rows``: row ``i`` uses weight slice ``i / slice_rows``
    (per-slice weight products); None when absent."""
    return int(v.attr("slice_rows")) if "slice_rows" in v.op.attributes else None


@dataclass(frozen=True)
class GemmRow:
    """Where GEMM row ``i`` reads and writes: row ``r`` of ``a``, weight slice ``t`` (None for
    a shared weight), output row ``o``, and its ``row_scale`` factor (None without one)."""

    i: Value
    r: Value
    t: Value | None
    o: Value
    scale: Value | None = None


def gemm_row_prologue(b: Body, i: Value, rows_per_slice: int | None = None) -> GemmRow:
    """Rows read, weight slice and row written for GEMM row ``i`` (the slice from
    ``weight_index``, or ``i / rows_per_slice``)."""
    r = b.load_index("gather_index", i) if b.ops.has("gather_index") else i
    t = b.load_index("weight_index", i) if b.ops.has("weight_index") else None
    if t is None and rows_per_slice is not None:
        t = arith.divui(i, b.index(rows_per_slice))
    o = b.load_index("scatter_index", i) if b.ops.has("scatter_index") else i
    return GemmRow(i, r, t, o)


def gemm_row_scale(b: Body, row: GemmRow) -> GemmRow:
    """``row`` with its factor ``row_scale[i, 0]`` loaded (unchanged without ``row_scale``)."""
    if not b.ops.has("row_scale"):
        return row
    scale = b.load("row_scale", row.i, b.index(0))
    return GemmRow(row.i, row.r, row.t, row.o, scale)


def sliced(t: Value | None, *idx: Value) -> list[Value]:
    """Weight indices: the slice first when the weight is per type."""
    return [*([t] if t is not None else []), *idx]


def gemm_element(
    b: Body, row: GemmRow, j: Value, k_extent: int, epilogue: str, transposed: bool = False
) -> None:
    """GPU form: ``out[o, j] (=, +=, atomic +=) scale * Σ_k a[r, k] * weight[t, k, j]``
    (``weight[t, j, k]`` when ``transposed``)."""
    c0, c1, ck = b.index(0), b.index(1), b.index(k_extent)
    zero = b.f32(0.0)

    def step(k: Value, acc: Value) -> Value:
        av = b.load("a", row.r, k)
        wv = b.load("weight", *sliced(row.t, *((j, k) if transposed else (k, j))))
        return arith.addf(acc, arith.mulf(av, wv))

    acc = b.reduce(c0, ck, c1, zero, step)
    if row.scale is not None:
        acc = arith.mulf(acc, row.scale)
    if epilogue == "store":
        b.store("out", acc, row.o, j)
    else:
        b.accumulate("out", acc, epilogue == "atomic_add", row.o, j)


def xty_gradient_row(b: Body, i: Value) -> Value:
    """The gradient row an ``xty`` product's row ``i`` reads: ``scatter_index[i]`` (the row
    the forward product wrote) or ``i``."""
    return b.load_index("scatter_index", i) if b.ops.has("scatter_index") else i


def xty_gradient(b: Body, i: Value, j: Value) -> Value:
    """Element ``j`` of row ``i``'s gradient in an ``xty`` product: ``weight[o, j]``
    (``o`` from :func:`xty_gradient_row`) times ``row_scale[i, 0]`` when there is one. Every
    back end reads it through here (the packed CPU form a row at a time, the same way)."""
    g = b.load("weight", xty_gradient_row(b, i), j)
    if b.ops.has("row_scale"):
        g = arith.mulf(g, b.load("row_scale", i, b.index(0)))
    return g


def _gemm_row_xty(
    b: Body, row: GemmRow, k_extent: int, n_extent: int, epilogue: str, scratch: Value | None
) -> None:
    """``out[t] += a[r, :]^T ⊗ g_i`` (weight gradients, ``g_i`` from :func:`xty_gradient`),
    ``k`` outer, ``j`` inner."""
    c0, c1 = b.index(0), b.index(1)
    ck, cn = b.index(k_extent), b.index(n_extent)
    with b.loop(c0, ck, c1) as k:
        av = b.load("a", row.r, k)
        with b.loop(c0, cn, c1) as j:
            p = arith.mulf(av, xty_gradient(b, row.i, j))
            b.accumulate("out", p, False, *sliced(row.t, k, j))


def _gemm_row_xwt(
    b: Body, row: GemmRow, k_extent: int, n_extent: int, epilogue: str, scratch: Value | None
) -> None:
    """``a[r, :] @ weight[t]^T``: ``j`` outer, a dot product over contiguous weight rows."""
    c0, c1 = b.index(0), b.index(1)
    cn = b.index(n_extent)
    with b.loop(c0, cn, c1) as j:
        gemm_element(b, row, j, k_extent, epilogue, transposed=True)


def for_each_a(
    b: Body, r: Value, bounds: tuple[Value, Value, Value], body: Callable[[Value, Value], None]
) -> None:
    """``body(k, a[r, k])`` for ``k`` in ``[0, K)`` (``bounds``: 0, 1 and K), in order. A
    row of f16 or bf16 storage is read a vector of lanes at a time and widened together:
    converting one element at a time made a narrow GEMM on f16 rows three times slower than on
    f32 (each lone x86 ``vcvtph2ps`` waits on the register the previous one wrote)."""
    c0, c1, ck = bounds  # 0, 1 and K
    source = b.ops["a"]
    if isinstance(ir.MemRefType(source.type).element_type, ir.F32Type):
        with b.loop(c0, ck, c1) as k:
            body(k, b.load("a", r, k))
        return
    k_extent = static_dim(source, 1)
    lanes = next(n for n in (16, 8, 4, 2, 1) if k_extent % n == 0)
    last = ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(2, 1))
    with b.loop(c0, ck, b.index(lanes)) as k0:
        va = read_vector(ir.VectorType.get([lanes], f32_type()), source, [r, k0], last, [True])
        for lane in range(lanes):
            body(arith.addi(k0, b.index(lane)), vector.extract(va, [], [lane]))


def sums_row_apart(epilogue: str, out: Value) -> bool:
    """Whether an ``xw`` row is summed in a scratch row (``memref<N x f32>``) before it reaches
    ``out``: for an accumulating epilogue, and for a half ``out`` (which holds only the rounded
    product, never a partial sum)."""
    return epilogue != "store" or not isinstance(ir.MemRefType(out.type).element_type, ir.F32Type)


def _gemm_row_xw(
    b: Body, row: GemmRow, k_extent: int, n_extent: int, epilogue: str, scratch: Value | None
) -> None:
    """``a[r, :] @ weight[t]``: ``k`` outer, ``j`` inner over contiguous weight and output
    rows (LLVM vectorises it)."""
    c0, c1 = b.index(0), b.index(1)
    ck, cn = b.index(k_extent), b.index(n_extent)
    # An accumulating epilogue sums the row's product in a scratch row first: adding K partial
    # products of every incoming row straight into the output would round like a K*degree-term
    # sum; this way each output element receives one rounded product per row, as on the GPU.
    zero = b.f32(0.0)
    with b.loop(c0, cn, c1) as j:
        if scratch is None:
            b.store("out", zero, row.o, j)
        else:
            memref.store(zero, scratch, [j])

    def add_products(k: Value, av: Value) -> None:
        with b.loop(c0, cn, c1) as j:
            p = arith.mulf(av, b.load("weight", *sliced(row.t, k, j)))
            if scratch is None:
                b.accumulate("out", p, False, row.o, j)
            else:
                memref.store(arith.addf(memref.load(scratch, [j]), p), scratch, [j])

    for_each_a(b, row.r, (c0, c1, ck), add_products)
    if scratch is None:
        if row.scale is not None:
            with b.loop(c0, cn, c1) as j:
                b.store("out", arith.mulf(b.load("out", row.o, j), row.scale), row.o, j)
        return
    with b.loop(c0, cn, c1) as j:
        v = memref.load(scratch, [j])
        if row.scale is not None:
            v = arith.mulf(v, row.scale)
        if epilogue == "store":
            b.store("out", v, row.o, j)  # rounded to a half out's type
        else:
            b.accumulate("out", v, False, row.o, j)


# The CPU form of one GEMM row, by variant: (body, row, K, N, epilogue, scratch row) -> None.
GEMM_ROW_CPU: dict[str, Callable[[Body, GemmRow, int, int, str, Value | None], None]] = {
    "xw": _gemm_row_xw,
    "xwt": _gemm_row_xwt,
    "xty": _gemm_row_xty,
}


def gemm_row_cpu(
    b: Body,
    row: GemmRow,
    k_extent: int,
    n_extent: int,
    epilogue: str,
    variant: str = "xw",
    scratch: Value | None = None,
) -> None:
    """CPU form of one GEMM row (``scratch``: a ``memref<N x f32>`` row buffer, needed by
    accumulating ``xw`` epilogues). ``xwt`` reads the weight transposed; ``xty`` adds the outer
    product of row ``r`` of ``a`` and row ``i`` of the gradient into ``out[t]``."""
    GEMM_ROW_CPU[variant](b, row, k_extent, n_extent, epilogue, scratch)


# ---- traversal: rows and element functions ----------------------------------------------------


def traversal_rows(b: Body, c0: Value) -> Value:
    """The row count ``M`` of a traversal template: ``gather_index``'s length, else ``x``'s."""
    role = "gather_index" if b.ops.has("gather_index") else "x"
    return memref.dim(b.ops[role], c0)


@dataclass(frozen=True)
class Element:
    """One element of a traversal: row ``i``, the rows ``xr``/``yr`` of ``x``/``y`` read, the
    output row ``d`` of a reduction (None without ``scatter_index``), and column ``j``."""

    i: Value
    xr: Value
    yr: Value
    d: Value | None
    j: Value | None = None

    def at(self, j: Value) -> Element:
        """The element of column ``j`` in this row."""
        return Element(self.i, self.xr, self.yr, self.d, j)

    @property
    def col(self) -> Value:
        """The column (set by :meth:`at`)."""
        assert self.j is not None
        return self.j


def row_indices(b: Body, i: Value) -> Element:
    """For traversal row ``i``: the rows of ``x`` and ``y`` read and the reduction's output
    row (column not yet set)."""
    xr = b.load_index("gather_index", i) if b.ops.has("gather_index") else i
    yr = b.load_index("y_index", i) if b.ops.has("y_index") else i
    d = b.load_index("scatter_index", i) if b.ops.has("scatter_index") else None
    return Element(i, xr, yr, d)


def _sigmoid(b: Body, v: Value) -> Value:
    """``1 / (1 + exp(-v))``: saturates cleanly to 0 and 1 for large ``|v|``."""
    e = math.exp(arith.negf(v))
    one = b.f32(1.0)
    return arith.divf(one, arith.addf(one, e))


def _tanh(b: Body, v: Value) -> Value:
    """``1 - 2 / (exp(2v) + 1)``: exact limits ±1, no overflow to NaN."""
    one, two = b.f32(1.0), b.f32(2.0)
    e = math.exp(arith.mulf(v, two))
    return arith.subf(one, arith.divf(two, arith.addf(e, one)))


#: Cephes' ``expf``: ``ln 2`` in two parts (``r = x - n·ln 2`` exact to f32), the
#: polynomial of ``exp(r) - 1 - r`` over ``r²`` on ``|r| ≤ ln 2 / 2``, and the clamp.
_LN2_HI, _LN2_LO, _LOG2E = 0.693359375, -2.12194440e-4, 1.44269504088896341
_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2)
_EXP_POLY2 = (1.6666665459e-1, 5.0000001201e-1)
_EXP_MAX = 88.3762626647949


def _exp(b: Body, v: Value) -> Value:
    """``exp(v)`` in arith alone (Cephes' ``expf``: within 1 ulp of the exact value on normal
    results, against float64 over ``[-87, 88]``):
    ``2^n · exp(r)`` with ``n = round(v·log2 e)``, ``exp(r)`` a polynomial and ``2^n`` the
    exponent field built as an integer. Unlike ``math.exp`` (a scalar ``expf`` call on the
    CPU) it vectorises with the loop around it; ``v`` is clamped to ``±88.376`` (no overflow
    to infinity; below about -87.7 the result is 0, not a subnormal); NaN stays NaN."""
    i32 = ir.IntegerType.get_signless(32)
    x = arith.minimumf(arith.maximumf(v, b.f32(-_EXP_MAX)), b.f32(_EXP_MAX))
    n = math.floor(arith.addf(arith.mulf(x, b.f32(_LOG2E)), b.f32(0.5)))
    r = arith.subf(arith.subf(x, arith.mulf(n, b.f32(_LN2_HI))), arith.mulf(n, b.f32(_LN2_LO)))
    poly = b.f32(_EXP_POLY[0])
    for c in (*_EXP_POLY[1:], *_EXP_POLY2):
        poly = arith.addf(arith.mulf(poly, r), b.f32(c))
    er = arith.addf(arith.addf(arith.mulf(poly, arith.mulf(r, r)), r), b.f32(1.0))
    biased = arith.addi(arith.fptosi(i32, n), arith.constant(i32, 127))
    scale = arith.bitcast(f32_type(), arith.shli(biased, arith.constant(i32, 23)))
    return arith.mulf(er, scale)


_ERF = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429, 0.3275911)


def _erf(b: Body, v: Value) -> Value:
    """Abramowitz–Stegun 7.1.26 (|error| < 1.5e-7), written in arith (its exp too:
    :func:`_exp`) so the CPU and GPU back ends need no libm/libdevice and the CPU's loops
    over it vectorise."""
    a1, a2, a3, a4, a5, p = (b.f32(c) for c in _ERF)
    one, zero = b.f32(1.0), b.f32(0.0)
    ax = math.absf(v)
    t = arith.divf(one, arith.addf(one, arith.mulf(p, ax)))
    poly = a5
    for a in (a4, a3, a2, a1):
        poly = arith.addf(arith.mulf(poly, t), a)
    poly = arith.mulf(poly, t)
    e = _exp(b, arith.negf(arith.mulf(ax, ax)))
    y = arith.subf(one, arith.mulf(poly, e))
    neg = arith.cmpf(arith.CmpFPredicate.OLT, v, zero)
    return arith.select(neg, arith.negf(y), y)


def _gelu(b: Body, v: Value) -> Value:
    """Exact GELU ``v/2 · (1 + erf(v/√2))`` (PyTorch's default)."""
    half, one = b.f32(0.5), b.f32(1.0)
    rs2 = b.f32(0.7071067811865476)
    cdf = arith.mulf(half, arith.addf(one, _erf(b, arith.mulf(v, rs2))))
    return arith.mulf(v, cdf)


def _gelu_grad(b: Body, v: Value) -> Value:
    """``d/dv gelu(v) = Φ(v) + v·φ(v)``."""
    half, one = b.f32(0.5), b.f32(1.0)
    rs2 = b.f32(0.7071067811865476)
    inv_sqrt_2pi = b.f32(0.3989422804014327)
    cdf = arith.mulf(half, arith.addf(one, _erf(b, arith.mulf(v, rs2))))
    sq = arith.mulf(arith.mulf(v, v), half)
    pdf = arith.mulf(inv_sqrt_2pi, _exp(b, arith.negf(sq)))
    return arith.addf(cdf, arith.mulf(v, pdf))


def _positive_or(b: Body, v: Value, pos: Value, otherwise: Value) -> Value:
    """``v > 0 ? pos : otherwise``."""
    zero = b.f32(0.0)
    return arith.select(arith.cmpf(arith.CmpFPredicate.OGT, v, zero), pos, otherwise)


# Unary row functions: fn(body, v, slope) -> value.
UNARY: dict[str, Callable[[Body, Value, float], Value]] = {
    "relu": lambda b, v, s: arith.maximumf(v, b.f32(0.0)),
    "leaky_relu": lambda b, v, s: _positive_or(b, v, v, arith.mulf(v, b.f32(s))),
    "exp": lambda b, v, s: math.exp(v),
    "tanh": lambda b, v, s: _tanh(b, v),
    "sigmoid": lambda b, v, s: _sigmoid(b, v),
    "gelu": lambda b, v, s: _gelu(b, v),
    "neg": lambda b, v, s: arith.negf(v),
    "silu": lambda b, v, s: arith.mulf(v, _sigmoid(b, v)),
    "shift_positive": lambda b, v, s: _positive_or(b, v, arith.addf(v, b.f32(1.0)), v),
}


def _tanh_grad(b: Body, dy: Value, out: Value) -> Value:
    one = b.f32(1.0)
    return arith.mulf(dy, arith.subf(one, arith.mulf(out, out)))


def _silu_grad(b: Body, dy: Value, x: Value) -> Value:
    """``d/dx x·σ(x) = σ(x)·(1 + x·(1 - σ(x)))``, written in the forward input."""
    one, sig = b.f32(1.0), _sigmoid(b, x)
    return arith.mulf(dy, arith.mulf(sig, arith.addf(one, arith.mulf(x, arith.subf(one, sig)))))


def _sigmoid_grad(b: Body, dy: Value, out: Value) -> Value:
    one = b.f32(1.0)
    return arith.mulf(dy, arith.mulf(out, arith.subf(one, out)))


# Gradient row functions: fn(body, dy, ref, slope) -> dy * f'(...), where ref is the forward
# input (relu, leaky_relu, gelu) or the forward output (exp, tanh, sigmoid).
GRAD: dict[str, Callable[[Body, Value, Value, float], Value]] = {
    "relu_grad": lambda b, dy, x, s: _positive_or(b, x, dy, b.f32(0.0)),
    "leaky_relu_grad": lambda b, dy, x, s: _positive_or(b, x, dy, arith.mulf(dy, b.f32(s))),
    "gelu_grad": lambda b, dy, x, s: arith.mulf(dy, _gelu_grad(b, x)),
    "exp_grad": lambda b, dy, out, s: arith.mulf(dy, out),
    "tanh_grad": lambda b, dy, out, s: _tanh_grad(b, dy, out),
    "sigmoid_grad": lambda b, dy, out, s: _sigmoid_grad(b, dy, out),
    "silu_grad": lambda b, dy, x, s: _silu_grad(b, dy, x),
}


def unary_value(b: Body, fn: str, v: Value, slope: float) -> Value:
    """``fn(v)`` for the unary row functions."""
    if fn not in UNARY:
        raise ValueError(f"unknown unary function {fn!r}")
    return UNARY[fn](b, v, slope)


def grad_value(b: Body, fn: str, dy: Value, ref: Value, slope: float) -> Value:
    """``dy * fn'(…)`` for the gradient row functions."""
    if fn not in GRAD:
        raise ValueError(f"unknown gradient function {fn!r}")
    return GRAD[fn](b, dy, ref, slope)


@dataclass(frozen=True)
class RowFn:
    """A traversal's row function (``fn``, its ``slope``) and how rows reach ``out``
    (``reduce``)."""

    fn: str
    slope: float
    reduce: str = "none"

    @classmethod
    def of(cls, v: OpAccess) -> RowFn:
        """The row function of the traversal template viewed by ``v``."""
        return cls(v.attr("fn"), float(v.attr("slope")), v.attr("reduce"))


def _heads_width(dx: int, heads: int, what: str) -> int:
    """Columns per head: ``dx / heads``; ``ValueError`` unless ``heads`` divides ``dx``."""
    if heads <= 0 or dx % heads:
        raise ValueError(f"the width of {what} ({heads} heads) must divide x's width {dx}")
    return dx // heads


def _dot(b: Body, e: Element, f: RowFn) -> Value:
    """``Σ_{d < Dh} x[xr, j*Dh + d] * y[yr, j*Dh + d]`` (per-head inner product)."""
    dh = _heads_width(width(b.ops["x"]), width(b.ops["out"]), "out")
    c0, c1, cdh = b.index(0), b.index(1), b.index(dh)
    base = arith.muli(e.col, cdh)
    zero = b.f32(0.0)

    def step(k: Value, acc: Value) -> Value:
        col = arith.addi(base, k)
        xv, yv = b.load("x", e.xr, col), b.load("y", e.yr, col)
        return arith.addf(acc, arith.mulf(xv, yv))

    return b.reduce(c0, cdh, c1, zero, step)


def _scale(b: Body, e: Element, x: Value) -> Value:
    """``x[j] * y[j / (Dx / Dy)]`` (per-head scale; ``y[0]`` for a one-column ``y``)."""
    dx, dy = width(b.ops["x"]), width(b.ops["y"])
    col = b.index(0)
    if dy > 1:
        col = arith.divui(e.col, b.index(_heads_width(dx, dy, "y")))
    return arith.mulf(x, b.load("y", e.yr, col))


_BINARY: dict[str, Callable[[Value, Value], Value]] = {
    "add": arith.addf,
    "mul": arith.mulf,
    "sub": arith.subf,
    "div": arith.divf,
    "exp_sub": lambda x, y: math.exp(arith.subf(x, y)),
    "eq": lambda x, y: arith.uitofp(x.type, arith.cmpf(arith.CmpFPredicate.OEQ, x, y)),
}


def _binary(b: Body, e: Element, x: Value, f: RowFn) -> Value:
    return _BINARY[f.fn](x, b.load("y", e.yr, e.col))


def _grad(b: Body, e: Element, x: Value, f: RowFn) -> Value:
    return grad_value(b, f.fn, x, b.load("y", e.yr, e.col), f.slope)


def _unary(b: Body, e: Element, x: Value, f: RowFn) -> Value:
    return unary_value(b, f.fn, x, f.slope)


# Elementwise row functions of x[xr, j] (already loaded): fn(body, element, x, rowfn) -> v.
_ELEMENTWISE: dict[str, Callable[[Body, Element, Value, RowFn], Value]] = {
    "copy": lambda b, e, x, f: x,
    "scale": lambda b, e, x, f: _scale(b, e, x),
    "add_bias": lambda b, e, x, f: arith.addf(x, b.load("y", e.col)),
    **{name: _binary for name in _BINARY},
    **{name: _grad for name in GRAD},
    **{name: _unary for name in UNARY},
}


RowValue: TypeAlias = Callable[[Body, Element, RowFn], Value]


def _reading_x(fn: Callable[[Body, Element, Value, RowFn], Value]) -> RowValue:
    """An elementwise row function, given ``x[xr, j]`` loaded first."""

    def value(b: Body, e: Element, f: RowFn) -> Value:
        return fn(b, e, b.load("x", e.xr, e.col), f)

    return value


# Every row function of the traversal template: fn(body, element, rowfn) -> v.
ROW_FNS: dict[str, RowValue] = {
    "dot": _dot,
    **{name: _reading_x(fn) for name, fn in _ELEMENTWISE.items()},
}
if set(ROW_FNS) != set(intra.TRAVERSAL_FNS):  # the spec and its lowering must agree
    _odd = sorted(set(ROW_FNS) ^ set(intra.TRAVERSAL_FNS))
    raise ImportError(f"traversal row functions in the spec or the lowering only: {_odd}")


def row_value(b: Body, e: Element, f: RowFn) -> Value:
    """``fn(x[xr, :], y[yr, :])[j]`` for one element."""
    return ROW_FNS[f.fn](b, e, f)


def _reduce_none(b: Body, e: Element, v: Value, atomic: bool) -> None:
    b.store("out", v, e.i, e.col)


def _reduce_max(b: Body, e: Element, v: Value, atomic: bool) -> None:
    assert e.d is not None
    if atomic:
        memref.atomic_rmw(arith.AtomicRMWKind.maximumf, v, b.ops["out"], [e.d, e.col])
        return
    cur = b.load("out", e.d, e.col)
    b.store("out", arith.maximumf(cur, v), e.d, e.col)


def _reduce_sum(b: Body, e: Element, v: Value, atomic: bool) -> None:
    idx = (e.d, e.col) if e.d is not None else (e.col,)
    b.accumulate("out", v, atomic, *idx)


# How an element's value reaches ``out``, by the template's ``reduce``.
REDUCE: dict[str, Callable[[Body, Element, Value, bool], None]] = {
    "none": _reduce_none,
    "max": _reduce_max,
    "sum": _reduce_sum,
    "atomic_sum": _reduce_sum,
}


def traversal_element(b: Body, f: RowFn, e: Element, atomic: bool) -> None:
    """``out[d or i, j] (=, +=, max=) fn(x[xr, :], y[yr, :])[j]`` for one element; ``atomic``
    when several threads may update one element (the GPU), whatever ``reduce`` says."""
    REDUCE[f.reduce](b, e, row_value(b, e, f), atomic)
