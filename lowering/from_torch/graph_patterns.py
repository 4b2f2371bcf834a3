"""How the values of a torch function index the graph it is bound to (``raise-torch-to-hector``).

The function's arguments are bound to the graph's arrays by ``hector.data.graph`` attributes
(``src``, ``dst``, ``etype``, ``ntype``, ``edge_index``); the counts of edges ``E``, nodes ``N``
and edge types ``R`` come from their shapes, the function's ``hector.num_nodes`` /
``hector.num_etypes`` attributes, or the rows gathered through an index (-1 when unknown).
:class:`GraphPatterns` answers the questions the per-op handlers ask of a torch value: which
graph array an index is (looking through views, ``edge_index[k]``, a (destination, edge type)
key), what it gathers, sums or counts, and whether it is a degree norm.
"""

from __future__ import annotations

from typing import Any

from .nodes import BINDINGS, GRAPH_ATTR, RaiseError, defining_op, op_name, value_shape
from .torch_values import TorchValues


def _check_binding_shape(arg: Any, i: int, role: str) -> None:
    """A graph array has the rank its role is read with: ``edge_index`` is ``[2, E]``, the
    others have their edges (or nodes) along the first dimension."""
    s = value_shape(arg)
    if s is None:
        return
    if role == "edge_index" and len(s[0]) != 2:
        want = "a [2, E] tensor"
    elif role != "edge_index" and not s[0]:
        want = "a tensor of rank >= 1"
    else:
        return
    raise RaiseError(
        f"argument #{i} bound as {GRAPH_ATTR} = {role!r} must be {want}, got {arg.type}"
    )


class GraphPatterns:
    """The graph bindings and counts of one torch function (``bind``: argument → graph array;
    ``E``, ``N``, ``R``), and the patterns of graph indexing in its torch code."""

    def __init__(self, func: Any, ir: Any, values: TorchValues) -> None:
        self.func, self.ir, self.values = func, ir, values
        self.block = func.regions[0].blocks[0]
        self.bind: dict[Any, str] = {}
        self._bind_arguments()
        self.E = self.N = -1
        for arg, role in self.bind.items():
            s = value_shape(arg)
            if role in ("src", "dst", "etype") and s:
                self.E = s[0][0]
            if role == "edge_index" and s:
                self.E = s[0][1]
            if role == "ntype" and s:
                self.N = s[0][0]
        if "hector.num_nodes" in func.attributes:
            self.N = self._int_attr("hector.num_nodes")
        self.R = -1
        if "hector.num_etypes" in func.attributes:
            self.R = self._int_attr("hector.num_etypes")
        if self.N < 0:
            self.N = self._infer_nodes()

    def _int_attr(self, name: str) -> int:
        """The function's integer attribute ``name`` (a count; negative: unknown)."""
        attr = self.func.attributes[name]
        if not isinstance(attr, self.ir.IntegerAttr):
            raise RaiseError(f"{name} must be an integer, got {attr}")
        return int(attr.value)

    def _bind_arguments(self) -> None:
        """Read the ``hector.data.graph`` argument attributes into ``self.bind``."""
        if "arg_attrs" not in self.func.attributes:
            return
        attrs = self.ir.ArrayAttr(self.func.attributes["arg_attrs"])
        for i, (arg, a) in enumerate(zip(self.block.arguments, attrs, strict=False)):
            d = self.ir.DictAttr(a)
            if GRAPH_ATTR in d:
                attr = d[GRAPH_ATTR]
                role = attr.value if isinstance(attr, self.ir.StringAttr) else None
                if role not in BINDINGS:
                    raise RaiseError(
                        f"argument #{i}: unknown {GRAPH_ATTR} binding {attr}; use one of "
                        f"{', '.join(BINDINGS)}"
                    )
                _check_binding_shape(arg, i, role)
                self.bind[arg] = role

    def _infer_nodes(self) -> int:
        """The node count: the rows gathered or scattered through the src/dst index."""
        for op in self.block.operations:
            op = op.operation
            res = value_shape(op.results[0]) if len(op.results) == 1 else None
            if res is None:
                continue
            g = self.gathered(op.results[0]) if op.name.startswith("torch.aten.index") else None
            x = value_shape(g[0]) if g is not None and g[1] in ("src", "dst") else None
            if x is not None:
                return x[0][0]
            sm = self.summed(op.results[0])
            if sm is not None and sm[1] in ("src", "dst"):
                return res[0][0]
        return -1

    def index_role(self, v: Any) -> str | None:
        """The graph array an index value is (looking through unsqueeze/expand/view)."""
        v = self.values.skip_views(v)
        if v in self.bind:
            return self.bind[v]
        op = defining_op(v)
        n = op_name(op)
        if n == "torch.aten.select.int" and op.operands[0] in self.bind:
            if self.bind[op.operands[0]] == "edge_index" and self.values.const(op.operands[1]) == 0:
                return {0: "src", 1: "dst"}.get(self.values.const(op.operands[2]))
        if n == "torch.aten.squeeze.dim" and self.values.const(op.operands[1]) == 0:
            # ``edge_index[k]`` exported as ``slice(edge_index, 0, k, k + 1, 1).squeeze(0)``.
            sl = defining_op(op.operands[0])
            if op_name(sl) == "torch.aten.slice.Tensor" and sl.operands[0] in self.bind:
                dim, lo, hi, step = (self.values.const(x) for x in sl.operands[1:5])
                whole_row = isinstance(lo, int) and isinstance(hi, int) and hi == lo + 1
                if self.bind[sl.operands[0]] == "edge_index" and (dim, step) == (0, 1):
                    return {0: "src", 1: "dst"}.get(lo) if whole_row else None
        if n == "torch.aten.add.Tensor" and self.values.const(op.operands[2]) == 1:
            return self.key_role(op)
        if n in ("torch.aten._to_copy", "torch.aten.to.dtype", "torch.aten.clone"):
            return self.index_role(op.operands[0])
        return None

    def broadcast_role(self, v: Any) -> str | None:
        """Role of an index expanded to ``[E, D]`` for scatter (``idx.view(-1, 1).expand``)."""
        op = defining_op(v)
        if op_name(op) not in (
            "torch.aten.broadcast_to",
            "torch.aten.expand",
            "torch.aten.expand_as",
        ):
            return None
        inner = defining_op(op.operands[0])
        if op_name(inner) not in ("torch.aten.unsqueeze", "torch.aten.view", "torch.aten.reshape"):
            return None
        return self.index_role(inner.operands[0])

    def key_role(self, add: Any) -> str | None:
        """``"dst_etype"`` when ``add`` is a key unique per (destination, edge type):
        ``dst * c + etype`` with ``c`` at least the number of edge types, or
        ``etype * c + dst`` with ``c`` at least the number of nodes (``c`` is checked where
        the count is known: ``hector.num_etypes`` / ``hector.num_nodes`` on the function)."""
        for a, b in (add.operands[:2], list(add.operands[:2])[::-1]):
            mul = defining_op(a)
            if op_name(mul) != "torch.aten.mul.Scalar":
                continue
            c, inner, other = (
                self.values.const(mul.operands[1]),
                mul.operands[0],
                self.index_role(b),
            )
            if not isinstance(c, int) or isinstance(c, bool) or c < 1:
                continue
            scaled = self.index_role(inner)
            if (scaled, other) == ("dst", "etype") and (self.R < 0 or c >= self.R):
                return "dst_etype"
            if (scaled, other) == ("etype", "dst") and (self.N < 0 or c >= self.N):
                return "dst_etype"
        return None

    def column_role(self, v: Any) -> str | None:
        """The graph array ``v`` is, as a column ``[E, 1]`` (``I.unsqueeze(1)``,
        ``I.view(-1, 1)``)."""
        op = defining_op(v)
        if op_name(op) == "torch.aten.unsqueeze" and self.values.const(op.operands[1]) in (1, -1):
            return self.index_role(op.operands[0])
        s = value_shape(v)
        if op_name(op) in ("torch.aten.view", "torch.aten.reshape") and s is not None:
            if len(s[0]) == 2 and s[0][1] == 1:
                return self.index_role(op.operands[0])
        return None

    def gathered(self, v: Any) -> tuple[Any, str] | None:
        """``(x, role)`` when ``v`` is ``x[I]`` / ``index_select(x, 0, I)`` for an index."""
        op = defining_op(self.values.skip_views(v))
        n = op_name(op)
        if n == "torch.aten.index_select" and self.values.const(op.operands[1]) == 0:
            role = self.index_role(op.operands[2])
            return (op.operands[0], role) if role else None
        if n in ("torch.aten.index.Tensor_hacked_twin", "torch.aten.index.Tensor"):
            lst = defining_op(op.operands[1])
            if op_name(lst) == "torch.prim.ListConstruct" and len(lst.operands) == 1:
                role = self.index_role(lst.operands[0])
                return (op.operands[0], role) if role else None
        return None

    def summed(self, v: Any) -> tuple[Any, str] | None:
        """``(M, role)`` when ``v`` sums rows ``M`` onto nodes by an index, from zeros."""
        op = defining_op(v)
        n = op_name(op)
        if n in ("torch.aten.index_put.hacked_twin", "torch.aten.index_put"):
            lst = defining_op(op.operands[1])
            if (
                self.values.is_zeros(op.operands[0])
                and self.values.const(op.operands[3]) is True
                and op_name(lst) == "torch.prim.ListConstruct"
                and len(lst.operands) == 1
            ):
                role = self.index_role(lst.operands[0])
                return (op.operands[2], role) if role else None
        if n == "torch.aten.scatter_add" or (
            n == "torch.aten.scatter_reduce.two" and self.values.const(op.operands[4]) == "sum"
        ):
            if self.values.is_zeros(op.operands[0]) and self.values.const(op.operands[1]) == 0:
                role = self.broadcast_role(op.operands[2])
                return (op.operands[3], role) if role else None
        return None

    def counted(self, v: Any) -> str | None:
        """The index whose occurrences ``v`` counts (``"dst"``, ``"dst_etype"``, ...):
        ``zeros.index_add(0, I, ones)``, ``zeros.scatter_add(0, I, ones)`` or
        ``scatter_reduce(..., "sum")`` of ones onto zeros, optionally ``clamp(min=1)``."""
        op = defining_op(v)
        if op_name(op) == "torch.aten.clamp" and self.values.const(op.operands[1]) in (1, 1.0):
            if self.values.const(op.operands[2]) is None:
                op = defining_op(op.operands[0])
        n = op_name(op)
        if n in ("torch.aten.index_put.hacked_twin", "torch.aten.index_put"):
            lst = defining_op(op.operands[1])
            if (
                self.values.is_zeros(op.operands[0])
                and self.values.const(op.operands[3]) is True
                and op_name(lst) == "torch.prim.ListConstruct"
                and len(lst.operands) == 1
                and self.values.is_ones(op.operands[2])
            ):
                return self.index_role(lst.operands[0])
        if n == "torch.aten.scatter_add" or (
            n == "torch.aten.scatter_reduce.two" and self.values.const(op.operands[4]) == "sum"
        ):
            if (
                self.values.is_zeros(op.operands[0])
                and self.values.const(op.operands[1]) == 0
                and self.values.is_ones(op.operands[3])
            ):
                return self.index_role(op.operands[2]) or self.broadcast_role(op.operands[2])
        return None

    def norm_by(self, v: Any, reciprocal: bool) -> str | None:
        """``"dst"``/``"dst_etype"`` when ``v`` (``[E]`` or ``[E, 1]``) is ``1 / count[I]``
        (``reciprocal``) or ``count[I]`` (not ``reciprocal``) with ``I`` the dst index or a
        (dst, etype) key and ``count`` its occurrence count."""
        op = defining_op(v)
        if op_name(op) == "torch.aten.unsqueeze" and self.values.const(op.operands[1]) in (-1, 1):
            v = op.operands[0]
        if reciprocal:
            op = defining_op(v)
            if op_name(op) == "torch.aten.mul.Scalar" and self.values.const(op.operands[1]) in (
                1,
                1.0,
            ):
                v = op.operands[0]
            op = defining_op(v)
            if op_name(op) != "torch.aten.reciprocal":
                return None
            v = op.operands[0]
            op = defining_op(v)
            if op_name(op) == "torch.aten.unsqueeze" and self.values.const(op.operands[1]) in (
                -1,
                1,
            ):
                v = op.operands[0]
        if self.one_hot_count(v):
            return "dst_etype"
        g = self.gathered(v)
        if g is None or g[1] not in ("dst", "dst_etype") or self.counted(g[0]) != g[1]:
            return None
        return g[1]

    def one_hot_count(self, v: Any) -> bool:
        """``v`` ``[E, 1]`` is FastRGCNConv's count of each edge's (dst, etype):
        ``C[dst].gather(1, etype.view(-1, 1))`` (optionally ``clamp(min=1)``) with ``C [N, R]``
        the one-hot rows ``zeros(E, R).scatter(1, etype.unsqueeze(1), 1)`` summed onto zeros by
        dst. Every edge counts itself, so the count is at least 1 with or without the clamp."""
        op = defining_op(v)
        if op_name(op) == "torch.aten.clamp" and self.values.const(op.operands[1]) in (1, 1.0):
            if self.values.const(op.operands[2]) is not None:
                return False
            op = defining_op(op.operands[0])
        if op_name(op) != "torch.aten.gather" or self.values.const(op.operands[1]) != 1:
            return False
        if self.column_role(op.operands[2]) != "etype":
            return False
        g = self.gathered(op.operands[0])
        s = self.summed(g[0]) if g is not None and g[1] == "dst" else None
        if s is None or s[1] != "dst":
            return False
        hot = defining_op(s[0])
        if op_name(hot) not in ("torch.aten.scatter.src", "torch.aten.scatter.value"):
            return False
        if not self.values.is_zeros(hot.operands[0]) or self.values.const(hot.operands[1]) != 1:
            return False
        if self.column_role(hot.operands[2]) != "etype":
            return False
        if op_name(hot) == "torch.aten.scatter.src":
            return self.values.is_ones(hot.operands[3])
        return self.values.const(hot.operands[3]) in (1, 1.0)
