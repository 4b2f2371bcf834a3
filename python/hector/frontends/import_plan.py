"""The plan of an imported program: the raised module cut into units, each closed and compiled.

:class:`ImportPlan` reads torch-mlir's module after ``raise-torch-to-hector`` and gives every op
a phase, so that each phase's raised ops form one maximal hector region (:class:`Region`) and
its other torch ops one maximal torch segment (:class:`TorchSegment`), both reading only
earlier units. Each region is closed over its inputs and escaping results, rebuilt as one
``hector_inter`` function through the typed builders and compiled by Hector, forward and
backward (cached by program text, so another import of the same program reuses it). Each torch
segment is closed over the tensors it reads, with the scalar glue it needs cloned in, and
compiled through torch-mlir's linalg path (``fallback="linalg"``), run eagerly
(``fallback="eager"``) or, with metadata ops only, as views; its backward is derived and
compiled on first use (:meth:`ImportPlan.backward_of`).
:class:`~hector.frontends.importer.ImportedModel` runs the units in order.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from ..dialects import Kind
from ..dialects import hector_inter as inter
from ..lowering.from_torch.raise_to_hector import KIND_ATTR, TYPE_ARRAY_ROWS
from ..program import Traced
from .import_ops import (
    CAST,
    FLOAT_DTYPES,
    VIEW_OPS,
    ImportError_,
    canonical,
    defining_op,
    is_glue,
    op_attributes,
    run_eager,
    static_shape,
    static_vtensor_shape,
    user_op,
    vtensor_shape,
)
from .import_segments import Region, TorchSegment, lowering_error

__all__ = ["ImportPlan"]

_INTER = f"{inter.DIALECT.name}."
_SEGMENTS = "operandSegmentSizes"  # filled in by the builders

#: Compiled hector regions by their program text, kinds, shapes and weight slices.
_REGION_CACHE: dict[tuple[Any, ...], Any] = {}


class ImportPlan:
    """The units of an imported program in the order they run: ``units`` holds ``("hector",
    Region)`` and ``("torch", TorchSegment)`` pairs; ``segments`` and ``torch_segments`` the
    regions and segments; ``raised`` the module they were cut from, ``block`` its function's
    body (whose arguments are the program's inputs) and ``ret`` its return."""

    def __init__(self, raised: Any, fallback: str) -> None:
        """Cut ``raised`` (torch-mlir's module after ``raise-torch-to-hector``) into units and
        compile them; torch segments are compiled by ``fallback`` (``"linalg"`` or
        ``"eager"``)."""
        self.fallback = fallback
        # The module owns every op and value the units hold: it lives as long as the plan.
        self.raised = raised
        self._ctx = raised.context
        self._graph_t = inter.graph_type(self._ctx)
        func = next(
            op.operation for op in raised.body.operations if op.operation.name == "func.func"
        )
        self.block = func.regions[0].blocks[0]
        ops = [o.operation for o in self.block.operations]
        phase = _phases(ops)
        is_h = {op: op.name.startswith(_INTER) for op in ops}
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
        self.ret = ops[-1]
        for seg in segs.values():
            self._finish_segment(seg)
        for tseg in tsegs.values():
            self._finish_torch_segment(tseg)
        self.units = [(kind, obj) for _, _, kind, obj in units]
        self.segments = list(segs.values())
        self.torch_segments = list(tsegs.values())

    def _kind(self, v: Any) -> Kind:
        """The kind of a region value (not the graph): by the op specs for hector_inter
        results, from the raise pass's mark for torch values entering a region."""
        v = canonical(v)
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
                w = canonical(view.operand("weight"))
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
                c = canonical(v)
                if c.type == self._graph_t or defining_op(c) in inside or c in inputs:
                    continue
                inputs.append(c)
        return inputs

    def _region_type(self, v: Any, kind: Kind | None = None) -> Any:
        """The type ``v`` has in a compiled region: its rows dynamic when it is row-wise."""
        from torch_mlir import ir

        v = canonical(v)
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
                c = canonical(v)
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
            c = canonical(v)
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
                        c = canonical(v)
                        new.operands[i] = mapping[c if c in mapping else v]
                    for r, nr in zip(op.results, new.results, strict=True):
                        mapping[r] = nr
                func_d.ReturnOp([mapping[r] for r in seg.outputs])
        return module

    def replay(self, seg: TorchSegment) -> Any:
        """A Python callable running the segment's ops with ``torch.ops.aten`` (the eager
        semantics the compiled code must match; traced for the backward)."""

        def run(*tensors: Any) -> tuple[Any, ...]:
            env: dict[Any, Any] = dict(zip(seg.inputs, tensors, strict=True))
            for op in seg.ops:
                run_eager(op, env, canonical)
            return tuple(env[r] for r in seg.outputs)

        return run

    def backward_of(self, seg: TorchSegment, mask: tuple[bool, ...], example: list[Any]) -> Any:
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

        replay = self.replay(seg)
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


def _phases(ops: list[Any]) -> dict[Any, int]:
    """The phase of each op (casts and the return have none): torch ops take even phases and
    hector_inter ops odd ones, each the first of its parity after the phases of the ops it
    reads, so a phase's ops of one kind read only earlier phases and their own kind."""
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
            src = producer.get(canonical(v))
            if src is None or src not in phase:
                continue
            q = phase[src] if is_h[src] == is_h[op] else phase[src] + 1
            p = max(p, q)
        if p % 2 != want:
            p += 1
        phase[op] = p
    return phase
