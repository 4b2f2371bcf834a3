"""``hector-mma-to-nvvm``: ``nvgpu.mma.sync`` (m16n8k16 on bf16 or f16, f32 accumulators) to
``nvvm.mma.sync``, for the chip being compiled for.

Upstream's ``convert-nvgpu-to-nvvm`` cannot take bf16 operands ("failed to deduce operand PTX
types"), so the PTX stage lowers the tensor-core kernels' MMAs itself, before
``convert-gpu-to-nvvm``: each row of the A (``vector<4x2>``) and B (``vector<2x2>``) fragments
is one 32-bit register holding two 16-bit values (bf16: ``vector.bitcast`` to
``vector<1xi32>``, the lower-indexed value in the low half, as PTX packs them; f16: the
``vector<2xf16>`` NVVM takes), the accumulators four f32, and the
result struct's four f32 become the ``vector<2x2xf32>`` again. PTX then holds
``mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`` (or ``.f16.f16``).

A chip without ``mma.sync`` on 16-bit types (before sm_80) is refused here, naming the chip:
LLVM's NVPTX back end would otherwise abort the process ("Cannot select: intrinsic
llvm.nvvm.mma.m16n8k16.row.col.bf16").
"""

from __future__ import annotations

import re

from mlir import ir
from mlir.dialects import llvm, nvvm, vector

from ...passes.registry import Option, PassFailure, register_pass
from .host_emulation import ops_named

#: The oldest architecture with ``mma.sync`` m16n8k16 on bf16 (sm_80, Ampere).
MMA_MIN_SM = 80
_CHIP = re.compile(r"sm_(\d+)[af]?")


def chip_number(chip: str) -> int:
    """``90`` for ``sm_90`` / ``sm_90a``; ``ValueError`` for a name that is not ``sm_<n>``."""
    match = _CHIP.fullmatch(chip)
    if match is None:
        raise ValueError(f"unknown GPU architecture {chip!r} (expected sm_<number>)")
    return int(match.group(1))


def tensor_cores(chip: str) -> bool:
    """Whether ``chip`` has ``mma.sync`` m16n8k16 on bf16 and f16 (sm_80 and newer)."""
    return chip_number(chip) >= MMA_MIN_SM


def _ptx_type(element: ir.Type) -> ir.Attribute | None:
    # The bindings have no builder for #nvvm.mma_type; the attribute is a constant.
    if isinstance(element, ir.BF16Type):
        return ir.Attribute.parse("#nvvm.mma_type<bf16>")
    if isinstance(element, ir.F16Type):
        return ir.Attribute.parse("#nvvm.mma_type<f16>")
    return None


def _check(op: ir.Operation) -> ir.Attribute:
    """The PTX type of a supported MMA's operands, or a located error."""
    shape = [ir.IntegerAttr(x).value for x in ir.ArrayAttr(op.attributes["mmaShape"])]
    a, c = ir.VectorType(op.operands[0].type), ir.VectorType(op.operands[2].type)
    ptx = _ptx_type(a.element_type)
    if shape != [16, 8, 16] or ptx is None or not isinstance(c.element_type, ir.F32Type):
        raise PassFailure(
            f"hector-mma-to-nvvm lowers m16n8k16 MMAs of bf16 or f16 into f32 only, got shape "
            f"{shape} on {a.element_type} into {c.element_type}",
            op.location,
        )
    return ptx


def _registers(fragment: ir.Value, rows: int) -> list[ir.Value]:
    """Each row of a ``vector<rows x 2 x half>`` fragment as one register: ``vector<2xf16>``
    for f16 (as NVVM takes it), an i32 for bf16."""
    i32 = ir.IntegerType.get_signless(32)
    regs = []
    for r in range(rows):
        pair = vector.extract(fragment, [], [r])
        if isinstance(ir.VectorType(pair.type).element_type, ir.F16Type):
            regs.append(pair)
            continue
        word = vector.bitcast(ir.VectorType.get([1], i32), pair)
        regs.append(vector.extract(word, [], [0]))
    return regs


def _lower(op: ir.Operation, ptx: ir.Attribute) -> None:
    """Replace one ``nvgpu.mma.sync`` by ``nvvm.mma.sync`` and the packing around it."""
    f32 = ir.F32Type.get()
    with op.location, ir.InsertionPoint(op):
        a, b, c = op.operands
        acc = [vector.extract(c, [], [i, j]) for i in (0, 1) for j in (0, 1)]
        struct = llvm.StructType.get_literal([f32] * 4)
        mma = nvvm.MmaOp(
            struct,
            ir.Attribute.parse("#nvvm.shape<m = 16, n = 8, k = 16>"),
            ir.Attribute.parse("#nvvm.mma_layout<row>"),
            ir.Attribute.parse("#nvvm.mma_layout<col>"),
            _registers(a, 4),
            _registers(b, 2),
            acc,
            multiplicandAPtxType=ptx,
            multiplicandBPtxType=ptx,
        )
        parts = [llvm.extractvalue(f32, mma.result, [i]) for i in range(4)]
        d = vector.from_elements(ir.VectorType.get([2, 2], f32), parts)
    op.results[0].replace_all_uses_with(d)
    op.erase()


@register_pass(
    "hector-mma-to-nvvm",
    "Lower nvgpu.mma.sync (m16n8k16, bf16/f16 into f32) to nvvm.mma.sync for the chip; refuse "
    "chips before sm_80",
    chip=Option(str, "sm_90", "the GPU architecture compiled for (sm_<n>)"),
)
def run(module_op: ir.Operation, chip: str = "sm_90") -> None:
    """Pass entry point."""
    mmas = ops_named(module_op, ("nvgpu.mma.sync",))
    if not mmas:
        return
    types = [_check(op) for op in mmas]
    try:
        ok = tensor_cores(chip)
    except ValueError as err:
        raise PassFailure(str(err), mmas[0].location) from None
    if not ok:
        raise PassFailure(
            f"tensor-core MMA (mma.sync m16n8k16 on bf16/f16) needs sm_{MMA_MIN_SM} or newer; "
            f"the target is {chip}",
            mmas[0].location,
        )
    for op, ptx in zip(mmas, types, strict=True):
        _lower(op, ptx)
