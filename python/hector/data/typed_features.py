"""Node features kept in one file per node type: :class:`TypedFeatureStore`, and
:func:`igbh_features` for IGBH's folders.

Real heterogeneous datasets store each node type's features apart (IGBH: ``paper/node_feat.npy``,
``author/node_feat.npy``, ...), while a :class:`hector.datasets.Dataset` numbers its nodes
globally, grouped by type. A :class:`TypedFeatureStore` puts the per-type
:class:`~hector.data.loader.FeatureStore` files behind the global ids: a batch's ids are split at
the type boundaries, each type's rows are read natively from its own file into their place in one
reused buffer, and labels come from the types that have them. It is what
:class:`~hector.data.loader.NeighborLoader` takes as ``features``::

    ds = hector.datasets.load_igbh("IGBH/small")
    loader = NeighborLoader(ds, [15, 10, 5], input_nodes="paper", batch_size=1024,
                            features=igbh_features(ds, classes=2983))
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..runtime import sampler as native_sampler
from .dataset import Dataset
from .feature_store import BufferPool, FeatureStore, FeatureTable
from .igbh import FEATURE_FILE, LABEL_FILES, check_name, dataset_file

__all__ = ["TypedFeatureStore", "igbh_features"]


class TypedFeatureStore(FeatureTable):
    """One :class:`~hector.data.loader.FeatureStore` per node type, read through global node ids.

    Args:
            dataset: the graph whose node ids (grouped by type) the store answers.
            stores: ``{node type: FeatureStore}`` for every node type of ``dataset``, each with as
                many rows as that type has nodes, all of one width and type; labels are read from
                the stores that have them.
            reuse_buffers: gather batches into reused buffers (see
    :class:`~hector.data.loader.BufferPool`).

    Raises:
            ValueError: a node type without a store (or a store for an unknown type), a store of
                another row count, width or type.
    """

    def __init__(
        self,
        dataset: Dataset,
        stores: Mapping[str, FeatureStore],
        *,
        reuse_buffers: bool = True,
    ) -> None:
        """Check the stores against the dataset's node types."""
        counts = dataset.num_nodes_dict()
        missing = [t for t in counts if t not in stores]
        unknown = [t for t in stores if t not in counts]
        if missing or unknown:
            raise ValueError(
                f"a feature store per node type is needed: missing {missing}, unknown {unknown}"
            )
        self.stores = [stores[t] for t in dataset.node_types]
        self.node_types = list(dataset.node_types)
        for t, store in zip(self.node_types, self.stores, strict=True):
            if store.num_rows != counts[t]:
                raise ValueError(
                    f"{store.path}: {store.num_rows} rows, but node type {t!r} has "
                    f"{counts[t]} nodes"
                )
            first = self.stores[0]
            if (store.dim, store.dtype) != (first.dim, first.dtype):
                raise ValueError(
                    f"{store.path}: {store.dtype} rows of width {store.dim}, but "
                    f"{first.path} has {first.dtype} rows of width {first.dim}"
                )
        #: Global id one past each node type's last node.
        self.bounds = np.cumsum([counts[t] for t in self.node_types])
        self.dtype = self.stores[0].dtype
        self.labels = next((s.labels for s in self.stores if s.labels is not None), None)
        self._buffers = BufferPool(self.dim, self.dtype, reuse=reuse_buffers)

    @property
    def num_rows(self) -> int:
        """Number of rows: the dataset's nodes."""
        return int(self.bounds[-1]) if len(self.bounds) else 0

    @property
    def dim(self) -> int:
        """Feature width F."""
        return self.stores[0].dim

    @property
    def nbytes(self) -> int:
        """Bytes of the feature files together."""
        return sum(s.nbytes for s in self.stores)

    @property
    def track_resident(self) -> bool:
        """Whether the stores record their resident bytes during gathers."""
        return any(s.track_resident for s in self.stores)

    @track_resident.setter
    def track_resident(self, value: bool) -> None:
        for s in self.stores:
            s.track_resident = value

    @property
    def peak_resident_bytes(self) -> int:
        """Sum of the stores' most resident bytes of their files at the end of a gather."""
        return sum(s.peak_resident_bytes for s in self.stores)

    def _split(self, node_ids: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The ids as int64, each one's node type and its id within that type."""
        ids = native_sampler._ids("node_ids", node_ids)
        if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= self.num_rows):
            raise ValueError(f"node ids out of range for {self.num_rows} nodes")
        types = np.searchsorted(self.bounds, ids, side="right")
        starts = np.concatenate([[0], self.bounds[:-1]])
        return ids, types, ids - starts[types]

    def gather(self, node_ids: Any) -> torch.Tensor:
        """Rows of ``node_ids`` (global) as a ``[len(node_ids), F]`` tensor of the files' type.

        Raises:
            ValueError: a node id is out of range, or a store is closed.
        """
        return self._gather(node_ids, None)[0]

    def _gather(self, node_ids: Any, out: np.ndarray | None) -> tuple[torch.Tensor, float]:
        """:meth:`gather`, and the seconds the stores spent tracking their resident bytes."""
        ids, types, local = self._split(node_ids)
        if out is None:
            out = self._buffers.take(len(ids))
        tracking = 0.0
        for t, store in enumerate(self.stores):
            at = np.flatnonzero(types == t)
            if not len(at):
                continue
            if int(at[-1]) - int(at[0]) + 1 == len(at):  # one stretch (the sampler's order)
                tracking += store._gather(local[at], out[int(at[0]) : int(at[-1]) + 1])[1]
            else:
                rows, spent = store._gather(local[at], None)
                out[at] = rows.numpy()
                tracking += spent
        return torch.from_numpy(out), tracking

    def gather_labels(self, node_ids: Any) -> torch.Tensor:
        """Labels of ``node_ids`` (global) as an int64 tensor.

        Raises:
            ValueError: a node's type has no labels file.
        """
        _, types, local = self._split(node_ids)
        out = torch.empty(len(local), dtype=torch.int64)
        for t in np.unique(types).tolist():
            if self.stores[t].labels is None:
                raise ValueError(f"node type {self.node_types[t]!r} has no labels")
            at = torch.from_numpy(np.flatnonzero(types == t))
            out[at] = self.stores[t].gather_labels(local[at.numpy()])
        return out

    def close(self) -> None:
        """Close every feature file."""
        for s in self.stores:
            s.close()


def igbh_features(
    dataset: Dataset,
    *,
    classes: int | None = 19,
    root: str | os.PathLike[str] | None = None,
    feature_file: str | Sequence[str] = FEATURE_FILE,
    **options: Any,
) -> TypedFeatureStore:
    """The features (and labels) of an IGBH dataset from :func:`hector.datasets.load_igbh`.

    Args:
        dataset: the loaded graph (its ``info["source"]`` is the folder read, unless ``root``).
        classes: 19 or 2983: read ``node_label_19.npy`` or ``node_label_2K.npy`` where a node
            type has it (IGBH: paper), every label gathered checked to be a class id in
            ``[0, classes)``; None reads no labels.
        root: the folder holding the node type folders (default: where ``dataset`` came from).
        feature_file: each node type's feature file name (``node_feat.npy``), or names tried
            in turn, the first present read: ``("node_feat_fp16.pt", "node_feat.npy")`` reads
            MLPerf's float16 copies (``torch.save`` files, mapped in place) where they exist.
        options: passed to every :class:`~hector.data.loader.FeatureStore` (``read``, ``threads``,
            ...).

    Raises:
        ValueError: an unknown number of classes, a node type without its feature file, no
            type with the labels file, or files the stores refuse (a
            :class:`~hector.data.dataset.DatasetError` for a node type or file name that is not a
            plain file name, or a file that is a link leading out of the folder).
    """
    if classes is not None and classes not in LABEL_FILES:
        raise ValueError(f"IGBH publishes labels of {sorted(LABEL_FILES)} classes, not {classes}")
    folder = Path(root if root is not None else dataset.info.get("source", ""))
    stores: dict[str, FeatureStore] = {}
    names = [feature_file] if isinstance(feature_file, str) else list(feature_file)
    for n in names:
        check_name(n, "feature file name", folder)
    for t in dataset.node_types:
        check_name(t, "node type", folder)
        present = [f for n in names if (f := dataset_file(folder, t, n)) is not None]
        if not present:
            raise ValueError(
                f"{folder / t / names[0]}: missing (node type {t!r} needs its features)"
            )
        labels = dataset_file(folder, t, LABEL_FILES[classes]) if classes is not None else None
        stores[t] = FeatureStore(present[0], labels, classes=classes, **options)
    store = TypedFeatureStore(dataset, stores)
    if classes is not None and store.labels is None:
        raise ValueError(f"{folder}: no node type has {LABEL_FILES[classes]}")
    return store
