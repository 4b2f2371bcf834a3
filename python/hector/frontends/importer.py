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

import warnings
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
from ..lowering.from_torch.raise_to_hector import KIND_ATTR, TYPE_ARRAY_ROWS
from ..program import Traced
from .import_ops import (
    CAST,
    FLOAT_DTYPES,
    VIEW_OPS,
    ImportError_,
    defining_op,
    is_glue,
    op_attributes,
    run_eager,
    static_shape,
    static_vtensor_shape,
    user_op,
    vtensor_shape,
)
from .import_segments import Region, TorchSegment, TorchSegmentFunction, lowering_error

_INTER = f"{inter.DIALECT.name}."
_SEGMENTS = "operandSegmentSizes"  # filled in by the builders
#: ATen ops kept whole through torch-mlir's decompositions, so the raise pass sees them:
#: ``linear``, and every torch op a unary function of the dialect is declared to raise from.
LEGAL_OPS = [
    "aten.linear",
    *(f.torch.removeprefix("torch.") for f in inter.UNARY_FUNCTIONS if f.torch is not None),
]


#: Compiled hector regions by their program text, kinds, shapes and weight slices.
_REGION_CACHE: dict[tuple[Any, ...], Any] = {}


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
        self._module = raised
        self.order = order
        self.report = report
        self._state_names = state_names
        self._plan: list[tuple[str, Any]] = []
        self.segments: list[Region] = []
        self._perm, self._inv = graph.perm, graph.inverse_perm
        if fallback not in ("linalg", "eager"):
            raise ValueError(f"fallback must be 'linalg' or 'eager', got {fallback!r}")
        self.fallback = fallback
        self.torch_segments: list[TorchSegment] = []
        self._build()

    def rebind(self, graph: HeteroGraph, order: str | None) -> None:
        """Run later calls on ``graph`` (same node count and relations as the one imported
        for), whose index inputs are in ``order`` (``"sorted"`` or ``"original"``)."""
        self.graph, self.order = graph, order
        self._perm, self._inv = graph.perm, graph.inverse_perm

    # -- planning -------------------------------------------------------------------------------
    def _build(self) -> None:
        self._ctx = self._module.context
        self._graph_t = inter.graph_type(self._ctx)
        func = next(
            op.operation for op in self._module.body.operations if op.operation.name == "func.func"
        )
        self._block = func.regions[0].blocks[0]
        ops = [o.operation for o in self._block.operations]
        self._ops = ops

        def canon(v: Any) -> Any:
            while True:
                owner = v.owner
                if owner.__class__.__name__ == "Block":
                    return v
                owner = owner.operation
                if owner.name != CAST:
                    return v
                v = owner.operands[0]

        self._canon = canon
        producer: dict[Any, Any] = {}
        for op in ops:
            for r in op.results:
                producer[r] = op
        phase: dict[Any, int] = {}
        is_h = {op: op.name.startswith(_INTER) for op in ops}
        for op in ops:
            if op.name in (CAST, "func.return"):
                continue
            want = 1 if is_h[op] else 0
            p = want
            for v in op.operands:
                src = producer.get(canon(v))
                if src is None or src not in phase:
                    continue
                q = phase[src] if is_h[src] == is_h[op] else phase[src] + 1
                p = max(p, q)
            if p % 2 != want:
                p += 1
            phase[op] = p
        segs: dict[int, Region] = {}
        tsegs: dict[int, TorchSegment] = {}
        units: list[tuple[int, int, str, Any]] = []
        for i, op in enumerate(ops):
            if op not in phase:
                continue
            if is_h[op]:
                if phase[op] not in segs:
                    segs[phase[op]] = Region(f"region{len(segs)}")
                    units.append((phase[op], i, "hector", segs[phase[op]]))
                segs[phase[op]].ops.append(op)
            elif not is_glue(op):
                # Every torch op of one phase depends only on earlier phases and on its own
                # phase's torch ops: one maximal segment per phase, in program order.
                if phase[op] not in tsegs:
                    tsegs[phase[op]] = TorchSegment(f"torch_segment{len(tsegs)}")
                    units.append((phase[op], i, "torch", tsegs[phase[op]]))
                tsegs[phase[op]].ops.append(op)
        units.sort(key=lambda u: (u[0], u[1]))
        self._ret = ops[-1]
        for seg in segs.values():
            self._finish_segment(seg)
        for tseg in tsegs.values():
            self._finish_torch_segment(tseg)
        self._plan = [(kind, obj) for _, _, kind, obj in units]
        self.segments = list(segs.values())
        self.torch_segments = list(tsegs.values())

    def _kind(self, v: Any) -> Kind:
        """The kind of a region value (not the graph): by the op specs for hector_inter
        results, from the raise pass's mark for torch values entering a region."""
        v = self._canon(v)
        op = defining_op(v)
        if op is not None and op.name.startswith(_INTER):
            return self._result_kind(op)
        # A torch value entering a region: the raise pass marked its cast with the kind.
        for u in v.uses:
            owner = user_op(u)
            if owner.name == CAST and KIND_ATTR in owner.attributes:
                return Kind(self._string(owner.attributes[KIND_ATTR]))
        return Kind.WEIGHT

    @staticmethod
    def _string(attr: Any) -> str:
        from torch_mlir import ir

        return ir.StringAttr(attr).value

    def _result_kind(self, op: Any) -> Kind:
        """What the rows of a hector_inter op's result index, by its spec: the row map's
        target, the rows its ``slice`` picks weights for, or those of its first row operand."""
        view = inter.view(op)
        spec = view.spec
        if spec.rowmap is not None:
            return spec.rowmap.dst
        if spec.result_kind is not None:
            return spec.result_kind
        if "slice" in op.attributes and view.attr("slice") in TYPE_ARRAY_ROWS:
            return TYPE_ARRAY_ROWS[view.attr("slice")]
        first = next(o.name for o in spec.operands if o.constraint == "tensor")
        return self._kind(view.operand(first))

    def _finish_segment(self, seg: Region) -> None:
        """Close a hector region over its inputs and escaping results, build it as one
        hector_inter function and compile it (forward and backward)."""
        from ..targets.cpu import compile_traced

        inside = set(seg.ops)
        seg.inputs = self._region_inputs(seg, inside)
        seg.outputs = [
            op.results[0]
            for op in seg.ops
            if any(self._escapes(u, inside) for u in op.results[0].uses)
        ]
        seg.input_kinds = [self._kind(v) for v in seg.inputs]
        seg.output_kinds = [self._kind(v) for v in seg.outputs]
        seg.text = self._region_text(seg)
        slices: dict[int, str] = {}
        for op in seg.ops:
            view = inter.view(op)
            if op.name == f"{_INTER}typed_linear" and view.attr("slice") in TYPE_ARRAY_ROWS:
                w = self._canon(view.operand("weight"))
                if w in seg.inputs:
                    slices[seg.inputs.index(w)] = view.attr("slice")
        traced = Traced(
            seg.name,
            seg.text,
            tuple(seg.input_kinds),
            tuple(seg.output_kinds),
            tuple(tuple(static_shape(v)[1:]) for v in seg.outputs),
            slices,
        )
        key: tuple[Any, ...] = (seg.name, seg.text, traced.arg_kinds, traced.result_kinds)
        key += (traced.result_widths, tuple(sorted(slices.items())))
        if key not in _REGION_CACHE:
            # Rows are dynamic in a region, so another graph's (or size's) import of the same
            # program reuses the compiled kernels (the Dynamo backend specialises per size).
            _REGION_CACHE[key] = compile_traced(traced, autodiff=True)
        seg.entry = _REGION_CACHE[key]

    def _region_inputs(self, seg: Region, inside: set[Any]) -> list[Any]:
        """The values a region reads from outside it (not the graph), in order of first use."""
        inputs: list[Any] = []
        for op in seg.ops:
            for v in op.operands:
                c = self._canon(v)
                if c.type == self._graph_t or defining_op(c) in inside or c in inputs:
                    continue
                inputs.append(c)
        return inputs

    def _region_type(self, v: Any, kind: Kind | None = None) -> Any:
        """The type ``v`` has in a compiled region: its rows dynamic when it is row-wise."""
        from torch_mlir import ir

        v = self._canon(v)
        if v.type == self._graph_t:
            return v.type
        dims = static_shape(v)
        if (kind or self._kind(v)) in (Kind.NODE, Kind.EDGE):
            dims = [ir.ShapedType.get_dynamic_size(), *dims[1:]]
        return ir.RankedTensorType.get(dims, ir.F32Type.get())

    def _region_text(self, seg: Region) -> str:
        """The region as one hector_inter ``func.func`` built through the typed builders (each
        op at its torch op's location), printed with its locations."""
        from torch_mlir import ir
        from torch_mlir.dialects import func as func_d

        with self._ctx, ir.Location.unknown():
            module = ir.Module.create()
            typed = zip(seg.inputs, seg.input_kinds, strict=True)
            inputs = [self._region_type(v, k) for v, k in typed]
            results = [self._region_type(v) for v in seg.outputs]
            with ir.InsertionPoint(module.body):
                fn = func_d.FuncOp(seg.name, ([self._graph_t, *inputs], results))
                kinds = [{KIND_ATTR: ir.StringAttr.get(str(k))} for k in seg.input_kinds]
                fn.arg_attrs = ir.ArrayAttr.get([ir.DictAttr.get(d) for d in [{}, *kinds]])
                block = fn.add_entry_block()
            mapping = dict(zip(seg.inputs, block.arguments[1:], strict=True))
            with ir.InsertionPoint(block):
                for op in seg.ops:
                    mapping[op.results[0]] = self._clone_region_op(op, mapping, block)
                func_d.ReturnOp([mapping[v] for v in seg.outputs])
        # Into Hector's MLIR copy: IR passes between the two copies only as text.
        return module.operation.get_asm(enable_debug_info=True)

    def _clone_region_op(self, op: Any, mapping: dict[Any, Any], block: Any) -> Any:
        """Rebuild one hector_inter op of a region through its builder, on region values."""
        view = inter.view(op)
        operands = {}
        for o in view.spec.operands:
            v = view.operand(o.name)
            if v is not None:
                c = self._canon(v)
                operands[o.name] = block.arguments[0] if c.type == self._graph_t else mapping[c]
        named = {a.name for a in view.spec.attributes}
        attrs = {n: a for n, a in op_attributes(op).items() if n in named}
        extra = {n: a for n, a in op_attributes(op).items() if n not in named | {_SEGMENTS}}
        build = getattr(inter.OPS, view.spec.name)
        result = self._region_type(op.results[0])
        return build(result=result, loc=op.location, extra=extra, **operands, **attrs)

    def _escapes(self, use: Any, inside: set[Any]) -> bool:
        owner = user_op(use)
        if owner.name == CAST:
            return any(self._escapes(u, inside) for u in owner.results[0].uses)
        return owner not in inside

    def _finish_torch_segment(self, seg: TorchSegment) -> None:
        """Close a torch segment over its inputs (tensors from earlier units), clone the
        scalar glue it reads into it, find its outputs and compile it (``kind="linalg"``)."""
        members = set(seg.ops)
        ordered: list[Any] = []
        placed: set[Any] = set()
        inputs: dict[Any, Any] = {}  # canonical value -> the torch-typed value seen here

        def need(v: Any) -> None:
            c = self._canon(v)
            owner = c.owner
            op = None if owner.__class__.__name__ == "Block" else owner.operation
            if op is not None and (op in members or op in placed):
                return
            if op is not None and is_glue(op):
                for w in op.operands:
                    need(w)
                placed.add(op)
                ordered.append(op)
                return
            if vtensor_shape(v.type) is None:
                raise ImportError_(
                    f"{seg.name}: operand of type {v.type} comes from outside the segment; "
                    "only tensors cross segment boundaries"
                )
            inputs.setdefault(c, v)

        for op in seg.ops:
            for v in op.operands:
                need(v)
            ordered.append(op)
        seg.ops = ordered
        seg.inputs = list(inputs)
        seg.input_types = [inputs[c].type for c in seg.inputs]
        outs = []
        for op in seg.ops:
            if op not in members:
                continue
            for r in op.results:
                if vtensor_shape(r.type) is not None and any(
                    self._used_outside(u, members) for u in r.uses
                ):
                    outs.append(r)
        seg.outputs = outs
        module = self._torch_segment_module(seg)
        seg.text = module.operation.get_asm(enable_debug_info=True)  # for people to read
        compute = [op for op in seg.ops if op in members and op.name not in VIEW_OPS]
        if not compute:
            seg.kind = "view"
        elif self.fallback == "eager":
            seg.kind = "eager"
        else:
            from hector.lowering.cpu.torch_linalg import LinalgLoweringError, compile_torch_function

            try:
                seg.compiled = compile_torch_function(module, seg.name)
            except LinalgLoweringError as err:
                raise lowering_error(seg, err, "forward") from None
            seg.kind = "linalg"

    def _used_outside(self, use: Any, members: set[Any]) -> bool:
        """Whether a use of a segment value lies outside the segment (another unit, a hector
        region through a cast, the return, or glue read elsewhere)."""
        owner = user_op(use)
        if owner.name in (CAST, "func.return"):
            return True
        if is_glue(owner):
            return any(self._used_outside(u, members) for r in owner.results for u in r.uses)
        return owner not in members

    def _torch_segment_module(self, seg: TorchSegment) -> Any:
        """The segment as a module of one torch-dialect ``func.func`` (ops cloned with their
        locations)."""
        from torch_mlir import ir
        from torch_mlir.dialects import func as func_d

        with self._ctx, ir.Location.unknown():
            module = ir.Module.create()
            with ir.InsertionPoint(module.body):
                fn = func_d.FuncOp(seg.name, (list(seg.input_types), [r.type for r in seg.outputs]))
                block = fn.add_entry_block()
            mapping: dict[Any, Any] = dict(zip(seg.inputs, block.arguments, strict=True))
            with ir.InsertionPoint(block):
                for op in seg.ops:
                    new = op.clone()
                    for i, v in enumerate(op.operands):
                        c = self._canon(v)
                        new.operands[i] = mapping[c if c in mapping else v]
                    for r, nr in zip(op.results, new.results, strict=True):
                        mapping[r] = nr
                func_d.ReturnOp([mapping[r] for r in seg.outputs])
        return module

    def _replay(self, seg: TorchSegment) -> Any:
        """A Python callable running the segment's ops with ``torch.ops.aten`` (the eager
        semantics the compiled code must match; traced for the backward)."""

        def run(*tensors: Any) -> tuple[Any, ...]:
            env: dict[Any, Any] = dict(zip(seg.inputs, tensors, strict=True))
            for op in seg.ops:
                run_eager(op, env, self._canon)
            return tuple(env[r] for r in seg.outputs)

        return run

    def _backward_of(self, seg: TorchSegment, mask: tuple[bool, ...], example: list[Any]) -> Any:
        """The compiled vjp of a linalg segment for the inputs ``mask`` selects: a function of
        (all inputs, cotangents of the floating-point outputs) returning their gradients.
        Traced once (``make_fx`` over ``torch.func.vjp`` of the eager replay), imported with
        ``torch_mlir.fx.stateless_fx_import`` and compiled through the same linalg path."""
        if mask in seg.backward:
            return seg.backward[mask]
        from torch.fx.experimental.proxy_tensor import make_fx
        from torch_mlir import fx
        from torch_mlir.extras.fx_decomp_util import get_decomposition_table

        from hector.lowering.cpu.torch_linalg import LinalgLoweringError, compile_torch_function

        replay = self._replay(seg)
        n = len(seg.inputs)
        diff = [i for i, m in enumerate(mask) if m]
        fouts = [
            j for j, r in enumerate(seg.outputs) if static_vtensor_shape(r.type)[1] in FLOAT_DTYPES
        ]

        def vjp(*args: Any) -> tuple[Any, ...]:
            prims, cts = list(args[:n]), args[n:]

            def fwd(*d: Any) -> tuple[Any, ...]:
                full = list(prims)
                for i, t in zip(diff, d, strict=True):
                    full[i] = t
                outs = replay(*full)
                return tuple(outs[j] for j in fouts)

            pull = torch.func.vjp(fwd, *(prims[i] for i in diff))[1]
            return tuple(pull(tuple(cts)))

        name = f"{seg.name}_backward"
        try:
            gm = make_fx(vjp, decomposition_table=get_decomposition_table())(*example)
            exported = fx.stateless_fx_import(gm, output_type="torch", model_name=name)
        except Exception as err:  # tracing / import failures: say which segment and why
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ImportError_(
                f"cannot derive the backward of {seg.name} ({seg.op_names()}): {first}; "
                "import with fallback='eager' to differentiate it with PyTorch"
            ) from err
        try:
            seg.backward[mask] = (
                compile_torch_function(exported, name),
                diff,
                fouts,
            )
        except LinalgLoweringError as err:  # PyTorch differentiates the segment instead
            advice = "its backward runs with PyTorch (torch.func.vjp)"
            warnings.warn(str(lowering_error(seg, err, "backward", advice)), RuntimeWarning, 2)
            seg.backward[mask] = (vjp, diff, fouts)
        return seg.backward[mask]

    # -- running --------------------------------------------------------------------------------
    def forward(self, *inputs: Any) -> Any:
        """Run the imported program: eager torch ops and compiled hector regions in order."""
        state: dict[str, torch.Tensor] = dict(self.module.named_parameters())
        state.update(dict(self.module.named_buffers()))
        args = [state[n] for n in self._state_names] + list(inputs)
        block_args = list(self._block.arguments)
        if len(args) != len(block_args) - (1 if self.segments else 0):
            raise TypeError(
                f"the imported module takes {len(block_args) - len(self._state_names) - 1} "
                f"inputs, got {len(inputs)}"
            )
        env: dict[Any, Any] = dict(zip(block_args, args, strict=False))
        for kind, obj in self._plan:
            if kind == "torch":
                self._run_torch_segment(obj, env)
            else:
                self._run_segment(obj, env)
        outs = [self._value(v, env) for v in self._ret.operands]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _value(self, v: Any, env: dict[Any, Any]) -> Any:
        """A value of the program: computed by a unit, or scalar glue evaluated on demand."""
        c = self._canon(v)
        if c not in env:
            op = c.owner.operation
            for w in op.operands:
                self._value(w, env)
            run_eager(op, env, self._canon)
        return env[c]

    def _run_torch_segment(self, seg: TorchSegment, env: dict[Any, Any]) -> None:
        """Run one torch segment: compiled (through an autograd function when gradients are
        needed), as views, or eagerly op by op (``fallback="eager"``)."""
        if seg.kind in ("view", "eager"):
            for op in seg.ops:
                run_eager(op, env, self._canon)
            return
        tensors = [env[v] for v in seg.inputs]
        if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
            outs = TorchSegmentFunction.apply(self._backward_of, seg, *tensors)
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
