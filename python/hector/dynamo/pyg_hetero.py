"""PyG's ``HeteroConv`` under ``torch.compile(backend="hector")``: one Hector program per layer.

A ``HeteroConv`` holds one conv per edge type and combines their outputs per destination node
type by its ``aggr``. When every per-relation conv is one of a class Hector expresses, with
the same options, the whole layer is one ``hector::pyg_layer`` call over one typed graph
(:mod:`hector.dynamo.pyg_route`'s typed family, as ``HGTConv``'s): the node types of the relations
the call has are stacked in one id space (in ``x_dict`` order), each relation of the call is one
edge type, the per-relation weights are typed weights, and the sum over relations is the
program's ``sum_to_dst`` over all of a node's incoming edges:

* ``GATConv`` (:class:`GatRelations`): MLPerf's R-GAT layer, ``GATConv(in, h // heads,
  heads=heads, add_self_loops=False)`` per relation, shared or separate source and destination
  projections (``in_channels`` an int or a pair), heads concatenated or averaged, with or
  without bias, messages summed or averaged (``aggr="mean"``: the coefficients times each
  edge's ``1 / in-degree`` within its relation, ``:mean``; with self-loops, ``:kept-mean``:
  times each edge's factor over the edges PyG keeps, as the relation's own loops, which PyG
  removes, stay in the program's edges), edge features (``edge_dim``, the call's
  ``edge_attr_dict``: each edge's
  ``a_edge · lin_edge(e_ij)`` computed in the captured graph, an ``[E, H]`` input). The
  program is :func:`hector.models._make_hetero_gat`'s (attention within each relation,
  ``edge_softmax {by = "dst_etype"}``), plus those logits with edge features; self-loops
  (``add_self_loops=True``, on a relation from a node type to itself, for ``GATv2Conv`` as
  well): :mod:`hector.dynamo.pyg_gat_loops`;
* ``SAGEConv`` (:class:`SageRelations`): mean, sum or max neighbourhood aggregation, root weight
  on or off (MLPerf's ``rsage``: ``SAGEConv(in, h, root_weight=False)``; PyG's DBLP example:
  ``SAGEConv((-1, -1), h)``): ``lin_l`` of the aggregate per relation, the root weights of the
  relations into a node type summed into one node-typed weight, the biases likewise;
* ``GATv2Conv``: :mod:`hector.dynamo.pyg_gatv2` registers its class here
  (``hetero-gatv2:<slope>``);
* ``GraphConv`` (:class:`GraphConvRelations`): the same program, ``lin_rel`` and ``lin_root``;
* ``GCNConv`` (:class:`GcnRelations`) on relations from a node type to itself (PyG's
  ``GCNConv`` takes one node set): ``hetero-gcn``, each edge's coefficient PyG's ``gcn_norm``
  (self-loops or none, ``improved``, ``normalize`` or not, the call's ``edge_weight_dict``)
  computed in the captured graph in shapes fixed by the input's (:func:`gcn_edges`);
* ``GCN2Conv`` (GCNII: ``x`` and ``x_0`` of one node type, the call's ``x_0_dict``):
  :mod:`hector.dynamo.pyg_gcn2` registers its class here (``hetero-gcn2``);
* ``GINEConv`` of one linear ``nn``: :mod:`hector.dynamo.pyg_gine` registers its class here;
  ``GINConv``, and ``GINEConv`` with an MLP ``nn``: :mod:`hector.dynamo.pyg_gin` (each
  relation's output on rows of its own, :meth:`Relations.per_relation`).

Weight-sized glue (stacking, padding to the widest input, the attention vectors as
block-diagonal matrices, the biases summed per destination type) runs as PyTorch ops in the
captured graph, so gradients reach each conv's parameters through autograd; a conv the call
does not reach keeps a ``None`` gradient, as in PyG. Under Dynamo, a call of ``(x_dict,
edge_index_dict)`` alone takes its decision and layout from a plan made outside the trace, and
``GATConv``'s glue is one op of the captured graph (:mod:`hector.dynamo.pyg_hetero_plan`).
``aggr="mean"`` divides each destination type's rows by the number of the call's relations
into it (after the program); averaged heads are the mean of the program's ``[N, H, F]`` rows
plus the summed biases. Any other ``aggr``
(``"max"``, ``"min"``, ``"cat"``, ``None``, ``"prod"``, ``"amax"``, ``"amin"``; a ``to_hetero``
layer's ``"max"``/``"min"``/``"mul"``) gives each relation's destination a node type of its
own in the same program (:class:`Layout` ``split``: the destination's rows once per relation
into it), so the program's rows there are that relation's output alone; PyG's ``group`` (or the
``to_hetero`` layer's pairwise chain) reduces them after the program, with PyTorch's own
tie-breaking and gradients. What the programs do not compute runs PyG's own ``forward`` (the
convs then trace as Dynamo captures them) and the reason is kept in
:data:`hector.dynamo.pyg_route.FALLBACKS` under ``"HeteroConv"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..models import block_diagonal
from . import (
    pyg_attention_dropout,
    pyg_gat_loops,
    pyg_hetero_dst,
    pyg_hetero_programs,  # noqa: F401  (registers the classes' programs with pyg_route)
    pyg_route,
)

EdgeType = tuple[str, str, str]

#: ``HeteroConv`` ``aggr`` values computed: the sum in the program, the mean after it.
SUMMED = ("sum", "add", "mean")
#: ``HeteroConv`` ``aggr`` values computed by PyG's ``group`` on the relations' outputs, one
#: destination type per relation in the program (:class:`Layout`'s ``split``).
REDUCED = ("max", "min", "cat", None, "prod", "amax", "amin")
#: The keyword arguments of a ``HeteroConv`` call the programs read.
_KWARGS = ("edge_attr_dict", "edge_weight_dict", "x_0_dict")


def call_relations(layer: Any, edge_index_dict: dict[Any, Any]) -> list[tuple[EdgeType, Any]]:
    """The relations of the call that ``layer`` computes, in the layer's order, each with its
    conv. A ``HeteroConv``: as its ``forward`` reads them, from ``convs.items()`` (PyG's
    ``ModuleDict`` keeps an edge type as one string and does not split every name back: a
    relation named ``"_"``, ``("paper", "_", "author")``, comes back as ``("paper", "",
    "_author")``, matches no key of the call, and PyG's layer leaves it out). A layer with its
    own ``relations`` list (:class:`hector.dynamo.pyg_to_hetero.ToHeteroLayer`: ``to_hetero``
    calls each conv with its relation's tensors, whatever the names): those."""
    own = getattr(layer, "relations", None)
    if own is None:
        return [(e, c) for e, c in layer.convs.items() if e in edge_index_dict]
    return [(e, layer.convs[e]) for e in own if e in edge_index_dict]


@dataclass
class Layout:
    """The typed graph of one call: the relations it has (``HeteroConv.convs`` order), the node
    types they touch (``x_dict`` order) with their rows, stacked, and the widest input. With
    ``split`` (a cross-relation ``aggr`` other than a sum or mean) each relation's destination
    is a node type of its own (key ``(type, relation index)``, after the source types): the
    program's rows there are that relation's output alone, reduced over relations after it."""

    relations: list[EdgeType]
    types: list[Any]  # node type names; with split, (destination type, relation index) too
    xs: list[torch.Tensor]
    width: int
    edge_index: list[torch.Tensor] = field(default_factory=list)  # per relation
    edge_attr: dict[Any, torch.Tensor] = field(default_factory=dict)  # the call's edge_attr_dict
    edge_weight: dict[Any, torch.Tensor] = field(default_factory=dict)  # its edge_weight_dict
    x0: dict[Any, torch.Tensor] = field(default_factory=dict)  # its x_0_dict (GCN2Conv's x_0)
    loops: list[int] = field(default_factory=list)  # self-loop edges appended per relation
    targets: list[Any] = field(default_factory=list)  # each relation's destination key

    @classmethod
    def of(
        cls,
        layer: Any,
        x_dict: dict[str, Any],
        edge_index_dict: dict[Any, Any],
        dst: bool,
        split: bool = False,
    ) -> Layout:
        """The layout of ``HeteroConv`` ``layer``'s call (the call's dicts); ``dst``: whether
        the convs read the destinations' features (else a type that is only a destination has
        zero rows, and its features no gradient, as in PyG)."""
        relations = [e for e, _ in call_relations(layer, edge_index_dict)]
        touched = {t for e in relations for t in (e[0], e[2])}
        sources = {e[0] for e in relations}
        targets: list[Any] = [(e[2], i) if split else e[2] for i, e in enumerate(relations)]
        types: list[Any] = [t for t in x_dict if t in (sources if split else touched)]
        types += targets if split else []
        read = sources | ({e[2] for e in relations} if dst else set())
        width = max(x_dict[t].shape[1] for t in touched)
        pad = torch.nn.functional.pad
        xs = []
        for key in types:
            x = x_dict[key[0] if isinstance(key, tuple) else key]
            if not (key in read if isinstance(key, str) else dst):
                xs.append(x.new_zeros(x.shape[0], width))
            else:  # no copy at full width: the program's cat is the one
                xs.append(x if x.shape[1] == width else pad(x, (0, width - x.shape[1])))
        edge_index = [edge_index_dict[e] for e in relations]
        return cls(relations, types, xs, int(width), edge_index, targets=targets)

    def ends(self) -> list[int]:
        """Each relation's source and destination type index, in pairs (the op's ``ends``)."""
        ends = []
        for (s, _, _), target in zip(self.relations, self.targets, strict=True):
            ends += [self.types.index(s), self.types.index(target)]
        return ends

    def destinations(self) -> list[str]:
        """The destination types, in the order PyG's ``HeteroConv`` fills its output dict."""
        return list(dict.fromkeys(d for _, _, d in self.relations))

    def into(self, t: str) -> list[Any]:
        """The keys of destination type ``t``'s rows: ``t``, or (split) one per relation."""
        return list(
            dict.fromkeys(k for e, k in zip(self.relations, self.targets, strict=True) if e[2] == t)
        )

    def padded(self, weight: torch.Tensor) -> torch.Tensor:
        """A ``[in, out]`` weight with zero rows up to the widest input (same products)."""
        if weight.shape[0] == self.width:
            return weight
        return torch.nn.functional.pad(weight, (0, 0, 0, self.width - weight.shape[0]))

    def per_type(self, values: Sequence[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
        """``[T, ...]``: each node type's sum of the relations' ``values`` that end in it."""
        rows = []
        for key in self.types:
            own = [v for k, v in zip(self.targets, values, strict=True) if k == key]
            rows.append(torch.stack(own).sum(0) if own else torch.zeros_like(like))
        return torch.stack(rows)


class Relations:
    """One class of per-relation conv as a Hector program: the checks, the program's name and
    tensors, and the layer's rows from its output."""

    cls_name = ""
    #: Whether a plan may decide without the widths (False: :meth:`call_unsupported` reads them).
    planned = True

    def reads_destinations(self, convs: list[Any]) -> bool:
        """Whether the convs read their destinations' features (attention, root weights)."""
        return True

    def per_relation(self, convs: list[Any]) -> bool:
        """Whether each relation's output needs rows of its own whatever the ``aggr``
        (:class:`Layout`'s ``split``): a nonlinearity per relation in :meth:`finish` (GIN's)."""
        return False

    def unsupported(self, convs: list[Any], training: bool) -> str | None:
        """Why these convs (all of :attr:`cls_name`) cannot run as one program (None: they can)."""
        raise NotImplementedError

    def call_unsupported(
        self, convs: list[Any], relations: list[EdgeType], x_dict: Any, kwargs: dict[str, Any]
    ) -> str | None:
        """Why the call's tensors are outside the program for these convs (None: they are not)."""
        return None

    def program(self, convs: list[Any], layout: Layout) -> str:
        """The program's name (``hetero-...:...``)."""
        raise NotImplementedError

    def tensors(self, convs: list[Any], layout: Layout) -> list[torch.Tensor]:
        """The program's tensors (rows first)."""
        raise NotImplementedError

    def with_edges(self, convs: list[Any], layout: Layout) -> None:
        """Give ``layout`` the edges the convs add to the call's (none here)."""

    def finish(
        self, convs: list[Any], layout: Layout, key: Any, rows: torch.Tensor
    ) -> torch.Tensor:
        """The output of the relations into ``key`` (:attr:`Layout.targets`) from its rows of
        the program's output (their sum)."""
        return rows


def differing(convs: list[Any], names: Sequence[str]) -> str | None:
    """Why these convs differ in an option that one program shares (None: they agree)."""
    first = convs[0]
    for name in names:
        if any(getattr(c, name) != getattr(first, name) for c in convs):
            return f"the relations' convs differ in {name} (one program shares it)"
    return None


def lazy(*lins: Any) -> bool:
    """Whether any of the linears ``lins`` has a lazy width (before its first call)."""
    return any(isinstance(lin.weight, torch.nn.parameter.UninitializedParameter) for lin in lins)


#: ``GATConv``/``GATv2Conv`` neighbourhood aggregations the programs compute, by what they do:
#: the coefficients' weighted sum, or that sum over the relation's in-degree (``:mean``).
GAT_AGGRS = {"add": "sum", "sum": "sum", "mean": "mean"}


class GatRelations(Relations):
    """``GATConv`` per relation (module docstring): program ``hetero-gat:<slope>``."""

    cls_name = "GATConv"

    def unsupported(self, convs: list[Any], training: bool) -> str | None:
        """Options outside the program: self-loops outside :mod:`hector.dynamo.pyg_gat_loops`,
        another ``aggr``, lazy widths (``return_attention_weights`` is not passed by
        ``HeteroConv``)."""
        reason = pyg_gat_loops.unsupported(convs)
        if reason is not None:
            return reason
        name = self.cls_name
        for c in convs:
            if not isinstance(c.aggr, str) or c.aggr not in GAT_AGGRS:
                return f"{name}(aggr={c.aggr!r}) (Hector's programs: sum or mean)"
            if lazy(*self.linears(c), *residuals([c])):
                return f"{name} with a lazy input width before its first call"
        if len({GAT_AGGRS[c.aggr] for c in convs}) > 1:
            return "the relations' convs differ in aggr (one program shares it)"
        return differing(convs, ("heads", "out_channels", "concat", "negative_slope"))

    @staticmethod
    def mean_suffix(convs: list[Any]) -> str:
        """``:mean`` where the convs average each relation's messages (``aggr="mean"``);
        ``:kept-mean`` where a conv adds self-loops: the program then takes each edge's
        factor (:func:`hector.dynamo.pyg_gat_loops.kept_mean_weights`), as the relation's own
        loops, which PyG removes, stay in its edges."""
        if GAT_AGGRS[convs[0].aggr] != "mean":
            return ""
        return ":kept-mean" if any(c.add_self_loops for c in convs) else ":mean"

    def with_mean_weights(
        self, convs: list[Any], layout: Layout, args: list[torch.Tensor]
    ) -> list[torch.Tensor]:
        """``args`` (bias last) with the mean's per-edge factors before the bias, where the
        program takes them (``:kept-mean``)."""
        if self.mean_suffix(convs) != ":kept-mean":
            return args
        loops = layout.loops or [0] * len(convs)
        rows = [layout.xs[t].shape[0] for t in layout.ends()[1::2]]
        weights = pyg_gat_loops.kept_mean_weights(convs, layout.edge_index, loops, rows, args[0])
        return [*args[:-1], weights, args[-1]]

    def linears(self, conv: Any) -> list[Any]:
        """The conv's input projections (one shared, or the source's and the destination's)."""
        return [conv.lin] if conv.lin is not None else [conv.lin_src, conv.lin_dst]

    def program(self, convs: list[Any], layout: Layout) -> str:
        """``hetero-gat:<slope>``, ``hetero-gat:<slope>:edge`` with edge features,
        ``hetero-gat:<slope>:dst`` with the destinations' terms per node
        (:mod:`hector.dynamo.pyg_hetero_dst`); each with ``:mean`` for ``aggr="mean"`` and
        ``:drop`` while a conv drops attention coefficients
        (:mod:`hector.dynamo.pyg_attention_dropout`)."""
        drop = pyg_attention_dropout.SUFFIX if pyg_attention_dropout.active(convs) else ""
        return self._program(convs, layout) + self.mean_suffix(convs) + drop

    def _program(self, convs: list[Any], layout: Layout) -> str:
        slope = float(convs[0].negative_slope)
        if self._edge_terms(convs, layout):
            return f"hetero-gat:{slope!r}:edge"
        # the rows' width from the convs (a plan's layout is built on stand-in widths)
        lins = [lin for c in convs for lin in (c.lin, c.lin_src, c.lin_dst) if lin is not None]
        width = max(int(lin.weight.shape[1]) for lin in lins)
        nodes = pyg_hetero_dst.applies(
            layout.ends()[1::2], len(layout.types), convs[0].heads, width
        )
        return f"hetero-gat:{slope!r}{':dst' if nodes else ''}"

    @staticmethod
    def _edge_terms(convs: list[Any], layout: Layout) -> bool:
        return any(layout.loops) or any(
            c.lin_edge is not None and e in layout.edge_attr
            for e, c in zip(layout.relations, convs, strict=True)
        )

    def with_edges(self, convs: list[Any], layout: Layout) -> None:
        """``add_self_loops``: the loops PyG appends, after each such relation's edges
        (:func:`hector.dynamo.pyg_gat_loops.append`; the relation's own loops, which PyG
        removes first, are kept and weighed out by their edge logits)."""
        rows = [layout.xs[t].shape[0] for t in layout.ends()]
        layout.loops = pyg_gat_loops.append(convs, layout.edge_index, rows)

    def _edge_logits(self, convs: list[Any], layout: Layout, like: torch.Tensor) -> torch.Tensor:
        """``[E, H]``: each edge's ``a_edge · lin_edge(edge_attr)``, relations concatenated in
        their order (zeros for a relation without edge features or ``edge_dim``, whose
        ``GATConv`` adds no edge term); on a looped relation, the appended loops' from their
        features (:func:`hector.dynamo.pyg_gat_loops.with_loop_features`) and ``-inf`` on its
        own loops, which PyG removes (their softmax weight is 0)."""
        parts = []
        loops = layout.loops or [0] * len(convs)
        for e, c, ei, n in zip(layout.relations, convs, layout.edge_index, loops, strict=True):
            attr = layout.edge_attr.get(e)
            if c.lin_edge is None or attr is None:
                logits = like.new_zeros(ei.shape[1], c.heads)
            else:
                attr = pyg_gat_loops.with_loop_features(attr, ei, n, c.fill_value) if n else attr
                rows = attr.view(-1, 1) if attr.dim() == 1 else attr
                att = block_diagonal(c.att_edge.unsqueeze(-1))[0]  # [H*F, H]
                logits = rows @ (c.lin_edge.weight.t() @ att)
            parts.append(pyg_gat_loops.logits(ei, n, logits) if n else logits)
        return torch.cat(parts)

    def tensors(self, convs: list[Any], layout: Layout) -> list[torch.Tensor]:
        """:meth:`edge_tensors`, as ``hetero-gat:<slope>:dst`` takes them where it runs, and
        with the dropout mask where a conv drops coefficients."""
        args = self.edge_tensors(convs, layout)
        if self._program(convs, layout).endswith(":dst"):
            args = pyg_hetero_dst.with_node_weights(args, layout.ends()[1::2])
        args = self.with_mean_weights(convs, layout, args)
        if not pyg_attention_dropout.active(convs):
            return args
        loops = layout.loops or [0] * len(convs)
        drop = pyg_gat_loops.dropout_masks(convs, layout.edge_index, loops, args[0])
        return pyg_attention_dropout.with_mask(args, drop)

    def edge_tensors(self, convs: list[Any], layout: Layout) -> list[torch.Tensor]:
        """``x, W_src [R, W, H*F], att_src [R, H*F, H], W_dst a_dst [R, W, H], bias [T, H*F]``
        (the bias zero with averaged heads: :meth:`finish` adds it after the mean)."""
        x = torch.cat(layout.xs)
        src = [(c.lin if c.lin is not None else c.lin_src).weight.t() for c in convs]
        dst = [(c.lin if c.lin is not None else c.lin_dst).weight.t() for c in convs]
        weight = torch.stack([layout.padded(w) for w in src])
        att_src = block_diagonal(torch.cat([c.att_src for c in convs]).unsqueeze(-1))
        att_dst = block_diagonal(torch.cat([c.att_dst for c in convs]).unsqueeze(-1))
        weight_att_dst = torch.stack([layout.padded(w) for w in dst]) @ att_dst
        args = [x, weight, att_src, weight_att_dst]
        if self._edge_terms(convs, layout):
            args.append(self._edge_logits(convs, layout, x))
        return [*args, self._bias(convs, layout, weight)]

    def _bias(self, convs: list[Any], layout: Layout, weight: torch.Tensor) -> torch.Tensor:
        zeros = weight.new_zeros(len(layout.types), weight.shape[-1])
        if not convs[0].concat or convs[0].bias is None:
            return zeros
        return layout.per_type([c.bias for c in convs], zeros[0])

    def finish(
        self, convs: list[Any], layout: Layout, key: Any, rows: torch.Tensor
    ) -> torch.Tensor:
        """Averaged heads: the mean of the ``[N, H, F]`` rows; then the residuals of the
        relations into ``key`` (``residual=True``: ``res(x_dst)``), then, with averaged heads,
        their biases: PyG's order after the heads are combined."""
        first = convs[0]
        into = [c for k, c in zip(layout.targets, convs, strict=True) if k == key]
        if not first.concat:
            rows = rows.view(rows.shape[0], first.heads, first.out_channels).mean(dim=1)
        x = layout.xs[layout.types.index(key)]
        for res in residuals(into):
            rows = rows + res(x[:, : res.weight.shape[1]])
        if first.concat or first.bias is None:
            return rows
        return rows + torch.stack([c.bias for c in into]).sum(0)


def residuals(convs: list[Any]) -> list[Any]:
    """The residual linears (``GATConv``/``GATv2Conv(residual=True)``'s ``res``) of ``convs``
    that have one."""
    return [c.res for c in convs if getattr(c, "res", None) is not None]


#: SAGEConv neighbourhood aggregations the program computes.
_SAGE_AGGRS = {"mean": "mean", "add": "sum", "sum": "sum", "max": "max"}


class SageRelations(Relations):
    """``SAGEConv`` per relation (module docstring): ``hetero-sage:<aggr>:<root>``."""

    cls_name = "SAGEConv"

    def lins(self, conv: Any) -> tuple[Any, Any]:
        """The neighbourhood's linear and the root's (None without root weight)."""
        return conv.lin_l, conv.lin_r if conv.root_weight else None

    def options(self, conv: Any) -> str | None:
        """Why this conv's own options are outside the program (None: they are not)."""
        if conv.normalize:
            return "SAGEConv(normalize=True) (per relation, before the sum)"
        if conv.project:
            return "SAGEConv(project=True)"
        return None

    def unsupported(self, convs: list[Any], training: bool) -> str | None:
        """Options outside the program: other aggregations, ``normalize``, ``project``."""
        for c in convs:
            if not isinstance(c.aggr, str) or c.aggr not in _SAGE_AGGRS:
                return f"{self.cls_name}(aggr={c.aggr!r}) (Hector's program: mean, sum or max)"
            reason = self.options(c)
            if reason is not None:
                return reason
            if lazy(*(lin for lin in self.lins(c) if lin is not None)):
                return f"{self.cls_name} with a lazy input width before its first call"
        return differing(convs, ("out_channels", "aggr"))

    def reads_destinations(self, convs: list[Any]) -> bool:
        """Only with root weights."""
        return self.lins(convs[0])[1] is not None

    def program(self, convs: list[Any], layout: Layout) -> str:
        """``hetero-sage:<mean|sum|max>:<0|1>``."""
        return f"hetero-sage:{_SAGE_AGGRS[convs[0].aggr]}:{int(self.reads_destinations(convs))}"

    def tensors(self, convs: list[Any], layout: Layout) -> list[torch.Tensor]:
        """``x, W_l [R, W, out], bias [T, out]`` and, with root weights, ``W_r`` summed per
        destination type ``[T, W, out]``."""
        lins = [self.lins(c) for c in convs]
        weight = torch.stack([layout.padded(lin.weight.t()) for lin, _ in lins])
        zeros = weight.new_zeros(weight.shape[-1])
        biases = [lin.bias if lin.bias is not None else zeros for lin, _ in lins]
        args = [torch.cat(layout.xs), weight, layout.per_type(biases, zeros)]
        if self.reads_destinations(convs):
            roots = [layout.padded(root.weight.t()) for _, root in lins]
            args.append(layout.per_type(roots, roots[0]))
        return args


class GraphConvRelations(SageRelations):
    """``GraphConv`` per relation: ``lin_rel`` of the aggregate plus ``lin_root`` of the
    destination (always: ``HeteroConv`` passes its features), the ``hetero-sage`` program."""

    cls_name = "GraphConv"

    def lins(self, conv: Any) -> tuple[Any, Any]:
        """``lin_rel`` and ``lin_root``."""
        return conv.lin_rel, conv.lin_root

    def options(self, conv: Any) -> str | None:
        """None: GraphConv's options are its aggregation and bias."""
        return None


class GcnRelations(Relations):
    """``GCNConv`` per relation (one node type at both ends, as PyG's ``GCNConv`` requires):
    ``hetero-gcn``, ``Σ_j c_ij W_r x_j + b_r`` over the relation's edges, whose coefficients
    ``c_ij`` are PyG's ``gcn_norm`` (self-loops, symmetric degree normalisation, the call's
    edge weights) computed in the captured graph (:func:`gcn_edges`), an ``[E, 1]`` input."""

    cls_name = "GCNConv"

    def reads_destinations(self, convs: list[Any]) -> bool:
        """No: a self-loop is an edge from the node's own (source) row."""
        return False

    def unsupported(self, convs: list[Any], training: bool) -> str | None:
        """Other aggregations or flows, a lazy width."""
        for c in convs:
            if c.aggr not in ("add", "sum"):
                return f"GCNConv(aggr={c.aggr!r}) (Hector's program sums)"
            if c.flow != "source_to_target":
                return f"GCNConv(flow={c.flow!r})"
            if lazy(c.lin):
                return "GCNConv with a lazy input width before its first call"
        return differing(convs, ("out_channels",))

    def program(self, convs: list[Any], layout: Layout) -> str:
        """``hetero-gcn``."""
        return "hetero-gcn"

    def tensors(self, convs: list[Any], layout: Layout) -> list[torch.Tensor]:
        """``x, W [R, W, out], c [E, 1], bias [T, out]``; puts each relation's edges with the
        self-loops ``gcn_norm`` adds in ``layout.edge_index``."""
        x = torch.cat(layout.xs)
        weight = torch.stack([layout.padded(c.lin.weight.t()) for c in convs])
        edges, coefficients = [], []
        for e, c, ei in zip(layout.relations, convs, layout.edge_index, strict=True):
            rows = layout.xs[layout.types.index(e[0])].shape[0]
            ei, w = gcn_edges(c, ei, layout.edge_weight.get(e), rows, x.dtype)
            edges.append(ei)
            coefficients.append(w)
        layout.edge_index = edges
        zeros = weight.new_zeros(weight.shape[-1])
        biases = layout.per_type([c.bias if c.bias is not None else zeros for c in convs], zeros)
        return [x, weight, torch.cat(coefficients).unsqueeze(-1), biases]


def gcn_edges(
    conv: Any, edge_index: torch.Tensor, weight: torch.Tensor | None, n: int, dtype: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """``GCNConv`` (or ``GCN2Conv``: ``improved=False``) ``conv``'s edges over ``n`` nodes
    and each one's coefficient, as PyG's ``gcn_norm`` computes them, in shapes that depend
    on the input's only (no graph break): with self-loops, a loop per node is appended and an
    existing loop's weight moves to it (the last one's, as PyG's indexed assignment, whose
    gradient reaches every loop edge of the node; the loop edge itself then weighs 0); without
    edge weights every edge and loop weighs 1 (PyG's ``improved`` then has no effect)."""
    cached = getattr(conv, "_cached_edge_index", None)
    if conv.normalize and conv.cached and cached is not None:
        return cached[0], cached[1]
    edges = edge_index.shape[1]
    ones = torch.ones(edges, dtype=dtype, device=edge_index.device)
    w = ones if weight is None else weight.to(dtype)
    if not conv.normalize:
        return edge_index, w
    if conv.add_self_loops:
        row, col = edge_index[0], edge_index[1]
        loop = row == col
        nodes = torch.arange(n, device=edge_index.device)
        if weight is None:
            loop_weight = torch.ones(n, dtype=dtype, device=edge_index.device)
        else:
            fill = w.new_full((1,), 2.0 if getattr(conv, "improved", False) else 1.0)
            position = torch.where(loop, torch.arange(edges, device=row.device), -1)
            last = position.new_full((n,), -1).scatter_reduce(0, row, position, "amax")
            loop_weight = torch.cat([w.detach(), fill])[torch.where(last >= 0, last, edges)]
            # PyG's indexed assignment passes a loop's gradient to each loop edge of its node
            through = torch.where(loop, w - w.detach(), 0.0)
            loop_weight = loop_weight + w.new_zeros(n).scatter_add(0, row, through)
        w = torch.cat([w.masked_fill(loop, 0.0), loop_weight])
        edge_index = torch.cat([edge_index, torch.stack([nodes, nodes])], dim=1)
    deg = w.new_zeros(n).scatter_add(0, edge_index[1], w)
    scale = deg.pow(-0.5)
    scale = scale.masked_fill(scale == float("inf"), 0.0)
    return edge_index, scale[edge_index[0]] * w * scale[edge_index[1]]


#: The per-relation conv classes routed, by class name.
RELATIONS: dict[str, Relations] = {
    r.cls_name: r
    for r in (
        GatRelations(),
        SageRelations(),
        GraphConvRelations(),
        GcnRelations(),
    )
}


def class_of(conv: Any) -> str | None:
    """The name of the routed class ``conv`` is (exactly: a subclass may compute otherwise)."""
    name = type(conv).__name__
    return (
        name if name in RELATIONS and type(conv).__module__.startswith("torch_geometric") else None
    )


def unrouted(convs: Sequence[Any]) -> str | None:
    """Why some of ``convs`` are of no class the programs compute (None: all are): the
    classes, a class of PyG's name defined elsewhere named with its module."""
    names = sorted(
        {
            f"{type(c).__name__} of {type(c).__module__}, not PyG's"
            if type(c).__name__ in RELATIONS
            else type(c).__name__
            for c in convs
            if class_of(c) is None
        }
    )
    return f"per-relation convs Hector does not route in HeteroConv: {names}" if names else None


def inputs_unsupported(layer: Any, x_dict: Any, edge_index_dict: Any) -> str | None:
    """Why the call's ``x_dict``/``edge_index_dict`` are outside the programs (None: they are
    not): integer ``[2, E]`` edges, ``[N, F]`` float32 features of every type they touch."""
    if not isinstance(x_dict, dict) or not isinstance(edge_index_dict, dict):
        return "HeteroConv called with other than (x_dict, edge_index_dict)"
    relations = [e for e, _ in call_relations(layer, edge_index_dict)]
    if not relations:
        return "no relation of the layer in edge_index_dict"
    for e in relations:
        ei = edge_index_dict[e]
        if not isinstance(ei, torch.Tensor) or ei.dim() != 2 or ei.is_floating_point():
            return f"edge_index_dict[{e}] is not an integer [2, E] tensor"
        if ei.layout != torch.strided:
            return f"edge_index_dict[{e}] is a sparse adjacency"
        for t in (e[0], e[2]):
            x = x_dict.get(t)
            if not isinstance(x, torch.Tensor) or x.dtype != torch.float32 or x.dim() != 2:
                return f"x_dict[{t!r}] is not a [N, F] float32 tensor"
    return None


def unsupported(layer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """Why ``HeteroConv`` ``layer`` called with ``args``/``kwargs`` cannot run one Hector
    program (None: it can)."""
    if set(kwargs) - set(_KWARGS) or len(args) != 2:
        return f"HeteroConv called with arguments beyond x_dict, edge_index_dict, {_KWARGS}"
    if not hasattr(layer, "combine") and layer.aggr not in (*SUMMED, *REDUCED):
        return f"HeteroConv(aggr={layer.aggr!r})"
    reason = inputs_unsupported(layer, *args)
    if reason is not None:
        return reason
    convs = [c for _, c in call_relations(layer, args[1])]
    classes = {class_of(c) for c in convs}
    if None in classes:
        return unrouted(convs)
    if len(classes) > 1:
        return f"mixed per-relation conv classes {sorted(str(c) for c in classes)}"
    cls = str(classes.pop())
    reason = _edge_data_unsupported(layer, cls, args[1], kwargs)
    reason = reason or RELATIONS[cls].unsupported(convs, layer.training)
    relations = [e for e, _ in call_relations(layer, args[1])]
    return reason or RELATIONS[cls].call_unsupported(convs, relations, args[0], kwargs)


#: The conv classes that read each keyword argument, and its tensors' dimensions.
_EDGE_DATA = {
    "edge_attr_dict": (("GATConv", "GATv2Conv", "GINEConv"), (1, 2)),
    "edge_weight_dict": (("GCNConv", "GCN2Conv"), (1,)),
}
#: The classes of one node set (PyG's convs fail on a pair of node types).
_ONE_NODE_SET = ("GCNConv", "GCN2Conv")


def _edge_data_unsupported(
    layer: Any, cls: str, edge_index_dict: Any, kwargs: dict[str, Any]
) -> str | None:
    """Why the call's ``edge_attr_dict``/``edge_weight_dict`` are outside the programs, its
    ``x_0_dict`` given to another class than ``GCN2Conv``, or its relations outside those of
    ``GCNConv`` or ``GCN2Conv`` (None: they are not)."""
    relations = [e for e, _ in call_relations(layer, edge_index_dict)]
    if cls in _ONE_NODE_SET and any(s != d for s, _, d in relations):
        return f"{cls} on a relation between two node types (PyG's {cls} takes one)"
    for name, values in kwargs.items():
        if values is None:
            continue
        if name == "x_0_dict":  # node features: the class's call_unsupported reads them
            if cls != "GCN2Conv":
                return f"x_0_dict given to {cls} (its forward takes no x_0)"
            continue
        readers, dims = _EDGE_DATA[name]
        if not isinstance(values, dict):
            return f"{name} is not a dict"
        if cls not in readers:  # none for the call's relations: the convs are given none
            if any(e in values for e in relations):
                return f"{name} given to {cls} (the program takes none)"
            continue
        if any(t in values for e in relations for t in (e[0], e[2])):
            return f"{name} keyed by node type"
        for e, value in values.items():
            if e not in layer.convs:
                continue
            if e not in edge_index_dict:
                return f"{name} holds {e}, edge_index_dict does not"
            rows = edge_index_dict[e].shape[1]
            if not isinstance(value, torch.Tensor) or value.dtype != torch.float32:
                return f"{name}[{e}] is not a float32 tensor"
            if value.dim() not in dims or value.shape[0] != rows:
                return f"{name}[{e}] is not one row per edge"
    return None


def run_program(
    layer: Any,
    x_dict: dict[str, Any],
    edge_index_dict: dict[Any, Any],
    edge_attr_dict: Any = None,
    edge_weight_dict: Any = None,
    x_0_dict: Any = None,
) -> dict[str, torch.Tensor]:
    """The layer's output per destination type from one ``hector::pyg_layer`` call: ``layer``
    has ``HeteroConv``'s ``convs`` (by edge type) and ``aggr`` (and may have ``combine``,
    reducing a destination type's per-relation outputs for an ``aggr`` other than a sum or
    mean), and :func:`unsupported` found nothing against the call
    (:mod:`hector.dynamo.pyg_to_hetero` calls it for ``to_hetero``)."""
    convs = [c for _, c in call_relations(layer, edge_index_dict)]
    relations = RELATIONS[str(class_of(convs[0]))]
    dst = relations.reads_destinations(convs)
    layout = Layout.of(layer, x_dict, edge_index_dict, dst, split(layer, relations, convs))
    layout.edge_attr = edge_attr_dict or {}
    layout.edge_weight = edge_weight_dict or {}
    layout.x0 = x_0_dict or {}
    relations.with_edges(convs, layout)
    tensors = relations.tensors(convs, layout)
    out = torch.ops.hector.pyg_layer(
        relations.program(convs, layout),
        pyg_route._train(tensors),
        layout.edge_index,
        [x.shape[0] for x in layout.xs],
        layout.ends(),
        tensors,
    )
    return _split(layer, relations, convs, layout, out)


def _split(
    layer: Any, relations: Relations, convs: list[Any], layout: Layout, out: torch.Tensor
) -> dict[str, torch.Tensor]:
    """The destination types' rows of the program's output, as PyG's ``HeteroConv`` returns
    them (``aggr="mean"``: over the call's relations into each type; other than a sum or
    mean: each relation's rows, reduced by ``layer.combine`` or PyG's ``group``).

    One ``unsafe_split`` of the output: its backward is one ``cat`` (a slice's is a zero
    tensor of the whole output per type, summed), and its pieces take in-place ops as PyG's
    separate outputs do (PyG's ``relu_()``): autograd refuses those on the views of a
    ``split``, and on slices one piece's ``relu_`` bumps the version of every piece another
    ``relu_`` saved. The op saves none of its output for its backward, so nothing reads the
    rows a piece's in-place op overwrites."""
    pieces = out.unsafe_split_with_sizes([x.shape[0] for x in layout.xs])
    rows = dict(zip(layout.types, pieces, strict=True))
    result = {}
    for t in layout.destinations():
        parts = [relations.finish(convs, layout, k, rows[k]) for k in layout.into(t)]
        result[t] = combined(layer, parts, sum(1 for _, _, d in layout.relations if d == t))
    return result


def split(layer: Any, relations: Relations, convs: list[Any]) -> bool:
    """Whether the call's layout gives each relation's destination rows of its own
    (:class:`Layout`'s ``split``): the layer's ``aggr`` is not summed in the program, or the
    class needs each relation's output (:meth:`Relations.per_relation`)."""
    return layer.aggr not in SUMMED or relations.per_relation(convs)


def combined(layer: Any, parts: list[torch.Tensor], count: int) -> torch.Tensor:
    """One destination type's output from its rows, ``parts`` (one per relation into it where
    the layout is split, else their sum), by the layer's ``aggr`` over ``count`` relations."""
    if layer.aggr not in SUMMED:
        return reduced(layer, parts)
    total = parts[0]
    for part in parts[1:]:  # per-relation rows (GIN's): summed in the layer's order
        total = total + part
    return total / count if layer.aggr == "mean" else total


def reduced(layer: Any, parts: list[torch.Tensor]) -> torch.Tensor:
    """One destination type's output from its relations' (in the layer's order)."""
    combine = getattr(layer, "combine", None)
    if combine is not None:
        return combine(parts)
    from torch_geometric.nn.conv.hetero_conv import group

    return group(parts, layer.aggr)
