"""Hector's compilation targets, one module each (as Triton has one per backend), and
:data:`TARGETS`, the one table of them.

* :mod:`hector.targets.cpu` — ``cpu``: JIT-compiled CPU code called on NumPy views of tensors;
* :mod:`hector.targets.cuda` — ``cuda``: PTX kernels driven by JIT-compiled host code, called
  on CUDA tensors; and ``gpu``, the PTX of the same kernels to read;
* :mod:`hector.targets.bundle` — ``bundle``: PTX plus a launch plan, run without the compiler.

Each module owns its compile step, its executable and its launcher; a target's stages (from
hector_inter to its code) are its one list, :attr:`Target.stages` (its row of
:data:`hector.lowering.pipelines.TARGET_STAGES`, which ``hector-opt`` reads without loading a
back end). :mod:`hector.targets.base` holds what they share and
:mod:`hector.targets.options` what a compilation is asked for. The table names each back end
by module, imported on first use: the frontend never imports a back end, no back end imports
the frontend.
"""

from __future__ import annotations

from .base import Backend, Executable, FunctionAbi, StagedModule, Target
from .options import GraphStats, Options

__all__ = [
    "TARGETS",
    "Backend",
    "Executable",
    "FunctionAbi",
    "GraphStats",
    "Options",
    "StagedModule",
    "Target",
    "register_target",
    "target",
]

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


register_target(Target("cpu", "hector.targets.cpu", "CPU", "JIT-compiled CPU code (NumPy arrays)"))
register_target(
    Target("cuda", "hector.targets.cuda", "CUDA", "PTX kernels driven by JIT-compiled host")
)
register_target(
    Target("gpu", "hector.targets.cuda", "PTX", "PTX of the GPU kernels, to read", runs=False)
)
register_target(
    Target(
        "bundle",
        "hector.targets.bundle",
        "BUNDLE",
        "PTX and a launch plan, run without the compiler (hector.bundle.load)",
        runs=False,
    )
)
