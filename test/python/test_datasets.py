"""hector.datasets: loaders (tensors, PyG, triples, NumPy COO, shared ogbn-mag sample), generated
replicas, conversions to Hector / PyG inputs, and the errors bad input gets."""

from __future__ import annotations

import contextlib
import resource
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from hector import datasets
from hector.datasets import Dataset, DatasetError, DatasetLimitError


@contextlib.contextmanager
def capped_memory(extra: int = 2 * 2**30) -> Iterator[None]:
    """Cap this process's address space at its current size + ``extra`` bytes.

    A regression that allocates before checking then fails with an allocation error (and the
    test with it) instead of taking a shared machine's memory.
    """
    size = next(
        int(line.split()[1]) * 1024
        for line in open("/proc/self/status").read().splitlines()  # noqa: SIM115
        if line.startswith("VmSize:")
    )
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = size + extra if hard == resource.RLIM_INFINITY else min(size + extra, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


MAG_README_EDGES = {  # /work/shared/data/README.md
    "cited": 52_670,
    "citing": 52_670,
    "has": 64_620,
    "is-about": 64_620,
    "writing": 55_296,
    "written-by": 55_296,
}


def _tiny() -> Dataset:
    """Two node types (a: 0..2, b: 3..4), relations a->b and b->a."""
    return Dataset(
        name="tiny",
        num_nodes=5,
        node_type=torch.tensor([0, 0, 0, 1, 1]),
        node_types=["a", "b"],
        edge_index=torch.tensor([[0, 0, 1, 3, 4], [3, 4, 4, 2, 0]]),
        edge_type=torch.tensor([0, 0, 0, 1, 1]),
        edge_types=[("a", "to", "b"), ("b", "back", "a")],
    )


# -- the Dataset class ---------------------------------------------------------------------------


def test_dataset_conversions_and_stats() -> None:
    ds = _tiny()
    assert ds.num_edges == 5
    assert ds.num_relations == 2
    assert ds.num_nodes_dict() == {"a": 3, "b": 2}
    assert ds.type_offsets() == {"a": 0, "b": 3}
    assert ds.metadata() == (["a", "b"], [("a", "to", "b"), ("b", "back", "a")])
    # unique (src, etype) pairs: (0,0) (1,0) (3,1) (4,1) -> 4 of 5 edges
    assert ds.compaction_ratio() == pytest.approx(0.8)
    st = ds.stats()
    assert (st["nodes"], st["edges"], st["relations"], st["node_types"]) == (5, 5, 2, 2)
    assert st["compaction_ratio"] == pytest.approx(0.8)

    ei, et = ds.pyg_homogeneous()
    assert ei.dtype == torch.int64
    assert et.tolist() == [0, 0, 0, 1, 1]
    counts, eid = ds.pyg_hetero()
    assert counts == {"a": 3, "b": 2}
    assert eid[("a", "to", "b")].tolist() == [[0, 0, 1], [0, 1, 1]]  # local ids
    assert eid[("b", "back", "a")].tolist() == [[0, 1], [2, 0]]

    g = ds.hetero_graph()
    assert (g.num_nodes, g.num_edges, g.num_etypes, g.num_ntypes) == (5, 5, 2, 2)
    assert g.ntype.tolist() == [0, 0, 0, 1, 1]


def test_pyg_hetero_matches_heterodata_roundtrip() -> None:
    ds = datasets.synthetic("aifb", scale=0.02, seed=3)
    back = datasets.from_pyg(ds.to_pyg_heterodata(), name="rt")
    assert back.node_types == ds.node_types
    assert back.edge_types == ds.edge_types
    assert torch.equal(back.node_type, ds.node_type)
    key = lambda d: sorted(  # noqa: E731
        zip(d.edge_index[0].tolist(), d.edge_index[1].tolist(), d.edge_type.tolist(), strict=True)
    )
    assert key(back) == key(ds)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"node_type": torch.tensor([0, 1, 0, 1, 1])}, "grouped by node type"),
        ({"node_type": torch.tensor([0, 0, 0, 1, 2])}, "node_type[4] = 2 is out of range"),
        ({"edge_index": torch.tensor([[0, 0, 1, 3, 9], [3, 4, 4, 2, 0]])}, "edge_index[0][4] = 9"),
        ({"edge_type": torch.tensor([0, 0, 0, 1, 2])}, "edge_type[4] = 2 is out of range"),
        ({"edge_type": torch.tensor([0, 0])}, "edge_type must have shape [5]"),
        ({"edge_index": torch.zeros(3, 5, dtype=torch.int64)}, "shape [2, E]"),
        ({"edge_index": torch.zeros(2, 5)}, "integer dtype"),
        ({"edge_type": torch.tensor([1, 0, 0, 1, 1])}, "has source node 0 of type 'a'"),
        ({"edge_types": [("a", "to", "c"), ("b", "back", "a")]}, "unknown node type 'c'"),
    ],
)
def test_dataset_rejects_inconsistent_arrays(change: dict, message: str) -> None:
    ds = _tiny()
    fields = {k: getattr(ds, k) for k in Dataset.__dataclass_fields__ if k != "info"}
    fields.update(change)
    with pytest.raises(DatasetError) as err:
        Dataset(**fields)
    assert message in str(err.value)


# -- tensors and PyG ---------------------------------------------------------------------------


def test_from_edge_index_relabels_and_infers_edge_types() -> None:
    # node types interleaved: 0 1 0 1 -> grouped as old ids [0, 2, 1, 3]
    ds = datasets.from_edge_index(
        torch.tensor([[0, 2, 1], [1, 3, 0]]),
        torch.tensor([0, 0, 1]),
        node_type=torch.tensor([0, 1, 0, 1]),
        node_types=["u", "v"],
    )
    assert ds.node_type.tolist() == [0, 0, 1, 1]
    assert ds.info["node_perm"].tolist() == [0, 2, 1, 3]
    assert ds.edge_index.tolist() == [[0, 1, 2], [2, 3, 0]]
    assert ds.edge_types == [("u", "rel0", "v"), ("v", "rel1", "u")]


def test_from_edge_index_homogeneous_and_errors() -> None:
    ds = datasets.from_edge_index(torch.tensor([[0, 1], [1, 2]]), torch.tensor([0, 1]))
    assert ds.num_nodes == 3
    assert ds.node_types == ["node"]
    assert ds.edge_types == [("node", "rel0", "node"), ("node", "rel1", "node")]
    with pytest.raises(DatasetError, match=r"edge_index\[1\]\[1\] = 7 is out of range"):
        datasets.from_edge_index(torch.tensor([[0, 1], [1, 7]]), torch.tensor([0, 0]), num_nodes=3)
    with pytest.raises(DatasetError, match=r"edge_type\[0\] = -1 is negative"):
        datasets.from_edge_index(torch.tensor([[0], [1]]), torch.tensor([-1]))
    with pytest.raises(DatasetError, match="relation 0 has destination nodes of several types"):
        datasets.from_edge_index(
            torch.tensor([[0, 0], [1, 2]]), torch.tensor([0, 0]), node_type=torch.tensor([0, 0, 1])
        )


def test_from_pyg_heterodata() -> None:
    from torch_geometric.data import HeteroData

    data = HeteroData()
    data["paper"].num_nodes = 4
    data["author"].num_nodes = 2
    data["author", "writes", "paper"].edge_index = torch.tensor([[0, 1, 1], [3, 0, 2]])
    data["paper", "cites", "paper"].edge_index = torch.tensor([[0], [1]])
    ds = datasets.from_pyg(data, name="hd")
    assert ds.node_types == ["paper", "author"]
    assert ds.num_nodes_dict() == {"paper": 4, "author": 2}
    assert ds.edge_types == [("author", "writes", "paper"), ("paper", "cites", "paper")]
    assert ds.edge_index.tolist() == [[4, 5, 5, 0], [3, 0, 2, 1]]
    data["author", "writes", "paper"].edge_index = torch.tensor([[0, 2], [0, 0]])
    with pytest.raises(DatasetError, match="out of range for 2 nodes of type 'author'"):
        datasets.from_pyg(data)


# -- triples ---------------------------------------------------------------------------------------


def test_load_triples(tmp_path) -> None:
    f = tmp_path / "kg.tsv"
    f.write_text("# comment\nalice\tknows\tbob\nbob\tknows\tcarol\n\nalice\tlikes\tcarol\n")
    ds = datasets.load(str(f))
    assert ds.num_nodes == 3
    assert ds.num_edges == 3
    assert ds.edge_types == [("entity", "knows", "entity"), ("entity", "likes", "entity")]
    assert ds.info["entity_names"] == ["alice", "bob", "carol"]
    assert ds.edge_index.tolist() == [[0, 1, 0], [1, 2, 2]]
    inv = datasets.load_triples(f, add_inverse=True)
    assert inv.num_edges == 6
    assert inv.edge_types[3] == ("entity", "rev-likes", "entity")


def test_load_triples_errors(tmp_path) -> None:
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tr\tb\na\tr\n")
    with pytest.raises(DatasetError, match=r"bad.tsv:2: expected 3 fields"):
        datasets.load_triples(bad)
    empty = tmp_path / "empty.tsv"
    empty.write_text("# nothing\n")
    with pytest.raises(DatasetError, match="has no triples"):
        datasets.load_triples(empty)
    with pytest.raises(DatasetError, match="does not exist"):
        datasets.load_triples(tmp_path / "missing.tsv")


def test_load_triples_names_file_line_and_byte_of_non_utf8_text(tmp_path) -> None:
    # Issue 18: a UnicodeDecodeError without the file name escaped.
    f = tmp_path / "latin.tsv"
    f.write_bytes("a\tr\tb\nb\tr\tcaf\u00e9\n".encode("latin-1"))
    with pytest.raises(
        DatasetError, match=r"latin\.tsv:2: not utf-8 text \(byte 0xe9 at column 8\)"
    ):
        datasets.load_triples(f)
    assert datasets.load_triples(f, encoding="latin-1").info["entity_names"] == ["a", "b", "café"]
    with pytest.raises(DatasetError, match="unknown text encoding 'klingon'"):
        datasets.load_triples(f, encoding="klingon")
    with pytest.raises(DatasetError, match="sep must be a non-empty string"):
        datasets.load_triples(f, sep="")


# -- NumPy COO -------------------------------------------------------------------------------------


def test_load_coo_dir_generic_and_schema(tmp_path) -> None:
    np.save(tmp_path / "likes_coo.npy", np.array([[0, 1], [2, 2]], dtype=np.int32))
    np.save(tmp_path / "rev_coo_x.npy", np.array([[2], [0]], dtype=np.int32))
    ds = datasets.load(str(tmp_path))
    assert ds.node_types == ["node"]
    assert ds.num_nodes == 3
    assert [r for _, r, _ in ds.edge_types] == ["likes", "rev"]
    typed = datasets.load_coo_dir(
        tmp_path,
        relations={"likes": ("user", "item"), "rev": ("item", "user")},
        num_nodes={"item": 5},
    )
    assert typed.num_nodes_dict() == {"user": 2, "item": 5}
    assert typed.edge_index.tolist() == [[0, 1, 4], [4, 4, 0]]


def test_load_coo_dir_errors(tmp_path) -> None:
    with pytest.raises(DatasetError, match="does not exist"):
        datasets.load_coo_dir(tmp_path / "nope")
    with pytest.raises(DatasetError, match="no <relation>_coo"):
        datasets.load_coo_dir(tmp_path)
    np.save(tmp_path / "r_coo.npy", np.zeros((3, 4), dtype=np.int32))
    with pytest.raises(DatasetError, match=r"expected an integer array of shape \(2, E\)"):
        datasets.load_coo_dir(tmp_path)
    np.save(tmp_path / "r_coo.npy", np.array([[0, -1], [1, 1]], dtype=np.int32))
    with pytest.raises(DatasetError, match=r"entry \[0, 1\] = -1 < 0"):
        datasets.load_coo_dir(tmp_path)
    np.save(tmp_path / "r_coo.npy", np.array([[0, 5], [1, 1]], dtype=np.int32))
    with pytest.raises(DatasetError, match="num_nodes\\['node'\\] = 3 but the files use id 5"):
        datasets.load_coo_dir(tmp_path, num_nodes={"node": 3})
    with pytest.raises(DatasetError, match="relation 'r' .* is not in relations"):
        datasets.load_coo_dir(tmp_path, relations={"other": ("a", "b")})


def _npy_bytes(array: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def _npz_bytes() -> bytes:
    import io

    buf = io.BytesIO()
    np.savez(buf, coo=np.array([[0], [1]]))
    return buf.getvalue()


GOOD_NPY = _npy_bytes(np.array([[0, 1], [1, 0]], dtype=np.int64))


@pytest.mark.parametrize(
    ("content", "message"),
    [  # issue 18: EOFError, tokenize.TokenError and AttributeError escaped from these
        (b"", r"not a readable \.npy file \(EOFError"),
        (GOOD_NPY[:20] + b"{{{" + GOOD_NPY[23:], r"not a readable \.npy file \(TokenError"),
        (GOOD_NPY[:-8], r"not a readable \.npy file \(ValueError: mmap length"),
        (GOOD_NPY[:9], r"not a readable \.npy file"),
        (b"not numpy at all", r"not a readable \.npy file \(ValueError: .*pickled"),
        (_npz_bytes(), r"is an \.npz archive, expected one \.npy array"),
    ],
    ids=["zero-byte", "header-corrupt", "truncated-data", "truncated-header", "text", "npz"],
)
def test_corrupt_coo_files_are_dataset_errors_naming_the_file(
    tmp_path, content: bytes, message: str
) -> None:
    (tmp_path / "r_coo.npy").write_bytes(content)
    with pytest.raises(DatasetError, match=r"r_coo\.npy: " + message):
        datasets.load_coo_dir(tmp_path)


@pytest.mark.parametrize("node_id", [2**31, 2**40, 2**63 - 1])
def test_coo_id_beyond_int32_is_rejected_before_allocating(tmp_path, node_id: int) -> None:
    # Issue 18: one id of 2**31 made the loader allocate 17 GB (8.8 TB for 2**40).
    np.save(tmp_path / "r_coo.npy", np.array([[0, 1], [node_id, 0]], dtype=np.int64))
    with (
        capped_memory(),
        pytest.raises(
            DatasetLimitError,
            match=rf"r_coo\.npy: node id {node_id} at \[1, 0\] exceeds the int32 limit",
        ),
    ):
        datasets.load_coo_dir(tmp_path)
    np.save(tmp_path / "r_coo.npy", np.array([[0], [2**64 - 1]], dtype=np.uint64))
    with capped_memory(), pytest.raises(DatasetLimitError, match="exceeds the int32 limit"):
        datasets.load_coo_dir(tmp_path)


def test_sizes_over_the_memory_limit_are_rejected_before_allocating(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HECTOR_MEMORY_LIMIT", "64M")
    np.save(tmp_path / "r_coo.npy", np.array([[0], [10_000_000]], dtype=np.int64))
    limit = r"over the limit of 64 MiB \(HECTOR_MEMORY_LIMIT"
    with pytest.raises(DatasetLimitError, match=rf"{tmp_path}: 10000001 nodes.* {limit}"):
        datasets.load_coo_dir(tmp_path)
    with pytest.raises(DatasetLimitError, match=limit):
        datasets.load_coo_dir(tmp_path, num_nodes={"node": 10**8})  # a count given too
    huge = torch.tensor([[0], [10_000_000]])
    with pytest.raises(DatasetLimitError, match=limit):
        datasets.from_edge_index(huge, torch.tensor([0]))
    with pytest.raises(DatasetLimitError, match=limit):
        datasets.from_edge_index(torch.tensor([[0], [1]]), torch.tensor([0]), num_nodes=10**7)
    with pytest.raises(DatasetLimitError, match=limit):
        datasets.from_edge_index(torch.tensor([[0], [1]]), torch.tensor([0]), num_relations=10**7)
    with pytest.raises(DatasetLimitError, match=limit):
        datasets.from_edge_index(
            torch.tensor([[0], [1]]), torch.tensor([0]), node_type=torch.tensor([0, 10**7])
        )
    with pytest.raises(DatasetLimitError, match=limit):
        datasets.load("synthetic:am", scale=2.0)


def test_ids_beyond_int32_are_rejected_by_every_constructor() -> None:
    from torch_geometric.data import HeteroData

    with capped_memory(), pytest.raises(DatasetLimitError, match="exceed the int32 limit"):
        datasets.from_edge_index(torch.tensor([[0], [2**40]]), torch.tensor([0]))
    data = HeteroData()
    data["a"].num_nodes = 2**40
    data["a", "r", "a"].edge_index = torch.tensor([[0], [1]])
    with capped_memory(), pytest.raises(DatasetLimitError, match="exceed the int32 limit"):
        datasets.from_pyg(data)
    data["a"].num_nodes = -3
    with pytest.raises(DatasetError, match="num_nodes of HeteroData node type 'a' must be >= 0"):
        datasets.from_pyg(data)
    with capped_memory(), pytest.raises(DatasetLimitError, match="exceed the int32 limit"):
        datasets.load("synthetic:mag", scale=1000)
    with pytest.raises(DatasetError, match="num_nodes must be >= 0, got -1"):
        datasets.from_edge_index(torch.tensor([[0], [1]]), torch.tensor([0]), num_nodes=-1)


def test_ogbn_mag_sample_loads_from_shared_data() -> None:
    if datasets.data_root() is None or not (datasets.data_root() / "ogbn_mag_0.1").is_dir():
        pytest.skip("shared ogbn_mag_0.1 data not present")
    ds = datasets.load("ogbn_mag_0.1")
    assert ds.name == "ogbn_mag_0.1"
    assert ds.info["source"].endswith("ogbn_mag_0.1")  # read in place, not copied
    per_rel = torch.bincount(ds.edge_type, minlength=ds.num_relations).tolist()
    assert {rel: n for (_, rel, _), n in zip(ds.edge_types, per_rel, strict=True)} == (
        MAG_README_EDGES
    )
    assert ds.num_edges == sum(MAG_README_EDGES.values())
    assert ds.node_types == ["paper", "author", "field_of_study"]
    assert ("author", "writing", "paper") in ds.edge_types
    assert ("field_of_study", "has", "paper") in ds.edge_types
    assert ds.num_nodes_dict() == {"paper": 73_638, "author": 73_631, "field_of_study": 6_001}
    assert ds.compaction_ratio() < 0.5
    g = ds.hetero_graph()
    assert (g.num_edges, g.num_etypes, g.num_ntypes) == (ds.num_edges, 6, 3)


# -- replicas ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "scale"),
    [("aifb", 0.1), ("mutag", 0.05), ("bgs", 0.005), ("fb15k", 0.02), ("biokg", 0.004)],
)
def test_synthetic_replica_counts(name: str, scale: float) -> None:
    spec = datasets.SYNTHETIC_SPECS[name]
    ds = datasets.load(f"synthetic:{name}", scale=scale, seed=1)
    assert ds.name == f"synthetic:{name}"
    assert ds.num_nodes == round(spec.nodes * scale)
    assert ds.num_edges == 2 * round(spec.edges * scale)  # inverse edges added
    assert ds.num_relations == 2 * spec.relations
    assert len(ds.node_types) == spec.node_types
    # inverse relation r + R reverses relation r
    r = int(ds.edge_type[0])
    fwd = ds.edge_index[:, ds.edge_type == r]
    inv = ds.edge_index[:, ds.edge_type == r + spec.relations]
    assert torch.equal(fwd.flip(0), inv)
    assert ds.edge_types[r + spec.relations][1] == f"rev-{ds.edge_types[r][1]}"
    assert ds.compaction_ratio() < 0.85  # repeated (src, etype) pairs, as in real graphs
    # skewed degrees: the busiest node has far more edges than the mean
    deg = torch.bincount(ds.edge_index[0], minlength=ds.num_nodes).float()
    assert deg.max() > 8 * deg.mean()


def test_synthetic_mag_schema_and_determinism() -> None:
    a = datasets.synthetic("synthetic:mag", scale=0.0005, seed=7)
    b = datasets.synthetic("mag", scale=0.0005, seed=7)
    c = datasets.synthetic("mag", scale=0.0005, seed=8)
    assert a.node_types == ["paper", "author", "institution", "field_of_study"]
    assert ("author", "writes", "paper") in a.edge_types
    assert ("paper", "rev-writes", "author") in a.edge_types
    assert torch.equal(a.edge_index, b.edge_index)
    assert not torch.equal(a.edge_index, c.edge_index)
    assert a.name == "synthetic:mag"


def test_load_errors_list_valid_names() -> None:
    with pytest.raises(DatasetError) as err:
        datasets.load("aifb")
    assert "synthetic:aifb" in str(err.value)
    assert "ogbn_mag_0.1" in str(err.value)
    with pytest.raises(DatasetError, match="unknown synthetic dataset 'synthetic:cora'"):
        datasets.load("synthetic:cora")
    with pytest.raises(DatasetError, match="scale must be a number"):
        datasets.load("synthetic:aifb", scale=0)
    with pytest.raises(DatasetError, match="leaves 8 nodes"):
        datasets.load("synthetic:aifb", scale=0.001)


def test_missing_shared_data_is_a_clear_error(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HECTOR_DATA_DIR", str(tmp_path))
    with pytest.raises(DatasetError, match="not found .*HECTOR_DATA_DIR"):
        datasets.load("ogbn_mag_0.1")


def test_igbh_replica_has_the_published_counts_and_schema() -> None:
    """synthetic:igbh-tiny: IGBH-tiny's node count per type and edge count per relation (the
    counts MLPerf's R-GAT trains on), each relation with its inverse."""
    ds = datasets.load("synthetic:igbh-tiny")
    assert ds.num_nodes_dict() == {
        "paper": 100_000,
        "author": 357_041,
        "institute": 8_738,
        "fos": 84_220,
    }
    assert ds.edge_types[:4] == [
        ("paper", "cites", "paper"),
        ("paper", "written_by", "author"),
        ("paper", "topic", "fos"),
        ("author", "affiliated_to", "institute"),
    ]
    counts = torch.bincount(ds.edge_type, minlength=8).tolist()
    assert counts == [447_416, 471_443, 718_445, 325_410] * 2
    # destinations skewed (cited papers, popular topics), sources mild
    topic = ds.edge_index[:, ds.edge_type == 2]
    out_deg, in_deg = (torch.bincount(ends).float() for ends in topic)
    in_skew = in_deg.max() / in_deg[in_deg > 0].mean()
    assert in_skew > 4 * out_deg.max() / out_deg[out_deg > 0].mean()
