"""Thin ctypes binding of the native tensor store (``hector/offload.h``).

:class:`TensorStore` owns one private directory (mode 0700, ``hector-offload-<pid>-<n>``) under
an offload root and writes/reads raw byte buffers to one file per object, asynchronously, on a
thread pool of ``pwrite``/``pread`` workers (this build has no io_uring), with ``O_DIRECT``
where the filesystem accepts it. Errors become :class:`OffloadIOError` (an ``OSError`` with
``errno`` and ``filename``), :class:`ShortIOError` or :class:`ChecksumError`.

Buffers are passed as addresses: the caller keeps them alive and unchanged until the
operation on that key completes (:meth:`TensorStore.wait`). This module imports only ctypes,
numpy and the sibling :mod:`hector.runtime.native` (to locate the library).
"""

from __future__ import annotations

import ctypes
import errno as _errno
import functools
import os
import tempfile
import weakref
from typing import Any

import numpy as np

from .native import load_library

__all__ = [
    "FAULT_ENOSPC",
    "FAULT_EIO",
    "FAULT_SHORT",
    "IO_BACKEND",
    "ChecksumError",
    "OffloadIOError",
    "ShortIOError",
    "TensorStore",
    "clean_stale",
    "crc32c",
    "default_root",
]

#: How the native store does its I/O (reported by benchmarks and docs).
IO_BACKEND = "threadpool-pread-pwrite"

OK = 0
PENDING = 100
ERR_IO = 101
ERR_SHORT = 102
ERR_CHECKSUM = 103
ERR_ARG = 104
ERR_STATE = 105

FAULT_NONE = 0
FAULT_ENOSPC = 1
FAULT_EIO = 2
FAULT_SHORT = 3
_FAULTS = {"enospc": FAULT_ENOSPC, "eio": FAULT_EIO, "short": FAULT_SHORT, "none": FAULT_NONE}
_OPS = {"write": 0, "read": 1}

_P = ctypes.c_void_p
_I32 = ctypes.c_int32
_I64 = ctypes.c_int64
_STATS = (
    "bytes_written",
    "bytes_read",
    "write_busy_ns",
    "read_busy_ns",
    "objects_written",
    "objects_read",
    "bytes_on_disk",
    "peak_bytes_on_disk",
)


class OffloadIOError(OSError):
    """An offload read or write failed; ``filename`` is the stored file, ``errno`` the cause."""


class ShortIOError(OffloadIOError):
    """A read or write transferred fewer bytes than asked (truncated file, full disk)."""


class ChecksumError(OffloadIOError):
    """Data read back from a stored file does not match the CRC32C recorded when written."""


@functools.cache
def _lib() -> ctypes.CDLL:
    """The native library with the store's functions declared."""
    lib = load_library()
    lib.hector_store_abi_version.argtypes = []
    lib.hector_store_abi_version.restype = _I32
    lib.hector_store_open.argtypes = [ctypes.c_char_p, _I32, _I64, _I32, ctypes.POINTER(_P)]
    lib.hector_store_open.argtypes += [ctypes.c_char_p, _I64]
    lib.hector_store_open.restype = _I32
    lib.hector_store_close.argtypes = [_P]
    lib.hector_store_close.restype = _I32
    lib.hector_store_clean_stale.argtypes = [ctypes.c_char_p]
    lib.hector_store_clean_stale.restype = _I64
    for name in ("hector_store_path", "hector_store_direct"):
        getattr(lib, name).argtypes = [_P, ctypes.c_char_p, _I64]
        getattr(lib, name).restype = _I32
    lib.hector_store_write.argtypes = [_P, _P, _I64, ctypes.POINTER(_I64)]
    lib.hector_store_write.restype = _I32
    lib.hector_store_read.argtypes = [_P, _I64, _P, _I64]
    lib.hector_store_read.restype = _I32
    for name in ("hector_store_poll", "hector_store_wait", "hector_store_remove"):
        getattr(lib, name).argtypes = [_P, _I64]
        getattr(lib, name).restype = _I32
    lib.hector_store_error.argtypes = [_P, _I64, ctypes.c_char_p, _I64]
    lib.hector_store_error.restype = _I32
    lib.hector_store_completions.argtypes = [_P, ctypes.POINTER(_I64), _I64]
    lib.hector_store_completions.restype = _I64
    lib.hector_store_inject_fault.argtypes = [_P, _I32, _I32, _I64, _I64]
    lib.hector_store_inject_fault.restype = _I32
    lib.hector_store_stats.argtypes = [_P, ctypes.POINTER(_I64)]
    lib.hector_store_stats.restype = _I32
    lib.hector_crc32c.argtypes = [ctypes.c_uint32, _P, _I64]
    lib.hector_crc32c.restype = ctypes.c_uint32
    if lib.hector_store_abi_version() != 1:
        raise RuntimeError("the native tensor store has another ABI version; reinstall Hector")
    return lib


def default_root() -> str:
    """The offload root: ``$HECTOR_OFFLOAD_DIR``, else ``<tmp>/hector-offload.<uid>``."""
    env = os.environ.get("HECTOR_OFFLOAD_DIR")
    if env:
        return env
    return os.path.join(tempfile.gettempdir(), f"hector-offload.{os.getuid()}")


def clean_stale(root: str | None = None) -> int:
    """Remove store directories of dead processes under ``root``; return how many."""
    return int(_lib().hector_store_clean_stale(os.fsencode(root or default_root())))


def crc32c(data: bytes | np.ndarray, crc: int = 0) -> int:
    """CRC32C (Castagnoli) of ``data``, as computed by the native store."""
    arr = np.ascontiguousarray(
        np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes) else data
    ).view(np.uint8)
    return int(_lib().hector_crc32c(crc, arr.ctypes.data, arr.nbytes))


def _close(handle: int) -> None:
    _lib().hector_store_close(handle)


class TensorStore:
    """An asynchronous store of byte buffers on files, in a private per-process directory.

    Args:
        root: offload root (default :func:`default_root`); created with mode 0700 if missing.
            Directories of dead processes under it are removed first.
        threads: number of I/O worker threads.
        chunk_bytes: requests are split into chunks of this size (multiple of 4096) so that
            several are in flight at once.
        direct: use ``O_DIRECT`` when the filesystem accepts it (``direct_reason`` says why
            buffered I/O is used otherwise).

    The store is closed (files and directory removed) by :meth:`close`, at garbage collection
    or at interpreter exit.
    """

    def __init__(
        self,
        root: str | None = None,
        *,
        threads: int = 4,
        chunk_bytes: int = 4 << 20,
        direct: bool = True,
    ) -> None:
        if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 256:
            raise ValueError(f"threads must be an int in [1, 256], got {threads!r}")
        if not isinstance(chunk_bytes, int) or chunk_bytes < 4096 or chunk_bytes % 4096:
            raise ValueError(f"chunk_bytes must be a positive multiple of 4096, got {chunk_bytes}")
        self.root = os.path.abspath(root or default_root())
        lib = _lib()
        handle = _P()
        err = ctypes.create_string_buffer(1024)
        code = lib.hector_store_open(
            os.fsencode(self.root),
            threads,
            chunk_bytes,
            int(bool(direct)),
            ctypes.byref(handle),
            err,
            len(err),
        )
        if code != OK or handle.value is None:
            raise OffloadIOError(
                _errno.EIO, f"cannot open an offload store: {err.value.decode()}", self.root
            )
        self._handle: int | None = handle.value
        self._finalizer = weakref.finalize(self, _close, handle.value)
        buf = ctypes.create_string_buffer(4096)
        lib.hector_store_path(self._handle, buf, len(buf))
        self.path: str = os.fsdecode(buf.value)
        self.direct: bool = bool(lib.hector_store_direct(self._handle, buf, len(buf)))
        self.direct_reason: str = buf.value.decode()
        self.threads = threads
        self.chunk_bytes = chunk_bytes
        self._keys = (_I64 * 1024)()

    # ---- lifecycle ---------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._handle is None

    def close(self) -> None:
        """Wait for every operation, delete every file and the directory (idempotent).

        A closed store is never reopened: every later operation raises ``ValueError``
        (:meth:`remove` is a no-op).
        """
        if self._handle is not None:
            self._handle = None
            self._finalizer()

    def __enter__(self) -> TensorStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _h(self) -> int:
        if self._handle is None:
            raise ValueError(
                f"the offload store {self.path} is closed (its files are deleted); "
                "open a new TensorStore"
            )
        return self._handle

    def file_of(self, key: int) -> str:
        """The file that holds object ``key``."""
        return os.path.join(self.path, f"t{key}.bin")

    # ---- I/O ---------------------------------------------------------------------------------
    def write(self, address: int, nbytes: int) -> int:
        """Start writing ``nbytes`` at ``address`` into a new object and return its key."""
        key = _I64(0)
        code = _lib().hector_store_write(self._h(), address, int(nbytes), ctypes.byref(key))
        if code != OK:
            raise ValueError(f"invalid write of {nbytes} bytes (status {code})")
        return int(key.value)

    def read(self, key: int, address: int, nbytes: int) -> None:
        """Start reading object ``key`` (exactly ``nbytes``) into ``address``."""
        code = _lib().hector_store_read(self._h(), int(key), address, int(nbytes))
        if code == ERR_STATE:
            self._raise(key, code)
        if code != OK:
            raise ValueError(
                f"cannot read object {key} ({nbytes} bytes): unknown key, wrong size, "
                "or an operation on it is still in flight"
            )

    def poll(self, key: int) -> bool:
        """True when no operation on ``key`` is in flight; raises if the last one failed."""
        code = _lib().hector_store_poll(self._h(), int(key))
        if code == PENDING:
            return False
        if code != OK:
            self._raise(key, code)
        return True

    def wait(self, key: int) -> None:
        """Wait for the operation on ``key``; raise :class:`OffloadIOError` if it failed."""
        code = _lib().hector_store_wait(self._h(), int(key))
        if code != OK:
            self._raise(key, code)

    def completions(self) -> list[int]:
        """Keys whose operation completed (successfully or not) since the last call."""
        out: list[int] = []
        while True:
            n = _lib().hector_store_completions(self._h(), self._keys, len(self._keys))
            out.extend(self._keys[:n])
            if n < len(self._keys):
                return out

    def remove(self, key: int) -> None:
        """Forget ``key`` and delete its file (after its in-flight operation, if any)."""
        if self._handle is not None:
            _lib().hector_store_remove(self._handle, int(key))

    def error(self, key: int) -> tuple[int, str]:
        """``(errno, message)`` of the last failed operation on ``key``."""
        buf = ctypes.create_string_buffer(2048)
        err = _lib().hector_store_error(self._h(), int(key), buf, len(buf))
        return int(err), buf.value.decode(errors="replace")

    def _raise(self, key: int, code: int) -> None:
        err, message = self.error(key)
        filename = self.file_of(key)
        if code == ERR_CHECKSUM:
            raise ChecksumError(_errno.EIO, message, filename)
        if code == ERR_SHORT:
            raise ShortIOError(_errno.EIO, message, filename)
        if code == ERR_STATE:
            raise OffloadIOError(_errno.ENOENT, message or "object has no stored data", filename)
        if code == ERR_ARG:
            raise ValueError(f"unknown offload key {key}")
        raise OffloadIOError(err or _errno.EIO, message, filename)

    # ---- numpy conveniences -----------------------------------------------------------------
    def write_array(self, array: np.ndarray) -> int:
        """Start writing a C-contiguous array (kept alive by the caller) and return its key."""
        if not array.flags.c_contiguous:
            raise ValueError("array must be C-contiguous")
        return self.write(array.ctypes.data, array.nbytes)

    def read_array(self, key: int, out: np.ndarray) -> np.ndarray:
        """Read object ``key`` into the C-contiguous array ``out`` and wait; return ``out``."""
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError("out must be a writeable C-contiguous array")
        self.read(key, out.ctypes.data, out.nbytes)
        self.wait(key)
        return out

    # ---- faults and statistics ---------------------------------------------------------------
    def inject_fault(self, op: str, kind: str, *, skip: int = 0, count: int = 1) -> None:
        """Make the (skip+1)-th next ``op`` ("write"/"read") and ``count - 1`` more fail.

        ``kind`` is ``"enospc"``, ``"eio"`` or ``"short"`` (``"none"`` disarms). The same can be
        armed for every store of a process with ``HECTOR_OFFLOAD_FAULT=op:kind[:skip[:count]]``.
        """
        if op not in _OPS or kind not in _FAULTS:
            raise ValueError(
                f"op must be one of {sorted(_OPS)} and kind one of {sorted(_FAULTS)}, "
                f"got {op!r}, {kind!r}"
            )
        if skip < 0:
            raise ValueError("skip must be >= 0")
        _lib().hector_store_inject_fault(self._h(), _OPS[op], _FAULTS[kind], skip, count)

    def stats(self) -> dict[str, Any]:
        """Bytes/objects written and read, busy times, bytes on disk, achieved bandwidths."""
        out = (_I64 * 8)()
        _lib().hector_store_stats(self._h(), out)
        stats: dict[str, Any] = dict(zip(_STATS, (int(v) for v in out), strict=True))
        for what in ("write", "read"):
            busy = stats[f"{what}_busy_ns"]
            moved = stats["bytes_written" if what == "write" else "bytes_read"]
            stats[f"{what}_bandwidth"] = moved / (busy * 1e-9) if busy else 0.0
        return stats
