"""``hector-opt``: parse, verify, transform and print IR in Hector's dialects, like ``mlir-opt``.

Reads a file (or ``-``/stdin), runs a pipeline that mixes Hector passes, named pipelines and
upstream MLIR passes (``-p 'builtin.module(hector-verify, canonicalize)'``), and prints the
result. Passes registered for torch-mlir's context (``-p raise-torch-to-hector``) take
torch-dialect input, parsed in that context, and make up a pipeline on their own.
``hector-verify`` runs first unless ``--no-hector-verify`` is given. Diagnostics print as
``file:line:col: error: message`` with the source line; ``--verify-diagnostics`` checks them
against ``// expected-error {{...}}`` comments instead, as lit tests of invalid IR do.
``--mlir-print-debuginfo`` prints every op's location with the output.

Exit status: 0 on success, 1 when the input or the pipeline is wrong (or an expected diagnostic
did not match), 2 on an internal error in hector-opt itself. Set ``HECTOR_DEBUG=1`` to see the
Python tracebacks behind internal errors.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from hector.passes.expected_diagnostics import (
    SPLIT_MARKER,
    Chunk,
    check_expectations,
    parse_expectations,
    split_input,
)
from hector.tools.cli_args import read_stdin

if TYPE_CHECKING:
    from hector.passes.diagnostics import Diagnostic
    from hector.passes.pipeline import Stage


class _UsageError(Exception):
    """A user error outside any IR location (bad input file, bad pipeline): exit 1."""


def _debug() -> bool:
    return os.environ.get("HECTOR_DEBUG", "") not in ("", "0")


# ---- argument parsing ---------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hector-opt",
        description="Parse, verify, transform and print IR in Hector's dialects.",
    )
    p.add_argument("input", nargs="?", default="-", help="input file ('-' or none for stdin)")
    p.add_argument("-o", dest="output", default="-", metavar="FILE", help="output file")
    p.add_argument(
        "-p",
        "--pass-pipeline",
        default="",
        metavar="PIPELINE",
        help="pipeline to run, e.g. 'builtin.module(hector-verify, canonicalize)'",
    )
    p.add_argument(
        "--list-passes",
        action="store_true",
        help="list Hector passes (with options) and named pipelines, then exit",
    )
    p.add_argument(
        "--split-input-file",
        action="store_true",
        help=f"process each '{SPLIT_MARKER}'-separated chunk of the input independently",
    )
    p.add_argument(
        "--verify-diagnostics",
        action="store_true",
        help="check diagnostics against '// expected-error {{...}}' comments",
    )
    p.add_argument(
        "--mlir-print-ir-after-all",
        action="store_true",
        help="print the IR after every pass (to stderr)",
    )
    p.add_argument("--mlir-print-op-generic", action="store_true", help="print ops in generic form")
    p.add_argument(
        "--mlir-print-debuginfo", action="store_true", help="print locations in the output"
    )
    p.add_argument(
        "--no-hector-verify",
        action="store_true",
        help="do not run hector-verify at the start of the pipeline",
    )
    p.add_argument(
        "--allow-unregistered-dialect",
        action="store_true",
        help="accept ops of dialects that are not loaded",
    )
    p.add_argument(
        "--torch",
        action="store_true",
        help="input is torch-dialect IR: without -p, the same as -p raise-torch-to-hector",
    )
    p.add_argument(
        "--torch-strict",
        action="store_true",
        help="the same as -p 'raise-torch-to-hector{strict=true}': every op that cannot be "
        "raised is an error (file:line)",
    )
    return p


# ---- pass registry ------------------------------------------------------------------------


def _load_passes() -> None:
    """Register every Hector pass and named pipeline (``hector.passes.registry.load_all``), for
    the pass list; a pipeline imports only the modules of the names it holds."""
    try:
        from hector.passes.registry import load_all

        load_all()
    except Exception as err:
        raise RuntimeError(
            f"cannot load Hector's passes: importing the pass modules failed with "
            f"{type(err).__name__}: {err}"
        ) from err


def list_passes(out: TextIO) -> None:
    """Print every Hector pass with its description and options, then the named pipelines."""
    from hector.passes.registry import PASSES, PIPELINES

    out.write("Hector passes:\n")
    for name in sorted(PASSES):
        info = PASSES[name]
        out.write(f"  {name} — {info.description}\n")
        for opt_name, opt in info.options.items():
            default = str(opt.default).lower() if opt.type is bool else opt.default
            choices = f" (one of {', '.join(map(str, opt.choices))})" if opt.choices else ""
            bounded = opt.min is not None or opt.max is not None
            bounds = f" ({opt.range()})" if bounded else ""
            out.write(f"      {opt_name}={default} — {opt.doc}{choices}{bounds}\n")
    out.write("Named pipelines:\n")
    for name in sorted(PIPELINES):
        pipeline = PIPELINES[name]
        out.write(f"  {name} — {pipeline.description}\n")
        out.write(f"      = {pipeline.pipeline}\n")


# ---- input --------------------------------------------------------------------------------


def _read_input(path: str) -> tuple[str, str]:
    """(text, display name) of the input; raises :class:`_UsageError` when unreadable."""
    if path == "-":
        try:
            return read_stdin(), "<stdin>"
        except ValueError as err:
            raise _UsageError(str(err)) from None
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(), path
    except FileNotFoundError:
        raise _UsageError(f"could not open input file '{path}': no such file") from None
    except IsADirectoryError:
        raise _UsageError(f"could not open input file '{path}': is a directory") from None
    except (OSError, UnicodeDecodeError) as err:
        raise _UsageError(f"could not read input file '{path}': {err}") from None


# ---- diagnostics --------------------------------------------------------------------------


def _render(diag: Diagnostic, name_of: Callable[[str], str], source: list[str]) -> str:
    """``file:line:col: severity: message``, the source line and a caret, then the notes."""
    out: list[str] = []
    for d in (diag, *diag.notes):
        out.append(d.header(name_of))
        # A file location sets line and column together (both None without one).
        if (
            d.file == "-"
            and d.line is not None
            and d.column is not None
            and 1 <= d.line <= len(source)
        ):
            line = source[d.line - 1].rstrip("\n")
            prefix = "".join(c if c == "\t" else " " for c in line[: max(d.column - 1, 0)])
            out.append(line)
            out.append(prefix + "^")
    return "\n".join(out)


# ---- processing ---------------------------------------------------------------------------


@dataclass
class _Result:
    output: str | None  # printed IR, None when the chunk failed
    diagnostics: list[Diagnostic] = field(default_factory=list)
    tracebacks: list[str] = field(default_factory=list)


def _process(
    chunk: Chunk, context: object, args: argparse.Namespace, extra: list[Diagnostic]
) -> _Result:
    """Parse, run the pipeline on and print one chunk."""
    from mlir import ir

    from hector.passes.diagnostics import (
        InvalidPipelineError,
        PipelineError,
        diagnostics_from_error,
    )
    from hector.passes.module_text import parse_module
    from hector.passes.pipeline import run_pipeline

    try:
        module = parse_module(chunk.padded, context)
    except ir.MLIRError as err:
        return _Result(None, diagnostics_from_error(err) + _drain(extra))
    sys.stderr.flush()
    try:
        run_pipeline(
            module,
            args.pass_pipeline,
            print_ir_after_all=args.mlir_print_ir_after_all,
            verify=not args.no_hector_verify,
            reproducer=False,
            print_generic_op_form=args.mlir_print_op_generic,
        )
    except InvalidPipelineError:
        raise
    except PipelineError as err:
        return _Result(None, err.diagnostics + _drain(extra), err.tracebacks)
    text = module.operation.get_asm(
        print_generic_op_form=args.mlir_print_op_generic,
        enable_debug_info=args.mlir_print_debuginfo,
    )
    return _Result(text, _drain(extra))


def _drain(extra: list[Diagnostic]) -> list[Diagnostic]:
    out = list(extra)
    extra.clear()
    return out


def _run(args: argparse.Namespace) -> int:
    """Run what ``args`` ask for: list the passes, a torch-context pipeline, the torch
    lowering for the CPU, or a pipeline in Hector's context."""
    if args.list_passes:
        _load_passes()
        list_passes(sys.stdout)
        return 0
    torch_stages = _torch_stages(args)
    if torch_stages is not None:
        return _run_torch_pipeline(args, torch_stages)
    if args.torch or args.torch_strict:
        return _run_torch(args)
    return _run_hector(args)


def _run_hector(args: argparse.Namespace) -> int:
    """Run the pipeline on each chunk of the input in a context of Hector's dialects, report
    each chunk's diagnostics (or check them against its expectations) and write the output."""
    from mlir import ir

    from hector.dialects import load
    from hector.passes.diagnostics import Diagnostic, InvalidPipelineError
    from hector.passes.pipeline import build_pass_manager, parse_pipeline

    context = ir.Context()
    context.allow_unregistered_dialects = args.allow_unregistered_dialect
    load(context)
    # Check the pipeline once, before reading any input, so a typo is one clear error.
    try:
        build_pass_manager(parse_pipeline(args.pass_pipeline), context)
    except InvalidPipelineError as err:
        raise _UsageError(str(err)) from None

    text, display = _read_input(args.input)
    source = text.splitlines()

    def name_of(file: str) -> str:
        return display if file == "-" else file

    # Diagnostics no MLIRError captures (warnings, remarks, errors emitted outside a run).
    extra: list[Diagnostic] = []

    def on_diagnostic(d: object) -> bool:
        try:
            extra.append(Diagnostic.from_info(d))
        except Exception:  # never let a handler raise into MLIR
            return False
        return True

    context.attach_diagnostic_handler(on_diagnostic)

    outputs: list[str] = []
    failed = False
    for chunk in split_input(text, args.split_input_file):
        try:
            result = _process(chunk, context, args, extra)
        except InvalidPipelineError as err:
            raise _UsageError(str(err)) from None
        failed |= _report(result, chunk, args, name_of, source)
        if result.output is not None:
            outputs.append(result.output)
    _write_output(args, f"{SPLIT_MARKER}\n".join(outputs), failed)
    return 1 if failed else 0


def _report(
    result: _Result,
    chunk: Chunk,
    args: argparse.Namespace,
    name_of: Callable[[str], str],
    source: list[str],
) -> bool:
    """Print one chunk's diagnostics (and, with ``HECTOR_DEBUG``, the tracebacks behind them),
    or with ``--verify-diagnostics`` what differs from the chunk's expectations; whether the
    chunk failed."""
    if _debug():
        for tb in result.tracebacks:
            sys.stderr.write(tb)
    if args.verify_diagnostics:
        problems = check_expectations(parse_expectations(chunk), result.diagnostics, name_of)
        for problem in problems:
            sys.stderr.write(problem + "\n")
        return bool(problems)
    for d in result.diagnostics:
        sys.stderr.write(_render(d, name_of, source) + "\n")
    return result.output is None or any(d.severity == "error" for d in result.diagnostics)


def _write_output(args: argparse.Namespace, text: str, failed: bool) -> None:
    """Write the output: to stdout always, to the ``-o`` file only when nothing failed."""
    if args.output == "-":
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:
            raise
        except OSError as err:
            raise _UsageError(f"could not write the output: {err.strerror or err}") from None
    elif not failed:
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as err:
            raise _UsageError(f"could not write output file '{args.output}': {err}") from None


def _torch_stages(args: argparse.Namespace) -> list[Stage] | None:
    """The stages of a pipeline of torch-context passes (``-p raise-torch-to-hector``; also
    what ``--torch``/``--torch-strict`` without ``-p`` mean), or None for any other pipeline.
    Raises :class:`_UsageError` when torch-context passes are mixed with others."""
    from hector.passes.diagnostics import InvalidPipelineError
    from hector.passes.pipeline import parse_pipeline, torch_pass_message
    from hector.passes.registry import TORCH_CONTEXT

    pipeline = args.pass_pipeline
    if (args.torch or args.torch_strict) and not pipeline:
        pipeline = "raise-torch-to-hector" + ("{strict=true}" if args.torch_strict else "")
    try:
        stages = parse_pipeline(pipeline)
    except InvalidPipelineError as err:
        if args.torch:  # --torch -p PIPELINE: the linalg path reports its own option errors
            return None
        raise _UsageError(str(err)) from None
    torch = [s for s in stages if s.pass_info is not None and s.pass_info.context == TORCH_CONTEXT]
    if not torch:
        return None
    if len(torch) != len(stages):
        raise _UsageError(torch_pass_message(torch[0].name))
    return stages


def _where(location: object, display: str) -> str:
    """``file:line`` of a torch-context failure (the input's ``-`` named as the user gave it)."""
    if location is None:
        return display
    if not isinstance(location, str):
        from hector.lowering.from_torch.raise_to_hector import source_location

        location = source_location(location)
    return display + location[1:] if location.startswith("-:") else location


def _run_torch_pipeline(args: argparse.Namespace, stages: list[Stage]) -> int:
    """Run torch-context passes (``raise-torch-to-hector``) on torch-dialect input, parsed in
    torch-mlir's context (Hector's MLIR copy cannot hold torch types), and print the result."""
    from torch_mlir import ir as torch_ir

    from hector.lowering.from_torch.raise_to_hector import make_torch_context
    from hector.passes.registry import PassFailure
    from hector.passes.source_check import UnsafeSourceError, check_source

    text, display = _read_input(args.input)
    try:
        check_source(text, display)  # refuses what would abort MLIR's parser
    except UnsafeSourceError as err:
        return _emit_torch(args, None, err.lines())
    context = make_torch_context()
    try:
        with context:
            module = torch_ir.Module.parse(text)  # the user's file, checked above
    except torch_ir.MLIRError as err:
        msg = str(err).replace('"-"', display).replace("\n", " ")
        return _emit_torch(args, None, [f"{display}: error: {msg}"])
    errors: list[str] = []
    for stage in stages:
        assert stage.pass_info is not None
        try:
            with context:
                stage.pass_info.run(module, **stage.options)
        except PassFailure as failure:
            errors = [f"{_where(loc, display)}: error: {msg}" for msg, loc in failure.errors()]
            return _emit_torch(args, None, errors)
        except Exception as err:  # a bug in the pass: located like a Hector pass's
            return _emit_torch(
                args, None, [_torch_internal_error(stage.name, err, module, display)]
            )
    out = module.operation.get_asm(
        enable_debug_info=args.mlir_print_debuginfo,
        print_generic_op_form=args.mlir_print_op_generic,
    )
    return _emit_torch(args, out, errors)


def _torch_internal_error(name: str, err: Exception, module: object, display: str) -> str:
    """``file:line: error: internal error in pass ...`` for an exception inside a torch-context
    pass, at the op it was working on (see :func:`hector.passes.diagnostics.offending_op`)."""
    from torch_mlir import ir as torch_ir

    from hector.passes.diagnostics import offending_op

    if _debug():
        traceback.print_exc()
    culprit = offending_op(err.__traceback__, getattr(module, "operation", None), torch_ir)
    on = f" on '{culprit.name}'" if culprit is not None else ""
    where = _where(culprit.location if culprit is not None else None, display)
    return f"{where}: error: internal error in pass '{name}'{on}: {type(err).__name__}: {err}"


def _run_torch(args: argparse.Namespace) -> int:
    """``--torch -p convert-torch-to-linalg-cpu``: lower torch-dialect input for the CPU
    (lowering/cpu/torch_linalg.py)."""
    from hector.lowering.cpu import torch_linalg as torch_linalg_cpu

    text, display = _read_input(args.input)
    out, errors = torch_linalg_cpu.run_cli(text, display, args.pass_pipeline)
    return _emit_torch(args, out, errors)


def _emit_torch(args: argparse.Namespace, out: str | None, errors: list[str]) -> int:
    """Print the errors, then the output (when there is one); the exit status."""
    for line in errors:
        sys.stderr.write(line + "\n")
    if out is not None and args.output == "-":
        sys.stdout.write(out)
    elif out is not None:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(out)
    return 0 if out is not None else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hector-opt`` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except _UsageError as err:
        sys.stderr.write(f"hector-opt: error: {err}\n")
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 1
    except Exception as err:
        if _debug():
            traceback.print_exc()
        sys.stderr.write(f"hector-opt: internal error: {type(err).__name__}: {err}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
