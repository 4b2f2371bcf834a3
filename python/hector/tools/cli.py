"""The ``hector`` command: ``hector demo`` and ``hector compile``.

``hector demo`` compiles the RGCN layer, runs it on a generated heterogeneous graph (with an
edge type that has no edges and isolated nodes), checks it against PyG's ``RGCNConv`` and
``FastRGCNConv`` with the same weights, and prints correctness and timings (medians, peers in
the same run) plus the GPU kernels it emits as PTX.

``hector compile`` takes a hector_inter file (or the built-in RGCN layer) through a target's
named stages and prints the IR after the requested stage, or the PTX; ``--debug-info`` prints
each op's location with it (the input file's ``file:line:col``, or for ``--model`` the line of
the Python source that traced the op), so every lowered op can be traced back to its source.

Errors print ``error: ...`` (with ``file:line:col`` for IR) and exit 1; no traceback.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..runtime.settings import SettingError
from .cli_args import read_stdin

if TYPE_CHECKING:
    from mlir import ir

    from ..program import Traced
    from ..targets.options import Options


class CliError(Exception):
    """A user-facing error: printed as ``error: <message>``, exit code 1."""


#: The targets ``hector compile`` prints a stage of. Without ``--target``, ``--emit`` takes the
#: first of them that has the stage (``intra`` and ``loops``: cpu; ``ptx``: gpu; ``host``: cuda).
EMIT_TARGETS = ("cpu", "gpu", "cuda")


def emit_stages(target: str) -> tuple[str, ...]:
    """What ``hector compile --target TARGET --emit`` accepts: ``inter`` (the input, verified)
    and the target's stages (:data:`hector.lowering.pipelines.TARGET_STAGES`)."""
    from ..lowering.pipelines import TARGET_STAGES

    return ("inter", *(stage.name for stage in TARGET_STAGES[target]))


def emit_target(target: str | None, stage: str) -> str:
    """The target whose ``stage`` to print: ``target`` when it has that stage (else
    :class:`CliError` naming its stages), or the first of :data:`EMIT_TARGETS` that has it."""
    if target is None:
        return next(t for t in EMIT_TARGETS if stage in emit_stages(t))
    if stage not in emit_stages(target):
        stages = ", ".join(emit_stages(target))
        raise CliError(f"target '{target}' has no stage '{stage}'; its stages: {stages}")
    return target


def _parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``hector`` parser for the command line ``argv``: the arguments of the one benchmark
    ``argv`` names (``hector bench NAME``), none for other commands; every benchmark's when
    ``argv`` is None (the whole tree)."""
    from .. import __version__

    p = argparse.ArgumentParser(prog="hector", description="Hector: relational GNN compiler.")
    p.add_argument("--version", action="version", version=f"hector {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    _add_demo(sub)
    _add_compile(sub)
    _add_bench(sub, None if argv is None else _benchmark_named(argv))
    return p


def _benchmark_named(argv: Sequence[str]) -> str:
    """The benchmark ``argv`` runs (``bench NAME ...``), or "" for any other command."""
    words = list(argv)
    return words[1] if len(words) > 1 and words[0] == "bench" else ""


def _add_demo(sub: argparse._SubParsersAction) -> None:
    """``hector demo``: the RGCN graph's sizes, widths, runs and seed."""
    from . import cli_args as _args

    d = sub.add_parser("demo", help="compile RGCN, run it against PyG, print correctness/timing")
    d.add_argument("--nodes", type=_args.IntRange(1, 100_000_000), default=3000)
    d.add_argument("--edges", type=_args.IntRange(1, 1_000_000_000), default=30000)
    d.add_argument("--etypes", type=_args.IntRange(1, 65_536), default=8)
    d.add_argument("--in-dim", type=_args.WIDTH, default=32)
    d.add_argument("--out-dim", type=_args.WIDTH, default=32)
    d.add_argument("--runs", type=_args.RUNS, default=10, help="timed runs per system (median)")
    d.add_argument("--seed", type=_args.SEED, default=0)
    _args.add_bounds_to_help(d)


def _emit_choices() -> list[str] | None:
    """Every stage ``--emit`` can print (``inter`` and each target's); None where the compiler
    is not installed (a GPU node running ``hector bench``): ``compile`` then says so when run."""
    try:
        return list(dict.fromkeys(s for t in EMIT_TARGETS for s in emit_stages(t)))
    except ModuleNotFoundError as err:
        if err.name != "mlir":
            raise
        return None


def _add_compile(sub: argparse._SubParsersAction) -> None:
    """``hector compile``: the program, the stage printed, the optimizations, a bundle."""
    from . import cli_args as _args

    c = sub.add_parser("compile", help="print a stage's IR (or PTX) for a hector_inter program")
    c.add_argument("input", nargs="?", help="hector_inter .mlir file ('-' for stdin)")
    c.add_argument("--model", choices=["rgcn"], help="compile a built-in layer instead of a file")
    c.add_argument("--in-dim", type=_args.POSITIVE_DIM, default=16)
    c.add_argument("--out-dim", type=_args.POSITIVE_DIM, default=16)
    c.add_argument("--etypes", type=_args.POSITIVE_DIM, default=4)
    c.add_argument(
        "--emit",
        choices=_emit_choices(),
        default="ptx",
        help="stage to print: inter or one of the target's stages (ptx: the PTX text)",
    )
    c.add_argument(
        "--threads",
        type=_args.THREADS,
        default=1,
        help="CPU workers the schedule is chosen for (hector.compile uses "
        "torch.get_num_threads(); default 1)",
    )
    c.add_argument(
        "--debug-info",
        action="store_true",
        help="print each op's source location with the IR (as mlir-opt --mlir-print-debuginfo); "
        "IR stages only, not --emit ptx",
    )
    c.add_argument("-o", "--output", default="-", help="output file (default stdout)")
    c.add_argument(
        "--target",
        choices=list(EMIT_TARGETS),
        help="the target whose stage --emit prints (default: the first of "
        f"{', '.join(EMIT_TARGETS)} that has it); with --bundle: cuda, the target the bundle "
        "runs on (PTX + launch plan)",
    )
    c.add_argument(
        "--bundle",
        metavar="DIR",
        help="write an ahead-of-time bundle (kernels.ptx + plan.json) to DIR instead of printing "
        "IR: it runs on a GPU without the compiler (hector.bundle.load, docs/bundles.md)",
    )
    c.add_argument(
        "--chip",
        default="sm_90",
        type=_args.GpuChip(),
        help="GPU architecture of the ptx stage and of a bundle, as LLVM's NVPTX names it "
        "(default sm_90)",
    )
    c.add_argument(
        "--no-training",
        action="store_true",
        help="bundle the forward function only (default: also <f>_train and <f>_backward)",
    )
    for name, what in (
        ("compact", "compact materialization"),
        ("reorder", "linear operator reordering"),
        ("fuse", "template fusion, DCE and CSE"),
    ):
        c.add_argument(f"--no-{name}", action="store_true", help=f"disable {what}")
    c.add_argument(
        "--order",
        choices=("auto", "transform-first", "aggregate-first"),
        default="auto",
        help="order of linear messages (hector-aggregation-order; auto: by --dst-ratio)",
    )
    c.add_argument(
        "--dst-ratio",
        type=_args.FloatRange(None, 1.0),
        default=-1.0,
        help="the graph's unique (destination, relation) pairs per edge, D/E, for the "
        "aggregation-order cost model (default: unknown, transform first)",
    )

    _args.add_bounds_to_help(c)


BENCH_MISSING = (
    "the benchmarks are not installed: they are the hector_bench package, which needs the "
    "[bench] extra (pip install -e '.[bench]' from a checkout)"
)


def _add_bench(sub: argparse._SubParsersAction, only: str | None) -> None:
    """``hector bench``: the benchmark subcommands when :mod:`hector_bench` is installed (the
    arguments of ``only``, or of all when None), else a stub whose every use says how to
    install them."""
    try:
        import hector_bench
    except ImportError as err:
        b = sub.add_parser("bench", help="benchmarks (install the [bench] extra)")
        b.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        b.set_defaults(bench_missing=f"{BENCH_MISSING}; {err}")
        return
    hector_bench.add_subcommands(sub, only)


def _time(fn: Callable[[], object], runs: int, label: str) -> list[float]:
    from tqdm import tqdm

    fn()  # warm-up
    times = []
    for _ in tqdm(range(runs), desc=f"timing {label}", leave=False, file=sys.stderr):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def demo(args: argparse.Namespace) -> int:
    """Run the RGCN slice on a generated graph against PyG and print the comparison."""
    import torch
    from torch_geometric.nn import FastRGCNConv, RGCNConv

    from .. import random_graph
    from ..models import rgcn_layer
    from ..targets.cuda import compile_gpu

    if min(args.nodes, args.edges, args.etypes, args.in_dim, args.out_dim, args.runs) <= 0:
        raise CliError("--nodes, --edges, --etypes, --in-dim, --out-dim and --runs must be > 0")
    torch.manual_seed(args.seed)
    empty = (args.etypes // 2,) if args.etypes > 1 else ()
    g = random_graph(
        args.nodes,
        args.edges,
        args.etypes,
        empty_etypes=empty,
        isolated_nodes=min(10, args.nodes // 10),
        seed=args.seed,
    )
    print(
        f"graph: {g} (edge type {empty[0] if empty else '-'} has no edges; "
        f"{min(10, args.nodes // 10)} isolated nodes)"
    )
    x = torch.randn(g.num_nodes, args.in_dim)
    conv = RGCNConv(args.in_dim, args.out_dim, args.etypes, aggr="mean")
    fast = FastRGCNConv(args.in_dim, args.out_dim, args.etypes, aggr="mean")
    fast.load_state_dict(conv.state_dict())
    weight, root, bias = (p.detach() for p in (conv.weight, conv.root, conv.bias))
    edge_index, edge_type = g.edge_index_sorted()

    start = time.perf_counter()
    rgcn_layer.compile_for(g, x, weight, root, bias)
    compile_s = time.perf_counter() - start
    with torch.no_grad():
        out = rgcn_layer(g, x, weight, root, bias)
        ref = conv(x, edge_index, edge_type)
        ref_fast = fast(x, edge_index, edge_type)
        err = (out - ref).abs().max().item()
        err_fast = (out - ref_fast).abs().max().item()
        rows = [
            (
                "hector (compiled, CPU)",
                _time(lambda: rgcn_layer(g, x, weight, root, bias), args.runs, "hector"),
                err,
            ),
            (
                "pyg RGCNConv",
                _time(lambda: conv(x, edge_index, edge_type), args.runs, "RGCNConv"),
                0.0,
            ),
            (
                "pyg FastRGCNConv",
                _time(lambda: fast(x, edge_index, edge_type), args.runs, "FastRGCNConv"),
                err_fast,
            ),
        ]
    best_peer = min(statistics.median(t) for _, t, _ in rows[1:])
    print(f"\ncompile time (trace + lower + JIT): {compile_s * 1e3:.0f} ms")
    print(f"{'system':<26}{'median ms':>11}{'min ms':>9}{'max |err| vs RGCNConv':>24}")
    for name, times, e in rows:
        print(f"{name:<26}{statistics.median(times):>11.3f}{min(times):>9.3f}{e:>24.2e}")
    speedup = best_peer / statistics.median(rows[0][1])
    print(f"speed-up vs best PyG layer: {speedup:.2f}x  ({args.runs} runs each, medians)")

    gpu = compile_gpu(_rgcn_program(args.in_dim, args.out_dim, args.etypes))
    entries = [
        ln.split()[2].split("(")[0]
        for ln in gpu.ptx.splitlines()
        if ln.startswith(".visible .entry")
    ]
    target = next((ln.split()[1] for ln in gpu.ptx.splitlines() if ln.startswith(".target")), "?")
    print(f"\nGPU: {len(entries)} kernels emitted as PTX for {target}: {', '.join(entries)}")
    ok = err <= 1e-4
    print(f"\ncorrectness: {'OK' if ok else 'MISMATCH'} (max abs error {err:.2e}, tolerance 1e-4)")
    return 0 if ok else 1


def _rgcn_program(in_dim: int, out_dim: int, num_etypes: int) -> Traced:
    """The built-in RGCN layer traced for these sizes (its ops at their lines in models.py)."""
    from ..frontends.trace import trace
    from ..models import _rgcn_layer

    shapes = [(1, in_dim), (num_etypes, in_dim, out_dim), (in_dim, out_dim), (out_dim,)]
    return trace(_rgcn_layer, shapes, name="rgcn_layer")


def compile_cmd(args: argparse.Namespace) -> int:
    """Print the IR after one stage (or the PTX) of a hector_inter program."""
    from mlir import ir

    from ..lowering.gpu.ptx import extract_ptx
    from ..passes.diagnostics import PipelineError, diagnostics_from_error
    from ..program import parse_file
    from ..targets import driver as compiler
    from ..targets.options import Options

    if args.model is not None and args.input is not None:
        raise CliError("give either an input file or --model, not both")
    program: Traced | str | ir.Module
    if args.model == "rgcn":
        program, name = _rgcn_program(args.in_dim, args.out_dim, args.etypes), "<rgcn>"
    elif args.input is None:
        raise CliError("no input: give a hector_inter .mlir file, '-' for stdin, or --model")
    elif args.input == "-":
        try:
            program, name = read_stdin(), "<stdin>"
        except ValueError as err:
            raise CliError(str(err)) from None
    else:
        if not os.path.isfile(args.input):
            raise CliError(f"cannot open input file '{args.input}': no such file")
        program, name = args.input, args.input  # parsed below: its ops at file:line:col
    if args.bundle is not None and args.target != "cuda":
        raise CliError("--bundle DIR and --target cuda go together")
    target = emit_target(args.target, args.emit)
    options = Options(
        not args.no_compact,
        not args.no_reorder,
        not args.no_fuse,
        threads=args.threads,
        order=args.order,
        dst_ratio=args.dst_ratio,
    )
    try:
        if name == args.input:
            program = parse_file(args.input)
        if args.bundle is not None:
            return _write_bundle(program, args, options)
        staged = compiler.run_stages(
            program,
            target,
            until=args.emit,
            options=options,
            debug_info=args.debug_info,
            chip=args.chip,
        )
        if args.emit == "ptx":
            with staged.context:
                result = "\n".join(extract_ptx(staged.module).values())
        else:
            result = staged.ir(args.emit)
    except ir.MLIRError as err:
        lines = [d.format(lambda f: name if f == "-" else f) for d in diagnostics_from_error(err)]
        raise CliError("\n".join(lines)) from None
    except PipelineError as err:
        lines = [d.format(lambda f: name if f == "-" else f) for d in err.diagnostics]
        lines = lines or [f"error: {err.message}"]
        if err.command is not None:
            lines.append(
                f"note: IR before the failing pipeline saved; reproduce with:\n  {err.command}"
            )
        raise CliError("\n".join(lines)) from None
    if args.output == "-":
        sys.stdout.write(result if result.endswith("\n") else result + "\n")
    else:
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(result)
        except OSError as err:
            raise CliError(f"cannot write '{args.output}': {err.strerror}") from None
    return 0


def _write_bundle(
    program: Traced | str | ir.Module, args: argparse.Namespace, options: Options
) -> int:
    """``hector compile --target cuda --bundle DIR``: build the bundle and say where it is."""
    from .. import bundle

    try:
        path = bundle.build_program(
            program, out=args.bundle, chip=args.chip, training=not args.no_training, options=options
        )
    except bundle.BundleError as err:
        raise CliError(str(err)) from None
    except OSError as err:
        raise CliError(f"cannot write the bundle '{args.bundle}': {err.strerror}") from None
    print(f"bundle written to {path}", file=sys.stderr)
    return 0


def _resource_limit(err: Exception) -> str | None:
    """The message of an error that says the machine is too small for what was asked (sizes
    over Hector's memory estimate, an allocation the system refused), else None."""
    from ..data.limits import ResourceLimitError

    if isinstance(err, ResourceLimitError):
        return str(err)
    if isinstance(err, MemoryError):
        return f"out of memory: {err or 'an allocation was refused'}; ask for smaller sizes"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hector`` console script."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser(argv).parse_args(argv)
    try:
        if args.command == "demo":
            return demo(args)
        if args.command == "bench":
            if getattr(args, "bench_missing", None):
                raise CliError(args.bench_missing)
            import hector_bench

            return hector_bench.run(args)
        return compile_cmd(args)
    except CliError as err:
        msg = str(err)
        print(
            msg if msg.startswith(("<", "/")) or ": error:" in msg else f"error: {msg}",
            file=sys.stderr,
        )
        return 1
    except SettingError as err:  # an environment variable the user set
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except OSError as err:  # a path the user gave: a folder, no permission, a full disk
        where = f": {err.filename}" if err.filename else ""
        print(f"error: {err.strerror or err}{where}", file=sys.stderr)
        return 1
    except Exception as err:  # noqa: BLE001 — a CLI never shows a traceback
        if os.environ.get("HECTOR_DEBUG"):
            raise
        limit = _resource_limit(err)
        if limit is not None:
            print(f"error: {limit}", file=sys.stderr)
            return 1
        first = next((ln.strip() for ln in str(err).splitlines() if ln.strip()), "")
        if len(first) > 300:
            first = first[:297] + "..."
        print(
            f"hector: internal error: {type(err).__name__}"
            + (f": {first}" if first else "")
            + " (set HECTOR_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    # Run the importable module's main, so errors raised as hector.tools.cli.CliError by the modules
    # the CLI imports are the class main() catches (not a second copy in __main__).
    from hector.tools.cli import main as _main

    sys.exit(_main())
