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

Each torch op name has one handler (``_HANDLERS``, filled by ``@_handles``) that recognises
the patterns rooted at that op; the hector_inter ops are created through the typed builders
generated from their specs (``hector_inter.OPS``), each at its torch op's location.

Run it from the command line with ``hector-opt -p raise-torch-to-hector FILE.mlir`` (shorthand
``--torch``; ``--torch-strict`` for the strict diagnostics).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..dialects import Kind
from ..dialects import hector_inter as inter
from ..dialects._build import OpHandlers

GRAPH_ATTR = "hector.graph"
GLUE_ATTR = "hector.glue"
KIND_ATTR = "hector.kind"
BINDINGS = ("src", "dst", "etype", "ntype", "edge_index")
#: The rows a per-type weight or bias is picked for, by the graph's type array that picks it.
TYPE_ARRAY_ROWS: dict[str, Kind] = {"etype": Kind.EDGE, "ntype": Kind.NODE}
LEAF = "leaf"
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


def _index_ops(reduce: bool, src: Kind, dst: Kind) -> dict[str, str]:
    """hector_inter index ops moving rows ``src`` → ``dst`` by graph array (from the specs)."""
    return {
        s.rowmap.array: s.name
        for s in inter.DIALECT.ops
        if s.rowmap is not None
        and (s.rowmap.reduce, s.rowmap.src, s.rowmap.dst) == (reduce, src, dst)
    }


#: ``x[I]`` with ``I`` a graph array → the gather through it (``src`` → ``gather_src``).
GATHER_BY_ARRAY = _index_ops(False, Kind.NODE, Kind.EDGE)
#: ``zeros.index_add(0, I, m)`` with ``I`` a graph array → the sum through it.
SUM_BY_ARRAY = _index_ops(True, Kind.EDGE, Kind.NODE)


# -- torch-mlir's types and locations ---------------------------------------------------------
# torch-mlir's Python package has no classes for its own types (``torch_mlir.dialects.torch``
# holds op builders only; its native module exports ``register_dialect`` alone) and its
# ``Location`` has no accessors (no ``filename``/``start_line``): its own FX importer builds
# ``!torch.vtensor`` types by parsing their text. These helpers are the one place Hector reads
# or builds torch-mlir types and locations, and they do it the same way.

_VTENSOR = re.compile(r"!torch\.vtensor<\[([-0-9,]*)\],(\w+)>")
_FILE_LOC = re.compile(r'"([^"]+)":(\d+)')


@dataclass(frozen=True)
class VTensor:
    """A ``!torch.vtensor<[dims],dtype>`` type as data (``dtype`` as torch-mlir spells it:
    ``f32``, ``si64``, ``i1``)."""

    shape: tuple[int, ...]
    dtype: str


def vtensor(t: Any) -> VTensor | None:
    """Shape and dtype of a statically shaped ``!torch.vtensor`` type, else None."""
    m = _VTENSOR.fullmatch(str(t))  # torch-mlir's type syntax: it has no Python type API
    if m is None:
        return None
    return VTensor(tuple(int(d) for d in m.group(1).split(",") if d), m.group(2))


def vtensor_type(shape: tuple[int, ...], dtype: str) -> Any:
    """The ``!torch.vtensor`` type of ``shape`` and ``dtype`` in the current torch-mlir
    context (parsed, as torch-mlir's FX importer does: no Python type API to build it)."""
    from torch_mlir import ir

    dims = ",".join(str(d) for d in shape)
    return ir.Type.parse(f"!torch.vtensor<[{dims}],{dtype}>")


def source_location(loc: Any) -> str:
    """``file:line`` of a torch-mlir location (its first file location), or ``<unknown>``."""
    m = _FILE_LOC.search(str(loc))  # torch-mlir's Location has no accessors to read it by
    return f"{m.group(1)}:{m.group(2)}" if m else "<unknown>"


class RaiseError(Exception):
    """The input cannot be raised (bad bindings) or, under ``strict``, ops stayed unraised."""

    def __init__(self, message: str, unsupported: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.unsupported = unsupported or []


@dataclass(eq=False)
class HNode:
    """A hector_inter value being built: an op over other nodes, or a leaf torch value."""

    op: str  # hector_inter op name, or LEAF
    kind: Kind
    shape: tuple[int, ...]
    operands: dict[str, HNode] = field(default_factory=dict)  # by the spec's operand names
    attrs: dict[str, Any] = field(default_factory=dict)  # by the spec's attribute names
    graph: bool = False  # pass the graph where the spec makes it optional (typed bias)
    value: Any = None  # leaf: the torch value
    anchor: Any = None  # the torch op the node replaces (insertion point)
    glue_t: bool = False  # leaf: transpose the torch value first (linear weights)


@dataclass
class RaiseReport:
    """What the pass did: raised hector ops by name, and torch ops left as eager code."""

    raised: dict[str, int] = field(default_factory=dict)
    unsupported: list[tuple[str, str]] = field(default_factory=list)  # (op name, file:line)


def _shape(v: Any) -> tuple[tuple[int, ...], str] | None:
    t = vtensor(v.type)
    return None if t is None else (t.shape, t.dtype)


def _def(v: Any) -> Any:
    """The op defining ``v`` (None for block arguments)."""
    owner = v.owner
    return None if owner.__class__.__name__ == "Block" else owner.operation


def _name(op: Any) -> str:
    return op.name if op is not None else ""


Shape = tuple[int, ...]
Handler = Callable[["_Raiser", Any, Shape], "HNode | None"]
#: torch op name → the handler that raises the patterns rooted at that op.
_HANDLERS: OpHandlers[Handler] = OpHandlers("raise handler")
_handles = _HANDLERS.register


# torch op → hector_inter unary function, from the functions' declarations in the spec.
_UNARY_FN = {f.torch: f.name for f in inter.UNARY_FUNCTIONS if f.torch is not None}


def _check_binding_shape(arg: Any, i: int, role: str) -> None:
    """A graph array has the rank its role is read with: ``edge_index`` is ``[2, E]``, the
    others have their edges (or nodes) along the first dimension."""
    s = _shape(arg)
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


class _Raiser:
    def __init__(self, func: Any, ir: Any) -> None:
        self.func, self.ir = func, ir
        self.block = func.regions[0].blocks[0]
        self.bind: dict[Any, str] = {}
        self.H: dict[Any, HNode] = {}
        self.report = RaiseReport()
        self.bind_arguments()
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
            self.N = self.int_attr("hector.num_nodes")
        self.R = -1
        if "hector.num_etypes" in func.attributes:
            self.R = self.int_attr("hector.num_etypes")
        if self.N < 0:
            self.N = self.infer_nodes()

    def int_attr(self, name: str) -> int:
        """The function's integer attribute ``name`` (a count; negative: unknown)."""
        attr = self.func.attributes[name]
        if not isinstance(attr, self.ir.IntegerAttr):
            raise RaiseError(f"{name} must be an integer, got {attr}")
        return int(attr.value)

    def bind_arguments(self) -> None:
        """Read the ``hector.graph`` argument attributes into ``self.bind``."""
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

    def infer_nodes(self) -> int:
        """The node count: the rows gathered or scattered through the src/dst index."""
        for op in self.block.operations:
            op = op.operation
            res = _shape(op.results[0]) if len(op.results) == 1 else None
            if res is None:
                continue
            g = self.gathered(op.results[0]) if op.name.startswith("torch.aten.index") else None
            x = _shape(g[0]) if g is not None and g[1] in ("src", "dst") else None
            if x is not None:
                return x[0][0]
            sm = self.summed(op.results[0])
            if sm is not None and sm[1] in ("src", "dst"):
                return res[0][0]
        return -1

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

    def splat(self, v: Any) -> float | None:
        """The value of a floating-point splat literal ``v``, else None."""
        op = _def(v)
        if _name(op) != "torch.vtensor.literal":
            return None
        a = self.ir.DenseElementsAttr(op.attributes["value"])
        value = a.get_splat_value() if a.is_splat else None
        return value.value if isinstance(value, self.ir.FloatAttr) else None

    def is_ones(self, v: Any) -> bool:
        """``v`` is a tensor of ones (a splat literal, ``ones``, ``ones_like``)."""
        n = _name(_def(v))
        if n == "torch.vtensor.literal":
            return self.splat(v) == 1.0
        return n in ("torch.aten.ones", "torch.aten.ones_like", "torch.aten.new_ones")

    def is_zeros(self, v: Any) -> bool:
        """``v`` is a tensor of zeros (a splat literal, ``zeros``, ``fill`` with 0)."""
        op = _def(v)
        n = _name(op)
        if n == "torch.vtensor.literal":
            return self.splat(v) == 0.0
        if n in ("torch.aten.zeros", "torch.aten.zeros_like", "torch.aten.new_zeros"):
            return True
        return n == "torch.aten.fill.Scalar" and self.const(op.operands[1]) in (0, 0.0)

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
        op = _def(v)
        if _name(op) == "torch.aten.clamp" and self.const(op.operands[1]) in (1, 1.0):
            if self.const(op.operands[2]) is not None:
                return False
            op = _def(op.operands[0])
        if _name(op) != "torch.aten.gather" or self.const(op.operands[1]) != 1:
            return False
        if self.column_role(op.operands[2]) != "etype":
            return False
        g = self.gathered(op.operands[0])
        s = self.summed(g[0]) if g is not None and g[1] == "dst" else None
        if s is None or s[1] != "dst":
            return False
        hot = _def(s[0])
        if _name(hot) not in ("torch.aten.scatter.src", "torch.aten.scatter.value"):
            return False
        if not self.is_zeros(hot.operands[0]) or self.const(hot.operands[1]) != 1:
            return False
        if self.column_role(hot.operands[2]) != "etype":
            return False
        if _name(hot) == "torch.aten.scatter.src":
            return self.is_ones(hot.operands[3])
        return self.const(hot.operands[3]) in (1, 1.0)

    def column_role(self, v: Any) -> str | None:
        """The graph array ``v`` is, as a column ``[E, 1]`` (``I.unsqueeze(1)``,
        ``I.view(-1, 1)``)."""
        op = _def(v)
        if _name(op) == "torch.aten.unsqueeze" and self.const(op.operands[1]) in (1, -1):
            return self.index_role(op.operands[0])
        s = _shape(v)
        if _name(op) in ("torch.aten.view", "torch.aten.reshape") and s is not None:
            if len(s[0]) == 2 and s[0][1] == 1:
                return self.index_role(op.operands[0])
        return None

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
    def rows(self, v: Any, kind: Kind | None = None, leaf_ok: bool = True) -> HNode | None:
        """A row-wise node for ``v``: raised already, or (``leaf_ok``) a torch value whose rows
        are nodes or edges."""
        if v in self.H:
            h = self.H[v]
            return h if h.kind != Kind.WEIGHT and (kind is None or h.kind == kind) else None
        s = _shape(v)
        if not leaf_ok or s is None or s[1] != "f32" or len(s[0]) != 2:
            return None
        k = kind
        if k is None:
            k = Kind.NODE if s[0][0] == self.N else Kind.EDGE if s[0][0] == self.E else None
        want = self.N if k == Kind.NODE else self.E
        if k is None or s[0][0] != want:
            return None
        return HNode(LEAF, k, s[0], value=v)

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
        """A weight leaf for ``v`` (f32, of ``rank``), or None."""
        if not self.weight_like(v):
            return None
        s = _shape(v)
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

    def match(self, op: Any) -> HNode | None:
        """The node raised from ``op`` by its name's handler, or None."""
        handler = _HANDLERS.get(op.name)
        if handler is None or len(op.results) != 1:
            return None
        s = _shape(op.results[0])
        return None if s is None else handler(self, op, s[0])

    # -- handlers, one per torch op name ------------------------------------------------------
    @_handles(
        "torch.aten.index_select", "torch.aten.index.Tensor", "torch.aten.index.Tensor_hacked_twin"
    )
    def raise_gather(self, op: Any, shape: Shape) -> HNode | None:
        """``x[I]`` / ``index_select(x, 0, I)`` with ``I`` the src (dst) index → ``gather_*``."""
        g = self.gathered(op.results[0])
        if g is None or g[1] not in GATHER_BY_ARRAY:
            return None
        x = self.rows(g[0], Kind.NODE)
        if x is None or len(shape) != 2:
            return None
        return self.node(GATHER_BY_ARRAY[g[1]], Kind.EDGE, shape, x=x)

    @_handles(
        "torch.aten.index_put",
        "torch.aten.index_put.hacked_twin",
        "torch.aten.scatter_add",
        "torch.aten.scatter_reduce.two",
    )
    def raise_sum(self, op: Any, shape: Shape) -> HNode | None:
        """Edge rows summed onto zeros by the dst (src) index → ``sum_to_*``."""
        s = self.summed(op.results[0])
        if s is None or s[1] not in SUM_BY_ARRAY:
            return None
        m = self.rows(s[0], Kind.EDGE)
        if m is None or len(shape) != 2 or shape[0] != self.N:
            return None
        return self.node(SUM_BY_ARRAY[s[1]], Kind.NODE, shape, x=m)

    @_handles("torch.aten.squeeze.dim")
    def raise_typed_linear(self, op: Any, shape: Shape) -> HNode | None:
        """``bmm(X.unsqueeze(1), W[I]).squeeze(1)`` with ``I`` the edge (node) types →
        ``typed_linear {slice = "etype"}`` (``"ntype"``)."""
        if self.const(op.operands[1]) not in (1, -2):
            return None
        bmm = _def(self.skip_views(op.operands[0]))
        if _name(bmm) not in ("torch.aten.bmm", "torch.aten.matmul"):
            return None
        un = _def(self.skip_views(bmm.operands[0]))
        if _name(un) != "torch.aten.unsqueeze" or self.const(un.operands[1]) not in (1, -2):
            return None
        wg = self.gathered(bmm.operands[1])
        if wg is None or wg[1] not in TYPE_ARRAY_ROWS:
            return None
        kind = TYPE_ARRAY_ROWS[wg[1]]
        x, w = self.rows(un.operands[0], kind), self.weight(wg[0], 3)
        if x is None or w is None:
            return None
        return self.node("typed_linear", kind, shape, x=x, weight=w, slice=wg[1])

    @_handles("torch.aten.mm", "torch.aten.matmul")
    def raise_mm(self, op: Any, shape: Shape) -> HNode | None:
        """``X @ W`` with a rank-2 weight → ``typed_linear {slice = "none"}``."""
        x, w = self.rows(op.operands[0]), self.weight(op.operands[1], 2)
        if x is None or w is None:
            return None
        return self.node("typed_linear", x.kind, shape, x=x, weight=w, slice="none")

    @_handles("torch.aten.linear")
    def raise_linear(self, op: Any, shape: Shape) -> HNode | None:
        """``linear(X, W, b)`` → ``typed_linear`` on ``W.t()`` plus a bias ``add``."""
        x, w = self.rows(op.operands[0]), self.weight(op.operands[1], 2)
        if x is None or w is None:
            return None
        w.glue_t, w.shape = True, (w.shape[1], w.shape[0])
        out = self.node("typed_linear", x.kind, shape, x=x, weight=w, slice="none")
        if self.const(op.operands[2]) is None:
            return out
        b = self.weight(op.operands[2], 1)
        return self.node("add", x.kind, shape, lhs=out, rhs=b) if b is not None else None

    @_handles("torch.aten.div.Tensor")
    def raise_div(self, op: Any, shape: Shape) -> HNode | None:
        """A segment softmax, or a mean over incoming edges."""
        return (
            self.match_softmax(op, shape)
            or self.match_div_count(op, shape)
            or self.match_mean_of_sum(op, shape)
        )

    def match_mean_of_sum(self, op: Any, shape: Shape) -> HNode | None:
        """``sum_to_dst(M) / count.clamp(min=1).view(-1, 1).expand_as(...)`` with ``count`` the
        in-degree (PyG's mean aggregation: ``scatter(..., reduce="mean")``) →
        ``sum_to_dst(scale(M, degree_norm {by = "dst"}))``. The clamp is required: without it
        an isolated node divides 0 by 0 (NaN), which ``degree_norm`` would turn into 0."""
        if len(shape) != 2 or shape[0] != self.N:
            return None
        total = self.H.get(op.operands[0])
        if total is None or total.op != SUM_BY_ARRAY["dst"]:
            return None
        den = op.operands[1]
        for names in (
            ("torch.aten.broadcast_to", "torch.aten.expand", "torch.aten.expand_as"),
            ("torch.aten.view", "torch.aten.reshape", "torch.aten.unsqueeze"),
        ):
            d = _def(den)
            if _name(d) in names:
                den = d.operands[0]
        clamp, sd = _def(den), _shape(den)
        if (
            _name(clamp) != "torch.aten.clamp"
            or sd is None
            or sd[0] not in ((self.N,), (self.N, 1))
        ):
            return None
        if self.counted(den) != "dst":
            return None
        m = total.operands["x"]
        norm = self.node("degree_norm", Kind.EDGE, (self.E, 1), by="dst")
        scaled = self.node("scale", Kind.EDGE, m.shape, x=m, s=norm)
        return self.node(SUM_BY_ARRAY["dst"], Kind.NODE, shape, x=scaled)

    def match_softmax(self, op: Any, shape: Shape) -> HNode | None:
        """``exp(s - max_by_dst(s)[dst]) / sum_by_dst(exp(...))[dst]`` → ``edge_softmax``."""
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
                and mx is not None
                and _name(mx) == "torch.aten.scatter_reduce.two"
                and self.const(mx.operands[4]) in ("amax", "max")
                and self.broadcast_role(mx.operands[2]) == "dst"
                and mx.operands[3] == sub.operands[0]
            ):
                s = sub.operands[0]
        gd = self.gathered(den)
        if gd is None or gd[1] != "dst":
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
        x = self.rows(s, Kind.EDGE)
        if x is None or len(shape) != 2:
            return None
        return self.node("edge_softmax", Kind.EDGE, shape, x=x)

    def match_div_count(self, op: Any, shape: Shape) -> HNode | None:
        """``X / count[I].unsqueeze(-1)`` (a mean over the dst's or (dst, etype)'s incoming
        edges) → ``scale(X, degree_norm)``."""
        if len(shape) != 2 or shape[0] != self.E:
            return None
        d = _shape(op.operands[1])
        if d is None or d[0] != (self.E, 1):
            return None
        by = self.norm_by(op.operands[1], reciprocal=False)
        x = self.rows(op.operands[0], Kind.EDGE) if by else None
        if x is None:
            return None
        norm = self.node("degree_norm", Kind.EDGE, (self.E, 1), by=by)
        return self.node("scale", Kind.EDGE, shape, x=x, s=norm)

    @_handles("torch.aten.mul.Tensor")
    def raise_scale(self, op: Any, shape: Shape) -> HNode | None:
        """``X * s`` with per-row ``s [M, 1]`` → ``scale``."""
        a, b = op.operands
        sa, sb = _shape(a), _shape(b)
        if not sa or not sb or len(sa[0]) != 2 or len(sb[0]) != 2:
            return None
        if sa[0][1] == 1 and sb[0][1] != 1:
            a, b, sa, sb = b, a, sb, sa
        if sb[0][1] != 1 or sa[0][0] != sb[0][0]:
            return None
        x, s = self.rows(a), self.rows(b)
        if x is None or s is None or x.kind != s.kind or (x.op == LEAF and s.op == LEAF):
            return None
        return self.node("scale", x.kind, shape, x=x, s=s)

    @_handles("torch.aten.mul.Scalar")
    def raise_mul_one(self, op: Any, shape: Shape) -> HNode | None:
        """``1.0 * x`` (how ``1.0 / t`` is exported) is ``x``."""
        if self.const(op.operands[1]) not in (1, 1.0):
            return None
        return self.H.get(op.operands[0])

    @_handles("torch.aten.view")
    def raise_head_scale(self, op: Any, shape: Shape) -> HNode | None:
        """``(X.view(M, H, Dh) * A.unsqueeze(-1)).view(M, D)`` → ``scale`` per head; and the
        per-head weighted sum as PyG's ``RGATConv`` writes it, ``zeros(N, H, Dh).scatter_add(0,
        I.view(-1, 1, 1).expand_as(P), P).view(N, D)`` with ``P`` that product (``A`` also as
        ``A.view(M, H, 1)``) → ``sum_to_dst(scale(X, A))`` (``sum_to_src`` by the src index)."""
        if len(shape) != 2:
            return None
        inner = _def(op.operands[0])
        if _name(inner) == "torch.aten.mul.Tensor":
            return self.head_scale(inner, shape)
        summed = self.summed(op.operands[0])
        if summed is None or summed[1] not in SUM_BY_ARRAY or shape[0] != self.N:
            return None
        mul, s3 = _def(summed[0]), _shape(summed[0])
        if _name(mul) != "torch.aten.mul.Tensor" or s3 is None or len(s3[0]) != 3:
            return None
        m = self.head_scale(mul, (s3[0][0], shape[1]))
        if m is None or m.kind != Kind.EDGE:
            return None
        return self.node(SUM_BY_ARRAY[summed[1]], Kind.NODE, shape, x=m)

    def head_scale(self, mul: Any, shape: Shape) -> HNode | None:
        """``X.view(M, H, Dh) * A.unsqueeze(-1)`` (or ``* A.view(M, H, 1)``), in either order,
        as a ``scale`` of ``X [M, H * Dh]`` by ``A [M, H]``; ``shape`` is ``[M, H * Dh]``."""
        for xv, av in (mul.operands, reversed(list(mul.operands))):
            xview, un = _def(xv), _def(av)
            sx, sa = _shape(xv), _shape(av)
            if _name(xview) != "torch.aten.view" or sx is None or sa is None:
                continue
            s3 = sx[0]
            if len(s3) != 3:
                continue
            if _name(un) == "torch.aten.unsqueeze":
                if self.const(un.operands[1]) not in (-1, 2):
                    continue
            elif _name(un) != "torch.aten.view" or tuple(sa[0]) != (s3[0], s3[1], 1):
                continue
            x, a = self.rows(xview.operands[0]), self.rows(un.operands[0])
            if x is None or a is None or x.kind != a.kind or (x.op == a.op == LEAF):
                continue
            if a.shape[1] != s3[1] or x.shape[1] != s3[1] * s3[2] or tuple(shape) != x.shape:
                continue
            return self.node("scale", x.kind, shape, x=x, s=a)
        return None

    @_handles("torch.aten.sum.dim_IntList")
    def raise_dot(self, op: Any, shape: Shape) -> HNode | None:
        """``(X * Y).sum(-1, keepdim=True)`` and ``(X * Y).view(M, H, Dh).sum(-1)`` → ``dot``."""
        dims, keep = self.const(op.operands[1]), self.const(op.operands[2])
        sv = _shape(op.operands[0])
        if sv is None:
            return None
        src = sv[0]
        if not isinstance(dims, list) or len(dims) != 1 or dims[0] not in (-1, len(src) - 1):
            return None
        if self.const(op.operands[3]) is not None:
            return None
        pair = self.dot_pair(_def(op.operands[0]), len(src), keep)
        if pair is None:
            return None
        x, y = self.rows(pair[0]), self.rows(pair[1])
        if x is None or y is None or x.kind != y.kind or x.shape != y.shape:
            return None
        if x.op == LEAF and y.op == LEAF:
            return None
        return self.node("dot", x.kind, shape, x=x, y=y)

    def dot_pair(self, inner: Any, rank: int, keep: Any) -> list[Any] | None:
        """The two row operands multiplied under a ``sum(-1)`` of ``rank``, or None."""
        if rank == 2 and keep is True and _name(inner) == "torch.aten.mul.Tensor":
            return list(inner.operands)
        if rank != 3 or keep is not False:
            return None
        if _name(inner) == "torch.aten.view" and _name(_def(inner.operands[0])) == (
            "torch.aten.mul.Tensor"
        ):
            return list(_def(inner.operands[0]).operands)
        if _name(inner) == "torch.aten.mul.Tensor":
            vs = [_def(v) for v in inner.operands]
            if any(_name(v) != "torch.aten.view" for v in vs):
                return None
            return [v.operands[0] for v in vs]
        return None

    @_handles("torch.aten.unsqueeze", "torch.aten.reciprocal")
    def raise_degree_norm(self, op: Any, shape: Shape) -> HNode | None:
        """``(1 / count[I]).unsqueeze(-1)`` (``I`` = dst or a (dst, etype) key, ``count`` its
        occurrence count from an index_add/scatter_add of ones) → ``degree_norm``."""
        if len(shape) != 2 or shape[1] != 1 or shape[0] != self.E:
            return None
        by = self.norm_by(op.results[0], reciprocal=True)
        if by is None:
            return None
        return self.node("degree_norm", Kind.EDGE, shape, by=by)

    @_handles("torch.aten.add.Tensor", "torch.aten.sub.Tensor")
    def raise_add(self, op: Any, shape: Shape) -> HNode | None:
        """Sum or difference of rows, a bias ``[D]`` or a typed bias ``B[etype]``/``B[ntype]``
        → ``add`` (of a ``neg`` for ``sub``)."""
        sub = op.name == "torch.aten.sub.Tensor"
        if self.const(op.operands[2]) not in (1, 1.0):
            return None
        a, b = op.operands[0], op.operands[1]
        if not sub and a not in self.H and b in self.H:
            a, b = b, a
        x = self.rows(a)
        if x is None or len(shape) != 2:
            return None
        gb = self.gathered(b)
        if gb is not None and gb[1] in TYPE_ARRAY_ROWS and not sub:
            tb = self.weight(gb[0], 2)
            if x.kind != TYPE_ARRAY_ROWS[gb[1]] or tb is None or x.op == LEAF:
                return None
            return self.node("add", x.kind, shape, graph=True, lhs=x, rhs=tb)
        sb = _shape(b)
        if sb and len(sb[0]) == 1 and b not in self.H:
            bias = self.weight(b, 1)
            if bias is None or x.op == LEAF or sub:
                return None  # a negated weight is not a hector value
            return self.node("add", x.kind, shape, lhs=x, rhs=bias)
        y = self.rows(b, x.kind)
        if y is None or y.shape != x.shape or (x.op == LEAF and y.op == LEAF):
            return None
        if sub:
            y = self.node("unary", y.kind, y.shape, x=y, fn="neg", slope=0.0)
        return self.node("add", x.kind, shape, lhs=x, rhs=y)

    @_handles(*_UNARY_FN)
    def raise_unary(self, op: Any, shape: Shape) -> HNode | None:
        """An elementwise function of a raised row value → ``unary``."""
        x = self.H.get(op.operands[0])
        if x is None or x.kind == Kind.WEIGHT:
            return None
        slope = 0.0
        if op.name == "torch.aten.leaky_relu":
            slope = self.const(op.operands[1])
        if op.name == "torch.aten.gelu" and self.const(op.operands[1]) != "none":
            return None  # only the exact (erf) GELU is hector's
        return self.node("unary", x.kind, shape, x=x, fn=_UNARY_FN[op.name], slope=float(slope))

    # -- rewriting ----------------------------------------------------------------------------
    def run(self, strict: bool) -> RaiseReport:
        """Raise every op of the function, rewrite, and report what stayed torch code."""
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
            if op.name.startswith(f"{inter.DIALECT.name}."):
                key = op.name.split(".", 1)[1]
                self.report.raised[key] = self.report.raised.get(key, 0) + 1
        if strict and self.report.unsupported:
            raise _strict_error(self.report.unsupported)
        return self.report

    def materialize_all(self) -> None:
        """Append the graph argument, build every raised node and cast it back to torch."""
        from torch_mlir.dialects import builtin

        ir = self.ir
        with self.func.context:
            self.graph = self.block.add_argument(
                inter.graph_type(self.func.context), self.func.location
            )
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
                with ir.InsertionPoint(h.anchor):
                    back = builtin.UnrealizedConversionCastOp(
                        [v.type], [out], loc=h.anchor.location
                    )
                v.replace_all_uses_with(back.result)

    def tensor_type(self, shape: Shape) -> Any:
        """The builtin f32 tensor type of ``shape`` (raised values are f32 rows or weights)."""
        ir = self.ir
        return ir.RankedTensorType.get(list(shape), ir.F32Type.get())

    def leaf(self, h: HNode) -> Any:
        """The hector-side value of a torch leaf: a cast (of its transpose, for ``linear``'s
        weight) right after its definition, marked with its kind; one per value."""
        from torch_mlir.dialects import builtin
        from torch_mlir.dialects import torch as torch_d

        ir = self.ir
        key = (h.value, h.glue_t)
        if key in self.casts:
            return self.casts[key]
        owner = _def(h.value)
        if owner is None:
            ip = ir.InsertionPoint.at_block_begin(self.block)
        else:
            ops = [o.operation for o in self.block.operations]
            ip = ir.InsertionPoint(ops[ops.index(owner) + 1])
        loc = owner.location if owner is not None else self.func.location
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
            with self.ir.InsertionPoint(at), at.location:
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
            for op in reversed(list(self.block.operations)):
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


class _UnknownType:
    def __repr__(self) -> str:
        return "<unknown>"


_Unknown = _UnknownType()


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
            rep = _Raiser(op.operation, ir).run(strict=False)
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

    from ..dialects import load_into_torch_mlir

    ctx = ir.Context()
    torch_d.register_dialect(ctx)
    load_into_torch_mlir(ctx)
    return ctx
