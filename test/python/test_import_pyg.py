"""PyG's relational layers through ``hector.import_model`` (torch.export → torch-mlir → raise):
the observed behaviour, pinned. See docs/import.md "PyG layers".

* ``RGATConv`` and ``FastRGCNConv`` import fully raised (the per-head sum and PyG's one-hot
  per-(dst, relation) mean included); forward and backward match PyG.
* ``RGCNConv`` fails in torch.export (``int(segment_count.max())``, a data-dependent size, in its
  segment-matmul heuristic); with ``torch_geometric.backend.use_segment_matmul = False`` it
  imports (``fallback="eager"``) as a per-relation masked loop that stays almost entirely
  eager, and matches; under the default ``fallback="linalg"`` torch-mlir cannot lower the
  loop's data-dependent sizes and the import fails naming the ops.
* ``HGTConv`` takes dicts (a clear error); wrapped to take tensors, torch.export fails in
  ``HeteroLinear.forward_naive`` (per-type slices ``x[start:end]`` with data-dependent bounds).
"""

from __future__ import annotations

import pytest
import torch
import torch_geometric
from test_import import _check
from torch_geometric.nn import FastRGCNConv, HGTConv, RGATConv, RGCNConv

import hector
from hector.frontends.importer import ImportError_

N, E, R = 40, 240, 4


@pytest.fixture(scope="module")
def g() -> hector.HeteroGraph:
    return hector.random_graph(N, E, R, isolated_nodes=2, seed=3)


def _inputs(g: hector.HeteroGraph) -> list[torch.Tensor]:
    ei, et = g.edge_index_sorted()
    return [torch.randn(N, 8), ei, et]


def test_rgatconv_imports_and_matches(g: hector.HeteroGraph) -> None:
    torch.manual_seed(0)
    model, inputs = RGATConv(8, 6, R, heads=2), _inputs(g)
    imported = hector.import_model(model, inputs, graph=g)
    raised = imported.report.raised
    assert raised["edge_softmax"] == 1
    assert raised["typed_linear"] >= 2
    assert raised["gather_src"] == 1
    assert raised["gather_dst"] == 1
    # The per-head weighted sum (``alpha.view(-1, H, 1) * x_j.view(-1, H, Dh)`` scattered onto
    # zeros [N, H, Dh] by dst, then viewed [N, D]) is raised too: nothing is left unraised.
    assert raised["scale"] == 1
    assert raised["sum_to_dst"] == 1
    assert imported.report.unsupported == []
    _check(model, imported, inputs)
    strict = hector.import_model(model, inputs, graph=g, strict=True)
    assert not strict.torch_segments


def test_fastrgcnconv_imports_and_matches(g: hector.HeteroGraph) -> None:
    torch.manual_seed(1)
    model, inputs = FastRGCNConv(8, 6, R, aggr="mean"), _inputs(g)
    imported = hector.import_model(model, inputs, graph=g)
    assert imported.report.raised["sum_to_dst"] >= 1
    assert imported.report.raised["gather_src"] == 1
    # bmm(x_j.unsqueeze(-2), weight.index_select(0, edge_type)).squeeze(-2): a typed linear.
    assert 'slice = "etype"' in imported.hector_ir()
    assert 'by = "dst_etype"' in imported.hector_ir()  # PyG's one-hot count of (dst, relation)
    assert imported.report.unsupported == []
    _check(model, imported, inputs)


def test_rgcnconv_export_fails_with_the_reason(g: hector.HeteroGraph) -> None:
    torch.manual_seed(2)
    model = RGCNConv(8, 6, R, aggr="mean")
    with pytest.raises(
        ImportError_,
        match="torch-mlir could not export the module: Could not extract specialized integer "
        "from data-dependent expression",
    ):
        hector.import_model(model, _inputs(g), graph=g)


def test_rgcnconv_without_segment_matmul_imports_eagerly(
    g: hector.HeteroGraph, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch_geometric.backend, "use_segment_matmul", False)
    torch.manual_seed(3)
    model, inputs = RGCNConv(8, 6, R, aggr="mean"), _inputs(g)
    # The masked per-relation loop has data-dependent sizes (torch.runtime.assert guards) that
    # torch-mlir's linalg path cannot lower: a clear error naming the ops and their line.
    with pytest.raises(
        ImportError_,
        match=r"(?s)cannot lower the forward of torch_segment\d+ .*rgcn_conv\.py:\d+: "
        r"torch\.aten\..*fallback='eager'",
    ):
        hector.import_model(model, inputs, graph=g)
    imported = hector.import_model(model, inputs, graph=g, fallback="eager")
    # Only the root weight (a shared linear) is raised; the masked per-relation loop is eager.
    assert {s.kind for s in imported.torch_segments} <= {"eager", "view"}
    assert set(imported.report.raised) <= {"typed_linear", "add"}
    assert "torch.aten.eq.Scalar" in {n for n, _ in imported.report.unsupported}
    _check(model, imported, inputs)


def test_hgtconv_dict_inputs_and_export_failure(g: hector.HeteroGraph) -> None:
    ei, et = g.edge_index_sorted()
    meta = (["n"], [("n", f"r{i}", "n") for i in range(R)])
    conv = HGTConv(8, 8, meta, heads=2)
    x = torch.randn(N, 8)
    per_type = [ei[:, et == i] for i in range(R)]
    with pytest.raises(ImportError_, match="example input 0 is a dict"):
        hector.import_model(conv, [{"n": x}, dict(zip(meta[1], per_type, strict=True))], graph=g)

    class Positional(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = conv

        def forward(self, x, edge_index, etype, *per):  # noqa: D102
            return self.conv({"n": x}, dict(zip(meta[1], per, strict=True)))["n"]

    with pytest.raises(ImportError_, match="data-dependent expression"):
        hector.import_model(Positional(), [x, ei, et, *per_type], graph=g)
