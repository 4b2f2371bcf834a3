"""Sampled mini-batches for Hector's compiled layers: ``hector.data.loader.NeighborLoader``.

An iterable like PyG's ``NeighborLoader``: it shuffles seed nodes of one node type, cuts them
into batches, samples each batch's multi-hop neighbourhood with the native sampler
(:mod:`hector.runtime.sampler`: per-relation fan-outs, several threads, reproducible under a
seed) and yields :class:`Batch` objects whose ``graph`` is a :class:`hector.HeteroGraph` built
natively in the same pass (edges sorted by type, local ids grouped by node type, degree
normalizers, compaction map). Features and labels come from a :class:`FeatureStore`, ``.npy``
files whose rows each batch reads natively (``pread`` in file order, several threads, into a
reused buffer), never loaded whole or mapped. Batches are prepared by worker threads
``prefetch`` steps ahead (the native sampler and gather release the GIL), so a batch's
sampling and feature gather overlap the previous step's compute. Under ``torch.distributed``
each rank takes its shard of the seeds.

Every batch also converts to PyG inputs (:meth:`Batch.to_pyg`, :meth:`Batch.to_pyg_hetero`), so
PyG layers can be timed on the very same subgraphs::

    loader = NeighborLoader(ds, [10, 10], input_nodes="paper", batch_size=1024,
                            features=FeatureStore("feat.npy", "labels.npy"))
    for batch in loader:
        out = model(batch.graph, batch.x)[batch.seed_local]
        loss = F.cross_entropy(out, batch.y)
"""

from __future__ import annotations

import mmap
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..runtime import sampler as native_sampler
from .dataset import Dataset, DatasetError
from .files import open_feature_table, open_npy
from .graph import HeteroGraph

__all__ = [
    "Batch",
    "BufferPool",
    "FeatureStore",
    "FeatureTable",
    "NeighborLoader",
    "UnifiedFeatureStore",
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


# ---------------------------------------------------------------------------------------------
# Out-of-core features
# ---------------------------------------------------------------------------------------------


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
        self.classes = _check_classes(classes)
        if labels is not None:
            self.labels = self._open(Path(labels))
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

    @staticmethod
    def _open(path: Path) -> np.ndarray:
        if not path.is_file():
            raise ValueError(f"{path}: no such file")
        return open_npy(path)  # a DatasetError (a ValueError) naming the file

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


def _check_classes(classes: int | None) -> int | None:
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


class UnifiedFeatureStore(FeatureTable):
    """Node features in a :func:`hector.data.unified` tensor — pinned host memory that GPU kernels
    read zero-copy, PyTorch-Direct's setting for a table larger than the device — gathered
    per batch into GPU memory by Hector's gather kernel (:func:`hector.data.unified.gather`).
    Labels, when given, are kept on the GPU and gathered there.

    Args:
        features: a 2-D float32 tensor, or the path of a 2-D float32 ``.npy`` file (copied
            into pinned memory ``chunk_rows`` rows at a time through a read-only mapping).
        labels: a 1-D integer tensor or ``.npy`` path with as many rows, or None.
        classes: the number of classes: every label gathered must be a class id in
            ``[0, classes)`` (checked per gather, as :meth:`FeatureStore.gather_labels` does);
            None: any non-negative id.
        allow_host_fallback: without CUDA, keep the table in ordinary host memory (flagged as
            unified, ``mapped = False``) and gather with ``index_select`` on the host, so code
            written for the GPU runs unchanged; otherwise no CUDA is an error.
        chunk_rows: rows copied at a time from a file.

    Raises:
        ValueError: features or labels of the wrong dtype, rank or length (a
            :class:`~hector.data.dataset.DatasetError` for unsigned labels above int64's range,
            which no class id is).
        hector.data.unified.UnifiedError: no CUDA and ``allow_host_fallback`` is false.
    """

    def __init__(
        self,
        features: torch.Tensor | str | os.PathLike[str],
        labels: torch.Tensor | str | os.PathLike[str] | None = None,
        *,
        classes: int | None = None,
        allow_host_fallback: bool = False,
        chunk_rows: int = 1 << 16,
    ) -> None:
        """Copy the table (and labels) to where the gathers read them."""
        from . import unified

        source = _table(features)
        if _dtype_name(source) != "float32" or source.ndim != 2:
            raise ValueError(
                f"features must be a 2-D float32 table, got {source.dtype} of shape "
                f"{tuple(source.shape)}"
            )
        # One pinned allocation, filled in chunks: the source is never copied whole.
        self.table = unified.make_unified(
            torch.empty(tuple(source.shape), dtype=torch.float32),
            allow_host_fallback=allow_host_fallback,
        )
        self.mapped = unified.unified_info(self.table).mapped  # type: ignore[union-attr]
        self.device = torch.device("cuda" if self.mapped else "cpu")
        for lo in range(0, source.shape[0], max(int(chunk_rows), 1)):
            self.table[lo : lo + chunk_rows].copy_(_chunk(source, lo, lo + chunk_rows))
        self.labels: torch.Tensor | None = None
        if labels is not None:
            y = _table(labels)
            if not _dtype_name(y).startswith(("int", "uint")) or y.ndim != 1:
                raise ValueError(f"labels must be a 1-D integer array, got {y.dtype} {y.ndim}-D")
            if y.shape[0] != self.num_rows:
                raise ValueError(
                    f"labels have {y.shape[0]} rows but the features have {self.num_rows}"
                )
            if _dtype_name(y) == "uint64" and len(y) and int(y.max()) > np.iinfo(np.int64).max:
                raise DatasetError(f"{labels!s:.200}: a label above 2**63 - 1 is not a class id")
            self.labels = _chunk(y, 0, len(y)).to(self.device, torch.int64)
        self.classes = _check_classes(classes)
        #: The loader's bookkeeping of :class:`FeatureStore` (no file is mapped here).
        self.track_resident = False
        self.peak_resident_bytes = 0

    @property
    def nbytes(self) -> int:
        """Bytes of the table (pinned host memory)."""
        return int(self.table.untyped_storage().nbytes())

    def gather(self, node_ids: Any) -> torch.Tensor:
        """Rows ``features[node_ids]`` as a float32 ``[len(node_ids), F]`` tensor in GPU
        memory (host memory under the fallback).

        Raises:
            ValueError: a node id is out of range.
        """
        return self._gather(node_ids, None)[0]

    def _gather(self, node_ids: Any, out: Any) -> tuple[torch.Tensor, float]:
        from . import unified

        index = torch.from_numpy(native_sampler._ids("node_ids", node_ids))
        if len(index) and (int(index.min()) < 0 or int(index.max()) >= self.num_rows):
            raise ValueError(f"node ids out of range for a table of {self.num_rows} rows")
        return unified.gather(self.table, index), 0.0

    def gather_labels(self, node_ids: Any) -> torch.Tensor:
        """Labels of ``node_ids`` (int64, on the gathers' device).

        Raises:
            ValueError: the store has no labels, or a node id is out of range.
            DatasetError: a label gathered is not a class id.
        """
        if self.labels is None:
            raise ValueError("this UnifiedFeatureStore has no labels")
        ids = native_sampler._ids("node_ids", node_ids)
        if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= len(self.labels)):
            raise ValueError(f"node ids out of range for {len(self.labels)} labels")
        values = self.labels.index_select(0, torch.from_numpy(ids).to(self.device))
        top = self.classes if self.classes is not None else None
        bad = (values < 0) | (values >= top) if top is not None else values < 0
        if len(values) and bool(bad.any()):  # one device sync per batch
            at = int(torch.argmax(bad.to(torch.int8)))
            raise DatasetError(
                f"label of row {int(ids[at])} is {int(values[at])}, not a class id in "
                f"[0, {top if top is not None else '2**63'})"
            )
        return values

    def close(self) -> None:
        """Nothing to close (the pinned table is freed with the store)."""


def _table(source: torch.Tensor | str | os.PathLike[str]) -> torch.Tensor | np.ndarray:
    """``source`` itself, or a read-only mapping of an ``.npy`` file (in either byte order)."""
    if isinstance(source, torch.Tensor):
        return source
    return FeatureStore._open(Path(source))


def _dtype_name(table: torch.Tensor | np.ndarray) -> str:
    """``float32``, ``int64``, ... of a tensor or array (either byte order)."""
    return (
        str(table.dtype).removeprefix("torch.")
        if isinstance(table, torch.Tensor)
        else (table.dtype.newbyteorder("=").name)
    )


def _chunk(table: torch.Tensor | np.ndarray, lo: int, hi: int) -> torch.Tensor:
    """Rows ``lo:hi`` of a tensor, or of an array copied into this machine's byte order."""
    if isinstance(table, torch.Tensor):
        return table[lo:hi]
    return torch.from_numpy(np.array(table[lo:hi], dtype=table.dtype.newbyteorder("=")))


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


# ---------------------------------------------------------------------------------------------
# Batches
# ---------------------------------------------------------------------------------------------


@dataclass
class Batch:
    """One sampled mini-batch.

    Attributes:
        graph: the sampled subgraph as Hector's kernels read it (local ids grouped by node
            type; the seeds lead their type's block).
        node_ids: int64 [N], global (dataset) id of each local node.
        seed_local: int64 [B], local id of each seed (rows of the output to train on).
        ntype_ptr: int64 [T + 1], local id range of each node type.
        edge_ids: int64 [E], dataset edge id of each (sorted) edge.
        x: float32 [N, F] gathered input features (None without a feature store).
        y: int64 [B] labels of the seeds (None without labels).
        index: batch number within the epoch; epoch: the epoch.
        times: seconds spent ``sampling`` and in the feature ``gather``.
    """

    graph: HeteroGraph
    node_ids: torch.Tensor
    seed_local: torch.Tensor
    ntype_ptr: torch.Tensor
    edge_ids: torch.Tensor
    x: torch.Tensor | None = None
    y: torch.Tensor | None = None
    index: int = 0
    epoch: int = 0
    times: dict[str, float] = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        """Number of nodes N of the subgraph."""
        return self.graph.num_nodes

    @property
    def num_edges(self) -> int:
        """Number of edges E of the subgraph."""
        return self.graph.num_edges

    def hops(self) -> torch.Tensor:
        """int64 [N]: each node's distance in hops from the nearest seed along the sampled
        edges (messages flow from source to destination); N + 1 where none reaches one."""
        g = self.graph
        far = g.num_nodes + 1
        dist = torch.full((g.num_nodes,), far, dtype=torch.int64)
        dist[self.seed_local] = 0
        src, dst = g.src.long(), g.dst.long()
        for hop in range(g.num_nodes):
            reach = dist[dst] == hop
            if not bool(reach.any()):
                break
            step = torch.full_like(dist, far).index_fill_(0, src[reach], hop + 1)
            dist = torch.minimum(dist, step)
        return dist

    def layer_graphs(self, num_layers: int) -> list[HeteroGraph]:
        """The graph each layer of a ``num_layers``-layer model needs when only the seeds'
        outputs are used: layer ``l`` keeps the edges into nodes at most ``num_layers - 1 - l``
        hops from a seed, each such node with all its edges (its degree norms unchanged). No
        other edge can reach a seed's output, so the seeds' outputs and every gradient are those
        of the whole :attr:`graph`, while the last layers skip most edges (the outermost hop has
        most of them). Node ids are unchanged; a graph with every edge is :attr:`graph`."""
        g = self.graph
        into = self.hops()[g.dst.long()]
        graphs = []
        for layer in range(num_layers):
            keep = into <= num_layers - 1 - layer
            if bool(keep.all()):
                graphs.append(g)
                continue
            graphs.append(
                HeteroGraph.from_edge_index(
                    torch.stack([g.src[keep], g.dst[keep]]).long(),
                    g.etype[keep].long(),
                    num_nodes=g.num_nodes,
                    node_type=g.ntype,
                    num_etypes=g.num_etypes,
                    num_ntypes=g.num_ntypes,
                )
            )
        return graphs

    def x_dict(self, node_types: Sequence[str], x: torch.Tensor | None = None) -> dict:
        """``x`` (default: the batch's features) split into ``{node type: rows}`` in the
        graph's node type order (what ``hector.models.HGT`` and PyG's ``HGTConv`` take)."""
        x = self.x if x is None else x
        if x is None:
            raise ValueError("the batch has no features")
        ptr = self.ntype_ptr.tolist()
        return {t: x[ptr[i] : ptr[i + 1]] for i, t in enumerate(node_types)}

    def to_pyg(self) -> dict[str, torch.Tensor | None]:
        """PyG inputs of ``RGCNConv`` / ``RGATConv``: ``x``, ``edge_index`` [2, E] and
        ``edge_type`` [E] (int64), edges in the graph's order."""
        edge_index, edge_type = self.graph.edge_index_sorted()
        return {"x": self.x, "edge_index": edge_index, "edge_type": edge_type}

    def to_pyg_hetero(
        self, node_types: Sequence[str], edge_types: Sequence[tuple[str, str, str]]
    ) -> tuple[dict[str, torch.Tensor], dict[tuple[str, str, str], torch.Tensor]]:
        """PyG inputs of ``HGTConv``: ``(x_dict, edge_index_dict)`` with per-type local ids;
        ``node_types``/``edge_types`` in the dataset's order (``Dataset.metadata()``)."""
        g = self.graph
        ptr = self.ntype_ptr.tolist()
        eptr = g.etype_ptr.tolist()
        index = {t: i for i, t in enumerate(node_types)}
        src, dst = g.src.long(), g.dst.long()
        edge_index_dict = {}
        for r, (s, rel, d) in enumerate(edge_types):
            lo, hi = eptr[r], eptr[r + 1]
            edge_index_dict[(s, rel, d)] = torch.stack(
                [src[lo:hi] - ptr[index[s]], dst[lo:hi] - ptr[index[d]]]
            )
        return self.x_dict(node_types), edge_index_dict


# ---------------------------------------------------------------------------------------------
# The loader
# ---------------------------------------------------------------------------------------------


def _seed_ids(dataset: Dataset, input_nodes: Any) -> tuple[np.ndarray, int | None]:
    """Global seed ids and their node type index from ``input_nodes`` (see NeighborLoader)."""
    offsets = dataset.type_offsets()
    counts = dataset.num_nodes_dict()
    if input_nodes is None:
        return np.arange(dataset.num_nodes, dtype=np.int64), None
    if isinstance(input_nodes, str):
        input_nodes = (input_nodes, None)
    if isinstance(input_nodes, tuple):
        name, local = input_nodes
        if name not in offsets:
            raise ValueError(f"input_nodes names node type {name!r}; the graph has {list(offsets)}")
        t = dataset.node_types.index(name)
        if local is None:
            return np.arange(counts[name], dtype=np.int64) + offsets[name], t
        ids = native_sampler._ids("input_nodes", local)
        bad = np.flatnonzero((ids < 0) | (ids >= counts[name]))
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"input_nodes[{i}] = {int(ids[i])} is out of range for node type {name!r} "
                f"({counts[name]} nodes)"
            )
        return ids + offsets[name], t
    ids = native_sampler._ids("input_nodes", input_nodes)
    bad = np.flatnonzero((ids < 0) | (ids >= dataset.num_nodes))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"input_nodes[{i}] = {int(ids[i])} is out of range for {dataset.num_nodes} nodes"
        )
    return ids, None


def _fanouts(dataset: Dataset, num_neighbors: Any) -> np.ndarray:
    """``num_neighbors`` (a list per hop, or ``{relation: [per hop]}``) as a fan-out table."""
    r = dataset.num_relations
    if isinstance(num_neighbors, dict):
        names: dict[Any, int] = {et: i for i, et in enumerate(dataset.edge_types)}
        names.update({et[1]: i for i, et in enumerate(dataset.edge_types)})
        hops = {len(v) for v in num_neighbors.values()}
        if len(hops) != 1:
            raise ValueError("every relation of num_neighbors needs the same number of hops")
        table = np.zeros((hops.pop(), r), dtype=np.int32)
        for key, per_hop in num_neighbors.items():
            if key not in names:
                raise ValueError(f"num_neighbors names unknown relation {key!r}")
            table[:, names[key]] = per_hop
        return native_sampler.fanout_table(table.tolist(), r)
    return native_sampler.fanout_table(num_neighbors, r)


class NeighborLoader:
    """Mini-batches of sampled neighbourhoods, like PyG's ``NeighborLoader``.

    Args:
        dataset: a :class:`hector.datasets.Dataset` (node ids grouped by type).
        num_neighbors: fan-outs, one entry per hop: an int for every relation, a list with one
            int per relation, or ``{relation name or (src, rel, dst): [fan-out per hop]}``
            (relations not named get 0). ``-1`` takes every neighbour.
        input_nodes: the seeds: a node type name (all its nodes), ``(name, local ids)``, or
            global ids; None for every node.
        batch_size: seeds per batch (per rank).
        shuffle: shuffle the seeds every epoch (reproducibly, from ``seed`` and the epoch).
        drop_last: drop the last, smaller batch.
        seed: base random seed of shuffling and sampling.
        features: a :class:`FeatureStore` (a file read per batch), a
            :class:`~hector.data.typed_features.TypedFeatureStore` (a file per node type) or a
            :class:`UnifiedFeatureStore` (pinned memory read by the GPU) to gather ``x`` (and
            ``y``) from, or None.
        num_workers: threads preparing batches ahead (0: prepare in the iterating thread).
        prefetch: batches prepared ahead of the one being consumed (with workers).
        threads: native sampling threads per batch (0: one per hardware thread).
        rank, world_size: this process's shard of the seeds; by default taken from
            ``torch.distributed`` when it is initialized (else 0 and 1). Every rank gets the
            same number of batches.
        sampler: a prebuilt :class:`hector.runtime.sampler.NeighborSampler` of ``dataset``, to
            share one adjacency between loaders.

    Raises:
        ValueError: on an unknown node type or relation, seeds out of range, malformed
            fan-outs, a non-positive batch size, or a feature store of another size.
    """

    def __init__(
        self,
        dataset: Dataset,
        num_neighbors: Any,
        *,
        input_nodes: Any = None,
        batch_size: int = 1,
        shuffle: bool = False,
        drop_last: bool = False,
        seed: int = 0,
        features: FeatureTable | None = None,
        num_workers: int = 1,
        prefetch: int = 2,
        threads: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        sampler: native_sampler.NeighborSampler | None = None,
    ) -> None:
        """Build (or take) the native sampler and check the arguments."""
        if not isinstance(dataset, Dataset):
            raise TypeError(f"dataset must be a hector.datasets.Dataset, got {type(dataset)}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        for name, value in (("num_workers", num_workers), ("prefetch", prefetch)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        self.dataset = dataset
        self.fanouts = _fanouts(dataset, num_neighbors)
        self.seeds, self.seed_type = _seed_ids(dataset, input_nodes)
        self.batch_size = batch_size
        self.shuffle, self.drop_last, self.seed = shuffle, drop_last, int(seed)
        if features is not None and features.num_rows != dataset.num_nodes:
            raise ValueError(
                f"the feature store has {features.num_rows} rows but the graph has "
                f"{dataset.num_nodes} nodes"
            )
        self.features = features
        self.num_workers, self.prefetch, self.threads = num_workers, max(prefetch, 1), threads
        if world_size is None or rank is None:
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                rank, world_size = dist.get_rank(), dist.get_world_size()
            else:
                rank, world_size = 0, 1
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is out of range for world_size {world_size}")
        self.rank, self.world_size = int(rank), int(world_size)
        if sampler is None:
            sampler = native_sampler.NeighborSampler(
                dataset.edge_index[0],
                dataset.edge_index[1],
                dataset.edge_type,
                dataset.num_nodes,
                dataset.num_relations,
                dataset.node_type,
                max(len(dataset.node_types), 1),
            )
        elif (sampler.num_nodes, sampler.num_etypes) != (
            dataset.num_nodes,
            dataset.num_relations,
        ):
            raise ValueError("the sampler was built for another graph")
        self.sampler = sampler
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch (its shuffle and sampling seeds), as ``DistributedSampler``."""
        self.epoch = int(epoch)

    def _shard(self) -> np.ndarray:
        """This rank's seeds for the current epoch, in order."""
        seeds = self.seeds
        if self.shuffle:
            rng = np.random.default_rng([self.seed, self.epoch])
            seeds = seeds[rng.permutation(len(seeds))]
        per_rank = len(seeds) // self.world_size  # equal shards: every rank steps alike
        return seeds[self.rank * per_rank : (self.rank + 1) * per_rank]

    def __len__(self) -> int:
        """Batches per epoch on this rank."""
        n = len(self.seeds) // self.world_size
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _batch_seed(self, index: int) -> int:
        """Sampling seed of batch ``index``: a function of (seed, epoch, rank, index) only."""
        state = np.random.SeedSequence([self.seed, self.epoch, self.rank, index])
        return int(state.generate_state(1, np.uint64)[0])

    def sample(self, seeds: Any, *, index: int = 0, rng_seed: int | None = None) -> Batch:
        """Sample (and gather features for) one batch around global ``seeds``."""
        start = time.perf_counter()
        arrays = self.sampler.sample(
            seeds,
            self.fanouts.tolist(),
            seed=self._batch_seed(index) if rng_seed is None else rng_seed,
            threads=self.threads,
        )
        graph = HeteroGraph.from_layout(arrays, max(len(self.dataset.node_types), 1))
        sampled = time.perf_counter()
        batch = Batch(
            graph=graph,
            node_ids=torch.from_numpy(arrays.node_ids),
            seed_local=torch.from_numpy(arrays.seed_local.astype(np.int64)),
            ntype_ptr=torch.from_numpy(arrays.ntype_ptr.astype(np.int64)),
            edge_ids=torch.from_numpy(arrays.edge_ids),
            index=index,
            epoch=self.epoch,
        )
        tracking = 0.0
        if self.features is not None:
            batch.x, tracking = self.features._gather(arrays.node_ids, None)
            if self.features.labels is not None:
                batch.y = self.features.gather_labels(np.asarray(seeds, dtype=np.int64))
        gathered = time.perf_counter() - sampled - tracking
        batch.times = {"sampling": sampled - start, "gather": gathered}
        return batch

    def __iter__(self) -> Iterator[Batch]:
        """Yield this rank's batches of the current epoch, in order (workers prefetch)."""
        shard = self._shard()
        count = len(self)
        chunks = [shard[i * self.batch_size : (i + 1) * self.batch_size] for i in range(count)]
        if self.num_workers == 0:
            for i, chunk in enumerate(chunks):
                yield self.sample(chunk, index=i)
            return
        with ThreadPoolExecutor(self.num_workers, thread_name_prefix="hector-loader") as pool:
            pending: deque[Future[Batch]] = deque()
            ahead = self.prefetch + self.num_workers - 1
            next_i = 0
            try:
                while next_i < len(chunks) and len(pending) < ahead + 1:
                    pending.append(pool.submit(self.sample, chunks[next_i], index=next_i))
                    next_i += 1
                while pending:
                    batch = pending.popleft().result()
                    if next_i < len(chunks):
                        pending.append(pool.submit(self.sample, chunks[next_i], index=next_i))
                        next_i += 1
                    yield batch
            finally:
                for f in pending:
                    f.cancel()
