"""A ``HeteroConv`` call's structure decided outside Dynamo's trace, and its GAT weight glue as
one op: what keeps the capture of a routed layer short.

Dynamo runs the route's Python (:mod:`hector.dynamo.pyg_hetero_call`'s decision,
:class:`hector.dynamo.pyg_hetero.Layout`, the per-relation weight glue) by interpreting it
bytecode by bytecode, a thousand times slower than Python runs it: for MLPerf's R-GAT (3 layers
of 8 relations) that was seconds of every capture. Two things take it out of the trace:

* **The plan** (:class:`Plan`, :func:`plan_of`): the decision (route or not) and the layer's
  typed graph (its relations, node types, which types' rows are read, the widest input, each
  relation's ends, the program's name, the destinations' keys) depend only on the layer and on
  the call's structure: the dicts' keys, and each tensor's dtype, rank, layout and whether it
  takes a gradient (:func:`call_key`, which the trace computes with a few attribute reads). The
  features' widths are not in the key: :func:`run_planned` reads them in the trace and raises
  where one is not the width a relation's conv reads (:func:`widths_unsupported`: its source's,
  and its destination's where the conv reads that), as eager PyG does.
  :func:`plan_of` is ``torch._dynamo.assume_constant_result``:
  Dynamo runs it as plain Python at trace time, on the layer itself and that key (the key's
  tensors rebuilt as ``meta`` tensors for the decision's checks), and bakes its result, a frozen
  dataclass of constants, into the graph. Guards stay those of the key's reads (the tensors'
  metadata, the layer's ``training``) and the layer's identity. A call
  the plan does not route (a fallback, convs of several classes, a class whose decision reads
  the widths: ``GINConv``, ``Relations.planned``) goes the traced way, so its reason and guards
  are as before; so do calls with edge data or a third positional dict.
* **The glue** (:func:`gat_weights`, op ``hector::hetero_gat_weights``): ``GATConv``'s weights
  stacked and padded, the attention vectors as block-diagonal matrices, ``W_dst a_dst`` and the
  biases summed per destination type, as one ``CompositeImplicitAutograd`` op: Dynamo records
  one node (its output shapes from running the same PyTorch code on fake tensors), and when the
  graph runs, the op runs those PyTorch ops under autograd, so gradients reach each conv's
  parameters as before, with the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..models import block_diagonal
from . import pyg_attention_dropout, pyg_hetero_dst


@dataclass(frozen=True)
class Plan:
    """One routed call's typed graph, as constants (:class:`hector.dynamo.pyg_hetero.Layout`'s
    structure without its tensors)."""

    cls: str  #: the per-relation conv class (``pyg_hetero.RELATIONS`` key)
    names: tuple[str, ...]  #: each relation's conv's attribute name in ``layer.convs``
    relations: tuple[Any, ...]  #: the call's edge types, in the layer's order
    types: tuple[Any, ...]  #: node type keys (split: ``(type, relation index)`` after sources)
    sources: tuple[Any, ...]  #: each key's ``x_dict`` type
    read: tuple[bool, ...]  #: whether each key's rows are its features (else zeros)
    touched: tuple[Any, ...]  #: the node types the relations touch (the widest of their rows)
    targets: tuple[Any, ...]  #: each relation's destination key
    ends: tuple[int, ...]  #: each relation's source and destination key index
    program: str  #: the program's name
    destinations: tuple[tuple[Any, tuple[Any, ...], int], ...]  #: (type, its keys, relations)


def call_key(x_dict: dict[Any, Any], edge_index_dict: dict[Any, Any]) -> tuple[Any, ...]:
    """The call's structure :func:`plan_of` decides on (run inside Dynamo's trace: a few
    attribute reads per tensor): each dict's keys with :func:`tensor_key` of its values."""
    return (
        tuple((k, tensor_key(v)) for k, v in x_dict.items()),
        tuple((k, tensor_key(v)) for k, v in edge_index_dict.items()),
    )


def tensor_key(value: Any) -> Any:
    """``(dtype, rank, layout, requires_grad)`` of a tensor, the type's name of anything else
    (no size: the sizes stay symbolic under ``dynamic=True``)."""
    if not isinstance(value, torch.Tensor):
        return type(value).__name__
    return (value.dtype, value.dim(), value.layout, value.requires_grad)


class _StandIn:
    """A non-tensor value of a call's dicts, for the decision's checks (a tensor it is not)."""


def _rebuilt(spec: Any) -> Any:
    """A ``meta`` tensor with the metadata :func:`tensor_key` kept (or a stand-in)."""
    if not isinstance(spec, tuple):
        return _StandIn()
    dtype, rank, layout, grad = spec
    if layout != torch.strided:
        return _StandIn()
    return torch.empty((2,) * rank, dtype=dtype, device="meta").requires_grad_(grad)


@torch._dynamo.assume_constant_result
def plan_of(layer: Any, training: bool, key: tuple[Any, ...]) -> Plan | None:
    """The :class:`Plan` of ``layer`` (a ``HeteroConv`` or a ``to_hetero`` layer, a module)
    called on dicts of structure ``key`` (:func:`call_key`), or None where the call does not
    run one program (a fallback, several conv classes): run by Dynamo as plain Python, its
    result a constant of the graph (module docstring). ``training``: the layer's, read in the
    trace (so that the graph is guarded on it)."""
    from . import pyg_hetero

    x_dict = {k: _rebuilt(v) for k, v in key[0]}
    edge_index_dict = {k: _rebuilt(v) for k, v in key[1]}
    args = (x_dict, edge_index_dict)
    if pyg_hetero.unsupported(layer, args, {}) is not None:
        return None
    convs = [c for _, c in pyg_hetero.call_relations(layer, edge_index_dict)]
    cls = str(pyg_hetero.class_of(convs[0]))
    relations = pyg_hetero.RELATIONS[cls]
    if not relations.planned or any(getattr(c, "add_self_loops", False) for c in convs):
        return None  # (self-loops: the traced way adds them, GatRelations.with_edges)
    dst = relations.reads_destinations(convs)
    split = pyg_hetero.split(layer, relations, convs)
    layout = pyg_hetero.Layout.of(layer, x_dict, edge_index_dict, dst, split)
    modules = layer.convs._modules.items()
    names = tuple(next(k for k, m in modules if m is c) for c in convs)
    return _plan(cls, names, layout, relations.program(convs, layout), dst)


def _plan(cls: str, names: tuple[str, ...], layout: Any, program: str, dst: bool) -> Plan:
    """The :class:`Plan` of ``layout`` (built on the call's meta tensors; ``dst``: whether the
    convs read their destinations' rows), as :meth:`hector.dynamo.pyg_hetero.Layout.of` lays
    the rows out."""
    sources = tuple(k[0] if isinstance(k, tuple) else k for k in layout.types)
    read_types = {e[0] for e in layout.relations} | (
        {e[2] for e in layout.relations} if dst else set()
    )
    read = tuple(k in read_types if isinstance(k, str) else dst for k in layout.types)
    destinations = tuple(
        (t, tuple(layout.into(t)), sum(1 for e in layout.relations if e[2] == t))
        for t in layout.destinations()
    )
    return Plan(
        cls,
        names,
        tuple(layout.relations),
        tuple(layout.types),
        sources,
        read,
        tuple(dict.fromkeys(t for e in layout.relations for t in (e[0], e[2]))),
        tuple(layout.targets),
        tuple(layout.ends()),
        program,
        destinations,
    )


# -- the traced part ------------------------------------------------------------------------


def _readers(conv: Any) -> tuple[Any, Any] | None:
    """The linears a routed ``conv``'s forward applies to its relation's source rows and to
    its destination rows (None there: it reads no destination features), or None for a class
    whose widths this module does not check (``GINEConv``'s are its ``call_unsupported``)."""
    name = type(conv).__name__
    if name == "GATConv":
        return (conv.lin_src, conv.lin_dst) if conv.lin is None else (conv.lin, conv.lin)
    if name == "GATv2Conv":
        return (conv.lin_l, conv.lin_r)
    if name == "SAGEConv":
        return (conv.lin if conv.project else conv.lin_l, conv.lin_r if conv.root_weight else None)
    if name == "GraphConv":
        return (conv.lin_rel, conv.lin_root)
    if name == "GCNConv":  # one node type at both ends: the source's width is the destination's
        return (conv.lin, None)
    return None


def widths_unsupported(relations: list[tuple[Any, Any]], x_dict: dict[Any, Any]) -> str | None:
    """Why the call's features are not as wide as the relations' convs read them (None: they
    are): each ``(edge type, conv)``'s source rows the input width of the linear its forward
    applies to them (``in_channels``, or its first where a pair), and its destination rows that
    of the one it applies to them (the pair's second: ``GATConv``'s ``lin_dst``, ``GATv2Conv``'s
    ``lin_r``, ``SAGEConv``'s root weight, ``GraphConv``'s ``lin_root``), where it reads them.
    The program pads rows to the widest input, so it would run on such features where eager PyG
    refuses the product; a conv that never reads its destination's features (``SAGEConv``
    without root weight) takes them at any width, as in PyG."""
    for edge, conv in relations:
        readers = _readers(conv)
        for end, lin in zip(("source", "destination"), readers or (None, None), strict=True):
            if lin is None or isinstance(lin.weight, torch.nn.parameter.UninitializedParameter):
                continue
            wanted, node = lin.weight.shape[1], edge[0] if end == "source" else edge[2]
            got = x_dict[node].shape[-1]
            if got != wanted:
                return (
                    f"HeteroConv relation {edge}: {type(conv).__name__} takes {wanted}-wide "
                    f"{end} features, got {node!r} features {got} wide"
                )
    return None


def run_planned(
    layer: Any, plan: Plan, x_dict: dict[Any, Any], edge_index_dict: dict[Any, Any]
) -> dict[Any, torch.Tensor]:
    """The layer's output per destination type from one ``hector::pyg_layer`` call laid out
    by ``plan`` (:func:`hector.dynamo.pyg_hetero.run_program`'s, without its decisions)."""
    from . import pyg_hetero, pyg_route

    convs = [getattr(layer.convs, name) for name in plan.names]
    reason = widths_unsupported(list(zip(plan.relations, convs, strict=True)), x_dict)
    if reason is not None:  # the widths are not in the plan's key: refused in the trace
        raise ValueError(reason)
    pad = torch.nn.functional.pad
    width = max(x_dict[t].shape[1] for t in plan.touched)
    xs = []
    for source, read in zip(plan.sources, plan.read, strict=True):
        x = x_dict[source]
        if not read:
            xs.append(x.new_zeros(x.shape[0], width))
        else:  # no copy at full width: the program's cat is the one
            xs.append(x if x.shape[1] == width else pad(x, (0, width - x.shape[1])))
    edges = [edge_index_dict[e] for e in plan.relations]
    layout = pyg_hetero.Layout(
        list(plan.relations), list(plan.types), xs, width, edges, targets=list(plan.targets)
    )
    relations = pyg_hetero.RELATIONS[plan.cls]
    if plan.cls == "GATConv":
        tensors = _gat_tensors(convs, plan, xs, width, edges)
    else:
        tensors = relations.tensors(convs, layout)
    out = torch.ops.hector.pyg_layer(
        plan.program,
        pyg_route._train(tensors),
        layout.edge_index,
        [x.shape[0] for x in xs],
        list(plan.ends),
        tensors,
    )
    pieces = out.unsafe_split_with_sizes([x.shape[0] for x in xs])
    rows = dict(zip(plan.types, pieces, strict=True))
    result = {}
    for t, keys, count in plan.destinations:
        parts = [relations.finish(convs, layout, k, rows[k]) for k in keys]
        result[t] = pyg_hetero.combined(layer, parts, count)
    return result


def _gat_tensors(
    convs: list[Any], plan: Plan, xs: list[torch.Tensor], width: Any, edges: list[torch.Tensor]
) -> list[torch.Tensor]:
    """``GATConv``'s program tensors (``pyg_hetero.GatRelations.tensors``, no edge features):
    the rows' ``cat`` in the graph (``pyg_inputs.fold`` rewrites it), the weights one
    :func:`gat_weights` op, the dropout mask over the relations' ``edges`` where one drops."""
    lins = [(c.lin, c.lin) if c.lin is not None else (c.lin_src, c.lin_dst) for c in convs]
    first = convs[0]
    biases = [c.bias for c in convs] if first.concat and first.bias is not None else []
    weights = torch.ops.hector.hetero_gat_weights(
        width,
        list(plan.ends[1::2]),
        len(plan.types),
        [src.weight for src, _ in lins],
        [dst.weight for _, dst in lins],
        [c.att_src for c in convs],
        [c.att_dst for c in convs],
        biases,
    )
    tensors = [torch.cat(xs), *weights]
    flags = plan.program.split(":")[2:]
    if "dst" in flags:  # the destinations' terms per node
        tensors = pyg_hetero_dst.with_node_weights(tensors, plan.ends[1::2])
    if "drop" in flags:  # attention dropout in training: PyG's masks, drawn as it draws them
        ps = pyg_attention_dropout.probabilities(convs)
        drop = pyg_attention_dropout.mask(ps, edges, convs[0].heads, tensors[0])
        tensors = pyg_attention_dropout.with_mask(tensors, drop)
    return tensors


_LIB = torch.library.Library("hector", "FRAGMENT")
_LIB.define(
    "hetero_gat_weights(SymInt width, int[] targets, int types, Tensor[] src, Tensor[] dst, "
    "Tensor[] att_src, Tensor[] att_dst, Tensor[] bias) -> Tensor[]"
)


def gat_weights(
    width: int,
    targets: list[int],
    types: int,
    src: list[torch.Tensor],
    dst: list[torch.Tensor],
    att_src: list[torch.Tensor],
    att_dst: list[torch.Tensor],
    bias: list[torch.Tensor],
) -> list[torch.Tensor]:
    """``[W_src [R, W, H*F], att_src [R, H*F, H], W_dst a_dst [R, W, H], bias [T, H*F]]`` of
    the relations' ``GATConv`` parameters (``lin_src``/``lin_dst`` weights ``[H*F, in]``,
    ``att_* [1, H, F]``), each input zero-padded to ``width`` rows, each relation's bias summed
    into its destination key ``targets[r]`` of ``types`` (zeros with no ``bias``): op
    ``hector::hetero_gat_weights`` (``CompositeImplicitAutograd``: these PyTorch ops, under
    autograd)."""
    pad = torch.nn.functional.pad

    def padded(w: torch.Tensor) -> torch.Tensor:
        return w if w.shape[0] == width else pad(w, (0, 0, 0, width - w.shape[0]))

    weight = torch.stack([padded(w.t()) for w in src])
    a_src = block_diagonal(torch.cat(att_src).unsqueeze(-1))
    a_dst = block_diagonal(torch.cat(att_dst).unsqueeze(-1))
    weight_att_dst = torch.stack([padded(w.t()) for w in dst]) @ a_dst
    zeros = weight.new_zeros(types, weight.shape[-1])
    if not bias:
        return [weight, a_src, weight_att_dst, zeros]
    rows = []
    for key in range(types):
        own = [b for t, b in zip(targets, bias, strict=True) if t == key]
        rows.append(torch.stack(own).sum(0) if own else torch.zeros_like(zeros[0]))
    return [weight, a_src, weight_att_dst, torch.stack(rows)]


_LIB.impl("hetero_gat_weights", gat_weights, "CompositeImplicitAutograd")
