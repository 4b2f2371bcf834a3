"""The register-blocked micro-kernel of a packed CPU tile, built as a transform-dialect script.

Each tile's ``linalg.matmul`` is marked with its register block (:func:`marked_matmul`) and
rewritten by a transform-dialect script built here (:func:`micro_kernel_script`): tiled to
``unroll × tile_n × 1``, vectorised, the contraction lowered to outer products (FMAs), and the
accumulators hoisted out of the reduction loop, so they stay in registers. A tile of bf16 pairs
multiplies through the pair dot-product micro-kernel of :mod:`~hector.lowering.cpu.bf16`
instead (:func:`product` picks).

An f32 ``xw`` tile whose output is wider than one register block multiplies by the weight packed
in column panels (:func:`panel_product`, ``packing.weight_panels``): panel by panel, so a panel
``[K, tile_n]`` is read contiguously and stays in cache while every register block of the tile's
rows uses it, optionally in reduction blocks of ``tile_k`` steps (the schedule's choice).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, linalg, transform
from mlir.dialects.transform import interpreter, structured
from mlir.dialects.transform import vector as transform_vector

from ...passes.registry import PassFailure
from ...passes.walk import walk_ops
from .. import templates as T
from . import bf16
from .packing import view
from .workers import leading_slice

Value = T.Value

#: Attribute marking a tile's ``linalg.matmul`` with its register block ``[rows, cols, 1]``.
MICRO_KERNEL = "hector.micro_kernel"
#: Attribute marking vector arithmetic that must round like the scalar row-at-a-time form (an
#: epilogue's scale and add): :func:`apply_micro_kernels` does not let LLVM contract it.
EXACT = "hector.exact_rounding"


def exact(value: Value) -> Value:
    """``value``, its defining op marked :data:`EXACT`."""
    value.owner.attributes[EXACT] = ir.UnitAttr.get()
    return value


def _i64_array(values: list[int]) -> ir.Attribute:
    return ir.DenseI64ArrayAttr.get(values)


def marked_matmul(lhs: Value, rhs: Value, acc: Value, block: tuple[int, int]) -> None:
    """``acc += lhs @ rhs``, marked for the micro-kernel script with its register block."""
    op = linalg.matmul(lhs, rhs, outs=[acc])
    owner = op.owner if isinstance(op, ir.Value) else op
    owner.attributes[MICRO_KERNEL] = _i64_array([block[0], block[1], 1])


def product(b: T.Body, lhs: Value, rhs: Value, acc: Value, block: tuple[int, int]) -> None:
    """``acc += lhs @ rhs``: f32 operands through the micro-kernel script, bf16 pairs
    (``i32`` buffers) through the pair dot-product micro-kernel."""
    if isinstance(ir.MemRefType(lhs.type).element_type, ir.IntegerType):
        bf16.matmul(b, lhs, rhs, acc, block)
    else:
        marked_matmul(lhs, rhs, acc, block)


def reduction_blocks(k_extent: int, tile_k: int) -> tuple[int, int, int]:
    """``(depth, full, rest)``: a reduction of ``k_extent`` steps in blocks of ``depth`` (all
    of it when ``tile_k`` is 0 or 1, the micro-kernel's own step, or not below ``k_extent``),
    ``full`` steps in whole blocks and ``rest`` steps in a last, shorter block."""
    depth = tile_k if 1 < tile_k < k_extent else k_extent
    full = k_extent // depth * depth
    return depth, full, k_extent - full


def panel_product(
    b: T.Body, lhs: Value, panels: Value, acc: Value, block: tuple[int, int], tile_k: int
) -> None:
    """``acc += lhs @ W`` for ``lhs`` ``[rows, K]`` and ``W`` packed in column panels
    ``[N / tile_n, K, tile_n]`` (``packing.weight_panels``): reduction block by block
    (:func:`reduction_blocks`), then panel by panel, each panel's product one marked matmul
    over the tile's rows (the micro-kernel tiles it to register blocks, rows inner), so the
    panel's block is read from cache by every register block. Between reduction blocks the
    accumulators are stored to ``acc`` and loaded again."""
    rows, k_extent = T.static_dim(lhs, 0), T.static_dim(lhs, 1)
    count, tile_n = T.static_dim(panels, 0), T.static_dim(panels, 2)
    depth, full, rest = reduction_blocks(k_extent, tile_k)
    c0, c1 = b.index(0), b.index(1)

    def reduction_block(k0: Value, steps: int) -> None:
        with b.loop(c0, b.index(count), c1) as j:
            panel = view(leading_slice(panels, j), [k0, 0], [steps, tile_n])
            out = view(acc, [0, arith.muli(j, b.index(tile_n))], [rows, tile_n])
            marked_matmul(view(lhs, [0, k0], [rows, steps]), panel, out, block)

    if full == depth:
        reduction_block(c0, depth)
    elif full:
        with b.loop(c0, b.index(full), b.index(depth)) as k0:
            reduction_block(k0, depth)
    if rest:
        reduction_block(b.index(full), rest)


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
