"""``raise-torch-to-hector``: recognise relational patterns in torch-dialect IR (as produced by
``torch_mlir.fx.export_and_import(..., output_type="torch")``) and rewrite them into
``hector_inter`` ops, in torch-mlir's own MLIR context.

The function's index arguments are bound to the graph by an argument attribute
``{hector.data.graph = "src" | "dst" | "etype" | "ntype" | "edge_index"}`` (``hector.import_model``
sets it from the ``graph=`` argument; lit tests write it). The pass appends one argument
``%graph: !hector_inter.graph`` to the function and raises, in program order:

* ``index_select(x, 0, I)`` / ``x[I]`` with ``I`` the src (dst) index → ``gather_src``
  (``gather_dst``);
* ``bmm(X.unsqueeze(1), W[I]).squeeze(1)`` (also ``matmul``, ``index_select(W, 0, I)``) with
  ``I`` the edge (node) types → ``typed_linear {slice = "etype"}`` (``"ntype"``);
* ``mm`` / ``matmul`` with a rank-2 weight → ``typed_linear {slice = "none"}``; ``linear`` →
  the same on the transposed weight plus a bias ``add``;
* ``zeros.index_add(0, I, M)`` (exported as ``index_put`` with accumulation), ``scatter_add``
  and ``scatter_reduce(..., "sum")`` onto zeros with ``I`` the dst (src) index → ``sum_to_dst``
  (``sum_to_src``);
* segment softmax ``exp(s - max_by_dst(s)[dst]) / sum_by_dst(exp(...))[dst]`` (with or
  without the max, with or without an epsilon, as ``torch_geometric.utils.softmax`` writes it)
  → ``edge_softmax``;
* ``1 / deg[dst]`` with ``deg`` the in-degree (``index_add`` of ones, optionally clamped) →
  ``degree_norm {by = "dst"}``;
* ``X * s`` with per-row ``s [M, 1]`` and ``(X.view(M, H, Dh) * A.unsqueeze(-1)).view(M, D)``
  → ``scale``; ``(X * Y).sum(-1, keepdim=True)`` and ``(X * Y).view(M, H, Dh).sum(-1)`` →
  ``dot``;
* ``add``/``sub`` of rows, bias ``[D]`` and typed bias ``B[etype]``/``B[ntype]``; ``relu``,
  ``leaky_relu``, ``gelu`` (exact), ``exp``, ``tanh``, ``sigmoid``, ``neg`` → ``unary``.

Raised values flow back into torch code through ``builtin.unrealized_conversion_cast`` (torch
values into hector ops the same way); torch ops left without uses are erased. Elementwise ops
are raised only when one operand is already a raised value, so plain tensor code stays as it
is. What remains (``torch.aten.*``) runs eagerly around the compiled regions; ``strict`` turns
each remaining op into an error with its source location.

Each torch op name has one handler (``handlers.RAISE_HANDLERS``, filled by
``@_handles``) that recognises the patterns rooted at that op
(:class:`.function.RaisingFunction` holds the queries they share); the
hector_inter ops are created through the typed builders generated from their specs
(``hector_inter.OPS``), each at its torch op's location.

Run it from the command line with ``hector-opt -p raise-torch-to-hector FILE.mlir`` (shorthand
``--torch``; ``--torch-strict`` for the strict diagnostics).
"""

from __future__ import annotations

from typing import Any

from ...dialects import hector_inter as inter
from .function import RaisingFunction
from .handlers import raise_op
from .nodes import (
    GLUE_ATTR,
    GRAPH_ATTR,
    KIND_ATTR,
    LEAF,
    TYPE_ARRAY_ROWS,
    HNode,
    RaiseError,
    RaiseReport,
    Shape,
    defining_op,
    source_location,
    vtensor,
    vtensor_type,
)

__all__ = [
    "GRAPH_ATTR",
    "KIND_ATTR",
    "TYPE_ARRAY_ROWS",
    "RaiseError",
    "RaiseReport",
    "make_torch_context",
    "raise_module",
    "source_location",
    "vtensor",
]


class _Rewriter:
    """Rewrites one :class:`RaisingFunction`: raises its ops through the per-op handlers,
    builds the raised hector_inter ops, casts them back to torch and erases what they
    replaced."""

    def __init__(self, fn: RaisingFunction) -> None:
        self.fn = fn
        self.report = RaiseReport()

    def run(self, strict: bool) -> RaiseReport:
        """Raise every op of the function, rewrite, and report what stayed torch code."""
        for op in list(self.fn.block.operations):
            try:
                h = raise_op(self.fn, op.operation)
            except (IndexError, TypeError, ValueError, AttributeError):
                h = None
            if h is not None:
                h.anchor = op.operation
                self.fn.H[op.operation.results[0]] = h
        if self.fn.H:
            self.materialize_all()
        self.dce()
        for op in self.fn.block.operations:
            op = op.operation
            if op.name.startswith("torch.aten.") or op.name == "torch.operator":
                if GLUE_ATTR not in op.attributes:
                    self.report.unsupported.append((op.name, source_location(op.location)))
            if op.name.startswith(f"{inter.DIALECT.name}."):
                key = op.name.split(".", 1)[1]
                self.report.raised[key] = self.report.raised.get(key, 0) + 1
        if strict and self.report.unsupported:
            raise _strict_error(self.report.unsupported)
        return self.report

    def materialize_all(self) -> None:
        """Append the graph argument, build every raised node and cast it back to torch."""
        from torch_mlir.dialects import builtin

        ir = self.fn.ir
        with self.fn.func.context:
            self.graph = self.fn.block.add_argument(
                inter.graph_type(self.fn.func.context), self.fn.func.location
            )
            ftype = ir.FunctionType(ir.TypeAttr(self.fn.func.attributes["function_type"]).value)
            inputs = [a.type for a in self.fn.block.arguments]
            self.fn.func.attributes["function_type"] = ir.TypeAttr.get(
                ir.FunctionType.get(inputs, ftype.results)
            )
            if "arg_attrs" in self.fn.func.attributes:
                old = list(ir.ArrayAttr(self.fn.func.attributes["arg_attrs"]))
                old.append(ir.DictAttr.get({GRAPH_ATTR: ir.StringAttr.get("graph")}))
                self.fn.func.attributes["arg_attrs"] = ir.ArrayAttr.get(old)
            self.done: dict[int, Any] = {}
            self.casts: dict[Any, Any] = {}
            for v, h in list(self.fn.H.items()):
                out = self.build(h, h.anchor)
                with ir.InsertionPoint(h.anchor):
                    back = builtin.UnrealizedConversionCastOp(
                        [v.type], [out], loc=h.anchor.location
                    )
                v.replace_all_uses_with(back.result)

    def tensor_type(self, shape: Shape) -> Any:
        """The builtin f32 tensor type of ``shape`` (raised values are f32 rows or weights)."""
        ir = self.fn.ir
        return ir.RankedTensorType.get(list(shape), ir.F32Type.get())

    def leaf(self, h: HNode) -> Any:
        """The hector-side value of a torch leaf: a cast (of its transpose, for ``linear``'s
        weight) right after its definition, marked with its kind; one per value."""
        from torch_mlir.dialects import builtin
        from torch_mlir.dialects import torch as torch_d

        ir = self.fn.ir
        key = (h.value, h.glue_t)
        if key in self.casts:
            return self.casts[key]
        owner = defining_op(h.value)
        if owner is None:
            ip = ir.InsertionPoint.at_block_begin(self.fn.block)
        else:
            ops = [o.operation for o in self.fn.block.operations]
            ip = ir.InsertionPoint(ops[ops.index(owner) + 1])
        loc = owner.location if owner is not None else self.fn.func.location
        with ip, loc:
            v = h.value
            if h.glue_t:
                t = vtensor(v.type)
                assert t is not None, "weights are statically shaped vtensors"
                t_op = torch_d.AtenTOp(vtensor_type(t.shape[::-1], t.dtype), v)
                t_op.attributes[GLUE_ATTR] = ir.UnitAttr.get()
                v = t_op.result
            cast = builtin.UnrealizedConversionCastOp([self.tensor_type(h.shape)], [v])
            cast.attributes[KIND_ATTR] = ir.StringAttr.get(str(h.kind))
            out = cast.result
        self.casts[key] = out
        return out

    def build(self, h: HNode, anchor: Any) -> Any:
        """The hector_inter value of ``h``, built (once) before its torch op through the
        op's typed builder, at that op's location."""
        if id(h) in self.done:
            return self.done[id(h)]
        if h.op == LEAF:
            out = self.leaf(h)
        else:
            at = h.anchor or anchor
            operands = {name: self.build(o, at) for name, o in h.operands.items()}
            if h.graph or _needs_graph(h.op):
                operands["graph"] = self.graph
            with self.fn.ir.InsertionPoint(at), at.location:
                out = getattr(inter.OPS, h.op)(
                    result=self.tensor_type(h.shape), loc=at.location, **operands, **h.attrs
                )
        self.done[id(h)] = out
        return out

    def dce(self) -> None:
        """Erase ops left without uses (the torch ops the raised values replaced)."""
        changed = True
        while changed:
            changed = False
            for op in reversed(list(self.fn.block.operations)):
                op = op.operation
                if op.name == "func.return" or not len(op.results):
                    continue
                if all(not list(r.uses) for r in op.results):
                    op.erase()
                    changed = True


def _needs_graph(op: str) -> bool:
    """Whether ``hector_inter.op`` always takes the graph (by its spec)."""
    return any(
        o.name == "graph" and o.variadicity == "single" for o in inter.DIALECT.op(op).operands
    )


def _strict_error(unsupported: list[tuple[str, str]]) -> RaiseError:
    lines = [f"  {loc}: {name}" for name, loc in unsupported]
    return RaiseError(
        f"strict import: {len(lines)} op(s) cannot be raised to hector_inter:\n" + "\n".join(lines),
        unsupported,
    )


def raise_module(module: Any, strict: bool = False) -> RaiseReport:
    """Run ``raise-torch-to-hector`` on every ``func.func`` of a ``torch_mlir.ir.Module`` (in
    place); the module's context must have Hector's dialects loaded
    (``hector.dialects.load_into_torch_mlir``). Raises :class:`RaiseError` under ``strict``
    when torch ops remain, listing each with its ``file:line``."""
    from torch_mlir import ir

    total = RaiseReport()
    with module.context:
        for op in module.body.operations:
            if op.operation.name != "func.func":
                continue
            rep = _Rewriter(RaisingFunction(op.operation, ir)).run(strict=False)
            for k, c in rep.raised.items():
                total.raised[k] = total.raised.get(k, 0) + c
            total.unsupported += rep.unsupported
    if strict and total.unsupported:
        raise _strict_error(total.unsupported)
    return total


def make_torch_context() -> Any:
    """A ``torch_mlir.ir.Context`` with the torch dialect and Hector's dialects loaded."""
    from torch_mlir import ir
    from torch_mlir.dialects import torch as torch_d

    from ...dialects import load_into_torch_mlir

    ctx = ir.Context()
    torch_d.register_dialect(ctx)
    load_into_torch_mlir(ctx)
    return ctx
