"""PyG's ``GINEConv`` per relation of a ``HeteroConv`` or ``to_hetero`` layer: one Hector program.

``GINEConv(nn, eps, edge_dim)`` computes ``h_i = nn((1 + ε) x_i + Σ_{j→i} relu(x_j + e'_ji))``
with ``e'_ji = lin(e_ji)`` (``lin`` a linear of ``edge_dim`` inputs, or none: the edge features
as given). When ``nn`` is one linear (``W``, ``b``: ``torch.nn.Linear`` or PyG's ``Linear``) the
layer's sum over the relations ``r`` into a node type is

``Σ_r [ (Σ_{j→i in r} relu(x_j + e'_ji)) W_r + (1 + ε_r) x_i W_r + b_r ]``

which is the program ``hetero-gine`` (:func:`_hetero_gine`) over the typed graph of
:mod:`hector.dynamo.pyg_hetero`: each edge's message ``relu(x_j + e'_ji)``, its relation's
weight (typed linear by edge type), summed into its destination, plus a root weight per
destination type ``Σ_r (1 + ε_r) W_r`` and the biases summed likewise. ``e'`` (one row per
edge, relations concatenated in the layer's order), the weights' stacking and the root sums
are PyTorch ops in the captured graph, so gradients reach ``lin``, ``W_r``, ``b_r`` and a
trainable ``ε``. ``nn`` other than one linear (PyG's ``GIN`` models' MLPs: a nonlinearity after
the sum) runs PyG's own forward, with the reason. The class registers itself in
:data:`hector.dynamo.pyg_hetero.RELATIONS` (the ``HeteroConv`` and ``to_hetero`` routes).
"""

from __future__ import annotations

from typing import Any

import torch

from ..frontends import compiled as frontend
from ..frontends.graph_api import GraphProxy, Value
from . import pyg_gin, pyg_hetero, pyg_route


def _hetero_gine() -> frontend.CompiledFunction:
    def hetero_gine(
        g: GraphProxy, x: Value, weight: Value, edge: Value, bias: Value, root: Value
    ) -> Value:
        """``Σ_r Σ_{j→i in r} relu(x_j + e'_ji) W_r + b_type(i) + x_i R_type(i)``."""
        msg = (g.gather_src(x) + edge).relu()
        out = g.typed_bias(g.sum_to_dst(g.typed_linear(msg, weight)), bias)
        return out + g.typed_linear(x, root, slice="ntype")

    return frontend.compile(hetero_gine)


_PROGRAM: list[frontend.CompiledFunction] = []


def _compiled(name: str) -> frontend.CompiledFunction:
    """The program ``hetero-gine``."""
    if name != "hetero-gine":
        raise ValueError(f"unknown GINEConv program {name!r}")
    if not _PROGRAM:
        _PROGRAM.append(_hetero_gine())
    return _PROGRAM[0]


def _columns(name: str, tensors: list[torch.Tensor]) -> Any:
    return tensors[1].shape[-1]


def _linear(nn: Any) -> bool:
    """Whether ``nn`` is one linear: ``torch.nn.Linear`` or PyG's ``Linear``, exactly."""
    from torch_geometric.nn.dense.linear import Linear

    return type(nn) in (torch.nn.Linear, Linear)


class GineRelations(pyg_hetero.Relations):
    """``GINEConv`` per relation (module docstring): program ``hetero-gine``, or with an
    ``nn`` other than one linear, ``hetero-gin:1`` (:mod:`hector.dynamo.pyg_gin`)."""

    cls_name = "GINEConv"

    def per_relation(self, convs: list[Any]) -> bool:
        """Where some ``nn`` is not one linear: it applies to each relation's sum."""
        return not all(_linear(c.nn) for c in convs)

    def unsupported(self, convs: list[Any], training: bool) -> str | None:
        """Options outside the program: another aggregation, a lazy width; with one linear
        ``nn`` each, output widths that differ."""
        if self.per_relation(convs):
            return pyg_gin.nn_unsupported(self.cls_name, convs)
        for c in convs:
            if c.aggr not in ("add", "sum"):
                return f"GINEConv(aggr={c.aggr!r}) (Hector's program sums)"
            lins = [c.nn] if c.lin is None else [c.nn, c.lin]
            if any(
                isinstance(lin.weight, torch.nn.parameter.UninitializedParameter) for lin in lins
            ):
                return "GINEConv with a lazy input width before its first call"
        if len({c.nn.weight.shape[0] for c in convs}) != 1:
            return "the relations' GINEConvs differ in output width (one program shares it)"
        return None

    def call_unsupported(
        self, convs: list[Any], relations: list[Any], x_dict: Any, kwargs: dict[str, Any]
    ) -> str | None:
        """Each relation's ``edge_attr`` present, ``[E, F]``, ``F`` the source features' width
        (or ``edge_dim``), and its node types' widths ``nn``'s input width (else PyG raises;
        with an MLP ``nn``: :func:`hector.dynamo.pyg_gin.widths_unsupported`)."""
        per_relation = self.per_relation(convs)
        attrs = kwargs.get("edge_attr_dict") or {}
        for e, c in zip(relations, convs, strict=True):
            attr = attrs.get(e)
            width = x_dict[e[0]].shape[1] if per_relation else c.nn.weight.shape[1]
            if attr is None:
                return f"GINEConv without edge_attr for {e}"
            want = width if c.lin is None else c.lin.weight.shape[1]
            if attr.dim() != 2 or attr.shape[1] != want:
                return f"edge_attr_dict[{e}] is not [E, {want}]"
            if x_dict[e[0]].shape[1] != width or x_dict[e[2]].shape[1] != width:
                return f"node features of {e} not {width} wide (GINEConv's nn)"
        return pyg_gin.widths_unsupported(relations, x_dict) if per_relation else None

    def program(self, convs: list[Any], layout: pyg_hetero.Layout) -> str:
        """``hetero-gine``, or ``hetero-gin:1``."""
        return "hetero-gin:1" if self.per_relation(convs) else "hetero-gine"

    def tensors(self, convs: list[Any], layout: pyg_hetero.Layout) -> list[torch.Tensor]:
        """``x, W [R, W, out], e' [E, W], bias [T, out], root [T, W, out]``; with an MLP
        ``nn``: ``x, e'``."""
        x = torch.cat(layout.xs)
        pad = torch.nn.functional.pad
        edges = []
        for e, c in zip(layout.relations, convs, strict=True):
            attr = layout.edge_attr[e]
            attr = attr if c.lin is None else c.lin(attr)
            edges.append(pad(attr, (0, layout.width - attr.shape[1])))
        if self.per_relation(convs):
            return [x, torch.cat(edges)]
        weight = torch.stack([layout.padded(c.nn.weight.t()) for c in convs])
        zeros = weight.new_zeros(weight.shape[-1])
        biases = [c.nn.bias if c.nn.bias is not None else zeros for c in convs]
        roots = [(1 + c.eps) * w for c, w in zip(convs, weight, strict=True)]
        return [
            x,
            weight,
            torch.cat(edges),
            layout.per_type(biases, zeros),
            layout.per_type(roots, roots[0]),
        ]

    def finish(
        self, convs: list[Any], layout: pyg_hetero.Layout, key: Any, rows: torch.Tensor
    ) -> torch.Tensor:
        """With an MLP ``nn``: :func:`hector.dynamo.pyg_gin.finish`; else the rows."""
        if self.per_relation(convs):
            return pyg_gin.finish(convs, layout, key, rows)
        return rows


pyg_hetero.RELATIONS[GineRelations.cls_name] = GineRelations()
pyg_route.register_family("hetero-gine", pyg_route.ProgramFamily(_compiled, _columns))
