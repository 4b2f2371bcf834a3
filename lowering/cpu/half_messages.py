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
* exactly one template writes it: a ``gemm_template``, as ``out`` of an ``xw`` product with
  the ``store`` epilogue (each element written once: an accumulating GEMM would round every
  partial sum) on gathered rows (``gather_index``: one message per edge; node rows, such as
  RGCN's root product, are as many as the result's and stay f32, where rounding them would
  add a second rounding to the result's for few bytes), or an edge-wise
  (``parallel = "edge"``) ``traversal_template`` that does not reduce (HGT's keys and
  messages with their relation's bias added, ``[E, width]``),
* and every other use is a ``traversal_template`` reading it as ``x`` or ``y``, a
  ``memref.dim`` or its ``memref.dealloc``.

The sums of such a function become segmented sums: a buffer that is an f32 ``memref.alloc``
of rows at least :data:`MIN_WIDTH` wide, filled with zeros (``linalg.fill``, erased), summed
into by one ``traversal_template`` (``reduce = "sum"`` with a ``scatter_index``) and then
only read — as ``a`` of GEMMs, ``x`` or ``y`` of traversals — after it. The sum is marked
``hector.segmented_sum`` (``hector_intra.SEGMENTED_SUM``): the CPU groups its rows by output
row and writes each output row once from its f32 sum (the same additions in the same order as
the accumulating form), so no f32 accumulator is filled, read and written per row. Where only
GEMMs read the sum — aggregate-first RGCN's sums into the (destination, relation) pairs,
``[D, width]``, read as the rows of the scatter-GEMM over the pairs, which rounds them to
bf16 for its pair products anyway — it is stored in the half type as well, rounded once; sums
traversals read (HGT's and RGAT's sums into destinations, normalised or activated next) stay
f32.

Per-head dot products are marked for vector sums by the next pass, ``hector-vector-dots``
(``lowering/cpu/vector_dots.py``), in every function.

Narrower sums, attention scores and softmax terms stay f32. A function with f32 results whose
GEMMs compute on bf16 pairs (a training step's ``_train`` and ``_backward`` on bf16 features:
:func:`program_half_type`) takes its half type from its arguments; in it the pass keeps every
value's f32 bits (no message narrowed, sums segmented but not stored in half) and folds the
copy that rounds an f32 buffer into a half output argument (a saved value ``hector-half-saved``
stores in bf16) into the buffer's one writer (:func:`copies_to_fold`), as it does in inference
functions; a function with mixed results is treated alike. As with PyTorch's autocast, which
returns a bf16 matmul's result in bf16, the extra rounding adds at most half a bf16 unit in the
last place of each message to the error (``docs/optimizations.md``, "Traversals of bf16
programs"). The pass runs in the CPU pipeline after ``hector-schedule``; the GEMM templates'
epilogues and their row-at-a-time form write half outputs (``lowering/cpu/tiles.py``,
``lowering/templates.py``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from mlir import ir
from mlir.dialects import memref

from ...dialects import hector_intra as intra
from ...dialects.builders import OpAccess
from ...passes.registry import register_pass
from ...passes.walk import walk_ops
from .in_place import pack_narrowed

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
        roles = _role(user, buffer)
        if "out" in roles:
            if roles != ["out"] or not _writes_messages(intra.view(user)):
                return False
            writers += 1
        elif user.name != _TRAVERSAL or not set(roles) <= {"x", "y"}:
            return False
    return writers == 1


def _writes_messages(v: OpAccess) -> bool:
    """Whether template ``v`` writes each element of its ``out`` once, one row per edge: an
    ``xw`` GEMM storing the products of gathered rows, or an edge-wise traversal that does
    not reduce (HGT's keys and messages plus their relation's bias)."""
    if v.spec.name == intra.GEMM_TEMPLATE.name:
        store = v.attr("variant") == "xw" and v.attr("epilogue") == "store"
        return store and v.has("gather_index")
    return v.attr("reduce") == "none" and v.attr("parallel") == "edge"


def narrow(alloc: ir.Operation, element: ir.Type) -> None:
    """Replace ``alloc`` by an allocation of the same shape in ``element``."""
    t = ir.MemRefType(alloc.results[0].type)
    with alloc.location, ir.InsertionPoint(alloc):
        half = memref.alloc(ir.MemRefType.get(t.shape, element), list(alloc.operands), [])
    alloc.results[0].replace_all_uses_with(half)
    alloc.erase()


#: Uses of a summed buffer after its sum that read it (template, roles).
_SUM_READERS = {_GEMM: {"a"}, _TRAVERSAL: {"x", "y"}}


@dataclass(frozen=True)
class SummedBuffer:
    """A buffer zero-filled once and summed into once (``alloc``, ``fill``, ``sum``), and
    whether only GEMMs read it (``narrow``: it may then be stored in half)."""

    alloc: ir.Operation
    fill: ir.Operation
    sum: ir.Operation
    narrow: bool


def sums_to_group(fn: ir.Operation) -> list[SummedBuffer]:
    """The sums of ``fn`` that become segmented sums (module docstring)."""
    ops = list(walk_ops(fn))
    position = {op: i for i, op in enumerate(ops)}
    return [
        got
        for op in ops
        if op.name == "memref.alloc" and (got := _summed_once(op, position)) is not None
    ]


def _summed_once(alloc: ir.Operation, position: dict[ir.Operation, int]) -> SummedBuffer | None:
    """``alloc``'s buffer when it is zero-filled once, summed into once by a traversal with a
    ``scatter_index``, and only read after that sum; else None."""
    buffer = alloc.results[0]
    t = ir.MemRefType(buffer.type)
    if t.rank != 2 or not isinstance(t.element_type, ir.F32Type) or t.shape[1] < MIN_WIDTH:
        return None
    fills, sums, readers = [], [], []
    for use in buffer.uses:
        user = use.owner.operation
        if user.name in _SHAPE_USES:
            continue
        roles = set(_role(user, buffer)) if user.name in _ROLES else set()
        if user.name == "linalg.fill" and _fills_zero(user, buffer):
            fills.append(user)
        elif user.name == _TRAVERSAL and roles == {"out"}:
            sums.append(user)
        elif user.name in _SUM_READERS and roles and roles <= _SUM_READERS[user.name]:
            readers.append(user)
        else:
            return None
    if len(fills) != 1 or len(sums) != 1 or not _groupable(intra.view(sums[0])):
        return None
    fill, summed = fills[0], sums[0]
    if fill not in position or summed not in position or position[fill] > position[summed]:
        return None
    if any(r not in position or position[r] < position[summed] for r in readers):
        return None
    narrow = bool(readers) and all(r.name == _GEMM for r in readers)
    return SummedBuffer(alloc, fill, summed, narrow)


def _fills_zero(fill: ir.Operation, buffer: ir.Value) -> bool:
    """Whether ``fill`` writes the constant 0.0 into ``buffer``."""
    value, out = fill.operands[0], fill.operands[1]
    owner = value.owner
    if out != buffer or not isinstance(owner, ir.OpView | ir.Operation):
        return False
    if owner.operation.name != "arith.constant":
        return False
    attr = owner.operation.attributes["value"]
    return isinstance(attr, ir.FloatAttr) and attr.value == 0.0


def _groupable(v: OpAccess) -> bool:
    """A sum whose rows a segmented sum may group: ``reduce = "sum"`` into the rows a
    ``scatter_index`` names."""
    return v.attr("reduce") == "sum" and v.has("scatter_index")


def segment(summed: SummedBuffer, element: ir.Type) -> None:
    """Make ``summed``'s sum a segmented sum (``hector.segmented_sum``, which writes every row
    once): its zero fill erased, its buffer stored in ``element`` where only GEMMs read it."""
    summed.fill.erase()
    summed.sum.attributes[intra.SEGMENTED_SUM] = ir.UnitAttr.get()
    if summed.narrow:
        narrow(summed.alloc, element)


def program_half_type(fn: ir.Operation) -> ir.Type | None:
    """The half type ``fn``'s forms store in: its results' (:func:`results_half_type`), else,
    where it computes its GEMMs on bf16 pairs (a ``products = "bf16"`` schedule: a training
    step's functions on bf16 features, f32 weights and f32 results), bf16 when every half
    argument it takes is bf16."""
    element = results_half_type(fn)
    if element is not None:
        return element
    pairs = any(op.name == _GEMM and _bf16_products(op) for op in walk_ops(fn))
    if not pairs:
        return None
    stored = set()
    for arg in fn.regions[0].blocks[0].arguments:
        if isinstance(arg.type, ir.MemRefType):
            t = ir.MemRefType(arg.type).element_type
            if isinstance(t, _HALVES):
                stored.add(str(t))
    return ir.BF16Type.get() if stored == {"bf16"} else None


def _bf16_products(op: ir.Operation) -> bool:
    if "schedule" not in op.attributes:
        return False
    schedule = ir.DictAttr(op.attributes["schedule"])
    return "products" in schedule and ir.StringAttr(schedule["products"]).value == "bf16"


@dataclass(frozen=True)
class StoredCopy:
    """A ``copy`` traversal at the end of a function that rounds an f32 buffer (``alloc``) into
    the function's half output argument ``out`` (``convert-hector-inter-to-intra``'s copy of a
    result stored in half: a training step's saved values, ``passes/half_saved.py``)."""

    alloc: ir.Operation
    copy: ir.Operation
    out: ir.Value
    writer: ir.Operation


def copies_to_fold(fn: ir.Operation) -> list[StoredCopy]:
    """The copies whose buffer's one writer may write the half output itself: an ``xw`` GEMM
    storing each element once, a non-reducing traversal, or a sum :func:`sums_to_group`
    takes (then a segmented sum); every other use reads it (GEMM ``a``, traversal ``x`` /
    ``y``), its shape or frees it."""
    found = []
    for op in walk_ops(fn):
        if op.name != _TRAVERSAL or not _plain_copy(intra.view(op)):
            continue
        v = intra.view(op)
        src, out = v.operand("x"), v.operand("out")
        if not isinstance(out, ir.BlockArgument) or isinstance(src, ir.BlockArgument):
            continue
        owner = src.owner
        if (
            not isinstance(owner, ir.OpView | ir.Operation)
            or owner.operation.name != "memref.alloc"
        ):
            continue
        alloc = owner.operation
        t, o = ir.MemRefType(src.type), ir.MemRefType(out.type)
        if not isinstance(t.element_type, ir.F32Type) or not isinstance(o.element_type, _HALVES):
            continue
        if t.rank != 2 or o.rank != 2 or t.shape[1] != o.shape[1]:
            continue
        writer = _one_writer(src, op.operation)
        if writer is not None:
            found.append(StoredCopy(alloc, op.operation, out, writer))
    return found


def _plain_copy(v: OpAccess) -> bool:
    """A row-for-row ``copy``: no index, no reduction."""
    plain = not any(v.has(i) for i in ("gather_index", "scatter_index", "y_index"))
    return v.attr("fn") == "copy" and v.attr("reduce") == "none" and plain and not v.has("y")


def _one_writer(buffer: ir.Value, copy: ir.Operation) -> ir.Operation | None:
    """The one writer of ``buffer`` when its uses but ``copy`` are that writer (one
    :func:`copies_to_fold` accepts), readers, a zero fill, its shape and its dealloc."""
    writers = []
    for use in buffer.uses:
        user = use.owner.operation
        if user == copy or user.name in _SHAPE_USES or user.name == "linalg.fill":
            continue
        roles = _role(user, buffer) if user.name in _ROLES else []
        if "out" in roles:
            if roles != ["out"] or not _writes_once(intra.view(user)):
                return None
            writers.append(user)
        elif not roles or not set(roles) <= _SUM_READERS[user.name]:
            return None
    return writers[0] if len(writers) == 1 else None


def _writes_once(v: OpAccess) -> bool:
    """An ``xw`` GEMM storing its products, or a traversal that does not reduce or sums
    into a ``scatter_index`` (a segmented sum then)."""
    if v.spec.name == intra.GEMM_TEMPLATE.name:
        return v.attr("variant") == "xw" and v.attr("epilogue") == "store"
    return v.attr("reduce") == "none" or _groupable(v)


def fold(stored: StoredCopy, summed: SummedBuffer | None) -> None:
    """The buffer's writer writes ``stored.out`` itself (rounding once, as the copy did); the
    copy and the buffer go. A sum becomes a segmented sum (its zero fill erased)."""
    if summed is not None:
        summed.fill.erase()
        summed.sum.attributes[intra.SEGMENTED_SUM] = ir.UnitAttr.get()
    stored.copy.erase()
    buffer = stored.alloc.results[0]
    for use in list(buffer.uses):
        if use.owner.operation.name == "memref.dealloc":
            use.owner.operation.erase()
    buffer.replace_all_uses_with(stored.out)
    stored.alloc.erase()


@register_pass(
    "hector-half-messages",
    "In a function whose results are all stored in one half type, store the f32 GEMM outputs "
    "that only traversals read (per-edge messages), and the gathered sums GEMMs read (as "
    "segmented sums), in that type: rounded once as written, widened as read",
)
def run(module_op: ir.Operation) -> None:
    """Pass entry point: every rebuilt function with a half type (:func:`program_half_type`)."""
    for fn in list(module_op.regions[0].blocks[0].operations):
        fn = fn.operation
        if fn.name != "func.func" or not len(fn.regions[0].blocks):
            continue
        element = program_half_type(fn)
        if element is not None:
            _halve(fn, element, keep_f32=results_half_type(fn) is None)


def _halve(fn: ir.Operation, element: ir.Type, keep_f32: bool) -> None:
    """The half forms of ``fn``; with ``keep_f32`` (f32 results: a training step's functions)
    only those that keep its values' f32 bits: sums stay f32 (segmented) and no message is
    narrowed (rounding HGT's training messages took its gradients' error from 1.8x to
    2.2x that of the f32 products on the same bf16 features)."""
    sums = {s.alloc: s for s in sums_to_group(fn)}
    for stored in copies_to_fold(fn):
        summed = sums.pop(stored.alloc, None)
        filled = any(u.owner.operation.name == "linalg.fill" for u in stored.alloc.results[0].uses)
        if summed is None and (filled or intra.view(stored.writer).has("scatter_index")):
            continue  # a sum sums_to_group declines, or a fill a writer would overwrite
        if summed is None or summed.sum == stored.writer:
            fold(stored, summed)
    if not keep_f32:
        for alloc in messages_to_narrow(fn):
            narrow(alloc, element)
    for summed in sums_to_group(fn):
        segment(replace(summed, narrow=summed.narrow and not keep_f32), element)
    pack_narrowed(fn)
