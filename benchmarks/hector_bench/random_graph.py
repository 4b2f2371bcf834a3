"""``random:NxExR``: a small uniform random graph, the size of a sampled mini-batch.

The graph the benches use where a call costs more than its kernels: ``N`` nodes in two node
types (``a``: the first half, ``b``: the rest), ``R`` relations whose (source type,
destination type) cycle through ``a→a``, ``a→b``, ``b→a``, ``b→b``, and ``E`` edges shared
evenly among them (the first ``E mod R`` relations get one more), each endpoint drawn
uniformly from its type. Duplicate edges are kept, as in a sampled batch. Equal arguments and
seed give equal graphs.
"""

from __future__ import annotations

import torch

from hector.data.dataset import Dataset, DatasetError, check_dataset_size

__all__ = ["PREFIX", "random_graph"]

PREFIX = "random:"
_ENDS = (("a", "a"), ("a", "b"), ("b", "a"), ("b", "b"))


def _sizes(spec: str) -> tuple[int, int, int]:
    """``(N, E, R)`` of ``random:NxExR``, checked."""
    parts = spec.removeprefix(PREFIX).split("x")
    try:
        n, e, r = (int(p) for p in parts)
    except ValueError:
        raise DatasetError(
            f"{spec!r}: expected random:NODESxEDGESxRELATIONS (three integers joined by x)"
        ) from None
    if n < 2 or e < 0 or r < 1:
        raise DatasetError(f"{spec!r}: needs NODES >= 2, EDGES >= 0 and RELATIONS >= 1")
    return n, e, r


def random_graph(spec: str, seed: int = 0) -> Dataset:
    """The graph ``random:NxExR`` names (see the module docstring).

    Raises:
        DatasetError: a malformed spec, or sizes over the loaders' memory limit.
    """
    n, e, r = _sizes(spec)
    check_dataset_size(spec, nodes=n, edges=e, names=r)
    gen = torch.Generator().manual_seed(seed)
    half = n // 2
    start = {"a": 0, "b": half}
    count = {"a": half, "b": n - half}
    src, dst, etype = [], [], []
    for rel in range(r):
        s, d = _ENDS[rel % len(_ENDS)]
        m = e // r + (rel < e % r)
        src.append(start[s] + torch.randint(count[s], (m,), generator=gen))
        dst.append(start[d] + torch.randint(count[d], (m,), generator=gen))
        etype.append(torch.full((m,), rel, dtype=torch.int64))
    return Dataset(
        name=spec,
        num_nodes=n,
        node_type=(torch.arange(n) >= half).long(),
        node_types=["a", "b"],
        edge_index=torch.stack([torch.cat(src), torch.cat(dst)]),
        edge_type=torch.cat(etype),
        edge_types=[(s, f"r{rel}", d) for rel in range(r) for s, d in [_ENDS[rel % len(_ENDS)]]],
        info={"random": {"nodes": n, "edges": e, "relations": r}, "seed": seed},
    )
