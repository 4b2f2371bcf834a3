"""The persistent compilation cache: entries reused across processes (CPU and CUDA programs),
checked, bounded, private."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hector
from hector.runtime.compile_cache import CompileCache, key_of
from hector.runtime.private_dir import UnsafeDirectoryError

# The layer and inputs both programs below compile, in a fresh process each.
_LAYER = r"""
import json, torch
import hector
from hector.data.graph import random_graph

def layer(g, x, w):
    m = g.typed_linear(g.gather_src(x), w)
    return hector.relu(g.sum_to_dst(m * g.degree_norm("dst")))

g = random_graph(40, 300, 3, seed=1)
torch.manual_seed(0)
x = torch.randn(40, 8, requires_grad=True)
w = torch.randn(3, 8, 6, requires_grad=True)
"""
# A second process compiles the same layer: it must load the first one's entry, not compile.
_PROGRAM = (
    _LAYER
    + r"""
from hector.targets import cpu_cache

layer = hector.compile(layer)
y = layer(g, x, w)
y.square().sum().backward()
entry = layer.compile_for(g, x, w)
print(json.dumps({"stats": cpu_cache.STATS, "y": y.detach().flatten().tolist()[:50],
                  "gx": x.grad.flatten().tolist()[:50], "stages": list(entry.staged.stages),
                  "llvm": entry.ir("llvm")}))
"""
)


def _run(cache_dir: Path, program: str = _PROGRAM, **env: str) -> dict:
    environ = {**os.environ, "HECTOR_CACHE_DIR": str(cache_dir), **env}
    done = subprocess.run(
        [sys.executable, "-c", program], env=environ, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    return d


def _entries(cache_dir: Path) -> list[Path]:
    root = cache_dir / "compiled"
    return [e for e in root.iterdir() if not e.name.startswith(".")] if root.exists() else []


def _truncate_in_every_entry(cache_dir: Path, name: str) -> None:
    """Cut file ``name`` of every entry short: it no longer matches its checksum."""
    for entry in _entries(cache_dir):
        f = entry / name
        f.write_bytes(f.read_bytes()[:100])


def test_a_second_process_loads_the_first_ones_program(cache_dir: Path) -> None:
    first = _run(cache_dir)
    assert first["stats"] == {"hits": 0, "misses": 2, "stores": 2}  # inference and training
    second = _run(cache_dir)
    assert second["stats"] == {"hits": 2, "misses": 0, "stores": 0}
    assert second["y"] == first["y"]  # bit-identical results and gradients
    assert second["gx"] == first["gx"]
    assert second["stages"] == first["stages"]  # the IR of each stage comes with the entry,
    assert second["llvm"] == first["llvm"]  # the last one as bytecode, printed alike
    assert "llvm.func @layer(" in second["llvm"]


def test_a_corrupt_library_is_compiled_again(cache_dir: Path) -> None:
    first = _run(cache_dir)
    _truncate_in_every_entry(cache_dir, "kernel.so")
    again = _run(cache_dir)
    assert again["stats"]["hits"] == 0
    assert again["y"] == first["y"]
    assert _run(cache_dir)["stats"]["hits"] == 2  # rewritten whole


def test_the_switch_turns_the_cache_off(cache_dir: Path) -> None:
    assert _run(cache_dir, HECTOR_COMPILE_CACHE="0")["stats"]["stores"] == 0
    assert _entries(cache_dir) == []


# The same for target cuda, through the emulated driver (no GPU): a second process must find
# the host module and PTX on disk, run none of the stages, and make the same launches.
_CUDA_PROGRAM = (
    _LAYER
    + r"""
from hector.targets import cuda, cuda_cache

stage_runs = []
run_stages = cuda.run_stages
cuda.run_stages = lambda *a, **k: stage_runs.append(a[1]) or run_stages(*a, **k)
fn = hector.compile(layer, target="cuda")
with cuda.emulate() as rt:
    fn(g, x, w).sum().backward()  # training: <f>_train, then <f>_backward
    entry = fn.compile_for(g, x.detach(), w.detach())  # inference
    fn(g, x.detach(), w.detach())
big = 1 << 32  # a parameter this large is a pointer: different in every process
launches = [[l.kernel, l.grid, l.block, [p if p < big else "ptr" for p in l.params]]
            for l in rt.launches]
print(json.dumps({"stats": cuda_cache.STATS, "stage_runs": stage_runs, "launches": launches,
                  "events": rt.events, "allocated": [n for _, n in rt.history],
                  "modules": rt.modules, "ptx": entry.ptx, "stages": list(entry.staged.stages),
                  "host": entry.ir("host"), "gpu": entry.ir("gpu")}))
"""
)


def _run_cuda(cache_dir: Path, **env: str) -> dict:
    return _run(cache_dir, _CUDA_PROGRAM, HECTOR_GPU_CHIP="sm_80", **env)


def test_a_second_process_finds_the_first_ones_cuda_program(cache_dir: Path) -> None:
    first = _run_cuda(cache_dir)
    assert first["stats"] == {"hits": 0, "misses": 2, "stores": 2}  # training and inference
    assert first["stage_runs"] == ["cuda", "cuda"]
    assert len(_entries(cache_dir)) == 2
    second = _run_cuda(cache_dir)
    assert second["stats"] == {"hits": 2, "misses": 0, "stores": 0}
    assert second["stage_runs"] == []  # no stage ran: host module and PTX came from disk
    assert first["launches"]
    for name in ("launches", "events", "allocated", "modules", "ptx", "stages", "host", "gpu"):
        assert second[name] == first[name], name
    assert ".target sm_80" in second["ptx"]
    assert "llvm.func @layer(" in second["host"]


def test_a_corrupt_cuda_entry_is_compiled_again(cache_dir: Path) -> None:
    first = _run_cuda(cache_dir)
    _truncate_in_every_entry(cache_dir, "kernels.ptx")
    again = _run_cuda(cache_dir)
    assert again["stats"] == {"hits": 0, "misses": 2, "stores": 2}
    assert again["launches"] == first["launches"]
    assert _run_cuda(cache_dir)["stats"]["hits"] == 2  # rewritten whole


def test_cuda_programs_are_cached_per_chip(cache_dir: Path) -> None:
    _run_cuda(cache_dir)
    other = _run(cache_dir, _CUDA_PROGRAM, HECTOR_GPU_CHIP="sm_90")
    assert other["stats"] == {"hits": 0, "misses": 2, "stores": 2}
    assert ".target sm_90" in other["ptx"]
    assert len(_entries(cache_dir)) == 4


def _layer(g, x, w):  # type: ignore[no-untyped-def]
    m = g.typed_linear(g.gather_src(x), w)
    return hector.relu(g.sum_to_dst(m * g.degree_norm("dst")))


def test_a_cuda_entry_that_checks_out_but_does_not_parse_is_replaced(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host module that is not MLIR bytecode, its checksum rewritten to match: the lookup
    warns, removes the entry and compiles again; the next one finds the rewritten entry."""
    from hector.frontends import trace as frontend
    from hector.runtime import compile_cache
    from hector.targets import cuda, cuda_cache

    monkeypatch.setenv("HECTOR_CACHE_DIR", str(cache_dir))
    monkeypatch.setattr(compile_cache, "_WARNED", set())
    traced = frontend.trace(_layer, [(40, 8), (3, 8, 6)], name="layer")

    def compile_() -> dict[str, int]:
        before = dict(cuda_cache.STATS)
        entry = cuda.compile_cuda(traced, chip="sm_80", runtime=cuda.FakeCudaRuntime())
        assert ".target sm_80" in entry.ptx
        return {k: cuda_cache.STATS[k] - n for k, n in before.items()}

    assert compile_() == {"hits": 0, "misses": 1, "stores": 1}
    (entry,) = _entries(cache_dir)
    bad = b"not bytecode"
    (entry / "host.mlirbc").write_bytes(bad)
    meta = json.loads((entry / "meta.json").read_text())
    meta["files"]["host.mlirbc"] = hashlib.sha256(bad).hexdigest()
    (entry / "meta.json").write_text(json.dumps(meta))
    with pytest.warns(RuntimeWarning, match="(?s)reading an entry failed .*removed it, compiling"):
        assert compile_() == {"hits": 0, "misses": 1, "stores": 1}
    assert compile_() == {"hits": 1, "misses": 0, "stores": 0}


def _cache(tmp_path: Path, max_bytes: int = 1 << 20) -> CompileCache:
    root = tmp_path / "c"
    root.mkdir(mode=0o700)
    return CompileCache(root, max_bytes)


def _file(tmp_path: Path, name: str, size: int) -> Path:
    p = tmp_path / name
    p.write_bytes(os.urandom(size))
    return p


def test_store_and_load_round_trip(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    k = key_of("program", 1)
    assert cache.load(k) is None
    cache.store(k, {"a.bin": _file(tmp_path, "a", 100)}, {"x": 1})
    entry, meta = cache.load(k) or (None, None)
    assert meta is not None
    assert meta["x"] == 1
    assert entry is not None
    assert (entry / "a.bin").read_bytes() == (tmp_path / "a").read_bytes()
    assert key_of("program", 2) != k


def test_a_store_that_loses_the_race_keeps_the_winner(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    k = key_of("p")
    cache.store(k, {"a.bin": _file(tmp_path, "a", 10)}, {"who": "first"})
    cache.store(k, {"a.bin": _file(tmp_path, "b", 10)}, {"who": "second"})
    found = cache.load(k)
    assert found is not None
    assert found[1]["who"] == "first"
    assert not [p for p in cache.root.iterdir() if p.name.startswith(".")]  # no leftovers


def test_a_planted_link_is_a_miss_and_removed(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    k = key_of("p")
    cache.store(k, {"a.bin": _file(tmp_path, "a", 10)}, {})
    target = cache.root / k / "a.bin"
    target.unlink()
    target.symlink_to(tmp_path / "a")  # same bytes, but a link
    assert cache.load(k) is None
    assert not (cache.root / k).exists()
    assert (tmp_path / "a").exists()  # the link's target is untouched


def test_a_malformed_meta_is_a_miss(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    k = key_of("p")
    cache.store(k, {"a.bin": _file(tmp_path, "a", 10)}, {})
    (cache.root / k / "meta.json").write_text('{"files": [1, 2]')
    assert cache.load(k) is None


def test_least_recently_used_entries_go_first(tmp_path: Path) -> None:
    cache = _cache(tmp_path, max_bytes=2500)
    keys = [key_of(i) for i in range(3)]
    for i, k in enumerate(keys[:2]):
        cache.store(k, {"a.bin": _file(tmp_path, f"f{i}", 1000)}, {})
        os.utime(cache.root / k, (1000 + i, 1000 + i))
    assert cache.load(keys[0]) is not None  # used: now the newest
    cache.store(keys[2], {"a.bin": _file(tmp_path, "f2", 1000)}, {})
    assert cache.load(keys[1]) is None  # the least recently used went
    assert cache.load(keys[0]) is not None
    assert cache.load(keys[2]) is not None
    assert cache.size() <= 2500


def test_a_shared_directory_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "shared"
    root.mkdir(mode=0o777)
    os.chmod(root, 0o777)
    with pytest.raises(UnsafeDirectoryError, match="writable by group or others"):
        CompileCache(root, 1 << 20)


def test_keys_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a cache key"):
        _cache(tmp_path).load("../../etc/passwd")


def test_bench_compile_times_a_warm_first_call_in_a_fresh_process(tmp_path: Path) -> None:
    from hector.tools.cli import main

    record = tmp_path / "compile.json"
    argv = ["bench", "compile", "--model", "rgcn", "--dataset", "synthetic:mutag"]
    argv += ["--systems", "eager,hector", "--runs", "1", "--warmup", "0", "--json", str(record)]
    assert main([*argv, "--in-dim", "4", "--hidden", "4"]) == 0
    (cell,) = json.loads(record.read_text())["cells"]
    hector_row = next(r for r in cell["results"] if r["system"] == "hector")
    assert hector_row["status"] == "ok"
    assert hector_row["warm_cache"] == {"hits": 1, "misses": 0, "stores": 0}
    assert hector_row["warm_compile_s"] > 0
    assert hector_row["warm_over_cold"] > 0


def test_toolchain_fingerprint_reads_sources_not_links(tmp_path: Path) -> None:
    """The fingerprint hashes each package's own ``.py`` files: a link among them (a dangling
    one, as a stale symlink tree leaves) is neither followed nor an error."""
    from hector.runtime.compile_cache import fingerprint

    (tmp_path / "a.py").write_text("x = 1\n")
    before = fingerprint([str(tmp_path)], {})
    (tmp_path / "gone.py").symlink_to(tmp_path / "missing.py")
    (tmp_path / "b.py").symlink_to(tmp_path / "a.py")
    assert fingerprint([str(tmp_path)], {}) == before
    (tmp_path / "a.py").write_text("x = 2\n")
    assert fingerprint([str(tmp_path)], {}) != before


def test_toolchain_covers_only_the_packages_own_folders(monkeypatch: pytest.MonkeyPatch) -> None:
    """An editable install puts the checkout's root on ``hector.__path__``; the compile cache's
    key must not hash the checkout's tests, benchmarks or environment."""
    import hector
    from hector.targets import program_cache

    root = Path(hector.__file__).resolve().parents[2]
    seen: list[str] = []
    monkeypatch.setattr(program_cache.compile_cache, "toolchain", lambda dirs: seen.extend(dirs))
    program_cache._toolchain.cache_clear()
    try:
        program_cache._toolchain()
    finally:
        program_cache._toolchain.cache_clear()
    assert seen
    assert all(os.path.isfile(os.path.join(d, "__init__.py")) for d in seen)
    assert root not in {Path(d).resolve() for d in seen}


def test_bench_compile_cuda_times_a_cold_and_a_warm_process(tmp_path: Path) -> None:
    from hector.tools.cli import main

    record = tmp_path / "compile_cuda.json"
    argv = ["bench", "compile-cuda", "--model", "rgcn", "--mode", "inference", "--width", "4"]
    assert main([*argv, "--runs", "1", "--json", str(record)]) == 0
    (row,) = json.loads(record.read_text())["results"]
    assert row["cold_cache"] == {"hits": 0, "misses": 1, "stores": 1}
    assert row["warm_cache"] == {"hits": 1, "misses": 0, "stores": 0}
    assert row["warm_compile_s"] > 0
    assert row["warm_jit_s"] > 0
    assert main(["bench", "compile-cuda", "--model", "gcn"]) == 1  # one error line, no runs
