"""The mini-batch benchmarks' records on a tiny graph: ``hector bench minibatch`` and the feature
gather comparison (``python3 -m hector_bench.feature_gather``)."""

from __future__ import annotations

import argparse
import json

import pytest

from hector_bench import _common, feature_gather, minibatch


def _args(module, argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    module.add_arguments(p)
    return p.parse_args(argv)


def _small_run(tmp_path, options: str) -> dict:
    """The record's one cell of a small RGCN run on a tiny ``synthetic:mag`` with ``options``."""
    out = tmp_path / "mb.json"
    argv = "--datasets synthetic:mag --scale 0.002 --models rgcn --procs 1 --batch-size 16"
    argv += " --fanouts 3,2 --feat 8 --hidden 8 --classes 4 --steps 2 --warmup 1"
    argv += f" --cache-dir {tmp_path / 'cache'} --json {out} {options}"
    assert minibatch.run(_args(minibatch, argv.split())) == 0
    return json.loads(out.read_text())["cells"][0]


def test_minibatch_record_counts_compilations_and_times_the_loader_alone(tmp_path):
    cell = _small_run(tmp_path, "--eval-batches 1")
    hector, pyg = cell["results"]
    assert (hector["system"], pyg["system"]) == ("hector", "pyg")
    assert hector["status"] == pyg["status"] == "ok"
    assert hector["compilations"] == {
        "during_warmup": 2,
        "after_warmup": 0,
        "layers": 2,
        "inference": 2,
    }
    for r in (hector, pyg):
        assert r["max_feature_file_resident_bytes"] == 0  # read with pread, never mapped
        assert set(r["loader_alone_s"]) == {"sampling", "gather"}
        assert r["sampling_plus_gather_alone_share"] > 0
        assert r["step_without_loader_s"] > 0
        slowdown = max(r["phase_s"]["step"] - r["step_without_loader_s"], 0) / r["phase_s"]["step"]
        assert abs(r["loader_cost_share"] - slowdown - r["exposed_loader_share"]) < 1e-3
        assert r["feature_file_bytes"] == cell["feature_file_bytes"]
    assert hector["max_abs_diff_vs_pyg"] < 1e-4
    assert cell["hector_speedup_vs_pyg"] > 0


def test_cold_features_evict_the_feature_file_before_every_gather(tmp_path, monkeypatch):
    """--cold-features: each batch's gather first drops the feature file's pages, so its rows
    come from storage (a table larger than memory); the batches and the training are the
    same."""
    evicted: list[str] = []
    monkeypatch.setattr(_common, "evict_page_cache", lambda path: evicted.append(str(path)))
    cell = _small_run(tmp_path, "--systems hector --eval-batches 0 --cold-features")
    assert cell["results"][0]["status"] == "ok"
    # warm-up + steps in training, the steps again alone (loader_alone), and the probe batch
    assert len(evicted) >= 3 + 2
    assert {p.rsplit("/", 1)[-1] for p in evicted} == {"features_f8_seed0.npy"}


def test_feature_gather_ways_deliver_the_same_rows(tmp_path):
    out = tmp_path / "fg.json"
    argv = "--dataset synthetic:mag --scale 0.002 --batch-size 16 --fanouts 3,2 --feat 8"
    argv += f" --batches 2 --cold --cache-dir {tmp_path / 'cache'} --json {out}"
    assert feature_gather.run(_args(feature_gather, argv.split())) == 0
    record = json.loads(out.read_text())
    assert record["same_rows_every_way"]
    ways = {r["way"]: r for r in record["results"]}
    assert set(ways) == {"pread", "pread-fresh", "mmap-release", "mmap", "numpy"}
    assert ways["pread"]["max_file_resident_bytes"] == 0
    assert ways["mmap"]["max_file_resident_bytes"] > 0  # the plain mapping keeps pages in
    assert all(r["cold_s"] > 0 and len(r["per_batch_s"]) == 2 for r in ways.values())


def test_mlperf_rgat_workload_trains_hector_and_pygs_heteroconv_on_the_same_batches(tmp_path):
    """--workload mlperf-rgat: 3 HeteroConv(GATConv) layers against Hector's twin on an IGBH
    replica, float16 features; explicit options override the workload's sizes."""
    out = tmp_path / "mb.json"
    argv = "--workload mlperf-rgat --datasets synthetic:igbh-tiny --scale 0.002 --procs 1"
    argv += " --batch-size 8 --fanouts 3,2,2 --feat 8 --hidden 8 --heads 2 --classes 5"
    argv += f" --steps 1 --warmup 1 --eval-batches 1 --cache-dir {tmp_path / 'c'} --json {out}"
    assert minibatch.run(_args(minibatch, argv.split())) == 0
    record = json.loads(out.read_text())
    assert record["config"]["workload"] == "mlperf-rgat"
    assert record["config"]["feat_dtype"] == "float16"  # from the workload
    assert record["config"]["fanouts"] == [3, 2, 2]  # given: overrides the workload's 15,10,5
    cell = record["cells"][0]
    assert (cell["model"], cell["dataset"]) == ("mlperf-rgat", "synthetic:igbh-tiny")
    hector, pyg = cell["results"]
    assert hector["status"] == pyg["status"] == "ok"
    assert hector["compilations"]["after_warmup"] == 0
    assert hector["compilations"]["layers"] == 3
    assert hector["max_abs_diff_vs_pyg"] < 1e-4
    assert cell["feature_file_bytes"] < 2 * 4 * 8 * 550 + 4096  # float16 rows
    for r in (hector, pyg):
        assert r["seeds_per_s"] == pytest.approx(8 * r["batches_per_s"], rel=1e-3)
        assert r["epoch_estimate_s"] == pytest.approx(200 / r["seeds_per_s"], rel=1e-2)


def test_workload_fills_only_the_options_left_at_their_defaults():
    args = _args(minibatch, ["--workload", "mlperf-rgat", "--hidden", "96"])
    minibatch._apply_workload(args)
    assert (args.hidden, args.heads, args.fanouts) == (96, 4, "15,10,5")
    assert (args.feat, args.feat_dtype, args.classes) == (1024, "float16", 2983)
    assert args.datasets == "synthetic:igbh-small"


def test_an_igbh_folder_trains_from_its_own_files_converted_once_to_float16(tmp_path):
    """--datasets <IGBH folder>: the graph and features come from its files; float16 asks
    for a converted copy in the private cache, written once and then reused."""
    import numpy as np
    import torch
    from test_dataset_igbh import write_igbh

    from hector import datasets
    from hector_bench import igbh_files

    written = write_igbh(tmp_path / "small", dim=8)
    out = tmp_path / "mb.json"
    argv = f"--datasets {tmp_path / 'small'} --models rgcn --systems hector --procs 1"
    argv += " --batch-size 8 --fanouts 3,2 --feat 8 --hidden 8 --classes 19 --feat-dtype float16"
    argv += f" --steps 1 --warmup 1 --eval-batches 1 --cache-dir {tmp_path / 'c'} --json {out}"
    assert minibatch.run(_args(minibatch, argv.split())) == 0
    cell = json.loads(out.read_text())["cells"][0]
    assert cell["dataset"] == str(tmp_path / "small")
    assert cell["results"][0]["status"] == "ok"
    converted = sorted((tmp_path / "c").rglob("*_node_feat_float16.npy"))
    assert sorted(p.name.split("_node_feat")[0] for p in converted) == sorted(written["features"])
    stamps = [p.stat().st_mtime_ns for p in converted]
    ds = datasets.load(tmp_path / "small")
    store = igbh_files.igbh_store(ds, str(tmp_path / "c"), 8, 19, "float16")
    assert [p.stat().st_mtime_ns for p in converted] == stamps  # reused, not rewritten
    table = np.concatenate([written["features"][t] for t in ds.node_types]).astype(np.float16)
    assert np.array_equal(store.gather(np.arange(ds.num_nodes)).numpy(), table)
    with pytest.raises(ValueError, match="the features are 8 wide; pass --feat 8"):
        igbh_files.igbh_store(ds, str(tmp_path / "c"), 1024, 19, "float16")
    # MLPerf's float16 copy of a type (torch.save) is read in place, not converted.
    paper = tmp_path / "small" / "processed" / "paper"
    torch.save(torch.from_numpy(written["features"]["paper"]).half(), paper / "node_feat_fp16.pt")
    store = igbh_files.igbh_store(ds, str(tmp_path / "c"), 8, 19, "float16")
    assert store.stores[ds.node_types.index("paper")].path == paper / "node_feat_fp16.pt"
    assert np.array_equal(store.gather(np.arange(ds.num_nodes)).numpy(), table)
    with pytest.raises(ValueError, match="IGBH publishes labels of"):
        igbh_files.igbh_store(ds, str(tmp_path / "c"), 8, 349, "float16")


def _mlperf_record(tmp_path, options: str) -> dict:
    """The record of ``hector bench minibatch --workload mlperf-rgat`` on a tiny IGBH replica
    with ``options`` (a string starting with a space), checked to succeed."""
    out = tmp_path / "mb.json"
    argv = "--workload mlperf-rgat --datasets synthetic:igbh-tiny --scale 0.002 --procs 1"
    argv += options + f" --eval-batches 0 --cache-dir {tmp_path / 'c'} --json {out}"
    assert minibatch.run(_args(minibatch, argv.split())) == 0
    return json.loads(out.read_text())


def test_mlperf_reference_trimmed_and_compiled_by_hector_on_the_same_batches(tmp_path):
    """The reference model as written, with trim_to_layer and under
    torch.compile(backend="hector"): every layer one Hector program, no fallback, the same
    batches as the twin and eager PyG, the first step (the compilation) reported apart."""
    argv = " --batch-size 8 --fanouts 3,2,2 --feat 8 --hidden 8 --heads 2 --classes 5"
    argv += " --systems pyg-trim,pyg-hector,pyg-hector-trim --steps 2 --warmup 1"
    record = _mlperf_record(tmp_path, argv)
    results = {r["system"]: r for r in record["cells"][0]["results"]}
    assert set(results) == {"pyg-trim", "pyg-hector", "pyg-hector-trim"}
    for system in ("pyg-hector", "pyg-hector-trim"):
        r = results[system]
        assert r["status"] == "ok", r
        assert r["first_step_s"] > 0
        assert r["compiled"]["fallbacks"] == {}
        programs = r["compiled"]["hector_programs"]
        # 3 layers x (warm-up + 2 steps) + the quiet re-run of the 2 steps, each with backward
        assert programs["hetero-gat:0.2"]["calls"] == 3 * 5
        assert programs["hetero-gat:0.2"]["backward_calls"] == 3 * 5
    assert "hector_programs" not in results["pyg-trim"]["compiled"]


def test_dynamic_compiles_the_reference_once_for_every_batch_size(tmp_path):
    """--dynamic: torch.compile(..., dynamic=True), one Dynamo compilation for batches of
    different sizes, every layer still one Hector program; the record's config says so."""
    # 64 seeds: smaller batches have relations of 0 or 1 edges, sizes Dynamo specialises
    argv = " --batch-size 64 --feat 8 --hidden 8 --heads 2 --classes 5"
    argv += " --systems pyg-hector-trim --steps 2 --warmup 1 --dynamic"
    record = _mlperf_record(tmp_path, argv)
    assert record["config"]["dynamic"] is True
    r = record["cells"][0]["results"][0]
    assert r["status"] == "ok", r
    assert r["compiled"]["dynamo_graphs"] == 1
    assert r["compiled"]["fallbacks"] == {}
    assert r["compiled"]["hector_programs"]["hetero-gat:0.2"]["calls"] == 3 * 5


def test_trimmed_inputs_give_the_reference_logits_of_the_whole_batch(tmp_path):
    """pyg_inputs(trim=True) orders nodes and edges by hop with PyG's per-hop counts, so
    trim_to_layer leaves the seeds' logits as the whole batch gives them."""
    import torch

    from hector.data.loader import NeighborLoader
    from hector_bench import mlperf_rgat

    ds = minibatch.cached_dataset("synthetic:igbh-tiny", 0.002, str(tmp_path / "c"))
    store = minibatch.feature_store(ds, str(tmp_path / "c"), 8, 5, 0, "float16")
    loader = NeighborLoader(ds, [3, 2, 2], input_nodes="paper", batch_size=8, features=store)
    _, pyg = mlperf_rgat.build_models(ds, 8, 8, 5, 2, 0)
    pyg.eval()
    batch = loader.sample(loader.seeds[:8], index=0)
    with torch.no_grad():
        whole = pyg(batch)
        pyg.trim = True
        trimmed = pyg(batch)
    assert whole.shape == trimmed.shape == (8, 5)
    assert (whole - trimmed).abs().max().item() < 1e-5
    _, _, edges, nodes = mlperf_rgat.pyg_inputs(batch, *ds.metadata(), 3, True)
    assert all(len(v) == 4 for v in nodes.values())
    assert all(len(v) == 3 for v in edges.values())
    assert sum(map(sum, nodes.values())) == batch.num_nodes
    assert sum(map(sum, edges.values())) == batch.num_edges
