"""What the frontend, the compiler and the GPU runtime share: the leaf of their imports.

* :class:`Traced` — a hector_inter program and the ABI of its function (the frontend builds one
  through the MLIR bindings; the importer hands one in as text from torch-mlir's context);
* :class:`Options` — which optimizations run, and the graph statistics their cost models read;
* :class:`FunctionAbi` and :class:`StagedModule` — a program taken through a target's stages;
* :class:`Executable` — the base of every target's compiled entry (check, allocate, call, run);
* :data:`TARGETS` — the one table of targets (``cpu``, ``cuda``; ``gpu`` gives PTX to read),
  as Triton lists its backends: each names the module and function that compile for it,
  imported on first use, so the frontend never imports a back end and no back end imports the
  frontend.

Kinds are :class:`hector.dialects.Kind` everywhere. This module imports nothing of Hector's but
the dialects.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from .dialects import Kind, make_context
from .runtime.training import TrainingAbi, rows_of

if TYPE_CHECKING:
    import torch
    from mlir import ir

    from .graph import HeteroGraph

__all__ = [
    "TARGETS",
    "Executable",
    "FunctionAbi",
    "Kind",
    "Options",
    "StagedModule",
    "Target",
    "Traced",
    "instantiate",
    "parse_file",
    "register_target",
    "rows_of",
    "target",
]


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
        from .passes._pipeline import parse_module  # refuses what would abort MLIR's parser

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

    from .passes._pipeline import parse_module_file  # refuses what would abort MLIR's parser

    with make_context(), ir.Location.unknown():
        return parse_module_file(path)


# ---------------------------------------------------------------------------------------------
# Options, ABIs and staged modules
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    """Which of Hector's optimizations run (``hector.compile(..., compact=, reorder=, fuse=)``)
    and the graph statistics their cost models read."""

    compact: bool = True
    reorder: bool = True
    fuse: bool = True
    rows: int = -1  # edges of the graph (linear-reorder cost model); -1: unknown
    ratio: float = -1.0  # compaction ratio of the graph; -1: unknown
    src_typed: bool = False  # every relation has one source node type (HGT's chained fold)
    threads: int = 1  # CPU workers of scheduled kernels (hector.compile: torch.get_num_threads())
    # Linear messages: "auto" (cost model on dst_ratio), "transform-first", "aggregate-first".
    order: str = "auto"
    dst_ratio: float = -1.0  # unique (destination, edge type) pairs per edge; -1: unknown
    # Time every template into a counter buffer (hector-profile-kernels; CPU target only).
    profile: bool = False
    # Saved values kept resident in training (placement-plan-saved): a fraction of keep-all
    # (<= 1) or bytes; -1 keeps everything. The graph's row counts size the saved values.
    memory_budget: float = -1.0
    nodes: int = -1
    edges: int = -1
    compact_rows: int = -1
    dst_compact_rows: int = -1

    def placement_pipeline(self) -> str:
        """The placement-plan-saved run for ``memory_budget`` at the graph's sizes."""
        return (
            f"placement-plan-saved{{memory_budget={self.memory_budget} nodes={self.nodes} "
            f"edges={self.edges} compact={self.compact_rows} "
            f"dst_compact={self.dst_compact_rows}}}"
        )

    def variant(self) -> str:
        """The ablation label: U (none), C, R, C+R, C+R+F, ..."""
        parts = [n for n, on in (("C", self.compact), ("R", self.reorder), ("F", self.fuse)) if on]
        return "+".join(parts) or "U"

    def pipelines(self, autodiff: bool) -> list[tuple[str, str]]:
        """(stage name, pipeline) of the hector_inter optimizations, in order."""
        out = []
        if self.reorder:
            typed = "true" if self.src_typed else "false"
            out.append(("reorder", f"hector-linear-reorder{{rows={self.rows} src_typed={typed}}}"))
        training = "true" if autodiff else "false"
        out.append(
            (
                "aggregate",
                f"hector-aggregation-order{{order={self.order} dst_ratio={self.dst_ratio} "
                f"training={training} threads={self.threads}}}",
            )
        )
        if self.compact:
            out.append(
                (
                    "compact",
                    f"hector-compact-materialization{{ratio={self.ratio} training={training}}}",
                )
            )
        if autodiff:
            out.append(("autodiff", "hector-autodiff"))
        if self.fuse:
            out.append(("fuse", "hector-fuse"))
        return out


@dataclass(frozen=True)
class FunctionAbi:
    """How to call one compiled function: what each result is and, for generated functions,
    how results map back (``grad_of``: tensor argument of each gradient; ``num_saved``)."""

    name: str
    result_kinds: tuple[Kind, ...]
    result_shapes: tuple[tuple[int | None, ...], ...]  # None: the row count
    grad_of: tuple[int, ...] = ()
    num_saved: int = 0


@dataclass
class StagedModule:
    """A module taken through a target's stages, with the IR after each stage by name."""

    context: Any
    module: Any
    stages: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    abi: dict[str, FunctionAbi] = field(default_factory=dict)

    def ir(self, stage: str) -> str:
        """The IR text after ``stage``."""
        if stage not in self.stages:
            raise KeyError(f"no stage {stage!r}; stages: {', '.join(self.stages)}")
        return self.stages[stage]


# ---------------------------------------------------------------------------------------------
# Compiled entries
# ---------------------------------------------------------------------------------------------


class Executable:
    """A program compiled for one target, callable on a graph and tensors.

    Subclasses (the CPU entry, the CUDA entry) hold ``traced`` and ``staged`` and implement
    :meth:`call`; checking arguments, the IR of each stage and :meth:`run` are shared.
    """

    traced: Traced
    staged: StagedModule

    def ir(self, stage: str) -> str:
        """The IR after ``stage``."""
        return self.staged.ir(stage)

    @property
    def training_abi(self) -> TrainingAbi:
        """The ABI of ``<f>_train`` / ``<f>_backward`` (compiled with ``autodiff``)."""
        name = self.traced.name
        forward = self.staged.abi[name]
        backward = self.staged.abi[f"{name}_backward"]
        return TrainingAbi(name, forward.result_kinds, forward.result_shapes, backward.grad_of)

    def check(self, g: HeteroGraph, tensors: Sequence[torch.Tensor], names: list[str]) -> None:
        """Check the tensors against the graph before any compiled code runs."""
        for name, kind, t in zip(names, self.traced.arg_kinds, tensors, strict=True):
            if kind == Kind.NODE and t.shape[0] != g.num_nodes:
                raise ValueError(
                    f"argument '{name}' is node-wise: expected {g.num_nodes} rows (the graph's "
                    f"nodes), got {t.shape[0]}"
                )
            if kind == Kind.EDGE and t.shape[0] != g.num_edges:
                raise ValueError(
                    f"argument '{name}' is edge-wise: expected {g.num_edges} rows, got {t.shape[0]}"
                )
        for pos, slice_ in self.traced.weight_slices.items():
            want = g.num_etypes if slice_ == "etype" else g.num_ntypes
            have = tensors[pos].shape[0]
            if have != want:
                what = "edge types" if slice_ == "etype" else "node types"
                raise ValueError(
                    f"argument '{names[pos]}' is sliced by {slice_}: expected {want} slices "
                    f"(the graph's {what}), got {have}"
                )

    def output_shapes(self, fname: str, g: HeteroGraph) -> list[list[int]]:
        """The shapes of ``fname``'s results on graph ``g``."""
        abi = self.staged.abi[fname]
        return [
            [rows_of(kind, g) if d is None else d for d in shape]
            for kind, shape in zip(abi.result_kinds, abi.result_shapes, strict=True)
        ]

    def call(self, fname: str, g: HeteroGraph, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """Run compiled function ``fname`` on the graph and tensors; return its results."""
        raise NotImplementedError

    def run(
        self, g: HeteroGraph, tensors: Sequence[torch.Tensor], names: list[str]
    ) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """Check the tensors against the graph, allocate outputs and call the kernel."""
        self.check(g, tensors, names)
        outs = self.call(self.traced.name, g, list(tensors))
        return outs[0] if len(outs) == 1 else tuple(outs)


# ---------------------------------------------------------------------------------------------
# Targets
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A target ``hector.compile`` can run on: ``module:function`` compiles a :class:`Traced`
    (``function(traced, autodiff=..., options=...)`` → :class:`Executable`)."""

    name: str
    module: str
    function: str
    description: str
    runs: bool = True  # False: code to look at (PTX), not an entry to call

    def compile(
        self, traced: Traced, *, autodiff: bool = False, options: Options | None = None
    ) -> Executable:
        """Compile ``traced`` for this target (the back end is imported on first use)."""
        fn = getattr(importlib.import_module(self.module), self.function)
        return fn(traced, autodiff=autodiff, options=options)


#: Every target, by name.
TARGETS: dict[str, Target] = {}


def register_target(t: Target) -> Target:
    """Add ``t`` to :data:`TARGETS`."""
    if t.name in TARGETS:
        raise ValueError(f"target '{t.name}' registered twice")
    TARGETS[t.name] = t
    return t


def target(name: str, *, runs: bool = True) -> Target:
    """The target called ``name`` (one that runs, unless ``runs=False``); ``ValueError`` naming
    the known ones otherwise."""
    known = [t for t in TARGETS if TARGETS[t].runs or not runs]
    if name not in known:
        raise ValueError(
            f"unknown target {name!r}: use {' or '.join(map(repr, known))} "
            "(CUDA tensors also pick 'cuda')"
        )
    return TARGETS[name]


register_target(
    Target("cpu", "hector.compiler", "compile_traced", "JIT-compiled CPU code (NumPy arrays)")
)
register_target(
    Target("cuda", "hector.gpu_exec", "compile_cuda", "PTX kernels driven by JIT-compiled host")
)
register_target(
    Target("gpu", "hector.compiler", "compile_gpu", "PTX of the GPU kernels, to read", runs=False)
)
