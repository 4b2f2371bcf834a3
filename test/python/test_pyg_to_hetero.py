"""PyG's ``to_hetero`` models under ``torch.compile(backend="hector")``: each layer one Hector
program over all its relations (``hector.dynamo.pyg_to_hetero``, issue 54 item 2).

Every case runs the model eagerly and compiled and compares the outputs, the gradients of every
parameter and of every node type's features, within 1e-5 (float32). The graphs are bipartite
(node types of different sizes and, through lazy convs, widths) and one relation of the batch has
no edges (a ``to_hetero`` model reads every relation's ``edge_index``: PyG itself fails on an
absent one). Where PyG leaves a parameter without gradient (a relation into a node type that
feeds no loss) the one program gives it zeros. Each routed case checks that Hector's program
ran forward and backward, that no layer fell back, and that Dynamo captured one graph without
graph breaks.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch._dynamo
from test_pyg_route_configs import (  # _fresh_dynamo: autouse, Dynamo reset per test
    _fresh_dynamo,  # noqa: F401
    printed_by_a_fresh_process,
)
from torch._dynamo.utils import counters
from torch_geometric.nn import GAT, GATConv, GINEConv, GraphConv, GraphSAGE, SAGEConv, to_hetero
from torch_geometric.nn import Linear as PygLinear
from torch_geometric.nn.to_hetero_module import ToHeteroLinear

import hector
from hector.dynamo import pyg_route
from hector.dynamo.backend import HectorBackend

TOL = 1e-5
SIZES = {"paper": 11, "author": 7, "institute": 4}
WIDTHS = {"paper": 6, "author": 3, "institute": 5}
RELATIONS = [
    ("paper", "cites", "paper"),
    ("author", "writes", "paper"),
    ("paper", "rev_writes", "author"),
    ("author", "affiliated", "institute"),
    ("institute", "employs", "author"),
]
METADATA = (list(SIZES), RELATIONS)


def _batch(seed: int = 0, scale: int = 1) -> tuple[dict[str, Any], dict[Any, torch.Tensor]]:
    """Features and edges; ``("institute", "employs", "author")`` without edges."""
    gen = torch.Generator().manual_seed(seed)
    sizes = {t: n * scale for t, n in SIZES.items()}
    x = {t: torch.randn(n, WIDTHS[t], generator=gen) for t, n in sizes.items()}
    ei = {}
    for s, r, d in RELATIONS:
        per = 0 if r == "employs" else 15 * scale
        src = torch.randint(sizes[s], (per,), generator=gen)
        ei[(s, r, d)] = torch.stack([src, torch.randint(sizes[d], (per,), generator=gen)])
    return x, ei


def _run(model: torch.nn.Module, fn: Any, x: Any, ei: Any) -> tuple[list[Any], ...]:
    """Outputs (by type, sorted), then the gradients of the parameters and the features."""
    model.zero_grad()
    xr = {k: v.clone().requires_grad_() for k, v in x.items()}
    out = fn(xr, ei)
    keys = sorted(out)
    torch.stack([out[k].square().mean() for k in keys]).sum().backward()
    grads = [p.grad for p in model.parameters()] + [xr[k].grad for k in sorted(xr)]
    return keys, [out[k].detach() for k in keys], grads


def _assert_matches(model: torch.nn.Module, compiled: Any, x: Any, ei: Any) -> None:
    got_k, got, got_g = _run(model, compiled, x, ei)
    want_k, want, want_g = _run(model, model, x, ei)
    assert got_k == want_k
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        assert (a - b).abs().max().item() <= TOL
    assert len(got_g) == len(want_g)
    for a, b in zip(got_g, want_g, strict=True):
        if b is None:  # a conv whose output feeds no loss: one program gives it zeros
            assert a is None or not a.any()
        else:
            assert (a - b).abs().max().item() <= TOL


def _hetero(model: torch.nn.Module, aggr: str) -> torch.nn.Module:
    """``to_hetero`` of ``model``, its lazy widths set by one eager call (as PyG advises)."""
    hetero = to_hetero(model, METADATA, aggr=aggr)
    with torch.no_grad():
        hetero(*_batch(seed=9))
    return hetero


def _compiled_matches(model: torch.nn.Module, prefix: str, layers: int) -> HectorBackend:
    """The compiled model matches eagerly, in one graph, each layer one program."""
    backend = HectorBackend()
    compiled = torch.compile(model, backend=backend)
    counters.clear()
    _assert_matches(model, compiled, *_batch())
    assert not dict(counters["graph_break"])
    assert backend.stats()["compilations"] == 1
    assert not [k for k in pyg_route.FALLBACKS if "to_hetero" in k], pyg_route.FALLBACKS
    assert len([n for n in backend.graphs[0].layers if n.startswith(prefix)]) == layers
    calls = {n: s for n, s in pyg_route.STATS.items() if n.startswith(prefix)}
    assert calls
    assert all(s.calls > 0 and s.backward_calls > 0 for s in calls.values())
    return backend


@pytest.mark.parametrize("aggr", ["sum", "mean"])
def test_graphsage(aggr: str) -> None:
    """PyG's tutorial model: ``to_hetero(GraphSAGE((-1, -1), ...))``, three layers."""
    torch.manual_seed(0)
    model = _hetero(GraphSAGE((-1, -1), 8, num_layers=3, out_channels=3), aggr)
    _compiled_matches(model, "hetero-sage:mean:1", 3)


@pytest.mark.parametrize("aggr", ["sum", "mean"])
def test_gat(aggr: str) -> None:
    """PyG's benchmark model: ``to_hetero(GAT(..., add_self_loops=False))``, heads
    concatenated in the hidden layer and averaged in the output layer."""
    torch.manual_seed(0)
    gat = GAT((-1, -1), 8, num_layers=2, out_channels=3, heads=2, add_self_loops=False)
    model = _hetero(gat, aggr)
    _compiled_matches(model, "hetero-gat", 2)


def test_gat_edge_features() -> None:
    """``GAT(..., edge_dim=2)`` called with an ``edge_attr`` dict: each relation's edge features
    reach the program (``hetero-gat:<slope>:edge``), as in the ``HeteroConv`` route."""
    torch.manual_seed(0)
    x, ei = _batch()
    gen = torch.Generator().manual_seed(4)
    attrs = {e: torch.randn(v.shape[1], 2, generator=gen) for e, v in ei.items()}
    model = to_hetero(
        GAT((-1, -1), 8, num_layers=2, heads=2, edge_dim=2, add_self_loops=False), METADATA
    )
    with torch.no_grad():
        model(x, ei, edge_attr=attrs)
    backend = HectorBackend()
    compiled = torch.compile(model, backend=backend)
    got = _run(model, lambda a, b: compiled(a, b, edge_attr=attrs), x, ei)
    want = _run(model, lambda a, b: model(a, b, edge_attr=attrs), x, ei)
    assert got[0] == want[0]
    for a, b in zip([*got[1], *got[2]], [*want[1], *want[2]], strict=True):
        if b is None:
            assert a is None or not a.any()
        else:
            assert (a - b).abs().max().item() <= TOL
    assert backend.graphs[0].layers == ["hetero-gat:0.2:edge"] * 2
    assert not pyg_route.FALLBACKS


class _OwnStack(torch.nn.Module):
    """A user's own stack: ``SAGEConv`` (sum, no root weight), ``GraphConv``, ``GATConv``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = SAGEConv((-1, -1), 8, aggr="sum", root_weight=False)
        self.conv2 = GraphConv((-1, -1), 8)
        self.conv3 = GATConv((-1, -1), 4, heads=2, add_self_loops=False)

    def forward(self, x: Any, edge_index: Any) -> Any:
        x = self.conv1(x, edge_index).relu()
        x = self.conv2(x, edge_index).tanh()
        return self.conv3(x, edge_index)


class _WithHead(torch.nn.Module):
    """A ``to_hetero`` model inside the user's module, a linear head after it."""

    def __init__(self, body: torch.nn.Module) -> None:
        super().__init__()
        self.body = body
        self.head = torch.nn.Linear(8, 2)

    def forward(self, x: Any, edge_index: Any) -> Any:
        return {"paper": self.head(self.body(x, edge_index)["paper"])}


def test_own_stack_inside_a_module() -> None:
    """Three convs of three classes, each layer its program; the model called from the user's
    module with a head: still one Dynamo graph."""
    torch.manual_seed(0)
    model = _WithHead(_hetero(_OwnStack(), "sum"))
    backend = _compiled_matches(model, "hetero-", 3)
    assert sorted(set(backend.graphs[0].layers)) == [
        "hetero-gat:0.2:dst",  # 2 heads x 2 relations into paper < 8-wide rows
        "hetero-sage:sum:0",  # SAGEConv(aggr="sum", root_weight=False)
        "hetero-sage:sum:1",  # GraphConv (aggr="add", lin_root)
    ]


class _InPlace(torch.nn.Module):
    """PyG's test model: a conv's output modified in place (``relu_()``) by the next op."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = SAGEConv((-1, -1), 8)
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.lin(self.conv(x, edge_index).relu_())


def test_outputs_modified_in_place() -> None:
    """The layer's outputs per type take an in-place op, as eagerly (autograd refuses it on
    the views of one multi-output ``split``)."""
    torch.manual_seed(0)
    _compiled_matches(_hetero(_InPlace(), "sum"), "hetero-sage", 1)


def test_compiled_before_any_eager_call() -> None:
    """A model compiled whole before any eager call (its routing ``forward`` installed while
    Dynamo starts tracing it), of equal input widths (no lazy convs)."""
    torch.manual_seed(0)
    model = to_hetero(GraphSAGE(5, 8, num_layers=2), METADATA, aggr="sum")
    x, ei = _batch()
    x = {t: torch.nn.functional.pad(v, (0, 5 - v.shape[1])) for t, v in x.items()}
    backend = HectorBackend()
    counters.clear()
    _assert_matches(model, torch.compile(model, backend=backend), x, ei)
    assert not dict(counters["graph_break"])
    assert backend.graphs[0].layers == ["hetero-sage:mean:1"] * 2


def test_inference_and_eval_mode() -> None:
    """Attention dropout in training runs the ``:drop`` programs (PyG's masks: the same
    output from the same seed), and after ``model.eval()`` the plain ones, matching under
    ``no_grad``."""
    torch.manual_seed(0)
    model = _hetero(
        GAT((-1, -1), 8, num_layers=2, heads=2, dropout=0.3, add_self_loops=False), "sum"
    )
    compiled = torch.compile(model, backend=HectorBackend())
    x, ei = _batch()
    torch.manual_seed(1)
    got = compiled(x, ei)
    torch.manual_seed(1)
    want = model(x, ei)
    for t in want:
        assert (got[t] - want[t]).abs().max().item() <= TOL
    assert not pyg_route.FALLBACKS, pyg_route.FALLBACKS
    assert sum(s.calls for n, s in pyg_route.STATS.items() if n.endswith(":drop")) == 2
    model.eval()
    with torch.no_grad():
        got, want = compiled(x, ei), model(x, ei)
    for t in want:
        assert (got[t] - want[t]).abs().max().item() <= TOL
    assert sum(s.calls for n, s in pyg_route.STATS.items() if n.startswith("hetero-gat")) == 4


def test_batch_sizes_share_one_compilation() -> None:
    """Under ``dynamic=True`` batches of other sizes run without recompiling."""
    torch.manual_seed(0)
    model = _hetero(GraphSAGE((-1, -1), 8, num_layers=2), "sum")
    backend = HectorBackend()
    compiled = torch.compile(model, backend=backend, dynamic=True)
    for scale in (1, 2, 3):
        _assert_matches(model, compiled, *_batch(seed=scale, scale=scale))
    assert backend.stats()["compilations"] == 1
    assert pyg_route.STATS["hetero-sage:mean:1"].calls == 6


# -- fallbacks ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "aggr", "label", "reason"),
    [
        (
            lambda: GraphSAGE((-1, -1), 8, num_layers=2, aggr="min"),
            "max",
            "to_hetero convs.0 (SAGEConv)",
            "SAGEConv(aggr='min')",
        ),
        (
            lambda: GraphSAGE((-1, -1), 8, num_layers=2, normalize=True),
            "sum",
            "to_hetero convs.1 (SAGEConv)",
            "SAGEConv(normalize=True)",
        ),
    ],
)
def test_declined_layers_run_as_written_with_reason(
    make: Any, aggr: str, label: str, reason: str
) -> None:
    """What the programs do not compute runs as ``to_hetero`` wrote it, matching, in one graph;
    :func:`hector.explain` names the layer, its conv class and the reason."""
    torch.manual_seed(0)
    model = _hetero(make(), aggr)
    compiled = torch.compile(model, backend=HectorBackend())
    _assert_matches(model, compiled, *_batch())
    assert reason in pyg_route.FALLBACKS[label]
    explained = hector.explain(model, *_batch())
    assert not explained.graph_breaks
    assert f"recognised layer {label} ran PyG's own forward: " in str(explained)
    assert reason in str(explained)


def test_explain_reports_the_programs() -> None:
    """:func:`hector.explain` of a routed model: the layer programs, no breaks, no fallbacks."""
    torch.manual_seed(0)
    model = _hetero(GraphSAGE((-1, -1), 8, num_layers=2), "mean")
    explained = hector.explain(model, *_batch())
    assert not explained.graph_breaks
    assert explained.stats["layer_programs"]["hetero-sage:mean:1"]["calls"] == 2
    assert not explained.stats["layer_fallbacks"]
    assert "hetero-sage:mean:1" in str(explained)


def test_relations_named_underscore() -> None:
    """PyG's ``test_to_hetero_and_rgcn_equal_output`` model (``lin(x) + GraphConv(x)``) over
    edge types named ``("paper", "_", "author")``, which PyG's ``ModuleDict`` does not split
    back as written: each layer still runs one program."""
    relations = [("paper", "_", "paper"), ("paper", "_", "author"), ("author", "_", "paper")]

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = GraphConv(6, 5)
            self.lin = torch.nn.Linear(6, 5)

        def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
            return self.lin(x) + self.conv(x, edge_index)

    torch.manual_seed(0)
    model = to_hetero(Net(), (["paper", "author"], relations))
    gen = torch.Generator().manual_seed(2)
    sizes = {"paper": 11, "author": 7}
    x = {t: torch.randn(n, 6, generator=gen) for t, n in sizes.items()}
    ei = {
        (s, r, d): torch.stack(
            [
                torch.randint(sizes[s], (15,), generator=gen),
                torch.randint(sizes[d], (15,), generator=gen),
            ]
        )
        for s, r, d in relations
    }
    backend = HectorBackend()
    _assert_matches(model, torch.compile(model, backend=backend), x, ei)
    assert not [k for k in pyg_route.FALLBACKS if "to_hetero" in k], pyg_route.FALLBACKS
    assert [n for n in backend.graphs[0].layers if n.startswith("hetero-sage")]


class _StaticNet(torch.nn.Module):
    """PyG's ``test_to_hetero_on_static_graphs`` model: two ``SAGEConv`` and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = SAGEConv(4, 4)
        self.conv2 = SAGEConv(4, 4)
        self.lin = torch.nn.Linear(12, 5)

    def forward(self, x0: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        x1 = self.conv1(x0, edge_index).relu()
        x2 = self.conv2(x1, edge_index).relu()
        return self.lin(torch.cat([x0, x1, x2], dim=-1))


def test_static_graph_features_run_as_copies_of_the_graph() -> None:
    """``[B, N, F]`` features over one graph (a static graph): each layer one program over
    ``B`` copies of it; outputs ``[B, N, F']`` and gradients match eager PyG."""
    torch.manual_seed(0)
    relations = [("paper", "written_by", "author"), ("author", "writes", "paper")]
    gen = torch.Generator().manual_seed(2)
    x = {
        "paper": torch.randn(3, 9, 4, generator=gen),
        "author": torch.randn(3, 6, 4, generator=gen),
    }
    ei = {
        relations[0]: torch.stack(
            [torch.randint(9, (20,), generator=gen), torch.randint(6, (20,), generator=gen)]
        ),
        relations[1]: torch.stack(
            [torch.randint(6, (20,), generator=gen), torch.randint(9, (20,), generator=gen)]
        ),
    }
    model = to_hetero(_StaticNet(), (["paper", "author"], relations))
    compiled = torch.compile(model, backend=HectorBackend())
    _assert_matches(model, compiled, x, ei)
    assert not [k for k in pyg_route.FALLBACKS if "to_hetero" in k], pyg_route.FALLBACKS
    calls = {n: s for n, s in pyg_route.STATS.items() if n.startswith("hetero-sage")}
    assert calls
    assert all(s.calls > 0 and s.backward_calls > 0 for s in calls.values())


# -- per-type linears (hector.dynamo.pyg_typed_linear) ----------------------------------------


class _Linears(torch.nn.Module):
    """PyG's ``Net1``/``Net8`` shape: a lazy linear of the node features, one of the edge
    features (a per-type copy each: per node type, per edge type), no message passing."""

    def __init__(self) -> None:
        super().__init__()
        self.lin1 = PygLinear(-1, 8)
        self.lin2 = torch.nn.Linear(3, 5, bias=False)

    def forward(self, x: torch.Tensor, edge_attr: torch.Tensor) -> tuple[Any, Any]:
        return self.lin1(x).relu_(), self.lin2(edge_attr)


def _edge_attr(seed: int = 0) -> dict[Any, torch.Tensor]:
    """Three features per edge; ``("institute", "employs", "author")`` without edges."""
    gen = torch.Generator().manual_seed(seed)
    return {e: torch.randn(0 if e[1] == "employs" else 15, 3, generator=gen) for e in RELATIONS}


def _flat_run(model: torch.nn.Module, fn: Any, *args: Any) -> tuple[list[Any], list[Any]]:
    """The outputs (every tensor of the nested result, in order) and the gradients of the
    parameters and of every input tensor, from a loss over all outputs."""
    model.zero_grad()

    def leaf(v: torch.Tensor) -> torch.Tensor:
        return v.clone().requires_grad_() if v.is_floating_point() else v

    args = tuple(
        {k: leaf(v) for k, v in a.items()} if isinstance(a, dict) else leaf(a) for a in args
    )
    out = fn(*args)
    tensors = [out] if isinstance(out, torch.Tensor) else []
    for part in out if isinstance(out, tuple) else [out] if isinstance(out, dict) else []:
        tensors += [part[k] for k in part] if isinstance(part, dict) else [part]
    torch.stack([t.square().mean() for t in tensors]).sum().backward()
    inputs = [v for a in args for v in (a.values() if isinstance(a, dict) else [a])]
    grads = [p.grad for p in model.parameters()] + [v.grad for v in inputs if v.requires_grad]
    return [t.detach() for t in tensors], grads


def _linears_match(model: torch.nn.Module, *args: Any) -> HectorBackend:
    """Compiled ``model`` matches eagerly (outputs and gradients), in one graph."""
    backend = HectorBackend()
    counters.clear()
    got, got_g = _flat_run(model, torch.compile(model, backend=backend), *args)
    want, want_g = _flat_run(model, model, *args)
    assert not dict(counters["graph_break"])
    assert backend.stats()["compilations"] == 1
    assert not pyg_route.FALLBACKS, pyg_route.FALLBACKS
    for a, b in zip([*got, *got_g], [*want, *want_g], strict=True):
        assert a.shape == b.shape
        assert torch.allclose(a, b, rtol=0.0, atol=TOL)
    return backend


def test_linear_only_model_runs_typed_linears() -> None:
    """A ``to_hetero`` model of linears alone: each linear's per-type copies one typed linear
    (node types of different input widths; an edge type without edges), forward and backward."""
    torch.manual_seed(0)
    model = to_hetero(_Linears(), METADATA)
    x, _ = _batch()
    model(x, _edge_attr())  # the lazy widths
    backend = _linears_match(model, x, _edge_attr())
    assert backend.graphs[0].layers == ["typed-linear:1", "typed-linear:0"]
    stats = pyg_route.STATS
    assert stats["typed-linear:1"].backward_calls == stats["typed-linear:0"].backward_calls == 1


class _AroundConv(torch.nn.Module):
    """PyG's ``Net2``: a linear, a conv, a linear, outputs modified in place between them."""

    def __init__(self) -> None:
        super().__init__()
        self.lin1 = PygLinear(-1, 8)
        self.conv = SAGEConv(8, 8)
        self.lin2 = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        x = self.lin1(x).relu_()
        return self.lin2(self.conv(x, edge_index).relu_())


def test_linears_around_a_conv() -> None:
    """Linears before and after a layer: each a typed linear, the layer its program, one graph."""
    torch.manual_seed(0)
    model = _hetero(_AroundConv(), "sum")
    backend = _linears_match(model, *_batch())
    assert backend.graphs[0].layers == ["typed-linear:1", "hetero-sage:mean:1", "typed-linear:1"]


@pytest.mark.parametrize("cls", [torch.nn.Linear, PygLinear])
@pytest.mark.parametrize("bias", [True, False])
def test_to_hetero_linear_module(cls: Any, bias: bool) -> None:
    """PyG's ``ToHeteroLinear`` over ``x_dict`` (a type with no rows; with a bias, without
    which PyG's own ``dict_forward`` fails) and over stacked rows with ``type_vec``: sorted,
    with a type absent, and unsorted (read as PyG's ``HeteroLinear(is_sorted=True)`` reads
    it: weights by segment, bias by ``type_vec``)."""
    torch.manual_seed(0)
    module = ToHeteroLinear(cls(6, 4, bias=bias), ["a", "b", "c"])
    x_dict = {"a": torch.randn(5, 6), "b": torch.randn(0, 6), "c": torch.randn(3, 6)}
    if bias:  # PyG's own dict_forward (under pyg-lib or not) indexes the bias
        _linears_match(module, x_dict)
    else:  # ... so without one the compiled call raises as eager does
        with pytest.raises(TypeError, match="not subscriptable"):
            module(x_dict)
        with pytest.raises(TypeError, match="not subscriptable"):
            torch.compile(module, backend=HectorBackend())(x_dict)
        assert "without a bias" in pyg_route.FALLBACKS["ToHeteroLinear"]
        pyg_route.FALLBACKS.clear()
        torch._dynamo.reset()
    x = torch.randn(9, 6)
    for type_vec in ([0, 0, 0, 2, 2, 2, 2, 2, 2], [0, 1, 1, 0, 2, 2, 1, 0, 2]):
        _linears_match(module, x, torch.tensor(type_vec))
    stats = pyg_route.STATS
    assert stats["typed-linear:0"].calls == stats["typed-linear:0"].backward_calls == 2
    assert not bias or stats["typed-linear:1"].calls == stats["typed-linear:1"].backward_calls == 1


def test_linears_declined_run_as_written_with_reason() -> None:
    """Inputs the program does not take (float64) run each type's linear as written, with the
    reason; a ``ToHeteroLinear`` given other than ``x_dict`` or ``(x, type_vec)`` raises as
    PyG's does."""
    torch.manual_seed(0)
    model = to_hetero(_Linears(), METADATA).double()
    x = {t: v.double() for t, v in _batch()[0].items()}
    edge_attr = {e: v.double() for e, v in _edge_attr().items()}
    model(x, edge_attr)
    got = torch.compile(model, backend=HectorBackend())(x, edge_attr)
    want = model(x, edge_attr)
    for t in want[0]:
        assert torch.equal(got[0][t], want[0][t])
    assert "float32" in pyg_route.FALLBACKS["to_hetero lin1 (Linear)"]
    assert not [n for n in pyg_route.STATS if n.startswith("typed-linear")]
    module = ToHeteroLinear(torch.nn.Linear(6, 4), ["a", "b"])
    with pytest.raises(ValueError, match="invalid forward types"):
        torch.compile(module, backend=HectorBackend())(torch.randn(3, 6))
    assert "x_dict" in pyg_route.FALLBACKS["ToHeteroLinear"]


class _Gine(torch.nn.Module):
    """PyG's ``Net3``: ``GINEConv`` given the edge features positionally, through a linear."""

    def __init__(self) -> None:
        super().__init__()
        self.lin0 = PygLinear(-1, 8)
        self.lin1 = torch.nn.Linear(3, 8)
        self.conv = GINEConv(torch.nn.Linear(8, 4), eps=0.1, train_eps=True)

    def forward(self, x: Any, edge_index: Any, edge_attr: Any) -> Any:
        return self.conv(self.lin0(x), edge_index, self.lin1(edge_attr))


def test_gine_layer_with_positional_edge_features() -> None:
    """A ``GINEConv`` layer called ``(x, edge_index, edge_attr)``: one ``hetero-gine`` program
    (a relation without edges), the linears typed linears, outputs and gradients as eager."""
    torch.manual_seed(0)
    model = to_hetero(_Gine(), METADATA)
    x, ei = _batch()
    model(x, ei, _edge_attr())  # the lazy widths
    backend = _linears_match(model, x, ei, _edge_attr())
    assert backend.graphs[0].layers == ["typed-linear:1", "typed-linear:1", "hetero-gine"]
    assert pyg_route.STATS["hetero-gine"].backward_calls == 1


def test_typed_linears_share_one_compilation_across_batch_sizes() -> None:
    """Under ``dynamic=True`` the typed linears (and the layer between them) take batches of
    other sizes, and ``ToHeteroLinear`` other row counts, without recompiling."""
    torch.manual_seed(0)
    model = _hetero(_AroundConv(), "sum")
    backend = HectorBackend()
    compiled = torch.compile(model, backend=backend, dynamic=True)
    for scale in (1, 2, 3):
        x, ei = _batch(seed=scale, scale=scale)
        got, want = compiled(x, ei), model(x, ei)
        for t in want:
            assert torch.allclose(got[t], want[t], rtol=0.0, atol=TOL)
    assert backend.stats()["compilations"] == 1
    assert pyg_route.STATS["typed-linear:1"].calls == 6
    module = ToHeteroLinear(torch.nn.Linear(6, 4), ["a", "b", "c"])
    backend = HectorBackend()
    compiled = torch.compile(module, backend=backend, dynamic=True)
    gen = torch.Generator().manual_seed(1)
    for n in (9, 15, 22):
        x = torch.randn(n, 6, generator=gen)
        type_vec = torch.randint(3, (n,), generator=gen).sort().values
        assert torch.allclose(compiled(x, type_vec), module(x, type_vec), rtol=0.0, atol=TOL)
    assert backend.stats()["compilations"] == 1


_LINEAR_IMPORTED_LATE = """
import sys
import torch
import torch_geometric.nn
import hector.dynamo.backend  # the backend made before to_hetero_module is imported
from hector.dynamo import pyg_route

assert "torch_geometric.nn.to_hetero_module" not in sys.modules
hector.dynamo.backend.HectorBackend()
from torch_geometric.nn.to_hetero_module import ToHeteroLinear

torch.manual_seed(0)
module = ToHeteroLinear(torch.nn.Linear(6, 4), ["a", "b"])
x_dict = {"a": torch.randn(5, 6), "b": torch.randn(3, 6)}
got = torch.compile(module, backend="hector")(x_dict)
want = module(x_dict)
print(pyg_route.STATS["typed-linear:1"].calls)
print(max((got[t] - want[t]).abs().max().item() for t in want))
"""


def test_to_hetero_linear_imported_after_the_backend_is_routed() -> None:
    """A fresh process that makes a Hector backend and only then imports PyG's
    ``to_hetero_module`` (which ``torch_geometric.nn`` does not import): its ``ToHeteroLinear``
    runs Hector's typed linear from the first compiled call, with PyG's result."""
    calls, err = printed_by_a_fresh_process(_LINEAR_IMPORTED_LATE)
    assert int(calls) == 1
    assert float(err) <= 1e-5
