"""Ahead-of-time bundles (hector.bundle, hector.runtime.bundle) without a GPU.

Bundles for RGCN, RGAT and HGT training are built here, then loaded and run forward and backward
through the fake CUDA driver in a subprocess that cannot import MLIR or torch-mlir (as on a GPU
node); the launches they make (kernel, grid, block, in order) are those of the compiled path on
the same graph (``hector.targets.cuda.emulate``). Grid arithmetic is checked for graphs too
large for 32-bit thread counts and for empty graphs, and malformed bundles and plans are refused
clearly.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from _fake_driver import FakeDriver
from _no_mlir import run_python

import hector
from hector import bundle
from hector.frontends import trace as frontend
from hector.frontends.compiled import CompiledFunction
from hector.models import HGTLayer, RGATLayer, RGCNLayer
from hector.runtime import bundle as rb
from hector.runtime.launch import param_count, ptx_param_counts
from hector.targets import bundle as bundle_target
from hector.targets import cuda as cuda_target
from hector_bench.bundle_check import build_check_bundles as bc_build_check_bundles

HERE = Path(__file__).parent
N, E, R, IN = 30, 100, 3, 8
META = (
    ["paper", "author"],
    [("paper", "cites", "paper"), ("author", "writes", "paper"), ("paper", "written_by", "author")],
)
COUNTS = {"paper": 40, "author": 30}


def _hetero() -> tuple[hector.HeteroGraph, dict[str, torch.Tensor]]:
    """A graph numbered by node type (HGT's convention) and its features."""
    rnd = random.Random(3)
    offset = {"paper": 0, "author": COUNTS["paper"]}
    src, dst, typ = [], [], []
    for r, (s, _, d) in enumerate(META[1]):
        for _ in range(120):
            src.append(rnd.randrange(COUNTS[s]) + offset[s])
            dst.append(rnd.randrange(COUNTS[d]) + offset[d])
            typ.append(r)
    ntype = torch.tensor([0] * COUNTS["paper"] + [1] * COUNTS["author"])
    g = hector.HeteroGraph.from_edge_index(
        torch.tensor([src, dst]), torch.tensor(typ), node_type=ntype, num_etypes=len(META[1])
    )
    torch.manual_seed(4)
    return g, {k: torch.randn(n, 8) for k, n in COUNTS.items()}


def _layer(model: str) -> tuple[torch.nn.Module, hector.HeteroGraph, Any]:
    torch.manual_seed(0)
    if model == "hgt":
        g, x = _hetero()
        return HGTLayer(8, 8, *META, heads=2), g, x
    g = hector.random_graph(N, E, R, seed=1)
    x = torch.randn(N, IN)
    layer = RGATLayer(IN, 4, R, heads=2) if model == "rgat" else RGCNLayer(IN, 6, R)
    return layer, g, x


def _core_inputs(layer: torch.nn.Module, g: hector.HeteroGraph, x: Any) -> tuple:
    """The tensors the layer's forward hands its compiled core."""
    return bundle._capture(layer, g, (x,))[1]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """A training bundle per model, its graph and core inputs saved for the subprocess, and the
    launches the compiled path makes (emulated) for one forward and backward."""
    root = tmp_path_factory.mktemp("bundles")
    out: dict[str, dict[str, Any]] = {}
    for model in ("rgcn", "rgat", "hgt"):
        layer, g, x = _layer(model)
        path = bundle.build(layer, g, x, out=root / model)
        inputs = _core_inputs(layer, g, x)
        torch.save({"graph": g, "inputs": inputs}, root / f"{model}.pt")
        # A fresh CompiledFunction: RGCNLayer's core is the shared hector.models.rgcn_layer.
        fn = CompiledFunction(layer.compiled.fn, target="cuda")
        with cuda_target.emulate() as rt:
            outs = fn(g, *(t.clone().requires_grad_() for t in inputs))
            outs.sum().backward()
        compiled = [
            [launch.kernel, list(launch.grid), list(launch.block)] for launch in rt.launches
        ]
        out[model] = {"path": path, "data": root / f"{model}.pt", "compiled": compiled}
    return out


RUNNER = r"""
import json, sys
import torch
from _fake_driver import FakeDriver
from hector.runtime import bundle as rb

path, data, report = sys.argv[1:4]
saved = torch.load(data, weights_only=False)
g, inputs = saved["graph"], [t.clone().requires_grad_() for t in saved["inputs"]]
driver = FakeDriver()
fn = rb.load(path, driver)
fn.events = []
out = fn(g, *inputs)
out.square().sum().backward()
blocked = sorted(m for m in sys.modules if m.split(".")[0] in ("mlir", "torch_mlir"))
json.dump({
    "launches": [[l["function"][1], list(l["grid"]), list(l["block"]), len(l["values"])]
                 for l in driver.launches],
    "loaded": len(driver.loaded),
    "events": [e.op for e in fn.events],
    "out": list(out.shape),
    "grads": [list(t.grad.shape) if t.grad is not None else None for t in inputs],
    "shapes": [list(t.shape) for t in inputs],
    "mlir_modules": blocked,
    "cuda_modules": sorted(m for m in sys.modules if m.split(".")[0] == "cuda"),
}, open(report, "w"))
"""


@pytest.mark.parametrize("model", ["rgcn", "rgat", "hgt"])
def test_bundle_round_trip_without_mlir_matches_the_compiled_path(
    built: dict[str, dict[str, Any]], model: str, tmp_path: Path
) -> None:
    case = built[model]
    script = tmp_path / "run_bundle.py"
    script.write_text(RUNNER)
    report = tmp_path / "report.json"
    proc = run_python(
        str(script),
        case["path"],
        str(case["data"]),
        str(report),
        env={"PYTHONPATH": str(HERE)},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(report.read_text())
    assert got["mlir_modules"] == []
    assert got["cuda_modules"] == []  # cuda-bindings only for a real driver
    assert got["loaded"] == 1  # the PTX module loaded once for every kernel
    # the same kernels, grids and blocks, in the same order, as the compiled path
    assert [launch[:3] for launch in got["launches"]] == case["compiled"]
    kernels = [launch[0] for launch in got["launches"]]
    assert any("_train_" in k for k in kernels)
    assert any("_backward_" in k for k in kernels)
    # every launch packs the parameter count its PTX entry declares
    counts = ptx_param_counts(Path(case["path"], rb.PTX_FILE).read_text())
    assert all(launch[3] == counts[launch[0]] for launch in got["launches"])
    # a gradient for every input, of its shape; temporaries allocated and all freed
    assert got["grads"] == got["shapes"]
    assert got["events"].count("alloc") == got["events"].count("free") > 0
    assert "memset" in got["events"]


def test_plan_file_is_versioned_and_names_every_step(built: dict[str, dict[str, Any]]) -> None:
    plan = json.loads(Path(built["rgcn"]["path"], rb.PLAN_FILE).read_text())
    assert plan["version"] == rb.PLAN_VERSION == 1
    assert plan["chip"] == "sm_90"
    assert plan["training"] is True
    name = plan["abi"]["name"]
    assert set(plan["functions"]) == {name, f"{name}_train", f"{name}_backward"}
    ops = {step["op"] for f in plan["functions"].values() for step in f["steps"]}
    assert ops == {"alloc", "free", "memset", "launch"}
    # the weight gradient runs as partials + reduction: a temporary sized by the edge count
    backward = plan["functions"][f"{name}_backward"]
    reduce = [
        s for s in backward["steps"] if s["op"] == "launch" and s["kernel"].endswith("_reduce")
    ]
    assert reduce
    partial_temps = {a["temp"] for s in reduce for a in s["args"] if "temp" in a}
    assert all(isinstance(backward["temps"][t]["shape"][0], list) for t in partial_temps)


# ---------------------------------------------------------------------------------------------
# Grid arithmetic
# ---------------------------------------------------------------------------------------------


def _launches(plan: dict[str, Any], fname: str) -> list[dict[str, Any]]:
    return [s for s in plan["functions"][fname]["steps"] if s["op"] == "launch"]


def test_grids_of_a_huge_graph_need_no_32_bit_thread_count(
    built: dict[str, dict[str, Any]],
) -> None:
    """Grids are computed in unbounded integers: with 2^31 - 1 edges, edge-wise launches need
    more than 2^32 threads, and the blocks are the exact ceiling, within CUDA's grid limit."""
    plan = json.loads(Path(built["rgcn"]["path"], rb.PLAN_FILE).read_text())
    fname = f"{plan['abi']['name']}_backward"
    edges, nodes = 2**31 - 1, 2**30
    args = plan["functions"][fname]["args"]
    shapes = []
    for i, spec in enumerate(args):
        rows = edges if i in (0, 1, 2) else nodes  # src, dst, etype are edge-wise
        shapes.append([rows if d is None else d for d in spec["shape"]])
    wide = 0
    for step in _launches(plan, fname):
        grid = [rb.evaluate(e, shapes) for e in step["grid"]]
        block = [rb.evaluate(e, shapes) for e in step["block"]]
        assert min(grid) >= 1
        assert grid[0] <= rb.GRID_LIMITS[0], step["kernel"]
        if grid[0] * block[0] > 2**32:
            wide += 1
            threads = _threads(step["grid"][0])
            assert grid[0] == -(-rb.evaluate(threads, shapes) // block[0])
    assert wide >= 1  # the edge-wise traversal (the input gradient's sum is in the GEMM's output)


def _threads(grid: Any) -> Any:
    """The thread count inside ``(threads + bs - 1) divu bs``."""
    assert grid[0] == "divu"
    assert grid[1][0] == "add"
    return grid[1][1]


def test_grid_beyond_cudas_limit_is_an_error() -> None:
    with pytest.raises(rb.BundleError, match="over CUDA's limit of 2147483647"):
        rb._check_grid("k", (2**31, 1, 1), (256, 1, 1))
    with pytest.raises(rb.BundleError, match="invalid block"):
        rb._check_grid("k", (1, 1, 1), (2048, 1, 1))


def test_expressions() -> None:
    shapes = [(7, 3), (5,)]
    expr = ["divu", ["add", ["mul", ["dim", 0, 0], 8], 255], 256]
    assert rb.evaluate(expr, shapes) == 1
    assert rb.evaluate(["max", ["min", ["dim", 1, 0], 2], 1], shapes) == 2
    assert rb.evaluate(["ceildivu", ["dim", 0, 1], 2], shapes) == 2
    assert rb.show(expr) == "(((arg0[0] mul 8) add 255) divu 256)"
    with pytest.raises(rb.BundleError, match="divides by zero"):
        rb.evaluate(["divu", 1, 0], shapes)
    with pytest.raises(rb.BundleError, match="names no argument dimension"):
        rb.evaluate(["dim", 4, 0], shapes)
    with pytest.raises(rb.BundleError, match="malformed size expression"):
        rb.evaluate(["pow", 2, 3], shapes)
    assert bundle_target._fold("mul", ["dim", 0, 0], 1) == ["dim", 0, 0]
    assert bundle_target._fold("add", 2, 3) == 5


def test_empty_graph_skips_launches(built: dict[str, dict[str, Any]]) -> None:
    """On a graph without edges every edge-wise launch is skipped, none asks for zero blocks,
    and the outputs and gradients still have their shapes (node-wise work runs)."""
    empty = hector.random_graph(N, 0, R, seed=1)
    layer, _, _ = _layer("rgcn")
    driver = FakeDriver()
    fn = rb.load(built["rgcn"]["path"], driver)
    fn.events = []
    x = torch.randn(N, IN, requires_grad=True)
    params = [p.detach().clone().requires_grad_() for p in (layer.weight, layer.root, layer.bias)]
    out = fn(empty, x, *params)
    out.sum().backward()
    assert out.shape == (N, 6)
    assert x.grad is not None
    assert x.grad.shape == x.shape
    skipped = [e for e in fn.events if e.op == "skip"]
    assert skipped
    assert all(min(e.grid) == 0 for e in skipped)
    assert all(min(launch["grid"]) >= 1 for launch in driver.launches)


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


def _copy(src: str, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_bad_bundles_are_refused_clearly(built: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    with pytest.raises(rb.BundleError, match="is not a bundle: it needs plan.json"):
        rb.load(tmp_path)
    old = _copy(built["rgcn"]["path"], tmp_path / "old")
    plan = json.loads((old / rb.PLAN_FILE).read_text())
    plan["version"] = 2
    (old / rb.PLAN_FILE).write_text(json.dumps(plan))
    with pytest.raises(rb.BundleError, match="plan version 2; this executor reads version 1"):
        rb.load(old)
    broken = _copy(built["rgcn"]["path"], tmp_path / "broken")
    (broken / rb.PLAN_FILE).write_text("{not json")
    with pytest.raises(rb.BundleError, match="cannot read the bundle"):
        rb.load(broken)
    no_kernel = _copy(built["rgcn"]["path"], tmp_path / "no_kernel")
    (no_kernel / rb.PTX_FILE).write_text(".version 8.0\n.target sm_90\n")
    with pytest.raises(rb.BundleError, match=r"launches '.*', which kernels.ptx does not hold"):
        rb.load(no_kernel)


def test_wrong_arguments_are_refused_before_any_launch(built: dict[str, dict[str, Any]]) -> None:
    g = hector.random_graph(N, E, R, seed=1)
    driver = FakeDriver()
    fn = rb.load(built["rgcn"]["path"], driver)
    layer, _, _ = _layer("rgcn")
    params = [p.detach() for p in (layer.weight, layer.root, layer.bias)]
    with pytest.raises(rb.BundleError, match="argument #0 is node-wise: expected 30 rows"):
        fn(g, torch.randn(5, IN), *params)
    x_arg = len(hector.data.graph.GRAPH_ARRAYS)  # the first tensor after the graph's arrays
    with pytest.raises(rb.BundleError, match=rf"argument #{x_arg} must be f32\[\?x8\].*rebuild it"):
        fn(g, torch.randn(N, 4), *params)
    with pytest.raises(rb.BundleError, match="sliced by etype: expected 3 slices"):
        fn(g, torch.randn(N, IN), params[0][:2], *params[1:])
    with pytest.raises(rb.BundleError, match="takes 4 tensors after the graph, got 3"):
        fn.runner.call(fn.bundle.name, g, [torch.randn(N, IN), *params[:2]])
    with pytest.raises(rb.BundleError, match="a bundle runs on CUDA tensors"):
        rb.load(built["rgcn"]["path"])(g, torch.randn(N, IN), *params)
    other = rb.load(built["rgcn"]["path"], FakeDriver(arch="sm_80"))
    with pytest.raises(rb.BundleError, match="built for sm_90, the device is sm_80"):
        other(g, torch.randn(N, IN), *params)
    newer = FakeDriver(arch="sm_100")  # PTX for sm_90 is compiled by the driver for later GPUs
    rb.load(built["rgcn"]["path"], newer)(g, torch.randn(N, IN), *params)
    assert newer.launches
    assert not driver.launches


def test_forward_only_bundle_refuses_training(tmp_path: Path) -> None:
    layer, g, x = _layer("rgcn")
    shapes = [(N, IN), (R, IN, 6), (IN, 6), (6,)]  # shapes stand for example tensors
    path = bundle.build(layer.compiled, g, *shapes, out=tmp_path / "fwd", training=False)
    fn = rb.load(path, FakeDriver())
    inputs = _core_inputs(layer, g, x)
    out = fn(g, *inputs)
    assert out.shape == (N, 6)
    with pytest.raises(rb.BundleError, match="built without training=True"):
        fn(g, *(t.clone().requires_grad_() for t in inputs))


def test_plan_refuses_ops_it_cannot_express() -> None:
    from mlir import ir

    from hector.dialects import make_context

    text = """
    func.func @f(%a: memref<?xf32>) {
      %c0 = arith.constant 0 : index
      %n = memref.dim %a, %c0 : memref<?xf32>
      %s = arith.shli %n, %c0 : index
      %t = gpu.alloc (%s) : memref<?xf32>
      gpu.dealloc %t : memref<?xf32>
      return
    }
    """
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        func = next(iter(module.body.operations))
        with pytest.raises(
            bundle.BundleError,
            match="cannot put 'arith.shli' in a launch plan: the plan has no step",
        ):
            bundle.plan_function(func.operation)


def test_writing_over_a_foreign_directory_is_refused(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(bundle.BundleError, match="is not a bundle; refusing to overwrite it"):
        bundle.write(foreign, {"version": 1}, "")
    assert (foreign / "notes.txt").read_text() == "mine"
    assert sorted(os.listdir(tmp_path)) == ["foreign"]  # no temporary left behind


def test_cli_writes_a_bundle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # In this process: the command line as a process of its own is test_cli.py's (_hector).
    from hector.tools.cli import main

    out = tmp_path / "rgcn"
    argv = ["compile", "--model", "rgcn", "--target", "cuda"]
    assert main([*argv, "--bundle", str(out)]) == 0
    assert "bundle written to" in capsys.readouterr().err
    loaded = rb.Bundle.load(out)
    assert loaded.training
    assert set(loaded.functions) == {"rgcn_layer", "rgcn_layer_train", "rgcn_layer_backward"}
    assert main([*argv[:-2], "--bundle", str(out)]) == 1
    assert capsys.readouterr().err.strip() == "error: --bundle DIR and --target cuda go together"


def test_param_counts_of_plans_match_the_ptx(built: dict[str, dict[str, Any]]) -> None:
    """Each launch's arguments, as the executor packs them (rank from the plan's argument and
    temporary shapes), expand to the PTX entry's parameter count."""
    for case in built.values():
        loaded = rb.Bundle.load(case["path"])
        counts = ptx_param_counts(loaded.ptx)
        for fn in loaded.functions.values():
            for step in fn.steps:
                if not isinstance(step, rb.Launch):
                    continue
                ranks = [fn.rank(a) for a in step.args if isinstance(a, rb.BufferRef)]
                memrefs = [rb.MemRef.from_pointer(1, [1] * r, [1] * r) for r in ranks]
                scalars = [0] * (len(step.args) - len(ranks))
                assert param_count([*memrefs, *scalars]) == counts[step.kernel], step.kernel


# ---------------------------------------------------------------------------------------------
# The GPU check's bundles and script (hector_bench.bundle_check), without a GPU
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def check_bundles(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    root = tmp_path_factory.mktemp("check")
    cases = [(m, "aifb") for m in ("rgcn", "rgat", "hgt")]
    return root, bc_build_check_bundles(root, cases=cases, scale=0.02, in_dim=8, hidden=8)


def test_check_glue_gives_the_bundle_what_hector_models_gives_its_core() -> None:
    """bundle_check derives each bundle's arguments from the PyG layer (hector.models needs the
    compiler); they are the tensors hector.models' layer loaded from that PyG layer passes."""
    from torch_geometric.nn import HGTConv, RGATConv

    from hector_bench import bundle_check as bc

    g, x = _hetero()
    torch.manual_seed(5)
    conv = HGTConv(8, 8, META, heads=2)
    with torch.no_grad():
        for p in conv.p_rel.values():
            p.uniform_(0.5, 1.5)
    want = _core_inputs(HGTLayer.from_pyg(conv), g, x)
    have = bc.hgt_args(conv, x)
    assert len(have) == len(want) == 13
    for a, b in zip(have, want, strict=True):
        torch.testing.assert_close(a.detach(), b)
    rg = hector.random_graph(N, E, R, seed=1)
    rconv = RGATConv(IN, 4, R, heads=2)
    xr = torch.randn(N, IN)
    want = _core_inputs(RGATLayer.from_pyg(rconv), rg, xr)
    for a, b in zip(bc.rgat_args(rconv, xr), want, strict=True):
        torch.testing.assert_close(a.detach(), b)


def test_check_script_runs_every_case_through_the_fake_driver(
    check_bundles: tuple[Path, list[dict[str, Any]]],
) -> None:
    """Each case of the check runs end to end (graph, PyG layer, glue, bundle forward and
    backward, error table, timing) on the CPU with the fake driver; the kernels do not run
    there, so only the plumbing is checked, not the numbers."""
    from hector_bench import bundle_check as bc

    root, cases = check_bundles
    manifest = json.loads((root / bc.CHECK_FILE).read_text())
    assert [c["bundle"] for c in manifest["cases"]] == ["rgcn-aifb", "rgat-aifb", "hgt-aifb"]
    for case in cases:
        record = bc.check_case(case, str(root), 1, torch.device("cpu"), driver=FakeDriver())
        assert record["status"] in ("PASSED", "FAILED")
        assert record["launches"] > 0
        names = set(record["errors"])
        assert ("out" in names) or any(n.startswith("out[") for n in names)
        assert any(n.startswith("grad x") for n in names)
        assert sum(n.startswith("grad ") for n in names) > 2  # parameter gradients compared
        assert record["hector_ms"] > 0
        assert record["pyg_ms"] > 0


def test_check_command_without_cuda_or_bundles(tmp_path: Path) -> None:
    from hector_bench import bundle_check as bc

    out = tmp_path / "report.json"
    assert bc.run(["--bundles", str(tmp_path), "--out", str(out)]) == 2
    assert not out.exists()


def test_check_command_runs_where_mlir_is_absent(tmp_path: Path) -> None:
    proc = run_python(
        "-m", "hector_bench.bundle_check", "--bundles", str(tmp_path), "--out", "r.json"
    )
    assert proc.returncode == 2, proc.stderr
    assert "cannot read" in proc.stderr
    assert "ModuleNotFoundError" not in proc.stderr


def test_a_layer_runs_on_a_bundle_in_place_of_its_compiled_core(
    built: dict[str, dict[str, Any]],
) -> None:
    """A loaded bundle is called like the compiled core, so a hector.models layer whose core is
    replaced by it trains as before (forward glue and gradients to every parameter)."""
    layer, g, x = _layer("hgt")
    assert layer.load_bundle(built["hgt"]["path"], FakeDriver()) is layer
    with pytest.raises(TypeError, match="runs a loaded bundle"):
        layer.compiled  # noqa: B018  (the property raises)
    xs = {k: v.clone().requires_grad_() for k, v in x.items()}
    out = layer(g, xs)
    assert set(out) == {"paper", "author"}
    sum(v.sum() for v in out.values()).backward()
    assert all(p.grad is not None for p in layer.parameters())
    assert all(v.grad is not None for v in xs.values())


# ---------------------------------------------------------------------------------------------
# Numbers: a bundle run through a driver that executes its kernels on the CPU
# ---------------------------------------------------------------------------------------------


class HostKernelDriver(FakeDriver):
    """A fake driver that also *runs* each launch: the same program's GPU kernels lowered with
    ``hector-gpu-kernels-on-host`` and JIT-compiled for the CPU, called with the very parameters
    the executor packed (``__grid_<kernel>`` takes them as the GPU kernel does)."""

    def __init__(self, traced: Any, options: Any) -> None:
        super().__init__()
        from mlir import ir
        from mlir.execution_engine import ExecutionEngine

        from hector.lowering.cpu.jit import runtime_symbols
        from hector.lowering.pipelines import LLVM_CPU
        from hector.passes.pipeline import run_pipeline
        from hector.targets.driver import run_stages

        staged = run_stages(traced, "gpu", until="gpu", autodiff=True, options=options)
        with staged.context, ir.Location.unknown():
            run_pipeline(staged.module, "hector-gpu-kernels-on-host", verify=False)
            run_pipeline(staged.module, LLVM_CPU, verify=False)
            self.engine = ExecutionEngine(staged.module, opt_level=2)
            # what LLVM_CPU's code calls: the async runtime, runner utilities, host memory cache
            for name, address in runtime_symbols().items():
                self.engine.raw_register_runtime(name, address)
        self._keep = staged

    def get_function(self, module: Any, name: str) -> Any:
        return (module, f"__grid_{name}")

    def launch(self, function, grid, block, params, shared, stream) -> None:  # noqa: ANN001
        super().launch(function, grid, block, params, shared, stream)
        # The engine's packed entry: one void* per argument, pointing at its value.
        cells = [ctypes.c_int64(v) for v in [*self.launches[-1]["values"], grid[0], block[0]]]
        packed = (ctypes.c_void_p * len(cells))(*[ctypes.addressof(c) for c in cells])
        entry = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(self.engine.raw_lookup(function[1]))
        entry(packed)


@pytest.mark.parametrize("model", ["rgcn", "rgat", "hgt"])
def test_bundle_numbers_equal_the_cpu_path(built: dict[str, dict[str, Any]], model: str) -> None:
    """The bundle executor (plan, temporaries, views, memsets, launches, autograd) with its
    kernels executed on the CPU gives the outputs and gradients of the CPU back end."""
    layer, g, x = _layer(model)
    core, inputs = bundle._capture(layer, g, (x,))
    traced = frontend.trace(core.fn, [tuple(t.shape) for t in inputs])
    driver = HostKernelDriver(traced, core.options_for(g))
    fn = rb.load(built[model]["path"], driver)
    torch.manual_seed(7)
    have_in = [t.clone().requires_grad_() for t in inputs]
    want_in = [t.clone().requires_grad_() for t in inputs]
    have, want = fn(g, *have_in), core(g, *want_in)
    torch.testing.assert_close(have, want, rtol=1e-4, atol=1e-5)
    weights = torch.randn_like(want)
    (have * weights).sum().backward()
    (want * weights).sum().backward()
    for a, b in zip(have_in, want_in, strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-4)
    assert driver.launches
