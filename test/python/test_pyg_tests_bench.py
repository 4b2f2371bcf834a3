"""``hector bench pyg-tests`` (``benchmarks/hector_bench/pyg_tests.py``): the plugin twins every
call of a routed layer, a ``HeteroConv``, a ``to_hetero`` model and ``to_hetero_module``'s
modules with a compiled call, and counts per model and per test file what the compiled calls
did (reached the backend, ran Hector's program, fell back and why, failed, differed).

The test files the bench runs here are small ones written by the test, named as PyG's are (the
bench runs only those names), in two folders (PyG keeps them in ``test/nn`` and
``test/nn/conv``).
"""

from __future__ import annotations

import argparse
import json
import textwrap
from pathlib import Path

from test_pyg_route_configs import _fresh_dynamo  # noqa: F401  (autouse: Dynamo reset per test)
from torch_geometric.nn import HeteroConv, RGCNConv
from torch_geometric.nn.to_hetero_transformer import ToHeteroTransformer

from hector_bench import pyg_tests

_GRAPH = """
import torch
from hector.dynamo import pyg_route
from torch_geometric.nn import GraphSAGE, HeteroConv, RGCNConv, SAGEConv, to_hetero
from torch_geometric.nn.to_hetero_module import ToHeteroLinear

torch.manual_seed(0)
X = {"a": torch.randn(5, 4), "b": torch.randn(3, 4)}
E = {
    ("a", "to", "b"): torch.tensor([[0, 1, 4, 2], [0, 2, 1, 1]]),
    ("b", "to", "a"): torch.tensor([[0, 2, 1], [3, 0, 4]]),
}
"""

_CONV_FILE = (
    _GRAPH
    + '''
class Shifted(torch.nn.Module):
    """A conv whose compiled output differs from its eager one (a wrong result to find):
    under Hector's backend only, or under any Dynamo backend."""

    def __init__(self, hector_only):
        super().__init__()
        self.hector_only = hector_only

    def forward(self, x, edge_index):
        if self.hector_only:
            return x[1] + float(pyg_route._hector_is_compiling())
        return x[1] + float(torch.compiler.is_compiling())


def test_sage():
    conv = HeteroConv({e: SAGEConv(4, 6) for e in E}, aggr="sum")
    assert conv(X, E)["a"].shape == (5, 6)
    assert conv(X, E)["b"].shape == (3, 6)


def test_shifted_by_hector():
    assert HeteroConv({e: Shifted(True) for e in E})(X, E)["b"].shape == (3, 4)


def test_shifted_by_dynamo():
    assert HeteroConv({e: Shifted(False) for e in E})(X, E)["b"].shape == (3, 4)


def test_rgcn():
    conv = RGCNConv(4, 6, num_relations=2)
    edge_index = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    assert conv(X["a"], edge_index, torch.tensor([0, 1, 1, 0])).shape == (5, 6)
'''
)

_MODEL_FILE = (
    _GRAPH
    + """
def test_graph_sage():
    model = to_hetero(GraphSAGE(4, 6, num_layers=2), (list(X), list(E)))
    assert model(X, E)["b"].shape == (3, 6)
"""
)

_MODULE_FILE = (
    _GRAPH
    + """
def test_linear():
    assert ToHeteroLinear(torch.nn.Linear(4, 6), list(X))(X)["a"].shape == (5, 6)


class Norm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(4)

    def forward(self, x):
        return self.norm(x)


def test_norm():
    model = to_hetero(Norm(), (list(X), list(E)))
    assert model(X)["a"].shape == (5, 4)
"""
)


def _bench(tmp_path: Path) -> dict:
    conv, nn = tmp_path / "conv", tmp_path / "nn"
    conv.mkdir()
    nn.mkdir()
    (conv / "test_hetero_conv.py").write_text(textwrap.dedent(_CONV_FILE))
    (nn / "test_to_hetero_transformer.py").write_text(textwrap.dedent(_MODEL_FILE))
    (nn / "test_to_hetero_module.py").write_text(textwrap.dedent(_MODULE_FILE))
    (nn / "test_unrelated.py").write_text("def test_never_run():\n    raise AssertionError\n")
    out = tmp_path / "record.json"
    args = argparse.Namespace(tests=[str(conv), str(nn)], keyword="", json=str(out))
    assert pyg_tests.run(args) == 0
    return json.loads(out.read_text())


def test_each_model_call_is_twinned_and_counted_per_model_and_file(tmp_path: Path) -> None:
    transform = ToHeteroTransformer.transform
    record = _bench(tmp_path)
    # the classes are put back as they were after the run
    assert "__call__" not in vars(HeteroConv)
    assert "__call__" not in vars(RGCNConv)
    assert ToHeteroTransformer.transform is transform
    assert [Path(f).name for f in record["files"]] == [
        "test_hetero_conv.py",
        "test_to_hetero_transformer.py",
        "test_to_hetero_module.py",
    ]
    assert record["pyg_test_outcomes"] == {"passed": 7}
    layers = record["layers"]
    # HeteroConv of SAGEConv: two calls, each one Hector program over both relations
    conv = layers["HeteroConv"]
    assert (conv["calls"], conv["reached"], conv["errors"]) == (4, 4, [])
    assert conv["layer_program"] == 2
    # the custom convs: PyG's forward, its reason kept, and the differing outputs found, each
    # with what Dynamo alone gives
    assert sum(conv["fallbacks"].values()) == 2
    assert all("Shifted" in reason for reason in conv["fallbacks"])
    assert [(w["test"].split("/")[-1], w["without_hector"]) for w in conv["wrong"]] == [
        ("test_hetero_conv.py::test_shifted_by_hector", "ok"),
        ("test_hetero_conv.py::test_shifted_by_dynamo", "differs from eager"),
    ]
    # the classic layers keep their own counts
    rgcn = layers["RGCNConv"]
    assert (rgcn["calls"], rgcn["hector"], rgcn["layer_program"]) == (1, 1, 1)
    # to_hetero: the GraphModule's call, not its per-relation convs, is the twinned call
    model = layers["to_hetero"]
    # (and test_norm's model of a norm alone: no program, the backend's reason kept)
    assert (model["calls"], model["layer_program"], model["partial"]) == (2, 1, 0)
    assert (model["wrong"], model["errors"]) == ([], [])
    assert list(model["fallbacks"].values()) == [1]
    assert "SAGEConv" not in layers
    # ToHeteroLinear: Hector's typed linear
    linear = layers["ToHeteroLinear"]
    assert (linear["calls"], linear["reached"], linear["layer_program"]) == (1, 1, 1)
    # a model Hector has no program for: counted, with a reason, not as Hector's program
    assert record["calls_log"][-1]["model"] == "to_hetero"
    assert record["calls_log"][-1]["fallback"]
    assert not record["calls_log"][-1]["layer_program"]
    # the kinds of model: the custom convs' layers apart from the routed ones
    kinds = record["by_kind"]
    assert (kinds["supported"]["calls"], kinds["supported"]["hector_calls"]) == (4, 4)
    assert (kinds["other_convs"]["calls"], kinds["other_convs"]["hector_calls"]) == (2, 0)
    none = kinds["no_message_passing"]
    assert (none["calls"], none["hector_calls"]) == (2, 1)
    by_file = record["by_file"]
    assert by_file["test_hetero_conv.py"]["calls"] == 5
    assert by_file["test_hetero_conv.py"]["layer_program_calls"] == 3
    assert by_file["test_hetero_conv.py"]["wrong"] == 2
    assert by_file["test_hetero_conv.py"]["wrong_caused_by_hector"] == 1
    assert by_file["test_to_hetero_transformer.py"]["layer_program_calls"] == 1
    assert by_file["test_to_hetero_module.py"]["layer_program_calls"] == 1
    assert by_file["test_to_hetero_module.py"]["calls"] == 2
    assert (record["calls"], record["layer_program_calls"], record["errors"]) == (8, 5, 0)
    assert (record["wrong"], record["wrong_caused_by_hector"]) == (2, 1)
    assert [(c["test"].split("/")[-1], c["model"]) for c in record["calls_log"]][:2] == [
        ("test_hetero_conv.py::test_sage", "HeteroConv"),
        ("test_hetero_conv.py::test_sage", "HeteroConv"),
    ]


def test_find_test_files_takes_each_name_from_the_first_folder_holding_it(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    for folder in (first, second):
        folder.mkdir()
        (folder / "test_hetero_conv.py").write_text("")
    (second / "test_rgcn_conv.py").write_text("")
    (second / "test_other.py").write_text("")
    assert pyg_tests.find_test_files([str(first), str(second)]) == [
        str(second / "test_rgcn_conv.py"),
        str(first / "test_hetero_conv.py"),
    ]
    assert pyg_tests.find_test_files([str(tmp_path / "missing")]) == []
