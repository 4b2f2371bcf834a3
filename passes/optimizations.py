"""Hector's optimizations on hector_inter and the one order every target runs them in.

:data:`OPTIMIZATION_ORDER` is read by the compile step (``Options.pipelines``, each
optimization a named stage of :func:`hector.targets.driver.run_stages`) and by the
``hector-optimize`` named pipeline (``lowering/pipelines.py``). This module loads no MLIR.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OPTIMIZATION_ORDER", "Optimization"]


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
    # bf16 training programs on CPUs with AVX512-BF16 (Options.bf16_dot): wide saved values
    # stored in bf16 (passes/half_saved.py).
    Optimization("half_saved", "hector-half-saved", training_only=True),
    Optimization("fuse", "hector-fuse"),
)
