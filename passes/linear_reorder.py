"""``hector-linear-reorder``: move a shared linear across a typed linear when that shrinks work.

Pattern: ``typed_linear(typed_linear(x, W){slice = s}, q){slice = "none"}`` with ``W`` of shape
``[R, K, N]`` (or ``[K, N]``) and ``q`` of shape ``[N, H]``. Associativity gives
``typed_linear(x, weight_product(W, q)){slice = s}``: ``W_r q`` (``[R, K, H]``) is computed once
per type, and every row costs ``K·H`` multiply-adds instead of ``N·H`` — plus the ``K·N`` of the
inner product when nothing else reads it (it becomes dead). This is RGAT's attention logit
``q · (W_r h_i)`` → ``(W_r q) · h_i``.

Cost model (multiply-adds, with ``M`` rows — the ``rows`` option, the graph's edge count when
``hector.compile`` runs the pass; unknown rows count as "many", so only the per-row terms
matter):

    before = M·N·H + (M·K·N if the inner product has no other user)
    after  = R·K·N·H + M·K·H

The rewrite happens only when ``after < before``; otherwise the IR is left unchanged (e.g. when
the inner product is needed anyway and ``K ≥ N``).

**Chained fold (HGT).** ``typed_linear(gather_src(add(typed_linear(x, W){ntype}, b, g)),
W_rel){etype}`` — a node-typed projection (with an optional typed bias), gathered to edges and
projected again per relation — becomes
``add(typed_linear(gather_src(x), weight_product(etype_src_weight(W), W_rel)){etype},
weight_product(etype_src_weight(b), W_rel), g)``: ``W_{src type(r)} W_rel[r]`` and
``b_{src type(r)} W_rel[r]`` are computed once per relation, and the node-wise projection (and
its gradients) disappear. This is only sound when every relation's sources share one node type,
which the ``src_typed`` option asserts (``hector.compile`` sets it from
``HeteroGraph.src_typed``); without it the pattern is left alone. Cost, with ``N`` nodes
(``nodes``), ``M`` rows, ``W`` ``[T, K, D]`` and ``W_rel`` ``[R, D, H]``:

    before = N·K·D + N·D (if the projection has no other user) + M·D·H
    after  = R·K·D·H + R·D·H + M·K·H + M·H
"""

from __future__ import annotations

from collections.abc import Iterator

from mlir import ir

from ..dialects import hector_inter as inter
from ..dialects.builders import OpAccess
from ..dialects.spec import OpDef
from .fuse import dce, graph_argument
from .registry import Option, register_pass

_PREFIX = f"{inter.DIALECT.name}."
_TYPED_LINEAR = _PREFIX + inter.TYPED_LINEAR.name


def _shape(v: ir.Value) -> list[int]:
    return list(ir.ShapedType(v.type).shape)


def _f32_tensor(shape: list[int]) -> ir.RankedTensorType:
    return ir.RankedTensorType.get(shape, ir.F32Type.get())


def _cost(inner: OpAccess, outer: OpAccess, rows: int) -> tuple[float, float]:
    ws = _shape(inner.operand("weight"))
    r = ws[0] if len(ws) == 3 else 1
    k, n = ws[-2], ws[-1]
    h = _shape(outer.operand("weight"))[-1]
    m = float(rows) if rows > 0 else 1e12
    before = m * n * h + (m * k * n if _single_use(inner.op.result) else 0.0)
    after = r * k * n * h + m * k * h
    return before, after


def _owner(v: ir.Value, op: OpDef) -> OpAccess | None:
    """The op ``op`` that produces ``v``, if it does."""
    if isinstance(v, ir.BlockArgument) or v.owner.name != _PREFIX + op.name:
        return None
    return inter.view(v.owner)


def _single_use(v: ir.Value) -> bool:
    return len(list(v.uses)) == 1


Chain = tuple[OpAccess, OpAccess, OpAccess | None]


def _chain(outer: OpAccess) -> Chain | None:
    """Match ``typed_linear(gather_src(add?(typed_linear(x, W){ntype}, b, g)), W_rel){etype}``:
    return (gather, node-typed linear, typed-bias add or None)."""
    if outer.attr("slice") != "etype":
        return None
    gather = _owner(outer.operand("x"), inter.GATHER_SRC)
    if gather is None:
        return None
    v = gather.operand("x")
    bias = _owner(v, inter.ADD)
    if bias is not None:
        if not (bias.has("graph") and ir.ShapedType(bias.operand("rhs").type).rank == 2):
            return None  # only a typed bias [T, D] folds
        v = bias.operand("lhs")
    inner = _owner(v, inter.TYPED_LINEAR)
    if inner is None or inner.attr("slice") != "ntype":
        return None
    if ir.ShapedType(inner.operand("weight").type).rank != 3:
        return None
    return gather, inner, bias


def _chain_cost(outer: OpAccess, chain: Chain, rows: int, nodes: int) -> tuple[float, float]:
    gather, inner, bias = chain
    _, k, d = _shape(inner.operand("weight"))
    r, _, h = _shape(outer.operand("weight"))
    m = float(rows) if rows > 0 else 1e12
    n = float(nodes) if nodes > 0 else 1e12
    node_value = (bias or inner).op.result
    dead = _single_use(gather.op.result) and _single_use(node_value)
    dead = dead and (bias is None or _single_use(inner.op.result))
    before = (n * k * d + (n * d if bias else 0.0) if dead else 0.0) + m * d * h
    after = r * k * d * h + m * k * h + ((r * d * h + m * h) if bias else 0.0)
    return before, after


def _fold_chain(outer: OpAccess, chain: Chain, graph: ir.Value) -> ir.Value:
    """Build the folded form of ``outer`` (before it) and return the value replacing it."""
    _, inner, bias = chain
    w, w_rel = inner.operand("weight"), outer.operand("weight")
    _, k, d = _shape(w)
    r, _, h = _shape(w_rel)
    loc, out_type = outer.op.location, outer.op.result.type
    with ir.InsertionPoint(outer.op):
        picked = inter.OPS.etype_src_weight(
            graph=graph, w=w, result=_f32_tensor([r, k, d]), loc=loc
        )
        folded_w = inter.OPS.weight_product(
            a=picked, b=w_rel, variant="xw", result=_f32_tensor([r, k, h]), loc=loc
        )
        rows_k = _f32_tensor([ir.ShapedType.get_dynamic_size(), k])
        gx = inter.OPS.gather_src(graph=graph, x=inner.operand("x"), result=rows_k, loc=loc)
        new = inter.OPS.typed_linear(
            graph=graph, x=gx, weight=folded_w, slice="etype", result=out_type, loc=loc
        )
        if bias is None:
            return new
        picked_b = inter.OPS.etype_src_weight(
            graph=graph, w=bias.operand("rhs"), result=_f32_tensor([r, d]), loc=loc
        )
        folded_b = inter.OPS.weight_product(
            a=picked_b, b=w_rel, variant="xw", result=_f32_tensor([r, h]), loc=loc
        )
        return inter.OPS.add(lhs=new, rhs=folded_b, graph=graph, result=out_type, loc=loc)


def _typed_linears(func: ir.Operation) -> Iterator[OpAccess]:
    """The typed linears of ``func``, each viewed when reached: a rewrite of an earlier one
    may have changed a later one's operands."""
    ops = [o.operation for o in func.regions[0].blocks[0].operations]
    return (inter.view(op) for op in ops if op.name == _TYPED_LINEAR)


def fold_chains(func: ir.Operation, rows: int, nodes: int) -> int:
    """Fold node-typed projections into the relation linears after a source gather (HGT's
    ``W_{src type(r)} W_rel[r]``) where the cost model says it pays; return how many."""
    graph = graph_argument(func)
    if graph is None:
        return 0
    folded = 0
    for outer in _typed_linears(func):
        chain = _chain(outer)
        if chain is None:
            continue
        before, after = _chain_cost(outer, chain, rows, nodes)
        if after >= before:
            continue
        outer.op.result.replace_all_uses_with(_fold_chain(outer, chain, graph))
        outer.op.erase()
        folded += 1
    if folded:
        dce(func)
    return folded


def reorder_function(func: ir.Operation, rows: int) -> int:
    """Apply the rewrite where it pays; return how many linears moved."""
    moved = 0
    for outer in _typed_linears(func):
        if outer.attr("slice") != "none":
            continue
        inner = _owner(outer.operand("x"), inter.TYPED_LINEAR)
        if inner is None:
            continue
        before, after = _cost(inner, outer, rows)
        if after >= before:
            continue
        w, q = inner.operand("weight"), outer.operand("weight")
        product_type = _f32_tensor([*_shape(w)[:-1], _shape(q)[-1]])
        loc = outer.op.location
        with ir.InsertionPoint(outer.op):
            product = inter.OPS.weight_product(a=w, b=q, variant="xw", result=product_type, loc=loc)
            new = inter.OPS.typed_linear(
                graph=inner.operand("graph"),
                x=inner.operand("x"),
                weight=product,
                slice=inner.attr("slice"),
                result=outer.op.result.type,
                loc=loc,
            )
        outer.op.result.replace_all_uses_with(new)
        outer.op.erase()
        moved += 1
    if moved:
        dce(func)
    return moved


@register_pass(
    "hector-linear-reorder",
    "Fold a shared linear into the preceding typed linear's weight (W_r q once per type), and "
    "a node-typed projection into the relation linear after a source gather (HGT), when the "
    "cost model says it shrinks work",
    rows=Option(int, -1, "rows the linears run over (the graph's edge count); -1: many", min=-1),
    nodes=Option(int, -1, "the graph's node count (chained fold); -1: many", min=-1),
    src_typed=Option(
        bool, False, "every relation's sources share one node type (enables the chained fold)"
    ),
)
def run(module_op: ir.Operation, rows: int = -1, nodes: int = -1, src_typed: bool = False) -> None:
    """Pass entry point."""
    for op in module_op.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "func.func" and len(op.regions[0].blocks):
            if src_typed:
                fold_chains(op, rows, nodes)
            reorder_function(op, rows)
