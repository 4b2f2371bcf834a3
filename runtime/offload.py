"""Thin ctypes binding of the native tensor store (``hector/offload.h``).

:class:`TensorStore` owns one private directory (mode 0700, ``hector-offload-<pid>-<n>``) under
an offload root and writes/reads raw byte buffers to one file per object, asynchronously, through
``io_uring`` (the default) or a thread pool of ``pwrite``/``pread`` workers (chosen with
``backend=`` or ``$HECTOR_OFFLOAD_BACKEND``, and used whenever the kernel refuses ``io_uring``:
:attr:`TensorStore.backend` says which ran), with ``O_DIRECT`` where the filesystem accepts it.
Errors become :class:`OffloadIOError` (an ``OSError`` with ``errno`` and ``filename``),
:class:`ShortIOError` or :class:`ChecksumError`. :meth:`TensorStore.stats` breaks the store's
time down (copies, checksums, submission, waits) and :func:`measure_raw_bandwidth` measures
what the disk gives the store on its own. The store and its counters are described in
``docs/offload-store.md``.

Buffers are passed as addresses: the caller keeps them alive and unchanged until the
operation on that key completes (:meth:`TensorStore.wait`); an address range that is not
memory of the process (an absurd size) is refused with ``ValueError``.

The offload root must be private to the user (:func:`checked_root`): a root given by the
caller or ``$HECTOR_OFFLOAD_DIR`` that is a symbolic link, not a directory, another user's, or
writable by group or others is refused (:class:`~hector.runtime.private_dir.UnsafeDirectoryError`);
the default ``<tmp>/hector-offload.<uid>`` in that state is replaced by a fresh private
directory, with a warning (:func:`default_root`). The native store checks again on the root's
descriptor and never follows a symbolic link under it. This module imports only ctypes, numpy
and its siblings :mod:`hector.runtime.native` (to locate the library),
:mod:`hector.runtime.private_dir` and :mod:`hector.runtime.bandwidth` (the probe).
"""

from __future__ import annotations

import atexit
import ctypes
import errno as _errno
import functools
import os
import tempfile
import warnings
import weakref
from typing import Any

import numpy as np

from .bandwidth import StorePieces, measure
from .native import load_library
from .private_dir import UnsafeDirectoryError, check_private_dir, private_dir

__all__ = [
    "BACKENDS",
    "FAULT_ENOSPC",
    "FAULT_EIO",
    "FAULT_SHORT",
    "IO_BACKEND",
    "ChecksumError",
    "OffloadIOError",
    "ShortIOError",
    "TensorStore",
    "UnsafeDirectoryError",
    "checked_root",
    "clean_stale",
    "crc32c",
    "default_root",
    "empty_in_phase",
    "measure_raw_bandwidth",
]

#: How the native store does its I/O; the backend a store runs is :attr:`TensorStore.backend`
#: (``"io_uring"`` or ``"threads"``) and ``stats()["backend"]``.
IO_BACKEND = "native (io_uring, or a pread/pwrite thread pool)"

#: Backend names :class:`TensorStore` accepts (``"auto"``: ``$HECTOR_OFFLOAD_BACKEND``, else
#: io_uring when the kernel allows it).
BACKENDS = ("auto", "threads", "io_uring")
_BACKEND_CODES = {"auto": 0, "threads": 1, "io_uring": 2}
_BACKEND_NAMES = {1: "threads", 2: "io_uring"}

OK = 0
PENDING = 100
ERR_IO = 101
ERR_SHORT = 102
ERR_CHECKSUM = 103
ERR_ARG = 104
ERR_STATE = 105
ERR_NOMEM = 106
ERR_UNSAFE = 107
_INT64_MAX = 2**63 - 1
_MAX_CHUNK = 1 << 40

FAULT_NONE = 0
FAULT_ENOSPC = 1
FAULT_EIO = 2
FAULT_SHORT = 3
_FAULTS = {"enospc": FAULT_ENOSPC, "eio": FAULT_EIO, "short": FAULT_SHORT, "none": FAULT_NONE}
_OPS = {"write": 0, "read": 1}

_P = ctypes.c_void_p
_I32 = ctypes.c_int32
_I64 = ctypes.c_int64
# The values of hector_store_stats2, in the order of HECTOR_STAT_* (hector/offload.h).
_STATS = (
    "bytes_written",
    "bytes_read",
    "write_busy_ns",
    "read_busy_ns",
    "objects_written",
    "objects_read",
    "bytes_on_disk",
    "peak_bytes_on_disk",
    "copy_ns",
    "copy_bytes",
    "crc_ns",
    "crc_bytes",
    "submit_ns",
    "ring_submit_ns",
    "write_wait_ns",
    "read_wait_ns",
    "write_io_ns",
    "read_io_ns",
    "io_requests",
    "copies_avoided_bytes",
    "registered_bytes",
    "backend",
    "open_ns",
    "files_reused",
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
    lib.hector_store_open2.argtypes = [ctypes.c_char_p, _I32, _I64, _I32, _I32, ctypes.POINTER(_P)]
    lib.hector_store_open2.argtypes += [ctypes.c_char_p, _I64]
    lib.hector_store_open2.restype = _I32
    lib.hector_store_backend.argtypes = [_P, ctypes.c_char_p, _I64]
    lib.hector_store_backend.restype = _I32
    lib.hector_store_keep_files.argtypes = [_P, _I32]
    lib.hector_store_keep_files.restype = _I32
    lib.hector_store_phase.argtypes = [_P, _I64]
    lib.hector_store_phase.restype = _I64
    lib.hector_store_stats2.argtypes = [_P, ctypes.POINTER(_I64), _I64]
    lib.hector_store_stats2.restype = _I64
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


def _path(path: str | os.PathLike[str], what: str) -> str:
    """``path`` as a str, refused (``ValueError``) when it has a NUL byte: C would see only the
    part before it."""
    text = os.fspath(path)
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a str or os.PathLike[str], got {type(text).__name__}")
    if "\0" in text:
        raise ValueError(f"{what} {text!r} contains a NUL byte")
    return text


# The private directory used instead of a refused default root, by the default path it replaces.
_fallbacks: dict[str, str] = {}


def _remove_if_empty(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass  # still holds another process's store, or already gone


def default_root() -> str:
    """The offload root: ``$HECTOR_OFFLOAD_DIR`` when set (checked when a store opens it, and
    refused if unsafe), else ``<tmp>/hector-offload.<uid>``, created with mode 0700.

    When that default is not private to the user (a symbolic link, not a directory, owned by
    another user, or writable by group or others: someone else may have created it first), it
    is left alone and a fresh private directory ``<tmp>/hector-offload.<uid>.XXXXXXXX`` (mode
    0700, from :func:`tempfile.mkdtemp`) is used instead, with a ``RuntimeWarning``; the same
    one for the rest of the process, removed at exit when empty.
    """
    env = os.environ.get("HECTOR_OFFLOAD_DIR")
    if env:
        return os.path.abspath(_path(env, "HECTOR_OFFLOAD_DIR"))
    tmp = tempfile.gettempdir()
    path = os.path.join(tmp, f"hector-offload.{os.getuid()}")
    try:
        return str(private_dir(path))
    except UnsafeDirectoryError as err:
        why = str(err)
    fallback = _fallbacks.get(path)
    if fallback is not None:
        try:
            return str(check_private_dir(fallback))
        except OSError:
            pass  # removed meanwhile: make another
    fallback = tempfile.mkdtemp(prefix=f"hector-offload.{os.getuid()}.", dir=tmp)
    _fallbacks[path] = fallback
    atexit.register(_remove_if_empty, fallback)
    warnings.warn(
        f"{why}; using the private directory {fallback} for offloading instead",
        RuntimeWarning,
        stacklevel=3,
    )
    return fallback


def checked_root(root: str | os.PathLike[str] | None = None) -> str:
    """The absolute offload root a store opens: ``root`` (created with mode 0700 when missing;
    its parent must exist), else :func:`default_root`.

    Raises:
        ValueError: the path contains a NUL byte.
        UnsafeDirectoryError: the root given (or ``$HECTOR_OFFLOAD_DIR``) is a symbolic link,
            not a directory, owned by another user, or writable by group or others.
        OffloadIOError: it cannot be created.
    """
    path = os.path.abspath(_path(root, "offload root")) if root else default_root()
    try:
        return str(private_dir(path))
    except UnsafeDirectoryError:
        raise
    except OSError as err:
        raise OffloadIOError(
            err.errno or _errno.EIO,
            f"cannot create offload root {path}: {err.strerror or err}",
            path,
        ) from err


def clean_stale(root: str | os.PathLike[str] | None = None) -> int:
    """Remove store directories of dead processes under ``root`` (default
    :func:`default_root`); return how many. A root that does not exist has none; one that is
    not private to the user is refused (:class:`UnsafeDirectoryError`), as stores refuse it."""
    path = os.path.abspath(_path(root, "offload root")) if root else default_root()
    if os.path.lexists(path):
        check_private_dir(path)
    removed = int(_lib().hector_store_clean_stale(os.fsencode(path)))
    if removed < 0:
        raise UnsafeDirectoryError(
            f"refusing to clean '{path}': it is not a directory private to the current user"
        )
    return removed


def _size(nbytes: int) -> int:
    """``nbytes`` as an int in [0, 2**63 - 1], else ``ValueError``."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int | np.integer):
        raise ValueError(f"nbytes must be an int, got {nbytes!r}")
    n = int(nbytes)
    if not 0 <= n <= _INT64_MAX:
        raise ValueError(f"nbytes must be in [0, 2**63 - 1], got {n}")
    return n


def _address(address: int) -> int:
    """``address`` as an int in [0, 2**64), else ``ValueError``."""
    if isinstance(address, bool) or not isinstance(address, int | np.integer):
        raise ValueError(f"address must be an int, got {address!r}")
    a = int(address)
    if not 0 <= a < 2**64:
        raise ValueError(f"address must be in [0, 2**64), got {a}")
    return a


def crc32c(data: bytes | np.ndarray, crc: int = 0) -> int:
    """CRC32C (Castagnoli) of ``data``, as computed by the native store."""
    arr = np.ascontiguousarray(
        np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes) else data
    ).view(np.uint8)
    return int(_lib().hector_crc32c(crc, arr.ctypes.data, arr.nbytes))


def _close(handle: int, sources: dict[int, np.ndarray]) -> None:
    _lib().hector_store_close(handle)  # waits for every operation
    sources.clear()  # write_array's sources, alive until their writes are done


class TensorStore:
    """An asynchronous store of byte buffers on files, in a private per-process directory.

    Args:
        root: offload root (default :func:`default_root`); created with mode 0700 if missing,
            refused (:class:`UnsafeDirectoryError`) when it is a symbolic link, not a
            directory, another user's, or writable by group or others (see
            :func:`checked_root`). Directories of dead processes under it are removed first.
        threads: number of I/O worker threads.
        chunk_bytes: requests are split into chunks of this size (multiple of 4096) so that
            several are in flight at once.
        direct: use ``O_DIRECT`` when the filesystem accepts it (``direct_reason`` says why
            buffered I/O is used otherwise).
        backend: ``"io_uring"``, ``"threads"`` or ``"auto"`` (``$HECTOR_OFFLOAD_BACKEND``, else
            io_uring). With io_uring, ``threads`` is the number of chunk requests in flight
            (one ring and I/O thread per 4). A store whose kernel refuses io_uring runs the
            thread pool: :attr:`backend` is what runs, :attr:`backend_reason` why.
        keep_files: :meth:`remove` keeps an object's file for a later write to overwrite
            instead of deleting it (the offload cache's setting; see :meth:`remove`).

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
        backend: str = "auto",
        keep_files: bool = False,
    ) -> None:
        if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 256:
            raise ValueError(f"threads must be an int in [1, 256], got {threads!r}")
        if (
            not isinstance(chunk_bytes, int)
            or not 4096 <= chunk_bytes <= _MAX_CHUNK
            or chunk_bytes % 4096
        ):
            raise ValueError(
                f"chunk_bytes must be a positive multiple of 4096 up to 2**40, got {chunk_bytes}"
            )
        if backend not in _BACKEND_CODES:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        self.root = checked_root(root)
        lib = _lib()
        handle = _P()
        err = ctypes.create_string_buffer(1024)
        code = lib.hector_store_open2(
            os.fsencode(self.root),
            threads,
            chunk_bytes,
            int(bool(direct)),
            _BACKEND_CODES[backend],
            ctypes.byref(handle),
            err,
            len(err),
        )
        if code == ERR_ARG:
            raise ValueError(f"cannot open an offload store: {err.value.decode()}")
        if code == ERR_UNSAFE:
            raise UnsafeDirectoryError(err.value.decode(errors="replace"))
        if code == ERR_NOMEM:
            raise MemoryError(f"cannot open an offload store: {err.value.decode()}")
        if code != OK or handle.value is None:
            raise OffloadIOError(
                _errno.EIO, f"cannot open an offload store: {err.value.decode()}", self.root
            )
        self._handle: int | None = handle.value
        # write_array's sources, held until their write completes: a caller that let go of
        # the array (a temporary) would otherwise leave the I/O thread reading freed memory.
        self._sources: dict[int, np.ndarray] = {}
        self._finalizer = weakref.finalize(self, _close, handle.value, self._sources)
        buf = ctypes.create_string_buffer(4096)
        lib.hector_store_path(self._handle, buf, len(buf))
        self.path: str = os.fsdecode(buf.value)
        self.direct: bool = bool(lib.hector_store_direct(self._handle, buf, len(buf)))
        self.direct_reason: str = buf.value.decode()
        code = lib.hector_store_backend(self._handle, buf, len(buf))
        #: The backend that runs: ``"io_uring"`` or ``"threads"``.
        self.backend: str = _BACKEND_NAMES[code]
        #: Why that backend runs and how it is set up (the io_uring error when it fell back).
        self.backend_reason: str = buf.value.decode()
        self.threads = threads
        self.chunk_bytes = chunk_bytes
        #: :meth:`remove` keeps files for later writes (see there).
        self.keep_files = bool(keep_files)
        lib.hector_store_keep_files(self._handle, int(self.keep_files))
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
            self._finalizer()  # waits for every operation, then lets the sources go

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

    def phase(self, key: int) -> int:
        """The address phase (``address % 4096``) a read of ``key`` needs to go straight into
        its destination under ``O_DIRECT`` (other addresses go through a staging copy); see
        :func:`empty_in_phase`."""
        value = int(_lib().hector_store_phase(self._h(), int(key)))
        if value < 0:
            raise ValueError(f"unknown offload key {key}")
        return value

    # ---- I/O ---------------------------------------------------------------------------------
    def write(self, address: int, nbytes: int) -> int:
        """Start writing ``nbytes`` at ``address`` into a new object and return its key.

        Raises:
            ValueError: ``nbytes`` is negative or above 2**63 - 1, or ``[address, address +
                nbytes)`` is not memory of this process (so an absurd size is refused).
            MemoryError: the object's bookkeeping cannot be allocated.
        """
        handle = self._h()
        n, a = _size(nbytes), _address(address)
        key = _I64(0)
        code = _lib().hector_store_write(handle, a, n, ctypes.byref(key))
        if code == ERR_NOMEM:
            raise MemoryError(f"no memory to start a write of {n} bytes to the offload store")
        if code != OK:
            raise ValueError(
                f"invalid write of {n} bytes from address {a:#x}: the range is not memory "
                f"of this process (status {code})"
            )
        return int(key.value)

    def read(self, key: int, address: int, nbytes: int) -> None:
        """Start reading object ``key`` (exactly ``nbytes``) into ``address``.

        Raises:
            ValueError: unknown key, another size, an operation on it in flight, or a
                destination that is not memory of this process.
            MemoryError: the read's bookkeeping cannot be allocated.
            OffloadIOError: the object has no stored data (its write failed).
        """
        handle = self._h()
        n, a = _size(nbytes), _address(address)
        code = _lib().hector_store_read(handle, int(key), a, n)
        if code == ERR_STATE:
            self._raise(key, code)
        if code == ERR_NOMEM:
            raise MemoryError(f"no memory to start a read of object {key} ({n} bytes)")
        if code != OK:
            raise ValueError(
                f"cannot read object {key} ({n} bytes into {a:#x}): unknown key, wrong size, "
                "an operation on it still in flight, or a destination that is not memory "
                "of this process"
            )

    def poll(self, key: int) -> bool:
        """True when no operation on ``key`` is in flight; raises if the last one failed."""
        code = _lib().hector_store_poll(self._h(), int(key))
        if code == PENDING:
            return False
        self._sources.pop(int(key), None)
        if code != OK:
            self._raise(key, code)
        return True

    def wait(self, key: int) -> None:
        """Wait for the operation on ``key``; raise :class:`OffloadIOError` if it failed."""
        code = _lib().hector_store_wait(self._h(), int(key))
        self._sources.pop(int(key), None)
        if code != OK:
            self._raise(key, code)

    def completions(self) -> list[int]:
        """Keys whose operation completed (successfully or not) since the last call."""
        out: list[int] = []
        while True:
            n = _lib().hector_store_completions(self._h(), self._keys, len(self._keys))
            out.extend(self._keys[:n])
            if n < len(self._keys):
                for key in out if self._sources else ():
                    self._sources.pop(key, None)
                return out

    def remove(self, key: int) -> None:
        """Forget ``key`` (after its in-flight operation, if any) and delete its file. With
        ``keep_files``, the file is kept instead for a later write of up to its size (at most
        twice as large), which renames and overwrites it (faster than a new file: no blocks
        to allocate, none to discard), while the store's files stay within the most it held
        at once; beyond that it is deleted. :meth:`close` deletes them all."""
        if self._handle is not None:
            if int(key) in self._sources:  # a write_array source: let go once written
                _lib().hector_store_wait(self._handle, int(key))
                self._sources.pop(int(key), None)
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
        """Start writing a C-contiguous array and return its key. The store holds the array
        until the write completes (seen by :meth:`wait`, :meth:`poll`, :meth:`completions`,
        :meth:`remove` or :meth:`close`), so a temporary is safe to pass."""
        if not array.flags.c_contiguous:
            raise ValueError("array must be C-contiguous")
        key = self.write(array.ctypes.data, array.nbytes)
        self._sources[key] = array
        return key

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
        """Bytes/objects moved, bytes on disk, bandwidths and where the store's time went.

        Keys (times in ns, summed over the threads that spent them; ``docs/offload-store.md``):
        ``backend`` (``"io_uring"`` or ``"threads"``), ``bytes_written``, ``bytes_read``,
        ``objects_written``, ``objects_read``, ``bytes_on_disk``, ``peak_bytes_on_disk``,
        ``write_busy_ns`` / ``read_busy_ns`` (wall time with an operation in flight),
        ``write_bandwidth`` / ``read_bandwidth`` (bytes per busy second); the caller's side:
        ``submit_ns`` (in :meth:`write` / :meth:`read`), ``write_wait_ns`` / ``read_wait_ns``
        (blocked in :meth:`wait`); the I/O threads': ``open_ns`` (creating/opening the files),
        ``copy_ns`` / ``copy_bytes`` (staging
        copies), ``crc_ns`` / ``crc_bytes`` (CRC32C and padding checks), ``ring_submit_ns``
        (io_uring submissions), ``write_io_ns`` / ``read_io_ns`` (request latencies summed),
        ``io_requests``, ``files_reused`` (writes that overwrote the kept file of a removed
        object instead of creating one); ``copies_avoided_bytes`` (bytes moved without the
        staging copy the previous design made) and ``registered_bytes`` (staging memory
        registered with io_uring).
        """
        out = (_I64 * len(_STATS))()
        n = int(_lib().hector_store_stats2(self._h(), out, len(out)))
        stats: dict[str, Any] = {name: int(out[i]) for i, name in enumerate(_STATS[:n])}
        stats["backend"] = _BACKEND_NAMES[stats["backend"]]
        for what in ("write", "read"):
            busy = stats[f"{what}_busy_ns"]
            moved = stats["bytes_written" if what == "write" else "bytes_read"]
            stats[f"{what}_bandwidth"] = moved / (busy * 1e-9) if busy else 0.0
        return stats


def empty_in_phase(nbytes: int, phase: int = 0) -> np.ndarray:
    """A new uint8 array of ``nbytes`` whose address is ``phase`` modulo 4096 (0: page-aligned),
    so that the store moves it without a staging copy (:meth:`TensorStore.phase`)."""
    if not 0 <= phase < 4096:
        raise ValueError(f"phase must be in [0, 4096), got {phase}")
    raw = np.empty(nbytes + 8192, dtype=np.uint8)
    start = (phase - raw.ctypes.data) % 4096
    return raw[start : start + nbytes]


def measure_raw_bandwidth(
    root: str | None = None,
    nbytes: int = 256 << 20,
    *,
    backend: str = "auto",
    threads: int = 4,
    chunk_bytes: int = 4 << 20,
    objects: int = 8,
    repeats: int = 3,
    direct: bool = True,
) -> dict[str, Any]:
    """Raw write and read bandwidth of the store on its own, as training would use it.

    Writes ``nbytes`` (split into ``objects`` page-aligned objects, all in flight at once) into
    a fresh store under ``root``, waits for them, reads them back into page-aligned buffers and
    checks every byte; ``repeats`` times. Returns the median MB/s (10^6 bytes per second of wall
    time) of each direction as ``write_MBps`` / ``read_MBps``, every repeat's figures, the
    backend that ran and the store's :meth:`TensorStore.stats` after the last repeat. The probe
    is :func:`hector.runtime.bandwidth.measure` over separate, checked targets
    (:class:`~hector.runtime.bandwidth.StorePieces`).
    """
    if nbytes < objects or objects < 1 or repeats < 1:
        raise ValueError("need nbytes >= objects >= 1 and repeats >= 1")
    size = nbytes // objects
    sources = [empty_in_phase(size) for _ in range(objects)]
    for i, a in enumerate(sources):
        a[:] = np.arange(size, dtype=np.uint64).astype(np.uint8) ^ np.uint8(i)
    targets = [empty_in_phase(size) for _ in range(objects)]
    with TensorStore(
        root, threads=threads, chunk_bytes=chunk_bytes, direct=direct, backend=backend
    ) as store:
        measured = measure(StorePieces(store, sources, targets), repeats)
        writes = [rate / 1e6 for rate in measured.write_rates()]
        reads = [rate / 1e6 for rate in measured.read_rates()]
        return {
            "backend": store.backend,
            "backend_reason": store.backend_reason,
            "direct": store.direct,
            "nbytes": size * objects,
            "objects": objects,
            "threads": threads,
            "chunk_bytes": chunk_bytes,
            "write_MBps": float(np.median(writes)),
            "read_MBps": float(np.median(reads)),
            "write_MBps_all": writes,
            "read_MBps_all": reads,
            "stats": store.stats(),
        }
