"""PyG layers under ``torch.compile(backend="hector")`` in the configurations sampled
mini-batches and PyG's own examples produce (issue 40).

* A batch need not use every relation: the highest relation id may be absent, relations in
  the middle may have no edges, a batch may have no edges at all. The relation count comes from
  the layer (``num_relations``, HGT's metadata), never from the batch.
* ``HGTConv(-1, ...)`` (lazy input width) is sized on its first call, as PyG does, and routed.

Every case compares the compiled layer with the same layer run eagerly: outputs, the gradients
of every parameter and of the node features, within 1e-5.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch._dynamo
from torch_geometric.nn import FastRGCNConv, HGTConv, RGATConv, RGCNConv

from hector.dynamo import pyg_route
from hector.dynamo.backend import HectorBackend

N, R, F = 20, 4, 8
TOL = 1e-5

#: Edge types of a batch of a layer with R = 4 relations.
_BATCHES = {
    "without_the_highest_relation": [0, 1, 2] * 10,
    "middle_relations_empty": [0, 3] * 12,
    "no_edges": [],
}


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    pyg_route.FALLBACKS.clear()
    pyg_route.reset_stats()
    yield
    torch._dynamo.reset()


def _leaves(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    return [value[k] for k in sorted(value) if value[k] is not None]


def _run(model: torch.nn.Module, fn: Any, x: Any, *rest: Any) -> tuple[list[Any], list[Any]]:
    """Outputs, then gradients (parameters in order, then the features) of a training step."""
    model.zero_grad()
    if isinstance(x, dict):
        xr: Any = {k: v.clone().requires_grad_() for k, v in x.items()}
        feats = [xr[k] for k in sorted(xr)]
    else:
        xr = x.clone().requires_grad_()
        feats = [xr]
    outs = _leaves(fn(xr, *rest))
    torch.stack([o.square().mean() for o in outs]).sum().backward()
    grads = [p.grad for p in model.parameters()] + [t.grad for t in feats]
    return [o.detach() for o in outs], grads


def _assert_matches(model: torch.nn.Module, compiled: Any, x: Any, *rest: Any) -> None:
    got, got_g = _run(model, compiled, x, *rest)
    want, want_g = _run(model, model, x, *rest)
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        assert (a - b).abs().max().item() <= TOL
    for a, b in zip(got_g, want_g, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            assert (a - b).abs().max().item() <= TOL


def _batch(types: list[int], seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    et = torch.tensor(types, dtype=torch.long)
    ei = torch.randint(0, N, (2, len(types)), generator=gen)
    return torch.randn(N, F, generator=gen), ei, et


@pytest.mark.parametrize("batch", sorted(_BATCHES))
def test_rgcnconv_takes_the_relation_count_from_the_layer(batch: str) -> None:
    torch.manual_seed(0)
    model = RGCNConv(F, 6, R)
    be = HectorBackend()
    x, ei, et = _batch(_BATCHES[batch])
    _assert_matches(model, torch.compile(model, backend=be), x, ei, et)
    assert [g.layers for g in be.graphs] == [["rgcn"]]  # Hector's program, not PyG's loop
    assert pyg_route.FALLBACKS == {}


def test_one_compiled_rgcnconv_serves_batches_of_any_relations() -> None:
    """As with a neighbour sampler: one compiled layer, batches of varying relations."""
    torch.manual_seed(1)
    model = RGCNConv(F, 6, R)
    be = HectorBackend()
    compiled = torch.compile(model, backend=be, dynamic=True)
    for seed, types in enumerate(([0, 1, 2, 3] * 8, [1, 2] * 9, [3] * 5, [0, 2] * 7)):
        _assert_matches(model, compiled, *_batch(types, seed))
    assert {name for g in be.graphs for name in g.layers} == {"rgcn"}
    assert be.stats()["layer_programs"]["rgcn"]["calls"] == 4
    assert pyg_route.FALLBACKS == {}


_CONFIGS = [  # (aggr, decomposition, root_weight, bias)
    ("mean", "bases", True, True),
    ("add", "blocks", False, True),
    ("sum", None, True, False),
    ("mean", "blocks", False, False),
    ("add", "bases", False, False),
]


@pytest.mark.parametrize("cls", [RGCNConv, FastRGCNConv], ids=["rgcn", "fast_rgcn"])
@pytest.mark.parametrize(("aggr", "decomposition", "root", "bias"), _CONFIGS)
def test_rgcn_configurations_run_hectors_program(cls, aggr, decomposition, root, bias) -> None:
    torch.manual_seed(4)
    kw = {"num_bases": 3} if decomposition == "bases" else {}
    if decomposition == "blocks":
        kw = {"num_blocks": 2}
    model = cls(F, 6, R, aggr=aggr, root_weight=root, bias=bias, **kw)
    be = HectorBackend()
    x, ei, et = _batch(_BATCHES["without_the_highest_relation"])
    _assert_matches(model, torch.compile(model, backend=be), x, ei, et)
    program = "rgcn" if aggr == "mean" else "rgcn-sum"
    assert [g.layers for g in be.graphs] == [[program]]
    assert pyg_route.FALLBACKS == {}


def _featureless(kind: str, aggr: str = "mean") -> tuple[Any, Any]:
    """(layer, x) for featureless (``None``), index and bipartite inputs, as PyG's tests and
    its RGCN example write them."""
    gen = torch.Generator().manual_seed(9)
    if kind == "none":
        return RGCNConv(N, 6, R, num_bases=2, aggr=aggr), None
    if kind == "index":
        return RGCNConv(N, 6, R, aggr=aggr), torch.randint(0, N, (N,), generator=gen)
    if kind == "bipartite":  # sources of width F, N // 2 destinations of width 5
        x = (torch.randn(N, F, generator=gen), torch.randn(N // 2, 5, generator=gen))
        return RGCNConv((F, 5), 6, R, aggr=aggr), x
    return RGCNConv((N, N // 2), 6, R, aggr=aggr), (None, torch.arange(N // 2))  # (None, idx2)


_INPUT_KINDS = ["none", "index", "bipartite", "featureless_bipartite"]


@pytest.mark.parametrize(
    ("kind", "aggr", "program"),
    [(k, "mean", "rgcn") for k in _INPUT_KINDS]
    + [(k, "max", "rgcn-max" if "bipartite" == k else "rgcn-max-rows") for k in _INPUT_KINDS],
)
def test_rgcn_featureless_and_bipartite_inputs_run_hectors_program(
    kind: str, aggr: str, program: str
) -> None:
    """Index inputs run as one-hot rows; bipartite sides as one node set (destinations after
    the sources, both padded to the wider), the output the destinations' rows. With
    ``aggr="max"`` on index inputs PyG takes the maximum of the weight rows they pick: the
    program that transforms first."""
    torch.manual_seed(3)
    model, x = _featureless(kind, aggr)
    _, ei, et = _batch(_BATCHES["without_the_highest_relation"])
    if kind in ("bipartite", "featureless_bipartite"):
        ei = torch.stack([ei[0], ei[1] % (N // 2)])
    be = HectorBackend()
    compiled = torch.compile(model, backend=be)
    got = compiled(x, ei, et)
    got.square().mean().backward()
    got_g = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    want = model(x, ei, et)
    want.square().mean().backward()
    assert got.shape == want.shape
    assert (got - want).abs().max().item() <= TOL
    for a, p in zip(got_g, model.parameters(), strict=True):
        assert (a - p.grad).abs().max().item() <= TOL
    assert [g.layers for g in be.graphs] == [[program]]
    assert pyg_route.FALLBACKS == {}


def test_featureless_input_over_the_one_hot_limit_falls_back_and_says_why(monkeypatch) -> None:
    monkeypatch.setattr(pyg_route, "ONE_HOT_LIMIT", N * N - 1)
    torch.manual_seed(3)
    model, x = _featureless("none")
    _, ei, et = _batch(_BATCHES["without_the_highest_relation"])
    out = torch.compile(model, backend=HectorBackend())(x, ei, et)
    assert (out - model(x, ei, et)).abs().max().item() <= TOL
    assert "one-hot columns, over" in pyg_route.FALLBACKS["RGCNConv"]


_MAX_BATCHES = {**_BATCHES, "repeated_edges": [0, 1, 2, 0, 1, 2, 3] * 4}


@pytest.mark.parametrize("decomposition", [None, "bases", "blocks"])
@pytest.mark.parametrize("batch", sorted(_MAX_BATCHES))
def test_rgcn_max_runs_hectors_program(batch: str, decomposition: Any) -> None:
    """``aggr="max"``: the elementwise maximum per node and relation, then the relation's
    weight (``rgcn_max_layer``); a node without edges of a relation gets nothing from it.
    Repeated edges make ties, whose gradient is split evenly, as PyTorch's scatter max
    splits it."""
    torch.manual_seed(5)
    kw = {"num_bases": 3} if decomposition == "bases" else {}
    kw |= {"num_blocks": 2} if decomposition == "blocks" else {}
    model = RGCNConv(F, 6, R, aggr="max", **kw)
    be = HectorBackend()
    x, ei, et = _batch(_MAX_BATCHES[batch])
    if batch == "repeated_edges":
        ei = torch.cat([ei[:, :14], ei[:, :14]], dim=1)
    _assert_matches(model, torch.compile(model, backend=be), x, ei, et)
    assert [g.layers for g in be.graphs] == [["rgcn-max"]]
    assert pyg_route.FALLBACKS == {}


@pytest.mark.parametrize("batch", sorted(_BATCHES))
def test_captured_rgcn_max_is_imported_piecewise_without_crashing(batch: str) -> None:
    # The route off: PyG's per-relation loop, captured. Empty relations made torch-mlir divide
    # by zero (SIGFPE) and boolean masks made MLIR's LLVM lowering abort; both are refused first.
    torch.manual_seed(5)
    model = RGCNConv(F, 6, R, aggr="max")
    be = HectorBackend(modules=False)
    _assert_matches(model, torch.compile(model, backend=be), *_batch(_BATCHES[batch]))


def test_fast_rgcn_max_fails_as_pyg_fails_and_says_why() -> None:
    model = FastRGCNConv(F, 6, R, aggr="max")
    x, ei, et = _batch(_BATCHES["without_the_highest_relation"])
    with pytest.raises(AssertionError):
        model(x, ei, et)
    with pytest.raises(AssertionError):
        torch.compile(model, backend=HectorBackend())(x, ei, et)
    assert "takes 'add', 'sum' or 'mean'" in pyg_route.FALLBACKS["FastRGCNConv"]


@pytest.mark.parametrize("layer", ["fast_rgcn", "rgat"])
@pytest.mark.parametrize("batch", ["without_the_highest_relation", "no_edges"])
def test_captured_relational_layers_on_batches_missing_relations(layer: str, batch: str) -> None:
    torch.manual_seed(2)
    model = FastRGCNConv(F, 6, R) if layer == "fast_rgcn" else RGATConv(F, 6, R, heads=2)
    be = HectorBackend()
    x, ei, et = _batch(_BATCHES[batch])
    _assert_matches(model, torch.compile(model, backend=be), x, ei, et)
    assert [g.status for g in be.graphs] == ["hector"]


_META = (["a", "b"], [("a", "to", "b"), ("b", "to", "a"), ("a", "self", "a")])


def _hetero(edges: tuple[int, int, int], width: tuple[int, int] = (F, F)) -> tuple[Any, Any]:
    gen = torch.Generator().manual_seed(3)
    sizes = {"a": 10, "b": 7}
    x = {t: torch.randn(sizes[t], w, generator=gen) for t, w in zip(("a", "b"), width, strict=True)}
    eid = {
        e: torch.stack(
            [
                torch.randint(0, sizes[e[0]], (k,), generator=gen),
                torch.randint(0, sizes[e[2]], (k,), generator=gen),
            ]
        )
        for e, k in zip(_META[1], edges, strict=True)
    }
    return x, eid


@pytest.mark.parametrize("edges", [(20, 0, 15), (20, 12, 0), (0, 0, 0)])
def test_hgtconv_on_batches_with_empty_relations(edges: tuple[int, int, int]) -> None:
    """A batch whose middle, last or every relation has no edges (``[2, 0]`` tensors, as PyG's
    loaders give them). No edges at all compiles a kernel of its own (the frontend keys on the
    graph's compaction ratio): about 20 s on a loaded 2-core machine."""
    torch.manual_seed(4)
    model = HGTConv(F, F, _META, heads=2)
    be = HectorBackend()
    _assert_matches(model, torch.compile(model, backend=be), *_hetero(edges))
    assert [g.layers for g in be.graphs] == [["hgt:2:1"]]
    assert pyg_route.FALLBACKS == {}


def test_lazy_hgtconv_is_sized_on_its_first_call_and_routed() -> None:
    torch.manual_seed(5)
    model = HGTConv(-1, F, _META, heads=2)  # as PyG's own tests and examples write it
    be = HectorBackend()
    compiled = torch.compile(model, backend=be)
    x, eid = _hetero((20, 12, 15))
    out = compiled(x, eid)  # the first call materialises the weights, then runs Hector's op
    assert all(p.shape[-1] > 0 for p in model.parameters())
    assert model.kqv_lin.lins["a"].weight.shape == (3 * F, F)
    want = model(x, eid)
    assert sorted(out) == sorted(want)
    for t in want:
        assert (out[t] - want[t]).abs().max().item() <= TOL
    _assert_matches(model, compiled, x, eid)
    assert ["hgt:2:1"] in [g.layers for g in be.graphs]
    assert be.stats()["layer_programs"]["hgt:2:1"]["calls"] >= 2
    assert pyg_route.FALLBACKS == {}


@pytest.mark.parametrize("widths", [(F, 5), (5, 3)], ids=["skip_and_padded", "padded"])
def test_lazy_hgtconv_of_different_widths_is_routed(widths: tuple[int, int]) -> None:
    """Per-type input widths: rows and weights padded to the widest; PyG's gated skip only for
    the types whose own width is the output's."""
    torch.manual_seed(6)
    model = HGTConv(-1, F, _META, heads=2)
    be = HectorBackend()
    _assert_matches(model, torch.compile(model, backend=be), *_hetero((20, 12, 15), widths))
    assert [g.layers for g in be.graphs] == [[f"hgt:2:{int(max(widths) == F)}"]]
    assert pyg_route.FALLBACKS == {}


def test_hgtconv_with_a_skip_type_next_to_a_wider_one_runs_hectors_program() -> None:
    """A type as wide as the output next to a wider one: the program runs on rows padded to
    the wider width (no skip inside), and PyG's gated skip of the narrow type follows it."""
    torch.manual_seed(6)
    model = HGTConv(-1, F, _META, heads=2)
    be = HectorBackend()
    _assert_matches(model, torch.compile(model, backend=be), *_hetero((20, 12, 15), (F, 12)))
    assert [g.layers for g in be.graphs][-1] == ["hgt:2:0"]
    assert pyg_route.FALLBACKS == {}
    assert model.skip["a"].grad is not None  # the narrow type's gate is trained


def _authors_papers(universities: bool) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(8)
    x = {"author": torch.randn(4, 16, generator=gen), "paper": torch.randn(6, 16, generator=gen)}
    if universities:
        x["university"] = torch.randn(10, 16, generator=gen)
    return x


def _edges(src: int, dst: int, count: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.stack(
        [
            torch.randint(0, src, (count,), generator=gen),
            torch.randint(0, dst, (count,), generator=gen),
        ]
    )


@pytest.mark.parametrize("case", ["node_type_missing_from_x_dict", "relation_missing"])
def test_hgtconv_without_a_node_type_or_a_relation_runs_hectors_program(case: str) -> None:
    """As PyG's own tests write them: a node type of the metadata that ``x_dict`` lacks (its
    lazy weights stay unsized; no output for it), a relation ``edge_index_dict`` lacks (its
    destination type still gets an output, from its skip and biases)."""
    torch.manual_seed(9)
    writes = ("author", "writes", "paper")
    if case == "node_type_missing_from_x_dict":
        meta = (["author", "paper", "university"], [writes])
        x, eid = _authors_papers(False), {writes: _edges(4, 6, 20, 1)}
    else:
        meta = (["author", "paper", "university"], [writes, ("university", "employs", "author")])
        x, eid = _authors_papers(True), {writes: _edges(4, 6, 20, 1)}
    model = HGTConv(-1, 16, meta, heads=2)
    be = HectorBackend()
    compiled = torch.compile(model, backend=be)
    out = compiled(x, eid)
    want = model(x, eid)
    assert sorted(out) == sorted(want)
    assert "university" not in out
    _assert_matches(model, compiled, x, eid)
    assert ["hgt:2:1"] in [g.layers for g in be.graphs]  # after the lazy weights are sized
    assert pyg_route.FALLBACKS == {}


def test_hgtconv_given_a_relation_whose_node_type_x_dict_lacks_raises_pygs_error() -> None:
    meta = (["author", "paper", "university"], [("university", "employs", "author")])
    model = HGTConv(16, 16, meta, heads=2)
    eid = {("university", "employs", "author"): _edges(10, 4, 5, 2)}
    with pytest.raises(KeyError, match="university"):
        model(_authors_papers(False), eid)
    with pytest.raises(KeyError, match="university"):  # PyG's own error, not Hector's
        torch.compile(model, backend=HectorBackend())(_authors_papers(False), eid)
    x = _authors_papers(False)
    assert "x_dict lacks its node types" in pyg_route._hgt_unsupported(model, x, eid)


_IMPORT_ORDER = """
import sys
import torch
import hector.dynamo.backend  # the backend first, PyG after it
assert "torch_geometric" not in sys.modules
from torch_geometric.nn import RGCNConv
from hector.dynamo import pyg_route

torch.manual_seed(0)
conv = RGCNConv(4, 3, 3)
x = torch.randn(6, 4, requires_grad=True)
ei = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]])
et = torch.tensor([0, 2, 2, 1, 0])
out = torch.compile(conv, backend="hector")(x, ei, et)
print(pyg_route.STATS["rgcn"].calls if "rgcn" in pyg_route.STATS else 0)
out.square().sum().backward()
got = [x.grad.clone()] + [p.grad.clone() for p in conv.parameters()]
x.grad = None
conv.zero_grad()
want = conv(x, ei, et)
want.square().sum().backward()
print((out - want).abs().max().item())
grads = [x.grad] + [p.grad for p in conv.parameters()]
print(max((a - b).abs().max().item() for a, b in zip(got, grads, strict=True)))
"""


def printed_by_a_fresh_process(code: str) -> list[str]:
    """The words ``code`` prints, run by a fresh Python process (imports in its own order)."""
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    return run.stdout.split()


def test_pyg_imported_after_the_backend_is_routed_from_the_first_call() -> None:
    """A fresh process importing ``hector.dynamo.backend`` before ``torch_geometric``: the first
    compiled ``RGCNConv`` runs Hector's program, and matches PyG (forward and gradients)."""
    calls, err, grad_err = printed_by_a_fresh_process(_IMPORT_ORDER)
    assert int(calls) == 1  # the first call, through hector::pyg_layer
    assert float(err) <= TOL
    assert float(grad_err) <= TOL


def test_features_without_grad_get_no_backward_kernels_in_the_route() -> None:
    """A layer's input features that do not require grad (the first layer of a model) take no
    gradient in Hector's program: its backward is compiled without them (the kernel's key says
    which arguments are frozen), and the parameters' gradients are eager PyG's."""
    torch.manual_seed(10)
    conv = RGCNConv(F, F, R, aggr="mean")
    x, ei, et = _batch([0, 1, 2, 3] * 6)
    compiled = torch.compile(conv, backend=HectorBackend())
    compiled(x, ei, et).square().sum().backward()
    got = [p.grad.clone() for p in conv.parameters()]
    conv.zero_grad()
    conv(x, ei, et).square().sum().backward()
    for a, b in zip(got, [p.grad for p in conv.parameters()], strict=True):
        assert (a - b).abs().max().item() <= TOL
    (program, stats), *_ = pyg_route.STATS.items()
    used = stats.kernels  # the kernels this test's calls ran (the program's cache is shared)
    keys = [k for k, e in pyg_route._compiled(program)._cache.items() if id(e) in used]
    training = [k for k in keys if k[1]]
    assert training
    assert all(0 in k[2] for k in training)  # x (argument 0) frozen
