"""PyG's ``RGATConv`` as Hector programs: one per configuration, for ``pyg_route``.

``RGATConv`` has a configuration space rather than one formula: additive or multiplicative
self-attention, across- or within-relation softmax, five attention modifiers (``mod``), edge
features, dropout, concatenated or averaged heads, dense, basis or block weights, attention
channels per head (``dim``, multiplicative attention only). A :class:`RgatConfig` names one
point of it; :func:`program` traces that point's Hector program:

* ``outj = W_r x_j``, ``outi = W_r x_i`` (``typed_linear`` by edge type on gathered rows);
* logits ``q·outi + k·outj (+ e·lin_edge(edge_attr))`` through leaky ReLU, or the product
  ``(q·outi)(k·outj)(e·…)``;
* ``alpha = edge_softmax(logits, by="dst")`` (across relations) or ``by="dst_etype"`` (within);
* the modifier on the message: ``additive`` adds ``w ⊙ outj``, ``scaled`` multiplies by an MLP of
  the destination's in-degree, ``f-additive`` adds 1 to positive weights, ``f-scaled`` multiplies
  them by the in-degree; dropout multiplies them by a mask drawn in the captured graph from
  PyTorch's generator (a seed reproduces it);
* ``sum_to_dst``, then the bias; averaged heads (``concat=False``) are the mean of the
  program's ``[N, H, F]`` rows plus the bias, after the program (:func:`finish`), as PyG does;
  so is ``aggr="mean"``: the sums over the in-degree, then the bias. ``aggr="max"`` takes each
  node's elementwise maximum message in the program (``edge_max``);
* with ``dim`` channels per head, the logits are ``[E, H*dim]`` and each channel scales its
  head's ``W_r x_j`` (the weight's columns repeated per channel, ``H*dim*F`` columns; PyG's
  ``[E, H, dim, F]`` messages).

The attention weights (``return_attention_weights``) are a second program, the first steps up to
the softmax, so their gradient is Hector's too. Weight-sized glue (a basis combined, blocks laid
out dense, ``w`` folded into ``W_r``'s columns, the edge projection folded) runs as PyTorch ops
in the captured graph; so do two row-sized inputs: the edge features' projection ``[E, H]`` and
the in-degree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..frontends import compiled as frontend
from ..frontends.graph_api import GraphProxy, Value
from ..models import block_diagonal
from . import pyg_attention_dropout

_MODS = ("none", "additive", "scaled", "f-additive", "f-scaled")


@dataclass(frozen=True)
class RgatConfig:
    """One ``RGATConv`` configuration, and whether the program returns the attention weights
    (``alpha``) instead of the layer's output."""

    heads: int
    multiplicative: bool
    within: bool
    mod: str
    edge: bool
    dropout: bool
    concat: bool
    slope: float
    alpha: bool = False
    maximum: bool = False  # aggr="max": each node's elementwise maximum message, not the sum
    dim: int = 1  # attention channels per head (multiplicative attention's ``dim``)

    @property
    def name(self) -> str:
        """The program's name for ``hector::pyg_layer`` (parsed back by :meth:`parse`)."""
        flags = (self.multiplicative, self.within, self.edge, self.dropout, self.concat)
        bits = "".join(str(int(f)) for f in (*flags, self.maximum))
        heads = f"{self.heads}x{self.dim}" if self.dim > 1 else str(self.heads)
        return f"rgat:{heads}:{bits}:{self.mod}:{self.slope!r}:{int(self.alpha)}"

    @classmethod
    def parse(cls, name: str) -> RgatConfig:
        """The configuration :attr:`name` names."""
        _, heads, bits, mod, slope, alpha = name.split(":")
        if len(bits) != 6 or mod not in _MODS:
            raise ValueError(f"not an RGAT program name: {name!r}")
        mul, within, edge, dropout, concat, top = (b == "1" for b in bits)
        h, _, dim = heads.partition("x")
        flags = (mul, within, mod, edge, dropout, concat, float(slope), alpha == "1", top)
        return cls(int(h), *flags, int(dim or 1))

    @classmethod
    def of(cls, conv: Any, edge: bool, alpha: bool = False) -> RgatConfig:
        """The configuration of layer ``conv`` as it runs now (dropout only in training; the
        edge term only when the call has edge features, as in PyG)."""
        return cls(
            heads=conv.heads,
            multiplicative=conv.attention_mode == "multiplicative-self-attention",
            within=conv.attention_mechanism == "within-relation",
            mod=conv.mod or "none",
            edge=edge and conv.lin_edge is not None,
            dropout=conv.mod is None and conv.training and conv.dropout > 0,
            concat=bool(conv.concat),
            slope=float(conv.negative_slope),
            alpha=alpha,
            maximum=conv.aggr == "max" and not alpha,
            dim=int(conv.dim),
        )


#: The ``aggr`` values the programs compute: sums (``"mean"`` divides after the program) and
#: maxima.
_AGGRS = ("add", "sum", "mean", "max")


def unsupported(conv: Any, x: Any, edge_index: Any, edge_type: Any, edge_attr: Any) -> str | None:
    """Why ``conv`` cannot run Hector's program on these inputs (None: it can)."""
    if conv.aggr not in _AGGRS:
        return f"aggr={conv.aggr!r} (Hector's RGAT programs sum messages, or average them)"
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() != 2:
        return "x is not a [N, F] float tensor (bipartite tuple or node index input)"
    if x.dtype != torch.float32:
        return f"x is {x.dtype}; Hector's kernels are float32"
    if not isinstance(edge_type, torch.Tensor):
        return "no edge_type tensor"
    if edge_attr is not None and conv.lin_edge is None:
        return "edge_attr given to a layer without edge_dim"
    if edge_attr is not None and (edge_attr.dim() > 2 or edge_attr.shape[0] != edge_type.shape[0]):
        return "edge_attr is not one row per edge"
    return None


def dense_weight(
    w: torch.Tensor, comp: torch.Tensor | None, blocks: int | None, shape: tuple[int, int, int]
) -> torch.Tensor:
    """``W [R, in, out]`` of a relational layer (RGCN's and RGAT's): bases ``w`` combined by
    ``comp``, ``blocks`` block-diagonal blocks laid out dense, or ``w`` itself (PyTorch ops in
    the captured graph, so gradients reach the bases and the blocks)."""
    if comp is not None:
        return (comp @ w.view(comp.shape[1], -1)).view(shape)
    if blocks is not None:  # W_r[b*bi + p, c*bo + q] = blocks[r, b, p, q] if b == c
        return block_diagonal(w).reshape(shape)
    return w


def in_degree(edge_index: torch.Tensor, nodes: int, like: torch.Tensor) -> torch.Tensor:
    """``[N, 1]``: each node's incoming edges over all relations (the ``scaled`` modifiers')."""
    ones = like.new_ones(edge_index.shape[1], 1)
    return like.new_zeros(nodes, 1).index_add(0, edge_index[1], ones)


def arguments(
    conv: Any, c: RgatConfig, x: torch.Tensor, edge_index: torch.Tensor, edge_attr: Any
) -> list[torch.Tensor]:
    """The program's tensors, in :func:`program`'s order (edge-wise ones in the input's edge
    order: the op puts them in the graph's)."""
    h, f = conv.heads, conv.out_channels
    shape = (conv.num_relations, conv.in_channels, h * f)
    if conv.num_bases is not None:
        weight = dense_weight(conv.basis, conv.att, None, shape)
    else:
        weight = dense_weight(conv.weight, None, conv.num_blocks, shape)
    args = [x, weight, conv.q, conv.k]
    if c.edge:  # (edge_attr @ lin_edge.weight^T) @ e, folded: [E, H]
        rows = edge_attr.view(-1, 1) if edge_attr.dim() == 1 else edge_attr
        args.append(rows @ (conv.lin_edge.weight.t() @ conv.e))
    if c.alpha:
        return args
    channels = h * c.dim  # each head's message, once per attention channel
    if c.dim > 1:  # W_r with each head's columns repeated per channel: [R, in, H*dim*F]
        weight = weight.view(*weight.shape[:-1], h, 1, f).expand(-1, -1, -1, c.dim, -1)
        weight = weight.reshape(*shape[:-1], channels * f)
        args.append(weight)
    if c.mod == "additive":  # w ⊙ (W_r x_j) = x_j (W_r ⊙ w): w folded into W's columns
        args.append(weight * conv.w.repeat(channels))
    if c.mod in ("scaled", "f-scaled"):
        args.append(in_degree(edge_index, x.shape[0], x))
    if c.mod == "scaled":
        tiled = (conv.l2.repeat(1, channels), conv.b2.view(f).repeat(channels))
        args += [conv.l1, conv.b1.view(f), *tiled]
    if c.dropout:  # drawn as F.dropout draws its mask: a seed gives PyG's own mask
        edges = edge_index.shape[1]
        args.append(pyg_attention_dropout.relation_mask(x, edges, channels, conv.dropout))
    if c.concat:  # averaged heads or messages: their mean and the bias follow (finish)
        in_program = conv.bias is not None and conv.aggr != "mean"
        args.append(conv.bias if in_program else x.new_zeros(channels * f))
    return args


def finish(conv: Any, c: RgatConfig, out: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
    """The program's output as the layer's. ``aggr="mean"``: the sums divided by each node's
    incoming edges (at least one, as PyG's scatter mean), before the bias. Averaged heads
    (``concat=False``) are the mean of the ``[N, H, F]`` rows plus the bias, as PyG computes
    them (an averaging matrix would multiply an overflowed head by zero and spread NaN to the
    others)."""
    if c.alpha:
        return out
    mean = conv.aggr == "mean"
    if mean:
        out = out / in_degree(edge_index, out.shape[0], out).clamp(min=1)
    if c.concat and not mean:
        return out
    if not c.concat:  # PyG: the [N, H, dim, F] rows averaged over heads
        out = out.view(out.shape[0], conv.heads, c.dim * conv.out_channels).mean(dim=1)
    return out + conv.bias if conv.bias is not None else out


def _attention(c: RgatConfig, g: GraphProxy, x: Value, rest: list[Value]) -> tuple[Value, Value]:
    """``(alpha, outj)``: the logits of each edge normalised over its destination (and
    relation), and the transformed source rows."""
    weight, q, k = rest.pop(0), rest.pop(0), rest.pop(0)
    outj = g.typed_linear(g.gather_src(x), weight)  # W_r x_j  [E, H*F]
    outi = g.typed_linear(g.gather_dst(x), weight)
    qi, kj = g.linear(outi, q), g.linear(outj, k)  # [E, H]
    if c.multiplicative:
        logits = qi * kj * rest.pop(0) if c.edge else qi * kj
    else:
        logits = (qi + kj + rest.pop(0) if c.edge else qi + kj).leaky_relu(c.slope)
    return g.edge_softmax(logits, by="dst_etype" if c.within else "dst"), outj


def _message(
    c: RgatConfig, g: GraphProxy, x: Value, alpha: Value, outj: Value, rest: list[Value]
) -> Value:
    """Each edge's message ``[E, H*F]``: ``alpha`` (modified) scaling ``outj`` per head."""
    if c.mod == "additive":  # outj ⊙ w per column, as x_j (W_r ⊙ w)
        return outj * alpha + g.typed_linear(g.gather_src(x), rest.pop(0))
    if c.mod == "f-additive":
        alpha = alpha.shift_positive()
    elif c.mod in ("scaled", "f-scaled"):
        degree = rest.pop(0)
        if c.mod == "f-scaled":
            alpha = alpha * g.gather_dst(degree)
        else:
            l1, b1, l2, b2 = (rest.pop(0) for _ in range(4))
            mlp = g.linear((g.linear(degree, l1) + b1).relu(), l2) + b2  # [N, H*F], heads tiled
            return outj * alpha * g.gather_dst(mlp)
    elif c.dropout:
        alpha = alpha * rest.pop(0)
    return outj * alpha


def parameters(c: RgatConfig) -> list[str]:
    """The program's tensor parameters, in order (those :func:`arguments` makes)."""
    names = ["x", "weight", "q", "k"] + (["edge_logits"] if c.edge else [])
    if c.alpha:
        return names
    names += ["weight_per_channel"] if c.dim > 1 else []
    names += {"additive": ["weight_times_w"], "f-scaled": ["in_degree"]}.get(c.mod, [])
    if c.mod == "scaled":
        names += ["in_degree", "l1", "b1", "l2_tiled", "b2_tiled"]
    names += ["dropout_mask"] if c.dropout else []
    return names + (["bias"] if c.concat else [])


def _build(c: RgatConfig) -> frontend.CompiledFunction:
    def rgat_pyg(g: GraphProxy, x: Value, *tensors: Value) -> Value:
        """PyG's RGATConv in one configuration (module docstring)."""
        rest = list(tensors)
        alpha, outj = _attention(c, g, x, rest)
        if c.alpha:
            return alpha
        if c.dim > 1:  # each head's W_r x_j once per attention channel: [E, H*dim*F]
            outj = g.typed_linear(g.gather_src(x), rest.pop(0))
        msg = _message(c, g, x, alpha, outj, rest)
        if c.maximum:  # each node's maximum: its c edges each carry it, times 1/c
            msg = g.edge_max(msg, by="dst") * g.degree_norm("dst")
        out = g.sum_to_dst(msg)
        return out + rest.pop(0) if c.concat else out  # averaged heads: finish()

    return frontend.compile_with_arguments(rgat_pyg, ["g", *parameters(c)])


_PROGRAMS: dict[RgatConfig, frontend.CompiledFunction] = {}


def program(name: str) -> frontend.CompiledFunction:
    """The Hector program of RGAT configuration ``name`` (:attr:`RgatConfig.name`)."""
    c = RgatConfig.parse(name)
    if c not in _PROGRAMS:
        _PROGRAMS[c] = _build(c)
    return _PROGRAMS[c]


def output_columns(name: str, tensors: list[torch.Tensor]) -> int:
    """The output's width: heads for the attention weights, else ``W``'s ``H*F`` columns."""
    c = RgatConfig.parse(name)
    return c.heads * c.dim if c.alpha else int(tensors[1].shape[-1]) * c.dim
