"""Generated replicas of published graphs: ``synthetic:<name>`` at a scale and seed.

:func:`synthetic` draws a heterogeneous graph with the node, edge, relation and node type counts
of a graph in :data:`~hector.data.published.SYNTHETIC_SPECS` (scaled), skewed degrees and
inverse relations. It matches the sizes, not the real structure, hence the ``synthetic:``
prefix the dataset name keeps. Equal arguments give equal graphs.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .dataset import Dataset, DatasetError, check_dataset_size
from .published import SYNTHETIC_SPECS, SyntheticSpec

__all__ = ["synthetic"]

#: Peak bytes per edge while drawing: candidates (1.3x, int64 pairs, float64 draws, np.unique's
#: sort) cost more per edge than holding the result.
_SYNTHETIC_BYTES_PER_EDGE = 256


def synthetic(name: str, scale: float = 1.0, seed: int = 0) -> Dataset:
    """Generate ``synthetic:<name>``: a graph with the published sizes of ``name``, scaled.

    Nodes ``round(nodes * scale)`` split into the spec's node types (skewed sizes); relations
    each get a fixed (source type, destination type) and a skewed share of the
    ``round(edges * scale)`` edges; sources follow a power law (a few hubs emit many edges of a
    relation, so unique (source, relation) pairs are far fewer than edges — compaction ratio
    below 1 as in real RDF graphs), destinations a milder one. Duplicate edges and self loops
    are removed. Then every relation gets an inverse ``rev-<rel>`` (edges and relations double).

    Args:
        name: a key of :data:`SYNTHETIC_SPECS` (with or without the ``synthetic:`` prefix).
        scale: size factor in (0, 1e3]; node and edge counts scale, relation counts do not
            (they shrink only if there would be fewer edges than relations).
        seed: generator seed; equal arguments give equal graphs.

    Raises:
        DatasetError: on an unknown name or a scale that leaves no nodes.
    """
    key = name.removeprefix("synthetic:")
    key, spec = _replica_of(name, scale)
    rng = np.random.default_rng(seed)
    n = round(spec.nodes * scale)
    n_types = spec.node_types
    if n < 2 * n_types:
        raise DatasetError(
            f"scale={scale} leaves {n} nodes for synthetic:{key}; it needs at least "
            f"{2 * n_types} ({n_types} node types)"
        )
    e_base = max(round(spec.edges * scale), 1)
    # Drawing candidates costs more per edge than holding the result; the inverse edges double
    # the count.
    check_dataset_size(
        f"synthetic:{key} at scale={scale}",
        nodes=n,
        edges=2 * e_base,
        names=2 * spec.relations,
        bytes_per_edge=_SYNTHETIC_BYTES_PER_EDGE,
    )
    sizes, type_names = _node_type_sizes(spec, n)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    # A per-type permutation maps degree ranks to ids: hubs are shared by every relation of a
    # type (as a class node in RDF is the hub of many relations) but scattered over the ids.
    hub_order = [rng.permutation(int(s)) for s in sizes]
    n_rel = min(spec.relations, e_base)
    ends, shares, rel_names = _relation_schema(spec, rng, sizes, n_rel)
    counts = _relation_edge_counts(shares, e_base, sizes, ends)
    skew = list(spec.relation_skew) or [(3.0, 1.6)] * len(ends)
    src, dst, et = _draw_edges(rng, ends, counts, skew, sizes, offsets, hub_order, n)
    edge_index = np.stack([np.concatenate([src, dst]), np.concatenate([dst, src])])
    edge_type = np.concatenate([et, et + n_rel])
    edge_types = [(type_names[s], rel_names[r], type_names[d]) for r, (s, d) in enumerate(ends)]
    edge_types += [(d, f"rev-{rel}", s) for s, rel, d in edge_types]
    return Dataset(
        name=f"synthetic:{key}",
        num_nodes=n,
        node_type=torch.from_numpy(np.repeat(np.arange(n_types), sizes)),
        node_types=type_names,
        edge_index=torch.from_numpy(edge_index),
        edge_type=torch.from_numpy(edge_type),
        edge_types=edge_types,
        info={
            "replica_of": spec.source,
            "scale": scale,
            "seed": seed,
            "published": {"nodes": spec.nodes, "edges": spec.edges, "relations": spec.relations},
            "inverse_edges": True,
        },
    )


def _replica_of(name: str, scale: float) -> tuple[str, SyntheticSpec]:
    """The key and spec ``synthetic:<name>`` names; DatasetError on an unknown name or a scale
    outside (0, 1000]."""
    key = name.removeprefix("synthetic:")
    if key not in SYNTHETIC_SPECS:
        raise DatasetError(
            f"unknown synthetic dataset {name!r}; valid: "
            + ", ".join(f"synthetic:{k}" for k in SYNTHETIC_SPECS)
        )
    if (
        isinstance(scale, bool)
        or not isinstance(scale, int | float)
        or not math.isfinite(scale)
        or not 0 < scale <= 1e3
    ):
        raise DatasetError(f"scale must be a number in (0, 1000], got {scale!r}")
    return key, SYNTHETIC_SPECS[key]


def _node_type_sizes(spec: SyntheticSpec, n: int) -> tuple[np.ndarray, list[str]]:
    """Nodes per node type (the spec's fractions, else a Zipf-like split: type k ~ 1/(k+1);
    at least 2 each) and the node type names."""
    n_types = spec.node_types
    frac = np.array(spec.type_fractions or [1.0 / (k + 1) for k in range(n_types)])
    sizes = np.maximum(np.floor(frac / frac.sum() * n).astype(np.int64), 2)
    sizes[0] += n - sizes.sum()
    type_names = list(spec.type_names) or (
        ["entity"] if n_types == 1 else [f"type{k}" for k in range(n_types)]
    )
    return sizes, type_names


def _relation_schema(
    spec: SyntheticSpec, rng: np.random.Generator, sizes: np.ndarray, n_rel: int
) -> tuple[list[tuple[int, int]], np.ndarray, list[str]]:
    """Each relation's (source type, destination type), its share of the edges (normalised)
    and its name: the spec's schema where it pins one, else drawn (endpoint types by node
    count, skewed shares: a few relations dominate)."""
    if spec.relation_ends:
        ends = list(spec.relation_ends)
        shares = np.array(spec.relation_fractions)
        rel_names = list(spec.relation_names)
    else:
        n_types = spec.node_types
        p = sizes / sizes.sum()
        ends = [
            (int(rng.choice(n_types, p=p)), int(rng.choice(n_types, p=p))) for _ in range(n_rel)
        ]
        shares = 1.0 / (np.arange(n_rel) + 1.0) ** 1.1  # skewed: a few relations dominate
        shares = shares[rng.permutation(n_rel)]
        rel_names = [f"rel{r}" for r in range(n_rel)]
    return ends, shares / shares.sum(), rel_names


def _relation_edge_counts(
    shares: np.ndarray, e_base: int, sizes: np.ndarray, ends: list[tuple[int, int]]
) -> np.ndarray:
    """Edges per relation: ``shares`` of ``e_base``, each relation at most half as dense as
    its (source type, destination type) block allows, the excess moved to relations with room
    (a graph too small for its edges gets fewer)."""
    counts = np.maximum(np.floor(shares * e_base).astype(np.int64), 1)
    counts[np.argmax(counts)] += e_base - counts.sum()
    cap = np.maximum(np.array([sizes[s] * sizes[d] for s, d in ends], dtype=np.int64) // 2, 1)
    counts = np.minimum(counts, cap)
    deficit = e_base - int(counts.sum())
    room = cap - counts
    if deficit > 0 and room.sum() > 0:
        add = np.minimum(np.floor(room / room.sum() * deficit).astype(np.int64), room)
        counts += add
        rest = deficit - int(add.sum())
        for r in np.argsort(-(cap - counts))[: max(rest, 0)]:
            if counts[r] < cap[r]:
                counts[r] += 1
    return counts


def _draw_edges(
    rng: np.random.Generator,
    ends: list[tuple[int, int]],
    counts: np.ndarray,
    skew: list[tuple[float, float]],
    sizes: np.ndarray,
    offsets: np.ndarray,
    hub_order: list[np.ndarray],
    n: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Draw each relation's edges (sources and destinations by power laws over the hub order,
    ``skew[r]`` their powers), without duplicates or self loops: sources, destinations and
    relation ids, relation by relation."""
    srcs, dsts, rels = [], [], []
    for r, ((s, d), c) in enumerate(zip(ends, counts.tolist(), strict=True)):
        got = np.empty((2, 0), dtype=np.int64)
        for attempt in range(12):  # top up after removing duplicates and self loops
            need = c - got.shape[1]
            if need <= 0:
                break
            m = int(need * 1.3) + 16
            # skewed draws first; uniform ones fill what skew cannot reach in a dense block
            ps, pd = skew[r] if attempt < 6 else (1.0, 1.0)
            a = hub_order[s][_skewed_ids(rng, int(sizes[s]), m, ps)] + offsets[s]
            b = hub_order[d][_skewed_ids(rng, int(sizes[d]), m, pd)] + offsets[d]
            cand = np.concatenate([got, np.stack([a, b])], axis=1)
            cand = cand[:, cand[0] != cand[1]]
            _, first = np.unique(cand[0] * n + cand[1], return_index=True)
            got = cand[:, np.sort(first)]
        got = got[:, :c]
        srcs.append(got[0])
        dsts.append(got[1])
        rels.append(np.full(got.shape[1], r, dtype=np.int64))
    return np.concatenate(srcs), np.concatenate(dsts), np.concatenate(rels)


def _skewed_ids(rng: np.random.Generator, n: int, size: int, power: float) -> np.ndarray:
    """``size`` ranks in ``[0, n)``, rank ``floor(n u^power)``: density ~ r^(1/power - 1)."""
    u = rng.random(size)
    return np.minimum((n * u**power).astype(np.int64), n - 1)
