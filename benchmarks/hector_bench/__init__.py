"""``hector bench <name>``: benchmarks that write JSON records (format in docs/benchmarks.md).

Each benchmark is a module here (``gnn``, ``offload``, ``gather``) exposing
``add_arguments(parser)`` and ``run(args) -> int``. The CLI builds one subcommand per entry of
:data:`BENCHMARKS` and imports the module only when that benchmark runs, so ``hector --help``
stays fast and a benchmark's heavy imports never slow the others.
"""

from __future__ import annotations

import argparse
import importlib

from hector.tools import cli_args as _args

# name → (module, one-line help)
BENCHMARKS: dict[str, tuple[str, str]] = {
    "gnn": ("gnn", "RGCN/RGAT/HGT: Hector vs PyG layers, inference or training"),
    "offload": ("offload", "activation offloading vs keep-all, save_on_cpu, checkpointing"),
    "offload-compiled": (
        "offload_compiled",
        "compiled training: keep-all, torch's activation_memory_budget, hector's memory_budget",
    ),
    "gather": ("gather", "unified-tensor zero-copy gather vs index_select + copy"),
    "import": ("importer", "plain-PyTorch RGCN/RGAT/HGT: eager vs hector.import_model"),
    "compile": ("compile", "PyG layers: eager vs torch.compile inductor vs backend='hector'"),
    "minibatch": ("minibatch", "sampled mini-batch training: Hector vs PyG layers, 1 vs N procs"),
    "placement": (
        "placement",
        "compiled training under --memory-budget (offload/recompute saved values) vs keep-all",
    ),
    "hetero-conv": (
        "hetero_conv",
        "MLPerf's rgnn (HeteroConv), to_hetero(GraphSAGE/GAT): eager, inductor, backend='hector'",
    ),
    "bases-gin": (
        "bases_gin",
        "to_hetero_with_bases of GINConv layers: eager PyG vs backend='hector', two programs",
    ),
    "pyg-tests": (
        "pyg_tests",
        "PyG's own relational-layer and hetero-model unit tests, each model call also compiled",
    ),
    "precision": ("precision", "Hector's layers on float32, bfloat16 and float16 storage"),
    "feature-gather": (
        "feature_gather",
        "feature rows of sampled batches from a file: pread vs mmap",
    ),
    "compile-cuda": (
        "compile_cuda",
        "the cuda target's compile: cold vs found in the compilation cache (emulated driver)",
    ),
    "offload-store": (
        "offload_store",
        "the native tensor store's raw bandwidth and CPU per byte, per I/O backend",
    ),
    "train-over-forward": (
        "train_over_forward",
        "an RGCN training step's time over its forward's (wall and CPU time)",
    ),
}


def add_subcommands(sub: argparse._SubParsersAction, only: str | None = None) -> None:
    """Add ``bench`` with one sub-subcommand per benchmark to the ``hector`` parser.

    Every benchmark gets its help line; its arguments (its module imported) only when ``only``
    is None (the whole tree) or names it (the benchmark on the command line): ``hector compile``
    and ``hector bench --help`` import none of them."""
    b = sub.add_parser("bench", help="run a benchmark and write a JSON record")
    bsub = b.add_subparsers(dest="benchmark", required=True)
    for name, (module, help_) in BENCHMARKS.items():
        p = bsub.add_parser(name, help=help_)
        if only is not None and name != only:
            continue
        try:
            mod = importlib.import_module(f".{module}", __name__)
        except ImportError:  # a benchmark not built yet must not break the others
            continue
        mod.add_arguments(p)
        _args.add_bounds_to_help(p)


def run(args: argparse.Namespace) -> int:
    """Run the benchmark chosen on the command line."""
    module, _ = BENCHMARKS[args.benchmark]
    mod = importlib.import_module(f".{module}", __name__)
    return int(mod.run(args))
