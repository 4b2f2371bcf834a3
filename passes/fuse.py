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
* ``hector.fuse = "scatter"`` on a ``typed_linear`` (or ``typed_linear_transposed``) whose only
  user is such a scale by a per-row column, or a sum itself: linear, scale and sum become one
  GEMM template with a gathered left operand, a ``row_scale`` and a scattered, accumulating
  epilogue (RGCN's whole message passing; aggregate-first RGCN's per-pair products summed onto
  nodes; the input gradient of either);
* ``hector.fuse = "into_gemm"`` on a scale by a per-row column whose every user is a GEMM
  reading it as its rows (``typed_linear``'s ``x``, ``typed_linear_transposed``'s or
  ``typed_linear_weight_grad``'s ``dy``) and taking no other row scale: the GEMMs read the
  unscaled rows (through their gather index) and scale each row's product (``row_scale``), so
  the backward program's scaled, gathered gradient rows are never built. A weight gradient
  reads gathered gradient rows through its template's ``scatter_index``.

A value returned by the function is never fused away (it must be materialised).
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir

from ..dialects import Kind, hector_inter, spec
from ..dialects.builders import OpAccess
from .registry import register_pass


def _index_ops(reduce: bool) -> tuple[str, ...]:
    """Full names of the index ops that gather (``reduce=False``) or sum (``reduce=True``)."""
    prefix = hector_inter.DIALECT.name
    return tuple(
        f"{prefix}.{op.name}"
        for op in hector_inter.DIALECT.ops
        if op.rowmap is not None and op.rowmap.reduce == reduce
    )


GATHERS = _index_ops(reduce=False)
SUMS = _index_ops(reduce=True)
# Sums of edge rows onto nodes: the scatter a GEMM's epilogue or a traversal can do itself.
_NODE_SUMS = tuple(
    name
    for name in SUMS
    if (op := spec(name)) is not None
    and op.rowmap is not None
    and (op.rowmap.src, op.rowmap.dst) == (Kind.EDGE, Kind.NODE)
)
MARK = "hector.fuse"
_PREFIX = f"{hector_inter.DIALECT.name}."
_SCALE = _PREFIX + hector_inter.SCALE.name
_TYPED_LINEAR = _PREFIX + hector_inter.TYPED_LINEAR.name
#: GEMM ops that can be a scatter-GEMM (their product summed in the epilogue), by the operand
#: holding their rows, and the template variant they lower to.
SCATTER_LINEARS: dict[str, tuple[str, str]] = {
    _TYPED_LINEAR: ("x", "xw"),
    _PREFIX + "typed_linear_transposed": ("dy", "xwt"),
}
#: GEMM ops that can scale their rows' products (``row_scale``), by the operand holding the rows.
ROW_SCALED: dict[str, str] = {
    **{name: rows for name, (rows, _) in SCATTER_LINEARS.items()},
    _PREFIX + "typed_linear_weight_grad": "dy",
}


def _marked(op: ir.Operation, value: str) -> bool:
    return MARK in op.attributes and ir.StringAttr(op.attributes[MARK]).value == value


def _operand_name(v: OpAccess, number: int) -> str:
    """The spec name of operand #``number`` of ``v.op``."""
    pos = 0
    for o in v.spec.operands:
        pos += _group_size(v, o.name)
        if number < pos:
            return o.name
    raise IndexError(f"{v.op.name} has no operand #{number}")


def operand_number(v: OpAccess, name: str) -> int:
    """The position among ``v.op``'s operands of its (single) operand ``name``."""
    pos = 0
    for o in v.spec.operands:
        if o.name == name:
            return pos
        pos += _group_size(v, o.name)
    raise KeyError(f"{v.op.name} has no operand '{name}'")


def _group_size(v: OpAccess, name: str) -> int:
    got = v.operand(name)
    return len(got) if isinstance(got, list) else int(got is not None)


def _rows_add(v: OpAccess, name: str) -> bool:
    """An add of two row tensors is a binary traversal reading both through indices."""
    rows = not v.has("graph") and ir.ShapedType(v.operand("rhs").type).rank == 2
    return rows and name in ("lhs", "rhs")


# Op -> whether it can read its operand ``name`` through a gather index (a GEMM's left rows,
# a traversal's ``x`` or ``y``); ops not listed always need the gathered copy.
_READS_GATHERED: dict[str, Callable[[OpAccess, str], bool]] = {
    "typed_linear": lambda v, name: name == "x" and v.attr("slice") != "ntype",
    "typed_linear_transposed": lambda v, name: name == "dy" and v.attr("slice") != "ntype",
    # gradient rows through the xty template's scatter_index
    "typed_linear_weight_grad": lambda v, name: (
        (name == "x" and v.attr("slice") != "ntype") or name == "dy"
    ),
    "dot": lambda v, name: name in ("x", "y"),
    "add": _rows_add,
    "unary": lambda v, name: name == "x",
    # the per-head scale is a traversal's y; the scaled rows are its x only when the scale is
    # fused into a sum or into GEMMs (a row-parallel scale writes one row per x row)
    "scale": lambda v, name: name == "s" or _marked(v.op, "into_sum") or _marked(v.op, "into_gemm"),
    **{n.partition(".")[2]: (lambda v, name: name == "x") for n in _NODE_SUMS},
}


def reads_gathered(user: ir.Operation, operand: int) -> bool:
    """Whether ``user`` can read its operand #``operand`` through a gather index instead of a
    materialised gathered copy (GEMM left rows, traversal ``x`` and ``y`` inputs)."""
    prefix, _, name = user.name.partition(".")
    rule = _READS_GATHERED.get(name) if prefix == hector_inter.DIALECT.name else None
    if rule is None:
        return False
    v = hector_inter.view(user)
    return rule(v, _operand_name(v, operand))


def _row_column(s: ir.Value) -> bool:
    """Whether ``s`` is a per-row factor a GEMM can take as its ``row_scale``: a column
    ``[M, 1]`` in a plain buffer (not itself gathered)."""
    if ir.ShapedType(s.type).shape[-1] != 1:
        return False
    return isinstance(s, ir.BlockArgument) or s.owner.name not in GATHERS


def scatter_gemm(
    op: ir.Operation, returned: set[ir.Value] | None = None, scaled_only: bool = False
) -> bool:
    """Whether linear ``op`` (``SCATTER_LINEARS``) feeds only a sum (any index op that sums,
    so a scatter; not with ``scaled_only``), or only a per-row scale (``[M, 1]``, not per
    head, a plain buffer) that feeds only a sum onto nodes: then GEMM, scale and sum are one
    scatter-GEMM and the per-row product is never stored."""
    out = op.results[0]
    users = [u.owner for u in out.uses]
    if op.name not in SCATTER_LINEARS or len(users) != 1 or (returned and out in returned):
        return False
    if users[0].name in SUMS:
        return not scaled_only
    if users[0].name != _SCALE:
        return False
    scale = hector_inter.view(users[0])
    if scale.operand("x") != out or not _row_column(scale.operand("s")):
        return False
    if returned and scale.op.result in returned:
        return False
    sums = [u.owner for u in scale.op.result.uses]
    return len(sums) == 1 and sums[0].name in _NODE_SUMS


def _scaled_after(op: ir.Operation) -> bool:
    """Whether scatter-GEMM ``op`` already takes its ``row_scale`` from a scale after it."""
    users = [u.owner for u in op.results[0].uses]
    return _marked(op, "scatter") and users[0].name == _SCALE


def into_gemm(op: ir.Operation, returned: set[ir.Value]) -> bool:
    """Whether scale ``op`` (by a per-row column) can be folded into every GEMM reading it:
    each user reads it as its rows (``ROW_SCALED``), once, and has no other row scale."""
    v = hector_inter.view(op)
    out = op.results[0]
    if out in returned or not _row_column(v.operand("s")):
        return False
    uses = [(u.owner, u.operand_number) for u in out.uses]
    for user, number in uses:
        rows = ROW_SCALED.get(user.name)
        uv = hector_inter.view(user)
        if rows is None or _operand_name(uv, number) != rows or _scaled_after(user):
            return False
        if sum(1 for o in user.operands if o == out) != 1:
            return False
    return bool(uses)


def graph_argument(func: ir.Operation) -> ir.Value | None:
    """The function's ``!hector_inter.graph`` argument, if it has one."""
    graph = hector_inter.graph_type(func.context)
    return next((a for a in func.regions[0].blocks[0].arguments if a.type == graph), None)


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
            if op.name.startswith(_PREFIX) and all(not list(r.uses) for r in op.results):
                op.erase()
                erased += 1
                changed = True
    return erased


def _key(op: ir.Operation) -> tuple:
    """What makes two ops identical: name, operands, attributes (but the fusion mark) and
    result types; attributes and types are uniqued by MLIR, so they compare by identity."""
    attrs = sorted((name, op.attributes[name]) for name in op.attributes if name != MARK)
    return (op.name, tuple(op.operands), tuple(attrs), tuple(r.type for r in op.results))


def cse(func: ir.Operation) -> int:
    """Replace hector_inter ops identical to an earlier one; return how many were replaced."""
    seen: dict[tuple, ir.Operation] = {}
    replaced = 0
    for op in _ops(func):
        if not op.name.startswith(_PREFIX):
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
        if op.name != _SCALE:
            continue
        out = op.results[0]
        users = [u.owner for u in out.uses]
        if out not in returned and len(users) == 1 and users[0].name in SUMS:
            op.attributes[MARK] = ir.StringAttr.get("into_sum")
    for op in ops:  # linears (scaled per row and) summed: one scatter-GEMM
        if op.name in SCATTER_LINEARS and scatter_gemm(op, returned):
            op.attributes[MARK] = ir.StringAttr.get("scatter")
    for op in ops:  # per-row scales of GEMM rows: the GEMMs' row_scale
        if op.name == _SCALE and MARK not in op.attributes and into_gemm(op, returned):
            op.attributes[MARK] = ir.StringAttr.get("into_gemm")
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
