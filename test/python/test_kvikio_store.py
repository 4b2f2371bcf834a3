"""The kvikio (GPUDirect Storage) backend of the tensor store, against a fake kvikio.

kvikio itself cannot run on this machine: ``pip download kvikio-cu12`` works, and the package
imports, but every transfer needs the CUDA driver (``libcuda.so.1``), compatibility mode
included. The backend is therefore checked here against a fake ``kvikio`` module that keeps
kvikio's calls (``CuFile(path, mode)``, ``pwrite``/``pread`` returning futures with ``get`` and
``done``, host buffers and ``__cuda_array_interface__`` objects) and does plain file I/O.
"""

from __future__ import annotations

import ctypes
import os
import sys
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from hector.runtime import kvikio_store
from hector.runtime.kvikio_store import KvikioStore, kvikio_status, open_store
from hector.runtime.offload import ChecksumError, OffloadIOError, TensorStore


class _Future:
    def __init__(self, result: int | Exception) -> None:
        self.result = result

    def done(self) -> bool:
        return True

    def get(self) -> int:
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


def _view(buf: Any, nbytes: int) -> Any:
    """The bytes behind a host buffer or a __cuda_array_interface__ object."""
    if hasattr(buf, "__cuda_array_interface__"):
        address = buf.__cuda_array_interface__["data"][0]
        return (ctypes.c_ubyte * nbytes).from_address(address)
    return buf


class _CuFile:
    fail_next_write = False
    device_calls = 0

    def __init__(self, path: str, mode: str) -> None:
        self.f = open(path, mode + "b")  # noqa: SIM115

    def pwrite(self, buf: Any, size: int, offset: int = 0, task_size: int = 0) -> _Future:
        _CuFile.device_calls += hasattr(buf, "__cuda_array_interface__")
        if _CuFile.fail_next_write:
            _CuFile.fail_next_write = False
            return _Future(RuntimeError("cuFileWrite: No space left on device"))
        self.f.seek(offset)
        return _Future(self.f.write(bytes(_view(buf, size))))

    def pread(self, buf: Any, size: int, offset: int = 0, task_size: int = 0) -> _Future:
        self.f.seek(offset)
        data = self.f.read(size)
        ctypes.memmove(ctypes.addressof(_view(buf, size)), data, len(data))
        return _Future(len(data))

    def close(self) -> None:
        self.f.close()


@pytest.fixture
def fake() -> Iterator[str]:
    """A fake kvikio module, registered under a private name."""
    mod = types.ModuleType("hector_fake_kvikio")
    mod.__version__ = "fake"  # type: ignore[attr-defined]
    mod.CuFile = _CuFile  # type: ignore[attr-defined]
    sys.modules[mod.__name__] = mod
    yield mod.__name__
    del sys.modules[mod.__name__]


def _objects(store: Any) -> list[str]:
    return sorted(f for f in os.listdir(store.path) if f != "lock")


def test_module_imports_without_kvikio_and_says_why_it_cannot_open(tmp_path: Any) -> None:
    ok, why = kvikio_status("hector_no_such_kvikio")
    assert not ok
    assert "not importable" in why
    with pytest.raises(OffloadIOError, match="cannot open a kvikio store: kvikio is not"):
        KvikioStore(str(tmp_path), module="hector_no_such_kvikio")
    assert os.listdir(tmp_path) == []


def test_round_trip_host_and_device_buffers(tmp_path: Any, fake: str) -> None:
    with open_store("kvikio", str(tmp_path), module=fake) as store:
        assert store.io_backend == "kvikio"
        assert os.stat(store.path).st_mode & 0o777 == 0o700
        a = np.arange(10_000, dtype=np.float32)
        key = store.write(a.ctypes.data, a.nbytes)
        store.wait(key)
        dev = store.write(a.ctypes.data, a.nbytes, device=True)  # through the CUDA interface
        assert store.poll(dev)
        assert _CuFile.device_calls >= 1
        b = np.empty_like(a)
        store.read(key, b.ctypes.data, b.nbytes)
        store.wait(key)
        assert np.array_equal(a, b)
        c = np.empty_like(a)
        store.read(dev, c.ctypes.data, c.nbytes, device=True)
        assert sorted(store.completions()) == [0, 0, 1, 1]  # two writes, two reads
        assert np.array_equal(a, c)
        assert store.stats()["bytes_written"] == 2 * a.nbytes
        assert len(_objects(store)) == 2
        store.remove(key)
        assert len(_objects(store)) == 1
        path = store.path
    assert not os.path.exists(path)


def test_corrupted_file_is_refused(tmp_path: Any, fake: str) -> None:
    with KvikioStore(str(tmp_path), module=fake) as store:
        a = np.arange(4096, dtype=np.float32)
        key = store.write(a.ctypes.data, a.nbytes)
        store.wait(key)
        with open(store.file_of(key), "r+b") as f:
            f.seek(64)
            f.write(b"\xff")
        b = np.empty_like(a)
        store.read(key, b.ctypes.data, b.nbytes)
        with pytest.raises(ChecksumError, match="CRC32C"):
            store.wait(key)


def test_failed_write_raises(tmp_path: Any, fake: str) -> None:
    with KvikioStore(str(tmp_path), module=fake) as store:
        a = np.ones(1024, dtype=np.float32)
        _CuFile.fail_next_write = True
        key = store.write(a.ctypes.data, a.nbytes)
        with pytest.raises(OffloadIOError, match="No space left on device"):
            store.wait(key)
        store.remove(key)
        assert _objects(store) == []


def test_directory_of_a_dead_process_is_removed_on_open(tmp_path: Any, fake: str) -> None:
    stale = tmp_path / "hector-offload-999999999-k0"  # no such pid
    stale.mkdir()
    (stale / "t0.bin").write_bytes(b"x")
    with KvikioStore(str(tmp_path), module=fake):
        assert not stale.exists()


def test_backend_is_chosen_by_name(tmp_path: Any) -> None:
    native = open_store("native", str(tmp_path))
    assert isinstance(native, TensorStore)
    native.close()
    with pytest.raises(ValueError, match="backends: native, kvikio"):
        open_store("gds", str(tmp_path))
    assert kvikio_store.BACKENDS == ("native", "kvikio")
