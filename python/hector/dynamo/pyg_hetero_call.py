"""A ``HeteroConv`` call as PyG users make it, bound to Hector's programs.

``HeteroConv.forward(*args_dict, **kwargs_dict)`` hands each relation's conv the entries of
every dict keyed by its edge type: positional dicts as positional arguments after ``x`` and
``edge_index`` (PyG's tests pass ``data.edge_attr_dict`` that way), keyword dicts by their name
less ``_dict``. And one layer may hold convs of several classes (PyG's test and examples mix
``GCNConv``, ``SAGEConv`` and ``GATConv``). This module is the ``HeteroConv`` route's entry:

* **Binding** (:func:`bound`): a third positional dict becomes the keyword each relation's conv
  names its third parameter (``GATConv``: ``edge_attr``; ``GCNConv``/``GraphConv``:
  ``edge_weight``), so the programs read it as they read ``edge_attr_dict`` and
  ``edge_weight_dict``. A positional dict keyed by node type, or read as another parameter
  (``SAGEConv``'s ``size``), runs PyG's forward with the reason. ``GCN2Conv``'s call,
  ``(x_dict, x_0_dict, edge_index_dict)``, has its second dict moved to the keyword
  ``x_0_dict`` first (:func:`initial_bound`; :mod:`hector.dynamo.pyg_gcn2` reads it).
* **Class groups** (:func:`run_groups`): a layer whose convs are of several routed classes
  runs one :func:`hector.dynamo.pyg_hetero.run_program` per class (each over the typed graph of
  its relations), combined by the layer's ``aggr``: a sum adds the groups' sums, a mean
  divides that by the number of the call's relations into the type, and every other ``aggr``
  takes each relation's output (the programs' split layout) and reduces them in the layer's
  relation order with PyG's ``group``, as PyG's forward does.

A single class runs one program (:mod:`hector.dynamo.pyg_hetero`); what neither computes runs
PyG's own forward, the reason kept in :data:`hector.dynamo.pyg_route.FALLBACKS`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from . import (
    pyg_gatv2,  # noqa: F401  (registers GATv2Conv's relations with pyg_hetero)
    pyg_gcn2,  # noqa: F401  (registers GCN2Conv's relations with pyg_hetero)
    pyg_gin,  # noqa: F401  (registers GINConv's relations with pyg_hetero)
    pyg_gine,  # noqa: F401  (registers GINEConv's relations with pyg_hetero)
    pyg_han,  # noqa: F401  (routes HANConv: its relations run pyg_hetero's GAT program)
    pyg_hetero,
    pyg_hetero_plan,
    pyg_route,
)
from .pyg_hetero import EdgeType, call_relations

#: Each conv parameter a third positional dict may fill, and the keyword dict the programs read.
_THIRD = {"edge_attr": "edge_attr_dict", "edge_weight": "edge_weight_dict"}


def _parameters(conv: Any) -> list[str]:
    """The names of ``conv.forward``'s parameters, ``self`` left out."""
    return list(inspect.signature(type(conv).forward).parameters)[1:]


def _third_parameter(conv: Any) -> str | None:
    """The name of the parameter ``conv.forward`` takes after ``x`` and ``edge_index`` (and
    ``GCN2Conv``'s ``x_0`` between them)."""
    names = [n for n in _parameters(conv) if n != "x_0"]
    return names[2] if len(names) > 2 else None


def initial_bound(
    layer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]] | str:
    """``GCN2Conv``'s call, ``(x_dict, x_0_dict, edge_index_dict, ...)``: the second dict (keyed
    by node type) moved to the keyword ``x_0_dict``, where every relation's conv takes ``x_0``
    second; other calls as they are; or why it cannot be (a ``x_0_dict`` keyword of the
    caller's: PyG hands it to ``x_0`` after ``edge_index`` took that place, and fails)."""
    if "x_0_dict" in kwargs:
        return "HeteroConv called with the keyword x_0_dict (GCN2Conv takes x_0 second)"
    if len(args) < 3 or not all(isinstance(a, dict) for a in args[:3]):
        return (args, kwargs)
    if not args[1] or any(isinstance(k, tuple) for k in args[1]):
        return (args, kwargs)
    if not all(isinstance(k, tuple) for k in args[2]):
        return "HeteroConv called with a third dict not keyed by edge type (not edge_index_dict)"
    relations = call_relations(layer, args[2])
    if any(_parameters(conv)[1:2] != ["x_0"] for _, conv in relations):
        return "HeteroConv called with a second dict keyed by node type (not edge_index_dict)"
    return ((args[0], *args[2:]), {**kwargs, "x_0_dict": args[1]})


def bound(
    layer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]] | str:
    """``(x_dict, edge_index_dict)`` and the keyword dicts of ``layer``'s call, ``x_0_dict``
    (:func:`initial_bound`) and a third positional dict moved to the keyword its convs read it
    as; or why it cannot be."""
    binding = initial_bound(layer, args, kwargs)
    if isinstance(binding, str):
        return binding
    args, kwargs = binding
    if len(args) != 3 or not isinstance(args[2], dict) or not isinstance(args[1], dict):
        return (args, kwargs)
    x_dict, edge_index_dict, third = args
    if not all(isinstance(k, tuple) for k in edge_index_dict):  # GCN2Conv's (x, x_0, edges)
        return "HeteroConv called with a second dict keyed by node type (not edge_index_dict)"
    moved = {k: dict(v) if isinstance(v, dict) else v for k, v in kwargs.items()}
    for e, conv in call_relations(layer, edge_index_dict):
        if e not in third:
            if e[0] in third or e[2] in third:
                return "HeteroConv called with a positional dict keyed by node type"
            continue
        name = _third_parameter(conv)
        if name not in _THIRD:
            return f"{type(conv).__name__} reads a third positional dict as {name!r}"
        values = moved.setdefault(_THIRD[name], {})
        if not isinstance(values, dict) or e in values:
            return f"{name} of {e} given twice"
        values[e] = third[e]
    return ((x_dict, edge_index_dict), moved)


@dataclass
class ClassGroup:
    """The relations of one conv class in a layer of several, as a layer of its own: what
    :func:`hector.dynamo.pyg_hetero.run_program` reads of a ``HeteroConv``."""

    convs: dict[EdgeType, Any]
    aggr: Any
    training: bool
    relations: list[EdgeType] = field(default_factory=list)
    #: Other than a sum or mean: each relation's output kept (the layer reduces them).
    combine: Callable[[list[torch.Tensor]], Any] = list


def class_groups(layer: Any, edge_index_dict: dict[Any, Any]) -> list[ClassGroup] | None:
    """The call's relations grouped by their convs' routed class, in the layer's order (None:
    one class, or a conv of a class no program computes)."""
    by_class: dict[str, ClassGroup] = {}
    summed = layer.aggr in pyg_hetero.SUMMED
    for e, conv in call_relations(layer, edge_index_dict):
        cls = pyg_hetero.class_of(conv)
        if cls is None:
            return None
        aggr = "sum" if summed else layer.aggr
        group = by_class.setdefault(cls, ClassGroup({}, aggr, layer.training))
        group.convs[e] = conv
        group.relations.append(e)
    return list(by_class.values()) if len(by_class) > 1 else None


def _group_kwargs(group: ClassGroup, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's keyword dicts restricted to ``group``'s relations (None where it has none)."""
    out = {}
    for name, values in kwargs.items():
        if not isinstance(values, dict):
            out[name] = values
            continue
        own = {e: v for e, v in values.items() if e in group.convs}
        out[name] = own or None
    return out


def groups_unsupported(
    layer: Any, groups: list[ClassGroup], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> str | None:
    """Why a layer of several classes cannot run one program per class (None: it can)."""
    if hasattr(layer, "combine"):
        return "mixed per-relation conv classes in a to_hetero layer"
    if layer.aggr not in (*pyg_hetero.SUMMED, *pyg_hetero.REDUCED):
        return f"HeteroConv(aggr={layer.aggr!r})"
    for values in kwargs.values():
        if isinstance(values, dict) and any(not isinstance(k, tuple) for k in values):
            return "edge data keyed by node type"
    for group in groups:
        reason = pyg_hetero.unsupported(group, args, _group_kwargs(group, kwargs))
        if reason is not None:
            return f"{type(next(iter(group.convs.values()))).__name__} relations: {reason}"
    return None


def run_groups(
    layer: Any, groups: list[ClassGroup], x_dict: Any, edge_index_dict: Any, **kwargs: Any
) -> dict[str, torch.Tensor]:
    """The layer's output per destination type: one program per class group, combined by the
    layer's ``aggr`` (module docstring)."""
    parts: dict[EdgeType, torch.Tensor] = {}
    sums: dict[str, list[torch.Tensor]] = {}
    for group in groups:
        out = pyg_hetero.run_program(group, x_dict, edge_index_dict, **_group_kwargs(group, kwargs))
        for t, value in out.items():
            if isinstance(value, list):  # each relation's output, in the group's order
                into = [e for e in group.relations if e[2] == t]
                parts.update(zip(into, value, strict=True))
            else:
                sums.setdefault(t, []).append(value)
    order = [e for e, _ in call_relations(layer, edge_index_dict)]
    result = {}
    for t in dict.fromkeys(e[2] for e in order):
        if sums:
            total = torch.stack(sums[t]).sum(0)
            count = sum(1 for e in order if e[2] == t)
            result[t] = total / count if layer.aggr == "mean" else total
        else:
            result[t] = pyg_hetero.reduced(layer, [parts[e] for e in order if e[2] == t])
    return result


def _decide(
    layer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[str | None, tuple[Any, ...], dict[str, Any], list[ClassGroup] | None]:
    """Why the call runs PyG's forward (None: it does not), the call bound, its class groups."""
    binding = bound(layer, args, kwargs)
    if isinstance(binding, str):  # the layer's classes first: dicts no program would read
        return pyg_hetero.unrouted(list(layer.convs.values())) or binding, args, kwargs, None
    args, kwargs = binding
    if len(args) != 2 or pyg_hetero.inputs_unsupported(layer, *args) is not None:
        return pyg_hetero.unsupported(layer, args, kwargs), args, kwargs, None
    groups = class_groups(layer, args[1])
    if groups is None:
        reason = pyg_hetero.unsupported(layer, args, kwargs)
    else:
        reason = groups_unsupported(layer, groups, args, kwargs)
    # features of another width than a conv reads: PyG's forward raises, as eager does
    reason = reason or pyg_hetero_plan.widths_unsupported(call_relations(layer, args[1]), args[0])
    return reason, args, kwargs, groups


def _planned(layer: Any, args: tuple[Any, ...]) -> pyg_hetero_plan.Plan | None:
    """The plan of ``layer``'s call on ``args`` while Dynamo traces it (None: not tracing,
    dicts of other than tensors, or a call the plan does not route)."""
    if not torch.compiler.is_compiling():
        return None
    x_dict, edge_index_dict = args
    if not isinstance(x_dict, dict) or not isinstance(edge_index_dict, dict):
        return None
    key = pyg_hetero_plan.call_key(x_dict, edge_index_dict)
    return pyg_hetero_plan.plan_of(layer, layer.training, key)


def hetero_conv_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
    """``HeteroConv.forward`` under the Hector backend: the call bound (:func:`bound`), then
    one ``hector::pyg_layer`` call, or one per conv class; PyG's own ``forward`` where neither
    computes it, with the reason. Under Dynamo, a call of ``(x_dict, edge_index_dict)`` alone
    takes its decision and layout from a plan made outside the trace
    (:mod:`hector.dynamo.pyg_hetero_plan`), where that routes it."""
    if len(args) == 2 and all(v is None for v in kwargs.values()):
        plan = _planned(self, args)
        if plan is not None:
            return pyg_hetero_plan.run_planned(self, plan, *args)
    reason, bound_args, bound_kwargs, groups = _decide(self, args, kwargs)
    if reason is not None:
        pyg_route.record_fallback("HeteroConv", reason)
        return pyg_route._ORIGINAL["HeteroConv"](self, *args, **kwargs)
    x_dict, edge_index_dict = bound_args
    if groups is not None:
        return run_groups(self, groups, x_dict, edge_index_dict, **bound_kwargs)
    return pyg_hetero.run_program(self, x_dict, edge_index_dict, **bound_kwargs)


pyg_route.register_layer("HeteroConv", hetero_conv_forward)
