"""``convert-placement-to-runtime``: placement decisions become calls of the native runtime.

Runs on training programs that ``placement-plan-saved`` planned, on memrefs (after the loop
nests are built; any level from ``hector_intra`` down to ``scf`` works). For each pair
``@f_train`` / ``@f_backward`` it rewrites the functions so the slots in ``placement.dropped``
are no longer passed between them, and lowers each decision into ``func.call`` ops of the C ABI
in ``hector/placement.h`` (``libhector_runtime.so``, which the CPU JIT loads):

* ``placement.offload`` (``@f_train``): the saved value's output argument becomes a buffer the
  function allocates; where the marker is (right after the value's last writer),
  ``hector_place_write(slot, ptr, nbytes)`` starts writing it to the store while the kernels
  that still read it run; after its last use, up to ``write_lag`` more kernels (so the write
  overlaps them) but before any kernel that first touches a new buffer (which would add to
  the value's bytes at a new high), ``hector_place_wait(slot)`` runs and the buffer is freed;
  an offload carrying ``placement.write_lag`` (the planner's, where its model shows the peak
  unaffected) is waited for that many kernels later, new buffers or not;
* ``placement.recompute`` (``@f_train``): the output argument becomes a buffer freed at the end;
  (``@f_backward``) the marker on the rebuilt buffer is dropped;
* ``placement.prefetch {ahead}`` (``@f_backward``): the saved value's argument becomes a buffer
  allocated ``ahead`` kernels before its first use, where ``hector_place_prefetch(slot, ptr,
  nbytes)`` starts reading it; ``hector_place_wait(slot)`` runs right before the first use, and
  after the last one ``hector_place_release(slot)`` deletes the stored copy and the buffer is
  freed;
* ``placement.keep``: nothing to do (the value stays a result).

With ``early_free`` (default) both functions of a planned pair also free every temporary
right after its last use instead of at the end: the budget bounds what the step keeps, and the
temporaries it does not keep should not outlive their use either.

A kernel is a top-level op that holds a loop nest (or a template, a ``linalg`` op, a copy).
No Python runs between the kernels and the store: the calls are in the generated code, against
the frame the caller made current (``hector.runtime.placement``). :func:`dropped_slots` tells
the caller which saved results no longer cross the ABI.
"""

from __future__ import annotations

from typing import Any

from mlir import ir
from mlir.dialects import arith, func, memref

from ..dialects import placement
from ..passes import saved_liveness
from ..passes.plan_saved import (
    DROPPED,
    ROWS,
    WRITE_LAG,
    WRITE_LAG_ATTR,
    SavedValue,
    TrainingPair,
    training_pairs,
    users,
)
from ..passes.registry import Option, PassFailure, register_pass

__all__ = ["RUNTIME_FUNCTIONS", "dropped_slots", "has_placement_calls"]

#: The C functions generated code calls, with their number of i64 arguments.
RUNTIME_FUNCTIONS = {
    "hector_place_write": 3,
    "hector_place_wait": 1,
    "hector_place_prefetch": 3,
    "hector_place_release": 1,
}
_PREFIX = f"{placement.DIALECT.name}."
#: Function attribute: the slots this conversion dropped from the ABI.
LOWERED = "placement.lowered"


def _write_lag(op: ir.Operation) -> int:
    """An offload's ``placement.write_lag``: a count of kernels (integer, at least 0)."""
    attr = op.attributes[WRITE_LAG_ATTR]
    if not isinstance(attr, ir.IntegerAttr) or ir.IntegerAttr(attr).value < 0:
        raise PassFailure(
            f"convert-placement-to-runtime: {WRITE_LAG_ATTR} must be a count of kernels "
            f"(an integer >= 0), got {attr}",
            op.location,
        )
    return ir.IntegerAttr(attr).value


def dropped_slots(module: Any) -> dict[str, tuple[int, ...]]:
    """``{function name: slots}`` of every planned ``@f_train`` / ``@f_backward``: the saved
    values that no longer cross the ABI (offloaded or recomputed)."""
    out: dict[str, tuple[int, ...]] = {}
    for op in module.body.operations:
        op = op.operation
        for attr in (DROPPED, LOWERED):
            if op.name == "func.func" and attr in op.attributes:
                name = ir.StringAttr(op.attributes["sym_name"]).value
                slots = ir.ArrayAttr(op.attributes[attr])
                out[name] = tuple(ir.IntegerAttr(a).value for a in slots)
    return out


def has_placement_calls(module: Any) -> bool:
    """Whether ``module`` declares any of the runtime's placement functions."""
    for op in module.body.operations:
        op = op.operation
        if op.name in ("func.func", "llvm.func") and "sym_name" in op.attributes:
            if ir.StringAttr(op.attributes["sym_name"]).value in RUNTIME_FUNCTIONS:
                return True
    return False


def _kernel(op: ir.Operation) -> bool:
    """Whether ``op`` does a pass over data (the unit ``ahead`` and ``write_lag`` count)."""
    return (
        len(op.regions) > 0
        or op.name.startswith(("linalg.", "hector_intra."))
        or op.name == "memref.copy"
    )


def _ops(block: ir.Block) -> list[ir.Operation]:
    return [o.operation for o in block.operations]


def _i64_const(value: int, loc: ir.Location) -> ir.Value:
    return arith.constant(ir.IntegerType.get_signless(64), value, loc=loc)


class _Lowering:
    """Rewrites one planned pair."""

    def __init__(self, pair: TrainingPair, write_lag: int) -> None:
        self.pair = pair
        self.write_lag = write_lag
        self.saved = {s.slot: s for s in pair.saved}
        self.calls = 0
        self.placed: set[ir.Value] = set()  # buffers whose frees the calls order
        self.n_outputs = ir.IntegerAttr(pair.train.attributes["hector.outputs"]).value

    # -- helpers ---------------------------------------------------------------------------
    def rows(self, block: ir.Block, s: SavedValue, loc: ir.Location) -> ir.Value:
        """The row count of ``s`` in a function whose first arguments are the graph arrays."""
        from ..dialects.hector_intra import GRAPH_LAYOUT

        names = [a.name for a in GRAPH_LAYOUT]
        array = block.arguments[names.index(ROWS[s.kind][1])]
        return memref.dim(array, arith.constant(ir.IndexType.get(), 0, loc=loc), loc=loc)

    def alloc(self, block: ir.Block, s: SavedValue, loc: ir.Location) -> ir.Value:
        """A buffer for ``s`` (at the current insertion point)."""
        # Page-aligned, so the store's O_DIRECT transfers go straight from and to it.
        return memref.alloc(s.mtype, [self.rows(block, s, loc)], [], alignment=4096, loc=loc)

    def address(self, buffer: ir.Value, s: SavedValue, loc: ir.Location) -> list[ir.Value]:
        """``(slot, ptr, nbytes)`` as i64 for a call on ``buffer``."""
        i64, index = ir.IntegerType.get_signless(64), ir.IndexType.get()
        ptr = memref.extract_aligned_pointer_as_index(buffer, loc=loc)
        rows = memref.dim(buffer, arith.constant(index, 0, loc=loc), loc=loc)
        nbytes = arith.muli(rows, arith.constant(index, s.row_bytes, loc=loc), loc=loc)
        return [
            _i64_const(s.slot, loc),
            arith.index_cast(i64, ptr, loc=loc),
            arith.index_cast(i64, nbytes, loc=loc),
        ]

    def call(self, name: str, args: list[ir.Value], loc: ir.Location) -> ir.Operation:
        """A call of runtime function ``name`` (at the current insertion point)."""
        self.calls += 1
        return func.CallOp([], ir.FlatSymbolRefAttr.get(name), args, loc=loc).operation

    def own(self, fn: ir.Operation, arg: ir.BlockArgument, s: SavedValue) -> ir.Value:
        """Replace output argument ``arg`` by a buffer allocated right before its first use in
        ``fn`` and freed before its return; return the buffer."""
        block = fn.regions[0].blocks[0]
        first = [u for u in users(arg, fn) if not u.name.startswith(_PREFIX)]
        at = ir.InsertionPoint(first[0]) if first else ir.InsertionPoint.at_block_begin(block)
        with at:
            buffer = self.alloc(block, s, arg.location)
        arg.replace_all_uses_with(buffer)
        with ir.InsertionPoint(_ops(block)[-1]):
            memref.dealloc(buffer, loc=arg.location)
        return buffer

    # -- the functions ---------------------------------------------------------------------
    def train(self) -> None:
        fn = self.pair.train
        block = fn.regions[0].blocks[0]
        for op in [o for o in _ops(block) if o.name.startswith(_PREFIX)]:
            v = placement.view(op)
            s = self.saved[v.attr("scope")]
            if op.name == f"{_PREFIX}offload":
                self.offload(fn, op, s)
            elif op.name == f"{_PREFIX}recompute":
                self.own(fn, s.train_arg, s)
            elif op.name != f"{_PREFIX}keep":
                raise PassFailure(
                    f"convert-placement-to-runtime: '{op.name}' has no meaning in @f_train",
                    op.location,
                )
            op.erase()

    def offload(self, fn: ir.Operation, op: ir.Operation, s: SavedValue) -> None:
        """Write ``s`` right after its last use; wait ``write_lag`` kernels later and free it."""
        block = fn.regions[0].blocks[0]
        loc = op.location
        buffer = self.own(fn, s.train_arg, s)
        self.placed.add(buffer)
        dealloc = [u.owner for u in buffer.uses if u.owner.operation.name == "memref.dealloc"]
        (free,) = dealloc
        free = free.operation
        # The marker follows the value's last writer: the write starts there, and the kernels
        # that still read the value overlap it.
        with ir.InsertionPoint(op):
            write = self.call("hector_place_write", self.address(buffer, s, loc), loc)
        done = users(buffer, fn, skip=(op, free, write))
        # The write overlaps the next write_lag kernels, but none that brings new memory in:
        # overlapping those would hold this value and the new buffer at once, at a new high.
        ops = _ops(block)
        first_output = len(self.pair.tblock.arguments) - self.n_outputs
        growing = saved_liveness.grows(fn, first_output)
        lag = self.write_lag
        if WRITE_LAG_ATTR in op.attributes:  # the planner's: growing kernels cost no peak there
            lag = _write_lag(op)
            growing = [False] * len(ops)
        i = ops.index(free)
        last = max(ops.index(write), ops.index(done[-1]) if done else 0)
        j = saved_liveness.write_done(ops, last, lag, growing)
        j = min(j, i)
        with ir.InsertionPoint(ops[j]):
            self.call("hector_place_wait", [_i64_const(s.slot, loc)], loc)
            memref.dealloc(buffer, loc=loc)
        free.erase()

    def backward(self) -> None:
        fn = self.pair.backward
        block = fn.regions[0].blocks[0]
        for op in [o for o in _ops(block) if o.name.startswith(_PREFIX)]:
            v = placement.view(op)
            s = self.saved[v.attr("scope")]
            if op.name == f"{_PREFIX}prefetch":
                self.prefetch(fn, op, s, v.attr("ahead"))
            elif op.name != f"{_PREFIX}recompute":
                raise PassFailure(
                    f"convert-placement-to-runtime: '{op.name}' has no meaning in @f_backward",
                    op.location,
                )
            op.erase()

    def prefetch(self, fn: ir.Operation, op: ir.Operation, s: SavedValue, ahead: int) -> None:
        """Read ``s`` back ``ahead`` kernels before its first use; release it after the last."""
        block = fn.regions[0].blocks[0]
        loc = op.location
        uses = users(s.backward_arg, fn, skip=(op,))
        if not uses:
            return
        ops = _ops(block)
        first, last = ops.index(uses[0]), ops.index(uses[-1])
        issue, kernels = first, 0
        while issue > 0 and kernels < ahead:
            issue -= 1
            kernels += _kernel(ops[issue])
        with ir.InsertionPoint(ops[issue]):
            buffer = self.alloc(block, s, loc)
            self.placed.add(buffer)
            self.call("hector_place_prefetch", self.address(buffer, s, loc), loc)
        with ir.InsertionPoint(ops[first]):
            self.call("hector_place_wait", [_i64_const(s.slot, loc)], loc)
        with ir.InsertionPoint(ops[last + 1]):
            self.call("hector_place_release", [_i64_const(s.slot, loc)], loc)
            memref.dealloc(buffer, loc=loc)
        s.backward_arg.replace_all_uses_with(buffer)

    def signatures(self, dropped: list[int]) -> None:
        """Drop the dropped slots' arguments from both functions."""
        train_args = sorted((self.saved[k].train_arg.arg_number for k in dropped), reverse=True)
        backward_args = sorted(
            (self.saved[k].backward_arg.arg_number for k in dropped), reverse=True
        )
        for fn, positions in ((self.pair.train, train_args), (self.pair.backward, backward_args)):
            block = fn.regions[0].blocks[0]
            for i in positions:
                if len(list(block.arguments[i].uses)):
                    raise PassFailure(
                        "convert-placement-to-runtime: a dropped saved value is still read",
                        fn.location,
                    )
                block.erase_argument(i)
            ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
            fn.attributes["function_type"] = ir.TypeAttr.get(
                ir.FunctionType.get([a.type for a in block.arguments], list(ftype.results))
            )
        outputs = ir.IntegerAttr(self.pair.train.attributes["hector.outputs"]).value
        self.pair.train.attributes["hector.outputs"] = ir.IntegerAttr.get(
            ir.IntegerType.get_signless(64), outputs - len(dropped)
        )
        n_saved = ir.IntegerAttr(self.pair.train.attributes["hector.num_saved"]).value
        self.pair.train.attributes["hector.num_saved"] = ir.IntegerAttr.get(
            ir.IntegerType.get_signless(64), n_saved - len(dropped)
        )


def free_early(fn: ir.Operation, keep: set[ir.Value]) -> int:
    """Move each ``memref.dealloc`` of a buffer ``fn`` allocates to right after the buffer's last
    use (the lowering frees every buffer at the end of the function, so without this every
    temporary of a training function is live at its end and the saved values are a small part
    of the peak). ``keep``: buffers whose frees are already placed. Returns how many moved."""
    block = fn.regions[0].blocks[0]
    moved = 0
    for op in _ops(block):
        if op.name != "memref.dealloc":
            continue
        buffer = op.operands[0]
        owner = buffer.owner if not isinstance(buffer, ir.BlockArgument) else None
        if owner is None or buffer in keep:
            continue
        owner = owner.operation if hasattr(owner, "operation") else owner
        if owner.name != "memref.alloc" or owner.parent.operation != fn:
            continue
        used = users(buffer, fn, skip=(op,))
        if not used:
            continue
        ops = _ops(block)
        after = ops[ops.index(used[-1]) + 1]
        if after == op:
            continue
        with ir.InsertionPoint(after):
            memref.dealloc(buffer, loc=op.location)
        op.erase()
        moved += 1
    return moved


def _declare(module_op: ir.Operation) -> None:
    """Declare the runtime functions the calls name (once)."""
    body = module_op.regions[0].blocks[0]
    have = {
        ir.StringAttr(o.operation.attributes["sym_name"]).value
        for o in body.operations
        if o.operation.name == "func.func"
    }
    i64 = ir.IntegerType.get_signless(64)
    first = _ops(body)[0]
    for name, arity in RUNTIME_FUNCTIONS.items():
        if name in have:
            continue
        with ir.InsertionPoint(first):
            decl = func.FuncOp(name, ir.FunctionType.get([i64] * arity, []))
            decl.attributes["sym_visibility"] = ir.StringAttr.get("private")


def convert_module(
    module_op: ir.Operation, write_lag: int = WRITE_LAG, early_free: bool = True
) -> bool:
    """Lower every planned pair of ``module_op``; return whether any was planned."""
    body = module_op.regions[0].blocks[0]
    funcs = [o.operation for o in body.operations if o.operation.name == "func.func"]
    trains = [f for f in funcs if DROPPED in f.attributes and "hector.train_of" in f.attributes]
    planned = [
        f
        for f in funcs
        if len(f.regions[0].blocks)
        and any(o.operation.name.startswith(_PREFIX) for o in f.regions[0].blocks[0].operations)
    ]
    for f in planned:
        if DROPPED not in f.attributes:
            raise PassFailure(
                "convert-placement-to-runtime lowers the decisions of placement-plan-saved; "
                "this function's placement ops are not a plan of its saved values (no "
                "placement.dropped)",
                f.location,
            )
    if not trains:
        return False
    calls = 0
    for pair in training_pairs(module_op, planned=True):
        dropped = [ir.IntegerAttr(a).value for a in ir.ArrayAttr(pair.train.attributes[DROPPED])]
        lowering = _Lowering(pair, write_lag)
        lowering.train()
        lowering.backward()
        lowering.signatures(dropped)
        calls += lowering.calls
        if early_free:
            for fn in (pair.train, pair.backward):
                free_early(fn, lowering.placed)
        for fn in (pair.train, pair.backward):
            del fn.attributes[DROPPED]
            fn.attributes[LOWERED] = ir.ArrayAttr.get(
                [ir.IntegerAttr.get(ir.IntegerType.get_signless(64), k) for k in dropped]
            )
    if calls:
        _declare(module_op)
    return True


#: The pass's name, as pipelines spell it.
PASS = "convert-placement-to-runtime"


@register_pass(
    PASS,
    "Lower placement-plan-saved's decisions to calls of the native runtime "
    "(hector_place_write/wait/prefetch/release) and drop the moved values from the ABI",
    write_lag=Option(
        int, WRITE_LAG, "kernels an offload write overlaps before it is waited for", min=0
    ),
    early_free=Option(bool, True, "free each temporary of a planned pair right after its last use"),
)
def run(module_op: ir.Operation, write_lag: int = WRITE_LAG, early_free: bool = True) -> None:
    """Pass entry point."""
    with module_op.context, ir.Location.unknown():
        convert_module(module_op, write_lag, early_free)
