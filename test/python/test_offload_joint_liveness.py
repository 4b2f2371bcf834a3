"""The step's memory by liveness of the lowered graphs (``hector.offload.joint_liveness``):
a value read back is alive from its read (issued ahead of its first use) to its last use, so
reads that overlap the backward's own peak count there; the forward holds an offloaded value
until its write's wait; an offloaded view is put where its base is made; the planner fits
this modelled step, not the kept bytes alone, into the budget.

The graphs are built by hand (fake tensors: sizes only), so every figure is computed here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode

from hector.offload.joint_liveness import (
    MOST_AHEAD,
    NEAR,
    StepLiveness,
    hoist_view,
    made_after,
    prefetch_anchors,
    realize_points,
)
from hector.offload.joint_plan import CostModel, SavedValue, plan

MIB = 1 << 20
aten = torch.ops.aten


class _Builder:
    """An FX graph of aten ops on fake tensors (each node's ``val`` set)."""

    def __init__(self) -> None:
        self.graph = fx.Graph()
        self.mode = FakeTensorMode()

    def input(self, name: str, *shape: int, dtype: torch.dtype = torch.float32) -> fx.Node:
        node = self.graph.placeholder(name)
        with self.mode:
            node.meta["val"] = torch.empty(shape, dtype=dtype)
        return node

    def op(self, name: str, target: Callable[..., Any], *args: Any) -> fx.Node:
        node = self.graph.call_function(target, args)
        node.name = name
        vals = [a.meta["val"] if isinstance(a, fx.Node) else a for a in args]
        with self.mode:
            node.meta["val"] = target(*vals)
        return node

    def done(self, *outputs: fx.Node) -> fx.GraphModule:
        self.graph.output(tuple(outputs))
        return fx.GraphModule(torch.nn.Module(), self.graph)


def _backward(b_read_late: bool = False) -> fx.GraphModule:
    """Saved ``a`` (8 MiB) and ``b`` (1 MiB), the incoming gradient ``t`` (1 MiB): ``b`` is
    first read (before a 16 MiB temporary, or, ``b_read_late``, after it), then ``a``; both
    are last read near the end."""
    g = _Builder()
    a = g.input("a", 8, 256, 1024)
    b = g.input("b", 256, 1024)
    t = g.input("t", 256, 1024)
    g1 = g.op("g1", aten.mul.Tensor, t, t if b_read_late else b)
    big = g.op("big", aten.repeat.default, g1, [16, 1])
    v = g.op("v", aten.view.default, big, [16, 256, 1024])
    g2 = g.op("g2", aten.sum.dim_IntList, v, [0])
    if b_read_late:
        g2 = g.op("gb", aten.mul.Tensor, g2, b)
    g3 = g.op("g3", aten.mul.Tensor, g2, a)
    g4 = g.op("g4", aten.sum.dim_IntList, g3, [0])
    g5 = g.op("g5", aten.mul.Tensor, g4, b)
    g6 = g.op("g6", aten.mul.Tensor, a, g5)
    return g.done(g6)


def _forward() -> fx.GraphModule:
    """``x`` (the batch) -> ``a`` (8 MiB, last read by ``s``) and ``b`` (1 MiB), both
    saved; ``c`` (1 MiB) made after them, then the output."""
    g = _Builder()
    x = g.input("x", 256, 1024)
    e = g.op("e", aten.expand.default, x, [8, 256, 1024])
    a = g.op("a", aten.clone.default, e)
    g.op("s", aten.sum.default, a)
    b = g.op("b", aten.mul.Tensor, x, 2.0)
    c = g.op("c", aten.mul.Tensor, b, 3.0)
    out = g.op("out", aten.sum.default, c)
    return g.done(out, a, b)


def _liveness(bw: fx.GraphModule | None = None) -> StepLiveness:
    backward = _backward() if bw is None else bw
    return StepLiveness(
        _forward(), backward, {"a", "b"}, set(), [("a", 8 * MIB), ("b", MIB)], ahead=1
    )


def test_a_value_read_back_is_alive_from_its_read_to_its_last_use() -> None:
    bw = _backward()
    anchors = prefetch_anchors(bw, {"a", "b"}, ahead=1)
    # b is read first, so it is read as the backward starts; a at b's first use.
    assert anchors["b"].name == "g1"
    assert anchors["a"].name == "g1"
    live = _liveness()
    offloaded = live.backward_peak(["offload", "offload"])
    # At the 16 MiB temporary: g1 (1), big (16), and both values already read back (9).
    assert offloaded.node == "big"
    assert offloaded.total == 26 * MIB
    assert (offloaded.saved, offloaded.read_back) == (9 * MIB, 9 * MIB)
    # Read ahead of the peak, offloading them saves nothing there: keeping them holds the
    # same bytes at the same node.
    kept = live.backward_peak(["keep", "keep"])
    assert (kept.node, kept.total, kept.read_back) == ("big", 26 * MIB, 0)


def test_a_value_read_after_the_peak_is_not_alive_there() -> None:
    """Reads start one first use ahead: with ``b`` first read after the temporary, ``a``
    (read at ``b``'s first use) is not alive at it, and offloading ``a`` lowers the peak."""
    bw = _backward(b_read_late=True)
    anchors = prefetch_anchors(bw, {"a", "b"}, ahead=1)
    assert (anchors["b"].name, anchors["a"].name) == ("g1", "gb")
    live = _liveness(bw)
    offloaded = live.backward_peak(["offload", "offload"])
    assert (offloaded.node, offloaded.total, offloaded.read_back) == ("big", 18 * MIB, MIB)
    kept = live.backward_peak(["keep", "offload"])
    assert (kept.node, kept.total, kept.read_back) == ("big", 26 * MIB, MIB)


def _chain_of_reads() -> fx.GraphModule:
    """Saved ``s0`` .. ``s5`` (1 MiB each), read one after the other, each first read by
    ``u<k>`` and a node ``w<k>`` after it (the work between two reads)."""
    g = _Builder()
    saved = [g.input(f"s{k}", 256, 1024) for k in range(6)]
    x = g.input("t", 256, 1024)
    for k, s in enumerate(saved):
        x = g.op(f"u{k}", aten.mul.Tensor, x, s)
        x = g.op(f"w{k}", aten.mul.Tensor, x, 2.0)
    return g.done(x)


def test_a_read_is_issued_ahead_by_its_time() -> None:
    """A read one first use ahead has only ``w4`` to hide behind; given its time, it is
    issued where the nodes before its first use take as long, and never more than
    :data:`MOST_AHEAD` first uses ahead."""
    bw = _chain_of_reads()
    names = {f"s{k}" for k in range(6)}
    work = {f"w{k}": 1000.0 for k in range(6)}  # ns; the reads' nodes take none

    def node_ns(node: fx.Node) -> float:
        return work.get(node.name, 0.0)

    def anchor(lead: float) -> str:
        return prefetch_anchors(bw, names, 1, {"s5": lead}, node_ns)["s5"].name

    assert prefetch_anchors(bw, names, 1)["s5"].name == "u4"  # one first use ahead
    assert anchor(500.0) == "u4"  # w4 alone hides it
    assert anchor(1500.0) == "w3"  # w4 and w3 take 2000 ns
    assert anchor(2500.0) == "w2"
    assert MOST_AHEAD == 4
    assert anchor(1e9) == "u1"  # bound: the first use of s1, 4 first uses ahead
    # The others keep their anchors (no lead given for them).
    led = prefetch_anchors(bw, names, 1, {"s5": 1e9}, node_ns)
    assert [led[f"s{k}"].name for k in range(1, 5)] == ["u0", "u1", "u2", "u3"]


def test_a_read_issued_ahead_by_its_time_is_alive_from_there() -> None:
    """The liveness model reads as the lowering will: ``a``'s read, led past the 16 MiB
    temporary by its time, holds ``a`` there."""
    bw = _backward(b_read_late=True)
    slow = {"big": 1e6}

    def node_ns(node: fx.Node) -> float:
        return slow.get(node.name, 0.0)

    lead = {"a": 5e5, "b": 0.0}
    assert prefetch_anchors(bw, {"a", "b"}, 1, lead, node_ns)["a"].name == "big"
    live = StepLiveness(
        _forward(), bw, {"a", "b"}, set(), [("a", 8 * MIB), ("b", MIB)], 1, lead, node_ns
    )
    offloaded = live.backward_peak(["offload", "offload"])
    assert (offloaded.node, offloaded.total, offloaded.read_back) == ("big", 26 * MIB, 9 * MIB)


def test_the_forward_holds_an_offloaded_value_until_its_wait() -> None:
    live = _liveness()
    kept = live.forward_peak(["keep", "keep"])
    assert (kept.node, kept.total, kept.saved) == ("out", 10 * MIB + 4, 9 * MIB)
    # a's write is waited for where the next offloaded value, b, is made: a is gone by c.
    offloaded = live.forward_peak(["offload", "offload"])
    assert (offloaded.node, offloaded.total, offloaded.saved) == ("b", 9 * MIB, 9 * MIB)
    # The last offloaded value is waited for at the forward's end: held as if kept.
    assert live.forward_peak(["keep", "offload"]).total == kept.total


def test_an_offloaded_view_is_put_where_its_base_is_made() -> None:
    g = _Builder()
    x = g.input("x", 256, 1024)
    base = g.op("base", aten.mul.Tensor, x, 2.0)
    later = g.op("later", aten.mul.Tensor, x, 3.0)
    view = g.op("view", aten.t.default, base)  # left at the end, as the partitioner does
    fw = g.done(later, view)
    assert made_after(fw, view) is base
    hoist_view(fw, view)
    assert [n.name for n in fw.graph.nodes] == ["x", "base", "view", "later", "output"]
    fw.graph.lint()


@pytest.mark.parametrize("budget", [20 * MIB, 30 * MIB])
def test_the_plan_fits_the_step_by_liveness(budget: int) -> None:
    """The budget rule keeps a value only while the step's peak by liveness (read-backs
    included) fits; a budget below what offloading everything gives is not met."""
    values = [
        SavedValue(1, "a", (8, 256, 1024), (), torch.float32, 8 * MIB, None, 1e6, 1e6),
        SavedValue(2, "b", (256, 1024), (), torch.float32, MIB, None, 1e6, 1e6),
    ]
    cost = CostModel(5e10, 1e10, 1e9, 1e9)
    made = plan(values, budget, cost, "ssd", liveness=_liveness())
    assert made.step_peak is not None
    assert made.modelled_step_peak == made.step_peak.total
    if budget < 26 * MIB:  # the backward's peak holds 26 MiB whatever is decided
        assert not made.feasible
        assert "budget not met" in made.explain()
    else:
        assert made.feasible
        assert made.offloaded_bytes == 0  # keeping costs nothing at the peak
    assert "the step's modelled peak (liveness" in made.explain()


def test_an_op_read_far_later_is_materialized_where_it_stands() -> None:
    """A reduction of a value read back, read again only many nodes later (T5's position
    bias gradient), is materialized where it stands (``hector::offload_realize`` goes after
    it), so no later kernel reads the value; a matrix product is a library call already."""
    g = _Builder()
    v = g.input("v", 256, 1024)
    t = g.input("t", 256, 1024)
    m = g.op("m", aten.mul.Tensor, v, t)
    s = g.op("s", aten.sum.dim_IntList, m, [0])
    w = g.op("w", aten.mul.Tensor, s, 2.0)
    p = g.op("p", aten.mm.default, v, g.op("vt", aten.t.default, t))
    x = t
    for k in range(NEAR + 4):  # one block's backward between them
        x = g.op(f"f{k}", aten.mul.Tensor, x, 1.0)
    far = g.op("far", aten.add.Tensor, x, w)
    bw = g.done(far, p)
    points = realize_points(bw, [next(n for n in bw.graph.nodes if n.name == "v")])
    assert [n.name for n in points] == ["w"]


def test_an_op_as_large_as_the_value_is_not_materialized() -> None:
    """A pointwise op of a value read back, read again only many nodes later, is left to
    Inductor's fusion: materialized, it would hold as many bytes as the value it frees."""
    g = _Builder()
    v = g.input("v", 256, 1024)
    t = g.input("t", 256, 1024)
    w = g.op("w", aten.mul.Tensor, v, 2.0)
    x = t
    for k in range(NEAR + 4):
        x = g.op(f"f{k}", aten.mul.Tensor, x, 1.0)
    far = g.op("far", aten.add.Tensor, x, w)
    bw = g.done(far)
    assert realize_points(bw, [next(n for n in bw.graph.nodes if n.name == "v")]) == []


def test_inductor_materializes_and_trains_t5_as_keep_all() -> None:
    """T5 (tiny, the benchmark's build, dropout off) under a budget with Inductor: the
    backward materializes the position bias gradient's sums where they stand (the runtime
    call is in its code) and the gradients equal the keep-all compile's within float
    tolerance."""
    import torch._dynamo

    from hector.offload.joint import JointBackend
    from hector_bench.offload_compiled import _batch, _model

    cfg = {"model": "hf-t5", "layers": 1, "width": 32, "heads": 2, "seq": 16, "batch": 2}
    cfg["vocab"] = 64
    x, y = _batch(cfg)

    def grads(backend: object) -> list[torch.Tensor]:
        torch._dynamo.reset()
        net = _model(cfg).eval()  # no dropout: Inductor draws its own random numbers
        logits = torch.compile(net, backend=backend)(x).reshape(-1, cfg["vocab"])
        torch.nn.functional.cross_entropy(logits, y.reshape(-1)).backward()
        return [p.grad for p in net.parameters() if p.grad is not None]

    keep_all = grads("aot_eager")
    io = {"write_bandwidth": 1e9, "read_bandwidth": 1e9, "outside": 0}
    backend = JointBackend(0.25, compute="inductor", threshold=1024, **io)
    got = grads(backend)
    (plan,) = backend.plans
    assert plan.offloaded_bytes > 0
    assert "torch.ops.hector.offload_realize.default(" in plan.code[1]
    assert len(got) == len(keep_all) > 0
    for a, b in zip(keep_all, got, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
