"""Tests of the native runtime's graph preprocessing, against numpy reference implementations."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import numpy as np
import pytest

from hector.runtime import native

RUNTIME_DIR = Path(native.__file__).resolve().parent


def _random_edges(
    rng: np.random.Generator, num_edges: int, num_nodes: int, num_etypes: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return random int64 (src, dst, etype) arrays, all in range."""
    src = rng.integers(0, num_nodes, num_edges, dtype=np.int64)
    dst = rng.integers(0, num_nodes, num_edges, dtype=np.int64)
    etype = rng.integers(0, num_etypes, num_edges, dtype=np.int64)
    return src, dst, etype


def _reference_norms(
    dst: np.ndarray, etype: np.ndarray, num_etypes: int
) -> tuple[np.ndarray, np.ndarray]:
    """NumPy reference of hector_graph_degree_norm."""
    key = dst.astype(np.int64) * max(num_etypes, 1) + etype.astype(np.int64)
    _, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
    norm_dst_etype = (np.float32(1.0) / counts[inverse].astype(np.float32)).astype(np.float32)
    _, inverse, counts = np.unique(dst, return_inverse=True, return_counts=True)
    norm_dst = (np.float32(1.0) / counts[inverse].astype(np.float32)).astype(np.float32)
    return norm_dst_etype, norm_dst


# --------------------------------------------------------------------------- library loading


def test_library_loads_and_reports_abi_version() -> None:
    assert native.abi_version() == native.ABI_VERSION == 1
    path = native.library_path()
    assert os.path.isfile(path)
    assert os.path.basename(path) == native.LIBRARY_NAME


def test_missing_library_raises_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("HECTOR_RUNTIME_LIBRARY", raising=False)
    monkeypatch.setattr(native, "_search_dirs", lambda: [str(tmp_path / "lib")])
    with pytest.raises(RuntimeError, match=r"not found.*reinstall with pip install -e \."):
        native.library_path()


def test_library_override_must_exist(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HECTOR_RUNTIME_LIBRARY", str(tmp_path / "nope.so"))
    with pytest.raises(RuntimeError, match="HECTOR_RUNTIME_LIBRARY"):
        native.library_path()


def test_search_dirs_cover_package_path() -> None:
    import hector.runtime

    dirs = native._search_dirs()
    for entry in hector.runtime.__path__:
        assert os.path.join(os.path.abspath(entry), "lib") in dirs


def test_library_exports_every_declared_store_function() -> None:
    """Every function hector/offload.h declares (the store's C ABI, old and new) is exported,
    so code built against the header (the placement ABI, generated code) links."""
    import re

    header = (RUNTIME_DIR / "include" / "hector" / "offload.h").read_text()
    names = set(re.findall(r"^\w[\w ]*?\b(hector_\w+)\(", header, flags=re.MULTILINE))
    assert {"hector_store_open", "hector_store_open2", "hector_store_stats"} <= names
    assert {"hector_store_stats2", "hector_store_backend", "hector_store_phase"} <= names
    lib = native.load_library()
    missing = sorted(name for name in names if not hasattr(lib, name))
    assert not missing, f"declared in offload.h but not exported: {missing}"


def test_runtime_imports_nothing_above_it() -> None:
    """The runtime layer may not import hector.dialects / passes / lowering / python code."""
    for path in sorted(RUNTIME_DIR.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                assert not (name == "hector" or name.startswith("hector.")) or name.startswith(
                    "hector.runtime"
                ), f"{path.name} imports {name}"


# --------------------------------------------------------------------------- validate


def test_validate_accepts_valid_edges() -> None:
    rng = np.random.default_rng(0)
    src, dst, etype = _random_edges(rng, 1000, 50, 7)
    assert native.graph_validate(src, dst, etype, 50, 7) == (native.OK, -1)


def test_validate_accepts_empty_graph() -> None:
    empty = np.empty(0, dtype=np.int64)
    assert native.graph_validate(empty, empty, empty, 0, 0) == (native.OK, -1)


@pytest.mark.parametrize(
    ("array", "value", "code"),
    [
        ("src", 50, native.ERR_SRC_RANGE),
        ("src", -1, native.ERR_SRC_RANGE),
        ("dst", 50, native.ERR_DST_RANGE),
        ("dst", -3, native.ERR_DST_RANGE),
        ("etype", 7, native.ERR_ETYPE_RANGE),
        ("etype", -1, native.ERR_ETYPE_RANGE),
    ],
)
def test_validate_reports_first_bad_edge(array: str, value: int, code: int) -> None:
    rng = np.random.default_rng(1)
    arrays = dict(zip(("src", "dst", "etype"), _random_edges(rng, 500, 50, 7), strict=True))
    arrays[array][123] = value
    arrays[array][400] = value  # a later offender must not be reported
    assert native.graph_validate(arrays["src"], arrays["dst"], arrays["etype"], 50, 7) == (
        code,
        123,
    )


def test_validate_checks_src_before_dst_before_etype() -> None:
    src = np.array([0, 0, 9], dtype=np.int64)
    dst = np.array([0, 9, 9], dtype=np.int64)
    etype = np.array([5, 5, 5], dtype=np.int64)
    # Edge 0 only has a bad etype; it comes first, so it is reported.
    assert native.graph_validate(src, dst, etype, 2, 1) == (native.ERR_ETYPE_RANGE, 0)
    etype[:] = 0
    assert native.graph_validate(src, dst, etype, 2, 1) == (native.ERR_DST_RANGE, 1)
    # Edge 2 has bad src and dst: src is reported.
    assert native.graph_validate(src[2:], dst[2:], etype[2:], 2, 1) == (native.ERR_SRC_RANGE, 0)


def test_validate_without_etype_skips_type_check() -> None:
    src = np.array([0, 1], dtype=np.int64)
    assert native.graph_validate(src, src, None, 2, 0) == (native.OK, -1)


def test_validate_rejects_bad_arrays() -> None:
    good = np.zeros(4, dtype=np.int64)
    with pytest.raises(TypeError, match="dtype int64"):
        native.graph_validate(good.astype(np.int32), good, good, 1, 1)
    with pytest.raises(TypeError, match="numpy.ndarray"):
        native.graph_validate([0, 0, 0, 0], good, good, 1, 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="C-contiguous"):
        native.graph_validate(np.zeros(8, dtype=np.int64)[::2], good, good, 1, 1)
    with pytest.raises(ValueError, match="1-D"):
        native.graph_validate(good.reshape(2, 2), good, good, 1, 1)
    with pytest.raises(ValueError, match="same length"):
        native.graph_validate(good, good[:3], good, 1, 1)
    with pytest.raises(ValueError, match="num_nodes must be >= 0"):
        native.graph_validate(good, good, good, -1, 1)


# --------------------------------------------------------------------------- sort by etype


@pytest.mark.parametrize(("num_edges", "num_etypes"), [(0, 0), (0, 3), (1, 1), (5000, 13)])
def test_sort_by_etype_matches_stable_argsort(num_edges: int, num_etypes: int) -> None:
    rng = np.random.default_rng(2)
    etype = rng.integers(0, max(num_etypes, 1), num_edges, dtype=np.int64)
    perm, etype_ptr = native.graph_sort_by_etype(etype, num_etypes)
    assert perm.dtype == np.int64
    assert etype_ptr.dtype == np.int64
    np.testing.assert_array_equal(perm, np.argsort(etype, kind="stable"))
    expected_ptr = np.concatenate([[0], np.cumsum(np.bincount(etype, minlength=num_etypes))])
    np.testing.assert_array_equal(etype_ptr, expected_ptr)


def test_sort_by_etype_is_stable_and_consistent() -> None:
    etype = np.array([2, 0, 2, 1, 0, 2, 0], dtype=np.int64)
    perm, etype_ptr = native.graph_sort_by_etype(etype, 4)
    np.testing.assert_array_equal(perm, [1, 4, 6, 3, 0, 2, 5])
    np.testing.assert_array_equal(etype_ptr, [0, 3, 4, 7, 7])  # type 3 is empty
    sorted_types = etype[perm]
    for r in range(4):
        assert (sorted_types[etype_ptr[r] : etype_ptr[r + 1]] == r).all()


@pytest.mark.parametrize("bad", [-1, 3])
def test_sort_by_etype_rejects_out_of_range(bad: int) -> None:
    etype = np.array([0, 1, bad], dtype=np.int64)
    with pytest.raises(ValueError, match="edge type out of range"):
        native.graph_sort_by_etype(etype, 3)


def test_sort_by_etype_rejects_wrong_dtype() -> None:
    with pytest.raises(TypeError, match="int64"):
        native.graph_sort_by_etype(np.zeros(3, dtype=np.int32), 1)


# --------------------------------------------------------------------------- degree norms


@pytest.mark.parametrize(
    ("num_edges", "num_nodes", "num_etypes"),
    [(1, 1, 1), (2000, 40, 5), (20000, 3000, 30), (5000, 10, 1)],
)
def test_degree_norm_matches_reference(num_edges: int, num_nodes: int, num_etypes: int) -> None:
    rng = np.random.default_rng(3)
    dst = rng.integers(0, num_nodes, num_edges).astype(np.int32)
    etype = rng.integers(0, num_etypes, num_edges).astype(np.int32)
    norm_dst_etype, norm_dst = native.graph_degree_norm(dst, etype, num_nodes, num_etypes)
    ref_dst_etype, ref_dst = _reference_norms(dst, etype, num_etypes)
    assert norm_dst_etype.dtype == np.float32
    assert norm_dst.dtype == np.float32
    np.testing.assert_array_equal(norm_dst_etype, ref_dst_etype)
    np.testing.assert_array_equal(norm_dst, ref_dst)


def test_degree_norm_hand_example() -> None:
    # Node 0 receives two type-0 edges and one type-1 edge; node 2 one type-1 edge.
    dst = np.array([0, 0, 2, 0], dtype=np.int32)
    etype = np.array([0, 1, 1, 0], dtype=np.int32)
    norm_dst_etype, norm_dst = native.graph_degree_norm(dst, etype, 3, 2)
    np.testing.assert_array_equal(norm_dst_etype, np.float32([0.5, 1.0, 1.0, 0.5]))
    np.testing.assert_array_equal(norm_dst, np.float32([1 / 3, 1 / 3, 1.0, 1 / 3]))


def test_degree_norm_with_huge_node_times_etype_product() -> None:
    """N * R = 1e11: must not allocate a dense N x R table."""
    num_nodes, num_etypes = 1_000_000, 100_000
    rng = np.random.default_rng(4)
    # Concentrate edges on a few (dst, etype) pairs so counts exceed 1.
    dst = rng.choice(np.array([0, 17, num_nodes - 1]), 3000).astype(np.int32)
    etype = rng.choice(np.array([0, 5, num_etypes - 1]), 3000).astype(np.int32)
    norm_dst_etype, norm_dst = native.graph_degree_norm(dst, etype, num_nodes, num_etypes)
    ref_dst_etype, ref_dst = _reference_norms(dst, etype, num_etypes)
    np.testing.assert_array_equal(norm_dst_etype, ref_dst_etype)
    np.testing.assert_array_equal(norm_dst, ref_dst)


def test_degree_norm_empty() -> None:
    empty = np.empty(0, dtype=np.int32)
    a, b = native.graph_degree_norm(empty, empty, 0, 0)
    assert a.shape == (0,)
    assert b.shape == (0,)


@pytest.mark.parametrize(
    ("dst", "etype", "message"),
    [
        ([0, 3], [0, 0], "destination node id out of range"),
        ([0, -1], [0, 0], "destination node id out of range"),
        ([0, 1], [0, 2], "edge type out of range"),
        ([0, 1], [-1, 0], "edge type out of range"),
    ],
)
def test_degree_norm_rejects_out_of_range(dst: list[int], etype: list[int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        native.graph_degree_norm(
            np.array(dst, dtype=np.int32), np.array(etype, dtype=np.int32), 3, 2
        )


def test_degree_norm_rejects_wrong_dtype() -> None:
    with pytest.raises(TypeError, match="int32"):
        native.graph_degree_norm(np.zeros(2, dtype=np.int64), np.zeros(2, dtype=np.int32), 1, 1)
