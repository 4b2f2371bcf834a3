"""Hector's named pipelines and the ordered stages of each target.

A target is an ordered list of stages (``inter → intra → loops → llvm`` on the CPU,
``inter → intra → gpu → ptx`` on the GPU); each stage has a name, so a user can dump the IR
after any of them (``hector compile --emit intra``, ``CompiledFunction.ir("loops")``). Each stage
is also a registered named pipeline, so ``hector-opt -p hector-lower-cpu`` runs the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..passes.optimizations import OPTIMIZATION_ORDER
from ..passes.registry import TORCH_CONTEXT, Option, PassFailure, register_pass, register_pipeline

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
        f"canonicalize, nvvm-attach-target{{chip={chip} features={features}}}, "
        "gpu.module(convert-scf-to-cf, convert-gpu-to-nvvm, canonicalize, "
        "reconcile-unrealized-casts), gpu-module-to-binary{format=isa}"
    )


@dataclass(frozen=True)
class Stage:
    """One named step of a target: the IR after it can be dumped by this name."""

    name: str
    pipeline: str
    description: str
    threaded: bool = False  # the pipeline takes the CPU worker count (hector-schedule)

    def pipeline_for(self, threads: int = 1, bf16_dot: bool = False) -> str:
        """The stage's pipeline for ``threads`` CPU workers (and bf16 pair products where the
        CPU has them)."""
        return schedule_pipeline(threads, bf16_dot) if self.threaded else self.pipeline


def schedule_pipeline(threads: int = 1, bf16_dot: bool = False) -> str:
    """``hector-schedule`` for ``threads`` CPU workers; ``bf16_dot``: GEMMs with a bf16
    operand multiply bf16 pairs (AVX512-BF16, ``lowering/cpu/bf16.py``)."""
    if bf16_dot:
        return f"hector-schedule{{threads={threads} bf16_dot=true}}"
    return f"hector-schedule{{threads={threads}}}"


CPU_STAGES: tuple[Stage, ...] = (
    Stage("intra", "convert-hector-inter-to-intra", "GEMM/traversal templates on memrefs"),
    Stage(
        "schedule",
        schedule_pipeline(),
        "templates with their schedules (tiles, packing, vector width, workers)",
        threaded=True,
    ),
    Stage(
        "loops",
        "hector-outline-templates, convert-hector-intra-to-scf",
        "each template in a function of its own: packed tiles, vectorised micro-kernels and "
        "worker loops (scf, linalg → vector)",
    ),
    # Placement decisions (placement-plan-saved) become calls of the native runtime first (the
    # compiler lowers them right after planning; here for modules planned by hand).
    Stage(
        "llvm", f"convert-placement-to-runtime, {LLVM_CPU}", "LLVM dialect, ready for the CPU JIT"
    ),
)

GPU_STAGES: tuple[Stage, ...] = (
    Stage("intra", "convert-hector-inter-to-intra", "GEMM/traversal templates on memrefs"),
    # Untiled kernels by default until the tiled ones have been timed on a GPU;
    # `hector-schedule{target=gpu}` before this conversion tiles the GEMMs in shared memory.
    Stage("gpu", "convert-hector-intra-to-gpu", "gpu.func kernels and host launches"),
    Stage("ptx", ptx_pipeline(), "NVVM → PTX text in a gpu.binary"),
)

# Host side of a GPU module, for running it (target "cuda"): every C-interface wrapper requested,
# the host's GPU ops chained on one stream (gpu-async-region), every launch guarded so an empty
# grid is skipped (hector-skip-empty-launches, intra_to_gpu.py), then gpu-to-llvm turns the
# gpu.binary into a module loaded at JIT start and each launch into mgpuLaunchKernel, calls into
# MLIR's CUDA runtime wrappers (libmlir_cuda_runtime.so); see python/hector/targets/cuda.py.
LLVM_GPU_HOST = (
    "func.func(llvm-request-c-wrappers, gpu-async-region), hector-skip-empty-launches, "
    "convert-scf-to-cf, "
    "expand-strided-metadata, lower-affine, finalize-memref-to-llvm, convert-math-to-llvm, "
    "convert-arith-to-llvm, convert-index-to-llvm, convert-cf-to-llvm, gpu-to-llvm, "
    "convert-func-to-llvm, reconcile-unrealized-casts"
)


def cuda_stages(chip: str = GPU_CHIP, features: str | None = None) -> tuple[Stage, ...]:
    """The stages of target ``cuda`` for one GPU architecture: the GPU stages, then the host
    lowered to LLVM for the JIT (the PTX of ``chip`` embedded, loaded by the driver)."""
    return (
        *GPU_STAGES[:2],
        Stage("ptx", ptx_pipeline(chip, features), f"NVVM → PTX text ({chip}) in a gpu.binary"),
        Stage("host", LLVM_GPU_HOST, "host LLVM dialect calling MLIR's CUDA runtime wrappers"),
    )


CUDA_STAGES: tuple[Stage, ...] = cuda_stages()


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
    "hector-lower-cpu",
    "hector_inter to the LLVM dialect for the CPU JIT (optimize, intra, loops, llvm)",
    ", ".join([OPTIMIZE, *(s.pipeline for s in CPU_STAGES)]),
)
register_pipeline(
    "hector-lower-ptx",
    f"gpu.module kernels to PTX ({GPU_CHIP}, {GPU_FEATURES})",
    ptx_pipeline(),
)
register_pipeline(
    "hector-lower-gpu",
    "hector_inter to GPU kernels compiled to PTX (optimize, intra, gpu, ptx)",
    ", ".join([OPTIMIZE, *(s.pipeline for s in GPU_STAGES)]),
)
register_pipeline(
    "hector-lower-gpu-host",
    "Host side of a gpu.binary module to the LLVM dialect (mgpu* runtime calls, C wrappers)",
    LLVM_GPU_HOST,
)
register_pipeline(
    "hector-lower-cuda",
    f"hector_inter to a JIT-ready host module with embedded PTX ({GPU_CHIP}): optimize, intra, "
    "gpu, ptx, host",
    ", ".join([OPTIMIZE, *(s.pipeline for s in CUDA_STAGES)]),
)


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
