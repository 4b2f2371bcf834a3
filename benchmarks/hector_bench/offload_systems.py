"""The systems ``hector bench offload`` compares, and the variants they can run under.

A :class:`System` is one way to train with the activations a step saves: keep them all, keep
them with freed memory handed back, copy them to the host (``save_on_cpu``), recompute them
(checkpointing, PyTorch's or DeepSpeed's), or offload them through Hector's cache. It knows how
it prepares the worker process, wraps the model, wraps a step's forward and what a failure in
training means for it. A :class:`Variant` is the extra environment of the worker process, or
options of a hector system's cache. ``--systems`` names them as ``<system>[+<variant>]``
(``keep-all+thp``); :func:`parse_systems` turns each name into a :class:`SystemRun` once, and
the run's records keep the name. Module-level imports stay light: ``hector --help`` imports
this file.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "SYSTEMS",
    "VARIANTS",
    "System",
    "SystemRun",
    "UnsupportedSystem",
    "Variant",
    "parse_systems",
]


class UnsupportedSystem(RuntimeError):
    """The system cannot run here (package missing, or it refuses this configuration)."""


@dataclass(frozen=True)
class System:
    """One way to keep what a training step saves for backward: by default, everything in
    memory (PyTorch's autograd as it is).

    Attributes:
        name: how ``--systems`` and the records name it.
        note: what its row's figures mean where that differs from the others (or None).
        draws_timeline: its saved bytes over one step are drawn by ``--plot``.
    """

    name: str
    note: str | None = None
    draws_timeline: bool = False

    @property
    def optional(self) -> bool:
        """Whether it runs only where an optional package imports (its row says otherwise)."""
        return False

    @property
    def does_io(self) -> bool:
        """Whether it moves activations through the offload store (hector's cache)."""
        return False

    @property
    def compiled(self) -> bool:
        """Whether its model runs under ``torch.compile`` (no scope-hooked counting or
        tracing step after the timed ones: their hooks would recompile the model)."""
        return False

    def accepts(self, variant: Variant) -> bool:
        """Whether it can run under ``variant``."""
        return not variant.cache_options

    def prepare_process(self) -> None:
        """Set up the worker process before the model is built (nothing by default)."""

    def setup(self, model: Any, payload: dict[str, Any]) -> tuple[Any, Any]:
        """The callable that runs the forward, and the hector cache (None for the others)."""
        del payload
        return model, None

    def saving(self, device: str) -> contextlib.AbstractContextManager[Any]:
        """The context a timed step's forward runs in (none by default)."""
        del device
        return contextlib.nullcontext()

    def refusal(self, err: Exception) -> UnsupportedSystem | None:
        """What a training step's ``err`` (``RuntimeError``, ``ValueError`` or
        ``AssertionError``) means: the system refusing this configuration, or None where it is
        a real failure (by default)."""
        del err
        return None


@dataclass(frozen=True)
class KeepAllReleasing(System):
    """Keep everything, with the allocator setting hector's cache makes (freed memory handed
    back with ``mmap``), nothing else."""

    def prepare_process(self) -> None:
        """Make freed blocks leave the process, as hector's cache does."""
        from hector.runtime import libc_heap

        libc_heap.fix_mmap_threshold()


@dataclass(frozen=True)
class SaveOnCpu(System):
    """PyTorch's ``save_on_cpu``: saved tensors copied to host memory (pinned on a GPU)."""

    def saving(self, device: str) -> contextlib.AbstractContextManager[Any]:
        """``torch.autograd.graph.save_on_cpu`` around the forward."""
        import torch

        return torch.autograd.graph.save_on_cpu(pin_memory=device == "cuda")


@dataclass(frozen=True)
class Checkpoint(System):
    """PyTorch's activation checkpointing of every repeated block (reentrant; non-reentrant
    for blocks called with keyword arguments, which the reentrant form does not take)."""

    def setup(self, model: Any, payload: dict[str, Any]) -> tuple[Any, Any]:
        """Wrap each block's forward in ``torch.utils.checkpoint.checkpoint``."""
        from torch.utils.checkpoint import checkpoint

        for block in _blocks(model):
            block.forward = lambda *a, _f=block.forward, **k: checkpoint(
                _f, *a, use_reentrant=not k, **k
            )
        return model, None


def _blocks(model: Any) -> Any:
    """The model's repeated blocks, wherever they are (:func:`hector.offload.scopes
    .repeated_blocks`)."""
    from hector.offload.scopes import repeated_blocks

    path = repeated_blocks(model)
    if path is None:
        raise UnsupportedSystem("the model has no repeated blocks to checkpoint")
    return model.get_submodule(path)


@dataclass(frozen=True)
class HectorOffload(System):
    """Hector's offloading cache around the model (:func:`hector.offload.wrap`) with
    ``policy`` ("all" or "adaptive") and, adaptive, ``memory_budget`` (None: none)."""

    policy: str = "all"
    draws_timeline: bool = True
    memory_budget: float | None = None

    @property
    def does_io(self) -> bool:
        """Hector's cache writes activations to the offload store."""
        return True

    def accepts(self, variant: Variant) -> bool:
        """Every variant: the environment ones and its cache's options."""
        return True

    def setup(self, model: Any, payload: dict[str, Any]) -> tuple[Any, Any]:
        """Wrap the model with the payload's release, granularity and cache options."""
        from hector.offload import wrap

        release = payload.get("release_memory", "auto")
        options = dict(payload.get("cache_options", {}))
        if self.memory_budget is not None:
            options.setdefault("memory_budget", self.memory_budget)
        wrapped = wrap(
            model,
            self.policy,
            root=payload.get("root"),
            record_timeline=True,
            release_memory=False if release == "off" else release,
            granularity=payload.get("granularity", "auto"),
            **options,
        )
        return wrapped, wrapped.cache


@dataclass(frozen=True)
class Compiled(System):
    """Keep everything, the model under ``torch.compile`` (Inductor, whole model)."""

    note: str | None = "compiled: no saved-bytes count nor memory trace (hooks would recompile)"

    @property
    def compiled(self) -> bool:
        """Its model runs under ``torch.compile``."""
        return True

    def setup(self, model: Any, payload: dict[str, Any]) -> tuple[Any, Any]:
        """``torch.compile(model)``."""
        import torch

        return torch.compile(model), None


@dataclass(frozen=True)
class HectorOffloadCompiled(HectorOffload):
    """Hector's cache and ``torch.compile`` together: ``torch.compile(hector.offload(model))``
    (``inside=False``) or ``hector.offload(torch.compile(model))``; the model then runs by
    compiled regions (docs/offload-your-model.md, "Compiled models")."""

    inside: bool = False

    @property
    def compiled(self) -> bool:
        """Its model runs under ``torch.compile``."""
        return True

    def setup(self, model: Any, payload: dict[str, Any]) -> tuple[Any, Any]:
        """Compile and offload the model, in this system's order."""
        import torch

        if self.inside:
            return super().setup(torch.compile(model), payload)
        wrapped, cache = super().setup(model, payload)
        return torch.compile(wrapped), cache


@dataclass(frozen=True)
class HectorBudgetCompiled(Compiled):
    """``torch.compile(model, backend="hector", options={"memory_budget": memory_budget})``:
    each saved value of the compiled graph kept or offloaded to the SSD store (docs/
    offload-your-model.md, "A memory budget inside the compiled graph"), compiled as
    ``hector bench offload-compiled``'s ``hector-<budget>`` system."""

    memory_budget: float = 0.5
    note: str | None = (
        "compiled, budget inside the graph: no saved-bytes count nor memory trace; the store "
        "is under the default offload root"
    )

    @property
    def does_io(self) -> bool:
        """Its offloaded saved values go through the offload store."""
        return True

    def setup(self, model: Any, payload: dict[str, Any]) -> tuple[Any, Any]:
        """The model compiled by Hector's backend with this budget."""
        from .offload_compiled import compile_system

        compiled, _backend = compile_system(f"hector-{self.memory_budget}", model)
        return compiled, None


@dataclass(frozen=True)
class DeepSpeedCheckpoint(System):
    """DeepSpeed's activation checkpointing of every block, its checkpoints kept on the host
    when ``cpu``; unsupported where ``deepspeed`` does not import or refuses the device."""

    cpu: bool = False
    note: str | None = "saved bytes: what the keep-everything counter sees under DeepSpeed"

    @property
    def optional(self) -> bool:
        """It needs the ``deepspeed`` package."""
        return True

    def setup(self, model: Any, payload: dict[str, Any]) -> tuple[Any, Any]:
        """Wrap each block in DeepSpeed's checkpointing on the payload's device."""
        _deepspeed_checkpointing(model, cpu=self.cpu, device=payload.get("device", "cpu"))
        return model, None

    def refusal(self, err: Exception) -> UnsupportedSystem | None:
        """DeepSpeed failing in training is DeepSpeed refusing this device or configuration."""
        return UnsupportedSystem(f"deepspeed failed in training: {type(err).__name__}: {err}")


def _deepspeed_checkpointing(model: Any, cpu: bool, device: str = "cpu") -> None:
    """Wrap each block in DeepSpeed's activation checkpointing (``checkpoint_in_cpu=cpu``)."""
    os.environ.setdefault("DS_ACCELERATOR", device)
    try:
        import importlib

        import torch.distributed as dist

        # Imported by name: an optional package without type information.
        deepspeed = importlib.import_module("deepspeed")
        ds_ckpt = importlib.import_module(
            "deepspeed.runtime.activation_checkpointing.checkpointing"
        )
    except Exception as err:  # noqa: BLE001  (any import failure means: not available here)
        raise UnsupportedSystem(f"deepspeed does not import: {type(err).__name__}: {err}") from None
    if not dist.is_initialized():  # DeepSpeed's checkpointing asks for a process group
        for k, v in (("MASTER_ADDR", "127.0.0.1"), ("RANK", "0"), ("WORLD_SIZE", "1")):
            os.environ.setdefault(k, v)
        os.environ.setdefault("LOCAL_RANK", "0")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        deepspeed.init_distributed(dist_backend="gloo", verbose=False)
    ds_ckpt.configure(
        None,
        partition_activations=False,
        checkpoint_in_cpu=cpu,
        contiguous_checkpointing=False,
        num_checkpoints=len(_blocks(model)),
        synchronize=False,
        profile=False,
    )
    for block in _blocks(model):
        original = block.forward
        block.forward = lambda *a, _f=original: ds_ckpt.checkpoint(_f, *a)


#: The systems, in the order ``--systems`` runs them by default. Those that need an optional
#: package (``deepspeed``) say so in their row where it does not import or refuses the
#: configuration (status "unsupported").
SYSTEMS: dict[str, System] = {
    s.name: s
    for s in (
        System("keep-all", draws_timeline=True),
        KeepAllReleasing("keep-all-mmap"),
        SaveOnCpu(
            "save_on_cpu", note="on CPU the saved copies stay in host memory (nothing is freed)"
        ),
        Checkpoint("checkpoint"),
        HectorOffload("hector-all", policy="all"),
        HectorOffload("hector-adaptive", policy="adaptive"),
        HectorOffload("hector-budget", policy="adaptive", memory_budget=0.5),
        Compiled("keep-all-compiled"),
        HectorOffloadCompiled("hector-all-compiled", policy="all"),
        HectorOffloadCompiled("hector-all-compiled-inside", policy="all", inside=True),
        HectorOffloadCompiled("hector-adaptive-compiled", policy="adaptive"),
        HectorBudgetCompiled("hector-budget-compiled", memory_budget=0.5),
        HectorBudgetCompiled("hector-budget-0.25-compiled", memory_budget=0.25),
        DeepSpeedCheckpoint("deepspeed-checkpoint", cpu=False),
        DeepSpeedCheckpoint("deepspeed-cpu-checkpoint", cpu=True),
    )
}


@dataclass(frozen=True)
class Variant:
    """What a system may run under, as ``<system>+<variant>``: extra ``env`` of its worker
    process (any system), or ``cache_options`` of a hector system's cache (those alone)."""

    name: str
    env: dict[str, str] = field(default_factory=dict)
    cache_options: dict[str, Any] = field(default_factory=dict)

    @property
    def changes_environment(self) -> bool:
        """Whether it sets the worker's environment (plain training changes under it too)."""
        return bool(self.env)


#: ``thp``: PyTorch's own huge-page allocation (every CPU block of 2 MiB or more marked
#: ``madvise(MADV_HUGEPAGE)``, so it faults in 2 MiB at a time; read at the first allocation,
#: hence set before the process starts). ``calloc``: Hector's caching CPU allocator, installed
#: before the model is built (:func:`hector.offload.enable_caching_allocator`, default limits);
#: hector's systems otherwise install it as their cache is made (``release_memory="auto"``),
#: after the model. ``torchalloc``: PyTorch's own CPU allocator throughout
#: (``HECTOR_CPU_ALLOCATOR=pytorch``: hector's cache hands freed activations back with
#: ``madvise`` instead). Options of a hector system's cache: ``fwdtrim`` trims the heap at the
#: forward's end instead of as backward starts; ``measuredtrim`` decides its trims by what the
#: steps spend (``trim_rule="measured"``).
VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("thp", env={"THP_MEM_ALLOC_ENABLE": "1"}),
        Variant("calloc", env={"HECTOR_BENCH_CPU_ALLOCATOR": "caching"}),
        Variant("torchalloc", env={"HECTOR_CPU_ALLOCATOR": "pytorch"}),
        Variant("fwdtrim", cache_options={"trim_point": "forward end"}),
        Variant("measuredtrim", cache_options={"trim_rule": "measured"}),
    )
}


@dataclass(frozen=True)
class SystemRun:
    """One ``--systems`` entry: a system, under a variant or none; :attr:`name` is the entry
    as written (``keep-all+thp``), which the records keep."""

    system: System
    variant: Variant | None = None

    @classmethod
    def parse(cls, name: str) -> SystemRun | None:
        """The entry ``<system>[+<variant>]``, or None for an unknown system or variant, or a
        variant the system cannot run under (a cache option of a system without hector's
        cache)."""
        base, _, variant_name = name.partition("+")
        system = SYSTEMS.get(base)
        if system is None:
            return None
        if not variant_name:
            return cls(system)
        variant = VARIANTS.get(variant_name)
        if variant is None or not system.accepts(variant):
            return None
        return cls(system, variant)

    @property
    def name(self) -> str:
        """The entry as ``--systems`` names it."""
        return self.system.name + (f"+{self.variant.name}" if self.variant else "")

    @property
    def env(self) -> dict[str, str]:
        """Extra environment of the worker process."""
        return dict(self.variant.env) if self.variant else {}

    @property
    def cache_options(self) -> dict[str, Any]:
        """Options of hector's cache."""
        return dict(self.variant.cache_options) if self.variant else {}


def parse_systems(text: str) -> tuple[list[SystemRun], list[str]]:
    """The ``--systems`` value as runs, in order, and the entries that name no known system
    or variant."""
    names = [s.strip() for s in text.split(",") if s.strip()]
    runs = [SystemRun.parse(n) for n in names]
    bad = [n for n, r in zip(names, runs, strict=True) if r is None]
    return [r for r in runs if r is not None], bad
