"""The write and read bandwidth a disk gives, measured one way for every caller.

A probe writes a known number of bytes to a *medium*, then reads them back, and times each
pass with :func:`time.perf_counter`; :func:`measure` is that probe and :class:`Bandwidth` its
result (bytes per second of wall time, the median over repeats). The media are the strategies
the callers differ in:

* :class:`DiskFile`: one file under a directory, written then read sequentially in fixed-size
  blocks, with ``O_DIRECT`` or through the page cache (``fsync`` ends the write pass; the
  buffered file's cached pages are dropped before it is read). :func:`disk_bandwidth` runs it,
  falling back to buffered I/O where the filesystem refuses direct I/O.
* :class:`StorePieces`: objects written all at once through an offload store (anything with
  ``write_array``, ``wait``, ``read`` and ``remove``, as
  :class:`hector.runtime.offload.TensorStore`), waited for, then read back;
  :func:`store_bandwidth` runs it on PyTorch-allocated pieces.

This module imports only the standard library and NumPy (PyTorch lazily, for
:meth:`StorePieces.filled`): the store is handed in, not imported.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

__all__ = [
    "Bandwidth",
    "DiskFile",
    "Medium",
    "StorePieces",
    "disk_bandwidth",
    "measure",
    "store_bandwidth",
]

#: The shortest pass a bandwidth is computed from (seconds): a guard against dividing by zero.
_SHORTEST_PASS_S = 1e-9


@dataclass(frozen=True)
class Bandwidth:
    """What one probe measured: ``nbytes`` moved each way per repeat, whether the medium
    bypassed the page cache, and every repeat's write and read pass in seconds."""

    nbytes: int
    direct: bool
    write_seconds: tuple[float, ...]
    read_seconds: tuple[float, ...]

    def write_rates(self) -> list[float]:
        """Each repeat's write bandwidth, bytes per second."""
        return [self.nbytes / max(s, _SHORTEST_PASS_S) for s in self.write_seconds]

    def read_rates(self) -> list[float]:
        """Each repeat's read bandwidth, bytes per second."""
        return [self.nbytes / max(s, _SHORTEST_PASS_S) for s in self.read_seconds]

    @property
    def write(self) -> float:
        """The median write bandwidth over the repeats, bytes per second."""
        return float(np.median(self.write_rates()))

    @property
    def read(self) -> float:
        """The median read bandwidth over the repeats, bytes per second."""
        return float(np.median(self.read_rates()))

    def as_record(self) -> dict[str, Any]:
        """``bytes``, ``direct``, ``write_bandwidth`` and ``read_bandwidth`` (bytes/s), as
        benchmark records keep a disk's figures."""
        return {
            "bytes": self.nbytes,
            "direct": self.direct,
            "write_bandwidth": self.write,
            "read_bandwidth": self.read,
        }


class Medium(Protocol):
    """Where a probe's bytes go: one write pass and one read pass of :attr:`nbytes`, timed by
    :func:`measure`, with untimed work after each (dropping caches, checking, removing)."""

    @property
    def nbytes(self) -> int:
        """Bytes moved by each pass."""
        ...

    @property
    def direct(self) -> bool:
        """Whether the passes bypass the page cache."""
        ...

    def write_pass(self) -> None:
        """Write every byte and wait until it is on the medium (timed)."""

    def after_write(self) -> None:
        """Untimed work between the write and the read pass."""

    def read_pass(self) -> None:
        """Read every byte back (timed)."""

    def after_read(self) -> None:
        """Untimed work after the read pass (checks, clean-up) before the next repeat."""


def measure(medium: Medium, repeats: int = 1) -> Bandwidth:
    """Time ``repeats`` write and read passes of ``medium``.

    Raises:
        ValueError: ``repeats`` below 1.
    """
    if repeats < 1:
        raise ValueError("need repeats >= 1")
    writes: list[float] = []
    reads: list[float] = []
    for _ in range(repeats):
        start = time.perf_counter()
        medium.write_pass()
        writes.append(time.perf_counter() - start)
        medium.after_write()
        start = time.perf_counter()
        medium.read_pass()
        reads.append(time.perf_counter() - start)
        medium.after_read()
    return Bandwidth(medium.nbytes, medium.direct, tuple(writes), tuple(reads))


# ---- one file, written then read sequentially --------------------------------------------------


class DiskFile:
    """One file of ``blocks`` blocks of ``block_bytes``, written then read in order from one
    page-aligned buffer (``pwritev``/``preadv``), ``fsync`` ending the write pass.

    With ``direct`` it is opened ``O_DIRECT`` where the filesystem accepts the flag
    (:attr:`direct` says whether it did); otherwise its cached pages are dropped
    (``POSIX_FADV_DONTNEED``) before the read pass, so both passes reach the disk. Open it with
    :meth:`opened`, which removes the file afterwards.
    """

    def __init__(self, path: str, block_bytes: int, blocks: int, direct: bool) -> None:
        self.path = path
        self.block_bytes = block_bytes
        self.blocks = blocks
        self.direct = direct
        self._fd = -1
        self._buf = mmap.mmap(-1, block_bytes)  # page-aligned, as O_DIRECT needs
        self._buf.write(os.urandom(4096) * (block_bytes // 4096))

    @property
    def nbytes(self) -> int:
        """Bytes moved by each pass."""
        return self.block_bytes * self.blocks

    @contextlib.contextmanager
    def opened(self) -> Iterator[DiskFile]:
        """Create the file (``O_DIRECT`` if asked and accepted), yield, close and remove it."""
        flags = os.O_CREAT | os.O_TRUNC | os.O_RDWR
        if self.direct:
            try:
                self._fd = os.open(self.path, flags | getattr(os, "O_DIRECT", 0), 0o600)
            except OSError:
                self.direct = False
        if self._fd < 0:
            self._fd = os.open(self.path, flags, 0o600)
        try:
            yield self
        finally:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1
            with contextlib.suppress(OSError):
                os.unlink(self.path)

    def write_pass(self) -> None:
        """Write every block in order, then ``fsync``."""
        for i in range(self.blocks):
            os.pwritev(self._fd, [self._buf], i * self.block_bytes)
        os.fsync(self._fd)

    def after_write(self) -> None:
        """Drop the file's cached pages unless it bypasses the cache."""
        if not self.direct:
            os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_DONTNEED)

    def read_pass(self) -> None:
        """Read every block in order."""
        for i in range(self.blocks):
            os.preadv(self._fd, [self._buf], i * self.block_bytes)

    def after_read(self) -> None:
        """Nothing: the next pass overwrites the same blocks."""


def disk_bandwidth(
    directory: str, nbytes: int = 256 << 20, block_bytes: int = 4 << 20, *, direct: bool = True
) -> Bandwidth:
    """One sequential write then read of ``nbytes`` (at least one block) in ``block_bytes``
    blocks, of a file under ``directory``: :class:`DiskFile`, with ``O_DIRECT`` when ``direct``
    and the filesystem allows it, buffered where it refuses the flag or the I/O."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f".hector-rawbw-{os.getpid()}")
    disk = DiskFile(path, block_bytes, max(nbytes // block_bytes, 1), direct)
    try:
        with disk.opened():
            return measure(disk)
    except OSError:
        if not disk.direct:
            raise
    # Some filesystems accept the flag but not the I/O.
    return disk_bandwidth(directory, nbytes, block_bytes, direct=False)


# ---- objects through an offload store --------------------------------------------------------


class StorePieces:
    """Objects written concurrently through ``store`` (all submitted, then all waited for) and
    read back, likewise. Read back into ``sources`` themselves when ``targets`` is None; into
    ``targets`` otherwise, each then checked against its source. Every object is removed after
    its read pass."""

    def __init__(
        self,
        store: Any,
        sources: Sequence[np.ndarray],
        targets: Sequence[np.ndarray] | None = None,
    ) -> None:
        self.store = store
        self.sources = list(sources)
        self.targets = list(targets) if targets is not None else None
        self._keys: list[int] = []

    @classmethod
    def filled(cls, store: Any, nbytes: int, pieces: int) -> StorePieces:
        """``pieces`` objects of ``nbytes // pieces`` bytes (at least 4096), piece ``i`` all
        ``i + 1``, read back in place.

        Allocated by PyTorch, not NumPy: NumPy marks its arrays of 4 MiB or more for huge pages
        (madvise), and the heap it hands them back to stays marked, so the training that reuses
        that memory would run partly on huge pages the process never asked for.
        """
        import torch

        size = max(nbytes // pieces, 4096)
        bufs = [torch.full((size,), i + 1, dtype=torch.uint8).numpy() for i in range(pieces)]
        return cls(store, bufs)

    @property
    def nbytes(self) -> int:
        """Bytes moved by each pass."""
        return sum(int(a.nbytes) for a in self.sources)

    @property
    def direct(self) -> bool:
        """Whether the store bypasses the page cache."""
        return bool(self.store.direct)

    def write_pass(self) -> None:
        """Submit every object, then wait for all of them."""
        self._keys = [self.store.write_array(a) for a in self.sources]
        for k in self._keys:
            self.store.wait(k)

    def after_write(self) -> None:
        """Nothing between the passes."""

    def read_pass(self) -> None:
        """Submit every read, then wait for all of them."""
        for k, out in zip(self._keys, self.targets or self.sources, strict=True):
            self.store.read(k, out.ctypes.data, out.nbytes)
        for k in self._keys:
            self.store.wait(k)

    def after_read(self) -> None:
        """Check what was read into separate targets, and remove every object.

        Raises:
            RuntimeError: an object read back differs from what was written.
        """
        targets = self.targets or self.sources
        for k, a, out in zip(self._keys, self.sources, targets, strict=True):
            if self.targets is not None and not np.array_equal(a, out):
                raise RuntimeError(f"object {k} read back differs from what was written")
            self.store.remove(k)
        self._keys = []


def store_bandwidth(store: Any, nbytes: int = 64 << 20, pieces: int = 16) -> Bandwidth:
    """Write then read back ``nbytes`` in ``pieces`` concurrent objects through ``store``
    (:meth:`StorePieces.filled`), once."""
    return measure(StorePieces.filled(store, nbytes, pieces))
