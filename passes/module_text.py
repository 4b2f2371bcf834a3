"""Parsing module text that comes from outside Hector.

Every parse of input IR (``hector-opt``, ``hector compile FILE``, ``hector.compile`` on text,
plan files) goes through :func:`parse_module` or :func:`parse_module_file`: text that would
abort MLIR's parser (:func:`hector.passes.source_check.source_problems`: nesting too deep, bad
resource blobs, ...) raises ``ir.MLIRError`` at its location, as a parse error would, instead of
reaching the parser. Text parsed in torch-mlir's context is checked by
:func:`hector.passes.source_check.check_source`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlir import ir

from .source_check import source_problems

__all__ = ["parse_module", "parse_module_file"]


@dataclass(frozen=True)
class _SourceDiagnostic:
    """An error found in the input text before MLIR parsed it, shaped like the bindings'
    ``DiagnosticInfo`` so it travels in an ``ir.MLIRError`` like a parser error."""

    location: ir.Location
    message: str
    severity: Any = ir.DiagnosticSeverity.ERROR
    notes: tuple[Any, ...] = ()


def _reject_unsafe_source(text: str, filename: str, context: ir.Context | None) -> None:
    """Raise ``ir.MLIRError`` (as a parse error would) when ``text`` holds a construct MLIR's
    parser would abort the process on."""
    if context is None:
        context = ir.Context.current
    problems = source_problems(text, allow_unregistered=context.allow_unregistered_dialects)
    if problems:
        infos = [
            _SourceDiagnostic(ir.Location.file(filename, p.line, p.column, context), p.message)
            for p in problems
        ]
        raise ir.MLIRError("Unable to parse module assembly", infos)


def parse_module(text: str, context: ir.Context | None = None) -> ir.Module:
    """``ir.Module.parse`` for input IR: text that would abort MLIR's parser raises
    ``ir.MLIRError`` at its location (file ``"-"``, like every parse of text) instead of
    reaching the parser."""
    _reject_unsafe_source(text, "-", context)
    return ir.Module.parse(text, context)


def parse_module_file(path: str, context: ir.Context | None = None) -> ir.Module:
    """``ir.Module.parseFile`` for input IR (ops located at ``path:line:col``), with the checks
    of :func:`parse_module`."""
    with open(path, encoding="utf-8", errors="replace") as f:
        _reject_unsafe_source(f.read(), path, context)
    return ir.Module.parseFile(path, context)
