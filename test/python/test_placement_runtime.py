"""Compiled training that places its own saved values (placement-plan-saved, issue 15).

With ``memory_budget`` the generated code of ``<f>_train`` writes the values it offloads to the
store and ``<f>_backward`` reads them back: results and gradients must be bit-identical to
keeping everything, the store must hold nothing once the step is over, and the values must
really have gone through the store (its byte counters).
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch
from _placement_store import placement_store  # noqa: F401  (the `store` fixture)

import hector
from hector import datasets, models
from hector.runtime import placement
from hector.runtime.offload import TensorStore


@pytest.fixture(scope="module")
def mag() -> Any:
    """A small synthetic:mag graph (4 node types, 8 relations)."""
    return datasets.load("synthetic:mag", scale=0.002, seed=1)


def _files(store: TensorStore) -> list[str]:
    """The stored objects in the store's directory (its lock file aside)."""
    return sorted(f for f in os.listdir(store.path) if f != "lock")


def _rgat_step(ds: Any, budget: float) -> tuple[list[torch.Tensor], Any]:
    g = ds.hetero_graph()
    torch.manual_seed(0)
    layer = models.RGATLayer(16, 8, g.num_etypes, heads=2)
    layer._fn.memory_budget = budget
    x = torch.randn(g.num_nodes, 16, requires_grad=True)
    out = layer(g, x)
    (out * out).sum().backward()
    grads = [out.detach(), x.grad, *(p.grad for p in layer.parameters())]
    return grads, layer


def _hgt_step(ds: Any, budget: float) -> tuple[list[torch.Tensor], Any]:
    g = ds.hetero_graph()
    torch.manual_seed(0)
    layer = models.HGTLayer(16, 16, ds.node_types, ds.edge_types, heads=2)
    layer._fn.memory_budget = budget
    counts = torch.bincount(ds.node_type, minlength=len(ds.node_types))
    xd = {
        t: torch.randn(int(n), 16, requires_grad=True)
        for t, n in zip(ds.node_types, counts.tolist(), strict=True)
    }
    out = layer(g, xd)
    sum((o * o).sum() for o in out.values()).backward()
    grads = [*(out[t].detach() for t in sorted(out)), *(xd[t].grad for t in ds.node_types)]
    grads += [p.grad for p in layer.parameters()]
    return grads, layer


def _entry(layer: Any) -> Any:
    """The one compiled training entry of a layer (or of a compiled function)."""
    fn = getattr(layer, "_fn", layer)
    (entry,) = list(fn._cache.values())
    return entry


@pytest.mark.parametrize("step", [_rgat_step, _hgt_step], ids=["rgat", "hgt"])
def test_half_budget_is_bit_identical_and_goes_through_the_store(
    step: Any, mag: Any, store: TensorStore
) -> None:
    keep, _ = step(mag, -1.0)
    before = store.stats()["bytes_written"]
    waits = placement.wait_stats()
    moved, layer = step(mag, 0.5)
    assert len(keep) == len(moved)
    for a, b in zip(keep, moved, strict=True):
        assert torch.equal(a, b)
    entry = _entry(layer)
    assert entry.offloads
    train = entry.staged.abi[f"{entry.traced.name}_train"]
    planned = entry.ir("placement")
    assert planned.count('"placement.offload"') >= 1
    # The offloaded values left the ABI: fewer saved results than the plan saw.
    assert train.num_saved == planned.count('"placement.keep"')
    stats = store.stats()
    assert stats["bytes_written"] > before
    assert stats["bytes_read"] == stats["bytes_written"]  # every value came back once
    assert _files(store) == []  # the step's frame deleted its objects
    # Each offload was waited for twice (its write, its read), and the time blocked is counted.
    after = placement.wait_stats()
    assert after["waits"] - waits["waits"] >= 2 * planned.count('"placement.offload"')
    assert after["wait_write_ns"] >= waits["wait_write_ns"]
    assert after["wait_read_ns"] > waits["wait_read_ns"]
    # The generated code calls the runtime itself.
    assert "llvm.call @hector_place_write" in entry.ir("llvm")
    assert "llvm.call @hector_place_prefetch" in entry.ir("llvm")


def test_keep_all_budget_moves_nothing(mag: Any, store: TensorStore) -> None:
    _, layer = _rgat_step(mag, 1.0)
    entry = _entry(layer)
    assert not entry.offloads
    assert '"placement.offload"' not in entry.ir("placement")
    assert store.stats()["bytes_written"] == 0


def _tanh_layer(g: Any, x: Any, w: Any) -> Any:
    t = x.tanh()
    return g.sum_to_dst(g.typed_linear(g.gather_src(t), w))


def test_recomputed_value_is_bit_identical(mag: Any, store: TensorStore) -> None:
    g = mag.hetero_graph()
    torch.manual_seed(0)
    x0 = torch.randn(g.num_nodes, 8)
    w0 = torch.randn(g.num_etypes, 8, 4)
    results = []
    for budget in (-1.0, 0.0):
        # transform-first: the program saves only the tanh, which the plan recomputes
        fn = hector.compile(_tanh_layer, order="transform-first", memory_budget=budget)
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        out = fn(g, x, w)
        (out * out).sum().backward()
        results.append((out.detach(), x.grad, w.grad, fn))
    (o1, x1, w1, _), (o2, x2, w2, fn) = results
    assert torch.equal(o1, o2)
    assert torch.equal(x1, x2)
    assert torch.equal(w1, w2)
    planned = _entry(fn).ir("placement")
    assert '"placement.recompute"' in planned
    assert '"placement.offload"' not in planned
    assert store.stats()["bytes_written"] == 0  # rebuilt in the backward, never stored


@pytest.mark.parametrize("budget", [-2, float("nan"), float("inf"), True, "half"])
def test_invalid_budget_is_refused(budget: Any) -> None:
    with pytest.raises(ValueError, match="memory_budget must be"):
        hector.compile(_tanh_layer, memory_budget=budget)


def test_bench_placement_writes_a_record(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # In this process: each mode is measured in a worker of its own all the same
    # (``python -m hector_bench.placement --worker``), which inherits the store's folder.
    import json

    from hector.tools.cli import main

    out = tmp_path / "record.json"
    args = ["--model", "rgat", "--scale", "0.002", "--hidden", "4", "--heads", "2"]
    args += ["--in-dim", "4", "--runs", "1", "--out", str(out)]
    monkeypatch.setenv("HECTOR_OFFLOAD_DIR", str(tmp_path / "store"))
    assert main(["bench", "placement", *args]) == 0, capsys.readouterr().err
    record = json.loads(out.read_text())
    keep, budgeted = record["results"]
    assert record["grads_bit_identical"] is True
    assert keep["decisions"]["offload"] == 0
    assert budgeted["decisions"]["offload"] >= 1
    assert budgeted["kept_bytes"] <= budgeted["budget_bytes"] < keep["kept_bytes"]
    assert budgeted["store_bytes_written"] > 0
    assert budgeted["store_wait_read_ms"] > 0  # a read has to come back before its use
    assert keep["store_wait_write_ms"] == keep["store_wait_read_ms"] == 0
    assert {"peak_reduction", "step_overhead"} <= record.keys()
    capsys.readouterr()
    with pytest.raises(SystemExit) as bad:
        main(["bench", "placement", "--memory-budget", "1.5"])
    assert bad.value.code == 2
    # refused by the parser (issue 39: every numeric option is bounded there)
    err = capsys.readouterr().err
    assert "argument --memory-budget: must be a finite number 0 <= x <= 1, got 1.5" in err
    assert "Traceback" not in err


def test_cuda_training_with_a_budget_is_refused(mag: Any) -> None:
    g = mag.hetero_graph()
    fn = hector.compile(_tanh_layer, target="cuda", memory_budget=0.5)
    x = torch.randn(g.num_nodes, 8, requires_grad=True)
    w = torch.randn(g.num_etypes, 8, 4, requires_grad=True)
    with pytest.raises(NotImplementedError, match="memory_budget plans CPU training only"):
        fn(g, x, w)


@pytest.mark.parametrize("budget", [-1.0, 0.5])
def test_a_budgeted_program_keeps_no_idle_cache_blocks_between_calls(budget: float) -> None:
    # Under a memory budget the host memory cache's idle blocks are released around each call:
    # kept, they would be resident next to the caller's loss and gradients, which the planner's
    # model of the step does not see. Without a budget they wait for the next step.
    from hector.runtime import host_memory

    ds = datasets.load("synthetic:mag", scale=0.02, seed=1)
    g = ds.hetero_graph()
    torch.manual_seed(0)
    layer = models.RGATLayer(16, 8, g.num_etypes, heads=8)
    layer._fn.memory_budget = budget
    x = torch.randn(g.num_nodes, 16, requires_grad=True)
    (layer(g, x) ** 2).sum().backward()
    out = layer(g, x)  # the training forward's temporaries go back to the cache as it runs
    idle = host_memory.stats()["idle_bytes"]
    assert idle == 0 if budget >= 0 else idle > 0
    (out**2).sum().backward()
