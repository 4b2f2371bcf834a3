"""Relational GNN layers written against Hector's graph API.

``rgcn_layer`` is the RGCN layer of Schlichtkrull et al. with PyG's ``RGCNConv`` conventions
(``aggr="mean"`` per relation, root weight, bias), so its weights load from ``RGCNConv`` one to
one: ``weight`` is ``[R, in, out]``, ``root`` ``[in, out]``, ``bias`` ``[out]``.
"""

from __future__ import annotations

from . import frontend


def _rgcn_layer(g, x, weight, root, bias):
    """``h'_i = Σ_r Σ_{j∈N_r(i)} (1/c_{i,r}) W_r h_j + W_0 h_i + b``."""
    msg = g.typed_linear(g.gather_src(x), weight)  # W_r h_j, weight picked by each edge's type
    agg = g.sum_to_dst(msg * g.degree_norm("dst_etype"))  # mean per (node, relation), summed
    return agg + g.linear(x, root) + bias


rgcn_layer = frontend.compile(_rgcn_layer)
rgcn_layer.__name__ = "rgcn_layer"


def rgcn_inter_text(in_dim: int, out_dim: int, num_etypes: int) -> str:
    """The hector_inter program of ``rgcn_layer`` for these sizes (for ``hector compile``)."""
    return frontend.trace(
        _rgcn_layer,
        [(1, in_dim), (num_etypes, in_dim, out_dim), (in_dim, out_dim), (out_dim,)],
        name="rgcn_layer",
    ).text
