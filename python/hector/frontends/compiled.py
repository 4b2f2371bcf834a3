"""``@hector.compile``: a forward function compiled for the graphs and tensors it is called on.

A forward function takes the graph first and tensors after it::

    @hector.compile
    def rgcn_layer(g, x, weight, root, bias):
        msg = g.typed_linear(g.gather_src(x), weight)          # W_r h_j on every edge
        h = g.sum_to_dst(msg * g.degree_norm())                # Σ_r Σ_j 1/c_{i,r} ...
        return hector.relu(h + g.linear(x, root) + bias)       # + W_0 h_i, bias, σ

:class:`CompiledFunction` checks each call's arguments (a :class:`~hector.data.graph.HeteroGraph`,
then float32, float16 or bfloat16 tensors on one device), and on the first call with a new graph
schema and new feature shapes traces the function (:func:`hector.frontends.trace.trace`),
compiles it through the named stages for its target and keeps the kernel; later calls reuse it.
With a tensor that requires grad, the call is differentiable (the training step of
:mod:`hector.runtime.training`). The target a program compiles for is looked up in
``hector.targets.TARGETS``; this module imports no back end.
"""

from __future__ import annotations

import functools
import inspect
import re
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

import torch

from ..data.graph import HeteroGraph
from ..dialects import Kind
from ..program import STORAGE_TYPES
from ..runtime.training import TrainingStep
from ..targets import Executable, GraphStats, Options
from ..targets import target as _target
from .graph_api import TraceError
from .trace import trace

if TYPE_CHECKING:  # the back end is imported through TARGETS, on first use only
    from ..targets.cuda import GpuEntry

__all__ = ["AGGREGATION_ORDERS", "CompiledFunction", "compile", "result_type"]


_FLOAT_TYPES = (torch.float32, torch.float16, torch.bfloat16)


def result_type(tensors: tuple[torch.Tensor, ...]) -> torch.dtype | None:
    """The half type a compiled function's results take for these arguments, or None for
    float32, as PyTorch promotes: a half type (float16 or bfloat16) when every argument is in
    it, float32 when any is float32 (float16 features with float32 weights give float32),
    else the autocast type where ``torch.autocast`` is on for their device (the templates are
    GEMMs, which autocast runs in its lower precision). Raises ValueError for arguments of
    both half types."""
    halves = {t.dtype for t in tensors if t.dtype != torch.float32}
    if len(halves) > 1:
        raise ValueError(
            f"arguments mix {sorted(str(h) for h in halves)}; give one half type (or float32)"
        )
    device = tensors[0].device.type if tensors else "cpu"
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    if halves and all(t.dtype != torch.float32 for t in tensors):
        return halves.pop()
    return None


#: Orders of linear messages ``hector.compile(..., order=)`` accepts.
AGGREGATION_ORDERS = ("auto", "transform-first", "aggregate-first")


def _message_widths(entry: Any) -> list[tuple[int, int]]:
    """``(K, N)`` of each linear message ``hector-aggregation-order`` saw in ``entry``'s
    forward function, in program order (none when the stage did not run)."""
    try:
        text = entry.ir("aggregate")
    except (KeyError, AttributeError):
        return []
    name = re.escape(entry.traced.name)
    found = re.search(rf"@{name}\(.*?hector\.aggregation_widths = \[([^\]]*)\]", text)
    if found is None:
        return []
    values = [int(v.split(":")[0]) for v in found.group(1).split(",")]
    return list(zip(values[::2], values[1::2], strict=True))


def _check_order(order: str) -> str:
    """``order`` if it is one of :data:`AGGREGATION_ORDERS`; ``ValueError`` naming them."""
    if order not in AGGREGATION_ORDERS:
        raise ValueError(f"order must be one of {', '.join(AGGREGATION_ORDERS)}; got {order!r}")
    return order


def _check_budget(budget: float) -> float:
    """``budget`` if it is a valid ``memory_budget`` (a number >= 0, or -1 for none)."""
    if (
        isinstance(budget, bool)
        or not isinstance(budget, int | float)
        or not (budget == -1 or 0 <= budget < float("inf"))
    ):
        raise ValueError(
            "memory_budget must be a fraction of the saved bytes (0..1), a byte count (> 1) "
            f"or -1 (keep everything); got {budget!r}"
        )
    return float(budget)


@dataclass(frozen=True)
class _Signature:
    """What tracing tells of a call's arguments before any compilation: each one's kind and
    the positions of those the results depend on."""

    kinds: tuple[Kind | str, ...]
    used: frozenset[int]


class CompiledFunction:
    """A forward function compiled by Hector; call it like the original on a HeteroGraph."""

    def __init__(
        self,
        fn: Callable[..., Any],
        target: str = "cpu",
        *,
        compact: bool = True,
        reorder: bool = True,
        fuse: bool = True,
        order: str = "auto",
        memory_budget: float = -1.0,
    ) -> None:
        _target(target)  # unknown targets fail here, not at the first call
        self.fn = fn
        self.target = target
        self.optimizations = (compact, reorder, fuse)
        # Saved values kept resident in training (placement-plan-saved; -1: all).
        self.memory_budget = _check_budget(memory_budget)
        # Order of linear messages (hector-aggregation-order): "auto" lets the cost model pick
        # per layer and graph; "transform-first" / "aggregate-first" force one.
        self.order = _check_order(order)
        self._message_widths: dict[tuple, list[tuple[int, int]]] = {}
        self._cache: dict[tuple, Any] = {}
        self._signatures: dict[tuple, _Signature] = {}
        self.compile_seconds = 0.0  # of the last compilation
        self.compilations = 0  # kernels built (cache misses): one per mode once warmed up
        functools.update_wrapper(self, fn)
        params = list(inspect.signature(fn).parameters)
        if not params:
            raise TraceError(f"{fn.__name__} must take the graph as its first parameter")
        self._params = params[1:]

    def check_arguments(self, g: Any, tensors: tuple[Any, ...]) -> None:
        """Check the call's arguments (a graph, then float32, float16 or bfloat16 tensors on
        one CPU or CUDA device, as many as the function takes) before anything reads them."""
        if not isinstance(g, HeteroGraph):
            raise TypeError(f"the first argument must be a hector.HeteroGraph, got {type(g)}")
        if len(tensors) != len(self._params):
            raise TypeError(
                f"{self.fn.__name__} takes {len(self._params)} tensors after the graph, "
                f"got {len(tensors)}"
            )
        for name, t in zip(self._params, tensors, strict=True):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"argument '{name}' must be a torch.Tensor, got {type(t)}")
            if t.dtype not in _FLOAT_TYPES:
                raise ValueError(
                    f"argument '{name}' must be float32, float16 or bfloat16, got {t.dtype}"
                )
            if t.device.type not in ("cpu", "cuda"):
                raise ValueError(f"argument '{name}' is on {t.device}; Hector takes CPU or CUDA")
            if t.device != tensors[0].device:
                raise ValueError(
                    f"argument '{name}' is on {t.device} but '{self._params[0]}' is on "
                    f"{tensors[0].device}; put all tensors on one device"
                )

    def _signature(self, g: HeteroGraph, tensors: tuple[torch.Tensor, ...]) -> _Signature:
        """Each argument's kind and the arguments the results depend on, traced once per
        layout: the graph's schema and each argument's rank, trailing dims, dtype and device
        (what tracing reads; no row count and no weight's first dim)."""
        layout = (
            g.schema(),
            tuple((t.dim(), *t.shape[1:]) for t in tensors),
            tuple((t.dtype, t.device) for t in tensors),
        )
        sig = self._signatures.get(layout)
        if sig is None:
            traced = trace(self.fn, [tuple(t.shape) for t in tensors])
            used = traced.used_args if traced.used_args is not None else range(len(tensors))
            sig = self._signatures[layout] = _Signature(traced.arg_kinds, frozenset(used))
        return sig

    def _key(self, g: HeteroGraph, tensors: tuple[torch.Tensor, ...]) -> tuple:
        """The kernel cache's key of these arguments: the graph's schema and each argument's
        dtype, device and every dim its kernel is built with: all of them but the row count
        of a node- or edge-wise argument, which the kernel reads at run time (and
        :meth:`Executable.check` compares with the graph's)."""
        kinds = self._signature(g, tensors).kinds
        rows = (Kind.NODE, Kind.EDGE)
        return (
            g.schema(),
            tuple(
                (None, *t.shape[1:]) if k in rows else tuple(t.shape)
                for t, k in zip(tensors, kinds, strict=True)
            ),
            tuple((t.dtype, t.device) for t in tensors),
        )

    def compile_for(
        self,
        g: HeteroGraph,
        *tensors: torch.Tensor,
        train: bool = False,
        frozen: Collection[int] = (),
    ) -> Executable:
        """Compile (or fetch from the cache) the kernel for these argument shapes; with
        ``train``, the module also holds the ``_train`` and ``_backward`` functions, which
        give no gradient to the tensors at the ``frozen`` positions."""
        self.check_arguments(g, tensors)
        return self._compiled(g, tensors, train, tuple(sorted(frozen)))

    def _compiled(
        self,
        g: HeteroGraph,
        tensors: tuple[torch.Tensor, ...],
        train: bool,
        frozen: tuple[int, ...] = (),
        result: torch.dtype | None = None,
    ) -> Executable:
        """:meth:`compile_for` on arguments already checked; with ``train``, the tensors at the
        ``frozen`` positions (input features) get no gradient, and their backward kernels are
        not built. Without ``train``, a half ``result`` type is what the kernel writes its
        ``[rows, width]`` results in (rounded from f32 as they are written)."""
        written = None if train else STORAGE_TYPES.get(result) if result is not None else None
        options = self.options_for(g)
        if train and self.memory_budget >= 0:  # CPU target: the CUDA host code has no plan
            # placement-plan-saved weighs the saved values at this graph's sizes.
            sizes = replace(
                options.graph,
                nodes=g.num_nodes,
                edges=g.num_edges,
                compact_rows=g.num_compact,
                dst_compact_rows=g.num_dst_compact,
            )
            options = replace(options, memory_budget=self.memory_budget, graph=sizes)
        # CUDA tensors (or target='cuda') run on target cuda; the CPU path is unchanged.
        cuda = self.target == "cuda" or any(t.device.type == "cuda" for t in tensors)
        if cuda and options.memory_budget >= 0:
            raise NotImplementedError(
                "memory_budget plans CPU training only: the CUDA host code does not offload "
                "saved values yet (compile without memory_budget for CUDA tensors)"
            )
        # The switches and the graph statistics the code depends on (the compaction decision,
        # HGT's folding, the sizes a memory plan holds for; schedules are per worker count).
        base = (self._key(g, tensors), train, frozen, written, cuda, options.cache_key())
        # The aggregation order: key on the choices this graph's D/E makes for the messages
        # the kernel holds (their widths, learnt at the first compilation of these shapes).
        key = base + (self._orders(base, options, train),)
        entry = self._cache.get(key)
        if entry is None:
            start = time.perf_counter()
            storage = {
                i: STORAGE_TYPES[t.dtype] for i, t in enumerate(tensors) if t.dtype in STORAGE_TYPES
            }
            shapes = [tuple(t.shape) for t in tensors]
            traced = trace(self.fn, shapes, no_grad=frozen, storage=storage, written=written)
            back_end = _target("cuda" if cuda else self.target)
            entry = back_end.compile(traced, autodiff=train, options=options)
            self.compile_seconds = time.perf_counter() - start
            self.compilations += 1
            if base not in self._message_widths:
                self._message_widths[base] = _message_widths(entry)
                key = base + (self._orders(base, options, train),)
            self._cache[key] = entry
        return entry

    def _orders(self, base: tuple, options: Options, train: bool) -> tuple[str, ...] | None:
        """The order of each linear message in kernels of ``base`` on a graph with
        ``options.graph.dst_ratio``: a forced order, or the cost model's choice per message (None
        before the first compilation tells the messages' widths)."""
        if options.order != "auto":
            return (options.order,)
        widths = self._message_widths.get(base)
        if widths is None:
            return None
        from ..passes.aggregate_order import choose

        return tuple(
            choose(options.graph.dst_ratio, k, n, training=train, threads=options.threads)
            for k, n in widths
        )

    def options_for(self, g: HeteroGraph) -> Options:
        """The optimization options for graph ``g`` (its statistics feed the cost models)."""
        compact, reorder, fuse = self.optimizations
        # Reordering is judged per row (rows unknown): the decision then holds for every graph
        # of this schema, so one kernel serves them all.
        order = _check_order(self.order)
        # The aggregation-order cost model depends on the graph only through D/E.
        dst_ratio = g.dst_compaction_ratio if order == "auto" else -1.0
        stats = GraphStats(ratio=g.compaction_ratio, src_typed=g.src_typed, dst_ratio=dst_ratio)
        return Options(
            compact, reorder, fuse, order=order, threads=torch.get_num_threads(), graph=stats
        )

    def __call__(self, g: HeteroGraph, *tensors: torch.Tensor) -> Any:
        """Run the compiled function (compiling it first for new shapes); with a tensor that
        requires grad, the result is differentiable through ``loss.backward()``.

        Half-precision arguments (float16 or bfloat16) are computed in float32; the results
        come back in the type PyTorch would promote them to, or autocast's (:func:`result_type`).
        A half argument that takes no gradient is passed as it is (the templates convert it on
        load); one that does is cast, so its gradient reaches it in its own type."""
        self.check_arguments(g, tensors)  # before anything reads tensor attributes
        half = result_type(tensors)
        grad = torch.is_grad_enabled()
        args = tuple(t.float() if grad and t.requires_grad else t for t in tensors)
        outs = self._run(g, args, half)
        if half is None:
            return outs
        if isinstance(outs, torch.Tensor):
            return outs.to(half)
        return tuple(o.to(half) for o in outs)

    def _run(
        self, g: HeteroGraph, tensors: tuple[torch.Tensor, ...], half: torch.dtype | None = None
    ) -> Any:
        """:meth:`__call__` on checked arguments: float32, or half types taking no gradient;
        an inference kernel writes ``[rows, width]`` results in ``half`` where given."""
        # As in PyTorch, a result that depends on no tensor requiring grad takes no gradient.
        used = self._signature(g, tensors).used
        grads = any(t.requires_grad for i, t in enumerate(tensors) if i in used)
        train = torch.is_grad_enabled() and grads
        frozen = tuple(i for i, t in enumerate(tensors) if train and not t.requires_grad)
        entry = self._compiled(g, tensors, train, frozen, half)
        entry.check(g, tensors, self._params)  # against the graph, before the kernel runs
        if not train:
            outs = entry.call(entry.traced.name, g, list(tensors))
        else:
            outs = TrainingStep.apply(entry, g, *tensors)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def ir(self, stage: str, g: HeteroGraph, *tensors: torch.Tensor) -> str:
        """The IR after ``stage`` (``inter``, ``intra``, ``loops``, ``llvm``) for these shapes."""
        return self.compile_for(g, *tensors).ir(stage)

    def ptx(self, g: HeteroGraph, *tensors: torch.Tensor) -> str:
        """PTX for the GPU kernels of this function, one ``.entry`` per template."""
        entry = self.compile_for(g, *tensors)
        gpu = _target("gpu", runs=False)
        # Target.compile is typed for the targets that run (an Executable); the "gpu" target
        # (runs=False) returns the back end's GpuEntry, which holds the PTX.
        code = cast("GpuEntry", gpu.compile(entry.traced, options=self.options_for(g)))
        return code.ptx


def compile(  # noqa: A001
    fn: Callable[..., Any] | None = None,
    *,
    target: str = "cpu",
    compact: bool = True,
    reorder: bool = True,
    fuse: bool = True,
    order: str = "auto",
    memory_budget: float = -1.0,
) -> Any:
    """Decorator: compile a forward function ``fn(g, *tensors)`` with Hector.

    ``compact``, ``reorder`` and ``fuse`` switch compact materialization, linear operator
    reordering and template fusion (with DCE/CSE) on or off; ``order`` picks how linear
    messages are summed (``"auto"``: by the cost model of ``hector-aggregation-order``;
    ``"transform-first"``, ``"aggregate-first"``); results and gradients are the same either
    way, only time and memory change.

    ``memory_budget`` (CPU training) bounds the bytes of saved values the training step keeps
    resident between its forward and backward: a fraction of what it would save (``0.5``) or
    bytes (``> 1``); the rest is recomputed in the backward or offloaded to the store by the
    generated code (``placement-plan-saved``, docs/offload.md). ``-1`` keeps everything."""

    def make(f: Callable[..., Any]) -> CompiledFunction:
        cf = CompiledFunction(
            f, target=target, compact=compact, reorder=reorder, fuse=fuse, order=order
        )
        cf.memory_budget = _check_budget(memory_budget)
        return cf

    if fn is None:
        return make
    return make(fn)


def compile_with_arguments(fn: Callable[..., Any], names: Sequence[str]) -> CompiledFunction:
    """Compile ``fn(g, *tensors)``, written over ``*rest``, as a program whose positional
    arguments are named ``names`` (``"g"`` first): the names the tracer reads from the
    signature (a program built per configuration, whose arguments depend on its options)."""
    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in names]
    fn.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return compile(fn)
