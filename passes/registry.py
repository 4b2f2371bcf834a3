"""The pass and pipeline registry behind ``hector-opt`` and ``hector.compile``.

A Hector pass is a Python function ``run(module_op, **options)`` that rewrites an
``mlir.ir.Operation`` (the ``builtin.module``) in place, registered under a kebab-case name
with typed options. Failures raise :class:`PassFailure` with the location of the offending op;
the driver turns that into an MLIR diagnostic (``file:line:col: error: ...``) and a pass failure.
Named pipelines are pipeline strings (which may mix Hector and upstream passes) registered
under one name, so ``-p hector-lower-cpu`` works like any pass.

Each pass registers where it is defined (``@register_pass``); :data:`PASS_MODULES` names every
module that defines passes or named pipelines and the names each one registers. The registry
fills on demand: :func:`load` imports the module of one name (the pipeline parser calls it for
each name it meets), :func:`load_all` every module (the pass list, and suggestions for a name
nobody registers). The table holds module names, loaded with :mod:`importlib`, so this
package does not import ``hector.lowering``.
"""

from __future__ import annotations

import functools
import importlib
import math
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


#: Bounds every ``int`` option must fit: its value becomes an ``i64`` attribute or a C++ integer.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class Option:
    """A pass option: its type (``int``, ``bool``, ``str``, ``float``), default and one-line doc.

    ``choices`` lists the allowed values; ``min`` and ``max`` bound a number (inclusive). An
    ``int`` always fits in 64 bits and a ``float`` is always finite. :meth:`parse` rejects
    anything else, so a pass never runs with a value it would turn into invalid IR.
    """

    type: type
    default: Any
    doc: str
    choices: tuple[Any, ...] = ()
    min: float | None = None
    max: float | None = None

    def parse(self, text: str) -> Any:
        """Parse and check the option's textual value (``name=value`` in a pipeline string)."""
        if self.type is bool:
            if text.lower() in ("1", "true", "on"):
                return True
            if text.lower() in ("0", "false", "off"):
                return False
            raise ValueError(f"expected a boolean, got {text!r}")
        try:
            value = self.type(text)
        except ValueError:
            raise ValueError(f"expected {self._kind()}, got {text!r}") from None
        self.check(value)
        return value

    def check(self, value: Any) -> None:
        """Raise ``ValueError`` naming the allowed values when ``value`` is not one of them."""
        if self.choices and value not in self.choices:
            raise ValueError(f"expected one of {', '.join(map(str, self.choices))}, got {value!r}")
        if self.type is float and not math.isfinite(value):
            raise ValueError(f"expected a finite number, got {value!r}")
        low = INT64_MIN if self.type is int and self.min is None else self.min
        high = INT64_MAX if self.type is int and self.max is None else self.max
        if (low is not None and value < low) or (high is not None and value > high):
            raise ValueError(f"must be {self.range()}, got {value!r}")

    def range(self) -> str:
        """The allowed numbers in words (``between 1 and 1024``, ``at least 0``), or ``""``."""
        if self.min is not None and self.max is not None:
            return f"between {_num(self.min)} and {_num(self.max)}"
        if self.min is not None:
            return f"at least {_num(self.min)}"
        if self.max is not None:
            return f"at most {_num(self.max)}"
        return "a 64-bit integer" if self.type is int else ""

    def _kind(self) -> str:
        return {int: "an integer", float: "a number"}.get(self.type, f"a {self.type.__name__}")


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


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
    name: str,
    description: str,
    *,
    context: str = MLIR_CONTEXT,
    checks_sizes: bool = True,
    **options: Option,
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Decorator: register ``run(module_op, **options)`` as the pass ``name`` (``context``:
    see :class:`PassInfo`). An MLIR-context pass first checks its input's static sizes
    (:func:`_checked`) unless ``checks_sizes`` is False: for a pass that builds no type and asks
    MLIR nothing about one (it only prints, moves or erases ops)."""
    if context not in (MLIR_CONTEXT, TORCH_CONTEXT):
        raise ValueError(f"pass '{name}': context must be 'mlir' or 'torch', got {context!r}")
    for key, option in options.items():
        try:
            option.check(option.default)
        except ValueError as err:
            raise ValueError(f"pass '{name}', default of option '{key}': {err}") from None

    def wrap(run: Callable[..., None]) -> Callable[..., None]:
        if name in PASSES:
            raise ValueError(f"pass '{name}' registered twice")
        checked = _checked(run) if context == MLIR_CONTEXT and checks_sizes else run
        PASSES[name] = PassInfo(name, description, checked, dict(options), context)
        return run

    return wrap


def _checked(run: Callable[..., None]) -> Callable[..., None]:
    """``run`` after a check of its input's static sizes (``sizes.size_problems``): a type
    too large for 64-bit strides would make MLIR's own code abort the process in the pass, and
    ``--no-hector-verify`` skips the verifier that reports it, so every pass checks."""

    @functools.wraps(run)
    def checked(module_op: Any, **options: Any) -> None:
        from .sizes import size_problems  # MLIR is loaded only when a pass runs

        problems = list(size_problems(module_op))
        if problems:
            raise PassFailure(*problems[0], more=problems[1:])
        run(module_op, **options)

    return checked


def register_pipeline(name: str, description: str, pipeline: str) -> None:
    """Register a named pipeline usable wherever a pass name is."""
    if name in PIPELINES or name in PASSES:
        raise ValueError(f"pipeline '{name}' registered twice")
    PIPELINES[name] = PipelineInfo(name, description, pipeline)


#: Every module that defines passes (``@register_pass``) or named pipelines
#: (``register_pipeline``), relative to the ``hector`` package, in registration order, with
#: the names it registers: :func:`load` imports only the module a name needs, so a tool that
#: runs one pass does not import every conversion (``test_pass_table_names_what_each_module_
#: registers`` keeps the table true).
PASS_MODULES: dict[str, tuple[str, ...]] = {
    "passes.aggregate_order": ("hector-aggregation-order",),
    "passes.autodiff": ("hector-autodiff",),
    "passes.compact": ("hector-compact-materialization",),
    "passes.fuse": ("hector-fuse", "hector-dce-cse"),
    "passes.half_saved": ("hector-half-saved",),
    "passes.infer_unified": ("placement-infer-unified",),
    "passes.linear_reorder": ("hector-linear-reorder",),
    "passes.merge_functions": ("hector-merge-identical-functions",),
    "passes.plan_offload": ("placement-plan-offload",),
    "passes.plan_saved": ("placement-plan-saved",),
    "passes.verify": ("hector-verify",),
    "lowering.inter_to_intra.destination_passing": ("convert-hector-inter-to-intra",),
    "lowering.gpu.intra_to_gpu": ("convert-hector-intra-to-gpu",),
    "lowering.gpu.skip_empty_launches": ("hector-skip-empty-launches",),
    "lowering.gpu.kernels_on_host": ("hector-gpu-kernels-on-host",),
    "lowering.gpu.mma_nvvm": ("hector-mma-to-nvvm",),
    "lowering.cpu.intra_to_scf": ("convert-hector-intra-to-scf",),
    "lowering.outline_templates": ("hector-outline-templates",),
    "lowering.accumulate_sums": ("hector-accumulate-sums",),
    "lowering.placement_to_runtime": ("convert-placement-to-runtime",),
    "lowering.profile_kernels": ("hector-profile-kernels",),
    "lowering.cpu.torch_linalg": ("convert-torch-to-linalg-cpu",),
    "lowering.pipelines": (
        "raise-torch-to-hector",
        "hector-optimize",
        "hector-lower-llvm-cpu",
        "hector-lower-cpu",
        "hector-lower-gpu",
        "hector-lower-gpu-host",
        "hector-lower-ptx",
        "hector-lower-cuda",
        "hector-lower-bundle",
    ),
    "lowering.schedule": ("hector-schedule",),
    "lowering.cpu.half_messages": ("hector-half-messages",),
    "lowering.cpu.vector_dots": ("hector-vector-dots",),
    "lowering.cpu.gradient_pairs": ("hector-pair-gradient-gemms",),
    "lowering.cpu.bf16_emulation": ("hector-emulate-bf16-dot",),
}
#: The package the module names of :data:`PASS_MODULES` are relative to.
_ROOT = __name__.rsplit(".", 2)[0]
#: Pass or pipeline name -> the module of :data:`PASS_MODULES` that registers it.
_MODULE_OF = {name: module for module, names in PASS_MODULES.items() for name in names}


def is_known(name: str) -> bool:
    """Whether ``name`` is a Hector pass or named pipeline (registered, or in the table)."""
    return name in PASSES or name in PIPELINES or name in _MODULE_OF


def load(name: str) -> None:
    """Register the pass or named pipeline ``name`` if it is not yet: import the one module
    of :data:`PASS_MODULES` that defines it (nothing for a name the table does not hold)."""
    if name not in PASSES and name not in PIPELINES and name in _MODULE_OF:
        importlib.import_module(f"{_ROOT}.{_MODULE_OF[name]}")


def pass_info(name: str) -> PassInfo:
    """The registered pass ``name``, its module imported first (``KeyError`` if none)."""
    load(name)
    return PASSES[name]


def load_all() -> None:
    """Register every pass and named pipeline: import each module of :data:`PASS_MODULES`
    (once; a module already imported is not run again)."""
    for name in PASS_MODULES:
        importlib.import_module(f"{_ROOT}.{name}")
