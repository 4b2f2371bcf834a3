"""The non-raised part of imported models through torch-mlir's linalg path
(``lowering/cpu/torch_linalg.py``): segments compiled for the CPU, their compiled backward,
``fallback="eager"``, and the errors for ops torch-mlir cannot lower."""

from __future__ import annotations

import pytest
import torch
from test_import import N, _check, _sorted
from torch import nn

import hector
from hector.frontends.importer import ImportError_
from hector.lowering.cpu.torch_linalg import LinalgLoweringError, compile_torch_function


@pytest.fixture(scope="module")
def g() -> hector.HeteroGraph:
    return hector.random_graph(N, 240, 4, isolated_nodes=2, seed=3)


class Mixed(nn.Module):
    """A raised aggregation followed by ops Hector has no kernel for: layer_norm, sin and a
    matmul with a matrix computed from the rows (not a weight, so not raised)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8) * 0.3)
        self.gamma = nn.Parameter(torch.rand(8) + 0.5)

    def forward(self, x, src, dst):  # noqa: D102
        h = torch.zeros(N, 8).index_add(0, dst, x[src] @ self.w)
        h = nn.functional.layer_norm(torch.sin(h), [8], self.gamma)
        return h @ (h.t() @ h) / N + h


class Erfinv(nn.Module):
    """A raised aggregation, then ``erfinv``: torch-mlir has no linalg lowering for it."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8) * 0.3)

    def forward(self, x, src, dst):  # noqa: D102
        h = torch.zeros(N, 8).index_add(0, dst, x[src] @ self.w)
        return torch.erfinv(torch.tanh(h) * 0.5)


def _inputs(g: hector.HeteroGraph) -> list[torch.Tensor]:
    torch.manual_seed(7)
    return [torch.randn(N, 8), *_sorted(g)[:2]]


def test_unraised_ops_run_in_a_compiled_linalg_segment(g: hector.HeteroGraph) -> None:
    torch.manual_seed(0)
    model, inputs = Mixed(), _inputs(g)
    imported = hector.import_model(model, inputs, graph=g)
    assert imported.report.raised["sum_to_dst"] == 1
    (seg,) = [s for s in imported.torch_segments if s.kind == "linalg"]
    torch_ir = seg.ir("torch")
    for op in ("torch.aten.sin", "torch.aten.mm", "torch.aten.rsqrt"):  # rsqrt: layer_norm
        assert op in torch_ir, op
    assert "linalg.matmul" in seg.ir("linalg") or "linalg.generic" in seg.ir("linalg")
    assert "scf.for" in seg.ir("loops")
    assert "llvm.func" in seg.ir("llvm")
    assert seg.compiled is not None
    assert not seg.backward  # backward built on demand only
    with torch.no_grad():
        imported(*inputs)
    assert not seg.backward
    _check(model, imported, inputs)
    ((mask, (bwd, _, _)),) = seg.backward.items()
    assert any(mask)
    assert "llvm.func" in bwd.ir("llvm")
    # The compiled segments are cached: a second training step compiles nothing new.
    model.zero_grad(set_to_none=True)
    _check(model, imported, inputs)
    assert len(seg.backward) == 1


def test_eager_fallback_is_explicit_and_matches(g: hector.HeteroGraph) -> None:
    torch.manual_seed(1)
    model, inputs = Mixed(), _inputs(g)
    imported = hector.import_model(model, inputs, graph=g, fallback="eager")
    assert imported.torch_segments
    assert {s.kind for s in imported.torch_segments} <= {"eager", "view"}
    assert all(s.compiled is None for s in imported.torch_segments)
    _check(model, imported, inputs)


def test_unlowerable_op_names_the_op_and_line(g: hector.HeteroGraph) -> None:
    torch.manual_seed(2)
    model, inputs = Erfinv(), _inputs(g)
    with pytest.raises(ImportError_) as info:
        hector.import_model(model, inputs, graph=g)
    msg = str(info.value)
    assert "cannot lower the forward of torch_segment" in msg
    assert "test_import_linalg.py:" in msg
    assert "torch.aten.erfinv" in msg
    assert "fallback='eager'" in msg
    imported = hector.import_model(model, inputs, graph=g, fallback="eager")
    _check(model, imported, inputs)


def test_bad_fallback_value(g: hector.HeteroGraph) -> None:
    with pytest.raises(ValueError, match="fallback must be 'linalg' or 'eager', got 'jit'"):
        hector.import_model(Mixed(), _inputs(g), graph=g, fallback="jit")


def _torch_text(module: nn.Module, *args: torch.Tensor) -> str:
    from torch_mlir import fx

    out = fx.export_and_import(module, *args, output_type="torch")
    return out.operation.get_asm(enable_debug_info=True)


def test_compiled_function_numerics_and_input_checks() -> None:
    class Ops(nn.Module):
        def forward(self, x, w, idx):  # noqa: D102
            y = torch.relu(x @ w).view(-1, 2, 4).sum(-1)
            z = torch.zeros(5, 2).index_add(0, idx, y)  # tm_tensor.scatter in linalg
            return z * 2, y.softmax(-1), idx * 3

    args = (torch.randn(6, 3), torch.randn(3, 8), torch.tensor([0, 1, 2, 3, 4, 0]))
    fn = compile_torch_function(_torch_text(Ops(), *args))
    assert "tm_tensor.scatter" in fn.ir("linalg")
    for got, want in zip(fn(*args), Ops()(*args), strict=True):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match=r"input 0 must be torch.float32 \[6, 3\], got"):
        fn(torch.randn(5, 3), *args[1:])
    with pytest.raises(TypeError, match="takes 3 tensors, got 1"):
        fn(args[0])


def test_lowering_error_lists_ops() -> None:
    class Bad(nn.Module):
        def forward(self, x):  # noqa: D102
            return torch.erfinv(x.tanh())

    with pytest.raises(LinalgLoweringError) as info:
        compile_torch_function(_torch_text(Bad(), torch.randn(4, 4)))
    assert info.value.stage == "linalg"
    assert [name for name, _ in info.value.ops] == ["torch.aten.erfinv"]
    assert info.value.ops[0][1].startswith(__file__.rsplit("/", 1)[0])


def test_bench_import_rejects_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from hector_bench import importer as bench

    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    with pytest.raises(SystemExit) as exc:  # refused by the parser (issue 39)
        p.parse_args(["--model", "rgat", "--runs", "0"])
    assert exc.value.code == 2
    assert "argument --runs: must be from 1 to 100_000, got 0" in capsys.readouterr().err
    assert bench.run(p.parse_args(["--model", "hgt", "--dataset", "nope:x"])) == 1
    assert "error: cannot load dataset 'nope:x'" in capsys.readouterr().err
