"""``torch.compile(model, backend="hector")`` on PyG layers as users write them.

Every test compares against the same module run eagerly: outputs and the gradients of every
parameter and of the node features within 1e-4. Layers whose captured graphs Hector raises
(``RGATConv``, ``FastRGCNConv``) must actually run through Hector; the recognised layers
(``RGCNConv``, ``HGTConv``) must be one ``hector::pyg_layer`` node running Hector's program,
with no graph break and one Dynamo compilation for two graph sizes; with ``modules=False`` they
take the per-graph route (``RGCNConv``'s per-relation pieces raised, ``HGTConv`` falling back);
those it cannot bind (``HeteroConv``/``to_hetero`` with per-relation ``edge_index`` dicts) must
fall back, say why, and still match.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch._dynamo
from torch._dynamo.exc import BackendCompilerFailed
from torch_geometric.nn import (
    FastRGCNConv,
    GATConv,
    HeteroConv,
    HGTConv,
    RGATConv,
    RGCNConv,
    SAGEConv,
    to_hetero,
)

import hector
from hector.dynamo import pyg_direct, pyg_route
from hector.dynamo.backend import BackendError, HectorBackend

N, E, R, F = 40, 240, 4, 8
TOL = 1e-4


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _graph_inputs(n: int, e: int, seed: int, shuffle: bool = True) -> tuple[Any, Any]:
    g = hector.random_graph(n, e, R, isolated_nodes=2, seed=seed)
    ei, et = g.edge_index_sorted()
    if shuffle:  # the user's own edge order, not Hector's type-sorted one
        p = torch.randperm(e, generator=torch.Generator().manual_seed(seed))
        ei, et = ei[:, p].contiguous(), et[p].contiguous()
    return ei, et


def _leaves(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for k in sorted(value) for t in _leaves(value[k])]
    return [t for v in value for t in _leaves(v)]


def _run(model: torch.nn.Module, fn: Any, x: Any, *rest: Any) -> tuple[list[Any], list[Any]]:
    """Outputs, then gradients (parameters in order, then the features) of a training step."""
    model.zero_grad()
    xs = {k: v.clone().requires_grad_() for k, v in x.items()} if isinstance(x, dict) else None
    xr = xs if xs is not None else x.clone().requires_grad_()
    outs = _leaves(fn(xr, *rest))
    sum(o.square().mean() for o in outs).backward()
    grads = [p.grad for p in model.parameters()] + [t.grad for t in _leaves(xr)]
    return [o.detach() for o in outs], grads


def _assert_matches(model: torch.nn.Module, compiled: Any, x: Any, *rest: Any) -> None:
    got, got_g = _run(model, compiled, x, *rest)
    want, want_g = _run(model, model, x, *rest)
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert (a - b).abs().max().item() <= TOL
    for a, b in zip(got_g, want_g, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            assert (a - b).abs().max().item() <= TOL


def test_rgatconv_through_the_registered_name() -> None:
    torch.manual_seed(0)
    model = RGATConv(F, 6, R, heads=2)
    ei, et = _graph_inputs(N, E, 1)
    compiled = torch.compile(model, backend="hector")
    _assert_matches(model, compiled, torch.randn(N, F), ei, et)
    assert hector.backend.graphs[-1].layers[0].startswith("rgat:")  # routed by class
    # With the route off, its captured graph is raised whole.
    torch._dynamo.reset()
    be = HectorBackend(modules=False)
    _assert_matches(model, torch.compile(model, backend=be), torch.randn(N, F), ei, et)
    captured = be.graphs[-1]
    assert captured.status == "hector"
    assert captured.binding is not None
    assert set(captured.binding.names) == {"edge_index", "edge_type", "nodes"}
    raised = captured.raised()
    assert raised["edge_softmax"] == 1
    assert raised["typed_linear"] == 4
    assert captured.hector_calls >= 1
    assert captured.hector_seconds > 0


def test_fastrgcnconv_runs_through_hector() -> None:
    torch.manual_seed(1)
    model = FastRGCNConv(F, 6, R, aggr="mean")
    ei, et = _graph_inputs(N, E, 2)
    be = HectorBackend()
    _assert_matches(model, torch.compile(model, backend=be), torch.randn(N, F), ei, et)
    assert [g.layers for g in be.graphs] == [["rgcn"]]  # routed by class, as RGCNConv
    # With the route off, its captured graph is raised whole: PyG's per-(dst, relation) mean
    # (a one-hot scattered, summed by dst, gathered back by edge type) is raised as
    # degree_norm {by = "dst_etype"}: nothing is left to torch code.
    torch._dynamo.reset()
    be = HectorBackend(modules=False)
    _assert_matches(model, torch.compile(model, backend=be), torch.randn(N, F), ei, et)
    assert [g.status for g in be.graphs] == ["hector"]
    raised = be.graphs[0].raised()
    assert raised["degree_norm"] == 1
    assert raised["sum_to_dst"] == 1
    assert be.graphs[0].unraised() == []


def test_explain_names_unraised_ops_by_the_users_line() -> None:
    class SinMessages(torch.nn.Module):
        def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:  # noqa: D102
            h = torch.sin(x[edge_index[0]])  # sin is not a hector_inter unary: stays torch
            return torch.zeros_like(x).index_add(0, edge_index[1], h)

    ei, _ = _graph_inputs(N, E, 10)
    be = HectorBackend()
    _assert_matches(SinMessages(), torch.compile(SinMessages(), backend=be), torch.randn(N, F), ei)
    text = be.graphs[0].describe(code=False)
    assert be.graphs[0].status == "hector"
    assert "not raised: torch.aten.sin at test_dynamo_backend.py:" in text


def _graph_breaks() -> int:
    from torch._dynamo.utils import counters

    return sum(counters["graph_break"].values())


def test_rgcnconv_is_one_hector_op_for_two_graph_sizes() -> None:
    pyg_route.reset_stats()  # the program's counts are per process
    torch.manual_seed(12)
    model = RGCNConv(F, 6, R, aggr="mean")
    be = HectorBackend()
    compiled = torch.compile(model, backend=be, dynamic=True)
    breaks = _graph_breaks()
    for n, e, seed in ((N, E, 13), (57, 310, 14)):
        ei, et = _graph_inputs(n, e, seed)
        _assert_matches(model, compiled, torch.randn(n, F), ei, et)
    assert _graph_breaks() == breaks  # no .item()/nonzero breaks: PyG's loop is not traced
    (captured,) = be.graphs  # one Dynamo compilation serves both sizes
    assert captured.layers == ["rgcn"]
    assert captured.status == "hector"
    ops = [n.target for n in captured.gm.graph.nodes if n.op == "call_function"]
    assert ops == [pyg_direct.call_layer]  # the op, called directly (pyg_direct.direct_calls)
    stats = be.stats()
    assert stats["layer_programs"]["rgcn"]["calls"] == 2
    assert stats["layer_programs"]["rgcn"]["backward_calls"] == 2
    assert stats["layer_programs"]["rgcn"]["kernels"] == 1  # one kernel serves both sizes
    assert stats["hector_seconds"] > 0
    text = captured.describe(code=False)
    assert "recognised PyG layer(s), run by Hector's compiled program(s) ['rgcn']" in text


def test_rgcnconv_inference_runs_hector_forward_only_in_one_graph() -> None:
    torch.manual_seed(15)
    model = RGCNConv(F, 6, R, aggr="mean")
    ei, et = _graph_inputs(N, E, 16)
    x = torch.randn(N, F)
    with torch.no_grad():  # the registered name; fullgraph: no graph break anywhere
        got = torch.compile(model, backend="hector", fullgraph=True)(x, ei, et)
        want = model(x, ei, et)
    assert (got - want).abs().max().item() <= TOL
    assert not got.requires_grad
    assert hector.backend.graphs[-1].layers == ["rgcn"]


def test_an_unsupported_rgcnconv_runs_pyg_and_says_why() -> None:
    torch.manual_seed(17)
    model = RGCNConv(F, 6, R, aggr="min")  # a scatter PyG has; no Hector program
    ei, et = _graph_inputs(N, E, 18)
    x = torch.randn(N, F)
    with torch.no_grad():
        report = hector.explain(model, x, ei, et)
        want = model(x, ei, et)
    assert all(not g.layers for g in report.graphs)
    assert "recognised layer RGCNConv ran PyG's own forward: aggr='min'" in str(report)
    assert (report.output - want).abs().max().item() <= TOL


def test_other_backends_trace_pyg_own_forward() -> None:
    seen: list[torch.fx.GraphModule] = []

    def keep(gm: torch.fx.GraphModule, example: Any) -> Any:
        seen.append(gm)
        return gm.forward

    HectorBackend()  # installs the routing; only a Hector backend takes it
    model = RGCNConv(F, 6, R, aggr="mean")
    ei, et = _graph_inputs(N, E, 19)
    with torch.no_grad():
        torch.compile(model, backend=keep)(torch.randn(N, F), ei, et)
    assert seen
    assert all(not pyg_route.program_names(gm) for gm in seen)


def test_rgcnconv_graph_breaks_fall_back_and_relations_run_through_hector() -> None:
    """``modules=False`` (also as ``options=`` of the registered name): the per-graph route."""
    torch.manual_seed(2)
    model = RGCNConv(F, 6, R, aggr="mean")
    ei, et = _graph_inputs(N, E, 3)
    be = HectorBackend(modules=False)
    _assert_matches(model, torch.compile(model, backend=be), torch.randn(N, F), ei, et)
    torch._dynamo.reset()
    named = torch.compile(model, backend="hector", options={"modules": False})
    _assert_matches(model, named, torch.randn(N, F), ei, et)
    assert not hector.backend.graphs[-1].layers
    statuses = [g.status for g in be.graphs]
    # int(segment_count.max()) breaks the graph; the pieces before it carry no edge_index.
    assert "fallback" in statuses
    assert any("no edge_index" in (g.reason or "") for g in be.graphs)
    # The per-relation masked loop: one edge_index per relation; PyG's mean (sum, then divide
    # by the clamped in-degree) is raised whole, nothing is left to torch code.
    through = [g for g in be.graphs if g.status == "hector"]
    assert through
    for g in through:
        assert g.raised() == {"gather_src": 1, "degree_norm": 1, "scale": 1, "sum_to_dst": 1}
        assert g.unraised() == [] or {n for n, _ in g.unraised()} <= {
            "torch.aten.slice.Tensor",
            "torch.aten.squeeze.dim",
        }


def test_two_graph_sizes_of_one_schema_do_not_recompile() -> None:
    torch.manual_seed(3)
    model = RGATConv(F, 6, R, heads=2)
    be = HectorBackend(modules=False)  # the captured graph raised, not the routed layer
    # dynamic=True: node and edge counts symbolic from the first call (mark_dynamic on the
    # inputs works too, but the training step below clones the features).
    compiled = torch.compile(model, backend=be, dynamic=True)
    for n, e, seed in ((N, E, 4), (57, 310, 5)):
        ei, et = _graph_inputs(n, e, seed)
        _assert_matches(model, compiled, torch.randn(n, F), ei, et)
    stats = be.stats()
    assert stats["compilations"] == 1  # Dynamo compiled the layer once, with symbolic sizes
    assert stats["specializations"] == 2  # Hector imported it once per size
    assert stats["fallback_calls"] == 0


def test_the_graph_is_built_once_for_the_same_tensors() -> None:
    torch.manual_seed(4)
    model = RGATConv(F, 6, R, heads=2)
    ei, et = _graph_inputs(N, E, 6)
    be = HectorBackend()
    compiled = torch.compile(model, backend=be)
    x = torch.randn(N, F)
    with torch.no_grad():
        compiled(x, ei, et)
        builds = be.stats()["graph_builds"]
        for _ in range(3):
            compiled(x, ei, et)
        assert be.stats()["graph_builds"] == builds
        et2 = et.clone()
        et2[0] = (et2[0] + 1) % R
        compiled(x, ei, et2)  # other edge types: a new graph
        assert be.stats()["graph_builds"] == builds + 1


def _hetero_inputs() -> tuple[Any, Any, Any]:
    meta = (["a", "b"], [("a", "r0", "b"), ("b", "r1", "a"), ("a", "r2", "a")])
    gen = torch.Generator().manual_seed(7)
    x = {"a": torch.randn(30, F, generator=gen), "b": torch.randn(20, F, generator=gen)}
    eid = {
        ("a", "r0", "b"): torch.stack(
            [torch.randint(0, 30, (50,), generator=gen), torch.randint(0, 20, (50,), generator=gen)]
        ),
        ("b", "r1", "a"): torch.stack(
            [torch.randint(0, 20, (40,), generator=gen), torch.randint(0, 30, (40,), generator=gen)]
        ),
        ("a", "r2", "a"): torch.randint(0, 30, (2, 60), generator=gen),
    }
    return meta, x, eid


def _hetero_sized(na: int, nb: int, seed: int) -> tuple[Any, Any]:
    gen = torch.Generator().manual_seed(seed)
    x = {"a": torch.randn(na, F, generator=gen), "b": torch.randn(nb, F, generator=gen)}

    def edges(ns: int, nd: int, e: int) -> torch.Tensor:
        return torch.stack(
            [torch.randint(0, ns, (e,), generator=gen), torch.randint(0, nd, (e,), generator=gen)]
        )

    eid = {
        ("a", "r0", "b"): edges(na, nb, 50),
        ("b", "r1", "a"): edges(nb, na, 40),
        ("a", "r2", "a"): edges(na, na, 60),
    }
    return x, eid


@pytest.mark.parametrize("out_dim", [F, 12])  # F: PyG's gated residual; 12: none
def test_hgtconv_is_one_hector_op_for_two_graph_sizes(out_dim: int) -> None:
    torch.manual_seed(20)
    meta, _, _ = _hetero_inputs()
    model = HGTConv(F, out_dim, meta, heads=2)
    be = HectorBackend()
    compiled = torch.compile(model, backend=be, dynamic=True)
    breaks = _graph_breaks()
    for na, nb, seed in ((30, 20, 21), (41, 13, 22)):
        x, eid = _hetero_sized(na, nb, seed)
        _assert_matches(model, compiled, x, eid)
        xg = {k: v.clone().requires_grad_() for k, v in x.items()}  # as in training: no recompile
        assert list(compiled(xg, eid)) == list(model(x, eid))  # destination types, in order
    assert _graph_breaks() == breaks
    (captured,) = be.graphs
    program = f"hgt:2:{int(out_dim == F)}"
    assert captured.layers == [program]
    assert be.stats()["layer_programs"][program]["calls"] == 4
    assert be.stats()["layer_programs"][program]["kernels"] == 1


def test_hgtconv_falls_back_with_the_reason_and_matches() -> None:
    torch.manual_seed(5)
    meta, x, eid = _hetero_inputs()
    model = HGTConv(F, F, meta, heads=2)
    be = HectorBackend(modules=False)
    _assert_matches(model, torch.compile(model, backend=be), x, eid)
    assert all(g.status == "fallback" for g in be.graphs)
    assert any("3 edge_index inputs" in (g.reason or "") for g in be.graphs)


@pytest.mark.parametrize("kind", ["heteroconv", "to_hetero"])
def test_hetero_gat_sage_routed_and_match(kind: str) -> None:
    """A ``HeteroConv`` of mixed classes runs one program per class
    (``test_pyg_hetero_call.py``), a ``to_hetero`` model of ``SAGEConv`` one program; both
    match."""
    torch.manual_seed(6)
    meta, x, eid = _hetero_inputs()
    if kind == "heteroconv":
        model: torch.nn.Module = HeteroConv(
            {
                meta[1][0]: GATConv((-1, -1), 8, add_self_loops=False),
                meta[1][1]: SAGEConv((-1, -1), 8),
                meta[1][2]: GATConv((-1, -1), 8, add_self_loops=False),
            }
        )
    else:

        class Net(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.conv = SAGEConv((-1, -1), 8)

            def forward(self, x: Any, edge_index: Any) -> Any:  # noqa: D102
                return self.conv(x, edge_index)

        model = to_hetero(Net(), meta)
    model(x, eid)  # materialise the lazy (-1) shapes
    be = HectorBackend()
    _assert_matches(model, torch.compile(model, backend=be), x, eid)
    assert be.graphs
    if kind == "to_hetero":  # routed: the layer is one program (test_pyg_to_hetero.py)
        assert [g.layers for g in be.graphs] == [["hetero-sage:mean:1"]]
        return
    (captured,) = be.graphs
    # one head x the relations into a type < the rows' width: destination terms per node
    assert sorted(captured.layers) == ["hetero-gat:0.2:dst", "hetero-sage:mean:1"]


def test_explain_shows_raised_unraised_and_fallbacks() -> None:
    torch.manual_seed(7)
    model = RGCNConv(F, 6, R, aggr="mean")
    ei, et = _graph_inputs(N, E, 8)
    with torch.no_grad():
        report = hector.explain(model, torch.randn(N, F), ei, et, modules=False)
    text = str(report)
    assert "graph 0:" in text
    assert "fell back (eager): no edge_index" in text
    assert "raised: {'gather_src': 1, 'degree_norm': 1, 'scale': 1, 'sum_to_dst': 1}" in text
    assert "graph breaks (Dynamo):" in text
    assert "segment_count.max()" in text or "item" in text.lower()
    assert report.stats["compilations"] == len(report.graphs)


def test_strict_refuses_a_graph_it_would_fall_back_on() -> None:
    class Mlp(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(F, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
            return self.lin(x).relu()

    model = Mlp()
    # Dynamo wraps what a backend raises at compile time.
    with pytest.raises(BackendCompilerFailed, match=f"{BackendError.__name__}: .*no edge_index"):
        torch.compile(model, backend=HectorBackend(strict=True))(torch.randn(N, F))
    be = HectorBackend()
    x = torch.randn(N, F)
    torch._dynamo.reset()
    assert torch.allclose(torch.compile(model, backend=be)(x), model(x))
    assert be.stats()["fallback_calls"] == 1


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="fallback must be 'eager' or 'inductor'"):
        HectorBackend(fallback="tvm")
    with pytest.raises(ValueError, match="unknown hector backend option"):
        HectorBackend(speed="max")


def test_a_graph_without_edges_falls_back_to_inductor_when_asked() -> None:
    class Mlp(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(F, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
            return self.lin(x).relu()

    model = Mlp()
    be = HectorBackend(fallback="inductor")
    _assert_matches(model, torch.compile(model, backend=be), torch.randn(N, F))
    (captured,) = be.graphs
    assert captured.status == "fallback"
    assert captured.fallback_kind == "inductor"
    assert captured.fallback_fn is not None  # Inductor's compiled graph, not the FX graph
    assert "fell back (inductor): no edge_index" in captured.describe(code=False)


def test_a_graph_writing_to_its_input_runs_as_captured() -> None:
    class Scale(torch.nn.Module):
        def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:  # noqa: D102
            x.mul_(2.0)  # written once per call, also under the backend
            return torch.zeros_like(x).index_add(0, edge_index[1], x[edge_index[0]])

    ei, _ = _graph_inputs(N, E, 9)
    x = torch.randn(N, F)
    want_x, got_x = x.clone(), x.clone()
    want = Scale()(want_x, ei)
    be = HectorBackend()
    got = torch.compile(Scale(), backend=be)(got_x, ei)
    assert torch.allclose(got, want)
    assert torch.equal(got_x, want_x)
    assert "writes to its input(s)" in (be.graphs[0].reason or "")


def test_bench_compile_refuses_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    from hector.tools.cli import main

    assert main(["bench", "compile", "--systems", "eager,tvm"]) == 1
    assert "error: --systems takes a subset of eager,inductor,hector" in capsys.readouterr().err
    assert main(["bench", "compile", "--dataset", "synthetic:nope", "--systems", "eager"]) == 1
    assert "unknown synthetic dataset 'synthetic:nope'" in capsys.readouterr().err


def test_backend_name_resolves_without_importing_hector() -> None:
    """The `torch_dynamo_backends` entry point: a fresh process that never imports hector
    still resolves backend="hector" (and loading it registers the name once)."""
    import subprocess
    import sys

    code = (
        "import torch\n"
        "from torch._dynamo.backends.registry import lookup_backend\n"
        "print(type(lookup_backend('hector')).__name__)\n"
        "print(type(lookup_backend('hector')).__name__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert out.stdout.split() == ["HectorBackend", "HectorBackend"]
