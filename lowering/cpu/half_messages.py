"""``hector-half-messages``: a half-precision inference program keeps its GEMMs' messages in half.

A function whose results are all stored in one half type (bf16 or f16: an inference call on
half weights and features, or under autocast) computes in f32, but its GEMM outputs that only
traversals read — RGAT's per-edge ``W_r h_j`` (``[E, heads * width]``), HGT's per-edge keys
and values — are written once and read once or twice per edge, so their bytes, not their
arithmetic, cost time. This pass stores such a buffer in the results' half type: the GEMM
rounds each element once, to the nearest even, as its epilogue writes it
(``templates.from_f32``, the rounding of ``Tensor.to``), and the traversals widen it on load,
as they read half features. A buffer qualifies when

* it is a ``memref.alloc`` of f32 rows ``[rows, width]``, ``width`` at least
  :data:`MIN_WIDTH` (never an argument: the caller's buffers keep their types),
* exactly one ``gemm_template`` writes it, as ``out`` of an ``xw`` product with the ``store``
  epilogue (each element written once: an accumulating GEMM would round every partial sum)
  on gathered rows (``gather_index``: one message per edge; node rows, such as RGCN's root
  product, are as many as the result's and stay f32, where rounding them would add a second
  rounding to the result's for few bytes),
* and every other use is a ``traversal_template`` reading it as ``x`` or ``y``, a
  ``memref.dim`` or its ``memref.dealloc``.

Sums, attention scores and softmax terms stay f32; training functions (f32 results) and
functions with f32 or mixed results are left as they are. As with PyTorch's autocast, which
returns a bf16 matmul's result in bf16, the extra rounding adds at most half a bf16 unit in the
last place of each message to the error (``docs/optimizations.md``, "Traversals of bf16
programs"). The pass runs in the CPU pipeline after ``hector-schedule``; the GEMM templates'
epilogues and their row-at-a-time form write half outputs (``lowering/cpu/tiles.py``,
``lowering/templates.py``).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import memref

from ...dialects import hector_intra as intra
from ...passes.registry import register_pass
from ...passes.walk import walk_ops

_GEMM, _TRAVERSAL = "hector_intra.gemm_template", "hector_intra.traversal_template"
#: Uses of a buffer that read its shape or free it.
_SHAPE_USES = ("memref.dim", "memref.dealloc")
_HALVES = (ir.BF16Type, ir.F16Type)


def results_half_type(fn: ir.Operation) -> ir.Type | None:
    """The half type every result of the rebuilt function ``fn`` is stored in (its trailing
    ``hector.outputs`` arguments), or None (no results, an f32 result, or two half types)."""
    attr = fn.attributes["hector.outputs"] if "hector.outputs" in fn.attributes else None
    if not isinstance(attr, ir.IntegerAttr):
        return None
    count = attr.value
    args = list(fn.regions[0].blocks[0].arguments)
    if count <= 0 or count > len(args):
        return None
    outputs = [a.type for a in args[-count:]]
    if not all(isinstance(t, ir.MemRefType) for t in outputs):
        return None
    elements = {str(ir.MemRefType(t).element_type) for t in outputs}
    element = ir.MemRefType(outputs[-1]).element_type
    if len(elements) != 1 or not isinstance(element, _HALVES):
        return None
    return element


#: The buffer operands of each template.
_ROLES = {_GEMM: ("a", "weight", "out"), _TRAVERSAL: ("x", "y", "out")}


def _role(op: ir.Operation, value: ir.Value) -> list[str]:
    """The roles ``value`` fills among a template's buffer operands."""
    v = intra.view(op)
    return [r for r in _ROLES[op.name] if v.has(r) and v.operand(r) == value]


def messages_to_narrow(fn: ir.Operation) -> list[ir.Operation]:
    """The ``memref.alloc`` ops of ``fn`` whose buffers qualify (module docstring)."""
    found = []
    for op in walk_ops(fn):
        if op.name != "memref.alloc" or not _qualifies(op.results[0]):
            continue
        found.append(op)
    return found


#: The narrowest rows narrowed: one 512-bit vector of f32. Narrower GEMM outputs are scores
#: (RGAT's attention terms, one column per head): few bytes, and a softmax's input.
MIN_WIDTH = 16


def _qualifies(buffer: ir.Value) -> bool:
    t = ir.MemRefType(buffer.type)
    if t.rank != 2 or not isinstance(t.element_type, ir.F32Type) or t.shape[1] < MIN_WIDTH:
        return False
    writers = 0
    for use in buffer.uses:
        user = use.owner.operation
        if user.name in _SHAPE_USES:
            continue
        if user.name == _GEMM:
            v = intra.view(user)
            store = v.attr("variant") == "xw" and v.attr("epilogue") == "store"
            if _role(user, buffer) != ["out"] or not store or not v.has("gather_index"):
                return False
            writers += 1
        elif user.name != _TRAVERSAL or not set(_role(user, buffer)) <= {"x", "y"}:
            return False
    return writers == 1


def narrow(alloc: ir.Operation, element: ir.Type) -> None:
    """Replace ``alloc`` by an allocation of the same shape in ``element``."""
    t = ir.MemRefType(alloc.results[0].type)
    with alloc.location, ir.InsertionPoint(alloc):
        half = memref.alloc(ir.MemRefType.get(t.shape, element), list(alloc.operands), [])
    alloc.results[0].replace_all_uses_with(half)
    alloc.erase()


@register_pass(
    "hector-half-messages",
    "In a function whose results are all stored in one half type, store the f32 GEMM outputs "
    "that only traversals read (per-edge messages) in that type: rounded once as written, "
    "widened as read",
)
def run(module_op: ir.Operation) -> None:
    """Pass entry point: every rebuilt function with half results."""
    for fn in list(module_op.regions[0].blocks[0].operations):
        fn = fn.operation
        if fn.name != "func.func" or not len(fn.regions[0].blocks):
            continue
        element = results_half_type(fn)
        if element is None:
            continue
        for alloc in messages_to_narrow(fn):
            narrow(alloc, element)
