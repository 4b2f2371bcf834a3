"""The rows a ``HeteroConv``/``to_hetero`` layer program reads (``hector.dynamo.pyg_inputs``):
half-precision features converted by the model are read as stored, rows that are consecutive
blocks of one tensor are read without a ``cat``, and the results and gradients stay eager PyG's
(within 1e-5)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from test_pyg_route_configs import _fresh_dynamo  # noqa: F401  (autouse: Dynamo reset per test)
from torch_geometric.nn import (
    GAT,
    GATConv,
    GATv2Conv,
    GCNConv,
    GraphConv,
    HeteroConv,
    SAGEConv,
    to_hetero,
)

from hector.dynamo import pyg_inputs, pyg_route
from hector.dynamo.backend import HectorBackend

TOL = 1e-5
SIZES = {"paper": 11, "author": 7, "institute": 4}
RELATIONS = [
    ("paper", "cites", "paper"),
    ("author", "writes", "paper"),
    ("paper", "rev_writes", "author"),
    ("author", "affiliated", "institute"),
]
WIDTH = 8


def _features(dtype: torch.dtype) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {t: torch.randn(n, WIDTH, generator=gen).to(dtype) for t, n in SIZES.items()}


def _edges(relations: list[tuple[str, str, str]] = RELATIONS) -> dict[Any, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return {
        (s, r, d): torch.stack(
            [
                torch.randint(SIZES[s], (15,), generator=gen),
                torch.randint(SIZES[d], (15,), generator=gen),
            ]
        )
        for s, r, d in relations
    }


class Rgnn(torch.nn.Module):
    """MLPerf's ``rgnn.py`` shape: features converted by ``convert``, two ``HeteroConv`` layers
    of ``conv`` per relation, leaky ReLU between them, the ``paper`` rows."""

    def __init__(
        self,
        conv: Callable[[], Any],
        convert: Callable[[Any], Any],
        relations: list[tuple[str, str, str]] = RELATIONS,
    ) -> None:
        super().__init__()
        self.convs = torch.nn.ModuleList(
            HeteroConv({e: conv() for e in relations}) for _ in range(2)
        )
        self.convert = convert

    def forward(self, x_dict: Any, edge_index_dict: Any) -> Any:
        x_dict = {t: self.convert(v) for t, v in x_dict.items()}
        for i, conv in enumerate(self.convs):
            x_dict = {**x_dict, **conv(x_dict, edge_index_dict)}
            if i == 0:
                x_dict = {t: torch.nn.functional.leaky_relu(v) for t, v in x_dict.items()}
        return x_dict["paper"]


def _step(model: torch.nn.Module, fn: Any, x: Any, ei: Any) -> tuple[torch.Tensor, list[Any]]:
    model.zero_grad()
    out = fn(x, ei)
    out.square().mean().backward()
    return out.detach(), [p.grad for p in model.parameters()]


def _assert_matches(model: torch.nn.Module, backend: HectorBackend, x: Any, ei: Any) -> None:
    got, got_g = _step(model, torch.compile(model, backend=backend), x, ei)
    want, want_g = _step(model, model, x, ei)
    assert got.dtype == want.dtype == torch.float32
    assert (got - want).abs().max().item() <= TOL
    for a, b in zip(got_g, want_g, strict=True):
        # a relation whose rows feed no loss: zeros where PyG leaves None (docs/import.md)
        a = torch.zeros_like(b) if a is None and b is not None else a
        b = torch.zeros_like(a) if b is None and a is not None else b
        if a is not None:
            assert (a - b).abs().max().item() <= TOL
    assert not pyg_route.FALLBACKS, pyg_route.FALLBACKS
    assert all(s.calls > 0 and s.backward_calls > 0 for s in pyg_route.STATS.values())


def _rows_nodes(backend: HectorBackend) -> list[torch.fx.Node]:
    """The rows input of each layer program call of the captured graphs (``call_layer``,
    which the backend makes of each ``hector::pyg_layer`` node)."""
    return [
        n.args[5][0]
        for g in backend.graphs
        for n in g.gm.graph.nodes
        if n.op == "call_function" and n.target in pyg_route.LAYER_CALLS
    ]


def _placeholder_dtypes(node: torch.fx.Node) -> set[Any]:
    return {p.meta["example_value"].dtype for p in node.args[0] if p.op == "placeholder"}


CONVERSIONS = {
    "float": lambda v: v.float(),
    "to": lambda v: v.to(torch.float32),
    "to-dtype": lambda v: v.to(dtype=torch.float32),
}


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("convert", sorted(CONVERSIONS))
def test_half_features_converted_by_the_model_are_read_as_stored(
    half: torch.dtype, convert: str
) -> None:
    """MLPerf's model: float16 (or bfloat16) features, ``.float()`` per type, then
    ``HeteroConv(GATConv)``: the first layer's program reads the half rows themselves (no
    conversion left in the graph, one ``stacked_rows`` of the placeholders); the output and
    every parameter's gradient are eager PyG's on the converted features."""
    torch.manual_seed(0)
    model = Rgnn(lambda: GATConv(WIDTH, 4, heads=2, add_self_loops=False), CONVERSIONS[convert])
    backend = HectorBackend()
    _assert_matches(model, backend, _features(half), _edges())
    first, second = _rows_nodes(backend)
    assert first.target is pyg_inputs.stacked_rows
    assert _placeholder_dtypes(first) == {half}
    calls = [n for g in backend.graphs for n in g.gm.graph.nodes if n.op == "call_method"]
    assert not [n for n in calls if n.target in ("float", "to")]
    assert second.target is torch.cat  # the hidden layer's rows take a gradient


def test_half_features_read_as_stored_under_dynamic_shapes() -> None:
    """``dynamic=True``: one Dynamo compilation over two batch sizes, the conversions folded,
    the second size's results eager PyG's."""
    torch.manual_seed(0)
    model = Rgnn(lambda: GATConv(WIDTH, 4, heads=2, add_self_loops=False), lambda v: v.float())
    backend = HectorBackend()
    compiled = torch.compile(model, backend=backend, dynamic=True)
    x, ei = _features(torch.float16), _edges()
    _step(model, compiled, x, ei)
    grown = {**x, "paper": torch.cat([x["paper"], x["paper"][:3]])}
    got, got_g = _step(model, compiled, grown, ei)
    want, want_g = _step(model, model, grown, ei)
    assert (got - want).abs().max().item() <= TOL
    for a, b in zip(got_g, want_g, strict=True):
        if a is not None and b is not None:
            assert (a - b).abs().max().item() <= TOL
    assert len(backend.graphs) == 1
    assert _placeholder_dtypes(_rows_nodes(backend)[0]) == {torch.float16}


def test_half_features_of_a_max_layer_are_read_as_stored() -> None:
    """``HeteroConv(aggr="max")``: the program's rows repeat a destination type's once per
    relation into it (the same converted rows twice in the ``cat``); read as stored too."""
    torch.manual_seed(0)

    class Max(Rgnn):
        def __init__(self) -> None:
            super().__init__(
                lambda: GATConv(WIDTH, 4, heads=2, add_self_loops=False), torch.Tensor.float
            )
            for conv in self.convs:
                conv.aggr = "max"

    model = Max()
    backend = HectorBackend()
    _assert_matches(model, backend, _features(torch.float16), _edges())
    assert _placeholder_dtypes(_rows_nodes(backend)[0]) == {torch.float16}


def test_half_features_of_a_sage_stack_are_read_as_stored() -> None:
    """The same for ``SAGEConv`` (``hetero-sage``; MLPerf's ``rsage`` variant)."""
    torch.manual_seed(0)
    model = Rgnn(lambda: SAGEConv(WIDTH, WIDTH, root_weight=False), lambda v: v.float())
    backend = HectorBackend()
    _assert_matches(model, backend, _features(torch.float16), _edges())
    assert _placeholder_dtypes(_rows_nodes(backend)[0]) == {torch.float16}


@pytest.mark.parametrize(
    "conv",
    [
        lambda: GATv2Conv(WIDTH, 4, heads=2, add_self_loops=False),
        lambda: GraphConv(WIDTH, WIDTH),
    ],
    ids=["GATv2Conv", "GraphConv"],
)
def test_half_features_of_other_convs_are_read_as_stored(conv: Callable[[], Any]) -> None:
    """``hetero-gatv2`` and ``hetero-sage`` (``GraphConv``) programs read them as stored too."""
    torch.manual_seed(0)
    model = Rgnn(conv, lambda v: v.float())
    backend = HectorBackend()
    _assert_matches(model, backend, _features(torch.float16), _edges())
    assert _placeholder_dtypes(_rows_nodes(backend)[0]) == {torch.float16}


def test_half_features_of_different_widths_are_read_as_stored() -> None:
    """Types of different widths: the layout pads the narrower rows with zeros to the widest
    (``pad`` of the conversion), read as stored as well."""
    torch.manual_seed(0)

    class Bipartite(Rgnn):
        def __init__(self) -> None:
            super().__init__(
                lambda: GATConv(WIDTH, 4, heads=2, add_self_loops=False), torch.Tensor.float
            )
            self.convs[0] = HeteroConv(
                {e: GATConv((-1, -1), 4, heads=2, add_self_loops=False) for e in RELATIONS}
            )

    model = Bipartite()
    x = _features(torch.float16)
    x["author"] = x["author"][:, :5].contiguous()
    with torch.no_grad():
        model(x, _edges())  # the lazy widths
    backend = HectorBackend()
    _assert_matches(model, backend, x, _edges())
    first = _rows_nodes(backend)[0]
    assert _placeholder_dtypes(first) == {torch.float16}
    assert {_dtype(p) for p in first.args[0]} == {torch.float16}


def _dtype(node: torch.fx.Node) -> Any:
    return node.meta["example_value"].dtype


def test_half_features_of_a_gcn_stack_are_read_as_stored() -> None:
    """``hetero-gcn`` (relations from a type to itself, as PyG's ``GCNConv`` takes)."""
    torch.manual_seed(0)
    relations = [("paper", "cites", "paper"), ("author", "knows", "author")]
    model = Rgnn(lambda: GCNConv(WIDTH, WIDTH), lambda v: v.float(), relations)
    x = {t: v for t, v in _features(torch.float16).items() if t != "institute"}
    backend = HectorBackend()
    _assert_matches(model, backend, x, _edges(relations))
    assert _placeholder_dtypes(_rows_nodes(backend)[0]) == {torch.float16}


def test_to_hetero_half_features_are_read_as_stored() -> None:
    """``to_hetero(GAT)`` nested in a module converting float16 features first."""
    torch.manual_seed(0)
    types = list(SIZES)
    body = GAT(WIDTH, 8, 2, 5, heads=2, add_self_loops=False)
    hetero = to_hetero(body, (types, RELATIONS), aggr="sum")

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = hetero

        def forward(self, x_dict: Any, edge_index_dict: Any) -> Any:
            return self.model({t: v.float() for t, v in x_dict.items()}, edge_index_dict)["paper"]

    net = Net()
    x, ei = _features(torch.float16), _edges()
    with torch.no_grad():
        net(x, ei)  # the eager call that routes a to_hetero model
    backend = HectorBackend()
    _assert_matches(net, backend, x, ei)
    assert _placeholder_dtypes(_rows_nodes(backend)[0]) == {torch.float16}


def test_mixed_or_wide_conversions_are_left_as_written() -> None:
    """Rows converted from float32 (``.float()`` a no-op) or from mixed types keep the model's
    conversions; the program reads float32 rows, as eager PyG."""
    torch.manual_seed(0)
    model = Rgnn(lambda: GATConv(WIDTH, 4, heads=2, add_self_loops=False), lambda v: v.float())
    x = _features(torch.float32)
    x["author"] = x["author"].half()
    backend = HectorBackend()
    _assert_matches(model, backend, x, _edges())
    first = _rows_nodes(backend)[0]
    assert first.target is pyg_inputs.stacked_rows
    assert {p.op for p in first.args[0]} == {"call_method"}  # the model's conversions


def test_type_slices_of_one_tensor_are_read_without_a_copy() -> None:
    """A Hector batch's ``x_dict``: each type's rows a consecutive slice of one ``x``. The
    program's rows are a view of ``x`` itself; the results are eager PyG's."""
    base = torch.randn(sum(SIZES.values()), WIDTH)
    parts = list(base.split(list(SIZES.values())))
    rows = pyg_inputs.stacked_rows(parts)
    assert rows.data_ptr() == base.data_ptr()
    assert torch.equal(rows, base)
    torch.manual_seed(0)
    model = Rgnn(lambda: GATConv(WIDTH, 4, heads=2, add_self_loops=False), lambda v: v)
    x = dict(zip(SIZES, parts, strict=True))
    backend = HectorBackend()
    _assert_matches(model, backend, x, _edges())
    assert _rows_nodes(backend)[0].target is pyg_inputs.stacked_rows


@pytest.mark.parametrize(
    "parts",
    [
        lambda b: [b[4:], b[:4]],  # out of order
        lambda b: [b[:3], b[4:]],  # a gap
        lambda b: [b[:, :4], b[:, 4:]],  # not contiguous
        lambda b: [b[:4], torch.randn(3, WIDTH)],  # another tensor
        lambda b: [b[:4], b[4:].clone().requires_grad_()],  # takes a gradient
    ],
)
def test_rows_that_are_not_one_block_are_concatenated(
    parts: Callable[[torch.Tensor], list[torch.Tensor]],
) -> None:
    """Anything but consecutive row blocks of one storage, none taking a gradient, is
    ``torch.cat`` (a copy; gradients reach the parts)."""
    base = torch.randn(9, WIDTH)
    given = parts(base)
    rows = pyg_inputs.stacked_rows(given)
    assert torch.equal(rows, torch.cat(given))
    assert rows.data_ptr() != base.data_ptr() or rows.requires_grad
    if rows.requires_grad:
        rows.sum().backward()
        assert torch.equal(given[1].grad, torch.ones_like(given[1]))
