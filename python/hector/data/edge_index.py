"""PyG-style graph input: the one validator of ``edge_index`` / ``edge_type`` / ``node_type``
tensors, behind every builder of graphs from an edge index (:class:`~hector.data.graph.HeteroGraph`
and the dataset loaders).

:func:`check_edge_index` checks dtypes and shapes, then the counts, then the sizes against the
caller's :class:`~hector.data.limits.SizeBudget` (before anything of that size is allocated),
then every edge's endpoints and type (natively, edge by edge) and every node's type, and
returns the accepted :class:`EdgeIndexInput`; each error is a :class:`ValueError` naming the
offending argument or entry. :func:`as_int_tensor` and :func:`as_count` are its checks of one
integer tensor and one count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from hector.runtime import native

from .limits import MAX_COUNT, ResourceLimitError, SizeBudget

__all__ = ["EdgeIndexInput", "as_count", "as_int_tensor", "check_edge_index"]

#: Unsigned tensor dtypes few torch operators support (no min/max/comparisons): made int64.
_WIDE_UNSIGNED = (torch.uint16, torch.uint32, torch.uint64)
_INT64_MAX = 2**63 - 1


def as_int_tensor(name: str, value: Any) -> torch.Tensor:
    """``value`` (a tensor or NumPy array of integers) as a CPU integer tensor.

    Unsigned 16/32/64-bit values become int64 (torch cannot compare them), checked to fit.

    Raises:
        ValueError: naming ``name``, for another type, a non-integer dtype, or a value over
            the int64 range.
    """
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "iu":
            raise ValueError(f"{name} must have an integer dtype, got numpy {value.dtype}")
        value = torch.from_numpy(np.ascontiguousarray(value))  # from_numpy rejects <0 strides
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of integers, got {type(value).__name__}")
    if value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool:
        raise ValueError(f"{name} must have an integer dtype, got {value.dtype}")
    value = value.detach().cpu()
    if value.dtype in _WIDE_UNSIGNED:
        flat = value.numpy().reshape(-1)
        if flat.size and int(flat.max()) > _INT64_MAX:
            i = int(np.argmax(flat > _INT64_MAX))
            raise ValueError(f"{name} entry {i} = {int(flat[i])} does not fit in int64")
        value = torch.from_numpy(value.numpy().astype(np.int64))
    return value


def as_count(name: str, value: Any, *, minimum: int = 0) -> int:
    """Return ``value`` as a Python int in ``[minimum, 2**31 - 1]``.

    Raises:
        ValueError: naming ``name``, for a value that is not an int or is below ``minimum``;
            a :class:`ResourceLimitError` for one over the int32 range.
    """
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if value > MAX_COUNT:
        raise ResourceLimitError(f"{name} = {value} does not fit in int32 (max {MAX_COUNT})")
    return value


def _int64_numpy(t: torch.Tensor) -> np.ndarray:
    """Return a contiguous int64 numpy view/copy of an integer CPU tensor."""
    return np.ascontiguousarray(t.to(torch.int64).numpy())


@dataclass(frozen=True)
class EdgeIndexInput:
    """PyG-style graph input that :func:`check_edge_index` accepted: every id and type in range.

    Attributes:
        edge_index: integer CPU tensor [2, E] (the caller's dtype; unsigned wide ints as int64).
        edge_type: integer CPU tensor [E].
        node_type: integer CPU tensor [N], or None when the caller gave none (one node type).
        num_nodes: N.
        num_etypes: number of edge types R; every ``edge_type`` entry is in ``[0, R)``.
        num_ntypes: number of node types; every ``node_type`` entry is in ``[0, num_ntypes)``.
        src, dst, etype: int64 NumPy arrays [E] of the edges (rows of ``edge_index``, and
            ``edge_type``), as the native runtime takes them.
    """

    edge_index: torch.Tensor
    edge_type: torch.Tensor
    node_type: torch.Tensor | None
    num_nodes: int
    num_etypes: int
    num_ntypes: int
    src: np.ndarray
    dst: np.ndarray
    etype: np.ndarray


def _edge_tensors(edge_index: Any, edge_type: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``edge_index`` [2, E] and ``edge_type`` [E] as integer tensors, or ValueError."""
    edge_index = as_int_tensor("edge_index", edge_index)
    edge_type = as_int_tensor("edge_type", edge_type)
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must have shape [2, E], got {list(edge_index.shape)}")
    if edge_type.dim() != 1:
        raise ValueError(f"edge_type must have shape [E], got {list(edge_type.shape)}")
    num_edges = edge_index.shape[1]
    if edge_type.shape[0] != num_edges:
        raise ValueError(
            f"edge_type has {edge_type.shape[0]} entries but edge_index has {num_edges} edges"
        )
    return edge_index, edge_type


def _check_edge_ranges(
    src: np.ndarray,
    dst: np.ndarray,
    etype: np.ndarray,
    num_nodes: int,
    num_etypes: int,
    etypes: str,
) -> None:
    """Range-check the edges in the native runtime, edge by edge (source, destination, type)."""
    code, bad = native.graph_validate(src, dst, etype, num_nodes, num_etypes)
    if code == native.ERR_SRC_RANGE:
        raise ValueError(
            f"edge_index[0][{bad}] = {int(src[bad])} is out of range for num_nodes={num_nodes}"
        )
    if code == native.ERR_DST_RANGE:
        raise ValueError(
            f"edge_index[1][{bad}] = {int(dst[bad])} is out of range for num_nodes={num_nodes}"
        )
    if code == native.ERR_ETYPE_RANGE:
        value = int(etype[bad])
        if value < 0:
            raise ValueError(f"edge_type[{bad}] = {value} is negative")
        raise ValueError(f"edge_type[{bad}] = {value} is out of range for {etypes}={num_etypes}")


def _check_node_types(node_type: torch.Tensor | None, num_nodes: int, num_ntypes: int) -> None:
    """Every node type in ``[0, num_ntypes)``, and at least one node type when there are nodes."""
    if node_type is not None:
        ntype64 = node_type.to(torch.int64)
        bad_nodes = ((ntype64 < 0) | (ntype64 >= num_ntypes)).nonzero()
        if bad_nodes.numel() > 0:
            i = int(bad_nodes[0, 0])
            value = int(ntype64[i])
            if value < 0:
                raise ValueError(f"node_type[{i}] = {value} is negative")
            raise ValueError(
                f"node_type[{i}] = {value} is out of range for num_ntypes={num_ntypes}"
            )
    if num_nodes > 0 and num_ntypes == 0:
        raise ValueError(f"num_ntypes must be >= 1 for a graph with {num_nodes} nodes")


def check_edge_index(
    edge_index: Any,
    edge_type: Any,
    *,
    budget: SizeBudget,
    num_nodes: Any = None,
    node_type: Any = None,
    num_etypes: Any = None,
    num_ntypes: Any = None,
    etypes: str = "num_etypes",
) -> EdgeIndexInput:
    """Validate PyG-style graph input: the one check behind every builder from an edge index.

    Dtypes and shapes first, then the counts (given ones must be ints in ``[0, 2**31 - 1]``;
    missing ones are read off the tensors), then the sizes against ``budget`` (before anything
    of that size is allocated), then every edge's endpoints and type (edge by edge) and every
    node's type.

    Args:
        edge_index: integer [2, E]: sources in row 0, destinations in row 1.
        edge_type: integer [E], the type of each edge.
        budget: what the caller allocates, to check the sizes against the limits.
        num_nodes: N; defaults to ``len(node_type)`` when given, else ``edge_index.max() + 1``
            (0 without edges).
        node_type: integer [N] node types; None means one node type.
        num_etypes: number of edge types R; defaults to ``edge_type.max() + 1``.
        num_ntypes: number of node types; defaults to ``node_type.max() + 1`` (1 without
            ``node_type`` or nodes).
        etypes: the caller's name for the edge type count, used in messages.

    Returns:
        The accepted input.

    Raises:
        ValueError: naming the offending argument or entry: a non-integer dtype, a wrong shape,
            mismatched lengths, a negative count, a node id, edge type or node type out of
            range. :class:`ResourceLimitError` (a ValueError) for counts over the int32
            indexing of the kernels or sizes over :func:`memory_limit`.
    """
    edge_index, edge_type = _edge_tensors(edge_index, edge_type)
    num_edges = int(edge_index.shape[1])
    if node_type is not None:
        node_type = as_int_tensor("node_type", node_type)
        if node_type.dim() != 1:
            raise ValueError(f"node_type must have shape [N], got {list(node_type.shape)}")
    if num_nodes is not None:
        num_nodes = as_count("num_nodes", num_nodes)
    elif node_type is not None:
        num_nodes = int(node_type.shape[0])
    else:  # a negative id is reported below
        num_nodes = max(int(edge_index.max()) + 1, 0) if num_edges > 0 else 0
    if node_type is not None and node_type.shape[0] != num_nodes:
        raise ValueError(f"node_type has {node_type.shape[0]} entries but num_nodes={num_nodes}")
    if num_etypes is not None:
        num_etypes = as_count(etypes, num_etypes)
    else:  # a negative type is reported below
        num_etypes = max(int(edge_type.max()) + 1, 0) if num_edges > 0 else 0
    if num_ntypes is not None:
        num_ntypes = as_count("num_ntypes", num_ntypes)
    elif node_type is not None and num_nodes > 0:  # a negative type is reported below
        num_ntypes = max(int(node_type.max()) + 1, 1)
    else:
        num_ntypes = 1
    budget.check(nodes=num_nodes, edges=num_edges, relations=num_etypes, node_types=num_ntypes)
    src, dst = _int64_numpy(edge_index[0]), _int64_numpy(edge_index[1])
    etype = _int64_numpy(edge_type)
    _check_edge_ranges(src, dst, etype, num_nodes, num_etypes, etypes)
    _check_node_types(node_type, num_nodes, num_ntypes)
    return EdgeIndexInput(
        edge_index, edge_type, node_type, num_nodes, num_etypes, num_ntypes, src, dst, etype
    )
