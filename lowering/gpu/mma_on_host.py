"""``nvgpu.mma.sync`` run on the host (``hector-gpu-kernels-on-host``): a software m16n8k16
with the hardware's fragment layout, so the emulated kernel checks the kernel's fragment
index math against the product it must compute.

An ``mma.sync`` is a warp's collective: each lane holds a piece of A, B and C. On the host,
where a block's threads run one after another between barriers
(:mod:`.host_emulation`), each ``mma`` becomes three phases:

1. each thread writes its fragments, widened exactly to f32, into row ``tid`` of a scratch
   buffer ``[threads, 20]``: A's eight values (register ``q``, half ``h`` in slot ``2q + h``),
   B's four (slots 8–11), C's four (12–15);
2. ``gpu.barrier``; each thread computes its four results ``D[i][j] = C[i][j] + Σ_kk
   A[group + 8i, kk] · B[kk, 2·tig + j]`` (kk ascending, f32 multiply-adds: bf16 and f16
   products are exact in f32) reading A and B from the lanes of its warp that hold them, as
   the PTX ISA lays the fragments out (A ``(r, c)``: lane ``4·(r mod 8) + (c mod 8) / 2``,
   register ``r / 8 + 2·(c / 8)``; B ``(k, n)``: lane ``4·n + (k mod 8) / 2``, register
   ``k / 8``), and writes them to slots 16–19 of its row;
3. ``gpu.barrier``; each thread reads its results back.

The hardware's order of additions inside one ``mma`` is not specified; results agree to f32
rounding.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, gpu, memref, scf, vector

from ...passes.registry import PassFailure
from .. import templates as T

MMA_NAME = "nvgpu.mma.sync"
#: Scratch slots per thread: A (8), B (4), C (4), D (4).
A_SLOT, B_SLOT, C_SLOT, D_SLOT, SLOTS = 0, 8, 12, 16, 20


def check_mma(op: ir.Operation) -> None:
    """Refuse an MMA the host cannot run: not m16n8k16 into f32."""
    shape = [ir.IntegerAttr(x).value for x in ir.ArrayAttr(op.attributes["mmaShape"])]
    c = ir.VectorType(op.operands[2].type)
    if shape != [16, 8, 16] or not isinstance(c.element_type, ir.F32Type):
        raise PassFailure(
            f"only m16n8k16 MMAs into f32 run on the host, got shape {shape} into {c.element_type}",
            op.location,
        )


def _elements(v: ir.Value) -> list[ir.Value]:
    """Every element of a 2-D vector, row-major, widened to f32."""
    rows, cols = ir.VectorType(v.type).shape
    return [T.to_f32(vector.extract(v, [], [i, j])) for i in range(rows) for j in range(cols)]


def _index(value: int) -> ir.Value:
    return arith.constant(ir.IndexType.get(), value)


def _store_fragments(op: ir.Operation, scratch: ir.Value) -> None:
    tid = gpu.thread_id(gpu.Dimension.x)
    a, b, c = op.operands
    for base, values in ((A_SLOT, _elements(a)), (B_SLOT, _elements(b)), (C_SLOT, _elements(c))):
        for s, value in enumerate(values):
            memref.store(value, scratch, [tid, _index(base + s)])


def _a_at(r: ir.Value, kk: ir.Value) -> tuple[ir.Value, ir.Value]:
    """Lane and slot holding ``A[r, kk]``."""
    c2, c4, c8 = _index(2), _index(4), _index(8)
    lane = arith.addi(arith.muli(arith.remui(r, c8), c4), arith.divui(arith.remui(kk, c8), c2))
    reg = arith.addi(arith.divui(r, c8), arith.muli(arith.divui(kk, c8), c2))
    return lane, arith.addi(arith.muli(reg, c2), arith.remui(kk, c2))


def _b_at(kk: ir.Value, n: ir.Value) -> tuple[ir.Value, ir.Value]:
    """Lane and slot holding ``B[kk, n]``."""
    c2, c4, c8 = _index(2), _index(4), _index(8)
    lane = arith.addi(arith.muli(n, c4), arith.divui(arith.remui(kk, c8), c2))
    slot = arith.addi(arith.muli(arith.divui(kk, c8), c2), arith.remui(kk, c2))
    return lane, arith.addi(slot, _index(B_SLOT))


def _compute(scratch: ir.Value) -> None:
    """Phase 2: this thread's ``D`` from its warp's fragments, into its slots 16–19."""
    tid = gpu.thread_id(gpu.Dimension.x)
    lane = arith.remui(tid, _index(32))
    warp0 = arith.subi(tid, lane)
    group, tig = arith.divui(lane, _index(4)), arith.remui(lane, _index(4))
    for i in (0, 1):
        for j in (0, 1):
            row = arith.addi(group, _index(8 * i))
            col = arith.addi(arith.muli(tig, _index(2)), _index(j))
            init = memref.load(scratch, [tid, _index(C_SLOT + 2 * i + j)])
            loop = scf.ForOp(_index(0), _index(16), _index(1), [init])
            with ir.InsertionPoint(loop.body):
                kk = loop.induction_variable
                a_lane, a_slot = _a_at(row, kk)
                b_lane, b_slot = _b_at(kk, col)
                x = memref.load(scratch, [arith.addi(warp0, a_lane), a_slot])
                y = memref.load(scratch, [arith.addi(warp0, b_lane), b_slot])
                scf.yield_([arith.addf(loop.inner_iter_args[0], arith.mulf(x, y))])
            memref.store(loop.results[0], scratch, [tid, _index(D_SLOT + 2 * i + j)])


def _read_results(scratch: ir.Value) -> ir.Value:
    tid = gpu.thread_id(gpu.Dimension.x)
    d = [memref.load(scratch, [tid, _index(D_SLOT + s)]) for s in range(4)]
    return vector.from_elements(ir.VectorType.get([2, 2], T.f32_type()), d)


def emulate_mma(op: ir.Operation, scratch: ir.Value) -> None:
    """Replace the ``nvgpu.mma.sync`` ``op`` by the three phases of the module docstring
    around ``scratch`` (``memref<?x20xf32>``, a row per thread of the block)."""
    check_mma(op)
    with op.location, ir.InsertionPoint(op):
        _store_fragments(op, scratch)
        gpu.barrier()
        _compute(scratch)
        gpu.barrier()
        d = _read_results(scratch)
    op.results[0].replace_all_uses_with(d)
    op.erase()


def scratch_type() -> ir.MemRefType:
    """``memref<?x20xf32>``: the scratch rows of a block's threads."""
    return ir.MemRefType.get([ir.ShapedType.get_dynamic_size(), SLOTS], T.f32_type())
