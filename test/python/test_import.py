"""``hector.import_model``: plain-PyTorch RGCN, RGAT and HGT-style layers imported through
torch-mlir, raised to hector_inter and compiled (what is not raised through torch-mlir's linalg
path); forward and backward against eager PyTorch within 1e-4, plus strict-mode diagnostics and
graph-binding errors."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import torch
from torch import nn

import hector
from hector.frontends.importer import ImportError_
from hector_bench.importer import HGT, RGAT, RGCN

N, E, R, H, D = 40, 240, 4, 2, 4


@pytest.fixture(scope="module")
def g() -> hector.HeteroGraph:
    return hector.random_graph(N, E, R, isolated_nodes=2, seed=3)


def _check(model: nn.Module, imported: nn.Module, inputs: list) -> None:
    xs = [t.clone().requires_grad_() if t.is_floating_point() else t for t in inputs]
    xr = [t.clone().requires_grad_() if t.is_floating_point() else t for t in inputs]
    out, want = imported(*xs), model(*xr)
    torch.testing.assert_close(out, want.detach(), atol=1e-4, rtol=1e-4)
    lw = torch.randn_like(want)
    (out * lw).sum().backward()
    mine = {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    (want * lw).sum().backward()
    for n, p in model.named_parameters():
        if p.grad is None:  # a parameter the forward does not use (PyG's optional ones)
            assert mine[n] is None, n
            continue
        scale = max(1.0, p.grad.abs().max().item())
        assert (mine[n] - p.grad).abs().max().item() / scale < 1e-4, n
    for a, b in zip(xs, xr, strict=True):
        if a.is_floating_point():
            scale = max(1.0, b.grad.abs().max().item())
            assert (a.grad - b.grad).abs().max().item() / scale < 1e-4


def _sorted(g: hector.HeteroGraph) -> list[torch.Tensor]:
    ei, et = g.edge_index_sorted()
    return [ei[0], ei[1], et]


def test_rgcn_forward_backward(g: hector.HeteroGraph) -> None:
    torch.manual_seed(0)
    model, x = RGCN(N, R, 8, 6), torch.randn(N, 8)
    inputs = [x, *_sorted(g), g.norm_dst_etype]
    imported = hector.import_model(model, inputs, graph=g, strict=True)
    assert imported.report.raised["sum_to_dst"] == 1
    assert len(imported.segments) == 1
    _check(model, imported, inputs)


def test_rgat_forward_backward(g: hector.HeteroGraph) -> None:
    torch.manual_seed(1)
    model, x = RGAT(N, R, 8, H, D), torch.randn(N, 8)
    inputs = [x, *_sorted(g)]
    imported = hector.import_model(model, inputs, graph=g, strict=True)
    assert imported.report.raised["edge_softmax"] == 1
    _check(model, imported, inputs)


def test_hgt_style_forward_backward(g: hector.HeteroGraph) -> None:
    torch.manual_seed(2)
    model, x = HGT(N, R, 8, H, D), torch.randn(N, 8)
    inputs = [x, *_sorted(g)]
    imported = hector.import_model(model, inputs, graph=g)
    assert imported.report.raised["dot"] == 1
    # att[etype] / sqrt(D) and its bmm are not raised: two compiled linalg segments.
    assert [s.kind for s in imported.torch_segments] == ["linalg", "linalg"]
    _check(model, imported, inputs)
    assert all(s.backward for s in imported.torch_segments)


def test_original_edge_order_is_permuted(g: hector.HeteroGraph) -> None:
    """Index inputs in the user's (unsorted) order: edge-wise inputs are permuted in."""
    torch.manual_seed(4)
    inv = torch.empty_like(g.perm)
    inv[g.perm] = torch.arange(E)
    src, dst, et = (t[inv] for t in _sorted(g))
    model, x = RGCN(N, R, 8, 6), torch.randn(N, 8)
    inputs = [x, src, dst, et, g.norm_dst_etype[inv]]
    imported = hector.import_model(model, inputs, graph=g)
    assert imported.order == "original"
    _check(model, imported, inputs)


def test_unraised_ops_compile_through_linalg_or_fail_strict(g: hector.HeteroGraph) -> None:
    class Odd(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(8, 8) * 0.3)

        def forward(self, x, src, dst):  # noqa: D102
            h = torch.zeros(N, 8).index_add(0, dst, x[src] @ self.w)
            return torch.sin(h) + h  # sin has no hector_inter op

    torch.manual_seed(5)
    model, x = Odd(), torch.randn(N, 8)
    inputs = [x, *_sorted(g)[:2]]
    imported = hector.import_model(model, inputs, graph=g)
    assert [name for name, _ in imported.report.unsupported] == ["torch.aten.sin"]
    # sin (and the add after it) form one torch segment compiled through torch-mlir's linalg.
    (seg,) = [s for s in imported.torch_segments if s.kind == "linalg"]
    assert "torch.aten.sin" in seg.ir("torch")
    assert "math.sin" in seg.ir("loops")
    _check(model, imported, inputs)
    assert seg.backward, "the backward went through the compiled vjp"
    with pytest.raises(ImportError_, match=r"test_import\.py:\d+: torch\.aten\.sin"):
        hector.import_model(model, inputs, graph=g, strict=True)


def test_missing_graph_binding_is_an_error(g: hector.HeteroGraph) -> None:
    model = RGCN(N, R, 8, 6)
    bogus = torch.randint(0, N, (E,))
    with pytest.raises(ImportError_, match="no example input is the graph's src/dst"):
        hector.import_model(model, [torch.randn(N, 8), bogus, bogus, bogus, g.norm_dst], graph=g)
    with pytest.raises(TypeError, match="graph must be a hector.HeteroGraph"):
        hector.import_model(model, [torch.randn(N, 8)], graph=None)  # type: ignore[arg-type]


class _Located(nn.Module):
    """A gather, a shared matmul and an index_add, one per line (the lines are checked)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8) * 0.3)

    def forward(self, x, src, dst):  # noqa: D102
        h = x[src]
        m = h @ self.w
        return torch.zeros(N, 8).index_add(0, dst, m)


def _user_line(loc: Any) -> tuple[str, int]:
    """The innermost ``file:line`` of a location (the callee of nested call sites)."""
    while loc.is_a_callsite():
        loc = loc.callee
    assert loc.is_a_file(), loc
    return loc.filename, loc.start_line


def test_compiled_regions_keep_the_users_lines(g: hector.HeteroGraph) -> None:
    """Each op of a compiled region is located at the user's line of the torch op it was
    raised from, in the text handed to Hector's MLIR copy."""
    from mlir import ir

    from hector.dialects import make_context

    torch.manual_seed(6)
    model, x = _Located(), torch.randn(N, 8)
    imported = hector.import_model(model, [x, *_sorted(g)[:2]], graph=g, strict=True)
    first = inspect.getsourcelines(_Located.forward)[1]
    want = {
        "hector_inter.gather_src": first + 1,
        "hector_inter.typed_linear": first + 2,
        "hector_inter.sum_to_dst": first + 3,
    }
    with make_context():
        module = ir.Module.parse(imported.hector_ir())
        ops = [op for op in module.body.operations[0].regions[0].blocks[0].operations]
        got = {op.name: _user_line(op.location) for op in ops if op.name in want}
    assert got == {name: (__file__, line) for name, line in want.items()}


def test_silu_is_kept_whole_and_raised(g: hector.HeteroGraph) -> None:
    """A unary function declared with its torch op (here SiLU) is kept whole through the
    decompositions and raised to ``unary``, forward and backward."""

    class SiluMessages(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(8, 6))

        def forward(self, x: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, et: torch.Tensor):
            h = torch.nn.functional.silu(x[src] @ self.w)
            return torch.zeros(N, 6).index_add(0, dst, h)

    torch.manual_seed(0)
    model, x = SiluMessages(), torch.randn(N, 8)
    imported = hector.import_model(model, [x, *_sorted(g)], graph=g, strict=True)
    assert imported.report.raised["unary"] == 1
    _check(model, imported, [x, *_sorted(g)])
