"""Self-loops of ``GATConv``/``GATv2Conv(add_self_loops=True)`` (PyG's default) in the
``hetero-gat`` and ``hetero-gatv2`` programs of :mod:`hector.dynamo.pyg_hetero`.

On a relation from a node type to itself, PyG's forward first removes the relation's own
loops (``remove_self_loops``), then appends one loop ``i → i`` per node ``i`` below
``min(sources, destinations)`` (``add_self_loops``); with edge features, each appended loop's
features are ``compute_loop_attr``'s by the conv's ``fill_value``: ones (``None``), a number,
a tensor broadcast to one row, or a reduction (``"add"``/``"sum"``, ``"mean"``, ``"max"``,
``"min"``, ``"mul"``, ``"any"``) of the features of the edges left into that node (``"mean"``,
PyG's default, and ``"add"``/``"max"``/``"min"``/``"any"``: zeros for a node that has none,
``"mul"``: ones). ``"any"`` is PyG's ``scatter_``: where several edges enter a node, the
features of the last of them in edge order, which is what PyTorch's CPU kernel writes last
(on CUDA, PyTorch picks one of them arbitrarily).

The programs keep shapes fixed by the input's (no data-dependent edge count): the loops PyG
appends are appended after the relation's edges (:func:`append`), and the relation's own
loops stay, with a ``-inf`` logit (:func:`removed`): their softmax weight is 0, as if removed.
The loops' features are computed from the edges' with the own loops masked out
(:func:`with_loop_features`), so they, their edge logits and the gradients of the edges'
features are PyG's. Attention dropout in training draws PyG's mask over PyG's edges, whose
count the data decides, in an op of its own that puts each row on its edge of the program's
layout (:func:`dropout_mask`): from one seed, the compiled step's outputs, gradients and
generator state are eager PyG's.
"""

from __future__ import annotations

from typing import Any

import torch

from . import pyg_attention_dropout

#: ``fill_value`` strings computed: PyG's ``scatter`` reduction each names.
REDUCTIONS = {
    "add": "sum",
    "sum": "sum",
    "mean": "mean",
    "max": "amax",
    "amax": "amax",
    "min": "amin",
    "amin": "amin",
    "mul": "prod",
    "any": "last",
}


def unsupported(convs: list[Any]) -> str | None:
    """Why the convs' self-loops are outside the programs (None: they are not): with edge
    features, a ``fill_value`` other than those PyG's ``compute_loop_attr`` computes by shape
    or by a reduction above (another string, which PyG's ``scatter`` refuses)."""
    for c in convs:
        if not c.add_self_loops:
            continue
        name, fill = type(c).__name__, c.fill_value
        if getattr(c, "lin_edge", None) is not None and not _computed(fill):
            return f"{name}(add_self_loops=True, fill_value={fill!r}) (the loops' features)"
    return None


def _computed(fill: Any) -> bool:
    if fill is None or isinstance(fill, (int, float, torch.Tensor)):
        return True
    return isinstance(fill, str) and fill in REDUCTIONS


def append(convs: list[Any], edge_index: list[torch.Tensor], rows: list[int]) -> list[int]:
    """Append each looped relation's loops to its edges in ``edge_index`` (in place), one loop
    ``i → i`` per node ``i`` below ``min(sources, destinations)`` (``rows[2r]``,
    ``rows[2r + 1]``: relation ``r``'s source and destination row counts), after the
    relation's edges as PyG's ``add_self_loops`` appends them; the number appended per
    relation (0 without ``add_self_loops``)."""
    loops = []
    for r, (c, ei) in enumerate(zip(convs, edge_index, strict=True)):
        n = min(rows[2 * r], rows[2 * r + 1]) if c.add_self_loops else 0
        if n:
            ids = torch.arange(n, device=ei.device, dtype=ei.dtype)
            edge_index[r] = torch.cat([ei, torch.stack([ids, ids])], dim=1)
        loops.append(n)
    return loops


def removed(edge_index: torch.Tensor, n: int) -> torch.Tensor:
    """``[E]`` bool: the relation's own loops (which PyG removes) among its edges
    ``edge_index`` (the ``n`` appended loops last, not removed)."""
    own = edge_index[:, : edge_index.shape[1] - n]
    return torch.cat([own[0] == own[1], own.new_zeros(n, dtype=torch.bool)])


def kept_mean_weights(
    convs: list[Any],
    edge_index: list[torch.Tensor],
    loops: list[int],
    destinations: list[int],
    like: torch.Tensor,
) -> torch.Tensor:
    """``[E, H]``: ``aggr="mean"``'s factor of each edge, relations in their order: 1 over the
    number of edges PyG aggregates into its destination within its relation (a looped
    relation's: its edges other than its own loops, and the loops appended; ``destinations``:
    each relation's destination row count), 0 on an own loop PyG removes."""
    parts = []
    for c, ei, n, d in zip(convs, edge_index, loops, destinations, strict=True):
        kept = like.new_ones(ei.shape[1])
        if c.add_self_loops:
            kept = kept.masked_fill(removed(ei, n), 0.0)
        count = like.new_zeros(d).index_add(0, ei[1], kept)
        weight = kept / count.clamp(min=1.0)[ei[1]]
        parts.append(weight.unsqueeze(1).expand(-1, c.heads))
    return torch.cat(parts)


def logits(edge_index: torch.Tensor, n: int, edges: torch.Tensor) -> torch.Tensor:
    """``edges`` (``[E, H]`` edge logits of a relation with ``n`` appended loops) with
    ``-inf`` on the relation's own loops."""
    return edges.masked_fill(removed(edge_index, n).unsqueeze(1), float("-inf"))


def removal_logits(
    edge_index: list[torch.Tensor], loops: list[int], like: torch.Tensor, convs: list[Any]
) -> torch.Tensor:
    """``[E, H]``: the relations' edge logits where only self-loops add one (``GATv2Conv``'s),
    in their order: ``-inf`` on a looped relation's own loops, 0 elsewhere."""
    parts = []
    for c, ei, n in zip(convs, edge_index, loops, strict=True):
        zeros = like.new_zeros(ei.shape[1], c.heads)
        parts.append(logits(ei, n, zeros) if n else zeros)
    return torch.cat(parts)


def with_loop_features(
    attr: torch.Tensor, edge_index: torch.Tensor, n: int, fill: Any
) -> torch.Tensor:
    """The relation's edge features ``attr`` (``[E - n]`` or ``[E - n, D]``, the edges before
    the ``n`` appended loops) with the loops' rows after them, as PyG's ``compute_loop_attr``
    makes them by ``fill`` (module docstring) from the edges other than the own loops."""
    size = (n, *attr.shape[1:])
    if fill is None:
        loops = attr.new_ones(size)
    elif isinstance(fill, (int, float)):
        loops = attr.new_full(size, fill)
    elif isinstance(fill, torch.Tensor):
        value = fill.to(attr.device, attr.dtype)
        value = value.unsqueeze(0) if value.dim() != attr.dim() else value
        loops = value.expand(size).contiguous()
    else:
        loops = _reduced(attr, edge_index[:, : edge_index.shape[1] - n], n, REDUCTIONS[fill])
    return torch.cat([attr, loops])


def _reduced(attr: torch.Tensor, own: torch.Tensor, n: int, reduce: str) -> torch.Tensor:
    """``[n, ...]``: PyG's ``scatter(attr, destination, 0, n, reduce)`` over the edges other
    than the own loops (those weigh nothing: 0 in a sum, 1 in a product, ``∓inf`` in a
    maximum or minimum, and a node left with no edge gets PyG's 0, or 1 for a product;
    ``"last"``: the features of the node's last edge other than its own loops)."""
    kept = own[0] != own[1]
    if reduce == "last":
        return _last(attr, own[1], kept, n)
    shape = (-1,) + (1,) * (attr.dim() - 1)
    index = own[1].view(shape).expand_as(attr)
    weigh = kept.view(shape)
    if reduce in ("sum", "mean"):
        total = attr.new_zeros(n, *attr.shape[1:]).scatter_add(0, index, attr * weigh)
        if reduce == "sum":
            return total
        count = attr.new_zeros(n).scatter_add(0, own[1], kept.to(attr.dtype)).clamp(min=1)
        return total / count.view(shape)
    if reduce == "prod":
        values = torch.where(weigh, attr, attr.new_ones(()))
        return attr.new_ones(n, *attr.shape[1:]).scatter_reduce(0, index, values, "prod")
    neutral = float("-inf") if reduce == "amax" else float("inf")
    values = torch.where(weigh, attr, attr.new_full((), neutral))
    out = attr.new_zeros(n, *attr.shape[1:])
    out = out.scatter_reduce(0, index, values, reduce, include_self=False)
    reached = attr.new_zeros(n).scatter_add(0, own[1], kept.to(attr.dtype)) > 0
    return torch.where(reached.view(shape), out, attr.new_zeros(()))


def _last(attr: torch.Tensor, dst: torch.Tensor, kept: torch.Tensor, n: int) -> torch.Tensor:
    """``[n, ...]``: PyG's ``scatter(..., reduce="any")`` (PyTorch's ``scatter_``) over the
    ``kept`` edges (``dst``: each edge's destination). Its value is the row of ``attr`` of the
    node's last kept edge in edge order, zeros for a node with none; its gradient is
    ``scatter_``'s, the node's gradient on every kept edge into it (a sum over those edges
    carries it, its value taken out)."""
    if attr.shape[0] == 0:
        return attr.new_zeros(n, *attr.shape[1:])
    shape = (-1,) + (1,) * (attr.dim() - 1)
    position = torch.arange(dst.shape[0], device=dst.device)
    position = torch.where(kept, position, position.new_full((), -1))
    last = position.new_full((n,), -1).scatter_reduce(0, dst, position, "amax")
    value = torch.where((last >= 0).view(shape), attr[last.clamp(min=0)], attr.new_zeros(()))
    index = dst.view(shape).expand_as(attr)
    total = attr.new_zeros(n, *attr.shape[1:]).scatter_add(0, index, attr * kept.view(shape))
    return value.detach() + (total - total.detach())


@torch.library.custom_op("hector::gat_loops_dropout_mask", mutates_args=())
def dropout_mask(edge_index: torch.Tensor, loops: int, heads: int, p: float) -> torch.Tensor:
    """``[E, H]`` float32: attention dropout's mask for a relation whose edges
    ``edge_index`` end with ``loops`` appended loops, drawn as ``F.dropout`` draws over PyG's
    ``α`` (:func:`hector.dynamo.pyg_attention_dropout.relation_mask`): ``[E', H]``, ``E'``
    the relation's edges less its own loops plus the appended ones, a count the data decides
    (hence an op of its own, whose output has the input's shape), in PyG's edge order (the
    edges left by ``remove_self_loops``, then the loops); each row put on its edge of the
    program's layout, 0 on the own loops (their coefficient is 0)."""
    own = edge_index[:, : edge_index.shape[1] - loops]
    kept = torch.cat([own[0] != own[1], own.new_ones(loops, dtype=torch.bool)])
    like = torch.empty(0, device=edge_index.device)
    drawn = pyg_attention_dropout.relation_mask(like, int(kept.sum()), heads, p)
    rows = (torch.cumsum(kept, 0) - 1).clamp(min=0)
    return torch.where(kept.unsqueeze(1), drawn[rows], like.new_zeros(()))


@dropout_mask.register_fake
def _dropout_mask_fake(edge_index: torch.Tensor, loops: int, heads: int, p: float) -> torch.Tensor:
    return edge_index.new_empty(edge_index.shape[1], heads, dtype=torch.float32)


def dropout_masks(
    convs: list[Any], edge_index: list[torch.Tensor], loops: list[int], like: torch.Tensor
) -> torch.Tensor:
    """``[E, H]``: the relations' attention dropout masks in their order, as
    :func:`hector.dynamo.pyg_attention_dropout.mask` draws them, a looped relation's by
    :func:`dropout_mask`."""
    ps = pyg_attention_dropout.probabilities(convs)
    heads = convs[0].heads
    parts = []
    for p, ei, n in zip(ps, edge_index, loops, strict=True):
        if n and 0 < p < 1:
            parts.append(torch.ops.hector.gat_loops_dropout_mask(ei, n, heads, p).to(like.dtype))
        else:
            parts.append(pyg_attention_dropout.relation_mask(like, ei.shape[1], heads, p))
    return torch.cat(parts)
