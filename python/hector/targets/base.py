"""What every compilation target shares: the :class:`Backend` interface a target module
implements, the :class:`Target` row of the target table that loads it on first use, and what a
compilation makes (:class:`StagedModule`, :class:`FunctionAbi`, :class:`Executable`).

This module imports no back end and nothing of MLIR: the frontend looks targets up here
without loading a compiler.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..dialects import Kind
from ..runtime.training import TrainingAbi, rows_of

if TYPE_CHECKING:
    import torch

    from ..data.graph import HeteroGraph
    from ..lowering.pipelines import Stage
    from ..program import Traced
    from .options import Options

__all__ = ["Backend", "Executable", "FunctionAbi", "StagedModule", "Target"]


@dataclass(frozen=True)
class FunctionAbi:
    """How to call one compiled function: what each result is and, for generated functions,
    how results map back (``grad_of``: tensor argument of each gradient; ``num_saved``)."""

    name: str
    result_kinds: tuple[Kind, ...]
    result_shapes: tuple[tuple[int | None, ...], ...]  # None: the row count
    grad_of: tuple[int, ...] = ()
    num_saved: int = 0
    #: The element type each result is written in (``hector.storage``: ``"f16"``, ``"bf16"``);
    #: a result not named here (all of them when empty) is ``"f32"``.
    result_storage: tuple[str, ...] = ()

    def storage_of(self, i: int) -> str:
        """The element type result ``i`` is written in: ``"f32"``, ``"f16"`` or ``"bf16"``."""
        return self.result_storage[i] if i < len(self.result_storage) else "f32"


@dataclass
class StagedModule:
    """A module taken through a target's stages, with the IR after each stage by name (text, or
    bytecode printed when first asked for: ``Backend.last_stage_as_bytecode``)."""

    context: Any
    module: Any
    stages: dict[str, str | bytes] = field(default_factory=dict)
    seconds: float = 0.0
    abi: dict[str, FunctionAbi] = field(default_factory=dict)
    #: The kernels' PTX, kept by target ``cuda`` after its ``ptx`` stage (its ``host`` stage
    #: then turns the ``gpu.binary`` into LLVM globals).
    ptx: str = ""

    def ir(self, stage: str) -> str:
        """The IR text after ``stage``."""
        if stage not in self.stages:
            raise KeyError(f"no stage {stage!r}; stages: {', '.join(self.stages)}")
        text = self.stages[stage]
        if isinstance(text, bytes):
            from ..lowering.cpu.codegen import bytecode_text

            text = self.stages[stage] = bytecode_text(text)
        return text


class Executable:
    """A program compiled for one target, callable on a graph and tensors.

    Subclasses (the CPU entry, the CUDA entry) hold ``traced`` and ``staged`` and implement
    :meth:`call` (the launcher); checking the tensors against the graph, the IR of each stage
    and :meth:`run` are shared.
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
        """Check the tensors against the kernel and the graph before any compiled code runs:
        each one's dtype, rank and static dims (those the kernel was built for), the rows of
        node- and edge-wise ones and the slices of typed weights."""
        for i, (name, kind, t) in enumerate(
            zip(names, self.traced.arg_kinds, tensors, strict=True)
        ):
            if t.dtype != (dtype := self.traced.dtype_of(i)):  # never read f32 bytes as half
                raise ValueError(
                    f"argument '{name}' must be {dtype} for this kernel, got {t.dtype}"
                )
            # Static dims are compiled into the kernel: another size would be read out of bounds.
            if (why := self.traced.shape_mismatch(i, tuple(t.shape))) is not None:
                raise ValueError(f"argument '{name}' {why}")
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

    def output_dtypes(self, fname: str) -> list[torch.dtype]:
        """The types ``fname`` writes its results in (float32 unless stored as a half)."""
        from ..program import storage_dtype

        abi = self.staged.abi[fname]
        return [storage_dtype(abi.storage_of(i)) for i in range(len(abi.result_kinds))]

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


class Backend:
    """A target's back end, one per target module (as Triton has one per backend): its own
    steps between the stages (:meth:`after_stage`) and the compile step that makes an entry to
    call (or, for targets that do not run, code to read). The stages themselves are the
    target's row of :data:`hector.lowering.pipelines.TARGET_STAGES` (:attr:`Target.stages`)."""

    #: Keep the last stage's IR (upstream dialects only) as MLIR bytecode, printed when asked
    #: for: a training module's LLVM dialect prints in 0.3 s, five times its bytecode's time.
    last_stage_as_bytecode: bool = False

    def after_stage(
        self,
        stage: str,
        module: Any,
        staged: StagedModule,
        options: Options,
        autodiff: bool,
        show: Callable[[], str],
    ) -> None:
        """Run the target's own steps after ``stage`` (none by default); ``show()`` prints the
        module as the stages are kept."""

    def compile(
        self, traced: Traced, *, autodiff: bool = False, options: Options | None = None
    ) -> Any:
        """Compile ``traced`` for this target (with ``<f>_train``/``<f>_backward`` when
        ``autodiff``)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Target:
    """A row of the target table: a target ``hector.compile`` (or ``hector compile``) knows,
    whose :class:`Backend` is the attribute ``backend_name`` of module ``module``, imported on
    first use (so looking a target up loads no compiler)."""

    name: str
    module: str
    backend_name: str
    description: str
    runs: bool = True  # False: code to look at (PTX, a bundle), not an entry to call

    @property
    def stages(self) -> tuple[Stage, ...]:
        """The target's stages after the optimizations, in order: its one stage list,
        :data:`hector.lowering.pipelines.TARGET_STAGES` ``[name]``, which the compile step,
        ``hector compile --emit`` and the named pipeline ``hector-lower-<name>`` read."""
        from ..lowering.pipelines import TARGET_STAGES  # the compiler, loaded on first use

        return TARGET_STAGES[self.name]

    def backend(self) -> Backend:
        """The target's back end (its module imported now, if it was not)."""
        backend: Backend = getattr(importlib.import_module(self.module), self.backend_name)
        return backend

    def compile(
        self, traced: Traced, *, autodiff: bool = False, options: Options | None = None
    ) -> Executable:
        """Compile ``traced`` for this target (the back end is imported on first use)."""
        executable: Executable = self.backend().compile(traced, autodiff=autodiff, options=options)
        return executable
