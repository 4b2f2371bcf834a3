"""What the dataset and feature loaders check of their files (issue 58): a table stored in the
other byte order reads as ``np.load``/``torch.load`` read it, a ``torch.save`` archive's
records are found under its own top folder, a byte-order mark is never part of a name, edge
files must hold plain integers, every label handed on is a class id, and IGBH's names are plain
file names whose files stay inside the dataset folder. Each test here failed before those
checks; every value read is compared with NumPy's or PyTorch's reading of the same file.
"""

from __future__ import annotations

import codecs
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from test_dataset_igbh import write_igbh

from hector import datasets
from hector.data.files import open_feature_table
from hector.data.loader import FeatureStore, UnifiedFeatureStore
from hector.data.typed_features import igbh_features
from hector.datasets import DatasetError


def big_endian_copy(src: Path, dst: Path) -> None:
    """``src`` (a little-endian ``torch.save`` file of one floating tensor) as a file written
    on a big-endian machine: the byte-order record says ``big`` and every value is swapped."""
    t = torch.load(src, weights_only=True)
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w") as out:
        for info in z.infolist():
            data = z.read(info)
            if info.filename.endswith("/byteorder"):
                data = b"big"
            elif "/data/" in info.filename and not info.filename.endswith(".pkl"):
                storage = t.untyped_storage()
                raw = np.frombuffer(bytes(storage), dtype=t.numpy().dtype)
                data = raw.astype(raw.dtype.newbyteorder(">")).tobytes()
            out.writestr(info, data)


# ---- class 2: byte order -------------------------------------------------------------------


@pytest.mark.parametrize("read", ["pread", "mmap"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_a_big_endian_saved_table_reads_as_torch_load(
    tmp_path: Path, read: str, dtype: torch.dtype
) -> None:
    x = (torch.randn(40, 6) * 100).to(dtype)
    torch.save(x, tmp_path / "little.pt")
    big_endian_copy(tmp_path / "little.pt", tmp_path / "node_feat_fp16.pt")
    expected = torch.load(tmp_path / "node_feat_fp16.pt", weights_only=True)
    assert torch.equal(expected, x)  # the copy is a faithful big-endian file
    store = FeatureStore(tmp_path / "node_feat_fp16.pt", read=read)
    rows = np.array([39, 0, 7, 7, 20])
    assert store.dtype == np.dtype(np.float16 if dtype == torch.float16 else np.float32)
    assert torch.equal(store.gather(rows), x[rows])
    assert torch.equal(store.gather(rows), x[rows])  # the reused buffer is swapped afresh
    store.close()


@pytest.mark.parametrize("read", ["pread", "mmap"])
@pytest.mark.parametrize("dtype", [">f4", ">f2"])
def test_a_big_endian_npy_table_and_labels_read_as_numpy(
    tmp_path: Path, read: str, dtype: str
) -> None:
    x = (np.random.default_rng(0).standard_normal((30, 4)) * 100).astype(dtype)
    y = np.arange(30, dtype=">i8") % 19
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    store = FeatureStore(tmp_path / "x.npy", tmp_path / "y.npy", classes=19, read=read)
    rows = np.array([29, 3, 3, 0])
    assert np.array_equal(store.gather(rows).numpy(), np.load(tmp_path / "x.npy")[rows])
    assert torch.equal(store.gather_labels(rows), torch.from_numpy(y[rows].astype(np.int64)))
    store.close()


def test_the_unified_store_reads_big_endian_files(tmp_path: Path) -> None:
    x = np.arange(24, dtype=">f4").reshape(6, 4)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", np.arange(6, dtype=">i4"))
    store = UnifiedFeatureStore(tmp_path / "x.npy", tmp_path / "y.npy", allow_host_fallback=True)
    ids = np.array([5, 0])
    assert np.array_equal(store.gather(ids).cpu().numpy(), x[ids])
    assert store.gather_labels(ids).tolist() == [5, 0]


# ---- class 9: the archive's prefix ---------------------------------------------------------


@pytest.mark.parametrize("name", ["data.pt", "byteorder.pt", "x.pt"])
def test_a_saved_table_is_found_whatever_the_archive_prefix(tmp_path: Path, name: str) -> None:
    """``torch.save`` names the archive's top folder after the file: ``data.pt`` has
    ``data/data.pkl``, ``data/byteorder``, ``data/data/0``."""
    x = torch.randn(12, 4)
    torch.save(x, tmp_path / name)
    store = FeatureStore(tmp_path / name)
    assert torch.equal(store.gather(np.arange(12)), x)
    store.close()


def test_an_archive_with_a_second_storage_record_is_refused(tmp_path: Path) -> None:
    torch.save(torch.zeros(4, 4), tmp_path / "x.pt")
    with zipfile.ZipFile(tmp_path / "x.pt", "a") as z:
        z.writestr("x/data/1", b"\0" * 64)
    with pytest.raises(DatasetError, match="expected one tensor record x/data/<key>"):
        open_feature_table(tmp_path / "x.pt")


# ---- class 5: byte-order marks -------------------------------------------------------------

_TRIPLES = "a\tr\tb\nb\tr\ta\n"


@pytest.mark.parametrize(
    "encoded",
    [
        codecs.BOM_UTF8 + _TRIPLES.encode("utf-8"),
        _TRIPLES.encode("utf-16"),  # with its mark, in this machine's order
        codecs.BOM_UTF16_BE + _TRIPLES.encode("utf-16-be"),
        codecs.BOM_UTF32_LE + _TRIPLES.encode("utf-32-le"),
    ],
    ids=["utf-8", "utf-16", "utf-16-be", "utf-32-le"],
)
def test_a_byte_order_mark_picks_the_encoding_and_is_no_part_of_a_name(
    tmp_path: Path, encoded: bytes
) -> None:
    f = tmp_path / "t.tsv"
    f.write_bytes(encoded)
    ds = datasets.load_triples(f)
    assert ds.info["entity_names"] == ["a", "b"]
    assert ds.edge_index.tolist() == [[0, 1], [1, 0]]


def test_a_mark_the_given_encoding_keeps_is_dropped(tmp_path: Path) -> None:
    f = tmp_path / "t.tsv"
    f.write_bytes(codecs.BOM_UTF8 + _TRIPLES.encode("utf-8"))
    assert datasets.load_triples(f, encoding="utf-8").info["entity_names"] == ["a", "b"]
    f.write_bytes(codecs.BOM_UTF16_LE + _TRIPLES.encode("utf-16-le"))
    assert datasets.load_triples(f, encoding="utf-16-le").info["entity_names"] == ["a", "b"]


@pytest.mark.parametrize(
    ("encoded", "encoding"),
    [(_TRIPLES.encode("utf-16"), "utf-8"), (codecs.BOM_UTF8 + b"a\tr\tb\n", "latin-1")],
    ids=["utf-16-as-utf-8", "utf-8-as-latin-1"],
)
def test_a_mark_of_another_encoding_is_a_clean_error(
    tmp_path: Path, encoded: bytes, encoding: str
) -> None:
    f = tmp_path / "t.tsv"
    f.write_bytes(encoded)
    with pytest.raises(DatasetError, match="byte-order mark") as err:
        datasets.load_triples(f, encoding=encoding)
    assert str(f) in str(err.value)


# ---- class 6: dtype kinds of edge files ----------------------------------------------------

_NOT_INTEGERS = {
    "timedelta64": np.arange(8, dtype="m8[s]"),
    "datetime64": np.arange(8).astype("M8[D]"),
    "bool": np.ones(8, dtype=bool),
    "float": np.arange(8, dtype=np.float64),
    "complex": np.arange(8, dtype=np.complex64),
}


@pytest.mark.parametrize("kind", sorted(_NOT_INTEGERS))
def test_an_edge_file_of_another_kind_is_a_dataset_error(tmp_path: Path, kind: str) -> None:
    values = _NOT_INTEGERS[kind]
    (tmp_path / "coo").mkdir()
    np.save(tmp_path / "coo" / "cites_coo.npy", values.reshape(2, 4))
    with pytest.raises(DatasetError, match="expected an integer array"):
        datasets.load_coo_dir(tmp_path / "coo")
    root = tmp_path / "igbh"
    write_igbh(root)
    np.save(root / "processed" / "paper__cites__paper" / "edge_index.npy", values.reshape(4, 2))
    with pytest.raises(DatasetError, match="expected an integer array"):
        datasets.load_igbh(root)


def test_big_endian_edges_load_as_numpy_reads_them(tmp_path: Path) -> None:
    root = tmp_path / "igbh"
    written = write_igbh(root)
    f = root / "processed" / "paper__cites__paper" / "edge_index.npy"
    edges = written["edges"][("paper", "cites", "paper")]
    np.save(f, edges.astype(">i8"))
    ds = datasets.load_igbh(root, add_inverse=False)
    cites = ds.edge_types.index(("paper", "cites", "paper"))
    first_paper = int(np.flatnonzero(ds.node_type.numpy() == ds.node_types.index("paper"))[0])
    loaded = ds.edge_index[:, ds.edge_type == cites].T - first_paper
    assert loaded.tolist() == edges.tolist()


# ---- class 7: labels against the classes, ids against the rows -----------------------------


@pytest.mark.parametrize("label", [1e30, -3.0, 500.0, 19.0, float("nan"), 2.5])
def test_a_float_label_that_is_no_class_id_is_refused(tmp_path: Path, label: float) -> None:
    root = tmp_path / "igbh"
    written = write_igbh(root)
    y = written["y19"].copy()
    y[4] = label
    np.save(root / "processed" / "paper" / "node_label_19.npy", y)
    ds = datasets.load_igbh(root)
    store = igbh_features(ds, classes=19)
    paper = ds.node_types.index("paper")
    first = int(np.flatnonzero(ds.node_type.numpy() == paper)[0])
    assert store.gather_labels(np.array([first + 3])).item() == int(y[3])
    with pytest.raises(DatasetError, match=r"label of row 4 is .*not a class id in \[0, 19\)"):
        store.gather_labels(np.array([first + 3, first + 4]))
    store.close()


@pytest.mark.parametrize("label", [-3, -1, 500, 2983, np.iinfo(np.int64).min])
def test_an_integer_label_outside_the_classes_is_refused(tmp_path: Path, label: int) -> None:
    y = np.arange(10, dtype=np.int64) % 19
    y[6] = label
    np.save(tmp_path / "y.npy", y)
    np.save(tmp_path / "x.npy", np.zeros((10, 4), np.float32))
    store = FeatureStore(tmp_path / "x.npy", tmp_path / "y.npy", classes=19)
    assert store.gather_labels(np.array([5, 7])).tolist() == [5, 7]
    with pytest.raises(DatasetError, match="label of row 6") as err:
        store.gather_labels(np.array([6]))
    assert ("unlabeled" in str(err.value)) == (label < 0)
    store.close()


def test_label_ids_out_of_range_are_refused_not_wrapped(tmp_path: Path) -> None:
    np.save(tmp_path / "y.npy", np.arange(10, dtype=np.int64))
    np.save(tmp_path / "x.npy", np.zeros((10, 4), np.float32))
    store = FeatureStore(tmp_path / "x.npy", tmp_path / "y.npy")
    for ids in ([-1], [10], [3, 2**40]):
        with pytest.raises(ValueError, match="out of range"):
            store.gather_labels(np.array(ids))
    store.close()


def test_unsigned_labels_above_int64_are_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "y.npy", np.array([1, 2**63 + 5], dtype=np.uint64))
    np.save(tmp_path / "x.npy", np.zeros((2, 4), np.float32))
    store = FeatureStore(tmp_path / "x.npy", tmp_path / "y.npy")
    assert store.gather_labels(np.array([0])).tolist() == [1]
    with pytest.raises(DatasetError, match="not a class id"):
        store.gather_labels(np.array([1]))
    store.close()


# ---- class 8: names and links --------------------------------------------------------------


@pytest.mark.parametrize("folder", ["..__cites__paper", "paper__cites__..", ".x__r__paper"])
def test_a_relation_folder_naming_a_path_is_refused(tmp_path: Path, folder: str) -> None:
    root = tmp_path / "igbh"
    write_igbh(root)
    (root / "processed" / folder).mkdir()
    np.save(root / "processed" / folder / "edge_index.npy", np.zeros((1, 2), np.int64))
    np.save(tmp_path / "node_feat.npy", np.zeros((5, 8), np.float32))  # outside the dataset
    with pytest.raises(DatasetError, match="is not a plain file name"):
        datasets.load_igbh(root)


@pytest.mark.parametrize("name", ["../igbh", "a/b", "", "x\x00y", "tab\there"])
def test_node_types_given_must_be_plain_names(tmp_path: Path, name: str) -> None:
    root = tmp_path / "igbh"
    write_igbh(root)
    types = ["paper", "author", "institute", "fos", name]
    with pytest.raises(DatasetError, match="is not a plain file name"):
        datasets.load_igbh(root, node_types=types)


def test_a_feature_file_linked_from_outside_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "igbh"
    write_igbh(root)
    outside = tmp_path / "secret.npy"
    np.save(outside, np.zeros((20, 8), np.float32))
    feat = root / "processed" / "author" / "node_feat.npy"
    feat.unlink()
    feat.symlink_to(outside)
    with pytest.raises(DatasetError, match="a link leading out of the dataset folder"):
        datasets.load_igbh(root)


def test_links_inside_the_dataset_folder_are_followed(tmp_path: Path) -> None:
    root = tmp_path / "igbh"
    written = write_igbh(root)
    feat = root / "processed" / "author" / "node_feat.npy"
    feat.rename(root / "processed" / "author" / "copy.npy")
    feat.symlink_to("copy.npy")
    ds = datasets.load_igbh(root)
    store = igbh_features(ds, classes=None)
    author = ds.node_types.index("author")
    ids = np.flatnonzero(ds.node_type.numpy() == author)
    assert np.array_equal(store.gather(ids).numpy(), written["features"]["author"])
    store.close()


def test_a_coo_file_linked_from_outside_or_a_fifo_is_refused(tmp_path: Path) -> None:
    (tmp_path / "coo").mkdir()
    np.save(tmp_path / "outside.npy", np.zeros((2, 3), np.int64))
    (tmp_path / "coo" / "cites_coo.npy").symlink_to(tmp_path / "outside.npy")
    with pytest.raises(DatasetError, match="a link leading out of the dataset folder"):
        datasets.load_coo_dir(tmp_path / "coo")
    (tmp_path / "coo" / "cites_coo.npy").unlink()
    os.mkfifo(tmp_path / "coo" / "cites_coo.npy")  # opening it would block forever
    with pytest.raises(DatasetError, match="not a regular file"):
        datasets.load_coo_dir(tmp_path / "coo")


def test_a_fifo_feature_file_is_refused_not_opened(tmp_path: Path) -> None:
    root = tmp_path / "igbh"
    write_igbh(root)
    feat = root / "processed" / "fos" / "node_feat.npy"
    feat.unlink()
    os.mkfifo(feat)
    with pytest.raises(DatasetError, match="not a regular file"):
        datasets.load_igbh(root)
