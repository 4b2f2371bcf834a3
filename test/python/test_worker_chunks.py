"""Several static chunks per worker (``lowering/cpu/workers.py``, ``CHUNKS_PER_WORKER``): a
GEMM's row tiles, which no two chunks share, are cut into ``threads × CHUNKS_PER_WORKER``
chunks, so a worker that starts late leaves its later chunks to the others. The results are the
bits of one chunk per worker (the chunking before), and of one thread where no partials are
combined; chunks that accumulate partials (weight gradients) keep one chunk per worker."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from test_cpu_schedules import _graph, _layer

import hector
from hector import models
from hector.lowering.cpu import workers
from hector.runtime import team_calls


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("HECTOR_COMPILE_CACHE", "0")  # CHUNKS_PER_WORKER is not in the key
    monkeypatch.delenv(team_calls.ENV, raising=False)
    monkeypatch.delenv(team_calls.POOL_ENV, raising=False)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _typed_linear(g: hector.HeteroGraph, x: torch.Tensor, w: torch.Tensor, slice: str) -> Any:
    @hector.compile
    def linear(g: Any, x: Any, w: Any) -> Any:
        return g.typed_linear(x, w, slice=slice)

    with torch.no_grad():
        return linear(g, x, w)


@pytest.mark.parametrize(
    ("rows", "k", "n", "slice"),
    [(2000, 64, 64, "none"), (1001, 16, 24, "none"), (700, 64, 32, "etype")],
)
def test_gemm_rows_give_the_same_bits_in_any_chunking(
    monkeypatch: pytest.MonkeyPatch, rows: int, k: int, n: int, slice: str
) -> None:
    g = hector.random_graph(rows, 700, 5, seed=2)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(rows if slice == "none" else 700, k, generator=gen)
    w = torch.randn(k, n, generator=gen) if slice == "none" else torch.randn(5, k, n, generator=gen)
    got = {}
    for threads, chunks in ((1, 1), (2, 1), (2, 4), (2, 3)):
        torch.set_num_threads(threads)
        monkeypatch.setattr(workers, "CHUNKS_PER_WORKER", chunks)
        before = team_calls.pool_counts().queued
        got[threads, chunks] = _typed_linear(g, x, w, slice)
        if threads == 2 and slice == "none":  # the call's chunks but the caller's first
            assert team_calls.pool_counts().queued - before == 2 * chunks - 1
    for out in got.values():
        assert torch.equal(out, got[1, 1])


def _rgcn_step(g: hector.HeteroGraph, x: torch.Tensor) -> list[torch.Tensor]:
    """Output and every gradient of an RGCN layer's training step, compiled afresh."""
    layer = _layer(64, 64)
    params = [p.detach().clone().requires_grad_() for p in (layer.weight, layer.root, layer.bias)]
    xx = x.clone().requires_grad_()
    out = hector.compile(models._rgcn_layer)(g, xx, *params)
    (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
    return [out.detach(), *(t.grad for t in (xx, *params) if t.grad is not None)]


def test_rgcn_step_is_the_same_bits_with_one_or_four_chunks_per_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    g = _graph()
    x = torch.randn(90, 64, generator=torch.Generator().manual_seed(1))
    torch.set_num_threads(2)
    steps: list[list[torch.Tensor]] = []
    queued = []
    for chunks in (1, 4):
        monkeypatch.setattr(workers, "CHUNKS_PER_WORKER", chunks)
        before = team_calls.pool_counts().queued
        steps.append(_rgcn_step(g, x))
        queued.append(team_calls.pool_counts().queued - before)
    assert queued[1] > queued[0]  # the GEMMs' rows went to more chunks
    assert len(steps[0]) == 5
    for a, b in zip(*steps, strict=True):
        assert torch.equal(a, b)
