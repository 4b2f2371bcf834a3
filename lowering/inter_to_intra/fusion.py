"""Which ops of a function are folded into their users, from ``hector-fuse``'s marks.

One check per ``hector.fuse`` value (:data:`MARKS`): the mark must still hold, then its op is
folded into a user and never lowered on its own. Two folds are no fusion decision and need no
mark: a degree norm reads the graph's cached ``norm_*`` array, and compact rows read per edge
through ``edge_compact`` are part of compact materialization itself.
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir

from ...dialects import hector_inter as inter
from ...passes.fuse import MARK, ROW_SCALED, SCATTER_LINEARS, SUMS, reads_gathered, scatter_gemm
from ...passes.registry import PassFailure
from .function import FunctionLowering, gather_map


def _users(value: ir.Value) -> list[ir.Operation]:
    return [use.owner.operation for use in value.uses]


def _fuse_into_sum(lw: FunctionLowering, op: ir.Operation) -> None:
    """``into_sum`` (on a scale): the sum's traversal (or scatter-GEMM) computes it."""
    out = op.results[0]
    users = _users(out)
    if len(users) != 1 or users[0].name not in SUMS or out in lw.buffers.out_param:
        raise PassFailure(
            'hector.fuse = "into_sum" on a scale that is not summed exactly once', op.location
        )
    lw.fused.add(op)


def _fuse_scatter(lw: FunctionLowering, op: ir.Operation) -> None:
    """``scatter`` (on a linear): its sum's scatter-GEMM computes it."""
    if op.name not in SCATTER_LINEARS:
        return
    users = _users(op.results[0])
    scaled = bool(users) and users[0].name == "hector_inter.scale"
    if (
        not scatter_gemm(op)
        or (scaled and MARK not in users[0].attributes)
        or op.results[0] in lw.buffers.out_param
    ):
        raise PassFailure(
            f'hector.fuse = "scatter" on a {op.name} that is not summed (or scaled once and '
            "summed)",
            op.location,
        )
    lw.fused.add(op)


def _fuse_into_gemm(lw: FunctionLowering, op: ir.Operation) -> None:
    """``into_gemm`` (on a scale): every GEMM reading it scales its rows' products."""
    out = op.results[0]
    uses = [(u.owner, u.operand_number) for u in out.uses]
    if out in lw.buffers.out_param or not uses or any(u.name not in ROW_SCALED for u, _ in uses):
        raise PassFailure(
            'hector.fuse = "into_gemm" on a scale that a non-GEMM op reads', op.location
        )
    lw.fused.add(op)


def _fuse_index(lw: FunctionLowering, op: ir.Operation) -> None:
    """``index`` (on a gather): every user reads the gathered rows through the index array."""
    if gather_map(op) is None:
        return
    out = op.results[0]
    uses = [(u.owner, u.operand_number) for u in out.uses]
    if out in lw.buffers.out_param or not all(reads_gathered(*u) for u in uses):
        raise PassFailure(
            'hector.fuse = "index" on a gather that a user cannot read through an index',
            op.location,
        )
    lw.fused.add(op)


#: The check of each ``hector.fuse`` value, by value.
MARKS: dict[str, Callable[[FunctionLowering, ir.Operation], None]] = {
    "into_sum": _fuse_into_sum,
    "into_gemm": _fuse_into_gemm,
    "scatter": _fuse_scatter,
    "index": _fuse_index,
}


def plan_fusion(lw: FunctionLowering, ops: list[ir.Operation]) -> None:
    """Fuse what ``hector-fuse`` marked (``hector.fuse``), after checking the marks still
    hold; degree norms always read the graph's cached arrays."""
    for op in ops:
        mark = ir.StringAttr(op.attributes[MARK]).value if MARK in op.attributes else None
        if mark in MARKS:
            MARKS[mark](lw, op)
        elif mark is None and op.name == "hector_inter.expand_compact":
            # Reading compact rows per edge through edge_compact is part of compact
            # materialization itself, not a fusion decision: without it C would build the
            # E-row copies it exists to avoid.
            out = op.results[0]
            uses = [(u.owner, u.operand_number) for u in out.uses]
            if uses and out not in lw.buffers.out_param and all(reads_gathered(*u) for u in uses):
                lw.fused.add(op)
        if op.name == "hector_inter.degree_norm":
            lw.fused.add(op)  # a graph array, nothing to compute
            by = inter.view(op).attr("by")
            lw.buffers.buf[op.results[0]] = lw.graph_array(f"norm_{by}", op)
