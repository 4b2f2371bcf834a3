"""Compile a model with a memory budget: placement decided per saved value inside the graph.

``torch.compile(model, backend="hector", options={"memory_budget": 0.5})`` (or
``backend=JointBackend(memory_budget=0.5)``) compiles each Dynamo graph through AOTAutograd
with Hector's partitioner:

1. AOTAutograd's min-cut partitioner splits the joint forward/backward graph (with its own
   recomputation of cheap ops, as in any compile; Inductor's joint-graph passes first);
2. :mod:`.joint_plan` lists the forward graph's saved outputs, models the bytes the step
   holds besides them (:func:`~.joint_plan.other_bytes`: the two graphs' temporaries, incoming
   and outgoing gradients; and the process's resident growth since the backend was made, the
   compile's residue outside the graphs: :meth:`JointBackend.outside_bytes`) and decides
   keep or offload for each saved value so the step's modelled memory fits the budget (the
   eager planner's budget rule on estimated node costs and the store's measured
   bandwidths; the step modelled both by adding up kept values and other bytes and by
   liveness of the lowered graphs, :mod:`.joint_liveness`), written as ``placement`` IR;
3. the decisions are lowered into the two FX graphs as runtime calls (:mod:`.joint_ops`):
   in the forward, an offloaded value is handed to ``hector::offload_put`` right after the
   node producing it, ``hector::offload_wait`` waits for its write where the next offloaded
   value is produced (the graph holds the value until then; that value is the wait's operand,
   so the write overlaps its compute), and the forward returns the wait's handle in its
   place; in the backward,
   ``hector::offload_prefetch`` is issued at the first use of the saved value ``ahead``
   places before it (in the backward's order of first uses), earlier where the value's read
   at the store's bandwidth takes longer than the nodes in between (up to
   :data:`~.joint_liveness.MOST_AHEAD` first uses ahead), and ``hector::offload_get``
   right before its own first use, and ``hector::offload_realize`` materializes an op
   computed from a value read back that a far later node reads
   (:func:`~.joint_liveness.realize_points`);
4. Inductor (``compute="inductor"``, the default) or AOTAutograd's eager runner
   (``compute="eager"``) compiles the compute around the opaque ops.

Between 2 and 3, an offloaded value whose chain of forward ops from saved values and the
graph's inputs costs less (estimated) than the store's write and read of its bytes is
recomputed instead (:func:`~.joint_plan.choose_recompute`; ``recompute=False`` turns this
off): its chain's nodes are marked ``CheckpointPolicy.MUST_RECOMPUTE`` in the joint graph, as
selective activation checkpointing marks them, the partitioner runs again, and the saved
values of that partition are planned within the first plan's step budget (bytes). The first
partition stays if the new one's modelled step peak is higher (the backward's recomputation
holding more than the store saves). A chain with a random op (``nondeterministic_seeded``,
dropout, ``rand*``) or an op with effects is never recomputed, so random ops run once, in the
forward: gradients equal the keep-all compile's bit for bit where the compute runs the same
ops in the same order (the eager runner), within float tolerance where Inductor fuses the
recomputed ops differently.
:attr:`JointBackend.plans` keeps each graph's :class:`~.joint_plan.JointPlan`;
:meth:`JointBackend.explain` prints what each saved value got and why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import fx
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._inductor.custom_graph_pass import CustomPartitionerFn

from . import joint_ops, memory_timeline
from .host_policy import CachingAllocatorReuse, UnmapLargeBlocks, resolve_host_policy
from .joint_grads import GradientStep, OptimizerInBackward, lower_gradient_steps
from .joint_liveness import StepLiveness, hoist_view, prefetch_anchors, realize_points
from .joint_plan import (
    NOT_ACTIVATIONS,
    CostModel,
    JointPlan,
    Recompute,
    SavedValue,
    backward_peak,
    choose_recompute,
    keep_all_bytes,
    other_bytes,
    plan,
    saved_values,
)

__all__ = ["COMPUTE", "JointBackend", "lower_plan", "read_lead", "reuse_freed_memory"]

#: How the compute of a planned graph is compiled.
COMPUTE = ("inductor", "eager")


def _device_of(gm: fx.GraphModule) -> torch.device:
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            return val.device
    return torch.device("cpu")


def _fake(op: Any, *args: Any) -> Any:
    """The fake result of ``op(*args)`` in the fake mode of the graph values ``args``."""
    from torch._guards import detect_fake_mode

    vals = [a.meta["val"] if isinstance(a, fx.Node) else a for a in args]
    mode = detect_fake_mode([v for v in vals if isinstance(v, torch.Tensor)])
    if mode is None:
        return op(*vals)
    with mode:
        return op(*vals)


def reuse_freed_memory() -> None:
    """Make the memory a CPU step frees reusable without faults and without staying resident
    in glibc's heap: Hector's caching CPU allocator serves the process's large blocks (as the
    eager cache's ``release_memory="auto"`` installs it), so the next block of a size (the
    next step's activations, the values read back) lands in memory a freed one left, already
    resident. Where it does not serve (``$HECTOR_CPU_ALLOCATOR=pytorch``, or it cannot be
    built here: warned), glibc's mmap threshold is fixed instead: large blocks unmapped when
    freed, each fresh page of every large block faulting in again."""
    policy, _ = resolve_host_policy("auto", offloads=True, module=None)
    if not isinstance(policy, CachingAllocatorReuse):
        UnmapLargeBlocks().prepare_process()


def _first_uses(bw: fx.GraphModule, names: set[str]) -> dict[str, fx.Node]:
    """The first backward node reading each placeholder of ``names``."""
    first: dict[str, fx.Node] = {}
    for node in bw.graph.nodes:
        for a in node.all_input_nodes:
            if a.op == "placeholder" and a.name in names and a.name not in first:
                first[a.name] = node
    return first


def lower_plan(
    fw: fx.GraphModule, bw: fx.GraphModule, num_fwd_outputs: int, joint: JointPlan, ahead: int
) -> None:
    """Rewrite ``fw`` and ``bw`` so each value ``joint`` offloads goes through the runtime
    ops: put after it is produced (a view moved up to right after its operands first:
    :func:`~.joint_liveness.hoist_view`), wait for the write where the next one is put (or
    at the forward's end), prefetch ``ahead`` first uses early, get before its first use."""
    offloaded = joint.offloaded()
    if not offloaded:
        return
    out_node = next(n for n in fw.graph.nodes if n.op == "output")
    outs = list(out_node.args[0])
    put_op, wait_op = torch.ops.hector.offload_put.default, torch.ops.hector.offload_wait.default
    puts: list[tuple[fx.Node, fx.Node, int]] = []
    for s in offloaded:
        node = outs[num_fwd_outputs + s.index]
        hoist_view(fw, node)  # a view is put where its base is made, not where it was left
        with fw.graph.inserting_after(node):
            put = fw.graph.call_function(put_op, (node, joint.target))
        put.meta["val"] = _fake(put_op, node, joint.target)
        puts.append((node, put, num_fwd_outputs + s.index))
    order = {n: i for i, n in enumerate(fw.graph.nodes)}
    puts.sort(key=lambda p: order[p[1]])
    joint.put_order = [p[0].name for p in puts]
    last = _last_value(fw, {p[1] for p in puts})
    for k, (node, put, slot) in enumerate(puts):
        # The write may read ``node`` until the next offloaded value is produced; that value
        # (or the forward's last) is an operand, so the wait cannot move up to the put.
        anchor = puts[k + 1][1] if k + 1 < len(puts) else out_node
        after = puts[k + 1][0] if k + 1 < len(puts) else last
        with fw.graph.inserting_before(anchor):
            wait = fw.graph.call_function(wait_op, (put, node, after))
        wait.meta["val"] = _fake(wait_op, put, node, after)
        outs[slot] = wait
    out_node.args = (tuple(outs),)
    _lower_backward(bw, offloaded, joint.saved, ahead, joint.cost)
    fw.recompile()
    bw.recompile()


def _last_value(fw: fx.GraphModule, puts: set[fx.Node]) -> fx.Node | None:
    """The forward's last computed tensor, not one of the offload ops (None if none)."""
    for node in reversed(fw.graph.nodes):
        if node.op == "call_function" and node not in puts:
            if isinstance(node.meta.get("val"), torch.Tensor):
                return node
    return None


def _lower_backward(
    bw: fx.GraphModule,
    offloaded: list[SavedValue],
    saved: list[SavedValue],
    ahead: int,
    cost: CostModel,
) -> None:
    placeholders = {n.name: n for n in bw.graph.nodes if n.op == "placeholder"}
    names = {s.name for s in saved}
    first = _first_uses(bw, names)
    # Where the plan's liveness reads them (each read led by its time at the store's bandwidth).
    anchors = prefetch_anchors(bw, names, ahead, read_lead(saved, cost), cost.node_ns)
    gets: list[fx.Node] = []
    for s in offloaded:
        ph = placeholders.get(s.name)
        if ph is None or s.name not in first:
            continue
        device = ph.meta["val"].device
        meta = (list(s.shape), list(s.stride), s.dtype, device)
        ph.meta["val"] = _fake(torch.ops.hector.offload_put.default, ph, "ssd")
        with bw.graph.inserting_before(anchors[s.name]):
            pre = bw.graph.call_function(torch.ops.hector.offload_prefetch.default, (ph, *meta))
        pre.meta["val"] = _fake(torch.ops.hector.offload_prefetch.default, ph, *meta)
        with bw.graph.inserting_before(first[s.name]):
            get = bw.graph.call_function(torch.ops.hector.offload_get.default, (pre, *meta))
        get.meta["val"] = _fake(torch.ops.hector.offload_get.default, pre, *meta)
        ph.replace_all_uses_with(get, delete_user_cb=lambda user, p=pre: user is not p)
        gets.append(get)
    realize = torch.ops.hector.offload_realize.default
    for node in realize_points(bw, gets):
        with bw.graph.inserting_after(node):
            call = bw.graph.call_function(realize, (node,))
        call.meta["val"] = None


def read_lead(saved: Sequence[SavedValue], cost: CostModel) -> dict[str, float]:
    """Each saved value the store may take: the time (ns) its read takes at ``cost``'s read
    bandwidth, which its prefetch is issued ahead of its first use by
    (:func:`~.joint_liveness.prefetch_anchors`)."""
    return {s.name: s.nbytes * 1e9 / cost.read_bandwidth for s in saved if s.eligible is None}


def _liveness(
    fw: fx.GraphModule,
    bw: fx.GraphModule,
    saved: Sequence[SavedValue],
    ahead: int,
    cost: CostModel,
) -> StepLiveness:
    """The step's liveness model of the partition ``fw``/``bw`` for its saved values'
    decisions (:class:`~.joint_liveness.StepLiveness`), reads issued as they will be lowered."""
    return StepLiveness(
        fw,
        bw,
        {s.name for s in saved},
        {s.name for s in saved if s.eligible in NOT_ACTIVATIONS},
        [(s.name, s.nbytes) for s in saved if s.eligible is None],
        ahead,
        read_lead(saved, cost),
        cost.node_ns,
    )


def _recomputed(fw: fx.GraphModule, bw: fx.GraphModule) -> list[str]:
    """Forward nodes the backward also computes (the partitioner's recomputation)."""
    forward = {n.name for n in fw.graph.nodes if n.op == "call_function"}
    return [n.name for n in bw.graph.nodes if n.op == "call_function" and n.name in forward]


class _Partitioner(CustomPartitionerFn):
    """Min-cut partition, then plan and lower the saved values (one :class:`JointPlan` per
    graph, appended to ``plans``)."""

    def __init__(self, backend: JointBackend, slots: list[int | None] | None = None) -> None:
        self.backend = backend
        self.slots = slots  # the graph inputs' parameter slots (optimizer in backward)

    def __call__(
        self, gm: fx.GraphModule, joint_inputs: Sequence[object], **kwargs: Any
    ) -> tuple[fx.GraphModule, fx.GraphModule]:
        """Partition ``gm`` and lower the plan of its saved values into the two graphs."""
        kwargs.setdefault("compiler", "inductor")
        fw, bw = min_cut_rematerialization_partition(gm, joint_inputs, **kwargs)
        b = self.backend
        n_out = int(kwargs["num_fwd_outputs"])
        device = _device_of(fw)
        if device.type == "cpu":
            reuse_freed_memory()
        cost = CostModel.for_device(device, b.write_bandwidth, b.read_bandwidth)
        target = "pinned_host" if device.type == "cuda" else "ssd"
        saved = saved_values(fw, bw, n_out, cost, b.threshold)
        total = sum(s.nbytes for s in saved if s.eligible not in NOT_ACTIVATIONS)
        # The step as planned holds every gradient to the backward's end, as keep-all's does
        # (gradients stepped in the backward are freed earlier: a margin the saved values are
        # not given), and is modelled by liveness of the graphs as lowered too (values read
        # back alive from their read to their last use): the plan fits both.
        other = other_bytes(fw, bw, saved)
        graphs = min(keep_all_bytes(fw, bw, saved), total + other)
        steps = self._step_gradients(gm, fw, bw)
        outside = b.outside_bytes()
        live = _liveness(fw, bw, saved, b.ahead, cost)
        joint = plan(saved, b.memory_budget, cost, target, b.ahead, other, outside, graphs, live)
        joint.gradient_steps = steps
        chosen = choose_recompute(fw, joint) if b.recompute else []
        if chosen:
            again = self._repartition(gm, joint_inputs, kwargs, joint, chosen)
            peak = again[2].modelled_step_peak
            if peak <= max(joint.step_budget, joint.modelled_step_peak):
                fw, bw, joint = again
            else:  # the backward's recomputation would hold more than the store saves
                for s in joint.offloaded():
                    if any(r.name == s.name for r in chosen):
                        s.not_recomputed = f"recomputing raised the modelled step peak to {peak}"
        joint.recomputed = _recomputed(fw, bw)
        params = frozenset(s.name for s in joint.saved if s.eligible in NOT_ACTIVATIONS)
        joint.backward = backward_peak(bw, {s.name for s in joint.saved}, ignore=params)
        lower_plan(fw, bw, n_out, joint, b.ahead)
        joint.code = (fw.code, bw.code)
        b.plans.append(joint)
        return fw, bw

    def _repartition(
        self,
        gm: fx.GraphModule,
        joint_inputs: Sequence[object],
        kwargs: dict[str, Any],
        first: JointPlan,
        chosen: list[Recompute],
    ) -> tuple[fx.GraphModule, fx.GraphModule, JointPlan]:
        """Partition ``gm`` again with the ``chosen`` values' chains marked to recompute (as
        selective activation checkpointing marks them) and plan the saved values of that
        partition within ``first``'s step budget (bytes: the keep-all step's fraction)."""
        from torch.utils.checkpoint import CheckpointPolicy

        marked = {name for r in chosen for name in r.chain}
        for node in gm.graph.nodes:
            if node.name in marked:
                node.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
        fw, bw = min_cut_rematerialization_partition(gm, joint_inputs, **kwargs)
        b, n_out = self.backend, int(kwargs["num_fwd_outputs"])
        saved = saved_values(fw, bw, n_out, first.cost, b.threshold)
        names = {s.name for s in saved}
        other = other_bytes(fw, bw, saved)  # every gradient held, as in the first plan
        steps = self._step_gradients(gm, fw, bw)
        step = float(max(first.step_budget, 2))
        live = _liveness(fw, bw, saved, b.ahead, first.cost)
        joint = plan(
            saved, step, first.cost, first.target, b.ahead, other, first.outside_bytes, None, live
        )
        joint.recomputes = [r for r in chosen if r.name not in names]
        joint.gradient_steps = steps
        weighed = {v.name: v for v in first.saved}
        for v in joint.offloaded():  # the first plan's reasons (one round of recomputation)
            was = weighed.get(v.name)
            if was is not None:
                v.recompute_ns, v.not_recomputed = was.recompute_ns, was.not_recomputed
        return fw, bw, joint

    def _step_gradients(
        self, gm: fx.GraphModule, fw: fx.GraphModule, bw: fx.GraphModule
    ) -> list[GradientStep]:
        """With the optimizer given, each parameter's gradient in ``bw`` lowered to a step of
        its parameter (:func:`~.joint_grads.lower_gradient_steps`); else nothing."""
        owner, slots = self.backend.in_backward, self.slots
        if owner is None or slots is None:
            return []
        primals = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        primals = [name for name in primals if name.startswith("primals")]
        return lower_gradient_steps(fw, bw, primals, slots, owner)

    def __deepcopy__(self, memo: dict[int, Any]) -> _Partitioner:
        """Itself: Inductor deep-copies its config (this partitioner is in it) into a cache it
        keeps, which would copy the backend and what it references (the optimizer given, so
        every parameter) for as long as the process runs."""
        return self

    def uuid(self) -> Any | None:
        """None: never cache (a plan depends on the budget and the measured bandwidths)."""
        return None


class JointBackend:
    """A Dynamo backend planning each graph's saved values under ``memory_budget``.

    Args:
        memory_budget: the memory a step may hold, as the graphs model it (saved values and
            :func:`~.joint_plan.other_bytes`): a fraction of the keep-all step's (a float in
            (0, 1]) or bytes (an int above 1).
        compute: ``"inductor"`` (default) or ``"eager"`` (AOTAutograd's graphs run by the
            FX interpreter: fast to compile, for tests and debugging).
        threshold: saved values under this many bytes are always kept (default 64 KiB).
        ahead: how many saved values (in the backward's order of first use) before its own
            a value's read starts.
        write_bandwidth, read_bandwidth: the offload tier's bytes/s for the planner (None:
            on CPU the store's, from Hector's private cache or measured once and kept there
            (:func:`~.joint_plan.store_bandwidth`); on CUDA measured once per process).
        recompute: whether an offloaded value that costs less to recompute than the store's
            write and read of its bytes is recomputed in the backward instead
            (:func:`~.joint_plan.choose_recompute`; never through a random op).
        outside: the bytes the step holds outside the graphs, counted in the step and its
            budget (:attr:`~.joint_plan.JointPlan.outside_bytes`). None (default): measured
            as each graph is planned, the process's resident growth since ``since`` — the
            compile's residue so far (the compiler's modules and state, the traced graphs),
            which the keep-all compile holds as well; 0: the graphs' memory alone.
        since: the resident bytes ``outside`` is measured from (None: the process's when
            this backend is made).
        optimizer: the training's ``torch.optim.Optimizer``, to step each parameter inside
            the compiled backward as its gradient is complete, the gradient then freed
            (:mod:`.joint_grads`), so the gradients are not all alive at the backward's end;
            the loop stays as it is (``optimizer.step()`` finds those gradients None). None
            (default): the backward returns the gradients, autograd accumulates them.
    """

    def __init__(
        self,
        memory_budget: float,
        *,
        compute: str = "inductor",
        threshold: int = 64 << 10,
        ahead: int = 1,
        write_bandwidth: float | None = None,
        read_bandwidth: float | None = None,
        recompute: bool = True,
        outside: int | None = None,
        since: int | None = None,
        optimizer: torch.optim.Optimizer | None = None,
    ) -> None:
        if isinstance(memory_budget, bool) or not isinstance(memory_budget, int | float):
            raise TypeError(f"memory_budget must be a number, got {memory_budget!r}")
        if not memory_budget > 0:
            raise ValueError(f"memory_budget must be > 0, got {memory_budget}")
        if compute not in COMPUTE:
            raise ValueError(f"compute must be one of {COMPUTE}, got {compute!r}")
        if ahead < 1:
            raise ValueError(f"ahead must be >= 1, got {ahead}")
        self.memory_budget = float(memory_budget)
        self.compute = compute
        self.threshold = int(threshold)
        self.ahead = int(ahead)
        self.write_bandwidth = write_bandwidth
        self.read_bandwidth = read_bandwidth
        self.recompute = bool(recompute)
        if outside is not None and outside < 0:
            raise ValueError(f"outside must be >= 0 bytes, got {outside}")
        self.outside = outside
        self.since = memory_timeline.resident_bytes() if since is None else int(since)
        #: The optimizer run per parameter inside the backward (None: not given).
        self.in_backward = OptimizerInBackward(optimizer) if optimizer is not None else None
        #: One plan per graph AOTAutograd partitioned, in compile order.
        self.plans: list[JointPlan] = []

    def __call__(self, gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        """Compile one Dynamo graph (the runtime ops registered first)."""
        assert joint_ops.offload_put is not None
        owner = self.in_backward
        partitioner = _Partitioner(self, owner.slots(example_inputs) if owner else None)
        if self.compute == "eager":
            from torch._dynamo.backends.common import aot_autograd
            from torch._functorch.aot_autograd import make_boxed_func

            def run(g: fx.GraphModule, _inputs: Any) -> Any:
                return make_boxed_func(g.forward)

            return aot_autograd(fw_compiler=run, bw_compiler=run, partition_fn=partitioner)(
                gm, example_inputs
            )
        from torch._inductor.compile_fx import compile_fx

        # A cached compile would skip the partitioner, so its plan: no cache, either level.
        patches = {"custom_partitioner_fn": partitioner, "fx_graph_cache": False}
        with torch._functorch.config.patch(enable_autograd_cache=False):
            compiled = compile_fx(gm, example_inputs, config_patches=patches)
        assert callable(compiled)  # a graph to train, not an AOT export
        return compiled

    def outside_bytes(self) -> int:
        """The bytes the step holds outside the graphs: ``outside`` if given, else the
        process's resident growth since :attr:`since` (0 where it cannot be read)."""
        if self.outside is not None:
            return self.outside
        now = memory_timeline.resident_bytes()
        return max(now - self.since, 0) if now and self.since else 0

    def explain(self) -> str:
        """Every planned graph's report (:meth:`JointPlan.explain`)."""
        return "\n".join(f"graph {i}: {p.explain()}" for i, p in enumerate(self.plans))
