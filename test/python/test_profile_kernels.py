"""Kernel profiling (``hector-profile-kernels``) and the roofline rows of ``hector bench gnn``.

A profiled compilation times every template; it must compute exactly what the unprofiled one
does (forward and every gradient), count each template's rows and calls, and hand its counters
back zeroed. The benchmark turns them into kernel rows with a ``torch.mm`` reference. No test
here asserts a speed: only that times are measured (positive) and the work is counted right.
"""

from __future__ import annotations

import json

import pytest
import torch

import hector
from hector.frontends import compiled as frontend
from hector.lowering import profile_kernels as P
from hector.models import _rgcn_layer
from hector_bench import gnn, gnn_report, roofline

NODES, EDGES, ETYPES, DIM = 60, 400, 3, 8


def _inputs(requires_grad: bool) -> tuple[hector.HeteroGraph, list[torch.Tensor]]:
    g = hector.random_graph(
        num_nodes=NODES,
        num_edges=EDGES,
        num_etypes=ETYPES,
        empty_etypes=(),
        isolated_nodes=3,
        seed=5,
    )
    gen = torch.Generator().manual_seed(0)
    tensors = [
        torch.randn(NODES, DIM, generator=gen),
        torch.randn(ETYPES, DIM, DIM, generator=gen),
        torch.randn(DIM, DIM, generator=gen),
        torch.randn(DIM, generator=gen),
    ]
    return g, [t.requires_grad_(requires_grad) for t in tensors]


def _compiled(monkeypatch: pytest.MonkeyPatch, profile: bool) -> frontend.CompiledFunction:
    """A fresh compiled RGCN layer (own cache), profiled or not."""
    if profile:
        monkeypatch.setenv(P.ENV, "1")
    else:
        monkeypatch.delenv(P.ENV, raising=False)
    return frontend.compile(_rgcn_layer)


def _entry(fn: frontend.CompiledFunction) -> object:
    (entry,) = fn._cache.values()
    return entry


def test_profiled_inference_matches_and_counts_every_template(monkeypatch) -> None:
    g, tensors = _inputs(False)
    plain = _compiled(monkeypatch, profile=False)
    expected = plain(g, *tensors)
    assert _entry(plain).kernel_profile() == []  # nothing timed without the option

    fn = _compiled(monkeypatch, profile=True)
    for _ in range(3):
        out = fn(g, *tensors)
    assert torch.equal(out, expected)  # the timers change nothing computed
    entry = _entry(fn)
    assert "rtclock" in entry.ir("profile")
    assert "rtclock" not in entry.ir("intra")
    timings = entry.kernel_profile()
    forward = [t for t in timings if t.info.function == "_rgcn_layer"]
    assert len(forward) == entry.ir("intra").count("hector_intra.") > 0
    # rtclock ticks in microseconds: a tiny kernel may read 0, but not every one of them
    assert sum(t.seconds for t in forward) > 0
    for t in forward:
        assert t.calls == 3
        assert 0 <= t.min_seconds <= t.seconds / 3 + 1e-12
        assert 0 < t.mean_rows <= EDGES
        assert t.mean_rows == int(t.mean_rows)
        assert t.flops >= 0
        assert t.bytes > 0
        assert t.gbps is not None or t.min_seconds == 0  # a 0 µs reading has no rate
    gemms = [t for t in forward if t.info.is_gemm]
    assert gemms
    assert all(t.flops == 2 * t.mean_rows * DIM * DIM for t in gemms)
    # Each template is located at the line of the layer that made it.
    assert all("models.py:" in t.info.source for t in forward)
    # Reading zeroes the counters.
    assert all(t.calls == 0 and t.seconds == 0 for t in entry.kernel_profile())


def test_profiled_training_matches_every_gradient(monkeypatch) -> None:
    results = []
    for profile in (False, True):
        g, tensors = _inputs(True)
        fn = _compiled(monkeypatch, profile)
        out = fn(g, *tensors)
        out.square().mean().backward()
        results.append((out.detach(), [t.grad for t in tensors], _entry(fn)))
    (out0, grads0, _), (out1, grads1, entry) = results
    assert torch.equal(out0, out1)
    for a, b in zip(grads0, grads1, strict=True):
        assert torch.equal(a, b)
    ran = [t for t in entry.kernel_profile() if t.calls]
    functions = {t.info.function for t in ran}
    assert functions == {"_rgcn_layer_train", "_rgcn_layer_backward"}
    assert {t.info.variant for t in ran if t.info.is_gemm} >= {"xw", "xwt", "xty"}
    # rtclock ticks in microseconds: a tiny kernel may read 0, but not all of them
    assert all(t.calls == 1 and t.min_seconds >= 0 for t in ran)
    assert sum(t.seconds for t in ran) > 0


def test_work_formulas() -> None:
    """FLOPs and compulsory bytes of each template kind, by hand."""
    gemm = P.KernelInfo(0, "f", "gemm", "xw", "add", 16, 8, 0, ("gather_index",), 3 * 16 * 8, "")
    assert gemm.flops(100) == 2 * 100 * 16 * 8
    # per row: one index, a 16-wide row, an 8-wide output read and written; the weight once
    assert gemm.bytes(100) == 4 * (100 * (1 + 16 + 2 * 8) + 3 * 16 * 8)
    xty = P.KernelInfo(0, "f", "gemm", "xty", "add", 16, 8, 0, (), 3 * 16 * 8, "")
    assert xty.bytes(10) == 4 * (10 * (16 + 8) + 2 * 3 * 16 * 8)
    dot = P.KernelInfo(0, "f", "traversal", "dot", "none", 16, 2, 16, ("y_index",), 0, "")
    assert dot.flops(10) == 10 * 2 * (2 * 16 / 2)
    assert dot.bytes(10) == 4 * 10 * (1 + 16 + 16 + 2)
    bias = P.KernelInfo(0, "f", "traversal", "add_bias", "none", 8, 8, 8, (), 8, "")
    assert bias.flops(5) == 5 * 8
    assert bias.bytes(5) == 4 * (5 * (8 + 8) + 8)
    scatter = P.KernelInfo(0, "f", "traversal", "copy", "sum", 8, 8, 0, ("scatter_index",), 0, "")
    assert scatter.flops(5) == 5 * 8
    assert scatter.bytes(5) == 4 * 5 * (1 + 8 + 16)


def test_torch_mm_reference_is_measured_per_variant() -> None:
    for variant in ("xw", "xwt", "xty"):
        assert roofline.torch_mm_gflops(variant, 64, 8, 8) > 0
        assert roofline.torch_mm_gflops(variant, 64, 8, 8, threads=1) > 0
    assert roofline.torch_mm_gflops("xw", 0, 8, 8) is None


def test_torch_mm_reference_is_measured_in_the_kernels_type() -> None:
    for variant in ("xw", "xwt", "xty"):
        assert roofline.torch_mm_gflops(variant, 64, 8, 8, dtype="bfloat16") > 0


def test_gemms_on_bf16_storage_are_profiled_as_bfloat16(monkeypatch) -> None:
    """A GEMM whose operands, or whose function's arguments, are stored in bf16 is recorded
    as ``bfloat16`` (its torch.mm reference's type), through the module attribute and back;
    the same layer on float32 inputs records ``float32`` (and leaves the key out)."""
    g, tensors = _inputs(False)
    for dtype, name in ((torch.bfloat16, "bfloat16"), (torch.float32, "float32")):
        fn = _compiled(monkeypatch, profile=True)
        with torch.no_grad():
            fn(g, *(t.to(dtype) for t in tensors))
        entry = _entry(fn)
        gemms = [t.info for t in entry.kernel_profile() if t.info.is_gemm]
        assert gemms
        assert {k.dtype for k in gemms} == {name}
        assert (f'dtype = "{name}"' in entry.ir("profile")) == (name == "bfloat16")


def test_a_gradient_pairs_time_counts_both_products() -> None:
    """The xwt of a gradient pair reads no time (it runs in its xty's timer): the xty after it
    on the same rows gets the pair's fraction of torch.mm, both products' work against the one
    timer; an xty over other rows stays unpaired."""

    def row(name: str, variant: str, m: int, min_ms: float, gflops: float | None) -> dict:
        flops = 2 * m * 8 * 8
        return {
            "name": name, "function": "f_backward", "template": "gemm", "variant": variant,
            "M": m, "flops": flops, "min_ms": min_ms, "gflops": gflops,
            "torch_mm_best_gflops": 2.0,
        }  # fmt: skip

    rows = [
        row("xwt", "xwt", 1000, 0.0, None),
        row("other", "xty", 500, 0.1, 0.64),
        row("xty", "xty", 1000, 0.2, 0.64),
    ]
    roofline._pair_fractions(rows)
    xwt, other, xty = rows
    assert (xwt["paired_with"], xty["paired_with"]) == ("xty", "xwt")
    assert "paired_with" not in other
    # torch.mm at 2 GFLOP/s: 128 kFLOP per product, 64 µs each, over the pair's 200 µs
    assert xty["pair_fraction_of_torch_mm"] == pytest.approx(2 * 64e-6 / 200e-6)


def test_bench_record_has_kernel_rows_and_plot(tmp_path) -> None:
    cell = gnn.Cell("rgcn", "synthetic:mag", "training", hidden=8, in_dim=8, runs=1, scale=0.0001)
    record = gnn.run_cell(cell, memory=False, quiet=True)
    hector_row = next(r for r in record["results"] if r["system"] == "hector")
    assert hector_row["status"] == "ok", hector_row.get("reason")
    profile = hector_row["kernel_profile"]
    assert profile["threads"] >= 1  # the worker's count (another test may change this process's)
    assert profile["copy_gbps"] > 0
    rows = profile["kernels"]
    assert {r["function"] for r in rows} == {"_rgcn_layer_train", "_rgcn_layer_backward"}
    assert sum(r["ms"] for r in rows) > 0  # rtclock ticks in microseconds: one may read 0
    for r in rows:
        assert r["min_ms"] >= 0
        assert r["ms"] >= r["min_ms"]
        assert r["calls"] == 2
        assert r["bytes"] > 0
        assert r["gbps"] is None or r["gbps"] >= 0
        assert r["source"]
        if r["template"] == "gemm":
            assert r["flops"] == 2 * r["M"] * r["K"] * r["N"]
            assert r["torch_mm_gflops"] > 0
            assert r["torch_mm_gflops_1thread"] > 0
            best = max(r["torch_mm_gflops"], r["torch_mm_gflops_1thread"])
            if r["gflops"] is None:  # no time: an xwt run inside its xty's timer (paired)
                assert r["variant"] == "xwt"
                assert r["fraction_of_torch_mm"] is None
                continue
            assert r["fraction_of_torch_mm"] == pytest.approx(r["gflops"] / best, rel=1e-2)
        else:
            assert "torch_mm_gflops" not in r
    assert profile["gemm_fraction_of_torch_mm"] > 0
    assert "kernels of hector RGCNLayer" in gnn.format_record(record)
    json.dumps(record)  # the record stays JSON
    path = tmp_path / "rec.json"
    gnn_report.plot_roofline(record, path)
    assert (tmp_path / "rec_roofline.png").stat().st_size > 0


def test_no_roofline_leaves_kernels_unprofiled() -> None:
    cell = gnn.Cell(
        "rgcn",
        "synthetic:mag",
        "inference",
        hidden=8,
        in_dim=8,
        runs=1,
        scale=0.0001,
        roofline=False,
    )
    setup = gnn.build_setup(cell)
    entry, _ = gnn.measure_system(setup, setup.systems[0])
    assert entry["status"] == "ok"
    assert "kernel_profile" not in entry
