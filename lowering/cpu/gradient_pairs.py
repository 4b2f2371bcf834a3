"""``hector-pair-gradient-gemms``: an input-gradient GEMM and the weight-gradient GEMM reading
the same gradient rows, lowered as one pass over those rows (CPU).

``hector-autodiff`` gives every forward product ``out[o] = a[r] @ W[t]`` two backward products
that read the same rows of the output gradient ``dy``: the input gradient
``da[r] = dy[o] @ W[t]^T`` (an ``xwt`` template, ``dy`` its ``a``, ``o`` its ``gather_index``)
and the weight gradient ``dW[t] += a[r]^T ⊗ dy[o]`` (an ``xty``, ``dy`` its ``weight``, ``o`` its
``scatter_index``). Lowered apart, each packs the same gathered ``dy`` rows into a tile of its
own. This pass marks such a pair (``hector.gradient_pair`` on the ``xwt``) and moves the
``xwt`` right before its ``xty``; ``hector-outline-templates`` then outlines the two into one
function and ``convert-hector-intra-to-scf`` lowers them as one loop over row tiles: each tile's
gradient rows are packed once, and multiply ``W[t]^T`` (the ``xwt``'s rows, stored) and the
transposed ``a`` tile (accumulated into ``dW[t]``) from the same buffer
(:func:`hector.lowering.cpu.tiles.lower_gradient_pair`). Every product is computed as the two
templates compute it apart, so the results are the same, bit for bit.

A pair qualifies when (:func:`pair_mismatch`): the ``xwt`` reads the ``xty``'s row gradients
through the same index (``gather_index`` and ``scatter_index``, or neither) and the same weight
slices (``weight_index``, or neither), stores its rows unscattered (``epilogue = "store"``, no
``scatter_index``), neither has a ``row_scale`` or ``slice_rows``, neither writes an operand of
the other, and both carry the same packed f32 schedule. The ``xwt`` may move past an op only
when that op cannot touch its operands (:func:`movable_past`): pure arithmetic, allocations,
``memref.dim``, fills and frees of other buffers, loads and stores of module globals and calls
without operands (``hector-profile-kernels``' timers, which then time the pair as the ``xty``'s).

The lowering checks every mark again and rejects a stale one (an ``xwt`` not followed by a
qualifying ``xty``) with a diagnostic. The GPU lowerings ignore the mark.
"""

from __future__ import annotations

from mlir import ir

from ...dialects import hector_intra as intra
from ...dialects.builders import OpAccess
from ...passes.registry import register_pass

#: The mark on an ``xwt`` template lowered with the ``xty`` right after it.
MARK = "hector.gradient_pair"

_GEMM = "hector_intra.gemm_template"
#: Schedule fields the two templates share: the loop over row tiles and its workers. Each
#: keeps its own register block (``unroll``, ``tile_n``, ``vector``, ``tile_k``).
SHARED_FIELDS = ("tile_m", "pack", "parallel", "threads", "products")


def _same(a: ir.Value | None, b: ir.Value | None) -> bool:
    """Both absent, or the same value."""
    if a is None or b is None:
        return a is None and b is None
    return bool(a == b)


def _schedule_mismatch(xwt: ir.Operation, xty: ir.Operation) -> str | None:
    try:
        s, t = intra.schedule_of(xwt), intra.schedule_of(xty)
    except ValueError as err:
        return f"invalid schedule: {err}"
    if s is None or t is None:
        return "both templates need a schedule"
    if any(getattr(s, f) != getattr(t, f) for f in SHARED_FIELDS):
        return (
            f"the two schedules differ in their row tiles or workers ({', '.join(SHARED_FIELDS)})"
        )
    if not s.pack or s.products != "f32":
        return "the pair needs a packed schedule with f32 products"
    return None


def _operand_mismatch(x: OpAccess, y: OpAccess) -> str | None:
    if x.attr("epilogue") != "store" or x.has("scatter_index"):
        return "the xwt must store its rows unscattered"
    if x.has("row_scale") or y.has("row_scale"):
        return "neither template may scale its rows"
    if "slice_rows" in x.op.attributes or "slice_rows" in y.op.attributes:
        return "neither template may take slice_rows"
    if not _same(x.operand("a"), y.operand("weight")):
        return "the xwt's rows are not the xty's row gradients"
    if not _same(x.operand("gather_index"), y.operand("scatter_index")):
        return "the xwt's gather_index is not the xty's scatter_index"
    if not _same(x.operand("weight_index"), y.operand("weight_index")):
        return "the two templates read different weight slices"
    xs, ys = list(x.op.operands), list(y.op.operands)
    if any(x.operand("out") == v for v in ys) or any(y.operand("out") == v for v in xs):
        return "one template writes an operand of the other"
    return None


def pair_mismatch(xwt: ir.Operation, xty: ir.Operation) -> str | None:
    """Why templates ``xwt`` and ``xty`` cannot be lowered as one pair (module docstring), or
    None when they can."""
    if xwt.name != _GEMM or xty.name != _GEMM:
        return "both ops must be hector_intra.gemm_template"
    x, y = intra.view(xwt), intra.view(xty)
    if x.attr("variant") != "xwt" or y.attr("variant") != "xty":
        return "the first template must be an xwt and the second an xty"
    return _operand_mismatch(x, y) or _schedule_mismatch(xwt, xty)


#: Ops that touch no memory (or only create it, or read a buffer's sizes).
_INERT = ("memref.alloc", "memref.alloca", "memref.dim", "memref.get_global")


def _defined_by(value: ir.Value, name: str) -> bool:
    owner = value.owner
    return not isinstance(owner, ir.Block) and owner.operation.name == name


#: Ops whose result is a view of their first operand's memory.
_VIEWS = (
    "memref.subview",
    "memref.cast",
    "memref.reinterpret_cast",
    "memref.collapse_shape",
    "memref.expand_shape",
    "memref.view",
)


def _buffers(values: list[ir.Value]) -> list[ir.Value]:
    """``values`` and every value they are views of (through :data:`_VIEWS`)."""
    out: list[ir.Value] = []
    for v in values:
        while True:
            out.append(v)
            owner = v.owner
            if isinstance(owner, ir.Block) or owner.operation.name not in _VIEWS:
                break
            v = owner.operation.operands[0]
    return out


def movable_past(op: ir.Operation, xwt: ir.Operation) -> bool:
    """Whether template ``xwt`` may move from before ``op`` to after it: ``op`` cannot read
    what ``xwt`` writes nor write (or free) what it reads, directly or through a view of the
    same buffer (module docstring)."""
    name = op.name
    if name.startswith(("arith.", "index.")) or name in _INERT:
        return not op.regions or all(not len(r.blocks) for r in op.regions)
    used = _buffers(list(xwt.operands))
    if any(v == u for v in _buffers(list(op.operands)) for u in used):
        return False
    if name == "memref.dealloc":
        return True
    if name == "linalg.fill":  # a fill of another buffer itself, not of a view of one
        out = op.operands[len(op.operands) - 1]
        return isinstance(out, ir.BlockArgument) or _defined_by(out, "memref.alloc")
    if name in ("memref.load", "memref.store"):
        base = op.operands[0] if name == "memref.load" else op.operands[1]
        return _defined_by(base, "memref.get_global")
    return name == "func.call" and not len(op.operands)


def _partner(ops: list[ir.Operation], at: int) -> ir.Operation | None:
    """The first ``xty`` after the ``xwt`` ``ops[at]`` (its block's ops) that pairs with it,
    reached past ops the ``xwt`` may move past; None if there is none."""
    xwt = ops[at]
    for op in ops[at + 1 :]:
        if op.name == _GEMM and pair_mismatch(xwt, op) is None:
            return op
        if not movable_past(op, xwt):
            return None
    return None


def pair_gradient_gemms(module_op: ir.Operation) -> int:
    """Mark every qualifying pair and move its ``xwt`` right before its ``xty``; how many."""
    pairs: list[tuple[ir.Operation, ir.Operation]] = []
    for top in module_op.regions[0].blocks[0].operations:
        fn = top.operation
        if fn.name != "func.func":
            continue
        for block in fn.regions[0].blocks:
            ops = [op.operation for op in block.operations]
            for at, op in enumerate(ops):
                if op.name != _GEMM or intra.view(op).attr("variant") != "xwt":
                    continue
                partner = _partner(ops, at)
                if partner is not None and all(partner != y for _, y in pairs):
                    pairs.append((op, partner))
    for xwt, xty in pairs:
        xwt.move_before(xty)
        xwt.attributes[MARK] = ir.UnitAttr.get()
    return len(pairs)


@register_pass(
    "hector-pair-gradient-gemms",
    "Mark an input-gradient GEMM (xwt) and the weight-gradient GEMM (xty) that read the same "
    "gradient rows, moved next to each other, for convert-hector-intra-to-scf to lower as one "
    "pass over those rows (CPU)",
    checks_sizes=False,
)
def run(module_op: ir.Operation) -> None:
    """Pass entry point."""
    pair_gradient_gemms(module_op)
