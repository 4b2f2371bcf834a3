"""``GINConv`` layers of ``to_hetero_with_bases`` models: the relations' sums as one program.

A ``HeteroBasisConv`` of ``GINConv(nn, eps)`` (:mod:`hector.dynamo.pyg_bases`) computes, over
the grouped graph (one node set, ``R`` relations, ``B`` bases with coefficients ``a_{r,b}``),

``h'_i = Σ_b nn_b((1 + ε_b) x_i + Σ_{j→i} a_{r(j,i),b} x_j)``.

``nn_b`` is any module (PyG's ``MLP`` with its norms and activations, a ``Sequential``), so
unlike ``SAGEConv``'s the bases cannot be folded into one weight. Their aggregates are linear
in ``x``, though, and share one neighbourhood sum per relation:
``agg_b = (1 + ε_b) x + Σ_r a_{r,b} S_r`` with ``S_r[i] = Σ_{j→i, r(j,i)=r} x_j``. The program
``bases-gin:sum`` (:func:`_relation_sums`) computes every ``S_r`` at once: one gather and one
segmented sum over the graph whose destination ``(r, i)`` is node ``r·N + i`` (``R·N`` nodes;
the sources are nodes ``0..N-1``, which are also relation 0's destinations: the program adds no
root term, so sharing those rows changes nothing). The mix ``einsum(a, S)`` (``[B, R] × [R,
N, K]``), the ``(1 + ε_b) x`` term and each ``nn_b`` on its aggregate run as captured PyTorch
ops, so autograd reaches the coefficients, ``ε`` (``train_eps``), ``nn``'s parameters and
``x``; the bases' outputs are summed in their order, as PyG's ``HeteroBasisConv``.

The alternative, ``hetero-bases:sum`` with ``W_r = [a_{r,1} I | … | a_{r,B} I]`` (one
program giving all ``B`` aggregates), multiplies every message by a ``K × B·K`` block of
identities; ``hector bench bases-gin`` measures both (docs/import.md).
"""

from __future__ import annotations

from typing import Any

import torch

from ..frontends import compiled as frontend
from ..frontends.graph_api import GraphProxy, Value
from . import pyg_route

#: The program of the relations' neighbourhood sums.
PROGRAM = "bases-gin:sum"


def _relation_sums() -> frontend.CompiledFunction:
    def relation_sums(g: GraphProxy, x: Value) -> Value:
        """``Σ_{j→i} x_j`` per destination node (here: per destination and relation)."""
        return g.sum_to_dst(g.gather_src(x))

    return frontend.compile_with_arguments(relation_sums, ["g", "x"])


_COMPILED: dict[str, frontend.CompiledFunction] = {}


def _compiled(name: str) -> frontend.CompiledFunction:
    """The program ``bases-gin:sum``."""
    if name != PROGRAM:
        raise ValueError(f"unknown to_hetero_with_bases GIN program {name!r}")
    if name not in _COMPILED:
        _COMPILED[name] = _relation_sums()
    return _COMPILED[name]


def _columns(name: str, tensors: list[torch.Tensor]) -> Any:
    return tensors[0].shape[-1]


def unsupported(conv: Any) -> str | None:
    """Why one ``GINConv`` basis is outside the program (None: it is not): another
    aggregation than a sum, a lazy ``nn`` before its first call."""
    if conv.aggr not in ("add", "sum"):
        return f"GINConv(aggr={conv.aggr!r}) (Hector's program sums)"
    if any(isinstance(p, torch.nn.parameter.UninitializedParameter) for p in conv.parameters()):
        return "GINConv with a lazy input width before its first call"
    return None


def relation_sums(
    x: torch.Tensor, edge_index: torch.Tensor, edge_type: torch.Tensor, relations: int
) -> torch.Tensor:
    """``S [R, N, K]``: ``S_r[i] = Σ_{j→i, r(j,i)=r} x_j``, one ``hector::pyg_layer`` call."""
    nodes, width = x.shape
    index = torch.stack([edge_index[0], edge_index[1] + nodes * edge_type])
    rows = torch.cat([x, x.new_zeros(((relations - 1) * nodes, width))]) if relations > 1 else x
    sums = torch.ops.hector.pyg_layer(
        PROGRAM,
        pyg_route._train([rows]),
        [index, edge_type],
        [relations * nodes, relations],
        [],
        [rows],
    )
    return sums.view(relations, nodes, width)


def aggregates(
    layer: Any, x: torch.Tensor, edge_index: torch.Tensor, edge_type: torch.Tensor
) -> torch.Tensor:
    """``[B, N, K]``: basis ``b``'s ``(1 + ε_b) x_i + Σ_{j→i} a_{r(j,i),b} x_j``."""
    sums = relation_sums(x, edge_index, edge_type, layer.num_relations)
    att = torch.cat([c.edge_type_weight for c in layer.convs])  # [B, R]
    eps = torch.cat([c.eps.view(1) for c in layer.convs])  # [B]
    return torch.einsum("br,rnk->bnk", att, sums) + (1 + eps).view(-1, 1, 1) * x


def forward(
    layer: Any,
    x: torch.Tensor,
    edge_index: torch.Tensor,
    edge_type: torch.Tensor,
    rows: torch.Size,
) -> torch.Tensor:
    """The layer's output ``Σ_b nn_b(agg_b)``; ``rows``: the shape of ``x``'s rows as the
    call gave them (``[N]``, or ``[copies, N]`` for features with a batch dimension, which
    ``nn`` sees as PyG gives them to it: a ``BatchNorm1d`` reads the dimensions as PyG's)."""
    aggs = aggregates(layer, x, edge_index, edge_type)
    width = aggs.shape[-1]
    outs = [c.nn(agg.view(*rows, width)) for c, agg in zip(layer.convs, aggs, strict=True)]
    out: torch.Tensor = outs[0]
    for res in outs[1:]:  # in the bases' order, as PyG's HeteroBasisConv sums them
        out = out + res
    return out


pyg_route.register_family("bases-gin", pyg_route.ProgramFamily(_compiled, _columns, typed=False))
