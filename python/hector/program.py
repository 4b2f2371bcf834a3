"""The program every target compiles: :class:`Traced`, a hector_inter program and the ABI of
its function (the frontend builds one through the MLIR bindings; the importer hands one in as
text from torch-mlir's context), and how a compilation gets its own copy of it.

Kinds are :class:`hector.dialects.Kind` everywhere. This module imports nothing of Hector's but
the dialects (the compiler's parser is loaded on first use).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import torch

from .dialects import Kind, make_context

if TYPE_CHECKING:
    from mlir import ir

__all__ = ["STORAGE_TYPES", "Kind", "Traced", "instantiate", "parse_file", "storage_dtype"]

#: The element type (``hector.storage``, as MLIR spells it) each half dtype is passed in.
STORAGE_TYPES = {torch.float16: "f16", torch.bfloat16: "bf16"}


def storage_dtype(stored: str | None) -> torch.dtype:
    """The dtype of a tensor stored as ``stored`` (``"f16"``, ``"bf16"``); float32 otherwise."""
    return next((d for d, n in STORAGE_TYPES.items() if n == stored), torch.float32)


# ---------------------------------------------------------------------------------------------
# The traced program
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Traced:
    """A hector_inter program with one public function ``name`` and that function's ABI.

    ``program`` is an ``ir.Module`` built through the bindings in its own context (the frontend
    tracer: every op located at the user's source line), or hector_inter text (the importer,
    whose IR lives in torch-mlir's separate MLIR copy; it prints locations so they survive).
    Compiling never changes it: :meth:`instantiate` hands each compilation its own copy.
    """

    name: str
    program: ir.Module | str
    arg_kinds: tuple[Kind | str, ...]
    result_kinds: tuple[Kind | str, ...]
    result_widths: tuple[tuple[int, ...], ...]
    weight_slices: dict[int, str] = field(default_factory=dict)  # arg position → etype|ntype
    # Arg position → the half type ("f16" or "bf16") it is passed in (``hector.storage``).
    storage: dict[int, str] = field(default_factory=dict)
    #: Each tensor argument's shape as the kernel is built for it: ``None`` for the row count
    #: of a node- or edge-wise argument (read at run time), every other dim static; empty
    #: when the producer does not record them (then only rows and slices are checked).
    arg_shapes: tuple[tuple[int | None, ...], ...] = ()
    #: Positions of the tensor arguments the results depend on (None: not recorded, assume all).
    used_args: frozenset[int] | None = None

    def shape_mismatch(self, i: int, shape: tuple[int, ...]) -> str | None:
        """Why tensor argument ``i`` of ``shape`` cannot be passed to a kernel of this program
        (its rank or a static dim differs from :attr:`arg_shapes`), or None when it can."""
        if i >= len(self.arg_shapes):
            return None
        want = self.arg_shapes[i]
        if len(want) == len(shape) and all(
            w is None or w == d for w, d in zip(want, shape, strict=True)
        ):
            return None
        built = "[" + ", ".join("rows" if w is None else str(w) for w in want) + "]"
        return f"has shape {list(shape)}, but this kernel was built for {built}"

    def dtype_of(self, i: int) -> torch.dtype:
        """The dtype tensor argument ``i`` must have: its storage's, else float32."""
        return storage_dtype(self.storage.get(i))

    @cached_property
    def text(self) -> str:
        """The program as text (without locations), as ``hector compile`` reads it."""
        if isinstance(self.program, str):
            return self.program
        return str(self.program)

    @cached_property
    def key(self) -> str:
        """A cache key: the program with its locations (equal programs compile equally)."""
        if isinstance(self.program, str):
            return self.program
        return self.program.operation.get_asm(enable_debug_info=True)

    def instantiate(self) -> ir.Module:
        """A fresh copy of the program for a compilation to transform in place: cloned into
        the program's own context, or (for text) parsed into a new context."""
        return instantiate(self.program)


def instantiate(program: ir.Module | str) -> ir.Module:
    """A copy of ``program`` to transform in place (see :meth:`Traced.instantiate`); text is
    parsed (with its locations) into a fresh context with Hector's dialects."""
    from mlir import ir  # the compiler is loaded on first use: bundles run without it

    if isinstance(program, str):
        from .passes.module_text import parse_module  # refuses what would abort MLIR's parser

        with make_context(), ir.Location.unknown():
            return parse_module(program)
    with program.context, program.operation.location:
        copy = ir.Module.create()
        with ir.InsertionPoint(copy.body):
            for op in program.body.operations:
                op.clone()
    return copy


def parse_file(path: str) -> ir.Module:
    """Parse the hector_inter file ``path`` into a fresh context: its ops are located at
    ``path:line:col``, so diagnostics and ``--debug-info`` output name the user's file."""
    from mlir import ir

    from .passes.module_text import parse_module_file  # refuses what would abort MLIR's parser

    with make_context(), ir.Location.unknown():
        return parse_module_file(path)
