"""hector.data.loader: batches, prefetch, shards, memory-mapped features, PyG conversions,
errors."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from hector import datasets, models
from hector.data.loader import FeatureStore, NeighborLoader, write_random_features


@pytest.fixture(scope="module")
def mag():
    return datasets.load("synthetic:mag", scale=0.002, seed=2)


@pytest.fixture(scope="module")
def store(mag, tmp_path_factory):
    folder = tmp_path_factory.mktemp("features")
    write_random_features(folder / "x.npy", mag.num_nodes, 6, seed=0, chunk_rows=100)
    np.save(folder / "y.npy", np.arange(mag.num_nodes) % 3)
    return FeatureStore(folder / "x.npy", folder / "y.npy")


def _same(a, b) -> bool:
    return all(
        torch.equal(getattr(a.graph, k), getattr(b.graph, k)) for k in ("src", "dst", "etype")
    ) and torch.equal(a.node_ids, b.node_ids)


def test_batches_hold_features_labels_and_the_layout(mag, store):
    loader = NeighborLoader(
        mag, [3, 2], input_nodes="paper", batch_size=16, features=store, num_workers=0
    )
    batch = next(iter(loader))
    table = np.load(store.path)
    assert torch.equal(batch.x, torch.from_numpy(table[batch.node_ids.numpy()]))
    seeds = batch.node_ids[batch.seed_local]
    assert torch.equal(seeds, torch.arange(16) + mag.type_offsets()["paper"])
    assert torch.equal(batch.y, seeds % 3)
    # Node types grouped; the seeds lead the paper block.
    assert torch.equal(batch.graph.ntype, mag.node_type[batch.node_ids].to(torch.int32))
    p = mag.node_types.index("paper")
    assert torch.equal(batch.seed_local, torch.arange(16) + batch.ntype_ptr[p])
    assert len(loader) == -(-mag.num_nodes_dict()["paper"] // 16)


def test_prefetch_workers_yield_the_same_batches_in_order(mag, store):
    kw = {"input_nodes": "paper", "batch_size": 8, "shuffle": True, "seed": 3, "features": store}
    plain = list(NeighborLoader(mag, [2, 2], num_workers=0, **kw))
    for workers, prefetch in ((1, 1), (3, 2)):
        got = list(NeighborLoader(mag, [2, 2], num_workers=workers, prefetch=prefetch, **kw))
        assert len(got) == len(plain)
        assert all(_same(a, b) and torch.equal(a.x, b.x) for a, b in zip(plain, got, strict=True))
    # Another epoch shuffles differently.
    loader = NeighborLoader(mag, [2, 2], num_workers=0, **kw)
    loader.set_epoch(1)
    assert not torch.equal(next(iter(loader)).node_ids, plain[0].node_ids)


def test_ranks_take_disjoint_equal_shards(mag):
    seeds = []
    for rank in range(3):
        loader = NeighborLoader(
            mag, [1], input_nodes="paper", batch_size=5, shuffle=True, rank=rank, world_size=3
        )
        got = [b.node_ids[b.seed_local] for b in loader]
        seeds.append(torch.cat(got))
        assert len(got) == len(loader)
    assert len({len(s) for s in seeds}) == 1
    everything = torch.cat(seeds)
    assert everything.unique().numel() == everything.numel()


def test_pyg_layers_see_the_same_subgraph(mag, store):
    from torch_geometric.nn import HGTConv, RGCNConv

    loader = NeighborLoader(
        mag, [3, 3], input_nodes="paper", batch_size=12, features=store, num_workers=0
    )
    batch = next(iter(loader))
    torch.manual_seed(0)
    conv = RGCNConv(6, 4, mag.num_relations, aggr="mean")
    pyg = batch.to_pyg()
    want = conv(pyg["x"], pyg["edge_index"], pyg["edge_type"])
    got = models.RGCNLayer.from_pyg(conv)(batch.graph, batch.x)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)

    node_types, edge_types = mag.metadata()
    hgt = HGTConv(6, 6, (node_types, edge_types), heads=2)
    x_dict, edge_index_dict = batch.to_pyg_hetero(node_types, edge_types)
    want = hgt(x_dict, edge_index_dict)
    got = models.HGTLayer.from_pyg(hgt)(batch.graph, batch.x_dict(node_types))
    for t, v in got.items():
        if want.get(t) is not None:
            torch.testing.assert_close(v, want[t], atol=1e-5, rtol=1e-4)


def test_compiled_layers_do_not_recompile_per_batch(mag, store):
    loader = NeighborLoader(
        mag, [3, 3], input_nodes="paper", batch_size=10, features=store, num_workers=0
    )
    layer = models.RGATLayer(6, 4, mag.num_relations)
    fn = layer.compiled
    sizes = set()
    for batch in loader:
        layer(batch.graph, batch.x).sum().backward()
        sizes.add((batch.num_nodes, batch.num_edges))
        with torch.no_grad():
            layer(batch.graph, batch.x)
        if batch.index == 3:
            break
    assert len(sizes) > 1  # every batch has its own node and edge counts
    assert fn.compilations == 2  # one training and one inference kernel


def test_layer_graphs_keep_what_reaches_the_seeds(mag, store):
    """A 3-layer model on :meth:`Batch.layer_graphs` gives the seeds the outputs and every
    weight and input the gradients it gets on the whole sampled graph, with fewer edges in the
    later layers."""
    loader = NeighborLoader(
        mag, [4, 3, 2], input_nodes="paper", batch_size=8, features=store, num_workers=0
    )
    batch = next(iter(loader))
    hops = batch.hops()
    assert bool((hops[batch.seed_local] == 0).all())
    g = batch.graph
    assert int(hops[g.dst.long()].max()) == 2  # each hop samples into the one before
    assert bool((hops[g.src.long()] <= hops[g.dst.long()] + 1).all())
    graphs = batch.layer_graphs(3)
    assert graphs[0] is g
    edges = [h.num_edges for h in graphs]
    assert edges[0] > edges[1] > edges[2] > 0
    torch.manual_seed(0)
    layers = [models.RGATLayer(6, 6, mag.num_relations) for _ in range(3)]

    def seeds_out(per_layer):
        x = batch.x.clone().requires_grad_()
        h = x
        for layer, graph in zip(layers, per_layer, strict=True):
            h = torch.relu(layer(graph, h))
        out = h[batch.seed_local]
        grads = torch.autograd.grad(
            out.square().sum(), [x, *[p for m in layers for p in m.parameters()]]
        )
        return out.detach(), grads

    want, want_g = seeds_out([g, g, g])
    got, got_g = seeds_out(graphs)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    for a, b in zip(got_g, want_g, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_bad_inputs_give_clear_errors(mag, store, tmp_path):
    with pytest.raises(ValueError, match="input_nodes names node type 'pape'"):
        NeighborLoader(mag, [2], input_nodes="pape")
    with pytest.raises(ValueError, match=r"input_nodes\[1\] = 99999 is out of range"):
        NeighborLoader(mag, [2], input_nodes=("paper", [0, 99999]))
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        NeighborLoader(mag, [2], batch_size=0)
    with pytest.raises(ValueError, match=r"fanouts\[0\] has 3 entries but the graph has 8"):
        NeighborLoader(mag, [[1, 2, 3]])
    with pytest.raises(ValueError, match="unknown relation 'nope'"):
        NeighborLoader(mag, {"nope": [1]})
    with pytest.raises(ValueError, match="rank 2 is out of range for world_size 2"):
        NeighborLoader(mag, [1], rank=2, world_size=2)
    np.save(tmp_path / "small.npy", np.zeros((3, 2), np.float32))
    with pytest.raises(ValueError, match="feature store has 3 rows but the graph has"):
        NeighborLoader(mag, [1], features=FeatureStore(tmp_path / "small.npy"))
    np.save(tmp_path / "ints.npy", np.zeros((3, 2), np.int64))
    with pytest.raises(ValueError, match="features must be a 2-D float32 or float16 array"):
        FeatureStore(tmp_path / "ints.npy")
    with pytest.raises(ValueError, match="no such file"):
        FeatureStore(tmp_path / "missing.npy")


def test_released_gathers_keep_the_table_out_of_the_process(tmp_path):
    rows, width = 16384, 64  # 4 MiB: a 256-byte row, 16 rows per page
    write_random_features(tmp_path / "x.npy", rows, width, seed=1)
    index = np.random.default_rng(0).permutation(rows)
    kept = FeatureStore(tmp_path / "x.npy", read="mmap", release=False)
    kept.track_resident = True
    want = kept.gather(index)
    assert kept.peak_resident_bytes > 0.9 * rows * width * 4  # the whole table mapped in
    del kept  # unmap it: resident_bytes counts every mapping of the file in this process
    gc.collect()
    store = FeatureStore(tmp_path / "x.npy", read="mmap", chunk_rows=8)
    store.track_resident = True  # reads /proc/self/smaps after every chunk: few chunks here
    assert torch.equal(store.gather(index[:256]), want[:256])
    # At most about one chunk's stretch of the file (8 sorted rows of 256, ~128 KiB here)
    # and the fault-around windows at its ends: far from the 4 MiB table.
    assert 0 < store.peak_resident_bytes <= 16 * 65536
    assert store.resident_bytes() == 0  # released after the gather


def test_pread_gathers_match_the_table_and_map_nothing(tmp_path):
    rows, width = 5000, 24  # 96-byte rows: many per 256 KiB stretch and per 4 KiB gap
    write_random_features(tmp_path / "x.npy", rows, width, seed=4)
    table = np.load(tmp_path / "x.npy")
    rng = np.random.default_rng(1)
    index = np.concatenate([rng.integers(0, rows, 3000), [7, 7, 7, rows - 1, 0]])
    results = []
    for threads in (1, 2, 3):
        for gap in (0, 4096, 1 << 20):
            store = FeatureStore(tmp_path / "x.npy", threads=threads, max_gap_bytes=gap)
            store.track_resident = True
            got = store.gather(index)
            assert np.array_equal(got.numpy(), table[index])  # repeats included
            assert store.peak_resident_bytes == 0  # never mapped into the process
            results.append(got)
            store.close()
    assert all(torch.equal(results[0], r) for r in results)
    with pytest.raises(ValueError, match=r"node_ids\[1\] = 5000 is out of range|index\[1\]"):
        FeatureStore(tmp_path / "x.npy").gather([0, rows])
    with pytest.raises(ValueError, match="the feature store is closed"):
        store.gather([0])
    with pytest.raises(ValueError, match="read must be 'pread' or 'mmap'"):
        FeatureStore(tmp_path / "x.npy", read="mmap2")


def test_gather_buffers_are_reused_only_once_released(tmp_path):
    write_random_features(tmp_path / "x.npy", 1000, 8, seed=5)
    table = np.load(tmp_path / "x.npy")
    store = FeatureStore(tmp_path / "x.npy")
    first = store.gather(np.arange(100))
    held = first[10:20]  # a view keeps the buffer in use
    del first
    second = store.gather(np.arange(100, 190))
    assert second.data_ptr() != held.data_ptr() - 10 * 8 * 4
    assert torch.equal(held, torch.from_numpy(table[10:20]))  # not overwritten
    addresses = {held.data_ptr() - 10 * 8 * 4, second.data_ptr()}
    del held, second
    third = store.gather(np.arange(500, 600))  # one of the two released buffers
    assert third.data_ptr() in addresses
    assert torch.equal(third, torch.from_numpy(table[500:600]))
    assert len(store._buffers._slots) == 2
    store.clear_buffers()
    assert not store._buffers._slots
    assert torch.equal(third, torch.from_numpy(table[500:600]))  # still its own memory
    fresh = FeatureStore(tmp_path / "x.npy", reuse_buffers=False)
    assert torch.equal(fresh.gather(np.arange(50)), torch.from_numpy(table[:50]))
    assert not fresh._buffers._slots


# ---- features in a unified tensor (pinned memory the GPU reads; host fallback here) ---------

HAS_CUDA = torch.cuda.is_available()


def _unified_store(store, **kw):
    from hector.data.loader import UnifiedFeatureStore

    return UnifiedFeatureStore(store.path, store.path.with_name("y.npy"), **kw)


def test_unified_features_give_the_batches_the_file_store_gives(mag, store):
    unified = _unified_store(store, allow_host_fallback=not HAS_CUDA, chunk_rows=7)
    assert unified.num_rows == store.num_rows
    assert unified.dim == store.dim
    assert unified.mapped == HAS_CUDA
    args = dict(input_nodes="paper", batch_size=16, num_workers=1, shuffle=True, seed=3)
    got = list(NeighborLoader(mag, [3, 2], features=unified, **args))
    want = list(NeighborLoader(mag, [3, 2], features=store, **args))
    assert len(got) == len(want) > 1
    for a, b in zip(got, want, strict=True):
        assert _same(a, b)
        assert a.x.device.type == ("cuda" if HAS_CUDA else "cpu")
        assert torch.equal(a.x.cpu(), b.x)
        assert torch.equal(a.y.cpu(), b.y)


@pytest.mark.skipif(HAS_CUDA, reason="checks the no-CUDA error")
def test_unified_features_without_cuda_need_the_fallback(store):
    from hector.data.unified import UnifiedError

    with pytest.raises(UnifiedError, match="allow_host_fallback"):
        _unified_store(store)


def test_unified_features_refuse_bad_tables(store):
    from hector.data.loader import UnifiedFeatureStore

    fallback = {"allow_host_fallback": True}
    with pytest.raises(ValueError, match="2-D float32"):
        UnifiedFeatureStore(torch.zeros(4, 3, dtype=torch.float64), **fallback)
    with pytest.raises(ValueError, match="labels have 3 rows"):
        UnifiedFeatureStore(torch.zeros(4, 3), torch.zeros(3, dtype=torch.int64), **fallback)
    with pytest.raises(ValueError, match="1-D integer"):
        UnifiedFeatureStore(torch.zeros(4, 3), torch.zeros(4), **fallback)
    table = UnifiedFeatureStore(torch.arange(12.0).reshape(4, 3), **fallback)
    assert torch.equal(
        table.gather(np.array([3, 0])).cpu(), torch.tensor([[9.0, 10, 11], [0, 1, 2]])
    )
    with pytest.raises(ValueError, match="out of range"):
        table.gather(np.array([4]))
    with pytest.raises(ValueError, match="no labels"):
        table.gather_labels(np.array([0]))


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_unified_features_are_gathered_on_the_gpu_zero_copy(store):
    unified = _unified_store(store)
    assert unified.table.device.type == "cpu"
    assert unified.table.is_pinned()
    ids = np.array([5, 0, store.num_rows - 1, 5])
    rows = unified.gather(ids)
    assert rows.device.type == "cuda"
    assert torch.equal(rows.cpu(), torch.from_numpy(np.load(store.path)[ids]))


@pytest.mark.parametrize(("read", "release"), [("pread", True), ("mmap", True), ("mmap", False)])
def test_float16_features_are_gathered_as_stored(tmp_path, read, release):
    """A float16 table (MLPerf's IGBH features) comes back float16, row for row, every way."""
    table = np.random.default_rng(0).standard_normal((300, 6)).astype(np.float16)
    np.save(tmp_path / "f16.npy", table)
    store = FeatureStore(tmp_path / "f16.npy", read=read, release=release, chunk_rows=5)
    ids = np.array([7, 299, 0, 7, 150])
    rows = store.gather(ids)
    assert rows.dtype == torch.float16
    assert torch.equal(rows, torch.from_numpy(table[ids]))


def test_feature_tables_of_other_types_or_odd_half_widths_are_refused(tmp_path):
    np.save(tmp_path / "f64.npy", np.zeros((4, 2)))
    with pytest.raises(ValueError, match="float32 or float16"):
        FeatureStore(tmp_path / "f64.npy")
    np.save(tmp_path / "odd.npy", np.zeros((4, 3), dtype=np.float16))
    with pytest.raises(ValueError, match="even width"):
        FeatureStore(tmp_path / "odd.npy")
