"""The row input of a ``HeteroConv``/``to_hetero`` layer program, without copies it need not make.

:mod:`hector.dynamo.pyg_hetero` gives its ``hector::pyg_layer`` op the node types' features as
one ``[N, F]`` tensor, ``torch.cat`` of each type's rows, in the captured graph. When a model
converts half-precision features before its first layer (MLPerf's ``rgnn.py``: float16 feature
file, ``x.float()`` per type), a training step makes two copies of the batch that the
program does not need: the float32 conversion of each type's rows, and their concatenation.
:func:`fold` rewrites a captured graph, after Dynamo's capture and before it first runs, where
the layer's rows take no gradient (input features; the op's ``train`` list names them):

* **read as stored**: a ``cat`` whose parts are all conversions to float32 (``.float()``,
  ``.to(torch.float32)``, ``.to(dtype=torch.float32)``, ``.type(torch.float32)``) of tensors of
  one half type (float16, bfloat16) concatenates those tensors instead; the program reads
  them in that type, widening each value exactly on load ([models.md, half
  precision](../../../docs/models.md#half-precision)), so its results are the float32 path's;
* **no copy**: the ``cat`` becomes :func:`stacked_rows`, which returns a view of the rows
  where the parts are consecutive row blocks of one tensor (the type slices of a Hector batch's
  ``x``: ``Batch.x_dict``, ``Batch.to_pyg_hetero``), and their ``torch.cat`` otherwise.

The conversions themselves are then dead and dropped from the graph, unless something else
reads them. Rows that take a gradient (a hidden layer's input) keep their ``cat``.
"""

from __future__ import annotations

from typing import Any

import torch

#: Half types the programs read as stored.
HALF = (torch.float16, torch.bfloat16)
#: How a captured graph calls ``torch.nn.functional.pad``.
_PADS = (torch.nn.functional.pad, torch._C._nn.pad)
#: Program families whose first tensor is the layer's rows (``pyg_hetero``'s).
_ROWS_FIRST = ("hetero-gat", "hetero-gatv2", "hetero-sage", "hetero-gcn")


def stacked_rows(parts: list[torch.Tensor]) -> torch.Tensor:
    """``torch.cat(parts)``, or a view of the same rows where the parts are consecutive row
    blocks of one contiguous storage (each part contiguous, one dtype and width, the next part
    starting where the previous one ends) and none takes a gradient."""
    first = parts[0]
    grad = torch.is_grad_enabled() and any(p.requires_grad for p in parts)
    if grad or first.dim() != 2 or not _consecutive(parts):
        return torch.cat(parts)
    rows = sum(int(p.shape[0]) for p in parts)
    width = int(first.shape[1])
    return first.as_strided((rows, width), (width, 1), first.storage_offset())


def _consecutive(parts: list[torch.Tensor]) -> bool:
    first = parts[0]
    storage = first.untyped_storage().data_ptr()
    end = first.data_ptr()
    for p in parts:
        if (
            p.dtype != first.dtype
            or p.device != first.device
            or p.dim() != 2
            or p.shape[1] != first.shape[1]
            or not p.is_contiguous()
            or p.untyped_storage().data_ptr() != storage
            or p.data_ptr() != end
        ):
            return False
        end = p.data_ptr() + p.nbytes
    return True


def _half_source(node: Any) -> Any:
    """The tensor node ``node`` converts to float32, when it is a half tensor (else None)."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_method" or not node.args:
        return None
    dtype: Any = torch.float32 if node.target == "float" and len(node.args) == 1 else None
    if node.target in ("to", "type"):
        given = node.args[1:] if len(node.args) == 2 else [node.kwargs.get("dtype")]
        extra = set(node.kwargs) - {"dtype"}
        dtype = given[0] if len(given) == 1 and not extra else None
        dtype = None if len(node.args) == 2 and node.kwargs else dtype
    source: Any = node.args[0]
    if dtype is not torch.float32 or _dtype(source) not in HALF:
        return None
    return None if source.meta["example_value"].requires_grad else source


def _dtype(node: Any) -> Any:
    value = node.meta.get("example_value") if isinstance(node, torch.fx.Node) else None
    return value.dtype if isinstance(value, torch.Tensor) else None


def _half_part(part: Any, graph: torch.fx.Graph) -> Any:
    """``part`` of the rows in its half type, when it is one of the conversions the layout
    makes from a half tensor: the conversion itself (its source), zero rows of it
    (``new_zeros``: zeros of the source) or its zero padding to the widest input (``pad`` of the
    source: zeros are exact in any type). None otherwise."""
    source = _half_source(part)
    if source is not None or not isinstance(part, torch.fx.Node) or not part.args:
        return source
    inner = _half_source(part.args[0])
    if inner is None:
        return None
    fill = part.op == "call_method" and part.target == "new_zeros" and not part.kwargs
    pad = part.op == "call_function" and part.target in _PADS
    if not (fill or (pad and _zero_pad(part))):
        return None
    with graph.inserting_before(part):
        new = graph.create_node(part.op, part.target, (inner, *part.args[1:]))
    new.meta["example_value"] = part.meta.get("example_value")
    value = inner.meta["example_value"]
    if isinstance(new.meta["example_value"], torch.Tensor):
        new.meta["example_value"] = new.meta["example_value"].to(value.dtype)
    return new


def _zero_pad(node: torch.fx.Node) -> bool:
    """Whether ``pad`` node ``node`` pads with zeros (``(x, pad)``, ``(x, pad, "constant",
    None or 0)``)."""
    mode, value = (list(node.args[2:]) + ["constant", None])[:2]
    return not node.kwargs and len(node.args) <= 4 and mode == "constant" and value in (None, 0)


def _rows_input(node: torch.fx.Node) -> Any:
    """The ``cat`` node a ``hector::pyg_layer`` call takes as its rows, when they take no
    gradient (else None)."""
    program, train, tensors = node.args[0], node.args[1], node.args[5]
    if not isinstance(train, list | tuple):
        return None
    if str(program).split(":")[0] not in _ROWS_FIRST or not isinstance(tensors, list | tuple):
        return None
    if train and 0 not in list(train)[1:]:  # the rows take a gradient
        return None
    cat = tensors[0]
    if not isinstance(cat, torch.fx.Node) or cat.target is not torch.cat:
        return None
    if cat.kwargs or len(cat.args) != 1 or not isinstance(cat.args[0], list | tuple):
        return None
    return cat


def fold(gm: torch.fx.GraphModule) -> int:
    """Rewrite the rows of ``gm``'s ``hector::pyg_layer`` calls (module docstring); the
    number of calls rewritten."""
    targets = (torch.ops.hector.pyg_layer.default, torch.ops.hector.pyg_layer)
    done = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in targets:
            continue
        cat = _rows_input(node)
        if cat is None:
            continue
        old = list(cat.args[0])
        parts = _half_parts(old, gm.graph)
        with gm.graph.inserting_before(node):
            rows = gm.graph.call_function(stacked_rows, (parts,))
        tensors = list(node.args[5])
        tensors[0] = rows
        node.args = (*node.args[:5], tensors)
        inner = [a for p in old if isinstance(p, torch.fx.Node) for a in p.args]
        _drop_unused([cat, *old, *inner], gm.graph)
        done += 1
    if done:
        gm.recompile()
    return done


def _half_parts(parts: list[Any], graph: torch.fx.Graph) -> list[Any]:
    """``parts`` in their one half type (:func:`_half_part`), or as they are where any is not."""
    halves = [_half_part(p, graph) for p in parts]
    kinds = {_dtype(h) for h in halves}
    if None not in halves and len(kinds) == 1:
        return halves
    _drop_unused(halves, graph)  # the zeros or pads made for nothing
    return parts


def _drop_unused(nodes: list[Any], graph: torch.fx.Graph) -> None:
    """Erase those of ``nodes`` (in order: a node before the nodes it reads) that nothing
    reads any more."""
    for n in dict.fromkeys(n for n in nodes if isinstance(n, torch.fx.Node)):
        if not n.users and n.op != "placeholder":
            graph.erase_node(n)
