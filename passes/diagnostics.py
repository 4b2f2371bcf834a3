"""MLIR diagnostics as plain Python data, the errors a pipeline raises with them, and where a
failing pass's error is reported.

:class:`Diagnostic` copies an MLIR diagnostic (severity, message, ``file:line:col``, notes) out
of the bindings; :func:`diagnostics_from_error` reads them off an ``ir.MLIRError``.
:class:`PipelineError` carries them when a pipeline fails (with the reproducer's path and
command), :class:`InvalidPipelineError` when the pipeline string itself is wrong. A failing
Hector pass is reported at :func:`failure_location` (the op its :class:`PassFailure` names), and
an exception inside one at :func:`offending_op` (the op it was working on), else at
:func:`module_location`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from mlir import ir

from .registry import PassFailure

__all__ = [
    "Diagnostic",
    "InvalidPipelineError",
    "PipelineError",
    "diagnostics_from_error",
    "failure_location",
    "file_line_col",
    "module_location",
    "offending_op",
]


@dataclass(frozen=True)
class Diagnostic:
    """One MLIR diagnostic, copied out of the bindings into plain Python data.

    ``location`` is the textual location (``loc("f.mlir":3:5)``); ``file``, ``line`` and
    ``column`` are its first file-line-column part, or ``None`` when it has none (unknown
    locations).
    """

    severity: str  # "error" | "warning" | "note" | "remark"
    message: str
    location: str
    file: str | None = None
    line: int | None = None
    column: int | None = None
    notes: tuple[Diagnostic, ...] = ()

    @classmethod
    def from_info(cls, info: Any) -> Diagnostic:
        """Copy an ``ir.DiagnosticInfo`` (or ``ir.Diagnostic``) and its notes."""
        file, line, column = file_line_col(info.location)
        return cls(
            severity=_severity_name(info.severity),
            message=str(info.message),
            location=str(info.location),
            file=file,
            line=line,
            column=column,
            notes=tuple(cls.from_info(n) for n in info.notes),
        )

    def format(self, filename: Callable[[str], str] | None = None) -> str:
        """``file:line:col: severity: message``, then one line per note, like ``mlir-opt``.

        ``filename`` maps the location's file name to the one shown (``"-"`` → the real input).
        """
        lines = [self.header(filename)]
        lines += [n.header(filename) for n in self.notes]
        return "\n".join(lines)

    def header(self, filename: Callable[[str], str] | None = None) -> str:
        """The first line alone: ``file:line:col: severity: message`` (no notes)."""
        return f"{self.where(filename)}: {self.severity}: {self.message}"

    def where(self, filename: Callable[[str], str] | None = None) -> str:
        """``file:line:col`` (``<unknown>:0`` without a file location)."""
        if self.file is None:
            return "<unknown>:0"
        name = filename(self.file) if filename is not None else self.file
        return f"{name}:{self.line}:{self.column}"

    def __str__(self) -> str:
        return self.format()


def _severity_name(severity: Any) -> str:
    name = getattr(severity, "name", str(severity))
    return name.rsplit(".", 1)[-1].lower()


def file_line_col(location: Any) -> tuple[str | None, int | None, int | None]:
    """The first file-line-column location inside ``location`` (name, call site, fused)."""
    seen = 0
    pending = [location]
    while pending and seen < 64:
        loc = pending.pop(0)
        seen += 1
        if loc.is_a_file():
            return str(loc.filename), int(loc.start_line), int(loc.start_col)
        if loc.is_a_name():
            pending.append(loc.child_loc)
        elif loc.is_a_callsite():
            pending.append(loc.callee)
        elif loc.is_a_fused():
            pending.extend(loc.locations)
    return None, None, None


def diagnostics_from_error(err: ir.MLIRError) -> list[Diagnostic]:
    """The diagnostics an ``ir.MLIRError`` carries; its message alone when it has none."""
    diags = [Diagnostic.from_info(d) for d in getattr(err, "error_diagnostics", [])]
    if not diags:
        diags = [Diagnostic("error", str(getattr(err, "message", err)), "loc(unknown)")]
    return diags


class PipelineError(Exception):
    """A pipeline failed: ``diagnostics`` says why, ``reproducer`` where the input IR went.

    ``command`` is the exact ``hector-opt`` command line replaying the failure on the
    reproducer file (``None`` when no reproducer was written).
    """

    def __init__(
        self,
        message: str,
        diagnostics: Iterable[Diagnostic] = (),
        *,
        pipeline: str = "",
        reproducer: str | None = None,
        command: str | None = None,
    ) -> None:
        self.diagnostics = list(diagnostics)
        self.pipeline = pipeline
        self.reproducer = reproducer
        self.command = command
        #: Formatted tracebacks of unexpected exceptions raised inside Hector passes.
        self.tracebacks: list[str] = []
        text = message
        if self.diagnostics:
            text += "\n" + "\n".join(d.format() for d in self.diagnostics)
        if command is not None:
            text += f"\nreproduce with:\n  {command}"
        super().__init__(text)
        self.message = message


class InvalidPipelineError(PipelineError, ValueError):
    """The pipeline string itself is wrong: bad syntax, unknown pass, bad option."""

    def __init__(self, message: str) -> None:
        super().__init__(message)


def failure_location(failure: PassFailure, op: ir.Operation) -> ir.Location:
    """Where to report ``failure`` of a pass run on ``op`` (the module): the location it names,
    or that of the op or value it hands over instead; :func:`module_location` without one."""
    loc = failure.location
    if loc is None:
        return module_location(op)
    if isinstance(loc, ir.Location):
        return loc
    # Tolerate passes that hand over the offending op or value instead of its location.
    inner = getattr(loc, "location", None)
    if isinstance(inner, ir.Location):
        return inner
    owner = getattr(loc, "owner", None)
    if owner is not None and isinstance(getattr(owner, "location", None), ir.Location):
        return owner.location
    return module_location(op)


def _as_op(value: Any, bindings: Any) -> Any:
    """``value`` as a live operation of ``bindings`` (``mlir.ir`` or torch-mlir's ``ir``): an
    op, an op view, or the op defining a value; ``None`` for anything else."""
    try:
        if isinstance(value, bindings.OpView):
            return value.operation
        if isinstance(value, bindings.Operation):
            value.location  # noqa: B018  (raises when the op was erased)
            return value
        if isinstance(value, bindings.Value):
            owner = value.owner
            if isinstance(owner, bindings.OpView | bindings.Operation):
                return _as_op(owner, bindings)
    except (RuntimeError, ValueError):
        return None
    return None


def offending_op(tb: Any, module_op: Any, bindings: Any = ir) -> Any:
    """The op a pass was working on when it raised (``tb``: the exception's traceback): the
    innermost frame's op-valued local other than the module and its functions, else the
    innermost function; ``None`` when the frames name no op. ``bindings`` is the ``ir`` module
    the pass's IR belongs to (Hector's, or torch-mlir's for a torch-context pass)."""
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    func = None
    for frame in reversed(frames):
        for value in list(frame.f_locals.values()):
            op = _as_op(value, bindings)
            if op is None or op == module_op:
                continue
            if op.name not in ("func.func", "builtin.module"):
                return op
            func = func or op
    return func


def module_location(module_op: ir.Operation) -> ir.Location:
    """Where to report an error about the module as a whole: its first located op when the
    module itself has no file location (the parser's implicit module sits at ``file:0:0``)."""
    file, line, _ = file_line_col(module_op.location)
    if file is not None and line:
        return module_op.location
    for inner in module_op.regions[0].blocks[0].operations:
        if file_line_col(inner.location)[0] is not None:
            return inner.location
    return module_op.location
