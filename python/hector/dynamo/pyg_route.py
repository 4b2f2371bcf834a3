"""Recognised PyG layers under ``torch.compile(backend="hector")``: one Hector op per call.

Some PyG layers cannot be captured whole by Dynamo or raised piecewise: ``RGCNConv`` loops over
relations with data-dependent masks (two graph breaks per relation), ``HGTConv`` concatenates
per-relation ``edge_index`` dicts with offsets inside its graph. For these the backend does not
wait for the captured graphs: :func:`install` (run when a Hector backend is made, or when PyG
is imported after it) replaces the layer class's ``forward`` by one that, while Dynamo traces
it for a Hector backend (PyG's own ``forward`` otherwise), calls :func:`pyg_layer`, a
``torch.library`` custom op (``torch.ops.hector.pyg_layer``) with a fake implementation (output
shape from the input shapes, symbolic sizes included) and a registered autograd formula.
Dynamo records the layer as one node of its graph, without graph breaks.

The op runs Hector's compiled program for the layer (:mod:`hector.models`: ``rgcn_layer``,
the HGT layer) on a :class:`~hector.data.graph.HeteroGraph` it builds from the PyG index tensors
(cached by the tensors' content, :class:`hector.frontends.graph_cache.IndexCache`: in-place writes
that bypass the version counter are seen too): ``<f>_train`` in the forward when gradients are
needed, ``<f>_backward`` (derived by ``hector-autodiff``) in the backward, the plain forward
otherwise. Only weight-sized glue (stacking per-type weights, folding HGT's priors) runs as
PyTorch code in the captured graph; the layer's computation is Hector's.

``RGCNConv`` and ``FastRGCNConv`` run ``rgcn_layer`` (``aggr="mean"``) or ``rgcn_sum_layer``
(``"add"``/``"sum"``), ``RGCNConv`` ``rgcn_max_layer`` (``"max"``; ``rgcn_max_rows_layer`` on
index inputs); bases and blocks become dense per-relation weights, an absent root or bias
zeros. ``RGATConv`` runs the program of its configuration (:mod:`hector.dynamo.pyg_rgat`), with a
second one for ``return_attention_weights``; edge-wise inputs and outputs are put in the
graph's edge order (sorted by type) inside the op. Featureless and index inputs run as
one-hot rows, bipartite inputs as one node set (destinations after sources). A sparse
adjacency (``SparseTensor``, ``torch.sparse``) is read as PyG reads it (:func:`edge_list`);
Dynamo skips a frame given a ``torch.sparse`` tensor, and the routed ``forward``, run eagerly
under a routing Hector backend's callback, calls the same program outside Dynamo. A layer whose
configuration the programs do not cover (``aggr="min"``; ``HGTConv`` given relations it does
not know) runs PyG's own ``forward``, and the reason is recorded in :data:`FALLBACKS` (shown by
:func:`hector.explain`).
"""

from __future__ import annotations

import importlib.abc
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

import torch
from torch._dynamo.comptime import comptime

from ..data.graph import HeteroGraph
from ..dialects import Kind
from ..frontends.graph_cache import IndexCache, graph_for
from . import pyg_rgat

#: Why a recognised layer ran PyG's own forward instead: {class name: reason}.
FALLBACKS: dict[str, str] = {}


def record_fallback(layer: str, reason: str) -> None:
    """Keep why ``layer`` runs PyG's own forward in :data:`FALLBACKS`. Under Dynamo the entry
    is written while the frame is traced (``comptime``), not as a traced side effect on a
    global dict: that would guard the compiled frame on the dict's contents and make the next
    call recompile once the reason is in it."""
    comptime(
        lambda ctx: FALLBACKS.__setitem__(
            ctx.get_local("layer").as_python_constant(),
            ctx.get_local("reason").as_python_constant(),
        ),
        lambda: FALLBACKS.__setitem__(layer, reason),
    )


#: HGT graphs (relations' local ``edge_index`` tensors at their node types' offsets).
_HGT_GRAPHS: IndexCache[HeteroGraph] = IndexCache(8)


@dataclass
class ProgramStats:
    """How often a layer program ran, and the seconds spent in its compiled code."""

    calls: int = 0
    backward_calls: int = 0
    seconds: float = 0.0
    graph_builds: int = 0
    kernels: set[Any] = field(default_factory=set)


#: Per program name (``"rgcn"``, ``"hgt:2:1"``): calls and time inside Hector's kernels.
STATS: dict[str, ProgramStats] = {}
# The values ``<f>_train`` saved for ``<f>_backward``, from the op's implementation (below
# autograd) to its ``setup_context`` (which sees only the inputs and the output): keyed by
# the output's id, taken in the same call.
# A call outside autograd with train=True (the op called directly) leaves its entry behind:
# only the latest few are kept.
_SAVED: OrderedDict[int, tuple[Any, HeteroGraph, list[torch.Tensor]]] = OrderedDict()
_SAVED_MAX = 4


@dataclass(frozen=True)
class ProgramFamily:
    """Layer programs another module defines over a typed graph, as HGT's: node types stacked
    in one id space (``sizes``: each type's node count), one local ``edge_index`` per relation
    (``ends``: its source and destination types). Registered by :func:`register_family`."""

    compiled: Callable[[str], Any]  # the program of a name
    columns: Callable[[str, list[torch.Tensor]], Any]  # its output width, from its tensors
    #: False: RGCN's graph instead (``[edge_index, edge_type]``, ``sizes`` ``[nodes, relations]``)
    typed: bool = True


#: Program families of other modules, by the name's prefix (before the first ``:``).
FAMILIES: dict[str, ProgramFamily] = {}


def register_family(prefix: str, family: ProgramFamily) -> None:
    """Run programs named ``<prefix>:...`` with ``family`` (typed graph, as HGT's)."""
    FAMILIES[prefix] = family


def _typed_graph(program: str) -> bool:
    """Whether ``program`` runs on a typed graph of per-relation ``edge_index`` tensors."""
    family = FAMILIES.get(program.split(":")[0])
    return program.startswith("hgt") or (family is not None and family.typed)


def _stats(program: str) -> ProgramStats:
    return STATS.setdefault(program, ProgramStats())


def reset_stats() -> None:
    """Forget the calls and times counted so far (before a timed run)."""
    STATS.clear()


# -- the programs --------------------------------------------------------------------------


def _compiled(program: str) -> Any:
    """The Hector program (a ``frontend.CompiledFunction``) named ``program``."""
    from .. import models

    rgcn = {
        "rgcn": models.rgcn_layer,
        "rgcn-sum": models.rgcn_sum_layer,
        "rgcn-max": models.rgcn_max_layer,
        "rgcn-max-rows": models.rgcn_max_rows_layer,
    }
    if program in rgcn:
        return rgcn[program]
    if program.startswith("rgat:"):
        return pyg_rgat.program(program)
    if program.split(":")[0] in FAMILIES:
        return FAMILIES[program.split(":")[0]].compiled(program)
    kind, heads, skip = program.split(":")
    if kind != "hgt":
        raise ValueError(f"unknown Hector layer program {program!r}")
    return _hgt_program(int(heads), skip == "1")


_HGT_PROGRAMS: dict[tuple[int, bool], Any] = {}


def _hgt_program(heads: int, skip: bool) -> Any:
    from .. import models

    key = (heads, skip)
    if key not in _HGT_PROGRAMS:
        _HGT_PROGRAMS[key] = models._make_hgt(heads, skip)
    return _HGT_PROGRAMS[key]


def _out_columns(program: str, tensors: list[torch.Tensor]) -> Any:
    """The output width: RGCN's ``weight [R, in, out]``, HGT's ``wout [T, out, out]``, RGAT's
    bias (or heads, for its attention weights)."""
    if program.startswith("rgat:"):
        return pyg_rgat.output_columns(program, tensors)
    if program.split(":")[0] in FAMILIES:
        return FAMILIES[program.split(":")[0]].columns(program, tensors)
    return tensors[1].shape[-1] if program.startswith("rgcn") else tensors[9].shape[-1]


def _graph(program: str, graph: list[torch.Tensor], sizes: list[int], ends: list[int]) -> Any:
    """The HeteroGraph of a call, cached by the index tensors' content (``IndexCache``)."""
    if not _typed_graph(program):  # sizes: [nodes, the layer's relation count]
        # Each relation's edges by destination: the reductions into (destination, relation)
        # rows write them in order (and their gradients read them in order).
        return graph_for(graph[0], graph[1], int(sizes[0]), int(sizes[1]), by_destination=True)[0]
    counts = tuple(int(s) for s in sizes)

    def build(copies: list[torch.Tensor | None]) -> HeteroGraph:
        offsets = [0]
        for n in counts[:-1]:
            offsets.append(offsets[-1] + n)
        parts, types = [], []
        for r, ei in enumerate(copies):
            assert ei is not None
            s, d = ends[2 * r], ends[2 * r + 1]
            parts.append(torch.stack([ei[0] + offsets[s], ei[1] + offsets[d]]))
            types.append(torch.full((ei.shape[1],), r, dtype=torch.long))
        ntype = torch.cat([torch.full((n,), t, dtype=torch.long) for t, n in enumerate(counts)])
        g = HeteroGraph.from_edge_index(
            torch.cat(parts, dim=1),
            torch.cat(types),
            num_nodes=sum(counts),
            node_type=ntype,
            num_etypes=len(copies),
            num_ntypes=len(counts),
        )
        _stats(program).graph_builds += 1
        return g

    return _HGT_GRAPHS.get(graph, (counts, tuple(int(e) for e in ends)), build)


# -- the custom op -------------------------------------------------------------------------


def run_layer(
    program: str,
    train: list[int],
    graph: list[torch.Tensor],
    sizes: list[int],
    ends: list[int],
    tensors: list[torch.Tensor],
) -> torch.Tensor:
    """Run Hector's compiled layer ``program`` on the graph of ``graph`` (RGCN: ``[edge_index,
    edge_type]``; HGT: one local ``edge_index`` per relation, ``ends`` its source and
    destination node types) with ``sizes`` nodes (RGCN: ``[nodes, relations]``, the layer's
    relation count, which a batch need not reach; HGT: the nodes of each type) and the
    program's ``tensors``. ``train`` (:func:`_train`): empty for inference; else ``[1]`` and
    the positions of the tensors that take no gradient: runs ``<f>_train`` (whose backward
    builds no gradient for those) and keeps what the backward needs."""
    fn = _compiled(program)
    g = _graph(program, graph, sizes, ends)
    stats = _stats(program)
    stats.calls += 1
    start = time.perf_counter()
    try:
        entry = fn.compile_for(g, *tensors, train=bool(train), frozen=train[1:])
        stats.kernels.add(id(entry))
        tensors = _edges_sorted(entry.traced.arg_kinds, g, tensors)
        if not train:
            out = entry.run(g, tensors, fn._params)
            out = out if isinstance(out, torch.Tensor) else out[0]
            return _edges_sorted(entry.traced.result_kinds, g, [out], inverse=True)[0]
        entry.check(g, tensors, fn._params)
        abi = entry.training_abi
        outs = entry.call(f"{abi.name}_train", g, list(tensors))
        n = len(abi.result_kinds)
        out = _edges_sorted(entry.traced.result_kinds, g, outs[:1], inverse=True)[0]
        _SAVED[id(out)] = (entry, g, list(outs[n:]))
        while len(_SAVED) > _SAVED_MAX:
            _SAVED.popitem(last=False)
        return out
    finally:
        stats.seconds += time.perf_counter() - start


#: The op Dynamo records for a routed layer: :func:`run_layer`, with a fake implementation and
#: an autograd formula (below). :mod:`hector.dynamo.pyg_direct` calls :func:`run_layer` itself.
pyg_layer = torch.library.custom_op("hector::pyg_layer", mutates_args=())(run_layer)


def _edges_sorted(
    kinds: Sequence[Any], g: HeteroGraph, tensors: Sequence[torch.Tensor], inverse: bool = False
) -> list[torch.Tensor]:
    """The edge-wise tensors among ``tensors`` (by their ``kinds``) put in the graph's edge
    order (sorted by type), or back into the input's order with ``inverse``."""
    if Kind.EDGE not in kinds or torch.equal(g.perm, torch.arange(g.num_edges)):
        return list(tensors)
    index = g.inverse_perm if inverse else g.perm
    return [t[index] if k == Kind.EDGE else t for k, t in zip(kinds, tensors, strict=True)]


@pyg_layer.register_fake
def _pyg_layer_fake(
    program: str,
    train: list[int],
    graph: list[torch.Tensor],
    sizes: list[int],
    ends: list[int],
    tensors: list[torch.Tensor],
) -> torch.Tensor:
    rows = sizes[0]
    if _typed_graph(program):  # RGCN, RGAT: [nodes, relations]; HGT: each type's nodes
        for n in sizes[1:]:
            rows = rows + n
    elif program.startswith("rgat:") and pyg_rgat.RgatConfig.parse(program).alpha:
        # RGAT's attention weights: one row per edge
        rows = graph[0].shape[1]
    return tensors[0].new_empty((rows, _out_columns(program, tensors)))


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    program, tensors = inputs[0], inputs[-1]
    ctx.program = program
    # The backward returns one entry per input, lists mirrored: None for the non-tensors.
    # (torch.library flattens lists of tensors, empty ones included, and keeps other lists whole)
    ctx.no_grads = [
        [None] * len(a)
        if isinstance(a, list | tuple) and all(isinstance(t, torch.Tensor) for t in a)
        else None
        for a in inputs[:-1]
    ]
    ctx.hector = _SAVED.pop(id(output), None)  # None: run without train (or under fake)
    ctx.save_for_backward(*tensors)


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    if ctx.hector is None:
        raise RuntimeError(
            "hector::pyg_layer was run without train=True, so Hector kept nothing for the "
            "backward; call the layer with gradients enabled"
        )
    entry, g, saved = ctx.hector
    tensors = list(ctx.saved_tensors)
    stats = _stats(ctx.program)
    stats.backward_calls += 1
    start = time.perf_counter()
    abi, kinds = entry.training_abi, entry.traced.arg_kinds
    tensors = _edges_sorted(kinds, g, tensors)
    grad = _edges_sorted(entry.traced.result_kinds, g, [grad.contiguous().float()])[0]
    partials = entry.call(f"{abi.name}_backward", g, [*tensors, *saved, grad])
    stats.seconds += time.perf_counter() - start
    result: list[torch.Tensor | None] = [None] * len(tensors)
    partials = _edges_sorted([kinds[p] for p in abi.grad_of], g, partials, inverse=True)
    for pos, part in zip(abi.grad_of, partials, strict=True):
        result[pos] = part if result[pos] is None else result[pos] + part
    return (*ctx.no_grads, result)


pyg_layer.register_autograd(_backward, setup_context=_setup_context)


# -- the layers, as Dynamo traces them ------------------------------------------------------


def _train(tensors: list[torch.Tensor]) -> list[int]:
    """The op's ``train``: ``[]`` for inference, else ``[1]`` and the positions of the tensors
    that need no gradient (input features), whose backward kernels are then not built."""
    if not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors)):
        return []
    return [1, *(i for i, t in enumerate(tensors) if not t.requires_grad)]


#: The RGCN program of each ``aggr`` (``"max"`` on index inputs: ``"rgcn-max-rows"``).
_RGCN_PROGRAMS = {"mean": "rgcn", "add": "rgcn-sum", "sum": "rgcn-sum", "max": "rgcn-max"}


def _rgcn_unsupported(conv: Any, edge_index: Any, edge_type: Any) -> str | None:
    if conv.aggr not in _RGCN_PROGRAMS:
        return f"aggr={conv.aggr!r} (Hector's RGCN programs sum, average or take the maximum)"
    if conv.aggr == "max" and any(c.__name__ == "FastRGCNConv" for c in type(conv).__mro__):
        return "aggr='max' (PyG's FastRGCNConv takes 'add', 'sum' or 'mean'; its forward fails)"
    if is_sparse_adjacency(edge_index):  # PyG's RGCN layers index it by mask, and fail
        return "a torch.sparse adjacency (PyG's RGCN layers read SparseTensor adjacency only)"
    if not isinstance(edge_index, torch.Tensor) or edge_index.dim() != 2:
        return f"edge_index is a {type(edge_index).__name__}, not a [2, E] tensor"
    if not isinstance(edge_type, torch.Tensor) or edge_type.is_floating_point():
        return "no integer edge_type tensor (nor integer adjacency values)"
    return None


#: Featureless (index) inputs run as one-hot rows of at most this many elements.
ONE_HOT_LIMIT = 1 << 26


def _one_row_set(t: Any, width: int) -> torch.Tensor | str:
    """Rows ``[N, in]`` for one side of an RGCN input: float32 features as they are, node
    indices (featureless input, PyG's ``weight[r, index]``) as one-hot rows; or why not."""
    if not isinstance(t, torch.Tensor):
        return f"x holds a {type(t).__name__}, not a tensor"
    if t.is_floating_point():
        if t.dtype != torch.float32:
            return f"x is {t.dtype}; Hector's kernels are float32"
        return t if t.dim() == 2 else f"x is a {t.dim()}-d float tensor, not [N, F] features"
    if t.dim() != 1:
        return "an index x must be one-dimensional"
    if t.shape[0] * width > ONE_HOT_LIMIT:
        return (
            f"featureless input of {t.shape[0]} nodes x {width} one-hot columns, over "
            f"{ONE_HOT_LIMIT} elements (Hector runs index inputs as one-hot rows)"
        )
    return torch.nn.functional.one_hot(t, width).float()


def _rgcn_rows(conv: Any, x: Any, edge_index: Any) -> tuple[torch.Tensor, Any, int] | str:
    """The program's node rows, its ``edge_index`` and the first output row: ``x`` (or its
    one-hot rows); for bipartite ``(x_src, x_dst)``, source rows then destination rows, the
    edges pointing at the latter (offset by the source count, the first output row)."""
    if isinstance(x, tuple | list) and len(x) != 2:
        return "x is a tuple of other than (x_src, x_dst)"
    xl, xr = x if isinstance(x, tuple | list) else (x, x)
    if xl is None:  # featureless: PyG's arange(in_channels)
        xl = torch.arange(conv.in_channels_l, device=conv.weight.device)
        xr = xl if x is None else xr
    rows = _one_row_set(xl, conv.in_channels_l)
    if xr is xl or isinstance(rows, str):
        return rows if isinstance(rows, str) else (rows, edge_index, 0)
    root_rows = conv.root.shape[0] if conv.root is not None else conv.in_channels_l
    dst_rows = _one_row_set(xr, root_rows)
    if isinstance(dst_rows, str):
        return dst_rows
    # Different widths (bipartite in_channels): both sides zero-padded to the wider, as are
    # the weights (_rgcn_weights), so the products are unchanged.
    width = max(rows.shape[1], dst_rows.shape[1])
    pad = torch.nn.functional.pad
    rows, dst_rows = (pad(r, (0, width - r.shape[1])) for r in (rows, dst_rows))
    n = rows.shape[0]
    shifted = torch.stack([edge_index[0], edge_index[1] + n])
    return torch.cat([rows, dst_rows]), shifted, n


def _rgcn_weights(conv: Any, x: torch.Tensor) -> list[torch.Tensor]:
    """``[x, W [R, in, out], root, bias]`` for Hector's RGCN program: a basis decomposition
    combined, block-diagonal blocks laid out dense, an absent root or bias as zeros (PyTorch ops
    in the captured graph, so gradients reach ``comp``, the bases and the blocks)."""
    i, o, width = conv.in_channels_l, conv.out_channels, x.shape[1]
    comp = conv.comp if conv.num_bases is not None else None
    w = pyg_rgat.dense_weight(conv.weight, comp, conv.num_blocks, (conv.num_relations, i, o))
    root = conv.root if conv.root is not None else w.new_zeros(width, o)
    pad = torch.nn.functional.pad  # rows padded to ``width`` (bipartite sides of two widths)
    if width != i:
        w = pad(w, (0, 0, 0, width - i))
    if root.shape[0] != width:
        root = pad(root, (0, 0, 0, width - root.shape[0]))
    bias = conv.bias if conv.bias is not None else w.new_zeros(o)
    return [x, w, root, bias]


def _rgcn_forward(self: Any, x: Any, edge_index: Any, edge_type: Any = None) -> Any:
    """``RGCNConv.forward`` (and ``FastRGCNConv``'s) under the Hector backend: one
    ``hector::pyg_layer`` call. A ``SparseTensor`` adjacency holds the relation of each edge as
    its value, unless ``edge_type`` is given (PyG's RGCN layers take no ``torch.sparse`` one)."""
    adj = edge_index
    if is_sparse_adjacency(adj) and not isinstance(adj, torch.Tensor):
        edge_index, values = edge_list(adj)
        edge_type = values if edge_type is None else edge_type
    reason = _rgcn_unsupported(self, edge_index, edge_type)
    rows = _rgcn_rows(self, x, edge_index) if reason is None else reason
    name = next(c.__name__ for c in type(self).__mro__ if c.__name__ in _ORIGINAL)
    if isinstance(rows, str):
        record_fallback(name, rows)
        return _ORIGINAL[name](self, x, adj, edge_type if adj is edge_index else None)
    nodes, edge_index, first = rows
    tensors = _rgcn_weights(self, nodes)
    program = _RGCN_PROGRAMS[self.aggr]
    xr = x[1] if isinstance(x, tuple | list) else x
    if program == "rgcn-max" and (xr is None or not xr.is_floating_point()):
        program = "rgcn-max-rows"  # PyG's index path: the maximum of the rows W_r[j]
    out = torch.ops.hector.pyg_layer(
        program,
        _train(tensors),
        [edge_index, edge_type],
        [nodes.shape[0], self.num_relations],  # relations: the layer's, not the batch's max + 1
        [],
        tensors,
    )
    return out[first:] if first else out


def _rgat_forward(
    self: Any,
    x: Any,
    edge_index: Any,
    edge_type: Any = None,
    edge_attr: Any = None,
    size: Any = None,
    return_attention_weights: Any = None,
) -> Any:
    """``RGATConv.forward`` under the Hector backend: one ``hector::pyg_layer`` call (two with
    ``return_attention_weights``: the weights are a program of their own). A sparse
    adjacency's values stand for ``edge_attr`` (two-dimensional) and ``edge_type`` where these
    are not given, as in PyG's message passing."""
    adj, given = edge_index, (edge_type, edge_attr)
    if is_sparse_adjacency(adj):
        edge_index, values = edge_list(adj)
        edge_attr = values if edge_attr is None and values.dim() == 2 else edge_attr
        edge_type = values if edge_type is None else edge_type
    reason = pyg_rgat.unsupported(self, x, edge_index, edge_type, edge_attr)
    if reason is None and not (isinstance(edge_index, torch.Tensor) and edge_index.dim() == 2):
        reason = f"edge_index is a {type(edge_index).__name__}, not a [2, E] tensor"
    if reason is None and size is not None and tuple(size) != (x.shape[0], x.shape[0]):
        reason = f"size={tuple(size)}: RGATConv reads one node set, and PyG's forward fails"
    if reason is not None:
        record_fallback("RGATConv", reason)
        args = (x, adj, *given, size, return_attention_weights)
        return _ORIGINAL["RGATConv"](self, *args)
    sizes = [x.shape[0], self.num_relations]

    def call(alpha: bool) -> torch.Tensor:
        config = pyg_rgat.RgatConfig.of(self, edge_attr is not None, alpha)
        tensors = pyg_rgat.arguments(self, config, x, edge_index, edge_attr)
        graph = [edge_index, edge_type]
        out = torch.ops.hector.pyg_layer(config.name, _train(tensors), graph, sizes, [], tensors)
        return pyg_rgat.finish(self, config, out, edge_index)

    out = call(False)
    if not isinstance(return_attention_weights, bool):
        return out
    alpha = call(True)
    if adj is edge_index:
        return out, (edge_index, alpha)
    if isinstance(adj, torch.Tensor):  # PyG: the adjacency with the weights as its values
        from torch_geometric.utils.sparse import set_sparse_value

        return out, (set_sparse_value(adj, alpha), alpha)
    return out, adj.set_value(alpha, layout="coo")


@torch._dynamo.disable
def _materialize(lin: Any, x_dict: Any) -> None:
    """Run PyG's lazy initialisation of a ``HeteroDictLinear`` built with ``in_channels=-1``
    (its forward pre-hook, which the Hector route never triggers since it does not call the
    module): the weights take their shapes from ``x_dict`` and are reset, and the hook is
    removed, as on PyG's own first call. Outside Dynamo's graph: it runs once, eagerly."""
    lin.initialize_parameters(lin, (x_dict,))


def _hgt_unsupported(conv: Any, x_dict: Any, edge_index_dict: Any) -> str | None:
    present = [t for t in conv.node_types if t in x_dict]  # PyG skips the types x_dict lacks
    for t in present:
        x = x_dict[t]
        if not isinstance(x, torch.Tensor) or x.dtype != torch.float32 or x.dim() != 2:
            return f"x_dict[{t!r}] is not a [N, F] float32 tensor"
    if not present:
        return "x_dict holds none of the layer's node types"
    for e, ei in edge_index_dict.items():
        if e not in conv.edge_types:
            return "edge_index_dict holds relations the layer does not know"
        if not isinstance(ei, torch.Tensor) or ei.dim() != 2:
            return f"edge_index_dict[{e}] is a {type(ei).__name__}, not a [2, E] tensor"
        if e[0] not in x_dict or e[2] not in x_dict:
            return f"edge_index_dict holds {e} but x_dict lacks its node types"
    return None


def _hgt_forward(self: Any, x_dict: Any, edge_index_dict: Any) -> Any:
    """``HGTConv.forward`` under the Hector backend: weight glue, one ``hector::pyg_layer``."""
    if hasattr(self.kqv_lin, "_hook"):  # HGTConv(-1, ...): the first call sizes the weights
        _materialize(self.kqv_lin, x_dict)
    adj_dict = edge_index_dict
    if any(is_sparse_adjacency(a) for a in adj_dict.values()):  # values unused, as in PyG
        edge_index_dict = {
            e: edge_list(a)[0] if is_sparse_adjacency(a) else a for e, a in adj_dict.items()
        }
    reason = _hgt_unsupported(self, x_dict, edge_index_dict)
    if reason is not None:
        record_fallback("HGTConv", reason)
        return _ORIGINAL["HGTConv"](self, x_dict, adj_dict)
    from ..models import HgtWeights, hgt_core_args

    types, relations = list(self.node_types), list(self.edge_types)
    heads, f = self.heads, self.out_channels
    # Per-type input widths: rows and weights zero-padded to the widest (the same products);
    # PyG's gated skip applies to the types whose own width is the output's: in the program
    # when that is the padded width, after it otherwise (_gated_skip). A type x_dict lacks has
    # no rows; a relation edge_index_dict lacks has no edges (as in PyG).
    widths = [x_dict[t].shape[1] if t in x_dict else -1 for t in types]
    width = max(widths)
    none = x_dict[next(t for t in types if t in x_dict)].new_zeros(0, width)
    pad = torch.nn.functional.pad
    xs = [pad(x_dict[t], (0, width - x_dict[t].shape[1])) if t in x_dict else none for t in types]
    counts = [x.shape[0] for x in xs]
    weights = HgtWeights.of_pyg(self, width, list(x_dict), list(edge_index_dict))
    tensors = hgt_core_args(weights, heads, torch.cat(xs), counts, [w == f for w in widths])
    skip = width == f
    ends = []
    for s, _, d in relations:
        ends += [types.index(s), types.index(d)]
    empty = torch.empty(2, 0, dtype=torch.long, device=none.device)
    out = torch.ops.hector.pyg_layer(
        f"hgt:{heads}:{int(skip)}",
        _train(tensors),
        [edge_index_dict.get(e, empty) for e in relations],
        counts,
        ends,
        tensors,
    )
    dst = {e[2] for e in relations}
    result, start = {}, 0
    for t, x in zip(types, xs, strict=True):
        if t in dst:
            result[t] = out[start : start + x.shape[0]]
            if not skip and widths[types.index(t)] == f:
                result[t] = _gated_skip(self, t, result[t], x_dict[t])
        start = start + x.shape[0]
    return {t: result[t] for t in x_dict if t in result}


def _gated_skip(conv: Any, node_type: str, out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """PyG's gated residual ``σ(skip) · out + (1 − σ(skip)) · x`` of a node type whose input is
    as wide as the output, next to wider types (the program's rows are padded past it)."""
    alpha = conv.skip[node_type].sigmoid()
    return alpha * out + (1 - alpha) * x


# -- routing -------------------------------------------------------------------------------

_ORIGINAL: dict[str, Any] = {}
_ROUTED: dict[str, Callable[..., Any]] = {
    "RGCNConv": _rgcn_forward,
    "FastRGCNConv": _rgcn_forward,
    "RGATConv": _rgat_forward,
    "HGTConv": _hgt_forward,
}


#: The PyG module holding a routed class, where it is not ``torch_geometric.nn``.
_MODULES: dict[str, str] = {}


def register_layer(name: str, forward: Callable[..., Any], module: str = "") -> None:
    """Route PyG class ``name`` (of ``torch_geometric.nn``, or of ``module``, which that
    package imports) to ``forward`` under a Hector backend, as the layers above (another
    module's route); routed at once if PyG is."""
    _ROUTED[name] = forward
    if module:
        _MODULES[name] = module
    if _ORIGINAL:
        install()


def _routes_layers(fn: Any) -> bool:
    """Whether ``fn`` (a Dynamo callback or compiler function) leads, through Dynamo's wrappers,
    to a Hector backend that routes the recognised layers (its ``modules`` option, unless
    ``torch.compile(..., options=...)`` overrides it)."""
    override = None
    for _ in range(8):  # Dynamo's wrappers around the backend, outermost first
        if hasattr(fn, "options") and hasattr(fn, "backend_name"):  # a HectorBackend
            routes = fn.options["modules"] if override is None else override
            return bool(routes)
        options = (getattr(fn, "kwargs", None) or {}).get("options") or {}
        if override is None and "modules" in options:  # torch.compile(..., options=...)
            override = options["modules"]
        fn = (
            getattr(fn, "_torchdynamo_orig_backend", None)
            or getattr(fn, "compiler_fn", None)
            or getattr(fn, "func", None)  # functools.partial
        )
    return False


@torch._dynamo.assume_constant_result
def _hector_is_compiling() -> bool:
    """Whether the frame Dynamo is tracing is compiled by a Hector backend that routes the
    recognised layers. Dynamo calls this at trace time (it is marked constant) and bakes the
    answer into the graph; its cache is per backend."""
    from torch._dynamo.symbolic_convert import InstructionTranslator

    try:
        tx: Any = InstructionTranslator.current_tx()
    except AttributeError:  # not tracing
        return False
    return _routes_layers(getattr(getattr(tx, "output", None), "compiler_fn", None))


#: The callback Dynamo runs on each new frame (None outside ``torch.compile``): a builtin,
#: so calling it opens no frame of its own for Dynamo to compile.
_frame_callback: Callable[[], Any] = getattr(
    torch._C._dynamo.eval_frame, "get_eval_frame_callback", lambda: None
)


def is_sparse_adjacency(adj: Any) -> bool:
    """Whether ``adj`` is an adjacency PyG accepts in place of ``edge_index``: a
    ``torch.sparse`` tensor (COO, CSR, CSC) or a ``torch_sparse.SparseTensor``."""
    if isinstance(adj, torch.Tensor):
        return adj.layout != torch.strided
    typing = sys.modules.get("torch_geometric.typing")  # PyG's class, or its placeholder
    return typing is not None and isinstance(adj, typing.SparseTensor)


def edge_list(adj: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """PyG's transposed adjacency ``adj_t`` (``[N_dst, N_src]``) as a ``[2, E]`` ``edge_index``
    (sources first) and its per-edge values, in the order PyG's message passing reads them
    (``torch_geometric.utils.to_edge_index``, whose values default to ones)."""
    from torch_geometric.utils import to_edge_index

    indices, values = to_edge_index(adj)
    return indices.flip(0), values


@torch._dynamo.disable
def _skipped_with_sparse(callback: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether an eager layer call with these arguments runs in a frame that ``torch.compile``
    with a routing Hector backend (``callback``, Dynamo's, taken in that frame) was asked to
    compile and Dynamo left to run eagerly: Dynamo takes no sparse tensor into a graph, and
    skips such a frame with the backend's callback still set for the frames it calls."""
    values = [*args, *kwargs.values()]
    values += [v for d in values if isinstance(d, dict) for v in d.values()]
    return any(is_sparse_adjacency(v) for v in values) and _routes_layers(callback)


@torch._dynamo.disable
def _run_outside_dynamo(forward: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a Hector layer forward eagerly, its helper frames not compiled one by one."""
    return forward(*args, **kwargs)


def _routed(name: str) -> Any:
    hector_forward = _ROUTED[name]

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        # Eager calls, and other backends' compilations, run PyG's own forward.
        if torch.compiler.is_compiling():
            if _hector_is_compiling():
                return hector_forward(self, *args, **kwargs)
        elif (callback := _frame_callback()) is not None and _skipped_with_sparse(
            callback, args, kwargs
        ):
            return _run_outside_dynamo(hector_forward, self, *args, **kwargs)
        return _ORIGINAL[name](self, *args, **kwargs)

    forward.__doc__ = _ORIGINAL[name].__doc__
    forward.__wrapped__ = _ORIGINAL[name]  # type: ignore[attr-defined]
    forward.__name__ = "forward"
    return forward


class _RouteOnImport(importlib.abc.MetaPathFinder):
    """Routes the layers as soon as their module is imported, when PyG is imported after
    Hector's backend: ``torch.compile`` wraps a backend so that none of its code runs before
    Dynamo traces the first frame, and a layer traced with PyG's own ``forward`` would stay
    unrouted in that compiled frame. The modules watched are ``torch_geometric.nn`` and those
    of the routed classes it does not import (``ToHeteroLinear``'s ``to_hetero_module``). Finds
    a watched module's spec with the other finders and runs :func:`install` right after its
    loader executes it; leaves ``sys.meta_path`` once every routed class is routed."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        """A watched module's spec, its loader installing the routes once it has run; None for
        every other module (the other finders find them)."""
        if fullname != "torch_geometric.nn" and fullname not in _MODULES.values():
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec: ModuleSpec | None = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader: Any = spec.loader
        run = getattr(loader, "exec_module", None)
        if run is None:
            return spec

        def exec_module(module: ModuleType) -> None:
            run(module)
            install()

        loader.exec_module = exec_module
        return spec


_WATCH = _RouteOnImport()


def install() -> list[str]:
    """Route the recognised PyG layers to Hector's op while a Hector backend compiles them (a
    class whose module is not imported yet: as soon as it is); idempotent. Returns the routed
    class names."""
    pyg_nn = sys.modules.get("torch_geometric.nn")
    for name in _ROUTED:
        home = sys.modules.get(_MODULES.get(name, "torch_geometric.nn")) if pyg_nn else None
        cls = getattr(home, name, None)  # None: its module is not (fully) imported yet
        if cls is not None and name not in _ORIGINAL:
            _ORIGINAL[name] = cls.forward
            cls.forward = _routed(name)
    watching = _WATCH in sys.meta_path
    if len(_ORIGINAL) < len(_ROUTED) and not watching:  # route the rest when imported
        sys.meta_path.insert(0, _WATCH)
    elif len(_ORIGINAL) == len(_ROUTED) and watching:
        sys.meta_path.remove(_WATCH)
    return list(_ORIGINAL)


#: Callables that stand for the op in a compiled graph (``pyg_direct.call_layer``).
LAYER_CALLS: set[Callable[..., Any]] = set()


def program_names(gm: torch.fx.GraphModule) -> list[str]:
    """The Hector layer programs a captured graph calls (``hector::pyg_layer`` nodes)."""
    targets = (torch.ops.hector.pyg_layer.default, torch.ops.hector.pyg_layer)
    return [
        str(n.args[0])
        for n in gm.graph.nodes
        if n.op == "call_function" and (n.target in targets or n.target in LAYER_CALLS)
    ]
