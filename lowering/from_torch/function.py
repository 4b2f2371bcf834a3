"""The torch function ``raise-torch-to-hector`` works on (:class:`RaisingFunction`): the nodes
raised so far, whether a value is rows or a weight, and the hector_inter nodes its per-op
handlers build. What a torch value is as a constant is :attr:`RaisingFunction.values`
(:mod:`~hector.lowering.from_torch.torch_values`), how it indexes the graph
:attr:`RaisingFunction.graph` (:mod:`~hector.lowering.from_torch.graph_patterns`)."""

from __future__ import annotations

from typing import Any

from ...dialects import Kind
from ...dialects import hector_inter as inter
from .graph_patterns import GraphPatterns
from .nodes import (
    LEAF,
    HNode,
    Shape,
    defining_op,
    op_name,
    value_shape,
)
from .torch_values import TorchValues

#: ops through which a value stays a weight (see ``RaisingFunction.weight_like``).
_WEIGHT_VIEWS = (
    "torch.aten.t",
    "torch.aten.transpose.int",
    "torch.aten.permute",
    "torch.aten.view",
    "torch.aten.reshape",
    "torch.aten.clone",
    "torch.aten.detach",
    "torch.aten.mul.Scalar",
    "torch.aten.div.Scalar",
    "torch.aten.neg",
    "torch.aten._to_copy",
)


class RaisingFunction:
    """One ``func.func`` being raised: its constants (``values``), its graph bindings, counts
    and index patterns (``graph``), the nodes raised so far (``H``, by torch value), and the
    row and weight queries the per-op handlers build on."""

    def __init__(self, func: Any, ir: Any) -> None:
        self.func, self.ir = func, ir
        self.block = func.regions[0].blocks[0]
        self.values = TorchValues(ir)
        self.graph = GraphPatterns(func, ir, self.values)
        self.H: dict[Any, HNode] = {}

    def rows(self, v: Any, kind: Kind | None = None, leaf_ok: bool = True) -> HNode | None:
        """A row-wise node for ``v``: raised already, or (``leaf_ok``) a torch value whose rows
        are nodes or edges."""
        if v in self.H:
            h = self.H[v]
            return h if h.kind != Kind.WEIGHT and (kind is None or h.kind == kind) else None
        s = value_shape(v)
        if not leaf_ok or s is None or s[1] != "f32" or len(s[0]) != 2:
            return None
        nodes, edges = self.graph.N, self.graph.E
        k = kind
        if k is None:
            k = Kind.NODE if s[0][0] == nodes else Kind.EDGE if s[0][0] == edges else None
        want = nodes if k == Kind.NODE else edges
        if k is None or s[0][0] != want:
            return None
        return HNode(LEAF, k, s[0], value=v)

    def weight_like(self, v: Any, depth: int = 0) -> bool:
        """``v`` is a weight: a function argument that is not a graph index (parameters are
        arguments), a constant, or a transpose/view/scalar multiple of one. A matrix computed
        from row-wise data (``x.t() @ x``) is not."""
        if v in self.H or v in self.graph.bind or depth > 8:
            return False
        op = defining_op(v)
        n = op_name(op)
        if op is None or n == "torch.vtensor.literal":
            return True
        if n in _WEIGHT_VIEWS:
            return self.weight_like(op.operands[0], depth + 1)
        return False

    def weight(self, v: Any, rank: int) -> HNode | None:
        """A weight leaf for ``v`` (f32, of ``rank``), or None."""
        if not self.weight_like(v):
            return None
        s = value_shape(v)
        if s is None or s[1] != "f32" or len(s[0]) != rank:
            return None
        return HNode(LEAF, Kind.WEIGHT, s[0], value=v)

    def node(self, op: str, kind: Kind, shape: Shape, graph: bool = False, **kw: Any) -> HNode:
        """A ``hector_inter.op`` node; keywords are its operands and attributes by the names
        its spec gives them (the graph is added where the spec needs it)."""
        operand_names = {o.name for o in inter.DIALECT.op(op).operands}
        operands = {k: v for k, v in kw.items() if k in operand_names}
        attrs = {k: v for k, v in kw.items() if k not in operand_names}
        return HNode(op, kind, tuple(shape), operands, attrs, graph=graph)
