"""Pipeline machinery shared by ``hector-opt`` and the compiler API.

A pipeline string mixes Hector passes (Python functions in :data:`PASSES`), named pipelines
(:data:`PIPELINES`, expanded in place) and upstream MLIR passes, for example::

    builtin.module(hector-verify, canonicalize, func.func(cse), hector-lower-cpu)

MLIR's textual pipeline parser cannot name a Python pass, so :func:`parse_pipeline` splits the
string itself into :class:`Stage` objects: one per Hector pass, and one per run of consecutive
upstream elements. :func:`build_pass_manager` turns the stages into one ``PassManager`` and
:func:`run_pipeline` runs it, turning every failure into :class:`PipelineError` with the
diagnostics and, optionally, a reproducer file plus the ``hector-opt`` command that replays it.
"""

from __future__ import annotations

import difflib
import itertools
import os
import re
import tempfile
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mlir import ir, passmanager

from .registry import MLIR_CONTEXT, PASSES, PIPELINES, PassFailure, PassInfo

__all__ = [
    "MAX_PIPELINE_NESTING",
    "OPTIMIZATION_ORDER",
    "VERIFY_PASS",
    "Diagnostic",
    "InvalidPipelineError",
    "Optimization",
    "PipelineError",
    "Stage",
    "build_pass_manager",
    "diagnostics_from_error",
    "offending_op",
    "parse_module",
    "parse_module_file",
    "parse_options",
    "parse_pipeline",
    "reproducer_command",
    "run_pipeline",
    "split_elements",
    "torch_pass_message",
]

#: The pass prepended to every pipeline run with ``verify=True`` (when it is registered).
VERIFY_PASS = "hector-verify"


@dataclass(frozen=True)
class Optimization:
    """One of Hector's hector_inter optimizations: its pass, and the stage name the IR after
    it is kept under (``hector compile --emit``, ``StagedModule.ir``)."""

    stage: str
    pass_name: str
    training_only: bool = False  # runs only when the training functions are generated


#: Hector's optimizations on hector_inter, in the one order every target runs them (and the
#: ``hector-optimize`` pipeline, less the training-only step): the training functions are
#: generated after compaction and before fusion, so both the forward and the backward fuse.
OPTIMIZATION_ORDER: tuple[Optimization, ...] = (
    Optimization("reorder", "hector-linear-reorder"),
    Optimization("aggregate", "hector-aggregation-order"),
    Optimization("compact", "hector-compact-materialization"),
    Optimization("autodiff", "hector-autodiff", training_only=True),
    Optimization("fuse", "hector-fuse"),
)

# Element names: a pass argument (``hector-verify``) or an anchor op name (``func.func``).
_ELEMENT = re.compile(r"^(?P<name>[A-Za-z_][\w.\-]*)\s*(?P<rest>.*)$", re.DOTALL)
_OPEN_TO_CLOSE = {"(": ")", "{": "}", "[": "]"}
#: Deepest bracket nesting of a pipeline string. Real pipelines nest three or four levels
#: (``builtin.module(gpu.module(pass{opt=v}))``); the bound keeps the recursive walks here and
#: MLIR's own pipeline parser far from their stack limits.
MAX_PIPELINE_NESTING = 32


# ---- diagnostics --------------------------------------------------------------------------


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


# ---- parsing input IR ---------------------------------------------------------------------


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
    from .source_check import source_problems

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
    """``ir.Module.parse`` for input IR: text that would abort MLIR's parser (see
    :func:`hector.passes.source_check.source_problems`: nesting too deep, bad resource blobs,
    ...) raises ``ir.MLIRError`` at its location (file ``"-"``, like every parse of text)
    instead of reaching the parser. Every parse of text from outside goes through here (or,
    in torch-mlir's context, through :func:`hector.passes.source_check.check_source`)."""
    _reject_unsafe_source(text, "-", context)
    return ir.Module.parse(text, context)


def parse_module_file(path: str, context: ir.Context | None = None) -> ir.Module:
    """``ir.Module.parseFile`` for input IR (ops located at ``path:line:col``), with the checks
    of :func:`parse_module`."""
    with open(path, encoding="utf-8", errors="replace") as f:
        _reject_unsafe_source(f.read(), path, context)
    return ir.Module.parseFile(path, context)


# ---- parsing pipelines ----------------------------------------------------------------------


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
        if sub in PASSES or sub in PIPELINES:
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


def _location_of(failure: PassFailure, op: ir.Operation) -> ir.Location:
    loc = failure.location
    if loc is None:
        return _module_location(op)
    if isinstance(loc, ir.Location):
        return loc
    # Tolerate passes that hand over the offending op or value instead of its location.
    inner = getattr(loc, "location", None)
    if isinstance(inner, ir.Location):
        return inner
    owner = getattr(loc, "owner", None)
    if owner is not None and isinstance(getattr(owner, "location", None), ir.Location):
        return owner.location
    return _module_location(op)


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


def _module_location(module_op: ir.Operation) -> ir.Location:
    """Where to report an error about the module as a whole: its first located op when the
    module itself has no file location (the parser's implicit module sits at ``file:0:0``)."""
    file, line, _ = file_line_col(module_op.location)
    if file is not None and line:
        return module_op.location
    for inner in module_op.regions[0].blocks[0].operations:
        if file_line_col(inner.location)[0] is not None:
            return inner.location
    return module_op.location


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
                _location_of(PassFailure(message, location), op).emit_error(message)
            pass_.signal_pass_failure()
        except Exception as err:  # a bug in the pass: report it, keep the traceback
            tracebacks.append(traceback.format_exc())
            culprit = offending_op(err.__traceback__, op)
            on = f" on '{culprit.name}'" if culprit is not None else ""
            where = culprit.location if culprit is not None else _module_location(op)
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
    from .upstream_options import option_problem

    pending = split_elements(text)[::-1]  # a stack: the first element on top
    while pending:
        name, opener, inner = _split_element(pending.pop())
        if opener == "(":
            pending.extend(reversed(split_elements(inner)))
        elif opener == "{":
            problem = option_problem(name, parse_options(inner))
            if problem is not None:
                raise InvalidPipelineError(problem)


_REPRO_COUNTER = itertools.count()


def _quote(text: str) -> str:
    """Single-quote ``text`` for a POSIX shell."""
    return "'" + text.replace("'", "'\"'\"'") + "'"


def reproducer_command(path: str, pipeline: str, verify: bool = True) -> str:
    """The ``hector-opt`` command line that replays ``pipeline`` on the file ``path``."""
    command = f"hector-opt {_quote(path) if _needs_quotes(path) else path} -p {_quote(pipeline)}"
    if not verify:
        command += " --no-hector-verify"
    return command


def _needs_quotes(text: str) -> bool:
    return re.fullmatch(r"[\w@%+=:,./-]+", text) is None


def _write_reproducer(asm: str) -> str:
    directory = tempfile.gettempdir()
    while True:
        path = os.path.join(directory, f"hector-repro-{os.getpid()}-{next(_REPRO_COUNTER)}.mlir")
        try:
            with open(path, "x", encoding="utf-8") as f:
                f.write(asm)
            return path
        except FileExistsError:
            continue


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

    With ``verify`` (the default) ``hector-verify`` runs first when it is registered. On
    failure raises :class:`PipelineError` carrying the diagnostics; with ``reproducer`` the
    input IR (generic form with locations, as it was before the run) is written to
    ``<tmp>/hector-repro-<pid>-<n>.mlir`` and the error names the ``hector-opt`` command that
    replays it. A malformed pipeline raises :class:`InvalidPipelineError` (a subclass).
    """
    op = module.operation if isinstance(module, ir.Module) else module
    stages = parse_pipeline(pipeline)
    if verify and VERIFY_PASS in PASSES:
        if not (stages and stages[0].is_hector and stages[0].name == VERIFY_PASS):
            stages.insert(0, Stage(VERIFY_PASS, PASSES[VERIFY_PASS], PASSES[VERIFY_PASS].bind({})))
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
            path = _write_reproducer(asm)
            command = reproducer_command(path, pipeline, verify)
        error = PipelineError(
            f"pipeline {_quote(pipeline)} failed",
            diagnostics,
            pipeline=pipeline,
            reproducer=path,
            command=command,
        )
        error.tracebacks = tracebacks
        raise error from None
