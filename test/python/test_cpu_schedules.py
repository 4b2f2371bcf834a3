"""Scheduled CPU kernels (hector-schedule + the tiled lowering): the same numbers as PyG and
as one thread, identical from run to run, and built for the thread count torch allows."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch_geometric.nn import RGCNConv

import hector
from hector import models
from hector.lowering import schedule
from hector.lowering.cpu import features


@pytest.fixture
def threads() -> Iterator[None]:
    """Restore torch's thread count after a test changes it."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _graph(seed: int = 3) -> hector.HeteroGraph:
    # 5 relations over 700 edges: tiles of 32 rows straddle relation boundaries, so both the
    # micro-kernel and the row-at-a-time fallback run.
    return hector.random_graph(90, 700, 5, seed=seed)


def _rgcn_step(
    layer: models.RGCNLayer, g: hector.HeteroGraph, x: torch.Tensor
) -> list[torch.Tensor]:
    xx = x.clone().requires_grad_()
    out = layer(g, xx)
    (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
    grads = [p.grad.clone() for p in (layer.weight, layer.root, layer.bias) if p.grad is not None]
    layer.zero_grad()
    assert xx.grad is not None
    return [out.detach(), xx.grad, *grads]


def _layer(in_dim: int, out_dim: int) -> models.RGCNLayer:
    torch.manual_seed(0)
    conv = RGCNConv(in_dim, out_dim, 5, aggr="mean")
    return models.RGCNLayer.from_pyg(conv)


@pytest.mark.parametrize(("in_dim", "out_dim"), [(64, 64), (16, 24), (6, 5)])
def test_two_workers_match_one_and_repeat_exactly(threads: None, in_dim: int, out_dim: int) -> None:
    g, layer = _graph(), _layer(in_dim, out_dim)
    x = torch.randn(90, in_dim, generator=torch.Generator().manual_seed(1))
    torch.set_num_threads(1)
    one = _rgcn_step(layer, g, x)
    torch.set_num_threads(2)
    first = _rgcn_step(layer, g, x)
    second = _rgcn_step(layer, g, x)
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)  # no racing atomics: bit-identical run to run
    for a, b in zip(first, one, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_scheduled_rgcn_matches_pyg(threads: None) -> None:
    torch.set_num_threads(2)
    g = _graph(seed=5)
    torch.manual_seed(0)
    conv = RGCNConv(64, 32, 5, aggr="mean")
    layer = models.RGCNLayer.from_pyg(conv)
    x = torch.randn(90, 64)
    edge_index = torch.stack([g.src.long(), g.dst.long()])
    x_ref, x_mine = x.clone().requires_grad_(), x.clone().requires_grad_()
    ref = conv(x_ref, edge_index, g.etype.long())
    out = layer(g, x_mine)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    ref.pow(2).sum().backward()
    out.pow(2).sum().backward()
    assert x_mine.grad is not None
    assert x_ref.grad is not None
    torch.testing.assert_close(x_mine.grad, x_ref.grad, rtol=1e-4, atol=1e-4)
    for name in ("weight", "root", "bias"):
        mine, theirs = getattr(layer, name).grad, getattr(conv, name).grad
        assert mine is not None
        assert theirs is not None
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("workers", [1, 2])
def test_schedule_is_built_for_torch_thread_count(threads: None, workers: int) -> None:
    torch.set_num_threads(workers)
    g, layer = _graph(), _layer(64, 64)
    x = torch.randn(90, 64)
    entry = layer.compiled.compile_for(g, x, layer.weight, layer.root, layer.bias)
    scheduled = entry.ir("schedule")
    assert f"threads = {workers} : i64" in scheduled
    parallel = "rows" if workers > 1 else "none"
    assert f'parallel = "{parallel}"' in scheduled
    assert ("scf.forall" in entry.ir("loops")) == (workers > 1)
    # Micro-kernels are vectorised in the loops stage: no linalg.matmul is left.
    assert "vector.transfer_read" in entry.ir("loops")
    assert "linalg.matmul" not in entry.ir("loops")


def test_changing_thread_count_recompiles(threads: None) -> None:
    g, layer = _graph(), _layer(16, 16)
    x = torch.randn(90, 16)
    torch.set_num_threads(1)
    one = layer.compiled.compile_for(g, x, layer.weight, layer.root, layer.bias)
    torch.set_num_threads(2)
    two = layer.compiled.compile_for(g, x, layer.weight, layer.root, layer.bias)
    assert one is not two
    assert layer.compiled.compile_for(g, x, layer.weight, layer.root, layer.bias) is two


def test_typed_linear_by_node_type_on_workers(threads: None) -> None:
    """A weight slice per row from an unsorted index (node types): tiles mix slices, so the
    fallback does the rows; the result still matches eager PyTorch."""
    torch.set_num_threads(2)
    g = hector.random_graph(70, 300, 3, num_ntypes=4, seed=2)

    @hector.compile
    def f(g, x, w):
        return g.typed_linear(x, w, slice="ntype")

    x, w = torch.randn(70, 16), torch.randn(4, 16, 32)
    want = torch.bmm(x.unsqueeze(1), w[g.ntype.long()]).squeeze(1)
    torch.testing.assert_close(f(g, x, w), want, rtol=1e-4, atol=1e-5)


def test_many_tiles_keep_the_stack_flat(threads: None) -> None:
    """Hundreds of thousands of micro-kernel steps: a temporary buffer per vector transfer
    inside the loops (convert-vector-to-scf without full unrolling) would grow the stack at
    every step and crash; the result must simply be right."""
    torch.set_num_threads(1)
    g = hector.random_graph(500, 120_000, 8, seed=4)

    @hector.compile
    def f(g, x, w):
        return g.typed_linear(g.gather_src(x), w, slice="etype")

    x, w = torch.randn(500, 16), torch.randn(8, 16, 16)
    want = torch.bmm(x[g.src.long()].unsqueeze(1), w[g.etype.long()]).squeeze(1)
    torch.testing.assert_close(f(g, x, w), want, rtol=1e-4, atol=1e-4)


def test_dropped_kernels_outlive_their_workers(
    threads: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine whose kernel ran on the async runtime's workers is kept for a grace period
    after its owner goes: a worker that has just finished a task is still returning through the
    engine's code. Compiling, running and dropping kernels in a row must not crash, and the
    retired engines are released once the grace period is over. Every compilation JITs here
    (no cache, LLVM's tools left out): a library, built by the tools or loaded from the cache,
    is never unloaded."""
    import gc

    from hector.lowering.cpu import codegen as cpu_codegen
    from hector.lowering.cpu import jit as cpu_jit

    monkeypatch.setenv("HECTOR_COMPILE_CACHE", "0")
    monkeypatch.setattr(cpu_codegen, "available", lambda: False)

    torch.set_num_threads(2)
    g = _graph()
    x = torch.randn(g.num_nodes, 16)
    for seed in range(6):
        fn = hector.compile(models._rgcn_layer)
        torch.manual_seed(seed)
        w, root, b = torch.randn(5, 16, 16), torch.randn(16, 16), torch.randn(16)
        fn(g, x, w, root, b)
        del fn
        gc.collect()
    assert cpu_jit.release_retired_engines() >= 1  # still within their grace period
    assert cpu_jit.release_retired_engines(older_than_s=0.0) == 0


def test_wide_sums_on_owned_rows_match_one_worker_bit_for_bit(threads: None) -> None:
    # RGAT's forward with 8 heads: every reduction (softmax sums and maxima over 8 heads, the
    # aggregation over 8 x 4 columns) reduces into rows of at least 8 columns, which the
    # workers own (hector_intra.reduction_split): each row is summed in edge order by one
    # worker, so 2 workers give exactly one worker's result, where partials would reassociate.
    g = hector.random_graph(120, 2000, 4, seed=5)
    torch.manual_seed(0)
    layer = models.RGATLayer(6, 4, g.num_etypes, heads=8)
    x = torch.randn(120, 6, generator=torch.Generator().manual_seed(2))
    torch.set_num_threads(1)
    with torch.no_grad():
        one = layer(g, x)
    torch.set_num_threads(2)
    with torch.no_grad():
        two = layer(g, x)
    assert torch.equal(one, two)


def _schedules(f) -> str:
    return "".join(entry.staged.ir("schedule") for entry in f._cache.values())


@pytest.mark.parametrize("workers", [1, 2])
def test_weight_panels_in_reduction_blocks_match_torch(
    threads: None, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    """f32 xw GEMMs multiply by their weight in column panels (here from 64 columns); with a
    panel budget of 24 reduction steps, a reduction of 40 runs in blocks of 24 and 16. Rows
    (90 nodes, 1001 edges) are no multiple of the 32-row tile, and the per-relation weights'
    tiles meet relation boundaries: the results are torch's within f32 rounding."""
    monkeypatch.setenv("HECTOR_COMPILE_CACHE", "0")  # the budget is not in the cache's key
    monkeypatch.setattr(features, "vector_bits", lambda: 512)  # 32-column blocks on any CPU
    monkeypatch.setitem(schedule.PANEL_BYTES, 512, 24 * 32 * 4)
    monkeypatch.setattr(schedule, "PANEL_ROW_BYTES", 64 * 4)  # panels from 64 columns
    torch.set_num_threads(workers)
    g = hector.random_graph(90, 1001, 5, seed=4)
    gen = torch.Generator().manual_seed(6)
    x, w = torch.randn(90, 40, generator=gen), torch.randn(40, 64, generator=gen)
    ws = torch.randn(5, 40, 96, generator=gen)

    @hector.compile
    def shared(g, x, w):
        return g.typed_linear(x, w, slice="none")

    @hector.compile
    def per_relation(g, x, w):
        return g.typed_linear(g.gather_src(x), w, slice="etype")

    with torch.no_grad():
        torch.testing.assert_close(shared(g, x, w), x @ w, rtol=1e-5, atol=1e-5)
        want = torch.bmm(x[g.src.long()].unsqueeze(1), ws[g.etype.long()]).squeeze(1)
        torch.testing.assert_close(per_relation(g, x, ws), want, rtol=1e-5, atol=1e-5)
    for f in (shared, per_relation):
        assert "panels = true" in _schedules(f)
        assert "tile_k = 24 : i64, tile_m = 32 : i64, tile_n = 32 : i64" in _schedules(f)


def test_vector_width_is_read_from_the_cpu_flags() -> None:
    assert features.vector_bits(frozenset({"avx2", "avx512f", "avx512_bf16"})) == 512
    assert features.vector_bits(frozenset({"avx", "avx2", "fma"})) == 256
    assert features.vector_bits(frozenset({"sse2"})) == 128
    assert features.vector_bits(frozenset()) == 128


def test_register_block_by_the_vector_registers() -> None:
    """4 x 32 accumulators in 8 of AVX-512's 32 registers, in tiles of 32 rows; on AVX2's 16
    registers 12 of them: 6 x 16 (4 x 32 spilled) in tiles of 48 rows, narrower outputs as
    wide as they divide, fewer rows where 6 does not divide them."""
    assert schedule.accumulator_elements(512) == 256
    assert schedule.accumulator_elements(256) == 96
    assert (schedule.tile_rows(512), schedule.tile_rows(256), schedule.tile_rows(128)) == (
        32,
        48,
        32,
    )
    assert schedule.register_block(64, 32, 512) == (32, 4)
    assert schedule.register_block(64, 48, 512) == (32, 4)  # AVX-512's block keeps 4 rows
    assert schedule.register_block(64, 48, 256) == (16, 6)
    assert schedule.register_block(24, 48, 256) == (8, 6)
    assert schedule.register_block(64, 8, 256) == (16, 4)  # a weight gradient over K = 8
    assert schedule.register_block(64, 10, 256) == (16, 2)  # over K = 10
    assert schedule.register_block(5, 48, 256) == (None, 6)  # no vector block: row at a time
    assert schedule.register_block(64, 32, 128) == (8, 4)
    with pytest.raises(ValueError, match="vector_bits must be one of 128, 256, 512, got 384"):
        schedule.accumulator_elements(384)
    with pytest.raises(ValueError, match="got 384"):
        schedule.tile_rows(384)


@pytest.mark.parametrize(("bits", "tile_n", "unroll"), [(512, 32, 4), (256, 16, 6)])
def test_gemms_on_either_register_file_match_torch(
    monkeypatch: pytest.MonkeyPatch, bits: int, tile_n: int, unroll: int
) -> None:
    """The host's vector width is a compile option (so in the cache's key): kernels built for
    either register file compute torch's products, in blocks of their own width."""
    monkeypatch.setattr(features, "vector_bits", lambda: bits)
    g = hector.random_graph(90, 700, 5, seed=2)
    gen = torch.Generator().manual_seed(8)
    x, w = torch.randn(90, 48, generator=gen), torch.randn(48, 64, generator=gen)

    @hector.compile
    def linear(g, x, w):
        return g.typed_linear(x, w, slice="none")

    with torch.no_grad():
        torch.testing.assert_close(linear(g, x, w), x @ w, rtol=1e-5, atol=1e-5)
    assert f"tile_n = {tile_n} : i64, unroll = {unroll} : i64" in _schedules(linear)
    from hector.targets.options import Options

    assert Options().vector_bits == bits
    assert Options(vector_bits=256).cache_key() != Options(vector_bits=512).cache_key()


@pytest.mark.parametrize("workers", [1, 2])
def test_rows_in_place_match_packed_tiles_and_torch(
    threads: None, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    """At K = 64 an f32 xw over ungathered rows multiplies whole tiles of them in place
    (``in_place``): 200 rows are 6 whole tiles and a packed tail of 8, and an edge-wise
    per-relation product's tiles meet relation boundaries (cut-short runs are packed). The
    results are the packed schedule's bit for bit, and torch's within f32 rounding."""
    monkeypatch.setenv("HECTOR_COMPILE_CACHE", "0")  # IN_PLACE_MAX_K is not in the cache's key
    torch.set_num_threads(workers)
    g = hector.random_graph(200, 1500, 5, seed=5)
    gen = torch.Generator().manual_seed(9)
    x, w = torch.randn(200, 64, generator=gen), torch.randn(64, 64, generator=gen)
    e, ws = torch.randn(1500, 64, generator=gen), torch.randn(5, 64, 32, generator=gen)
    results, chosen = [], []
    for widest in (schedule.IN_PLACE_MAX_K, 0):  # in place, then packed
        monkeypatch.setattr(schedule, "IN_PLACE_MAX_K", widest)

        @hector.compile
        def shared(g, x, w):
            return g.typed_linear(x, w, slice="none")

        @hector.compile
        def per_relation(g, e, w):
            return g.typed_linear(e, w, slice="etype")

        with torch.no_grad():
            results.append((shared(g, x, w), per_relation(g, e, ws)))
        chosen.append([_schedules(f).count("in_place = true") for f in (shared, per_relation)])
    assert chosen == [[1, 1], [0, 0]]
    for in_place, packed in zip(*results, strict=True):
        assert torch.equal(in_place, packed)
    torch.testing.assert_close(results[0][0], x @ w, rtol=1e-5, atol=1e-5)
    want = torch.bmm(e.unsqueeze(1), ws[g.etype.long()]).squeeze(1)
    torch.testing.assert_close(results[0][1], want, rtol=1e-5, atol=1e-5)
