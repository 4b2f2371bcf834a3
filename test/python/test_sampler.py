"""The native heterogeneous neighbour sampler against a simple Python reference."""

from __future__ import annotations

import os
from collections import Counter, defaultdict

import numpy as np
import pytest
import torch

from hector.data.graph import HeteroGraph
from hector.runtime import sampler as native_sampler


def _graph(seed: int = 0, n: int = 60, e: int = 600, r: int = 3, t: int = 2):
    """A random multigraph whose node ids are grouped by type (t types)."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    etype = rng.integers(0, r, e)
    ntype = np.sort(rng.integers(0, t, n))
    return src, dst, etype, ntype, n, r, t


def _reference_hops(src, dst, etype, seeds, hops):
    """Python BFS with every neighbour taken: (nodes in discovery order, set of edge ids)."""
    into = defaultdict(list)
    for i, v in enumerate(dst):
        into[int(v)].append(i)
    order, seen, edges = list(seeds), set(seeds), set()
    frontier = list(seeds)
    for _ in range(hops):
        new = []
        for v in frontier:
            for i in sorted(into[v], key=lambda i: (etype[i], i)):
                edges.add(i)
                u = int(src[i])
                if u not in seen:
                    seen.add(u)
                    order.append(u)
                    new.append(u)
        frontier = new
    return order, edges


def _check_layout(b, num_ntypes: int, num_etypes: int) -> None:
    """Invariants of Hector's layout: grouped node types, sorted edge types, seeds first."""
    assert np.all(np.diff(b.ntype) >= 0)
    assert np.all(np.diff(b.etype) >= 0)
    assert b.ntype_ptr[0] == 0
    assert b.ntype_ptr[-1] == len(b.ntype)
    for k in range(num_ntypes):
        assert np.all(b.ntype[b.ntype_ptr[k] : b.ntype_ptr[k + 1]] == k)
    assert b.etype_ptr[-1] == len(b.src)
    for r in range(num_etypes):
        assert np.all(b.etype[b.etype_ptr[r] : b.etype_ptr[r + 1]] == r)
    assert sorted(b.perm.tolist()) == list(range(len(b.src)))


def test_full_fanout_matches_python_bfs():
    src, dst, etype, ntype, n, r, t = _graph()
    s = native_sampler.NeighborSampler(src, dst, etype, n, r, ntype, t)
    seeds = [3, 17, 40]
    b = s.sample(seeds, [-1, -1], seed=5)
    order, edges = _reference_hops(src, dst, etype, seeds, 2)
    assert set(b.node_ids.tolist()) == set(order)
    assert set(b.edge_ids.tolist()) == edges
    assert len(b.edge_ids) == len(edges)
    # Local endpoints map back to the sampled edge's global endpoints and type.
    assert np.array_equal(b.node_ids[b.src], src[b.edge_ids])
    assert np.array_equal(b.node_ids[b.dst], dst[b.edge_ids])
    assert np.array_equal(b.etype, etype[b.edge_ids])
    assert np.array_equal(b.node_ids[b.seed_local], seeds)
    assert np.array_equal(b.ntype, ntype[b.node_ids])
    _check_layout(b, t, r)
    # Within a node type, local ids follow discovery order (the seeds lead their type).
    rank = {v: i for i, v in enumerate(order)}
    for k in range(t):
        block = b.node_ids[b.ntype_ptr[k] : b.ntype_ptr[k + 1]]
        assert [rank[int(v)] for v in block] == sorted(rank[int(v)] for v in block)


@pytest.mark.parametrize("fanouts", [[2, 3], [[1, 0, 2], [3, 3, 1]], [0, 5]])
def test_sampled_edges_exist_and_fanouts_are_respected(fanouts):
    src, dst, etype, ntype, n, r, t = _graph(seed=1)
    s = native_sampler.NeighborSampler(src, dst, etype, n, r, ntype, t)
    seeds = [0, 5, 9, 33]
    b = s.sample(seeds, fanouts, seed=11)
    table = native_sampler.fanout_table(fanouts, r)
    assert np.array_equal(b.node_ids[b.src], src[b.edge_ids])
    assert np.array_equal(b.node_ids[b.dst], dst[b.edge_ids])
    assert np.array_equal(b.etype, etype[b.edge_ids])
    assert len(set(b.edge_ids.tolist())) == len(b.edge_ids)  # without replacement
    _check_layout(b, t, r)
    degree = Counter(zip(dst.tolist(), etype.tolist(), strict=True))
    got = Counter(zip(b.node_ids[b.dst].tolist(), b.etype.tolist(), strict=True))
    # Replay the hops: which nodes each hop expands, and how many edges each draws.
    hop_of = {int(v): 0 for v in seeds}
    frontier = list(seeds)
    for h in range(len(table)):
        new = []
        for v in frontier:
            for k in range(r):
                want = min(int(table[h, k]), degree[(v, k)])
                assert got[(v, k)] == want, (h, v, k)
        for i in range(len(b.src)):
            v, u = int(b.node_ids[b.dst[i]]), int(b.node_ids[b.src[i]])
            if hop_of.get(v) == h and u not in hop_of:
                hop_of[u] = h + 1
                new.append(u)
        frontier = new
    # No node outside the hops is expanded, every node is reached.
    expanded = {int(v) for v in b.node_ids[b.dst]}
    assert all(hop_of[v] < len(table) for v in expanded)
    assert set(hop_of) == set(b.node_ids.tolist())


def test_arrays_equal_hetero_graph_preprocessing():
    src, dst, etype, ntype, n, r, t = _graph(seed=2)
    s = native_sampler.NeighborSampler(src, dst, etype, n, r, ntype, t)
    b = s.sample([1, 2, 3, 4], [3, 2], seed=3)
    g = HeteroGraph.from_layout(b, t)
    ref = HeteroGraph.from_edge_index(
        torch.stack([torch.from_numpy(b.src), torch.from_numpy(b.dst)]),
        torch.from_numpy(b.etype),
        num_nodes=len(b.ntype),
        node_type=torch.from_numpy(b.ntype),
        num_etypes=r,
        num_ntypes=t,
    )
    for name in (
        "src dst etype ntype etype_ptr norm_dst_etype norm_dst compact_src compact_etype "
        "edge_compact etype_src_ntype"
    ).split():
        assert torch.equal(getattr(g, name), getattr(ref, name)), name
    assert g.src_typed == ref.src_typed


def test_deterministic_under_a_seed_whatever_the_threads():
    src, dst, etype, ntype, n, r, t = _graph(seed=3, n=2000, e=40000)
    s = native_sampler.NeighborSampler(src, dst, etype, n, r, ntype, t)
    seeds = np.arange(0, 2000, 7)
    a = s.sample(seeds, [4, 4], seed=42, threads=1)
    for threads in (2, 3, 8):
        b = s.sample(seeds, [4, 4], seed=42, threads=threads)
        for name in ("node_ids", "src", "dst", "etype", "edge_ids", "compact_src"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), (threads, name)
    c = s.sample(seeds, [4, 4], seed=43)
    assert not np.array_equal(a.edge_ids, c.edge_ids)


def test_draws_are_roughly_uniform():
    # Node 0 has 4 in-neighbours of one type; take 1 per draw over many seeds.
    src, dst, etype = np.array([1, 2, 3, 4]), np.zeros(4, np.int64), np.zeros(4, np.int64)
    s = native_sampler.NeighborSampler(src, dst, etype, 5, 1)
    counts = Counter(int(s.sample([0], [1], seed=k).edge_ids[0]) for k in range(2000))
    assert set(counts) == {0, 1, 2, 3}
    assert all(400 < c < 600 for c in counts.values()), counts


def test_bad_inputs_give_clear_errors():
    src, dst, etype, ntype, n, r, t = _graph()
    s = native_sampler.NeighborSampler(src, dst, etype, n, r, ntype, t)
    with pytest.raises(ValueError, match=r"seeds\[1\] = 60 is out of range for a graph of 60"):
        s.sample([0, 60], [2])
    with pytest.raises(ValueError, match=r"seeds\[0\] = -1 is out of range"):
        s.sample([-1], [2])
    with pytest.raises(ValueError, match=r"seeds\[2\] = 4 appears more than once"):
        s.sample([4, 5, 4], [2])
    with pytest.raises(ValueError, match=r"fanouts\[1\] has 2 entries but the graph has 3 edge"):
        s.sample([0], [3, [1, 2]])
    with pytest.raises(ValueError, match=r"fanouts\[0\]\[2\] = -2"):
        s.sample([0], [[1, 1, -2]])
    with pytest.raises(ValueError, match="at least one hop"):
        s.sample([0], [])
    with pytest.raises(ValueError, match="seeds must hold integers"):
        s.sample(np.array([0.5]), [1])
    with pytest.raises(ValueError, match=r"src\[0\] = 99 is out of range for num_nodes=60"):
        native_sampler.NeighborSampler([99], [0], [0], n, r)
    with pytest.raises(ValueError, match=r"etype\[0\] = 3 is out of range for num_etypes=3"):
        native_sampler.NeighborSampler([1], [0], [3], n, r)
    with pytest.raises(ValueError, match=r"ntype\[1\] = 5 is out of range for num_ntypes=2"):
        native_sampler.NeighborSampler([1], [0], [0], 2, 1, [0, 5], 2)
    with pytest.raises(ValueError, match="one entry per edge"):
        native_sampler.NeighborSampler([1, 2], [0], [0], n, r)
    s.close()
    with pytest.raises(ValueError, match="closed"):
        s.sample([0], [1])


def test_gather_rows_reads_a_memory_mapped_table(tmp_path):
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    np.save(tmp_path / "f.npy", table)
    mapped = np.load(tmp_path / "f.npy", mmap_mode="r")
    index = np.array([9, 0, 3, 3])
    assert np.array_equal(native_sampler.gather_rows(mapped, index, threads=2), table[index])
    with pytest.raises(ValueError, match=r"index\[1\] = 10 is out of range for a table of 10"):
        native_sampler.gather_rows(mapped, [0, 10])


def test_gather_file_rows_reads_rows_in_any_order_with_repeats(tmp_path):
    rng = np.random.default_rng(6)
    table = rng.standard_normal((3000, 20), dtype=np.float32)  # 80-byte rows
    np.save(tmp_path / "f.npy", table)
    header = np.load(tmp_path / "f.npy", mmap_mode="r").offset
    index = np.concatenate([rng.integers(0, 3000, 2000), [5, 5, 2999, 0, 5]])
    fd = os.open(tmp_path / "f.npy", os.O_RDONLY)
    try:
        want = table[index]
        for threads in (1, 2, 5):
            for gap in (0, 80, 4096, 1 << 22):
                got = native_sampler.gather_file_rows(
                    fd, header, table.shape, index, threads=threads, max_gap_bytes=gap
                )
                assert np.array_equal(got, want), (threads, gap)
        out = np.full((3, 20), np.nan, np.float32)
        native_sampler.gather_file_rows(fd, header, table.shape, [2, 1, 0], out=out)
        assert np.array_equal(out, table[[2, 1, 0]])
        assert native_sampler.gather_file_rows(fd, header, table.shape, []).shape == (0, 20)
        with pytest.raises(ValueError, match=r"index\[1\] = 3000 is out of range for a table"):
            native_sampler.gather_file_rows(fd, header, table.shape, [0, 3000])
        with pytest.raises(ValueError, match=r"index\[0\] = -1 is out of range"):
            native_sampler.gather_file_rows(fd, header, table.shape, [-1])
        with pytest.raises(ValueError, match="out must be a C-contiguous float32 array"):
            native_sampler.gather_file_rows(fd, header, table.shape, [0], out=out)
        with pytest.raises(OSError, match="the file ends before the 4000 x 20 table"):
            native_sampler.gather_file_rows(fd, header, (4000, 20), [3999])
    finally:
        os.close(fd)
    folder = os.open(tmp_path, os.O_RDONLY)  # reads of a directory fail (EISDIR)
    try:
        with pytest.raises(OSError, match="reading table rows failed: Is a directory"):
            native_sampler.gather_file_rows(folder, header, table.shape, [0])
    finally:
        os.close(folder)
    with pytest.raises(ValueError, match="fd must be an open file descriptor"):
        native_sampler.gather_file_rows(-1, header, table.shape, [0])
