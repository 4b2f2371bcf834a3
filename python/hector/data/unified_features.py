"""Node features in pinned host memory that GPU kernels gather per batch: the unified store.

PyTorch-Direct's setting for a feature table larger than the device: the table is one
:func:`hector.data.unified` tensor, filled chunk by chunk from a tensor or an ``.npy`` file, and
Hector's gather kernel (:func:`hector.data.unified.gather`) reads each batch's rows zero-copy
into GPU memory; labels live on the GPU and are gathered there. Without CUDA it can fall back to
ordinary host memory, so code written for the GPU runs unchanged.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..runtime import sampler as native_sampler
from .dataset import DatasetError
from .feature_store import FeatureTable, check_classes, read_npy

__all__ = ["UnifiedFeatureStore"]


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
        self.classes = check_classes(classes)
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
    return read_npy(Path(source))


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
