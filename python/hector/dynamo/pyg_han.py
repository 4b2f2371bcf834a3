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

The projection runs as PyG runs it, once per node type (the ``proj`` modules, in the captured
graph). The node-level attention of every relation is one program, ``han:<slope>``
(:func:`han_program`), over the typed graph in which every relation's destination is a node
type of its own (:class:`~hector.dynamo.pyg_hetero.Layout`'s ``split``: the destination's
projected rows once per relation into it), so its rows there are ``Σ_j α_ij h_j`` of that
relation alone. Both logit terms depend only on a node and the relation, so they are computed
per node type, before the program, as PyTorch products under its autograd
(:func:`_node_terms`): ``h (a_r)`` for the relations out of (into) the type, in slots, each
type's rows once (the split layout repeats a destination type's rows per relation; computed
in the program, these per-row products ran over every repeated row, most of them zero blocks,
and took 40% of its time). Each edge picks its relation's slot (``hetero-gat:<slope>:dst``'s
selection, :mod:`hector.dynamo.pyg_hetero_dst`, on the source side; a destination key has
one relation, so its row is the term); per edge the program only gathers the
source row, normalises the coefficients within the relation and sums. The ``relu`` and PyG's own
``group`` (with the layer's ``k_lin`` and ``q``) run on the program's rows in the captured
graph, in the order PyG visits ``edge_index_dict``. The terms and their slot selection are
PyTorch ops, so autograd reaches every parameter.

Attention dropout in training (PyG's ``dropout`` on ``α``, 0.6 in ``han_imdb.py``) runs
``han:<slope>:drop``, which multiplies the coefficients by PyG's own masks, drawn in the
captured graph (:mod:`hector.dynamo.pyg_attention_dropout`). Declined, with the reason in
:data:`hector.dynamo.pyg_route.FALLBACKS` under ``"HANConv"`` (PyG's own ``forward`` then
runs): a lazy input width before the first call, PyG's explain mode or hooks on the layer,
inputs other than ``[N, F]`` float32 features and integer ``[2, E]`` edge indices, and relations
or node types the layer does not know (PyG's error is then the user's).
"""

from __future__ import annotations

import sys
from typing import Any

import torch
import torch.nn.functional as F

from ..frontends import compiled as frontend
from ..frontends.graph_api import GraphProxy, Value
from . import pyg_attention_dropout, pyg_bases, pyg_hetero_dst, pyg_route
from .pyg_hetero import Layout

#: The PyG module defining ``HANConv`` and its semantic attention ``group``.
_PYG_MODULE = "torch_geometric.nn.conv.han_conv"


def unsupported(conv: Any, x_dict: Any, edge_index_dict: Any) -> str | None:
    """Why ``HANConv`` ``conv`` called on these dicts cannot run the program (None: it can)."""
    if not isinstance(x_dict, dict) or not isinstance(edge_index_dict, dict):
        return "HANConv called with other than (x_dict, edge_index_dict)"
    if conv.explain or any(getattr(conv, d, None) for d in pyg_bases.HOOK_DICTS):
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


def han_program(slope: float, drop: bool) -> frontend.CompiledFunction:
    """``han:<slope>`` (``:drop``: the coefficients times the mask) over the projected rows
    ``h``: each relation's attention within it, summed per destination (module docstring)."""

    def han_layer(g: GraphProxy, h: Value, *rest: Value) -> Value:
        """``Σ_{j→i in r} α_ij h_j``, ``α`` the softmax within relation ``r`` of
        ``leaky_relu(a_src,r · h_j + a_dst,r · h_i)``, both terms given per node in slots."""
        src_terms, src_select, dst_terms = rest[:3]
        logits = g.typed_linear(g.gather_src(src_terms), src_select)  # [E, H]
        logits = logits + g.gather_dst(dst_terms)  # a destination key has one relation
        alpha = g.edge_softmax(logits.leaky_relu(slope), by="dst_etype")
        alpha = alpha * rest[3] if drop else alpha
        return g.sum_to_dst(g.gather_src(h) * alpha)

    names = ["g", "h", "src_terms", "src_select", "dst_terms"]
    return frontend.compile_with_arguments(han_layer, names + (["mask"] if drop else []))


_PROGRAMS: dict[str, frontend.CompiledFunction] = {}


def _compiled(name: str) -> frontend.CompiledFunction:
    """The program named ``name`` (``han:<slope>``, ``han:<slope>:drop``)."""
    if name not in _PROGRAMS:
        kind, *rest = name.split(":")
        if kind != "han" or not rest or rest[1:] not in ([], ["drop"]):
            raise ValueError(f"unknown HANConv program {name!r}")
        _PROGRAMS[name] = han_program(float(rest[0]), rest[1:] == ["drop"])
    return _PROGRAMS[name]


def _columns(name: str, tensors: list[torch.Tensor]) -> Any:
    return tensors[0].shape[-1]


def _layout(conv: Any, x_dict: dict[str, torch.Tensor], edge_index_dict: dict[Any, Any]) -> Layout:
    """The call's typed graph: the source types (``x_dict`` order), then one destination key
    per relation (``edge_index_dict`` order), each key's rows its type's projected rows (one
    projection per node type, PyG's ``proj``)."""
    relations = list(edge_index_dict)
    sources = {e[0] for e in relations}
    targets: list[Any] = [(e[2], i) for i, e in enumerate(relations)]
    types: list[Any] = [t for t in x_dict if t in sources] + targets
    names = [k[0] if isinstance(k, tuple) else k for k in types]
    h = {t: conv.proj[t](x_dict[t]) for t in dict.fromkeys(names)}
    edge_index = [edge_index_dict[e] for e in relations]
    xs = [h[t] for t in names]
    return Layout(relations, types, xs, int(conv.out_channels), edge_index, targets=targets)


def _type_rows(layout: Layout, t: str) -> torch.Tensor:
    """Node type ``t``'s projected rows (those of the first layout key of that type)."""
    keys = [k[0] if isinstance(k, tuple) else k for k in layout.types]
    return layout.xs[keys.index(t)]


def _stacked(
    parts: list[torch.Tensor | None], like: list[torch.Tensor], width: int
) -> torch.Tensor:
    """The layout keys' rows of ``parts`` stacked, zeros ``[rows, width]`` where a key has none."""
    rows = [x.shape[0] for x in like]
    return torch.cat(
        [
            p if p is not None else like[0].new_zeros(n, width)
            for p, n in zip(parts, rows, strict=True)
        ]
    )


def _node_terms(conv: Any, layout: Layout) -> tuple[torch.Tensor, torch.Tensor]:
    """Every row's attention terms: ``src_terms [N, S·H]`` (a source row's ``h_v · a_src,r``
    for the relations out of its type, in slots; zeros on destination keys) and
    ``dst_terms [N, H]`` (a destination key's ``h_v · a_dst,r`` for its one relation; zeros on
    source rows). Per node type, one batched product (per head) of its rows with the vectors
    of every relation out of it and into it (PyTorch's, under its autograd): each type's
    rows once, where the split layout repeats a destination type's rows per relation."""
    ends, heads = layout.ends(), int(conv.heads)
    most = max(pyg_hetero_dst.slots(ends[0::2], len(layout.types))) + 1
    src: list[torch.Tensor | None] = [None] * len(layout.types)
    dst: list[torch.Tensor | None] = [None] * len(layout.types)
    for t in dict.fromkeys(k for e in layout.relations for k in (e[0], e[2])):
        out = [r for r, e in enumerate(layout.relations) if e[0] == t]
        into = [r for r, e in enumerate(layout.relations) if e[2] == t]
        vectors = torch.cat(
            [conv.lin_src["__".join(layout.relations[r])] for r in out]
            + [conv.lin_dst["__".join(layout.relations[r])] for r in into]
        )  # [|out| + |into|, H, D]
        rows = _type_rows(layout, t)
        terms = torch.einsum("nhd,rhd->nrh", rows.view(rows.shape[0], heads, -1), vectors)
        terms = terms.reshape(rows.shape[0], -1)  # [N_t, (|out| + |into|)·H], (r, h) order
        if out:
            pad = (0, (most - len(out)) * heads)
            src[ends[2 * out[0]]] = F.pad(terms[:, : len(out) * heads], pad)
        for j, r in enumerate(into, start=len(out)):
            dst[ends[2 * r + 1]] = terms[:, j * heads : (j + 1) * heads]
    return _stacked(src, layout.xs, most * heads), _stacked(dst, layout.xs, heads)


def _tensors(conv: Any, layout: Layout) -> list[torch.Tensor]:
    """``h, src_terms, src_select, dst_terms`` (and the dropout mask where the layer
    drops): the projected rows, each side's attention terms per node (:func:`_node_terms`)
    and the constant matrices that pick an edge's relation's slot among its source's
    (``pyg_hetero_dst.slot_select``; a destination key's row holds its one relation's)."""
    ends, types, heads = layout.ends(), len(layout.types), int(conv.heads)
    h = torch.cat(layout.xs)
    src_terms, dst_terms = _node_terms(conv, layout)
    src_select = pyg_hetero_dst.slot_select(pyg_hetero_dst.slots(ends[0::2], types), heads, h)
    tensors = [h, src_terms, src_select, dst_terms]
    if pyg_attention_dropout.active([conv]):  # PyG's masks, drawn as F.dropout draws them
        ps = pyg_attention_dropout.probabilities([conv]) * len(layout.relations)
        tensors.append(pyg_attention_dropout.mask(ps, layout.edge_index, conv.heads, h))
    return tensors


def han_forward(
    self: Any,
    x_dict: Any,
    edge_index_dict: Any,
    return_semantic_attention_weights: bool = False,
) -> Any:
    """``HANConv.forward`` under the Hector backend: PyG's projections, one
    ``hector::pyg_layer`` call for the node-level attention of every relation, then PyG's
    ``relu`` and semantic attention (PyG's own ``forward`` where :func:`unsupported`
    declines)."""
    reason = unsupported(self, x_dict, edge_index_dict)
    if reason is not None:
        pyg_route.record_fallback("HANConv", reason)
        original = pyg_route._ORIGINAL["HANConv"]
        return original(self, x_dict, edge_index_dict, return_semantic_attention_weights)
    layout = _layout(self, x_dict, edge_index_dict)
    tensors = _tensors(self, layout)
    drop = pyg_attention_dropout.SUFFIX if pyg_attention_dropout.active([self]) else ""
    out = torch.ops.hector.pyg_layer(
        f"han:{float(self.negative_slope)!r}{drop}",
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


pyg_route.register_family("han", pyg_route.ProgramFamily(_compiled, _columns))
pyg_route.register_layer("HANConv", han_forward)
