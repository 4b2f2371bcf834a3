"""PyG's ``GCN2Conv`` (GCNII) per relation of a ``HeteroConv``: one Hector program,
``hetero-gcn2``.

``GCN2Conv(channels, alpha, theta, layer, shared_weights)`` takes one node set, its features
``x`` and initial features ``x_0`` (``HeteroConv(x_dict, x_0_dict, edge_index_dict)``), and
computes ``out = ((1 - α) P x + α x_0) M₁`` with ``P`` PyG's ``gcn_norm`` (self-loops and
symmetric degree normalisation over the edge weights) and ``M = (1 - β) I + β W`` (``β =
log(θ / layer + 1)``, or 1 without ``theta``); with ``shared_weights=False`` the ``x_0`` term
takes ``M₂`` of its own ``W₂``. Everything is linear, so the matrices move onto the messages:

    out_i = Σ_{j→i} c_ij x_j ((1 - α) M₁) + x0_i (α M₂)

a typed linear per relation over the normalised messages and one over ``x_0`` per destination
node type. The program ``hetero-gcn2`` (:func:`_hetero_gcn2`) computes the sum of that over the
call's relations: ``sum_to_dst`` of ``c_ij · x_j A_r`` plus ``typed_linear {slice = "ntype"}``
of ``x_0`` with ``B_t = Σ_{r into t} α_r M₂,r``. The coefficients are
:func:`hector.dynamo.pyg_hetero.gcn_edges`' (``GCNConv``'s normalisation, ``improved=False``),
and ``A_r``, ``B_t`` are composed from each conv's ``weight1``/``weight2`` with PyTorch ops in
the captured graph, so autograd reaches them. Relations of different widths (PyG's test: 32 and
64 channels) share the program at the widest: weights zero-padded to ``[W, W]``, each
destination type's output its own ``channels`` columns of the program's (:meth:`finish`).

Declined (PyG's forward runs, the reason in :data:`hector.dynamo.pyg_route.FALLBACKS`):
``cached=True`` (its cache is state PyG's forward fills), another ``aggr`` or ``flow``, a
relation between two node types (PyG's ``GCN2Conv`` takes one node set and fails on a pair),
a call without ``x_0_dict``, features or initial features of another width than ``channels``,
initial features with fewer rows than the features. The class registers itself in
:data:`hector.dynamo.pyg_hetero.RELATIONS`.
"""

from __future__ import annotations

from typing import Any

import torch

from ..frontends import compiled as frontend
from ..frontends.graph_api import GraphProxy, Value
from . import pyg_hetero, pyg_route


def _hetero_gcn2() -> frontend.CompiledFunction:
    def hetero_gcn2(
        g: GraphProxy, x: Value, x0: Value, weight: Value, coefficient: Value, root: Value
    ) -> Value:
        """``Σ_r Σ_{j→i in r} c_ij x_j A_r + x0_i B_type(i)`` (one ``GCN2Conv`` per relation)."""
        msg = g.typed_linear(g.gather_src(x), weight) * coefficient
        return g.sum_to_dst(msg) + g.typed_linear(x0, root, slice="ntype")

    return frontend.compile(hetero_gcn2)


_PROGRAMS: dict[str, frontend.CompiledFunction] = {}


def _compiled(name: str) -> frontend.CompiledFunction:
    """The program ``hetero-gcn2``."""
    if name != "hetero-gcn2":
        raise ValueError(f"unknown GCN2Conv program {name!r}")
    if name not in _PROGRAMS:
        _PROGRAMS[name] = _hetero_gcn2()
    return _PROGRAMS[name]


def _columns(name: str, tensors: list[torch.Tensor]) -> Any:
    return tensors[2].shape[-1]


def mixing(conv: Any, weight: torch.Tensor) -> torch.Tensor:
    """``(1 - β) I + β W``: PyG's ``addmm(h, h, W, beta=1 - β, alpha=β)`` as one matrix."""
    beta = float(conv.beta)
    if beta == 1.0:
        return weight
    eye = torch.eye(weight.shape[0], dtype=weight.dtype, device=weight.device)
    return eye * (1.0 - beta) + weight * beta


def _square(weight: torch.Tensor, width: int) -> torch.Tensor:
    """``weight`` zero-padded to ``[width, width]``."""
    extra = width - weight.shape[0]
    return weight if extra == 0 else torch.nn.functional.pad(weight, (0, extra, 0, extra))


def _channels(convs: list[Any], layout: pyg_hetero.Layout, key: Any) -> int:
    """The width of the relations' output into ``key`` (one node type: one width)."""
    into = zip(layout.targets, convs, strict=True)
    return int(next(c.channels for k, c in into if k == key))


class Gcn2Relations(pyg_hetero.Relations):
    """``GCN2Conv`` per relation (module docstring): program ``hetero-gcn2``."""

    cls_name = "GCN2Conv"
    planned = False  # its calls carry x_0_dict: never the plan's (x_dict, edge_index_dict)

    def reads_destinations(self, convs: list[Any]) -> bool:
        """No: a self-loop is an edge from the node's own (source) row; ``x_0`` is an input
        of its own."""
        return False

    def unsupported(self, convs: list[Any], training: bool) -> str | None:
        """``cached=True``, another aggregation or flow."""
        for c in convs:
            if c.cached:
                return "GCN2Conv(cached=True) (its cache is state PyG's forward fills)"
            if c.aggr not in ("add", "sum"):
                return f"GCN2Conv(aggr={c.aggr!r}) (Hector's program sums)"
            if c.flow != "source_to_target":
                return f"GCN2Conv(flow={c.flow!r})"
        return None

    def call_unsupported(
        self, convs: list[Any], relations: list[Any], x_dict: Any, kwargs: dict[str, Any]
    ) -> str | None:
        """A call without ``x_0_dict``; features or initial features of a relation's node type
        other than ``[N, channels]`` float32, initial features with fewer rows."""
        x_0_dict = kwargs.get("x_0_dict")
        if not isinstance(x_0_dict, dict):
            return "GCN2Conv called without x_0 (HeteroConv(x_dict, x_0_dict, edge_index_dict))"
        for e, c in zip(relations, convs, strict=True):
            x, x0 = x_dict[e[0]], x_0_dict.get(e[0])
            if not isinstance(x0, torch.Tensor) or x0.dtype != torch.float32 or x0.dim() != 2:
                return f"x_0_dict[{e[0]!r}] is not a [N, F] float32 tensor"
            if x.shape[-1] != c.channels or x0.shape[-1] != c.channels:
                return (
                    f"HeteroConv relation {e}: GCN2Conv takes {c.channels}-wide features, "
                    f"got {x.shape[-1]} and {x0.shape[-1]} (x, x_0)"
                )
            if x0.shape[0] < x.shape[0]:
                return f"x_0_dict[{e[0]!r}] has fewer rows than x_dict[{e[0]!r}]"
        return None

    def program(self, convs: list[Any], layout: pyg_hetero.Layout) -> str:
        """``hetero-gcn2``."""
        return "hetero-gcn2"

    def tensors(self, convs: list[Any], layout: pyg_hetero.Layout) -> list[torch.Tensor]:
        """``x, x_0, A [R, W, W], c [E, 1], B [T, W, W]``; puts each relation's edges with the
        self-loops ``gcn_norm`` adds in ``layout.edge_index``."""
        x = torch.cat(layout.xs)
        edges, coefficients = [], []
        for e, c, ei in zip(layout.relations, convs, layout.edge_index, strict=True):
            rows = layout.xs[layout.types.index(e[0])].shape[0]
            ei, w = pyg_hetero.gcn_edges(c, ei, layout.edge_weight.get(e), rows, x.dtype)
            edges.append(ei)
            coefficients.append(w)
        layout.edge_index = edges
        width = layout.width
        weight = torch.stack(
            [_square(mixing(c, c.weight1) * (1.0 - c.alpha), width) for c in convs]
        )
        roots = [
            _square(mixing(c, c.weight1 if c.weight2 is None else c.weight2) * c.alpha, width)
            for c in convs
        ]
        root = layout.per_type(roots, roots[0])
        return [x, self._initial(layout), weight, torch.cat(coefficients).unsqueeze(-1), root]

    @staticmethod
    def _initial(layout: pyg_hetero.Layout) -> torch.Tensor:
        """The initial features in the layout's rows: a destination's ``x_0`` (its first rows,
        as PyG's ``x_0[:x.size(0)]``, padded to the widest), zeros where no relation ends."""
        parts = []
        for key, x in zip(layout.types, layout.xs, strict=True):
            if key not in layout.targets:
                parts.append(x.new_zeros(x.shape[0], layout.width))
                continue
            x0 = layout.x0[key[0] if isinstance(key, tuple) else key][: x.shape[0]]
            extra = layout.width - x0.shape[1]
            parts.append(x0 if extra == 0 else torch.nn.functional.pad(x0, (0, extra)))
        return torch.cat(parts)

    def finish(
        self, convs: list[Any], layout: pyg_hetero.Layout, key: Any, rows: torch.Tensor
    ) -> torch.Tensor:
        """The type's own ``channels`` columns of the program's rows."""
        channels = _channels(convs, layout, key)
        return rows if channels == rows.shape[1] else rows[:, :channels]


pyg_hetero.RELATIONS[Gcn2Relations.cls_name] = Gcn2Relations()
pyg_route.register_family("hetero-gcn2", pyg_route.ProgramFamily(_compiled, _columns))
