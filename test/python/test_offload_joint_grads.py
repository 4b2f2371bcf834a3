"""The parameters' gradients under a budgeted compile with the optimizer given
(``JointBackend(memory_budget, optimizer=opt)``, :mod:`hector.offload.joint_grads`): each
parameter is stepped inside the compiled backward and its gradient freed there; the parameters
after N steps equal the keep-all compile's (the optimizer run after the backward) bit for bit;
the budget's keep-all step still holds every gradient while the plan's step frees them as
they are stepped; misuse is refused.

Compute on AOTAutograd's eager runner except in one test (Inductor): the partitioning,
planning and lowering are the same.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch._dynamo
from torch import nn
from torch._dynamo.utils import counters

from hector.offload.joint import JointBackend
from hector.offload.joint_grads import GradientStepError, OptimizerInBackward
from hector.offload.joint_ops import tickets

BANDWIDTH = {"write_bandwidth": 1e9, "read_bandwidth": 1e9, "outside": 0}
Make = Callable[[list[nn.Parameter]], torch.optim.Optimizer]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(64, 256),
        nn.LayerNorm(256),
        nn.GELU(),
        nn.Dropout(0.1),
        nn.Linear(256, 256),
        nn.ReLU(),
        nn.Linear(256, 8),
    )


def _train(
    make: Make, budget: float | None, in_backward: bool, compute: str = "eager", steps: int = 3
) -> tuple[list[torch.Tensor], JointBackend | None, nn.Module]:
    """``steps`` compiled training steps (the learning rate changed between steps, as a
    scheduler would); the parameters after them."""
    torch._dynamo.reset()
    model = _model()
    opt = make(list(model.parameters()))
    backend = None
    if budget is None:  # the keep-all compile: every gradient returned, then the optimizer
        compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    else:
        given = opt if in_backward else None
        backend = JointBackend(
            budget, compute=compute, threshold=1024, optimizer=given, **BANDWIDTH
        )
        compiled = torch.compile(model, backend=backend, fullgraph=True)
    torch.manual_seed(1)
    for k in range(steps):
        opt.zero_grad(set_to_none=True)
        compiled(torch.randn(128, 64)).square().sum().backward()
        opt.step()
        opt.param_groups[0]["lr"] *= 0.5 + 0.25 * k
    return [p.detach().clone() for p in model.parameters()], backend, model


OPTIMIZERS: dict[str, Make] = {
    "sgd-momentum": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-3),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_in_backward_trains_bit_identical_to_keep_all(name: str) -> None:
    make = OPTIMIZERS[name]
    keep_all, _, _ = _train(make, None, False)
    before = tickets().stats()["put_bytes"]
    params, backend, model = _train(make, 0.25, True)
    assert backend is not None
    (plan,) = backend.plans
    assert plan.offloaded_bytes > 0  # saved values offloaded too, dropout included
    assert tickets().stats()["put_bytes"] > before
    assert len(plan.gradient_steps) == len(keep_all)
    assert all(torch.equal(a, b) for a, b in zip(keep_all, params, strict=True))
    assert all(p.grad is None for p in model.parameters())  # consumed in the backward
    assert tickets().stats()["outstanding"] == 0


def test_stepped_gradients_leave_the_graph_and_the_budget_counts_them() -> None:
    sgd: Make = OPTIMIZERS["sgd-momentum"]
    _, returned, _ = _train(sgd, 0.75, False, steps=1)
    _, stepped, _ = _train(sgd, 0.75, True, steps=1)
    assert returned is not None
    assert stepped is not None
    (a,), (b,) = returned.plans, stepped.plans
    grads = sum(p.numel() * 4 for p in _model().parameters())
    assert sum(g.nbytes for g in b.gradient_steps) == grads
    assert not a.gradient_steps
    # The fraction is of the keep-all step (every gradient held): the same with or without.
    assert a.keep_all_step == b.keep_all_step
    assert a.step_budget == b.step_budget
    # The plan counts every gradient as held to the backward's end (the freed gradients are a
    # margin the saved values are not given): the same other bytes, budget and decisions ...
    assert b.other_bytes == a.other_bytes
    assert b.budget_bytes == a.budget_bytes
    assert [s.decision for s in b.saved] == [s.decision for s in a.saved]
    # ... while the backward itself frees each gradient where it is stepped.
    assert b.backward is not None
    assert a.backward is not None
    assert a.backward.gradients > 0
    assert b.backward.gradients == 0
    assert b.backward.total < a.backward.total
    backward = b.code[1]
    assert backward.count("torch.ops.hector.step_parameter.default(") == len(b.gradient_steps)
    assert "return (None, None" in backward.replace("\n", "")
    assert "parameters stepped in the backward: 8" in stepped.explain()


def test_a_parameter_changes_only_after_its_last_read_in_the_backward() -> None:
    """The first layer's weight is read by the backward (the input's gradient); stepping it
    before that read would change the input's gradient."""
    torch._dynamo.reset()
    model = nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4))
    x = torch.randn(8, 16, requires_grad=True)
    reference = model(x).square().sum()
    (expected,) = torch.autograd.grad(reference, x)
    opt = torch.optim.SGD(model.parameters(), lr=10.0)  # a step that would show
    backend = JointBackend(1.0, compute="eager", threshold=1024, optimizer=opt, **BANDWIDTH)
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    compiled(x).square().sum().backward()
    assert x.grad is not None
    assert torch.equal(x.grad, expected)
    assert len(backend.plans[0].gradient_steps) == 4


def test_inductor_steps_in_the_backward_bit_identical_to_keep_all() -> None:
    sgd: Make = OPTIMIZERS["sgd-momentum"]
    counters.clear()
    keep_all, _, _ = _train(sgd, 1.0, False, compute="inductor", steps=2)
    params, backend, _ = _train(sgd, 0.25, True, compute="inductor", steps=2)
    assert not counters["graph_break"]
    assert backend is not None
    assert len(backend.plans[0].gradient_steps) == 8
    assert all(torch.equal(a, b) for a, b in zip(keep_all, params, strict=True))


def test_a_second_backward_before_the_optimizer_step_is_refused() -> None:
    torch._dynamo.reset()
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    backend = JointBackend(1.0, compute="eager", threshold=1024, optimizer=opt, **BANDWIDTH)
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    compiled(torch.randn(4, 64)).sum().backward()
    with pytest.raises(GradientStepError, match="stepped twice in one optimizer step"):
        compiled(torch.randn(4, 64)).sum().backward()
    # The aborted backward read none of its offloaded values back: they stay in the store
    # until forgotten, as the docs say (later tests count the outstanding tickets).
    assert tickets().stats()["outstanding"] > 0
    tickets().clear()
    assert tickets().stats()["outstanding"] == 0


def test_a_parameter_holding_a_gradient_gets_the_new_one_accumulated_first() -> None:
    p = nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([p], lr=1.0)
    owner = OptimizerInBackward(opt)
    (slot,) = owner.slots([p])
    assert slot is not None
    p.grad = torch.full((3,), 2.0)
    owner.step(slot, torch.full((3,), 0.5))
    assert torch.equal(p.detach(), torch.full((3,), -1.5))
    assert p.grad is None
    assert owner.slots([torch.ones(2), nn.Parameter(torch.ones(2))]) == [None, None]


def test_bad_optimizer_is_refused() -> None:
    with pytest.raises(TypeError, match="torch.optim.Optimizer"):
        JointBackend(0.5, optimizer=object())  # type: ignore[arg-type]


@pytest.mark.parametrize("model", ["hf-gpt2", "hf-llama", "hf-bert", "hf-t5", "hf-vit"])
def test_models_users_bring_step_in_the_backward_bit_identical(model: str) -> None:
    """The benchmark's Hugging Face models (tied embeddings included: one parameter, one
    gradient), tiny: parameters after two steps with the optimizer in the backward equal the
    keep-all compile's, no graph break, no recompile."""
    from hector_bench.offload_compiled import _batch, _model

    cfg = {"model": model, "layers": 1, "width": 32, "heads": 2, "seq": 16, "batch": 2}
    cfg["vocab"] = 64
    x, y = _batch(cfg)

    def train(in_backward: bool) -> list[torch.Tensor]:
        torch._dynamo.reset()
        counters.clear()
        net = _model(cfg)
        opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
        backend: object = "aot_eager"
        if in_backward:
            backend = JointBackend(
                0.25, compute="eager", threshold=1024, optimizer=opt, **BANDWIDTH
            )
        compiled = torch.compile(net, backend=backend, fullgraph=True)
        torch.manual_seed(1)
        for _ in range(2):
            opt.zero_grad(set_to_none=True)
            logits = compiled(x).reshape(-1, cfg["vocab"])
            torch.nn.functional.cross_entropy(logits, y.reshape(-1)).backward()
            opt.step()
        assert not counters["graph_break"]
        assert not counters["recompiles"]
        return [p.detach().clone() for p in net.parameters()]

    keep_all = train(False)
    stepped = train(True)
    assert len(stepped) == len(keep_all) > 0
    assert all(torch.equal(a, b) for a, b in zip(keep_all, stepped, strict=True))


def test_bench_opt_system_gives_the_optimizer_to_the_backend() -> None:
    from hector_bench.offload_compiled import SYSTEMS, compile_system

    assert "hector-0.5-opt" in SYSTEMS
    model = nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _, backend = compile_system("hector-0.5-opt", model, optimizer=opt)
    assert backend.joint.memory_budget == 0.5
    assert backend.joint.in_backward.optimizer is opt


def test_the_store_waits_are_counted() -> None:
    """``tickets().stats()`` has the seconds the graphs were blocked on the store's writes and
    reads (what ``hector bench offload-compiled`` reports per step)."""
    stats = tickets().stats()
    before = stats["write_wait_s"], stats["read_wait_s"]
    _train(OPTIMIZERS["sgd-momentum"], 0.25, True, steps=1)
    stats = tickets().stats()
    assert stats["write_wait_s"] >= before[0]
    assert stats["read_wait_s"] >= before[1]
    assert tickets().got_bytes > 0


def test_the_hector_backend_takes_the_optimizer_as_an_option() -> None:
    """``torch.compile(m, backend="hector", options={"memory_budget": ..., "optimizer": opt})``
    steps each parameter inside the backward, as ``JointBackend(..., optimizer=opt)`` does."""
    from hector.dynamo.backend import HectorBackend

    make = OPTIMIZERS["adamw"]
    keep_all, _, _ = _train(make, None, False)
    torch._dynamo.reset()
    model = _model()
    opt = make(list(model.parameters()))
    backend = HectorBackend(memory_budget=0.5, compute="eager", optimizer=opt)
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    torch.manual_seed(1)
    for k in range(3):
        opt.zero_grad(set_to_none=True)
        compiled(torch.randn(128, 64)).square().sum().backward()
        opt.step()
        opt.param_groups[0]["lr"] *= 0.5 + 0.25 * k
    assert backend.joint is not None
    (plan,) = backend.joint.plans
    assert len(plan.gradient_steps) == len(keep_all)
    params = [p.detach() for p in model.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(keep_all, params, strict=True))
    assert all(p.grad is None for p in model.parameters())
