"""``convert-hector-intra-to-scf``: templates to ``scf.for`` loop nests for the CPU.

Each ``gemm_template`` becomes a row loop whose body walks ``k`` then ``j`` (contiguous weight
and output rows, which LLVM vectorises); each ``traversal_template`` becomes a row loop with an
inner column loop. Reductions accumulate sequentially (``atomic_sum`` needs no atomics on one
thread). Functions gain ``llvm.emit_c_interface`` so the CPU JIT can call them with memref
descriptors. Everything else in the function is kept as it is.

Templates are rewritten in place: the loop nest is built before the template, under its
location (so a diagnostic on any generated op points at the template's source), and the
template is erased.
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir
from mlir.dialects import memref

from ...dialects import hector_intra as intra
from ...dialects.builders import OpAccess
from ...passes.registry import PassFailure, register_pass
from .. import templates as T
from . import gradient_pairs, micro_kernel, tiles, traversal


def _lower_gemm(v: OpAccess) -> None:
    """One GEMM template as a row loop (the row's product in ``templates.gemm_row_cpu``)."""
    b = T.Body(T.operands(v))
    variant, epilogue = v.attr("variant"), v.attr("epilogue")
    c0, c1 = b.index(0), b.index(1)
    m = T.gemm_rows(b, c0)
    scratch = None
    if variant == "xw" and T.sums_row_apart(epilogue, b.ops["out"]):
        # one row, reused by every iteration
        row_type = ir.MemRefType.get([T.width(b.ops["out"])], T.f32_type())
        scratch = memref.alloca(row_type, [], [])
    with b.loop(c0, m, c1) as i:
        row = T.gemm_row_scale(b, T.gemm_row_prologue(b, i, T.slice_rows(v)))
        k_extent = T.static_dim(b.ops["a"], 1)
        n_extent = T.width(b.ops["weight"] if variant == "xty" else b.ops["out"])
        T.gemm_row_cpu(b, row, k_extent, n_extent, epilogue, variant, scratch)


def _lower_traversal(v: OpAccess) -> None:
    """One traversal template as a row loop around a column loop (a segmented sum: its rows
    grouped by output row, :func:`~.traversal.lower_segmented_sum`)."""
    if intra.SEGMENTED_SUM in v.op.attributes:
        traversal.lower_segmented_sum(v, threads=1)
        return
    b = T.Body(T.operands(v))
    f = T.RowFn.of(v)
    c0, c1 = b.index(0), b.index(1)
    m = T.traversal_rows(b, c0)
    cols = b.index(T.width(b.ops["out"]))
    with b.loop(c0, m, c1) as i:
        row = T.row_indices(b, i)
        with b.loop(c0, cols, c1) as j:
            T.traversal_element(b, f, row.at(j), atomic=False)


# How each template lowers, by op name.
LOWER: dict[str, Callable[[OpAccess], None]] = {
    "hector_intra.gemm_template": _lower_gemm,
    "hector_intra.traversal_template": _lower_traversal,
}


def body_ops(func: ir.Operation) -> list[ir.Operation]:
    """The ops of a function's single block (a list: the lowerings erase as they go)."""
    return [op.operation for op in func.regions[0].blocks[0].operations]


def functions(module_op: ir.Operation) -> list[tuple[ir.Operation, list[ir.Operation]]]:
    """The module's functions that are Hector's to lower, with their ops: those holding
    templates, and compiled functions (``hector.outputs``) even without any."""
    found = []
    for top in module_op.regions[0].blocks[0].operations:
        func = top.operation
        if func.name != "func.func" or not len(func.regions[0].blocks):
            continue
        ops = body_ops(func)
        if "hector.outputs" in func.attributes or any(
            op.name.startswith("hector_intra.") for op in ops
        ):
            found.append((func, ops))
    return found


# How each template lowers with a schedule (``hector_intra.Schedule``), by op name.
LOWER_SCHEDULED: dict[str, Callable[[OpAccess, intra.Schedule], None]] = {
    "hector_intra.gemm_template": tiles.lower_gemm,
    "hector_intra.traversal_template": traversal.lower_traversal,
}


#: Operand position of a GEMM template's weight (its spec's second operand).
_WEIGHT = T.GEMM_OPERANDS.index("weight")


def _widen_weight(op: ir.Operation) -> ir.Value | None:
    """A GEMM's f16 or bf16 weight copied to f32 once, before the template, which then reads
    the copy (returned, for the caller to free after it). Tiles re-read their weight slice for
    every block of rows: extending it there each time made a bf16 GEMM 12x slower than f32,
    and a weight is small beside the rows. An ``xty``'s weight operand is row gradients,
    read once: left as it is."""
    if op.name != "hector_intra.gemm_template" or intra.view(op).attr("variant") == "xty":
        return None
    weight = op.operands[_WEIGHT]
    t = ir.MemRefType(weight.type)
    if isinstance(t.element_type, ir.F32Type):
        return None
    wide = memref.alloc(ir.MemRefType.get(t.shape, T.f32_type()), [], [])
    b = T.Body(T.Operands({}))
    c0, c1 = b.index(0), b.index(1)

    def copy(idx: list[ir.Value], dims: list[int]) -> None:
        if not dims:
            memref.store(T.to_f32(memref.load(weight, idx)), wide, idx)
            return
        with b.loop(c0, b.index(dims[0]), c1) as i:
            copy([*idx, i], dims[1:])

    copy([], list(t.shape))
    op.operands[_WEIGHT] = wide
    return wide


def _schedule(op: ir.Operation) -> intra.Schedule | None:
    """The op's schedule; a malformed one is an error at the op's location."""
    try:
        return intra.schedule_of(op)
    except ValueError as err:
        raise PassFailure(f"invalid schedule: {err}", op.location) from None


def _lower_pair(xwt: ir.Operation, xty: ir.Operation | None) -> None:
    """A marked ``xwt`` and the ``xty`` after it as one loop (``hector-pair-gradient-gemms``);
    a stale mark is an error at the ``xwt``."""
    reason = "no template follows it" if xty is None else gradient_pairs.pair_mismatch(xwt, xty)
    if reason is not None or xty is None:
        raise PassFailure(f"stale {gradient_pairs.MARK} mark: {reason}", xwt.location)
    schedules = [_schedule(xwt), _schedule(xty)]
    for op, schedule in zip((xwt, xty), schedules, strict=True):
        assert schedule is not None  # pair_mismatch checked both
        try:
            tiles.check_gemm_schedule(intra.view(op), schedule)
        except ValueError as err:
            raise PassFailure(f"invalid schedule: {err}", op.location) from None
    s_xwt, s_xty = schedules
    assert s_xwt is not None
    assert s_xty is not None
    with xty.location, ir.InsertionPoint(xwt):
        wide = _widen_weight(xwt)
        try:
            tiles.lower_gradient_pair(intra.view(xwt), intra.view(xty), s_xwt, s_xty)
        except ValueError as err:
            raise PassFailure(f"cannot lower the gradient pair: {err}", xwt.location) from None
        if wide is not None:
            memref.dealloc(wide)
    xwt.erase()
    xty.erase()


def _lower_one(op: ir.Operation) -> None:
    """One template where it stands (scheduled ones as tiles and workers)."""
    schedule = _schedule(op)
    if schedule is not None and op.name == "hector_intra.gemm_template":
        try:
            tiles.check_gemm_schedule(intra.view(op), schedule)
        except ValueError as err:
            raise PassFailure(f"invalid schedule: {err}", op.location) from None
    with op.location, ir.InsertionPoint(op):
        wide = _widen_weight(op)
        try:
            if schedule is None:
                LOWER[op.name](intra.view(op))
            else:
                LOWER_SCHEDULED[op.name](intra.view(op), schedule)
        except ValueError as err:  # a shape the templates are not built for
            raise PassFailure(f"cannot lower {op.name}: {err}", op.location) from None
        if wide is not None:
            memref.dealloc(wide)
    op.erase()


def convert_function(func: ir.Operation, ops: list[ir.Operation]) -> None:
    """Lower every template among ``func``'s ``ops`` in place (scheduled ones as tiles and
    workers, a marked gradient pair as one loop); mark a public function for the C
    interface."""
    lowered = -1  # the position of an xty lowered with its xwt
    for at, op in enumerate(ops):
        if at == lowered or op.name not in LOWER:
            continue
        if gradient_pairs.MARK in op.attributes:
            _lower_pair(op, ops[at + 1] if at + 1 < len(ops) else None)
            lowered = at + 1
            continue
        _lower_one(op)
    if "sym_visibility" not in func.attributes:  # an entry point, not an outlined template
        func.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get(func.context)


@register_pass(
    "convert-hector-intra-to-scf",
    "Lower hector_intra templates to scf.for loop nests over memrefs (CPU back end)",
)
def run(module_op: ir.Operation) -> None:
    """Pass entry point."""
    for func, ops in functions(module_op):
        convert_function(func, ops)
    micro_kernel.apply_micro_kernels(module_op)
