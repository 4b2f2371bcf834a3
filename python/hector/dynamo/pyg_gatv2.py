"""``GATv2Conv`` relations of a ``HeteroConv`` or ``to_hetero`` layer as one program,
``hetero-gatv2:<slope>`` (:mod:`hector.dynamo.pyg_hetero_programs`), registered in
:data:`hector.dynamo.pyg_hetero.RELATIONS`.

Per relation ``x_j' = W_l x_j + b_l`` and ``x_i' = W_r x_i + b_r`` (``share_weights``: one
linear), logits ``a · leaky_relu(x_j' + x_i' (+ W_e e_ij))`` within each relation, then
``Σ_r Σ_j α_ij ⊙_head x_j'`` plus a bias per node type, as :class:`GatRelations` does for
``GATConv`` (heads concatenated or averaged, with or without bias, attention dropout in
training). Edge features (``edge_dim``, the call's ``edge_attr_dict``: ``:feat``) enter
inside the nonlinearity, so the program takes each edge's ``W_e e_ij`` (``[E, H*F]``, zeros
for a relation without features), computed in the captured graph; self-loops
(:mod:`hector.dynamo.pyg_gat_loops`: ``:edge``) add an ``[E, H]`` logit after it, ``-inf`` on
a relation's own loops.
"""

from __future__ import annotations

from typing import Any

import torch

from ..models import block_diagonal
from . import pyg_attention_dropout, pyg_gat_loops, pyg_hetero
from .pyg_hetero import EdgeType, GatRelations, Layout


class GatV2Relations(GatRelations):
    """``GATv2Conv`` per relation (module docstring)."""

    cls_name = "GATv2Conv"

    def linears(self, conv: Any) -> list[Any]:
        """GATv2's projections of the sources and the destinations (one module when shared);
        the options it declines are ``GATConv``'s (:meth:`GatRelations.unsupported`)."""
        return [conv.lin_l, conv.lin_r]

    def call_unsupported(
        self, convs: list[Any], relations: list[EdgeType], x_dict: Any, kwargs: dict[str, Any]
    ) -> str | None:
        """Edge features given to a relation whose conv has no ``edge_dim`` (PyG's
        ``GATv2Conv`` fails on them: its error then follows)."""
        attrs = kwargs.get("edge_attr_dict") or {}
        for e, c in zip(relations, convs, strict=True):
            if e in attrs and c.lin_edge is None:
                return f"edge_attr_dict[{e}] given to GATv2Conv without edge_dim"
        return None

    def program(self, convs: list[Any], layout: Layout) -> str:
        """``hetero-gatv2:<slope>``, with ``:feat`` for edge features, ``:edge`` for
        self-loops, ``:mean`` for ``aggr="mean"`` (``:kept-mean`` with self-loops), ``:drop``
        while a conv drops attention coefficients."""
        drop = pyg_attention_dropout.SUFFIX if pyg_attention_dropout.active(convs) else ""
        feat = ":feat" if self._features(convs, layout) else ""
        edge = ":edge" if any(layout.loops) else ""
        mean = self.mean_suffix(convs)
        return f"hetero-gatv2:{float(convs[0].negative_slope)!r}{feat}{edge}{mean}{drop}"

    @staticmethod
    def _features(convs: list[Any], layout: Layout) -> bool:
        return any(
            c.lin_edge is not None and e in layout.edge_attr
            for e, c in zip(layout.relations, convs, strict=True)
        )

    def tensors(self, convs: list[Any], layout: Layout) -> list[torch.Tensor]:
        """``x, W_l [R, W, H*F], b_l [R, H*F], W_r, b_r, att [R, H*F, H]``, then the
        ``[E, H*F]`` edge terms with ``:feat``, the ``[E, H]`` logits with ``:edge``, the
        mean's ``[E, H]`` factors with ``:kept-mean``, the dropout mask with ``:drop``, and
        ``bias [T, H*F]``."""
        x = torch.cat(layout.xs)
        args = [x]
        for lins in ([c.lin_l for c in convs], [c.lin_r for c in convs]):
            weight = torch.stack([layout.padded(lin.weight.t()) for lin in lins])
            zeros = weight.new_zeros(weight.shape[-1])
            biases = [lin.bias if lin.bias is not None else zeros for lin in lins]
            args += [weight, torch.stack(biases)]
        args.append(block_diagonal(torch.cat([c.att for c in convs]).unsqueeze(-1)))
        loops = layout.loops or [0] * len(convs)
        if self._features(convs, layout):
            args.append(self._feature_terms(convs, layout, loops, x))
        if any(loops):
            args.append(pyg_gat_loops.removal_logits(layout.edge_index, loops, x, convs))
        args.append(self._bias(convs, layout, args[1]))
        args = self.with_mean_weights(convs, layout, args)
        if not pyg_attention_dropout.active(convs):
            return args
        drop = pyg_gat_loops.dropout_masks(convs, layout.edge_index, loops, x)
        return pyg_attention_dropout.with_mask(args, drop)

    @staticmethod
    def _feature_terms(
        convs: list[Any], layout: Layout, loops: list[int], like: torch.Tensor
    ) -> torch.Tensor:
        """``[E, H*F]``: each edge's ``lin_edge(e_ij)``, relations in their order (zeros for
        one without features), the appended loops' from their features by ``fill_value``."""
        parts = []
        for e, c, ei, n in zip(layout.relations, convs, layout.edge_index, loops, strict=True):
            attr = layout.edge_attr.get(e)
            if c.lin_edge is None or attr is None:
                parts.append(like.new_zeros(ei.shape[1], c.heads * c.out_channels))
                continue
            attr = pyg_gat_loops.with_loop_features(attr, ei, n, c.fill_value) if n else attr
            rows = attr.view(-1, 1) if attr.dim() == 1 else attr
            parts.append(rows @ c.lin_edge.weight.t())
        return torch.cat(parts)


pyg_hetero.RELATIONS[GatV2Relations.cls_name] = GatV2Relations()
