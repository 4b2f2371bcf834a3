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

from mlir import ir

from ._registry import Option, register_pass
from .fuse import dce


def _shape(v: ir.Value) -> list[int]:
    return list(ir.ShapedType(v.type).shape)


def _cost(inner: ir.Operation, outer: ir.Operation, rows: int) -> tuple[float, float]:
    w, q = inner.operands[2], outer.operands[2]
    ws = _shape(w)
    r = ws[0] if len(ws) == 3 else 1
    k, n = ws[-2], ws[-1]
    h = _shape(q)[-1]
    m = float(rows) if rows > 0 else 1e12
    single_use = len(list(inner.results[0].uses)) == 1
    before = m * n * h + (m * k * n if single_use else 0.0)
    after = r * k * n * h + m * k * h
    return before, after


def _owner(v: ir.Value, name: str) -> ir.Operation | None:
    if isinstance(v, ir.BlockArgument) or v.owner.name != f"hector_inter.{name}":
        return None
    return v.owner


def _single_use(v: ir.Value) -> bool:
    return len(list(v.uses)) == 1


def _chain(outer: ir.Operation) -> tuple[ir.Operation, ir.Operation, ir.Operation | None] | None:
    """Match ``typed_linear(gather_src(add?(typed_linear(x, W){ntype}, b, g)), W_rel){etype}``:
    return (gather, node-typed linear, typed-bias add or None)."""
    if ir.StringAttr(outer.attributes["slice"]).value != "etype":
        return None
    gather = _owner(outer.operands[1], "gather_src")
    if gather is None:
        return None
    v = gather.operands[1]
    bias = _owner(v, "add")
    if bias is not None:
        typed_bias = len(bias.operands) == 3 and ir.ShapedType(bias.operands[1].type).rank == 2
        if not typed_bias:
            return None
        v = bias.operands[0]
    inner = _owner(v, "typed_linear")
    if inner is None or ir.StringAttr(inner.attributes["slice"]).value != "ntype":
        return None
    if ir.ShapedType(inner.operands[2].type).rank != 3:
        return None
    return gather, inner, bias


def _chain_cost(outer: ir.Operation, chain: tuple, rows: int, nodes: int) -> tuple[float, float]:
    gather, inner, bias = chain
    _, k, d = _shape(inner.operands[2])
    r, _, h = _shape(outer.operands[2])
    m = float(rows) if rows > 0 else 1e12
    n = float(nodes) if nodes > 0 else 1e12
    node_value = (bias or inner).results[0]
    dead = _single_use(gather.results[0]) and _single_use(node_value)
    dead = dead and (bias is None or _single_use(inner.results[0]))
    before = (n * k * d + (n * d if bias else 0.0) if dead else 0.0) + m * d * h
    after = r * k * d * h + m * k * h + ((r * d * h + m * h) if bias else 0.0)
    return before, after


def _create(name: str, rtype: ir.Type, operands: list[ir.Value], attrs: dict, loc) -> ir.Value:
    return ir.Operation.create(
        f"hector_inter.{name}", results=[rtype], operands=operands, attributes=attrs, loc=loc
    ).results[0]


def fold_chains(func: ir.Operation, rows: int, nodes: int) -> int:
    """Fold node-typed projections into the relation linears after a source gather (HGT's
    ``W_{src type(r)} W_rel[r]``) where the cost model says it pays; return how many."""
    graph = next(
        (a for a in func.regions[0].blocks[0].arguments if str(a.type) == "!hector_inter.graph"),
        None,
    )
    if graph is None:
        return 0
    folded = 0
    f32 = ir.F32Type.get()
    for op in [o.operation for o in func.regions[0].blocks[0].operations]:
        if op.name != "hector_inter.typed_linear":
            continue
        chain = _chain(op)
        if chain is None:
            continue
        before, after = _chain_cost(op, chain, rows, nodes)
        if after >= before:
            continue
        _, inner, bias = chain
        w, w_rel = inner.operands[2], op.operands[2]
        _, k, d = _shape(w)
        r, _, h = _shape(w_rel)
        xw = {"variant": ir.StringAttr.get("xw")}
        loc = op.location
        with ir.InsertionPoint(op):
            picked = _create(
                "etype_src_weight", ir.RankedTensorType.get([r, k, d], f32), [graph, w], {}, loc
            )
            folded_w = _create(
                "weight_product", ir.RankedTensorType.get([r, k, h], f32), [picked, w_rel], xw, loc
            )
            x = inner.operands[1]
            rows_k = ir.RankedTensorType.get([ir.ShapedType.get_dynamic_size(), k], f32)
            gx = _create("gather_src", rows_k, [graph, x], {}, loc)
            new = _create(
                "typed_linear",
                op.results[0].type,
                [graph, gx, folded_w],
                {"slice": ir.StringAttr.get("etype")},
                loc,
            )
            if bias is not None:
                b = bias.operands[1]
                picked_b = _create(
                    "etype_src_weight", ir.RankedTensorType.get([r, d], f32), [graph, b], {}, loc
                )
                folded_b = _create(
                    "weight_product",
                    ir.RankedTensorType.get([r, h], f32),
                    [picked_b, w_rel],
                    xw,
                    loc,
                )
                new = _create("add", op.results[0].type, [new, folded_b, graph], {}, loc)
        op.results[0].replace_all_uses_with(new)
        op.erase()
        folded += 1
    if folded:
        dce(func)
    return folded


def reorder_function(func: ir.Operation, rows: int) -> int:
    """Apply the rewrite where it pays; return how many linears moved."""
    moved = 0
    for op in [o.operation for o in func.regions[0].blocks[0].operations]:
        if op.name != "hector_inter.typed_linear":
            continue
        if ir.StringAttr(op.attributes["slice"]).value != "none":
            continue
        inner = _owner(op.operands[1], "typed_linear")
        if inner is None:
            continue
        before, after = _cost(inner, op, rows)
        if after >= before:
            continue
        w, q = inner.operands[2], op.operands[2]
        ws, qs = _shape(w), _shape(q)
        product_type = ir.RankedTensorType.get([*ws[:-1], qs[-1]], ir.F32Type.get())
        xw = {"variant": ir.StringAttr.get("xw")}
        with ir.InsertionPoint(op):
            product = _create("weight_product", product_type, [w, q], xw, op.location)
            new = _create(
                "typed_linear",
                op.results[0].type,
                [inner.operands[0], inner.operands[1], product],
                {"slice": inner.attributes["slice"]},
                op.location,
            )
        op.results[0].replace_all_uses_with(new)
        op.erase()
        moved += 1
    if moved:
        dce(func)
    return moved


@register_pass(
    "hector-linear-reorder",
    "Fold a shared linear into the preceding typed linear's weight (W_r q once per type), and "
    "a node-typed projection into the relation linear after a source gather (HGT), when the "
    "cost model says it shrinks work",
    rows=Option(int, -1, "rows the linears run over (the graph's edge count); -1: many"),
    nodes=Option(int, -1, "the graph's node count (chained fold); -1: many"),
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
