"""The step's memory over time under a plan's decisions, by liveness of the lowered graphs.

The eager budget rule counts the kept values and a read-ahead window at the backward's start
(:func:`~hector.passes.offload_model.modelled_peak`). In a compiled backward a value read
back lives from its read to its last use: ``offload_prefetch`` allocates it at the first use
of the saved value ``ahead`` places earlier in the backward's order of first uses, or earlier
where its read takes longer than the nodes in between (:func:`prefetch_anchors`,
:func:`~.joint.lower_plan`), ``offload_get`` hands it over before its own first use, and it
is freed after its last use, which may be many blocks later (T5's decoder reads values of its
encoder in every cross-attention block). Several reads overlap. Where values read back meet
the backward's own buffers and the gradients not yet stepped, the backward peaks.

:class:`StepLiveness` models both graphs as they will run, for any keep/offload decisions of
the candidates (the saved values the store may take), each value from its node to its last
use, a view as long as its base, the graphs' outputs to their end:

* forward: every node's value (parameters and the batch left out); a kept saved value to the
  forward's end; an offloaded one until its write's wait, where the next offloaded value is
  produced (the last one: the forward's end);
* backward: the incoming gradients and the saved values the store may not take from its
  start, a kept candidate from its start, an offloaded one from its read (the prefetch) on,
  each to its last use; the parameters' gradients until they are stepped (with the optimizer
  in the backward) or to its end; parameters and the batch left out.

:meth:`StepLiveness.peak` is the most either graph holds at once (:class:`StepPeak`: where,
and how much of it is saved values and values read back). One evaluation costs a pass over
numpy arrays as long as the graphs, so the budget rule may call it per decision it weighs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import fx

__all__ = [
    "BackwardPeak",
    "StepLiveness",
    "StepPeak",
    "backward_peak",
    "is_view",
    "hoist_view",
    "MOST_AHEAD",
    "made_after",
    "prefetch_anchors",
    "realize_points",
    "view_chain",
]


def is_view(node: fx.Node) -> bool:
    """Whether ``node``'s result aliases its first operand (a view: no memory of its own)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None or not schema.returns:
        return False
    alias = schema.returns[0].alias_info
    return alias is not None and not alias.is_write


@dataclass(frozen=True)
class StepPeak:
    """Where a step holds the most bytes, as the graphs model it, and what.

    Attributes:
        total: the bytes held there (the graphs' own: memory outside them not included).
        graph: ``"forward"`` or ``"backward"``.
        node: the node at which the most is held.
        saved: of ``total``, saved values (kept, or read back) alive there.
        read_back: of ``saved``, offloaded values read back (prefetched or got) alive there.
    """

    total: int
    graph: str
    node: str
    saved: int
    read_back: int

    @property
    def other(self) -> int:
        """Bytes held there besides the saved values (temporaries, gradients)."""
        return self.total - self.saved


def _bytes(node: fx.Node) -> int:
    val = node.meta.get("val")
    return val.numel() * val.element_size() if isinstance(val, torch.Tensor) else 0


def _bases(nodes: Sequence[fx.Node]) -> dict[fx.Node, fx.Node]:
    """Each node's base: itself, or for a view the base of its first operand."""
    base: dict[fx.Node, fx.Node] = {}
    for n in nodes:
        base[n] = base[n.all_input_nodes[0]] if is_view(n) and n.all_input_nodes else n
    return base


def _last_uses(nodes: Sequence[fx.Node], base: dict[fx.Node, fx.Node]) -> dict[fx.Node, int]:
    """Each base's last use by a node other than the graph's output (its own index if none)."""
    last = {n: i for i, n in enumerate(nodes) if base[n] is n}
    for i, n in enumerate(nodes):
        if n.op == "output":
            continue
        for a in n.all_input_nodes:
            last[base[a]] = max(last[base[a]], i)
    return last


@dataclass(frozen=True)
class BackwardPeak:
    """Where the backward graph holds the most bytes, as the graph models it (each value from
    its node, a placeholder from the start, to its last use; a view as long as its base; the
    graph's outputs to its end), and what they are.

    Attributes:
        node: the backward node at which the most is held.
        gradients: bytes of the graph's outputs made so far (the parameters' gradients).
        saved: bytes of the saved values not yet consumed.
        other: bytes of everything else alive (incoming gradients, temporaries).
    """

    node: str
    gradients: int
    saved: int
    other: int

    @property
    def total(self) -> int:
        """All bytes held at :attr:`node`."""
        return self.gradients + self.saved + self.other


def backward_peak(
    bw: fx.GraphModule, saved: set[str], ignore: frozenset[str] = frozenset()
) -> BackwardPeak:
    """The backward's modelled peak (:class:`BackwardPeak`) with the saved values named
    ``saved`` counted apart (and placeholders named in ``ignore``, such as parameters, not
    counted): where in the step the graphs' memory is highest and whether saved values (what
    a plan places), gradients or the backward's own buffers make it."""
    nodes = list(bw.graph.nodes)
    base = {n: n for n in nodes}
    for n in nodes:
        if is_view(n) and n.all_input_nodes:
            base[n] = base[n.all_input_nodes[0]]
    outputs = {base[a] for n in nodes if n.op == "output" for a in n.all_input_nodes}
    last = {base[a]: i for i, n in enumerate(nodes) for a in n.all_input_nodes if n.op != "output"}
    held: dict[fx.Node, int] = {}
    best = BackwardPeak("", 0, 0, 0)
    for i, n in enumerate(nodes):
        if n.op in ("placeholder", "call_function") and base[n] is n and n.name not in ignore:
            held[n] = _bytes(n)
        kinds = [0, 0, 0]
        for v, size in held.items():
            kinds[0 if v in outputs else 1 if v.name in saved else 2] += size
        if sum(kinds) > best.total:
            best = BackwardPeak(n.name, *kinds)
        for v in [v for v in held if last.get(v) == i and v not in outputs]:
            del held[v]
    return best


def view_chain(node: fx.Node) -> list[fx.Node]:
    """``node`` and the views it is a view of, down to (not including) the first node that
    is not a view, in forward order; empty if ``node`` is not a view."""
    chain: list[fx.Node] = []
    while is_view(node) and node.all_input_nodes:
        chain.append(node)
        node = node.all_input_nodes[0]
    return chain[::-1]


def made_after(fw: fx.GraphModule, node: fx.Node) -> fx.Node:
    """The forward node after which the saved value ``node`` is put: itself, or for a view,
    the latest operand of its chain of views (:func:`view_chain`), where the lowering moves
    the chain (a view costs nothing to make). The partitioner leaves the saved views it
    made of forward values (transposes for the backward's matrix products) at the
    forward's end, where the joint graph's backward had them: put there, an offloaded view
    would hold its base through the whole forward."""
    chain = view_chain(node)
    if not chain:
        return node
    order = {n: i for i, n in enumerate(fw.graph.nodes)}
    inside = set(chain)
    operands = [a for v in chain for a in v.all_input_nodes if a not in inside]
    anchor = max(operands, key=order.__getitem__)
    if anchor.op == "placeholder":
        anchor = [n for n in fw.graph.nodes if n.op == "placeholder"][-1]
    return anchor


def hoist_view(fw: fx.GraphModule, node: fx.Node) -> None:
    """Move the chain of views making ``node`` (:func:`view_chain`) to right after
    :func:`made_after`; nothing if ``node`` is not a view."""
    anchor = made_after(fw, node)
    for v in view_chain(node):
        anchor.append(v)
        anchor = v


#: How many backward nodes after a value's last reader (and after the op itself) a reader of
#: a pointwise op computed from it may come before the op is materialized where it stands
#: (:func:`realize_points`): the nodes of one block's backward are closer together than this.
NEAR = 32


#: Ops Inductor calls as library kernels (their operands are materialized before the call).
_LIBRARY = {"mm", "addmm", "bmm", "baddbmm", "convolution", "convolution_backward"}


def _inlinable(node: fx.Node) -> bool:
    """Whether a compiler may compute ``node`` inside a later kernel, fused with a reader
    (an op it generates code for: pointwise ops, reductions, views; not a library kernel
    such as a matrix product, nor one of Hector's runtime calls)."""
    if node.op != "call_function":
        return False
    packet = getattr(node.target, "_overloadpacket", None)
    if packet is None or packet.__name__ in _LIBRARY:
        return False
    return not str(getattr(node.target, "namespace", "")).startswith("hector")


def _readers(node: fx.Node) -> list[fx.Node]:
    """The nodes reading ``node``'s memory: its users and, through views of it, theirs."""
    out: list[fx.Node] = []
    for u in node.users:
        out.extend(_readers(u) if is_view(u) else [u])
    return out


def _frees_bytes(node: fx.Node, value: fx.Node) -> bool:
    """Whether ``node`` materialized holds fewer bytes than ``value``, whose memory it would
    otherwise keep alive until its far reader (a reduction of it: T5's sums); an op as large
    as the value (a pointwise op of it) frees nothing there and costs its kernel's fusion."""
    return 0 < _bytes(node) < _bytes(value)


def realize_points(bw: fx.GraphModule, values: Sequence[fx.Node]) -> list[fx.Node]:
    """The backward nodes to materialize where they stand so that no later kernel reads
    ``values`` (values read back): of the ops computed from them through ops Inductor
    generates code for (pointwise ops, reductions, views), those with a reader (through
    views) more than :data:`NEAR` nodes after both the op and the value's last reader, and
    smaller than the value (materializing an op as large as the value frees nothing: its
    readers then read a copy of the value's size, and the op loses its kernel's fusion, which
    cost Llama's step about 30%).

    Inductor computes such an op in a kernel fused with its readers unless it is
    materialized, so an op whose reader comes much later is computed there, from operands
    that stay alive until then. T5's relative position bias is one: its gradient sums
    attention-score gradients over the batch and the layers, and Inductor fused the sum into
    one kernel placed late (the decoder's end), so every layer's attention probabilities and
    dropout masks read back stayed alive until it. Materialized where it stands, the op holds
    its own bytes instead of its operands'."""
    nodes = list(bw.graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    points: dict[fx.Node, None] = {}
    for v in values:
        readers = _readers(v)
        last = max((index[u] for u in readers), default=index[v])
        stack = [u for u in readers if _inlinable(u)]
        seen: set[fx.Node] = set()
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            further = _readers(n)
            far = any(index[u] > max(last, index[n]) + NEAR for u in further)
            if far and _frees_bytes(n, v):
                points[n] = None
                continue
            stack.extend(u for u in further if _inlinable(u))
    return sorted(points, key=index.__getitem__)


#: The most first uses of saved values a read is issued ahead of its own first use when its
#: time leads it further (:func:`prefetch_anchors`): each value read back early is alive from
#: its read on, so the read-ahead window stays a few values wide.
MOST_AHEAD = 4


def prefetch_anchors(
    bw: fx.GraphModule,
    saved: set[str],
    ahead: int,
    lead_ns: Mapping[str, float] | None = None,
    node_ns: Callable[[fx.Node], float] | None = None,
) -> dict[str, fx.Node]:
    """The backward node before which each placeholder of ``saved`` is prefetched: the first
    use of the saved value ``ahead`` places earlier in the backward's order of first uses
    (the node after the last placeholder for the first ``ahead``); placeholders never read
    have none.

    Given each value's read time (``lead_ns``, by name: its bytes at the store's read
    bandwidth) and the backward nodes' estimated times (``node_ns``), a read is issued
    earlier still where the nodes between that anchor and the value's first use take less
    than its read: at the latest node from which they take at least as long, but not before
    the first use of the value :data:`MOST_AHEAD` places earlier. A read issued one first use
    ahead may have a single pointwise op to hide behind; the backward then blocks on it."""
    nodes = list(bw.graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    first: dict[str, fx.Node] = {}
    for node in nodes:
        for a in node.all_input_nodes:
            if a.op == "placeholder" and a.name in saved and a.name not in first:
                first[a.name] = node
    placeholders = [n for n in nodes if n.op == "placeholder"]
    start = placeholders[-1].next if placeholders else nodes[0]
    by_use = list(first)  # insertion order is the order of first uses
    anchors: dict[str, fx.Node] = {}
    for k, name in enumerate(by_use):
        anchor = first[by_use[k - ahead]] if k >= ahead else start
        need = lead_ns.get(name, 0.0) if lead_ns is not None and node_ns is not None else 0.0
        if need > 0 and k >= ahead:
            assert node_ns is not None
            bound = index[first[by_use[k - MOST_AHEAD]]] if k >= MOST_AHEAD else index[start]
            i, spent = index[first[name]], 0.0
            while i > bound and spent < need:
                i -= 1
                spent += node_ns(nodes[i]) if nodes[i].op == "call_function" else 0.0
            if i < index[anchor]:
                anchor = nodes[i]
        anchors[name] = anchor
    return anchors


@dataclass(frozen=True)
class _Candidate:
    name: str
    nbytes: int


class _Profile:
    """Intervals of bytes over a graph's node indices: a fixed part and, per candidate, one
    interval whose bounds depend on its decision."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.fixed = np.zeros(length + 1, dtype=np.int64)

    def add(self, diff: np.ndarray, start: int, end: int, nbytes: int) -> None:
        """``nbytes`` held from index ``start`` to ``end`` (both included)."""
        if nbytes and end >= start:
            diff[start] += nbytes
            diff[end + 1] -= nbytes

    def held(self, starts: np.ndarray, ends: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """Bytes held at each index: the fixed part and the intervals given."""
        diff = self.fixed.copy()
        keep = ends >= starts
        np.add.at(diff, starts[keep], sizes[keep])
        np.add.at(diff, ends[keep] + 1, -sizes[keep])
        return np.cumsum(diff)[: self.length]


class StepLiveness:
    """The bytes the lowered forward and backward hold over time, for any keep/offload
    decisions of the candidates (see the module).

    Args:
        fw, bw: the partition's graphs (the backward with its gradient steps lowered, if
            any; neither with the offload ops: this models where they will go).
        saved: the names of every saved value (the backward's placeholders of that name).
        inputs: of them, the graph inputs (parameters, the batch): not counted.
        candidates: the saved values the decisions are about, as (name, bytes), in the
            order :meth:`peak` takes decisions in.
        ahead: the read-ahead the backward will be lowered with.
        lead_ns, node_ns: the candidates' read times and the nodes' estimated times the
            backward's reads will be issued by (:func:`prefetch_anchors`).
    """

    def __init__(
        self,
        fw: fx.GraphModule,
        bw: fx.GraphModule,
        saved: set[str],
        inputs: set[str],
        candidates: Sequence[tuple[str, int]],
        ahead: int,
        lead_ns: Mapping[str, float] | None = None,
        node_ns: Callable[[fx.Node], float] | None = None,
    ) -> None:
        self.candidates = [_Candidate(name, nbytes) for name, nbytes in candidates]
        self._forward(fw)
        self._backward(bw, saved, inputs, prefetch_anchors(bw, saved, ahead, lead_ns, node_ns))

    def _forward(self, fw: fx.GraphModule) -> None:
        nodes = list(fw.graph.nodes)
        self._fw_names = [n.name for n in nodes]
        base = _bases(nodes)
        last = _last_uses(nodes, base)
        end = len(nodes) - 1
        out = next(n for n in nodes if n.op == "output")
        returned = {base[a] for a in out.all_input_nodes}
        index = {n: i for i, n in enumerate(nodes)}
        by_name = {n.name: n for n in nodes}
        cand = [base[by_name[s.name]] for s in self.candidates]
        # A candidate's base is returned (to the end) only through the candidate itself.
        through = {b: 0 for b in cand}
        for a in out.all_input_nodes:
            if base[a] in through and a.name not in {s.name for s in self.candidates}:
                through[base[a]] = 1
        self.fw = _Profile(len(nodes))
        for b, i in index.items():
            if b.op != "call_function" or base[b] is not b or through.get(b) == 0:
                continue
            stop = end if b in returned else last[b]
            self.fw.add(self.fw.fixed, i, stop, _bytes(b))
        self._fw_cand = cand
        self._fw_start = np.array([index[b] for b in cand], dtype=np.int64)
        self._fw_used = np.array([last[b] for b in cand], dtype=np.int64)
        made = [index[made_after(fw, by_name[s.name])] for s in self.candidates]
        self._fw_made = np.array(made, dtype=np.int64)
        # A base also returned otherwise is held to the end anyway (in the fixed part).
        self._fw_size = np.array([_bytes(b) * (1 - through[b]) for b in cand], dtype=np.int64)
        self._fw_end = end
        self._fw_saved = np.array([s.nbytes for s in self.candidates], dtype=np.int64)

    def _backward(
        self, bw: fx.GraphModule, saved: set[str], inputs: set[str], anchors: dict[str, fx.Node]
    ) -> None:
        nodes = list(bw.graph.nodes)
        self._bw_names = [n.name for n in nodes]
        base = _bases(nodes)
        last = _last_uses(nodes, base)
        out = next(n for n in nodes if n.op == "output")
        returned = {base[a] for a in out.all_input_nodes}
        index = {n: i for i, n in enumerate(nodes)}
        names = {s.name for s in self.candidates}
        self.bw = _Profile(len(nodes))
        fixed_saved = np.zeros(len(nodes) + 1, dtype=np.int64)
        for n, i in index.items():
            counted = n.op == "call_function" or (n.op == "placeholder" and n.name not in inputs)
            if not counted or base[n] is not n or n.name in names:
                continue
            stop = len(nodes) - 1 if n in returned else last[n]
            self.bw.add(self.bw.fixed, i, stop, _bytes(n))
            if n.name in saved:
                self.bw.add(fixed_saved, i, stop, _bytes(n))
        self._bw_fixed_saved = np.cumsum(fixed_saved)[: len(nodes)]
        holders = {n.name: n for n in nodes if n.op == "placeholder"}
        read, used = [], []
        for s in self.candidates:
            ph = holders.get(s.name)
            if ph is None or s.name not in anchors:  # never read: dead in the backward
                read.append(1)
                used.append(0)
                continue
            read.append(index[anchors[s.name]])
            used.append(len(nodes) - 1 if ph in returned else last[ph])
        self._bw_read = np.array(read, dtype=np.int64)
        self._bw_used = np.array(used, dtype=np.int64)
        self._bw_size = np.array([s.nbytes for s in self.candidates], dtype=np.int64)

    def peak(self, decisions: Sequence[str]) -> StepPeak:
        """The most the forward or the backward holds at once under ``decisions`` (one per
        candidate, ``"keep"`` or ``"offload"``)."""
        forward = self.forward_peak(decisions)
        backward = self.backward_peak(decisions)
        return backward if backward.total >= forward.total else forward

    def _offloaded(self, decisions: Sequence[str]) -> np.ndarray:
        if len(decisions) != len(self.candidates):
            raise ValueError(f"{len(decisions)} decisions for {len(self.candidates)} candidates")
        return np.array([d == "offload" for d in decisions], dtype=bool)

    def forward_peak(self, decisions: Sequence[str]) -> StepPeak:
        """The forward's most held at once under ``decisions``."""
        off = self._offloaded(decisions)
        ends = np.full(len(self.candidates), self._fw_end, dtype=np.int64)
        # An offloaded value is held until the wait where the next offloaded one is made.
        made = self._fw_made
        order = sorted((int(made[j]), int(j)) for j in np.flatnonzero(off))
        for (_, j), (nxt, _) in zip(order, order[1:], strict=False):
            ends[j] = nxt
        ends = np.maximum(ends, self._fw_used)
        # Candidates sharing a base: the base is held to the latest of their ends.
        latest: dict[int, int] = {}
        first: dict[int, int] = {}
        for k, b in enumerate(self._fw_cand):
            latest[id(b)] = max(latest.get(id(b), -1), int(ends[k]))
            first.setdefault(id(b), k)
        ks = np.array(sorted(first.values()), dtype=np.int64)
        stops = np.array([latest[id(self._fw_cand[int(k)])] for k in ks], dtype=np.int64)
        held = self.fw.held(self._fw_start[ks], stops, self._fw_size[ks])
        i = int(np.argmax(held))
        alive = (self._fw_made <= i) & (ends >= i)
        saved = int(self._fw_saved[alive].sum())
        return StepPeak(int(held[i]), "forward", self._fw_names[i], saved, 0)

    def backward_peak(self, decisions: Sequence[str]) -> StepPeak:
        """The backward's most held at once under ``decisions``."""
        off = self._offloaded(decisions)
        starts = np.where(off, self._bw_read, 0)
        held = self.bw.held(starts, self._bw_used, self._bw_size)
        i = int(np.argmax(held))
        alive = (starts <= i) & (self._bw_used >= i)
        saved = int(self._bw_size[alive].sum()) + int(self._bw_fixed_saved[i])
        read_back = int(self._bw_size[alive & off].sum())
        return StepPeak(int(held[i]), "backward", self._bw_names[i], saved, read_back)
