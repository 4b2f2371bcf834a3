"""PyG's ``to_hetero`` models under ``torch.compile(backend="hector")``: one program per layer.

``torch_geometric.nn.to_hetero`` turns a homogeneous model (``GraphSAGE``, ``GAT``, a user's
own stack of ``SAGEConv``/``GATConv``/``GraphConv``) into a ``torch.fx.GraphModule``: each
message passing layer becomes one copy of its conv per edge type (submodules
``conv1.author__writes__paper``), each called with the relation's features (``x`` or
``(x_src, x_dst)``) and ``edge_index``, and the outputs into each destination type are
combined by the model's ``aggr`` (``"sum"``: a chain of ``torch.add`` in pairs; ``"mean"``: the
same chain and a ``torch.div`` by the relation count; ``"max"``, ``"min"``, ``"mul"``: chains
of ``torch.max``, ``torch.min``, ``torch.mul``).

That is a ``HeteroConv`` spelt out node by node, so the route here hands each such layer to
:mod:`hector.dynamo.pyg_hetero`'s program (one ``hector::pyg_layer`` call over one typed graph):

* **Where.** Every ``GraphModule`` call goes through ``torch.fx``'s ``_WrappedCall``, which
  :func:`install` wraps. While Dynamo traces a call for a Hector backend
  (:func:`hector.dynamo.pyg_route._hector_is_compiling`), the wrapper asks
  :func:`_grouped_ready` (run natively, its answer a constant of the trace) for the model's
  *grouped* twin and Dynamo traces that instead: the rest of the model (trimming, norms,
  activations, dropout, heads) is the user's graph, node for node, in the same Dynamo graph.
  Eager calls and other backends run the model unchanged.
* **What.** :func:`group_layers` finds, in a copy of the model's graph, each layer's calls of
  per-relation convs (one per edge type of the model, consecutive, each called with features and
  ``edge_index``, optionally ``edge_attr``/``edge_weight`` by keyword, or third positionally
  where the conv's ``forward`` names that parameter so: ``GINEConv``; ``GCN2Conv``'s ``x_0``,
  second, goes on by node type as ``HeteroConv``'s ``x_0_dict``) and the nodes that
  combine them, and replaces them by one call of a :class:`ToHeteroLayer` (sharing the convs,
  so gradients reach their parameters) and one ``getitem`` per destination type; each run of
  per-type ``Linear`` copies becomes one typed linear
  (:func:`hector.dynamo.pyg_typed_linear.group_linears`). Sums and means
  are the program's; a ``max``/``min``/``mul`` layer's program computes each relation's output
  apart and :meth:`ToHeteroLayer.combine` chains them after it as ``to_hetero`` does (the same
  pairs, so ties split their gradient as ``torch.max`` of two does).
  The twin is kept on the model's own ``GraphModule`` class (each instance has its own) and
  rebuilt only when the model's code or submodules change.
* **Fallbacks.** A layer whose structure is not one ``aggr`` over all its relations
  (positional extra arguments, different combining functions) stays as the model wrote it; a
  layer :func:`hector.dynamo.pyg_hetero.unsupported` declines at trace time (a class or option
  outside the programs, node features that differ between relations, edge weights to a conv
  other than ``GCNConv``, an absent ``edge_index``) runs the per-relation convs and combines
  them as ``to_hetero`` does. The
  reason is kept in :data:`hector.dynamo.pyg_route.FALLBACKS` under ``to_hetero <layer> (<conv
  class>)`` (shown by :func:`hector.explain`).

``to_hetero_with_bases`` models have no per-relation convs to group: their layers
(``HeteroBasisConv``) are routed by class, :mod:`hector.dynamo.pyg_bases`.
"""

from __future__ import annotations

import copy
import inspect
import operator
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from . import pyg_hetero, pyg_hetero_plan, pyg_route, pyg_typed_linear

EdgeType = tuple[str, str, str]

#: Keyword arguments of a per-relation conv call the layer passes on (``None`` at run time
#: unless the call's dicts hold them).
_EXTRAS = ("edge_attr", "edge_weight")
#: Node features a conv takes second (``GCN2Conv(x, x_0, edge_index)``): passed on by node
#: type, as ``HeteroConv``'s ``x_0_dict``.
_NODE_EXTRAS = ("x_0",)
#: ``to_hetero``'s combining functions, by its ``aggr`` name (``"mean"``: ``add``, then ``div``).
_COMBINERS: dict[str, Callable[..., Any]] = {
    "sum": torch.add,
    "max": torch.max,
    "min": torch.min,
    "mul": torch.mul,
}


class ToHeteroLayer(torch.nn.Module):
    """One ``to_hetero`` layer: its per-relation convs (shared with the model) and ``aggr``, as
    :mod:`~hector.dynamo.pyg_hetero` reads a ``HeteroConv`` (``convs`` by edge type, ``aggr``,
    ``training``: the convs')."""

    def __init__(self, label: str, relations: list[EdgeType], convs: list[Any], aggr: str) -> None:
        """``label`` names the layer in fallback reasons; ``convs[i]`` is ``relations[i]``'s."""
        from torch_geometric.nn.module_dict import ModuleDict

        super().__init__()
        self.label = label
        self.relations = list(relations)
        self.convs = ModuleDict(dict(zip(relations, convs, strict=True)))
        self.aggr = aggr

    @property
    def training(self) -> bool:
        """The convs' mode (``model.train()``/``eval()`` set theirs, not this twin's)."""
        return bool(self.convs[self.relations[0]].training)

    @training.setter
    def training(self, mode: bool) -> None:
        pass

    def forward(
        self, xs: tuple[Any, ...], edge_indices: tuple[Any, ...], extras: tuple[Any, ...]
    ) -> Any:
        """The destination types' outputs: ``xs[i]``, ``edge_indices[i]`` and the keyword
        arguments ``extras[i]`` are what the model passes ``relations[i]``'s conv."""
        x_dict, reason = self._features(xs)
        edge_index_dict = dict(zip(self.relations, edge_indices, strict=True))
        kwargs, extra_reason = self._keyword_dicts(extras)
        reason = reason or extra_reason
        copies = reason is None and _copies(x_dict)
        if copies and "x_0_dict" in kwargs:
            reason = "x_0 given with [B, N, F] features (a static graph)"
            copies = 0
        if copies:  # a static graph: [B, N, F] features over one graph, as B copies of it
            x_dict, edge_index_dict, kwargs = _as_copies(copies, x_dict, edge_index_dict, kwargs)
        if reason is None and not copies and not kwargs and torch.compiler.is_compiling():
            # the decision and layout outside Dynamo's trace (pyg_hetero_plan), where it routes
            key = pyg_hetero_plan.call_key(x_dict, edge_index_dict)
            plan = pyg_hetero_plan.plan_of(self, self.training, key)
            if plan is not None:
                return pyg_hetero_plan.run_planned(self, plan, x_dict, edge_index_dict)
        reason = reason or pyg_hetero.unsupported(self, (x_dict, edge_index_dict), kwargs)
        relations = pyg_hetero.call_relations(self, edge_index_dict)
        reason = reason or pyg_hetero_plan.widths_unsupported(relations, x_dict)
        if reason is not None:
            pyg_route.record_fallback(self.label, reason)
            return self._per_relation(xs, edge_indices, extras)
        out = pyg_hetero.run_program(self, x_dict, edge_index_dict, **kwargs)
        return {t: v.view(copies, -1, v.shape[-1]) for t, v in out.items()} if copies else out

    def _keyword_dicts(self, extras: tuple[Any, ...]) -> tuple[dict[str, Any], str | None]:
        """The relations' keyword arguments as ``HeteroConv``'s dicts: ``edge_attr``,
        ``edge_weight`` by edge type, ``x_0`` by the relation's (source) node type; and why
        not (a node type given different ``x_0`` by two relations)."""
        kwargs: dict[str, Any] = {}
        for e, extra in zip(self.relations, extras, strict=True):
            for name, value in extra.items():
                if value is None:
                    continue
                into = kwargs.setdefault(f"{name}_dict", {})
                key = e[0] if name in _NODE_EXTRAS else e
                if into.setdefault(key, value) is not value:
                    return kwargs, f"node type {key!r} has another {name} in another relation"
        return kwargs, None

    def combine(self, parts: list[Any]) -> Any:
        """One destination type's output from its relations' (in the model's order), as
        ``to_hetero`` combines them: in pairs from the front of a queue, each result to its
        back (then divided by the count for ``"mean"``)."""
        queue = list(parts)
        fn = _COMBINERS["sum" if self.aggr == "mean" else self.aggr]
        while len(queue) >= 2:
            queue.append(fn(queue.pop(0), queue.pop(0)))
        if self.aggr == "mean" and len(parts) > 1:
            return torch.div(queue[0], len(parts))
        return queue[0]

    def _features(self, xs: tuple[Any, ...]) -> tuple[dict[str, Any], str | None]:
        """Each node type's features (from the first relation that has it), and why they are
        not one per type (relations given different tensors of one type: trimmed per hop)."""
        x_dict: dict[str, Any] = {}
        reason = None
        for (s, _, d), x in zip(self.relations, xs, strict=True):
            pair = x if isinstance(x, tuple) else (x, x)
            for t, v in ((s, pair[0]), (d, pair[1])):
                if t not in x_dict:
                    x_dict[t] = v
                elif x_dict[t] is not v:
                    reason = reason or f"node type {t!r} has other features in another relation"
        return x_dict, reason

    def _per_relation(
        self, xs: tuple[Any, ...], edge_indices: tuple[Any, ...], extras: tuple[Any, ...]
    ) -> dict[str, Any]:
        """The layer as ``to_hetero`` writes it: each relation's conv, combined per destination
        type (:meth:`combine`)."""
        parts: dict[str, list[Any]] = {}
        for e, x, ei, extra in zip(self.relations, xs, edge_indices, extras, strict=True):
            conv = self.convs[e]
            if "x_0" in extra:  # GCN2Conv(x, x_0, edge_index, ...): x_0 second, as written
                rest = {k: v for k, v in extra.items() if k != "x_0"}
                parts.setdefault(e[2], []).append(conv(x, extra["x_0"], ei, **rest))
            else:
                parts.setdefault(e[2], []).append(conv(x, ei, **extra))
        return {dst: self.combine(queue) for dst, queue in parts.items()}


def _copies(x_dict: dict[str, Any]) -> int:
    """``B`` where every node type's features are ``[B, N, F]`` with one ``B`` (else 0)."""
    xs = list(x_dict.values())
    if not xs or not all(isinstance(x, torch.Tensor) and x.dim() == 3 for x in xs):
        return 0
    copies = {x.shape[0] for x in xs}
    return int(xs[0].shape[0]) if len(copies) == 1 else 0


def _as_copies(
    copies: int, x_dict: dict[str, Any], edge_index_dict: dict[Any, Any], kwargs: dict[str, Any]
) -> tuple[dict[str, Any], dict[Any, Any], dict[str, Any]]:
    """The call over ``copies`` copies of the graph: each type's ``[B, N, F]`` features as
    ``[B·N, F]`` rows (copy ``b`` at ``b·N``), each relation's edges once per copy, at its
    types' offsets, and its edge data repeated."""
    rows = {t: x.shape[1] for t, x in x_dict.items()}
    flat = {t: x.reshape(-1, x.shape[2]) for t, x in x_dict.items()}
    edges = {}
    for (s, r, d), ei in edge_index_dict.items():
        b = torch.arange(copies, device=ei.device).view(1, -1, 1)
        shift = torch.stack([b * rows[s], b * rows[d]]).view(2, copies, 1)
        edges[(s, r, d)] = (ei.unsqueeze(1) + shift).reshape(2, -1)
    data = {
        name: {e: v.repeat(copies, *([1] * (v.dim() - 1))) for e, v in values.items()}
        for name, values in kwargs.items()
    }
    return flat, edges, data


# -- finding the layers ---------------------------------------------------------------------


@dataclass
class LayerCalls:
    """One layer's per-relation conv call nodes (in the graph's order) and what combines them."""

    prefix: str  # the ModuleDict of the per-relation convs (``convs.0``)
    calls: list[torch.fx.Node]
    relations: list[EdgeType]
    combine: list[torch.fx.Node] = field(default_factory=list)  # add/div nodes, in order
    outputs: dict[str, torch.fx.Node] = field(default_factory=dict)  # per destination type
    aggr: str = "sum"


def _edge_types(graph: torch.fx.Graph) -> list[EdgeType]:
    """The model's edge types: the keys ``to_hetero``'s code reads from its edge dicts."""
    found: dict[EdgeType, None] = {}
    for n in graph.nodes:
        if n.op == "call_method" and n.target == "get" and len(n.args) >= 2:
            key = n.args[1]
            if isinstance(key, tuple) and len(key) == 3 and all(isinstance(k, str) for k in key):
                found[key] = None
    return list(found)


def _type_keys(graph: torch.fx.Graph, edge_types: list[EdgeType]) -> set[str]:
    """The names ``to_hetero`` gives a module's per-type copies: the node types its code reads
    from its node dicts, and its edge types joined by ``__``."""
    from torch_geometric.nn.to_hetero_transformer import key2str

    keys = {key2str(e) for e in edge_types}
    for n in graph.nodes:
        if n.op == "call_method" and n.target == "get" and len(n.args) >= 2:
            if isinstance(n.args[1], str):
                keys.add(n.args[1])
    return keys


def _is_to_hetero(graph: torch.fx.Graph) -> bool:
    transformer = sys.modules.get("torch_geometric.nn.to_hetero_transformer")
    get_dict = getattr(transformer, "get_dict", None)
    return get_dict is not None and any(
        n.op == "call_function" and n.target is get_dict for n in graph.nodes
    )


def _conv_calls(
    gm: torch.fx.GraphModule, graph: torch.fx.Graph, edge_types: list[EdgeType]
) -> list[LayerCalls]:
    """The per-relation conv calls of ``graph`` (a copy of ``gm``'s), one :class:`LayerCalls`
    per layer call: consecutive calls of one ModuleDict's convs, each relation's once."""
    from torch_geometric.nn.conv import MessagePassing
    from torch_geometric.nn.to_hetero_transformer import key2str

    by_key = {key2str(e): e for e in edge_types}
    layers: list[LayerCalls] = []
    for n in graph.nodes:
        if n.op != "call_module":
            continue
        prefix, _, key = str(n.target).rpartition(".")
        if key not in by_key or not isinstance(gm.get_submodule(n.target), MessagePassing):
            continue
        last = layers[-1] if layers else None
        if last is None or last.prefix != prefix or len(last.calls) == len(edge_types):
            last = LayerCalls(prefix, [], [])
            layers.append(last)
        last.calls.append(n)
        last.relations.append(by_key[key])
    return layers


def _third_by_name(layer: LayerCalls, convs: list[Any]) -> None:
    """Pass a conv call's third positional argument by its name where the conv's ``forward``
    names it ``edge_attr`` or ``edge_weight`` (``GINEConv(x, edge_index, edge_attr)`` as PyG's
    models write it): the same call, in the form the layer reads (the graph is the twin's)."""
    for n, conv in zip(layer.calls, convs, strict=True):
        names = list(inspect.signature(type(conv).forward).parameters)[1:]
        if len(n.args) == 3 and len(names) > 2 and names[2] in _EXTRAS and names[2] not in n.kwargs:
            n.kwargs = {**n.kwargs, names[2]: n.args[2]}
            n.args = n.args[:2]


def _initial_by_name(layer: LayerCalls, convs: list[Any]) -> None:
    """Pass the initial features of a conv whose ``forward`` takes them second
    (``GCN2Conv(x, x_0, edge_index, edge_weight)``, as GCNII models write it) by name, and
    its edge weights after ``edge_index`` too: the call as :func:`_replace` reads it, ``(x,
    edge_index)`` and keywords."""
    for n, conv in zip(layer.calls, convs, strict=True):
        names = list(inspect.signature(type(conv).forward).parameters)[1:]
        if len(names) < 3 or names[1] not in _NODE_EXTRAS or not 3 <= len(n.args) <= 4:
            continue
        named = {names[1]: n.args[1], **({names[3]: n.args[3]} if len(n.args) == 4 else {})}
        if set(named) & set(n.kwargs):
            continue
        n.kwargs = {**n.kwargs, **named}
        n.args = (n.args[0], n.args[2])


def _layer_unsupported(layer: LayerCalls, edge_types: list[EdgeType]) -> str | None:
    """Why these calls are not one layer over all relations that one call can replace."""
    if sorted(layer.relations) != sorted(edge_types):
        return "the per-relation conv calls do not cover each relation once"
    allowed = {*_EXTRAS, *_NODE_EXTRAS}
    for n in layer.calls:
        if len(n.args) != 2 or set(n.kwargs) - allowed:
            names = sorted(set(n.kwargs) - allowed)
            return (
                f"a conv called with arguments beyond (x, edge_index, {'/'.join(_EXTRAS)}) {names}"
            )
    return _combination(layer)


def _combination(layer: LayerCalls) -> str | None:
    """Find the nodes combining the layer's calls (``add``, ``max``, ``min`` or ``mul`` of two,
    ``div`` by a count) and its output per destination type; why they are not one ``aggr``
    over each type's relations."""
    members = set(layer.calls)
    start = layer.calls[-1]
    aggrs = {fn: name for name, fn in _COMBINERS.items()}
    functions, divided = set(), False
    for n in list(start.graph.nodes)[list(start.graph.nodes).index(start) + 1 :]:
        if n.op != "call_function" or not any(_member(a, members) for a in n.args):
            continue
        pair = len(n.args) == 2 and not n.kwargs and all(_member(a, members) for a in n.args)
        if n.target in aggrs and pair:
            functions.add(n.target)
        elif n.target is torch.div and _member(n.args[0], members) and isinstance(n.args[1], int):
            divided = True
        else:
            continue
        layer.combine.append(n)
        members.add(n)
    if len(functions) > 1 or (divided and functions - {torch.add}):
        return "relations combined by different functions in one layer"
    layer.aggr = "mean" if divided else aggrs[functions.pop()] if functions else "sum"
    feeds = {n: {e} for n, e in zip(layer.calls, layer.relations, strict=True)}
    for n in layer.combine:
        feeds[n] = set().union(*(feeds[a] for a in n.args if isinstance(a, torch.fx.Node)))
    for n in [*layer.calls, *layer.combine]:
        inside = [u for u in n.users if u in members]
        if inside and len(n.users) > 1:
            return "a conv's output is used beyond its destination type's sum"
        if not inside:
            dsts = {e[2] for e in feeds[n]}
            want = {e for e in layer.relations if e[2] in dsts}
            if len(dsts) != 1 or feeds[n] != want:
                return "an output combines relations into several node types, or not all of one"
            layer.outputs[dsts.pop()] = n
    return None if _means_consistent(layer, feeds) else "a sum and a mean in one layer"


def _member(arg: Any, members: set[torch.fx.Node]) -> bool:
    """Whether a node's argument is one of ``members`` (arguments may be lists, slices, ...)."""
    return isinstance(arg, torch.fx.Node) and arg in members


def _means_consistent(layer: LayerCalls, feeds: dict[torch.fx.Node, set[EdgeType]]) -> bool:
    """Whether each output is divided by its relation count exactly when the layer averages."""
    for n in layer.outputs.values():
        count = len(feeds[n])
        divided = n.op == "call_function" and n.target is torch.div
        if divided and n.args[1] != count:
            return False
        if count > 1 and divided != (layer.aggr == "mean"):
            return False
    return True


@dataclass
class Grouping:
    """A model's grouped twin (None: no layer to group) and the layers left as written."""

    module: torch.fx.GraphModule | None
    declined: dict[str, str]
    signature: tuple[Any, ...]


def group_layers(gm: torch.fx.GraphModule) -> Grouping:
    """The twin of ``to_hetero`` model ``gm`` with each layer one :class:`ToHeteroLayer` call."""
    graph = copy.deepcopy(gm.graph)
    declined: dict[str, str] = {}
    edge_types = _edge_types(graph)
    layers: dict[str, torch.nn.Module] = {}
    for calls in _conv_calls(gm, graph, edge_types) if edge_types else []:
        convs = [gm.get_submodule(str(n.target)) for n in calls.calls]
        label = f"to_hetero {calls.prefix} ({type(convs[0]).__name__})"
        _initial_by_name(calls, convs)
        _third_by_name(calls, convs)
        reason = _layer_unsupported(calls, edge_types)
        if reason is not None:
            declined[label] = reason
            continue
        target = f"hector_layer_{len(layers)}"
        layers[target] = ToHeteroLayer(label, calls.relations, convs, calls.aggr)
        _replace(graph, calls, target)
    layers.update(pyg_typed_linear.group_linears(gm, graph, _type_keys(graph, edge_types), 0))
    if not layers:
        return Grouping(None, declined, _signature(gm))
    graph.lint()
    root: dict[str, Any] = dict(layers)
    for n in graph.nodes:
        if n.op in ("call_module", "get_attr") and n.target not in root:
            root[str(n.target)] = operator.attrgetter(str(n.target))(gm)
    module = torch.fx.GraphModule(root, graph, class_name="HectorToHetero")
    type(module)._hector_twin = True  # type: ignore[attr-defined]
    return Grouping(module, declined, _signature(gm))


def _replace(graph: torch.fx.Graph, layer: LayerCalls, target: str) -> None:
    """One ``target`` call for the layer's calls and combining nodes, a ``getitem`` per type."""
    xs = tuple(n.args[0] for n in layer.calls)
    edge_indices = tuple(n.args[1] for n in layer.calls)
    extras = tuple(dict(n.kwargs) for n in layer.calls)
    with graph.inserting_after(layer.calls[-1]):
        call = graph.call_module(target, (xs, edge_indices, extras))
    for dst, node in reversed(list(layer.outputs.items())):
        with graph.inserting_after(call):
            node.replace_all_uses_with(graph.call_function(operator.getitem, (call, dst)))
    for n in reversed([*layer.calls, *layer.combine]):
        graph.erase_node(n)


def _signature(gm: torch.fx.GraphModule) -> tuple[Any, ...]:
    """What the twin depends on: the model's code and the modules its graph calls."""
    targets = [n.target for n in gm.graph.nodes if n.op == "call_module"]
    return (gm.code, *(id(gm.get_submodule(str(t))) for t in targets))


# -- the hook -------------------------------------------------------------------------------


@torch._dynamo.assume_constant_result
def _grouped_ready(gm: Any) -> bool:
    """Whether ``gm`` has a grouped twin (then ``type(gm)._hector_grouped``), built or rebuilt
    here when its code or submodules changed. Runs natively while Dynamo traces (its answer is
    a constant of the trace); records the reasons of the layers left as written."""
    cls = type(gm)
    if not isinstance(gm, torch.fx.GraphModule) or cls.__dict__.get("_hector_twin", False):
        return False
    cached = cls.__dict__.get("_hector_grouping")
    signature = _signature(gm)
    if cached is None or cached.signature != signature:
        if _is_to_hetero(gm.graph):
            try:
                cached = group_layers(gm)
            except Exception as err:  # a graph the analysis misreads: the model runs as written
                reason = f"the model's graph could not be grouped ({err!r})"
                cached = Grouping(None, {"to_hetero": reason}, signature)
        else:
            cached = Grouping(None, {}, signature)
        cls._hector_grouping = cached
        cls._hector_grouped = cached.module
    pyg_route.FALLBACKS.update(cached.declined)
    return cached.module is not None


def _routing_forward(original: Callable[..., Any]) -> Callable[..., Any]:
    """A ``to_hetero`` model class's ``forward``: the grouped twin's while Dynamo traces it for
    a Hector backend, ``original`` otherwise."""

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling() and pyg_route._hector_is_compiling():
            if _grouped_ready(self):
                return type(self)._hector_grouped.forward(*args, **kwargs)
        return original(self, *args, **kwargs)

    forward.__wrapped__ = original  # type: ignore[attr-defined]
    forward.__doc__ = original.__doc__
    forward._hector_routes = True  # type: ignore[attr-defined]
    return forward


def route(gm: Any) -> bool:
    """Give ``gm``'s class (each ``GraphModule`` has its own) the routing ``forward`` when ``gm``
    is a ``to_hetero`` (or ``to_hetero_with_bases``) model; whether it has it. Cheap when
    ``gm`` was seen before (its ``forward`` unchanged since)."""
    cls = type(gm)
    forward = cls.__dict__.get("forward")
    if forward is None or cls.__dict__.get("_hector_twin", False):
        return False
    if getattr(forward, "_hector_routes", False):
        return True
    if cls.__dict__.get("_hector_checked") is forward:
        return False
    transformers = [
        sys.modules.get(f"torch_geometric.nn.{name}")
        for name in ("to_hetero_transformer", "to_hetero_with_bases_transformer")
    ]
    marks = {id(v) for m in transformers if m is not None for v in vars(m).values()}
    if not any(id(v) in marks for v in getattr(forward, "__globals__", {}).values()):
        cls._hector_checked = forward
        return False
    cls.forward = _routing_forward(forward)
    return True


@torch._dynamo.assume_constant_result
def _route_while_tracing(gm: Any) -> bool:
    """:func:`route`, run natively while Dynamo traces a call of ``gm``, before it reads
    ``gm.forward``."""
    return route(gm)


_ORIGINAL_CALL: list[Callable[..., Any]] = []


def _call(self: Any, obj: Any, *args: Any, **kwargs: Any) -> Any:
    """``torch.fx``'s ``_WrappedCall.__call__``, which every ``GraphModule`` call runs but the
    ones Dynamo inlines from a parent module (it calls their ``_call_impl``): routes
    ``to_hetero`` models (:func:`route`) and runs the call. Traced by Dynamo (the model compiled
    whole), it calls the model's ``_call_impl`` as Dynamo does for a submodule: the original is
    a ``torch.fx`` function Dynamo does not trace."""
    if torch.compiler.is_compiling():
        _route_while_tracing(obj)
        if self.cls_call is not None:
            return self.cls_call(obj, *args, **kwargs)
        return obj._call_impl(*args, **kwargs)
    route(obj)
    return _ORIGINAL_CALL[0](self, obj, *args, **kwargs)


def install() -> None:
    """Wrap ``torch.fx``'s ``GraphModule`` call (idempotent)."""
    from torch.fx import graph_module

    if not _ORIGINAL_CALL:
        _ORIGINAL_CALL.append(graph_module._WrappedCall.__call__)
        graph_module._WrappedCall.__call__ = _call  # type: ignore[method-assign]


install()
