"""Target ``cuda`` (hector.targets.cuda) on Hector's models: each model's training module through
the emulated host path and its PTX assembled, and, on a GPU (scripts/gpu_check.sh), the models
against PyG. The host path itself is checked in test_gpu_exec.py.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys

import pytest
import torch
from _typed_graph import META, hetero

import hector
from hector.models import _rgcn_layer
from hector.runtime.launch import ptx_entries
from hector.targets import cuda as cuda_target

HAS_CUDA = torch.cuda.is_available()
gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
N, E, R, IN, OUT = 30, 100, 3, 8, 4


@pytest.fixture(scope="module")
def g() -> hector.HeteroGraph:
    return hector.random_graph(N, E, R, seed=1)


@pytest.mark.parametrize("model", ["rgcn", "rgat", "hgt"])
def test_model_training_modules_run_emulated_and_assemble(
    g: hector.HeteroGraph, model: str, tmp_path
) -> None:
    """Each model's training module goes through the host path (emulated) and its PTX, as
    the driver would load it, assembles for sm_90 (where ptxas is installed)."""
    from hector.models import HGTLayer, RGATLayer

    torch.manual_seed(0)
    if model == "hgt":
        graph, _, x = hetero("cpu")
        layer = HGTLayer(8, 8, *META, heads=2)
        fn = layer._fn
    elif model == "rgat":
        graph, x = g, torch.randn(N, IN)
        layer = RGATLayer(IN, 4, R, heads=2)
        fn = layer._fn
    else:
        graph, x = g, torch.randn(N, IN)
        fn = hector.compile(_rgcn_layer)
        w, w0, b = (torch.randn(*s, requires_grad=True) for s in ((R, IN, OUT), (IN, OUT), (OUT,)))
        layer = lambda gg, xx: fn(gg, xx, w, w0, b)  # noqa: E731
    fn.target = "cuda"
    xs = (
        {k: v.requires_grad_() for k, v in x.items()} if isinstance(x, dict) else x.requires_grad_()
    )
    with cuda_target.emulate() as rt:
        out = layer(graph, xs)
        outs = list(out.values()) if isinstance(out, dict) else [out]
        sum(o.sum() for o in outs).backward()
    entry = next(iter(fn._cache.values()))
    assert isinstance(entry, cuda_target.GpuExecEntry)
    assert not rt.allocations
    launched = {launch.kernel for launch in rt.launches}
    assert launched <= set(ptx_entries(entry.ptx))
    assert any("_backward_" in k for k in launched)
    assert any("_train_" in k for k in launched)
    if shutil.which("ptxas") is None:
        pytest.skip("ptxas (CUDA toolkit) not found: the PTX was not assembled")
    src = tmp_path / f"{model}.ptx"
    src.write_text(entry.ptx)
    proc = subprocess.run(
        ["ptxas", "-arch=sm_90", str(src), "-o", str(tmp_path / f"{model}.cubin")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


# ---------------------------------------------------------------------------------------------
# On a GPU (scripts/gpu_check.sh)
# ---------------------------------------------------------------------------------------------


def _close(have: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert have.device == want.device, what
    scale = max(1.0, want.abs().max().item())
    err = (have - want).abs().max().item() / scale
    assert err < 1e-4, f"{what}: relative error {err:.2e}"


def _grads_close(layer: torch.nn.Module, want: dict[str, torch.Tensor]) -> None:
    params = dict(layer.named_parameters())
    for name, grad in want.items():
        _close(params[name].grad, grad, f"grad of {name}")


@gpu
@needs_cuda
def test_gpu_chip_matches_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HECTOR_GPU_CHIP", raising=False)
    major, minor = torch.cuda.get_device_capability()
    assert cuda_target.gpu_chip() == f"sm_{major}{minor}"


@gpu
@needs_cuda
def test_rgcn_on_cuda_matches_pyg(g: hector.HeteroGraph) -> None:
    from torch_geometric.nn import RGCNConv

    from hector.models import RGCNLayer

    torch.manual_seed(0)
    conv = RGCNConv(IN, 6, R).cuda()
    torch.nn.init.normal_(conv.bias)
    layer = RGCNLayer.from_pyg(conv).cuda()
    ei = torch.stack([g.src.long(), g.dst.long()]).cuda()
    et = g.etype.long().cuda()
    x1 = torch.randn(N, IN, device="cuda", requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    want, have = conv(x1, ei, et), layer(g, x2)
    _close(have, want, "output")
    want.square().sum().backward()
    have.square().sum().backward()
    _close(x2.grad, x1.grad, "grad of x")
    _grads_close(
        layer, {"weight": conv.weight.grad, "root": conv.root.grad, "bias": conv.bias.grad}
    )
    entry = next(iter(hector.models.rgcn_layer._cache.values()))
    assert isinstance(entry, cuda_target.GpuExecEntry)


@gpu
@needs_cuda
@pytest.mark.parametrize("heads", [1, 2])
def test_rgat_on_cuda_matches_pyg(g: hector.HeteroGraph, heads: int) -> None:
    from torch_geometric.nn import RGATConv

    from hector.models import RGATLayer

    torch.manual_seed(1)
    conv = RGATConv(IN, 4, R, heads=heads).cuda()
    torch.nn.init.normal_(conv.bias)
    layer = RGATLayer.from_pyg(conv).cuda()
    ei = torch.stack([g.src.long(), g.dst.long()]).cuda()
    et = g.etype.long().cuda()
    x1 = torch.randn(N, IN, device="cuda", requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    want, have = conv(x1, ei, et), layer(g, x2)
    _close(have, want, "output")
    want.square().sum().backward()
    have.square().sum().backward()
    _close(x2.grad, x1.grad, "grad of x")
    _grads_close(
        layer,
        {"weight": conv.weight.grad, "q": conv.q.grad, "k": conv.k.grad, "bias": conv.bias.grad},
    )


@gpu
@needs_cuda
@pytest.mark.parametrize("out_dim", [8, 6])
def test_hgt_on_cuda_matches_pyg(out_dim: int) -> None:
    from torch_geometric.nn import HGTConv

    from hector.models import HGTLayer

    torch.manual_seed(2)
    graph, eid, x = hetero()
    conv = HGTConv(8, out_dim, META, heads=2).cuda()
    with torch.no_grad():
        for p in conv.skip.values():
            p.fill_(0.3)
        for p in conv.p_rel.values():
            p.uniform_(0.5, 1.5)
    layer = HGTLayer.from_pyg(conv).cuda()
    x1 = {k: v.clone().requires_grad_() for k, v in x.items()}
    x2 = {k: v.clone().requires_grad_() for k, v in x.items()}
    want, have = conv(x1, eid), layer(graph, x2)
    assert set(have) == set(want)
    for k in want:
        _close(have[k], want[k], f"output {k}")
    sum(v.square().sum() for v in want.values()).backward()
    sum(v.square().sum() for v in have.values()).backward()
    for k in x1:
        _close(x2[k].grad, x1[k].grad, f"grad of x[{k}]")
    _grads_close(layer, {"k_rel": conv.k_rel.weight.grad, "v_rel": conv.v_rel.weight.grad})


@gpu
@needs_cuda
def test_bench_gnn_runs_hector_on_cuda(tmp_path) -> None:
    out = tmp_path / "rgcn.json"
    cmd = [sys.executable, "-m", "hector.tools.cli", "bench", "gnn", "--device", "cuda"]
    cmd += ["--model", "rgcn", "--dataset", "synthetic:aifb", "--mode", "training"]
    cmd += ["--runs", "2", "--no-memory", "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["device"] == "cuda"
    hector_row = next(r for r in record["results"] if r["system"] == "hector")
    assert "skipped" not in hector_row
    assert math.isfinite(hector_row["median_ms"])
    assert hector_row["max_abs_err"] < 1e-3
