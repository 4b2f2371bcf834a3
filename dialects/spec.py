"""Declarative op specs shared by Hector's three dialects.

Each dialect file declares its types and ops once, with these dataclasses. From that one
declaration we derive (a) the IRDL module that MLIR loads at run time, into the compiler's
context or into torch-mlir's, and (b) the reference docs in ``docs/dialects/*.md``.
Constraints IRDL cannot express (shape and kind agreement between operands) live in
``passes/verify.py`` and run at the start of every pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

# Constraint names usable for operands/results, and the IRDL they expand to.
_TYPE_CONSTRAINTS: dict[str, str] = {
    "tensor": 'irdl.base "!builtin.tensor"',
    "memref": 'irdl.base "!builtin.memref"',
    "any": "irdl.any",
}


class Kind(StrEnum):
    """What the rows of a value index: the one vocabulary of value kinds.

    The frontend, the verifier, autodiff, fusion, the lowering and the importer all speak it;
    ``hector.kind`` argument attributes spell it as the member's value (``"node"``).
    """

    NODE = "node"
    EDGE = "edge"
    COMPACT = "compact"  # one row per unique (source node, edge type) pair
    DST_COMPACT = "dst_compact"  # one row per unique (destination node, edge type) pair
    WEIGHT = "weight"

    @property
    def text(self) -> str:
        """How diagnostics name the kind (``node-wise``, ``edge-wise``, ``compact``,
        ``dst_compact``, ``weight``)."""
        return f"{self.value}-wise" if self in (Kind.NODE, Kind.EDGE) else self.value


@dataclass(frozen=True)
class RowMap:
    """How an index op moves rows between index spaces through one graph array.

    A gather (``reduce=False``) reads ``out[i] = x[array[i]]``; a sum (``reduce=True``) adds
    ``out[array[i]] += x[i]``, and its result has as many rows as the graph array ``rows`` is
    long. The lowering folds gathers into the reading template's index operand.
    """

    array: str
    reduce: bool
    src: Kind
    dst: Kind
    rows: str | None = None


@dataclass(frozen=True)
class UnaryFn:
    """One elementwise function of ``hector_inter.unary``: the one place it is declared.

    From this the dialects take their ``fn`` enums (``unary``, ``unary_grad``, the traversal
    template's row functions), autodiff takes what the derivative is written in, the frontend
    generates ``Value.<name>()`` and ``hector.<name>(x)``, and the torch raiser maps ``torch``
    onto it. Only the element math (``lowering/templates.py``) is written by hand.
    """

    name: str
    formula: str  # what it computes, for docs and docstrings
    grad_ref: str  # the derivative is written in the forward "input", "output", or "none"
    torch: str | None = None  # the torch-mlir op raised to it (``torch.aten.relu``)
    traced: bool = True  # exposed as ``Value.<name>()`` / ``hector.<name>(x)``


@dataclass(frozen=True)
class Operand:
    """An operand or result: a name, a type constraint, and how many values it takes."""

    name: str
    constraint: str
    doc: str
    variadicity: str = "single"  # "single" | "optional" | "variadic"


@dataclass(frozen=True)
class Attr:
    """A required attribute: a string enum (``values``), an integer, or a bool."""

    name: str
    kind: str  # "enum" | "int" | "bool" | "float"
    doc: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class TypeDef:
    """A parameterless dialect type, such as ``!hector_inter.graph``."""

    name: str
    summary: str


@dataclass(frozen=True)
class OpDef:
    """One operation: its signature, its docs and an example in generic form."""

    name: str
    summary: str
    description: str
    operands: tuple[Operand, ...]
    results: tuple[Operand, ...]
    attributes: tuple[Attr, ...] = ()
    example: str = ""
    # What the rest of the compiler needs to know, beyond the signature:
    rowmap: RowMap | None = None  # index ops: the graph array and the kinds they move between
    adjoint: str | None = None  # index ops: the op whose rows map is this one's transpose
    result_kind: Kind | None = None  # when the result's kind does not follow from the operands


def _value_table(role: str, values: tuple[Operand, ...]) -> list[str]:
    """Markdown table of operands or results."""
    rows = [f"| {role} | constraint | meaning |", "|---|---|---|"]
    for v in values:
        var = "" if v.variadicity == "single" else f" ({v.variadicity})"
        rows.append(f"| `{v.name}` | {v.constraint}{var} | {v.doc} |")
    return [*rows, ""]


@dataclass(frozen=True)
class DialectDef:
    """A dialect: its name, a description, its types and its ops."""

    name: str
    summary: str
    description: str
    types: tuple[TypeDef, ...] = ()
    ops: tuple[OpDef, ...] = field(default_factory=tuple)

    def op(self, name: str) -> OpDef:
        """Return the op spec called ``name`` (without the dialect prefix)."""
        for op in self.ops:
            if op.name == name:
                return op
        raise KeyError(f"{self.name}.{name}")

    # ---- IRDL -----------------------------------------------------------------------------
    def to_irdl(self) -> str:
        """Render this dialect as an ``irdl.dialect`` module body."""
        lines = [f"irdl.dialect @{self.name} {{"]
        for t in self.types:
            lines.append(f"  irdl.type @{t.name}")
        for op in self.ops:
            lines.append(f"  irdl.operation @{op.name} {{")
            counter = 0

            def fresh(text: str, _lines: list[str] = lines) -> str:
                nonlocal counter
                counter += 1
                name = f"%c{counter}"
                _lines.append(f"    {name} = {text}")
                return name

            def constraint(c: str) -> str:
                if c in _TYPE_CONSTRAINTS:
                    return fresh(_TYPE_CONSTRAINTS[c])
                # "<dialect>.<type>": one of our own types.
                dialect, _, tname = c.partition(".")
                return fresh(f"irdl.base @{dialect}::@{tname}")

            def group(values: tuple[Operand, ...]) -> str:
                parts = []
                for v in values:
                    ref = constraint(v.constraint)
                    var = "" if v.variadicity == "single" else f"{v.variadicity} "
                    parts.append(f"{v.name}: {var}{ref}")
                return ", ".join(parts)

            if op.operands:
                body = group(op.operands)
                lines.append(f"    irdl.operands({body})")
            else:
                lines.append("    irdl.operands()")
            body = group(op.results)
            lines.append(f"    irdl.results({body})")
            if op.attributes:
                entries = []
                for a in op.attributes:
                    if a.kind == "enum":
                        refs = [fresh(f'irdl.is "{v}"') for v in a.values]
                        ref = fresh(f"irdl.any_of({', '.join(refs)})")
                    elif a.kind == "int":
                        ref = fresh('irdl.base "#builtin.integer"')
                    elif a.kind == "float":
                        ref = fresh('irdl.base "#builtin.float"')
                    elif a.kind == "bool":
                        ref = fresh(
                            f"irdl.any_of({fresh('irdl.is true')}, {fresh('irdl.is false')})"
                        )
                    else:
                        raise ValueError(f"unknown attribute kind {a.kind!r}")
                    entries.append(f'"{a.name}" = {ref}')
                lines.append(f"    irdl.attributes {{{', '.join(entries)}}}")
            lines.append("  }")
        lines.append("}")
        return "\n".join(lines)

    # ---- docs -----------------------------------------------------------------------------
    def to_markdown(self) -> str:
        """Render the reference page for this dialect (``docs/dialects/<name>.md``)."""
        out = [
            f"# `{self.name}` dialect",
            "",
            "<!-- Generated by `python -m hector.dialects.docs`; do not edit. -->",
            "",
            self.summary,
            "",
            # The description is the dialect module's docstring; its first line restates
            # the summary.
            self.description.strip().split("\n\n", 1)[-1].strip(),
            "",
        ]
        if self.types:
            out += ["## Types", ""]
            for t in self.types:
                out += [f"### `!{self.name}.{t.name}`", "", t.summary, ""]
        out += ["## Operations", ""]
        for op in self.ops:
            out += [f"### `{self.name}.{op.name}`", "", f"_{op.summary}_", ""]
            out += [op.description.strip(), ""]
            if op.operands:
                out += _value_table("operand", op.operands)
            if op.results:
                out += _value_table("result", op.results)
            else:
                out += ["No results: the op writes its `out` operand.", ""]
            if op.attributes:
                out += ["| attribute | kind | meaning |", "|---|---|---|"]
                for a in op.attributes:
                    kind = " \\| ".join(f'`"{v}"`' for v in a.values) if a.values else a.kind
                    out.append(f"| `{a.name}` | {kind} | {a.doc} |")
                out.append("")
            if op.example:
                out += ["Example:", "", "```mlir", op.example.strip(), "```", ""]
        return "\n".join(out).rstrip() + "\n"
