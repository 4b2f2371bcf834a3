"""Compile traced hector_inter programs through the named stages of a target.

``compile_traced`` runs the CPU stages (``inter → intra → loops → llvm``), keeps each stage's IR
for inspection, and JIT-compiles the result; ``compile_gpu`` runs the GPU stages
(``inter → intra → gpu → ptx``) and returns the PTX. Any stage failure raises
:class:`hector.passes._pipeline.PipelineError`, whose message names a reproducer file and the
``hector-opt`` command that replays the failure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from mlir import ir

from .dialects import make_context
from .frontend import EDGE, NODE, Traced
from .graph import HeteroGraph
from .lowering import pipelines
from .lowering.cpu_jit import CpuKernel
from .lowering.ptx import extract_ptx
from .passes._pipeline import run_pipeline


@dataclass(frozen=True)
class FunctionAbi:
    """How to call one compiled function: what each result is and, for generated functions,
    how results map back (``grad_of``: tensor argument of each gradient; ``num_saved``)."""

    name: str
    result_kinds: tuple[str, ...]  # "node" | "edge" | "weight"
    result_shapes: tuple[tuple[int | None, ...], ...]  # None: the row count
    grad_of: tuple[int, ...] = ()
    num_saved: int = 0


_KINDS = {"node-wise": NODE, "edge-wise": EDGE, "weight": "weight", "compact": "compact"}


def _abis(module: Any) -> dict[str, FunctionAbi]:
    """Read every function's result ABI from the hector_inter module (kinds from the
    ``hector.result_kinds`` attribute of generated functions, else inferred by the verifier)."""
    from .passes.verify import verify_function

    out = {}
    dyn = ir.ShapedType.get_dynamic_size()
    for op in module.body.operations:
        op = op.operation
        if op.name != "func.func" or not len(op.regions[0].blocks):
            continue
        name = ir.StringAttr(op.attributes["sym_name"]).value
        ret = list(op.regions[0].blocks[0].operations)[-1].operation
        shapes = tuple(
            tuple(None if d == dyn else d for d in ir.ShapedType(v.type).shape)
            for v in ret.operands
        )
        if "hector.result_kinds" in op.attributes:
            kinds = tuple(
                ir.StringAttr(a).value for a in ir.ArrayAttr(op.attributes["hector.result_kinds"])
            )
        else:
            inferred = verify_function(op)
            kinds = tuple(_KINDS.get(inferred.get(v, "node-wise"), NODE) for v in ret.operands)
        grad_of: tuple[int, ...] = ()
        if "hector.grad_of" in op.attributes:
            grad_of = tuple(
                ir.IntegerAttr(a).value for a in ir.ArrayAttr(op.attributes["hector.grad_of"])
            )
        saved = 0
        if "hector.num_saved" in op.attributes:
            saved = ir.IntegerAttr(op.attributes["hector.num_saved"]).value
        out[name] = FunctionAbi(name, kinds, shapes, grad_of, saved)
    return out


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
        if self.compact:
            training = "true" if autodiff else "false"
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


def run_stages(
    text: str,
    target: str,
    until: str | None = None,
    autodiff: bool = False,
    options: Options | None = None,
) -> StagedModule:
    """Parse hector_inter ``text`` and run the stages of ``target`` (up to ``until``): first
    the optimizations ``options`` enables (default: all, as ``hector.compile``; pass
    ``Options(False, False, False)`` to lower the IR as written) and, with ``autodiff``, the
    ``_train``/``_backward`` functions; each is a named stage."""
    if target not in pipelines.TARGETS:
        raise ValueError(f"unknown target {target!r}; targets: {', '.join(pipelines.TARGETS)}")
    start = time.perf_counter()
    ctx = make_context()
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(text)
        staged = StagedModule(ctx, module, {"inter": str(module)})
        # Bad input is reported against the user's own file: no reproducer for the verifier.
        run_pipeline(module, "hector-verify", verify=False, reproducer=False)
        opts = options if options is not None else Options()
        for name, pipeline in opts.pipelines(autodiff):
            run_pipeline(module, pipeline, verify=False)
            staged.stages[name] = str(module)
        staged.abi = _abis(module)
        for stage in pipelines.TARGETS[target]:
            run_pipeline(module, stage.pipeline, verify=False)
            staged.stages[stage.name] = str(module)
            if stage.name == until:
                break
    staged.seconds = time.perf_counter() - start
    return staged


@dataclass
class CpuEntry:
    """A compiled CPU kernel plus the ABI needed to call it on a graph and tensors."""

    traced: Traced
    staged: StagedModule
    kernel: CpuKernel

    def ir(self, stage: str) -> str:
        """The IR after ``stage``."""
        return self.staged.ir(stage)

    def check(self, g: HeteroGraph, tensors: tuple[torch.Tensor, ...], names: list[str]) -> None:
        """Check the tensors against the graph before any compiled code runs."""
        for name, kind, t in zip(names, self.traced.arg_kinds, tensors, strict=True):
            if kind == NODE and t.shape[0] != g.num_nodes:
                raise ValueError(
                    f"argument '{name}' is node-wise: expected {g.num_nodes} rows (the graph's "
                    f"nodes), got {t.shape[0]}"
                )
            if kind == EDGE and t.shape[0] != g.num_edges:
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

    def call(self, fname: str, g: HeteroGraph, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """Run compiled function ``fname`` on the graph and tensors; return its results."""
        abi = self.staged.abi[fname]
        outs = []
        for kind, shape in zip(abi.result_kinds, abi.result_shapes, strict=True):
            rows = {NODE: g.num_nodes, "compact": g.num_compact}.get(kind, g.num_edges)
            dims = [rows if d is None else d for d in shape]
            outs.append(torch.empty(dims, dtype=torch.float32))
        arrays = [np.ascontiguousarray(a.numpy()) for a in g.arrays()]
        arrays += [t.detach().contiguous().numpy() for t in tensors]
        arrays += [o.numpy() for o in outs]
        self.kernel(fname, *arrays)
        return outs

    def run(
        self, g: HeteroGraph, tensors: tuple[torch.Tensor, ...], names: list[str]
    ) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """Check the tensors against the graph, allocate outputs and call the kernel."""
        self.check(g, tensors, names)
        outs = self.call(self.traced.name, g, list(tensors))
        return outs[0] if len(outs) == 1 else tuple(outs)


def compile_traced(
    traced: Traced, target: str = "cpu", autodiff: bool = False, options: Options | None = None
) -> CpuEntry:
    """Lower a traced program through the CPU stages and JIT-compile it (with its
    ``_train``/``_backward`` functions when ``autodiff``)."""
    staged = run_stages(traced.text, target, autodiff=autodiff, options=options)
    with staged.context:
        kernel = CpuKernel(staged.module)
    return CpuEntry(traced, staged, kernel)


@dataclass
class GpuEntry:
    """PTX for a traced program, with the IR of every stage."""

    staged: StagedModule
    ptx: str


def compile_gpu(
    traced: Traced | str, autodiff: bool = False, options: Options | None = None
) -> GpuEntry:
    """Lower a traced program (or hector_inter text) through the GPU stages to PTX."""
    text = traced.text if isinstance(traced, Traced) else traced
    staged = run_stages(text, "gpu", autodiff=autodiff, options=options)
    with staged.context:
        ptx = "\n".join(extract_ptx(staged.module).values())
    return GpuEntry(staged, ptx)
