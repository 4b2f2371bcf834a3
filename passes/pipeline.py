"""Pipelines: parsing pipeline text into stages, and running them.

A pipeline string mixes Hector passes (Python functions in :data:`PASSES`), named pipelines
(:data:`PIPELINES`, expanded in place) and upstream MLIR passes, for example::

    builtin.module(hector-verify, canonicalize, func.func(cse), hector-lower-cpu)

MLIR's textual pipeline parser cannot name a Python pass, so :func:`parse_pipeline` splits the
string itself into :class:`Stage` objects: one per Hector pass, and one per run of consecutive
upstream elements. :func:`build_pass_manager` turns the stages into one ``PassManager`` and
:func:`run_pipeline` runs it, turning every failure into a
:class:`~hector.passes.diagnostics.PipelineError` with the diagnostics
(:mod:`hector.passes.diagnostics`) and, optionally, a reproducer file plus the ``hector-opt``
command that replays it (:mod:`hector.passes.reproducer`). This module is shared by
``hector-opt`` and the compiler API.
"""

from __future__ import annotations

import difflib
import re
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mlir import ir, passmanager

from .diagnostics import (
    InvalidPipelineError,
    PipelineError,
    diagnostics_from_error,
    failure_location,
    module_location,
    offending_op,
)
from .registry import (
    MLIR_CONTEXT,
    PASSES,
    PIPELINES,
    PassFailure,
    PassInfo,
    is_known,
    load,
    load_all,
    pass_info,
)
from .reproducer import reproducer_command, shell_quote, write_reproducer
from .upstream_options import option_problem

__all__ = [
    "MAX_PIPELINE_NESTING",
    "VERIFY_PASS",
    "Stage",
    "build_pass_manager",
    "parse_options",
    "parse_pipeline",
    "run_pipeline",
    "split_elements",
    "torch_pass_message",
]

#: The pass prepended to every pipeline run with ``verify=True``.
VERIFY_PASS = "hector-verify"


# Element names: a pass argument (``hector-verify``) or an anchor op name (``func.func``).
_ELEMENT = re.compile(r"^(?P<name>[A-Za-z_][\w.\-]*)\s*(?P<rest>.*)$", re.DOTALL)
_OPEN_TO_CLOSE = {"(": ")", "{": "}", "[": "]"}
#: Deepest bracket nesting of a pipeline string. Real pipelines nest three or four levels
#: (``builtin.module(gpu.module(pass{opt=v}))``); the bound keeps the recursive walks here and
#: MLIR's own pipeline parser far from their stack limits.
MAX_PIPELINE_NESTING = 32


# ---- parsing pipeline text ----------------------------------------------------------------------


@dataclass(frozen=True)
class Stage:
    """One step of a pipeline.

    A Hector stage has ``pass_info`` set and ``options`` bound (defaults filled in); an upstream
    stage has ``pass_info`` ``None`` and ``text`` holds one or more comma-separated upstream
    pipeline elements, as MLIR's textual parser reads them.
    """

    text: str
    pass_info: PassInfo | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_hector(self) -> bool:
        """Whether this stage runs a Hector (Python) pass."""
        return self.pass_info is not None

    @property
    def name(self) -> str:
        """The Hector pass name, or the upstream text."""
        return self.pass_info.name if self.pass_info is not None else self.text


def split_elements(text: str) -> list[str]:
    """Split a pipeline body at top-level commas, respecting ``()``, ``{}``, ``[]`` and quotes.

    Raises :class:`InvalidPipelineError` on unbalanced brackets, brackets nested deeper than
    :data:`MAX_PIPELINE_NESTING`, or an empty element.
    """
    elements: list[str] = []
    stack: list[str] = []
    start = 0
    quote = False
    for i, ch in enumerate(text):
        if quote:
            if ch == '"':
                quote = False
            continue
        if ch == '"':
            quote = True
        elif ch in _OPEN_TO_CLOSE:
            stack.append(_OPEN_TO_CLOSE[ch])
            if len(stack) > MAX_PIPELINE_NESTING:
                raise InvalidPipelineError(
                    f"pipeline nested deeper than {MAX_PIPELINE_NESTING} levels at offset {i} "
                    f"('{ch}')"
                )
        elif ch in ")}]":
            if not stack or stack.pop() != ch:
                raise InvalidPipelineError(f"unbalanced '{ch}' at offset {i} in pipeline {text!r}")
        elif ch == "," and not stack:
            elements.append(text[start:i].strip())
            start = i + 1
    if quote:
        raise InvalidPipelineError(f"unterminated string in pipeline {text!r}")
    if stack:
        raise InvalidPipelineError(f"missing '{stack[-1]}' in pipeline {text!r}")
    elements.append(text[start:].strip())
    if elements == [""]:
        return []
    if any(e == "" for e in elements):
        raise InvalidPipelineError(f"empty element in pipeline {text!r}")
    return elements


def _split_element(element: str) -> tuple[str, str, str]:
    """Split one element: ``name{opts}`` → (name, "{", opts), ``anchor(p)`` → (anchor, "(", p).

    A bare ``name`` gives (name, "", "").
    """
    match = _ELEMENT.match(element)
    if match is None:
        raise InvalidPipelineError(f"expected a pass name, got {element!r}")
    name, rest = match.group("name"), match.group("rest").strip()
    if not rest:
        return name, "", ""
    opener = rest[0]
    if opener in "({" and rest.endswith(_OPEN_TO_CLOSE[opener]):
        inner = rest[1:-1]
        # The brackets must close at the very end: "a(b)(c)" is not one element.
        try:
            split_elements(inner)
        except InvalidPipelineError:
            raise InvalidPipelineError(f"malformed pipeline element {element!r}") from None
        return name, opener, inner
    raise InvalidPipelineError(f"malformed pipeline element {element!r}")


def _unwrap_module(text: str) -> str:
    """``builtin.module(body)`` → ``body``; anything else unchanged."""
    text = text.strip()
    elements = split_elements(text)
    if len(elements) == 1:
        name, opener, inner = _split_element(elements[0])
        if name == "builtin.module" and opener == "(":
            return inner
    return text


def parse_options(text: str) -> dict[str, str]:
    """Parse ``key=value key2="a b" flag`` (MLIR's pass-option syntax) into strings.

    A bare ``flag`` means ``flag=true``; double quotes and one level of braces around a value
    are removed.
    """
    options: dict[str, str] = {}
    i, n = 0, len(text)
    while i < n:
        if text[i].isspace():
            i += 1
            continue
        j = i
        while j < n and not text[j].isspace() and text[j] != "=":
            j += 1
        key = text[i:j]
        if j < n and text[j] == "=":
            j += 1
            value_start = j
            depth = 0
            quote = False
            while j < n:
                ch = text[j]
                if quote:
                    quote = ch != '"'
                elif ch == '"':
                    quote = True
                elif ch == "{":
                    depth += 1
                elif ch == "}":
                    depth -= 1
                elif ch.isspace() and depth == 0:
                    break
                j += 1
            value = text[value_start:j]
            if len(value) >= 2 and (value[0], value[-1]) in (('"', '"'), ("{", "}")):
                value = value[1:-1]
        else:
            value = "true"
        if not key:
            raise InvalidPipelineError(f"malformed pass options {{{text}}}")
        options[key] = value
        i = j
    return options


def _check_nested(name: str, inner: str, anchors: tuple[str, ...]) -> None:
    """Reject Hector passes inside an upstream nested pipeline (they are module-level only)."""
    for element in split_elements(inner):
        sub, opener, body = _split_element(element)
        path = (*anchors, name)
        if is_known(sub):
            load(sub)
            kind = "pass" if sub in PASSES else "pipeline"
            where = "".join(f"{a}(" for a in path) + "..." + ")" * len(path)
            raise InvalidPipelineError(
                f"Hector {kind} '{sub}' runs on the whole module; it cannot be nested inside "
                f"'{where}' (put it at the top level of the pipeline)"
            )
        if opener == "(":
            _check_nested(sub, body, path)


def parse_pipeline(text: str) -> list[Stage]:
    """Parse a pipeline string into stages.

    Accepts ``builtin.module(a, b{opt=1 x=foo}, func.func(canonicalize), c)`` or the same
    without the ``builtin.module(...)`` wrapper. Hector passes become Hector stages with bound
    options; named pipelines expand recursively; consecutive upstream elements are grouped into
    one upstream stage. Raises :class:`InvalidPipelineError` on malformed input, unknown options
    and Hector passes nested inside an op-anchored pipeline.
    """
    return _parse(text, ())


def _parse(text: str, expanding: tuple[str, ...]) -> list[Stage]:
    stages: list[Stage] = []
    upstream: list[str] = []

    def flush() -> None:
        if upstream:
            stages.append(Stage(", ".join(upstream)))
            upstream.clear()

    for element in split_elements(_unwrap_module(text)):
        name, opener, inner = _split_element(element)
        load(name)  # the module that registers a Hector name, imported when first named
        if name in PASSES:
            if opener == "(":
                raise InvalidPipelineError(
                    f"Hector pass '{name}' takes options in braces ({name}{{opt=value}}), "
                    "not a nested pipeline"
                )
            info = PASSES[name]
            try:
                options = info.bind(parse_options(inner))
            except ValueError as err:
                raise InvalidPipelineError(str(err)) from None
            flush()
            stages.append(Stage(element, info, options))
        elif name in PIPELINES:
            if opener:
                raise InvalidPipelineError(f"named pipeline '{name}' takes no options")
            if name in expanding:
                chain = " -> ".join((*expanding, name))
                raise InvalidPipelineError(f"named pipeline '{name}' refers to itself ({chain})")
            flush()
            stages.extend(_parse(PIPELINES[name].pipeline, (*expanding, name)))
        else:
            if opener == "(":
                _check_nested(name, inner, ())
            upstream.append(element)
    flush()
    return stages


# ---- building and running -----------------------------------------------------------------


def _close_names(name: str) -> list[str]:
    load_all()  # suggestions come from every name, not only those loaded so far
    return difflib.get_close_matches(name, [*PASSES, *PIPELINES], n=3, cutoff=0.6)


def _unknown_pass_message(name: str) -> str:
    message = f"unknown pass '{name}'"
    close = _close_names(name)
    if close:
        quoted = [f"'{c}'" for c in close]
        options = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
        message += f"; did you mean {options}?"
    return message


_UNKNOWN_UPSTREAM = re.compile(r"'([^']+)' does not refer to a registered pass or pass pipeline")


def _upstream_error(text: str, err: ValueError) -> InvalidPipelineError:
    """Turn the bindings' ValueError for a bad upstream element into a readable error."""
    raw = str(err)
    match = _UNKNOWN_UPSTREAM.search(raw)
    if match is not None:
        return InvalidPipelineError(_unknown_pass_message(match.group(1)))
    # Other parser errors (bad option, bad anchor): keep MLIR's words, drop its blank lines.
    detail = "; ".join(line.strip() for line in raw.splitlines() if line.strip())
    return InvalidPipelineError(f"invalid pipeline element '{text}': {detail}")


def _hector_callable(stage: Stage, tracebacks: list[str]) -> Callable[[Any, Any], None]:
    """Wrap a Hector pass for ``PassManager.add``: failures become diagnostics, never raise."""
    info = stage.pass_info
    assert info is not None
    options = dict(stage.options)

    def run(op: Any, pass_: Any) -> None:
        try:
            # Passes build attributes and ops: give them the module's context and a default
            # location, as a C++ pass would have.
            with op.context, op.location:
                info.run(op, **options)
        except PassFailure as failure:
            for message, location in failure.errors():
                failure_location(PassFailure(message, location), op).emit_error(message)
            pass_.signal_pass_failure()
        except Exception as err:  # a bug in the pass: report it, keep the traceback
            tracebacks.append(traceback.format_exc())
            culprit = offending_op(err.__traceback__, op)
            on = f" on '{culprit.name}'" if culprit is not None else ""
            where = culprit.location if culprit is not None else module_location(op)
            where.emit_error(
                f"internal error in pass '{info.name}'{on}: {type(err).__name__}: {err}"
            )
            pass_.signal_pass_failure()

    return run


def torch_pass_message(name: str) -> str:
    """Why a torch-context pass cannot run in a pipeline of Hector's context."""
    return (
        f"'{name}' runs in torch-mlir's context on torch-dialect input, so it makes up a "
        f"pipeline on its own: run 'hector-opt -p {name} FILE.mlir', then the Hector passes on "
        "its output"
    )


def build_pass_manager(
    stages: Iterable[Stage],
    context: ir.Context,
    print_ir_after_all: bool = False,
    *,
    print_generic_op_form: bool = False,
    tracebacks: list[str] | None = None,
) -> passmanager.PassManager:
    """A ``builtin.module`` PassManager running ``stages`` in order.

    Upstream stages are added textually; Hector stages as Python passes that report
    :class:`PassFailure` (and any other exception, with the pass name) as an error diagnostic
    plus a pass failure. With ``print_ir_after_all`` MLIR prints the IR after every pass to
    stderr (in generic form with ``print_generic_op_form``). When ``tracebacks`` is a list, the
    formatted traceback of each unexpected exception in a Hector pass is appended to it.
    Raises :class:`InvalidPipelineError` for an unknown or malformed upstream pass.
    """
    if tracebacks is None:
        tracebacks = []
    with context:
        pm = passmanager.PassManager("builtin.module")
        for stage in stages:
            if stage.pass_info is None:
                try:
                    pm.add(stage.text)
                except ValueError as err:
                    raise _upstream_error(stage.text, err) from None
                # After MLIR parsed them (unknown options are its error): values it would
                # assert on are refused before the pass runs.
                _check_upstream_options(stage.text)
            else:
                info = stage.pass_info
                if info.context != MLIR_CONTEXT:
                    raise InvalidPipelineError(torch_pass_message(info.name))
                pm.add(
                    _hector_callable(stage, tracebacks),
                    name=info.name,
                    argument=info.name,
                    description=info.description,
                )
        if print_ir_after_all:
            pm.enable_ir_printing(print_after_all=True, print_generic_op_form=print_generic_op_form)
    return pm


def _check_upstream_options(text: str) -> None:
    """Check the options of every upstream element in ``text`` (nested pipelines included)
    against :data:`hector.passes.upstream_options.UPSTREAM_OPTIONS`."""
    pending = split_elements(text)[::-1]  # a stack: the first element on top
    while pending:
        name, opener, inner = _split_element(pending.pop())
        if opener == "(":
            pending.extend(reversed(split_elements(inner)))
        elif opener == "{":
            problem = option_problem(name, parse_options(inner))
            if problem is not None:
                raise InvalidPipelineError(problem)


def run_pipeline(
    module: ir.Module | ir.Operation,
    pipeline: str,
    *,
    print_ir_after_all: bool = False,
    verify: bool = True,
    reproducer: bool = True,
    print_generic_op_form: bool = False,
) -> None:
    """Run ``pipeline`` on ``module`` in place.

    With ``verify`` (the default) ``hector-verify`` runs first. On
    failure raises :class:`PipelineError` carrying the diagnostics; with ``reproducer`` the
    input IR (generic form with locations, as it was before the run) is written to
    ``<tmp>/hector-repro-<pid>-<n>.mlir`` and the error names the ``hector-opt`` command that
    replays it. A malformed pipeline raises :class:`InvalidPipelineError` (a subclass).
    """
    op = module.operation if isinstance(module, ir.Module) else module
    stages = parse_pipeline(pipeline)
    if verify and not (stages and stages[0].is_hector and stages[0].name == VERIFY_PASS):
        info = pass_info(VERIFY_PASS)
        stages.insert(0, Stage(VERIFY_PASS, info, info.bind({})))
    tracebacks: list[str] = []
    pm = build_pass_manager(
        stages,
        op.context,
        print_ir_after_all,
        print_generic_op_form=print_generic_op_form,
        tracebacks=tracebacks,
    )
    # With locations: the replay's diagnostics point where the original ones did (the user's
    # file or Python line), not at lines of the reproducer.
    asm = (
        op.get_asm(print_generic_op_form=True, assume_verified=True, enable_debug_info=True)
        if reproducer
        else None
    )
    try:
        pm.run(op)
    except ir.MLIRError as err:
        diagnostics = diagnostics_from_error(err)
        path = command = None
        if asm is not None:
            path = write_reproducer(asm)
            command = reproducer_command(path, pipeline, verify)
        error = PipelineError(
            f"pipeline {shell_quote(pipeline)} failed",
            diagnostics,
            pipeline=pipeline,
            reproducer=path,
            command=command,
        )
        error.tracebacks = tracebacks
        raise error from None
