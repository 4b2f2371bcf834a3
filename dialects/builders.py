"""Typed builders and accessors for Hector's ops, generated from their specs.

The spec (``OpDef``) says what an op takes; this module turns that into the two things every
pass needs, the way xDSL's op classes do:

* **builders** — ``hector_inter.OPS.gather_src(graph=g, x=x, result=t, loc=loc)`` creates the op
  through ``Operation.create`` at the current insertion point, ordering operands by the spec,
  filling ``operandSegmentSizes`` when the op has more than one optional operand, and turning
  Python values into attributes by the spec's attribute kinds;
* **accessors** — ``view(op)`` gives ``.operand("x")`` (``None`` for an absent optional
  operand), ``.attr("slice")`` as a Python value, and the op's spec.

Both work with either MLIR copy (``mlir`` or ``torch_mlir``): the ``ir`` module is taken from
the values and types handed in. Nothing here parses text.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType, SimpleNamespace
from typing import Any, Generic, TypeVar

from .spec import Attr, DialectDef, OpDef, Operand

OperandValue = Any  # an ir.Value, a sequence of them (variadic), or None (absent optional)


def ir_of(*objects: Any) -> ModuleType:
    """The ``ir`` module (``mlir.ir`` or ``torch_mlir.ir``) that ``objects`` belong to."""
    for obj in objects:
        if obj is None:
            continue
        if isinstance(obj, list | tuple):
            if obj:
                return ir_of(*obj)
            continue
        root = type(obj).__module__.split(".", 1)[0]
        if root in ("mlir", "torch_mlir"):
            return sys.modules[f"{root}.ir"]
    from mlir import ir

    return ir


def _needs_segments(values: tuple[Operand, ...]) -> bool:
    """IRDL asks for a segment-size attribute when more than one group is not ``single``."""
    return sum(v.variadicity != "single" for v in values) > 1


def _attribute(ir: ModuleType, spec: Attr, value: Any) -> Any:
    """A Python value as the attribute the spec's kind calls for (attributes pass through)."""
    if isinstance(value, ir.Attribute):
        return value
    if spec.kind == "enum":
        if value not in spec.values:
            raise ValueError(f"{spec.name} must be one of {', '.join(spec.values)}, got {value!r}")
        return ir.StringAttr.get(value)
    if spec.kind == "int":
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(value))
    if spec.kind == "float":
        return ir.FloatAttr.get(ir.F32Type.get(), float(value))
    if spec.kind == "bool":
        return ir.BoolAttr.get(bool(value))
    raise ValueError(f"unknown attribute kind {spec.kind!r}")


def create(
    dialect: str,
    spec: OpDef,
    operands: Mapping[str, OperandValue],
    results: Sequence[Any] = (),
    attributes: Mapping[str, Any] | None = None,
    loc: Any = None,
    extra: Mapping[str, Any] | None = None,
) -> Any:
    """Create ``dialect.spec`` at the current insertion point and return the ``Operation``.

    ``operands`` maps operand names to values (``None`` or missing for an absent optional
    operand); ``attributes`` maps the spec's attribute names to Python values or attributes;
    ``extra`` adds discardable attributes (``hector.fuse``) as they are. ``loc`` defaults to
    the enclosing ``Location`` context.
    """
    unknown = set(operands) - {o.name for o in spec.operands}
    if unknown:
        raise TypeError(f"{dialect}.{spec.name} has no operand {', '.join(sorted(unknown))}")
    ir = ir_of(list(operands.values()), list(results))
    flat: list[Any] = []
    sizes: list[int] = []
    for o in spec.operands:
        value = operands.get(o.name)
        if value is None:
            if o.variadicity == "single":
                raise TypeError(f"{dialect}.{spec.name} needs operand '{o.name}'")
            sizes.append(0)
        elif o.variadicity == "variadic":
            flat.extend(value)
            sizes.append(len(value))
        else:
            flat.append(value)
            sizes.append(1)
    attrs: dict[str, Any] = {}
    given = dict(attributes or {})
    for a in spec.attributes:
        if a.name not in given:
            raise TypeError(f"{dialect}.{spec.name} needs attribute '{a.name}'")
        attrs[a.name] = _attribute(ir, a, given.pop(a.name))
    if given:
        raise TypeError(f"{dialect}.{spec.name} has no attribute {', '.join(sorted(given))}")
    if _needs_segments(spec.operands):
        attrs["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get(sizes)
    for name, value in (extra or {}).items():
        attrs[name] = value if isinstance(value, ir.Attribute) else ir.StringAttr.get(str(value))
    return ir.Operation.create(
        f"{dialect}.{spec.name}", results=list(results), operands=flat, attributes=attrs, loc=loc
    )


class OpAccess:
    """Operands and attributes of one op, by the names its spec gives them."""

    def __init__(self, spec: OpDef, op: Any) -> None:
        self.spec = spec
        self.op = op
        self._operands = self._group(op)

    def _group(self, op: Any) -> dict[str, Any]:
        values = list(op.operands)
        if _needs_segments(self.spec.operands):
            ir = ir_of(op)
            sizes = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
        else:
            # At most one non-single operand: it takes whatever the singles leave.
            rest = len(values) - sum(o.variadicity == "single" for o in self.spec.operands)
            sizes = [1 if o.variadicity == "single" else rest for o in self.spec.operands]
        out: dict[str, Any] = {}
        pos = 0
        for o, n in zip(self.spec.operands, sizes, strict=True):
            group = values[pos : pos + n]
            if o.variadicity == "variadic":
                out[o.name] = group
            else:
                out[o.name] = group[0] if group else None
            pos += n
        return out

    def operand(self, name: str) -> Any:
        """The operand called ``name`` (``None`` when an optional one is absent)."""
        if name not in self._operands:
            raise KeyError(f"{self.op.name} has no operand '{name}'")
        return self._operands[name]

    def has(self, name: str) -> bool:
        """Whether the (optional) operand ``name`` is present."""
        return self.operand(name) is not None

    def attr(self, name: str) -> Any:
        """The attribute ``name`` as a Python value (str, int, float or bool)."""
        ir = ir_of(self.op)
        a = self.op.attributes[name]  # the bindings hand back the concrete attribute class
        if isinstance(a, ir.StringAttr | ir.BoolAttr | ir.IntegerAttr | ir.FloatAttr):
            return a.value
        return a


def view(dialect: DialectDef, op: Any) -> OpAccess:
    """Accessors for ``op``, which must be an op of ``dialect``."""
    name = op.name
    prefix = f"{dialect.name}."
    if not name.startswith(prefix):
        raise KeyError(f"{name} is not a {dialect.name} op")
    return OpAccess(dialect.op(name.removeprefix(prefix)), op)


def builders(dialect: DialectDef) -> SimpleNamespace:
    """One builder function per op of ``dialect``, named after the op.

    ``builder(*, result=None, results=(), loc=None, extra=None, **operands_and_attributes)``:
    keywords are split between operands and attributes by the spec; a single ``result`` type
    may be given instead of ``results``. Returns the op's single result, or the ``Operation``
    when it has none or several.
    """
    table: dict[str, Callable[..., Any]] = {}
    for spec in dialect.ops:
        table[spec.name] = _builder(dialect.name, spec)
    return SimpleNamespace(**table)


def _builder(dialect: str, spec: OpDef) -> Callable[..., Any]:
    operand_names = {o.name for o in spec.operands}

    def build(
        *,
        result: Any = None,
        results: Sequence[Any] = (),
        loc: Any = None,
        extra: Mapping[str, Any] | None = None,
        **kw: Any,
    ) -> Any:
        operands = {k: v for k, v in kw.items() if k in operand_names}
        attrs = {k: v for k, v in kw.items() if k not in operand_names}
        types = [result] if result is not None else list(results)
        op = create(dialect, spec, operands, types, attrs, loc, extra)
        return op.result if len(types) == 1 else op

    build.__name__ = spec.name
    build.__doc__ = f"Build ``{dialect}.{spec.name}``: {spec.summary}"
    return build


H = TypeVar("H", bound=Callable[..., Any])


class OpHandlers(Generic[H]):
    """One table of per-op handlers (verifiers, adjoint rules, lowerings, raise patterns),
    keyed by op name and filled by a decorator, so no pass dispatches on op names itself.

    ``prefix`` is prepended to the names given to :meth:`register` (``"hector_inter."`` lets a
    table register short names and look up full ones). Registering a name twice is an error:
    each op has exactly one handler of each kind.
    """

    def __init__(self, what: str, prefix: str = "") -> None:
        self.what = what
        self.prefix = prefix
        self._table: dict[str, H] = {}

    def register(self, *names: str) -> Callable[[H], H]:
        """Decorator: the decorated function handles the ops ``names``."""

        def add(handler: H) -> H:
            for name in names:
                key = self.prefix + name
                if key in self._table:
                    raise ValueError(f"two {self.what}s for '{key}'")
                self._table[key] = handler
            return handler

        return add

    def get(self, name: str) -> H | None:
        """The handler of the op called ``name`` (with the prefix), or None."""
        return self._table.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._table

    def names(self) -> list[str]:
        """Every op name with a handler."""
        return list(self._table)
