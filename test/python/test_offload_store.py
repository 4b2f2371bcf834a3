"""The native tensor store: round trips, O_DIRECT fallback, checksums, faults, directories,
both I/O backends (io_uring and the thread pool), the fallback between them, statistics."""

from __future__ import annotations

import ctypes
import json
import os
import platform
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from hector.runtime.offload import (
    ChecksumError,
    OffloadIOError,
    ShortIOError,
    TensorStore,
    clean_stale,
    crc32c,
    empty_in_phase,
    measure_raw_bandwidth,
)

BACKENDS = ["io_uring", "threads"]


def _check_backend(s: TensorStore, asked: str) -> None:
    """The store runs what was asked for, or says why io_uring could not be had."""
    assert s.backend in BACKENDS
    assert s.stats()["backend"] == s.backend
    if s.backend != asked:
        assert asked == "io_uring"
        assert "io_uring" in s.backend_reason
        assert "unavailable" in s.backend_reason


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    s = TensorStore(str(tmp_path / "root"), threads=3, chunk_bytes=64 * 1024, backend=request.param)
    _check_backend(s, request.param)
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


@pytest.mark.parametrize("finish", ["wait", "poll", "completions", "remove", "close"])
def test_write_array_holds_a_temporary_until_its_write_is_done(store, finish):
    # A caller may pass a temporary: freed (unmapped, at 4 MiB) while its write was in
    # flight, it crashed the process (the I/O thread read unmapped memory).
    import gc

    key = store.write_array(np.full(4 << 20, 7, dtype=np.uint8))
    gc.collect()
    assert key in store._sources  # held while the write may be in flight
    if finish == "wait":
        store.wait(key)
    elif finish == "poll":
        while not store.poll(key):
            time.sleep(0.001)
    elif finish == "completions":
        done: list[int] = []
        while key not in done:
            done += store.completions()
    elif finish == "remove":
        store.remove(key)
    else:
        store.close()
    assert key not in store._sources  # and let go once it is written
    if finish in ("wait", "poll", "completions"):
        out = store.read_array(key, np.zeros(4 << 20, dtype=np.uint8))
        assert (out == 7).all()


def test_unaligned_buffers_round_trip(store):
    base = _data(300_001)
    a = base[3:]  # not 4096-aligned
    key = store.write_array(a)
    store.wait(key)
    out = np.zeros(len(a) + 5, dtype=np.uint8)[5:]
    store.read_array(key, out)
    assert np.array_equal(a, out)


@pytest.mark.parametrize("backend", BACKENDS)
def test_private_directory_and_cleanup(tmp_path, backend):
    s = TensorStore(str(tmp_path / "r"), backend=backend)
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
    # The object starts at file offset address % 4096 (O_DIRECT); chunks are ranges of the file.
    assert "file bytes 65536..131072" in str(info.value)


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
    k2 = store.write_array(a)
    store.wait(k2)
    assert store.stats()["files_reused"] == 0  # without keep_files, every write a new file


@pytest.fixture(params=BACKENDS)
def keeping_store(request, tmp_path):
    s = TensorStore(
        str(tmp_path / "keep"),
        threads=3,
        chunk_bytes=64 * 1024,
        backend=request.param,
        keep_files=True,
    )
    _check_backend(s, request.param)
    yield s
    s.close()


def _aligned(n: int, seed: int = 0) -> np.ndarray:
    """``_data`` at a page-aligned address: its file size does not depend on where numpy put it
    (a kept file fits a later object only when the object's padded size is no larger)."""
    out = empty_in_phase(n)
    out[:] = _data(n, seed)
    return out


def test_a_removed_file_is_renamed_and_overwritten_by_the_next_write(keeping_store):
    store = keeping_store
    a = _aligned(300_000)
    k = store.write_array(a)
    store.wait(k)
    store.remove(k)
    assert store.stats()["bytes_on_disk"] == 0
    b = _aligned(300_000, seed=1)
    k2 = store.write_array(b)
    store.wait(k2)
    assert store.stats()["files_reused"] == 1
    assert not os.path.exists(store.file_of(k))  # renamed to the new object's
    assert os.path.exists(store.file_of(k2))
    np.testing.assert_array_equal(store.read_array(k2, np.zeros_like(b)), b)
    path = store.path
    store.close()
    assert not os.path.exists(path)  # kept files go with the store


def _objects(store) -> list[str]:
    return sorted(n for n in os.listdir(store.path) if n.endswith(".bin"))


def test_removed_files_are_reused_within_the_most_the_store_held(keeping_store):
    store = keeping_store
    # Overwriting written blocks is much faster than allocating new ones, so a removed
    # object's file is kept; the files on disk never exceed what the store held at its peak.
    big = [_aligned(1 << 20, seed=i) for i in range(2)]
    keys = [store.write_array(a) for a in big]
    for k in keys:
        store.wait(k)
    for k in keys:
        store.remove(k)
    assert len(_objects(store)) == 2  # both kept: the peak held both
    small = store.write_array(_aligned(64 << 10))  # no kept file within twice its size
    store.wait(small)
    assert store.stats()["files_reused"] == 0
    assert len(_objects(store)) == 3
    store.remove(small)  # keeping it too would exceed the peak: deleted
    assert len(_objects(store)) == 2
    again = [_aligned(1 << 20, seed=7 + i) for i in range(2)]
    keys = [store.write_array(a) for a in again]
    for k, a in zip(keys, again, strict=True):
        store.wait(k)
        np.testing.assert_array_equal(store.read_array(k, np.zeros_like(a)), a)
    assert store.stats()["files_reused"] == 2
    assert _objects(store) == sorted(os.path.basename(store.file_of(k)) for k in keys)


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


# --------------------------------------------------------------------------- both backends


def _offset_view(data: np.ndarray, phase: int) -> np.ndarray:
    """A copy of data at an address that is phase modulo 4096."""
    out = empty_in_phase(data.nbytes, phase)
    out[:] = data
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize(
    ("n", "src_phase", "dst_phase"),
    [
        (1, 0, 0),
        (4096, 0, 0),
        (8192, 0, 100),  # aligned source, out-of-phase destination
        (3 * 4096 + 5, 64, 64),  # unaligned source, destination in phase
        (64 * 1024 * 3 + 17, 64, 64),  # several chunks, partial first and last blocks
        (64 * 1024 * 2, 4095, 1),  # several chunks, out of phase
        (64 * 1024 - 64, 64, 64),  # ends exactly on a chunk boundary of the file
        (5000, 3000, 3000),  # two blocks, both partial
    ],
)
def test_round_trip_is_bit_identical(tmp_path, backend, direct, n, src_phase, dst_phase):
    with TensorStore(
        str(tmp_path), threads=3, chunk_bytes=64 * 1024, direct=direct, backend=backend
    ) as s:
        _check_backend(s, backend)
        a = _offset_view(_data(n, n), src_phase)
        key = s.write_array(a)
        s.wait(key)
        assert s.phase(key) == (src_phase if s.direct else 0)
        out = empty_in_phase(n, dst_phase)
        out[:] = 0xA5
        guard = np.frombuffer(
            (ctypes.c_uint8 * 64).from_address(out.ctypes.data + n), dtype=np.uint8
        ).copy()
        s.read_array(key, out)
        assert np.array_equal(out, a)
        # Nothing after the destination was touched (staging, not the neighbours' memory).
        after = np.frombuffer(
            (ctypes.c_uint8 * 64).from_address(out.ctypes.data + n), dtype=np.uint8
        )
        assert np.array_equal(after, guard)
        if s.direct:
            assert os.path.getsize(s.file_of(key)) % 4096 == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_many_objects_in_flight(tmp_path, backend):
    with TensorStore(str(tmp_path), threads=5, chunk_bytes=16 * 1024, backend=backend) as s:
        arrays = [_offset_view(_data(1000 + 9000 * i, i), (i * 64) % 4096) for i in range(20)]
        keys = [s.write_array(a) for a in arrays]
        for k in keys:
            s.wait(k)
        outs = [np.zeros_like(a) for a in arrays]
        for k, o in zip(keys, outs, strict=True):
            s.read(k, o.ctypes.data, o.nbytes)
        for k, a, o in zip(keys, arrays, outs, strict=True):
            s.wait(k)
            assert np.array_equal(a, o)
        assert s.stats()["objects_read"] == len(arrays)


@pytest.mark.parametrize("backend", BACKENDS)
def test_stats_break_the_time_down(tmp_path, backend):
    with TensorStore(str(tmp_path), threads=2, chunk_bytes=64 * 1024, backend=backend) as s:
        _check_backend(s, backend)
        sizes = [300_000, 4096, 100_001]
        arrays = [_offset_view(_data(n, n), 64) for n in sizes]
        keys = [s.write_array(a) for a in arrays]
        for k in keys:
            s.wait(k)
        for k, a in zip(keys, arrays, strict=True):
            s.read_array(k, empty_in_phase(a.nbytes, s.phase(k)))
        st = s.stats()
        total = sum(sizes)
        assert st["backend"] == s.backend
        assert st["bytes_written"] == total
        assert st["bytes_read"] == total
        assert st["objects_written"] == st["objects_read"] == len(sizes)
        assert st["crc_bytes"] == 2 * total  # every byte checksummed once each way
        assert st["crc_ns"] > 0
        assert st["submit_ns"] > 0
        # A wait counts only while its operation is in flight (a fast one may be done first).
        assert st["write_wait_ns"] >= 0
        assert st["read_wait_ns"] >= 0
        assert st["open_ns"] > 0  # files are created and opened on the I/O threads
        assert st["write_io_ns"] > 0
        assert st["read_io_ns"] > 0
        assert st["io_requests"] >= 2 * len(sizes)
        assert st["bytes_on_disk"] >= total
        if s.backend == "io_uring":
            assert st["ring_submit_ns"] > 0
            assert st["registered_bytes"] > 0
        else:
            assert st["ring_submit_ns"] == 0
            assert st["registered_bytes"] == 0
        if s.direct:
            # Unaligned sources and in-phase destinations: only the partial first and last
            # blocks of each chunk go through staging; the rest moved straight.
            # The previous design copied every byte of an unaligned buffer.
            chunks = sum(-(-(64 + n) // (64 * 1024)) for n in sizes)
            assert 0 < st["copy_bytes"] <= 2 * 2 * 4096 * chunks
            assert st["copies_avoided_bytes"] == 2 * total - st["copy_bytes"]
            assert st["copy_ns"] > 0
        else:
            assert st["copy_bytes"] == st["copies_avoided_bytes"] == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_of_phase_read_is_staged_and_counted(tmp_path, backend):
    with TensorStore(str(tmp_path), chunk_bytes=64 * 1024, backend=backend) as s:
        a = _offset_view(_data(200_000), 0)
        key = s.write_array(a)
        s.wait(key)
        before = s.stats()["copy_bytes"]
        out = empty_in_phase(a.nbytes, 8)
        s.read_array(key, out)
        assert np.array_equal(out, a)
        st = s.stats()
        assert st["copy_bytes"] - before == (a.nbytes if s.direct else 0)
        # Aligned source, out-of-phase destination: as many copies as the previous design.
        assert st["copies_avoided_bytes"] == 0


def test_corrupted_padding_is_a_checksum_error(store):
    a = _offset_view(_data(50_000), 64)
    key = store.write_array(a)
    store.wait(key)
    assert store.phase(key) == (64 if store.direct else 0)
    if store.direct:
        with open(store.file_of(key), "r+b") as f:
            f.write(b"\x01")  # the first byte is padding, not data
        with pytest.raises(ChecksumError, match="padding"):
            store.read_array(key, np.zeros_like(a))


def test_unknown_backend_is_refused(tmp_path):
    with pytest.raises(ValueError, match="backend must be one of"):
        TensorStore(str(tmp_path), backend="aio")
    code = "from hector.runtime.offload import TensorStore; import sys; TensorStore(sys.argv[1])"
    env = dict(os.environ, HECTOR_OFFLOAD_BACKEND="aio")
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True
    )
    assert out.returncode != 0
    assert "HECTOR_OFFLOAD_BACKEND=aio is not a backend" in out.stderr


_REPORT_BACKEND = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from hector.runtime.offload import TensorStore
    {prelude}
    with TensorStore(sys.argv[1], backend=sys.argv[2]) as s:
        a = np.arange(300_000, dtype=np.uint8)
        k = s.write_array(a); s.wait(k)
        same = bool(np.array_equal(s.read_array(k, np.zeros_like(a)), a))
        print(json.dumps({{"backend": s.backend, "reason": s.backend_reason,
                          "stats": s.stats()["backend"], "same": same}}))
    """
)


def _report_backend(root: str, asked: str, prelude: str = "", **env: str) -> dict:
    code = _REPORT_BACKEND.format(prelude=prelude)
    base = {k: v for k, v in os.environ.items() if k != "HECTOR_OFFLOAD_BACKEND"}
    out = subprocess.run(
        [sys.executable, "-c", code, root, asked],
        env=dict(base, **env),
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_backend_from_environment(tmp_path):
    got = _report_backend(str(tmp_path), "auto", HECTOR_OFFLOAD_BACKEND="threads")
    assert got["backend"] == got["stats"] == "threads"
    assert "HECTOR_OFFLOAD_BACKEND=threads" in got["reason"]
    assert got["same"]
    got = _report_backend(str(tmp_path), "auto", HECTOR_OFFLOAD_BACKEND="io_uring")
    assert got["backend"] == "io_uring" or "unavailable" in got["reason"]
    assert got["same"]


# A seccomp filter that makes io_uring_setup fail with EPERM (as container runtimes do),
# installed in a child process before the store opens.
_DENY_IO_URING = textwrap.dedent(
    """
    import ctypes, struct
    libc = ctypes.CDLL(None, use_errno=True)
    SYS_IO_URING_SETUP = 425  # the same number on x86_64 and the generic (arm64) table
    AUDIT_ARCH = {{"x86_64": 0xC000003E, "aarch64": 0xC00000B7}}["{machine}"]
    def insn(code, jt, jf, k):
        return struct.pack("HBBI", code, jt, jf, k)
    prog = b"".join([
        insn(0x20, 0, 0, 4),                        # ld arch
        insn(0x15, 1, 0, AUDIT_ARCH),               # jeq arch -> next, else allow
        insn(0x06, 0, 0, 0x7FFF0000),               # ret ALLOW
        insn(0x20, 0, 0, 0),                        # ld nr
        insn(0x15, 0, 1, SYS_IO_URING_SETUP),       # jeq io_uring_setup
        insn(0x06, 0, 0, 0x00050000 | 1),           # ret ERRNO(EPERM)
        insn(0x06, 0, 0, 0x7FFF0000),               # ret ALLOW
    ])
    buf = ctypes.create_string_buffer(prog)
    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    fprog = Fprog(len(prog) // 8, ctypes.addressof(buf))
    assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
    assert libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) == 0, ctypes.get_errno()  # SECCOMP
    """
)


def test_io_uring_refused_falls_back_to_threads_and_says_so(tmp_path):
    prelude = _DENY_IO_URING.format(machine=platform.machine())
    got = _report_backend(str(tmp_path), "io_uring", prelude)
    assert got["backend"] == got["stats"] == "threads"
    assert "io_uring_setup failed" in got["reason"]
    assert "EPERM" in got["reason"]
    assert got["same"]
    got = _report_backend(str(tmp_path), "auto", prelude)
    assert got["backend"] == "threads"
    assert "EPERM" in got["reason"]
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_measure_raw_bandwidth(tmp_path, backend):
    got = measure_raw_bandwidth(str(tmp_path), 1 << 20, backend=backend, objects=4, repeats=2)
    assert got["backend"] in BACKENDS
    assert got["backend"] == backend or "unavailable" in got["backend_reason"]
    assert got["write_MBps"] > 0
    assert got["read_MBps"] > 0
    assert len(got["write_MBps_all"]) == 2
    assert got["stats"]["bytes_written"] == 2 * (1 << 20)
    assert got["stats"]["bytes_read"] == 2 * (1 << 20)
    assert os.listdir(tmp_path) == []


def test_stats2_fills_only_what_the_caller_has_room_for(store):
    from hector.runtime.offload import _lib

    a = _data(10_000)
    store.wait(store.write_array(a))
    full = (ctypes.c_int64 * 64)(*([-7] * 64))
    n = _lib().hector_store_stats2(store._h(), full, 64)
    assert 22 <= n < 64  # HECTOR_STAT_COUNT values, the rest untouched
    assert full[0] == a.nbytes
    assert full[n] == -7
    short = (ctypes.c_int64 * 3)()
    assert _lib().hector_store_stats2(store._h(), short, 3) == 3
    assert short[0] == full[0]  # bytes written
    assert short[1] == full[1]  # bytes read
    old = (ctypes.c_int64 * 8)()
    assert _lib().hector_store_stats(store._h(), old) == 0
    assert old[0] == full[0]
    assert old[4] == full[4] == 1  # objects written


@pytest.mark.parametrize("backend", BACKENDS)
def test_concurrent_callers_removals_and_close_in_flight(tmp_path, backend):
    import threading

    s = TensorStore(str(tmp_path), threads=6, chunk_bytes=16 * 1024, backend=backend)
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for i in range(25):
                n = int(rng.integers(1, 100_000))
                a = _offset_view(_data(n, seed * 100 + i), int(rng.integers(0, 4096)))
                key = s.write_array(a)
                if i % 5 == 4:
                    s.remove(key)  # removed while its write may still be in flight
                    continue
                s.wait(key)
                out = empty_in_phase(n, int(rng.choice([s.phase(key), 0, 17])))
                s.read_array(key, out)
                assert np.array_equal(out, a)
                s.remove(key)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert s.stats()["bytes_on_disk"] == 0
    # Close with writes still in flight: it waits for them, then deletes everything.
    keep = [_data(200_000, i) for i in range(8)]
    for a in keep:
        s.write_array(a)
    s.close()
    assert os.listdir(tmp_path) == []
