"""PyG layers given a sparse adjacency under ``torch.compile(backend="hector")`` (issue 40).

PyG reads a transposed adjacency ``adj_t`` (``[N_dst, N_src]``) in place of ``edge_index``:
a ``torch.sparse`` tensor (COO, CSR, CSC) for ``RGATConv`` and ``HGTConv``, a
``torch_sparse.SparseTensor`` for all four layers. Dynamo cannot take a ``torch.sparse`` tensor
as a graph input and runs such a frame eagerly; the routed layer sees the Hector backend's
callback still set and runs Hector's program there. A ``SparseTensor`` is a Python object of
dense tensors, traced as one: the routed forward reads its edges in the graph.

``torch_sparse`` is not installed here, so ``SparseTensor`` cases use a subclass of PyG's own
placeholder class holding COO tensors (what PyG's ``to_edge_index`` reads). Every case compares
the compiled layer with PyG's eager layer: outputs and gradients within 1e-5.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch._dynamo
import torch_geometric.typing
from test_pyg_route_configs import _fresh_dynamo  # noqa: F401  (autouse: Dynamo reset per test)
from torch_geometric.nn import FastRGCNConv, HGTConv, RGATConv, RGCNConv
from torch_geometric.utils import to_torch_coo_tensor, to_torch_csc_tensor, to_torch_csr_tensor

from hector.dynamo import pyg_route
from hector.dynamo.backend import HectorBackend

N, R, F, E = 12, 3, 8, 40
TOL = 1e-5

#: adj_t of edge_index [2, E] with per-edge values, for each torch.sparse layout.
_LAYOUTS: dict[str, Callable[..., torch.Tensor]] = {
    "coo": lambda ei, v, size: to_torch_coo_tensor(ei.flip(0), v, size[::-1]),
    "csr": lambda ei, v, size: to_torch_csr_tensor(ei.flip(0), v, size[::-1]),
    "csc": lambda ei, v, size: to_torch_csc_tensor(ei.flip(0), v, size[::-1]),
}


class _SparseTensor(torch_geometric.typing.SparseTensor):  # type: ignore[misc]
    """PyG's ``SparseTensor`` placeholder holding ``adj_t``'s COO tensors: rows are the
    destinations, columns the sources, as ``SparseTensor.from_edge_index(...).t()``."""

    def __init__(self, row: torch.Tensor, col: torch.Tensor, value: torch.Tensor | None):
        self._coo = (row, col, value)

    def coo(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The destinations, sources and values."""
        return self._coo

    def set_value(self, value: torch.Tensor, layout: str | None = None) -> _SparseTensor:
        """The same edges with other values."""
        return _SparseTensor(self._coo[0], self._coo[1], value)


def _edges(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Coalesced edges (sorted by destination, no duplicates: one order for every layout)."""
    gen = torch.Generator().manual_seed(seed)
    ei = torch.unique(torch.randint(0, N, (2, E), generator=gen).flip(0), dim=1).flip(0)
    et = torch.randint(0, R, (ei.shape[1],), generator=gen)
    return torch.randn(N, F, generator=gen), ei, et


def _step(model: torch.nn.Module, fn: Any, x: Any, *rest: Any) -> list[torch.Tensor]:
    """Outputs, then the gradients of the parameters and features, of a training step."""
    model.zero_grad()
    xs = {k: v.clone().requires_grad_() for k, v in x.items()} if isinstance(x, dict) else None
    xr = xs if xs is not None else x.clone().requires_grad_()
    out = fn(xr, *rest)
    outs = [out[k] for k in sorted(out)] if isinstance(out, dict) else [out]
    torch.stack([o.square().mean() for o in outs]).sum().backward()
    feats = [xs[k] for k in sorted(xs)] if xs is not None else [xr]
    grads = [p.grad for p in model.parameters() if p.grad is not None] + [t.grad for t in feats]
    return [o.detach() for o in outs] + grads


def _assert_close(got: list[torch.Tensor], want: list[torch.Tensor]) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        assert (a - b).abs().max().item() <= TOL


def _ran_hector(layer: str) -> None:
    """Hector's program for ``layer`` (the name's first field: rgcn, rgat, hgt) ran."""
    calls = [s.calls for name, s in pyg_route.STATS.items() if name.split(":")[0] == layer]
    assert calls, (pyg_route.STATS, pyg_route.FALLBACKS)
    assert min(calls) >= 1
    assert pyg_route.FALLBACKS == {}


@pytest.mark.parametrize("layout", sorted(_LAYOUTS))
def test_hgtconv_with_torch_sparse_adjacency_runs_hectors_program(layout: str) -> None:
    """PyG's HGT tests' ``to_torch_csc_tensor(...).t()`` dicts, and the other layouts."""
    torch.manual_seed(0)
    meta = (["a", "b"], [("a", "to", "b"), ("b", "to", "a"), ("b", "self", "b")])
    model = HGTConv(F, F, meta, heads=2)
    gen = torch.Generator().manual_seed(3)
    sizes = {"a": 7, "b": 9}
    x = {t: torch.randn(n, F, generator=gen) for t, n in sizes.items()}
    dense, adj = {}, {}
    for s, rel, d in meta[1]:
        ei = torch.stack([torch.randint(0, sizes[s], (15,), generator=gen) for _ in "sd"])
        ei[1] = torch.randint(0, sizes[d], (15,), generator=gen)
        ei = torch.unique(ei.flip(0), dim=1).flip(0)  # coalesced: one edge order everywhere
        dense[(s, rel, d)] = ei
        adj[(s, rel, d)] = _LAYOUTS[layout](ei, None, (sizes[s], sizes[d]))
    compiled = torch.compile(model, backend=HectorBackend())
    _assert_close(_step(model, compiled, x, adj), _step(model, model, x, dense))
    _ran_hector("hgt")


@pytest.mark.parametrize("layout", ["coo", "csr"])  # PyG's RGAT rejects CSC
def test_rgatconv_with_torch_sparse_adjacency_runs_hectors_program(layout: str) -> None:
    """``adj_t`` whose values are the edge features, ``edge_type`` given in the adjacency's
    order of edges (PyG's RGAT test), against PyG given the same adjacency."""
    torch.manual_seed(1)
    model = RGATConv(F, 6, num_relations=R, edge_dim=4)
    x, ei, et = _edges(1)
    ea = torch.randn(ei.shape[1], 4)
    adj = _LAYOUTS[layout](ei, ea, (N, N))
    compiled = torch.compile(model, backend=HectorBackend())
    _assert_close(_step(model, compiled, x, adj, et), _step(model, model, x, adj, et))
    _ran_hector("rgat")


def test_rgatconv_attention_weights_come_back_on_the_sparse_adjacency() -> None:
    torch.manual_seed(2)
    model = RGATConv(F, 6, num_relations=R).eval()
    x, ei, et = _edges(2)
    adj = _LAYOUTS["coo"](ei, et, (N, N))  # values: the relations (edge_type not given)
    out, (adj_alpha, alpha) = torch.compile(model, backend=HectorBackend())(
        x, adj, return_attention_weights=True
    )
    want, (_, want_alpha) = model(x, ei, et, return_attention_weights=True)
    _assert_close([out, alpha], [want, want_alpha])
    assert adj_alpha.layout == torch.sparse_coo
    assert torch.equal(adj_alpha._indices(), adj._indices())
    assert torch.equal(adj_alpha._values(), alpha)


@pytest.mark.parametrize("cls", [RGCNConv, FastRGCNConv], ids=["rgcn", "fast_rgcn"])
def test_rgcn_layers_with_a_sparse_tensor_adjacency_run_hectors_program(cls: type) -> None:
    """``SparseTensor.from_edge_index(edge_index, edge_type).t()``: relations as values."""
    torch.manual_seed(3)
    model = cls(F, 6, R, num_bases=2)
    x, ei, et = _edges(3)
    adj = _SparseTensor(ei[1], ei[0], et)
    compiled = torch.compile(model, backend=HectorBackend())
    _assert_close(_step(model, compiled, x, adj), _step(model, model, x, ei, et))
    _ran_hector("rgcn")


def test_hgtconv_with_a_sparse_tensor_adjacency_runs_hectors_program() -> None:
    torch.manual_seed(4)
    meta = (["a"], [("a", "to", "a")])
    model = HGTConv(F, F, meta, heads=2)
    x, ei, _ = _edges(4)
    adj = {meta[1][0]: _SparseTensor(ei[1], ei[0], None)}
    compiled = torch.compile(model, backend=HectorBackend())
    _assert_close(
        _step(model, compiled, {"a": x}, adj), _step(model, model, {"a": x}, {meta[1][0]: ei})
    )
    _ran_hector("hgt")


def test_rgcnconv_given_a_torch_sparse_adjacency_raises_pygs_error_and_says_why() -> None:
    """PyG's RGCN layers cannot index a ``torch.sparse`` adjacency: compiled, the call fails as
    it does eagerly, and the reason is recorded."""
    model = RGCNConv(F, 6, R)
    x, ei, et = _edges(5)
    adj = _LAYOUTS["coo"](ei, None, (N, N))
    with pytest.raises(NotImplementedError):
        model(x, adj, et)
    with pytest.raises(Exception, match="SparseCPU"):
        torch.compile(model, backend=HectorBackend())(x, adj, et)
    assert "SparseTensor adjacency only" in pyg_route.FALLBACKS["RGCNConv"]


def test_eager_calls_with_a_sparse_adjacency_run_pygs_forward() -> None:
    """Outside ``torch.compile`` (and under another backend) the routed layer is PyG's."""
    model = RGATConv(F, 6, num_relations=R)
    x, ei, et = _edges(6)
    adj = _LAYOUTS["csr"](ei, None, (N, N))
    model(x, adj, et)
    torch.compile(model, backend="eager")(x, adj, et)
    assert pyg_route.STATS == {}


def test_a_model_of_two_layers_given_a_torch_sparse_adjacency_runs_hectors_programs() -> None:
    """The sparse adjacency enters at the model's top: each layer call still runs Hector's."""
    torch.manual_seed(7)
    meta = (["a"], [("a", "to", "a")])

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.one, self.two = HGTConv(F, F, meta, heads=2), HGTConv(F, F, meta, heads=2)

        def forward(self, x: dict[str, torch.Tensor], adj: dict[Any, Any]) -> Any:
            h = {t: v.relu() for t, v in self.one(x, adj).items()}
            return self.two(h, adj)

    model = Net()
    x, ei, _ = _edges(7)
    adj = {meta[1][0]: _LAYOUTS["csc"](ei, None, (N, N))}
    compiled = torch.compile(model, backend=HectorBackend())
    _assert_close(_step(model, compiled, {"a": x}, adj), _step(model, model, {"a": x}, adj))
    _ran_hector("hgt")
    assert pyg_route.STATS["hgt:2:1"].calls == 2
