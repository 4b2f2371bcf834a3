"""Hector's three dialects, defined once and loadable into any MLIR context.

``load(context)`` registers ``hector_inter``, ``hector_intra`` and ``placement`` in the
compiler's context (``mlir``); ``load_into_torch_mlir(context)`` registers the same
definitions in torch-mlir's separate MLIR copy, for the raise step.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

from . import hector_inter, hector_intra, placement
from .spec import DialectDef, Kind, OpDef, RowMap

__all__ = ["DIALECTS", "SPECS", "Kind", "RowMap", "load", "make_context", "spec"]

DIALECTS: tuple[DialectDef, ...] = (hector_inter.DIALECT, hector_intra.DIALECT, placement.DIALECT)

#: Every op's spec by its full name (``"hector_inter.gather_src"``).
SPECS: dict[str, OpDef] = {f"{d.name}.{op.name}": op for d in DIALECTS for op in d.ops}


def spec(name: str) -> OpDef | None:
    """The spec of the op called ``name`` (full name), or None if it is not one of Hector's."""
    return SPECS.get(name)


def irdl_text() -> str:
    """The IRDL module that defines all three dialects."""
    return "module {\n" + "\n".join(d.to_irdl() for d in DIALECTS) + "\n}\n"


def _load_with(ir_module: ModuleType, irdl_module: ModuleType, context: Any) -> None:
    with context:
        defs = ir_module.Module.parse(irdl_text())
        irdl_module.load_dialects(defs)
    # Keep the definitions alive with the context: the loaded dialects refer to them.
    _KEEPALIVE.append(defs)
    _register_python_modules(ir_module.__name__.split(".", 1)[0])


def _register_python_modules(root: str) -> None:
    """Give each dialect an (empty) ``<root>.dialects.<name>`` module.

    Whenever the bindings hand back an op, they import ``<root>.dialects.<namespace>`` to look
    for a Python op class, and retry a failed import every time: without these modules walking
    a function of Hector's ops costs about 7x more. Hector's op classes are its specs, so the
    modules stay empty.
    """
    for d in DIALECTS:
        name = f"{root}.dialects.{d.name}"
        if name not in sys.modules:
            module = ModuleType(
                name, f"Placeholder for Hector's {d.name} dialect (see hector.dialects)."
            )
            sys.modules[name] = module


_KEEPALIVE: list[Any] = []
_LOADED: set[int] = set()


def load(context: Any) -> None:
    """Load the three dialects into an ``mlir.ir.Context`` (idempotent)."""
    key = id(context)
    if key in _LOADED:
        return
    from mlir import ir
    from mlir.dialects import irdl

    _load_with(ir, irdl, context)
    _LOADED.add(key)


def load_into_torch_mlir(context: Any) -> None:
    """Load the three dialects into a ``torch_mlir.ir.Context`` (idempotent)."""
    key = id(context)
    if key in _LOADED:
        return
    from torch_mlir import ir
    from torch_mlir.dialects import irdl

    _load_with(ir, irdl, context)
    _LOADED.add(key)


def make_context() -> Any:
    """A fresh ``mlir.ir.Context`` with Hector's dialects loaded."""
    from mlir import ir

    ctx = ir.Context()
    load(ctx)
    return ctx
