"""The mini-batch benchmarks' array cache (issue 39): a private directory, files written without
following links, arrays checked against a manifest before use."""

from __future__ import annotations

import os
import shutil
import stat

import numpy as np
import pytest

from hector.tools import cli
from hector_bench import _cache, minibatch

DS, SCALE = "synthetic:mag", 0.0001  # 194 nodes, 4222 edges
SLUG = "synthetic_mag_s0.0001"


@pytest.fixture
def cache(tmp_path):
    """An empty private cache directory."""
    path = tmp_path / "cache"
    path.mkdir(mode=0o700)
    return path


def _fresh(tmp_path):
    """The dataset generated in a cache of its own (the values every test compares with)."""
    path = tmp_path / "reference"
    path.mkdir(mode=0o700)
    return minibatch.cached_dataset(DS, SCALE, str(path))


def _same(a, b) -> bool:
    return bool((a.edge_index == b.edge_index).all() and (a.edge_type == b.edge_type).all())


def test_default_cache_is_private_per_user_and_follows_hector_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HECTOR_CACHE_DIR", str(tmp_path / "home"))
    p = __import__("argparse").ArgumentParser()
    minibatch.add_arguments(p)
    assert p.parse_args([]).cache_dir is None  # no shared /tmp path as the default
    where = minibatch.cache_dir_of(None)
    assert where == str(tmp_path / "home" / "minibatch")
    assert stat.S_IMODE(os.stat(where).st_mode) == 0o700


def test_a_link_planted_at_an_array_name_is_replaced_not_written_through(tmp_path, cache):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    (cache / SLUG).mkdir(mode=0o700)
    os.symlink(victim, cache / SLUG / "edge_index.npy")
    with pytest.warns(_cache.CacheIntegrityWarning, match="no manifest"):
        ds = minibatch.cached_dataset(DS, SCALE, str(cache))
    assert victim.read_bytes() == b"precious"
    assert not (cache / SLUG / "edge_index.npy").is_symlink()
    assert _same(minibatch.cached_dataset(DS, SCALE, str(cache)), ds)


def test_planted_arrays_without_a_manifest_are_regenerated_not_used(tmp_path, cache):
    folder = cache / SLUG
    folder.mkdir(mode=0o700)
    # What the old cache format read: a meta.json and .npy files, trusted as found.
    (folder / "meta.json").write_text(
        '{"num_nodes": 2, "node_types": ["paper"], "edge_types": [["paper", "cites", "paper"]],'
        ' "info": {}}'
    )
    np.save(folder / "edge_index.npy", np.zeros((2, 1), dtype=np.int64))
    np.save(folder / "edge_type.npy", np.zeros(1, dtype=np.int64))
    np.save(folder / "node_type.npy", np.zeros(2, dtype=np.int64))
    with pytest.warns(_cache.CacheIntegrityWarning, match="no manifest"):
        ds = minibatch.cached_dataset(DS, SCALE, str(cache))
    assert ds.num_nodes == 194
    assert _same(ds, _fresh(tmp_path))


def test_an_altered_array_is_regenerated_with_a_warning(tmp_path, cache):
    minibatch.cached_dataset(DS, SCALE, str(cache))
    path = cache / SLUG / "edge_type.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1  # the same size, dtype and shape: only the hash tells
    path.write_bytes(bytes(data))
    with pytest.warns(_cache.CacheIntegrityWarning, match="edge_type.npy: content hash"):
        ds = minibatch.cached_dataset(DS, SCALE, str(cache))
    assert _same(ds, _fresh(tmp_path))
    again = minibatch.cached_dataset(DS, SCALE, str(cache))  # repaired: no warning now
    assert again.info["cached_in"] == str(cache / SLUG)
    assert _same(again, ds)


def test_a_link_to_identical_content_is_refused_on_read(tmp_path, cache):
    """The read opens with O_NOFOLLOW: a link is refused even when what it points to matches."""
    minibatch.cached_dataset(DS, SCALE, str(cache))
    path = cache / SLUG / "node_type.npy"
    elsewhere = tmp_path / "elsewhere.npy"
    shutil.copy(path, elsewhere)
    path.unlink()
    os.symlink(elsewhere, path)
    with pytest.warns(_cache.CacheIntegrityWarning, match="node_type.npy"):
        minibatch.cached_dataset(DS, SCALE, str(cache))
    assert not path.is_symlink()


def test_features_and_labels_are_checked_and_rewritten(tmp_path, cache):
    ds = minibatch.cached_dataset(DS, SCALE, str(cache))
    store = minibatch.feature_store(ds, str(cache), 8, 5, 0)
    first = np.array(store.table)
    with open(store.path, "r+b") as f:
        f.seek(-4, os.SEEK_END)
        f.write(b"\0\0\0\0")
    with pytest.warns(_cache.CacheIntegrityWarning, match="features_f8_seed0"):
        again = minibatch.feature_store(ds, str(cache), 8, 5, 0)
    assert np.array_equal(np.array(again.table), first)
    assert first.shape == (194, 8)


@pytest.mark.parametrize("how", ["others-writable", "link"])
def test_cli_refuses_a_cache_dir_that_is_not_private(tmp_path, how, capsys):
    target = tmp_path / "shared"
    target.mkdir()
    if how == "others-writable":
        os.chmod(target, 0o777)
        given = target
    else:
        os.chmod(target, 0o700)
        given = tmp_path / "link"
        os.symlink(target, given)
    for bench in ("minibatch", "feature-gather"):  # in this process: cli.main returns 2
        argv = ["bench", bench, "--cache-dir", str(given)]
        argv += ["--dataset" if bench == "feature-gather" else "--datasets", DS]
        assert cli.main(argv) == 2, bench
        err = capsys.readouterr().err
        assert err.startswith("error: --cache-dir: refusing to use"), (bench, err)
        assert "Traceback" not in err
        assert os.listdir(target) == []  # refused before any work
