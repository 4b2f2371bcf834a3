"""``hector-aggregation-order``: for linear messages, aggregate first when that is cheaper.

A linear message summed onto destinations,

    out = sum_to_dst(scale(typed_linear(m, W){slice}, s))        (the scale is optional)

with ``m`` edge-wise, ``slice`` ``"etype"`` or ``"none"`` and ``s`` one factor per edge
(``[E, 1]``, e.g. RGCN's ``degree_norm``), can be computed in two orders, because every edge of
one (destination, edge type) pair multiplies by the same weight:

* **transform-then-aggregate** (the IR as written; ``hector-fuse`` makes it one scatter-GEMM
  over the ``E`` edges): ``Σ_e s_e (m_e W_r)``;
* **aggregate-then-transform** (PyG ``RGCNConv``'s order): sum each relation's scaled rows per
  destination first, then one GEMM per unique (destination, edge type) pair, then add each
  node's pairs::

      a   = sum_to_dst_compact(scale(m, s))          // D rows of width K (one traversal)
      h   = typed_linear(a, W){slice}                // D rows of width N
      out = sum_dst_compact_to_dst(h)

``D`` (unique (destination, edge type) pairs) is never more than ``E``: on knowledge graphs with
many triples per (entity, relation) it is far fewer, and the GEMM shrinks by ``E / D``. The
per-graph maps (``dst_compact_dst``, ``dst_compact_etype``, ``edge_dst_compact``) are graph
arrays (``GRAPH_LAYOUT``), built once per graph by ``HeteroGraph``.

Cost model (per matched sum, so per layer and per graph; ``K``, ``N`` from the weight's type,
``E`` edges and ``D`` pairs). Each kernel is bound by its compute or its memory traffic and costs
``max(flops, balance · bytes)`` (f32 elements read and written, 4 bytes each; ``balance``, 2.5 by
default, fitted to Hector's CPU kernels, see ``BALANCE``):

    transform-first  forward: scatter-GEMM    2·E·K·N flops, (E·K + 2·E·N + E)·4 bytes
    aggregate-first  forward: scaled scatter  E·K flops,     (3·E·K + E + 2·T·D·K)·4 bytes
                              scatter-GEMM    2·D·K·N flops, (D·K + 2·D·N)·4 bytes

(``T`` workers, the option ``threads``: with more than one, the sum into the pairs fills and
combines a partial ``D x K`` block per worker, which is how the CPU kernels keep reductions
deterministic.)

With the option ``training`` (``hector-autodiff`` follows) the backward program each order
gets from ``hector-autodiff`` and ``hector-fuse`` is added: transform-first runs the
input-gradient scatter-GEMM and the weight-gradient GEMM over ``E`` rows, both reading ``dy``
through the edges' destinations (``2·2·E·K·N`` flops, the input gradient added onto sources in
the epilogue); aggregate-first runs both GEMMs over ``D`` rows reading ``dy`` through the pairs'
destinations (``2·2·D·K·N``), and scatters the input gradient back through the edges (``E·K``).
The rewrite happens when aggregate-first costs less.
Every term is linear in ``E`` or ``D``, so the choice depends on the graph only through
``D / E``: the option ``dst_ratio`` (``HeteroGraph.dst_compaction_ratio``, which
``hector.compile`` passes). An unknown ratio (``-1``) leaves the IR as written. ``order``
forces either order (tests, measurements); forcing ``aggregate-first`` on a sum that cannot be
reordered (a per-head scale) is an error naming it.

The decision of every matched sum, in program order, is recorded on its function as
``hector.aggregation_order = ["aggregate-first", ...]`` (lit tests and ``hector bench gnn``
read it), and its widths as ``hector.aggregation_widths = [K0, N0, ...]``: ``hector.compile``
reuses a kernel on another graph when :func:`choose` decides every message alike there.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from ..dialects import Kind
from ..dialects import hector_inter as inter
from ..dialects.builders import OpAccess
from .fuse import dce, graph_argument
from .registry import Option, PassFailure, register_pass
from .verify import verify_function

_PREFIX = f"{inter.DIALECT.name}."
_SUM_TO_DST = _PREFIX + inter.SUM_TO_DST.name
#: The function attribute listing each matched sum's order.
ORDER_ATTR = "hector.aggregation_order"
#: The function attribute listing each matched sum's ``K, N`` (what its choice depends on, with
#: the graph's ``D / E``: ``hector.compile`` re-evaluates it to reuse a kernel on a new graph).
WIDTHS_ATTR = "hector.aggregation_widths"
TRANSFORM_FIRST, AGGREGATE_FIRST = "transform-first", "aggregate-first"
ORDERS = ("auto", TRANSFORM_FIRST, AGGREGATE_FIRST)


@dataclass(frozen=True)
class Cost:
    """Estimated work of one order: the ``(flops, bytes)`` of each of its kernels."""

    kernels: tuple[tuple[float, float], ...]

    @property
    def flops(self) -> float:
        """Floating-point operations of all kernels."""
        return sum(f for f, _ in self.kernels)

    @property
    def bytes(self) -> float:
        """Bytes all kernels read and write."""
        return sum(b for _, b in self.kernels)

    def total(self, balance: float) -> float:
        """``Σ max(flops, balance · bytes)``: each kernel bound by its compute or its memory
        traffic (roofline), ``balance`` flops costing as much as one byte."""
        return sum(max(f, balance * b) for f, b in self.kernels)

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.kernels + other.kernels)


def _kernel(flops: float, floats: float) -> Cost:
    """One kernel: ``flops`` and ``floats`` f32 elements read and written."""
    return Cost(((flops, 4 * floats),))


def transform_first_cost(e: float, k: int, n: int, training: bool) -> Cost:
    """The per-edge scatter-GEMM (and, training, its per-edge backward GEMMs)."""
    cost = _kernel(2 * e * k * n, e * k + 2 * e * n + e)
    if training:
        cost += _kernel(2 * e * k * n, e * n + 2 * e * k + e)  # input gradient onto sources
        cost += _kernel(2 * e * k * n, e * k + e * n + e)  # weight gradient per edge
    return cost


def aggregate_first_cost(
    e: float, d: float, k: int, n: int, training: bool, threads: int = 1
) -> Cost:
    """Scaled rows summed per pair, one GEMM per pair, pairs summed per node (and, training,
    the backward over pairs). With several ``threads`` the sum into the pairs fills and
    combines one partial ``D x K`` block per worker (deterministic reductions)."""
    partials = 2 * threads * d * k if threads > 1 else 0.0
    cost = _kernel(e * k, 3 * e * k + e + partials)  # gathered, scaled, summed into the pairs
    cost += _kernel(2 * d * k * n, d * k + 2 * d * n)  # per pair, added onto its node
    if training:
        cost += _kernel(2 * d * k * n, d * n + d * k)  # input gradient per pair
        cost += _kernel(2 * d * k * n, d * k + d * n)  # weight gradient per pair
        cost += _kernel(e * k, 3 * e * k + e)  # read back per edge, scaled, to sources
    return cost


#: Flops that cost as much as one byte moved, fitted to Hector's CPU kernels (one thread, CPU
#: time, both orders forced): with the scheduled GEMMs near 50 GFLOP/s and the traversals no
#: longer faulting their buffers in (host memory cache) at about 20 GB/s, aggregate-first wins
#: at K = N = 64 for D/E 0.41-0.57 (ogbn_mag_0.1, synthetic:bgs, synthetic:am x0.25: forward
#: 0.78-0.81, training 0.66-0.70 of transform-first) and loses at K = N = 16 for D/E 0.52
#: (synthetic:aifb, synthetic:mutag). 2.5 puts the thresholds between those points.
BALANCE = 2.5


def choose(
    dst_ratio: float,
    k: int,
    n: int,
    *,
    training: bool = False,
    balance: float = BALANCE,
    threads: int = 1,
) -> str:
    """The cheaper order for one linear message with input width ``k`` and output width ``n``
    on a graph with ``dst_ratio`` = D / E (``transform-first`` when it is unknown, negative)."""
    if dst_ratio < 0:
        return TRANSFORM_FIRST
    before = transform_first_cost(1.0, k, n, training).total(balance)
    after = aggregate_first_cost(1.0, dst_ratio, k, n, training, threads).total(balance)
    return AGGREGATE_FIRST if after < before else TRANSFORM_FIRST


@dataclass(frozen=True)
class Message:
    """One matched ``sum_to_dst(scale?(typed_linear(m, W)))``."""

    total: OpAccess  # the sum_to_dst
    linear: OpAccess  # the typed_linear
    scale: OpAccess | None


def _owner(v: ir.Value, name: str) -> OpAccess | None:
    if isinstance(v, ir.BlockArgument) or v.owner.name != _PREFIX + name:
        return None
    return inter.view(v.owner)


def _single_use(v: ir.Value) -> bool:
    return len(list(v.uses)) == 1


def _match(total: OpAccess, kinds: dict[ir.Value, Kind]) -> Message | None:
    """The linear message summed by ``total``, or None: the product (and its scale) must have
    no other user, the rows must be edges and the weight shared or picked by edge type."""
    scale = _owner(total.operand("x"), inter.SCALE.name)
    product = total.operand("x") if scale is None else scale.operand("x")
    if scale is not None and not _single_use(scale.op.result):
        return None
    linear = _owner(product, inter.TYPED_LINEAR.name)
    if linear is None or not _single_use(linear.op.result):
        return None
    if linear.attr("slice") == "ntype" or kinds.get(linear.operand("x")) != Kind.EDGE:
        return None
    return Message(total, linear, scale)


def _per_head(message: Message) -> bool:
    """Whether the scale multiplies heads (column groups) rather than whole rows: the sum over
    a pair then does not commute with the product."""
    if message.scale is None:
        return False
    return ir.ShapedType(message.scale.operand("s").type).shape[-1] != 1


def _rewrite(message: Message, graph: ir.Value) -> None:
    """Build aggregate-then-transform before the sum and replace the sum with it."""
    total, linear, scale = message.total, message.linear, message.scale
    rows = linear.operand("x")
    loc = total.op.location
    with ir.InsertionPoint(total.op):
        if scale is not None:
            rows = inter.OPS.scale(x=rows, s=scale.operand("s"), result=rows.type, loc=loc)
        pairs = inter.OPS.sum_to_dst_compact(graph=graph, x=rows, result=rows.type, loc=loc)
        product = inter.OPS.typed_linear(
            graph=graph,
            x=pairs,
            weight=linear.operand("weight"),
            slice=linear.attr("slice"),
            result=linear.op.result.type,
            loc=linear.op.location,
        )
        new = inter.OPS.sum_dst_compact_to_dst(
            graph=graph, x=product, result=total.op.result.type, loc=loc
        )
    total.op.result.replace_all_uses_with(new)
    total.op.erase()


def order_function(
    func: ir.Operation,
    *,
    order: str = "auto",
    dst_ratio: float = -1.0,
    training: bool = False,
    balance: float = BALANCE,
    threads: int = 1,
) -> list[str]:
    """Choose (and apply) the order of every linear message of ``func``; return the choices in
    program order."""
    graph = graph_argument(func)
    if graph is None:
        return []
    kinds = verify_function(func)
    ops = [o.operation for o in func.regions[0].blocks[0].operations]
    chosen: list[str] = []
    widths: list[int] = []
    for op in ops:
        if op.name != _SUM_TO_DST:
            continue
        message = _match(inter.view(op), kinds)
        if message is None:
            continue
        if _per_head(message):
            if order == AGGREGATE_FIRST:
                raise PassFailure(
                    "hector-aggregation-order: cannot aggregate before transforming: the "
                    "message is scaled per head, not per edge, so its sum over a "
                    "(destination, edge type) pair does not commute with the product",
                    op.location,
                )
            continue
        w = ir.ShapedType(message.linear.operand("weight").type).shape
        k, n = w[-2], w[-1]
        pick = order
        if order == "auto":
            pick = choose(dst_ratio, k, n, training=training, balance=balance, threads=threads)
        if pick == AGGREGATE_FIRST:
            _rewrite(message, graph)
        chosen.append(pick)
        widths += [k, n]
    if AGGREGATE_FIRST in chosen:
        dce(func)
    if chosen:
        func.attributes[ORDER_ATTR] = ir.ArrayAttr.get([ir.StringAttr.get(c) for c in chosen])
        i64 = ir.IntegerType.get_signless(64)
        func.attributes[WIDTHS_ATTR] = ir.ArrayAttr.get(
            [ir.IntegerAttr.get(i64, w) for w in widths]
        )
    return chosen


@register_pass(
    "hector-aggregation-order",
    "For linear messages summed onto destinations, pick transform-then-aggregate (per edge) or "
    "aggregate-then-transform (one GEMM per unique (destination, edge type) pair) by a cost "
    "model on the graph's statistics",
    order=Option(str, "auto", "auto (cost model), transform-first or aggregate-first", ORDERS),
    dst_ratio=Option(
        float,
        -1.0,
        "unique (destination, edge type) pairs per edge, D/E; negative: unknown (transform first)",
        max=1.0,
    ),
    training=Option(bool, False, "hector-autodiff follows: count the backward program too"),
    balance=Option(float, BALANCE, "flops that cost as much as one byte moved", min=0.0),
    threads=Option(int, 1, "CPU workers of the kernels (each reduction keeps partials)", min=1),
)
def run(
    module_op: ir.Operation,
    order: str = "auto",
    dst_ratio: float = -1.0,
    training: bool = False,
    balance: float = BALANCE,
    threads: int = 1,
) -> None:
    """Pass entry point."""
    for op in module_op.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "func.func" and len(op.regions[0].blocks):
            order_function(
                op,
                order=order,
                dst_ratio=dst_ratio,
                training=training,
                balance=balance,
                threads=threads,
            )
