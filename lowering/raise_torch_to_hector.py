"""``raise-torch-to-hector``: recognise relational patterns in torch-dialect IR (as produced by
``torch_mlir.fx.export_and_import(..., output_type="torch")``) and rewrite them into
``hector_inter`` ops, in torch-mlir's own MLIR context.

The function's index arguments are bound to the graph by an argument attribute
``{hector.graph = "src" | "dst" | "etype" | "ntype" | "edge_index"}`` (``hector.import_model``
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

Run it from the command line with ``hector-opt --torch FILE.mlir`` (``--torch-strict`` for the
strict diagnostics).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

GRAPH_ATTR = "hector.graph"
GLUE_ATTR = "hector.glue"
BINDINGS = ("src", "dst", "etype", "ntype", "edge_index")
_VT = re.compile(r"!torch\.vtensor<\[([-0-9,]*)\],(\w+)>")
_LOC = re.compile(r'"([^"]+)":(\d+)')
_CAST = "builtin.unrealized_conversion_cast"
#: ops through which a value stays a weight (see ``_Raiser.weight_like``).
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


class RaiseError(Exception):
    """The input cannot be raised (bad bindings) or, under ``strict``, ops stayed unraised."""

    def __init__(self, message: str, unsupported: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.unsupported = unsupported or []


@dataclass(eq=False)
class HNode:
    """A hector_inter value being built: an op over other nodes, or a leaf torch value."""

    op: str  # hector_inter op name, or "leaf"
    kind: str  # node | edge | weight
    shape: tuple[int, ...]
    operands: list[HNode] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    graph: str = ""  # "" | "first" | "last"
    value: Any = None  # leaf: the torch value
    anchor: Any = None  # the torch op the node replaces (insertion point)
    glue_t: bool = False  # leaf: transpose the torch value first (linear weights)


@dataclass
class RaiseReport:
    """What the pass did: raised hector ops by name, and torch ops left as eager code."""

    raised: dict[str, int] = field(default_factory=dict)
    unsupported: list[tuple[str, str]] = field(default_factory=list)  # (op name, file:line)


def source_location(loc: Any) -> str:
    """``file:line`` of a torch-mlir location (the innermost frame), or ``<unknown>``."""
    m = _LOC.search(str(loc))
    return f"{m.group(1)}:{m.group(2)}" if m else "<unknown>"


def _shape(v: Any) -> tuple[tuple[int, ...], str] | None:
    m = _VT.fullmatch(str(v.type))
    if not m:
        return None
    dims = tuple(int(d) for d in m.group(1).split(",") if d)
    return dims, m.group(2)


def _def(v: Any) -> Any:
    """The op defining ``v`` (None for block arguments)."""
    owner = v.owner
    return None if owner.__class__.__name__ == "Block" else owner.operation


def _name(op: Any) -> str:
    return op.name if op is not None else ""


class _Raiser:
    def __init__(self, func: Any, ir: Any) -> None:
        self.func, self.ir = func, ir
        self.block = func.regions[0].blocks[0]
        self.bind: dict[Any, str] = {}
        self.H: dict[Any, HNode] = {}
        self.report = RaiseReport()
        if "arg_attrs" in func.attributes:
            for arg, attrs in zip(
                self.block.arguments, self.ir.ArrayAttr(func.attributes["arg_attrs"]), strict=False
            ):
                d = self.ir.DictAttr(attrs)
                if GRAPH_ATTR in d:
                    role = self.ir.StringAttr(d[GRAPH_ATTR]).value
                    if role not in BINDINGS:
                        raise RaiseError(
                            f"unknown {GRAPH_ATTR} binding {role!r}; use one of "
                            f"{', '.join(BINDINGS)}"
                        )
                    self.bind[arg] = role
        self.E = self.N = -1
        for arg, role in self.bind.items():
            s = _shape(arg)
            if role in ("src", "dst", "etype") and s:
                self.E = s[0][0]
            if role == "edge_index" and s:
                self.E = s[0][1]
            if role == "ntype" and s:
                self.N = s[0][0]
        if "hector.num_nodes" in func.attributes:
            self.N = self.ir.IntegerAttr(func.attributes["hector.num_nodes"]).value
        self.R = -1
        if "hector.num_etypes" in func.attributes:
            self.R = self.ir.IntegerAttr(func.attributes["hector.num_etypes"]).value
        for op in self.block.operations if self.N < 0 else ():
            # Nodes are the rows gathered or scattered through the src/dst index.
            op = op.operation
            if len(op.results) != 1 or _shape(op.results[0]) is None:
                continue
            g = self.gathered(op.results[0]) if op.name.startswith("torch.aten.index") else None
            if g is not None and g[1] in ("src", "dst") and _shape(g[0]):
                self.N = _shape(g[0])[0][0]
                break
            sm = self.summed(op.results[0])
            if sm is not None and sm[1] in ("src", "dst"):
                self.N = _shape(op.results[0])[0][0]
                break

    # -- structural helpers -----------------------------------------------------------------
    def const(self, v: Any) -> Any:
        op = _def(v)
        n = _name(op)
        if n == "torch.constant.none":
            return None
        if n in ("torch.constant.int", "torch.constant.float", "torch.constant.bool"):
            a = op.attributes["value"]
            if n == "torch.constant.float":
                return self.ir.FloatAttr(a).value
            if n == "torch.constant.bool":
                return self.ir.BoolAttr(a).value
            return self.ir.IntegerAttr(a).value
        if n == "torch.constant.str":
            return self.ir.StringAttr(op.attributes["value"]).value
        if n == "torch.prim.ListConstruct":
            return [self.const(x) for x in op.operands]
        return _Unknown

    def skip_views(self, v: Any) -> Any:
        """Look through ``view``/``reshape`` ops that keep the shape."""
        while True:
            op = _def(v)
            if _name(op) in ("torch.aten.view", "torch.aten.reshape") and _shape(
                op.operands[0]
            ) == _shape(v):
                v = op.operands[0]
                continue
            return v

    def index_role(self, v: Any) -> str | None:
        """The graph array an index value is (looking through unsqueeze/expand/view)."""
        v = self.skip_views(v)
        if v in self.bind:
            return self.bind[v]
        op = _def(v)
        n = _name(op)
        if n == "torch.aten.select.int" and op.operands[0] in self.bind:
            if self.bind[op.operands[0]] == "edge_index" and self.const(op.operands[1]) == 0:
                return {0: "src", 1: "dst"}.get(self.const(op.operands[2]))
        if n == "torch.aten.squeeze.dim" and self.const(op.operands[1]) == 0:
            # ``edge_index[k]`` exported as ``slice(edge_index, 0, k, k + 1, 1).squeeze(0)``.
            sl = _def(op.operands[0])
            if _name(sl) == "torch.aten.slice.Tensor" and sl.operands[0] in self.bind:
                dim, lo, hi, step = (self.const(x) for x in sl.operands[1:5])
                whole_row = isinstance(lo, int) and isinstance(hi, int) and hi == lo + 1
                if self.bind[sl.operands[0]] == "edge_index" and (dim, step) == (0, 1):
                    return {0: "src", 1: "dst"}.get(lo) if whole_row else None
        if n == "torch.aten.add.Tensor" and self.const(op.operands[2]) == 1:
            return self.key_role(op)
        if n in ("torch.aten._to_copy", "torch.aten.to.dtype", "torch.aten.clone"):
            return self.index_role(op.operands[0])
        return None

    def broadcast_role(self, v: Any) -> str | None:
        """Role of an index expanded to ``[E, D]`` for scatter (``idx.view(-1, 1).expand``)."""
        op = _def(v)
        if _name(op) not in (
            "torch.aten.broadcast_to",
            "torch.aten.expand",
            "torch.aten.expand_as",
        ):
            return None
        inner = _def(op.operands[0])
        if _name(inner) not in ("torch.aten.unsqueeze", "torch.aten.view", "torch.aten.reshape"):
            return None
        return self.index_role(inner.operands[0])

    def key_role(self, add: Any) -> str | None:
        """``"dst_etype"`` when ``add`` is a key unique per (destination, edge type):
        ``dst * c + etype`` with ``c`` at least the number of edge types, or
        ``etype * c + dst`` with ``c`` at least the number of nodes (``c`` is checked where
        the count is known: ``hector.num_etypes`` / ``hector.num_nodes`` on the function)."""
        for a, b in (add.operands[:2], list(add.operands[:2])[::-1]):
            mul = _def(a)
            if _name(mul) != "torch.aten.mul.Scalar":
                continue
            c, inner, other = self.const(mul.operands[1]), mul.operands[0], self.index_role(b)
            if not isinstance(c, int) or isinstance(c, bool) or c < 1:
                continue
            scaled = self.index_role(inner)
            if (scaled, other) == ("dst", "etype") and (self.R < 0 or c >= self.R):
                return "dst_etype"
            if (scaled, other) == ("etype", "dst") and (self.N < 0 or c >= self.N):
                return "dst_etype"
        return None

    def is_ones(self, v: Any) -> bool:
        """``v`` is a tensor of ones (a splat literal, ``ones``, ``ones_like``)."""
        op = _def(v)
        n = _name(op)
        if n == "torch.vtensor.literal":
            a = self.ir.DenseElementsAttr(op.attributes["value"])
            return a.is_splat and str(a.get_splat_value()).startswith("1.0")
        return n in ("torch.aten.ones", "torch.aten.ones_like", "torch.aten.new_ones")

    def counted(self, v: Any) -> str | None:
        """The index whose occurrences ``v`` counts (``"dst"``, ``"dst_etype"``, ...):
        ``zeros.index_add(0, I, ones)``, ``zeros.scatter_add(0, I, ones)`` or
        ``scatter_reduce(..., "sum")`` of ones onto zeros, optionally ``clamp(min=1)``."""
        op = _def(v)
        if _name(op) == "torch.aten.clamp" and self.const(op.operands[1]) in (1, 1.0):
            if self.const(op.operands[2]) is None:
                op = _def(op.operands[0])
        n = _name(op)
        if n in ("torch.aten.index_put.hacked_twin", "torch.aten.index_put"):
            lst = _def(op.operands[1])
            if (
                self.is_zeros(op.operands[0])
                and self.const(op.operands[3]) is True
                and _name(lst) == "torch.prim.ListConstruct"
                and len(lst.operands) == 1
                and self.is_ones(op.operands[2])
            ):
                return self.index_role(lst.operands[0])
        if n == "torch.aten.scatter_add" or (
            n == "torch.aten.scatter_reduce.two" and self.const(op.operands[4]) == "sum"
        ):
            if (
                self.is_zeros(op.operands[0])
                and self.const(op.operands[1]) == 0
                and self.is_ones(op.operands[3])
            ):
                return self.index_role(op.operands[2]) or self.broadcast_role(op.operands[2])
        return None

    def norm_by(self, v: Any, reciprocal: bool) -> str | None:
        """``"dst"``/``"dst_etype"`` when ``v`` (``[E]`` or ``[E, 1]``) is ``1 / count[I]``
        (``reciprocal``) or ``count[I]`` (not ``reciprocal``) with ``I`` the dst index or a
        (dst, etype) key and ``count`` its occurrence count."""
        op = _def(v)
        if _name(op) == "torch.aten.unsqueeze" and self.const(op.operands[1]) in (-1, 1):
            v = op.operands[0]
        if reciprocal:
            op = _def(v)
            if _name(op) == "torch.aten.mul.Scalar" and self.const(op.operands[1]) in (1, 1.0):
                v = op.operands[0]
            op = _def(v)
            if _name(op) != "torch.aten.reciprocal":
                return None
            v = op.operands[0]
            op = _def(v)
            if _name(op) == "torch.aten.unsqueeze" and self.const(op.operands[1]) in (-1, 1):
                v = op.operands[0]
        g = self.gathered(v)
        if g is None or g[1] not in ("dst", "dst_etype") or self.counted(g[0]) != g[1]:
            return None
        return g[1]

    def gathered(self, v: Any) -> tuple[Any, str] | None:
        """``(x, role)`` when ``v`` is ``x[I]`` / ``index_select(x, 0, I)`` for an index."""
        op = _def(self.skip_views(v))
        n = _name(op)
        if n == "torch.aten.index_select" and self.const(op.operands[1]) == 0:
            role = self.index_role(op.operands[2])
            return (op.operands[0], role) if role else None
        if n in ("torch.aten.index.Tensor_hacked_twin", "torch.aten.index.Tensor"):
            lst = _def(op.operands[1])
            if _name(lst) == "torch.prim.ListConstruct" and len(lst.operands) == 1:
                role = self.index_role(lst.operands[0])
                return (op.operands[0], role) if role else None
        return None

    def is_zeros(self, v: Any) -> bool:
        op = _def(v)
        n = _name(op)
        if n == "torch.vtensor.literal":
            a = self.ir.DenseElementsAttr(op.attributes["value"])
            return a.is_splat and str(a.get_splat_value()).startswith("0.0")
        if n in ("torch.aten.zeros", "torch.aten.zeros_like", "torch.aten.new_zeros"):
            return True
        return n == "torch.aten.fill.Scalar" and self.const(op.operands[1]) in (0, 0.0)

    def summed(self, v: Any) -> tuple[Any, str] | None:
        """``(M, role)`` when ``v`` sums rows ``M`` onto nodes by an index, from zeros."""
        op = _def(v)
        n = _name(op)
        if n in ("torch.aten.index_put.hacked_twin", "torch.aten.index_put"):
            lst = _def(op.operands[1])
            if (
                self.is_zeros(op.operands[0])
                and self.const(op.operands[3]) is True
                and _name(lst) == "torch.prim.ListConstruct"
                and len(lst.operands) == 1
            ):
                role = self.index_role(lst.operands[0])
                return (op.operands[2], role) if role else None
        if n == "torch.aten.scatter_add" or (
            n == "torch.aten.scatter_reduce.two" and self.const(op.operands[4]) == "sum"
        ):
            if self.is_zeros(op.operands[0]) and self.const(op.operands[1]) == 0:
                role = self.broadcast_role(op.operands[2])
                return (op.operands[3], role) if role else None
        return None

    # -- node helpers -------------------------------------------------------------------------
    def rows(self, v: Any, kind: str | None = None, leaf_ok: bool = True) -> HNode | None:
        """A row-wise node for ``v``: raised already, or (``leaf_ok``) a torch value whose rows
        are nodes or edges."""
        if v in self.H:
            h = self.H[v]
            return h if h.kind != "weight" and (kind is None or h.kind == kind) else None
        s = _shape(v)
        if not leaf_ok or s is None or s[1] != "f32" or len(s[0]) != 2:
            return None
        k = kind
        if k is None:
            k = "node" if s[0][0] == self.N else "edge" if s[0][0] == self.E else None
        want = self.N if k == "node" else self.E
        if k is None or s[0][0] != want:
            return None
        return HNode("leaf", k, s[0], value=v)

    def weight_like(self, v: Any, depth: int = 0) -> bool:
        """``v`` is a weight: a function argument that is not a graph index (parameters are
        arguments), a constant, or a transpose/view/scalar multiple of one. A matrix computed
        from row-wise data (``x.t() @ x``) is not."""
        if v in self.H or v in self.bind or depth > 8:
            return False
        op = _def(v)
        n = _name(op)
        if op is None or n == "torch.vtensor.literal":
            return True
        if n in _WEIGHT_VIEWS:
            return self.weight_like(op.operands[0], depth + 1)
        return False

    def weight(self, v: Any, rank: int) -> HNode | None:
        if not self.weight_like(v):
            return None
        s = _shape(v)
        if s is None or s[1] != "f32" or len(s[0]) != rank:
            return None
        return HNode("leaf", "weight", s[0], value=v)

    def node(
        self, op: str, kind: str, shape: tuple[int, ...], *operands: HNode, **kw: Any
    ) -> HNode:
        return HNode(op, kind, tuple(shape), list(operands), **kw)

    # -- matchers -----------------------------------------------------------------------------
    def match(self, op: Any) -> HNode | None:
        n = op.name
        res = op.results[0] if len(op.results) == 1 else None
        if res is None or _shape(res) is None:
            return None
        shape = _shape(res)[0]
        g = self.gathered(res) if n.startswith("torch.aten.index") else None
        if g is not None and g[1] in ("src", "dst"):
            x = self.rows(g[0], "node")
            if x is not None and len(shape) == 2:
                return self.node(f"gather_{g[1]}", "edge", shape, x, graph="first")
            return None
        if n == "torch.aten.squeeze.dim" and self.const(op.operands[1]) in (1, -2):
            return self.match_typed_linear(op, shape)
        if n in ("torch.aten.mm", "torch.aten.matmul"):
            x, w = self.rows(op.operands[0]), self.weight(op.operands[1], 2)
            if x is not None and w is not None:
                return self.node(
                    "typed_linear", x.kind, shape, x, w, graph="first", attrs={"slice": "none"}
                )
            return None
        if n == "torch.aten.linear":
            x, w = self.rows(op.operands[0]), self.weight(op.operands[1], 2)
            if x is None or w is None:
                return None
            w.glue_t, w.shape = True, (w.shape[1], w.shape[0])
            out = self.node(
                "typed_linear", x.kind, shape, x, w, graph="first", attrs={"slice": "none"}
            )
            if self.const(op.operands[2]) is None:
                return out
            b = self.weight(op.operands[2], 1)
            return self.node("add", x.kind, shape, out, b) if b is not None else None
        s = self.summed(res)
        if s is not None and s[1] in ("src", "dst"):
            m = self.rows(s[0], "edge")
            if m is not None and len(shape) == 2 and shape[0] == self.N:
                return self.node(f"sum_to_{s[1]}", "node", shape, m, graph="first")
            return None
        if n == "torch.aten.div.Tensor":
            return self.match_softmax(op, shape) or self.match_div_count(op, shape)
        if n == "torch.aten.mul.Tensor":
            return self.match_scale(op, shape)
        if n == "torch.aten.mul.Scalar" and self.const(op.operands[1]) in (1, 1.0):
            return self.H.get(op.operands[0])  # ``1.0 * x`` (how ``1.0 / t`` is exported)
        if n == "torch.aten.view" and len(shape) == 2:
            return self.match_head_scale(op, shape)
        if n == "torch.aten.sum.dim_IntList":
            return self.match_dot(op, shape)
        if n in ("torch.aten.unsqueeze", "torch.aten.reciprocal") and len(shape) == 2:
            return self.match_degree_norm(op, shape)
        if n in ("torch.aten.add.Tensor", "torch.aten.sub.Tensor"):
            return self.match_add(op, shape, n.endswith("sub.Tensor"))
        unary = {
            "torch.aten.relu": "relu",
            "torch.aten.exp": "exp",
            "torch.aten.tanh": "tanh",
            "torch.aten.sigmoid": "sigmoid",
            "torch.aten.neg": "neg",
            "torch.aten.leaky_relu": "leaky_relu",
            "torch.aten.gelu": "gelu",
        }
        if n in unary and op.operands[0] in self.H:
            x = self.H[op.operands[0]]
            if x.kind == "weight":
                return None
            slope = 0.0
            if n == "torch.aten.leaky_relu":
                slope = self.const(op.operands[1])
            if n == "torch.aten.gelu" and self.const(op.operands[1]) != "none":
                return None  # only the exact (erf) GELU is hector's
            return self.node(
                "unary", x.kind, shape, x, attrs={"fn": unary[n], "slope": float(slope)}
            )
        return None

    def match_typed_linear(self, op: Any, shape: tuple[int, ...]) -> HNode | None:
        bmm = _def(self.skip_views(op.operands[0]))
        if _name(bmm) not in ("torch.aten.bmm", "torch.aten.matmul"):
            return None
        un = _def(self.skip_views(bmm.operands[0]))
        if _name(un) != "torch.aten.unsqueeze" or self.const(un.operands[1]) not in (1, -2):
            return None
        wg = self.gathered(bmm.operands[1])
        if wg is None or wg[1] not in ("etype", "ntype"):
            return None
        kind = "edge" if wg[1] == "etype" else "node"
        x, w = self.rows(un.operands[0], kind), self.weight(wg[0], 3)
        if x is None or w is None:
            return None
        return self.node("typed_linear", kind, shape, x, w, graph="first", attrs={"slice": wg[1]})

    def match_softmax(self, op: Any, shape: tuple[int, ...]) -> HNode | None:
        ex, den = op.operands
        exp = _def(ex)
        if _name(exp) != "torch.aten.exp":
            return None
        t = exp.operands[0]
        sub = _def(t)
        s = t
        if _name(sub) == "torch.aten.sub.Tensor" and self.const(sub.operands[2]) == 1:
            gm = self.gathered(sub.operands[1])
            mx = _def(gm[0]) if gm else None
            if (
                gm is not None
                and gm[1] == "dst"
                and _name(mx) == "torch.aten.scatter_reduce.two"
                and self.const(mx.operands[4]) in ("amax", "max")
                and self.broadcast_role(mx.operands[2]) == "dst"
                and mx.operands[3] == sub.operands[0]
            ):
                s = sub.operands[0]
        gd = self.gathered(den)
        if gd is None:
            return None
        if gd[1] != "dst":
            return None
        base = gd[0]
        add = _def(base)
        if _name(add) == "torch.aten.add.Scalar":
            eps = self.const(add.operands[1])
            if not isinstance(eps, float | int) or abs(eps) > 1e-6:
                return None
            base = add.operands[0]
        summed = self.summed(base)
        if summed is None or summed[1] != "dst" or summed[0] != ex:
            return None
        x = self.rows(s, "edge")
        if x is None or len(shape) != 2:
            return None
        return self.node("edge_softmax", "edge", shape, x, graph="first")

    def match_div_count(self, op: Any, shape: tuple[int, ...]) -> HNode | None:
        """``X / count[I].unsqueeze(-1)`` (a mean over the dst's or (dst, etype)'s incoming
        edges) → ``scale(X, degree_norm)``."""
        if len(shape) != 2 or shape[0] != self.E:
            return None
        d = _shape(op.operands[1])
        if d is None or d[0] != (self.E, 1):
            return None
        by = self.norm_by(op.operands[1], reciprocal=False)
        x = self.rows(op.operands[0], "edge") if by else None
        if x is None:
            return None
        norm = self.node("degree_norm", "edge", (self.E, 1), graph="first", attrs={"by": by})
        return self.node("scale", "edge", shape, x, norm)

    def match_scale(self, op: Any, shape: tuple[int, ...]) -> HNode | None:
        a, b = op.operands
        sa, sb = _shape(a), _shape(b)
        if not sa or not sb or len(sa[0]) != 2 or len(sb[0]) != 2:
            return None
        if sa[0][1] == 1 and sb[0][1] != 1:
            a, b, sa, sb = b, a, sb, sa
        if sb[0][1] != 1 or sa[0][0] != sb[0][0]:
            return None
        x, s = self.rows(a), self.rows(b)
        if x is None or s is None or x.kind != s.kind or (x.op == "leaf" and s.op == "leaf"):
            return None
        return self.node("scale", x.kind, shape, x, s)

    def match_head_scale(self, op: Any, shape: tuple[int, ...]) -> HNode | None:
        mul = _def(op.operands[0])
        if _name(mul) != "torch.aten.mul.Tensor":
            return None
        for xv, av in (mul.operands, reversed(list(mul.operands))):
            xview, un = _def(xv), _def(av)
            if _name(xview) != "torch.aten.view" or _name(un) != "torch.aten.unsqueeze":
                continue
            s3 = _shape(xv)[0]
            if len(s3) != 3 or self.const(un.operands[1]) not in (-1, 2):
                continue
            x, a = self.rows(xview.operands[0]), self.rows(un.operands[0])
            if x is None or a is None or x.kind != a.kind or (x.op == a.op == "leaf"):
                continue
            if a.shape[1] != s3[1] or x.shape[1] != s3[1] * s3[2] or shape != x.shape:
                continue
            return self.node("scale", x.kind, shape, x, a)
        return None

    def match_dot(self, op: Any, shape: tuple[int, ...]) -> HNode | None:
        dims, keep = self.const(op.operands[1]), self.const(op.operands[2])
        src = _shape(op.operands[0])[0]
        if not isinstance(dims, list) or len(dims) != 1 or dims[0] not in (-1, len(src) - 1):
            return None
        if self.const(op.operands[3]) is not None:
            return None
        inner = _def(op.operands[0])
        if len(src) == 2 and keep is True and _name(inner) == "torch.aten.mul.Tensor":
            pair = list(inner.operands)
        elif len(src) == 3 and keep is False:
            if _name(inner) == "torch.aten.view" and _name(_def(inner.operands[0])) == (
                "torch.aten.mul.Tensor"
            ):
                pair = list(_def(inner.operands[0]).operands)
            elif _name(inner) == "torch.aten.mul.Tensor":
                vs = [_def(v) for v in inner.operands]
                if any(_name(v) != "torch.aten.view" for v in vs):
                    return None
                pair = [v.operands[0] for v in vs]
            else:
                return None
        else:
            return None
        x, y = self.rows(pair[0]), self.rows(pair[1])
        if x is None or y is None or x.kind != y.kind or x.shape != y.shape:
            return None
        if x.op == "leaf" and y.op == "leaf":
            return None
        return self.node("dot", x.kind, shape, x, y)

    def match_degree_norm(self, op: Any, shape: tuple[int, ...]) -> HNode | None:
        """``(1 / count[I]).unsqueeze(-1)`` (``I`` = dst or a (dst, etype) key, ``count`` its
        occurrence count from an index_add/scatter_add of ones) → ``degree_norm``."""
        if len(shape) != 2 or shape[1] != 1 or shape[0] != self.E:
            return None
        by = self.norm_by(op.results[0], reciprocal=True)
        if by is None:
            return None
        return self.node("degree_norm", "edge", shape, graph="first", attrs={"by": by})

    def match_add(self, op: Any, shape: tuple[int, ...], sub: bool) -> HNode | None:
        if self.const(op.operands[2]) not in (1, 1.0):
            return None
        a, b = op.operands[0], op.operands[1]
        if not sub and a not in self.H and b in self.H:
            a, b = b, a
        x = self.rows(a)
        if x is None or len(shape) != 2:
            return None
        gb = self.gathered(b)
        if gb is not None and gb[1] in ("etype", "ntype") and not sub:
            want = "edge" if gb[1] == "etype" else "node"
            tb = self.weight(gb[0], 2)
            if x.kind != want or tb is None or x.op == "leaf":
                return None
            return self.node("add", x.kind, shape, x, tb, graph="last")
        sb = _shape(b)
        if sb and len(sb[0]) == 1 and b not in self.H:
            bias = self.weight(b, 1)
            if bias is None or x.op == "leaf":
                return None
            if sub:
                return None  # a negated weight is not a hector value
            return self.node("add", x.kind, shape, x, bias)
        y = self.rows(b, x.kind)
        if y is None or y.shape != x.shape or (x.op == "leaf" and y.op == "leaf"):
            return None
        if sub:
            y = self.node("unary", y.kind, y.shape, y, attrs={"fn": "neg", "slope": 0.0})
        return self.node("add", x.kind, shape, x, y)

    # -- rewriting ----------------------------------------------------------------------------
    def run(self, strict: bool) -> RaiseReport:
        for op in list(self.block.operations):
            try:
                h = self.match(op.operation)
            except (IndexError, TypeError, ValueError, AttributeError):
                h = None
            if h is not None:
                h.anchor = op.operation
                self.H[op.operation.results[0]] = h
        if self.H:
            self.materialize_all()
        self.dce()
        for op in self.block.operations:
            op = op.operation
            if op.name.startswith("torch.aten.") or op.name == "torch.operator":
                if GLUE_ATTR not in op.attributes:
                    self.report.unsupported.append((op.name, source_location(op.location)))
            if op.name.startswith("hector_inter."):
                key = op.name.split(".", 1)[1]
                self.report.raised[key] = self.report.raised.get(key, 0) + 1
        if strict and self.report.unsupported:
            lines = [f"  {loc}: {name}" for name, loc in self.report.unsupported]
            raise RaiseError(
                f"strict import: {len(lines)} op(s) cannot be raised to hector_inter:\n"
                + "\n".join(lines),
                self.report.unsupported,
            )
        return self.report

    def materialize_all(self) -> None:
        ir = self.ir
        with self.func.context:
            gtype = ir.Type.parse("!hector_inter.graph")
            self.graph = self.block.add_argument(gtype, self.func.location)
            ftype = ir.FunctionType(ir.TypeAttr(self.func.attributes["function_type"]).value)
            inputs = [a.type for a in self.block.arguments]
            self.func.attributes["function_type"] = ir.TypeAttr.get(
                ir.FunctionType.get(inputs, ftype.results)
            )
            if "arg_attrs" in self.func.attributes:
                old = list(ir.ArrayAttr(self.func.attributes["arg_attrs"]))
                old.append(ir.DictAttr.get({GRAPH_ATTR: ir.StringAttr.get("graph")}))
                self.func.attributes["arg_attrs"] = ir.ArrayAttr.get(old)
            self.done: dict[int, Any] = {}
            self.casts: dict[Any, Any] = {}
            for v, h in list(self.H.items()):
                out = self.build(h, h.anchor)
                with ir.InsertionPoint(h.anchor), h.anchor.location:
                    back = ir.Operation.create(_CAST, results=[v.type], operands=[out]).result
                v.replace_all_uses_with(back)

    def tensor_type(self, shape: tuple[int, ...]) -> Any:
        ir = self.ir
        return ir.RankedTensorType.get(list(shape), ir.F32Type.get())

    def leaf(self, h: HNode) -> Any:
        ir = self.ir
        key = (h.value, h.glue_t)
        if key in self.casts:
            return self.casts[key]
        owner = _def(h.value)
        if owner is None:
            ip = ir.InsertionPoint.at_block_begin(self.block)
        else:
            ops = [o.operation for o in self.block.operations]
            nxt = ops[ops.index(owner) + 1]
            ip = ir.InsertionPoint(nxt)
        loc = owner.location if owner is not None else self.func.location
        with ip, loc:
            v = h.value
            if h.glue_t:
                s = _shape(v)[0]
                ttype = ir.Type.parse(f"!torch.vtensor<[{s[1]},{s[0]}],f32>")
                t = ir.Operation.create("torch.aten.t", results=[ttype], operands=[v])
                t.attributes[GLUE_ATTR] = ir.UnitAttr.get()
                v = t.result
            cast = ir.Operation.create(_CAST, results=[self.tensor_type(h.shape)], operands=[v])
            cast.attributes["hector.kind"] = ir.StringAttr.get(h.kind)
            out = cast.result
        self.casts[key] = out
        return out

    def build(self, h: HNode, anchor: Any) -> Any:
        ir = self.ir
        if id(h) in self.done:
            return self.done[id(h)]
        if h.op == "leaf":
            out = self.leaf(h)
        else:
            at = h.anchor or anchor
            operands = [self.build(o, at) for o in h.operands]
            if h.graph == "first":
                operands.insert(0, self.graph)
            elif h.graph == "last":
                operands.append(self.graph)
            with ir.InsertionPoint(at), at.location:
                attrs = {}
                for k, val in h.attrs.items():
                    attrs[k] = (
                        ir.FloatAttr.get(ir.F32Type.get(), val)
                        if isinstance(val, float)
                        else ir.StringAttr.get(val)
                    )
                op = ir.Operation.create(
                    f"hector_inter.{h.op}",
                    results=[self.tensor_type(h.shape)],
                    operands=operands,
                    attributes=attrs,
                )
            out = op.result
        self.done[id(h)] = out
        return out

    def dce(self) -> None:
        changed = True
        while changed:
            changed = False
            for op in reversed(list(self.block.operations)):
                op = op.operation
                if op.name == "func.return" or not len(op.results):
                    continue
                if all(not list(r.uses) for r in op.results):
                    op.erase()
                    changed = True


class _UnknownType:
    def __repr__(self) -> str:
        return "<unknown>"


_Unknown = _UnknownType()


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
            rep = _Raiser(op.operation, ir).run(strict=False)
            for k, c in rep.raised.items():
                total.raised[k] = total.raised.get(k, 0) + c
            total.unsupported += rep.unsupported
    if strict and total.unsupported:
        lines = [f"  {loc}: {name}" for name, loc in total.unsupported]
        raise RaiseError(
            f"strict import: {len(lines)} op(s) cannot be raised to hector_inter:\n"
            + "\n".join(lines),
            total.unsupported,
        )
    return total


def make_torch_context() -> Any:
    """A ``torch_mlir.ir.Context`` with the torch dialect and Hector's dialects loaded."""
    from torch_mlir import ir
    from torch_mlir.dialects import torch as torch_d

    from hector.dialects import load_into_torch_mlir

    ctx = ir.Context()
    torch_d.register_dialect(ctx)
    load_into_torch_mlir(ctx)
    return ctx


def run_cli(text: str, display: str, strict: bool = False) -> tuple[str | None, list[str]]:
    """``hector-opt --torch``: parse torch-dialect ``text``, raise it, and return the printed
    IR (None on failure) and error lines (``file:line: error: ...``)."""
    from torch_mlir import ir

    ctx = make_torch_context()
    try:
        with ctx:
            module = ir.Module.parse(text)
    except ir.MLIRError as err:
        msg = str(err).replace('"-"', display).replace("\n", " ")
        return None, [f"{display}: error: {msg}"]
    try:
        raise_module(module, strict=strict)
    except RaiseError as err:
        errs = [
            f"{loc.replace('-:', display + ':', 1) if loc.startswith('-:') else loc}: error: "
            f"cannot raise '{name}' to hector_inter"
            for name, loc in err.unsupported
        ]
        return None, errs or [f"{display}: error: {err}"]
    return str(module), []
