"""IGBH's folder layout: :func:`hector.datasets.load_igbh` and
:func:`hector.data.typed_features.igbh_features`, on small folders written here in that layout
(per-type ``node_feat.npy`` and ``node_label_*.npy``, ``<src>__<rel>__<dst>/edge_index.npy`` as
``[E, 2]``), checked edge for edge and row for row against the arrays written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from hector import datasets
from hector.data.loader import FeatureStore, NeighborLoader
from hector.data.typed_features import TypedFeatureStore, igbh_features
from hector.datasets import DatasetError

COUNTS = {"paper": 30, "author": 20, "institute": 4, "fos": 6}
RELATIONS = {
    ("paper", "cites", "paper"): 60,
    ("paper", "written_by", "author"): 40,
    ("author", "affiliated_to", "institute"): 20,
    ("paper", "topic", "fos"): 30,
}


def write_igbh(root: Path, *, dim: int = 8, dtype: str = "float32", seed: int = 0) -> dict:
    """An IGBH-layout folder ``root/processed``; returns what was written."""
    rng = np.random.default_rng(seed)
    processed = root / "processed"
    written: dict = {"features": {}, "edges": {}}
    for t, n in COUNTS.items():
        (processed / t).mkdir(parents=True)
        x = rng.standard_normal((n, dim)).astype(dtype)
        np.save(processed / t / "node_feat.npy", x)
        written["features"][t] = x
    written["y19"] = rng.integers(0, 19, COUNTS["paper"]).astype(np.float32)  # as IGBH: floats
    written["y2k"] = rng.integers(0, 2983, COUNTS["paper"])
    np.save(processed / "paper" / "node_label_19.npy", written["y19"])
    np.save(processed / "paper" / "node_label_2K.npy", written["y2k"])
    for (s, r, d), e in RELATIONS.items():
        folder = processed / f"{s}__{r}__{d}"
        folder.mkdir()
        edges = np.stack([rng.integers(0, COUNTS[s], e), rng.integers(0, COUNTS[d], e)], 1)
        np.save(folder / "edge_index.npy", edges)
        written["edges"][(s, r, d)] = edges
    return written


@pytest.fixture
def igbh(tmp_path: Path) -> tuple[Path, dict]:
    return tmp_path / "tiny", write_igbh(tmp_path / "tiny")


def test_edges_and_inverses_load_exactly(igbh) -> None:
    root, written = igbh
    ds = datasets.load(root)  # load() recognises the layout
    assert ds.name == "igbh:tiny"
    assert ds.info["layout"] == "igbh"
    assert ds.num_nodes_dict() == {t: COUNTS[t] for t in ds.node_types}
    base = sorted(RELATIONS)
    assert ds.edge_types == [*base, *[(d, f"rev-{r}", s) for s, r, d in base]]
    offsets = ds.type_offsets()
    _, by_relation = ds.pyg_hetero()
    for s, r, d in base:
        local = by_relation[(s, r, d)].T.numpy()
        assert (local == written["edges"][(s, r, d)]).all()
        assert (by_relation[(d, f"rev-{r}", s)].numpy() == local.T[::-1]).all()
    assert ds.num_edges == 2 * sum(RELATIONS.values())
    assert offsets["author"] == 0  # first mentioned: author__affiliated_to__institute
    plain = datasets.load_igbh(root / "processed", add_inverse=False, node_types=list(COUNTS))
    assert plain.num_relations == 4
    assert plain.node_types == list(COUNTS)


def test_batches_read_every_type_from_its_own_file(igbh) -> None:
    root, written = igbh
    ds = datasets.load_igbh(root)
    store = igbh_features(ds, classes=19, threads=1)
    assert store.num_rows == ds.num_nodes
    assert store.dim == 8
    table = np.concatenate([written["features"][t] for t in ds.node_types])
    ids = np.array([ds.num_nodes - 1, 0, 5, ds.type_offsets()["paper"] + 3, 22, 5])
    assert torch.equal(store.gather(ids), torch.from_numpy(table[ids]))
    loader = NeighborLoader(ds, [3, 2], input_nodes="paper", batch_size=7, features=store)
    paper = ds.type_offsets()["paper"]
    for batch in loader:
        assert torch.equal(batch.x, torch.from_numpy(table[batch.node_ids.numpy()]))
        seeds = batch.node_ids[batch.seed_local].numpy() - paper
        assert torch.equal(batch.y, torch.from_numpy(written["y19"][seeds].astype(np.int64)))
    fine = igbh_features(ds, classes=2983)
    assert torch.equal(fine.gather_labels([paper + 2]), torch.tensor([written["y2k"][2]]))
    with pytest.raises(ValueError, match="'author' has no labels"):
        fine.gather_labels([0])
    with pytest.raises(ValueError, match="out of range"):
        store.gather([ds.num_nodes])


def test_float16_copies_are_read_as_float16(tmp_path: Path) -> None:
    root = tmp_path / "half"
    written = write_igbh(root, dtype="float16")
    ds = datasets.load_igbh(root)
    store = igbh_features(ds, classes=None)
    assert store.labels is None
    rows = store.gather(np.arange(ds.num_nodes))
    assert rows.dtype == torch.float16
    table = np.concatenate([written["features"][t] for t in ds.node_types])
    assert torch.equal(rows, torch.from_numpy(table))


def test_headerless_feature_files_of_the_large_sizes_are_read_as_1024_wide_float32(
    tmp_path: Path,
) -> None:
    """IGBH's large and full sizes ship node_feat.npy as raw float32 rows without a header:
    the count comes from the file's size, the rows are gathered as written; a size that is
    not whole rows is refused naming the file."""
    root = tmp_path / "large"
    written = write_igbh(root, dim=1024)
    for t, x in written["features"].items():
        x.tofile(root / "processed" / t / "node_feat.npy")  # no .npy header
    ds = datasets.load_igbh(root)
    assert ds.num_nodes_dict() == {t: COUNTS[t] for t in ds.node_types}
    store = igbh_features(ds)
    rows = store.gather(np.arange(ds.num_nodes))
    table = np.concatenate([written["features"][t] for t in ds.node_types])
    assert torch.equal(rows, torch.from_numpy(table))
    bad = root / "processed" / "author" / "node_feat.npy"
    bad.write_bytes(bad.read_bytes()[:-4])
    with pytest.raises(DatasetError, match=r"author/node_feat\.npy: not a \.npy file, nor a "):
        datasets.load_igbh(root)


def test_layout_errors_name_the_file(igbh) -> None:
    root, _ = igbh
    processed = root / "processed"
    with pytest.raises(DatasetError, match="no <src>__<rel>__<dst> relation folders"):
        datasets.load_igbh(processed / "paper")
    cites = processed / "paper__cites__paper" / "edge_index.npy"
    np.save(cites, np.zeros((2, 5), dtype=np.int64))
    with pytest.raises(DatasetError, match=r"edge_index.npy: expected .* \(E, 2\).*looks like"):
        datasets.load_igbh(root)
    np.save(cites, np.array([[0, 30]]))  # paper 30 of 30 rows
    with pytest.raises(DatasetError, match=r"num_nodes\['paper'\] = 30 but the files use id 30"):
        datasets.load_igbh(root)
    np.save(cites, np.array([[0, -1]]))
    with pytest.raises(DatasetError, match="paper__cites__paper/edge_index.npy: entry .* < 0"):
        datasets.load_igbh(root)
    cites.write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(DatasetError, match="not a readable .npy file"):
        datasets.load_igbh(root)
    cites.unlink()
    with pytest.raises(DatasetError, match="paper__cites__paper/edge_index.npy: missing"):
        datasets.load_igbh(root)
    with pytest.raises(DatasetError, match="uses node type 'paper', not in node_types"):
        datasets.load_igbh(root, node_types=["author", "institute", "fos"])


def test_feature_errors_name_the_file(igbh) -> None:
    root, _ = igbh
    processed = root / "processed"
    ds = datasets.load_igbh(root)
    with pytest.raises(ValueError, match="IGBH publishes labels of"):
        igbh_features(ds, classes=10)
    np.save(processed / "fos" / "node_feat.npy", np.zeros((6, 4), dtype=np.float32))
    with pytest.raises(ValueError, match="fos/node_feat.npy: float32 rows of width 4"):
        igbh_features(ds)
    (processed / "fos" / "node_feat.npy").unlink()
    with pytest.raises(ValueError, match="fos/node_feat.npy: missing"):
        igbh_features(ds)
    np.save(processed / "paper" / "node_label_19.npy", np.full(30, 0.5, dtype=np.float32))
    np.save(processed / "fos" / "node_feat.npy", np.zeros((6, 8), dtype=np.float32))
    labels = igbh_features(ds)
    with pytest.raises(
        ValueError, match="node_label_19.npy: label of row 3 is 0.5, not a class id"
    ):
        labels.gather_labels([ds.type_offsets()["paper"] + 3])
    stores = {t: FeatureStore(processed / t / "node_feat.npy") for t in ds.node_types}
    with pytest.raises(ValueError, match=r"missing \['fos'\]"):
        TypedFeatureStore(ds, {t: s for t, s in stores.items() if t != "fos"})
    stores["fos"] = stores["author"]
    with pytest.raises(ValueError, match="20 rows, but node type 'fos' has 6 nodes"):
        TypedFeatureStore(ds, stores)
