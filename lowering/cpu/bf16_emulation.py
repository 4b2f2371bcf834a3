"""``hector-emulate-bf16-dot``: the bf16 pair products on a CPU without AVX512-BF16.

``HECTOR_BF16_DOT=emulate`` (:mod:`~hector.lowering.cpu.features`) compiles the bf16 pair
form of the scheduled GEMMs (:mod:`~hector.lowering.cpu.bf16`: tiles and weights packed in
pairs, the pair micro-kernel and its epilogue) on any x86 CPU: this pass, run before
``convert-vector-to-llvm``, rewrites every ``x86vector.avx512.dot`` into f32 vector arithmetic
that computes what ``vdpbf16ps`` computes, so the code of the bf16 path is run and its results
checked on machines whose CPU lacks the instruction. It is for tests: each dot becomes about
twenty AVX2 instructions instead of one.

Per f32 lane ``i``, as the instruction's reference says: ``acc += a[2i+1] · b[2i+1]``, then
``acc += a[2i] · b[2i]``, each product exact in f32 (two 8-bit significands), each sum rounded
to the nearest even; subnormal inputs (``acc`` and the bf16 values) read as zero and
subnormal sums are flushed to zero, keeping their sign, as the instruction does.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, vector

from ...passes.registry import PassFailure, register_pass
from ...passes.walk import walk_ops
from .bf16 import DOT_OP, LANES


def _like(t: ir.Type, element: ir.Type) -> ir.Type:
    """``element``, as a vector of ``t``'s shape when ``t`` is a vector."""
    if isinstance(t, ir.VectorType):
        return ir.VectorType.get(ir.VectorType(t).shape, element)
    return element


def _i32(t: ir.Type) -> ir.Type:
    return _like(t, ir.IntegerType.get_signless(32))


def _splat(t: ir.Type, bits: int, width: int = 32) -> ir.Value:
    """The integer ``bits`` of ``width`` bits, in the shape of ``t``."""
    element = ir.IntegerType.get_signless(width)
    attr = ir.IntegerAttr.get(element, bits)
    like = _like(t, element)
    if isinstance(like, ir.VectorType):
        return arith.constant(like, ir.DenseElementsAttr.get_splat(like, attr))
    return arith.constant(like, attr)


def _flushed(bits: ir.Value) -> ir.Value:
    """``bits`` (f32 values as ``i32``) with subnormals replaced by a zero of their sign."""
    t = bits.type
    exponent = arith.andi(bits, _splat(t, 0x7F800000))
    subnormal = arith.cmpi(arith.CmpIPredicate.eq, exponent, _splat(t, 0))
    return arith.select(subnormal, arith.andi(bits, _splat(t, -0x80000000)), bits)


def _f32(bits: ir.Value) -> ir.Value:
    return arith.bitcast(_like(bits.type, ir.F32Type.get()), _flushed(bits))


def _bits(value: ir.Value) -> ir.Value:
    return arith.bitcast(_i32(value.type), value)


def _halves(pairs: ir.Value) -> tuple[ir.Value, ir.Value]:
    """A ``vector<32xbf16>`` of pairs as two f32 vectors: the low (even) and the high (odd)
    element of each lane, widened exactly (a bf16 is the top half of an f32)."""
    i32v = ir.VectorType.get([LANES], ir.IntegerType.get_signless(32))
    bits = vector.bitcast(i32v, pairs)
    low = arith.shli(bits, _splat(i32v, 16))
    high = arith.andi(bits, _splat(i32v, -0x10000))
    return _f32(low), _f32(high)


def emulated_rounding(value: ir.Value) -> ir.Value:
    """``vcvtneps2bf16`` on the f32 ``value`` (scalar or vector): subnormals read as zero, the
    rest rounded to the nearest even bf16, a NaN kept a (quiet) NaN with the top of its
    payload."""
    t = value.type
    bits = _flushed(_bits(value))
    lowest = arith.andi(arith.shrui(bits, _splat(t, 16)), _splat(t, 1))
    rounded = arith.shrui(arith.addi(bits, arith.addi(lowest, _splat(t, 0x7FFF))), _splat(t, 16))
    quiet = arith.ori(arith.shrui(bits, _splat(t, 16)), _splat(t, 0x40))
    nan = arith.cmpf(arith.CmpFPredicate.UNO, value, value)
    i16 = _like(t, ir.IntegerType.get_signless(16))
    half = arith.trunci(i16, arith.select(nan, quiet, rounded))
    return arith.bitcast(_like(t, ir.BF16Type.get()), half)


def emulated_dot(acc: ir.Value, a: ir.Value, b: ir.Value) -> ir.Value:
    """``vdpbf16ps`` on ``acc`` (``vector<16xf32>``) and the pairs ``a``, ``b``
    (``vector<32xbf16>``) in f32 vector arithmetic (module docstring)."""
    a_low, a_high = _halves(a)
    b_low, b_high = _halves(b)
    start = _f32(_bits(acc))
    odd = _f32(_bits(arith.addf(start, arith.mulf(a_high, b_high))))
    return _f32(_bits(arith.addf(odd, arith.mulf(a_low, b_low))))


def _rounds_to_bf16(op: ir.Operation) -> bool:
    """Whether ``op`` is an ``arith.truncf`` from f32 to bf16 (scalar or vector)."""
    if op.name != "arith.truncf":
        return False
    source, result = op.operands[0].type, op.results[0].type
    if isinstance(result, ir.VectorType):
        source, result = ir.VectorType(source).element_type, ir.VectorType(result).element_type
    return isinstance(source, ir.F32Type) and isinstance(result, ir.BF16Type)


def emulate_bf16_dots(module_op: ir.Operation) -> int:
    """Rewrite every ``x86vector.avx512.dot`` of ``module_op`` (16 f32 lanes, the only form
    the pair micro-kernel makes) into :func:`emulated_dot`, and every rounding of f32 to bf16
    (``arith.truncf``, ``vcvtneps2bf16`` with AVX512-BF16, a library call LLVM's JIT does not
    provide without it) into :func:`emulated_rounding`; returns how many ops it rewrote."""
    rounded = emulate_bf16_roundings(module_op)
    dots = [op for op in walk_ops(module_op) if op.name == DOT_OP]
    for op in dots:
        acc_type = ir.VectorType(op.results[0].type)
        if acc_type.shape != [LANES] or not isinstance(acc_type.element_type, ir.F32Type):
            raise PassFailure(
                f"{DOT_OP} with {LANES} f32 lanes can be emulated, got {acc_type}", op.location
            )
        with ir.InsertionPoint(op), op.location:
            value = emulated_dot(op.operands[0], op.operands[1], op.operands[2])
        op.results[0].replace_all_uses_with(value)
        op.erase()
    return rounded + len(dots)


def emulate_bf16_roundings(module_op: ir.Operation) -> int:
    """Rewrite every rounding of f32 to bf16 (``arith.truncf``) of ``module_op`` into
    :func:`emulated_rounding`, so it compiles for the CPU JIT with or without AVX512-BF16 and
    gives ``vcvtneps2bf16``'s results on both; returns how many it rewrote."""
    roundings = [op for op in walk_ops(module_op) if _rounds_to_bf16(op)]
    for op in roundings:
        with ir.InsertionPoint(op), op.location:
            value = emulated_rounding(op.operands[0])
        op.results[0].replace_all_uses_with(value)
        op.erase()
    return len(roundings)


@register_pass(
    "hector-emulate-bf16-dot",
    "Rewrite x86vector.avx512.dot (vdpbf16ps) and f32-to-bf16 truncf (vcvtneps2bf16) into "
    "f32 and integer vector arithmetic with the same results, so the bf16 pair products run "
    "on CPUs without AVX512-BF16 (HECTOR_BF16_DOT=emulate; for tests)",
)
def run(module_op: ir.Operation) -> None:
    """Pass entry point."""
    emulate_bf16_dots(module_op)
