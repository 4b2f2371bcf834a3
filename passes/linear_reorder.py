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


def reorder_function(func: ir.Operation, rows: int) -> int:
    """Apply the rewrite where it pays; return how many linears moved."""
    moved = 0
    for op in [o.operation for o in func.regions[0].blocks[0].operations]:
        if op.name != "hector_inter.typed_linear":
            continue
        if ir.StringAttr(op.attributes["slice"]).value != "none":
            continue
        v = op.operands[1]
        inner = None if isinstance(v, ir.BlockArgument) else v.owner
        if inner is None or inner.name != "hector_inter.typed_linear":
            continue
        before, after = _cost(inner, op, rows)
        if after >= before:
            continue
        w, q = inner.operands[2], op.operands[2]
        ws, qs = _shape(w), _shape(q)
        f32 = ir.F32Type.get()
        product_type = ir.RankedTensorType.get([*ws[:-1], qs[-1]], f32)
        with ir.InsertionPoint(op):
            product = ir.Operation.create(
                "hector_inter.weight_product",
                results=[product_type],
                operands=[w, q],
                attributes={"variant": ir.StringAttr.get("xw")},
                loc=op.location,
            ).results[0]
            new = ir.Operation.create(
                "hector_inter.typed_linear",
                results=[op.results[0].type],
                operands=[inner.operands[0], inner.operands[1], product],
                attributes={"slice": inner.attributes["slice"]},
                loc=op.location,
            ).results[0]
        op.results[0].replace_all_uses_with(new)
        op.erase()
        moved += 1
    if moved:
        dce(func)
    return moved


@register_pass(
    "hector-linear-reorder",
    "Fold a shared linear into the preceding typed linear's weight (W_r q once per type) "
    "when the cost model says it shrinks work",
    rows=Option(int, -1, "rows the linears run over (the graph's edge count); -1: many"),
)
def run(module_op: ir.Operation, rows: int = -1) -> None:
    """Pass entry point."""
    for op in module_op.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "func.func" and len(op.regions[0].blocks):
            reorder_function(op, rows)
