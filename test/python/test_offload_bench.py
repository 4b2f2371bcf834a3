"""``hector bench offload``: argument errors, the raw-disk probe and one in-process worker run."""

from __future__ import annotations

import json
import os

import pytest

from hector.tools.cli import main
from hector_bench import offload as bench
from hector_bench import offload_plots as plots
from hector_bench import offload_pooling as pooling
from hector_bench import offload_report as report
from hector_bench import offload_systems as systems
from hector_bench import offload_worker as worker

TINY = {"model": "gpt", "layers": 2, "hidden": 32, "heads": 2, "seq": 16, "batch": 2, "vocab": 64}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--systems", "foo"], "unknown system(s) foo"),
        (["--systems", "keep-all+huge"], "unknown system(s) keep-all+huge"),
        (["--systems", "nope+thp"], "unknown system(s) nope+thp"),
        (["--systems", "keep-all+fwdtrim"], "unknown system(s) keep-all+fwdtrim"),
        (["--hidden", "10", "--heads", "4"], "--hidden must be divisible by --heads"),
    ],
)
def test_bad_arguments(capsys, argv, message):
    assert main(["bench", "offload", *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert message in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--layers", "0"], "argument --layers: must be from 1 to 1024, got 0"),
        (["--raw-probes", "0"], "argument --raw-probes: must be from 1 to 1000, got 0"),
    ],
)
def test_bad_numbers_are_refused_by_the_parser(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "offload", *argv])
    assert exc.value.code == 2
    assert f"hector bench offload: error: {message}" in capsys.readouterr().err


def test_cuda_without_a_device_is_a_clear_error(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["bench", "offload", "--device", "cuda"]) == 1
    assert "--device cuda: no CUDA device here" in capsys.readouterr().err


def test_granularity_choices_are_the_caches():
    """The command line names the granularities itself (so that ``hector`` starts without
    importing ``hector.offload``): they are the cache's, in its order."""
    from hector.offload.cache import GRANULARITIES

    assert bench.GRANULARITIES == GRANULARITIES
    action = next(a for a in _offload_parser()._actions if a.dest == "granularity")
    assert action.choices == GRANULARITIES


def _offload_parser():
    import argparse

    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser


def test_device_memory_does_nothing_on_cpu():
    import torch

    gpu = worker._DeviceMemory(torch.device("cpu"))
    gpu.start()
    assert not gpu.active


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("system", ["keep-all", "hector-adaptive"])
def test_cuda_runs_report_the_device_peak(tmp_path, system):
    out = _run_worker(tmp_path, system, device="cuda")
    assert out["rss_method"] == worker._DeviceMemory.method
    assert out["peak_rss_bytes"] > 0
    assert "host_peak_rss_bytes" in out
    assert out["gpu"]
    assert out["memory_trace"] is None  # host RSS traces say nothing of the device
    if system == "hector-adaptive":
        assert out["plan"] is not None


def test_adaptive_runs_where_mlir_does_not_import(tmp_path):
    # The GPU machine's image has PyTorch but no MLIR: the benchmark (and the adaptive cache
    # in its worker process) must still run there, the plan made without its IR.
    import json

    from _no_mlir import run_python

    sizes = [f"--{k}={v}" for k, v in TINY.items()]
    args = ["--steps", "2", "--warmup", "1", "--raw-mib", "8", "--raw-probes", "1"]
    proc = run_python(
        *["-m", "hector.tools.cli", "bench", "offload", *sizes, *args],
        *["--systems", "keep-all,hector-adaptive", "--root", str(tmp_path)],
        *["--json", str(tmp_path / "r.json"), "--frontier", str(tmp_path / "f.png")],
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {r["system"]: r for r in json.loads((tmp_path / "r.json").read_text())["results"]}
    assert rows["hector-adaptive"]["status"] == "ok"
    assert rows["hector-adaptive"]["plan_decisions"]
    assert rows["hector-adaptive"]["plan_has_ir"] is False


def test_run_until_planned_runs_only_an_adaptive_cache_s_own_start():
    from types import SimpleNamespace

    ran: list[int] = []
    cache = SimpleNamespace(policy="adaptive", plan=None)

    def step(i: int) -> None:
        ran.append(i)
        if len(ran) == 3:  # the plan is made as the fourth forward starts; here, after 3
            cache.plan = "planned"

    assert bench.run_until_planned(step, cache) == 3
    assert ran == [0, 1, 2]
    assert bench.run_until_planned(step, SimpleNamespace(policy="all", plan=None)) == 0
    assert bench.run_until_planned(step, None) == 0
    never = SimpleNamespace(policy="adaptive", plan=None)
    with pytest.raises(RuntimeError, match="made no plan in 4 steps"):
        bench.run_until_planned(lambda i: None, never, limit=4)


def test_raw_disk_bandwidth(tmp_path):
    raw = bench.raw_disk_bandwidth(str(tmp_path), total_mib=8)
    assert raw["bytes"] == 8 << 20
    assert raw["write_bandwidth"] > 0
    assert raw["read_bandwidth"] > 0
    assert os.listdir(tmp_path) == []


def _run_worker(tmp_path, system: str, config=TINY, **extra):
    """One system's two timed steps, in this process, storing under ``tmp_path``."""
    payload = {"system": system, "config": config, "steps": 2, "warmup": 1}
    return worker.measure_system({**payload, "root": str(tmp_path), "threads": 1, **extra})


@pytest.mark.parametrize("system", ["hector-all", "checkpoint"])
def test_worker_reports_figures(tmp_path, system):
    out = _run_worker(tmp_path, system)
    assert len(out["times_ms"]) == 2
    assert out["saved_peak_bytes"] > 0
    events = [row[0] for row in out["memory_trace"]["events"]]
    assert events[0] == "forward embed"
    assert events[-1] == "step end"
    assert "backward blocks.0.attn" in events  # 2 blocks: "auto" scopes are the blocks' children
    if system == "hector-all":
        assert out["bytes_written_per_step"] >= 0
        assert out["timeline"]
        # This interpreter keeps PyTorch's allocator (conftest.py), so the cache hands back.
        assert (out["release_memory"], out["cpu_allocator"]) == ("advise", {})
        assert out["cpu_allocator_note"] is None
    kernel = out["kernel_per_step"]
    assert kernel["minor_faults"] >= kernel["thread_minor_faults"] > 0
    assert kernel["thread_system_ms"] >= 0
    columns = report.kernel_columns(kernel)
    assert columns["sys ms"] == kernel["thread_system_ms"]
    assert columns["faults k"] == round(kernel["minor_faults"] / 1e3, 1)
    assert columns["others ms"] == kernel["others_cpu_ms"]  # what else ran meanwhile
    assert columns["steal ms"] == kernel["host_steal_ms"]
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("model", "blocks"),
    [
        ("hf-gpt2", "model.transformer.h.1."),
        ("hf-llama", "model.model.layers.1."),
        ("torch-encoder", "encoder.layers.1."),
        ("vit", "blocks.1."),
    ],
)
def test_models_users_bring_are_measured(tmp_path, model, blocks):
    out = _run_worker(
        tmp_path, "hector-all", {**TINY, "model": model}, cache_options={"threshold": 1024}
    )
    assert out["saved_peak_bytes"] > 0
    assert out["bytes_written_per_step"] > 0  # offloaded
    events = [row[0] for row in out["memory_trace"]["events"]]
    assert any(e.startswith(f"backward {blocks}") for e in events)  # scopes found by structure
    assert os.listdir(tmp_path) == []


def test_worker_breaks_the_offloaded_step_down(tmp_path):
    out = _run_worker(tmp_path, "hector-all", {**TINY, "hidden": 64, "seq": 64})
    parts = out["time_breakdown_ms_per_step"]
    for key in ("pack", "unpack", "release", "submit", "write_wait", "read_wait", "python"):
        assert parts[key] >= 0
    assert parts["hooks"] > 0
    assert out["io_backend"]
    assert isinstance(out["store_phases_ms_per_step"], dict)


def test_adaptive_worker_records_its_plan_model_and_granularity(tmp_path):
    big = {**TINY, "hidden": 64, "seq": 64}
    out = _run_worker(tmp_path, "hector-adaptive", big, warmup=2, granularity="layer")
    assert "blocks.0.mlp" in out["plan_decisions"]
    assert out["plan_has_ir"] is True  # printed as placement IR where MLIR imports
    assert 0 <= out["modelled_overhead"] < 1  # what the plan predicted, next to the measure
    assert os.listdir(tmp_path) == []


def test_deepspeed_cpu_checkpointing_is_reported_unsupported_on_a_cpu_device(tmp_path, monkeypatch):
    # Not installed: it does not import; installed (0.19.8): its CPU copy of a CPU tensor
    # empties the tensor and backward fails. Either way the row says why instead of failing.
    # (The worker normally runs in its own process: keep its environment and process group
    # out of this one.)
    import torch.distributed as dist

    for key, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29631"), ("RANK", "0")):
        monkeypatch.setenv(key, value)
    for key, value in (("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"), ("DS_ACCELERATOR", "cpu")):
        monkeypatch.setenv(key, value)
    out = _run_worker(tmp_path, "deepspeed-cpu-checkpoint", steps=1)
    if dist.is_initialized():
        dist.destroy_process_group()
    assert out["unsupported"].startswith("deepspeed")


def test_frontier_plot_is_written(tmp_path):
    record = {
        **TINY,
        "results": [
            {
                "system": "keep-all",
                "status": "ok",
                "median_ms": 10.0,
                "peak_mem_bytes": 8 << 20,
                "saved_peak_bytes": 4 << 20,
            },
            {
                "system": "hector-adaptive",
                "status": "ok",
                "median_ms": 11.0,
                "peak_mem_bytes": 4 << 20,
                "saved_peak_bytes": 2 << 20,
            },
            {"system": "deepspeed-cpu-checkpoint", "status": "unsupported", "error": "x"},
        ],
    }
    path = tmp_path / "f.png"
    plots.frontier_plot(str(path), record)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_memory_trace_plot_and_columns(tmp_path):
    events = [
        ["forward embed", 1.0, 1.0, 0.5],
        ["forward", 9.0, 3.0, 2.0],
        ["step end", 2.0, 2.0, 0.0],
    ]
    trace = {"events": events, "peak": events[1]}
    assert report.trace_columns(trace) == {"traced peak at": "forward", "kept free MiB": 1.0}
    assert report.trace_columns(None) == {"traced peak at": None, "kept free MiB": None}
    record = {
        **TINY,
        "results": [
            {"system": "keep-all", "status": "ok", "memory_trace": trace},
            {"system": "hector-adaptive", "status": "ok", "memory_trace": trace},
            {"system": "checkpoint", "status": "error"},
        ],
    }
    path = tmp_path / "m.png"
    plots.memory_trace_plot(str(path), record)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    nothing = tmp_path / "none.png"
    plots.memory_trace_plot(str(nothing), {**TINY, "results": []})
    assert not nothing.exists()


def _split_system(name: str) -> tuple[str, str] | None:
    """A ``--systems`` entry as (system, variant) names, None where it does not parse."""
    run = systems.SystemRun.parse(name)
    if run is None:
        return None
    assert run.name == name  # the records keep the entry as written
    return run.system.name, run.variant.name if run.variant else ""


def test_a_system_may_run_under_a_variant():
    assert _split_system("keep-all+thp") == ("keep-all", "thp")
    assert _split_system("hector-adaptive") == ("hector-adaptive", "")
    assert _split_system("hector-adaptive+fwdtrim") == ("hector-adaptive", "fwdtrim")
    assert systems.VARIANTS["fwdtrim"].cache_options == {"trim_point": "forward end"}
    from hector.runtime.hugepages import THP_ENV

    assert systems.VARIANTS["thp"].env == {THP_ENV: "1"}  # the switch enable_huge_pages() sets
    # Hector's caching CPU allocator is environment too: keep-all runs under it as well.
    assert _split_system("keep-all+calloc") == ("keep-all", "calloc")
    assert pooling.same_environment_peer("hector-adaptive+calloc") == "keep-all+calloc"
    # A hector system's cache installs it itself (release_memory="auto"): the same peer.
    assert pooling.same_environment_peer("hector-adaptive", under_allocator=True) == (
        "keep-all+calloc"
    )
    assert _split_system("hector-all+torchalloc") == ("hector-all", "torchalloc")
    from hector.offload.cache import CPU_ALLOCATOR_ENV

    # What the cache reads.
    assert systems.VARIANTS["torchalloc"].env == {CPU_ALLOCATOR_ENV: "pytorch"}


def test_a_system_under_the_allocator_its_cache_installed_is_also_pooled_against_its_keep_all():
    results = [
        _ok("keep-all", [100.0], 400),
        _ok("keep-all+calloc", [95.0], 300),
        {**_ok("hector-adaptive", [104.5], 100), "release_memory": "allocator"},
        {**_ok("hector-all+torchalloc", [110.0], 200), "release_memory": "advise"},
    ] * 2
    pooling.number_rounds(results)
    rows = {row["system"]: row for row in bench.pooled_summary(results)}
    assert rows["hector-adaptive"]["pooled overhead"] == pytest.approx(0.045)
    assert rows["hector-adaptive"]["same-env overhead"] == pytest.approx(0.1)
    assert rows["hector-adaptive"]["same-env RSS -%"] == pytest.approx(1 - 100 / 300, abs=1e-4)
    torch_alloc = rows["hector-all+torchalloc"]  # no keep-all+torchalloc ran
    assert torch_alloc["same-env overhead"] is None


def _ok(system: str, times: list[float], rss: int) -> dict:
    return {"system": system, "status": "ok", "times_ms": times, "peak_mem_bytes": rss}


def test_rounds_are_numbered_and_pooled_over_every_timed_step():
    results = [
        _ok("keep-all", [100.0, 100.0], 100),
        _ok("hector-adaptive", [110.0, 110.0], 60),
        _ok("keep-all", [200.0, 200.0], 100),  # the host slowed down for this round
        _ok("hector-adaptive", [210.0, 210.0], 50),
    ]
    pooling.number_rounds(results)
    assert [r["round"] for r in results] == [0, 0, 1, 1]
    rows = {row["system"]: row for row in bench.pooled_summary(results)}
    assert rows["hector-adaptive"]["pooled overhead"] == pytest.approx(160 / 150 - 1, abs=1e-4)
    assert rows["keep-all"]["pooled overhead"] == 0
    assert rows["hector-adaptive"]["RSS -% pooled"] == pytest.approx(1 - 55 / 100)
    assert bench.pooled_summary(results[:2]) == []  # one round: nothing to pool


def test_pooled_rows_carry_round_intervals_and_the_systems_that_dominate_them():
    # Four rounds, each system paired with its own round's keep-all; the third round ran on a
    # slower host for hector-adaptive only, so its interval must reach up that far.
    steps = {"keep-all": [100, 100, 100, 100], "save_on_cpu": [104, 103, 105, 104]}
    steps["hector-adaptive"] = [110, 112, 140, 111]
    steps["hector-all"] = [150, 150, 150, 150]
    rss = {"keep-all": 100, "save_on_cpu": 98, "hector-adaptive": 85, "hector-all": 50}
    results = [
        _ok(name, [float(steps[name][k])] * 3, rss[name])
        for k in range(4)
        for name in ("keep-all", "save_on_cpu", "hector-adaptive", "hector-all")
    ]
    pooling.number_rounds(results)
    rows = {row["system"]: row for row in bench.pooled_summary(results)}
    adaptive = rows["hector-adaptive"]
    low, high = adaptive["overhead 90% CI"]
    assert low <= adaptive["pooled overhead"] <= high
    assert low >= 0.10
    assert high >= 0.12  # the slow round is in the interval, not averaged away
    assert adaptive["RSS -% 90% CI"] == pytest.approx((0.15, 0.15))
    assert rows["keep-all"]["overhead 90% CI"] is None
    # Against all-offload, round by round: faster in all four, by a median of 25.7%.
    assert adaptive["faster than all-offload"] == "4/4"
    assert adaptive["vs all-offload, paired"] == pytest.approx((111 + 112) / 2 / 150 - 1, abs=1e-4)
    assert rows["hector-all"]["vs all-offload, paired"] is None  # only adaptive is paired
    # Each system trades time for memory: nothing is both faster and lighter than another.
    assert all(row["dominated by"] == [] for row in rows.values())
    # An adaptive run that saves less than save_on_cpu while taking longer is dominated.
    heavier = [
        dict(r, peak_mem_bytes=99) if r["system"] == "hector-adaptive" else r for r in results
    ]
    rows = {row["system"]: row for row in bench.pooled_summary(heavier)}
    assert rows["hector-adaptive"]["dominated by"] == ["save_on_cpu"]
    shown = pooling.shown_pooled_row(rows["hector-adaptive"])
    assert shown["dominated by"] == "save_on_cpu"
    assert shown["vs all-offload, paired"] == "-25.7%"
    assert shown["overhead 90% CI"].count("%") == 2


def _record(steps: dict[str, list[float]], rss: dict[str, int], **config) -> dict:
    """An offload record of alternating rounds: ``steps[system][k]`` is round k's step."""
    rounds = len(next(iter(steps.values())))
    results = [
        dict(_ok(name, [steps[name][k]] * 2, rss[name]), median_ms=steps[name][k])
        for k in range(rounds)
        for name in steps
    ]
    pooling.number_rounds(results)
    for r in results:  # as run() records them: against the keep-all of the run's own round
        r["step_time_overhead"] = round(r["median_ms"] / steps["keep-all"][r["round"]] - 1, 4)
    return {"benchmark": "offload", **TINY, "threads": 1, **config, "results": results}


def test_records_pool_with_each_round_against_its_own_keep_all():
    # The host ran twice as slow during the second record: pooled, each run still pairs with
    # the keep-all of its own round, so the interval spans both records' overheads.
    fast = _record(
        {"keep-all": [100.0, 100.0], "hector-adaptive": [105.0, 106.0]},
        {"keep-all": 100, "hector-adaptive": 60},
    )
    slow = _record(
        {"keep-all": [200.0, 200.0], "hector-adaptive": [230.0, 232.0]},
        {"keep-all": 100, "hector-adaptive": 50},
    )
    pooled = bench.pool_records([("a.json", fast), ("b.json", slow)])
    assert pooled["benchmark"] == "offload-pooled"
    assert pooled["records"] == ["a.json", "b.json"]
    rounds = [r["round"] for r in pooled["results"] if r["system"] == "hector-adaptive"]
    assert rounds == ["0:0", "0:1", "1:0", "1:1"]
    rows = {row["system"]: row for row in pooled["pooled"]}
    adaptive = rows["hector-adaptive"]
    assert adaptive["rounds"] == [0.05, 0.06, 0.15, 0.16]
    low, high = adaptive["overhead 90% CI"]
    assert low < 0.1 < high  # one record within 10%, the other not: the interval says both
    assert adaptive["RSS -% pooled"] == pytest.approx(1 - 55 / 100)
    # A system only the second record ran is compared with that record's keep-all alone.
    later = _record(
        {"keep-all": [200.0], "hector-all": [260.0]}, {"keep-all": 100, "hector-all": 50}
    )
    rows = {r["system"]: r for r in bench.pool_records([("a", fast), ("c", later)])["pooled"]}
    assert rows["hector-all"]["pooled overhead"] == pytest.approx(0.3)
    # The inputs are left as they were (their own round numbers).
    assert [r["round"] for r in fast["results"]][:2] == [0, 0]


def test_records_of_different_configurations_do_not_pool():
    a = _record(
        {"keep-all": [1.0, 1.0], "hector-adaptive": [1.0, 1.0]},
        {"keep-all": 1, "hector-adaptive": 1},
    )
    b = dict(a, hidden=64)
    with pytest.raises(ValueError, match=r"b.json: hidden is 64, but a.json has 32"):
        bench.pool_records([("a.json", a), ("b.json", b)])
    with pytest.raises(ValueError, match="not a record of hector bench offload"):
        bench.pool_records([("a.json", a), ("c.json", {"benchmark": "gnn"})])


def test_pool_from_the_command_line(tmp_path, capsys):
    import json

    paths = []
    for i, slow in enumerate((1.0, 2.0)):
        rec = _record(
            {"keep-all": [100.0 * slow] * 2, "hector-adaptive": [108.0 * slow] * 2},
            {"keep-all": 100, "hector-adaptive": 60},
        )
        paths.append(str(tmp_path / f"r{i}.json"))
        with open(paths[-1], "w") as f:
            json.dump(rec, f)
    out = str(tmp_path / "pooled.json")
    assert main(["bench", "offload", "--pool", *paths, "--json", out]) == 0
    printed = capsys.readouterr().out
    assert "pooled over 4 rounds of 2 record(s)" in printed
    with open(out) as f:
        written = json.load(f)
    rows = {row["system"]: row for row in written["pooled"]}
    assert rows["hector-adaptive"]["pooled overhead"] == pytest.approx(0.08)
    assert os.path.exists(str(tmp_path / "pooled_frontier.png"))
    # A missing or corrupt record: one line on stderr, exit 1, nothing written.
    (tmp_path / "bad.json").write_text("{not json")
    for bad in (str(tmp_path / "missing.json"), str(tmp_path / "bad.json")):
        assert (
            main(["bench", "offload", "--pool", paths[0], bad, "--json", str(tmp_path / "x.json")])
            == 1
        )
        err = capsys.readouterr().err
        assert err.startswith(f"error: cannot read record {bad}: ")
        assert "Traceback" not in err
    assert not os.path.exists(str(tmp_path / "x.json"))
    # One round each: nothing to pool.
    one = str(tmp_path / "one.json")
    with open(one, "w") as f:
        json.dump(
            _record(
                {"keep-all": [1.0], "hector-adaptive": [1.0]}, {"keep-all": 1, "hector-adaptive": 1}
            ),
            f,
        )
    assert main(["bench", "offload", "--pool", one]) == 1
    assert "nothing to pool" in capsys.readouterr().err


def test_a_huge_page_system_is_also_pooled_against_keep_all_under_huge_pages():
    # The allocator's huge pages change plain training too: against plain keep-all alone, a
    # +thp row would credit Hector with what the allocator did.
    results = [
        _ok("keep-all", [100.0], 400),
        _ok("keep-all+thp", [90.0], 300),
        _ok("hector-adaptive+thp", [99.0], 150),
        _ok("hector-adaptive", [105.0], 200),
    ] * 2
    pooling.number_rounds(results)
    rows = {row["system"]: row for row in bench.pooled_summary(results)}
    thp = rows["hector-adaptive+thp"]
    assert thp["pooled overhead"] == pytest.approx(-0.01)
    assert thp["same-env overhead"] == pytest.approx(0.1)
    assert thp["RSS -% pooled"] == pytest.approx(1 - 150 / 400)
    assert thp["same-env RSS -%"] == pytest.approx(0.5)
    plain = rows["hector-adaptive"]  # plain systems: the same keep-all both ways
    assert plain["same-env overhead"] == plain["pooled overhead"] == pytest.approx(0.05)
    no_peer = [r for r in results if r["system"] != "keep-all+thp"]
    rows = {row["system"]: row for row in bench.pooled_summary(no_peer)}
    assert rows["hector-adaptive+thp"]["same-env overhead"] is None
    assert rows["hector-adaptive+thp"]["same-env RSS -%"] is None
    # A cache variant runs in plain keep-all's environment.
    assert pooling.same_environment_peer("hector-adaptive+fwdtrim") == "keep-all"


def test_each_offloading_run_is_compared_with_the_disk_as_it_was_around_it(
    tmp_path, monkeypatch, capsys
):
    # The disk's speed drifts within minutes: one raw figure at the start of the benchmark
    # made the store look slow or fast depending on that moment, and one probe on either side
    # of a run still did (back-to-back probes read 893 and 2367 MB/s): the median of several.
    from hector_bench import _common

    # The start, then two probes before and two after hector-all (median 800 MB/s).
    raws = iter([2000e6, 1000e6, 900e6, 600e6, 700e6])

    def raw(root, total_mib=256, block_mib=4):
        bw = next(raws)
        return {"bytes": 1, "direct": True, "write_bandwidth": bw, "read_bandwidth": bw / 2}

    def measured(module, payload, env=None):
        out = {"times_ms": [100.0, 100.0], "peak_rss_bytes": 1 << 20, "saved_peak_bytes": 1 << 20}
        if payload["system"] == "hector-all":
            out.update(write_bandwidth=800e6, read_bandwidth=400e6, huge_pages_advice="use them")
        return out

    monkeypatch.setattr(bench, "raw_disk_bandwidth", raw)
    engine = {"write_bandwidth": 1e9, "read_bandwidth": 1e9, "bytes": 1, "direct": True}
    monkeypatch.setattr(bench, "engine_bandwidth", lambda root, mib: dict(engine))
    monkeypatch.setattr(_common, "measure_in_subprocess", measured)
    path = tmp_path / "r.json"
    argv = ["bench", "offload", "--systems", "keep-all,hector-all", "--root", str(tmp_path)]
    argv += ["--raw-probes", "2"]
    assert main([*argv, "--json", str(path), "--frontier", str(tmp_path / "f.png")]) == 0
    import json

    rows = {r["system"]: r for r in json.loads(path.read_text())["results"]}
    offloaded = rows["hector-all"]
    around = offloaded["raw_disk_around"]
    assert around["write_bandwidth"] == pytest.approx(800e6)
    assert around["write_range"] == pytest.approx([600e6, 1000e6])
    assert [p["write_bandwidth"] for p in around["before"]] == pytest.approx([1000e6, 900e6])
    assert len(around["after"]) == 2
    assert offloaded["write_bandwidth_vs_raw"] == pytest.approx(1.0)
    assert offloaded["read_bandwidth_vs_raw"] == pytest.approx(1.0)
    assert offloaded["write_bandwidth_vs_start_raw"] == pytest.approx(0.4)
    assert "raw_disk_around" not in rows["keep-all"]  # no I/O: no probe around it
    printed = capsys.readouterr().out
    assert "W/raw" in printed
    assert "advice to hector-all: use them" in printed  # the cache's huge-page advice


def test_compiled_systems_are_compared_with_the_compiled_keep_all_of_their_round():
    for name in ("keep-all-compiled", "hector-all-compiled", "hector-all-compiled-inside"):
        assert systems.SystemRun.parse(name).system.compiled
    assert not systems.SYSTEMS["hector-all"].compiled
    results = [
        {"system": s, "status": "ok", "round": rnd, "median_ms": ms, "all_steps_peak_rss_bytes": b}
        for s, rnd, ms, b in (
            ("keep-all", 0, 200.0, 1000),
            ("keep-all-compiled", 0, 100.0, 800),
            ("hector-all-compiled", 0, 105.0, 400),
            ("keep-all-compiled", 1, 120.0, 800),
            ("hector-all-compiled", 1, 132.0, 480),
        )
    ]
    results[0]["saved_peak_bytes"] = 500  # counted for keep-all, not for compiled systems
    report.compare_with_keep_all(results, raw={})
    by = {(r["system"], r["round"]): r for r in results}
    assert by[("hector-all-compiled", 0)]["step_vs_compiled_keep_all"] == 1.05
    assert by[("hector-all-compiled", 0)]["all_steps_rss_vs_compiled_keep_all"] == 0.5
    assert by[("hector-all-compiled", 1)]["step_vs_compiled_keep_all"] == 1.1
    assert by[("hector-all-compiled", 1)]["all_steps_rss_vs_compiled_keep_all"] == 0.6
    assert "step_vs_compiled_keep_all" not in by[("keep-all-compiled", 0)]
    row = report.table_rows([by[("hector-all-compiled", 0)]])[0]
    assert (row["step/comp."], row["all/comp."]) == (1.05, 0.5)


def test_budgeted_compiled_systems_compile_through_the_offload_compiled_bench(
    tmp_path, monkeypatch
):
    """``hector-budget-compiled`` (0.5) and ``hector-budget-0.25-compiled`` compile the model
    as ``hector bench offload-compiled``'s ``hector-<budget>`` systems do (the same function),
    run in the worker next to the eager systems and are compared with the compiled keep-all."""
    import torch

    from hector.offload.joint import JointBackend
    from hector.offload.joint_ops import tickets
    from hector_bench import offload_compiled

    asked = []

    def eager_runner(system, model):  # Inductor's compile is minutes: AOTAutograd's runner
        asked.append(system)
        budget = float(system.split("-")[1])
        backend = JointBackend(
            budget, compute="eager", threshold=1024, write_bandwidth=1e9, read_bandwidth=1e9
        )
        return torch.compile(model, backend=backend), backend

    monkeypatch.setattr(offload_compiled, "compile_system", eager_runner)
    for name, budget in (("hector-budget-compiled", 0.5), ("hector-budget-0.25-compiled", 0.25)):
        system = systems.SystemRun.parse(name).system
        assert system.compiled
        assert system.does_io
        assert system.memory_budget == budget
    torch._dynamo.reset()
    before = tickets().stats()["put_bytes"]
    out = _run_worker(tmp_path, "hector-budget-0.25-compiled", {**TINY, "hidden": 64, "seq": 64})
    assert asked == ["hector-0.25"]
    assert len(out["times_ms"]) == 2
    assert tickets().stats()["put_bytes"] > before  # saved values went to the store
    assert tickets().stats()["outstanding"] == 0
    assert out["note"].startswith("compiled, budget inside the graph")
    results = [
        {"system": "keep-all", "status": "ok", "round": 0, "median_ms": 200.0},
        {
            "system": "keep-all-compiled",
            "status": "ok",
            "round": 0,
            "median_ms": 100.0,
            "all_steps_peak_rss_bytes": 800,
        },
        {
            "system": "hector-budget-compiled",
            "status": "ok",
            "round": 0,
            "median_ms": 104.0,
            "all_steps_peak_rss_bytes": 400,
        },
    ]
    report.compare_with_keep_all(results, raw={})
    assert results[2]["step_vs_compiled_keep_all"] == 1.04
    assert results[2]["all_steps_rss_vs_compiled_keep_all"] == 0.5


def test_offload_compiled_worker_reports_cpu_time_next_to_wall_time(monkeypatch):
    """``hector bench offload-compiled`` records each system's median CPU time per step (the
    process's and the training thread's) next to its wall time."""
    from hector_bench import offload_compiled

    monkeypatch.setattr(offload_compiled, "compile_system", lambda system, model: (model, None))
    payload = {
        "system": "keep-all",
        "config": {
            "model": "encoder",
            "layers": 1,
            "width": 32,
            "heads": 4,
            "seq": 16,
            "batch": 2,
            "vocab": 64,
        },
        "steps": 3,
        "threads": 1,
        "allocator": "pytorch",
    }
    out = offload_compiled.measure(payload)
    assert out["cpu_step_s"] > 0
    assert out["thread_cpu_step_s"] > 0
    assert out["step_s"] > 0
    assert len(out["step_peak_rss_bytes"]) == 3


def test_offload_compiled_timeline_says_where_each_step_peaks(monkeypatch):
    """``--timeline``: each step's real peak is located between two marks (the loop's phases,
    the budget path's runtime calls named by the saved value they carry), and each step's
    peak is the highest of its intervals."""
    import torch

    from hector.offload.joint import JointBackend
    from hector_bench import offload_compiled

    def eager_runner(system, model):
        backend = JointBackend(
            0.25, compute="eager", threshold=1024, write_bandwidth=1e9, read_bandwidth=1e9
        )
        return torch.compile(model, backend=backend), type("B", (), {"joint": backend})()

    monkeypatch.setattr(offload_compiled, "compile_system", eager_runner)
    torch._dynamo.reset()
    config = {"model": "encoder", "layers": 1, "width": 32, "heads": 4, "seq": 64}
    payload = {
        "system": "hector-0.25",
        "config": {**config, "batch": 2, "vocab": 64},
        "steps": 2,
        "threads": 1,
        "allocator": "pytorch",
        "timeline": True,
    }
    out = offload_compiled.measure(payload)
    assert [p["step"] for p in out["peak_at"]] == [0, 1]
    last = out["timeline_last_step"]
    labels = [r["to"] for r in last]
    for phase in ("forward", "loss", "backward", "optimizer"):
        assert phase in labels
    assert labels.index("forward") < labels.index("loss") < labels.index("backward")
    gets = [label for label in labels if label.startswith("before get ")]
    assert gets
    assert all(not label.split()[-1].isdigit() for label in gets)  # named by saved value
    assert out["step_peak_rss_bytes"][1] == max(r["peak_bytes"] for r in last)
    assert out["peak_at"][1]["peak_bytes"] == out["step_peak_rss_bytes"][1]


TINY_LM = {"model": "encoder", "layers": 1, "width": 32, "heads": 4, "seq": 16, "batch": 2}


def test_offload_compiled_paired_alternates_keep_all_and_the_system_in_one_process(monkeypatch):
    """``--paired``: one process trains keep-all and the system from the same seed, then
    alternates their steps for the rounds asked; the ratio is the median of the rounds'."""
    import statistics

    import torch

    from hector.offload.joint import JointBackend
    from hector_bench import offload_compiled

    asked = []

    def runner(system, model, optimizer=None):
        asked.append(system)
        if system == "keep-all":
            return model, None
        backend = JointBackend(
            0.25, compute="eager", threshold=1024, write_bandwidth=1e9, read_bandwidth=1e9
        )
        return torch.compile(model, backend=backend), type("B", (), {"joint": backend})()

    monkeypatch.setattr(offload_compiled, "compile_system", runner)
    torch._dynamo.reset()
    config = {**TINY_LM, "vocab": 64}
    payload = {"system": "hector-0.25", "config": config, "rounds": 3, "threads": 1}
    out = offload_compiled.measure_paired(payload)
    assert asked == ["keep-all", "hector-0.25"]
    assert len(out["ratios"]) == 3
    assert out["paired_ratio"] == statistics.median(out["ratios"])
    assert out["keep_all_step_s"] > 0
    assert out["step_s"] > 0
    assert out["thread_cpu_ratio"] > 0
    assert out["write_wait_step_s"] >= 0
    assert out["read_wait_step_s"] >= 0


def test_offload_compiled_paired_runs_each_system_but_keep_all_with_keep_all(
    tmp_path, monkeypatch, capsys
):
    """``hector bench offload-compiled --paired N`` starts one worker per system but keep-all
    (each pairs itself with keep-all) and records their answers."""
    import argparse

    from hector_bench import _common, offload_compiled

    payloads = []

    def worker(module, payload, env=None):
        payloads.append((module, payload))
        return {"system": payload["system"], "paired_ratio": 1.07}

    monkeypatch.setattr(_common, "measure_in_subprocess", worker)
    parser = argparse.ArgumentParser()
    offload_compiled.add_arguments(parser)
    out = tmp_path / "paired.json"
    argv = ["--systems", "keep-all", "hector-0.5-opt", "--paired", "4", "--json", str(out)]
    assert offload_compiled.run(parser.parse_args(argv)) == 0
    assert [(m, p["system"], p["rounds"]) for m, p in payloads] == [
        ("hector_bench.offload_compiled", "hector-0.5-opt", 4)
    ]
    record = json.loads(out.read_text())
    assert record["config"]["paired_rounds"] == 4
    assert record["results"][0]["paired_ratio"] == 1.07
    assert "paired step/keep-all" in capsys.readouterr().out
