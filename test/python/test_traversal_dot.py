"""The per-head inner product of the traversal template (``fn = "dot"``) on the CPU JIT: its
summation order (``dot_lanes`` partial sums, added pairwise) is part of its contract, so the
result must equal, bit for bit, the same order in float32 NumPy, on one worker and on two,
run after run."""

from __future__ import annotations

import numpy as np
import pytest
from mlir import ir
from mlir.dialects import func

from hector.dialects import hector_intra as intra
from hector.dialects import make_context
from hector.lowering._templates import dot_lanes
from hector.lowering.cpu_jit import CpuKernel
from hector.lowering.pipelines import CPU_STAGES
from hector.passes._pipeline import run_pipeline

ROWS, SOURCE_ROWS = 300, 40


def _dot_kernel(width: int, heads: int, threads: int) -> CpuKernel:
    """``out[i, h] = dot(x[gather[i], head h], y[i, head h])`` compiled for ``threads`` workers."""
    with make_context(), ir.Location.unknown():
        module = ir.Module.create()
        dyn = ir.ShapedType.get_dynamic_size()
        f32 = ir.F32Type.get()
        rows = ir.MemRefType.get([dyn, width], f32)
        index = ir.MemRefType.get([dyn], ir.IntegerType.get_signless(32))
        out = ir.MemRefType.get([dyn, heads], f32)
        with ir.InsertionPoint(module.body):
            fn = func.FuncOp("dot", ir.FunctionType.get([index, rows, rows, out], []))
            with ir.InsertionPoint(fn.add_entry_block()):
                gather, x, y, o = fn.arguments
                intra.OPS.traversal_template(
                    gather_index=gather,
                    scatter_index=None,
                    y_index=None,
                    x=x,
                    y=y,
                    out=o,
                    parallel="edge",
                    fn="dot",
                    reduce="none",
                    slope=0.0,
                    block_size=128,
                )
                func.ReturnOp([])
        stages = ", ".join(s.pipeline_for(threads) for s in CPU_STAGES[1:])
        run_pipeline(module, f"builtin.module({stages})")
        return CpuKernel(module)


def _lane_order(x: np.ndarray, y: np.ndarray, heads: int) -> np.ndarray:
    """The template's order in float32: lane ``l`` adds columns ``l, l + L, ...`` of a head in
    turn, then the lanes are added pairwise, neighbours first."""
    rows, width = x.shape
    dh = width // heads
    lanes = dot_lanes(dh)
    prod = (x * y).reshape(rows, heads, dh)
    level = [np.zeros((rows, heads), np.float32) for _ in range(lanes)]
    for k in range(0, dh, lanes):
        for lane in range(lanes):
            level[lane] = level[lane] + prod[:, :, k + lane]
    while len(level) > 1:
        pairs = [level[k] + level[k + 1] for k in range(0, len(level) - 1, 2)]
        level = pairs + level[len(pairs) * 2 :]
    return level[0]


@pytest.mark.parametrize(
    ("width", "heads", "lanes"), [(64, 1, 8), (16, 2, 8), (24, 2, 4), (12, 2, 2), (6, 2, 1)]
)
@pytest.mark.parametrize("threads", [1, 2])
def test_dot_sums_in_lane_order(width: int, heads: int, lanes: int, threads: int) -> None:
    assert dot_lanes(width // heads) == lanes
    rng = np.random.default_rng(width * 10 + heads)
    gather = rng.integers(0, SOURCE_ROWS, ROWS).astype(np.int32)
    x = rng.standard_normal((SOURCE_ROWS, width), dtype=np.float32)
    y = rng.standard_normal((ROWS, width), dtype=np.float32)
    kernel = _dot_kernel(width, heads, threads)
    want = _lane_order(x[gather], y, heads)
    runs = []
    for _ in range(2):
        out = np.full((ROWS, heads), np.nan, np.float32)
        kernel("dot", gather, x, y, out)
        runs.append(out)
    np.testing.assert_array_equal(runs[0], want)
    np.testing.assert_array_equal(runs[1], runs[0])
    ref = np.einsum("rhd,rhd->rh", *(a.reshape(ROWS, heads, -1) for a in (x[gather], y)))
    np.testing.assert_allclose(runs[0], ref, rtol=1e-5, atol=1e-5)


def test_lanes_are_powers_of_two_dividing_the_head() -> None:
    assert [dot_lanes(d) for d in (1, 2, 3, 4, 6, 8, 12, 16, 64, 96)] == [
        1,
        2,
        1,
        4,
        2,
        8,
        4,
        8,
        8,
        8,
    ]
