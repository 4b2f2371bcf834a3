"""``hector-compact-materialization``: compute edge values that depend only on (source node,
edge type) once per unique pair instead of once per edge.

Rewrites, in program order:

* ``typed_linear(gather_src(x), W){slice = "etype"}`` →
  ``expand_compact(typed_linear(compact_gather_src(x), W))`` — the GEMM runs over the ``C``
  compact rows (each with its edge type) instead of the ``E`` edges;
* an op whose row operands are all ``expand_compact(c)`` and which works row by row (``unary``,
  ``typed_linear`` with a shared or edge-type weight, ``add`` of rows or a (typed) bias, ``dot``,
  ``scale``) is moved before the expansion: ``f(expand(c)) → expand(f(c))``, so everything
  computed from the compact value alone stays compact.

``expand_compact`` is a gather through the graph's ``edge_compact`` array: the lowering folds it
into the index of the template that reads it, so per-edge copies are never built, and
``hector-autodiff`` re-emits it rather than saving it — forward and backward both keep only the
compact rows. The per-graph maps (``compact_src``, ``compact_etype``, ``edge_compact``) are
built once by the runtime (``HeteroGraph``).

A typed linear whose product is only scaled per row and summed onto nodes is left per edge:
``hector-fuse`` turns that chain into one scatter-GEMM that stores no per-edge or per-pair
rows at all, which beats compaction's ``C`` rows (RGCN's message passing). With the option
``training`` (set when ``hector-autodiff`` follows), that holds only when the scale factor needs
no gradient (a degree norm): otherwise the backward pass needs the product per edge (HGT's and
RGAT's attention-weighted messages), ``hector-autodiff`` saves it, and compact rows are the
smaller thing to save.

Cost model: compaction saves ``1 - ratio`` of the work and memory of every rewritten value
(``ratio`` = unique pairs / edges) at the price of one index read per edge; with the option
``ratio`` (the graph's compaction ratio, which ``hector.compile`` passes) above ``max_ratio``
the pass leaves the IR unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir

from ..dialects import hector_inter as inter
from ..dialects.builders import OpAccess
from ..dialects.spec import OpDef
from .fuse import dce, graph_argument, operand_number, scatter_gemm
from .registry import Option, register_pass

_PREFIX = f"{inter.DIALECT.name}."


def _producer(v: ir.Value, op: OpDef) -> OpAccess | None:
    """The op ``op`` that produces ``v``, if it does."""
    if isinstance(v, ir.BlockArgument) or v.owner.name != _PREFIX + op.name:
        return None
    return inter.view(v.owner)


def _differentiable(v: ir.Value) -> bool:
    """Whether ``v`` depends on a function argument other than the graph (autodiff will want
    its gradient, and so the values it is multiplied with)."""
    graph = inter.graph_type(v.context)
    seen: set[ir.Value] = set()
    stack = [v]
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if isinstance(v, ir.BlockArgument):
            if v.type != graph:
                return True
            continue
        stack.extend(v.owner.operands)
    return False


def _keep_per_edge(op: ir.Operation, training: bool) -> bool:
    """A scaled scatter-GEMM chain stays per edge, unless training needs its product saved."""
    if not scatter_gemm(op, scaled_only=True):
        return False
    if not training:
        return True
    scale = inter.view(next(iter(op.results[0].uses)).owner)
    return not _differentiable(scale.operand("s"))


def _typed_linear(v: OpAccess, graph: ir.Value, training: bool) -> dict[str, ir.Value] | None:
    """``typed_linear(gather_src(x)){etype}`` reads ``compact_gather_src(x)`` instead;
    ``typed_linear(expand_compact(c))`` (not node-sliced) reads ``c``."""
    slice_, x = v.attr("slice"), v.operand("x")
    gather = _producer(x, inter.GATHER_SRC)
    if slice_ == "etype" and gather is not None and not _keep_per_edge(v.op, training):
        with ir.InsertionPoint(v.op):
            rows = inter.OPS.compact_gather_src(
                graph=graph, x=gather.operand("x"), result=x.type, loc=v.op.location
            )
        return {"x": rows}
    expand = _producer(x, inter.EXPAND_COMPACT)
    if slice_ != "ntype" and expand is not None:
        return {"x": expand.operand("x")}
    return None


def _add_rows(v: OpAccess) -> tuple[str, ...]:
    """An add moves both operands, or only the rows when the other is a (typed) bias."""
    bias = v.has("graph") or ir.ShapedType(v.operand("rhs").type).rank == 1
    return ("lhs",) if bias else ("lhs", "rhs")


# Ops that work row by row -> the operands that are rows (the others are weights or biases).
_ROW_OPERANDS: dict[str, Callable[[OpAccess], tuple[str, ...]]] = {
    inter.UNARY.name: lambda v: ("x",),
    inter.ADD.name: _add_rows,
    inter.DOT.name: lambda v: ("x", "y"),
    inter.SCALE.name: lambda v: ("x", "s"),
}


def _compact_operands(v: OpAccess, graph: ir.Value, training: bool) -> dict[str, ir.Value] | None:
    """The compact values ``v.op`` can read instead of its expanded row operands, or None."""
    name = v.op.name.removeprefix(_PREFIX)
    if name == inter.TYPED_LINEAR.name:
        return _typed_linear(v, graph, training)
    compact: dict[str, ir.Value] = {}
    for row in _ROW_OPERANDS[name](v):
        expand = _producer(v.operand(row), inter.EXPAND_COMPACT)
        if expand is None:
            return None  # every row operand must be an expansion
        compact[row] = expand.operand("x")
    return compact


def _move_before_expansion(v: OpAccess, compact: dict[str, ir.Value], graph: ir.Value) -> None:
    """``f(expand(c))`` → ``expand(f(c))``: ``v.op`` reads the compact operands in place and
    its users read its result through a new ``expand_compact``."""
    op = v.op
    for name, value in compact.items():
        op.operands[operand_number(v, name)] = value
    out = op.results[0]
    with ir.InsertionPoint.after(op):
        expanded = inter.OPS.expand_compact(graph=graph, x=out, result=out.type, loc=op.location)
    out.replace_all_uses_except(expanded, expanded.owner.operation)


def compact_function(func: ir.Operation, training: bool = False) -> int:
    """Rewrite one function; return the number of ops now computed on compact rows."""
    graph = graph_argument(func)
    if graph is None:
        return 0
    rowwise = {_PREFIX + inter.TYPED_LINEAR.name, *(_PREFIX + n for n in _ROW_OPERANDS)}
    rewritten = 0
    for op in [o.operation for o in func.regions[0].blocks[0].operations]:
        if op.name not in rowwise:
            continue
        v = inter.view(op)
        compact = _compact_operands(v, graph, training)
        if compact is None:
            continue
        _move_before_expansion(v, compact, graph)
        rewritten += 1
    if rewritten:
        dce(func)
    return rewritten


@register_pass(
    "hector-compact-materialization",
    "Compute values that depend only on (source node, edge type) once per unique pair "
    "(compact rows) and read them per edge through the graph's compaction map",
    ratio=Option(float, -1.0, "the graph's compaction ratio C/E (negative: unknown, compact)"),
    max_ratio=Option(float, 0.95, "leave the IR unchanged when ratio is above this"),
    training=Option(bool, False, "hector-autodiff follows: compact products it would save"),
)
def run(
    module_op: ir.Operation, ratio: float = -1.0, max_ratio: float = 0.95, training: bool = False
) -> None:
    """Pass entry point."""
    if ratio > max_ratio:
        return  # an index read per edge would cost more than the rows it saves
    for op in module_op.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "func.func" and len(op.regions[0].blocks):
            compact_function(op, training)
