"""Plans for the saved values of a compiled joint graph: what each one gets, and why.

The forward graph AOTAutograd's partitioner made returns its outputs, then the *saved
values* its backward graph reads. :func:`saved_values` lists them with their bytes, an
estimated cost of the forward nodes up to each one and of the backward nodes from its first
use on (from shapes: matrix products at ``flops`` per second, the rest at ``memory``
bytes per second — not measured kernel times), and whether the store may take them: values
produced in the forward (not graph inputs: parameters, the batch), dense and contiguous, not
also a forward output, of ``threshold`` bytes or more. The others are always kept.

:func:`choose_recompute` picks, among the values a plan offloads, those cheaper to recompute
(:func:`recompute_chain`: the forward nodes between the value and the saved values and graph
inputs, none of them random) than to write and read back; :class:`Recompute` records each.

:func:`plan` runs the eager planner's budget rule on them — each eligible saved value is one
scope of :func:`~hector.passes.offload_model.plan_within_budget` (forward order, the measured
or given store bandwidths). :class:`JointPlan` holds the decisions, the report
:meth:`JointPlan.explain` prints and, built when first read, their ``placement`` IR
(:attr:`JointPlan.text`: the module of :meth:`hector.offload.plan.Plan.from_measurements`,
each value named with ``placement.saved`` — its index among the saved outputs and its bytes —
and CUDA offloads given the ``pinned_host`` target).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import mmap
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx

from hector.passes.offload_model import modelled_peak, plan_within_budget, simulate_step

from .joint_liveness import (
    BackwardPeak,
    StepLiveness,
    StepPeak,
    backward_peak,
    is_view,
    view_chain,
)
from .joint_ops import dense

__all__ = [
    "BackwardPeak",
    "CostModel",
    "JointPlan",
    "Recompute",
    "SavedValue",
    "choose_recompute",
    "backward_peak",
    "keep_all_bytes",
    "other_bytes",
    "plan",
    "recompute_chain",
    "saved_values",
]

#: Why a saved graph input (a parameter, the batch) is kept: it is not an activation.
GRAPH_INPUT = "a graph input (parameter or batch)"
#: Why a saved view of a graph input is kept: its memory is the input's (offloading it would
#: write a copy of a parameter and free nothing).
INPUT_VIEW = "a view of a graph input (its memory is the input's)"
#: The reasons of saved values that are no activation memory (the step's bytes leave them out).
NOT_ACTIVATIONS = (GRAPH_INPUT, INPUT_VIEW)
_MATMULS = {"mm", "addmm", "bmm", "baddbmm", "matmul"}


@dataclass(frozen=True)
class CostModel:
    """Rates the planner estimates node times with, and the store's bandwidths (bytes/s)."""

    flops: float
    memory: float
    write_bandwidth: float
    read_bandwidth: float

    @classmethod
    def for_device(
        cls, device: torch.device, write_bandwidth: float | None, read_bandwidth: float | None
    ) -> CostModel:
        """Rates of ``device`` (CPU: 50 GFLOP/s, 10 GB/s; CUDA: 200 TFLOP/s, 2 TB/s) and the
        given bandwidths, else those measured (:func:`measured_bandwidth`)."""
        flops, memory = (2e14, 2e12) if device.type == "cuda" else (5e10, 1e10)
        if write_bandwidth is None or read_bandwidth is None:
            from torch._subclasses.fake_tensor import unset_fake_temporarily

            with unset_fake_temporarily():  # planned inside AOTAutograd's fake mode
                write, read = measured_bandwidth(device.type)
            write_bandwidth = write_bandwidth or write
            read_bandwidth = read_bandwidth or read
        return cls(flops, memory, float(write_bandwidth), float(read_bandwidth))

    def node_ns(self, node: fx.Node) -> float:
        """Estimated time of ``node`` (ns): its matrix-product flops or the bytes it moves."""
        out = _bytes(node.meta.get("val"))
        moved = out + sum(_bytes(a.meta.get("val")) for a in node.all_input_nodes)
        name = getattr(getattr(node.target, "_overloadpacket", None), "__name__", "")
        flops = _matmul_flops(node) if name in _MATMULS else 0.0
        return max(flops / self.flops, moved / self.memory) * 1e9


#: The CPU probe: bytes written and read back through the store, in this many objects.
PROBE_BYTES, PROBE_PIECES = 4 << 20, 4
#: Where measured store bandwidths are kept between processes (Hector's private cache).
BANDWIDTH_CACHE = "joint-bandwidth"


@functools.cache
def measured_bandwidth(device_type: str) -> tuple[float, float]:
    """Write and read bandwidth (bytes/s) of the tier offloads go to, once per process: the
    SSD store's (CPU), read from Hector's private cache (:func:`store_bandwidth`), or pinned
    host copies (CUDA, a 64 MiB copy)."""
    if device_type == "cuda":
        x = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
        host = torch.empty_like(x, device="cpu").pin_memory()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        host.copy_(x, non_blocking=True)
        end.record()
        end.synchronize()
        rate = x.numel() / max(start.elapsed_time(end) * 1e-3, 1e-9)
        return rate, rate
    from .joint_ops import tickets

    return store_bandwidth(tickets().store)


#: Probes (in as many processes) whose fastest figures the cache keeps before it is only read.
BANDWIDTH_SAMPLES = 3


def store_bandwidth(store: Any) -> tuple[float, float]:
    """``store``'s write and read bandwidth (bytes/s), kept in Hector's private cache directory
    (``joint-bandwidth``, one file per filesystem and I/O mode of the store's root). The first
    :data:`BANDWIDTH_SAMPLES` processes each measure it (:data:`PROBE_BYTES` in
    :data:`PROBE_PIECES` objects, in anonymous mappings handed back to the system as the probe
    ends, so the heap the training uses does not grow) and keep the fastest figures so far: one
    probe on a busy machine does not fix the plans of every later run. Later processes read
    the figures."""
    from hector.runtime.private_dir import open_private_file, user_cache_dir, write_private_file

    name = f"store-{os.stat(store.root).st_dev}-{'direct' if store.direct else 'buffered'}.json"
    kept = (0.0, 0.0, 0)
    try:
        fd = open_private_file(user_cache_dir(BANDWIDTH_CACHE), name, os.O_RDONLY)
        with os.fdopen(fd, "rb") as f:
            record = json.loads(f.read())
        write, read = float(record["write"]), float(record["read"])
        samples = int(record.get("samples", BANDWIDTH_SAMPLES))
        if write > 0 and read > 0 and math.isfinite(write + read):
            if samples >= BANDWIDTH_SAMPLES:
                return write, read
            kept = (write, read, samples)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    write, read = _probe(store)
    write, read, samples = max(write, kept[0]), max(read, kept[1]), kept[2] + 1
    with contextlib.suppress(OSError):
        data = json.dumps({"write": write, "read": read, "samples": samples}).encode()
        write_private_file(user_cache_dir(BANDWIDTH_CACHE), name, data)
    return write, read


def _probe(store: Any) -> tuple[float, float]:
    import numpy as np

    from hector.runtime.bandwidth import StorePieces, measure

    size = PROBE_BYTES // PROBE_PIECES
    maps = [mmap.mmap(-1, size) for _ in range(PROBE_PIECES)]
    pieces = [np.frombuffer(m, dtype=np.uint8) for m in maps]
    for i, p in enumerate(pieces):
        p.fill(i + 1)
    measured = measure(StorePieces(store, pieces))
    del pieces, maps  # unmapped as the last reference goes
    return measured.write, measured.read


def _bytes(val: Any) -> int:
    if isinstance(val, torch.Tensor):
        return val.numel() * val.element_size()
    if isinstance(val, list | tuple):
        return sum(_bytes(v) for v in val)
    return 0


def _matmul_flops(node: fx.Node) -> float:
    """2 * output elements * the inner dimension (of the first matrix operand)."""
    out = node.meta.get("val")
    first = 1 if str(node.target).split(".")[-2] in ("addmm", "baddbmm") else 0
    operand = node.args[first] if len(node.args) > first else None
    val = operand.meta.get("val") if isinstance(operand, fx.Node) else None
    if not isinstance(out, torch.Tensor) or not isinstance(val, torch.Tensor) or val.dim() < 1:
        return 0.0
    return 2.0 * out.numel() * int(val.shape[-1])


@dataclass
class SavedValue:
    """One saved value of a partitioned joint graph.

    Attributes:
        index: its position among the forward graph's saved outputs.
        name: the forward node producing it (the backward placeholder of the same name).
        shape, stride, dtype: its tensor's.
        nbytes: its size in bytes.
        eligible: None when it may be offloaded, else why it is always kept.
        forward_ns: estimated time of the forward nodes since the previous saved value.
        backward_ns: estimated time of the backward nodes from its first use to the next
            saved value's first use.
        decision: ``"keep"`` or ``"offload"`` (set by :func:`plan`).
        recompute_ns: estimated time of recomputing it in the backward (None: not weighed).
        not_recomputed: why an offloaded value is not recomputed instead ("" if unweighed).
    """

    index: int
    name: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    nbytes: int
    eligible: str | None
    forward_ns: float = 0.0
    backward_ns: float = 0.0
    decision: str = "keep"
    recompute_ns: float | None = None
    not_recomputed: str = ""


def _why_kept(node: fx.Node, val: Any, outputs: set[fx.Node], threshold: int) -> str | None:
    """Why the saved value ``node`` cannot be offloaded (None: it can)."""
    if node.op != "call_function":
        return GRAPH_INPUT
    chain = view_chain(node)
    if chain and chain[0].all_input_nodes[0].op == "placeholder":
        return INPUT_VIEW
    if not isinstance(val, torch.Tensor):
        return "not a tensor"
    if any(isinstance(s, torch.SymInt) for s in (*val.shape, *val.stride())):
        return "a dynamic shape"
    if val.layout != torch.strided or val.is_sparse or not dense(val):
        return "not dense (gaps, overlap or negative strides)"
    if node in outputs:
        return "also a forward output"
    if _bytes(val) < threshold:
        return f"under the {threshold}-byte threshold"
    return None


def saved_values(
    fw: fx.GraphModule, bw: fx.GraphModule, num_fwd_outputs: int, cost: CostModel, threshold: int
) -> list[SavedValue]:
    """The saved values of the partition ``fw``/``bw`` with their estimated costs."""
    out_node = next(n for n in fw.graph.nodes if n.op == "output")
    outs = list(out_node.args[0])
    real = {n for n in outs[:num_fwd_outputs] if isinstance(n, fx.Node)}
    saved: list[SavedValue] = []
    for i, node in enumerate(outs[num_fwd_outputs:]):
        if not isinstance(node, fx.Node):
            continue
        val = node.meta.get("val")
        shape = tuple(val.shape) if isinstance(val, torch.Tensor) else ()
        stride = tuple(val.stride()) if isinstance(val, torch.Tensor) else ()
        dtype = val.dtype if isinstance(val, torch.Tensor) else torch.int64
        why = _why_kept(node, val, real, threshold)
        saved.append(SavedValue(i, node.name, shape, stride, dtype, _bytes(val), why))
    _forward_costs(fw, saved, cost)
    _backward_costs(bw, saved, cost)
    return saved


def _forward_costs(fw: fx.GraphModule, saved: list[SavedValue], cost: CostModel) -> None:
    by_name = {s.name: s for s in saved}
    spent = 0.0
    last: SavedValue | None = None
    for node in fw.graph.nodes:
        spent += cost.node_ns(node) if node.op == "call_function" else 0.0
        s = by_name.get(node.name)
        if s is not None and s.eligible is None:
            s.forward_ns, spent, last = spent, 0.0, s
    if last is not None:
        last.forward_ns += spent


def _backward_costs(bw: fx.GraphModule, saved: list[SavedValue], cost: CostModel) -> None:
    by_name = {s.name: s for s in saved if s.eligible is None}
    current: SavedValue | None = None
    for node in bw.graph.nodes:
        if node.op != "call_function":
            continue
        for a in node.all_input_nodes:
            s = by_name.pop(a.name, None) if a.op == "placeholder" else None
            current = s or current
        if current is not None:
            current.backward_ns += cost.node_ns(node)


#: Names of random ops (besides those tagged ``nondeterministic_seeded``): never recomputed,
#: since their RNG state is not replayed.
_RANDOM = ("rand", "bernoulli", "dropout", "normal", "uniform", "multinomial", "philox")
#: The most forward nodes a saved value is recomputed through.
MAX_CHAIN = 16


@dataclass(frozen=True)
class Recompute:
    """A saved value the plan recomputes in the backward instead of offloading it.

    Attributes:
        index: its position among the saved outputs of the partition it was planned on
            (the min-cut partition before recomputation: it is not saved afterwards).
        name: the forward node producing it.
        nbytes: its size in bytes.
        chain: the forward nodes recomputed for it, in forward order (its own last).
        recompute_ns: their estimated time.
        io_ns: the store's write and read of its bytes at the planner's bandwidths.
    """

    index: int
    name: str
    nbytes: int
    chain: tuple[str, ...]
    recompute_ns: float
    io_ns: float


def _random(node: fx.Node) -> bool:
    """Whether ``node`` draws random numbers."""
    if torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ()):
        return True
    name = getattr(getattr(node.target, "_overloadpacket", None), "__name__", str(node.target))
    return any(r in name for r in _RANDOM)


def recompute_chain(
    fw: fx.GraphModule, name: str, available: set[str]
) -> tuple[list[fx.Node], str | None]:
    """The forward nodes that recompute the value of node ``name`` from the ``available``
    values (saved values the backward reads anyway) and the forward's inputs, in forward
    order; or, empty, with why it may not be recomputed (a random op, an op with effects,
    a chain over :data:`MAX_CHAIN` nodes)."""
    nodes = {n.name: n for n in fw.graph.nodes}
    chain: set[fx.Node] = set()
    stack = [nodes[name]]
    while stack:
        n = stack.pop()
        if n in chain or n.op == "placeholder" or (n.name in available and n.name != name):
            continue
        if n.op != "call_function":
            return [], f"{n.name} is not an op"
        if _random(n):
            return [], f"random op {n.name} in its chain (its RNG state is not replayed)"
        schema = getattr(n.target, "_schema", None)
        if schema is not None and schema.is_mutable:
            return [], f"{n.name} mutates its operands"
        chain.add(n)
        if len(chain) > MAX_CHAIN:
            return [], f"its chain is over {MAX_CHAIN} ops"
        stack.extend(n.all_input_nodes)
    order = {n: i for i, n in enumerate(fw.graph.nodes)}
    return sorted(chain, key=order.__getitem__), None


def choose_recompute(fw: fx.GraphModule, joint: JointPlan) -> list[Recompute]:
    """The values ``joint`` offloads that cost less to recompute than the store's write and
    read of their bytes (:func:`recompute_chain`, estimated with ``joint.cost``), each
    offloaded value given its ``recompute_ns`` and, if not chosen, why."""
    c = joint.cost
    available = {s.name for s in joint.saved}
    chosen: list[Recompute] = []
    for s in joint.offloaded():
        io_ns = s.nbytes * 1e9 / c.write_bandwidth + s.nbytes * 1e9 / c.read_bandwidth
        chain, why = recompute_chain(fw, s.name, available - {r.name for r in chosen})
        if why is not None:
            s.not_recomputed = why
            continue
        s.recompute_ns = sum(c.node_ns(n) for n in chain)
        if s.recompute_ns >= io_ns:
            s.not_recomputed = "recomputing costs more than the store's write and read"
            continue
        names = tuple(n.name for n in chain)
        chosen.append(Recompute(s.index, s.name, s.nbytes, names, s.recompute_ns, io_ns))
    return chosen


def _live_peak(gm: fx.GraphModule, saved: set[str], inputs: bool) -> int:
    """The most bytes ``gm``'s values other than ``saved`` hold at once: each from its node
    (placeholders from the start, if ``inputs``) to its last use, a view as long as its base,
    the graph's outputs to its end."""
    nodes = list(gm.graph.nodes)
    base: dict[fx.Node, fx.Node] = {}
    for n in nodes:
        base[n] = base[n.all_input_nodes[0]] if is_view(n) and n.all_input_nodes else n
    excluded = {base[n] for n in nodes if n.name in saved} | {n for n in nodes if n.name in saved}
    last: dict[fx.Node, int] = {}
    for i, n in enumerate(nodes):
        for a in n.all_input_nodes:
            last[base[a]] = len(nodes) if n.op == "output" else i
    live = peak = 0
    held: set[fx.Node] = set()
    for i, n in enumerate(nodes):
        counted = n.op == "call_function" or (inputs and n.op == "placeholder")
        if counted and base[n] is n and n not in excluded:
            live += _bytes(n.meta.get("val"))
            held.add(n)
        peak = max(peak, live)
        for b in {base[a] for a in n.all_input_nodes}:
            if last.get(b) == i and b in held:
                live -= _bytes(b.meta.get("val"))
    return peak


def keep_all_bytes(fw: fx.GraphModule, bw: fx.GraphModule, saved: Sequence[SavedValue]) -> int:
    """The keep-all step's peak as the graphs model it, by liveness: the most the forward holds
    at once (its saved values from their node to its end) or the backward (each saved value
    until its last use, the gradients made so far, its other values); parameters and the
    batch left out. At most the saved bytes plus :func:`other_bytes`, which add the two
    peaks as if every saved value were alive at the backward's peak."""
    inputs = frozenset(s.name for s in saved if s.eligible in NOT_ACTIVATIONS)
    forward = _live_peak(fw, set(), inputs=False)
    backward = backward_peak(bw, {s.name for s in saved}, ignore=inputs).total
    return max(forward, backward)


def other_bytes(fw: fx.GraphModule, bw: fx.GraphModule, saved: Sequence[SavedValue]) -> int:
    """The bytes a step holds besides its saved values, as the graphs model it: the most the
    forward's temporaries and outputs, or the backward's incoming gradients, temporaries and
    outputs (the parameters' gradients), hold at once (:func:`_live_peak`; a value the
    compiled code fuses away is counted too, so this over-estimates the graphs' own part).
    Memory outside the graphs (the loss, the compiled code, the interpreter, the allocator's
    slack) is not in it."""
    names = {s.name for s in saved}
    return max(_live_peak(fw, names, inputs=False), _live_peak(bw, names, inputs=True))


@dataclass
class JointPlan:
    """The plan of one compiled graph's saved values.

    Attributes:
        saved: every saved value, with its decision.
        budget_bytes: the saved bytes the plan was made to hold (``memory_budget`` of them).
        cost: the rates it was planned with.
        target: where offloads go (``"ssd"`` on CPU, ``"pinned_host"`` on CUDA).
        modelled_peak: the saved bytes the budget rule models at the step's peak (kept
            values and the read-ahead window).
        modelled_overhead: its modelled step-time overhead over keep-all (a fraction).
        recomputed: forward nodes the partitioner also runs in the backward (its own
            recomputation of cheap ops, the same as in the keep-all compile).
        code: the forward and backward graphs' Python code once lowered (the runtime ops
            are calls of ``torch.ops.hector.offload_*``).
        unscoped: saved bytes outside every candidate (kept), as the budget rule counted them.
        ahead: the read-ahead the plan was made with.
        other_bytes: the step's modelled bytes besides the saved values (:func:`other_bytes`).
        step_budget: the step's modelled memory the budget allows (saved values and
            ``other_bytes``); ``budget_bytes`` is its part for the saved values.
        recomputes: the values recomputed in the backward instead of offloaded (no longer
            saved: the partition was made again with their chains marked to recompute).
        outside_bytes: the process's memory the step holds outside the graphs (the compile's
            residue: the compiled code, the interpreter's growth; the loss), counted in the
            step and its budget so that the budget bounds the real peak, not the graphs'
            part of it.
        keep_all_step: the keep-all step's modelled bytes a fraction budget is taken of (the
            graphs' by liveness, or saved and other bytes, and ``outside_bytes``).
        backward: where the backward graph holds the most, and what (:func:`backward_peak`).
        put_order: the offloaded values' names in the order the forward puts them (its
            runtime calls' ticket numbers follow it, step after step).
        gradient_steps: the parameters stepped inside the backward, their gradients freed
            there (:class:`~.joint_grads.GradientStep`; empty unless the optimizer was given).
        step_peak: where the step holds the most under the decisions, by liveness of the
            graphs as lowered (:class:`~.joint_liveness.StepPeak`: values read back alive
            from their read to their last use); None where the plan was made without it.
    """

    saved: list[SavedValue]
    budget_bytes: int
    cost: CostModel
    target: str
    modelled_peak: int = 0
    modelled_overhead: float = 0.0
    recomputed: list[str] = field(default_factory=list)
    code: tuple[str, str] = ("", "")
    unscoped: int = 0
    ahead: int = 1
    other_bytes: int = 0
    step_budget: int = 0
    recomputes: list[Recompute] = field(default_factory=list)
    outside_bytes: int = 0
    keep_all_step: int = 0
    backward: BackwardPeak | None = None
    put_order: list[str] = field(default_factory=list)
    gradient_steps: list[Any] = field(default_factory=list)
    step_peak: StepPeak | None = None
    _text: str | None = field(default=None, repr=False)

    @property
    def text(self) -> str:
        """The ``placement`` IR of the decisions (the eligible values; empty when none is),
        built on first use: the planner's module with a ``placement.saved`` op per value —
        :meth:`Plan.from_decisions` of these decisions (``placement.memory_budget`` the step
        budget, ``placement.modelled_peak_bytes`` the modelled step peak) where the step was
        modelled by liveness, else :meth:`Plan.from_measurements` (the same budget rule on
        the same numbers, its decisions checked to be these)."""
        if self._text is None:
            self._text = self._build_text()
        return self._text

    def _build_text(self) -> str:
        from .plan import Plan

        candidates = [s for s in self.saved if s.eligible is None]
        if not candidates:
            return ""
        scopes = [_Scope(s.name, int(s.forward_ns), s.nbytes) for s in candidates]
        backward = [s.backward_ns for s in candidates]
        c = self.cost
        if self.step_peak is not None:  # decided on the step's liveness: written as decided
            made = Plan.from_decisions(
                scopes,
                backward,
                [s.decision for s in candidates],
                c.write_bandwidth,
                c.read_bandwidth,
                ahead=self.ahead,
                memory_budget=max(self.step_budget, 1),
                modelled_peak=self.modelled_step_peak,
            )
            return _named_ir(made.text, candidates, self.target, self.recomputes)
        made = Plan.from_measurements(
            scopes,
            backward,
            c.write_bandwidth,
            c.read_bandwidth,
            memory_budget=max(self.budget_bytes, 1),
            unscoped=self.unscoped,
            ahead=self.ahead,
            recompute=False,
        )
        assert made.decisions == {s.name: s.decision for s in candidates}
        return _named_ir(made.text, candidates, self.target, self.recomputes)

    @property
    def saved_bytes(self) -> int:
        """All saved values' bytes (keep-all's)."""
        return sum(s.nbytes for s in self.saved if s.eligible not in NOT_ACTIVATIONS)

    @property
    def recomputed_bytes(self) -> int:
        """Bytes of the values recomputed in the backward (saved by keep-all, not here)."""
        return sum(r.nbytes for r in self.recomputes)

    @property
    def modelled_step_peak(self) -> int:
        """The step's modelled peak: the saved bytes held at the peak, ``other_bytes`` and
        ``outside_bytes`` added up, or, if more, :attr:`step_peak`'s bytes (by liveness,
        values read back alive from their read to their last use) and ``outside_bytes``."""
        kept = self.modelled_peak + self.other_bytes + self.outside_bytes
        if self.step_peak is not None:
            return max(kept, self.step_peak.total + self.outside_bytes)
        return kept

    @property
    def feasible(self) -> bool:
        """Whether the modelled step peak fits the step's budget."""
        return self.modelled_step_peak <= self.step_budget

    @property
    def kept_bytes(self) -> int:
        """Bytes of the saved values kept in memory (graph inputs left out)."""
        return self.saved_bytes - self.offloaded_bytes

    @property
    def offloaded_bytes(self) -> int:
        """Bytes of the offloaded saved values."""
        return sum(s.nbytes for s in self.saved if s.decision == "offload")

    def offloaded(self) -> list[SavedValue]:
        """The values the plan offloads, in saved-output order."""
        return [s for s in self.saved if s.decision == "offload"]

    def explain(self) -> str:
        """One line per saved value: its decision, bytes, estimated costs and why."""
        c = self.cost
        lines = [
            f"saved values: {len(self.saved)}, {self.saved_bytes} bytes; other bytes of the "
            f"step {self.other_bytes}, outside the graphs {self.outside_bytes}; step budget "
            f"{self.step_budget} bytes (keep-all {self.keep_all_step}), "
            f"{self.budget_bytes} of them for saved values; kept {self.kept_bytes}, recomputed "
            f"{self.recomputed_bytes}, offloaded "
            f"to {self.target} {self.offloaded_bytes} (modelled peak {self.modelled_peak} "
            f"saved + {self.other_bytes} other + {self.outside_bytes} outside bytes, overhead "
            f"{self.modelled_overhead:+.1%}; write {c.write_bandwidth / 1e6:.0f} MB/s, read "
            f"{c.read_bandwidth / 1e6:.0f} MB/s)",
        ]
        if not self.feasible:
            lines.append(
                f"budget not met: the step's modelled peak {self.modelled_step_peak} bytes is "
                f"above its budget {self.step_budget} (everything the store may take offloaded)"
            )
        for s in self.saved:
            io_ns = s.nbytes * 1e9 / c.write_bandwidth + s.nbytes * 1e9 / c.read_bandwidth
            why = s.eligible or (
                "the budget rule offloads it (least modelled overhead per byte kept)"
                if s.decision == "offload"
                else "fits the budget (kept first: most modelled overhead saved per byte)"
            )
            if s.decision == "offload" and s.not_recomputed:
                why += f"; not recomputed: {s.not_recomputed}"
            lines.append(
                f"  {s.index:3d} {s.name:<24} {s.decision:<8} {s.nbytes:>12} B  "
                f"fwd {s.forward_ns / 1e3:8.1f} us  bwd {s.backward_ns / 1e3:8.1f} us  "
                f"I/O {io_ns / 1e3:8.1f} us  {why}"
            )
        for r in self.recomputes:
            lines.append(
                f"    {r.name:<24} recompute {r.nbytes:>12} B  recompute "
                f"{r.recompute_ns / 1e3:8.1f} us < I/O {r.io_ns / 1e3:8.1f} us: recomputed in "
                f"the backward from saved values and inputs ({', '.join(r.chain)})"
            )
        if self.backward is not None:
            b = self.backward
            lines.append(
                f"the backward's modelled peak: {b.total} bytes at {b.node}: gradients "
                f"{b.gradients}, saved values not yet consumed {b.saved}, other {b.other}"
            )
        if self.step_peak is not None:
            p = self.step_peak
            lines.append(
                f"the step's modelled peak (liveness of the graphs as lowered): {p.total} bytes "
                f"in the {p.graph} at {p.node}: saved values {p.saved} ({p.read_back} of them "
                f"read back), other {p.other}; and {self.outside_bytes} outside the graphs"
            )
        if self.gradient_steps:
            freed = sum(g.nbytes for g in self.gradient_steps)
            lines.append(
                f"parameters stepped in the backward: {len(self.gradient_steps)}, their "
                f"gradients ({freed} bytes) freed as each is stepped, not held to its end"
            )
        if self.recomputed:
            lines.append(f"recomputed by the partitioner: {', '.join(self.recomputed)}")
        return "\n".join(lines)


def plan(
    saved: list[SavedValue],
    memory_budget: float,
    cost: CostModel,
    target: str,
    ahead: int = 1,
    other: int = 0,
    outside: int = 0,
    graphs: int | None = None,
    liveness: StepLiveness | None = None,
) -> JointPlan:
    """Decide keep or offload for each saved value so the step's modelled memory fits
    ``memory_budget``: a fraction of the keep-all step's (all saved bytes, ``other`` — see
    :func:`other_bytes` — and ``outside``, the process's memory outside the graphs) if at
    most 1, else bytes. ``graphs``, if given, is the keep-all step's bytes in the graphs
    (:func:`keep_all_bytes`, by liveness, at most the saved bytes and ``other``) in place of
    the saved bytes and ``other``.

    The step's modelled memory under the decisions: the saved values kept (the budget rule's
    :func:`modelled_peak`: kept values and a read-ahead window), ``other`` and ``outside``
    added up; with ``liveness`` (the planned graphs' :class:`~.joint_liveness.StepLiveness`),
    the larger of that and the most the forward or the backward holds at once, each value
    read back alive from its read to its last use, plus ``outside`` (the compiled code may
    hold values longer than the graphs say: the sum stays a floor). Where even offloading everything
    the store may take does not fit, all of it is offloaded (:attr:`JointPlan.feasible` is
    False).

    The budget rule runs on plain numbers (:func:`plan_within_budget`); the ``placement`` IR
    of its decisions is built only when :attr:`JointPlan.text` is read, so a compile imports
    no MLIR pass machinery unless someone asks for the IR."""
    total = sum(s.nbytes for s in saved if s.eligible not in NOT_ACTIVATIONS)
    whole = (total + other if graphs is None else graphs) + outside
    step = int(memory_budget * whole) if memory_budget <= 1 else int(memory_budget)
    candidates = [s for s in saved if s.eligible is None]
    unscoped = total - sum(s.nbytes for s in candidates)
    joint = JointPlan(saved, max(step - other - outside, 0), cost, target, ahead=ahead)
    joint.unscoped, joint.other_bytes, joint.outside_bytes = unscoped, other, outside
    joint.step_budget, joint.keep_all_step = step, whole
    if not candidates:
        joint.modelled_peak = total
        if liveness is not None:
            joint.step_peak = liveness.peak([])
        return joint
    forward = [float(int(s.forward_ns)) for s in candidates]
    backward = [s.backward_ns for s in candidates]
    nbytes = [s.nbytes for s in candidates]
    bandwidths = (cost.write_bandwidth, cost.read_bandwidth)
    rule: dict[str, Any] = {"unscoped": unscoped, "ahead": ahead}
    room = max(joint.budget_bytes, 1)
    if liveness is not None:  # the whole step against the whole budget

        def held(decisions: Sequence[str]) -> int:
            kept = modelled_peak(nbytes, decisions, unscoped) + other
            return max(kept, liveness.peak(decisions).total) + outside

        room, rule["peak"] = max(step, 1), held
    made = plan_within_budget(forward, backward, nbytes, *bandwidths, room, **rule)
    for s, decision in zip(candidates, made.decisions, strict=True):
        s.decision = decision
    model = simulate_step(forward, backward, nbytes, made.decisions, *bandwidths, ahead)
    joint.modelled_peak = modelled_peak(nbytes, made.decisions, unscoped)
    joint.modelled_overhead = model.overhead
    if liveness is not None:
        joint.step_peak = liveness.peak(made.decisions)
    return joint


@dataclass(frozen=True)
class _Scope:
    name: str
    forward_ns: int
    nbytes: int


def _named_ir(
    text: str, values: Sequence[SavedValue], target: str, recomputes: Sequence[Recompute] = ()
) -> str:
    """``text`` (the planner's module) with a ``placement.saved`` op per value, the plan
    marked ``"joint"``, offloads sent to ``target`` and, per recomputed value, one more
    argument (``placement.name``, ``placement.recompute_ns``) named by ``placement.saved``
    and decided ``placement.recompute``."""
    from mlir import ir

    from hector.dialects import make_context, placement
    from hector.passes.module_text import parse_module

    with make_context(), ir.Location.unknown() as loc:
        module = parse_module(text)
        fn = module.body.operations[0].operation
        fn.attributes["placement.plan"] = ir.StringAttr.get("joint")
        block = fn.regions[0].blocks[0]
        with ir.InsertionPoint.at_block_begin(block):
            for arg, s in zip(block.arguments, values, strict=True):
                placement.OPS.saved(
                    value=arg, index=s.index, bytes=s.nbytes, result=arg.type, loc=loc
                )
        for op in block.operations:
            if op.operation.name == "placement.offload":
                op.operation.attributes["target"] = ir.StringAttr.get(target)
        _add_recomputes(fn, block, recomputes, loc)
        return str(module)


def _add_recomputes(fn: Any, block: Any, recomputes: Sequence[Recompute], loc: Any) -> None:
    from mlir import ir

    from hector.dialects import placement

    i64 = ir.IntegerType.get_signless(64)
    attrs = list(fn.attributes["arg_attrs"]) if "arg_attrs" in fn.attributes else []
    for r in recomputes:
        t = ir.RankedTensorType.get([r.nbytes], ir.IntegerType.get_signless(8))
        arg = block.add_argument(t, loc)
        attrs.append(
            ir.DictAttr.get(
                {
                    "placement.name": ir.StringAttr.get(r.name),
                    "placement.recompute_ns": ir.IntegerAttr.get(i64, int(r.recompute_ns)),
                }
            )
        )
        with ir.InsertionPoint.at_block_terminator(block):
            placement.OPS.saved(value=arg, index=r.index, bytes=r.nbytes, result=t, loc=loc)
            placement.OPS.recompute(value=arg, scope=arg.arg_number, result=t, loc=loc)
    if recomputes:
        inputs = [a.type for a in block.arguments]
        fn.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, []))
        fn.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs)
