"""Torch constants and literals read as Python values, for ``raise-torch-to-hector``'s patterns.

A pattern asks what a torch value is when it does not depend on the data: a ``torch.constant.*``
(or a list of them), a splat literal, a tensor of ones or zeros, a view that keeps the shape
(:class:`TorchValues`). Values are read in torch-mlir's own MLIR context, whose binding module
(``ir``) the caller gives.
"""

from __future__ import annotations

from typing import Any

from .nodes import defining_op, op_name, value_shape


class _UnknownType:
    def __repr__(self) -> str:
        return "<unknown>"


_Unknown = _UnknownType()


class TorchValues:
    """Reads torch values with torch-mlir's binding module ``ir``."""

    def __init__(self, ir: Any) -> None:
        self.ir = ir

    def const(self, v: Any) -> Any:
        """The Python value of a torch constant (``None``, a number, bool, string or a list of
        them), or ``<unknown>`` when ``v`` is not a constant."""
        op = defining_op(v)
        n = op_name(op)
        if n == "torch.constant.none":
            return None
        if n in ("torch.constant.int", "torch.constant.float", "torch.constant.bool"):
            a = op.attributes["value"]
            if n == "torch.constant.float":
                return self.ir.FloatAttr(a).value
            if n == "torch.constant.bool":
                return self.ir.BoolAttr(a).value
            return self.ir.IntegerAttr(a).value
        if n == "torch.constant.str":
            return self.ir.StringAttr(op.attributes["value"]).value
        if n == "torch.prim.ListConstruct":
            return [self.const(x) for x in op.operands]
        return _Unknown

    def skip_views(self, v: Any) -> Any:
        """Look through ``view``/``reshape`` ops that keep the shape."""
        while True:
            op = defining_op(v)
            if op_name(op) in ("torch.aten.view", "torch.aten.reshape") and value_shape(
                op.operands[0]
            ) == value_shape(v):
                v = op.operands[0]
                continue
            return v

    def splat(self, v: Any) -> float | None:
        """The value of a floating-point splat literal ``v``, else None."""
        op = defining_op(v)
        if op_name(op) != "torch.vtensor.literal":
            return None
        a = self.ir.DenseElementsAttr(op.attributes["value"])
        value = a.get_splat_value() if a.is_splat else None
        return value.value if isinstance(value, self.ir.FloatAttr) else None

    def is_ones(self, v: Any) -> bool:
        """``v`` is a tensor of ones (a splat literal, ``ones``, ``ones_like``)."""
        n = op_name(defining_op(v))
        if n == "torch.vtensor.literal":
            return self.splat(v) == 1.0
        return n in ("torch.aten.ones", "torch.aten.ones_like", "torch.aten.new_ones")

    def is_zeros(self, v: Any) -> bool:
        """``v`` is a tensor of zeros (a splat literal, ``zeros``, ``fill`` with 0)."""
        op = defining_op(v)
        n = op_name(op)
        if n == "torch.vtensor.literal":
            return self.splat(v) == 0.0
        if n in ("torch.aten.zeros", "torch.aten.zeros_like", "torch.aten.new_zeros"):
            return True
        return n == "torch.aten.fill.Scalar" and self.const(op.operands[1]) in (0, 0.0)
