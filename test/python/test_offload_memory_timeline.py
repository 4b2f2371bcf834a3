"""Where a step's real peak is (``hector.offload.memory_timeline``) and the memory outside the
graphs that a compiled budget counts (``JointBackend(outside=...)``, ``plan(outside=...)``)."""

from __future__ import annotations

import pytest
import torch

from hector.offload import joint_ops, memory_timeline
from hector.offload.joint import JointBackend
from hector.offload.joint_plan import CostModel, SavedValue, plan

MIB = 1 << 20


def test_timeline_finds_the_interval_of_the_peak() -> None:
    """The kernel's high-water mark, reset at every mark, puts the peak between the marks
    around the allocation, and the resident size falls once it is freed."""
    timeline = memory_timeline.MemoryTimeline()
    timeline.start()
    if not timeline.exact:
        pytest.fail("/proc/self/clear_refs is not writable here: the timeline is not exact")
    timeline.begin_step()
    timeline.mark("before")
    big = torch.ones(64 * MIB // 4)  # 64 MiB, touched
    del big
    timeline.mark("allocated and freed")
    timeline.mark("after")
    top = timeline.peak(0)
    assert top is not None
    assert (top.start, top.end) == ("before", "allocated and freed")
    before, during, after = timeline.intervals[:3]
    assert during.peak_bytes - before.end_bytes >= 60 * MIB
    assert during.end_bytes < during.peak_bytes - 32 * MIB  # freed (a mapping of its own)
    assert after.peak_bytes < during.peak_bytes
    assert [r["to"] for r in timeline.to_records(0)] == [i.end for i in timeline.intervals]
    assert "allocated and freed" in timeline.report(0)
    # Each interval has its wall time.
    assert all(i.seconds > 0 for i in timeline.intervals[:3])
    assert [r["seconds"] for r in timeline.to_records(0)] == [i.seconds for i in timeline.intervals]


def test_runtime_calls_mark_the_active_timeline() -> None:
    """While a timeline is active, the budget path's runtime calls mark it (put, wait,
    prefetch, get, by ticket number); inactive, they mark nothing."""
    timeline = memory_timeline.MemoryTimeline()
    timeline.start()
    timeline.begin_step()
    memory_timeline.active(timeline)
    try:
        x = torch.randn(256, 256)
        handle = joint_ops.offload_wait(joint_ops.offload_put(x, "ssd"), x)
        meta = (list(x.shape), list(x.stride()), x.dtype, x.device)
        y = joint_ops.offload_get(joint_ops.offload_prefetch(handle, *meta), *meta)
    finally:
        memory_timeline.active(None)
    assert torch.equal(x, y)
    number = int(handle[0])
    labels = [i.end for i in timeline.intervals]
    assert labels == [
        f"put {number}",
        f"wait {number}",
        f"before prefetch {number}",
        f"before get {number}",
    ]
    memory_timeline.note("nothing active")
    assert len(timeline.intervals) == 4


def _saved(n: int = 16) -> list[SavedValue]:
    """``n`` offloadable saved values of 4 MiB, each worth the same to keep."""
    return [
        SavedValue(i, f"v{i}", (MIB,), (1,), torch.float32, 4 * MIB, None, 1e6, 1e6)
        for i in range(n)
    ]


COST = CostModel(5e10, 1e10, 1e9, 1e9)
IO = {"write_bandwidth": 1e9, "read_bandwidth": 1e9}


def test_memory_outside_the_graphs_counts_in_the_step() -> None:
    """``outside`` is part of the keep-all step and of the budget's step: at a fraction below
    1 the saved values get less the more the process holds outside the graphs, so the kept
    bytes fall as it grows; at 1.0 everything is still kept."""
    other, kept = 8 * MIB, []
    for outside in (0, 8 * MIB, 16 * MIB, 32 * MIB):
        made = plan(_saved(), 0.5, COST, "ssd", other=other, outside=outside)
        assert made.outside_bytes == outside
        assert made.step_budget == int(0.5 * (64 * MIB + other + outside))
        assert made.budget_bytes == max(made.step_budget - other - outside, 0)
        assert made.modelled_step_peak == made.modelled_peak + other + outside
        assert f"outside the graphs {outside}" in made.explain()
        kept.append(made.kept_bytes)
    assert kept == sorted(kept, reverse=True)
    assert kept[-1] < kept[0]
    whole = plan(_saved(), 1.0, COST, "ssd", other=other, outside=32 * MIB)
    assert whole.offloaded_bytes == 0


def test_backend_measures_the_outside_bytes_from_its_start() -> None:
    """By default the outside bytes are the process's resident growth since ``since`` (the
    backend's creation); given, they are taken as they are; negative ones are refused."""
    now = memory_timeline.resident_bytes()
    assert now > 0
    grown = JointBackend(0.5, since=now - 32 * MIB)
    assert grown.outside_bytes() >= 32 * MIB
    assert JointBackend(0.5, outside=5).outside_bytes() == 5
    with pytest.raises(ValueError, match="outside"):
        JointBackend(0.5, outside=-1)


def test_outside_bytes_show_in_the_placement_ir() -> None:
    """The decisions the outside bytes move are the ``placement`` IR's: more values offloaded
    (and fewer kept) in the plan's module as the process holds more outside the graphs."""
    alone = plan(_saved(), 0.5, COST, "ssd", other=8 * MIB)
    counted = plan(_saved(), 0.5, COST, "ssd", other=8 * MIB, outside=32 * MIB)
    assert counted.offloaded_bytes > alone.offloaded_bytes
    for made in (alone, counted):
        text = made.text
        assert text.count('"placement.offload"(') == len(made.offloaded())
        assert text.count('"placement.keep"(') == 16 - len(made.offloaded())
        assert 'placement.plan = "joint"' in text


def test_backward_peak_says_what_the_backward_holds_at_its_peak() -> None:
    """The backward's modelled peak is located at a node and split into the graph's outputs
    made so far (gradients), the saved values not yet consumed, and the rest."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from hector.offload.joint_plan import backward_peak

    def backward(incoming: torch.Tensor, saved: torch.Tensor, weight: torch.Tensor) -> object:
        a = incoming * saved  # the last use of ``incoming`` and ``saved``
        return a @ weight, a.sum(0)

    n = 64 * 64 * 4
    gm = make_fx(backward, tracing_mode="fake")(*(torch.randn(64, 64) for _ in range(3)))
    saved = next(x.name for x in gm.graph.nodes if x.name.startswith("saved"))
    peak = backward_peak(gm, {saved})
    assert (peak.node, peak.gradients, peak.saved, peak.other) == ("mul", 0, n, 3 * n)
    alone = backward_peak(gm, set())
    assert (alone.saved, alone.other, alone.total) == (0, 4 * n, 4 * n)


def test_explain_gives_the_backward_peak() -> None:
    """A budgeted compile's report says where its backward peaks and with what."""
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 8))
    backend = JointBackend(0.5, compute="eager", threshold=1024, outside=0, **IO)
    torch.compile(model, backend=backend)(torch.randn(128, 64)).sum().backward()
    (made,) = backend.plans
    assert made.backward is not None
    assert made.backward.gradients > 0
    assert f"the backward's modelled peak: {made.backward.total} bytes" in backend.explain()


def test_a_fraction_budget_is_taken_of_the_keep_all_step_by_liveness() -> None:
    """The keep-all step a fraction is taken of is the graphs' peak by liveness (each saved
    value until its last use): never above the saved bytes plus the other bytes (which count
    every saved value alive at the backward's peak), below it when the backward consumes
    saved values before its peak; the outside bytes are added to it."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    layers = [torch.nn.Linear(64, 64) for _ in range(6)]
    model = torch.nn.Sequential(*[m for layer in layers for m in (layer, torch.nn.Tanh())])
    backend = JointBackend(
        0.5, compute="eager", threshold=1024, outside=3 * MIB, recompute=False, **IO
    )
    torch.compile(model, backend=backend)(torch.randn(512, 64)).sum().backward()
    (made,) = backend.plans
    graphs = made.keep_all_step - made.outside_bytes
    assert graphs < made.saved_bytes + made.other_bytes
    assert graphs >= made.saved_bytes  # the forward holds them all at its end
    assert made.step_budget == int(0.5 * made.keep_all_step)
    assert made.budget_bytes == max(made.step_budget - made.other_bytes - 3 * MIB, 0)
    assert f"(keep-all {made.keep_all_step})" in made.explain()
