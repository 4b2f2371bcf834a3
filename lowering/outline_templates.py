"""``hector-outline-templates``: each ``hector_intra`` template in a private function of its own.

``convert-hector-intra-to-scf`` lowers a template where it stands, so a function's templates
all become one long function, and a training module holds each forward template twice (in
``@f`` and ``@f_train``). Outlined first, each template is a private ``func.func`` taking its
operands (memrefs, of their own types: static sizes, layouts) and called from where it stood;
its lowering then fills that function. Identical templates give identical functions, which
``hector-merge-identical-functions`` keeps once, and LLVM optimises and generates many small
functions instead of a few huge ones (whose compile time grows faster than their size, and
which cannot be spread over cores: ``lowering/cpu/codegen.py`` splits a module by function).

Each outlined function is named ``<function>_template<i>`` (``i`` counting the templates of
that function in order) and carries the template's location, as does its call; the template op
itself moves into the function unchanged (its schedule, profiling marks and attributes with it).
A gradient pair (an ``xwt`` marked by ``hector-pair-gradient-gemms`` and the template right after
it) moves into one function, which takes the two templates' operands once each and is called
where the second stood: ``convert-hector-intra-to-scf`` lowers the two together.
A call costs a few nanoseconds per template and step.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import func

from ..passes.registry import register_pass
from .cpu import gradient_pairs
from .cpu.intra_to_scf import LOWER

__all__ = ["TEMPLATE_OPS", "outline_templates"]

#: The ops this pass outlines: those convert-hector-intra-to-scf lowers (a new template is
#: outlined as soon as it has a lowering).
TEMPLATE_OPS = tuple(LOWER)


def _outline(ops: list[ir.Operation], name: str, module_block: ir.Block) -> None:
    """Move templates ``ops`` (one, or a gradient pair) into a new private function ``name`` at
    the end of the module, taking their operands once each, and call it where the last stood."""
    operands: list[ir.Value] = []
    for op in ops:
        operands += [v for v in op.operands if all(v != seen for seen in operands)]
    last = ops[-1]
    with last.location:
        with ir.InsertionPoint(last):
            func.CallOp([], ir.FlatSymbolRefAttr.get(name), operands)
        with ir.InsertionPoint(module_block):
            fn = func.FuncOp(name, ir.FunctionType.get([v.type for v in operands], []))
        fn.attributes["sym_visibility"] = ir.StringAttr.get("private")
        entry = fn.add_entry_block()
        with ir.InsertionPoint(entry):
            ret = func.ReturnOp([])
    for op in ops:
        op.move_before(ret)
        for i, v in enumerate(list(op.operands)):
            op.operands[i] = entry.arguments[next(j for j, u in enumerate(operands) if u == v)]


def _units(templates: list[ir.Operation]) -> list[list[ir.Operation]]:
    """The templates in outlining units: a marked ``xwt`` with the template right after it
    (its ``xty``, hector-pair-gradient-gemms), every other template alone."""
    units: list[list[ir.Operation]] = []
    for op in templates:
        if units and len(units[-1]) == 1 and gradient_pairs.MARK in units[-1][0].attributes:
            before = units[-1][0]
            if before.block == op.block and _next(before) == op:
                units[-1].append(op)
                continue
        units.append([op])
    return units


def _next(op: ir.Operation) -> ir.Operation | None:
    """The op right after ``op`` in its block."""
    ops = [o.operation for o in op.block.operations]
    at = next(i for i, o in enumerate(ops) if o == op)
    return ops[at + 1] if at + 1 < len(ops) else None


def outline_templates(module_op: ir.Operation) -> int:
    """Outline every template of the module's functions; how many functions were made."""
    block = module_op.regions[0].blocks[0]
    table = ir.SymbolTable(module_op)
    outlined = 0
    for top in list(block.operations):
        parent = top.operation
        if parent.name != "func.func" or not len(parent.regions[0].blocks):
            continue
        base = ir.StringAttr(parent.attributes["sym_name"]).value
        templates = [
            op.operation
            for body in parent.regions[0].blocks
            for op in body.operations
            if op.operation.name in TEMPLATE_OPS
        ]
        for i, unit in enumerate(_units(templates)):
            name = f"{base}_template{i}"
            while name in table:
                name += "_"
            _outline(unit, name, block)
            outlined += 1
    return outlined


@register_pass(
    "hector-outline-templates",
    "Move each hector_intra template into a private function of its own, called where it "
    "stood (before convert-hector-intra-to-scf: identical templates can then be merged, and "
    "LLVM compiles small functions)",
)
def run(module_op: ir.Operation) -> None:
    """Pass entry point."""
    outline_templates(module_op)
