"""Run small programs through the CPU stages and compare them with torch eager references.

Each program exercises one template kind of ``lowering/templates.py`` (gathers, ntype slicing,
sum_to_dst with ``fn = copy``, scale alone, add, bias + relu, degree_norm by dst), JIT-compiled
through ``inter → intra → loops → llvm``. References are computed from the graph's edge lists
with plain torch ops, independently of the runtime's cached arrays (degree normalisers are
recounted here). The GPU stages are checked for one PTX ``.entry`` per template.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from mlir import ir

import hector
from hector.data.graph import HeteroGraph
from hector.lowering.cpu.jit import CpuKernel
from hector.lowering.pipelines import OPTIMIZE, TARGET_STAGES, LoweringParams
from hector.passes.diagnostics import PipelineError
from hector.passes.registry import PIPELINES, load_all
from hector.targets import TARGETS
from hector.targets import driver as compiler
from hector.targets.cuda import compile_gpu

ATOL = 1e-4
RTOL = 1e-5


# ---- graphs and references ------------------------------------------------------------------


def _graph(**kw) -> HeteroGraph:
    args = {"num_nodes": 40, "num_edges": 300, "num_etypes": 4, "seed": 3}
    args.update(kw)
    return hector.random_graph(**args)


GRAPHS = {
    "plain": lambda: _graph(),
    # nodes without incoming edges must get zeros from sums; an edge type without edges
    "isolated_and_empty_etype": lambda: _graph(isolated_nodes=5, empty_etypes=[2], seed=7),
    "two_ntypes": lambda: _graph(num_ntypes=2, seed=11),
}


@pytest.fixture(params=sorted(GRAPHS))
def graph(request) -> HeteroGraph:
    return GRAPHS[request.param]()


def _edges(g: HeteroGraph) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return g.src.long(), g.dst.long(), g.etype.long()


def _sum_to_dst(g: HeteroGraph, m: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(g.num_nodes, m.shape[1], dtype=m.dtype)
    return out.index_add_(0, g.dst.long(), m)


def _norm_dst_etype(g: HeteroGraph) -> torch.Tensor:
    """1 / #edges with the same (dst, etype), recounted from the edge lists."""
    _, dst, et = _edges(g)
    key = dst * max(g.num_etypes, 1) + et
    _, inverse, counts = torch.unique(key, return_inverse=True, return_counts=True)
    return (1.0 / counts[inverse].float()).reshape(-1, 1)


def _norm_dst(g: HeteroGraph) -> torch.Tensor:
    """1 / in-degree(dst), recounted from the edge lists."""
    deg = torch.bincount(g.dst.long(), minlength=g.num_nodes).float()
    return (1.0 / deg[g.dst.long()]).reshape(-1, 1)


def _rand(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape, (got.shape, want.shape)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, want, atol=ATOL, rtol=RTOL)


# ---- one program per template kind ----------------------------------------------------------
# Each case: (forward, example tensors for a graph, eager reference, a fragment that must appear
# in the intra stage, i.e. the template the case is about).

D_IN, D_OUT = 6, 5


def _gather_dst(g, x):
    return g.gather_dst(x)


def _gather_dst_linear(g, x, w):
    return g.linear(g.gather_dst(x), w)


def _gather_src_etype(g, x, w):
    return g.typed_linear(g.gather_src(x), w)


def _ntype_linear(g, x, w):
    return g.typed_linear(x, w, slice="ntype")


def _sum_copy(g, x):
    return g.sum_to_dst(g.gather_src(x))


def _scale_alone(g, x):
    return g.gather_src(x) * g.degree_norm()


def _add_rows(g, x, y):
    return x + y


def _bias_relu(g, x, b):
    return hector.relu(x + b)


def _mean_by_dst(g, x):
    return g.sum_to_dst(g.gather_src(x) * g.degree_norm("dst"))


def _rgcn(g, x, w, w0, b):
    msg = g.typed_linear(g.gather_src(x), w)
    h = g.sum_to_dst(msg * g.degree_norm())
    return hector.relu(h + g.linear(x, w0) + b)


def _ref_rgcn(g, x, w, w0, b):
    src, _, et = _edges(g)
    msg = torch.bmm(x[src].unsqueeze(1), w[et]).squeeze(1)
    h = _sum_to_dst(g, msg * _norm_dst_etype(g))
    return torch.relu(h + x @ w0 + b)


CASES: dict[str, tuple[Callable, Callable, Callable, str]] = {
    "gather_dst": (
        _gather_dst,
        lambda g: (_rand(g.num_nodes, D_IN, seed=1),),
        lambda g, x: x[g.dst.long()],
        'fn = "copy", operandSegmentSizes = array<i32: 1, 0, 0, 1, 0, 1>, parallel = "edge"',
    ),
    "gather_dst_fused_into_gemm": (
        _gather_dst_linear,
        lambda g: (_rand(g.num_nodes, D_IN, seed=2), _rand(D_IN, D_OUT, seed=3)),
        lambda g, x, w: x[g.dst.long()] @ w,
        "operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 1>",
    ),
    "gather_src_etype_gemm": (
        _gather_src_etype,
        lambda g: (_rand(g.num_nodes, D_IN, seed=4), _rand(g.num_etypes, D_IN, D_OUT, seed=5)),
        lambda g, x, w: torch.bmm(x[g.src.long()].unsqueeze(1), w[g.etype.long()]).squeeze(1),
        "operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1>",
    ),
    "ntype_slicing": (
        _ntype_linear,
        lambda g: (_rand(g.num_nodes, D_IN, seed=6), _rand(g.num_ntypes, D_IN, D_OUT, seed=7)),
        lambda g, x, w: torch.bmm(x.unsqueeze(1), w[g.ntype.long()]).squeeze(1),
        "operandSegmentSizes = array<i32: 1, 1, 0, 1, 0, 0, 1>",
    ),
    "sum_to_dst_copy": (
        _sum_copy,
        lambda g: (_rand(g.num_nodes, D_IN, seed=8),),
        lambda g, x: _sum_to_dst(g, x[g.src.long()]),
        # the gather is read through the traversal's index: one template
        'fn = "copy", operandSegmentSizes = array<i32: 1, 1, 0, 1, 0, 1>, parallel = "edge", '
        'reduce = "sum"',
    ),
    "scale_alone": (
        _scale_alone,
        lambda g: (_rand(g.num_nodes, D_IN, seed=9),),
        lambda g, x: x[g.src.long()] * _norm_dst_etype(g),
        'fn = "scale", operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>, parallel = "edge", '
        'reduce = "none"',
    ),
    "add": (
        _add_rows,
        lambda g: (_rand(g.num_nodes, D_IN, seed=10), _rand(g.num_nodes, D_IN, seed=11)),
        lambda g, x, y: x + y,
        'fn = "add"',
    ),
    "bias_relu": (
        _bias_relu,
        lambda g: (_rand(g.num_nodes, D_IN, seed=12), _rand(D_IN, seed=13)),
        lambda g, x, b: torch.relu(x + b),
        'fn = "relu"',
    ),
    "degree_norm_by_dst": (
        _mean_by_dst,
        lambda g: (_rand(g.num_nodes, D_IN, seed=14),),
        lambda g, x: _sum_to_dst(g, x[g.src.long()] * _norm_dst(g)),
        # gather, scale and sum in one traversal: x read by src, summed by dst
        'fn = "scale", operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 1>, parallel = "edge", '
        'reduce = "sum"',
    ),
    "rgcn": (
        _rgcn,
        lambda g: (
            _rand(g.num_nodes, D_IN, seed=15),
            _rand(g.num_etypes, D_IN, D_OUT, seed=16),
            _rand(D_IN, D_OUT, seed=17),
            _rand(D_OUT, seed=18),
        ),
        _ref_rgcn,
        'fn = "add_bias"',
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_template_matches_torch(case: str, graph: HeteroGraph) -> None:
    fn, make, ref, fragment = CASES[case]
    compiled = hector.compile(fn)
    tensors = make(graph)
    got = compiled(graph, *tensors)
    _close(got, ref(graph, *tensors))
    # the case really exercises the template it is named after
    assert fragment in compiled.ir("intra", graph, *tensors)
    assert "hector_inter" not in compiled.ir("intra", graph, *tensors)


def test_bias_relu_clamps_negatives() -> None:
    """ReLU must zero negative sums (a missing max would leave them)."""
    g = _graph()
    x = -torch.ones(g.num_nodes, D_IN)
    b = torch.zeros(D_IN)
    b[0] = 3.0
    got = hector.compile(_bias_relu)(g, x, b)
    assert (got[:, 1:] == 0).all()
    torch.testing.assert_close(got[:, 0], torch.full((g.num_nodes,), 2.0))


def test_isolated_nodes_get_zero_sums() -> None:
    """Sums start from zero: nodes without incoming edges read 0, not stale memory."""
    g = _graph(isolated_nodes=6)
    x = _rand(g.num_nodes, D_IN, seed=20)
    f = hector.compile(_mean_by_dst)
    for _ in range(2):  # a second call on the same cache entry must start from zero again
        got = f(g, x)
        assert (got[-6:] == 0).all()
        _close(got, _sum_to_dst(g, x[g.src.long()] * _norm_dst(g)))


def test_graph_without_edges() -> None:
    g = _graph(num_edges=0, seed=5)
    x = _rand(g.num_nodes, D_IN, seed=21)
    got = hector.compile(_sum_copy)(g, x)
    _close(got, torch.zeros(g.num_nodes, D_IN))


# ---- the stages themselves, on hector_inter text ---------------------------------------------

_GATHER_DST_SCALE = """
func.func @gds(%g: !hector_inter.graph, %x: tensor<?x4xf32>, %w: tensor<4x3xf32>,
               %b: tensor<3xf32>) -> tensor<?x3xf32> {
  %0 = "hector_inter.gather_dst"(%g, %x) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  %1 = "hector_inter.typed_linear"(%g, %0, %w) {slice = "none"}
      : (!hector_inter.graph, tensor<?x4xf32>, tensor<4x3xf32>) -> tensor<?x3xf32>
  %n = "hector_inter.degree_norm"(%g) {by = "dst"} : (!hector_inter.graph) -> tensor<?x1xf32>
  %2 = "hector_inter.scale"(%1, %n) : (tensor<?x3xf32>, tensor<?x1xf32>) -> tensor<?x3xf32>
  %3 = "hector_inter.sum_to_dst"(%g, %2) : (!hector_inter.graph, tensor<?x3xf32>) -> tensor<?x3xf32>
  %4 = "hector_inter.add"(%3, %b) : (tensor<?x3xf32>, tensor<3xf32>) -> tensor<?x3xf32>
  %5 = "hector_inter.unary"(%4) {fn = "relu", slope = 0.0 : f32}
      : (tensor<?x3xf32>) -> tensor<?x3xf32>
  return %5 : tensor<?x3xf32>
}
"""


OPTIMIZED = ("inter", "reorder", "aggregate", "compact", "fuse")


def _stage_names(target: str) -> list[str]:
    return [stage.name for stage in TARGETS[target].stages]


def test_each_target_reads_its_one_stage_list() -> None:
    """Every target has a row of TARGET_STAGES, and its ``stages`` are that row itself."""
    assert set(TARGETS) == set(TARGET_STAGES)
    for name, target in TARGETS.items():
        assert target.stages is TARGET_STAGES[name]
    assert _stage_names("cpu") == ["intra", "schedule", "loops", "llvm"]
    assert _stage_names("cuda") == ["intra", "gpu", "ptx", "host"]


def test_named_target_pipelines_are_the_targets_stages() -> None:
    """``hector-lower-<target>``: the optimizations, then exactly the target's stages."""
    load_all()
    for name, stages in TARGET_STAGES.items():
        pipeline = PIPELINES[f"hector-lower-{name}"]
        assert pipeline.pipeline == ", ".join([OPTIMIZE, *(s.pipeline for s in stages)])
        assert pipeline.description.endswith(f"(optimize, {', '.join(s.name for s in stages)})")


def test_stage_pipelines_take_the_compilations_parameters() -> None:
    [schedule] = [s for s in TARGET_STAGES["cpu"] if s.name == "schedule"]
    [ptx] = [s for s in TARGET_STAGES["cuda"] if s.name == "ptx"]
    assert (
        schedule.pipeline == "hector-schedule{threads=1}, hector-half-messages, hector-vector-dots"
    )
    params = LoweringParams(threads=3, bf16_dot=True, chip="sm_80")
    assert (
        schedule.pipeline_for(params)
        == "hector-schedule{threads=3 bf16_dot=true}, hector-half-messages, hector-vector-dots"
    )
    assert "chip=sm_90 " in ptx.pipeline
    assert "chip=sm_80 features=+ptx80" in ptx.pipeline_for(params)


def _stage_name_sequences(tree: ast.AST, names: frozenset[str]) -> list[int]:
    """Lines of tuples, lists, sets and dicts with three or more stage names as literals."""
    found = []
    for node in ast.walk(tree):
        items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
        if not isinstance(node, ast.Tuple | ast.List | ast.Set | ast.Dict) or items is None:
            continue
        literal = [e.value for e in items if isinstance(e, ast.Constant)]
        if sum(1 for v in literal if v in names) >= 3:
            found.append(node.lineno)
    return found


def test_no_second_copy_of_a_stage_list() -> None:
    """No module of the product writes a list of stage names: each is read from the target's
    one list (a table like the CLI's former ``STAGES`` would drift from it)."""
    root = Path(__file__).resolve().parents[2]
    names = frozenset(s.name for stages in TARGET_STAGES.values() for s in stages)
    copies = []
    for folder in ("python/hector", "lowering", "passes", "dialects", "runtime", "benchmarks"):
        for path in sorted((root / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            copies += [
                f"{path.relative_to(root)}:{line}" for line in _stage_name_sequences(tree, names)
            ]
    assert copies == []


def test_the_scan_finds_a_stage_table() -> None:
    """The scan above is not blind: the CLI's former table is what it reports."""
    tree = ast.parse('STAGES = {"inter": "cpu", "intra": "cpu", "loops": "cpu", "ptx": "gpu"}')
    assert _stage_name_sequences(tree, frozenset({"intra", "loops", "ptx"})) == [1]


@pytest.mark.parametrize("target", sorted(TARGET_STAGES))
def test_run_stages_runs_the_targets_stages(target: str) -> None:
    staged = compiler.run_stages(_GATHER_DST_SCALE, target, chip="sm_80")
    assert list(staged.stages) == [*OPTIMIZED, *_stage_names(target)]
    if "ptx" in staged.stages:
        assert ".target sm_80" in staged.ir("ptx")
    # Target cuda keeps the PTX before its host stage turns the gpu.binary into LLVM globals.
    assert (".target sm_80" in staged.ptx) == (target == "cuda")


def test_run_stages_keeps_each_stage() -> None:
    staged = compiler.run_stages(_GATHER_DST_SCALE, "cpu")
    assert list(staged.stages) == [*OPTIMIZED, *_stage_names("cpu")]
    assert "hector_inter.gather_dst" in staged.ir("inter")
    intra = staged.ir("intra")
    assert "hector_inter" not in intra
    assert intra.count("hector_intra.gemm_template") == 1  # gather, linear, scale, sum: one
    assert intra.count("hector_intra.traversal_template") == 2  # bias, relu
    loops = staged.ir("loops")
    assert "hector_intra" not in loops
    assert "scf.for" in loops
    assert "llvm.emit_c_interface" in loops
    llvm = staged.ir("llvm")
    assert "llvm.func @_mlir_ciface_gds" in llvm
    assert "scf.for" not in llvm
    with pytest.raises(KeyError):
        staged.ir("gpu")


def test_run_stages_until_stops_early() -> None:
    staged = compiler.run_stages(_GATHER_DST_SCALE, "cpu", until="intra")
    assert list(staged.stages) == [*OPTIMIZED, "intra"]


def test_cpu_kernel_on_run_stages_output() -> None:
    """Call the JIT-compiled LLVM stage directly: graph arrays, inputs, then the output."""
    g = _graph(seed=9)
    x, w, b = _rand(g.num_nodes, 4, seed=30), _rand(4, 3, seed=31), _rand(3, seed=32)
    staged = compiler.run_stages(_GATHER_DST_SCALE, "cpu")
    with staged.context:
        kernel = CpuKernel(staged.module)
    out = np.full((g.num_nodes, 3), np.nan, dtype=np.float32)  # must be fully overwritten
    arrays = [np.ascontiguousarray(a.numpy()) for a in g.arrays()]
    kernel("gds", *arrays, x.numpy(), w.numpy(), b.numpy(), out)
    dst = g.dst.long()
    want = torch.relu(_sum_to_dst(g, (x[dst] @ w) * _norm_dst(g)) + b)
    _close(torch.from_numpy(out), want)


def test_verifier_errors_surface_from_run_stages() -> None:
    bad = """
func.func @bad(%g: !hector_inter.graph, %x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %0 = "hector_inter.sum_to_dst"(%g, %x) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  %1 = "hector_inter.sum_to_dst"(%g, %0) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %1 : tensor<?x4xf32>
}
"""
    with pytest.raises(PipelineError, match="summed rows must be edge-wise, but it is node-wise"):
        compiler.run_stages(bad, "cpu")


# ---- GPU: one PTX entry per template ---------------------------------------------------------


def _templates(intra: str) -> list[str]:
    return re.findall(r'"hector_intra\.(gemm_template|traversal_template)"', intra)


@pytest.mark.parametrize("case", ["rgcn", "sum_to_dst_copy", "ntype_slicing", "gather_dst"])
def test_ptx_has_one_entry_per_template(case: str) -> None:
    fn, make, _, _ = CASES[case]
    g = _graph(num_ntypes=2)
    compiled = hector.compile(fn)
    tensors = make(g)
    n = len(_templates(compiled.ir("intra", g, *tensors)))
    assert n >= 1
    ptx = compiled.ptx(g, *tensors)
    assert ".target sm_90" in ptx
    entries = re.findall(r"\.entry\s+(\w+)\(", ptx)
    assert len(entries) == n, entries
    assert len(set(entries)) == n


def test_compile_gpu_on_text() -> None:
    entry = compile_gpu(_GATHER_DST_SCALE)
    assert list(entry.staged.stages) == [*OPTIMIZED, *_stage_names("gpu")]
    kinds = _templates(entry.staged.ir("intra"))
    entries = re.findall(r"\.entry\s+(\w+)\(", entry.ptx)
    assert len(entries) == len(kinds) == 3
    # kernels are named <function>_<op index>_<template>, in program order
    assert [e.rsplit("_", 1)[1] for e in entries] == [k.split("_")[0] for k in kinds]
    assert all(e.startswith("gds_") for e in entries)
    # only the scatter-GEMM accumulates atomically (one atomic add per output column of its
    # 3-wide tile); the bias and relu traversals store
    gemm_ptx, *rest = entry.ptx.split(".visible .entry")[1:]
    assert gemm_ptx.count("atom.global.add.f32") == 3
    assert not any("atom." in r for r in rest)
    gpu = entry.staged.ir("gpu")
    assert gpu.count("gpu.launch_func") == 3
    assert "gpu.module @hector_kernels" in gpu


def test_contexts_are_independent() -> None:
    """run_stages builds its own context; the result is usable after another run."""
    a = compiler.run_stages(_GATHER_DST_SCALE, "cpu", until="intra")
    b = compiler.run_stages(_GATHER_DST_SCALE, "cpu", until="intra")
    assert a.context is not b.context
    with a.context:
        assert isinstance(a.module, ir.Module)
        assert "hector_intra.gemm_template" in str(a.module)
