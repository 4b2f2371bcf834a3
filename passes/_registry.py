"""The pass and pipeline registry behind ``hector-opt`` and ``hector.compile``.

A Hector pass is a Python function ``run(module_op, **options)`` that rewrites an
``mlir.ir.Operation`` (the ``builtin.module``) in place, registered under a kebab-case name
with typed options. Failures raise :class:`PassFailure` with the location of the offending op;
the driver turns that into an MLIR diagnostic (``file:line:col: error: ...``) and a pass failure.
Named pipelines are pipeline strings (which may mix Hector and upstream passes) registered
under one name, so ``-p hector-lower-cpu`` works like any pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


class PassFailure(Exception):
    """A pass rejected its input: ``message`` refers to ``location`` (an ``ir.Location``).

    ``more`` holds further ``(message, location)`` errors found in the same run, so a pass can
    report every offending op at once (each becomes its own diagnostic).
    """

    def __init__(
        self, message: str, location: Any = None, *, more: Sequence[tuple[str, Any]] = ()
    ) -> None:
        super().__init__(message)
        self.message = message
        self.location = location
        self.more = tuple(more)

    def errors(self) -> list[tuple[str, Any]]:
        """Every ``(message, location)`` this failure reports, the first one first."""
        return [(self.message, self.location), *self.more]


#: The context a pass runs in: Hector's (``mlir``), or torch-mlir's for torch-dialect input.
MLIR_CONTEXT, TORCH_CONTEXT = "mlir", "torch"


@dataclass(frozen=True)
class Option:
    """A pass option: its type (``int``, ``bool``, ``str``), default and one-line doc."""

    type: type
    default: Any
    doc: str
    choices: tuple[Any, ...] = ()

    def parse(self, text: str) -> Any:
        """Parse the option's textual value (``name=value`` in a pipeline string)."""
        if self.type is bool:
            if text.lower() in ("1", "true", "on"):
                return True
            if text.lower() in ("0", "false", "off"):
                return False
            raise ValueError(f"expected a boolean, got {text!r}")
        value = self.type(text)
        if self.choices and value not in self.choices:
            raise ValueError(f"expected one of {', '.join(map(str, self.choices))}, got {text!r}")
        return value


@dataclass(frozen=True)
class PassInfo:
    """A registered pass: name, one-line description, options and the function that runs it.

    ``context`` says which MLIR copy the pass works in: ``"mlir"`` (Hector's: it runs inside a
    ``PassManager``), or ``"torch"`` (torch-mlir's: it reads torch-dialect IR, which Hector's
    context cannot hold, so ``hector-opt`` parses the input in torch-mlir's context and calls
    ``run`` on that module directly).
    """

    name: str
    description: str
    run: Callable[..., None]
    options: dict[str, Option] = field(default_factory=dict)
    context: str = MLIR_CONTEXT

    def bind(self, given: dict[str, str]) -> dict[str, Any]:
        """Options for one run: defaults overridden by the parsed ``given`` strings."""
        values = {k: o.default for k, o in self.options.items()}
        for key, text in given.items():
            if key not in self.options:
                known = ", ".join(self.options) or "none"
                raise ValueError(f"pass '{self.name}' has no option '{key}' (options: {known})")
            try:
                values[key] = self.options[key].parse(text)
            except ValueError as err:
                raise ValueError(f"pass '{self.name}', option '{key}': {err}") from None
        return values


@dataclass(frozen=True)
class PipelineInfo:
    """A named pipeline: a pipeline string that may mix Hector and upstream passes."""

    name: str
    description: str
    pipeline: str


PASSES: dict[str, PassInfo] = {}
PIPELINES: dict[str, PipelineInfo] = {}


def register_pass(
    name: str, description: str, *, context: str = MLIR_CONTEXT, **options: Option
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Decorator: register ``run(module_op, **options)`` as the pass ``name`` (``context``:
    see :class:`PassInfo`)."""
    if context not in (MLIR_CONTEXT, TORCH_CONTEXT):
        raise ValueError(f"pass '{name}': context must be 'mlir' or 'torch', got {context!r}")

    def wrap(run: Callable[..., None]) -> Callable[..., None]:
        if name in PASSES:
            raise ValueError(f"pass '{name}' registered twice")
        PASSES[name] = PassInfo(name, description, run, dict(options), context)
        return run

    return wrap


def register_pipeline(name: str, description: str, pipeline: str) -> None:
    """Register a named pipeline usable wherever a pass name is."""
    if name in PIPELINES or name in PASSES:
        raise ValueError(f"pipeline '{name}' registered twice")
    PIPELINES[name] = PipelineInfo(name, description, pipeline)
