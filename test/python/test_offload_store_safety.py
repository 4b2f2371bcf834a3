"""What the tensor store refuses: offload roots that are not private to the user (another
user's, writable by group or others, a symbolic link), links planted where it cleans or writes,
absurd sizes and addresses, paths with a NUL byte. Each test plants what an attacker (or a
careless caller) could and checks that the victim's files are intact and the error is clean."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

from hector.runtime import offload
from hector.runtime.offload import (
    OffloadIOError,
    TensorStore,
    UnsafeDirectoryError,
    checked_root,
    clean_stale,
    default_root,
)

OTHER_UID = 12345
BACKENDS = ["io_uring", "threads"]


def _dead_pid() -> int:
    """A pid no process can have (above the kernel's pid_max)."""
    try:
        with open("/proc/sys/kernel/pid_max") as f:
            return int(f.read()) + 1
    except OSError:
        return 4194305


def _victim(path: Path) -> Path:
    """A directory of someone's files that Hector must never touch."""
    path.mkdir()
    (path / "precious.txt").write_text("keep me")
    (path / "notes.bin").write_bytes(b"\x01" * 100)
    return path


def _intact(victim: Path) -> bool:
    return (victim / "precious.txt").read_text() == "keep me" and (
        victim / "notes.bin"
    ).read_bytes() == b"\x01" * 100


def _give_away(path: Path, uid: int = OTHER_UID) -> None:
    """``path`` owned by another user (needs root: CI and the developers' machines run as root;
    elsewhere the test fails rather than skip what it checks)."""
    os.chown(path, uid, uid)


def _native_open(root: str | Path) -> tuple[int, str]:
    """Open (and close) a store through the C ABI directly, without the Python checks: the
    status and the message the native side gives."""
    lib = offload._lib()
    handle = ctypes.c_void_p()
    err = ctypes.create_string_buffer(1024)
    code = lib.hector_store_open2(
        os.fsencode(str(root)), 1, 65536, 0, 1, ctypes.byref(handle), err, len(err)
    )
    if code == offload.OK:
        lib.hector_store_close(handle)
    return int(code), err.value.decode()


def _plant_stale_store(root: Path, victim: Path) -> None:
    """Entries named like dead processes' stores: a link to the victim's directory, and a real
    directory holding links to the victim's file and directory."""
    dead = _dead_pid()
    os.symlink(victim, root / f"hector-offload-{dead}-0")
    real = root / f"hector-offload-{dead}-1"
    real.mkdir(mode=0o700)
    os.symlink(victim / "precious.txt", real / "t1.bin")
    os.symlink(victim, real / "sub")
    os.symlink(victim / "notes.bin", real / "lock")


# ---- roots that are not private -------------------------------------------------------------


def test_a_root_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    _give_away(root)
    victim = _victim(tmp_path / "victim")
    _plant_stale_store(root, victim)
    with pytest.raises(UnsafeDirectoryError, match=f"owned by uid {OTHER_UID}"):
        TensorStore(str(root))
    code, message = _native_open(root)  # the native check stands on its own
    assert code == offload.ERR_UNSAFE, message
    assert f"owned by uid {OTHER_UID}" in message
    assert _intact(victim)
    assert sorted(os.listdir(root)) == sorted(
        [f"hector-offload-{_dead_pid()}-0", f"hector-offload-{_dead_pid()}-1"]
    )


def test_a_root_from_the_environment_is_refused_too(tmp_path: Path, monkeypatch) -> None:
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    os.chmod(root, 0o770)
    monkeypatch.setenv("HECTOR_OFFLOAD_DIR", str(root))
    with pytest.raises(UnsafeDirectoryError, match="writable by group or others"):
        TensorStore()
    assert os.listdir(root) == []


def test_a_world_writable_root_is_refused_and_not_cleaned(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    os.chmod(root, 0o777)
    stale = root / f"hector-offload-{_dead_pid()}-7"
    stale.mkdir(mode=0o700)
    (stale / "t1.bin").write_bytes(b"data")
    with pytest.raises(UnsafeDirectoryError, match=r"writable by group or others \(mode 0777\)"):
        TensorStore(str(root))
    code, message = _native_open(root)
    assert code == offload.ERR_UNSAFE, message
    with pytest.raises(UnsafeDirectoryError):
        clean_stale(str(root))
    assert offload._lib().hector_store_clean_stale(os.fsencode(str(root))) == -1
    assert (stale / "t1.bin").read_bytes() == b"data"
    assert os.listdir(root) == [stale.name]


def test_a_root_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    victim = _victim(tmp_path / "victim")
    stale = victim / f"hector-offload-{_dead_pid()}-3"  # the victim's own files, store-named
    stale.mkdir()
    (stale / "t1.bin").write_bytes(b"mine")
    root = tmp_path / "root"
    os.symlink(victim, root)
    with pytest.raises(UnsafeDirectoryError, match="symbolic link"):
        TensorStore(str(root))
    code, message = _native_open(root)
    assert code == offload.ERR_UNSAFE, message
    assert "symbolic link" in message
    with pytest.raises(UnsafeDirectoryError):
        clean_stale(str(root))
    assert _intact(victim)
    assert (stale / "t1.bin").read_bytes() == b"mine"
    assert sorted(os.listdir(victim)) == sorted(["precious.txt", "notes.bin", stale.name])


def test_a_root_that_is_a_file_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.write_text("x")
    code, message = _native_open(root)
    assert code == offload.ERR_UNSAFE, message
    with pytest.raises(UnsafeDirectoryError, match="not a directory"):
        TensorStore(str(root))
    assert root.read_text() == "x"


@pytest.mark.parametrize("planted", ["other-owner", "world-writable", "symlink"])
def test_an_unsafe_default_root_falls_back_to_a_fresh_private_one(
    tmp_path: Path, monkeypatch, planted: str
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir(mode=0o700)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setattr(offload, "_fallbacks", {})
    monkeypatch.delenv("HECTOR_OFFLOAD_DIR", raising=False)
    victim = _victim(tmp_path / "victim")
    standard = tmp / f"hector-offload.{os.getuid()}"
    if planted == "symlink":
        os.symlink(victim, standard)
    else:
        standard.mkdir(mode=0o700)
        _plant_stale_store(standard, victim)
        if planted == "other-owner":
            _give_away(standard)
        else:
            os.chmod(standard, 0o777)
    before = sorted(os.listdir(standard))
    with pytest.warns(RuntimeWarning, match="private directory"):
        store = TensorStore(backend="threads")
    with store:
        fallback = Path(store.root)
        assert fallback.parent == tmp
        assert fallback.name.startswith(f"hector-offload.{os.getuid()}.")
        st = os.lstat(fallback)
        assert st.st_uid == os.geteuid()
        assert (st.st_mode & 0o777) == 0o700
        assert Path(store.path).parent == fallback
        key = store.write_array(np.arange(1000, dtype=np.uint8))
        store.wait(key)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # warned once
            assert default_root() == str(fallback)  # the same one for the rest of the process
    assert sorted(os.listdir(standard)) == before
    assert _intact(victim)


def test_a_missing_default_root_is_created_private(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("HECTOR_OFFLOAD_DIR", raising=False)
    root = default_root()
    assert root == str(tmp_path / f"hector-offload.{os.getuid()}")
    st = os.lstat(root)
    assert st.st_uid == os.geteuid()
    assert (st.st_mode & 0o777) == 0o700


# ---- links planted where the store cleans, writes or reads -----------------------------------


def test_cleaning_stale_stores_never_follows_a_link(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    victim = _victim(tmp_path / "victim")
    _plant_stale_store(root, victim)
    with TensorStore(str(root), backend="threads") as s:
        assert _intact(victim)
        assert sorted(os.listdir(victim)) == ["notes.bin", "precious.txt"]
        # The link itself is left (it is not a directory); the real directory is emptied of its
        # links (never followed) and removed.
        assert sorted(os.listdir(root)) == sorted(
            [f"hector-offload-{_dead_pid()}-0", os.path.basename(s.path)]
        )
    assert clean_stale(str(root)) == 0
    assert _intact(victim)


def test_stale_stores_are_removed_however_far_they_got(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    dead = _dead_pid()
    half_built = root / f".tmp-hector-offload-{dead}-0"  # died before the rename
    half_built.mkdir()
    (half_built / "lock").write_text("")
    nested = root / f"hector-offload-{dead}-1"  # a subdirectory (no store makes one)
    (nested / "sub").mkdir(parents=True)
    (nested / "sub" / "t1.bin").write_bytes(b"x")
    building = root / f".tmp-hector-offload-{os.getpid()}-999999"  # alive: its owner's
    building.mkdir()
    assert clean_stale(str(root)) == 2
    assert sorted(os.listdir(root)) == [building.name]


def test_a_stale_store_owned_by_another_user_is_left_alone(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    stale = root / f"hector-offload-{_dead_pid()}-0"
    stale.mkdir()
    (stale / "t1.bin").write_bytes(b"theirs")
    _give_away(stale)
    with TensorStore(str(root), backend="threads"):
        assert (stale / "t1.bin").read_bytes() == b"theirs"
    assert clean_stale(str(root)) == 0
    assert (stale / "t1.bin").read_bytes() == b"theirs"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("nbytes", [0, 5000])
def test_a_link_planted_where_a_spill_file_goes_is_refused(
    tmp_path: Path, backend: str, nbytes: int
) -> None:
    victim = _victim(tmp_path / "victim")
    with TensorStore(str(tmp_path / "root"), backend=backend) as s:
        os.symlink(victim / "precious.txt", s.file_of(1))  # the first object's file
        key = s.write_array(np.full(nbytes, 7, dtype=np.uint8))
        assert key == 1
        with pytest.raises(OffloadIOError) as info:
            s.wait(key)
        assert info.value.errno in (errno.EEXIST, errno.ELOOP)
        assert _intact(victim)
    assert _intact(victim)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_spill_file_replaced_by_a_link_is_not_read_through(tmp_path: Path, backend: str) -> None:
    with TensorStore(str(tmp_path / "root"), backend=backend) as s:
        a = np.arange(20000, dtype=np.uint8)
        key = s.write_array(a)
        s.wait(key)
        # The same bytes elsewhere (so that a read through the link would pass the checksum),
        # and the stored file replaced by a link to them.
        decoy = tmp_path / "decoy.bin"
        decoy.write_bytes(Path(s.file_of(key)).read_bytes())
        os.unlink(s.file_of(key))
        os.symlink(decoy, s.file_of(key))
        with pytest.raises(OffloadIOError) as info:
            s.read_array(key, np.zeros_like(a))
        assert info.value.errno == errno.ELOOP


# ---- absurd sizes and addresses -------------------------------------------------------------

_SIZES = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from hector.runtime.offload import TensorStore

    out = {}
    s = TensorStore(sys.argv[1], backend=sys.argv[2], threads=2, chunk_bytes=65536)
    a = np.arange(10000, dtype=np.uint8)
    addr = a.ctypes.data

    def attempt(name, call):
        try:
            call()
            out[name] = "accepted"
        except Exception as err:  # what it raised, checked by the test
            out[name] = f"{type(err).__name__}: {err}"
        print(name, out[name], file=sys.stderr, flush=True)

    attempt("write 1<<60", lambda: s.write(addr, 1 << 60))
    attempt("write 2**63-1", lambda: s.write(addr, 2**63 - 1))
    attempt("write 2**63", lambda: s.write(addr, 2**63))
    attempt("write -1", lambda: s.write(addr, -1))
    attempt("write unmapped", lambda: s.write(4096, 4096))
    attempt("write past the address space", lambda: s.write(2**64 - 4096, 8192))
    k = s.write_array(a)
    s.wait(k)
    attempt("read 1<<60", lambda: s.read(k, addr, 1 << 60))
    attempt("read unmapped", lambda: s.read(k, 4096 + 17, a.nbytes))
    attempt("read -5", lambda: s.read(k, addr, -5))
    b = np.zeros_like(a)
    s.read_array(k, b)  # the store still works
    out["round trip"] = bool(np.array_equal(a, b))
    s.close()
    print(json.dumps(out))
    """
)


@pytest.mark.parametrize("backend", BACKENDS)
def test_absurd_sizes_and_addresses_raise_cleanly(tmp_path: Path, backend: str) -> None:
    # In a subprocess: the old store aborted the interpreter (std::bad_alloc) or crashed.
    proc = subprocess.run(
        [sys.executable, "-c", _SIZES, str(tmp_path / "root"), backend],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got.pop("round trip") is True
    for name, result in got.items():
        assert result.startswith(("ValueError", "MemoryError")), (name, result)
    assert "not memory of this process" in got["write 1<<60"]
    assert "not memory of this process" in got["write unmapped"]
    assert os.listdir(tmp_path / "root") == []


def test_chunk_bytes_beyond_two_to_the_forty_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="chunk_bytes"):
        TensorStore(str(tmp_path), chunk_bytes=1 << 62)
    lib = offload._lib()
    handle = ctypes.c_void_p()
    err = ctypes.create_string_buffer(256)
    code = lib.hector_store_open2(
        os.fsencode(str(tmp_path)), 1, 1 << 62, 0, 1, ctypes.byref(handle), err, len(err)
    )
    assert code == offload.ERR_ARG
    assert "chunk_bytes" in err.value.decode()


# ---- NUL bytes ------------------------------------------------------------------------------


def test_a_root_with_a_nul_byte_is_refused(tmp_path: Path) -> None:
    root = str(tmp_path / "root") + "\0/elsewhere"
    with pytest.raises(ValueError, match="NUL"):
        TensorStore(root)
    with pytest.raises(ValueError, match="NUL"):
        clean_stale(root)
    with pytest.raises(ValueError, match="NUL"):
        checked_root(root)
    assert not (tmp_path / "root").exists()  # not silently cut at the NUL
