"""The programs of :mod:`hector.dynamo.pyg_hetero`'s per-relation conv classes, by name:
``hetero-gat:<slope>`` (:func:`hector.models._make_hetero_gat`'s), ``hetero-gat:<slope>:edge``
(edge features), ``hetero-gat:<slope>:dst`` (:mod:`hector.dynamo.pyg_hetero_dst`),
``hetero-gatv2:<slope>``, ``hetero-sage:<aggr>:<root>`` and ``hetero-gcn``, and the
``hetero-gat`` ones with attention dropout (``...:drop``,
:mod:`hector.dynamo.pyg_attention_dropout`), registered as program families of
:mod:`hector.dynamo.pyg_route`."""

from __future__ import annotations

from typing import Any

import torch

from ..frontends import compiled as frontend
from ..frontends.graph_api import GraphProxy, Value
from ..models import _make_hetero_gat
from . import pyg_attention_dropout, pyg_hetero_dst, pyg_route


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


def _hetero_gat_edge(slope: float) -> frontend.CompiledFunction:
    def hetero_gat_edge(
        g: GraphProxy,
        x: Value,
        weight: Value,
        att_src: Value,
        weight_att_dst: Value,
        edge_logits: Value,
        bias: Value,
    ) -> Value:
        """``hector.models``' ``hetero_gat_layer`` with each edge's ``a_edge · W_e e_ij`` added
        to its logits (``GATConv(edge_dim=...)``)."""
        hs = g.typed_linear(g.gather_src(x), weight)  # W_r h_j  [E, H*F]
        dst_term = g.typed_linear(g.gather_dst(x), weight_att_dst)  # [E, H]
        logits = g.typed_linear(hs, att_src) + dst_term + edge_logits
        alpha = g.edge_softmax(logits.leaky_relu(slope), by="dst_etype")
        return g.typed_bias(g.sum_to_dst(hs * alpha), bias)

    return frontend.compile(hetero_gat_edge)


def _hetero_gatv2(slope: float, drop: bool = False) -> frontend.CompiledFunction:
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
        (``drop``: times the dropout mask), ``h'_i = Σ_r Σ_j α_ij ⊙_head x_j' + b_type(i)``."""
        xs = g.typed_bias(g.typed_linear(g.gather_src(x), weight_l), bias_l)  # [E, H*F]
        xd = g.typed_bias(g.typed_linear(g.gather_dst(x), weight_r), bias_r)
        logits = g.typed_linear((xs + xd).leaky_relu(slope), att)  # [E, H]
        alpha = g.edge_softmax(logits, by="dst_etype")
        alpha = alpha * rest[0] if drop else alpha
        return g.typed_bias(g.sum_to_dst(xs * alpha), rest[-1])

    names = ["g", "x", "weight_l", "bias_l", "weight_r", "bias_r", "att"]
    return frontend.compile_with_arguments(hetero_gatv2, [*names, *(["mask"] * drop), "bias"])


_PROGRAMS: dict[str, frontend.CompiledFunction] = {}


def _compiled(name: str) -> frontend.CompiledFunction:
    """The program named ``name`` (``hetero-gat:<slope>``, ``hetero-sage:<aggr>:<root>``)."""
    if name not in _PROGRAMS:
        kind, *rest = name.split(":")
        if kind == "hetero-gat" and rest[-1] == "drop":  # attention dropout in training
            variant = rest[1] if len(rest) == 3 else ""
            _PROGRAMS[name] = pyg_attention_dropout.hetero_gat_dropped(float(rest[0]), variant)
        elif kind == "hetero-gat" and len(rest) == 1:
            _PROGRAMS[name] = _make_hetero_gat(float(rest[0]))
        elif kind == "hetero-gat" and rest[1] == "dst":
            _PROGRAMS[name] = pyg_hetero_dst.hetero_gat_dst(float(rest[0]))
        elif kind == "hetero-gat":
            _PROGRAMS[name] = _hetero_gat_edge(float(rest[0]))
        elif kind == "hetero-gatv2":
            _PROGRAMS[name] = _hetero_gatv2(float(rest[0]), rest[1:] == ["drop"])
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
