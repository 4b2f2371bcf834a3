"""Feature tables in files ``torch.save`` wrote: MLPerf's R-GAT reference converts IGBH's
paper and author features to float16 once and saves them as ``node_feat_fp16.pt``. Such a file
is a zip archive whose one tensor's bytes are an uncompressed record: the feature store
memory-maps that record and gathers its rows as from an ``.npy`` file (never the whole table).
The tensor's type and shape come from ``torch.load(..., weights_only=True, mmap=True)``, which
runs no code from the file. Anything else is a clean error naming the file.
"""

from __future__ import annotations

import pickle
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from test_api_properties import FUZZ, classify
from test_dataset_igbh import COUNTS, write_igbh

from hector import datasets
from hector.data.files import open_feature_table
from hector.data.igbh import MLPERF_FEATURE_FILE
from hector.data.loader import FeatureStore
from hector.data.typed_features import igbh_features
from hector.datasets import DatasetError


@pytest.mark.parametrize("read", ["pread", "mmap"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_a_saved_tensor_is_gathered_in_place(tmp_path: Path, read: str, dtype: torch.dtype) -> None:
    x = torch.randn(300, 16).to(dtype)
    f = tmp_path / "x.pt"
    torch.save(x, f)
    table = open_feature_table(f)
    assert isinstance(table, np.memmap)
    assert table.offset > 0  # the record's bytes, past the archive's headers
    store = FeatureStore(f, read=read)
    rows = np.array([299, 0, 7, 7, 150])
    assert torch.equal(store.gather(rows), x[rows])
    store.close()


def test_a_view_is_read_at_its_storage_offset(tmp_path: Path) -> None:
    """``torch.save`` of a row slice keeps the whole storage: the table starts at the view."""
    x = torch.randn(50, 8).half()
    torch.save(x[10:30], tmp_path / "x.pt")
    store = FeatureStore(tmp_path / "x.pt")
    assert torch.equal(store.gather(np.arange(20)), x[10:30])
    store.close()


def test_mlperf_float16_copies_feed_the_igbh_store(tmp_path: Path) -> None:
    """Each node type's ``node_feat_fp16.pt`` next to IGBH's ``node_feat.npy``, as MLPerf's
    reference writes them: ``igbh_features`` takes the first file name present per type."""
    root = tmp_path / "tiny"
    written = write_igbh(root, dim=8)
    for t, x in written["features"].items():
        torch.save(torch.from_numpy(x).half(), root / "processed" / t / MLPERF_FEATURE_FILE)
    ds = datasets.load_igbh(root)
    store = igbh_features(ds, classes=19, feature_file=(MLPERF_FEATURE_FILE, "node_feat.npy"))
    assert store.dtype == np.float16
    rows = store.gather(np.arange(ds.num_nodes))
    table = np.concatenate([written["features"][t] for t in ds.node_types]).astype(np.float16)
    assert torch.equal(rows, torch.from_numpy(table))
    store.close()
    assert sum(COUNTS.values()) == ds.num_nodes


class _Planted:
    """A pickle that would run ``print`` when loaded without ``weights_only``."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (print, ("planted",))


_REFUSED = {
    "a dict": (lambda: {"x": torch.zeros(4, 4)}, "expected one row-major 2-D"),
    "a vector": (lambda: torch.zeros(16), "expected one row-major 2-D"),
    "integers": (lambda: torch.zeros(4, 4, dtype=torch.int32), "expected one row-major 2-D"),
    "a transpose": (lambda: torch.zeros(4, 6).t(), "expected one row-major 2-D"),
    "a planted object": (_Planted, "not a tensor file torch.save wrote"),
}


@pytest.mark.parametrize("case", sorted(_REFUSED))
def test_other_saved_objects_are_refused_naming_the_file(tmp_path: Path, case: str) -> None:
    make, message = _REFUSED[case]
    f = tmp_path / "node_feat_fp16.pt"
    torch.save(make(), f)
    with pytest.raises(DatasetError, match=message) as err:
        open_feature_table(f)
    assert str(f) in str(err.value)


def test_a_legacy_or_plain_pickle_is_refused(tmp_path: Path) -> None:
    """Only the zip format (``torch.save``'s since PyTorch 1.6) has records to map."""
    f = tmp_path / "x.pt"
    torch.save(torch.zeros(4, 4), f, _use_new_zipfile_serialization=False)
    with pytest.raises(DatasetError, match="not a tensor file torch.save wrote"):
        open_feature_table(f)
    f.write_bytes(pickle.dumps(np.zeros((4, 4), np.float32)))
    with pytest.raises(DatasetError, match="not a tensor file torch.save wrote"):
        open_feature_table(f)


def _saved() -> bytes:
    with tempfile.TemporaryDirectory() as d:
        torch.save(torch.arange(40, dtype=torch.float16).reshape(5, 8), Path(d) / "x.pt")
        return (Path(d) / "x.pt").read_bytes()


_SAVED = _saved()


@FUZZ
@given(
    st.lists(
        st.tuples(st.integers(0, len(_SAVED) - 1), st.integers(0, 255)), min_size=1, max_size=4
    ),
    st.sampled_from([None, 0, 30, 100, len(_SAVED) // 2, len(_SAVED) - 22]),
)
def test_a_corrupted_tensor_file_reads_what_it_holds_or_is_a_clean_error(
    edits: list[tuple[int, int]], cut: int | None
) -> None:
    """Bytes overwritten anywhere, or the file cut short: the store reads rows of the file's
    own bytes where ``torch.load`` still finds the tensor, else refuses naming the file."""
    data = bytearray(_SAVED)
    for at, value in edits:
        data[at] = value
    data = data[:cut] if cut is not None else data
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "node_feat_fp16.pt"
        f.write_bytes(bytes(data))

        def read() -> Any:
            store = FeatureStore(f)
            try:
                return store.gather(np.arange(store.num_rows))
            finally:
                store.close()

        outcome, result = classify(read, clean=(ValueError,))
        if outcome == "accepted":  # the rows torch.load maps from the same file
            assert torch.equal(result, torch.load(f, mmap=True, weights_only=True))
    if outcome != "accepted":
        assert "node_feat_fp16.pt" in str(result), result
