"""Per-type linears of PyG's heterogeneous models under ``torch.compile(backend="hector")``.

A heterogeneous model's linear layers hold one weight per node type (or per edge type) and
apply each to its type's rows: PyG's ``ToHeteroLinear`` (``torch_geometric.nn.to_hetero_module``:
a ``HeteroLinear`` over ``x_dict``, or over stacked rows ``x`` and their ``type_vec``), and the
per-type copies ``to_hetero`` makes of a ``torch.nn.Linear`` or PyG ``Linear``
(``lin1.paper``, ``lin1.author``, ``lin2.paper__cites__paper``), each called with its type's
tensor. With the rows of all types stacked in one id space that is Hector's typed linear, one
GEMM per type: the program ``typed-linear:<0|1>`` (:func:`_typed_linear_program`) runs
``x_i W_{t(i)} (+ b_{t(i)})`` over a graph of one self-loop per row whose edge type is the row's
type (:func:`typed_linear`, the ``hector::pyg_layer`` op on its ``[edge_index, edge_type]``
graph; the type count is the layer's, which a batch need not reach).

* ``ToHeteroLinear`` is routed by class (:func:`to_hetero_linear_forward`): ``x_dict``'s types
  in the module's ``types`` order, stacked; or ``(x, type_vec)`` as PyG's ``HeteroLinear``
  reads it with ``is_sorted=True``: the weight of row ``i`` is that of the segment holding
  ``i`` (PyG's ``type_ptr`` of ``type_vec``'s counts) and its bias ``bias[type_vec[i]]``.
* ``to_hetero`` models: :func:`group_linears` finds, in the grouped twin
  :mod:`hector.dynamo.pyg_to_hetero` builds, each run of per-type ``Linear`` calls of one
  module (one positional argument each, every argument defined before the first call) and
  replaces it by one :class:`TypedLinears` call and one ``getitem`` per type. Inputs of
  different widths (PyG's lazy ``Linear(-1, out)`` per type) are padded with zero columns to
  the widest (the weights with zero rows: the same products); inputs ``[*, F]`` run as rows.

Weight-sized glue (stacking, padding) runs as PyTorch ops in the captured graph, so autograd
takes the gradients to each type's weight and bias. A call the program does not cover (a
lazy weight before its first call, a type missing from the dict, inputs other than float32
tensors) runs the model's own code, the reason kept in :data:`hector.dynamo.pyg_route.FALLBACKS`.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from ..frontends import compiled as frontend
from ..frontends.graph_api import GraphProxy, Value
from . import pyg_route

#: The PyG module defining ``ToHeteroLinear`` (not imported by ``torch_geometric.nn``).
_PYG_MODULE = "torch_geometric.nn.to_hetero_module"


def _typed_linear_program(bias: bool) -> frontend.CompiledFunction:
    """``h_i = x_i W_{t(i)} (+ b_{t(i)})``: each row its own edge (a self-loop of its type)."""

    def typed_linear_rows(g: GraphProxy, x: Value, weight: Value, *rest: Value) -> Value:
        rows = g.typed_linear(g.gather_src(x), weight)
        return g.sum_to_dst(g.typed_bias(rows, rest[0]) if bias else rows)

    names = ["g", "x", "weight"] + (["bias"] if bias else [])
    return frontend.compile_with_arguments(typed_linear_rows, names)


_PROGRAMS: dict[str, frontend.CompiledFunction] = {}


def _compiled(name: str) -> frontend.CompiledFunction:
    """The program named ``typed-linear:<0|1>`` (``1``: with a bias per type)."""
    if name not in _PROGRAMS:
        kind, _, bias = name.partition(":")
        if kind != "typed-linear" or bias not in ("0", "1"):
            raise ValueError(f"unknown typed linear program {name!r}")
        _PROGRAMS[name] = _typed_linear_program(bias == "1")
    return _PROGRAMS[name]


def _columns(name: str, tensors: list[torch.Tensor]) -> Any:
    return tensors[1].shape[-1]


def typed_linear(
    x: torch.Tensor, row_type: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """``[N, out]``: row ``i`` of ``x`` ``[N, in]`` times ``weight[row_type[i]]`` (``weight``
    ``[T, in, out]``), plus ``bias[row_type[i]]`` (``bias`` ``[T, out]``) when given; one
    ``hector::pyg_layer`` call."""
    n = x.shape[0]
    loops = torch.arange(n, device=x.device).unsqueeze(0).expand(2, -1)
    tensors = [x, weight] if bias is None else [x, weight, bias]
    return torch.ops.hector.pyg_layer(
        f"typed-linear:{int(bias is not None)}",
        pyg_route._train(tensors),
        [loops, row_type],
        [n, weight.shape[0]],
        [],
        tensors,
    )


def _padded(weight: torch.Tensor, width: int) -> torch.Tensor:
    """A ``[in, out]`` weight with zero rows up to ``width`` (the same products)."""
    return torch.nn.functional.pad(weight, (0, 0, 0, width - weight.shape[0]))


def stacked(
    xs: list[torch.Tensor], weights: list[torch.Tensor], biases: list[torch.Tensor | None]
) -> list[torch.Tensor]:
    """Each ``xs[t] @ weights[t] + biases[t]`` (``weights[t]`` ``[in_t, out]``; ``xs[t]``
    ``[*, in_t]``), from one typed linear over the types' rows stacked in order."""
    width = max(x.shape[-1] for x in xs)
    rows = [x.reshape(-1, x.shape[-1]) for x in xs]
    pad = torch.nn.functional.pad
    x = torch.cat([r if r.shape[1] == width else pad(r, (0, width - r.shape[1])) for r in rows])
    weight = torch.stack([_padded(w, width) for w in weights])
    bias = None
    if any(b is not None for b in biases):
        zeros = weight.new_zeros(weight.shape[-1])
        bias = torch.stack([zeros if b is None else b for b in biases])
    row_type = torch.cat(
        [
            torch.full((r.shape[0],), t, dtype=torch.long, device=x.device)
            for t, r in enumerate(rows)
        ]
    )
    out = typed_linear(x, row_type, weight, bias)
    # pieces that take in-place ops (PyG's relu_()), as pyg_hetero's split does
    pieces = out.unsafe_split_with_sizes([r.shape[0] for r in rows])
    return [p.view(*x_t.shape[:-1], p.shape[-1]) for p, x_t in zip(pieces, xs, strict=True)]


def inputs_unsupported(xs: list[Any], weights: list[Any]) -> str | None:
    """Why these per-type inputs and weights are outside the program (None: they are not)."""
    for x in xs:
        if not isinstance(x, torch.Tensor) or x.dtype != torch.float32 or x.dim() < 1:
            return "an input that is not a float32 tensor (or a type missing from the call)"
        if x.layout != torch.strided:
            return "a sparse input"
    for w in weights:
        if isinstance(w, torch.nn.parameter.UninitializedParameter):
            return "a lazy weight before its first call"
        if w.dtype != torch.float32:
            return "a weight that is not float32"
    if len({w.shape[-1] for w in weights}) != 1:
        return "types whose linears differ in output width"
    if any(x.shape[-1] != w.shape[0] for x, w in zip(xs, weights, strict=True)):
        return "an input whose width is not its linear's"
    return None


# -- ToHeteroLinear ---------------------------------------------------------------------------


def _segment_types(type_vec: torch.Tensor, types: int) -> torch.Tensor:
    """Each row's segment as PyG's ``HeteroLinear(is_sorted=True)`` reads ``type_vec``: its
    counts as ``type_ptr``, row ``i`` in segment ``t`` where ``ptr[t] <= i < ptr[t + 1]`` (the
    row's own type when ``type_vec`` is sorted; rows past the last segment, which PyG leaves
    unwritten, the last type's)."""
    from torch_geometric.index import index2ptr

    ptr = index2ptr(type_vec, types)
    rows = torch.arange(type_vec.shape[0], device=type_vec.device)
    segment = torch.searchsorted(ptr[1:].contiguous(), rows, right=True)
    return segment.clamp(max=types - 1)


def _fused_unsupported(module: Any, x: Any, type_vec: Any) -> str | None:
    if not isinstance(type_vec, torch.Tensor) or type_vec.is_floating_point():
        return "type_vec is not an integer tensor"
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or type_vec.shape != x.shape[:1]:
        return "(x, type_vec) are not [N, F] rows and one type per row"
    return inputs_unsupported([x], [module.hetero_module.weight[0]])


def to_hetero_linear_forward(self: Any, x: Any, type_vec: Any = None) -> Any:
    """``ToHeteroLinear.forward`` under the Hector backend: one typed linear over ``x_dict``'s
    types (in ``self.types`` order) or over ``(x, type_vec)``; PyG's own forward, with the
    reason, where the program does not cover the call."""
    lin = self.hetero_module
    reason: str | None
    if isinstance(lin.weight, torch.nn.parameter.UninitializedParameter):
        reason = "a lazy weight before its first call"
    elif isinstance(x, dict) and lin.bias is None:
        reason = "x_dict without a bias (PyG's dict_forward indexes the bias: it raises as eager)"
    elif isinstance(x, dict):
        xs: list[Any] = [x.get(t) for t in self.types]
        reason = inputs_unsupported(xs, [lin.weight[0]] * len(xs))
        if reason is None:
            biases = [None if lin.bias is None else lin.bias[t] for t in range(len(xs))]
            outs = stacked(xs, list(lin.weight.unbind(0)), biases)
            return dict(zip(self.types, outs, strict=True))
    elif type_vec is not None:
        reason = _fused_unsupported(self, x, type_vec)
        if reason is None:
            out = typed_linear(x, _segment_types(type_vec, len(self.types)), lin.weight, None)
            return out if lin.bias is None else out + lin.bias[type_vec]
    else:
        reason = "called with other than x_dict or (x, type_vec)"
    pyg_route.record_fallback("ToHeteroLinear", reason)
    return pyg_route._ORIGINAL["ToHeteroLinear"](self, x, type_vec)


# -- to_hetero's per-type linears ---------------------------------------------------------------


def _is_linear(module: Any) -> bool:
    """``torch.nn.Linear`` or PyG's ``Linear`` exactly (a subclass may compute otherwise)."""
    from torch_geometric.nn.dense.linear import Linear

    return type(module) in (torch.nn.Linear, Linear)


def _weights(lin: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``[in, out]`` and the bias of a ``torch.nn.Linear`` or PyG ``Linear``."""
    weight = lin.weight
    if isinstance(weight, torch.nn.parameter.UninitializedParameter):
        return weight, lin.bias
    return weight.t(), lin.bias


class TypedLinears(torch.nn.Module):
    """One run of a ``to_hetero`` model's per-type copies of a linear (shared with the model,
    so gradients reach their parameters), called with each type's tensor."""

    def __init__(self, label: str, linears: list[Any]) -> None:
        """``label`` names the layer in fallback reasons; ``linears[t]`` is the ``t``-th call's."""
        super().__init__()
        self.label = label
        self.linears = torch.nn.ModuleList(linears)

    def forward(self, *xs: Any) -> tuple[Any, ...]:
        """Each type's output, in the calls' order."""
        weights, biases = zip(*(_weights(lin) for lin in self.linears), strict=True)
        reason = inputs_unsupported(list(xs), list(weights))
        if reason is not None:
            pyg_route.record_fallback(self.label, reason)
            return tuple(lin(x) for lin, x in zip(self.linears, xs, strict=True))
        return tuple(stacked(list(xs), list(weights), list(biases)))


@dataclass
class LinearRun:
    """Consecutive per-type calls of one module's linears (``prefix``: its ``ModuleDict``)."""

    prefix: str
    calls: list[torch.fx.Node]


def _runs(gm: torch.fx.GraphModule, graph: torch.fx.Graph, keys: set[str]) -> list[LinearRun]:
    """The runs of per-type linear calls in ``graph``: ``call_module`` nodes of
    ``<prefix>.<type key>`` on a linear, one positional argument each, consecutive among the
    graph's module calls, each type once."""
    runs: list[LinearRun] = []
    last: LinearRun | None = None
    for n in graph.nodes:
        if n.op != "call_module":
            continue
        prefix, _, key = str(n.target).rpartition(".")
        one_arg = len(n.args) == 1 and not n.kwargs
        if key not in keys or not one_arg or not _is_linear(gm.get_submodule(str(n.target))):
            last = None
            continue
        seen = {str(c.target).rpartition(".")[2] for c in last.calls} if last else set()
        if last is None or last.prefix != prefix or key in seen:
            last = LinearRun(prefix, [])
            runs.append(last)
        last.calls.append(n)
    return [r for r in runs if len(r.calls) > 1 and _inputs_first(r)]


def _inputs_first(run: LinearRun) -> bool:
    """Whether every call's input is defined before the run's first call (one call there can
    take them all)."""
    order = {n: i for i, n in enumerate(run.calls[0].graph.nodes)}
    first = order[run.calls[0]]
    return all(
        not isinstance(n.args[0], torch.fx.Node) or order[n.args[0]] < first for n in run.calls
    )


def group_linears(
    gm: torch.fx.GraphModule, graph: torch.fx.Graph, keys: set[str], start: int
) -> dict[str, torch.nn.Module]:
    """Replace each run of per-type linear calls in ``graph`` (a copy of ``to_hetero`` model
    ``gm``'s; ``keys``: its node types and ``to_hetero``'s names of its edge types) by one
    :class:`TypedLinears` call (submodule ``hector_linear_<start + i>``) and a ``getitem``
    per type; the new submodules by name."""
    layers: dict[str, torch.nn.Module] = {}
    for run in _runs(gm, graph, keys):
        linears = [gm.get_submodule(str(n.target)) for n in run.calls]
        target = f"hector_linear_{start + len(layers)}"
        layers[target] = TypedLinears(f"to_hetero {run.prefix} (Linear)", linears)
        with graph.inserting_before(run.calls[0]):
            call = graph.call_module(target, tuple(n.args[0] for n in run.calls))
            for i, n in enumerate(run.calls):
                n.replace_all_uses_with(graph.call_function(operator.getitem, (call, i)))
        for n in reversed(run.calls):
            graph.erase_node(n)
    return layers


pyg_route.register_family("typed-linear", pyg_route.ProgramFamily(_compiled, _columns, typed=False))
pyg_route.register_layer("ToHeteroLinear", to_hetero_linear_forward, module=_PYG_MODULE)
