"""RGCN, RGAT and HGT: Hector's layers against PyG's with the same weights (outputs and every
gradient within 1e-4), and training that lowers the loss."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from torch_geometric.nn import HGTConv, RGATConv, RGCNConv

import hector
from hector.data.limits import ResourceLimitError
from hector.models import HGT, RGAT, RGCN, HGTLayer, RGATLayer, RGCNLayer

N, E, R = 70, 500, 5
META = (
    ["paper", "author"],
    [
        ("paper", "cites", "paper"),
        ("author", "writes", "paper"),
        ("paper", "written_by", "author"),
    ],
)
COUNTS = {"paper": 40, "author": 30}


@pytest.fixture(scope="module")
def g() -> hector.HeteroGraph:
    return hector.random_graph(N, E, R, empty_etypes=(1,), isolated_nodes=4, seed=11)


def _pyg(g: hector.HeteroGraph) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.stack([g.src.long(), g.dst.long()]), g.etype.long()


def _hetero() -> tuple[hector.HeteroGraph, dict, dict]:
    """A typed graph numbered by node type, plus PyG's edge_index_dict for it."""
    rnd = random.Random(3)
    offset = {"paper": 0, "author": COUNTS["paper"]}
    src, dst, typ, eid = [], [], [], {}
    for r, (s, _, d) in enumerate(META[1]):
        pairs = [(rnd.randrange(COUNTS[s]), rnd.randrange(COUNTS[d])) for _ in range(120)]
        eid[META[1][r]] = torch.tensor(pairs).t()
        for u, v in pairs:
            src.append(u + offset[s])
            dst.append(v + offset[d])
            typ.append(r)
    ntype = torch.tensor([0] * COUNTS["paper"] + [1] * COUNTS["author"])
    graph = hector.HeteroGraph.from_edge_index(
        torch.tensor([src, dst]), torch.tensor(typ), node_type=ntype, num_etypes=len(META[1])
    )
    x = {k: torch.randn(n, 8) for k, n in COUNTS.items()}
    return graph, eid, x


def _grads_close(a: torch.nn.Module, b: dict[str, torch.Tensor]) -> None:
    for name, want in b.items():
        have = dict(a.named_parameters())[name].grad
        scale = max(1.0, want.abs().max().item())
        assert (have - want).abs().max().item() / scale < 1e-4, name


def test_rgcn_matches_pyg(g: hector.HeteroGraph) -> None:
    torch.manual_seed(0)
    conv = RGCNConv(8, 6, R)
    torch.nn.init.normal_(conv.bias)
    layer = RGCNLayer.from_pyg(conv)
    ei, et = _pyg(g)
    x1, x2 = (torch.randn(N, 8).requires_grad_() for _ in range(2))
    with torch.no_grad():
        x2.copy_(x1)
    want, have = conv(x1, ei, et), layer(g, x2)
    torch.testing.assert_close(have, want, atol=1e-4, rtol=1e-4)
    want.square().sum().backward()
    have.square().sum().backward()
    torch.testing.assert_close(x2.grad, x1.grad, atol=1e-4, rtol=1e-4)
    _grads_close(
        layer, {"weight": conv.weight.grad, "root": conv.root.grad, "bias": conv.bias.grad}
    )


@pytest.mark.parametrize("heads", [1, 3])
def test_rgat_matches_pyg(g: hector.HeteroGraph, heads: int) -> None:
    torch.manual_seed(1)
    conv = RGATConv(8, 4, R, heads=heads)
    torch.nn.init.normal_(conv.bias)
    layer = RGATLayer.from_pyg(conv)
    ei, et = _pyg(g)
    x1 = torch.randn(N, 8, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    want, have = conv(x1, ei, et), layer(g, x2)
    torch.testing.assert_close(have, want, atol=1e-4, rtol=1e-4)
    want.square().sum().backward()
    have.square().sum().backward()
    torch.testing.assert_close(x2.grad, x1.grad, atol=1e-4, rtol=1e-4)
    _grads_close(
        layer,
        {"weight": conv.weight.grad, "q": conv.q.grad, "k": conv.k.grad, "bias": conv.bias.grad},
    )


@pytest.mark.parametrize("out_dim", [8, 6])  # 8: gated residual (in == out); 6: none
def test_hgt_matches_pyg(out_dim: int) -> None:
    torch.manual_seed(2)
    graph, eid, x = _hetero()
    conv = HGTConv(8, out_dim, META, heads=2)
    with torch.no_grad():  # non-trivial skip gates and relation priors
        for p in conv.skip.values():
            p.fill_(0.3)
        for p in conv.p_rel.values():
            p.uniform_(0.5, 1.5)
    layer = HGTLayer.from_pyg(conv)
    x1 = {k: v.clone().requires_grad_() for k, v in x.items()}
    x2 = {k: v.clone().requires_grad_() for k, v in x.items()}
    want, have = conv(x1, eid), layer(graph, x2)
    assert set(have) == set(want)
    for k in want:
        torch.testing.assert_close(have[k], want[k], atol=1e-4, rtol=1e-4)
    sum(v.square().sum() for v in want.values()).backward()
    sum(v.square().sum() for v in have.values()).backward()
    for k in x1:
        torch.testing.assert_close(x2[k].grad, x1[k].grad, atol=1e-4, rtol=1e-4)
    _grads_close(layer, {"k_rel": conv.k_rel.weight.grad, "v_rel": conv.v_rel.weight.grad})
    prior = torch.stack([conv.p_rel["__".join(e)].grad[0] for e in META[1]])
    _grads_close(layer, {"p_rel": prior})


def _train(model: torch.nn.Module, g: hector.HeteroGraph, x, labels) -> list[float]:
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(20):
        opt.zero_grad()
        out = model(g, x)
        if isinstance(out, dict):
            out = torch.cat([out[k] for k in sorted(out)])
        loss = torch.nn.functional.cross_entropy(out, labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("name", ["rgcn", "rgat", "hgt"])
def test_twenty_adam_steps_lower_the_loss(g: hector.HeteroGraph, name: str) -> None:
    torch.manual_seed(4)
    if name == "hgt":
        graph, _, x = _hetero()
        model = HGT(8, 8, META[0], META[1], num_layers=2, heads=2)
        labels = torch.randint(0, 8, (N,))
    else:
        graph, x = g, torch.randn(N, 8)
        model = RGCN(8, 16, 4, R) if name == "rgcn" else RGAT(8, 8, 4, R, heads=2)
        labels = torch.randint(0, 4, (N,))
    losses = _train(model, graph, x, labels)
    assert losses[-1] < 0.9 * losses[0], losses


def test_numpy_features_are_a_type_error(g: hector.HeteroGraph) -> None:
    # Issue 18: AttributeError: 'numpy.ndarray' object has no attribute 'requires_grad'.
    for layer in (RGCNLayer(8, 4, R), RGATLayer(8, 4, R)):
        with pytest.raises(TypeError, match=r"argument 'x' must be a torch\.Tensor"):
            layer(g, torch.randn(N, 8).numpy())


class _NotCalled:
    """Stands in for a layer's compiled core: checks must fail before any compute."""

    def __call__(self, *args: object) -> None:
        raise AssertionError("the compiled core ran on rejected input")


def _hgt_layer() -> HGTLayer:
    layer = HGTLayer(8, 8, *META, heads=2)
    layer._fn = _NotCalled()  # type: ignore[assignment]
    return layer


def test_hgt_rejects_a_tensor_instead_of_a_dict() -> None:
    # Issue 18: a RuntimeError from torch's Tensor.__contains__ escaped.
    graph, _, x = _hetero()
    with pytest.raises(TypeError, match=r"x_dict must be a dict \{node type: \[N_t, 8\] tensor"):
        _hgt_layer()(graph, torch.cat(list(x.values())))
    with pytest.raises(TypeError, match=r"x_dict\['author'\] must be a torch\.Tensor"):
        _hgt_layer()(graph, {**x, "author": x["author"].numpy()})
    with pytest.raises(TypeError, match="g must be a hector.HeteroGraph"):
        _hgt_layer()(None, x)


def test_hgt_rejects_row_counts_that_do_not_match_the_node_types() -> None:
    # Issue 18: 39 + 31 rows (the graph's total of 70) were accepted for 40 papers, 30 authors.
    graph, _, x = _hetero()
    shifted = {"paper": x["paper"][:39], "author": torch.cat([x["author"], x["paper"][39:]])}
    with pytest.raises(
        ValueError,
        match=r"x_dict\['paper'\] must have shape \[40, 8\] \(the graph has 40 nodes of type "
        r"'paper'\), got \[39, 8\]",
    ):
        _hgt_layer()(graph, shifted)
    with pytest.raises(ValueError, match=r"x_dict\['author'\] must have shape \[30, 8\]"):
        _hgt_layer()(graph, {**x, "author": x["author"][:, :4]})
    with pytest.raises(ValueError, match=r"x_dict\['paper'\] must be float32"):
        _hgt_layer()(graph, {**x, "paper": x["paper"].double()})
    with pytest.raises(ValueError, match=r"x_dict has node types \['venue'\] the layer"):
        _hgt_layer()(graph, {**x, "venue": torch.zeros(1, 8)})
    with pytest.raises(ValueError, match="x_dict lacks node types"):
        _hgt_layer()(graph, {"paper": x["paper"]})


def test_hgt_rejects_a_graph_of_another_schema_or_numbering(g: hector.HeteroGraph) -> None:
    graph, _, x = _hetero()
    with pytest.raises(ValueError, match="the graph has 5 edge types and 1 node types but the"):
        _hgt_layer()(g, x)
    reversed_types = hector.HeteroGraph.from_edge_index(
        torch.stack([graph.src, graph.dst]).long(),
        graph.etype.long(),
        node_type=1 - graph.ntype.long(),
        num_etypes=3,
    )
    with pytest.raises(ValueError, match="nodes must be numbered grouped by node type"):
        _hgt_layer()(reversed_types, {"paper": x["author"], "author": x["paper"]})


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda: HGTLayer(8, 8, *META, heads=0), ValueError, r"heads must be in \[1, "),
        (lambda: RGCNLayer(-1, 4, 3), ValueError, r"in_dim must be in \[1, "),
        (lambda: RGATLayer(4, 4, 3, heads=2.0), TypeError, "heads must be an int, got float"),
        (lambda: RGATLayer(4, 4, 3, slope=None), TypeError, "slope must be a finite float"),
        (
            lambda: RGCN(4, 4, 4, 3, num_layers=2**40),
            ValueError,
            r"num_layers must be in \[1, 1024\]",
        ),
        (lambda: HGTLayer(8, 8, ["a"], [("a", "r", "z")]), ValueError, "names a node type not in"),
        (lambda: HGTLayer(8, 8, "ab", [("a", "r", "b")]), TypeError, "node_types must be a list"),
        (lambda: HGTLayer(8, 8, ["a", "a"], [("a", "r", "a")]), ValueError, "unique names"),
        (lambda: RGCNLayer(2**20, 2**20, 4), ResourceLimitError, "float32 parameters need"),
    ],
)
def test_constructors_reject_bad_sizes_before_allocating(
    monkeypatch, build: Any, error: type[Exception], message: str
) -> None:
    # Issue 18's API fuzzing: heads=0 was a ZeroDivisionError, negative sizes a RuntimeError
    # from torch.empty, a 2**40-parameter layer an allocation attempt.
    monkeypatch.setenv("HECTOR_MEMORY_LIMIT", "1G")
    with pytest.raises(error, match=message):
        build()


def test_from_pyg_rejects_unsupported_variants() -> None:
    with pytest.raises(ValueError, match="basis or block"):
        RGCNLayer.from_pyg(RGCNConv(4, 4, 3, num_bases=2))
    with pytest.raises(ValueError, match="across-relation"):
        RGATLayer.from_pyg(RGATConv(4, 4, 3, attention_mechanism="within-relation"))


@pytest.mark.parametrize("heads", [1, 2])
def test_hetero_gat_matches_pyg_heteroconv_of_gatconv(heads: int) -> None:
    """MLPerf's R-GAT layer: HeteroConv of per-relation GATConv (attention within the relation,
    biases summed per destination type); output and every gradient within 1e-4."""
    from torch_geometric.nn import GATConv, HeteroConv

    from hector.models import HeteroGATLayer

    torch.manual_seed(heads)
    graph, eid, x = _hetero()
    conv = HeteroConv(
        {e: GATConv(8, 3, heads=heads, add_self_loops=False) for e in META[1]}, aggr="sum"
    )
    for c in conv.convs.values():
        torch.nn.init.normal_(c.bias)  # zero by default: would hide a wrong bias sum
    layer = HeteroGATLayer.from_pyg(conv, META[0])
    xs = torch.cat([x["paper"], x["author"]]).requires_grad_()
    out = layer(graph, xs)
    want = conv({"paper": xs[:40], "author": xs[40:]}, eid)
    want = torch.cat([want["paper"], want["author"]])
    assert (out - want).abs().max().item() < 1e-4
    gy = torch.randn_like(out)
    (out * gy).sum().backward()
    (want * gy).sum().backward()
    convs = list(conv.convs.values())
    _grads_close(
        layer,
        {
            "weight": torch.stack([c.lin.weight.grad.T for c in convs]),
            "att_src": torch.stack([c.att_src.grad[0] for c in convs]),
            "att_dst": torch.stack([c.att_dst.grad[0] for c in convs]),
            "bias": torch.stack([c.bias.grad for c in convs]),
        },
    )


def test_hetero_gat_from_pyg_rejects_what_it_does_not_compute() -> None:
    from torch_geometric.nn import GATConv, HeteroConv

    from hector.models import HeteroGATLayer

    averaged = HeteroConv(
        {e: GATConv(8, 3, heads=2, concat=False, add_self_loops=False) for e in META[1]}
    )
    with pytest.raises(ValueError, match="concat=True"):
        HeteroGATLayer.from_pyg(averaged, META[0])
    dropped = HeteroConv({e: GATConv(8, 3, dropout=0.5, add_self_loops=False) for e in META[1]})
    with pytest.raises(ValueError, match="attention dropout"):  # would silently differ
        HeteroGATLayer.from_pyg(dropped, META[0])
    widths = {e: GATConv(8, 3, add_self_loops=False) for e in META[1]}
    widths[META[1][1]] = GATConv(8, 4, add_self_loops=False)
    with pytest.raises(ValueError, match=r"relation \('author', 'writes', 'paper'\): every"):
        HeteroGATLayer.from_pyg(HeteroConv(widths), META[0])
    mean = HeteroConv({e: GATConv(8, 3, add_self_loops=False) for e in META[1]}, aggr="mean")
    with pytest.raises(ValueError, match="aggr='mean'"):
        HeteroGATLayer.from_pyg(mean, META[0])
    with pytest.raises(ValueError, match="names a node type"):
        HeteroGATLayer(8, 3, META[1], ["paper"])


def _autocast_case(name: str, g: hector.HeteroGraph) -> tuple[torch.nn.Module, Any, Any]:
    """A layer, its graph and its input for the autocast test."""
    from torch_geometric.nn import GATConv, HeteroConv

    from hector.models import HeteroGATLayer

    torch.manual_seed(5)
    graph, _, x = _hetero()
    if name == "rgcn":
        return RGCNLayer(6, 4, R), g, torch.randn(N, 6)
    if name == "rgat":
        return RGATLayer(6, 4, R, heads=2), g, torch.randn(N, 6)
    if name == "hgt":
        return HGTLayer(8, 8, *META, heads=2), graph, x
    convs = {e: GATConv(8, 3, heads=2, add_self_loops=False) for e in META[1]}
    return HeteroGATLayer.from_pyg(HeteroConv(convs), META[0]), graph, torch.cat(list(x.values()))


def _flat(out: Any) -> torch.Tensor:
    return torch.cat([out[k] for k in sorted(out)]) if isinstance(out, dict) else out


@pytest.mark.parametrize("name", ["rgcn", "rgat", "hgt", "hetero-gat"])
def test_layers_run_under_bfloat16_autocast_with_float32_master_weights(
    g: hector.HeteroGraph, name: str
) -> None:
    """Under torch.autocast(bfloat16) every layer returns bfloat16 (computed in float32), within
    1e-2 of float32 on outputs and 2e-2 on the float32 weights' gradients."""
    layer, graph, x = _autocast_case(name, g)
    want = _flat(layer(graph, x))
    want.square().sum().backward()
    want_grads = {n: p.grad.clone() for n, p in layer.named_parameters() if p.grad is not None}
    layer.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        have = _flat(layer(graph, x))
    assert have.dtype == torch.bfloat16
    scale = want.abs().max().item()
    assert (have.float() - want).abs().max().item() <= 1e-2 * scale
    have.float().square().sum().backward()
    for n, ref in want_grads.items():
        grad = dict(layer.named_parameters())[n].grad
        assert grad.dtype == torch.float32, n
        assert (grad - ref).abs().max().item() <= 2e-2 * max(ref.abs().max().item(), 1e-6), n
