"""``random:NxExR`` graphs for the benches, and ``hector bench compile`` on one."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from hector.data.dataset import DatasetError
from hector_bench.random_graph import random_graph


def test_a_random_graph_has_the_sizes_it_names_and_consistent_types() -> None:
    ds = random_graph("random:100x5000x20", seed=3)
    assert (ds.num_nodes, ds.num_edges, ds.num_relations) == (100, 5000, 20)
    assert torch.bincount(ds.edge_type).tolist() == [250] * 20
    counts, edge_index_dict = ds.pyg_hetero()
    assert counts == {"a": 50, "b": 50}
    assert sum(int(ei.shape[1]) for ei in edge_index_dict.values()) == 5000
    again = random_graph("random:100x5000x20", seed=3)
    assert torch.equal(ds.edge_index, again.edge_index)
    assert not torch.equal(ds.edge_index, random_graph("random:100x5000x20", seed=4).edge_index)


def test_uneven_and_empty_shares() -> None:
    assert torch.bincount(random_graph("random:9x7x3").edge_type).tolist() == [3, 2, 2]
    assert random_graph("random:2x0x1").num_edges == 0


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("random:1x5x2", "NODES >= 2"),
        ("random:10x5", "three integers"),
        ("random:10xyx2", "three integers"),
        ("random:10x5x0", "RELATIONS >= 1"),
        ("random:10x-1x2", "EDGES >= 0"),
        ("random:10x100000000000000x2", "exceed"),
    ],
)
def test_bad_specs_are_refused(spec: str, message: str) -> None:
    with pytest.raises(DatasetError, match=message):
        random_graph(spec)


def test_bench_compile_refuses_a_bad_random_graph(capsys: pytest.CaptureFixture[str]) -> None:
    from hector.tools.cli import main

    assert main(["bench", "compile", "--dataset", "random:1x1x1", "--systems", "eager"]) == 1
    assert "NODES >= 2" in capsys.readouterr().err


def test_bench_compile_runs_hectors_program_on_a_small_random_graph(tmp_path: Path) -> None:
    from hector.tools.cli import main

    record = tmp_path / "small.json"
    argv = ["bench", "compile", "--model", "rgcn", "--dataset", "random:20x60x3", "--no-warm"]
    argv += ["--systems", "eager,hector", "--runs", "2", "--warmup", "1", "--json", str(record)]
    assert main([*argv, "--in-dim", "4", "--hidden", "4"]) == 0
    (cell,) = json.loads(record.read_text())["cells"]
    assert cell["graph"] == {"nodes": 20, "edges": 60, "relations": 3}
    rows = {r["system"]: r for r in cell["results"]}
    assert rows["hector"]["status"] == "ok"
    assert rows["hector"]["max_abs_err_grad"] <= 1e-5
    assert any(g["layer_programs"] for g in rows["hector"]["graphs"])


def test_bench_compile_input_grad_compares_the_features_gradient(tmp_path: Path) -> None:
    """``--input-grad``: the features require grad (a hidden layer's input), as in the route's
    regression cell ``random:20000x200000x6`` (docs/benchmarks.md); their gradient is compared
    with the parameters' (RGCNConv: weight, root, bias and x)."""
    from hector.tools.cli import main

    record = tmp_path / "input_grad.json"
    argv = ["bench", "compile", "--model", "rgcn", "--dataset", "random:20x60x3", "--no-warm"]
    argv += ["--systems", "eager,hector", "--runs", "1", "--warmup", "0", "--json", str(record)]
    assert main([*argv, "--in-dim", "4", "--hidden", "6", "--input-grad"]) == 0
    data = json.loads(record.read_text())
    assert data["config"]["input_grad"] is True
    rows = {r["system"]: r for r in data["cells"][0]["results"]}
    assert rows["eager"]["grads_compared"] == rows["hector"]["grads_compared"] == 4
    assert rows["hector"]["max_abs_err_grad"] <= 1e-5


def test_bench_compile_clock_cpu_times_the_steps_in_cpu_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--clock cpu`` times each step with ``time.process_time`` (recorded in the config);
    the default stays ``time.perf_counter``. A fake CPU clock that advances 5 ms per read shows
    which clock the steps were timed with, whatever the machine's load."""
    import time

    from hector.tools.cli import main

    ticks = iter(range(1_000_000))
    monkeypatch.setattr(time, "process_time", lambda: 0.005 * next(ticks))
    record = tmp_path / "cpu.json"
    argv = ["bench", "compile", "--model", "rgcn", "--dataset", "random:20x60x3", "--no-warm"]
    argv += ["--systems", "eager", "--runs", "3", "--warmup", "1", "--json", str(record)]
    assert main([*argv, "--in-dim", "4", "--hidden", "4", "--clock", "cpu"]) == 0
    data = json.loads(record.read_text())
    assert data["config"]["clock"] == "cpu"
    (row,) = data["cells"][0]["results"]
    assert row["median_ms"] == pytest.approx(5.0)  # one tick between the two reads of a step
    assert main([*argv, "--in-dim", "4", "--hidden", "4"]) == 0
    data = json.loads(record.read_text())
    assert data["config"]["clock"] == "wall"
    assert data["cells"][0]["results"][0]["median_ms"] != pytest.approx(5.0)


def test_bench_compile_named_cell_fixes_the_route_regression_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``--cell rgcn-route`` measures issue 54's cell whatever else the line says, and its
    ``target_met`` is that cell's own target (2x eager; no Inductor in the cell)."""
    from hector.tools.cli import main
    from hector_bench import compile as bench

    seen: list[tuple[str, str, int, int, bool, str]] = []

    def fake_cell(args, model, dataset, systems):  # the timing itself is not under test
        seen.append((model, dataset, args.in_dim, args.hidden, args.input_grad, args.mode))
        speedup = {"hector": 2.5}
        return {
            "layer": "RGCNConv",
            "dataset": dataset,
            "speedup_vs_eager": speedup,
            "hector_vs_inductor": None,
            "target_met": False,
            "results": [{"system": s} for s in systems],
        }

    monkeypatch.setattr(bench, "run_cell", fake_cell)
    record = tmp_path / "route.json"
    argv = ["bench", "compile", "--cell", "rgcn-route", "--model", "hgt", "--in-dim", "8"]
    assert main([*argv, "--runs", "1", "--warmup", "0", "--json", str(record)]) == 0
    assert seen == [("rgcn", "random:20000x200000x6", 16, 24, True, "training")]
    out = json.loads(record.read_text())
    (cell,) = out["cells"]
    systems = ["eager", "hector", "hector-team", "hector-mlir"]
    assert [r["system"] for r in cell["results"]] == systems
    assert cell["cell_target"]["min_speedup_vs_eager"] == 2.0
    assert cell["target_met"] is True
    assert out["targets"] == {"rgcn-route": {"RGCNConv@random:20000x200000x6": True}}
    assert out["config"]["cell"] == "rgcn-route"


def test_bench_compile_refuses_an_unknown_named_cell(capsys: pytest.CaptureFixture[str]) -> None:
    from hector.tools.cli import main

    with pytest.raises(SystemExit):
        main(["bench", "compile", "--cell", "nonesuch"])
    assert "invalid choice: 'nonesuch'" in capsys.readouterr().err


def test_bench_compile_hector_team_runs_with_team_calls_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``--systems hector-team``: Hector's program with team calls on during its steps only."""
    from hector.runtime import team_calls
    from hector.tools.cli import main

    monkeypatch.delenv(team_calls.ENV, raising=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # two workers per kernel: chunks to hand to the team
    team_calls.skip_regions(0)  # its first call makes a region, whatever ran before
    try:
        before = team_calls.queued_chunks()
        record = tmp_path / "team.json"
        argv = ["bench", "compile", "--model", "rgcn", "--dataset", "random:200x2000x3"]
        argv += ["--systems", "eager,hector-team", "--runs", "1", "--warmup", "0"]
        assert main([*argv, "--no-warm", "--input-grad", "--json", str(record)]) == 0
    finally:
        torch.set_num_threads(threads)
    assert team_calls.queued_chunks() > before
    assert team_calls.ENV not in os.environ
    (cell,) = json.loads(record.read_text())["cells"]
    rows = {r["system"]: r for r in cell["results"]}
    assert rows["hector-team"]["status"] == "ok"
    assert rows["hector-team"]["max_abs_err_grad"] <= 1e-5


def test_bench_compile_hector_mlir_runs_with_mlirs_pool(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``--systems hector-mlir``: Hector's program with pool calls off during its steps only
    (its chunks go to MLIR's pool, so none is queued for Hector's helpers)."""
    from hector.runtime import team_calls
    from hector.tools.cli import main

    monkeypatch.delenv(team_calls.ENV, raising=False)
    monkeypatch.delenv(team_calls.POOL_ENV, raising=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # two workers per kernel: chunks to hand over
    try:
        before = team_calls.pool_counts().queued
        record = tmp_path / "mlir.json"
        argv = ["bench", "compile", "--model", "rgcn", "--dataset", "random:200x2000x3"]
        argv += ["--systems", "eager,hector-mlir", "--runs", "1", "--warmup", "0"]
        assert main([*argv, "--no-warm", "--input-grad", "--json", str(record)]) == 0
    finally:
        torch.set_num_threads(threads)
    assert team_calls.pool_counts().queued == before
    assert team_calls.POOL_ENV not in os.environ
    (cell,) = json.loads(record.read_text())["cells"]
    rows = {r["system"]: r for r in cell["results"]}
    assert rows["hector-mlir"]["status"] == "ok"
    assert rows["hector-mlir"]["max_abs_err_grad"] <= 1e-5
