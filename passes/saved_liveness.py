"""The memory a planned training step holds, kernel by kernel (``placement-plan-saved``'s model).

A budget on the saved bytes alone does not bound what matters, the step's peak: the peak is at
one kernel, and only the buffers alive *there* count. This module replays one ``@f_train`` /
``@f_backward`` pair on the ``hector_intra`` form, as ``convert-placement-to-runtime`` will run
it (temporaries freed after their last use, offloaded values freed once written and read back
ahead of their first use in the backward), and gives the bytes alive during each top-level
op and which buffers they are. Sizes are evaluated at the graph's row counts (``N``, ``E``,
``C``, ``D``).

What it counts, per function:

* every ``memref.alloc`` of the function, from its first user to its last;
* ``@f_train``'s output arguments from their first write: results to the end of the function
  (then the caller holds them), kept saved values to the end of the backward, offloaded ones
  until their write has finished, recomputed ones until their last use;
* in ``@f_backward``: the results' gradients (the caller's, alive throughout), the kept saved
  values (alive throughout: the caller releases them after the call), offloaded values from
  their prefetch to their last use, recomputed ones from their rebuild to their last use, and
  the gradients it writes from their first write;
* in both, the partial outputs of a scheduled template's CPU workers
  (``hector_intra.worker_partials`` copies of its ``out``), during that template: planned after
  ``hector-schedule``, the model sees the worker count the step will run with.

Graph arrays and the inputs are the caller's before and after the step: not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from ..dialects import hector_intra as intra
from ..dialects.hector_intra import GRAPH_LAYOUT
from . import saved_buffers as _saved_buffers
from .training_pair import TrainingPair

__all__ = ["LiveSet", "Timeline", "grows", "kernel_ops", "timeline", "write_done"]

_F32_BYTES = 4
#: Row symbol of each graph array (the row count its length is).
_ARRAY_ROWS = {
    "src": "E",
    "dst": "E",
    "etype": "E",
    "edge_compact": "E",
    "edge_dst_compact": "E",
    "ntype": "N",
    "compact_src": "C",
    "compact_etype": "C",
    "dst_compact_dst": "D",
    "dst_compact_etype": "D",
}
_KIND_ROWS = {kind: sym for kind, (sym, _) in _saved_buffers.ROWS.items()}


@dataclass
class LiveSet:
    """The buffers alive during one top-level op: ``{name: bytes}``."""

    function: str  # "train", "handoff" (between the two calls) or "backward"
    index: int  # the op's position in its function (-1 for the handoff)
    op: str
    buffers: dict[str, int]

    @property
    def total(self) -> int:
        """Bytes alive."""
        return sum(self.buffers.values())


@dataclass
class Timeline:
    """The live sets of one planned step, in execution order."""

    points: list[LiveSet]

    @property
    def peak(self) -> LiveSet:
        """The live set with the most bytes (the first of equals)."""
        return max(self.points, key=lambda p: p.total)


def kernel_ops(fn: ir.Operation) -> list[ir.Operation]:
    """``fn``'s top-level ops in order."""
    return [o.operation for o in fn.regions[0].blocks[0].operations]


def _is_kernel(op: ir.Operation) -> bool:
    return (
        len(op.regions) > 0
        or op.name.startswith(("linalg.", "hector_intra."))
        or op.name == "memref.copy"
    )


def write_done(ops: list[ir.Operation], last: int, lag: int, grows: list[bool]) -> int:
    """Where an offload's write, started after op ``last``, is waited for: after at most ``lag``
    kernels, and before any op that brings new memory in (``grows``) — overlapping the write
    with such an op would hold the value and the new buffer at once, at a new high."""
    j, kernels = last + 1, 0
    while j < len(ops) and kernels < lag and not grows[j]:
        kernels += _is_kernel(ops[j])
        j += 1
    return j  # the wait (and the free) run right before op j


def _rows(value: ir.Value, counts: dict[str, int], fn_rows: dict[ir.Value, str]) -> int:
    """Rows of a ``memref.dim(value, 0)`` at the graph's counts: followed back through casts
    and allocations sized by a ``memref.dim`` (a loop: the chain is as long as the input's)."""
    while not isinstance(value, ir.BlockArgument):
        owner = value.owner
        owner = owner.operation if hasattr(owner, "operation") else owner
        if owner.name == "memref.alloc" and len(owner.operands):
            size = _dim_of(owner.operands[0])
            if size is None:
                return counts["N"]
            value = size
        elif owner.name in ("memref.collapse_shape", "memref.expand_shape", "memref.cast"):
            value = owner.operands[0]
        else:
            return counts["N"]
    arg = ir.BlockArgument(value)
    sym = fn_rows.get(arg)
    if sym is None and arg.arg_number < len(GRAPH_LAYOUT):
        sym = _ARRAY_ROWS.get(GRAPH_LAYOUT[arg.arg_number].name, "N")
    return counts[sym or "N"]


def _dim_of(size: ir.Value) -> ir.Value | None:
    """The buffer whose ``memref.dim`` a dynamic size operand is (``None`` for anything else)."""
    if isinstance(size, ir.BlockArgument):
        return None
    owner = size.owner
    owner = owner.operation if hasattr(owner, "operation") else owner
    return owner.operands[0] if owner.name == "memref.dim" else None


def _dim_rows(size: ir.Value, counts: dict[str, int], fn_rows: dict[ir.Value, str]) -> int:
    """The row count a dynamic size operand stands for (a ``memref.dim`` of some buffer)."""
    buffer = _dim_of(size)
    return counts["N"] if buffer is None else _rows(buffer, counts, fn_rows)


def _bytes(value: ir.Value, counts: dict[str, int], fn_rows: dict[ir.Value, str]) -> int:
    """Bytes of buffer ``value`` (an alloc or an argument) at the graph's counts."""
    mtype = ir.MemRefType(value.type)
    n = _F32_BYTES
    for i, d in enumerate(mtype.shape):
        if not mtype.is_dynamic_dim(i):
            n *= d
    if any(mtype.is_dynamic_dim(i) for i in range(mtype.rank)):
        owner = None if isinstance(value, ir.BlockArgument) else value.owner
        owner = owner.operation if owner is not None and hasattr(owner, "operation") else owner
        if owner is not None and owner.name == "memref.alloc":
            n *= _dim_rows(owner.operands[0], counts, fn_rows)
        else:
            n *= _rows(value, counts, fn_rows)
    return n


def _span(value: ir.Value, fn: ir.Operation, index: dict[ir.Operation, int]) -> list[int]:
    """Positions of the ops that use ``value`` (placement markers and frees aside)."""
    return [
        index[u]
        for u in _saved_buffers.users(value, fn)
        if not u.name.startswith("placement.") and u.name != "memref.dealloc"
    ]


def grows(
    fn: ir.Operation,
    first_output: int,
    counts: dict[str, int] | None = None,
    fn_rows: dict[ir.Value, str] | None = None,
) -> list[bool]:
    """Whether each top-level op of ``fn`` is the first to touch a buffer of at least 1 MiB
    (a buffer ``fn`` allocates, or an output argument: those from ``first_output`` on). Without
    ``counts`` every buffer with a row dimension counts."""
    ops = kernel_ops(fn)
    index = {op: i for i, op in enumerate(ops)}
    out = [False] * len(ops)
    block = fn.regions[0].blocks[0]
    values = list(block.arguments)[first_output:]
    values += [o.results[0] for o in ops if o.name == "memref.alloc"]
    for v in values:
        span = _span(v, fn, index)
        if not span:
            continue
        if counts is None:
            mtype = ir.MemRefType(v.type)
            big = any(mtype.is_dynamic_dim(i) for i in range(mtype.rank))
        else:
            big = _bytes(v, counts, fn_rows or {}) >= 1 << 20
        out[span[0]] = out[span[0]] or big
    return out


#: A buffer's span in one function: (first op index, last op index, bytes).
Spans = dict[str, tuple[int, int, int]]


@dataclass
class _StepArguments:
    """The pair's arguments the model counts, and the row symbol of those sized by a kind."""

    first_out: int  # index of @f_train's first output argument (and @f_backward's first saved)
    outs: list[ir.Value]  # @f_train's output arguments: its results, then the saved values
    d_outs: list[ir.Value]  # @f_backward's arguments: the gradients of the results
    grads: list[ir.Value]  # the gradients @f_backward writes
    tr_rows: dict[ir.Value, str]  # row symbol of @f_train's row-sized outputs
    bw_rows: dict[ir.Value, str]  # row symbol of @f_backward's row-sized arguments


def _step_arguments(pair: TrainingPair) -> _StepArguments:
    """Where the outputs, saved values and gradients sit among the pair's arguments."""
    tr_rows: dict[ir.Value, str] = {}
    bw_rows: dict[ir.Value, str] = {}
    n_out = ir.IntegerAttr(pair.train.attributes["hector.outputs"]).value
    n_saved = len(pair.saved)
    kinds = [
        ir.StringAttr(a).value for a in ir.ArrayAttr(pair.train.attributes["hector.result_kinds"])
    ]
    targs = list(pair.tblock.arguments)
    first_out = len(GRAPH_LAYOUT) + pair.n_inputs
    outs = targs[first_out : first_out + n_out]
    for arg, kind in zip(outs, kinds, strict=True):
        if kind in _KIND_ROWS:
            tr_rows[arg] = _KIND_ROWS[kind]
    for s in pair.saved:
        if s.kind in _KIND_ROWS:
            bw_rows[s.backward_arg] = _KIND_ROWS[s.kind]
    bargs = list(pair.bblock.arguments)
    n_results = n_out - n_saved
    d_outs = bargs[first_out + n_saved : first_out + n_saved + n_results]
    for arg, kind in zip(d_outs, kinds[:n_results], strict=True):
        if kind in _KIND_ROWS:
            bw_rows[arg] = _KIND_ROWS[kind]
    grads = bargs[first_out + n_saved + n_results :]
    bkinds = [
        ir.StringAttr(a).value
        for a in ir.ArrayAttr(pair.backward.attributes["hector.result_kinds"])
    ]
    for arg, kind in zip(grads, bkinds, strict=False):
        if kind in _KIND_ROWS:
            bw_rows[arg] = _KIND_ROWS[kind]
    return _StepArguments(first_out, outs, d_outs, grads, tr_rows, bw_rows)


def timeline(
    pair: TrainingPair,
    counts: dict[str, int],
    *,
    ahead: int = 1,
    write_lag: int = 1,
) -> Timeline:
    """The step's live sets under the decisions now on ``pair.saved`` (see the module doc)."""
    args = _step_arguments(pair)
    ops = kernel_ops(pair.train)
    spans = _train_spans(pair, args, ops, counts, write_lag)
    points = _sweep("train", ops, spans)
    # -- between the calls: results and kept values held; the results' gradients appear ----
    end = len(ops) - 1
    held = {n: b for n, (_, last, b) in spans.items() if last == end}
    for k, arg in enumerate(args.d_outs):
        held[f"gradient of result {k}"] = _bytes(arg, counts, args.bw_rows)
    points.append(LiveSet("handoff", -1, "between forward and backward", held))
    ops = kernel_ops(pair.backward)
    points += _sweep("backward", ops, _backward_spans(pair, args, ops, counts, ahead))
    return Timeline(points)


def _train_spans(
    pair: TrainingPair,
    args: _StepArguments,
    ops: list[ir.Operation],
    counts: dict[str, int],
    write_lag: int,
) -> Spans:
    """The spans of ``@f_train``'s buffers: its outputs by decision, temporaries, workspaces."""
    index = {op: i for i, op in enumerate(ops)}
    growing = grows(pair.train, args.first_out, counts, args.tr_rows)
    spans: Spans = {}
    end = len(ops) - 1
    saved_of = {s.train_arg: s for s in pair.saved}
    for k, arg in enumerate(args.outs):
        span = _span(arg, pair.train, index)
        if not span:
            continue
        nbytes = _bytes(arg, counts, args.tr_rows)
        value = saved_of.get(arg)
        if value is None:
            spans[f"result {k}"] = (span[0], end, nbytes)
        elif value.decision == "keep":
            spans[f"saved {value.slot} (kept)"] = (span[0], end, nbytes)
        elif value.decision == "offload":
            if value.lag is None:
                done = write_done(ops, span[-1], write_lag, growing)
            else:  # the planner's lag: the peak allows holding it over growing kernels too
                done = write_done(ops, span[-1], value.lag, [False] * len(ops))
            spans[f"saved {value.slot} (offloaded)"] = (span[0], done - 1, nbytes)
        else:
            spans[f"saved {value.slot} (recomputed)"] = (span[0], span[-1], nbytes)
    spans.update(_temporaries("temporary", pair.train, ops, index, counts, args.tr_rows))
    spans.update(_workspace("", ops, counts, args.tr_rows))
    return spans


def _backward_spans(
    pair: TrainingPair,
    args: _StepArguments,
    ops: list[ir.Operation],
    counts: dict[str, int],
    ahead: int,
) -> Spans:
    """The spans of ``@f_backward``'s buffers: the results' gradients, the saved values by
    decision, the gradients it writes, temporaries, workspaces."""
    index = {op: i for i, op in enumerate(ops)}
    end = len(ops) - 1
    bw_rows = args.bw_rows
    spans: Spans = {}
    for k, arg in enumerate(args.d_outs):
        spans[f"gradient of result {k}"] = (0, end, _bytes(arg, counts, bw_rows))
    for s in pair.saved:
        span = _span(s.backward_arg, pair.backward, index)
        nbytes = _bytes(s.backward_arg, counts, bw_rows)
        if s.decision == "keep":
            spans[f"saved {s.slot} (kept)"] = (0, end, nbytes)
        elif span and s.decision == "offload":
            issue, kernels = span[0], 0
            lead = ahead if s.ahead is None else s.ahead
            while issue > 0 and kernels < lead:
                issue -= 1
                kernels += _is_kernel(ops[issue])
            spans[f"saved {s.slot} (offloaded)"] = (issue, span[-1], nbytes)
        elif span:
            spans[f"saved {s.slot} (recomputed)"] = (span[0], span[-1], nbytes)
    for k, arg in enumerate(args.grads):
        span = _span(arg, pair.backward, index)
        if span:
            spans[f"gradient {k}"] = (span[0], end, _bytes(arg, counts, bw_rows))
    spans.update(_temporaries("backward temporary", pair.backward, ops, index, counts, bw_rows))
    spans.update(_workspace("backward ", ops, counts, bw_rows))
    return spans


def _temporaries(
    label: str,
    fn: ir.Operation,
    ops: list[ir.Operation],
    index: dict[ir.Operation, int],
    counts: dict[str, int],
    fn_rows: dict[ir.Value, str],
) -> Spans:
    """The span of each ``memref.alloc`` of ``fn`` (``<label> <op index>``), first to last use."""
    spans: Spans = {}
    for i, op in enumerate(ops):
        if op.name == "memref.alloc":
            span = _span(op.results[0], fn, index)
            if span:
                spans[f"{label} {i}"] = (span[0], span[-1], _bytes(op.results[0], counts, fn_rows))
    return spans


def _workspace(
    prefix: str, ops: list[ir.Operation], counts: dict[str, int], fn_rows: dict[ir.Value, str]
) -> dict[str, tuple[int, int, int]]:
    """The scheduled templates' worker buffers (``hector_intra.worker_partials``: partial copies
    of ``out`` or per-slice buffers, alive during the template only), by op position."""
    spans: dict[str, tuple[int, int, int]] = {}
    for i, op in enumerate(ops):
        schedule = intra.schedule_of(op) if op.name.startswith("hector_intra.") else None
        if schedule is None:
            continue
        v = intra.view(op)
        copies = intra.worker_partials(v, schedule)
        out = v.operand("out")
        if copies and v.spec.name == intra.TRAVERSAL_TEMPLATE.name:
            read = v.operand("gather_index") if v.has("gather_index") else v.operand("x")
            ratio = intra.PARTIAL_ROWS_RATIO
            if _rows(read, counts, fn_rows) < ratio * _rows(out, counts, fn_rows):
                copies = 0  # runs on one worker (decided at run time the same way)
        if copies:
            nbytes = round(copies * _bytes(out, counts, fn_rows))
            spans[f"{prefix}workspace {i}"] = (i, i, nbytes)
    return spans


def _sweep(
    function: str, ops: list[ir.Operation], spans: dict[str, tuple[int, int, int]]
) -> list[LiveSet]:
    """The live set during each kernel of one function, from the buffers' spans."""
    out = []
    for i, op in enumerate(ops):
        if not _is_kernel(op):
            continue
        live = {n: b for n, (first, last, b) in spans.items() if first <= i <= last}
        out.append(LiveSet(function, i, op.name, live))
    return out
