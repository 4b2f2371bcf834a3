"""The native tensor store: round trips, O_DIRECT fallback, checksums, faults, directories."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from hector.runtime.offload import (
    ChecksumError,
    OffloadIOError,
    ShortIOError,
    TensorStore,
    clean_stale,
    crc32c,
)


@pytest.fixture
def store(tmp_path):
    s = TensorStore(str(tmp_path / "root"), threads=3, chunk_bytes=64 * 1024)
    yield s
    s.close()


def _data(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, n, dtype=np.uint8)


def test_crc32c_known_value():
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0


@pytest.mark.parametrize("n", [0, 1, 4095, 4096, 64 * 1024, 64 * 1024 * 3 + 17])
def test_round_trip_sizes(store, n):
    a = _data(n, n)
    key = store.write_array(a)
    store.wait(key)
    out = np.zeros_like(a)
    store.read_array(key, out)
    assert np.array_equal(a, out)


def test_unaligned_buffers_round_trip(store):
    base = _data(300_001)
    a = base[3:]  # not 4096-aligned
    key = store.write_array(a)
    store.wait(key)
    out = np.zeros(len(a) + 5, dtype=np.uint8)[5:]
    store.read_array(key, out)
    assert np.array_equal(a, out)


def test_private_directory_and_cleanup(tmp_path):
    s = TensorStore(str(tmp_path / "r"))
    assert os.path.basename(s.path).startswith(f"hector-offload-{os.getpid()}-")
    assert (os.stat(s.path).st_mode & 0o777) == 0o700
    key = s.write_array(_data(10_000))
    s.wait(key)
    assert os.path.exists(s.file_of(key))
    s.close()
    assert not os.path.exists(s.path)
    assert os.listdir(tmp_path / "r") == []


def test_direct_io_fallback_on_tmpfs():
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no tmpfs")
    with TensorStore("/dev/shm/hector-offload-test-root") as s:
        # Older kernels refuse O_DIRECT on tmpfs (the store then says why and goes buffered);
        # recent ones accept it. Either way the data round-trips.
        assert s.direct or "O_DIRECT" in s.direct_reason
        a = _data(100_000)
        k = s.write_array(a)
        s.wait(k)
        assert np.array_equal(s.read_array(k, np.zeros_like(a)), a)
    os.rmdir("/dev/shm/hector-offload-test-root")


def test_direct_io_can_be_disabled(tmp_path):
    with TensorStore(str(tmp_path), direct=False) as s:
        assert not s.direct
        assert "disabled" in s.direct_reason


def test_corrupted_file_raises_checksum_error(store):
    a = _data(200_000)
    key = store.write_array(a)
    store.wait(key)
    with open(store.file_of(key), "r+b") as f:
        f.seek(70_000)
        byte = f.read(1)
        f.seek(70_000)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(ChecksumError, match="checksum mismatch") as info:
        store.read_array(key, np.zeros_like(a))
    assert info.value.filename == store.file_of(key)
    assert "bytes 65536..131072" in str(info.value)


def test_truncated_file_is_a_short_read(store):
    a = _data(200_000)
    key = store.write_array(a)
    store.wait(key)
    os.truncate(store.file_of(key), 100_000)
    with pytest.raises(ShortIOError, match="short read"):
        store.read_array(key, np.zeros_like(a))


def test_deleted_file_is_a_clear_error(store):
    a = _data(10_000)
    key = store.write_array(a)
    store.wait(key)
    os.unlink(store.file_of(key))
    with pytest.raises(OffloadIOError, match="No such file") as info:
        store.read_array(key, np.zeros_like(a))
    assert info.value.filename == store.file_of(key)


@pytest.mark.parametrize(
    ("op", "kind", "exc", "text"),
    [
        ("write", "enospc", OffloadIOError, "No space left on device"),
        ("write", "eio", OffloadIOError, "Input/output error"),
        ("write", "short", ShortIOError, "short write"),
        ("read", "eio", OffloadIOError, "Input/output error"),
        ("read", "short", ShortIOError, "short read"),
    ],
)
def test_injected_faults(store, op, kind, exc, text):
    a = _data(150_000)
    store.inject_fault(op, kind, skip=1)
    first = store.write_array(a)
    store.wait(first)
    second = store.write_array(a)
    if op == "write":
        with pytest.raises(exc, match=text) as info:
            store.wait(second)
        assert info.value.filename == store.file_of(second)
        assert not os.path.exists(store.file_of(second))  # nothing half-written stays
        assert "[injected]" in str(info.value)
        # The source buffer is untouched and the next write works again.
        third = store.write_array(a)
        store.wait(third)
        assert np.array_equal(store.read_array(third, np.zeros_like(a)), a)
    else:
        store.wait(second)
        out = np.zeros_like(a)
        store.read_array(first, out)  # skipped
        with pytest.raises(exc, match=text):
            store.read_array(second, out)
        assert np.array_equal(store.read_array(second, out), a)  # a retry succeeds


def test_fault_from_environment(tmp_path):
    code = textwrap.dedent(
        """
        import numpy as np, sys
        from hector.runtime.offload import TensorStore, OffloadIOError
        s = TensorStore(sys.argv[1])
        a = np.ones(10000, dtype=np.uint8)
        k1 = s.write_array(a); s.wait(k1)
        k2 = s.write_array(a)
        try:
            s.wait(k2)
        except OffloadIOError as e:
            print("errno", e.errno)
        s.close()
        """
    )
    env = dict(os.environ, HECTOR_OFFLOAD_FAULT="write:enospc:1:1")
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "errno 28" in out.stdout
    assert os.listdir(tmp_path) == []


def test_invalid_arguments(tmp_path):
    with pytest.raises(ValueError, match="threads"):
        TensorStore(str(tmp_path), threads=0)
    with pytest.raises(ValueError, match="multiple of 4096"):
        TensorStore(str(tmp_path), chunk_bytes=1000)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OffloadIOError, match="cannot create offload root"):
        TensorStore(str(blocker / "sub"))
    with TensorStore(str(tmp_path / "ok")) as s:
        with pytest.raises(ValueError, match="unknown offload key"):
            s.wait(12345)
        with pytest.raises(ValueError, match="kind"):
            s.inject_fault("write", "meteor")
    with pytest.raises(ValueError, match="closed"):
        s.write(0, 0)


def test_killed_process_directory_is_cleaned(tmp_path):
    root = str(tmp_path / "root")
    code = textwrap.dedent(
        """
        import sys, time, numpy as np
        from hector.runtime.offload import TensorStore
        s = TensorStore(sys.argv[1])
        k = s.write_array(np.ones(100000, dtype=np.uint8)); s.wait(k)
        print(s.path, flush=True)
        time.sleep(60)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code, root], stdout=subprocess.PIPE, text=True)
    path = proc.stdout.readline().strip()
    assert os.path.isdir(path)
    assert clean_stale(root) == 0  # owner alive: left alone
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert os.path.isdir(path)  # SIGKILL: no chance to clean up
    with TensorStore(root) as s:  # the next start removes it
        assert not os.path.exists(path)
        assert os.listdir(root) == [os.path.basename(s.path)]
    assert os.listdir(root) == []


def test_stale_directory_with_reused_pid_is_cleaned(tmp_path):
    # A directory named after a live pid (ours) whose lock nobody holds is stale.
    root = tmp_path / "root"
    stale = root / f"hector-offload-{os.getpid()}-999999"
    stale.mkdir(parents=True)
    (stale / "lock").write_text("")
    (stale / "t1.bin").write_bytes(b"x" * 10)
    with TensorStore(str(root)) as s:
        assert not stale.exists()
        assert os.path.isdir(s.path)


def test_stats_count_bytes(store):
    a = _data(300_000)
    k = store.write_array(a)
    store.wait(k)
    store.read_array(k, np.zeros_like(a))
    st = store.stats()
    assert st["bytes_written"] == a.nbytes
    assert st["bytes_read"] == a.nbytes
    assert st["objects_written"] == 1
    assert st["write_bandwidth"] > 0
    store.remove(k)
    assert store.stats()["bytes_on_disk"] == 0
    assert not os.path.exists(store.file_of(k))


def test_a_closed_store_is_never_reopened(tmp_path):
    root = tmp_path / "root"
    s = TensorStore(str(root))
    key = s.write_array(_data(10_000))
    s.close()
    s.close()  # idempotent
    assert s.closed
    assert os.listdir(root) == []
    for use in (
        lambda: s.write(0, 0),
        lambda: s.wait(key),
        lambda: s.poll(key),
        lambda: s.read_array(key, np.zeros(10_000, dtype=np.uint8)),
        s.stats,
    ):
        with pytest.raises(ValueError, match=r"is closed .*open a new TensorStore"):
            use()
    s.remove(key)  # a no-op, as for release after close
    assert os.listdir(root) == []
