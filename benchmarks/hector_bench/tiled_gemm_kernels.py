"""The GEMM kernels ``scripts/gpu_check.sh`` times (its ``tiled-gemm`` section): PTX of the
tiled and the untiled kernel for each of a few RGCN-sized shapes — and, for bf16 shapes on a
chip with tensor cores, the tensor-core kernel (``mma``, ``lowering/gpu/mma.py``) — with the
launches the lowering's host code would make. ``scripts/build_carry.sh`` writes them into the carry
(:func:`write_bench_kernels`), where a GPU machine without MLIR reads them."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import func

from hector.dialects import hector_intra as intra
from hector.dialects import make_context
from hector.dialects.hector_intra import Schedule
from hector.lowering import templates as T
from hector.lowering.gpu.gemm import gemm_tiling
from hector.lowering.gpu.mma import mma_tiling
from hector.lowering.gpu.mma_nvvm import tensor_cores
from hector.lowering.gpu.ptx import extract_ptx
from hector.lowering.gpu.schedule_choice import gpu_gemm_schedule
from hector.lowering.gpu.xty import XTY_PARTIAL_BUDGET, XTY_ROWS_PER_CHUNK, xty_tiling
from hector.lowering.pipelines import ptx_pipeline
from hector.passes.pipeline import run_pipeline


@dataclass(frozen=True)
class BenchShape:
    """One GEMM timed by ``scripts/gpu_check.sh``, on RGCN's edges (types sorted, as edges
    are): the message product ``out[i] = a[gather[i]] @ w[type[i]]`` (``xw``) or the weight
    gradient ``out[t] += a[gather[i]]ᵀ ⊗ g[i]`` (``xty``)."""

    rows: int  # M, edges
    nodes: int  # rows of a
    k: int
    n: int
    slices: int
    variant: str = "xw"
    dtype: str = "f32"  # storage of a and the weight: f32 or bf16 (xw only)

    @property
    def name(self) -> str:
        """``<variant>_m<M>_k<K>_n<N>_s<S>``, then ``_bf16`` for bf16 operands."""
        tail = "" if self.dtype == "f32" else f"_{self.dtype}"
        return f"{self.variant}_m{self.rows}_k{self.k}_n{self.n}_s{self.slices}{tail}"

    def chunks(self) -> int:
        """Row chunks of the weight gradient (``intra_to_gpu._xty_chunks``, on the host)."""
        wanted = -(-self.rows // XTY_ROWS_PER_CHUNK)
        cap = max(1, XTY_PARTIAL_BUDGET // (self.slices * self.k * self.n))
        return max(1, min(wanted, cap))


BENCH_SHAPES = (
    BenchShape(1 << 20, 1 << 17, 64, 64, 8),
    BenchShape(1 << 20, 1 << 17, 128, 128, 8),
    BenchShape(1 << 20, 1 << 17, 64, 64, 8, "xty"),
    BenchShape(1 << 20, 1 << 17, 64, 64, 8, dtype="bf16"),
    BenchShape(1 << 20, 1 << 17, 128, 128, 8, dtype="bf16"),
)
#: The untiled kernel's defaults (convert-hector-inter-to-intra's options).
UNTILED_TILE_N, UNTILED_BLOCK = 8, 256
#: Arguments of the template's kernel, by role (``partials``: the weight gradient's
#: temporary, zeroed before each run).
BENCH_ARGS = ("a", "weight", "gather_index", "weight_index", "out")


def bench_module(shape: BenchShape, schedule: Schedule | None) -> ir.Module:
    """``@gemm(a, weight, gather_index, weight_index, out)`` around one template."""
    dyn = ir.ShapedType.get_dynamic_size()
    f32, i32 = T.f32_type(), ir.IntegerType.get_signless(32)
    stored = ir.BF16Type.get() if shape.dtype == "bf16" else f32
    xty = shape.variant == "xty"
    kn = [shape.k, shape.n]
    types = [
        ir.MemRefType.get([dyn, shape.k], stored),
        ir.MemRefType.get([dyn, shape.n] if xty else [shape.slices, *kn], stored),
        ir.MemRefType.get([dyn], i32),
        ir.MemRefType.get([dyn], i32),
        ir.MemRefType.get([shape.slices, *kn] if xty else [dyn, shape.n], f32),
    ]
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        fn = func.FuncOp("gemm", ir.FunctionType.get(types, []))
        block = fn.add_entry_block()
        a, w, gather, wtype, out = block.arguments
        with ir.InsertionPoint(block):
            extra = {} if schedule is None else {"schedule": schedule.to_attr()}
            intra.OPS.gemm_template(
                a=a,
                weight=w,
                gather_index=gather,
                weight_index=wtype,
                out=out,
                variant=shape.variant,
                epilogue="add" if xty else "store",
                tile_n=UNTILED_TILE_N,
                block_size=UNTILED_BLOCK,
                extra=extra,
            )
            func.ReturnOp([])
    return module


def _ceil(x: int, y: int) -> int:
    return -(-x // y)


def _bench_launches(
    shape: BenchShape, schedule: Schedule | None, mma: bool = False
) -> list[dict[str, object]]:
    """The launches the lowering's host code makes for ``shape`` (grid and block, as the
    host computes them, and the arguments by role; ``mma``: the tensor-core kernel's)."""
    with make_context():
        loc = ir.Location.unknown()
        if mma:
            assert schedule is not None
            mt = mma_tiling(schedule, shape.k, shape.n, True, loc)
            grid = _ceil(shape.rows, mt.tile_m) * _ceil(shape.n, mt.tile_n)
            return [
                {"entry": "gemm_0_gemm", "grid": grid, "block": mt.threads, "args": [*BENCH_ARGS]}
            ]
        if shape.variant == "xty":
            c, kn = shape.chunks(), shape.k * shape.n
            if schedule is None:
                first = (_ceil(c * kn, UNTILED_BLOCK), UNTILED_BLOCK)
            else:
                xt = xty_tiling(schedule, shape.k, shape.n, True, loc)
                tiles = _ceil(shape.k, xt.tile_k) * _ceil(shape.n, xt.tile_n)
                first = (c * tiles, xt.threads)
            reduce = (_ceil(shape.slices * kn, UNTILED_BLOCK), UNTILED_BLOCK)
            return [
                {
                    "entry": "gemm_0_gemm",
                    "grid": first[0],
                    "block": first[1],
                    "args": [*BENCH_ARGS, "partials"],
                },
                {
                    "entry": "gemm_0_gemm_reduce",
                    "grid": reduce[0],
                    "block": reduce[1],
                    "args": ["partials", "out"],
                },
            ]
        if schedule is None:
            threads = shape.rows * _ceil(shape.n, UNTILED_TILE_N)
            grid, block = _ceil(threads, UNTILED_BLOCK), UNTILED_BLOCK
        else:
            tl = gemm_tiling(schedule, shape.k, shape.n, True, loc)
            grid = _ceil(shape.rows, tl.tile_m) * _ceil(shape.n, tl.tile_n)
            block = tl.threads
    return [{"entry": "gemm_0_gemm", "grid": grid, "block": block, "args": list(BENCH_ARGS)}]


def bench_kernels(
    chip: str, shapes: tuple[BenchShape, ...] = BENCH_SHAPES
) -> list[dict[str, object]]:
    """PTX and launches of the tiled and the untiled kernels for each of ``shapes``, and of
    the tensor-core kernel (``mma``) first for bf16 shapes when ``chip`` has tensor cores
    (JSON-ready records; ``ptx`` holds the text; ``temps``: temporaries by role, with their
    shapes, zeroed before each run)."""
    records: list[dict[str, object]] = []
    for shape in shapes:
        schedule = gpu_gemm_schedule(shape.variant, shape.k, shape.n)
        temps = {}
        if shape.variant == "xty":
            temps["partials"] = [shape.chunks(), shape.slices, shape.k, shape.n]
        kinds: list[tuple[str, Schedule | None]] = [("tiled", schedule), ("untiled", None)]
        if shape.dtype == "bf16" and tensor_cores(chip):
            kinds.insert(0, ("mma", schedule))
        for kind, sched in kinds:
            mma = kind == "mma"
            with make_context(), ir.Location.unknown():
                module = bench_module(shape, sched)
                lowering = "convert-hector-intra-to-gpu" + ("{mma=true}" if mma else "")
                run_pipeline(module, lowering, verify=False)
                run_pipeline(module, ptx_pipeline(chip), verify=False)
                ptx = "\n".join(extract_ptx(module).values())
            schedule_fields = None
            if sched is not None:
                schedule_fields = {f: getattr(sched, f) for f in Schedule.FIELDS}
            records.append(
                {
                    "shape": shape.name,
                    "kind": kind,
                    "variant": shape.variant,
                    "rows": shape.rows,
                    "nodes": shape.nodes,
                    "k": shape.k,
                    "n": shape.n,
                    "slices": shape.slices,
                    "dtype": shape.dtype,
                    "launches": _bench_launches(shape, sched, mma),
                    "temps": temps,
                    "ptx": ptx,
                    "schedule": schedule_fields,
                }
            )
    return records


def write_bench_kernels(
    folder: str, chip: str = "sm_90", shapes: tuple[BenchShape, ...] = BENCH_SHAPES
) -> list[str]:
    """Write :func:`bench_kernels` as ``<shape>_<kind>.ptx`` files and ``kernels.json`` (the
    records without their PTX, naming each file) under ``folder``; returns the files."""
    os.makedirs(folder, exist_ok=True)
    index, files = [], []
    for rec in bench_kernels(chip, shapes):
        name = f"{rec['shape']}_{rec['kind']}.ptx"
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            f.write(str(rec.pop("ptx")))
        index.append({**rec, "file": name, "chip": chip})
        files.append(name)
    with open(os.path.join(folder, "kernels.json"), "w", encoding="utf-8") as f:
        json.dump(index, f, indent=1)
    return [*files, "kernels.json"]
