"""A GPUDirect Storage backend for the tensor store, through NVIDIA's ``kvikio``.

:class:`KvikioStore` has the interface of :class:`~hector.runtime.offload.TensorStore`
(``write(address, nbytes) -> key``, ``read``, ``poll``, ``wait``, ``completions``, ``remove``,
``close``, ``stats``, ``path``, ``direct``) so callers pick a backend by option
(:func:`open_store` with ``backend="native"`` or ``"kvikio"``) and report it
(:attr:`KvikioStore.io_backend`). Addresses may be CUDA device pointers (``device=True``):
``kvikio.CuFile`` moves them between GPU memory and the file with cuFile (GPUDirect Storage),
or, in kvikio's compatibility mode (no GDS driver), through its own bounce buffers — no
pinned staging by the caller either way. Host addresses go through the same calls.

Like the native store it keeps one private directory (mode 0700, named
``hector-offload-<pid>-k<n>`` and holding a ``lock`` file locked for the process's lifetime,
so :func:`~hector.runtime.offload.clean_stale` removes it after a crash) under a root checked
as the native store checks it (:func:`~hector.runtime.offload.checked_root`), one file per
object (created with ``O_EXCL | O_NOFOLLOW`` before kvikio opens it, so a link planted in its
place is refused),
and a CRC32C per object of host buffers (device buffers are not read back by the host to
checksum them: their integrity rests on the file system). Importing this module needs neither
CUDA nor kvikio; opening a store needs kvikio (``pip install kvikio-cu12``) and, for any
transfer, the CUDA driver (``libcuda.so.1``), even in compatibility mode.
"""

from __future__ import annotations

import ctypes
import errno as _errno
import fcntl
import importlib
import itertools
import os
import shutil
from typing import IO, Any

from .offload import (
    ChecksumError,
    OffloadIOError,
    TensorStore,
    checked_root,
    clean_stale,
    crc32c,
)
from .private_dir import open_private_file

__all__ = ["BACKENDS", "KvikioStore", "kvikio_status", "open_store"]

#: Store backends :func:`open_store` knows.
BACKENDS = ("native", "kvikio")
_counter = itertools.count()


def kvikio_status(module: str = "kvikio") -> tuple[bool, str]:
    """Whether kvikio can be imported here, and why not (or its version and mode)."""
    try:
        kvikio = importlib.import_module(module)
    except Exception as err:  # noqa: BLE001  (any import failure means: not available)
        return False, f"kvikio is not importable: {type(err).__name__}: {err}"
    version = getattr(kvikio, "__version__", "unknown")
    return True, f"kvikio {version}"


class _Device:
    """A CUDA device buffer at an address, as kvikio takes it (``__cuda_array_interface__``)."""

    def __init__(self, address: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (address, False),
            "version": 3,
            "strides": None,
        }


def _host(address: int, nbytes: int) -> Any:
    """A writable host buffer at an address."""
    return (ctypes.c_ubyte * nbytes).from_address(address)


class KvikioStore:
    """Objects on files written and read by ``kvikio.CuFile`` (see the module docstring).

    Args:
        root: offload root (default :func:`~hector.runtime.offload.default_root`), created with
            mode 0700 if missing and refused when not private to the user
            (:func:`~hector.runtime.offload.checked_root`).
        module: the module to use as kvikio (tests pass a fake one).
        task_size: bytes per kvikio task (its thread pool splits larger requests).
    """

    io_backend = "kvikio"

    def __init__(
        self, root: str | None = None, *, module: str = "kvikio", task_size: int = 4 << 20
    ) -> None:
        ok, why = kvikio_status(module)
        if not ok:
            raise OffloadIOError(_errno.ENOSYS, f"cannot open a kvikio store: {why}", module)
        self._kvikio = importlib.import_module(module)
        self.version = why
        self.root = checked_root(root)
        # Directories of crashed processes go first, as the native store does.
        clean_stale(self.root)
        self.path = os.path.join(self.root, f"hector-offload-{os.getpid()}-k{next(_counter)}")
        os.mkdir(self.path, 0o700)  # never through a link: an existing name is an error
        fd = open_private_file(self.path, "lock", os.O_RDWR | os.O_CREAT | os.O_EXCL)
        lock = os.fdopen(fd, "w")
        self._lock: IO[str] | None = lock
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.task_size = task_size
        self.direct = bool(getattr(self._kvikio, "is_gds_available", lambda: False)())
        self.direct_reason = "cuFile (GPUDirect Storage)" if self.direct else "compatibility mode"
        self._next = 0
        self._objects: dict[int, dict[str, Any]] = {}
        self._done: list[int] = []
        self._stats = {"bytes_written": 0, "bytes_read": 0, "objects_written": 0}
        self._stats.update({"objects_read": 0, "bytes_on_disk": 0, "peak_bytes_on_disk": 0})

    # ---- lifecycle ---------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._lock is None

    def close(self) -> None:
        """Wait for every transfer, delete every file and the directory (idempotent)."""
        if self._lock is None:
            return
        for key in list(self._objects):
            self.remove(key)
        shutil.rmtree(self.path, ignore_errors=True)
        self._lock.close()
        self._lock = None

    def __enter__(self) -> KvikioStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def file_of(self, key: int) -> str:
        """The file that holds object ``key``."""
        return os.path.join(self.path, f"t{key}.bin")

    # ---- I/O ---------------------------------------------------------------------------------
    def _buffer(self, address: int, nbytes: int, device: bool) -> Any:
        return _Device(address, nbytes) if device else _host(address, nbytes)

    def write(self, address: int, nbytes: int, *, device: bool = False) -> int:
        """Start writing ``nbytes`` at ``address`` (a device pointer with ``device``) into a new
        object and return its key."""
        if self._lock is None:
            raise ValueError(f"the offload store {self.path} is closed")
        key, self._next = self._next, self._next + 1
        crc = None if device else crc32c(bytes(_host(address, nbytes)))
        # Created here, without following a link, before kvikio opens it by name.
        os.close(open_private_file(self.path, f"t{key}.bin", os.O_WRONLY | os.O_CREAT | os.O_EXCL))
        f = self._kvikio.CuFile(self.file_of(key), "w")
        future = f.pwrite(self._buffer(address, nbytes, device), nbytes, 0, self.task_size)
        self._objects[key] = {"file": f, "future": future, "nbytes": nbytes, "crc": crc}
        self._objects[key].update(op="write", error=None)
        return key

    def read(self, key: int, address: int, nbytes: int, *, device: bool = False) -> None:
        """Start reading object ``key`` (exactly ``nbytes``) into ``address``."""
        o = self._objects.get(key)
        if o is None or o["nbytes"] != nbytes or o["future"] is not None:
            raise ValueError(f"cannot read object {key} ({nbytes} bytes)")
        o["file"] = self._kvikio.CuFile(self.file_of(key), "r")
        o["future"] = o["file"].pread(self._buffer(address, nbytes, device), nbytes, 0)
        o.update(op="read", address=address, device=device)

    def _finish(self, key: int) -> None:
        o = self._objects[key]
        future, o["future"] = o["future"], None
        try:
            done = future.get()
        except Exception as err:  # noqa: BLE001  (kvikio raises RuntimeError with the cause)
            o["error"] = OffloadIOError(_errno.EIO, f"kvikio {o['op']} failed: {err}", key)
            done = -1
        finally:
            o["file"].close()
        if o["error"] is None and done != o["nbytes"]:
            o["error"] = OffloadIOError(
                _errno.EIO, f"kvikio {o['op']} moved {done} of {o['nbytes']} bytes", key
            )
        if o["error"] is None and o["op"] == "read" and o["crc"] is not None:
            if crc32c(bytes(_host(o["address"], o["nbytes"]))) != o["crc"]:
                o["error"] = ChecksumError(
                    _errno.EIO, "data read back does not match its CRC32C", self.file_of(key)
                )
        if o["error"] is None:
            what = "written" if o["op"] == "write" else "read"
            self._stats[f"bytes_{what}"] += o["nbytes"]
            self._stats[f"objects_{what}"] += 1
            if o["op"] == "write":
                self._stats["bytes_on_disk"] += o["nbytes"]
                peak = max(self._stats["peak_bytes_on_disk"], self._stats["bytes_on_disk"])
                self._stats["peak_bytes_on_disk"] = peak
        self._done.append(key)

    def poll(self, key: int) -> bool:
        """True when no transfer on ``key`` is in flight; raises if the last one failed."""
        o = self._objects[key]
        if o["future"] is not None:
            if not o["future"].done():
                return False
            self._finish(key)
        if o["error"] is not None:
            raise o["error"]
        return True

    def wait(self, key: int) -> None:
        """Wait for the transfer on ``key``; raise :class:`OffloadIOError` if it failed."""
        o = self._objects[key]
        if o["future"] is not None:
            self._finish(key)
        if o["error"] is not None:
            raise o["error"]

    def completions(self) -> list[int]:
        """Keys whose transfer completed since the last call."""
        for key, o in self._objects.items():
            if o["future"] is not None and o["future"].done():
                self._finish(key)
        done, self._done = self._done, []
        return done

    def remove(self, key: int) -> None:
        """Forget ``key`` and delete its file (after its transfer, if any)."""
        o = self._objects.pop(key, None)
        if o is None:
            return
        if o["future"] is not None:
            self._objects[key] = o
            try:
                self._finish(key)
            finally:
                del self._objects[key]
        if o["op"] == "write" and o["error"] is None or o["op"] == "read":
            self._stats["bytes_on_disk"] -= o["nbytes"]
        with _suppress():
            os.unlink(self.file_of(key))

    def stats(self) -> dict[str, Any]:
        """Bytes and objects moved, bytes on disk (no busy times: kvikio does not report them)."""
        return dict(self._stats)


class _suppress:  # noqa: N801  (a tiny contextlib.suppress(FileNotFoundError))
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, *rest: object) -> bool:
        return kind is FileNotFoundError


def open_store(backend: str = "native", root: str | None = None, **options: Any) -> Any:
    """A tensor store of ``backend`` (``"native"``: the C++ thread pool, O_DIRECT, CRC32C;
    ``"kvikio"``: :class:`KvikioStore`)."""
    if backend == "native":
        return TensorStore(root, **options)
    if backend == "kvikio":
        return KvikioStore(root, **options)
    raise ValueError(f"unknown store backend {backend!r}; backends: {', '.join(BACKENDS)}")
