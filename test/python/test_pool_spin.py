"""Spin windows of pool calls (``runtime/team_calls.py``, :func:`team_calls.set_spin`): after a
call a helper stays awake for the idle window, watching for the next call, then sleeps; at a
join the caller watches the helpers' chunks end for the join window before it blocks.

Behaviour, not speed: the results are the same bits with the windows off and long; a helper
does not sleep while its window lasts, and does once it is shortened, so a process that made a
call and then waits costs no CPU; a child forked while the parent's helper spins runs its own
call; the environment's windows are read, and bad ones refused.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
import torch
import torch._dynamo
from test_team_calls import _graph, _step
from torch_geometric.nn import RGCNConv

from hector.dynamo.backend import HectorBackend
from hector.runtime import team_calls
from hector.runtime.settings import SettingError

LONG_US = 60e6  # a minute: longer than any wait below


@pytest.fixture(autouse=True)
def _two_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(team_calls.ENV, raising=False)
    monkeypatch.delenv(team_calls.POOL_ENV, raising=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    torch._dynamo.reset()
    yield
    team_calls.set_spin()  # the defaults again
    torch._dynamo.reset()
    torch.set_num_threads(threads)


def _compiled(seed: int) -> tuple[torch.nn.Module, object]:
    torch.manual_seed(seed)
    layer = RGCNConv(16, 24, 6, aggr="mean")
    return layer, torch.compile(layer, backend=HectorBackend())


def _naps_after(before: int, timeout_s: float = 30.0) -> int:
    """The helpers' naps once they exceed ``before`` (waiting up to ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while team_calls.pool_counts().naps <= before and time.monotonic() < deadline:
        time.sleep(0.01)
    return team_calls.pool_counts().naps


def test_the_same_bits_with_the_windows_off_and_long() -> None:
    layer, compiled = _compiled(0)
    x, ei, et = _graph()
    team_calls.set_spin(0, 0)
    off = _step(layer, compiled, x, ei, et)
    team_calls.set_spin(LONG_US, LONG_US)
    long = _step(layer, compiled, x, ei, et)
    for a, b in zip(off, long, strict=True):
        assert torch.equal(a, b)


def test_a_helper_stays_awake_through_its_window_and_sleeps_once_it_is_shortened() -> None:
    layer, compiled = _compiled(1)
    x, ei, et = _graph()
    with torch.no_grad():
        compiled(x, ei, et)  # type: ignore[operator]  # compiles; the helpers exist
    team_calls.set_spin(idle_us=LONG_US)
    time.sleep(0.05)  # a helper already on its way to sleep is asleep now
    awake = team_calls.pool_counts().naps
    with torch.no_grad():
        compiled(x, ei, et)  # type: ignore[operator]
    time.sleep(0.3)
    assert team_calls.pool_counts().naps == awake  # after the call, watching for the next
    team_calls.set_spin(idle_us=0)
    assert _naps_after(awake) > awake  # the shortened window ends the spin
    cpu = time.process_time()
    time.sleep(0.5)
    assert time.process_time() - cpu < 0.1  # asleep: an idle process burns no core


def test_after_the_default_window_an_idle_process_burns_no_cpu() -> None:
    layer, compiled = _compiled(2)
    x, ei, et = _graph()
    before = team_calls.pool_counts().naps
    with torch.no_grad():
        compiled(x, ei, et)  # type: ignore[operator]
    cpu = time.process_time()
    time.sleep(1.0)
    assert time.process_time() - cpu < 0.1
    assert _naps_after(before) > before


def test_a_child_forked_while_the_helper_spins_runs_its_call() -> None:
    layer, compiled = _compiled(3)
    x, ei, et = _graph()
    team_calls.set_spin(LONG_US, LONG_US)
    with torch.no_grad():
        parent = compiled(x, ei, et)  # type: ignore[operator]
    pid = os.fork()  # the parent's helper is spinning: the child does not have it
    if pid == 0:
        code = 1
        try:
            signal.alarm(60)
            with torch.no_grad():
                child = compiled(x, ei, et)  # type: ignore[operator]
            code = 0 if torch.equal(child, parent) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.parametrize(
    ("text", "want"),
    [("", None), ("250", (250_000, 250_000)), ("1000, 20", (1_000_000, 20_000)), ("0", (0, 0))],
)
def test_windows_from_the_environment(monkeypatch: pytest.MonkeyPatch, text: str, want) -> None:
    monkeypatch.setenv(team_calls.SPIN_ENV, text)
    assert team_calls._spin_from_environment() == want


@pytest.mark.parametrize("text", ["fast", "1,2,3", "-5", "10,-1"])
def test_bad_windows_are_refused(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv(team_calls.SPIN_ENV, text)
    with pytest.raises(SettingError, match=team_calls.SPIN_ENV):
        team_calls._spin_from_environment()
    with pytest.raises(ValueError, match=">= 0"):
        team_calls.set_spin(-1.0)
