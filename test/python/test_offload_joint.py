"""Placement per saved value inside a compiled graph (``hector.offload.joint``): a budget
offloads saved values through the runtime ops in the compiled graphs, the store receives
them, gradients equal the compiled keep-all run's bit for bit (dropout included: a chain with
a random op is never recomputed), offloaded values cheaper to recompute are recomputed in the
backward instead, the plan is ``placement`` IR that ``hector-opt`` round-trips, and the kept
bytes fall with the budget.

The compute runs on AOTAutograd's eager runner (``compute="eager"``) except in one test, where
Inductor compiles it: the partitioning, planning and lowering are the same.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
import weakref
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import torch
import torch._dynamo
from torch import nn
from torch._dynamo.utils import counters

from hector.dynamo.backend import HectorBackend
from hector.offload import Plan, joint_plan
from hector.offload.host_policy import CPU_ALLOCATOR_ENV
from hector.offload.joint import JointBackend
from hector.offload.joint_ops import tickets
from hector.offload.joint_plan import plan, store_bandwidth
from hector.runtime import cpu_allocator, libc_heap
from hector.tools.opt import main as hector_opt

# No measurement in tests: given bandwidths, and the graphs' memory alone (the process's
# resident growth, which the default counts, depends on what ran before in the process).
BANDWIDTH = {"write_bandwidth": 1e9, "read_bandwidth": 1e9, "outside": 0}


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


@pytest.mark.parametrize("model", ["hf-gpt2", "hf-llama", "hf-bert", "hf-t5", "hf-vit"])
def test_models_users_bring_train_bit_identical_under_a_budget(model: str) -> None:
    """``hector bench offload-compiled --model``'s Hugging Face models (T5: encoder-decoder),
    built as the bench builds them, compile whole under a budget (no graph break, no
    recompile on the next step), offload, and train bit-identical to the keep-all compile
    (their dropout included)."""
    from hector_bench.offload_compiled import _batch, _model

    cfg = {"model": model, "layers": 1, "width": 32, "heads": 2, "seq": 16, "batch": 2}
    cfg["vocab"] = 64
    x, y = _batch(cfg)

    def train(backend: JointBackend) -> list[torch.Tensor]:
        torch._dynamo.reset()
        counters.clear()
        net = _model(cfg)
        compiled = torch.compile(net, backend=backend, fullgraph=True)
        torch.manual_seed(1)
        for _ in range(2):  # the second step runs the same graph
            net.zero_grad(set_to_none=True)
            logits = compiled(x).reshape(-1, cfg["vocab"])
            torch.nn.functional.cross_entropy(logits, y.reshape(-1)).backward()
        assert not counters["graph_break"]
        assert not counters["recompiles"]
        return [p.grad for p in net.parameters() if p.grad is not None]

    keep_all = train(_joint(1.0))
    backend = _joint(0.25)
    grads = train(backend)
    assert len(backend.plans) == 1
    assert backend.plans[0].offloaded_bytes > 0
    assert len(grads) == len(keep_all) > 0
    assert all(torch.equal(a, b) for a, b in zip(keep_all, grads, strict=True))
    assert tickets().stats()["outstanding"] == 0


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
    backend.recompute = False  # several offloaded values: the order of puts and waits
    grads, codes = run_and_get_code(_step, model, backend)
    assert backend.plans[0].offloaded_bytes > 0
    text = "\n".join(codes)
    # Each write overlaps compute: Inductor runs no wait right after its put (but the last).
    events = [
        "put"
        if "offload_put.default(" in line
        else "wait"
        if "offload_wait.default(" in line
        else "compute"
        for line in codes[0].splitlines()
        if "offload_" in line
        and " = " in line
        or "cpp_fused" in line
        and "(" in line
        or "extern_kernels." in line
    ]
    pairs = list(zip(events, events[1:], strict=False))
    assert events.count("wait") >= 2
    assert pairs.count(("put", "wait")) <= 1
    assert "torch.ops.hector.offload_put.default(" in text
    assert "torch.ops.hector.offload_get.default(" in text
    assert "cpp_fused" in text  # Inductor's own kernels
    for a, b in zip(keep_all, grads, strict=True):  # Inductor fuses: float tolerance
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_plan_is_placement_ir_that_round_trips(tmp_path: object) -> None:
    keep_all = _joint(1.0)
    _step(_mlp(), keep_all)
    (first,) = keep_all.plans  # a budget in bytes: the other bytes and half the saved ones
    backend = _joint(first.other_bytes + first.saved_bytes // 2)
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
    decided.update({r.name: "recompute" for r in plan.recomputes})
    assert again.decisions == decided
    assert {"keep", "offload"} <= set(decided.values())


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


def test_budget_is_a_fraction_of_the_modelled_step() -> None:
    """The budget covers the step's modelled memory, saved values and the rest (the graphs'
    temporaries and gradients): the saved values get what the rest leaves of it, so a
    budget a step cannot meet offloads all it may and says so."""
    backend = _joint(1.0)
    torch._dynamo.reset()
    model = _mlp()
    torch.compile(model, backend=backend, fullgraph=True)(torch.randn(2048, 64)).sum().backward()
    (first,) = backend.plans
    params = sum(p.numel() * 4 for p in model.parameters())
    assert first.other_bytes >= params  # the gradients, at least
    whole = first.saved_bytes + first.other_bytes
    steps, kept, feasible = [], [], []
    for budget in (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.05):
        values = [dataclasses.replace(s, decision="keep") for s in first.saved]
        made = plan(values, budget, first.cost, "ssd", other=first.other_bytes)
        assert made.step_budget == int(budget * whole)
        assert made.budget_bytes == max(made.step_budget - first.other_bytes, 0)
        steps.append(made.modelled_step_peak)
        kept.append(made.kept_bytes)
        feasible.append(made.feasible)
        if not made.feasible:  # all the store may take goes
            assert all(s.decision == "offload" for s in made.saved if s.eligible is None)
    assert steps == sorted(steps, reverse=True)
    assert kept == sorted(kept, reverse=True)
    assert feasible[:3] == [True] * 3  # a prefix of the budgets is met, then none
    assert feasible == sorted(feasible, reverse=True)
    assert kept[2] < kept[0]
    assert not feasible[-1]
    values = [dataclasses.replace(s, decision="keep") for s in first.saved]
    tight = plan(values, 0.05, first.cost, "ssd", other=first.other_bytes)
    assert "budget not met" in tight.explain()


def test_other_bytes_follow_liveness_and_views() -> None:
    """A value lives from its node to its last use, a view adds nothing and keeps its base
    alive, outputs live to the end; saved values (and their bases) are not counted."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x: torch.Tensor) -> torch.Tensor:
        a = x * 2
        return a.view(-1) + 1

    gm = make_fx(f, tracing_mode="fake")(torch.randn(64, 64))
    n = 64 * 64 * 4
    mul = next(x.name for x in gm.graph.nodes if "mul" in x.name)
    assert joint_plan._live_peak(gm, set(), inputs=True) == 2 * n
    assert joint_plan._live_peak(gm, set(), inputs=False) == 2 * n  # x's bytes not counted
    assert joint_plan._live_peak(gm, {mul}, inputs=True) == n


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


def test_offloaded_values_are_released_while_the_forward_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each offloaded value's storage dies once its write is done (its wait, before the
    value after the next one is put): neither the ticket nor the compiled forward holds it
    until the graph returns."""
    joint_tickets = type(tickets())
    put = joint_tickets.put
    refs: list[weakref.ref[torch.Tensor]] = []
    alive_at_put: list[list[bool]] = []

    def recording_put(self: object, x: torch.Tensor, target: str) -> int:
        alive_at_put.append([r() is not None for r in refs])
        number = put(self, x, target)  # type: ignore[arg-type]
        refs.append(weakref.ref(x))
        return number

    monkeypatch.setattr(joint_tickets, "put", recording_put)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.ReLU()) for _ in range(4)])
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=_joint(0.05), fullgraph=True)
    out = compiled(torch.randn(64, 256)).square().sum()
    assert len(refs) >= 3
    for n, alive in enumerate(alive_at_put):
        assert not any(alive[: max(n - 1, 0)]), f"values put before {n - 1} still alive: {alive}"
    assert [r() is None for r in refs] == [True] * len(refs)  # none held for backward
    out.backward()
    assert tickets().stats()["outstanding"] == 0


def test_budget_path_imports_no_gnn_importer_and_builds_no_ir(tmp_path: Path) -> None:
    """A ``memory_budget`` compile imports neither torch-mlir's importer nor the placement
    pass machinery; the plan's IR is built when :attr:`JointPlan.text` is read."""
    code = """
import sys, torch
from torch import nn
from hector.dynamo.backend import HectorBackend
b = HectorBackend(memory_budget=0.25, compute="eager", offload_threshold=1024)
m = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Dropout(0.1), nn.Linear(256, 8))
c = torch.compile(m, backend=b, fullgraph=True)
c(torch.randn(32, 64)).sum().backward()
(plan,) = b.joint.plans
assert plan.offloaded_bytes > 0
heavy = ("hector.frontends.importer", "torch_mlir", "hector.passes.plan_offload")
print([m for m in heavy if m in sys.modules])
text = plan.text
print("placement.saved" in text, "hector.passes.plan_offload" in sys.modules)
"""
    env = {**os.environ, "HECTOR_CACHE_DIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout.split("\n")
    assert out[0] == "[]"
    assert out[1] == "True True"


def test_cpu_budget_compile_serves_freed_memory_from_the_caching_allocator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As soon as a CPU graph is planned, Hector's caching CPU allocator serves the process's
    large blocks (freed activations reused by the next block of their size, without faults),
    as the eager cache's ``release_memory="auto"`` does; glibc's threshold is left alone."""
    served: list[bool] = []
    fixed: list[bool] = []
    monkeypatch.delenv(CPU_ALLOCATOR_ENV, raising=False)
    monkeypatch.setattr(cpu_allocator, "installed", lambda: bool(served))
    monkeypatch.setattr(cpu_allocator, "install", lambda *a: served.append(True))
    monkeypatch.setattr(libc_heap, "fix_mmap_threshold", lambda: fixed.append(True))
    _step(_mlp(), _joint(1.0))
    assert served == [True]
    assert not fixed


@pytest.mark.parametrize("why", ["pytorch-allocator-asked", "allocator-cannot-build"])
def test_cpu_budget_compile_without_the_caching_allocator_fixes_the_mmap_threshold(
    monkeypatch: pytest.MonkeyPatch, why: str
) -> None:
    """Where the caching allocator does not serve (``$HECTOR_CPU_ALLOCATOR=pytorch``, or it
    cannot be built: warned), freed large blocks leave the process instead (glibc's mmap
    threshold fixed)."""
    fixed: list[bool] = []
    monkeypatch.setattr(cpu_allocator, "installed", lambda: False)
    monkeypatch.setattr(libc_heap, "fix_mmap_threshold", lambda: fixed.append(True))
    if why == "pytorch-allocator-asked":
        monkeypatch.setenv(CPU_ALLOCATOR_ENV, "pytorch")
        _step(_mlp(), _joint(1.0))
    else:
        monkeypatch.delenv(CPU_ALLOCATOR_ENV, raising=False)

        def refuse(*args: object) -> None:
            raise cpu_allocator.CpuAllocatorError("no C++17 compiler here")

        monkeypatch.setattr(cpu_allocator, "install", refuse)
        with pytest.warns(UserWarning, match="no C\\+\\+17 compiler here"):
            _step(_mlp(), _joint(1.0))
    assert fixed


def test_store_bandwidth_keeps_the_fastest_of_its_first_probes_then_reads_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first ``BANDWIDTH_SAMPLES`` calls (processes) probe and keep the fastest figures
    (a probe on a busy machine does not lower them); later calls read the cache; unreadable
    figures are measured again."""
    monkeypatch.setenv("HECTOR_CACHE_DIR", str(tmp_path))
    store = tickets().store
    write, read = store_bandwidth(store)  # measured by the probe, then kept
    assert write > 0
    assert read > 0
    (kept,) = (tmp_path / joint_plan.BANDWIDTH_CACHE).iterdir()
    probes = iter([(1.0, 1.0), (write * 2, 1.0)])
    monkeypatch.setattr(joint_plan, "_probe", lambda _store: next(probes))
    assert store_bandwidth(store) == (write, read)  # a slow probe: the faster figures stay
    assert store_bandwidth(store) == (write * 2, read)  # the third probe, the last
    assert store_bandwidth(store) == (write * 2, read)  # read: no probe left in `probes`
    kept.write_text('{"write": -1}')  # unreadable figures are measured again
    monkeypatch.setattr(joint_plan, "_probe", lambda _store: (2.0, 3.0))
    assert store_bandwidth(store) == (2.0, 3.0)
    assert json.loads(kept.read_text())["samples"] == 1


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


class _PreNorm(nn.Module):
    """A pre-norm residual block without random ops: layer norm, two linears around GELU."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.norm = nn.LayerNorm(64)
        self.up, self.down = nn.Linear(64, 256), nn.Linear(256, 64)
        self.head = nn.Linear(64, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))
        return self.head(torch.relu(h))


def _fast_store(budget: float) -> JointBackend:
    """A store fast enough (4 GB/s) that only cheap chains cost less to recompute."""
    return JointBackend(
        budget,
        compute="eager",
        threshold=1024,
        write_bandwidth=4e9,
        read_bandwidth=4e9,
        outside=0,
    )


def test_recompute_chosen_for_a_cheap_chain() -> None:
    """An offloaded value cheaper to recompute than the store's write and read is recomputed
    in the backward instead: no longer saved, nothing of it written, gradients unchanged,
    and the budget (the keep-all step's fraction) still bounds the modelled peak."""
    model = _PreNorm()
    keep_all_backend = _joint(1.0)
    keep_all = _step(model, keep_all_backend)
    (first,) = keep_all_backend.plans
    before = tickets().stats()["put_bytes"]
    backend = _fast_store(0.8)
    grads = _step(model, backend)
    (plan,) = backend.plans
    assert plan.recomputes
    saved = {s.name for s in plan.saved}
    for r in plan.recomputes:
        assert r.name not in saved
        assert r.recompute_ns < r.io_ns
        assert r.name in plan.recomputed  # the backward computes it
    assert tickets().stats()["put_bytes"] - before == plan.offloaded_bytes
    assert plan.step_budget == int(0.8 * first.keep_all_step)  # the graphs by liveness
    assert first.keep_all_step <= first.saved_bytes + first.other_bytes
    # Met, or everything the store may take is offloaded (and the report says so).
    eligible = [s for s in plan.saved if s.eligible is None]
    assert plan.feasible or all(s.decision == "offload" for s in eligible)
    # The same ops on the same inputs in the eager runner: equal bit for bit.
    assert all(torch.equal(a, b) for a, b in zip(keep_all, grads, strict=True))
    report = backend.explain()
    assert all(f" {r.name} " in report and "recompute" in report for r in plan.recomputes)
    off = _fast_store(0.8)
    off.recompute = False
    _step(model, off)
    assert not off.plans[0].recomputes
    assert off.plans[0].offloaded_bytes > plan.offloaded_bytes


def test_random_ops_are_never_recomputed() -> None:
    """A chain with dropout is never recomputed (its RNG state is not replayed): dropout's
    outputs stay offloaded or kept, and the gradients equal keep-all's bit for bit."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x: torch.Tensor) -> torch.Tensor:
        return (x * 2) * (torch.rand_like(x) > 0.5) + 1

    gm = make_fx(f, tracing_mode="fake")(torch.randn(64, 64))
    out = next(n for n in gm.graph.nodes if n.op == "output").all_input_nodes[0]
    chain, why = joint_plan.recompute_chain(gm, out.name, set())
    assert chain == []
    assert why is not None
    assert "random op" in why
    model = _mlp()
    keep_all = _step(model, _joint(1.0))
    backend = _joint(0.25)
    grads = _step(model, backend)
    (plan,) = backend.plans
    for r in plan.recomputes:
        assert not any("dropout" in n or "rand" in n or "bernoulli" in n for n in r.chain)
    assert "rand" not in plan.code[1]
    assert "dropout(" not in plan.code[1]
    assert any("random op" in s.not_recomputed for s in plan.saved)
    assert "not recomputed: random op" in plan.explain()
    assert all(torch.equal(a, b) for a, b in zip(keep_all, grads, strict=True))


def test_recompute_is_placement_ir_that_round_trips(tmp_path: Path) -> None:
    backend = _fast_store(0.8)
    _step(_PreNorm(), backend)
    (plan,) = backend.plans
    assert plan.recomputes
    assert '"placement.recompute"' in plan.text
    path = tmp_path / "plan.mlir"
    path.write_text(plan.text)
    out = io.StringIO()
    with redirect_stdout(out):
        assert hector_opt([str(path)]) == 0
    again = Plan.from_ir(out.getvalue())
    for r in plan.recomputes:
        assert again.decisions[r.name] == "recompute"
    decided = {s.name: s.decision for s in plan.saved if s.eligible is None}
    assert {k: v for k, v in again.decisions.items() if k in decided} == decided


def test_inductor_compiles_the_recomputed_chains() -> None:
    """With Inductor, the recomputed chains are fused into the backward's kernels: gradients
    within float tolerance of keep-all's."""
    model = _PreNorm()
    keep_all = _step(model, _joint(1.0))
    # A budget in bytes the partition with recomputation meets (Inductor's decompositions
    # leave the backward more temporaries than the eager runner's graphs), a slow store.
    io = {"write_bandwidth": 3e8, "read_bandwidth": 3e8, "outside": 0}
    backend = JointBackend(900_000, compute="inductor", threshold=1024, **io)
    grads = _step(model, backend)
    (plan,) = backend.plans
    assert plan.recomputes
    assert not {r.name for r in plan.recomputes} & {s.name for s in plan.saved}
    for a, b in zip(keep_all, grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
