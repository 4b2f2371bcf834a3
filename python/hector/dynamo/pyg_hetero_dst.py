"""``GATConv``'s destination logit term per node, not per edge: ``hetero-gat:<slope>:dst``.

Each relation's ``GATConv`` adds ``a_dst · W_r x_i`` to the logit of an edge ``j → i``;
:func:`hector.models._make_hetero_gat` computes it per edge as ``x[dst(e)] @ (W_r a_dst)``: a
``[W, H]`` product over a gathered ``W``-wide row for every edge (and, in the backward, the
weight's gradient over every edge and the input's gradient scattered back through every edge).
On a sampled mini-batch, where every destination has many edges (ogbn-mag at fan-outs
15, 10, 5: 1.1 M edges into 91 k nodes), that was a third of the layer's kernel time.

The term depends only on the destination and the relation, so the ``:dst`` program
(:mod:`hector.dynamo.pyg_hetero_programs`, from this module's weights) computes it per
node: the relations into a node type take the *slots* ``0 .. S-1`` of that type (in the
layer's order; ``S`` the most relations into one type), ``W_dst_nodes[t]`` is the ``[W, S·H]``
concatenation of the slots' ``W_r a_dst`` (zeros where a type has fewer relations), and

    terms  = typed_linear(x, W_dst_nodes){ntype}             # [N, S·H], one GEMM over nodes
    dst_e  = typed_linear(gather_dst(terms), select){etype}  # [E, H]: the edge's slot

``select[r]`` is the constant ``[S·H, H]`` matrix that picks relation ``r``'s slot, so an edge
reads an ``S·H``-wide row instead of a ``W``-wide one and the per-edge products are
``S·H × H`` instead of ``W × H``. It takes no gradient (the op's ``train`` list marks it), so the
backward builds none for it. The route uses this program where ``S·H < W``
(:func:`applies`); the numbers are the per-edge program's up to float rounding.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def slots(targets: Sequence[int], types: int) -> list[int]:
    """Each relation's slot: its rank among the relations into its destination key
    (``targets[r]``, an index below ``types``)."""
    seen = [0] * types
    out = []
    for t in targets:
        out.append(seen[t])
        seen[t] += 1
    return out


def applies(targets: Sequence[int], types: int, heads: int, width: int) -> bool:
    """Whether the per-node terms are narrower than the rows (``S·H < W``)."""
    most = max(slots(targets, types)) + 1 if targets else 0
    return most * heads < width


def node_weights(
    weight_att_dst: torch.Tensor, targets: Sequence[int], types: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(W_dst_nodes [T, W, S·H], select [R, S·H, H])`` from the relations' ``W_r a_dst``
    (``[R, W, H]``) and their destination keys ``targets`` (module docstring): the first
    differentiable (one indexing of the stacked weights), the second a constant."""
    r, width, heads = weight_att_dst.shape
    rank = slots(targets, types)
    most = max(rank) + 1
    index = [[r] * most for _ in range(types)]  # r: the zero block
    for rel, (t, s) in enumerate(zip(targets, rank, strict=True)):
        index[t][s] = rel
    zero = weight_att_dst.new_zeros(1, width, heads)
    blocks = torch.cat([weight_att_dst, zero])[torch.tensor(index)]  # [T, S, W, H]
    nodes = blocks.permute(0, 2, 1, 3).reshape(types, width, most * heads)
    return nodes, slot_select(rank, heads, weight_att_dst)


def slot_select(rank: Sequence[int], heads: int, like: torch.Tensor) -> torch.Tensor:
    """The constant ``select [R, S·H, H]``: relation ``r``'s ``H`` columns at its slot
    ``rank[r]`` of ``S = max(rank) + 1`` (``like``'s dtype)."""
    most = max(rank) + 1
    select = like.new_zeros(len(rank), most * heads, heads)
    eye = torch.eye(heads, dtype=like.dtype)
    for rel, s in enumerate(rank):
        select[rel, s * heads : (s + 1) * heads] = eye
    return select


def with_node_weights(tensors: list[torch.Tensor], targets: Sequence[int]) -> list[torch.Tensor]:
    """The ``hetero-gat`` program's tensors ``[x, W, att_src, W a_dst, bias]`` as the
    ``:dst`` program's ``[x, W, att_src, W_dst_nodes, select, bias]``."""
    x, weight, att_src, weight_att_dst, bias = tensors
    nodes, select = node_weights(weight_att_dst, targets, int(bias.shape[0]))
    return [x, weight, att_src, nodes, select, bias]
