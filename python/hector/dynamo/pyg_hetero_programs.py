"""The programs of :mod:`hector.dynamo.pyg_hetero`'s per-relation conv classes, by name:
``hetero-gat:<slope>`` (:func:`hector.models._make_hetero_gat`'s), ``hetero-gat:<slope>:edge``
(edge logits), ``hetero-gat:<slope>:dst`` (:mod:`hector.dynamo.pyg_hetero_dst`'s terms),
``hetero-gatv2:<slope>`` (``:feat``: edge features, ``:edge``: self-loops' logits), each of
them with ``:mean`` for ``aggr="mean"`` (the coefficients over the in-degree; ``:kept-mean``
with self-loops: times each edge's factor, an input, as own loops PyG removes do not count),
``hetero-sage:<aggr>:<root>`` and ``hetero-gcn``, and the ``hetero-gat`` ones with attention
dropout (``...:drop``, :mod:`hector.dynamo.pyg_attention_dropout`), registered as program
families of :mod:`hector.dynamo.pyg_route`."""

from __future__ import annotations

from typing import Any

import torch

from ..frontends import compiled as frontend
from ..frontends.graph_api import GraphProxy, Value
from ..models import _make_hetero_gat
from . import pyg_route


def _hetero_gcn() -> frontend.CompiledFunction:
    def hetero_gcn(
        g: GraphProxy, x: Value, weight: Value, coefficient: Value, bias: Value
    ) -> Value:
        """``Σ_r Σ_{j→i in r} c_ij W_r x_j + b_type(i)`` (one ``GCNConv`` per relation)."""
        msg = g.typed_linear(g.gather_src(x), weight) * coefficient
        return g.typed_bias(g.sum_to_dst(msg), bias)

    return frontend.compile(hetero_gcn)


def _hetero_sage(aggr: str, root: bool) -> frontend.CompiledFunction:
    def hetero_sage(g: GraphProxy, x: Value, weight: Value, bias: Value, *rest: Value) -> Value:
        """``Σ_r lin_l_r(aggr_{j∈N_r(i)} x_j) (+ Σ_r lin_r_r(x_i))``, biases per node type."""
        src = g.gather_src(x)
        if aggr == "max":  # the maximum per (node, relation), then its weight
            msg = g.typed_linear(g.edge_max(src, by="dst_etype"), weight)
            msg = msg * g.degree_norm("dst_etype")
        else:
            msg = g.typed_linear(src, weight)
            msg = msg * g.degree_norm("dst_etype") if aggr == "mean" else msg
        out = g.typed_bias(g.sum_to_dst(msg), bias)
        return out + g.typed_linear(x, rest[0], slice="ntype") if root else out

    names = ["x", "weight", "bias"] + (["root"] if root else [])
    return frontend.compile_with_arguments(hetero_sage, ["g", *names])


#: How a program averages a relation's messages into a node (``aggr="mean"``), by the token of
#: its name: over the relation's in-degree, or by a factor per edge given as an input
#: (``mean_weights``, :func:`hector.dynamo.pyg_gat_loops.kept_mean_weights`).
MEANS = ("mean", "kept-mean")


def _averaged(g: GraphProxy, alpha: Value, mean: str, weights: Value | None) -> Value:
    """``α`` as ``mean`` averages it (``""``: unchanged)."""
    if mean == "mean":
        return alpha * g.degree_norm("dst_etype")
    if mean == "kept-mean":
        assert weights is not None
        return alpha * weights
    return alpha


def _mean_of(rest: list[str]) -> str:
    return next((r for r in rest if r in MEANS), "")


def _hetero_gat_variant(
    slope: float, variant: str, drop: bool, mean: str = ""
) -> frontend.CompiledFunction:
    """``hector.models``' ``hetero_gat_layer`` as the route's variants compute it:
    ``variant`` ``""`` (the destination's logit term per edge), ``"edge"`` (plus each edge's
    logit: ``GATConv(edge_dim=...)``'s ``a_edge · W_e e_ij``, or the ``-inf`` of a removed
    self-loop) or ``"dst"`` (the term per node, :mod:`hector.dynamo.pyg_hetero_dst`); with
    ``drop`` the coefficients are multiplied by the dropout mask after the softmax
    (:mod:`hector.dynamo.pyg_attention_dropout`); with ``mean`` (``aggr="mean"``, one of
    :data:`MEANS`) by each edge's ``1 / in-degree`` within its relation, or its
    ``mean_weights`` input, so a node's sum over a relation is PyG's mean of the weighted
    messages, before the bias."""

    def hetero_gat_variant(
        g: GraphProxy, x: Value, weight: Value, att_src: Value, *rest: Value
    ) -> Value:
        hs = g.typed_linear(g.gather_src(x), weight)  # W_r h_j  [E, H*F]
        if variant == "dst":
            terms = g.typed_linear(x, rest[0], slice="ntype")  # [N, S*H]
            dst_term = g.typed_linear(g.gather_dst(terms), rest[1])  # [E, H]
        else:
            dst_term = g.typed_linear(g.gather_dst(x), rest[0])  # [E, H]
        logits = g.typed_linear(hs, att_src) + dst_term
        if variant == "edge":
            logits = logits + rest[1]
        alpha = g.edge_softmax(logits.leaky_relu(slope), by="dst_etype")
        alpha = alpha * rest[-2] if drop else alpha
        alpha = _averaged(g, alpha, mean, rest[-2 - drop] if mean == "kept-mean" else None)
        return g.typed_bias(g.sum_to_dst(hs * alpha), rest[-1])

    middle = {"": ["weight_att_dst"], "edge": ["weight_att_dst", "edge_logits"]}
    middle["dst"] = ["weight_att_dst_nodes", "select"]
    if variant not in middle:
        raise ValueError(f"unknown hetero-gat variant {variant!r}")
    names = ["g", "x", "weight", "att_src", *middle[variant], *_factors(mean, drop), "bias"]
    return frontend.compile_with_arguments(hetero_gat_variant, names)


def _factors(mean: str, drop: bool) -> list[str]:
    """The per-edge factor inputs before the bias: the mean's weights, the dropout mask."""
    return ["mean_weights"] * (mean == "kept-mean") + ["mask"] * drop


def _hetero_gatv2(
    slope: float, feat: bool, edge: bool, mean: str, drop: bool
) -> frontend.CompiledFunction:
    def hetero_gatv2(
        g: GraphProxy,
        x: Value,
        weight_l: Value,
        bias_l: Value,
        weight_r: Value,
        bias_r: Value,
        att: Value,
        *rest: Value,
    ) -> Value:
        """One ``GATv2Conv`` per relation, summed: ``x_j' = W_l x_j + b_l``,
        ``α = softmax over the relation's edges into i of a · leaky_relu(x_j' + W_r x_i + b_r)``
        (``feat``: ``+ W_e e_ij`` inside the nonlinearity, an ``[E, H*F]`` input; ``edge``:
        plus each edge's logit, the ``-inf`` of a removed self-loop; ``drop``: ``α`` times the
        dropout mask; ``mean``: ``α`` over the relation's in-degree of ``i``, or times its
        ``mean_weights``: :data:`MEANS`),
        ``h'_i = Σ_r Σ_j α_ij ⊙_head x_j' + b_type(i)``."""
        xs = g.typed_bias(g.typed_linear(g.gather_src(x), weight_l), bias_l)  # [E, H*F]
        xd = g.typed_bias(g.typed_linear(g.gather_dst(x), weight_r), bias_r)
        pre = xs + xd + rest[0] if feat else xs + xd
        logits = g.typed_linear(pre.leaky_relu(slope), att)  # [E, H]
        logits = logits + rest[int(feat)] if edge else logits
        alpha = g.edge_softmax(logits, by="dst_etype")
        alpha = alpha * rest[-2] if drop else alpha
        alpha = _averaged(g, alpha, mean, rest[-2 - drop] if mean == "kept-mean" else None)
        return g.typed_bias(g.sum_to_dst(xs * alpha), rest[-1])

    names = ["g", "x", "weight_l", "bias_l", "weight_r", "bias_r", "att"]
    names += ["edge_terms"] * feat + ["edge_logits"] * edge
    return frontend.compile_with_arguments(hetero_gatv2, [*names, *_factors(mean, drop), "bias"])


_PROGRAMS: dict[str, frontend.CompiledFunction] = {}


def _compiled(name: str) -> frontend.CompiledFunction:
    """The program named ``name`` (``hetero-gat:<slope>``, ``hetero-sage:<aggr>:<root>``)."""
    if name not in _PROGRAMS:
        kind, *rest = name.split(":")
        if kind == "hetero-gat" and len(rest) == 1:  # the twin's (hector.models) program
            _PROGRAMS[name] = _make_hetero_gat(float(rest[0]))
        elif kind == "hetero-gat":  # :edge, :dst, :mean, :drop (attention dropout)
            variant = ":".join(r for r in rest[1:] if r not in (*MEANS, "drop"))
            _PROGRAMS[name] = _hetero_gat_variant(
                float(rest[0]), variant, drop="drop" in rest, mean=_mean_of(rest)
            )
        elif kind == "hetero-gatv2":
            feat, edge, drop = (f in rest for f in ("feat", "edge", "drop"))
            _PROGRAMS[name] = _hetero_gatv2(float(rest[0]), feat, edge, _mean_of(rest), drop)
        elif kind == "hetero-sage":
            _PROGRAMS[name] = _hetero_sage(rest[0], rest[1] == "1")
        elif kind == "hetero-gcn":
            _PROGRAMS[name] = _hetero_gcn()
        else:
            raise ValueError(f"unknown HeteroConv program {name!r}")
    return _PROGRAMS[name]


def _columns(name: str, tensors: list[torch.Tensor]) -> Any:
    return tensors[1].shape[-1]


pyg_route.register_family("hetero-gat", pyg_route.ProgramFamily(_compiled, _columns))
pyg_route.register_family("hetero-gatv2", pyg_route.ProgramFamily(_compiled, _columns))
pyg_route.register_family("hetero-sage", pyg_route.ProgramFamily(_compiled, _columns))
pyg_route.register_family("hetero-gcn", pyg_route.ProgramFamily(_compiled, _columns))
