"""Placement per saved value inside a compiled graph (``hector.offload.joint``): a budget
offloads saved values through the runtime ops in the compiled graphs, the store receives
them, gradients equal the compiled keep-all run's bit for bit (dropout included: nothing is
recomputed beyond the partitioner's own), the plan is ``placement`` IR that ``hector-opt``
round-trips, and the kept bytes fall with the budget.

The compute runs on AOTAutograd's eager runner (``compute="eager"``) except in one test, where
Inductor compiles it: the partitioning, planning and lowering are the same.
"""

from __future__ import annotations

import dataclasses
import io
import sys
from contextlib import redirect_stdout

import pytest
import torch
import torch._dynamo
from torch import nn
from torch._dynamo.utils import counters

from hector.dynamo.backend import HectorBackend
from hector.offload import Plan
from hector.offload.joint import JointBackend
from hector.offload.joint_ops import tickets
from hector.offload.joint_plan import plan
from hector.tools.opt import main as hector_opt

BANDWIDTH = {"write_bandwidth": 1e9, "read_bandwidth": 1e9}  # no measurement in tests


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(64, 256),
        nn.GELU(),
        nn.Dropout(0.1),
        nn.Linear(256, 256),
        nn.ReLU(),
        nn.Dropout(0.2),
        nn.Linear(256, 8),
    )


def _step(model: nn.Module, backend: object) -> list[torch.Tensor]:
    """One compiled training step from a fixed seed; the parameters' gradients."""
    torch._dynamo.reset()
    model.zero_grad(set_to_none=True)
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    torch.manual_seed(1)
    x = torch.randn(128, 64)
    compiled(x).square().sum().backward()
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


def _joint(budget: float, compute: str = "eager") -> JointBackend:
    return JointBackend(budget, compute=compute, threshold=1024, **BANDWIDTH)


def test_offloaded_gradients_equal_keep_all_bit_for_bit() -> None:
    model = _mlp()
    keep_all = _step(model, _joint(1.0))
    before = tickets().stats()["put_bytes"]
    backend = _joint(0.25)
    grads = _step(model, backend)
    (plan,) = backend.plans
    assert plan.offloaded_bytes > 0
    assert all(torch.equal(a, b) for a, b in zip(keep_all, grads, strict=True))
    stats = tickets().stats()
    assert stats["put_bytes"] - before == plan.offloaded_bytes
    assert stats["outstanding"] == 0  # every value came back
    assert stats["store"]["bytes_written"] >= plan.offloaded_bytes
    # Dropout's masks are saved, not recomputed: no random op runs in the backward.
    assert "rand" not in plan.code[1]
    assert "dropout(" not in plan.code[1]


def test_runtime_ops_in_graphs_and_no_graph_break() -> None:
    counters.clear()
    backend = HectorBackend(memory_budget=0.25, compute="eager", offload_threshold=1024)
    _step(_mlp(), backend)
    assert not counters["graph_break"]
    (plan,) = backend.joint.plans
    forward, backward = plan.code
    n = len(plan.offloaded())
    assert n > 0
    assert forward.count("torch.ops.hector.offload_put.default(") == n
    assert forward.count("torch.ops.hector.offload_wait.default(") == n
    assert backward.count("torch.ops.hector.offload_prefetch.default(") == n
    assert backward.count("torch.ops.hector.offload_get.default(") == n


def test_inductor_compiles_around_the_runtime_ops() -> None:
    from torch._inductor.utils import run_and_get_code

    model = _mlp()
    for m in model.modules():  # Inductor draws its own random numbers: no dropout here
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    keep_all = _step(model, _joint(1.0))  # the eager runner's: one Inductor compile only
    backend = _joint(0.25, "inductor")
    grads, codes = run_and_get_code(_step, model, backend)
    assert backend.plans[0].offloaded_bytes > 0
    text = "\n".join(codes)
    assert "torch.ops.hector.offload_put.default(" in text
    assert "torch.ops.hector.offload_get.default(" in text
    assert "cpp_fused" in text  # Inductor's own kernels
    for a, b in zip(keep_all, grads, strict=True):  # Inductor fuses: float tolerance
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_plan_is_placement_ir_that_round_trips(tmp_path: object) -> None:
    backend = _joint(0.5)
    _step(_mlp(), backend)
    (plan,) = backend.plans
    assert '"placement.saved"' in plan.text
    assert 'placement.plan = "joint"' in plan.text
    path = f"{tmp_path}/plan.mlir"
    with open(path, "w") as f:
        f.write(plan.text)
    out = io.StringIO()
    with redirect_stdout(out):
        assert hector_opt([path]) == 0
    again = Plan.from_ir(out.getvalue())
    decided = {s.name: s.decision for s in plan.saved if s.eligible is None}
    assert again.decisions == decided
    assert set(decided.values()) == {"keep", "offload"}


def test_kept_bytes_fall_with_the_budget() -> None:
    backend = _joint(1.0)
    _step(_mlp(), backend)
    (first,) = backend.plans
    kept, offloaded = [], []
    for budget in (1.0, 0.75, 0.5, 0.25):  # the same saved values, planned again
        values = [dataclasses.replace(s, decision="keep") for s in first.saved]
        made = plan(values, budget, first.cost, "ssd")
        kept.append(made.kept_bytes)
        offloaded.append(made.offloaded_bytes)
    assert offloaded[0] == 0
    assert kept == sorted(kept, reverse=True)
    assert kept[-1] < kept[0]


def test_explain_names_each_saved_value() -> None:
    backend = _joint(0.25)
    _step(_mlp(), backend)
    (plan,) = backend.plans
    report = backend.explain()
    for s in plan.saved:
        line = next(x for x in report.splitlines() if f" {s.name} " in x)
        assert s.decision in line
        assert str(s.nbytes) in line
    assert "a graph input (parameter or batch)" in report
    assert "offloads it" in report


def test_permuted_value_comes_back_with_its_strides() -> None:
    x = torch.randn(4, 8, 16).permute(2, 0, 1)  # dense, not contiguous: written as it lies
    ops = torch.ops.hector
    handle = ops.offload_wait(ops.offload_put(x, "ssd"), x)  # the write is done
    meta = (list(x.shape), list(x.stride()), x.dtype, x.device)
    y = ops.offload_get(ops.offload_prefetch(handle, *meta), *meta)  # read from the store
    assert y.stride() == x.stride()
    assert torch.equal(y, x)
    assert y.data_ptr() != x.data_ptr()


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="memory_budget must be > 0"):
        JointBackend(0)
    with pytest.raises(TypeError, match="memory_budget must be a number"):
        JointBackend("half")  # type: ignore[arg-type]
    empty = torch.fx.GraphModule({}, torch.fx.Graph())
    with pytest.raises(ValueError, match="compute must be one of"):
        HectorBackend(memory_budget=0.5, compute="tvm")(empty, [])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
