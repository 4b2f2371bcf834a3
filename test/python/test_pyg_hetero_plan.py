"""A routed ``HeteroConv`` call's plan, made outside Dynamo's trace, and its GAT weight glue as
one op (``hector.dynamo.pyg_hetero_plan``, issue 54's compile time).

The glue op's outputs and gradients are those of the traced glue it replaces
(``GatRelations.tensors``); a captured layer holds one glue node and no per-relation glue; the
plan's decision follows the layer's mode (guarded, not baked in once); a layer of several conv
classes, which the plan does not route, still runs its class groups; features of another width
than a conv reads at either end are refused where eager PyG refuses them, and taken where it
takes them (a conv that reads no destination features).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch._dynamo
from test_pyg_hetero_route import (
    RELATIONS,
    SIZES,
    TOL,
    WIDTHS,
    _assert_matches,
    _assert_routed,
    _edges,
    _features,
)
from test_pyg_route_configs import _fresh_dynamo  # noqa: F401  (autouse: Dynamo reset per test)
from torch_geometric.nn import GATConv, GATv2Conv, GraphConv, HeteroConv, SAGEConv, to_hetero

from hector.dynamo import pyg_hetero, pyg_hetero_plan, pyg_route
from hector.dynamo.backend import HectorBackend

GLUE = (torch.ops.hector.hetero_gat_weights, torch.ops.hector.hetero_gat_weights.default)


def _convs(shared: bool) -> list[Any]:
    torch.manual_seed(0)
    widths = [(6, 6), (4, 6), (6, 4), (4, 5)]  # bipartite, inputs narrower than the widest
    convs = []
    for w in widths:
        channels = w[0] if shared and w[0] == w[1] else w
        conv = GATConv(channels, 3, heads=2, add_self_loops=False)
        torch.nn.init.normal_(conv.bias)  # nonzero: the per-type sums show
        convs.append(conv)
    return convs


def test_gat_weights_op_matches_the_traced_glue() -> None:
    """``hector::hetero_gat_weights`` returns ``GatRelations.tensors``' weights, and gives
    every parameter the same gradient, with shared and separate projections."""
    for shared in (True, False):
        convs = _convs(shared)
        types = ["paper", "author", "institute"]
        relations = [
            ("paper", "cites", "paper"),
            ("author", "writes", "paper"),
            ("paper", "rev", "author"),
            ("author", "at", "institute"),
        ]
        xs = [torch.zeros(2, 6) for _ in types]
        layout = pyg_hetero.Layout(relations, types, xs, 6, targets=[e[2] for e in relations])
        want = pyg_hetero.GatRelations().edge_tensors(convs, layout)[1:]
        lins = [(c.lin, c.lin) if c.lin is not None else (c.lin_src, c.lin_dst) for c in convs]
        got = torch.ops.hector.hetero_gat_weights(
            6,
            [types.index(e[2]) for e in relations],
            len(types),
            [s.weight for s, _ in lins],
            [d.weight for _, d in lins],
            [c.att_src for c in convs],
            [c.att_dst for c in convs],
            [c.bias for c in convs],
        )
        params = [p for c in convs for p in c.parameters()]
        seeds = [torch.randn_like(w) for w in want]
        grads_want = torch.autograd.grad(want, params, seeds, allow_unused=True)
        grads_got = torch.autograd.grad(got, params, seeds, allow_unused=True)
        for a, b in zip(got, want, strict=True):
            assert a.shape == b.shape
            assert torch.equal(a, b)
        for a, b in zip(grads_got, grads_want, strict=True):
            assert (a is None) == (b is None)
            if a is not None:
                assert torch.allclose(a, b, atol=1e-6)


def test_captured_layer_has_one_glue_node() -> None:
    """The captured graph of a routed GAT layer holds one glue op per layer, no ``einsum`` of
    the per-relation block-diagonal matrices, and one Dynamo graph across batch sizes."""
    torch.manual_seed(0)
    model = HeteroConv({e: GATConv(6, 4, heads=2, add_self_loops=False) for e in RELATIONS})
    backend = HectorBackend()
    compiled = torch.compile(model, backend=backend, dynamic=True)
    for scale in (1, 2):
        sizes = {t: n * scale for t, n in SIZES.items()}
        x = _features(sizes, WIDTHS, seed=scale)
        _assert_matches(model, compiled, x, _edges(RELATIONS, sizes, seed=scale))
    assert backend.stats()["compilations"] == 1
    targets = [n.target for n in backend.graphs[0].gm.graph.nodes if n.op == "call_function"]
    assert sum(t in GLUE for t in targets) == 1
    assert torch.einsum not in targets
    _assert_routed("hetero-gat")


def test_plan_follows_the_layers_mode() -> None:
    """Attention dropout runs the ``:drop`` program in training and the plain one in eval
    mode: the plan is decided again when the layer's ``training`` changes (the graph is
    guarded on it)."""
    torch.manual_seed(0)
    model = HeteroConv(
        {e: GATConv(6, 4, heads=2, dropout=0.5, add_self_loops=False) for e in RELATIONS}
    )
    compiled = torch.compile(model, backend=HectorBackend())
    x, ei = _features(SIZES, WIDTHS), _edges(RELATIONS, SIZES)
    model.eval()
    _assert_matches(model, compiled, x, ei)
    _assert_routed("hetero-gat")
    model.train()
    torch.manual_seed(1)
    got = compiled(x, ei)
    torch.manual_seed(1)
    want = model(x, ei)  # the same masks (test_pyg_attention_dropout.py)
    for t in want:
        assert (got[t] - want[t]).abs().max().item() <= TOL
    assert any(n.endswith(":drop") for n in pyg_route.STATS)
    assert not pyg_route.FALLBACKS
    model.eval()
    pyg_route.reset_stats()
    _assert_matches(model, compiled, x, ei)
    _assert_routed("hetero-gat")
    assert not any(n.endswith(":drop") for n in pyg_route.STATS)


def test_mixed_classes_are_not_planned_and_run_their_groups() -> None:
    """A layer of ``GATConv`` and ``SAGEConv`` relations: no plan (one program per class), the
    class groups as before."""
    torch.manual_seed(0)
    convs = {
        e: GATConv(6, 4, heads=2, add_self_loops=False) if i % 2 else SAGEConv(6, 8)
        for i, e in enumerate(RELATIONS)
    }
    model = HeteroConv(convs)
    x, ei = _features(SIZES, WIDTHS), _edges(RELATIONS, SIZES)
    key = pyg_hetero_plan.call_key(x, ei)
    assert pyg_hetero_plan.plan_of(model, model.training, key) is None
    _assert_matches(model, torch.compile(model, backend=HectorBackend()), x, ei)
    assert "HeteroConv" not in pyg_route.FALLBACKS
    assert {n.split(":")[0] for n in pyg_route.STATS} == {"hetero-gat", "hetero-sage"}


def test_features_of_another_width_than_the_convs_are_refused_as_eagerly() -> None:
    """Features 12 wide into convs built for 16: eager PyG refuses the product; the compiled
    layer must refuse too, not pad the rows to the widest input and run."""
    torch.manual_seed(0)
    conv = HeteroConv(
        {
            ("a", "r", "b"): GATConv((16, 16), 8, heads=2, add_self_loops=False),
            ("b", "s", "a"): GATConv((16, 16), 8, heads=2, add_self_loops=False),
        }
    )
    x = {"a": torch.randn(30, 12), "b": torch.randn(20, 12)}
    ei = {
        ("a", "r", "b"): torch.stack([torch.randint(30, (60,)), torch.randint(20, (60,))]),
        ("b", "s", "a"): torch.stack([torch.randint(20, (60,)), torch.randint(30, (60,))]),
    }
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        conv(x, ei)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="16"):
        torch.compile(conv, backend="hector")(x, ei)


def _into_narrow_type(make: Any, width: int = 12) -> tuple[HeteroConv, Any, Any]:
    """A layer of ``make()`` on ``a -> b`` and ``a -> a``: ``a`` 16 wide, ``b`` (a destination
    only) ``width`` wide."""
    torch.manual_seed(0)
    conv = HeteroConv({("a", "r", "b"): make(), ("a", "s", "a"): make()})
    x = {"a": torch.randn(30, 16), "b": torch.randn(20, width)}
    ei = {
        ("a", "r", "b"): torch.stack([torch.randint(30, (60,)), torch.randint(20, (60,))]),
        ("a", "s", "a"): torch.stack([torch.randint(30, (60,)), torch.randint(30, (60,))]),
    }
    return conv, x, ei


#: Convs that read their destination's features with a linear built for 16 inputs.
_READ_DESTINATIONS = {
    "GATConv pair": lambda: GATConv((16, 16), 8, heads=2, add_self_loops=False),
    "GATConv shared": lambda: GATConv(16, 8, heads=2, add_self_loops=False),
    "GATv2Conv pair": lambda: GATv2Conv((16, 16), 8, heads=2, add_self_loops=False),
    "SAGEConv root": lambda: SAGEConv(16, 8),
    "GraphConv": lambda: GraphConv(16, 8),
}


@pytest.mark.parametrize("name", sorted(_READ_DESTINATIONS))
def test_destination_features_of_another_width_are_refused_as_eagerly(name: str) -> None:
    """Destination features 12 wide into a conv whose destination linear (``GATConv``'s
    ``lin_dst`` or shared ``lin``, ``GATv2Conv``'s ``lin_r``, ``SAGEConv``'s root weight,
    ``GraphConv``'s ``lin_root``) takes 16: eager PyG refuses the product; the compiled layer
    must refuse too, not pad the rows to the widest input and run."""
    conv, x, ei = _into_narrow_type(_READ_DESTINATIONS[name])
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        conv(x, ei)
    reason = pyg_hetero_plan.widths_unsupported(list(conv.convs.items()), x)
    assert reason is not None
    assert "16-wide destination features, got 'b' features 12" in reason
    with pytest.raises(Exception, match="12"):
        torch.compile(conv, backend="hector")(x, ei)


def test_destination_width_of_a_pair_is_its_second() -> None:
    """``GATConv((16, 12))`` into 12-wide destinations is what eager runs: routed, same
    outputs and gradients (the check reads the pair's second width, not the first)."""
    conv, x, ei = _into_narrow_type(lambda: GATConv((16, 12), 8, heads=2, add_self_loops=False))
    conv.convs[("a", "s", "a")] = GATConv(16, 8, heads=2, add_self_loops=False)
    assert pyg_hetero_plan.widths_unsupported(list(conv.convs.items()), x) is None
    _assert_matches(conv, torch.compile(conv, backend=HectorBackend()), x, ei)
    _assert_routed("hetero-gat")


@pytest.mark.parametrize("width", [12, 20])
def test_a_conv_that_reads_no_destination_takes_it_at_any_width(width: int) -> None:
    """``SAGEConv(root_weight=False)`` never reads ``x_dst``: eager runs with destination
    features narrower or wider than its ``in_channels``, and so does the routed program, with
    the same outputs and gradients."""
    conv, x, ei = _into_narrow_type(lambda: SAGEConv(16, 8, root_weight=False), width)
    assert pyg_hetero_plan.widths_unsupported(list(conv.convs.items()), x) is None
    _assert_matches(conv, torch.compile(conv, backend=HectorBackend()), x, ei)
    _assert_routed("hetero-sage")


def test_destination_width_with_edge_features_runs_pygs_forward() -> None:
    """A call with ``edge_attr_dict`` is not planned: its decision refuses a destination of
    another width than ``lin_dst``'s, so PyG's forward runs and raises as eager does."""
    conv, x, ei = _into_narrow_type(
        lambda: GATConv((16, 16), 8, heads=2, add_self_loops=False, edge_dim=3)
    )
    edge_attr = {e: torch.randn(60, 3) for e in ei}
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        conv(x, ei, edge_attr_dict=edge_attr)
    with pytest.raises(Exception, match="12"):
        torch.compile(conv, backend="hector")(x, ei, edge_attr_dict=edge_attr)
    assert "destination features" in pyg_route.FALLBACKS["HeteroConv"]


class _Sage(torch.nn.Module):
    """One lazy ``SAGEConv((-1, -1), 8)``, for ``to_hetero``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = SAGEConv((-1, -1), 8)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.conv(x, edge_index)


@pytest.mark.parametrize("kind", ["HeteroConv", "to_hetero"])
def test_destination_width_of_a_lazy_conv_is_the_one_it_was_built_on(kind: str) -> None:
    """Lazy ``SAGEConv((-1, -1))`` convs (their ``in_channels`` stays ``-1``) built by an eager
    call on 12-wide ``b`` features, then given 10-wide ones: eager PyG refuses the root
    weight's product, and so does the compiled layer (its check reads the weights' widths)."""
    conv, x, ei = _into_narrow_type(lambda: SAGEConv((-1, -1), 8))
    model = conv if kind == "HeteroConv" else to_hetero(_Sage(), (["a", "b"], list(ei)))
    with torch.no_grad():
        model(x, ei)
    x["b"] = torch.randn(20, 10)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        model(x, ei)
    with pytest.raises(Exception, match="10"):
        torch.compile(model, backend="hector")(x, ei)


def test_destination_width_in_a_layer_of_several_classes_runs_pygs_forward() -> None:
    """A layer of ``GATConv`` and ``SAGEConv`` relations (class groups, not planned) whose
    ``SAGEConv`` root weight takes 16-wide destinations, given 12-wide ones: PyG's forward
    runs, with the reason, and raises as eager does."""
    conv, x, ei = _into_narrow_type(lambda: SAGEConv(16, 16))
    conv.convs[("a", "s", "a")] = GATConv(16, 16, heads=1, add_self_loops=False)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        conv(x, ei)
    with pytest.raises(Exception, match="12"):
        torch.compile(conv, backend=HectorBackend())(x, ei)
    reason = pyg_route.FALLBACKS["HeteroConv"]
    assert "SAGEConv takes 16-wide destination features, got 'b' features 12 wide" in reason
