"""Team calls (``runtime/team_calls.py``, turned on by ``HECTOR_TEAM_CALLS=1``): compiled CPU
functions whose workers' chunks run on PyTorch's OpenMP threads.

The RGCN route's training step (``RGCNConv(aggr="mean")``, forward and every gradient, the
features' included) runs with two workers per kernel: its chunks go to the team (counted), the
results match eager PyG, and they are the same bits as with team calls off (the chunks and the
order their partials are combined in do not depend on which thread runs them).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import torch
import torch._dynamo
from torch_geometric.nn import RGCNConv

from hector.dynamo import pyg_route
from hector.dynamo.backend import HectorBackend
from hector.runtime import team_calls

NODES, EDGES, RELATIONS, IN, OUT = 600, 6000, 6, 16, 24
TOL = 1e-4


@pytest.fixture(autouse=True)
def _two_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(team_calls.ENV, "1")
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # the kernels are scheduled for two workers, whatever the machine
    torch._dynamo.reset()
    pyg_route.reset_stats()
    team_calls.skip_regions(0)  # no call left without a region by an earlier test
    yield
    team_calls.skip_regions(0)
    torch._dynamo.reset()
    torch.set_num_threads(threads)


def _graph(seed: int = 3) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A random graph of ``NODES`` nodes, ``EDGES`` edges of ``RELATIONS`` types, features."""
    gen = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, NODES, (2, EDGES), generator=gen)
    et = torch.randint(0, RELATIONS, (EDGES,), generator=gen)
    return torch.randn(NODES, IN, generator=gen), ei, et


def _step(layer: torch.nn.Module, fn: object, x: torch.Tensor, *rest: torch.Tensor) -> list:
    """Output, then the gradients of the parameters and the features, of one training step."""
    layer.zero_grad()
    xr = x.clone().requires_grad_()
    out = fn(xr, *rest)  # type: ignore[operator]
    out.square().mean().backward()
    return [out.detach(), *[p.grad for p in layer.parameters()], xr.grad]


def _matches(got: list, want: list) -> None:
    """The same tensors, shape for shape, within ``TOL``."""
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        assert (a - b).abs().max().item() <= TOL


def test_rgcn_mean_route_runs_its_chunks_on_the_team_and_matches_eager() -> None:
    assert team_calls.available()  # PyTorch's OpenMP runtime is in the process
    torch.manual_seed(0)
    layer = RGCNConv(IN, OUT, RELATIONS, aggr="mean")
    x, ei, et = _graph()
    compiled = torch.compile(layer, backend=HectorBackend())
    _step(layer, compiled, x, ei, et)  # compiles
    # A region for the next call, whatever the scheduler did with the helpers of the last one.
    team_calls.skip_regions(0)
    before = team_calls.queued_chunks()
    got = _step(layer, compiled, x, ei, et)
    assert team_calls.queued_chunks() > before
    assert pyg_route.STATS["rgcn"].backward_calls == 2
    _matches(got, _step(layer, layer, x, ei, et))


def test_team_calls_off_give_the_same_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(1)
    layer = RGCNConv(IN, OUT, RELATIONS, aggr="mean")
    x, ei, et = _graph()
    compiled = torch.compile(layer, backend=HectorBackend())
    on = _step(layer, compiled, x, ei, et)
    monkeypatch.setenv(team_calls.ENV, "0")
    before = team_calls.queued_chunks()
    off = _step(layer, compiled, x, ei, et)
    assert team_calls.queued_chunks() == before  # no team call: pool calls ran them
    for a, b in zip(on, off, strict=True):
        assert torch.equal(a, b)


def test_a_call_raises_what_its_body_raised() -> None:
    def body() -> None:
        raise KeyError("from the body")

    with pytest.raises(KeyError, match="from the body"):
        team_calls.call(body)


@pytest.mark.parametrize("team", ["1", "0"], ids=["team-call", "pool-call"])
def test_the_body_runs_on_the_calling_thread_and_a_nested_call_runs_inline(
    monkeypatch: pytest.MonkeyPatch, team: str
) -> None:
    """The body of a team call, or of a pool call (team calls off: the default), runs on the
    calling thread, and a call nested in it runs inside it."""
    monkeypatch.setenv(team_calls.ENV, team)
    monkeypatch.delenv(team_calls.POOL_ENV, raising=False)
    seen: list[int] = []

    def inner() -> None:
        seen.append(threading.get_ident())

    def outer() -> None:
        seen.append(threading.get_ident())
        team_calls.call(inner)

    team_calls.call(outer)
    team_calls.call(inner, threads=1)
    assert seen == [threading.get_ident()] * 3


@pytest.mark.parametrize("value", [None, "0", "yes"])
def test_off_unless_the_environment_says_1(monkeypatch: pytest.MonkeyPatch, value) -> None:
    if value is None:
        monkeypatch.delenv(team_calls.ENV)
    else:
        monkeypatch.setenv(team_calls.ENV, value)
    assert not team_calls.available()
    ran: list[bool] = []
    team_calls.call(lambda: ran.append(True))
    assert ran == [True]


@pytest.mark.parametrize("pool", ["1", "0"])
def test_calls_without_a_region_are_pool_calls_or_solo(
    monkeypatch: pytest.MonkeyPatch, pool: str
) -> None:
    """The calls after a team call whose helpers ran nothing make no region: pool calls (their
    chunks queued for the pool), or solo with pool calls off; the same bits either way."""
    torch.manual_seed(2)
    layer = RGCNConv(IN, OUT, RELATIONS, aggr="mean")
    x, ei, et = _graph()
    compiled = torch.compile(layer, backend=HectorBackend())
    with_regions = _step(layer, compiled, x, ei, et)
    monkeypatch.setenv(team_calls.POOL_ENV, pool)
    team_calls.skip_regions(2)  # the training step's two calls
    team, pooled = team_calls.queued_chunks(), team_calls.pool_counts().queued
    try:
        without = _step(layer, compiled, x, ei, et)
    finally:
        team_calls.skip_regions(0)
    if pool == "1":  # the pool's queue, not a team's
        assert team_calls.queued_chunks() == team
        assert team_calls.pool_counts().queued > pooled
    else:  # solo: the calling thread's own queue (counted as a team call's), not the pool's
        assert team_calls.queued_chunks() > team
        assert team_calls.pool_counts().queued == pooled
    for a, b in zip(with_regions, without, strict=True):
        assert torch.equal(a, b)
