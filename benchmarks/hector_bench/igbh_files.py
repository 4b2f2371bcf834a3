"""Real IGBH folders in ``hector bench minibatch``: their own features and labels.

A dataset loaded from IGBH's files (``--dataset <size folder>``, see
:func:`hector.datasets.load_igbh`) brings its features: one ``node_feat.npy`` per node type, read
through a :class:`hector.data.typed_features.TypedFeatureStore`. Where they are stored in another
type than ``--feat-dtype`` asks (IGBH ships float32; MLPerf trains from float16), a type with
MLPerf's own float16 copy (``node_feat_fp16.pt``) is read from it in place, and every other
type's table is converted once, chunk by chunk, into the bench's private cache, keyed by the
source file's path, size and modification time; the dataset's own folder is only read.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from . import _cache

_CHUNK_ROWS = 1 << 14


def is_igbh(ds: Any) -> bool:
    """Whether ``ds`` was loaded from an IGBH folder."""
    return ds.info.get("layout") == "igbh"


def _converted(source: Path, table: Any, dtype: str, cache_dir: str) -> Path:
    """``source``'s ``table`` as ``dtype``, in the private cache (written on first use)."""
    stat = source.stat()
    key = f"{source.resolve()}:{stat.st_size}:{stat.st_mtime_ns}:{dtype}"
    digest = hashlib.blake2b(key.encode(), digest_size=8).hexdigest()
    folder = _cache.subdir(_cache.cache_root(cache_dir), f"igbh_{digest}")
    name = f"{source.parent.name}_node_feat_{dtype}.npy"
    if _cache.load_group(folder, name[:-4], [name]) is None:
        chunks = (
            np.asarray(table[i : i + _CHUNK_ROWS]).astype(dtype)
            for i in range(0, len(table), _CHUNK_ROWS)
        )
        producer = _cache.chunked_producer(np.dtype(dtype), tuple(table.shape), chunks)
        _cache.write_group(folder, name[:-4], {name: producer})
    return folder / name


def igbh_store(ds: Any, cache_dir: str, dim: int, classes: int, dtype: str) -> Any:
    """A :class:`~hector.data.typed_features.TypedFeatureStore` of the IGBH folder's features (as
    ``dtype``) and ``classes``-class labels; ValueError when the files are not ``dim`` wide."""
    from hector.data.loader import FeatureStore
    from hector.data.typed_features import TypedFeatureStore, igbh_features

    store = igbh_features(ds, classes=classes)
    if store.dim != dim:
        raise ValueError(f"{ds.name}: the features are {store.dim} wide; pass --feat {store.dim}")
    if store.dtype == np.dtype(dtype):
        return store
    store.close()  # the same labels, features in ``dtype``
    converted = {
        t: FeatureStore(_in_type(s, dtype, cache_dir), s.labels_path, classes=s.classes)
        for t, s in zip(store.node_types, store.stores, strict=True)
    }
    return TypedFeatureStore(ds, converted)


def _in_type(store: Any, dtype: str, cache_dir: str) -> Path:
    """A file of one node type's features in ``dtype``: MLPerf's float16 copy next to them
    where there is one, else the table converted once into the private cache."""
    from hector.data.igbh import MLPERF_FEATURE_FILE

    saved = store.path.parent / MLPERF_FEATURE_FILE
    if dtype == "float16" and saved.is_file():
        return saved
    return _converted(store.path, store.table, dtype, cache_dir)
