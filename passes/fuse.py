"""``hector-fuse``: group hector_inter ops into GEMM- and traversal-template regions, after
dead-code and common-subexpression elimination of Hector's own ops.

IRDL ops carry no traits, so upstream ``cse``/``canonicalize`` treat them as side-effecting and
leave them alone; this pass does both for ``hector_inter`` (every op is pure):

* **DCE** erases ops whose results are unused (repeatedly, so dead chains vanish);
* **CSE** replaces an op by an earlier identical one (same name, operands and attributes).

It then decides fusion and records it on the ops, and ``convert-hector-inter-to-intra`` obeys
the marks (without this pass every op becomes a template of its own):

* ``hector.fuse = "index"`` on a gather (``gather_src``, ``gather_dst``, ``compact_gather_src``,
  ``expand_compact``) whose every user can read it through an index — a GEMM's gathered left
  rows, a traversal's ``x`` or ``y`` input — so the gathered copy is never built;
* ``hector.fuse = "into_sum"`` on a ``scale`` whose only user sums it onto nodes or compact rows:
  the scale and the reduction become one traversal (``fn = scale``, ``reduce = sum``);
* ``hector.fuse = "scatter"`` on a ``typed_linear`` whose only user is such a scale by a
  per-row column: linear, scale and sum become one GEMM template with a gathered left operand,
  a ``row_scale`` and a scattered, accumulating epilogue (RGCN's whole message passing).

A value returned by the function is never fused away (it must be materialised).
"""

from __future__ import annotations

from mlir import ir

from ._registry import register_pass

GATHERS = (
    "hector_inter.gather_src",
    "hector_inter.gather_dst",
    "hector_inter.compact_gather_src",
    "hector_inter.expand_compact",
)
SUMS = (
    "hector_inter.sum_to_dst",
    "hector_inter.sum_to_src",
    "hector_inter.sum_to_compact",
    "hector_inter.sum_compact_to_src",
)
MARK = "hector.fuse"


def _str(op: ir.Operation, name: str) -> str:
    return ir.StringAttr(op.attributes[name]).value


def _marked(op: ir.Operation, value: str) -> bool:
    return MARK in op.attributes and _str(op, MARK) == value


def reads_gathered(user: ir.Operation, operand: int) -> bool:
    """Whether ``user`` can read its operand #``operand`` through a gather index instead of a
    materialised gathered copy (GEMM left rows, traversal ``x`` and ``y`` inputs)."""
    name = user.name.removeprefix("hector_inter.")
    if name in ("typed_linear", "typed_linear_weight_grad"):
        return operand == 1 and _str(user, "slice") != "ntype"
    if name == "dot":
        return operand in (0, 1)
    if name == "add":
        return (
            operand in (0, 1)
            and len(user.operands) == 2
            and (ir.ShapedType(user.operands[1].type).rank == 2)
        )
    if name == "unary":
        return operand == 0
    if name == "scale":
        # the per-head scale is a traversal's y; the scaled rows are its x only when the scale
        # is fused into a sum (a row-parallel scale writes one row per x row)
        return operand == 1 or _marked(user, "into_sum")
    if name in ("sum_to_dst", "sum_to_src"):
        return operand == 1
    return False


def scatter_gemm(op: ir.Operation, returned: set[ir.Value] | None = None) -> bool:
    """Whether typed linear ``op`` feeds only a per-row scale (``[M, 1]``, not per head) that
    feeds only a sum onto nodes: then GEMM, scale and sum are one scatter-GEMM and the per-edge
    product is never stored. The scale factor must be a plain buffer (not itself gathered)."""
    out = op.results[0]
    users = [u.owner for u in out.uses]
    if len(users) != 1 or users[0].name != "hector_inter.scale" or (returned and out in returned):
        return False
    scale = users[0]
    if scale.operands[0] != out or ir.ShapedType(scale.operands[1].type).shape[-1] != 1:
        return False
    s = scale.operands[1]
    if not isinstance(s, ir.BlockArgument) and s.owner.name in GATHERS:
        return False
    if returned and scale.results[0] in returned:
        return False
    sums = [u.owner for u in scale.results[0].uses]
    return len(sums) == 1 and sums[0].name in ("hector_inter.sum_to_dst", "hector_inter.sum_to_src")


def _returned(func: ir.Operation) -> set[ir.Value]:
    ret = list(func.regions[0].blocks[0].operations)[-1].operation
    return set(ret.operands)


def _ops(func: ir.Operation) -> list[ir.Operation]:
    return [o.operation for o in func.regions[0].blocks[0].operations]


def dce(func: ir.Operation) -> int:
    """Erase unused hector_inter ops; return how many were erased."""
    erased = 0
    changed = True
    while changed:
        changed = False
        for op in reversed(_ops(func)):
            if op.name.startswith("hector_inter.") and all(not list(r.uses) for r in op.results):
                op.erase()
                erased += 1
                changed = True
    return erased


def _key(op: ir.Operation) -> tuple:
    attrs = sorted(
        (op.attributes[i].name, str(op.attributes[i].attr))
        for i in range(len(op.attributes))
        if op.attributes[i].name != MARK
    )
    return (op.name, tuple(op.operands), tuple(attrs), tuple(str(r.type) for r in op.results))


def cse(func: ir.Operation) -> int:
    """Replace hector_inter ops identical to an earlier one; return how many were replaced."""
    seen: dict[tuple, ir.Operation] = {}
    replaced = 0
    for op in _ops(func):
        if not op.name.startswith("hector_inter."):
            continue
        key = _key(op)
        first = seen.get(key)
        if first is None:
            seen[key] = op
            continue
        for old, new in zip(op.results, first.results, strict=True):
            old.replace_all_uses_with(new)
        op.erase()
        replaced += 1
    return replaced


def mark_fusion(func: ir.Operation) -> None:
    """Record the fusion decisions as ``hector.fuse`` attributes."""
    returned = _returned(func)
    ops = _ops(func)
    for op in ops:
        if MARK in op.attributes:
            del op.attributes[MARK]
    for op in ops:  # scales into sums first: a gather feeding such a scale may then fuse too
        if op.name != "hector_inter.scale":
            continue
        out = op.results[0]
        users = [u.owner for u in out.uses]
        if out not in returned and len(users) == 1 and users[0].name in SUMS:
            op.attributes[MARK] = ir.StringAttr.get("into_sum")
    for op in ops:  # typed linears scaled per row and summed: one scatter-GEMM
        if op.name == "hector_inter.typed_linear" and scatter_gemm(op, returned):
            op.attributes[MARK] = ir.StringAttr.get("scatter")
    for op in ops:
        if op.name not in GATHERS:
            continue
        out = op.results[0]
        uses = [(u.owner, u.operand_number) for u in out.uses]
        if uses and out not in returned and all(reads_gathered(*u) for u in uses):
            op.attributes[MARK] = ir.StringAttr.get("index")


def _functions(module_op: ir.Operation) -> list[ir.Operation]:
    return [
        op.operation
        for op in module_op.regions[0].blocks[0].operations
        if op.operation.name == "func.func" and len(op.operation.regions[0].blocks)
    ]


@register_pass(
    "hector-dce-cse",
    "Dead-code and common-subexpression elimination of hector_inter ops (no fusion)",
)
def run_cleanup(module_op: ir.Operation) -> None:
    """Pass entry point: DCE and CSE only."""
    for func in _functions(module_op):
        cse(func)
        dce(func)


@register_pass(
    "hector-fuse",
    "DCE + CSE of hector_inter ops, then mark gathers and scales that fuse into the templates "
    "reading them (hector.fuse)",
)
def run(module_op: ir.Operation) -> None:
    """Pass entry point: clean up, then record fusion decisions."""
    for func in _functions(module_op):
        cse(func)
        dce(func)
        mark_fusion(func)
