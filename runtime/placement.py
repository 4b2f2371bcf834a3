"""The frames compiled training steps offload their saved values in (``hector/placement.h``).

Generated code calls ``hector_place_write`` / ``wait`` / ``prefetch`` / ``release`` on the
*current frame* of its thread; this module opens one :class:`PlacementFrame` per training step
(over the process's :class:`~hector.runtime.offload.TensorStore`, or one a test hands in with
:func:`use_store`), makes it current around each compiled call, and turns the first failure the
frame recorded into an exception after the call returns:

* :class:`~hector.runtime.offload.OffloadIOError` (an ``OSError`` with ``errno`` ``ENOSPC``,
  ``EIO``, ...) when a write or read of the store failed,
* :class:`~hector.runtime.offload.ChecksumError` when data read back does not match its CRC32C.

A failed step's frame is closed at once (every stored object of the step deleted); so is a
frame whose step is abandoned (garbage-collected before its backward). Imports only ctypes and
the sibling runtime modules.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno as _errno
import functools
import threading
import weakref
from collections.abc import Iterator

from .offload import (
    ERR_CHECKSUM,
    ERR_SHORT,
    OK,
    ChecksumError,
    OffloadIOError,
    ShortIOError,
    TensorStore,
    _lib,
)

__all__ = ["PlacementFrame", "current_store", "use_store", "wait_stats"]

_P = ctypes.c_void_p
_I32 = ctypes.c_int32
_I64 = ctypes.c_int64
_STATS = ("bytes_written", "bytes_read", "objects_stored", "writes", "reads")

_lock = threading.Lock()
_store: TensorStore | None = None


@functools.cache
def _abi() -> ctypes.CDLL:
    """The native library with the placement functions declared."""
    lib = _lib()
    lib.hector_placement_abi_version.restype = _I32
    lib.hector_placement_frame_open.argtypes = [_P]
    lib.hector_placement_frame_open.restype = _P
    lib.hector_placement_frame_activate.argtypes = [_P]
    lib.hector_placement_frame_activate.restype = _P
    lib.hector_placement_frame_status.argtypes = [_P, ctypes.POINTER(_I32), ctypes.c_char_p, _I64]
    lib.hector_placement_frame_status.restype = _I32
    lib.hector_placement_frame_stats.argtypes = [_P, ctypes.POINTER(_I64)]
    lib.hector_placement_frame_stats.restype = _I32
    lib.hector_place_wait_stats.argtypes = [ctypes.POINTER(_I64)]
    lib.hector_place_wait_stats.restype = None
    lib.hector_placement_frame_close.argtypes = [_P]
    lib.hector_placement_frame_close.restype = _I32
    if lib.hector_placement_abi_version() != 1:
        raise RuntimeError("the native placement ABI has another version; reinstall Hector")
    return lib


def wait_stats() -> dict[str, int]:
    """Time generated code spent blocked waiting on the store since the process started (all
    frames): ``wait_write_ns`` (writes not yet done when their buffer was to be freed),
    ``wait_read_ns`` (reads not yet done at their first use) and ``waits``. The I/O that the
    step's kernels did not hide."""
    out = (_I64 * 3)()
    _abi().hector_place_wait_stats(out)
    return dict(zip(("wait_write_ns", "wait_read_ns", "waits"), (int(v) for v in out), strict=True))


def current_store() -> TensorStore:
    """The store offloaded saved values go to (opened on first use under the offload root,
    ``$HECTOR_OFFLOAD_DIR``; opening it removes the directories of crashed processes)."""
    global _store
    with _lock:
        if _store is None or _store.closed:
            _store = TensorStore()
        return _store


def use_store(store: TensorStore | None) -> TensorStore | None:
    """Make ``store`` the one later frames use (None: open the default one when needed);
    return the previous one."""
    global _store
    with _lock:
        previous, _store = _store, store
    return previous


def _close(handle: int) -> None:
    _abi().hector_placement_frame_close(handle)


class PlacementFrame:
    """The stored saved values of one training step (see the module docstring)."""

    def __init__(self, store: TensorStore | None = None) -> None:
        self.store = store if store is not None else current_store()
        handle = _abi().hector_placement_frame_open(self.store._h())
        if not handle:
            raise ValueError("cannot open a placement frame on a closed store")
        self._handle: int | None = handle
        self._finalizer = weakref.finalize(self, _close, handle)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._handle is None

    def close(self) -> None:
        """Wait for the frame's transfers and delete its stored objects (idempotent)."""
        if self._handle is not None:
            self._handle = None
            self._finalizer()

    @contextlib.contextmanager
    def current(self, what: str) -> Iterator[None]:
        """Make the frame current around compiled code (``what`` names it in errors); raise the
        frame's first failure afterwards, closing the frame."""
        if self._handle is None:
            raise ValueError(f"{what}: its placement frame is closed (the step was abandoned)")
        lib = _abi()
        previous = lib.hector_placement_frame_activate(self._handle)
        try:
            yield
        except BaseException:
            self.close()
            raise
        finally:
            lib.hector_placement_frame_activate(previous)
        self.check(what)

    def check(self, what: str) -> None:
        """Raise the frame's first failure (and close it), if any."""
        if self._handle is None:
            return
        err = _I32(0)
        buf = ctypes.create_string_buffer(2048)
        code = _abi().hector_placement_frame_status(self._handle, ctypes.byref(err), buf, len(buf))
        if code == OK:
            return
        self.close()
        message = f"{what}: {buf.value.decode(errors='replace')}"
        if code == ERR_CHECKSUM:
            raise ChecksumError(_errno.EIO, message, self.store.path)
        if code == ERR_SHORT:
            raise ShortIOError(_errno.EIO, message, self.store.path)
        raise OffloadIOError(err.value or _errno.EIO, message, self.store.path)

    def stats(self) -> dict[str, int]:
        """Bytes written and read, objects stored now, writes and reads issued."""
        if self._handle is None:
            return dict.fromkeys(_STATS, 0)
        out = (_I64 * 5)()
        _abi().hector_placement_frame_stats(self._handle, out)
        return dict(zip(_STATS, (int(v) for v in out), strict=True))
