"""The persistent compilation cache: entries reused across processes, checked, bounded, private."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hector.runtime.compile_cache import CompileCache, key_of
from hector.runtime.private_dir import UnsafeDirectoryError

# A second process compiles the same layer: it must load the first one's entry, not compile.
_PROGRAM = r"""
import json, sys, torch
import hector
from hector.data.graph import random_graph
from hector.targets import cpu_cache

@hector.compile
def layer(g, x, w):
    m = g.typed_linear(g.gather_src(x), w)
    return hector.relu(g.sum_to_dst(m * g.degree_norm("dst")))

g = random_graph(40, 300, 3, seed=1)
torch.manual_seed(0)
x = torch.randn(40, 8, requires_grad=True)
w = torch.randn(3, 8, 6, requires_grad=True)
y = layer(g, x, w)
y.square().sum().backward()
entry = layer.compile_for(g, x, w)
print(json.dumps({"stats": cpu_cache.STATS, "y": y.detach().flatten().tolist()[:50],
                  "gx": x.grad.flatten().tolist()[:50], "stages": list(entry.staged.stages),
                  "llvm": entry.ir("llvm")}))
"""


def _run(cache_dir: Path, **env: str) -> dict:
    environ = {**os.environ, "HECTOR_CACHE_DIR": str(cache_dir), **env}
    done = subprocess.run(
        [sys.executable, "-c", _PROGRAM], env=environ, capture_output=True, text=True, timeout=600
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
    for entry in _entries(cache_dir):
        lib = entry / "kernel.so"
        lib.write_bytes(lib.read_bytes()[:1000])  # truncated: fails its checksum
    again = _run(cache_dir)
    assert again["stats"]["hits"] == 0
    assert again["y"] == first["y"]
    assert _run(cache_dir)["stats"]["hits"] == 2  # rewritten whole


def test_the_switch_turns_the_cache_off(cache_dir: Path) -> None:
    assert _run(cache_dir, HECTOR_COMPILE_CACHE="0")["stats"]["stores"] == 0
    assert _entries(cache_dir) == []


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
    from hector.targets import cpu_cache

    root = Path(hector.__file__).resolve().parents[2]
    seen: list[str] = []
    monkeypatch.setattr(cpu_cache.compile_cache, "toolchain", lambda dirs: seen.extend(dirs))
    cpu_cache._toolchain.cache_clear()
    try:
        cpu_cache._toolchain()
    finally:
        cpu_cache._toolchain.cache_clear()
    assert seen
    assert all(os.path.isfile(os.path.join(d, "__init__.py")) for d in seen)
    assert root not in {Path(d).resolve() for d in seen}
