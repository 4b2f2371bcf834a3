"""One ``@f_train`` / ``@f_backward`` pair of a training program on memrefs and the values the
forward saves for the backward: what ``placement-plan-saved`` decides about and what its memory
model (:mod:`.saved_liveness`) replays."""

from __future__ import annotations

from dataclasses import dataclass, field

from mlir import ir

from ..dialects import hector_intra as intra
from ..dialects.hector_intra import GRAPH_LAYOUT
from .registry import PassFailure
from .saved_buffers import ROWS, VIEWS, users

__all__ = ["SavedValue", "TrainingPair", "writes"]

_GRAPH_ARRAYS = len(GRAPH_LAYOUT)
_F32_BYTES = 4
_TRAVERSAL = "hector_intra.traversal_template"


def _int_attr(fn: ir.Operation, name: str) -> int:
    if name not in fn.attributes:
        raise PassFailure(f"placement-plan-saved: the function has no '{name}'", fn.location)
    return ir.IntegerAttr(fn.attributes[name]).value


def _root(value: ir.Value) -> ir.Value:
    """The buffer ``value`` is a view of (itself when it is no view)."""
    while not isinstance(value, ir.BlockArgument):
        owner = value.owner
        owner = owner.operation if hasattr(owner, "operation") else owner
        if owner.name not in VIEWS:
            break
        value = owner.operands[0]
    return value


def writes(op: ir.Operation, value: ir.Value) -> bool:
    """Whether ``op`` may write ``value`` (a template writes only its ``out``, which may be a
    view of ``value``; any other op may write what it uses)."""
    if op.name.startswith("hector_intra."):
        return _root(intra.view(op).operand("out")) == value
    return True


@dataclass
class SavedValue:
    """One value ``@f_train`` saves for ``@f_backward``: its slot, kind, row width and arguments."""

    slot: int
    kind: str  # a Kind's value: node, edge, compact, dst_compact or weight
    mtype: ir.MemRefType
    train_arg: ir.BlockArgument
    backward_arg: ir.BlockArgument
    decision: str = "keep"
    producer: ir.Operation | None = None  # the template to copy, for a recompute
    needs: list[int] = field(default_factory=list)  # slots a recompute reads
    ahead: int | None = None  # an offload's prefetch lead in kernels (None: the pass option)
    # An offload's write lag in kernels, growth or not (None: the lowering's rule, WRITE_LAG).
    lag: int | None = None

    @property
    def row_bytes(self) -> int:
        """Bytes of one row (of the whole value for a weight)."""
        shape = list(self.mtype.shape)
        if self.kind in ROWS:
            shape = shape[1:]
        n = _F32_BYTES
        for d in shape:
            n *= d
        return n

    def symbolic(self) -> str:
        """The size in bytes, symbolic in the row count (``"8*E"``)."""
        if self.kind in ROWS:
            return f"{self.row_bytes}*{ROWS[self.kind][0]}"
        return str(self.row_bytes)

    def nbytes(self, counts: dict[str, int]) -> int:
        """The size in bytes at the graph's row counts."""
        if self.kind in ROWS:
            return self.row_bytes * counts[ROWS[self.kind][0]]
        return self.row_bytes


class TrainingPair:
    """One ``@f_train`` / ``@f_backward`` pair on memrefs."""

    def __init__(self, train: ir.Operation, backward: ir.Operation) -> None:
        self.train, self.backward = train, backward
        self.tblock = train.regions[0].blocks[0]
        self.bblock = backward.regions[0].blocks[0]
        n_saved = _int_attr(train, "hector.num_saved")
        n_out = _int_attr(train, "hector.outputs")
        kinds = [
            ir.StringAttr(a).value for a in ir.ArrayAttr(train.attributes["hector.result_kinds"])
        ]
        targs = list(self.tblock.arguments)
        self.n_inputs = len(targs) - _GRAPH_ARRAYS - n_out
        n_results = n_out - n_saved
        first = _GRAPH_ARRAYS + self.n_inputs
        bargs = list(self.bblock.arguments)
        if len(bargs) < first + n_saved:
            raise PassFailure(
                "placement-plan-saved: @f_backward takes fewer arguments than @f_train saves",
                backward.location,
            )
        self.saved = [
            SavedValue(
                k,
                kinds[n_results + k],
                ir.MemRefType(targs[first + n_results + k].type),
                targs[first + n_results + k],
                bargs[first + k],
            )
            for k in range(n_saved)
        ]

    def backward_value(self, v: ir.Value, kept: set[int]) -> ir.Value | None:
        """The backward program's copy of forward value ``v``: a graph array, an input or a kept
        saved value (None: the backward does not have it)."""
        if not isinstance(v, ir.BlockArgument) or v.owner != self.tblock:
            return None
        i = v.arg_number
        if i < _GRAPH_ARRAYS + self.n_inputs:
            return self.bblock.arguments[i]
        for s in self.saved:
            if s.train_arg == v and s.slot in kept:
                return s.backward_arg
        return None

    def recomputable(self, s: SavedValue) -> bool:
        """Whether one row-local template writes ``s`` from values the backward has."""
        if s.kind not in ROWS:
            return False
        writers = [op for op in users(s.train_arg, self.train) if writes(op, s.train_arg)]
        if len(writers) != 1 or writers[0].name != _TRAVERSAL:
            return False
        op = writers[0]
        v = intra.view(op)
        if v.attr("reduce") != "none" or v.has("scatter_index") or v.operand("out") != s.train_arg:
            return False
        needs = []
        for operand in op.operands:
            if operand == s.train_arg:
                continue
            if self.backward_value(operand, {t.slot for t in self.saved}) is None:
                return False
            needs += [t.slot for t in self.saved if t.train_arg == operand]
        s.producer, s.needs = op, needs
        return True
