"""Property-based tests of the dataset loaders (issue 18's fuzz harness, loader half).

NumPy COO files (random dtypes, shapes and ids, then truncated, corrupted, replaced by an
``.npz`` or by text), triple files (random names, separators, encodings and garbage bytes),
``load()`` names and ``synthetic`` arguments. Every call is *accepted* (and the dataset checked
against the file), a *clean error* (a :class:`~hector.datasets.DatasetError` raised by Hector's
own code, naming the file) or an *internal error*, which fails the test. Sizes are capped and
``HECTOR_MEMORY_LIMIT`` is low; ids and scales past the limits must be rejected before
allocating. Derandomized: every run tries the same examples.
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from test_api_properties import FUZZ, LIMIT_BYTES, MEMORY_LIMIT, classify

from hector import datasets
from hector.data.limits import MAX_COUNT
from hector.datasets import DatasetError, DatasetLimitError

#: Per node, the loaders' estimate (see ``datasets._BYTES_PER_NODE``): more nodes than this
#: under ``MEMORY_LIMIT`` must be rejected.
NODES_OVER_LIMIT = LIMIT_BYTES // 32 + 1


@pytest.fixture(autouse=True, scope="module")
def _memory_limit() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HECTOR_MEMORY_LIMIT", MEMORY_LIMIT)
        yield


def _load(call: Any) -> tuple[str, Any]:
    return classify(call, clean=(DatasetError,))


# -- NumPy COO ----------------------------------------------------------------------------------

INT_DTYPES = ["int64", "int32", "int16", "uint8", "uint32", "uint64", ">i8"]
IDS = st.one_of(
    st.integers(0, 20),
    st.integers(0, 20),
    st.integers(0, 20),
    st.integers(0, 20),
    st.integers(-3, 20),
    st.sampled_from(
        [NODES_OVER_LIMIT, MAX_COUNT - 1, MAX_COUNT, 2**31, 2**40, 2**63 - 1, 2**64 - 1]
    ),
)


@st.composite
def coo_arrays(draw: st.DrawFn) -> np.ndarray:
    """Mostly integer [2, E] arrays of small ids, sometimes huge or negative ids, other
    dtypes or shapes."""
    e = draw(st.integers(0, 6))
    shape = draw(st.sampled_from([(2, e)] * 12 + [(e, 2), (3, e), (2 * e,), (2, e, 1)]))
    values = draw(st.lists(IDS, min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
    dtype = draw(st.sampled_from(INT_DTYPES * 2 + ["float64", "bool"]))
    if dtype in ("float64", "bool"):
        return np.array(values, dtype=np.float64).astype(dtype).reshape(shape)
    info = np.iinfo(np.dtype(dtype))
    if min(values, default=0) < info.min or max(values, default=0) > info.max:
        dtype = "uint64" if min(values, default=0) >= 0 else "int64"
        values = [min(v, 2**63 - 1) for v in values] if dtype == "int64" else values
    return np.array(values, dtype=dtype).reshape(shape)


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


@st.composite
def coo_files(
    draw: st.DrawFn, arrays: st.SearchStrategy[np.ndarray] | None = None
) -> tuple[bytes, np.ndarray | None]:
    """The bytes of a ``*_coo.npy`` file (of ``arrays``, default :func:`coo_arrays`), and the
    array it holds if it was left intact."""
    array = draw(arrays if arrays is not None else coo_arrays())
    data = _npy(array)
    how = draw(
        st.sampled_from(
            ["intact"] * 6 + ["truncate", "flip", "header", "npz", "text", "empty", "object"]
        )
    )
    if how == "intact":
        return data, array
    if how == "truncate":
        return data[: draw(st.integers(0, len(data) - 1))], None
    if how == "flip":  # anywhere: magic, header or ids
        at = draw(st.integers(0, len(data) - 1))
        return data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1 :], None
    if how == "header":  # garbage inside the header's dict text
        at = draw(st.integers(10, 60))
        junk = draw(st.binary(min_size=1, max_size=8))
        return data[:at] + junk + data[at + len(junk) :], None
    if how == "npz":
        buf = io.BytesIO()
        np.savez(buf, coo=array)
        return buf.getvalue(), None
    if how == "object":
        return _npy(np.array([[0, "a"], [1, None]], dtype=object)), None
    if how == "empty":
        return b"", None
    return draw(st.binary(max_size=64)), None


def _check_coo(ds: datasets.Dataset, array: np.ndarray | None) -> None:
    """An accepted intact file loads as exactly its edges over ``largest id + 1`` nodes."""
    if array is None:  # a mutation that still parses: only the invariants
        assert ds.edge_index.shape[0] == 2
        assert ds.num_nodes <= MAX_COUNT
        return
    ids = array.astype(np.int64)
    assert (ds.edge_index.numpy() == ids).all()
    assert ds.num_nodes == (int(ids.max()) + 1 if ids.size else 0)
    assert (ds.edge_type.numpy() == 0).all()


@FUZZ
@given(coo_files())
def test_coo_file_loads_exactly_or_is_a_dataset_error(file: tuple[bytes, Any]) -> None:
    data, array = file
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "rel_coo.npy").write_bytes(data)
        outcome, result = _load(lambda: datasets.load_coo_dir(d))
    if outcome == "accepted":
        _check_coo(result, array)
        return
    assert "rel_coo.npy" in str(result) or d in str(result), result
    if array is not None and array.ndim == 2 and array.shape[0] == 2 and array.size:
        if array.dtype.kind in "iu" and int(array.min()) >= 0:
            # An intact, well-formed file is rejected only for its size.
            assert isinstance(result, DatasetLimitError), result
            assert int(array.max()) + 1 >= NODES_OVER_LIMIT


@FUZZ
@given(
    counts=st.dictionaries(
        st.sampled_from(["node", "node", "node", "other"]),
        st.one_of(
            st.integers(6, 30),
            st.integers(-2, 30),
            st.sampled_from([NODES_OVER_LIMIT, 2**40, "9", 2.5, True]),
        ),
        max_size=2,
    )
)
def test_coo_num_nodes_are_checked(counts: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as d:
        np.save(Path(d) / "rel_coo.npy", np.array([[0, 3], [5, 1]]))
        outcome, result = _load(lambda: datasets.load_coo_dir(d, num_nodes=counts))
    if outcome == "accepted":
        assert result.num_nodes == counts.get("node", 6)
    elif counts.get("node") in (NODES_OVER_LIMIT, 2**40) and "other" not in counts:
        assert isinstance(result, DatasetLimitError), result


# -- IGBH folders -------------------------------------------------------------------------------

#: IGBH's edge files hold [E, 2]: the COO arrays transposed (other shapes as they are).
IGBH_EDGES = coo_arrays().map(lambda a: a.T if a.ndim == 2 else a)


@FUZZ
@given(coo_files(IGBH_EDGES))
def test_igbh_edge_file_loads_exactly_or_is_a_dataset_error(file: tuple[bytes, Any]) -> None:
    data, array = file
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "node__rel__node").mkdir()
        (Path(d) / "node__rel__node" / "edge_index.npy").write_bytes(data)
        outcome, result = _load(lambda: datasets.load(d))
    if outcome == "accepted":
        assert result.info["layout"] == "igbh"
        assert result.num_relations == 2
        forward = result.edge_index[:, result.edge_type == 0]
        _check_coo(
            datasets.Dataset(
                "f",
                result.num_nodes,
                result.node_type,
                ["node"],
                forward,
                torch.zeros(forward.shape[1], dtype=torch.int64),
                [("node", "rel", "node")],
            ),
            None if array is None else array.T,
        )
        return
    assert "edge_index.npy" in str(result) or d in str(result), result


@st.composite
def headerless_feature_files(draw: st.DrawFn) -> tuple[bytes, np.ndarray | None]:
    """Raw float32 rows 1024 wide without an ``.npy`` header, as IGBH's large sizes ship
    them (5 rows: the graph's nodes), or the same cut short; and the table if intact."""
    table = np.arange(5 * 1024, dtype=np.float32).reshape(5, 1024)
    cut = draw(st.sampled_from([0, 0, 1, 4, 4095, 4096, 5 * 4096 - 2]))
    return table.tobytes()[: 5 * 4096 - cut], None if cut else table


@FUZZ
@given(
    st.one_of(
        coo_files(st.sampled_from([np.zeros((5, 4), np.float32), np.ones((5, 2), np.float16)])),
        headerless_feature_files(),
    )
)
def test_igbh_feature_file_reads_exactly_or_is_a_clean_error(file: tuple[bytes, Any]) -> None:
    from hector.data.typed_features import igbh_features

    data, array = file
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "node__rel__node").mkdir()
        np.save(Path(d) / "node__rel__node" / "edge_index.npy", np.array([[0, 4]]))
        (Path(d) / "node").mkdir()
        (Path(d) / "node" / "node_feat.npy").write_bytes(data)

        def read() -> Any:
            store = igbh_features(datasets.load(d), classes=None)
            try:
                return store.gather(np.arange(store.num_rows))
            finally:
                store.close()

        outcome, result = classify(read, clean=(ValueError,))
    if outcome == "accepted" and array is not None:
        assert np.array_equal(result.numpy(), array)
    elif outcome != "accepted":
        assert "node_feat.npy" in str(result) or "edge_index.npy" in str(result), result


# -- triple files -------------------------------------------------------------------------------

NAMES = st.text(
    alphabet=st.characters(blacklist_categories=["Cs", "Zs", "Zl", "Zp", "Cc"]),
    min_size=1,
    max_size=6,
).filter(lambda s: not s.startswith("#") and not any(c.isspace() for c in s))


@st.composite
def triple_files(draw: st.DrawFn) -> tuple[bytes, str, list[tuple[str, str, str]] | None]:
    """A triple file's bytes, the encoding to read it with, and its triples when it is
    well-formed in that encoding (else None: garbage, a wrong encoding, a short line)."""
    triples = draw(st.lists(st.tuples(NAMES, NAMES, NAMES), max_size=6))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    comment = draw(st.sampled_from(["", "# a comment" + newline, newline]))
    text = comment + "".join("\t".join(t) + newline for t in triples)
    encoding = draw(st.sampled_from(["utf-8", "utf-8", "latin-1", "utf-16"]))
    how = draw(st.sampled_from(["intact"] * 4 + ["wrong-encoding", "garbage", "short", "cut"]))
    try:
        data = text.encode(encoding)
    except UnicodeEncodeError:
        data, how = text.encode("utf-8"), "wrong-encoding"
    if how == "intact":
        return data, encoding, triples
    if how == "wrong-encoding":
        return data, draw(st.sampled_from(["utf-8", "ascii", "utf-16", "latin-1"])), None
    if how == "garbage":
        return draw(st.binary(max_size=80)), encoding, None
    if how == "short":
        return (text + "a\tb" + newline).encode("utf-8"), "utf-8", None
    return data[: draw(st.integers(0, max(len(data) - 1, 0)))], encoding, None


@FUZZ
@given(triple_files(), st.sampled_from(["\t", "\t", None, ",", ""]))
def test_triple_file_loads_exactly_or_is_a_dataset_error(file: tuple[Any, ...], sep: Any) -> None:
    data, encoding, triples = file
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "kg.tsv"
        path.write_bytes(data)
        outcome, result = _load(lambda: datasets.load_triples(path, sep=sep, encoding=encoding))
    if outcome == "accepted":
        names = result.info["entity_names"]
        got = [
            (names[h], result.edge_types[r][1], names[t])
            for h, t, r in zip(*result.edge_index.tolist(), result.edge_type.tolist(), strict=True)
        ]
        assert len(got) == result.num_edges > 0
        if triples is not None and sep == "\t":
            assert got == triples
        return
    if triples and sep == "\t":
        raise AssertionError(f"a well-formed triple file was rejected: {result}")
    assert "kg.tsv" in str(result) or "sep must be" in str(result), result


# -- load() and synthetic -----------------------------------------------------------------------


@FUZZ
@given(
    st.one_of(
        st.text(max_size=12),
        st.text(max_size=8).map(lambda s: f"synthetic:{s}"),
        st.sampled_from(["synthetic:am", "synthetic:mutag", "synthetic:bgs", "am", "."]),
    )
)
def test_load_names_are_datasets_or_dataset_errors(name: str) -> None:
    outcome, result = _load(lambda: datasets.load(name, scale=0.001))
    if outcome == "accepted":
        assert result.num_nodes > 0
        if name.startswith("synthetic:"):
            assert result.name == name


@FUZZ
@given(
    name=st.sampled_from(sorted(datasets.SYNTHETIC_SPECS)),
    scale=st.one_of(
        st.floats(1e-3, 0.01),
        st.floats(allow_nan=True, allow_infinity=True, width=32),
        st.sampled_from([1e-4, 1e-3, 0.002, 50.0, 1000.0, 1e4, -1, 0, "1", None, True]),
    ),
    seed=st.integers(0, 3),
)
def test_synthetic_is_small_valid_or_rejected_before_generating(
    name: str, scale: Any, seed: int
) -> None:
    spec = datasets.SYNTHETIC_SPECS[name]
    big = isinstance(scale, float) and scale > 0 and (spec.edges * scale > 2e5)
    if big and spec.nodes * scale * 32 + spec.edges * scale * 2 * 256 < LIMIT_BYTES:
        return  # would fit under the limit and really generate: too slow for a unit test
    outcome, result = _load(lambda: datasets.synthetic(name, scale=scale, seed=seed))
    if outcome == "accepted":
        assert result.num_nodes == round(spec.nodes * scale)
        if spec.edges * scale < 2e4:
            again = datasets.synthetic(name, scale=scale, seed=seed)
            assert torch.equal(result.edge_index, again.edge_index)
    elif big and scale <= 1000:
        assert isinstance(result, DatasetLimitError), result
