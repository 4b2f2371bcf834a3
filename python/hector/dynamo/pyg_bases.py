"""PyG's ``to_hetero_with_bases`` layers under ``torch.compile(backend="hector")``: one program.

``torch_geometric.nn.to_hetero_with_bases`` turns a homogeneous model into a
``torch.fx.GraphModule`` over one *grouped* graph: the node types' features concatenated in the
metadata's order (after ``LinearAlign``, a bias-free ``Linear`` per type, where ``in_channels``
names the argument), the relations' ``edge_index`` tensors concatenated with the node types'
offsets, and an ``edge_type`` vector (each edge's relation). Each message passing layer becomes
a ``HeteroBasisConv``: ``B`` copies of the conv (the bases), each with coefficients
``edge_type_weight`` ``[1, R]`` and a message-forward hook that scales each edge's message by
its relation's coefficient; the bases' outputs are summed. For ``SAGEConv`` and ``GraphConv``
(a linear of the aggregated messages plus a linear of the node's own row) that is one
relational layer over all incoming edges of all relations at once:

``h'_i = Σ_b [ W_b · aggr_{j→i} (a_{r(j,i),b} w_ji x_j) + R_b x_i + c_b ]
= aggr_{j→i} (w_ji W_{r(j,i)} x_j) + (Σ_b R_b) x_i + Σ_b c_b``, ``W_r = Σ_b a_{r,b} W_b``

for ``aggr`` a sum or a mean (the mean over all of ``i``'s incoming edges, whatever their
relation, as PyG's grouped graph computes it) and ``w_ji`` ``GraphConv``'s edge weight (1
without). ``GINEConv`` with one linear ``nn`` (``W_b``, ``c_b``) and no ``edge_dim`` is the same
with the message ``relu(x_j + e_ji)`` and the root ``Σ_b (1 + ε_b) W_b``. ``GINConv`` (any
``nn``, nonlinear per basis) runs :mod:`hector.dynamo.pyg_bases_gin`'s program of the relations'
sums instead, each basis' ``nn`` as written. Under a Hector
backend ``HeteroBasisConv``'s ``forward`` (routed through
:func:`hector.dynamo.pyg_route.register_layer`) composes ``W_r``, the summed root weight and
bias in PyTorch ops of the captured graph (so autograd takes the gradients to each basis'
weights and to the coefficients) and runs one ``hector::pyg_layer`` op over the grouped graph
(``[edge_index, edge_type]``, one node set, ``R`` relations): ``hetero-bases:<mean|sum>``,
``:w`` with edge weights (:func:`_bases_program`). Features with a batch dimension
``[B, N, F]`` (a static graph) run as ``B`` copies of the graph in one call.

Declined layers run PyG's own ``forward`` *outside* Dynamo (a graph break at the layer): under
``torch.compile`` PyG's generated ``propagate`` skips message-forward hooks
(``not is_compiling()``), so a traced ``HeteroBasisConv`` would compute without its
coefficients. The reason is kept in :data:`hector.dynamo.pyg_route.FALLBACKS` under
``to_hetero_with_bases (<conv class>)``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import torch

from ..frontends import compiled as frontend
from ..frontends.graph_api import GraphProxy, Value
from . import pyg_bases_gin, pyg_route

#: The PyG module defining ``HeteroBasisConv`` (and the hook that scales its messages).
_PYG_MODULE = "torch_geometric.nn.to_hetero_with_bases_transformer"
#: The program of each neighbourhood aggregation computed.
_PROGRAMS = {"mean": "hetero-bases:mean", "add": "hetero-bases:sum", "sum": "hetero-bases:sum"}
#: Each routed conv's ``forward`` parameters after ``(x, edge_index)``.
_PARAMETERS = {
    "SAGEConv": ("size",),
    "GraphConv": ("edge_weight", "size"),
    "GINEConv": ("edge_attr", "size"),
    "GINConv": ("size",),
}
#: ``MessagePassing``'s hook dicts: a hook in one runs code a program does not.
HOOK_DICTS = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_propagate_forward_pre_hooks",
    "_propagate_forward_hooks",
    "_message_forward_pre_hooks",
    "_message_forward_hooks",
    "_aggregate_forward_pre_hooks",
    "_aggregate_forward_hooks",
    "_message_and_aggregate_forward_pre_hooks",
    "_message_and_aggregate_forward_hooks",
)
#: Those but the message-forward hooks, which hold the basis hook (checked on its own).
_HOOK_DICTS = tuple(d for d in HOOK_DICTS if d != "_message_forward_hooks")


def _bases_program(mean: bool, weighted: bool, gine: bool = False) -> frontend.CompiledFunction:
    """``h'_i = aggr_{j→i} (w_ji W_{r(j,i)} h_j) + W_0 h_i + b``: the sum or the mean over all
    of ``i``'s incoming edges (any relation), each edge's relation weight applied, and with
    ``weighted`` its edge weight ``w [E, 1]`` (``GraphConv``'s ``edge_weight``); with ``gine``
    each message is ``relu(h_j + e_ji)`` (``GINEConv``'s, ``e [E, F]``) before the weight."""

    def bases_layer(g: GraphProxy, x: Value, weight: Value, root: Value, *rest: Value) -> Value:
        src = (g.gather_src(x) + rest[1]).relu() if gine else g.gather_src(x)
        msg = g.typed_linear(src, weight)
        msg = msg * rest[1] if weighted else msg
        msg = msg * g.degree_norm("dst") if mean else msg
        return g.sum_to_dst(msg) + g.linear(x, root) + rest[0]

    names = ["g", "x", "weight", "root", "bias"] + (["edge_weight"] if weighted else [])
    names += ["edge_attr"] if gine else []
    return frontend.compile_with_arguments(bases_layer, names)


_COMPILED: dict[str, frontend.CompiledFunction] = {}


def _compiled(name: str) -> frontend.CompiledFunction:
    """The program named ``name``: ``hetero-bases:<mean|sum>``, ``:w`` with edge weights."""
    if name not in _COMPILED:
        kind, *rest = name.split(":")
        known = (["mean"], ["sum"], ["mean", "w"], ["sum", "w"], ["sum", "e"])
        if kind != "hetero-bases" or rest not in known:
            raise ValueError(f"unknown to_hetero_with_bases program {name!r}")
        _COMPILED[name] = _bases_program(rest[0] == "mean", rest[1:] == ["w"], rest[1:] == ["e"])
    return _COMPILED[name]


def _columns(name: str, tensors: list[torch.Tensor]) -> Any:
    return tensors[1].shape[-1]


# -- the convs --------------------------------------------------------------------------------


def _lins(conv: Any) -> tuple[Any, Any]:
    """The conv's linear of the aggregated messages and of the node's own row (None: none)."""
    if type(conv).__name__ == "SAGEConv":
        return conv.lin_l, conv.lin_r if conv.root_weight else None
    if type(conv).__name__ == "GINEConv":  # the root's weight is nn's, (1 + ε) times: tensors()
        return conv.nn, None
    if type(conv).__name__ == "GINConv":  # nn as written (pyg_bases_gin): no linear here
        return None, None
    return conv.lin_rel, conv.lin_root  # GraphConv


def _conv_unsupported(conv: Any) -> str | None:
    """Why one basis conv is outside the programs (None: it is not)."""
    name, module = type(conv).__name__, type(conv).__module__
    if name not in _PARAMETERS:
        return (
            "a conv class the programs do not express (PyG's SAGEConv, GraphConv, GINConv, "
            "GINEConv are)"
        )
    if not module.startswith("torch_geometric."):
        return f"{name} of {module}, not PyG's (its messages are not known)"
    if name == "GINConv" and pyg_bases_gin.unsupported(conv) is not None:
        return pyg_bases_gin.unsupported(conv)
    if name == "GINEConv" and (conv.lin is not None or not _one_linear(conv.nn)):
        return "GINEConv with edge_dim or an nn other than one linear (per basis, not summed)"
    if name == "GINEConv" and conv.aggr not in ("add", "sum"):
        return f"GINEConv(aggr={conv.aggr!r}) (Hector's program sums)"
    if not isinstance(conv.aggr, str) or conv.aggr not in _PROGRAMS:
        return f"{name}(aggr={conv.aggr!r}) (Hector's programs: mean or sum over all relations)"
    if name == "SAGEConv" and conv.normalize:
        return "SAGEConv(normalize=True) (per basis, before the bases' sum)"
    if name == "SAGEConv" and conv.project:
        return "SAGEConv(project=True)"
    lins = [lin for lin in _lins(conv) if lin is not None]
    if any(isinstance(lin.weight, torch.nn.parameter.UninitializedParameter) for lin in lins):
        return f"{name} with a lazy input width before its first call"
    if conv.explain:
        return f"{name} in PyG's explain mode (edge masks)"
    basis_hook = sys.modules[_PYG_MODULE].hook
    if list(conv._message_forward_hooks.values()) != [basis_hook]:
        return "message-forward hooks besides the basis coefficients'"
    if any(getattr(conv, d, None) for d in _HOOK_DICTS):
        return "forward, propagate or aggregate hooks on a basis conv"
    return None


def _one_linear(nn: Any) -> bool:
    from torch_geometric.nn.dense.linear import Linear

    return type(nn) in (torch.nn.Linear, Linear)


@dataclass
class Call:
    """A basis conv's call: the grouped graph's features, ``edge_index``, ``edge_type`` and
    the edge weights (None: none)."""

    x: torch.Tensor
    edge_index: torch.Tensor
    edge_type: torch.Tensor
    edge_weight: torch.Tensor | None = None
    edge_attr: torch.Tensor | None = None  # GINEConv's, [E, F]


def _call(layer: Any, edge_type: Any, args: Any, kwargs: Any) -> Call | str:
    """The call's arguments, bound as the conv's ``forward`` binds them; or why they are
    outside the programs."""
    names = ("x", "edge_index", *_PARAMETERS[type(layer.convs[0]).__name__])
    if len(args) > len(names) or set(kwargs) - set(names[len(args) :]):
        return f"a conv called with arguments beyond {names}"
    bound = {**dict(zip(names, args, strict=False)), **kwargs}
    if bound.get("size") is not None:
        return "a conv called with size= (a bipartite node set in the grouped graph)"
    x, edge_index, weight = bound.get("x"), bound.get("edge_index"), bound.get("edge_weight")
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32 or x.dim() not in (2, 3):
        return "x is not one [N, F] or [B, N, F] float32 tensor (a pair, another type)"
    if not isinstance(edge_index, torch.Tensor) or edge_index.layout != torch.strided:
        return "edge_index is not a [2, E] tensor (a sparse adjacency)"
    if edge_index.dim() != 2 or edge_index.shape[0] != 2 or edge_index.is_floating_point():
        return "edge_index is not an integer [2, E] tensor"
    if not isinstance(edge_type, torch.Tensor) or edge_type.shape != edge_index.shape[1:]:
        return "edge_type is not one relation per edge"
    if weight is not None and (
        not isinstance(weight, torch.Tensor)
        or weight.dtype != torch.float32
        or weight.dim() not in (1, 2)
        or weight.shape[0] != edge_index.shape[1]
        or weight.numel() != edge_index.shape[1]
    ):
        return "edge_weight is not one float32 weight per edge"
    for lin in _lins(layer.convs[0]):
        width = lin.weight.shape[1] if lin is not None else None
        if lin is not None and x.shape[-1] != width:
            return f"x has {x.shape[-1]} columns, the conv's linears take {width}"
    attr = bound.get("edge_attr")
    if "edge_attr" in names and not (
        isinstance(attr, torch.Tensor)
        and attr.dtype == torch.float32
        and attr.shape == (edge_index.shape[1], x.shape[-1])
    ):
        return "edge_attr is not one float32 row of x's width per edge"
    return Call(x, edge_index, edge_type, weight, attr)


def bind(layer: Any, edge_type: Any, args: Any, kwargs: Any) -> Call | str:
    """The call of ``HeteroBasisConv`` ``layer`` with ``edge_type, *args, **kwargs`` (its
    arguments, bound), or why it cannot run one Hector program."""
    convs = list(layer.convs)
    for conv in convs:
        reason = _conv_unsupported(conv)
        if reason is not None:
            return reason
    first = convs[0]
    for name in ("aggr", "out_channels"):
        if any(getattr(c, name, None) != getattr(first, name, None) for c in convs):
            return f"the bases' convs differ in {name}"
    if any((_lins(c)[1] is None) != (_lins(first)[1] is None) for c in convs):
        return "the bases' convs differ in root weight"
    return _call(layer, edge_type, args, kwargs)


def tensors(layer: Any, x: torch.Tensor) -> list[torch.Tensor]:
    """``x, W [R, in, out], root [in, out], bias [out]``: ``W_r = Σ_b a_{r,b} W_b``, the
    bases' root weights and biases summed (PyTorch ops: autograd reaches every parameter)."""
    lins = [_lins(c) for c in layer.convs]
    att = torch.cat([c.edge_type_weight for c in layer.convs])  # [B, R]
    bases = torch.stack([lin.weight.t() for lin, _ in lins])  # [B, in, out]
    weight = torch.einsum("br,bio->rio", att, bases)
    roots = [root.weight.t() for _, root in lins if root is not None]
    if type(layer.convs[0]).__name__ == "GINEConv":  # nn((1 + ε) x_i + ...): nn's weight
        roots = [(1 + c.eps) * w for c, w in zip(layer.convs, bases, strict=True)]
    root = torch.stack(roots).sum(0) if roots else bases.new_zeros(bases.shape[1:])
    biases = [lin.bias for pair in lins for lin in pair if lin is not None and lin.bias is not None]
    bias = torch.stack(biases).sum(0) if biases else bases.new_zeros(bases.shape[-1])
    return [x, weight, root, bias]


# -- the route --------------------------------------------------------------------------------


@torch._dynamo.disable
def _pyg_forward(layer: Any, edge_type: Any, *args: Any, **kwargs: Any) -> Any:
    """PyG's ``HeteroBasisConv.forward``, outside Dynamo: its message hooks then run."""
    return pyg_route._ORIGINAL["HeteroBasisConv"](layer, edge_type, *args, **kwargs)


def bases_forward(self: Any, edge_type: Any, *args: Any, **kwargs: Any) -> Any:
    """``HeteroBasisConv.forward`` under the Hector backend: weight glue and one
    ``hector::pyg_layer`` call (PyG's own ``forward``, run eagerly, where :func:`bind` declines)."""
    call = bind(self, edge_type, args, kwargs)
    if isinstance(call, str):
        pyg_route.record_fallback(f"to_hetero_with_bases ({type(self.convs[0]).__name__})", call)
        return _pyg_forward(self, edge_type, *args, **kwargs)
    x = call.x
    flat = _flattened(call) if x.dim() == 3 else call
    if type(self.convs[0]).__name__ == "GINConv":  # nn per basis, on x's rows as given
        return pyg_bases_gin.forward(self, flat.x, flat.edge_index, flat.edge_type, x.shape[:-1])
    out = _run(self, flat)
    return out.view(*x.shape[:-1], out.shape[-1]) if x.dim() == 3 else out


def _flattened(call: Call) -> Call:
    """A static graph's call (``B`` feature sets ``[B, N, F]`` over one graph) as one call
    over ``B`` copies of the graph."""
    x = call.x
    copies, nodes = x.shape[0], x.shape[1]
    offsets = torch.arange(copies, device=x.device) * nodes
    edge_index = (call.edge_index.unsqueeze(1) + offsets.view(1, -1, 1)).reshape(2, -1)
    weight, attr = call.edge_weight, call.edge_attr
    return Call(
        x.reshape(-1, x.shape[2]),
        edge_index,
        call.edge_type.repeat(copies),
        None if weight is None else weight.repeat(copies),
        None if attr is None else attr.repeat(copies, 1),
    )


def _run(layer: Any, call: Call) -> torch.Tensor:
    """The layer's rows from one ``hector::pyg_layer`` call over the grouped graph."""
    args = tensors(layer, call.x)
    program = _PROGRAMS[layer.convs[0].aggr]
    if call.edge_weight is not None:
        args.append(call.edge_weight.view(-1, 1))
        program += ":w"
    if call.edge_attr is not None:
        args.append(call.edge_attr)
        program += ":e"
    return torch.ops.hector.pyg_layer(
        program,
        pyg_route._train(args),
        [call.edge_index, call.edge_type],
        [call.x.shape[0], layer.num_relations],
        [],
        args,
    )


pyg_route.register_family("hetero-bases", pyg_route.ProgramFamily(_compiled, _columns, typed=False))
pyg_route.register_layer("HeteroBasisConv", bases_forward, module=_PYG_MODULE)
