"""Out-of-core node features: ``.npy`` files whose rows each mini-batch reads, never loaded
whole.

:class:`FeatureTable` is what :class:`~hector.data.loader.NeighborLoader` reads of any store: its
rows and width, each batch's rows, the seeds' labels. :class:`FeatureStore` is the file-backed
one: float32 or float16 ``[N, F]`` tables (``.npy``, a saved tensor, or raw float32 rows) read
natively with ``pread`` in file order, several threads, into a reused buffer
(:class:`BufferPool`), or copied out of a mapping released chunk by chunk; labels are checked
to be class ids as they are gathered. :func:`write_random_features` writes a table to try it
on. The other stores are :class:`~hector.data.typed_features.TypedFeatureStore` (a file per node
type) and :class:`~hector.data.unified_features.UnifiedFeatureStore` (pinned memory read by the
GPU); all are importable from :mod:`hector.data.loader`, beside the loader that takes them.
"""

from __future__ import annotations

import mmap
import os
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..runtime import sampler as native_sampler
from .dataset import DatasetError
from .files import open_feature_table, open_npy

__all__ = [
    "FEATURE_DTYPES",
    "BufferPool",
    "FeatureStore",
    "FeatureTable",
    "check_classes",
    "read_npy",
    "write_random_features",
]

#: Linux maps up to this many bytes of cached pages around a faulting page (fault_around_bytes,
#: 64 KiB by default, aligned): a release must cover those too.
_FAULT_AROUND = 65536

#: With ``track_resident``, the resident size is read after every this many chunks (reading
#: ``/proc/self/smaps`` holds the GIL for tens of ms in a process with many mappings).
_TRACK_EVERY = 16

#: The feature types a :class:`FeatureStore` file may hold.
FEATURE_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))


class FeatureTable:
    """What :class:`NeighborLoader` reads of a feature table: its rows and width (by default
    ``self.table``'s shape), each batch's rows (``_gather``) and, where ``labels`` is set, the
    seeds' labels."""

    table: Any
    #: The labels, or None when the table has none.
    labels: Any = None

    def _gather(self, node_ids: Any, out: Any) -> tuple[torch.Tensor, float]:
        """Rows of ``node_ids`` (into ``out`` when given), and seconds spent on bookkeeping
        that timings leave out."""
        raise NotImplementedError

    def gather_labels(self, node_ids: Any) -> torch.Tensor:
        """Labels of ``node_ids`` as an int64 tensor."""
        raise NotImplementedError

    @property
    def num_rows(self) -> int:
        """Number of rows (nodes) N."""
        return int(self.table.shape[0])

    @property
    def dim(self) -> int:
        """Feature width F."""
        return int(self.table.shape[1])


class BufferPool:
    """Row buffers to gather batches into, reused once nothing refers to the batch that had
    one (a fresh array per batch costs a page fault per 4 KiB of it); a buffer whose batch is
    still referenced is never handed out again.

    Args:
        dim: row width.
        dtype: row type.
        reuse: keep buffers for reuse; False hands out a new array every time.
    """

    #: Buffers kept for reuse at most (the batch in training, the ones prefetched, one spare).
    POOL_SIZE = 4

    def __init__(self, dim: int, dtype: np.dtype, *, reuse: bool = True) -> None:
        """An empty pool."""
        self.dim, self.dtype, self.reuse = dim, dtype, reuse
        self._lock = threading.Lock()
        #: ``[buffer, weak reference to the view handed out or None]`` for reuse.
        self._slots: list[list[Any]] = []

    def clear(self) -> None:
        """Drop the kept buffers (batches still holding theirs keep them alive)."""
        with self._lock:
            self._slots = []

    def take(self, rows: int) -> np.ndarray:
        """A ``[rows, dim]`` array: a view of a kept buffer nothing else refers to any more
        (tracked by a weak reference to the view handed out), else new."""
        if not self.reuse:
            return np.empty((rows, self.dim), dtype=self.dtype)
        with self._lock:
            free = [s for s in self._slots if s[1] is None or s[1]() is None]
            fits = [s for s in free if len(s[0]) >= rows]
            if fits:
                slot = min(fits, key=lambda s: len(s[0]))
            elif free or len(self._slots) < self.POOL_SIZE:
                if free:  # too small for this batch: replace the smallest free one
                    smallest = min(free, key=lambda s: len(s[0]))
                    self._slots = [s for s in self._slots if s is not smallest]
                # Room for the next batches, whose sizes vary a little around this one.
                slot = [np.empty((rows + rows // 8 + 1, self.dim), dtype=self.dtype), None]
                self._slots.append(slot)
            else:
                return np.empty((rows, self.dim), dtype=self.dtype)
            view = slot[0][:rows]
            slot[1] = weakref.ref(view)
            return view


class FeatureStore(FeatureTable):
    """Node features (float32 or float16 ``[N, F]``) and optional labels (integer ``[N]``) in
    ``.npy`` files, gathered per batch without ever loading the table.

    Rows come back in the file's type: a float16 table (as MLPerf's R-GAT stores IGBH) moves
    half the bytes from disk and through the gather, and the model converts the batch (the
    natively gathered rows are copied as bytes, so a float16 table needs an even width). A
    table stored in the other byte order (an ``.npy`` of ``>f4``, a ``torch.save`` file written
    on a big-endian machine) is read in place as well: the rows gathered are swapped in the
    batch's buffer (:attr:`dtype` is always the machine's order).

    Args:
        features: path of a 2-D float32 or float16 ``.npy`` file, of such a tensor saved by
            ``torch.save`` (MLPerf's ``node_feat_fp16.pt``), or of a headerless file of
            1024-wide float32 rows (as IGBH's ``large`` and ``full`` sizes ship theirs).
        labels: path of a 1-D integer ``.npy`` file with as many rows, or None. Integer-valued
            floats (as IGBH stores its labels) are read as class ids. Every label gathered is
            checked (:meth:`gather_labels`); the file is never read whole.
        classes: the number of classes: every label gathered must be a class id in
            ``[0, classes)``; None: any id an int64 holds.
        read: how rows are read. ``"pread"`` (default): the native
            :func:`~hector.runtime.sampler.gather_file_rows` reads them with ``pread`` into the
            batch's buffer, in file order (ids bucketed by stretch of the file and sorted),
            wanted rows at most ``max_gap_bytes`` apart in one read, a repeated id read once;
            the file is never mapped, so none of it counts in this process's resident set (its
            pages stay in the OS page cache). ``"mmap"``: copy rows out of a memory mapping of
            the file (``release`` below).
        release: (``read="mmap"``) gather rows in file order, ``chunk_rows`` at a time, and
            after each chunk drop the stretch of the file it read from this process's mapping
            (``madvise(MADV_DONTNEED)``), so only about a chunk's stretch of the table is
            resident in the process at any time.
        threads: native gather threads; 0 (default): ``torch.get_num_threads()`` when the store
            is built.
        chunk_rows: (``read="mmap"``, ``release``) rows gathered between two releases.
        max_gap_bytes: (``read="pread"``) wanted rows at most this far apart share one read.
        reuse_buffers: gather into buffers kept from earlier batches once nothing refers to
            those batches' features any more (a fresh array per batch costs a page fault per
            4 KiB of it); a batch whose features are still referenced is never overwritten.

    Raises:
        ValueError: a file is missing, not an ``.npy`` array of the right dtype and rank, the
            two disagree in length, or ``read`` is unknown (a
            :class:`~hector.data.dataset.DatasetError` naming the file for a file's contents).
    """

    def __init__(
        self,
        features: str | os.PathLike[str],
        labels: str | os.PathLike[str] | None = None,
        *,
        classes: int | None = None,
        read: str = "pread",
        release: bool = True,
        threads: int = 0,
        chunk_rows: int = 1024,
        max_gap_bytes: int = 65536,
        reuse_buffers: bool = True,
    ) -> None:
        """Open the files (nothing is read yet)."""
        if read not in ("pread", "mmap"):
            raise ValueError(f"read must be 'pread' or 'mmap', got {read!r}")
        self.path = Path(features)
        if not self.path.is_file():
            raise ValueError(f"{self.path}: no such file")
        self.table = open_feature_table(self.path)  # .npy, a saved tensor, or raw f32 rows
        #: The rows' type, in this machine's byte order (the file's may be the other one).
        self.dtype = self.table.dtype.newbyteorder("=")
        #: Whether gathered rows are byte-swapped (a table stored in the other byte order).
        self._swap = not self.table.dtype.isnative
        if self.dtype not in FEATURE_DTYPES or self.table.ndim != 2:
            raise ValueError(
                f"{self.path}: features must be a 2-D float32 or float16 array, got "
                f"{self.table.dtype} of shape {self.table.shape}"
            )
        if self.table.dtype.itemsize * self.table.shape[1] % 4:
            raise ValueError(
                f"{self.path}: a float16 feature table needs an even width, got "
                f"{self.table.shape[1]}"
            )
        if not self.table.flags.c_contiguous:
            raise ValueError(f"{self.path}: features must be stored row-major (C order)")
        self.labels: np.ndarray | None = None
        self.labels_path = Path(labels) if labels is not None else None
        self.classes = check_classes(classes)
        if labels is not None:
            self.labels = read_npy(Path(labels))
            if self.labels.dtype.kind not in "iuf" or self.labels.ndim != 1:
                raise DatasetError(
                    f"{labels}: labels must be a 1-D integer (or float) array, got "
                    f"{self.labels.dtype} of shape {self.labels.shape}"
                )
            if len(self.labels) != len(self.table):
                raise ValueError(
                    f"{labels} has {len(self.labels)} rows but {self.path} has {len(self.table)}"
                )
        self.read = read
        self.release = release
        self.threads = int(threads) if threads > 0 else torch.get_num_threads()
        self.chunk_rows = max(int(chunk_rows), 1)
        self.max_gap_bytes = max(int(max_gap_bytes), 0)
        self._offset = int(self.table.offset) if isinstance(self.table, np.memmap) else 0
        self._fd: int | None = os.open(self.path, os.O_RDONLY) if read == "pread" else None
        self._lock = threading.Lock()
        self._buffers = BufferPool(self.dim, self.dtype, reuse=reuse_buffers)
        #: Set to record :attr:`peak_resident_bytes` during gathers (reads /proc/self/smaps after
        #: every 16th chunk).
        self.track_resident = False
        #: Most bytes of the feature file resident in this process at the end of a gather
        #: (before the release), while :attr:`track_resident` is set.
        self.peak_resident_bytes = 0

    def close(self) -> None:
        """Close the feature file (the store can no longer gather with ``read="pread"``)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:
        """Close the feature file."""
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown may have unloaded os
            pass

    @property
    def nbytes(self) -> int:
        """Size of the feature file in bytes."""
        return int(self.path.stat().st_size)

    def gather(self, node_ids: np.ndarray, out: np.ndarray | None = None) -> torch.Tensor:
        """Rows ``features[node_ids]`` as a ``[len(node_ids), F]`` tensor of the file's type
        (written into ``out`` when given, else into a reused or new buffer).

        Raises:
            ValueError: a node id is out of range, or the store is closed.
        """
        return self._gather(node_ids, out)[0]

    def clear_buffers(self) -> None:
        """Drop the kept gather buffers (batches still holding theirs keep them alive)."""
        self._buffers.clear()

    def _buffer(self, rows: int) -> np.ndarray:
        """A ``[rows, F]`` array of the file's type to gather into (see :class:`BufferPool`)."""
        return self._buffers.take(rows)

    def _gather(self, node_ids: np.ndarray, out: np.ndarray | None) -> tuple[torch.Tensor, float]:
        """:meth:`gather`, and the seconds spent on :attr:`track_resident` bookkeeping (so
        that timings can leave it out)."""
        index = native_sampler._ids("node_ids", node_ids)
        if out is None:
            out = self._buffer(len(index))
        if out.dtype != self.dtype:
            raise ValueError(f"out must be {self.dtype}, got {out.dtype}")
        words = out.view(np.float32)  # the native gathers copy rows as 4-byte words
        table = self.table.view(np.float32)
        tracking = 0.0
        if self.read == "pread":
            if self._fd is None:
                raise ValueError(f"{self.path}: the feature store is closed")
            native_sampler.gather_file_rows(
                self._fd,
                self._offset,
                table.shape,
                index,
                out=words,
                threads=self.threads,
                max_gap_bytes=self.max_gap_bytes,
            )
            if self.track_resident:
                tracking = self._track()
            return self._rows(out), tracking
        mapping = getattr(self.table, "_mmap", None) if self.release else None
        if mapping is None:
            native_sampler.gather_rows(table, index, out=words, threads=self.threads)
            if self.track_resident:
                tracking = self._track()
            return self._rows(out), tracking
        # A batch's rows are scattered over the whole file, and each page fault also maps the
        # cached pages around it (fault-around): gathered at once, a large batch maps in most
        # of the file. Gathered in file order, in chunks of chunk_rows rows, each chunk spans a
        # short stretch of the file that is released (madvise) right after it is copied.
        order = np.argsort(index, kind="stable")
        row_bytes = self.dim * self.table.dtype.itemsize
        base = self._offset
        window = max(mmap.PAGESIZE, _FAULT_AROUND)  # what one fault may map around it
        for lo in range(0, len(index), self.chunk_rows):
            at = order[lo : lo + self.chunk_rows]
            rows = index[at]
            words[at] = native_sampler.gather_rows(table, rows, threads=self.threads)
            if self.track_resident and (lo // self.chunk_rows) % _TRACK_EVERY == 0:
                tracking += self._track()  # smaps is slow to read: a sample of the chunks
            first = (base + int(rows[0]) * row_bytes) // window * window
            end = base + (int(rows[-1]) + 1) * row_bytes
            stop = min(-(-end // window) * window, len(mapping))
            with self._lock:
                mapping.madvise(mmap.MADV_DONTNEED, first, stop - first)
        return self._rows(out), tracking

    def _rows(self, out: np.ndarray) -> torch.Tensor:
        """The gathered rows as a tensor, swapped into this machine's byte order where the
        file holds the other one (the native gathers copy bytes)."""
        if self._swap:
            out.byteswap(inplace=True)
        return torch.from_numpy(out)

    def _track(self) -> float:
        """Update :attr:`peak_resident_bytes`; return the seconds it took."""
        start = time.perf_counter()
        self.peak_resident_bytes = max(self.peak_resident_bytes, self.resident_bytes() or 0)
        return time.perf_counter() - start

    def resident_bytes(self) -> int | None:
        """Bytes of the feature file resident in this process's mappings now (from
        ``/proc/self/smaps``), or None where that is unavailable."""
        target = os.path.realpath(self.path)
        total, inside = 0, False
        try:
            with open("/proc/self/smaps", encoding="utf-8", errors="replace") as f:
                for line in f:
                    first = line.split(maxsplit=1)[0]
                    if "-" in first and not first.endswith(":"):  # a mapping's header
                        inside = line.rstrip("\n").endswith(target)
                    elif inside and first == "Rss:":
                        total += int(line.split()[1]) * 1024
        except OSError:
            return None
        return total

    def gather_labels(self, node_ids: np.ndarray) -> torch.Tensor:
        """Labels of ``node_ids`` as an int64 tensor, each checked to be a class id: an
        integer (or integer-valued float) in ``[0, classes)`` (``classes`` None: one an int64
        holds). Negative labels (some datasets mark unlabeled nodes with -1) are refused too:
        seed only labeled nodes.

        Raises:
            ValueError: the store has no labels, or a node id is out of range.
            DatasetError: a label gathered is not a class id (naming the file, row and value).
        """
        if self.labels is None:
            raise ValueError("this FeatureStore has no labels file")
        index = native_sampler._ids("node_ids", node_ids)
        if len(index) and (int(index.min()) < 0 or int(index.max()) >= len(self.labels)):
            raise ValueError(f"node ids out of range for {len(self.labels)} labels")
        values = np.asarray(self.labels[index])
        bad = _not_class_ids(values, self.classes)
        if bad.any():
            at = int(np.argmax(bad))
            value = values[at].item()
            scope = f"[0, {self.classes})" if self.classes is not None else "[0, 2**63)"
            note = " (a negative label marks an unlabeled node: seed only labeled ones)"
            raise DatasetError(
                f"{self.labels_path}: label of row {int(index[at])} is {value!r}, not a class "
                f"id in {scope}{note if value < 0 else ''}"
            )
        return torch.from_numpy(values.astype(np.int64))


def check_classes(classes: int | None) -> int | None:
    """``classes`` as an int (None stays None); ValueError unless a positive integer."""
    if classes is None:
        return None
    if isinstance(classes, bool) or not isinstance(classes, int | np.integer) or classes < 1:
        raise ValueError(f"classes must be a positive integer or None, got {classes!r}")
    return int(classes)


def _not_class_ids(values: np.ndarray, classes: int | None) -> np.ndarray:
    """Where ``values`` (integers or floats, either byte order) are not class ids below
    ``classes`` (None: below 2**63)."""
    if values.dtype.kind == "f":  # IGBH stores class ids as floats
        top = float(classes) if classes is not None else 2.0**63
        with np.errstate(invalid="ignore"):
            return (
                ~np.isfinite(values) | (values != np.floor(values)) | (values < 0) | (values >= top)
            )
    top_id = classes - 1 if classes is not None else int(np.iinfo(np.int64).max)
    return (values < 0) | (values > top_id)


def read_npy(path: Path) -> np.ndarray:
    """A read-only mapping of the ``.npy`` array at ``path`` (in either byte order).

    Raises:
        ValueError: there is no such file; a :class:`~hector.data.dataset.DatasetError` (a
            ValueError) naming the file for contents that are not an ``.npy`` array.
    """
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    return open_npy(path)


def write_random_features(
    path: str | os.PathLike[str],
    num_rows: int,
    dim: int,
    *,
    seed: int = 0,
    chunk_rows: int = 1 << 16,
) -> Path:
    """Write a float32 ``[num_rows, dim]`` ``.npy`` file of standard normal features, chunk by
    chunk (never the whole table in memory). Returns the path."""
    path = Path(path)
    table = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(num_rows, dim))
    rng = np.random.default_rng(seed)
    for start in range(0, num_rows, chunk_rows):
        stop = min(num_rows, start + chunk_rows)
        table[start:stop] = rng.standard_normal((stop - start, dim), dtype=np.float32)
    table.flush()
    del table
    return path
