"""``hector.import_model`` numerics for the degree-normalisation patterns (``degree_norm`` by
``dst`` and by ``dst_etype``, written with index_add / scatter_add of ones), and the import-order
guard that keeps torch-mlir's MLIR libraries from loading before Hector's (checked in fresh
subprocesses)."""

from __future__ import annotations

import pytest
import torch
from _fresh_python import run_python
from test_import import _check, _sorted
from torch import nn

import hector

N, E, R = 40, 240, 4


@pytest.fixture(scope="module")
def g() -> hector.HeteroGraph:
    return hector.random_graph(N, E, R, isolated_nodes=2, seed=7)


class MeanRGCN(nn.Module):
    """RGCN with a per-(dst, relation) mean (``by="dst_etype"``) or an in-degree mean
    (``by="dst"``), the normaliser built the way users write it."""

    def __init__(self, by: str, etype_major: bool = False) -> None:
        super().__init__()
        self.by, self.etype_major = by, etype_major
        self.weight = nn.Parameter(torch.randn(R, 8, 6) * 0.3)

    def forward(self, x, src, dst, etype):  # noqa: D102
        m = torch.bmm(x[src].unsqueeze(1), self.weight[etype]).squeeze(1)
        if self.by == "dst":
            deg = torch.zeros(N).index_add(0, dst, torch.ones(E))
            m = m * (1.0 / deg.clamp(min=1)[dst]).unsqueeze(-1)
        elif self.etype_major:
            key = etype * N + dst
            m = m / torch.zeros(R * N).scatter_add(0, key, torch.ones(E))[key].unsqueeze(-1)
        else:
            key = dst * R + etype
            cnt = torch.zeros(N * R).index_add(0, key, torch.ones(E))
            m = m * (1.0 / cnt.clamp(min=1)[key]).unsqueeze(-1)
        return torch.zeros(N, 6).index_add(0, dst, m)


@pytest.mark.parametrize(
    ("by", "etype_major"), [("dst", False), ("dst_etype", False), ("dst_etype", True)]
)
def test_degree_norm_imports_and_matches(g: hector.HeteroGraph, by: str, etype_major: bool) -> None:
    torch.manual_seed(0)
    model, x = MeanRGCN(by, etype_major), torch.randn(N, 8)
    inputs = [x, *_sorted(g)]
    imported = hector.import_model(model, inputs, graph=g, strict=True)
    assert imported.report.raised["degree_norm"] == 1
    # The region's graph is its first argument (%arg0): degree_norm reads the graph alone.
    assert f'degree_norm"(%arg0) {{by = "{by}"}}' in imported.hector_ir()
    _check(model, imported, inputs)
    # The normaliser really is the graph's: per-relation means differ from in-degree means.
    want = g.norm_dst_etype if by == "dst_etype" else g.norm_dst
    other = g.norm_dst if by == "dst_etype" else g.norm_dst_etype
    assert not torch.allclose(want, other)


def test_degree_norm_in_original_edge_order(g: hector.HeteroGraph) -> None:
    """Index inputs in the user's order: the norm (graph-sorted) lines up after permuting."""
    torch.manual_seed(1)
    inv = torch.empty_like(g.perm)
    inv[g.perm] = torch.arange(E)
    model, x = MeanRGCN("dst_etype"), torch.randn(N, 8)
    inputs = [x, *(t[inv] for t in _sorted(g))]
    imported = hector.import_model(model, inputs, graph=g, strict=True)
    assert imported.order == "original"
    _check(model, imported, inputs)


def test_too_small_key_stride_is_not_a_degree_norm(g: hector.HeteroGraph) -> None:
    """``dst * 2 + etype`` with 4 relations mixes (dst, etype) pairs: not raised, still exact."""

    class Collide(MeanRGCN):
        def forward(self, x, src, dst, etype):  # noqa: D102
            key = dst * 2 + etype
            cnt = torch.zeros(N * R).index_add(0, key, torch.ones(E))
            return x[src] * (1.0 / cnt.clamp(min=1)[key]).unsqueeze(-1)

    torch.manual_seed(2)
    model, x = Collide("dst_etype"), torch.randn(N, 8)
    inputs = [x, *_sorted(g)]
    imported = hector.import_model(model, inputs, graph=g)
    assert "degree_norm" not in imported.report.raised
    assert "torch.aten.reciprocal" in {n for n, _ in imported.report.unsupported}
    out = imported(*inputs)
    torch.testing.assert_close(out, model(*inputs), atol=1e-5, rtol=1e-5)


def test_dict_inputs_are_a_clear_error(g: hector.HeteroGraph) -> None:
    from hector.frontends.importer import ImportError_

    with pytest.raises(ImportError_, match="example input 0 is a dict; import_model takes tensors"):
        hector.import_model(MeanRGCN("dst"), [{"n": torch.randn(N, 8)}, *_sorted(g)], graph=g)


_python = run_python


def test_import_hector_loads_mlir_without_torch() -> None:
    r = _python(
        """
        import sys
        import hector
        assert "mlir._mlir_libs._mlir" in sys.modules
        assert "torch" not in sys.modules and "torch_mlir" not in sys.modules
        print("ok")
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_torch_mlir_first_is_a_clear_error_not_a_crash() -> None:
    r = _python(
        """
        import torch_mlir.ir
        import hector
        """
    )
    assert r.returncode == 1, (r.returncode, r.stderr)
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: hector must be imported before torch_mlir"), last


def test_hector_first_then_torch_mlir_runs_compiled_code() -> None:
    """The order that used to crash the JIT (segfault) once torch-mlir was loaded: hector first."""
    r = _python(
        """
        import hector
        import torch_mlir.ir
        import torch
        g = hector.random_graph(20, 60, 3, seed=1)
        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = torch.nn.Parameter(torch.randn(3, 4, 4))
            def forward(self, x, src, dst, et):
                m = torch.bmm(x[src].unsqueeze(1), self.w[et]).squeeze(1)
                return torch.zeros(20, 4).index_add(0, dst, m)
        ei, et = g.edge_index_sorted()
        x = torch.randn(20, 4)
        model = M()
        imported = hector.import_model(model, (x, ei[0], ei[1], et), graph=g, strict=True)
        err = (imported(x, ei[0], ei[1], et) - model(x, ei[0], ei[1], et)).abs().max().item()
        print("err", err)
        """
    )
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert float(r.stdout.split()[-1]) < 1e-5
