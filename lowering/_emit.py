"""Shared machinery of Hector's conversions: naming, text emission and body replacement.

Conversions here rebuild each function as MLIR text: values keep the names an
``ir.AsmState`` gives them, generated values get fresh ``%h<n>_...`` names, ops a conversion does
not handle are printed through unchanged, and the rebuilt module replaces the old one's body in
place (same context), so conversions compose with upstream passes in one pass manager.
"""

from __future__ import annotations

import io
from collections.abc import Callable

from mlir import ir

from ..dialects.hector_intra import GRAPH_LAYOUT
from ..passes._registry import PassFailure

# The graph's arrays at the intra level, in the order compiled functions take them.
GRAPH_ARRAYS: tuple[tuple[str, str], ...] = tuple((a.name, a.memref) for a in GRAPH_LAYOUT)


class Writer:
    """Collects the lines of one rebuilt function and hands out fresh SSA names."""

    def __init__(self, state: ir.AsmState | None = None) -> None:
        self.state = state
        self.lines: list[str] = []
        self._n = 0

    def fresh(self, hint: str = "v") -> str:
        """A new SSA name that cannot clash with AsmState names."""
        self._n += 1
        return f"%h{self._n}_{hint}"

    def name(self, value: ir.Value) -> str:
        """The SSA name of an existing value."""
        assert self.state is not None
        return value.get_name(self.state)

    def emit(self, line: str, indent: int = 2) -> None:
        """Append one line of IR."""
        self.lines.append(" " * indent + line)

    def const_index(self, value: int, indent: int = 2) -> str:
        """Emit an ``index`` constant and return its name."""
        n = self.fresh(f"c{value}")
        self.emit(f"{n} = arith.constant {value} : index", indent)
        return n

    def print_op(self, op: ir.Operation, indent: int = 2) -> None:
        """Print an op unchanged, with the function's value names."""
        buf = io.StringIO()
        op.print(state=self.state, file=buf)
        for line in buf.getvalue().splitlines():
            self.emit(line, indent)


def body_ops(func: ir.Operation) -> list[ir.Operation]:
    """The ops of a function's single block."""
    return [op.operation for op in func.regions[0].blocks[0].operations]


def to_memref(t: ir.Type) -> str:
    """The memref type holding a ranked tensor's values."""
    text = str(t)
    if text.startswith("tensor<"):
        return "memref<" + text[len("tensor<") :]
    return text


def segments(op: ir.Operation) -> list[int]:
    """``operandSegmentSizes`` of an op with optional operands."""
    return list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))


def grouped_operands(op: ir.Operation, names: tuple[str, ...]) -> dict[str, ir.Value | None]:
    """Operands by name for an op with optional operands (absent ones map to None)."""
    seg = segments(op)
    values = list(op.operands)
    out: dict[str, ir.Value | None] = {}
    pos = 0
    for name, count in zip(names, seg, strict=True):
        out[name] = values[pos] if count else None
        pos += count
    return out


def str_attr(op: ir.Operation, name: str) -> str:
    """A string attribute's value."""
    return ir.StringAttr(op.attributes[name]).value


def int_attr(op: ir.Operation, name: str) -> int:
    """An integer attribute's value."""
    return ir.IntegerAttr(op.attributes[name]).value


def named_attrs(op: ir.Operation) -> list[tuple[str, ir.Attribute]]:
    """An op's attributes as (name, attribute) pairs."""
    attrs = op.attributes
    return [(attrs[i].name, attrs[i].attr) for i in range(len(attrs))]


def func_attrs_text(func: ir.Operation, drop: tuple[str, ...] = (), add: str = "") -> str:
    """``attributes {...}`` for a rebuilt function: its discardable attributes, plus ``add``."""
    skip = {"sym_name", "function_type", "arg_attrs", "res_attrs", "sym_visibility", *drop}
    parts = [f"{n} = {a}" for n, a in named_attrs(func) if n not in skip]
    if add:
        parts.append(add)
    parts = list(dict.fromkeys(parts))
    return f" attributes {{{', '.join(parts)}}}" if parts else ""


def replace_module(module_op: ir.Operation, text: str, attrs: str = "") -> None:
    """Replace ``module_op``'s body by the ops of the module ``text`` (parsed in its context)."""
    src = f"module{(' attributes ' + attrs) if attrs else ''} {{\n{text}\n}}"
    try:
        new = ir.Module.parse(src, module_op.context)
    except ir.MLIRError as err:  # a conversion bug, not a user error: say so and show the IR
        raise PassFailure(
            f"internal error: a conversion produced invalid IR: {err}\n--- IR ---\n{src}",
            module_op.location,
        ) from None
    block = module_op.regions[0].blocks[0]
    for op in list(block.operations):
        op.operation.erase()
    for op in list(new.body.operations):
        block.append(op.operation)
    if attrs:
        parsed = ir.Module.parse(f"module attributes {attrs} {{}}", module_op.context)
        for n, a in named_attrs(parsed.operation):
            module_op.attributes[n] = a


def rebuild(
    module_op: ir.Operation,
    convert: Callable[[ir.Operation], str | None],
    extra: Callable[[], str] | None = None,
    attrs: str = "",
) -> None:
    """Rebuild every top-level op: ``convert(func)`` returns new text, or None to keep it."""
    pieces = []
    for op in module_op.regions[0].blocks[0].operations:
        op = op.operation
        text = convert(op) if op.name == "func.func" and len(op.regions[0].blocks) else None
        pieces.append(text if text is not None else str(op))
    if extra is not None:
        pieces.append(extra())
    keep = [f"{n} = {a}" for n, a in named_attrs(module_op) if n != "sym_name"]
    all_attrs = ", ".join([*keep, attrs] if attrs else keep)
    replace_module(module_op, "\n".join(pieces), "{" + all_attrs + "}" if all_attrs else "")
