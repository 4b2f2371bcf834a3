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
from dataclasses import dataclass

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


@dataclass
class _Printed:
    """A top-level op, its printed text (without locations) as the rounds have renamed it,
    the symbol references in that text, and those in its IR (as printed first)."""

    op: ir.Operation
    text: str
    refs: set[str]
    uses: set[str]


def _merge_round(ops: list[_Printed], ctx: ir.Context) -> dict[str, str]:
    """One round on the printed ops: the copies found (printed reference of each copy: the
    printed reference of the function kept for it), the copies taken out of ``ops`` and the
    references to them renamed in the texts of the others, as re-printing them after
    ``SymbolTable.replace_all_symbol_uses`` would show them. A mergeable function's text with
    its own name left out is its signature; the first of each signature is kept."""
    first: dict[str, str] = {}
    copies: dict[str, str] = {}
    for p in ops:
        if _mergeable(p.op):
            own = _printed(_name(p.op), ctx)
            kept = first.setdefault(p.text.replace(own + "(", "@(", 1), own)
            if kept != own:
                copies[own] = kept
    if not copies:
        return copies
    ops[:] = [p for p in ops if not (_mergeable(p.op) and _printed(_name(p.op), ctx) in copies)]
    for p in ops:
        if p.refs & copies.keys():
            p.text = _SYMBOL_REF.sub(lambda m: copies.get(m.group(0), m.group(0)), p.text)
            p.refs = _references(p.text)
    return copies


def merge_identical_functions(module_op: ir.Operation) -> int:
    """Merge identical private functions of ``module_op`` until none are left; how many were
    erased.

    Every top-level op is printed once. Merging a set of callees can make their callers
    identical, so rounds repeat until one merges nothing; each round works on the texts, with
    the references to the copies it found renamed as the IR will be (:func:`_merge_round`),
    rather than printing the module again. Then each op that refers to a copy has those uses
    renamed to the function finally kept, and the copies are erased."""
    ctx = module_op.context
    ops = []
    for op in module_op.regions[0].blocks[0].operations:
        text = op.operation.get_asm(use_local_scope=True, enable_debug_info=False)
        refs = _references(text)
        ops.append(_Printed(op.operation, text, refs, refs))
    everything = list(ops)
    kept_for: dict[str, str] = {}  # printed reference of each copy: of the function kept
    while copies := _merge_round(ops, ctx):
        kept_for = {c: copies.get(k, k) for c, k in kept_for.items()} | copies
    if not kept_for:
        return 0
    names = {_printed(_name(p.op), ctx): _name(p.op) for p in everything if _mergeable(p.op)}
    survivors = {id(p) for p in ops}
    for p in everything:
        if id(p) not in survivors:
            continue
        for ref in sorted(p.uses & kept_for.keys()):
            ir.SymbolTable.replace_all_symbol_uses(names[ref], names[kept_for[ref]], p.op)
    for p in everything:
        if id(p) not in survivors:
            p.op.erase()
    return len(everything) - len(ops)


@register_pass(
    "hector-merge-identical-functions",
    "Keep one copy of each set of identical private functions (outlined kernel bodies of "
    "repeated templates) and call it from every user of the others",
    checks_sizes=False,  # it prints, renames and erases functions: no type is built or measured
)
def run(module_op: ir.Operation) -> None:
    """Pass entry point."""
    merge_identical_functions(module_op)
