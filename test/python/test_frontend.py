"""@hector.compile: tracing, argument checks at the boundary, and stage dumps."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import hector
from hector.models import rgcn_layer


@pytest.fixture
def graph() -> hector.HeteroGraph:
    return hector.random_graph(30, 120, 3, seed=0)


def _weights(in_dim: int = 4, out_dim: int = 2, etypes: int = 3):
    return torch.randn(etypes, in_dim, out_dim), torch.randn(in_dim, out_dim), torch.randn(out_dim)


def test_wrong_node_count_is_rejected(graph: hector.HeteroGraph) -> None:
    with pytest.raises(ValueError, match="argument 'x' is node-wise: expected 30 rows"):
        rgcn_layer(graph, torch.randn(29, 4), *_weights())


def test_wrong_etype_count_is_rejected(graph: hector.HeteroGraph) -> None:
    with pytest.raises(ValueError, match="'weight' is sliced by etype: expected 3 slices"):
        rgcn_layer(graph, torch.randn(30, 4), *_weights(etypes=4))


def test_wrong_dtype_and_width(graph: hector.HeteroGraph) -> None:
    w, r, b = _weights()
    with pytest.raises(ValueError, match="must be float32"):
        rgcn_layer(graph, torch.randn(30, 4, dtype=torch.float64), w, r, b)
    with pytest.raises(hector.TraceError, match="does not match weight shape"):
        rgcn_layer(graph, torch.randn(30, 5), w, r, b)
    with pytest.raises(TypeError, match="takes 4 tensors"):
        rgcn_layer(graph, torch.randn(30, 4), w, r)
    with pytest.raises(TypeError, match="HeteroGraph"):
        rgcn_layer(None, torch.randn(30, 4), w, r, b)


def test_numpy_arguments_are_a_type_error_naming_the_argument(
    graph: hector.HeteroGraph,
) -> None:
    # Issue 18: NumPy features raised AttributeError: 'numpy.ndarray' has no 'requires_grad'.
    w, r, b = _weights()
    x = np.zeros((30, 4), dtype=np.float32)
    with pytest.raises(TypeError, match=r"argument 'x' must be a torch\.Tensor, got .*ndarray"):
        rgcn_layer(graph, x, w, r, b)
    with pytest.raises(TypeError, match=r"argument 'bias' must be a torch\.Tensor, got .*list"):
        rgcn_layer(graph, torch.randn(30, 4), w, r, [0.0, 0.0])
    with pytest.raises(TypeError, match=r"argument 'x' must be a torch\.Tensor"):
        rgcn_layer.compile_for(graph, x, w, r, b)


def test_kind_conflict_is_a_trace_error(graph: hector.HeteroGraph) -> None:
    @hector.compile
    def bad(g, x):
        return g.sum_to_dst(x)  # x is node-wise: a node tensor cannot be reduced onto nodes

    @hector.compile
    def bad2(g, x):
        e = g.gather_src(x)
        return g.gather_src(e)  # gathering edge rows as if they were nodes

    with pytest.raises(hector.TraceError):
        bad2(graph, torch.randn(30, 4))
    # x's first use fixes it as edge-wise, so the node count check fails at the boundary.
    with pytest.raises(ValueError, match="edge-wise: expected 120 rows"):
        bad(graph, torch.randn(30, 4))


def test_gather_dst_relu_and_degree_norm_by_dst(graph: hector.HeteroGraph) -> None:
    @hector.compile
    def layer(g, x, w):
        m = g.typed_linear(g.gather_dst(x), w)
        return hector.relu(g.sum_to_dst(m * g.degree_norm("dst")))

    x, w = torch.randn(30, 4), torch.randn(3, 4, 5)
    out = layer(graph, x, w)
    src, dst, et = (t.long() for t in (graph.src, graph.dst, graph.etype))
    msg = torch.einsum("ek,ekn->en", x[dst], w[et])
    deg = torch.zeros(30).index_add_(0, dst, torch.ones(len(dst)))
    ref = torch.zeros(30, 5).index_add_(0, dst, msg / deg[dst, None]).relu()
    assert (out - ref).abs().max().item() <= 1e-4


def test_stage_dumps_and_ptx(graph: hector.HeteroGraph) -> None:
    args = (torch.randn(30, 4), *_weights())
    assert '"hector_inter.typed_linear"' in rgcn_layer.ir("inter", graph, *args)
    assert '"hector_intra.gemm_template"' in rgcn_layer.ir("intra", graph, *args)
    assert "scf.for" in rgcn_layer.ir("loops", graph, *args)
    assert "llvm.func" in rgcn_layer.ir("llvm", graph, *args)
    with pytest.raises(KeyError, match="no stage 'bogus'"):
        rgcn_layer.ir("bogus", graph, *args)
    ptx = rgcn_layer.ptx(graph, *args)
    assert ptx.count(".entry") == 4  # message passing is one scatter-GEMM
    assert ".target sm_90" in ptx


def test_every_traced_unary_function_is_in_the_graph_api() -> None:
    """The dialect declares the unary functions; the graph API offers each traced one as a
    method of traced values and as ``hector.<name>``."""
    from hector.dialects.hector_inter import UNARY_FUNCTIONS
    from hector.frontends.graph_api import Value

    traced = [f.name for f in UNARY_FUNCTIONS if f.traced]
    assert traced
    for name in traced:
        assert callable(getattr(Value, name)), name
        assert callable(getattr(hector, name)), name


def test_half_precision_arguments_compute_in_float32_and_return_their_type(graph) -> None:
    w, r, b = _weights()
    x = torch.randn(30, 4)
    want = rgcn_layer(graph, x, w, r, b)
    for half in (torch.float16, torch.bfloat16):
        xh = x.to(half).requires_grad_()
        have = rgcn_layer(graph, xh, w.to(half), r.to(half), b.to(half))
        assert have.dtype == half
        assert (have.float() - want).abs().max() <= 1e-2 * want.abs().max()
        have.float().sum().backward()
        assert xh.grad is not None
        assert xh.grad.dtype == half
    with pytest.raises(ValueError, match="arguments mix"):
        rgcn_layer(graph, x.half(), w.bfloat16(), r, b)


def test_inputs_that_need_no_gradient_get_no_backward_kernels(graph) -> None:
    """Features that do not require grad (a model's input) take no gradient: their backward
    kernels are not built (a kernel of its own, keyed on which arguments are frozen), and the
    weights' gradients are those of the full backward."""
    torch.manual_seed(3)
    x = torch.randn(graph.num_nodes, 4)
    weights = [w.requires_grad_() for w in _weights()]

    def weight_grads(x_in: torch.Tensor) -> list[torch.Tensor]:
        for w in weights:
            w.grad = None
        rgcn_layer(graph, x_in, *weights).square().sum().backward()
        return [w.grad.clone() for w in weights]

    full = weight_grads(x.clone().requires_grad_())
    frozen = weight_grads(x)
    for a, b in zip(frozen, full, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    shapes = rgcn_layer._key(graph, (x, *weights))  # other tests use other graphs
    entries = [e for k, e in rgcn_layer._cache.items() if k[0] == shapes and k[2] == (0,)]
    assert len(entries) == 1
    assert 0 not in entries[0].training_abi.grad_of  # the weights' alone
    assert set(entries[0].training_abi.grad_of) == {1, 2, 3}
