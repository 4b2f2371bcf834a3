"""Pool calls (``runtime/team_calls.py``, the default unless ``HECTOR_POOL_CALLS=0`` or team
calls are on): compiled CPU functions whose workers' chunks run on Hector's own helper threads,
the caller running those still queued at each join.

The RGCN route's training step runs with two workers per kernel (``torch.set_num_threads(2)``):
its chunks are queued for the pool (counted), the results match eager PyG and are the same bits
as with MLIR's pool. Faults: a body that raises ends its call (the next call queues and runs
again); two threads calling at once both get their
results (one of them solo); a forked child's first call runs (its own helpers), where MLIR's
pool, whose threads the child lacks, never ran the child's chunks. A call nested in another
runs inside it: ``test_team_calls.py``, for team and pool calls alike.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator

import pytest
import torch
import torch._dynamo
from test_team_calls import IN, OUT, RELATIONS, TOL, _graph, _matches, _step
from torch_geometric.nn import RGCNConv

from hector.dynamo import pyg_route
from hector.dynamo.backend import HectorBackend
from hector.runtime import team_calls


@pytest.fixture(autouse=True)
def _two_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(team_calls.ENV, raising=False)
    monkeypatch.delenv(team_calls.POOL_ENV, raising=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # the kernels are scheduled for two workers, whatever the machine
    torch._dynamo.reset()
    pyg_route.reset_stats()
    yield
    torch._dynamo.reset()
    torch.set_num_threads(threads)


def _layer(seed: int) -> tuple[torch.nn.Module, object]:
    torch.manual_seed(seed)
    layer = RGCNConv(IN, OUT, RELATIONS, aggr="mean")
    return layer, torch.compile(layer, backend=HectorBackend())


def test_rgcn_mean_route_queues_its_chunks_for_the_pool_and_matches_eager() -> None:
    assert not team_calls.available()
    assert team_calls.pool_enabled()
    layer, compiled = _layer(0)
    x, ei, et = _graph()
    _step(layer, compiled, x, ei, et)  # compiles
    before, team_before = team_calls.pool_counts(), team_calls.queued_chunks()
    got = _step(layer, compiled, x, ei, et)
    after = team_calls.pool_counts()
    assert after.queued > before.queued
    assert after.helpers >= 1  # two workers: one helper at least
    assert team_calls.queued_chunks() == team_before  # no team call ran
    assert pyg_route.STATS["rgcn"].backward_calls == 2
    _matches(got, _step(layer, layer, x, ei, et))


def test_pool_calls_and_mlirs_pool_give_the_same_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    layer, compiled = _layer(1)
    x, ei, et = _graph()
    pooled = _step(layer, compiled, x, ei, et)
    monkeypatch.setenv(team_calls.POOL_ENV, "0")
    assert not team_calls.pool_enabled()
    before = team_calls.pool_counts().queued
    mlir = _step(layer, compiled, x, ei, et)
    assert team_calls.pool_counts().queued == before  # MLIR's pool ran them
    for a, b in zip(pooled, mlir, strict=True):
        assert torch.equal(a, b)


def test_a_body_that_raises_ends_its_call_and_the_next_call_runs() -> None:
    layer, compiled = _layer(2)
    x, ei, et = _graph()
    want = _step(layer, compiled, x, ei, et)

    def body() -> None:
        raise KeyError("from the body")

    with pytest.raises(KeyError, match="from the body"):
        team_calls.call(body)
    before = team_calls.pool_counts().queued
    got = _step(layer, compiled, x, ei, et)
    assert team_calls.pool_counts().queued > before  # the pool takes chunks again
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)


def test_two_threads_calling_at_once_both_get_their_results() -> None:
    layer, compiled = _layer(4)
    inputs = [_graph(seed) for seed in (5, 6)]
    with torch.no_grad():
        want = [layer(*i) for i in inputs]
        compiled(*inputs[0])  # compiled once, before the threads
        got: list[list[torch.Tensor]] = [[], []]
        errors: list[BaseException] = []

        def run(k: int) -> None:
            try:
                for _ in range(5):
                    got[k].append(compiled(*inputs[k]))  # type: ignore[operator]
            except BaseException as err:  # noqa: BLE001 - reported below
                errors.append(err)

        threads = [threading.Thread(target=run, args=(k,)) for k in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    assert not errors
    assert not any(t.is_alive() for t in threads)
    for k in (0, 1):
        assert len(got[k]) == 5
        for out in got[k]:
            assert (out - want[k]).abs().max().item() <= TOL


def test_a_forked_child_runs_its_first_call_on_helpers_of_its_own() -> None:
    layer, compiled = _layer(7)
    x, ei, et = _graph()
    with torch.no_grad():
        parent = compiled(x, ei, et)  # type: ignore[operator]
    assert team_calls.pool_counts().helpers >= 1
    # The child's PyTorch operators here are below PyTorch's parallel grain (600 rows), so
    # they open no OpenMP region: libgomp's own threads do not survive a fork either.
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only if its call ran and gave the parent's bits
        code = 1
        try:
            signal.alarm(60)  # a call whose chunks nobody runs would wait forever
            before = team_calls.pool_counts()
            with torch.no_grad():
                child = compiled(x, ei, et)  # type: ignore[operator]
            after = team_calls.pool_counts()
            fresh = before.helpers == 0 and after.helpers >= 1 and after.queued > before.queued
            code = 0 if fresh and torch.equal(child, parent) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_off_with_the_environment_set_to_0(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(team_calls.POOL_ENV, "0")
    assert not team_calls.pool_enabled()
    before = team_calls.pool_counts().queued
    ran: list[bool] = []
    team_calls.call(lambda: ran.append(True))
    assert ran == [True]
    assert team_calls.pool_counts().queued == before
