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

from mlir import ir

from ._registry import Option, register_pass
from .fuse import dce, scatter_gemm

_ROWWISE = ("unary", "typed_linear", "add", "dot", "scale")


def _producer(v: ir.Value) -> ir.Operation | None:
    return None if isinstance(v, ir.BlockArgument) else v.owner


def _is(v: ir.Value, name: str) -> bool:
    p = _producer(v)
    return p is not None and p.name == f"hector_inter.{name}"


def _create(name: str, result_type: ir.Type, operands: list[ir.Value], attrs, loc) -> ir.Value:
    op = ir.Operation.create(
        f"hector_inter.{name}",
        results=[result_type],
        operands=operands,
        attributes={attrs[i].name: attrs[i].attr for i in range(len(attrs))} if attrs else {},
        loc=loc,
    )
    return op.results[0]


def _graph_of(func: ir.Operation) -> ir.Value | None:
    for a in func.regions[0].blocks[0].arguments:
        if str(a.type) == "!hector_inter.graph":
            return a
    return None


def _differentiable(v: ir.Value) -> bool:
    """Whether ``v`` depends on a function argument other than the graph (autodiff will want
    its gradient, and so the values it is multiplied with)."""
    seen: set[ir.Value] = set()
    stack = [v]
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if isinstance(v, ir.BlockArgument):
            if str(v.type) != "!hector_inter.graph":
                return True
            continue
        stack.extend(v.owner.operands)
    return False


def _keep_per_edge(op: ir.Operation, training: bool) -> bool:
    """A scatter-GEMM chain stays per edge, unless training needs its product saved."""
    if not scatter_gemm(op):
        return False
    if not training:
        return True
    scale = next(iter(op.results[0].uses)).owner
    return not _differentiable(scale.operands[1])


def compact_function(func: ir.Operation, training: bool = False) -> int:
    """Rewrite one function; return the number of ops now computed on compact rows."""
    graph = _graph_of(func)
    if graph is None:
        return 0
    rewritten = 0
    for op in [o.operation for o in func.regions[0].blocks[0].operations]:
        name = op.name.removeprefix("hector_inter.")
        if not op.name.startswith("hector_inter.") or name not in _ROWWISE:
            continue
        operands = list(op.operands)
        out = op.results[0]
        new_operands: list[ir.Value] | None = None
        if name == "typed_linear":
            slice_ = ir.StringAttr(op.attributes["slice"]).value
            x = operands[1]
            if slice_ == "etype" and _is(x, "gather_src") and not _keep_per_edge(op, training):
                with ir.InsertionPoint(op):
                    cg = _create(
                        "compact_gather_src",
                        x.type,
                        [graph, _producer(x).operands[1]],
                        None,
                        op.location,
                    )
                new_operands = [operands[0], cg, operands[2]]
            elif slice_ != "ntype" and _is(x, "expand_compact"):
                new_operands = [operands[0], _producer(x).operands[1], operands[2]]
        else:
            rows = [0] if name in ("unary",) else [0, 1]
            if name == "add" and (len(operands) > 2 or ir.ShapedType(operands[1].type).rank == 1):
                rows = [0]  # bias or typed bias: only the rows move
            if all(_is(operands[i], "expand_compact") for i in rows):
                new_operands = list(operands)
                for i in rows:
                    new_operands[i] = _producer(operands[i]).operands[1]
        if new_operands is None:
            continue
        with ir.InsertionPoint(op):
            inner = _create(name, out.type, new_operands, op.attributes, op.location)
            expanded = _create("expand_compact", out.type, [graph, inner], None, op.location)
        out.replace_all_uses_with(expanded)
        op.erase()
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
