"""Relational GNN models compiled by Hector: RGCN, RGAT and HGT.

Each layer is an ``nn.Module`` whose relational core is one function compiled with
:func:`hector.compile` (forward and, through ``hector-autodiff``, backward); only weight-sized
glue (stacking per-type weights, folding constants into them) runs in PyTorch, so gradients
reach every parameter through ``torch.autograd``. Each layer follows the conventions of the
PyG layer of the same model and loads its weights one to one with ``from_pyg``:

* :class:`RGCNLayer` ↔ ``RGCNConv`` (mean per relation, root weight, bias);
* :class:`RGATLayer` ↔ ``RGATConv`` (across-relation additive self-attention, ``dim=1``,
  concatenated heads, bias);
* :class:`HeteroGATLayer` ↔ ``HeteroConv({r: GATConv(add_self_loops=False)}, aggr="sum")``,
  MLPerf's R-GAT layer (attention within each relation, per-relation weights, summed);
* :class:`HGTLayer` ↔ ``HGTConv`` (per-node-type K/Q/V, per-relation per-head K/V matrices and
  priors, edge softmax, GELU, per-node-type output projection, gated residual).

:class:`RGCN`, :class:`RGAT` and :class:`HGT` stack layers (ReLU between them, none after the
last). A graph for HGT must number nodes grouped by node type in the layer's ``node_types``
order and edge types in its ``edge_types`` order (``hector.datasets`` builds such graphs).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .data.graph import HeteroGraph
from .data.limits import MAX_COUNT, ResourceLimitError, memory_limit
from .frontends import compiled as frontend
from .frontends.graph_api import GraphProxy, Value

#: Deepest stack the model classes build (each layer is a compiled function).
MAX_LAYERS = 1024


def _size(name: str, value: Any, minimum: int = 1, maximum: int = MAX_COUNT) -> int:
    """A layer size argument as an int in ``[minimum, maximum]``; TypeError/ValueError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not minimum <= value <= maximum:
        raise ValueError(f"{name} must be in [{minimum}, {maximum}], got {value}")
    return value


def _slope(value: Any) -> float:
    """A leaky ReLU slope, checked: a finite number (TypeError otherwise)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TypeError(f"slope must be a finite float, got {value!r}")
    return float(value)


def block_diagonal(blocks: torch.Tensor) -> torch.Tensor:
    """``[R, B, P, Q]`` blocks → ``[R, B*P, B*Q]`` block-diagonal matrices, block ``b`` at rows
    ``b*P…`` and columns ``b*Q…`` (PyTorch ops: differentiable, weight-sized)."""
    eye = torch.eye(blocks.shape[1], dtype=blocks.dtype, device=blocks.device)
    r, b, p, q = blocks.shape
    return torch.einsum("rbpq,bc->rbpcq", blocks, eye).reshape(r, b * p, b * q)


def _check_parameters(layer: str, count: int) -> None:
    """Refuse float32 parameters that would not fit in memory, before allocating them."""
    limit, source = memory_limit()
    if 4 * count > limit:
        raise ResourceLimitError(
            f"{layer}: {count} float32 parameters need {4 * count} bytes, over the limit of "
            f"{limit} bytes ({source})"
        )


def _rgcn_layer(g: GraphProxy, x: Value, weight: Value, root: Value, bias: Value) -> Value:
    """``h'_i = Σ_r Σ_{j∈N_r(i)} (1/c_{i,r}) W_r h_j + W_0 h_i + b``."""
    msg = g.typed_linear(g.gather_src(x), weight)  # W_r h_j, weight picked by each edge's type
    agg = g.sum_to_dst(msg * g.degree_norm("dst_etype"))  # mean per (node, relation), summed
    return agg + g.linear(x, root) + bias


rgcn_layer = frontend.compile(_rgcn_layer)
rgcn_layer.__name__ = "rgcn_layer"


def _rgcn_sum_layer(g: GraphProxy, x: Value, weight: Value, root: Value, bias: Value) -> Value:
    """``h'_i = Σ_r Σ_{j∈N_r(i)} W_r h_j + W_0 h_i + b`` (``RGCNConv(aggr="add")``)."""
    return g.sum_to_dst(g.typed_linear(g.gather_src(x), weight)) + g.linear(x, root) + bias


rgcn_sum_layer = frontend.compile(_rgcn_sum_layer)
rgcn_sum_layer.__name__ = "rgcn_sum_layer"


def _rgcn_max_layer(g: GraphProxy, x: Value, weight: Value, root: Value, bias: Value) -> Value:
    """``h'_i = Σ_r W_r max_{j∈N_r(i)} h_j + W_0 h_i + b`` (``RGCNConv(aggr="max")``: the
    maximum per node and relation, elementwise, then its relation's weight; one GEMM per
    (node, relation) pair after ``hector-aggregation-order``)."""
    top = g.edge_max(g.gather_src(x), by="dst_etype")
    agg = g.sum_to_dst(g.typed_linear(top, weight) * g.degree_norm("dst_etype"))
    return agg + g.linear(x, root) + bias


rgcn_max_layer = frontend.compile(_rgcn_max_layer)
rgcn_max_layer.__name__ = "rgcn_max_layer"


def _rgcn_max_rows_layer(g: GraphProxy, x: Value, weight: Value, root: Value, bias: Value) -> Value:
    """``h'_i = Σ_r max_{j∈N_r(i)} W_r h_j + W_0 h_i + b``: the maximum of the transformed rows
    (``RGCNConv(aggr="max")`` on node indices: PyG aggregates the rows ``W_r[j]`` they pick)."""
    msg = g.typed_linear(g.gather_src(x), weight)
    agg = g.sum_to_dst(g.edge_max(msg, by="dst_etype") * g.degree_norm("dst_etype"))
    return agg + g.linear(x, root) + bias


rgcn_max_rows_layer = frontend.compile(_rgcn_max_rows_layer)
rgcn_max_rows_layer.__name__ = "rgcn_max_rows_layer"


def _make_rgat(slope: float) -> frontend.CompiledFunction:
    def rgat_layer(
        g: GraphProxy, x: Value, weight: Value, q: Value, k: Value, bias: Value
    ) -> Value:
        """RGATConv: ``α = softmax_dst(leaky_relu(W_r h_i · q + W_r h_j · k))``,
        ``h'_i = Σ_j α_ij ⊙_head W_r h_j + b``."""
        hs = g.typed_linear(g.gather_src(x), weight)  # W_r h_j  [E, H*F]
        hd = g.typed_linear(g.gather_dst(x), weight)  # W_r h_i  [E, H*F]
        logits = g.linear(hd, q) + g.linear(hs, k)  # [E, H]
        alpha = g.edge_softmax(logits.leaky_relu(slope))
        return g.sum_to_dst(hs * alpha) + bias

    return frontend.compile(rgat_layer)


def _make_hetero_gat(slope: float) -> frontend.CompiledFunction:
    def hetero_gat_layer(
        g: GraphProxy, x: Value, weight: Value, att_src: Value, weight_att_dst: Value, bias: Value
    ) -> Value:
        """One ``GATConv`` per relation, summed: ``α = softmax over the destination's edges of
        the relation (leaky_relu(a_src·W_r h_j + a_dst·W_r h_i))``,
        ``h'_i = Σ_r Σ_j α_ij ⊙_head W_r h_j + b_type(i)``. The destination's term is
        ``h_i · (W_r a_dst)``: ``weight_att_dst`` is ``W_r`` times the attention vectors, so no
        edge carries ``W_r h_i``."""
        hs = g.typed_linear(g.gather_src(x), weight)  # W_r h_j  [E, H*F]
        dst_term = g.typed_linear(g.gather_dst(x), weight_att_dst)  # [E, H]
        logits = g.typed_linear(hs, att_src) + dst_term  # [E, H]
        alpha = g.edge_softmax(logits.leaky_relu(slope), by="dst_etype")
        return g.typed_bias(g.sum_to_dst(hs * alpha), bias)

    return frontend.compile(hetero_gat_layer)


def _make_hgt(heads: int, skip: bool) -> frontend.CompiledFunction:
    def hgt_core(
        g: GraphProxy,
        x: Value,
        wk: Value,
        bk: Value,
        wq: Value,
        bq: Value,
        wv: Value,
        bv: Value,
        wk_rel: Value,
        wv_rel: Value,
        wout: Value,
        bout: Value,
    ) -> Value:
        k = g.typed_bias(g.typed_linear(x, wk, slice="ntype"), bk)
        q = g.typed_bias(g.typed_linear(x, wq, slice="ntype"), bq)
        v = g.typed_bias(g.typed_linear(x, wv, slice="ntype"), bv)
        k_e = g.typed_linear(g.gather_src(k), wk_rel)  # per relation and head (block diagonal)
        v_e = g.typed_linear(g.gather_src(v), wv_rel)
        alpha = g.edge_softmax(g.dot(g.gather_dst(q), k_e, heads=heads))
        agg = g.sum_to_dst(v_e * alpha)
        return g.typed_bias(g.typed_linear(agg.gelu(), wout, slice="ntype"), bout)

    def hgt_layer(
        g: GraphProxy,
        x: Value,
        wk: Value,
        bk: Value,
        wq: Value,
        bq: Value,
        wv: Value,
        bv: Value,
        wk_rel: Value,
        wv_rel: Value,
        wout: Value,
        bout: Value,
        gate: Value,
        keep: Value,
    ) -> Value:
        out = hgt_core(g, x, wk, bk, wq, bq, wv, bv, wk_rel, wv_rel, wout, bout)
        return out * gate + x * keep  # σ(skip) · out + (1 − σ(skip)) · x per node type

    return frontend.compile(hgt_layer if skip else hgt_core)


class _Optimizable(nn.Module):
    """A layer whose core is compiled (and can be rebuilt with other optimization switches) or
    loaded from an ahead-of-time bundle."""

    _fn: Any  # a frontend.CompiledFunction, or a bundle's BundleFunction

    def optimize(self, compact: bool = True, reorder: bool = True, fuse: bool = True) -> Any:
        """Recompile the layer's core with these switches (same numbers, other speed/memory);
        returns the layer."""
        self._fn = frontend.CompiledFunction(
            self.compiled.fn, compact=compact, reorder=reorder, fuse=fuse
        )
        return self

    def load_bundle(self, path: Any, driver: Any = None) -> Any:
        """Run the layer's core from the ahead-of-time bundle in directory ``path`` (built by
        ``hector.bundle.build`` or ``hector compile --target cuda --bundle``) instead of
        compiling it: no MLIR is needed. ``driver`` stands in for the CUDA driver in tests.
        Returns the layer."""
        from .runtime import bundle

        self._fn = bundle.load(path, driver)
        return self

    @property
    def compiled(self) -> frontend.CompiledFunction:
        """The compiled core (for its IR, PTX and compile time)."""
        if not isinstance(self._fn, frontend.CompiledFunction):
            raise TypeError("this layer runs a loaded bundle; it has no compiled core")
        return self._fn


class RGCNLayer(_Optimizable):
    """One RGCN layer (PyG ``RGCNConv`` semantics without basis/block decomposition)."""

    def __init__(self, in_dim: int, out_dim: int, num_etypes: int) -> None:
        """Glorot-initialised ``weight [R, in, out]``, ``root [in, out]``, zero ``bias``."""
        super().__init__()
        in_dim, out_dim = _size("in_dim", in_dim), _size("out_dim", out_dim)
        num_etypes = _size("num_etypes", num_etypes)
        _check_parameters("RGCNLayer", (num_etypes + 1) * in_dim * out_dim + out_dim)
        self.weight = nn.Parameter(torch.empty(num_etypes, in_dim, out_dim))
        self.root = nn.Parameter(torch.empty(in_dim, out_dim))
        self.bias = nn.Parameter(torch.zeros(out_dim))
        for p in (self.weight, self.root):
            nn.init.xavier_uniform_(p)
        self._fn = rgcn_layer

    @classmethod
    def from_pyg(cls, conv: Any) -> RGCNLayer:
        """A layer holding a copy of ``RGCNConv``'s weights (same outputs on the same graph)."""
        if getattr(conv, "num_bases", None) or getattr(conv, "num_blocks", None):
            raise ValueError("RGCNConv with basis or block decomposition is not supported")
        if conv.root is None or conv.bias is None or conv.aggr != "mean":
            raise ValueError("RGCNLayer.from_pyg needs RGCNConv(aggr='mean', root_weight, bias)")
        r, i, o = conv.weight.shape
        layer = cls(i, o, r)
        with torch.no_grad():
            layer.weight.copy_(conv.weight)
            layer.root.copy_(conv.root)
            layer.bias.copy_(conv.bias)
        return layer

    def forward(self, g: HeteroGraph, x: torch.Tensor) -> torch.Tensor:
        """``[N, in] → [N, out]``."""
        return self._fn(g, x, self.weight, self.root, self.bias)


class RGATLayer(_Optimizable):
    """One RGAT layer (PyG ``RGATConv`` defaults: across-relation additive attention)."""

    def __init__(
        self, in_dim: int, out_dim: int, num_etypes: int, heads: int = 1, slope: float = 0.2
    ) -> None:
        """``out_dim`` per head; the output has ``heads * out_dim`` columns."""
        super().__init__()
        in_dim, out_dim = _size("in_dim", in_dim), _size("out_dim", out_dim)
        num_etypes, heads = _size("num_etypes", num_etypes), _size("heads", heads)
        slope = _slope(slope)
        hf = _size("heads * out_dim", heads * out_dim)
        _check_parameters("RGATLayer", num_etypes * in_dim * hf + 2 * hf * heads + hf)
        self.heads, self.slope = heads, slope
        self.weight = nn.Parameter(torch.empty(num_etypes, in_dim, hf))
        self.q = nn.Parameter(torch.empty(hf, heads))
        self.k = nn.Parameter(torch.empty(hf, heads))
        self.bias = nn.Parameter(torch.zeros(hf))
        for p in (self.weight, self.q, self.k):
            nn.init.xavier_uniform_(p)
        self._fn = _make_rgat(slope)

    @classmethod
    def from_pyg(cls, conv: Any) -> RGATLayer:
        """A layer holding a copy of ``RGATConv``'s weights."""
        if conv.dim != 1 or not conv.concat or conv.bias is None:
            raise ValueError("RGATLayer.from_pyg needs RGATConv(dim=1, concat=True, bias=True)")
        if conv.attention_mechanism != "across-relation" or conv.attention_mode != (
            "additive-self-attention"
        ):
            raise ValueError("only across-relation additive self-attention is supported")
        if conv.mod is not None or conv.num_bases or conv.num_blocks or conv.lin_edge:
            raise ValueError("RGATConv with mod, bases, blocks or edge features: unsupported")
        r, i, hf = conv.weight.shape
        layer = cls(i, hf // conv.heads, r, conv.heads, float(conv.negative_slope))
        with torch.no_grad():
            for name in ("weight", "q", "k", "bias"):
                getattr(layer, name).copy_(getattr(conv, name))
        return layer

    def forward(self, g: HeteroGraph, x: torch.Tensor) -> torch.Tensor:
        """``[N, in] → [N, heads * out]``."""
        return self._fn(g, x, self.weight, self.q, self.k, self.bias)


class HeteroGATLayer(_Optimizable):
    """MLPerf's R-GAT layer: PyG's ``HeteroConv`` of one ``GATConv(add_self_loops=False)`` per
    relation (shared source/destination projection, attention within the relation, concatenated
    heads, bias), their outputs summed per destination node type.

    Args:
        in_dim: input width.
        out_dim: width per head; the output has ``heads * out_dim`` columns.
        edge_types: ``(src, relation, dst)`` per relation id of the graphs it runs on.
        node_types: node type names by node type id of those graphs.
        heads: attention heads.
        slope: the attention logits' leaky ReLU slope.
    """

    bias_to_type: torch.Tensor  # [T, R]: 1 where relation r ends in node type t

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        edge_types: Sequence[tuple[str, str, str]],
        node_types: Sequence[str],
        heads: int = 1,
        slope: float = 0.2,
    ) -> None:
        """Glorot-initialised weights and attention vectors, zero biases (as ``GATConv``)."""
        super().__init__()
        names, triples = _schema(node_types, edge_types)
        in_dim, out_dim, heads = (
            _size("in_dim", in_dim),
            _size("out_dim", out_dim),
            _size("heads", heads),
        )
        r, hf = len(triples), _size("heads * out_dim", heads * out_dim)
        _check_parameters("HeteroGATLayer", r * (in_dim * hf + 3 * hf))
        self.heads, self.slope, self.edge_types = heads, _slope(slope), triples
        self.weight = nn.Parameter(torch.empty(r, in_dim, hf))
        self.att_src = nn.Parameter(torch.empty(r, heads, out_dim))
        self.att_dst = nn.Parameter(torch.empty(r, heads, out_dim))
        self.bias = nn.Parameter(torch.zeros(r, hf))
        for p in (self.weight, self.att_src, self.att_dst):
            nn.init.xavier_uniform_(p)
        dst = torch.tensor([names.index(d) for _, _, d in triples])
        self.register_buffer("bias_to_type", nn.functional.one_hot(dst, len(names)).T.float())
        self._fn = _make_hetero_gat(self.slope)

    @classmethod
    def from_pyg(cls, conv: Any, node_types: Sequence[str]) -> HeteroGATLayer:
        """A layer holding a copy of a ``HeteroConv`` of ``GATConv`` layers' weights (relation ids
        in ``conv.convs`` order)."""
        from torch_geometric.nn import GATConv

        if not len(conv.convs):
            raise ValueError("HeteroGATLayer.from_pyg needs a HeteroConv with relations")
        first = next(iter(conv.convs.values()))
        shape = (first.in_channels, first.heads, first.out_channels, first.negative_slope)
        for rel, c in conv.convs.items():
            if not isinstance(c, GATConv) or c.lin is None or c.add_self_loops or not c.concat:
                raise ValueError(
                    f"relation {rel}: HeteroGATLayer.from_pyg needs GATConv(int in_channels, "
                    "add_self_loops=False, concat=True) for every relation"
                )
            if c.lin_edge is not None or c.bias is None or c.dropout or getattr(c, "residual", 0):
                raise ValueError(
                    f"relation {rel}: edge features, no bias, attention dropout and residual "
                    "GATConv options are not supported"
                )
            if (c.in_channels, c.heads, c.out_channels, c.negative_slope) != shape:
                raise ValueError(
                    f"relation {rel}: every relation's GATConv must have the same widths, heads "
                    "and slope"
                )
        if conv.aggr != "sum":
            raise ValueError(
                f"HeteroGATLayer sums the relations; HeteroConv has aggr={conv.aggr!r}"
            )
        edge_types = [tuple(k) for k in conv.convs.keys()]
        layer = cls(shape[0], shape[2], edge_types, node_types, shape[1], shape[3])
        with torch.no_grad():
            for r, c in enumerate(conv.convs.values()):
                layer.weight[r].copy_(c.lin.weight.T)
                layer.att_src[r].copy_(c.att_src[0])
                layer.att_dst[r].copy_(c.att_dst[0])
                layer.bias[r].copy_(c.bias)
        return layer

    def forward(self, g: HeteroGraph, x: torch.Tensor) -> torch.Tensor:
        """``[N, in] → [N, heads * out]``."""
        bias = self.bias_to_type @ self.bias  # Σ of the biases of the relations into a type
        # [R, H, F] attention vectors as [R, H*F, H] block-diagonal matrices
        att_src = block_diagonal(self.att_src.unsqueeze(-1))
        weight_att_dst = self.weight @ block_diagonal(self.att_dst.unsqueeze(-1))  # [R, in, H]
        return self._fn(g, x, self.weight, att_src, weight_att_dst, bias)


def _schema(node_types: Any, edge_types: Any) -> tuple[list[str], list[tuple[str, str, str]]]:
    """Check HGT's node type names and ``(src, relation, dst)`` edge types; return lists."""
    if isinstance(node_types, str) or not isinstance(node_types, Sequence):
        raise TypeError(f"node_types must be a list of names, got {type(node_types).__name__}")
    names = list(node_types)
    if not names or not all(isinstance(n, str) for n in names) or len(set(names)) != len(names):
        raise ValueError(f"node_types must be unique names, at least one, got {names!r}")
    if isinstance(edge_types, str) or not isinstance(edge_types, Sequence) or not edge_types:
        raise TypeError(
            f"edge_types must be a non-empty list of (src, relation, dst), got {edge_types!r}"
        )
    triples = []
    for e in edge_types:
        if not isinstance(e, Sequence) or isinstance(e, str) or len(e) != 3:
            raise ValueError(f"edge type {e!r} is not a (src, relation, dst) triple")
        if e[0] not in names or e[2] not in names:
            raise ValueError(f"edge type {tuple(e)} names a node type not in {names}")
        triples.append((str(e[0]), str(e[1]), str(e[2])))
    if len(set(triples)) != len(triples):
        raise ValueError("edge types must be unique")
    return names, triples


@dataclass(frozen=True)
class HgtWeights:
    """An HGT layer's parameters, per node type ``[T, ...]`` and per relation ``[R, ...]``
    (``k_rel``/``v_rel`` in PyG's ``[H*R, D, D]`` layout, ``p_rel`` ``[R, H]``)."""

    kqv_weight: torch.Tensor  # [T, in, 3*out]
    kqv_bias: torch.Tensor  # [T, 3*out]
    k_rel: torch.Tensor
    v_rel: torch.Tensor
    p_rel: torch.Tensor
    out_weight: torch.Tensor  # [T, out, out]
    out_bias: torch.Tensor  # [T, out]
    skip: torch.Tensor  # [T]

    @classmethod
    def of_pyg(
        cls,
        conv: Any,
        width: int | None = None,
        inputs: Collection[str] | None = None,
        relations: Collection[Any] | None = None,
    ) -> HgtWeights:
        """``HGTConv``'s parameters stacked in its node and edge type order (differentiable:
        gradients reach the PyG layer); each type's input weight zero-padded to ``width``
        rows (node types of different input widths). Given the node types of the input
        (``inputs``) and the relations of the batch (``relations``), the parameters PyG leaves
        unused are detached, so that they keep a ``None`` gradient as in PyG: a type's input
        weights without its input, its output weights and skip unless it is also a destination,
        a relation's prior without its edges."""
        types = list(conv.node_types)
        fed = set(types if inputs is None else inputs)
        outs = fed & {e[2] for e in conv.edge_types}
        seen = set(conv.edge_types if relations is None else relations)

        def use(p: torch.Tensor, used: bool) -> torch.Tensor:
            return p if used else p.detach()

        kqv = [use(_input_weight(conv.kqv_lin.lins[t], width), t in fed) for t in types]
        if width is not None:
            kqv = [torch.nn.functional.pad(w, (0, 0, 0, width - w.shape[0])) for w in kqv]
        out_lins = [conv.out_lin.lins[t] for t in types]
        return cls(
            torch.stack(kqv),
            torch.stack([use(conv.kqv_lin.lins[t].bias, t in fed) for t in types]),
            conv.k_rel.weight,
            conv.v_rel.weight,
            torch.stack([use(conv.p_rel["__".join(e)][0], e in seen) for e in conv.edge_types]),
            torch.stack(
                [use(o.weight.t(), t in outs) for t, o in zip(types, out_lins, strict=True)]
            ),
            torch.stack([use(o.bias, t in outs) for t, o in zip(types, out_lins, strict=True)]),
            torch.stack([use(_skip(conv, t), t in outs) for t in types]),
        )


def _input_weight(lin: Any, width: int | None) -> torch.Tensor:
    """A PyG ``Linear``'s weight as ``[in, out]``; zeros ``[width, out]`` while it is lazy and
    unsized (``HGTConv(-1, ...)`` sizes only the node types its first input holds)."""
    if isinstance(lin.weight, torch.nn.parameter.UninitializedParameter):
        return lin.bias.new_zeros(width or 0, lin.out_channels)  # HGT's K/Q/V have biases
    return lin.weight.t()


def _skip(conv: Any, node_type: str) -> torch.Tensor:
    """``HGTConv.skip[node_type]``, detached when that type's own input width is not the
    output's (PyG applies no skip then, and its parameter gets no gradient)."""
    p = conv.skip[node_type][0]
    weight = conv.kqv_lin.lins[node_type].weight
    sized = not isinstance(weight, torch.nn.parameter.UninitializedParameter)
    return p if sized and weight.shape[1] == conv.out_channels else p.detach()


def _relation_weight(
    w: torch.Tensor, heads: int, relations: int, prior: torch.Tensor | None
) -> torch.Tensor:
    """``[H*R, D, D]`` per-head matrices → ``[R, H*D, H*D]`` block-diagonal per relation,
    each head's block scaled by ``prior[r, h]`` (differentiable, weight-sized)."""
    d = w.shape[-1]
    blocks = w.view(heads, relations, d, d).permute(1, 0, 2, 3)  # [R, H, D, D]
    if prior is not None:
        blocks = blocks * prior.view(relations, heads, 1, 1)
    return block_diagonal(blocks)


def hgt_core_args(
    w: HgtWeights,
    heads: int,
    x: torch.Tensor,
    counts: Sequence[Any],
    skips: Sequence[bool] | None = None,
) -> list[torch.Tensor]:
    """The tensor arguments of Hector's HGT program: ``x`` (nodes grouped by type, ``counts[t]``
    of type ``t``), K/Q/V projections split, the relation prior and 1/√D folded into K_rel,
    block-diagonal relation weights, and with equal widths PyG's gated residual ``σ(skip_t)``,
    ``1 - σ(skip_t)`` per node. Weight-sized glue only, differentiable; ``counts`` may be
    symbolic sizes under ``torch.compile``. ``skips`` (per type) limits the residual to some
    types (the others' gate is 1: inputs padded to the output's width keep no residual)."""
    f = w.out_weight.shape[-1]
    relations = w.p_rel.shape[0]
    wk, wq, wv = w.kqv_weight.split(f, dim=2)
    bk, bq, bv = w.kqv_bias.split(f, dim=1)
    args = [
        x,
        wk.contiguous(),
        bk.contiguous(),
        wq.contiguous(),
        bq.contiguous(),
        wv.contiguous(),
        bv.contiguous(),
        _relation_weight(w.k_rel, heads, relations, w.p_rel / math.sqrt(f // heads)),
        _relation_weight(w.v_rel, heads, relations, None),
        w.out_weight,
        w.out_bias,
    ]
    if x.shape[1] == f:
        gates = torch.sigmoid(w.skip)
        if skips is not None and not all(skips):  # the others' skip parameter stays unused
            one = gates.new_ones(())
            gates = torch.stack([g if s else one for g, s in zip(gates, skips, strict=True)])
        gate = torch.cat([gates[t].expand(n) for t, n in enumerate(counts)]).unsqueeze(1)
        args += [gate, 1 - gate]
    return args


class HGTLayer(_Optimizable):
    """One HGT layer (PyG ``HGTConv`` semantics) over node types ``node_types`` and edge types
    ``edge_types`` (``(src_type, relation, dst_type)`` triples)."""

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        node_types: Sequence[str],
        edge_types: Sequence[tuple[str, str, str]],
        heads: int = 1,
    ) -> None:
        """All node types share ``in_dim``; ``out_dim`` must be divisible by ``heads``."""
        super().__init__()
        in_dim, out_dim, heads = (
            _size("in_dim", in_dim),
            _size("out_dim", out_dim),
            _size("heads", heads),
        )
        if out_dim % heads:
            raise ValueError(f"out_dim {out_dim} must be divisible by heads {heads}")
        self.node_types, self.edge_types = _schema(node_types, edge_types)
        t, r, d = len(self.node_types), len(self.edge_types), out_dim // heads
        _check_parameters(
            "HGTLayer",
            t * (in_dim + 1) * 3 * out_dim + t * (out_dim + 2) * out_dim + 2 * r * out_dim * d,
        )
        self.heads, self.in_dim, self.out_dim = heads, in_dim, out_dim
        self.kqv_weight = nn.Parameter(torch.empty(t, in_dim, 3 * out_dim))
        self.kqv_bias = nn.Parameter(torch.zeros(t, 3 * out_dim))
        self.out_weight = nn.Parameter(torch.empty(t, out_dim, out_dim))
        self.out_bias = nn.Parameter(torch.zeros(t, out_dim))
        self.k_rel = nn.Parameter(torch.empty(heads * r, d, d))  # PyG's HeteroLinear layout
        self.v_rel = nn.Parameter(torch.empty(heads * r, d, d))
        self.skip = nn.Parameter(torch.ones(t))
        self.p_rel = nn.Parameter(torch.ones(r, heads))
        for p in (self.kqv_weight, self.out_weight, self.k_rel, self.v_rel):
            nn.init.xavier_uniform_(p)
        self.dst_types = sorted({e[2] for e in self.edge_types}, key=self.node_types.index)
        self._fn = _make_hgt(heads, skip=in_dim == out_dim)

    @classmethod
    def from_pyg(cls, conv: Any) -> HGTLayer:
        """A layer holding a copy of ``HGTConv``'s weights."""
        dims = set(conv.in_channels.values())
        if len(dims) != 1:
            raise ValueError("HGTLayer needs one input width for all node types")
        layer = cls(dims.pop(), conv.out_channels, conv.node_types, conv.edge_types, conv.heads)
        with torch.no_grad():
            for i, nt in enumerate(layer.node_types):
                lin = conv.kqv_lin.lins[nt]
                layer.kqv_weight[i].copy_(lin.weight.t())
                layer.kqv_bias[i].copy_(lin.bias)
                out = conv.out_lin.lins[nt]
                layer.out_weight[i].copy_(out.weight.t())
                layer.out_bias[i].copy_(out.bias)
                layer.skip[i].copy_(conv.skip[nt][0])
            layer.k_rel.copy_(conv.k_rel.weight)
            layer.v_rel.copy_(conv.v_rel.weight)
            for j, et in enumerate(layer.edge_types):
                layer.p_rel[j].copy_(conv.p_rel["__".join(et)][0])
        return layer

    def _check_inputs(self, g: Any, x_dict: Any) -> list[int]:
        """Check the graph and features against the layer; return the rows of each node type."""
        if not isinstance(g, HeteroGraph):
            raise TypeError(f"g must be a hector.HeteroGraph, got {type(g).__name__}")
        if not isinstance(x_dict, Mapping):
            raise TypeError(
                f"x_dict must be a dict {{node type: [N_t, {self.in_dim}] tensor}} over "
                f"{self.node_types}, got {type(x_dict).__name__}"
            )
        missing = [nt for nt in self.node_types if nt not in x_dict]
        if missing:
            raise ValueError(f"x_dict lacks node types {missing}")
        unknown = [nt for nt in x_dict if nt not in self.node_types]
        if unknown:
            raise ValueError(f"x_dict has node types {unknown} the layer does not know")
        if g.schema() != (len(self.edge_types), len(self.node_types)):
            raise ValueError(
                f"the graph has {g.num_etypes} edge types and {g.num_ntypes} node types but the "
                f"layer was built for {len(self.edge_types)} and {len(self.node_types)}"
            )
        ntype = g.ntype.long()
        if g.num_nodes > 1 and bool((ntype[1:] < ntype[:-1]).any()):
            raise ValueError(
                f"the graph's nodes must be numbered grouped by node type in the order "
                f"{self.node_types} (hector.datasets builds such graphs)"
            )
        counts: list[int] = torch.bincount(ntype, minlength=len(self.node_types)).tolist()
        for nt, rows in zip(self.node_types, counts, strict=True):
            x = x_dict[nt]
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"x_dict[{nt!r}] must be a torch.Tensor, got {type(x).__name__}")
            if x.shape != (rows, self.in_dim):
                raise ValueError(
                    f"x_dict[{nt!r}] must have shape [{rows}, {self.in_dim}] (the graph has "
                    f"{rows} nodes of type {nt!r}), got {list(x.shape)}"
                )
            if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
                raise ValueError(
                    f"x_dict[{nt!r}] must be float32, float16 or bfloat16, got {x.dtype}"
                )
        return counts

    def forward(self, g: HeteroGraph, x_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``{node_type: [N_t, in]} → {dst node_type: [N_t, out]}``.

        Raises:
            TypeError: ``g`` is not a :class:`HeteroGraph` or ``x_dict`` not a dict of tensors.
            ValueError: the graph's node or edge types are not the layer's, its nodes are not
                grouped by node type, or an ``x_dict`` entry has the wrong shape or dtype (checked
                before any compute).
        """
        counts = self._check_inputs(g, x_dict)
        x = torch.cat([x_dict[nt] for nt in self.node_types])
        weights = HgtWeights(
            self.kqv_weight,
            self.kqv_bias,
            self.k_rel,
            self.v_rel,
            self.p_rel,
            self.out_weight,
            self.out_bias,
            self.skip,
        )
        out = self._fn(g, *hgt_core_args(weights, self.heads, x, counts))
        parts = dict(zip(self.node_types, out.split(counts), strict=True))
        return {nt: parts[nt] for nt in self.dst_types}


class _Stack(nn.Module):
    def __init__(self, layers: Sequence[nn.Module]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, g: HeteroGraph, x: Any) -> Any:
        for i, layer in enumerate(self.layers):
            x = layer(g, x)
            if i + 1 < len(self.layers):
                x = {k: torch.relu(v) for k, v in x.items()} if isinstance(x, dict) else x.relu()
        return x


class RGCN(_Stack):
    """``num_layers`` RGCN layers: ``in → hidden → … → out`` with ReLU between layers."""

    def __init__(
        self, in_dim: int, hidden: int, out_dim: int, num_etypes: int, num_layers: int = 2
    ) -> None:
        """Build the stack."""
        num_layers = _size("num_layers", num_layers, maximum=MAX_LAYERS)
        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        super().__init__(
            [RGCNLayer(a, b, num_etypes) for a, b in zip(dims, dims[1:], strict=False)]
        )


class RGAT(_Stack):
    """``num_layers`` RGAT layers with ``heads`` heads each (hidden width ``heads * hidden``)."""

    def __init__(
        self,
        in_dim: int,
        hidden: int,
        out_dim: int,
        num_etypes: int,
        num_layers: int = 2,
        heads: int = 1,
    ) -> None:
        """Build the stack; the last layer has one head of width ``out_dim``."""
        num_layers = _size("num_layers", num_layers, maximum=MAX_LAYERS)
        layers = []
        d = in_dim
        for i in range(num_layers):
            last = i + 1 == num_layers
            layers.append(
                RGATLayer(d, out_dim if last else hidden, num_etypes, 1 if last else heads)
            )
            d = hidden * heads
        super().__init__(layers)


class HGT(_Stack):
    """``num_layers`` HGT layers of width ``hidden`` (inputs first projected if needed by the
    first layer's per-type K/Q/V), then the last layer's output per destination node type."""

    def __init__(
        self,
        in_dim: int,
        hidden: int,
        node_types: Sequence[str],
        edge_types: Sequence[tuple[str, str, str]],
        num_layers: int = 2,
        heads: int = 1,
    ) -> None:
        """Build the stack (every layer keeps all node types as destinations)."""
        num_layers = _size("num_layers", num_layers, maximum=MAX_LAYERS)
        dims = [in_dim] + [hidden] * num_layers
        super().__init__(
            [
                HGTLayer(a, b, node_types, edge_types, heads)
                for a, b in zip(dims, dims[1:], strict=False)
            ]
        )
        self.node_types: list[str] = list(node_types)

    def forward(self, g: HeteroGraph, x: Any) -> Any:
        """Layers in sequence; node types that receive no edges keep their previous features."""
        for i, layer in enumerate(self.layers):
            out = layer(g, x)
            x = {nt: out.get(nt, x[nt]) for nt in self.node_types}
            if i + 1 < len(self.layers):
                x = {k: torch.relu(v) for k, v in x.items()}
        return x
