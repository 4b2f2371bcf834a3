"""``hector.import_model``: run a plain PyTorch ``nn.Module`` through torch-mlir and Hector.

The module is exported with ``torch_mlir.fx.export_and_import(..., output_type="torch")``
(parameters and buffers become function arguments, so training sees them), its graph index
inputs are bound to the ``graph=`` :class:`~hector.data.graph.HeteroGraph`,
``raise-torch-to-hector`` (``lowering/from_torch/raise_to_hector.py``) rewrites the relational
patterns into ``hector_inter``, and every maximal region of raised ops is compiled by
Hector (forward and, through ``hector-autodiff``, backward). What was not raised stays
ordinary tensor code, grouped into maximal *torch segments* between the hector regions
(one per phase of the plan, so data dependences hold). With ``fallback="linalg"`` (the
default) each segment becomes one
torch-dialect function compiled through torch-mlir's linalg path to the LLVM dialect and
JIT-run in Hector's MLIR (``lowering/cpu/torch_linalg.py``); under autograd it is a
``torch.autograd.Function`` whose backward is the segment's vjp (``make_fx`` over
``torch.func.vjp`` of the eager replay, imported with ``torch_mlir.fx.stateless_fx_import``),
compiled the same way on the first ``backward()``. Ops torch-mlir cannot lower are an
:class:`ImportError_` naming them with ``file:line``; ``fallback="eager"`` runs the segments op
by op with ``torch.ops.aten`` instead. Segments of metadata ops only (constants, lists,
views/reshapes) run as torch views, without a kernel. ``strict=True`` refuses unraised ops,
naming each op and its ``file:line``.

Edge order: Hector stores edges sorted by edge type (``HeteroGraph.perm``). The index inputs may
be the graph's own arrays (``g.src``, ``g.dst``, ``g.etype``, or ``g.edge_index_sorted()``) —
then every edge-wise tensor is in the graph's order and nothing moves — or the user's original,
unsorted ``edge_index`` / ``edge_type`` that built the graph; then edge-wise tensors entering a
compiled region are permuted by ``perm`` and edge-wise results leaving it are permuted back, so
the imported module computes exactly what the eager one does.

The imported program is specialised to the example inputs' shapes (the graph's size): call it
with tensors of the same shapes, on the same graph.
"""

from __future__ import annotations

from typing import Any

# Hector's MLIR (and its JIT) must be loaded before torch-mlir's copy: when torch-mlir's native
# libraries load first, JIT-compiled Hector kernels resolve runtime symbols into torch-mlir's
# LLVM and crash. ``import hector`` (hector/__init__.py) already loads them first, or refuses
# with a clear ImportError when torch_mlir's were loaded before; these imports keep it explicit.
import mlir.execution_engine  # noqa: F401,I001
import mlir.ir  # noqa: F401
import torch

from .. import lowering as _lowering  # noqa: F401  (registers Hector's passes)
from ..data.graph import HeteroGraph
from ..dialects import Kind
from ..dialects import hector_inter as inter
from .import_ops import ImportError_, canonical, run_eager
from .import_plan import ImportPlan
from .import_segments import Region, TorchSegment, TorchSegmentFunction

#: ATen ops kept whole through torch-mlir's decompositions, so the raise pass sees them:
#: ``linear``, and every torch op a unary function of the dialect is declared to raise from.
LEGAL_OPS = [
    "aten.linear",
    *(f.torch.removeprefix("torch.") for f in inter.UNARY_FUNCTIONS if f.torch is not None),
]


def _bindings(inputs: list[Any], g: HeteroGraph) -> tuple[dict[int, str], str | None]:
    """Which example inputs are graph arrays (by identity, else by value), and the edge order
    they are in: ``"sorted"`` (the graph's) or ``"original"`` (the user's)."""
    inv = g.inverse_perm
    sorted_ = {"src": g.src.long(), "dst": g.dst.long(), "etype": g.etype.long()}
    orig = {k: v[inv] for k, v in sorted_.items()}
    roles: dict[int, str] = {}
    orders: set[str] = set()
    for i, t in enumerate(inputs):
        if not isinstance(t, torch.Tensor) or t.dtype.is_floating_point:
            continue
        for name in ("src", "dst", "etype"):
            if t is getattr(g, name):
                roles[i] = name
                orders.add("sorted")
        if i in roles:
            continue
        if t is g.ntype or (
            t.dim() == 1 and t.numel() == g.num_nodes and t.equal(g.ntype.to(t.dtype))
        ):
            if t.numel() != g.num_edges or t is g.ntype:
                roles[i] = "ntype"
                continue
        for order, arrays in (("sorted", sorted_), ("original", orig)):
            if t.dim() == 1 and t.numel() == g.num_edges:
                for name, a in arrays.items():
                    if t.long().equal(a):
                        roles[i], found = name, order
                        break
                else:
                    continue
                orders.add(found)
                break
            if t.dim() == 2 and tuple(t.shape) == (2, g.num_edges):
                if t[0].long().equal(arrays["src"]) and t[1].long().equal(arrays["dst"]):
                    roles[i] = "edge_index"
                    orders.add(order)
                    break
    if len(orders) > 1:
        raise ImportError_(
            "graph index inputs mix the graph's edge-type-sorted order and the original edge "
            "order; pass all of them in one order"
        )
    if not any(r in ("src", "dst", "edge_index") for r in roles.values()):
        raise ImportError_(
            "no example input is the graph's src/dst index (or edge_index); pass the graph's "
            "arrays (g.src, g.dst, g.etype or g.edge_index_sorted()) or the edge_index the "
            "graph was built from"
        )
    return roles, (orders.pop() if orders else None)


class _Functional(torch.nn.Module):
    """``module`` with its parameters and buffers as leading forward arguments."""

    def __init__(self, module: torch.nn.Module, names: list[str]) -> None:
        super().__init__()
        self.inner = module
        self.names = names

    def forward(self, *args: Any) -> Any:
        state = dict(zip(self.names, args[: len(self.names)], strict=True))
        return torch.func.functional_call(self.inner, state, tuple(args[len(self.names) :]))


class ImportedModel(torch.nn.Module):
    """A module imported by :func:`import_model`; call it like the original module (with
    tensors of the example inputs' shapes). Its parameters are the original module's.

    ``raised`` is the torch-mlir module after ``raise-torch-to-hector``; the regions and
    segments are cut from it, and :attr:`raised_ir` is its text.
    """

    def __init__(
        self,
        module: torch.nn.Module,
        graph: HeteroGraph,
        raised: Any,
        order: str | None,
        state_names: list[str],
        report: Any,
        fallback: str = "linalg",
    ) -> None:
        super().__init__()
        self.module = module
        self.graph = graph
        # The raised module (torch-mlir's copy) stays as it is; its text is for people to read.
        self.raised_ir = raised.operation.get_asm(enable_debug_info=True)
        self.order = order
        self.report = report
        self._state_names = state_names
        self._perm, self._inv = graph.perm, graph.inverse_perm
        if fallback not in ("linalg", "eager"):
            raise ValueError(f"fallback must be 'linalg' or 'eager', got {fallback!r}")
        self.fallback = fallback
        self._plan = ImportPlan(raised, fallback)
        #: The compiled hector regions and the torch segments between them.
        self.segments: list[Region] = self._plan.segments
        self.torch_segments: list[TorchSegment] = self._plan.torch_segments

    def rebind(self, graph: HeteroGraph, order: str | None) -> None:
        """Run later calls on ``graph`` (same node count and relations as the one imported
        for), whose index inputs are in ``order`` (``"sorted"`` or ``"original"``)."""
        self.graph, self.order = graph, order
        self._perm, self._inv = graph.perm, graph.inverse_perm

    def forward(self, *inputs: Any) -> Any:
        """Run the imported program: eager torch ops and compiled hector regions in order."""
        state: dict[str, torch.Tensor] = dict(self.module.named_parameters())
        state.update(dict(self.module.named_buffers()))
        args = [state[n] for n in self._state_names] + list(inputs)
        block_args = list(self._plan.block.arguments)
        if len(args) != len(block_args) - (1 if self.segments else 0):
            raise TypeError(
                f"the imported module takes {len(block_args) - len(self._state_names) - 1} "
                f"inputs, got {len(inputs)}"
            )
        env: dict[Any, Any] = dict(zip(block_args, args, strict=False))
        for kind, obj in self._plan.units:
            if kind == "torch":
                self._run_torch_segment(obj, env)
            else:
                self._run_segment(obj, env)
        outs = [self._value(v, env) for v in self._plan.ret.operands]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _value(self, v: Any, env: dict[Any, Any]) -> Any:
        """A value of the program: computed by a unit, or scalar glue evaluated on demand."""
        c = canonical(v)
        if c not in env:
            op = c.owner.operation
            for w in op.operands:
                self._value(w, env)
            run_eager(op, env, canonical)
        return env[c]

    def _run_torch_segment(self, seg: TorchSegment, env: dict[Any, Any]) -> None:
        """Run one torch segment: compiled (through an autograd function when gradients are
        needed), as views, or eagerly op by op (``fallback="eager"``)."""
        if seg.kind in ("view", "eager"):
            for op in seg.ops:
                run_eager(op, env, canonical)
            return
        tensors = [env[v] for v in seg.inputs]
        if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
            outs = TorchSegmentFunction.apply(self._plan.backward_of, seg, *tensors)
        else:
            outs = seg.compiled(*tensors)
        for r, t in zip(seg.outputs, outs, strict=True):
            env[r] = t

    def _run_segment(self, seg: Region, env: dict[Any, Any]) -> None:
        from ..runtime.training import TrainingStep

        tensors = []
        for v, kind in zip(seg.inputs, seg.input_kinds, strict=True):
            t = env[v]
            if kind == Kind.EDGE and self.order == "original":
                t = t.index_select(0, self._perm)
            tensors.append(t.contiguous().float())
        train = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
        if train:
            outs = TrainingStep.apply(seg.entry, self.graph, *tensors)
        else:
            outs = seg.entry.call(seg.name, self.graph, tensors)
        for v, kind, t in zip(seg.outputs, seg.output_kinds, outs, strict=True):
            if kind == Kind.EDGE and self.order == "original":
                t = t.index_select(0, self._inv)
            env[v] = t

    def hector_ir(self) -> str:
        """The hector_inter text of every compiled region."""
        return "\n".join(s.text for s in self.segments)


def import_model(
    module: torch.nn.Module,
    example_inputs: tuple[Any, ...] | list[Any],
    graph: HeteroGraph,
    *,
    strict: bool = False,
    fallback: str = "linalg",
) -> ImportedModel:
    """Import ``module`` (called as ``module(*example_inputs)``) through torch-mlir, raise its
    relational patterns to hector_inter and compile them; return an :class:`ImportedModel`.

    ``graph`` tells which example inputs are graph indices (``src``, ``dst``, ``etype``,
    ``edge_index``, ``ntype``: the graph's own arrays, or the user's original edge arrays the
    graph was built from). With ``strict``, any op that cannot be raised is an error listing
    each such op with its ``file:line``. Otherwise those ops stay tensor code, grouped into
    maximal segments between the hector regions: ``fallback="linalg"`` (the default) compiles
    each segment through torch-mlir's linalg path for the CPU (forward now, backward on the
    first ``backward()``) and raises :class:`ImportError_` naming the ops torch-mlir cannot
    lower; ``fallback="eager"`` runs them op by op with ``torch.ops.aten`` instead.
    """
    if fallback not in ("linalg", "eager"):
        raise ValueError(f"fallback must be 'linalg' or 'eager', got {fallback!r}")
    if not isinstance(graph, HeteroGraph):
        raise TypeError(f"graph must be a hector.HeteroGraph, got {type(graph).__name__}")
    inputs = list(example_inputs)
    for i, t in enumerate(inputs):
        if not isinstance(t, torch.Tensor | int | float | bool | None):
            raise ImportError_(
                f"example input {i} is a {type(t).__name__}; import_model takes tensors (and "
                "Python scalars) as positional inputs: wrap the module in one whose forward "
                "takes the tensors and builds the dict/list itself"
            )
    roles, order = _bindings(inputs, graph)
    state: dict[str, torch.Tensor] = dict(module.named_parameters())
    state.update(dict(module.named_buffers()))
    names = list(state)
    return import_function(
        _Functional(module, names),
        [*state.values(), *inputs],
        {len(names) + i: role for i, role in roles.items()},
        graph,
        order,
        strict=strict,
        fallback=fallback,
        owner=module,
        state_names=names,
    )


def export_to_torch(function: torch.nn.Module, flat_inputs: list[Any]) -> Any:
    """Export ``function(*flat_inputs)`` with ``torch.export`` and import it into torch-mlir's
    torch dialect (the ops :data:`LEGAL_OPS` kept whole for the raise pass); the module, in
    torch-mlir's context. Both routes (``import_model`` and the Dynamo backend) come here."""
    from torch_mlir import fx
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    flat = [t.detach() if isinstance(t, torch.Tensor) else t for t in flat_inputs]
    table = get_decomposition_table()
    for name in LEGAL_OPS:  # what the raise pass matches whole must not be decomposed first
        table.pop(getattr(torch.ops.aten, name.removeprefix("aten.")).default, None)
    try:
        return fx.export_and_import(
            function,
            *flat,
            output_type="torch",
            decomposition_table=table,
            backend_legal_ops=LEGAL_OPS,
        )
    except Exception as err:  # torch.export / torch-mlir failures: say which step failed
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ImportError_(f"torch-mlir could not export the module: {first}") from err


def import_function(
    function: torch.nn.Module,
    flat_inputs: list[Any],
    roles: dict[int, str],
    graph: HeteroGraph,
    order: str | None,
    *,
    strict: bool = False,
    fallback: str = "linalg",
    owner: torch.nn.Module | None = None,
    state_names: list[str] | None = None,
) -> ImportedModel:
    """Export ``function(*flat_inputs)``, bind the inputs ``roles`` names (position → ``src``,
    ``dst``, ``etype``, ``ntype`` or ``edge_index``) to ``graph``, raise and compile: the one
    code path behind :func:`import_model` and the Dynamo backend (``hector.dynamo.backend``).

    ``owner``/``state_names``: the module whose parameters and buffers are the leading
    ``len(state_names)`` inputs (read from it at every call); without them every input is
    passed at the call.
    """
    from torch_mlir import ir

    from ..dialects import load_into_torch_mlir
    from ..lowering.from_torch.raise_to_hector import GRAPH_ATTR, RaiseError, raise_module

    mod = export_to_torch(function, flat_inputs)
    load_into_torch_mlir(mod.context)  # raised in place, in torch-mlir's own context
    with mod.context:
        func = next(o.operation for o in mod.body.operations if o.operation.name == "func.func")
        block = func.regions[0].blocks[0]
        attrs = []
        for i in range(len(block.arguments)):
            d = {GRAPH_ATTR: ir.StringAttr.get(roles[i])} if i in roles else {}
            attrs.append(ir.DictAttr.get(d))
        func.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs)
        i64 = ir.IntegerType.get_signless(64)
        func.attributes["hector.num_nodes"] = ir.IntegerAttr.get(i64, graph.num_nodes)
        func.attributes["hector.num_etypes"] = ir.IntegerAttr.get(i64, graph.num_etypes)
        try:
            report = raise_module(mod, strict=strict)
        except RaiseError as err:
            raise ImportError_(str(err)) from None
    return ImportedModel(
        owner if owner is not None else function,
        graph,
        mod,
        order,
        list(state_names or []),
        report,
        fallback,
    )
