"""Size expressions of a bundle's plan: exact integer arithmetic over the arguments' dimensions.

A size in ``plan.json`` (a temporary's dimension, a grid or block extent, a kernel's index
argument) is an int, ``["dim", arg, axis]`` (:class:`Dim`: a dimension of an argument) or
``[op, a, b]`` (:class:`BinOp`) with an operator of :data:`BINARY_OPS` (unsigned index
arithmetic). :func:`parse_size` validates one at its place in the plan, :func:`size_value`
evaluates it for the arguments' shapes, each step within int64 (a step beyond it is a
:class:`~hector.runtime.plan_json.BundleError`, not an overflowed grid), and :func:`evaluate`
and :func:`show` take one as the plan writes it.

This module imports only the standard library.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from .plan_json import INT64_MAX, INT64_MIN, BundleError, PlanValue, shown

__all__ = [
    "BINARY_OPS",
    "BinOp",
    "Dim",
    "Expr",
    "Size",
    "evaluate",
    "parse_size",
    "show",
    "size_value",
]

#: A size: an integer, ``["dim", arg, axis]`` or ``[op, a, b]`` with ``op`` in BINARY_OPS.
Expr: TypeAlias = int | list[Any]


def _divu(a: int, b: int) -> int:
    if b == 0:
        raise BundleError("a size expression divides by zero")
    return a // b


def _remu(a: int, b: int) -> int:
    if b == 0:
        raise BundleError("a size expression divides by zero")
    return a % b


def _ceildivu(a: int, b: int) -> int:
    return -(-a // b) if b else _divu(a, b)


#: The binary operators of size expressions (unsigned index arithmetic, unbounded here).
BINARY_OPS: dict[str, Callable[[int, int], int]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "divu": _divu,
    "remu": _remu,
    "ceildivu": _ceildivu,
    "max": max,
    "min": min,
}


def _fits(value: int, what: str) -> int:
    if not INT64_MIN <= value <= INT64_MAX:
        raise BundleError(f"{what} is {value}, beyond int64")
    return value


@dataclass(frozen=True)
class Dim:
    """``["dim", arg, axis]``: a dimension of an argument."""

    arg: int
    axis: int

    def value(self, shapes: Sequence[Sequence[int]]) -> int:
        """Its value for arguments of ``shapes``."""
        if self.arg >= len(shapes) or self.axis >= len(shapes[self.arg]):
            raise BundleError(f"size expression {self.raw()!r} names no argument dimension")
        return int(shapes[self.arg][self.axis])

    def raw(self) -> Expr:
        """As the plan writes it."""
        return ["dim", self.arg, self.axis]


@dataclass(frozen=True)
class BinOp:
    """``[op, a, b]`` with ``op`` in :data:`BINARY_OPS`."""

    op: str
    a: Size
    b: Size

    def value(self, shapes: Sequence[Sequence[int]]) -> int:
        """Its value for arguments of ``shapes`` (each step within int64, as on the device)."""
        a = self.a if isinstance(self.a, int) else self.a.value(shapes)
        b = self.b if isinstance(self.b, int) else self.b.value(shapes)
        return _fits(BINARY_OPS[self.op](a, b), f"size expression {show(self.raw())}")

    def raw(self) -> Expr:
        """As the plan writes it."""
        return [self.op, _raw(self.a), _raw(self.b)]


#: A validated size expression.
Size: TypeAlias = int | Dim | BinOp


def _raw(size: Size) -> Expr:
    return size if isinstance(size, int) else size.raw()


def size_value(size: Size, shapes: Sequence[Sequence[int]]) -> int:
    """The value of a validated size expression."""
    return size if isinstance(size, int) else size.value(shapes)


def parse_size(at: PlanValue, ranks: Sequence[int] | None) -> Size:
    """A size expression; ``["dim", i, k]`` must name a dimension of ``ranks`` (the arguments'
    ranks; ``None``: checked when evaluated)."""
    v = at.value
    if isinstance(v, int) and not isinstance(v, bool):
        return at.as_int(what="an int64")
    if not isinstance(v, list) or len(v) != 3:
        raise at.expected('a size: an int, ["dim", arg, axis] or [op, a, b]')
    op = at.item(0).choice(["dim", *BINARY_OPS])
    if op == "dim":
        if ranks is None:
            return Dim(at.item(1).as_int(0), at.item(2).as_int(0))
        arg = at.item(1).index("the function's args", len(ranks))
        return Dim(arg, at.item(2).index(f"the dimensions of args[{arg}]", ranks[arg]))
    a, b = parse_size(at.item(1), ranks), parse_size(at.item(2), ranks)
    if b == 0 and op in ("divu", "remu", "ceildivu"):
        raise at.item(2).fail("a size expression divides by zero")
    return BinOp(op, a, b)


def evaluate(expr: Expr, shapes: Sequence[Sequence[int]]) -> int:
    """The value of a size expression (as a plan writes it) for arguments of ``shapes``."""
    try:
        size = parse_size(PlanValue(expr, "expr"), None)
    except BundleError as err:
        raise BundleError(f"malformed size expression {shown(expr)}: {err}") from None
    return size_value(size, shapes)


def show(expr: Expr) -> str:
    """A size expression as text, e.g. ``((arg0[0] * 8) + 255) divu 256``."""
    if isinstance(expr, int):
        return str(expr)
    if expr[0] == "dim":
        return f"arg{expr[1]}[{expr[2]}]"
    return f"({show(expr[1])} {expr[0]} {show(expr[2])})"
