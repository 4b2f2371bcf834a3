"""``hector-accumulate-sums``: a sum of two fresh buffers written into its output directly.

Autodiff sums the gradients of a value used twice with an elementwise ``add`` traversal; in
an RGCN layer's backward the input gradient is the root weight's product (a GEMM that stores
its rows) plus the messages' gradient (a traversal that scatter-sums edge rows into a
zero-filled buffer)::

    %p = memref.alloc        // stored by a template (gemm epilogue "store")
    %q = memref.alloc
    linalg.fill 0 -> %q      // then accumulated into by a later template
    ... template(..., %p) ... template(..., %q) {reduce = "sum"}
    traversal_template(%p, %q, %out) {fn = "add"}

Here the storing template writes ``%out`` itself and the accumulating one adds onto it: the
fill of ``%q``, the ``add`` and both buffers go (one pass over the rows less, two fewer
``[rows, width]`` buffers, no zero fill). The sum is the same up to the order of its
floating-point additions (the stored rows are added first rather than last).

The rewrite holds when

* ``%p`` and ``%q`` are ``memref.alloc`` results used only by their writer, the ``add``, a
  ``memref.dealloc`` and (``%q``) one zero ``linalg.fill``; both have ``%out``'s type;
* ``%p``'s writer is a GEMM with epilogue ``store`` and comes before ``%q``'s writer, which
  accumulates (a traversal with ``reduce = "sum"`` or a GEMM with epilogue ``add``) and does
  not read ``%out``'s old value otherwise;
* ``%out`` is defined before ``%p``'s writer and nothing between that writer and the ``add``
  touches it.

Anything else is left as it is. The rewrite holds on every back end (a reducing template adds
onto what its output holds on each), after ``convert-hector-inter-to-intra``, in the default
``intra`` stage (``lowering/pipelines.py``). The two buffers it saves lower the backward's peak
memory, so the next forward's requests are served by splitting larger idle blocks of the host
memory cache (figures: ``docs/optimizations.md``, "hector-accumulate-sums").
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from ..dialects import hector_intra as intra
from ..passes.registry import register_pass

__all__ = ["accumulate_sums"]

_GEMM, _TRAVERSAL = "hector_intra.gemm_template", "hector_intra.traversal_template"


def _owner(value: ir.Value) -> ir.Operation | None:
    """The op defining ``value`` (None for a block argument)."""
    owner = value.owner
    return None if isinstance(owner, ir.Block) else owner.operation


def _is_template(op: ir.Operation) -> bool:
    return op.name in (_GEMM, _TRAVERSAL)


def _out(op: ir.Operation) -> ir.Value:
    """A template's output: its last operand (``out`` in both templates' specs)."""
    return op.operands[len(op.operands) - 1]


def _stores(op: ir.Operation) -> bool:
    """Whether template ``op`` overwrites its output's rows without reading them."""
    return op.name == _GEMM and intra.view(op).attr("epilogue") == "store"


def _accumulates(op: ir.Operation) -> bool:
    """Whether template ``op`` adds onto what its output holds (and only adds)."""
    v = intra.view(op)
    if op.name == _GEMM:
        return v.attr("epilogue") == "add"
    return v.attr("reduce") == "sum"


def _is_zero_fill(op: ir.Operation) -> bool:
    if op.name != "linalg.fill":
        return False
    owner = _owner(op.operands[0])
    if owner is None or owner.name != "arith.constant":
        return False
    value = owner.attributes["value"]
    return isinstance(value, ir.FloatAttr) and value.value == 0.0


@dataclass
class _Buffer:
    """A fresh buffer summed by an ``add``: its alloc, its one writer, its fill, its dealloc."""

    alloc: ir.Operation
    writer: ir.Operation
    fill: ir.Operation | None
    dealloc: ir.Operation | None


def _buffer(value: ir.Value, add: ir.Operation) -> _Buffer | None:
    """``value`` as a :class:`_Buffer` of ``add``, or None when it is anything else."""
    alloc = _owner(value)
    if alloc is None or alloc.name != "memref.alloc":
        return None
    writer = fill = dealloc = None
    for use in value.uses:
        user = use.owner.operation
        if user == add:
            continue
        if user.name == "memref.dealloc" and dealloc is None:
            dealloc = user
        elif _is_zero_fill(user) and fill is None and use.operand_number == 1:
            fill = user
        elif _is_template(user) and writer is None and _out(user) == value:
            if any(v == value for v in list(user.operands)[:-1]):
                return None  # it reads the buffer too
            writer = user
        else:
            return None
    if writer is None:
        return None
    return _Buffer(alloc, writer, fill, dealloc)


def _before(a: ir.Operation, b: ir.Operation, order: dict[ir.Operation, int]) -> bool:
    return order[a] < order[b]


def _defined_before(value: ir.Value, op: ir.Operation, order: dict[ir.Operation, int]) -> bool:
    owner = _owner(value)
    return owner is None or (owner in order and order[owner] < order[op])


def _untouched_between(
    value: ir.Value, first: ir.Operation, last: ir.Operation, order: dict[ir.Operation, int]
) -> bool:
    """Whether no op from ``first`` up to (not including) ``last`` uses ``value``."""
    lo, hi = order[first], order[last]
    return all(not lo <= order.get(u.owner.operation, -1) < hi for u in value.uses)


def _summands(add: ir.Operation) -> tuple[_Buffer, _Buffer] | None:
    """``add``'s stored and accumulated buffers, in that order, or None when ``add`` is not a
    plain sum of two fresh buffers, one of each kind."""
    v = intra.view(add)
    if v.attr("fn") != "add" or v.attr("reduce") != "none":
        return None
    if any(v.has(n) for n in ("gather_index", "scatter_index", "y_index")):
        return None
    x, y = _buffer(v.operand("x"), add), _buffer(v.operand("y"), add)
    if x is None or y is None or x.alloc == y.alloc:
        return None
    stored, summed = (x, y) if _stores(x.writer) else (y, x)
    if not _stores(stored.writer) or summed.fill is None or not _accumulates(summed.writer):
        return None
    return stored, summed


def _rewrite(add: ir.Operation, order: dict[ir.Operation, int]) -> bool:
    """Fold ``add`` into its operands' writers when the module docstring's rule holds."""
    found = _summands(add)
    if found is None:
        return False
    stored, summed = found
    out = intra.view(add).operand("out")
    holds = (
        all(b.alloc.results[0].type == out.type for b in found)
        and _before(stored.writer, summed.writer, order)
        and summed.fill is not None
        and _before(summed.fill, summed.writer, order)
        and _defined_before(out, stored.writer, order)
        and _untouched_between(out, stored.writer, add, order)
    )
    if not holds:
        return False
    for writer in (stored.writer, summed.writer):
        writer.operands[len(writer.operands) - 1] = out
    for op in (summed.fill, add, stored.dealloc, summed.dealloc, stored.alloc, summed.alloc):
        if op is not None:
            op.erase()
    return True


def accumulate_sums(module_op: ir.Operation) -> int:
    """Rewrite every sum of the module's functions that the rule allows; how many were."""
    done = 0
    for top in module_op.regions[0].blocks[0].operations:
        fn = top.operation
        if fn.name != "func.func" or not len(fn.regions[0].blocks):
            continue
        ops = [op.operation for op in fn.regions[0].blocks[0].operations]
        adds = [op for op in ops if op.name == _TRAVERSAL]
        for add in adds:
            order = {op.operation: i for i, op in enumerate(fn.regions[0].blocks[0].operations)}
            done += _rewrite(add, order)
    return done


@register_pass(
    "hector-accumulate-sums",
    "A sum of a GEMM's stored rows and a later template's accumulated rows, each in a fresh "
    "buffer, written into the sum's output directly (no add, no zero fill, no buffers)",
)
def run(module_op: ir.Operation) -> None:
    """Pass entry point."""
    accumulate_sums(module_op)
