"""placement-plan-saved's memory model (passes/saved_liveness.py) and the peak objective.

The planner chooses which saved values move by the step's modeled peak: the bytes alive at the
worst kernel of ``@f_train`` and ``@f_backward``. These tests check the model on RGAT's and
HGT's training programs: what it counts at the peak, that moving a value never raises it, and
that the peak objective's plan is never worse than moving the largest values first.
"""

from __future__ import annotations

import math
import os
from typing import Any

import pytest
from mlir import ir

from hector.dialects import hector_intra as intra
from hector.lowering import pipelines  # noqa: F401  (registers convert-hector-inter-to-intra)
from hector.passes import plan_saved, saved_liveness, training_pair
from hector.passes.pipeline import run_pipeline
from hector.program import instantiate

INPUTS = os.path.join(os.path.dirname(__file__), "..", "passes", "Inputs")
# synthetic:mag at scale 0.01.
COUNTS = {"N": 19397, "E": 422220, "C": 46125, "D": 46125}
TO_INTRA = "hector-autodiff, hector-fuse, convert-hector-inter-to-intra"


def _pair(model: str, threads: int = 0) -> tuple[Any, plan_saved.TrainingPair]:
    """The model's training pair on memrefs (the module too: it owns the IR), scheduled for
    ``threads`` CPU workers when given."""
    with open(os.path.join(INPUTS, f"plan-saved-{model}.mlir"), encoding="utf-8") as f:
        module = instantiate(f.read())
    schedule = f", hector-schedule{{threads={threads}}}" if threads else ""
    with module.context, ir.Location.unknown():
        run_pipeline(module, TO_INTRA + schedule)
        (pair,) = plan_saved.training_pairs(module.operation)
    return module, pair


def _peak(pair: plan_saved.TrainingPair, moved: dict[int, str]) -> saved_liveness.LiveSet:
    for s in pair.saved:
        s.decision = moved.get(s.slot, "keep")
    return saved_liveness.timeline(pair, COUNTS).peak


@pytest.mark.parametrize("model", ["rgat", "hgt"])
def test_keep_all_peak_holds_every_saved_value_and_moving_one_never_raises_it(model: str) -> None:
    module, pair = _pair(model)
    with module.context:
        keep_all = _peak(pair, {})
        # Keeping everything, every saved value with rows is alive at the peak (the caller
        # holds them from the forward to the end of the backward).
        for s in pair.saved:
            if s.kind in plan_saved.ROWS:
                assert f"saved {s.slot} (kept)" in keep_all.buffers
                assert keep_all.buffers[f"saved {s.slot} (kept)"] == s.nbytes(COUNTS)
        # The results' gradients are the caller's too: alive at a backward peak.
        if keep_all.function == "backward":
            assert any(name.startswith("gradient of result") for name in keep_all.buffers)
        for s in pair.saved:
            if s.kind in plan_saved.ROWS:
                assert _peak(pair, {s.slot: "offload"}).total <= keep_all.total


@pytest.mark.parametrize("model", ["rgat", "hgt"])
def test_peak_objective_plans_a_peak_no_higher_than_largest_first(model: str) -> None:
    module, pair = _pair(model)
    with module.context, ir.Location.unknown():
        total = sum(s.nbytes(COUNTS) for s in pair.saved)
        budget = total // 2
        kept, keep_all, peak = plan_saved.decide_for_peak(
            pair, budget, COUNTS, 0, set(), min_gain=1.0, ahead=1
        )
        assert kept <= budget
        assert peak == _peak(pair, {s.slot: s.decision for s in pair.saved}).total
        assert peak < keep_all
        for s in pair.saved:
            s.decision, s.ahead = "keep", None
        by_bytes = plan_saved.decide(pair.saved, budget, COUNTS, 0, set())
        assert by_bytes <= budget
        assert peak <= saved_liveness.timeline(pair, COUNTS).peak.total


def test_a_budget_that_holds_everything_moves_nothing() -> None:
    module, pair = _pair("rgat")
    with module.context, ir.Location.unknown():
        total = sum(s.nbytes(COUNTS) for s in pair.saved)
        kept, keep_all, peak = plan_saved.decide_for_peak(
            pair, total, COUNTS, 0, set(), min_gain=0.0, ahead=1
        )
        assert kept == total
        assert peak == keep_all
        assert all(s.decision == "keep" for s in pair.saved)


def test_an_offload_is_freed_before_a_kernel_that_brings_new_memory_in() -> None:
    module, pair = _pair("rgat")
    with module.context:
        ops = saved_liveness.kernel_ops(pair.train)
        grows = [False] * len(ops)
        kernels = [i for i, op in enumerate(ops) if op.name.startswith("hector_intra.")]
        first, second, third = kernels[:3]
        # Up to write_lag kernels later, unless one of them touches a new buffer first.
        assert saved_liveness.write_done(ops, first, 2, grows) == third + 1
        grows[second] = True
        assert saved_liveness.write_done(ops, first, 2, grows) == second


def test_a_template_writing_through_a_view_writes_the_saved_value() -> None:
    # An offload's write starts after the value's last writer: a template whose output is a
    # reshaped view of the value (RGAT's folded weights are written so) is one.
    module, pair = _pair("rgat")
    with module.context:
        found = 0
        for op in saved_liveness.kernel_ops(pair.train):
            if not op.name.startswith("hector_intra."):
                continue
            out = op.operands[len(op.operands) - 1]
            owner = None if isinstance(out, ir.BlockArgument) else out.owner
            if owner is not None and owner.name == "memref.collapse_shape":
                assert training_pair.writes(op, owner.operands[0])
                found += 1
        assert found


@pytest.mark.parametrize("model", ["rgat", "hgt"])
def test_workers_partial_outputs_count_while_their_template_runs(model: str) -> None:
    # Scheduled for 2 workers, each reducing template holds one partial copy of its output
    # (hector_intra.worker_partials) during that template and no longer; for 1 worker, none.
    module, pair = _pair(model, threads=2)
    with module.context:
        points = saved_liveness.timeline(pair, COUNTS).points
        spaces = {n: (p.index, b) for p in points for n, b in p.buffers.items() if "workspace" in n}
        assert spaces
        for name, (index, nbytes) in spaces.items():
            fn = pair.backward if name.startswith("backward") else pair.train
            op = saved_liveness.kernel_ops(fn)[index]
            v = intra.view(op)
            shape = ir.MemRefType(v.operand("out").type)
            width = 4 * math.prod(d for d in shape.shape if d != ir.ShapedType.get_dynamic_size())
            rows = [1] if shape.has_static_shape else COUNTS.values()
            if "slice_rows" in op.attributes:  # one [K, N] slice buffer (2 workers)
                assert nbytes == width // shape.shape[0]
            else:  # one copy (2 workers) of out
                assert nbytes in [width * r for r in rows]
            alive = [p.index for p in points if name in p.buffers]
            assert alive == [index]
        two = saved_liveness.timeline(pair, COUNTS).peak.total
    module, pair = _pair(model, threads=1)
    with module.context:
        points = saved_liveness.timeline(pair, COUNTS).points
        assert not any("workspace" in n for p in points for n in p.buffers)
        assert saved_liveness.timeline(pair, COUNTS).peak.total <= two


def test_a_write_lags_only_as_long_as_the_modeled_peak_allows() -> None:
    # _lags doubles each offload's write lag while the peak stays put: a peak that rises past
    # a lag of 4 kernels stops it at 4; one that rises at once leaves the lowering's rule.
    module, pair = _pair("rgat")
    with module.context:
        (s, *_) = [v for v in pair.saved if v.kind in plan_saved.ROWS]
        s.decision = "offload"
        plan_saved._lags(pair, 100, lambda: 100 + ((s.lag or 0) > 4), plan_saved.MAX_WRITE_LAG)
        assert s.lag == 4
        plan_saved._lags(pair, 100, lambda: 101, plan_saved.MAX_WRITE_LAG)
        assert s.lag is None
        plan_saved._lags(pair, 100, lambda: 100, 2)
        assert s.lag == 2


@pytest.mark.parametrize("model", ["rgat", "hgt"])
def test_a_lagged_write_holds_its_value_in_the_model_until_its_wait(model: str) -> None:
    module, pair = _pair(model)
    with module.context:
        (s, *_) = sorted(
            (v for v in pair.saved if v.kind in plan_saved.ROWS), key=lambda v: -v.nbytes(COUNTS)
        )
        s.decision = "offload"
        name = f"saved {s.slot} (offloaded)"

        def alive() -> list[int]:
            points = saved_liveness.timeline(pair, COUNTS).points
            return [p.index for p in points if p.function == "train" and name in p.buffers]

        rule = alive()
        s.lag = plan_saved.MAX_WRITE_LAG
        lagged = alive()
        # Written from the same kernel; held (and waited for) to the forward's last kernel.
        points = saved_liveness.timeline(pair, COUNTS).points
        assert lagged[0] == rule[0]
        assert lagged[-1] > rule[-1]
        assert lagged[-1] == max(p.index for p in points if p.function == "train")


@pytest.mark.parametrize(
    "lag",
    [lambda: ir.StringAttr.get("far"), lambda: plan_saved._i64(-1)],
    ids=["a string", "negative"],
)
def test_a_write_lag_that_is_not_a_kernel_count_is_refused_at_its_offload(lag: Any) -> None:
    from hector.passes.diagnostics import PipelineError

    module, _ = _pair("rgat")
    counts = "nodes=19397 edges=422220 compact=46125 dst_compact=46125"
    with module.context, ir.Location.unknown():
        run_pipeline(module, f"placement-plan-saved{{memory_budget=0.5 {counts}}}")
        (train, *_) = [
            op.operation
            for op in module.body.operations
            if ir.StringAttr(op.operation.attributes["sym_name"]).value.endswith("_train")
        ]
        (offload, *_) = [
            op for op in saved_liveness.kernel_ops(train) if op.name == "placement.offload"
        ]
        offload.attributes[plan_saved.WRITE_LAG_ATTR] = lag()
        with pytest.raises(PipelineError, match="placement.write_lag must be a count of kernels"):
            run_pipeline(module, "convert-placement-to-runtime")
