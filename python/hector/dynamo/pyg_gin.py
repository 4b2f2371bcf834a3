"""PyG's ``GINConv`` (and ``GINEConv`` with an MLP) per relation of a ``HeteroConv`` or
``to_hetero`` layer: the neighbourhood sums as one Hector program, each relation's ``nn`` as
written.

``GINConv(nn, eps)`` computes ``h_i = nn((1 + ε) x_i + Σ_{j→i} x_j)`` and ``GINEConv`` the same
over messages ``relu(x_j + e'_ji)``. PyG's ``GIN`` models (and users' GIN stacks) give ``nn`` a
nonlinearity (``MLP([F, H, H])``: linear, activation, linear), so ``nn`` cannot move past the
sum over relations; it applies to each relation's own aggregate. The program ``hetero-gin:<e>``
(:func:`_hetero_gin`; ``e``: edge features) computes every relation's ``Σ_{j→i} m_ji + x_i``
at once, over the typed graph in which each relation's destination is a node type of its own
(:class:`hector.dynamo.pyg_hetero.Layout`'s ``split``, forced by :meth:`GinRelations.per_relation`
whatever the layer's ``aggr``): one gather and one segmented sum for all relations, in place of
PyG's one ``scatter`` per relation. After the program each relation's rows get ``ε x_i`` and
its ``nn`` (the module as written, traced by Dynamo: ``MLP`` with its norms, dropout, any
``Sequential``), then the layer's ``aggr`` combines the relations (a sum in the relations'
order, as PyG's ``group``). A ``GINEConv`` whose ``nn`` is one linear keeps the
``hetero-gine`` program (:mod:`hector.dynamo.pyg_gine`), which moves the linear into the
program. The classes register themselves in :data:`hector.dynamo.pyg_hetero.RELATIONS`.
"""

from __future__ import annotations

from typing import Any

import torch

from ..frontends import compiled as frontend
from ..frontends.graph_api import GraphProxy, Value
from . import pyg_hetero, pyg_route


def _hetero_gin(edge: bool) -> frontend.CompiledFunction:
    def hetero_gin(g: GraphProxy, x: Value, *rest: Value) -> Value:
        """``Σ_{j→i} m_ji + x_i`` per (node, relation): ``m = x_j``, or ``relu(x_j + e'_ji)``."""
        msg = g.gather_src(x)
        msg = (msg + rest[0]).relu() if edge else msg
        return g.sum_to_dst(msg) + x

    names = ["x", "edge"] if edge else ["x"]
    return frontend.compile_with_arguments(hetero_gin, ["g", *names])


_PROGRAMS: dict[str, frontend.CompiledFunction] = {}


def _compiled(name: str) -> frontend.CompiledFunction:
    """The program ``hetero-gin:<0|1>`` (``1``: with edge features)."""
    if name not in ("hetero-gin:0", "hetero-gin:1"):
        raise ValueError(f"unknown GIN program {name!r}")
    if name not in _PROGRAMS:
        _PROGRAMS[name] = _hetero_gin(name.endswith("1"))
    return _PROGRAMS[name]


def _columns(name: str, tensors: list[torch.Tensor]) -> Any:
    return tensors[0].shape[-1]


def _lazy(module: torch.nn.Module) -> bool:
    return any(
        isinstance(p, torch.nn.parameter.UninitializedParameter) for p in module.parameters()
    )


def nn_unsupported(cls_name: str, convs: list[Any]) -> str | None:
    """Why the relations' ``nn`` or aggregation keep the program from running (None: they do
    not): another aggregation than a sum, a lazy ``nn`` before its first call."""
    for c in convs:
        if c.aggr not in ("add", "sum"):
            return f"{cls_name}(aggr={c.aggr!r}) (Hector's program sums)"
        if _lazy(c):
            return f"{cls_name} with a lazy input width before its first call"
    return None


def widths_unsupported(relations: list[Any], x_dict: Any) -> str | None:
    """Node types of different widths: a relation's source and destination (PyG's
    ``out + (1 + ε) x_i`` raises, and so does its forward, which runs instead), or two
    relations' (each relation's ``nn`` takes its own width; the program's rows would be padded
    to the widest)."""
    for e in relations:
        if x_dict[e[0]].shape[-1] != x_dict[e[2]].shape[-1]:
            return f"GIN relation {e}: source and destination features differ in width"
    if len({x_dict[e[0]].shape[-1] for e in relations}) > 1:
        return "GIN relations over node features of different widths"
    return None


def finish(convs: list[Any], layout: pyg_hetero.Layout, key: Any, rows: torch.Tensor) -> Any:
    """Relation ``key[1]``'s output: its rows (``Σ_j m_ji + x_i``) plus ``ε x_i``, through its
    ``nn``."""
    conv = convs[key[1]]
    return conv.nn(rows + conv.eps * layout.xs[layout.types.index(key)])


class GinRelations(pyg_hetero.Relations):
    """``GINConv`` per relation (module docstring): program ``hetero-gin:0``."""

    cls_name = "GINConv"
    planned = False  # the widths decide (:func:`widths_unsupported`)

    def per_relation(self, convs: list[Any]) -> bool:
        """Always: ``nn`` applies to each relation's sum."""
        return True

    def unsupported(self, convs: list[Any], training: bool) -> str | None:
        """Another aggregation than a sum; a lazy ``nn``."""
        return nn_unsupported(self.cls_name, convs)

    def call_unsupported(
        self, convs: list[Any], relations: list[Any], x_dict: Any, kwargs: dict[str, Any]
    ) -> str | None:
        """Each relation's two node types of one width."""
        return widths_unsupported(relations, x_dict)

    def program(self, convs: list[Any], layout: pyg_hetero.Layout) -> str:
        """``hetero-gin:0``."""
        return "hetero-gin:0"

    def tensors(self, convs: list[Any], layout: pyg_hetero.Layout) -> list[torch.Tensor]:
        """The rows alone."""
        return [torch.cat(layout.xs)]

    def finish(
        self, convs: list[Any], layout: pyg_hetero.Layout, key: Any, rows: torch.Tensor
    ) -> torch.Tensor:
        """:func:`finish`."""
        return finish(convs, layout, key, rows)


pyg_hetero.RELATIONS[GinRelations.cls_name] = GinRelations()
pyg_route.register_family("hetero-gin", pyg_route.ProgramFamily(_compiled, _columns))
