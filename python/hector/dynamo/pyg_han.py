"""PyG's ``HANConv`` under ``torch.compile(backend="hector")``: the node-level attention of all
relations as one Hector program, the semantic attention as PyG writes it.

``HANConv`` (the Heterogeneous Graph Attention Network's layer, PyG's
``examples/hetero/han_imdb.py``) projects each node type's features, ``h_v = P_t x_v + c_t``
(``proj``, one ``Linear`` per node type, ``C = H·D`` columns), then, per relation ``r`` of the
call, runs one GAT without weights of its own over the projected rows::

    α_ij = softmax_{j→i in r} leaky_relu(a_src,r · h_j + a_dst,r · h_i)      (per head)
    z_i,r = relu(Σ_{j→i in r} α_ij h_j)

and combines each node type's ``z_i,r`` over the relations into it by semantic attention
(``group``: ``softmax_r(q · mean_i tanh(k_lin(z_i,r)))``-weighted sum).

That node-level part is the ``hetero-gat:<slope>`` program of :mod:`hector.dynamo.pyg_hetero`
(``GATConv`` per relation, attention within each relation): relation ``r``'s source weight is
``P_src(r)``, its destination weight ``P_dst(r)``, its attention vectors ``a_src,r``,
``a_dst,r``; the projection's bias enters as one more input column of ones (``[x, 1]``
times ``[P; c]``). Every relation's destination gets rows of its own
(:class:`~hector.dynamo.pyg_hetero.Layout`'s ``split``), so the program's rows there are
``Σ_j α_ij h_j`` of that relation alone; the ``relu`` and PyG's own ``group`` (semantic
attention, with its ``k_lin`` and ``q``) run on them in the captured graph, in the order PyG
visits ``edge_index_dict``. Weight glue (the padded, bias-extended projections) is PyTorch ops,
so autograd reaches every parameter.

Attention dropout in training (PyG's ``dropout`` on ``α``, 0.6 in ``han_imdb.py``) multiplies
the coefficients by PyG's own masks, drawn in the captured graph
(:mod:`hector.dynamo.pyg_attention_dropout`, through ``GatRelations``). Declined, with the reason in
:data:`hector.dynamo.pyg_route.FALLBACKS` under ``"HANConv"`` (PyG's own ``forward`` then
runs): a lazy input width before the first call, PyG's explain
mode or hooks on the layer, inputs other than ``[N, F]`` float32 features and integer ``[2, E]``
edge indices, and relations or node types the layer does not know (PyG's error is then the
user's).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import torch

from . import pyg_route
from .pyg_hetero import GatRelations, Layout

#: The PyG module defining ``HANConv`` and its semantic attention ``group``.
_PYG_MODULE = "torch_geometric.nn.conv.han_conv"
#: ``MessagePassing``'s hook dicts: a hook there runs code the program does not.
_HOOK_DICTS = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_propagate_forward_pre_hooks",
    "_propagate_forward_hooks",
    "_message_forward_pre_hooks",
    "_message_forward_hooks",
    "_aggregate_forward_pre_hooks",
    "_aggregate_forward_hooks",
    "_message_and_aggregate_forward_pre_hooks",
    "_message_and_aggregate_forward_hooks",
)
_GAT = GatRelations()


@dataclass
class _Linear:
    """A weight as ``GatRelations`` reads a conv's linear: ``weight`` ``[out, in]``."""

    weight: torch.Tensor


@dataclass
class _Relation:
    """One relation of a ``HANConv`` call in the attributes ``GatRelations`` reads of a
    ``GATConv``: the source and destination types' bias-extended projections, the
    relation's attention vectors ``[1, H, D]`` and the layer's attention dropout."""

    lin_src: _Linear
    lin_dst: _Linear
    att_src: torch.Tensor
    att_dst: torch.Tensor
    heads: int
    out_channels: int
    negative_slope: float
    training: bool
    dropout: float
    lin: Any = None
    lin_edge: Any = None
    bias: Any = None
    concat: bool = True


def unsupported(conv: Any, x_dict: Any, edge_index_dict: Any) -> str | None:
    """Why ``HANConv`` ``conv`` called on these dicts cannot run the program (None: it can)."""
    if not isinstance(x_dict, dict) or not isinstance(edge_index_dict, dict):
        return "HANConv called with other than (x_dict, edge_index_dict)"
    if conv.explain or any(getattr(conv, d, None) for d in _HOOK_DICTS):
        return "HANConv in PyG's explain mode or with hooks"
    for t, x in x_dict.items():
        if t not in conv.proj:
            return f"x_dict holds node type {t!r}, which the layer does not know"
        if not isinstance(x, torch.Tensor) or x.dtype != torch.float32 or x.dim() != 2:
            return f"x_dict[{t!r}] is not a [N, F] float32 tensor"
        if isinstance(conv.proj[t].weight, torch.nn.parameter.UninitializedParameter):
            return "HANConv with a lazy input width before its first call"
    if not edge_index_dict:
        return "no relation in edge_index_dict"
    for e, ei in edge_index_dict.items():
        if "__".join(e) not in conv.lin_src:
            return f"edge_index_dict holds {e}, which the layer does not know"
        if e[0] not in x_dict or e[2] not in x_dict:
            return f"edge_index_dict holds {e} but x_dict lacks its node types"
        if not isinstance(ei, torch.Tensor) or ei.layout != torch.strided:
            return f"edge_index_dict[{e}] is not a [2, E] tensor (a sparse adjacency)"
        if ei.dim() != 2 or ei.shape[0] != 2 or ei.is_floating_point():
            return f"edge_index_dict[{e}] is not an integer [2, E] tensor"
    return None


def _layout(x_dict: dict[str, torch.Tensor], edge_index_dict: dict[Any, Any]) -> Layout:
    """The call's typed graph: the source types (``x_dict`` order), then one destination key
    per relation (``edge_index_dict`` order), each type's rows padded to the widest input and
    extended by a column of ones (the projection's bias)."""
    relations = list(edge_index_dict)
    sources = {e[0] for e in relations}
    targets: list[Any] = [(e[2], i) for i, e in enumerate(relations)]
    types: list[Any] = [t for t in x_dict if t in sources] + targets
    width = max(x.shape[1] for x in x_dict.values())
    xs = []
    for key in types:
        x = x_dict[key[0] if isinstance(key, tuple) else key]
        xs.append(torch.nn.functional.pad(x, (0, width - x.shape[1]), value=0.0))
        xs[-1] = torch.cat([xs[-1], x.new_ones(x.shape[0], 1)], dim=1)
    edge_index = [edge_index_dict[e] for e in relations]
    return Layout(relations, types, xs, int(width) + 1, edge_index, targets=targets)


def _projection(conv: Any, t: str, width: int) -> torch.Tensor:
    """``[C, width + 1]``: node type ``t``'s projection padded to ``width`` inputs, its bias
    the last column (zeros without one)."""
    lin = conv.proj[t]
    weight = torch.nn.functional.pad(lin.weight, (0, width - lin.weight.shape[1]))
    bias = lin.bias if lin.bias is not None else weight.new_zeros(weight.shape[0])
    return torch.cat([weight, bias.view(-1, 1)], dim=1)


def relations(conv: Any, layout: Layout) -> list[_Relation]:
    """The call's relations as ``GatRelations`` reads ``GATConv``s."""
    heads = conv.heads
    width = layout.width - 1
    used = {t for e in layout.relations for t in (e[0], e[2])}
    proj = {t: _Linear(_projection(conv, t, width)) for t in used}
    return [
        _Relation(
            lin_src=proj[s],
            lin_dst=proj[d],
            att_src=conv.lin_src["__".join((s, r, d))],
            att_dst=conv.lin_dst["__".join((s, r, d))],
            heads=heads,
            out_channels=conv.out_channels // heads,
            negative_slope=float(conv.negative_slope),
            training=conv.training,
            dropout=float(conv.dropout),
        )
        for s, r, d in layout.relations
    ]


def han_forward(
    self: Any,
    x_dict: Any,
    edge_index_dict: Any,
    return_semantic_attention_weights: bool = False,
) -> Any:
    """``HANConv.forward`` under the Hector backend: one ``hector::pyg_layer`` call for the
    node-level attention of every relation, then PyG's ``relu`` and semantic attention (PyG's
    own ``forward`` where :func:`unsupported` declines)."""
    reason = unsupported(self, x_dict, edge_index_dict)
    if reason is not None:
        pyg_route.record_fallback("HANConv", reason)
        original = pyg_route._ORIGINAL["HANConv"]
        return original(self, x_dict, edge_index_dict, return_semantic_attention_weights)
    layout = _layout(x_dict, edge_index_dict)
    convs = relations(self, layout)
    tensors = _GAT.tensors(convs, layout)  # with the dropout mask where HAN drops
    out = torch.ops.hector.pyg_layer(
        _GAT.program(convs, layout),
        pyg_route._train(tensors),
        layout.edge_index,
        [x.shape[0] for x in layout.xs],
        layout.ends(),
        tensors,
    )
    rows = dict(zip(layout.types, out.split([x.shape[0] for x in layout.xs]), strict=True))
    group = sys.modules[_PYG_MODULE].group
    out_dict, attention = {}, {}
    for t in x_dict:
        parts = [torch.relu(rows[k]) for k in layout.into(t)]
        out_dict[t], attention[t] = group(parts, self.q, self.k_lin)
    return (out_dict, attention) if return_semantic_attention_weights else out_dict


pyg_route.register_layer("HANConv", han_forward)
