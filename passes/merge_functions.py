"""``hector-merge-identical-functions``: keep one copy of each set of identical private functions.

A training module holds the same kernels several times: ``@f`` and ``@f_train`` run the same
forward templates, and a layer applies one template to several weights (HGT's key, query and
value projections per node type). Each template instance becomes its own outlined function
(``async-parallel-for``'s ``@parallel_compute_fn*``, ``async-to-async-runtime``'s
``@async_execute_fn*``) with the same body and other arguments. LLVM compiles every copy: on a
one-layer HGT training module, 156 of 237 functions were copies, half of the code LLVM
optimised and generated.

The pass compares private functions with bodies by their printed form (their own name left
out), keeps the first of each set, points every symbol use of the others at it and erases them.
Merging a set of callees can make their callers identical, so it repeats until a round merges
nothing. Public functions (the module's entry points and their C interfaces) are never merged;
declarations are left alone.
"""

from __future__ import annotations

import re

from mlir import ir

from .registry import register_pass

__all__ = ["merge_identical_functions"]

_FUNCTION_OPS = ("func.func", "llvm.func")


def _name(op: ir.Operation) -> str:
    return ir.StringAttr(op.attributes["sym_name"]).value


def _mergeable(op: ir.Operation) -> bool:
    """A private function with a body."""
    if op.name not in _FUNCTION_OPS or "sym_visibility" not in op.attributes:
        return False
    private = ir.StringAttr(op.attributes["sym_visibility"]).value == "private"
    return private and len(op.regions[0].blocks) > 0


#: A symbol reference in printed IR: ``@name`` or ``@"any name"``.
_SYMBOL_REF = re.compile(r'@(?:"(?:[^"\\]|\\.)*"|[\w$.\-]+)')


def _printed(name: str, context: ir.Context) -> str:
    """Symbol ``name`` as MLIR prints a reference to it (quoted when it must be)."""
    return str(ir.FlatSymbolRefAttr.get(name, context=context))


def _references(text: str) -> set[str]:
    """The symbol references in printed op ``text``, as printed."""
    return set(_SYMBOL_REF.findall(text))


def _merge_round(module_op: ir.Operation) -> int:
    """Merge each set of identical functions once; how many functions were erased.

    Every top-level op is printed once (without locations); a mergeable function's text with
    its own name left out is its signature. The uses of each copy are renamed only inside the
    ops whose text refers to it (a walk of the whole module per copy cost more than the rest of
    the pass)."""
    ctx = module_op.context
    first: dict[str, str] = {}
    copies: dict[str, tuple[str, str]] = {}  # printed reference: (copy, kept)
    texts: list[tuple[ir.Operation, str]] = []
    for op in module_op.regions[0].blocks[0].operations:
        op = op.operation
        text = op.get_asm(use_local_scope=True, enable_debug_info=False)
        texts.append((op, text))
        if _mergeable(op):
            name = _name(op)
            kept = first.setdefault(text.replace(_printed(name, ctx) + "(", "@(", 1), name)
            if kept != name:
                copies[_printed(name, ctx)] = (name, kept)
    erased = []
    for op, text in texts:
        if _mergeable(op) and _printed(_name(op), ctx) in copies:
            erased.append(op)
            continue
        for ref in _references(text) & copies.keys():
            ir.SymbolTable.replace_all_symbol_uses(*copies[ref], op)
    for op in erased:
        op.erase()
    return len(erased)


def merge_identical_functions(module_op: ir.Operation) -> int:
    """Merge identical private functions of ``module_op`` until none are left; how many were
    erased."""
    erased = 0
    while merged := _merge_round(module_op):
        erased += merged
    return erased


@register_pass(
    "hector-merge-identical-functions",
    "Keep one copy of each set of identical private functions (outlined kernel bodies of "
    "repeated templates) and call it from every user of the others",
    checks_sizes=False,  # it prints, renames and erases functions: no type is built or measured
)
def run(module_op: ir.Operation) -> None:
    """Pass entry point."""
    merge_identical_functions(module_op)
