"""The compilation cache under faults (issue 58, classes 3, 4 and 12): a cache that cannot be
written, tampered entries and leftovers of killed processes never make a compilation fail,
hang or crash; the cache degrades to "no cache" with one warning."""

from __future__ import annotations

import errno
import json
import os
import threading
import time
import warnings
from pathlib import Path

import pytest
import torch

import hector
from hector import random_graph
from hector.runtime import compile_cache
from hector.runtime.compile_cache import CompileCache, default_cache, key_of


def _cache(tmp_path: Path, max_bytes: int = 1 << 20) -> CompileCache:
    root = tmp_path / "compiled"
    root.mkdir(mode=0o700, exist_ok=True)
    return CompileCache(root, max_bytes)


def _file(tmp_path: Path, name: str, size: int) -> Path:
    p = tmp_path / name
    p.write_bytes(os.urandom(size))
    return p


def _raise(code: int):
    def fail(*args: object, **kwargs: object) -> None:
        raise OSError(code, os.strerror(code))

    return fail


def _refuse_under(root: Path, code: int, real=compile_cache.tempfile.mkdtemp):
    """``tempfile.mkdtemp`` failing with ``code`` inside ``root`` (a read-only or full cache
    directory; root may not be made read-only by mode bits) and working elsewhere."""

    def mkdtemp(*args: object, **kwargs: object) -> str:
        where = kwargs.get("dir")
        if where is not None and Path(str(where)).is_relative_to(root):
            raise OSError(code, os.strerror(code))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    return mkdtemp


@pytest.fixture
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compile_cache, "_WARNED", set())


# ---- class 3: a cache that cannot be written --------------------------------------------------


@pytest.mark.parametrize("code", [errno.EACCES, errno.EROFS, errno.ENOSPC])
def test_a_store_the_file_system_refuses_is_no_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_warnings: None, code: int
) -> None:
    """A read-only (EACCES, EROFS) or full (ENOSPC) cache directory: the temporary folder
    cannot be made; the store warns once and keeps nothing."""
    cache = _cache(tmp_path)
    monkeypatch.setattr(compile_cache.tempfile, "mkdtemp", _refuse_under(cache.root, code))
    with pytest.warns(RuntimeWarning, match="compiling without it"):
        assert cache.store(key_of("p"), {"a.bin": _file(tmp_path, "a", 10)}, {}) is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one warning per process, not one per store
        assert cache.store(key_of("q"), {"a.bin": _file(tmp_path, "a", 10)}, {}) is False
    assert cache.load(key_of("p")) is None


def test_a_full_disk_mid_store_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_warnings: None
) -> None:
    cache = _cache(tmp_path)
    monkeypatch.setattr(compile_cache.shutil, "copyfile", _raise(errno.ENOSPC))
    with pytest.warns(RuntimeWarning, match="No space left"):
        assert not cache.store(key_of("p"), {"a.bin": _file(tmp_path, "a", 10)}, {})
    assert list(cache.root.iterdir()) == []


def test_compilation_goes_on_when_the_cache_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_warnings: None
) -> None:
    """End to end: ``@hector.compile`` with a read-only cache compiles, runs, and warns."""
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir(mode=0o700)
    monkeypatch.setenv("HECTOR_CACHE_DIR", str(cache_dir))
    monkeypatch.setattr(compile_cache.tempfile, "mkdtemp", _refuse_under(cache_dir, errno.EROFS))

    @hector.compile
    def f(g, x):
        return g.sum_to_src(g.gather_dst(x)).tanh()

    g = random_graph(20, 70, 2, seed=5)
    x = torch.randn(20, 3)
    with pytest.warns(RuntimeWarning, match="Read-only file system"):
        out = f(g, x)
    want = torch.zeros(20, 3).index_add(0, g.src.long(), x[g.dst.long()]).tanh()
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)


# ---- class 4: tampered entries ----------------------------------------------------------------


def _planted(cache: CompileCache, tmp_path: Path) -> str:
    k = key_of("planted")
    cache.store(k, {"a.bin": _file(tmp_path, "a", 10)}, {})
    (cache.root / k / "meta.json").unlink()
    return k


def _load_within(cache: CompileCache, k: str, seconds: float = 20.0) -> object:
    found: list[object] = []
    worker = threading.Thread(target=lambda: found.append(cache.load(k)), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), "loading the entry blocked"
    return found[0]


def test_a_fifo_at_meta_json_is_a_miss_not_a_hang(tmp_path: Path, fresh_warnings: None) -> None:
    cache = _cache(tmp_path)
    k = _planted(cache, tmp_path)
    os.mkfifo(cache.root / k / "meta.json", 0o600)
    with pytest.warns(RuntimeWarning, match="not a regular file.*removed it, compiling again"):
        assert _load_within(cache, k) is None
    assert not (cache.root / k).exists()  # the entry is removed


def test_a_fifo_in_place_of_a_listed_file_is_a_miss(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    k = key_of("p")
    cache.store(k, {"a.bin": _file(tmp_path, "a", 10)}, {})
    (cache.root / k / "a.bin").unlink()
    os.mkfifo(cache.root / k / "a.bin", 0o600)
    assert _load_within(cache, k) is None


@pytest.mark.parametrize("depth", [100_000, 1_000_000])
def test_a_deeply_nested_meta_json_is_a_miss(tmp_path: Path, depth: int) -> None:
    cache = _cache(tmp_path)
    k = _planted(cache, tmp_path)
    (cache.root / k / "meta.json").write_text("[" * depth + "]" * depth)
    assert cache.load(k) is None
    assert not (cache.root / k).exists()


@pytest.mark.parametrize(
    "text", ['"files"', "[]", '{"files": {"a.bin": 1}}', '{"files": {"../x": "0"}}', "\xff"]
)
def test_a_meta_json_of_the_wrong_shape_is_a_miss(tmp_path: Path, text: str) -> None:
    cache = _cache(tmp_path)
    k = _planted(cache, tmp_path)
    (cache.root / k / "meta.json").write_bytes(text.encode("latin-1"))
    assert cache.load(k) is None


def test_an_oversized_meta_json_is_a_miss(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    k = _planted(cache, tmp_path)
    pad = " " * (compile_cache.MAX_META_BYTES + 1)
    (cache.root / k / "meta.json").write_text('{"files": {}}' + pad)
    assert cache.load(k) is None


# ---- class 12: the switch and leftovers of killed processes -----------------------------------


@pytest.mark.parametrize("value", ["OFF", "Off", "FALSE", "No", " 0 ", "off"])
def test_the_off_switch_is_case_insensitive(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("HECTOR_COMPILE_CACHE", value)
    assert default_cache() is None


def test_a_size_bound_that_is_no_number_turns_the_cache_off(
    monkeypatch: pytest.MonkeyPatch, fresh_warnings: None
) -> None:
    monkeypatch.delenv("HECTOR_COMPILE_CACHE", raising=False)
    monkeypatch.setenv("HECTOR_COMPILE_CACHE_MB", "lots")
    with pytest.warns(RuntimeWarning, match="whole number of MiB"):
        assert default_cache() is None


def _leftover(cache: CompileCache, name: str, size: int, age: float) -> Path:
    folder = cache.root / name
    folder.mkdir()
    (folder / "kernel.so").write_bytes(b"x" * size)
    then = time.time() - age
    os.utime(folder, (then, then))
    return folder


def test_temporary_folders_count_against_the_bound(tmp_path: Path) -> None:
    """A store under way (or a process's leftover) holds disk: it counts in ``size()`` and
    makes eviction remove entries."""
    cache = _cache(tmp_path, max_bytes=3000)
    k = key_of("old")
    cache.store(k, {"a.bin": _file(tmp_path, "a", 1000)}, {})
    _leftover(cache, f".tmp-{os.getpid()}-live", 2500, age=0)
    assert cache.size() >= 3500
    cache.evict()
    assert not (cache.root / k).exists()
    assert (cache.root / f".tmp-{os.getpid()}-live").exists()  # a live store is kept


def test_stale_leftovers_of_dead_processes_are_removed(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    dead = 2**22 + 12345  # above the default pid_max: no such process
    old = compile_cache.STALE_SECONDS + 60
    stale = [
        _leftover(cache, f".tmp-{dead}-abc", 10, old),
        _leftover(cache, f".trash-{dead}-{key_of('x')}", 10, old),
        _leftover(cache, ".tmp-nopid", 10, old),  # an older version's name
        _leftover(cache, f".tmp-{os.getpid()}-ancient", 10, 11 * compile_cache.STALE_SECONDS),
    ]
    kept = [
        _leftover(cache, f".tmp-{dead}-young", 10, 1),  # may still be renamed into place
        _leftover(cache, f".tmp-{os.getpid()}-mine", 10, old),  # its process lives
        _leftover(cache, ".other", 10, old),  # not the cache's
    ]
    cache.evict()
    assert [p.exists() for p in stale] == [False] * len(stale)
    assert all(p.exists() for p in kept)


def test_a_stored_entry_is_not_mistaken_for_a_leftover(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    k = key_of("p")
    assert cache.store(k, {"a.bin": _file(tmp_path, "a", 10)}, {})
    os.utime(cache.root / k, (1.0, 1.0))
    cache.evict()
    assert cache.load(k) is not None
    assert json.loads((cache.root / k / "meta.json").read_text())["files"]
