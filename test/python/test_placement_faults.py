"""Faults of the store while compiled training offloads its saved values (issue 15).

The generated code of ``<f>_train`` / ``<f>_backward`` writes and reads the store itself; a
full disk, an I/O error or a corrupted file must become a clear Python exception after the
compiled call, leave no file behind and corrupt nothing (the next step is exact again); a
process killed in the middle of a step leaves its directory, which the next start removes.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest
import torch
from _placement_store import placement_store  # noqa: F401  (the `store` fixture)

from hector import datasets, models
from hector.runtime.offload import ChecksumError, OffloadIOError, TensorStore


@pytest.fixture(scope="module")
def graph() -> Any:
    """A small synthetic:mag graph."""
    return datasets.load("synthetic:mag", scale=0.002, seed=1).hetero_graph()


def _objects(store: TensorStore) -> list[str]:
    """The stored objects in the store's directory (its lock file aside)."""
    return sorted(f for f in os.listdir(store.path) if f != "lock")


class _Step:
    """One RGAT layer and input; ``forward`` then ``backward`` is one training step."""

    def __init__(self, g: Any, budget: float) -> None:
        torch.manual_seed(0)
        self.g = g
        self.layer = models.RGATLayer(16, 8, g.num_etypes, heads=2)
        self.layer._fn.memory_budget = budget
        self.x = torch.randn(g.num_nodes, 16, requires_grad=True)
        self.params = [p.detach().clone() for p in self.layer.parameters()]

    def forward(self) -> torch.Tensor:
        out = self.layer(self.g, self.x)
        return (out * out).sum()

    def grads(self) -> list[torch.Tensor]:
        grads = [self.x.grad, *(p.grad for p in self.layer.parameters())]
        self.x.grad = None
        for p in self.layer.parameters():
            p.grad = None
        return grads

    def unchanged(self) -> bool:
        now = list(self.layer.parameters())
        return all(torch.equal(a, b) for a, b in zip(self.params, now, strict=True))


@pytest.fixture
def reference(graph: Any) -> list[torch.Tensor]:
    """Gradients of the same step keeping every saved value."""
    step = _Step(graph, -1.0)
    step.forward().backward()
    return step.grads()


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_enospc_during_the_forward(graph: Any, store: TensorStore, reference: Any) -> None:
    step = _Step(graph, 0.5)
    store.inject_fault("write", "enospc")
    with pytest.raises(OffloadIOError, match=r"rgat_layer_train: waiting for saved value") as err:
        step.forward()
    assert err.value.errno == errno.ENOSPC
    assert "ENOSPC" in str(err.value)
    assert _objects(store) == []
    assert step.unchanged()
    # Nothing is left broken: the next step (the fault was one write) is exact.
    step.forward().backward()
    assert _same(step.grads(), reference)
    assert _objects(store) == []


def test_eio_during_the_backward(graph: Any, store: TensorStore, reference: Any) -> None:
    step = _Step(graph, 0.5)
    loss = step.forward()
    assert _objects(store)  # the offloaded values wait in the store for the backward
    store.inject_fault("read", "eio")
    with pytest.raises(OffloadIOError, match="rgat_layer_backward") as err:
        loss.backward()
    assert err.value.errno == errno.EIO
    assert not isinstance(err.value, ChecksumError)
    assert _objects(store) == []
    assert step.unchanged()
    step.grads()
    step.forward().backward()
    assert _same(step.grads(), reference)


def test_corrupted_chunk_is_refused(graph: Any, store: TensorStore, reference: Any) -> None:
    step = _Step(graph, 0.5)
    loss = step.forward()
    (victim, *_) = _objects(store)
    with open(os.path.join(store.path, victim), "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(ChecksumError, match="CRC32C|checksum"):
        loss.backward()
    assert _objects(store) == []
    assert step.unchanged()
    step.grads()
    step.forward().backward()
    assert _same(step.grads(), reference)


def test_abandoned_step_deletes_its_objects(graph: Any, store: TensorStore) -> None:
    step = _Step(graph, 0.5)
    loss = step.forward()
    assert _objects(store)
    del loss  # the graph (and the frame its backward held) goes
    assert _objects(store) == []


_KILLED = textwrap.dedent(
    """
    import sys, time, torch
    from hector import datasets, models
    from hector.runtime.placement import current_store

    g = datasets.load("synthetic:mag", scale=0.002, seed=1).hetero_graph()
    layer = models.RGATLayer(16, 8, g.num_etypes, heads=2)
    layer._fn.memory_budget = 0.5
    loss = layer(g, torch.randn(g.num_nodes, 16, requires_grad=True)).sum()
    print(current_store().path, flush=True)  # between the forward and the backward
    time.sleep(600)
    """
)


def test_kill_mid_step_is_cleaned_on_next_start(tmp_path: Any) -> None:
    root = str(tmp_path / "root")
    env = {**os.environ, "HECTOR_OFFLOAD_DIR": root}
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        path = proc.stdout.readline().strip()
        assert path.startswith(root), path
        assert [f for f in os.listdir(path) if f != "lock"]  # its offloaded values
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert os.path.isdir(path)  # nobody cleaned up after a kill -9...
    deadline = time.monotonic() + 10
    while os.path.isdir(path) and time.monotonic() < deadline:
        with TensorStore(root):  # ...until the next start opens a store under the same root
            pass
    assert not os.path.exists(path)
    assert os.listdir(root) == []
