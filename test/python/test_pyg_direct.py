"""Direct layer calls (``hector.dynamo.pyg_direct``): a captured graph's ``hector::pyg_layer``
nodes run as ``call_layer``, an autograd function around the op's implementation and formula.

The compiled RGCN and RGAT layers call ``call_layer`` (and ``program_names`` still names their
programs); a training step matches eager PyG, forward and every gradient (the features'
included); and ``call_layer`` gives the same bits as the op itself on the same arguments,
output and gradients, with and without gradients required.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch_geometric.nn import RGATConv, RGCNConv

from hector.dynamo import pyg_direct, pyg_route
from hector.dynamo.backend import HectorBackend

NODES, EDGES, RELATIONS, IN, OUT = 60, 400, 3, 8, 12
TOL = 1e-4


def _graph(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(NODES, IN, generator=gen)
    ei = torch.randint(0, NODES, (2, EDGES), generator=gen)
    et = torch.randint(0, RELATIONS, (EDGES,), generator=gen)
    return x, ei, et


def _step(layer: torch.nn.Module, fn: object, x: torch.Tensor, *rest: torch.Tensor) -> list:
    x = x.clone().requires_grad_(True)
    layer.zero_grad(set_to_none=True)
    out = fn(x, *rest)  # type: ignore[operator]
    out.square().mean().backward()
    return [out.detach(), x.grad, *(p.grad for p in layer.parameters())]


@pytest.mark.parametrize(
    "make",
    [
        lambda: RGCNConv(IN, OUT, RELATIONS, aggr="mean"),
        lambda: RGCNConv(IN, OUT, RELATIONS, aggr="add", num_bases=2),
        lambda: RGATConv(IN, OUT, RELATIONS, heads=2, concat=False),
    ],
    ids=["rgcn-mean", "rgcn-sum-bases", "rgat"],
)
def test_compiled_layer_calls_the_program_directly_and_matches_eager(make: object) -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    eager = make()  # type: ignore[operator]
    layer = make()  # type: ignore[operator]
    layer.load_state_dict(eager.state_dict())
    backend = HectorBackend()
    compiled = torch.compile(layer, backend=backend)
    x, ei, et = _graph()
    want = _step(eager, eager, x, ei, et)
    for _ in range(2):  # the compiling call, then a compiled one
        got = _step(layer, compiled, x, ei, et)
        assert len(got) == len(want)
        assert got[1] is not None  # the features' gradient
        for g, w in zip(got, want, strict=True):
            assert (g is None) == (w is None)  # a parameter the layer leaves unused: none
            if g is not None:
                torch.testing.assert_close(g, w, atol=TOL, rtol=TOL)
    (graph,) = backend.graphs
    assert "call_layer" in graph.gm.code
    assert "torch.ops.hector.pyg_layer" not in graph.gm.code
    assert pyg_route.program_names(graph.gm) == graph.layers != []
    torch._dynamo.reset()


def _op_arguments(x: torch.Tensor) -> tuple:
    torch.manual_seed(1)
    conv = RGCNConv(IN, OUT, RELATIONS, aggr="mean")
    _, ei, et = _graph(1)
    tensors = [x, conv.weight, conv.root, conv.bias]
    return "rgcn", pyg_route._train(tensors), [ei, et], [NODES, RELATIONS], [], tensors


@pytest.mark.parametrize("grad", [True, False])
def test_call_layer_gives_the_ops_bits(grad: bool) -> None:
    x = _graph(1)[0].requires_grad_(grad)
    results = []
    for call in (torch.ops.hector.pyg_layer, pyg_direct.call_layer):
        args = _op_arguments(x)
        out = call(*args)
        leaves = [t for t in args[-1] if t.requires_grad]
        grads = torch.autograd.grad(out.pow(3).sum(), leaves) if leaves else ()
        results.append([out.detach(), *grads])
    assert len(results[0]) == len(results[1]) == (5 if grad else 4)
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b)


def test_call_layer_without_grad_runs_the_forward() -> None:
    x = _graph(1)[0]
    with torch.no_grad():
        args = _op_arguments(x)
        assert args[1] == []
        got = pyg_direct.call_layer(*args)
        want = torch.ops.hector.pyg_layer(*args)
    assert not got.requires_grad
    assert torch.equal(got, want)
