"""Attention dropout in training for the ``hetero-gat`` programs (``GATConv`` per relation of a
``HeteroConv`` or ``to_hetero`` layer, ``HANConv``): the ``:drop`` programs.

PyG's ``GATConv`` and ``HANConv`` drop attention coefficients in training:
``α = F.dropout(softmax(...), p, training)`` per relation, in the order the layer visits its
relations. Hector's programs draw no random numbers, so the mask is drawn in the captured graph
by the same PyTorch operation ``F.dropout`` runs on a CPU tensor (``at::native::dropout``: no
draw for ``p = 0`` or an empty tensor, zeros for ``p = 1``, else
``empty_like(α).bernoulli_(1 - p) / (1 - p)``), once per relation in the layer's order and over
``[E_r, H]`` as PyG's ``α`` (a relation with self-loops: over PyG's edges after its
``remove_self_loops`` and ``add_self_loops``, :func:`hector.dynamo.pyg_gat_loops.dropout_mask`),
and is an ``[E, H]`` edge input of the program
(:mod:`hector.dynamo.pyg_hetero_programs`, ``hector.dynamo.pyg_han``), which multiplies
the coefficients by it after the softmax (``α ⊙ mask``). With the same generator state the
masks are PyG's: a compiled model whose other random ops also run as captured (the backend's
``fallback="eager"``, the default) trains on PyG's own draws. The backward multiplies the
coefficients' gradient by the same mask (the program's autodiff; the mask takes no gradient).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

#: The suffix of a program name whose coefficients are multiplied by a dropout mask.
SUFFIX = ":drop"


def active(convs: Sequence[Any]) -> bool:
    """Whether any of the relations' convs drops attention coefficients now (training, ``p``
    above zero)."""
    return any(c.training and c.dropout > 0 for c in convs)


def relation_mask(alpha_like: torch.Tensor, edges: int, heads: int, p: float) -> torch.Tensor:
    """``[edges, heads]``: what ``F.dropout`` multiplies an ``α`` of that shape by, drawn as
    it draws on a CPU tensor (module docstring)."""
    if p == 0 or edges == 0:
        return alpha_like.new_ones(edges, heads)
    if p == 1:
        return alpha_like.new_zeros(edges, heads)
    return alpha_like.new_empty(edges, heads).bernoulli_(1 - p).div_(1 - p)


def mask(
    ps: Sequence[float], edge_index: Sequence[torch.Tensor], heads: int, like: torch.Tensor
) -> torch.Tensor:
    """``[E, H]``: the relations' masks in their order (``ps[r]``: relation ``r``'s dropout
    probability, 0 where it drops nothing), concatenated as the program's edges."""
    parts = [
        relation_mask(like, ei.shape[1], heads, float(p))
        for p, ei in zip(ps, edge_index, strict=True)
    ]
    return torch.cat(parts)


def probabilities(convs: Sequence[Any]) -> list[float]:
    """Each relation's dropout probability now (0 outside training)."""
    return [float(c.dropout) if c.training else 0.0 for c in convs]


def with_mask(tensors: list[torch.Tensor], drop: torch.Tensor) -> list[torch.Tensor]:
    """A ``hetero-gat`` program's tensors (bias last) with the mask before the bias, as the
    ``:drop`` programs take it."""
    return [*tensors[:-1], drop, tensors[-1]]
