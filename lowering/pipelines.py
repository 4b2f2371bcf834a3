"""Hector's lowering pipelines: the upstream steps, the stages of every target, and the named
pipelines built from them.

A target is an ordered list of stages (``intra → schedule → loops → llvm`` on the CPU,
``intra → gpu → ptx → host`` for CUDA), after the optimizations; each stage has a name, so a
user can dump the IR after any of them (``hector compile --emit intra``,
``CompiledFunction.ir("loops")``). :data:`TARGET_STAGES` holds the one list of each target:
the compile step, the CLI's ``--emit`` and the named pipeline ``hector-lower-<target>`` (so
``hector-opt -p hector-lower-cpu`` runs the same thing) all read it. A stage whose pipeline
depends on the compilation (the CPU worker count, the GPU architecture) builds it from
:class:`LoweringParams`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..passes.optimizations import OPTIMIZATION_ORDER
from ..passes.registry import TORCH_CONTEXT, Option, PassFailure, register_pass, register_pipeline
from .cpu import bf16_emulation  # noqa: F401  (registers hector-emulate-bf16-dot)
from .gpu.mma_nvvm import tensor_cores

# Upstream lowering of scf/memref/arith/func to the LLVM dialect, for the CPU JIT. Workers'
# scf.forall loops become scf.parallel, then tasks of MLIR's async runtime (one block per
# iteration: each iteration is already a worker's whole chunk), of which repeated templates
# keep one copy (hector-merge-identical-functions: LLVM then compiles each once); the
# micro-kernels' vector ops lower through scf to LLVM vectors (vectorisation leaves ub.poison,
# hence convert-ub-to-llvm).
# Buffers are allocated through MLIR's generic allocation functions, which the CPU JIT binds to
# Hector's host memory cache (lowering/cpu/jit.py).
LLVM_CPU = (
    "canonicalize, scf-forall-to-parallel, "
    "async-parallel-for{async-dispatch=false min-task-size=1}, async-to-async-runtime, "
    "async-runtime-ref-counting, async-runtime-ref-counting-opt, hector-merge-identical-functions, "
    "convert-vector-to-scf{full-unroll=true}, convert-linalg-to-loops, lower-affine, "
    "convert-scf-to-cf, "
    "expand-strided-metadata, lower-affine, convert-async-to-llvm, "
    "func.func(convert-vector-to-llvm{enable-x86vector=true}), "
    "finalize-memref-to-llvm{use-generic-functions=true}, "
    "func.func(convert-math-to-llvm, convert-arith-to-llvm, convert-index-to-llvm, "
    "convert-ub-to-llvm), convert-cf-to-llvm, convert-func-to-llvm, reconcile-unrealized-casts"
)

#: The GPU architectures Hector compiles for, each with the oldest PTX ISA version (times ten)
#: that LLVM's NVPTX back end accepts for it: NVPTX's processors from sm_50 on, the oldest a
#: CUDA 12 driver loads. ``test_gpu_chips.py`` checks the table against ``llc``'s own list.
GPU_CHIP_MIN_PTX: dict[str, int] = {
    **dict.fromkeys(("sm_50", "sm_52", "sm_53"), 40),
    **dict.fromkeys(("sm_60", "sm_61", "sm_62"), 50),
    "sm_70": 60,
    "sm_72": 61,
    "sm_75": 63,
    "sm_80": 70,
    "sm_86": 71,
    "sm_87": 74,
    "sm_88": 90,
    "sm_89": 78,
    "sm_90": 78,
    "sm_90a": 80,
    **dict.fromkeys(("sm_100", "sm_100a", "sm_101", "sm_101a"), 86),
    **dict.fromkeys(("sm_120", "sm_120a"), 87),
    **dict.fromkeys(("sm_100f", "sm_101f", "sm_103", "sm_103a", "sm_103f"), 88),
    **dict.fromkeys(("sm_120f", "sm_121", "sm_121a", "sm_121f"), 88),
    **dict.fromkeys(("sm_110", "sm_110a", "sm_110f"), 90),
}
#: The PTX ISA version (times ten) kernels are written in, unless their chip needs a newer one.
GPU_PTX_VERSION = 80
#: The default NVVM target: sm_90 (H100/H200 class).
GPU_CHIP = "sm_90"


def check_gpu_chip(chip: str) -> str:
    """``chip`` when Hector compiles for it (a key of :data:`GPU_CHIP_MIN_PTX`); raises
    ``ValueError`` naming the architectures it knows otherwise."""
    if chip not in GPU_CHIP_MIN_PTX:
        known = ", ".join(sorted(GPU_CHIP_MIN_PTX, key=lambda c: (int(c[3:].rstrip("af")), c)))
        raise ValueError(f"unknown GPU architecture {chip!r}; Hector compiles for {known}")
    return chip


def gpu_features(chip: str) -> str:
    """The NVVM target features for ``chip``: PTX ISA :data:`GPU_PTX_VERSION`, or the oldest
    version the chip needs where that is newer (sm_100 needs 8.6)."""
    version = max(GPU_PTX_VERSION, GPU_CHIP_MIN_PTX[check_gpu_chip(chip)])
    return f"+ptx{version}"


GPU_FEATURES = gpu_features(GPU_CHIP)


def ptx_pipeline(chip: str = GPU_CHIP, features: str | None = None) -> str:
    """Upstream steps from gpu.module kernels to PTX text in a gpu.binary (``features``:
    :func:`gpu_features` of the chip unless given)."""
    features = features or gpu_features(chip)
    return (
        f"hector-mma-to-nvvm{{chip={chip}}}, "
        f"canonicalize, nvvm-attach-target{{chip={chip} features={features}}}, "
        "gpu.module(convert-scf-to-cf, convert-gpu-to-nvvm, canonicalize, "
        "reconcile-unrealized-casts), gpu-module-to-binary{format=isa}"
    )


def schedule_pipeline(threads: int = 1, bf16_dot: bool = False, vector_bits: int = 512) -> str:
    """``hector-schedule`` for ``threads`` CPU workers on vector registers of ``vector_bits``
    bits; ``bf16_dot``: GEMMs with a bf16 operand multiply bf16 pairs (AVX512-BF16,
    ``lowering/cpu/bf16.py``). Then ``hector-half-messages`` (``lowering/cpu/half_messages.py``)
    and ``hector-vector-dots`` (``lowering/cpu/vector_dots.py``)."""
    messages = "hector-half-messages, hector-vector-dots"  # half messages; dots in lanes
    options = f"threads={threads}"
    if bf16_dot:
        options += " bf16_dot=true"
    if vector_bits != 512:
        options += f" vector_bits={vector_bits}"
    return f"hector-schedule{{{options}}}, {messages}"


# Host side of a GPU module, for running it (target "cuda"): every C-interface wrapper requested,
# the host's GPU ops chained on one stream (gpu-async-region), every launch guarded so an empty
# grid is skipped (hector-skip-empty-launches, gpu/skip_empty_launches.py), then gpu-to-llvm
# turns the gpu.binary into a module loaded at JIT start and each launch into mgpuLaunchKernel,
# calls into MLIR's CUDA runtime wrappers (libmlir_cuda_runtime.so); see
# python/hector/targets/cuda.py.
LLVM_GPU_HOST = (
    "func.func(llvm-request-c-wrappers, gpu-async-region), hector-skip-empty-launches, "
    "convert-scf-to-cf, "
    "expand-strided-metadata, lower-affine, finalize-memref-to-llvm, convert-math-to-llvm, "
    "convert-arith-to-llvm, convert-index-to-llvm, convert-cf-to-llvm, gpu-to-llvm, "
    "convert-func-to-llvm, reconcile-unrealized-casts"
)


# ---- stages ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoweringParams:
    """What a stage's pipeline may depend on besides the IR: the CPU worker count, bf16 pair
    products and the CPU's vector width (``schedule``), the GPU architecture (``ptx``)."""

    threads: int = 1
    bf16_dot: bool = False
    chip: str = GPU_CHIP
    bf16_emulated: bool = False
    vector_bits: int = 512


@dataclass(frozen=True)
class Stage:
    """One named step of a target: the IR after it can be dumped by this name. ``build``
    makes its pipeline for the :class:`LoweringParams` of a compilation."""

    name: str
    description: str
    build: Callable[[LoweringParams], str]

    @property
    def pipeline(self) -> str:
        """The stage's pipeline for the default parameters (one CPU worker, :data:`GPU_CHIP`)."""
        return self.build(LoweringParams())

    def pipeline_for(self, params: LoweringParams) -> str:
        """The stage's pipeline for ``params``."""
        return self.build(params)


def _fixed(pipeline: str) -> Callable[[LoweringParams], str]:
    """A stage pipeline that depends on no parameter."""
    return lambda _params: pipeline


INTRA = Stage(
    "intra",
    "GEMM/traversal templates on memrefs",
    _fixed("convert-hector-inter-to-intra, hector-accumulate-sums"),
)
SCHEDULE = Stage(
    "schedule",
    "templates with their schedules (tiles, packing, vector width, workers)",
    lambda p: schedule_pipeline(p.threads, p.bf16_dot, p.vector_bits),
)
LOOPS = Stage(
    "loops",
    "each template (or gradient pair) in a function of its own: packed tiles, vectorised "
    "micro-kernels and worker loops (scf, linalg → vector)",
    _fixed("hector-pair-gradient-gemms, hector-outline-templates, convert-hector-intra-to-scf"),
)
# Placement decisions (placement-plan-saved) become calls of the native runtime first (the
# compiler lowers them right after planning; here for modules planned by hand).
LLVM = Stage(
    "llvm",
    "LLVM dialect, ready for the CPU JIT",
    lambda p: llvm_cpu_pipeline(p.bf16_emulated),
)


def llvm_cpu_pipeline(bf16_emulated: bool = False) -> str:
    """The ``llvm`` stage: placement calls, then :data:`LLVM_CPU`; with ``bf16_emulated``, the
    bf16 pair products' ``vdpbf16ps`` first rewritten into f32 vector arithmetic
    (``hector-emulate-bf16-dot``, ``HECTOR_BF16_DOT=emulate``)."""
    emulate = "hector-emulate-bf16-dot, " if bf16_emulated else ""
    return f"convert-placement-to-runtime, {emulate}{LLVM_CPU}"


def gpu_pipeline(chip: str = GPU_CHIP) -> str:
    """``convert-hector-intra-to-gpu`` for ``chip``: with ``mma=true`` (scheduled GEMMs on
    16-bit operands on tensor cores, ``lowering/gpu/mma.py``) from sm_80 on."""
    if tensor_cores(check_gpu_chip(chip)):
        return "convert-hector-intra-to-gpu{mma=true}"
    return "convert-hector-intra-to-gpu"


# Untiled kernels by default until the tiled ones have been timed on a GPU;
# `hector-schedule{target=gpu}` before this conversion tiles the GEMMs in shared memory.
GPU = Stage("gpu", "gpu.func kernels and host launches", lambda p: gpu_pipeline(p.chip))
PTX = Stage("ptx", "NVVM → PTX text for the chip, in a gpu.binary", lambda p: ptx_pipeline(p.chip))
HOST = Stage(
    "host", "host LLVM dialect calling MLIR's CUDA runtime wrappers", _fixed(LLVM_GPU_HOST)
)

#: Each target's stages after the optimizations, in order: the one stage list of every target
#: (``hector.targets.TARGETS``, whose rows read it as ``Target.stages``). The compile step
#: (``hector.targets.driver.run_stages``), ``hector compile --emit`` and the named pipelines
#: ``hector-lower-<target>`` below all read it. ``bundle`` stops after ``ptx``: its host stays
#: in the func/gpu dialects, which the launch plan is read from.
TARGET_STAGES: dict[str, tuple[Stage, ...]] = {
    "cpu": (INTRA, SCHEDULE, LOOPS, LLVM),
    "gpu": (INTRA, GPU, PTX),
    "cuda": (INTRA, GPU, PTX, HOST),
    "bundle": (INTRA, GPU, PTX),
}


# ---- named pipelines -------------------------------------------------------------------------


register_pipeline(
    "hector-lower-llvm-cpu",
    "Upstream lowering of scf/memref/arith/func to the LLVM dialect",
    LLVM_CPU,
)
# Hector's optimizations on hector_inter, in the order hector.compile runs them by default.
# The aggregation order needs the graph's D/E (hector.compile passes it); without it the pass
# keeps transform-then-aggregate and only records that order.
OPTIMIZE = ", ".join(o.pass_name for o in OPTIMIZATION_ORDER if not o.training_only)

register_pipeline(
    "hector-optimize",
    "Hector's hector_inter optimizations: linear reordering, aggregation order, compact "
    "materialization, fusion",
    OPTIMIZE,
)
register_pipeline(
    "hector-lower-ptx",
    f"gpu.module kernels to PTX ({GPU_CHIP}, {GPU_FEATURES})",
    ptx_pipeline(),
)
register_pipeline(
    "hector-lower-gpu-host",
    "Host side of a gpu.binary module to the LLVM dialect (mgpu* runtime calls, C wrappers)",
    LLVM_GPU_HOST,
)

#: What the named pipeline ``hector-lower-<target>`` makes of hector_inter, per target.
_TARGET_RESULTS = {
    "cpu": "the LLVM dialect for the CPU JIT",
    "gpu": f"GPU kernels compiled to PTX ({GPU_CHIP})",
    "cuda": f"a JIT-ready host module with embedded PTX ({GPU_CHIP})",
    "bundle": f"kernels in PTX ({GPU_CHIP}) and host launches in the func/gpu dialects",
}


def _register_target_pipelines() -> None:
    """Register ``hector-lower-<target>`` for every target: the optimizations, then the
    target's stages (default parameters), as :data:`TARGET_STAGES` lists them."""
    for target, stages in TARGET_STAGES.items():
        names = ", ".join(s.name for s in stages)
        register_pipeline(
            f"hector-lower-{target}",
            f"hector_inter to {_TARGET_RESULTS[target]}: target '{target}' (optimize, {names})",
            ", ".join([OPTIMIZE, *(s.pipeline for s in stages)]),
        )


_register_target_pipelines()


@register_pass(
    "raise-torch-to-hector",
    "Raise relational patterns of torch-dialect functions (gathers, typed linears, scatter sums, "
    "segment softmax, ...) to hector_inter ops, in torch-mlir's context",
    context=TORCH_CONTEXT,
    strict=Option(bool, False, "report every torch op left unraised as an error (file:line)"),
)
def _raise_torch_to_hector(module: Any, strict: bool = False) -> None:
    """Run ``raise-torch-to-hector`` on a ``torch_mlir.ir.Module`` (imported on first use:
    it loads torch-mlir); unraised ops under ``strict`` become one error each."""
    from .from_torch.raise_to_hector import RaiseError, raise_module

    try:
        raise_module(module, strict=strict)
    except RaiseError as err:
        errors: list[tuple[str, str | None]] = [
            (f"cannot raise '{name}' to hector_inter", loc) for name, loc in err.unsupported
        ]
        first, *more = errors or [(str(err), None)]
        raise PassFailure(*first, more=more) from None
