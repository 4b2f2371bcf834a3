"""``placement-plan-saved``: keep, offload or recompute each value ``<f>_train`` saves.

Runs on the ``hector_intra`` form of a training program (after
``convert-hector-inter-to-intra``; the compiler runs it after ``hector-schedule``, so the
modelled peak includes the CPU workers' partial outputs), where ``@f_train`` writes each saved
value into a trailing output argument and ``@f_backward`` reads it from an argument
(``hector-autodiff`` pairs them: saved value ``k`` is ``@f_train``'s result ``n_results + k``
and ``@f_backward``'s argument after the graph arrays and the inputs).
Each saved value has a size symbolic in the graph's row counts — ``N`` nodes, ``E`` edges, ``C``
compact (source, relation) rows, ``D`` compact (destination, relation) rows — from its kind
(``hector.result_kinds``) and its row width; weights have a static size.

Under ``memory_budget`` (a fraction of the keep-all saved bytes when at most 1, else bytes),
evaluated at the graph's sizes (``nodes``, ``edges``, ``compact``, ``dst_compact``), saved
values are placed until the bytes kept resident fit:

1. **recompute** first: a value written by one row-local ``traversal_template`` (an elementwise
   function, optionally through a gather — no reduction) whose operands are all graph arrays,
   inputs or kept saved values is rebuilt in the backward by a copy of that template, costing
   one pass over its rows and no I/O;
2. **offload** next, largest first (fewer, larger transfers): written to the store right after
   its last use in the forward, read back ahead of its first use in the backward;
3. everything else (always weights and values under ``min_bytes``) is **kept**.

The decisions are ``placement`` ops, ``scope`` = the saved value's index (its *slot*):
``placement.keep`` / ``placement.offload`` / ``placement.recompute`` on ``@f_train``'s output
argument after its last use, ``placement.prefetch {ahead}`` on ``@f_backward``'s argument before
its first use, and ``placement.recompute`` on the buffer the backward rebuilds. Each carries
``placement.bytes`` (its symbolic size, e.g. ``"8*E"``); an offload whose write may overlap
more kernels than the lowering's rule allows without raising the modeled peak carries
``placement.write_lag`` (kernels, new buffers or not). Both functions get
``placement.dropped`` (the slots no longer passed between them) and ``@f_train`` the plan's
totals (``placement.saved_bytes``, ``placement.kept_bytes``, ``placement.budget_bytes``).
``convert-placement-to-runtime`` turns the decisions into calls of the native runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from mlir import ir
from mlir.dialects import arith, memref

from ..dialects import placement
from ..dialects.hector_intra import GRAPH_LAYOUT
from . import saved_liveness
from .registry import Option, PassFailure, register_pass
from .saved_buffers import ROWS, users
from .training_pair import SavedValue, TrainingPair, writes

__all__ = [
    "DROPPED",
    "ROWS",
    "SavedValue",
    "TrainingPair",
    "plan_module",
    "training_pairs",
    "users",
]

#: Function attribute: slots no longer passed from ``@f_train`` to ``@f_backward``.
DROPPED = "placement.dropped"
#: On a ``placement.offload``: kernels its write overlaps before it is waited for, whether or
#: not they bring new memory in (set where the modeled peak allows; see ``_lags``).
WRITE_LAG_ATTR = "placement.write_lag"
#: Kernels an offload's write overlaps by default (never past one bringing new memory in).
WRITE_LAG = 1
#: The longest write lag the planner gives (kernels; more than any function has).
MAX_WRITE_LAG = 1 << 20
_PREFIX = f"{placement.DIALECT.name}."


def _i64(value: int) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)


def _rows(fn_block: ir.Block, kind: str, loc: ir.Location) -> ir.Value:
    """The row count of ``kind`` in a function whose first arguments are the graph arrays."""
    names = [a.name for a in GRAPH_LAYOUT]
    array = fn_block.arguments[names.index(ROWS[kind][1])]
    return memref.dim(array, arith.constant(ir.IndexType.get(), 0, loc=loc), loc=loc)


def decide(
    saved: list[SavedValue],
    budget: int,
    counts: dict[str, int],
    min_bytes: int,
    recompute: set[int],
) -> int:
    """Set each value's decision so the kept bytes fit ``budget``, largest first (recompute
    before offload); return the kept bytes (``objective=bytes``)."""
    kept = sum(s.nbytes(counts) for s in saved)
    pinned: set[int] = set()  # kept because a recompute reads them
    by_size = sorted(saved, key=lambda s: (-s.nbytes(counts), s.slot))
    for s in by_size:
        if kept <= budget:
            break
        if s.slot in recompute and s.slot not in pinned and s.nbytes(counts) >= min_bytes:
            if all(saved[n].decision == "keep" for n in s.needs):
                s.decision = "recompute"
                pinned.update(s.needs)
                kept -= s.nbytes(counts)
    for s in by_size:
        if kept <= budget:
            break
        big = s.kind in ROWS and s.nbytes(counts) >= min_bytes
        if s.decision == "keep" and big and s.slot not in pinned:
            s.decision = "offload"
            kept -= s.nbytes(counts)
    return kept


def _moves(
    saved: list[SavedValue], counts: dict[str, int], min_bytes: int, recompute: set[int]
) -> Iterator[tuple[SavedValue, str]]:
    """The values that may still move, each with how: recompute when one row-local template
    rebuilds it from values the backward keeps, else offload."""
    pinned = {n for s in saved if s.decision == "recompute" for n in s.needs}
    for s in saved:
        if s.decision != "keep" or s.slot in pinned or s.kind not in ROWS:
            continue
        if s.nbytes(counts) < min_bytes:
            continue
        if s.slot in recompute and all(saved[n].decision == "keep" for n in s.needs):
            yield s, "recompute"
        else:
            yield s, "offload"


def decide_for_peak(
    pair: TrainingPair,
    budget: int,
    counts: dict[str, int],
    min_bytes: int,
    recompute: set[int],
    min_gain: float,
    ahead: int,
    max_lag: int = MAX_WRITE_LAG,
) -> tuple[int, int, int]:
    """Move values so the kept bytes fit ``budget`` choosing, at each step, the move that
    leaves the lowest modeled peak of the whole step (:mod:`.saved_liveness`) — the values
    alive at the peak kernel, not merely the largest; then, since the step pays for the store
    anyway, go on moving while a move lowers that peak by at least ``min_gain`` of it. A budget
    that holds everything moves nothing. Returns (kept bytes, keep-all peak, modeled peak)."""

    def peak() -> int:
        return saved_liveness.timeline(pair, counts, ahead=ahead).peak.total

    saved = pair.saved
    kept = sum(s.nbytes(counts) for s in saved)
    first = current = peak()
    if kept <= budget:  # nothing has to move: keep-all is the reference, untouched
        return kept, first, first
    while True:
        best = None
        for s, how in list(_moves(saved, counts, min_bytes, recompute)):
            s.decision = how
            score = (peak(), -s.nbytes(counts), s.slot)
            s.decision = "keep"
            if best is None or score < best[0]:
                best = (score, s, how)
        if best is None:
            break
        (new_peak, _, _), s, how = best
        if kept <= budget and new_peak > (1.0 - min_gain) * current:
            break
        s.decision = how
        kept -= s.nbytes(counts)
        current = new_peak
    _leads(pair, ahead, current, peak)
    _lags(pair, current, peak, max_lag)
    return kept, first, current


def _leads(pair: TrainingPair, ahead: int, peak_bytes: int, peak: Callable[[], int]) -> None:
    """Give each offload the longest prefetch lead (in kernels, from ``ahead`` up to the start
    of the backward) that keeps the modeled peak at ``peak_bytes``: the read overlaps more
    kernels where the extra buffer costs nothing at the peak."""
    n = len(list(pair.bblock.operations))
    for s in pair.saved:
        if s.decision != "offload":
            continue
        lead = ahead
        while lead < n:
            s.ahead = min(2 * lead, n)
            if peak() > peak_bytes:
                break
            lead = s.ahead
        s.ahead = lead


def _lags(pair: TrainingPair, peak_bytes: int, peak: Callable[[], int], max_lag: int) -> None:
    """Give each offload the longest write lag (in kernels, up to ``max_lag``) that
    keeps the modeled peak at ``peak_bytes``: the write overlaps those kernels, even ones that
    bring new memory in, where holding the value a while longer costs nothing at the peak. An
    offload whose lag cannot grow keeps the lowering's rule (``lag`` stays None)."""
    n = len(list(pair.tblock.operations))
    for s in pair.saved:
        if s.decision != "offload":
            continue
        lag = None
        trial = WRITE_LAG
        while trial <= min(2 * n, max_lag):
            s.lag = trial
            if peak() > peak_bytes:
                break
            lag, trial = trial, 2 * trial
        s.lag = lag


def _emit(pair: TrainingPair, target: str, ahead: int) -> None:
    """Insert the decision ops and rebuild recomputed values in the backward."""
    for s in pair.saved:
        extra = {"placement.bytes": ir.StringAttr.get(s.symbolic())}
        last = users(s.train_arg, pair.train)
        if s.decision == "offload":
            # The write may start once the value is complete (after its last writer): the
            # kernels that still read it overlap the write; it is freed after the last read.
            last = [op for op in last if writes(op, s.train_arg)] or last
        loc = last[-1].location if last else pair.train.location
        with _after(pair.tblock, last[-1] if last else None):
            if s.decision == "offload":
                lag = {} if s.lag is None else {WRITE_LAG_ATTR: _i64(s.lag)}
                placement.OPS.offload(
                    value=s.train_arg,
                    scope=s.slot,
                    target=target,
                    result=s.mtype,
                    loc=loc,
                    extra={**extra, **lag},
                )
            else:
                build = placement.OPS.keep if s.decision == "keep" else placement.OPS.recompute
                build(value=s.train_arg, scope=s.slot, result=s.mtype, loc=loc, extra=extra)
        first = users(s.backward_arg, pair.backward)
        if s.decision == "offload" and first:
            with ir.InsertionPoint(first[0]):
                placement.OPS.prefetch(
                    value=s.backward_arg,
                    scope=s.slot,
                    ahead=ahead if s.ahead is None else s.ahead,
                    result=s.mtype,
                    loc=first[0].location,
                    extra=extra,
                )
        elif s.decision == "recompute" and first:
            _rebuild(pair, s, first[0], extra)


def _after(block: ir.Block, op: ir.Operation | None) -> ir.InsertionPoint:
    """Right after ``op`` (at the block's start for None); a block ends in its terminator."""
    ops = [o.operation for o in block.operations]
    return ir.InsertionPoint(ops[ops.index(op) + 1] if op is not None else ops[0])


def _rebuild(pair: TrainingPair, s: SavedValue, before: ir.Operation, extra: dict) -> None:
    """Rebuild ``s`` in the backward before ``before``: a buffer, a copy of its template."""
    assert s.producer is not None
    loc = s.producer.location
    kept = {t.slot for t in pair.saved if t.decision == "keep"}
    with ir.InsertionPoint(before):
        buffer = memref.alloc(s.mtype, [_rows(pair.bblock, s.kind, loc)], [], loc=loc)
        s.backward_arg.replace_all_uses_with(buffer)
        copy = s.producer.clone()
        for i, operand in enumerate(copy.operands):
            mapped = buffer if operand == s.train_arg else pair.backward_value(operand, kept)
            assert mapped is not None
            copy.operands[i] = mapped
        placement.OPS.recompute(value=buffer, scope=s.slot, result=s.mtype, loc=loc, extra=extra)
    ret = list(pair.bblock.operations)[-1]
    with ir.InsertionPoint(ret):
        memref.dealloc(buffer, loc=loc)


def training_pairs(module_op: ir.Operation, *, planned: bool = False) -> list[TrainingPair]:
    """Every ``@f_train`` with its ``@f_backward``, checked to be on memrefs and unplanned (with
    ``planned``: only those placement-plan-saved planned)."""
    funcs = [
        op.operation
        for op in module_op.regions[0].blocks[0].operations
        if op.operation.name == "func.func" and len(op.operation.regions[0].blocks)
    ]
    backward = {
        ir.StringAttr(f.attributes["hector.backward_of"]).value: f
        for f in funcs
        if "hector.backward_of" in f.attributes
    }
    pairs = []
    for f in funcs:
        if "hector.train_of" not in f.attributes or (planned and DROPPED not in f.attributes):
            continue
        name = ir.StringAttr(f.attributes["hector.train_of"]).value
        if name not in backward:
            raise PassFailure(
                f"placement-plan-saved: @{name}_train has no @{name}_backward to read what it "
                "saves",
                f.location,
            )
        block = f.regions[0].blocks[0]
        if any(isinstance(a.type, ir.RankedTensorType) for a in block.arguments) or (
            "hector.outputs" not in f.attributes
        ):
            raise PassFailure(
                "placement-plan-saved runs on the hector_intra form of a training program "
                "(after convert-hector-inter-to-intra); this function still takes tensors",
                f.location,
            )
        for fn in () if planned else (f, backward[name]):
            for op in fn.regions[0].blocks[0].operations:
                if op.operation.name.startswith(_PREFIX):
                    raise PassFailure(
                        "placement-plan-saved: this training program is already planned",
                        op.operation.location,
                    )
        pairs.append(TrainingPair(f, backward[name]))
    return pairs


def plan_module(
    module_op: ir.Operation,
    memory_budget: float,
    counts: dict[str, int],
    *,
    target: str = "ssd",
    ahead: int = 1,
    min_bytes: int = 0,
    recompute: bool = True,
    objective: str = "peak",
    min_gain: float = 0.1,
    max_write_lag: int = MAX_WRITE_LAG,
) -> list[list[SavedValue]]:
    """Plan every training pair of ``module_op``; return the saved values of each."""
    plans = []
    for pair in training_pairs(module_op):
        unknown = any(s.kind in ROWS and counts[ROWS[s.kind][0]] < 0 for s in pair.saved)
        if unknown and memory_budget not in (0.0, 1.0):
            raise PassFailure(
                "placement-plan-saved needs the graph's sizes (nodes=, edges=, compact=, "
                "dst_compact=) to weigh the saved values against a budget",
                pair.train.location,
            )
        sized = {k: max(v, 1) for k, v in counts.items()}
        total = sum(s.nbytes(sized) for s in pair.saved)
        budget = int(memory_budget * total) if memory_budget <= 1.0 else int(memory_budget)
        cheap = {s.slot for s in pair.saved if recompute and pair.recomputable(s)}
        if objective == "peak" and not unknown:
            kept, keep_all_peak, peak = decide_for_peak(
                pair, budget, sized, min_bytes, cheap, min_gain, ahead, max_write_lag
            )
            pair.train.attributes["placement.keep_all_peak_bytes"] = _i64(keep_all_peak)
            pair.train.attributes["placement.peak_bytes"] = _i64(peak)
        else:
            kept = decide(pair.saved, budget, sized, min_bytes, cheap)
        _emit(pair, target, ahead)
        dropped = ir.ArrayAttr.get([_i64(s.slot) for s in pair.saved if s.decision != "keep"])
        for fn in (pair.train, pair.backward):
            fn.attributes[DROPPED] = dropped
        pair.train.attributes["placement.saved_bytes"] = _i64(total)
        pair.train.attributes["placement.kept_bytes"] = _i64(kept)
        pair.train.attributes["placement.budget_bytes"] = _i64(budget)
        plans.append(pair.saved)
    return plans


@register_pass(
    "placement-plan-saved",
    "Place each value <f>_train saves for <f>_backward (keep, offload to the store, or recompute "
    "in the backward) so the resident saved bytes fit a memory budget",
    memory_budget=Option(
        float, 1.0, "saved bytes kept resident: a fraction of keep-all (<= 1) or bytes", min=0
    ),
    nodes=Option(int, -1, "N, the graph's node count (-1: unknown)", min=-1),
    edges=Option(int, -1, "E, the graph's edge count (-1: unknown)", min=-1),
    compact=Option(int, -1, "C, compact (source, relation) rows (-1: unknown)", min=-1),
    dst_compact=Option(int, -1, "D, compact (destination, relation) rows (-1: unknown)", min=-1),
    target=Option(str, "ssd", "where offloaded values go", ("ssd", "pinned_host")),
    ahead=Option(
        int,
        1,
        "kernels between a prefetch and its first use (objective=peak: at least; longer where "
        "the modeled peak allows)",
        min=0,
        max=1 << 20,
    ),
    min_bytes=Option(int, 0, "never move a value smaller than this", min=0),
    recompute=Option(bool, True, "allow recomputing cheap values in the backward"),
    objective=Option(
        str,
        "peak",
        "which values move: those that lower the step's modeled peak most, or the largest",
        ("peak", "bytes"),
    ),
    min_gain=Option(
        float,
        0.1,
        "once the budget holds, move more only while each move lowers the modeled peak by this "
        "share (objective=peak; 1: never)",
        min=0,
    ),
    max_write_lag=Option(
        int,
        MAX_WRITE_LAG,
        "the most kernels an offload's write may overlap where the modeled peak allows "
        "(objective=peak; 0: the lowering's rule alone, waiting before a kernel that brings new "
        "memory in)",
        min=0,
        max=MAX_WRITE_LAG,
    ),
)
def run(
    module_op: ir.Operation,
    memory_budget: float = 1.0,
    nodes: int = -1,
    edges: int = -1,
    compact: int = -1,
    dst_compact: int = -1,
    target: str = "ssd",
    ahead: int = 1,
    min_bytes: int = 0,
    recompute: bool = True,
    objective: str = "peak",
    min_gain: float = 0.1,
    max_write_lag: int = MAX_WRITE_LAG,
) -> None:
    """Pass entry point: plan every ``@f_train`` / ``@f_backward`` pair of the module."""
    counts = {"N": nodes, "E": edges, "C": compact, "D": dst_compact}
    with module_op.context, ir.Location.unknown():
        plan_module(
            module_op,
            memory_budget,
            counts,
            target=target,
            ahead=ahead,
            min_bytes=min_bytes,
            recompute=recompute,
            objective=objective,
            min_gain=min_gain,
            max_write_lag=max_write_lag,
        )
