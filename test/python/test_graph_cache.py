"""The graph cache of ``torch.compile(backend="hector")`` (issue 39): never a stale graph.

Index tensors rewritten in place by routes that keep the data pointer and the version counter
(NumPy views, ``.data``, ``torch.from_numpy`` over a refilled buffer) must give the new graph's
result, as eager PyG does; equal content must still hit (no rebuild). Each in-place case runs
``torch.compile(RGCNConv, backend=...)`` (the recognised-layer route, ``hector::pyg_layer``)
against eager PyG; the per-graph route (a raised ``RGATConv``) and ``HGTConv``'s cache are
checked too, then :class:`hector.frontends.graph_cache.IndexCache` directly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch
import torch._dynamo
from torch_geometric.nn import HGTConv, RGATConv, RGCNConv

import hector
from hector.dynamo import pyg_route
from hector.dynamo.backend import HectorBackend
from hector.frontends import graph_cache as _graph_cache
from hector.frontends.graph_cache import IndexCache, graph_builds, graph_for

N, E, R, F = 40, 240, 4, 8
TOL = 1e-4


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    torch._dynamo.reset()
    _graph_cache.clear()
    pyg_route._HGT_GRAPHS.clear()
    yield
    torch._dynamo.reset()


def _edges(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A graph's ``edge_index``/``edge_type`` in a shuffled (user) order, E edges."""
    g = hector.random_graph(N, E, R, isolated_nodes=2, seed=seed)
    ei, et = g.edge_index_sorted()
    p = torch.randperm(E, generator=torch.Generator().manual_seed(seed))
    return ei[:, p].contiguous(), et[p].contiguous()


def _check(model: torch.nn.Module, compiled: Any, x: torch.Tensor, *graph: Any) -> None:
    with torch.no_grad():
        got, want = compiled(x, *graph), model(x, *graph)
    assert (got - want).abs().max().item() <= TOL


def _numpy_write(ei: torch.Tensor, et: torch.Tensor, ei2: torch.Tensor, et2: torch.Tensor) -> None:
    ei.numpy()[...] = ei2.numpy()


def _data_write(ei: torch.Tensor, et: torch.Tensor, ei2: torch.Tensor, et2: torch.Tensor) -> None:
    ei.data[1] = ei2[1]  # the destinations only


def _data_copy(ei: torch.Tensor, et: torch.Tensor, ei2: torch.Tensor, et2: torch.Tensor) -> None:
    ei.data.copy_(ei2)


def _no_grad_write(
    ei: torch.Tensor, et: torch.Tensor, ei2: torch.Tensor, et2: torch.Tensor
) -> None:
    with torch.no_grad():  # bumps the version counter: a guard, seen before issue 39 too
        ei.copy_(ei2)


def _edge_type_write(
    ei: torch.Tensor, et: torch.Tensor, ei2: torch.Tensor, et2: torch.Tensor
) -> None:
    et.numpy()[...] = (et.numpy() + 1) % R  # the same edges, other relations


_WRITES: dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], None]] = {
    "numpy_view": _numpy_write,
    "data_setitem": _data_write,
    "data_copy": _data_copy,
    "no_grad_copy": _no_grad_write,
    "edge_type_numpy": _edge_type_write,
}


@pytest.mark.parametrize("write", list(_WRITES))
def test_rgcnconv_sees_an_in_place_rewrite(write: str) -> None:
    torch.manual_seed(1)
    model = RGCNConv(F, 6, R, aggr="mean")
    compiled = torch.compile(model, backend=HectorBackend())
    x = torch.randn(N, F)
    ei, et = _edges(2)
    ei2, et2 = _edges(3)
    _check(model, compiled, x, ei, et)
    version, pointer = (ei._version, et._version), (ei.data_ptr(), et.data_ptr())
    builds = graph_builds()
    _WRITES[write](ei, et, ei2, et2)
    assert (ei.data_ptr(), et.data_ptr()) == pointer
    if write != "no_grad_copy":
        assert (ei._version, et._version) == version  # invisible to a version-keyed cache
    _check(model, compiled, x, ei, et)
    assert graph_builds() == builds + 1


def test_rgcnconv_sees_a_reused_buffer_refilled_batch_after_batch() -> None:
    """One tensor object, as a sampler's reused buffer: A, B, C, then A again (a hit)."""
    torch.manual_seed(4)
    model = RGCNConv(F, 6, R, aggr="mean")
    compiled = torch.compile(model, backend=HectorBackend())
    x = torch.randn(N, F)
    batches = [_edges(s) for s in (5, 6, 7)]
    ei, et = (t.clone() for t in batches[0])
    builds = graph_builds()
    for b, (src, types) in enumerate([*batches, batches[0]]):
        ei.numpy()[...] = src.numpy()
        et.numpy()[...] = types.numpy()
        _check(model, compiled, x, ei, et)
        assert graph_builds() == builds + min(b + 1, 3)  # A's graph is still cached at the end


def test_rgcnconv_sees_from_numpy_over_a_refilled_buffer() -> None:
    """Each batch a new tensor over the same NumPy buffer: same pointer, version 0."""
    torch.manual_seed(8)
    model = RGCNConv(F, 6, R, aggr="mean")
    compiled = torch.compile(model, backend=HectorBackend())
    x = torch.randn(N, F)
    ei_buf, et_buf = np.empty((2, E), dtype=np.int64), np.empty(E, dtype=np.int64)
    for seed in (9, 10):
        src, types = _edges(seed)
        ei_buf[...], et_buf[...] = src.numpy(), types.numpy()
        ei, et = torch.from_numpy(ei_buf), torch.from_numpy(et_buf)
        assert (ei._version, et._version) == (0, 0)
        _check(model, compiled, x, ei, et)


def test_rgcnconv_training_after_a_numpy_write_matches_gradients() -> None:
    torch.manual_seed(11)
    model = RGCNConv(F, 6, R, aggr="mean")
    compiled = torch.compile(model, backend=HectorBackend())
    ei, et = _edges(12)
    ei2, _ = _edges(13)

    def step(fn: Any, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad()
        xr = x.clone().requires_grad_()
        out = fn(xr, ei, et)
        out.square().mean().backward()
        grads = [p.grad for p in model.parameters()] + [xr.grad]
        return out.detach(), [g for g in grads if g is not None]

    x = torch.randn(N, F)
    step(compiled, x)
    ei.numpy()[...] = ei2.numpy()
    got, got_g = step(compiled, x)
    want, want_g = step(model, x)
    assert (got - want).abs().max().item() <= TOL
    assert len(got_g) == len(want_g)
    for a, b in zip(got_g, want_g, strict=True):
        assert (a - b).abs().max().item() <= TOL


def test_a_hit_is_a_hit() -> None:
    """Equal content reuses the graph: same tensors, a clone, and a non-contiguous view."""
    torch.manual_seed(14)
    model = RGCNConv(F, 6, R, aggr="mean")
    compiled = torch.compile(model, backend=HectorBackend())
    x = torch.randn(N, F)
    ei, et = _edges(15)
    _check(model, compiled, x, ei, et)
    builds = graph_builds()
    for _ in range(3):
        _check(model, compiled, x, ei, et)
    _check(model, compiled, x, ei.clone(), et.clone())
    _check(model, compiled, x, ei.t().contiguous().t(), et)  # column-major, equal values
    assert graph_builds() == builds


def test_the_rgcn_route_runs_on_a_graph_grouped_by_destination() -> None:
    """The route's graph orders each relation's edges by destination; it is cached apart from
    the type-sorted graph of the same tensors (which the backend's raised graphs use)."""
    torch.manual_seed(20)
    model = RGCNConv(F, 6, R, aggr="mean")
    compiled = torch.compile(model, backend=HectorBackend())
    x = torch.randn(N, F)
    ei, et = _edges(21)
    _check(model, compiled, x, ei, et)
    builds = graph_builds()
    routed = graph_for(ei, et, N, R, by_destination=True)[0]  # the route's: a hit
    assert graph_builds() == builds
    key = routed.etype.long() * N + routed.dst.long()
    assert bool((key[1:] >= key[:-1]).all())
    assert torch.equal(routed.src.long(), ei[0, routed.perm])
    plain = graph_for(ei, et, N, R)[0]  # another entry: built
    assert graph_builds() == builds + 1
    assert torch.equal(plain.perm, torch.argsort(et, stable=True))


@pytest.mark.parametrize("write", ["data_setitem", "numpy_view"])
def test_rgcn_training_on_a_dense_graph_after_a_write_matches_pyg(write: str) -> None:
    """Many edges per (destination, relation): the program sums each pair's rows first
    (``hector-aggregation-order``), over edges grouped by destination; forward and every
    gradient (the features' too) match PyG's, before and after the destinations change."""
    torch.manual_seed(22)
    nodes, edges, relations = 30, 3000, 3
    model = RGCNConv(F, 6, relations, aggr="mean")
    compiled = torch.compile(model, backend=HectorBackend())
    gen = torch.Generator().manual_seed(23)
    ei = torch.randint(0, nodes, (2, edges), generator=gen)
    et = torch.randint(0, relations, (edges,), generator=gen)
    ei2 = torch.randint(0, nodes, (2, edges), generator=gen)
    x = torch.randn(nodes, F)

    def step(fn: Any) -> list[torch.Tensor]:
        model.zero_grad()
        xr = x.clone().requires_grad_()
        out = fn(xr, ei, et)
        out.square().mean().backward()
        return [out.detach(), *(p.grad for p in model.parameters()), xr.grad]

    for rewrite in (False, True):
        if rewrite:
            _WRITES[write](ei, et, ei2, et)
        got, want = step(compiled), step(model)
        assert len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            assert (a - b).abs().max().item() <= TOL


def test_the_per_graph_route_sees_a_numpy_write() -> None:
    """A raised layer (the backend binds the graph inputs itself), written through NumPy."""
    torch.manual_seed(16)
    model = RGATConv(F, 6, R, heads=2)
    be = HectorBackend()
    compiled = torch.compile(model, backend=be)
    x = torch.randn(N, F)
    ei, et = _edges(17)
    ei2, _ = _edges(18)
    _check(model, compiled, x, ei, et)
    ei.numpy()[...] = ei2.numpy()
    _check(model, compiled, x, ei, et)
    assert be.graphs[0].status == "hector"
    assert be.stats()["fallback_calls"] == 0


def test_hgtconv_sees_a_numpy_write_to_one_relation() -> None:
    torch.manual_seed(19)
    types, relations = ["a", "b"], [("a", "r0", "b"), ("b", "r1", "a")]
    model = HGTConv(F, F, (types, relations), heads=2)
    be = HectorBackend()
    compiled = torch.compile(model, backend=be)
    gen = torch.Generator().manual_seed(20)
    x = {"a": torch.randn(30, F, generator=gen), "b": torch.randn(20, F, generator=gen)}
    eid = {
        relations[0]: torch.stack(
            [torch.randint(0, 30, (50,), generator=gen), torch.randint(0, 20, (50,), generator=gen)]
        ),
        relations[1]: torch.stack(
            [torch.randint(0, 20, (40,), generator=gen), torch.randint(0, 30, (40,), generator=gen)]
        ),
    }

    def check() -> None:
        with torch.no_grad():
            got, want = compiled(x, eid), model(x, eid)
        for t in want:
            assert (got[t] - want[t]).abs().max().item() <= TOL

    check()
    builds = be.stats()["graph_builds"]
    check()
    assert be.stats()["graph_builds"] == builds  # equal content: a hit
    eid[relations[0]].numpy()[1] = torch.randint(0, 20, (50,), generator=gen).numpy()
    check()
    assert be.stats()["graph_builds"] == builds + 1


# -- IndexCache itself ----------------------------------------------------------------------


@pytest.mark.parametrize("memcmp", [True, False])
def test_index_cache_hits_on_content_not_identity(
    memcmp: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not memcmp:  # where ctypes finds no memcmp: torch.equal throughout
        monkeypatch.setattr(_graph_cache, "_MEMCMP", None)
    cache: IndexCache[int] = IndexCache(2)
    built: list[list[int]] = []

    def build(copies: list[torch.Tensor | None]) -> int:
        t = copies[0]
        assert t is not None
        built.append(t.tolist())
        return int(t.sum())

    a = torch.tensor([1, 2, 3])
    assert cache.get([a, None], "k", build) == 6
    assert cache.get([a.clone(), None], "k", build) == 6  # another tensor, equal: a hit
    assert cache.get([a, None], "other", build) == 6  # another extra key: a miss
    a.numpy()[0] = 5  # pointer and version unchanged
    assert cache.get([a, None], "k", build) == 10
    assert cache.get([torch.tensor([1, 2, 3]), None], "k", build) == 6  # evicted: rebuilt
    assert built == [[1, 2, 3], [1, 2, 3], [5, 2, 3], [1, 2, 3]]
    assert len(cache) == 2
    assert (cache.hits, cache.misses) == (1, 4)
    # Same values, another dtype or shape: not equal content.
    assert cache.get([torch.tensor([1, 2, 3], dtype=torch.int32), None], "k", build) == 6
    assert cache.misses == 5
    with pytest.raises(ValueError, match="at least one entry"):
        IndexCache(0)


def test_the_cached_graph_does_not_alias_the_callers_tensors() -> None:
    ei, et = _edges(21)
    before = [t.clone() for t in (ei, et)]
    graph, _ = graph_for(ei, et, N)
    arrays = [a.clone() for a in graph.arrays()]
    ei.numpy()[...] = 0
    et.numpy()[...] = 0
    assert all(torch.equal(a, b) for a, b in zip(graph.arrays(), arrays, strict=True))
    builds = graph_builds()
    again, _ = graph_for(*before, N)
    assert again is graph  # the entry kept the old content
    assert graph_builds() == builds
