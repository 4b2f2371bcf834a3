"""``hector_bench.memory_trace``: one training step traced at every scope boundary."""

from __future__ import annotations

import torch
from torch import nn

from hector_bench.memory_trace import MIB, trace_step


class _Holder(nn.Module):
    """A scope whose forward allocates a block that the step keeps until it ends."""

    def __init__(self, keep: list[torch.Tensor], mib: int) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.keep = keep
        self.mib = mib

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mib:
            block = torch.empty(self.mib * MIB, dtype=torch.uint8)
            block.fill_(1)  # touched: resident and in use
            self.keep.append(block)
        return self.lin(x)


def _model(mib: int) -> tuple[nn.Module, list[tuple[str, nn.Module]], list[torch.Tensor]]:
    keep: list[torch.Tensor] = []
    a, b = _Holder(keep, 0), _Holder(keep, mib)
    return nn.Sequential(a, b), [("a", a), ("b", b)], keep


def test_every_scope_boundary_is_marked_in_step_order():
    model, scopes, _ = _model(0)

    def step(i: int) -> None:
        model(torch.randn(4, 8)).sum().backward()

    trace = trace_step(model, scopes, step)
    events = [row[0] for row in trace["events"]]
    assert events == ["forward a", "forward b", "forward", "backward b", "backward a", "step end"]
    assert trace["peak"] in trace["events"]
    for _, hwm, rss, heap in trace["events"]:
        assert isinstance(rss, float)
        assert hwm is None or hwm >= rss - 0.1  # the high-water mark is never below resident
        assert heap is None or isinstance(heap, float)


def test_memory_the_step_holds_shows_as_heap_in_use_and_at_the_peak():
    model, scopes, keep = _model(48)

    def step(i: int) -> None:
        model(torch.randn(4, 8)).sum().backward()

    trace = trace_step(model, scopes, step)
    rows = {row[0]: row for row in trace["events"]}
    assert rows["forward a"][3] is not None
    assert rows["forward b"][3] - rows["forward a"][3] >= 47  # the 48 MiB block, held
    assert rows["forward b"][2] - rows["forward a"][2] >= 47  # and resident
    assert trace["peak"][1] >= 47
    keep.clear()


def test_hooks_are_removed_after_the_step_even_when_it_fails():
    model, scopes, _ = _model(0)

    def step(i: int) -> None:
        model(torch.randn(4, 8))
        raise ValueError("boom")

    try:
        trace_step(model, scopes, step)
    except ValueError:
        pass
    assert not model._forward_hooks
    assert all(not m._forward_hooks for _, m in scopes)
    for p in model.parameters():
        assert not p._post_accumulate_grad_hooks  # no mark left on the parameters either
