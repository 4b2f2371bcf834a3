"""Property-based tests of the Python API (issue 18's fuzz harness, API half).

Random and hostile graphs, ids, dtypes, shapes and argument types go to
``HeteroGraph.from_edge_index``, ``random_graph``, ``datasets.from_edge_index``, a compiled
function and ``HGTLayer``. Each call is classified as *accepted* (then its result is checked
against a reference or the input), a *clean error* (a documented ``TypeError`` / ``ValueError``
raised by Hector's own code, with a message) or an *internal error* (any other exception, or a
clean type raised from inside torch or NumPy), which fails the test. Sizes are capped in the
strategies and ``HECTOR_MEMORY_LIMIT`` is set low, so nothing allocates much; the properties on
over-limit sizes assert they are rejected before allocating. Hypothesis runs derandomized (the
same examples in every run); ``pytest --hypothesis-show-statistics`` prints each outcome's count.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import hector
from hector import datasets, models
from hector.data.graph import HeteroGraph, random_graph
from hector.data.limits import MAX_COUNT, ResourceLimitError
from hector.models import HGTLayer, rgcn_layer
from hector.passes import diagnostics
from hector.runtime import native

#: Derandomized, no example database, no deadline (the first compiled call JIT-compiles).
FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow],
)

#: Inputs may use at most this much memory while these tests run.
MEMORY_LIMIT = "256M"
LIMIT_BYTES = 256 * 2**20

#: Source folders of Hector's modules: a clean error is raised by code in one of them.
HECTOR_SOURCES = tuple(
    str(Path(m.__file__).resolve().parent) for m in (hector, native, diagnostics)
)
#: A compile diagnostic located in user code (``file:line:col: error: ...``, line >= 1).
LOCATED_DIAGNOSTIC = re.compile(r"^\S+:[1-9]\d*:\d+: error: ", re.MULTILINE)


@pytest.fixture(autouse=True, scope="module")
def _memory_limit() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HECTOR_MEMORY_LIMIT", MEMORY_LIMIT)
        yield


def classify(
    call: Callable[[], Any], clean: tuple[type[BaseException], ...] = (TypeError, ValueError)
) -> tuple[str, Any]:
    """``("accepted", result)`` or ``("clean", error)``; AssertionError on an internal error.

    A clean error has one of the ``clean`` types, a message, and was raised by Hector's own
    code (the innermost frame of its traceback is in Hector's sources), not leaked from a
    library it calls.
    """
    try:
        result = call()
    except clean as err:
        frame = traceback.extract_tb(err.__traceback__)[-1]
        where = str(Path(frame.filename).resolve())
        if not where.startswith(HECTOR_SOURCES):
            raise AssertionError(
                f"internal error: {type(err).__name__} leaked from {where}:{frame.lineno}: {err}"
            ) from err
        if not str(err):
            raise AssertionError(f"{type(err).__name__} without a message") from err
        if isinstance(err, diagnostics.PipelineError) and not LOCATED_DIAGNOSTIC.search(str(err)):
            raise AssertionError(f"a compile error without a source location: {err}") from err
        event(f"clean error: {type(err).__name__}")
        return "clean", err
    except Exception as err:
        raise AssertionError(f"internal error: {type(err).__name__}: {err}") from err
    event("accepted")
    return "accepted", result


# -- strategies ---------------------------------------------------------------------------------

#: Ids: mostly small, sometimes at or past the int32 and int64 edges.
IDS = st.one_of(
    st.integers(0, 9),
    st.integers(0, 9),
    st.integers(-2, 9),
    st.sampled_from([MAX_COUNT - 1, MAX_COUNT, 2**31, 2**32, 2**40, 2**63 - 1, -(2**31)]),
)
DTYPES = ["int64"] * 3 + ["int8", "int16", "int32", "uint8", "uint64", "float32", "float64", "bool"]
#: Counts as a caller might pass them: ints, None, and the wrong types.
COUNTS = st.one_of(
    st.none(),
    st.integers(1, 12),
    st.integers(1, 12),
    st.integers(-2, 12),
    st.sampled_from([MAX_COUNT, 2**31, 2**40, True, 2.0, "3", np.int64(4), torch.tensor(5)]),
)


def _cast(values: list[int], dtype: str) -> np.ndarray:
    """``values`` in ``dtype``, integers wrapped around as a C cast would."""
    if dtype == "bool":
        return np.array([v != 0 for v in values], dtype=bool)
    if dtype.startswith("float"):
        return np.array(values, dtype=np.float64).astype(dtype)
    info = np.iinfo(dtype)
    span = int(info.max) - int(info.min) + 1
    return np.array([(v - int(info.min)) % span + int(info.min) for v in values], dtype=dtype)


@st.composite
def arrays(draw: st.DrawFn, shapes: st.SearchStrategy[tuple[int, ...]], tame: bool) -> Any:
    """An integer tensor of small ids when ``tame``; else of a hostile dtype, values and shape,
    as a tensor, NumPy array or nested list."""
    shape = draw(shapes)
    size = int(np.prod(shape))
    if tame:
        values = draw(st.lists(st.integers(0, 9), min_size=size, max_size=size))
        return torch.tensor(values, dtype=torch.int64).reshape(shape)
    a = _cast(draw(st.lists(IDS, min_size=size, max_size=size)), draw(st.sampled_from(DTYPES)))
    a = a.reshape(shape)
    kind = draw(st.sampled_from(["torch", "torch", "numpy", "list"]))
    if kind == "torch":
        return torch.from_numpy(a)
    return a if kind == "numpy" else a.tolist()


def edge_shapes(edges: int) -> st.SearchStrategy[tuple[int, ...]]:
    """Mostly [2, E]; sometimes transposed, 1-D, 3-D or a scalar."""
    return st.sampled_from([(2, edges)] * 4 + [(edges, 2), (3, edges), (edges,), (2, edges, 1), ()])


@st.composite
def edge_lists(draw: st.DrawFn) -> dict[str, Any]:
    """Keyword arguments for ``from_edge_index``: edges, types, counts; in half of the
    examples all well-formed (ids may still be out of range), else possibly hostile."""
    e = draw(st.integers(0, 8))
    tame = draw(st.booleans())
    kwargs: dict[str, Any] = {
        "edge_index": draw(arrays(st.just((2, e)) if tame else edge_shapes(e), tame)),
        "edge_type": draw(
            arrays(st.just((e,)) if tame else st.sampled_from([(e,)] * 4 + [(e + 1,), ()]), tame)
        ),
    }
    for name in ("num_nodes", "num_etypes", "num_ntypes"):
        kwargs[name] = draw(st.one_of(st.none(), st.integers(1, 12)) if tame else COUNTS)
    if draw(st.booleans()):
        n = kwargs["num_nodes"]
        rows = st.just((n,)) if tame and type(n) is int else st.tuples(st.integers(0, 12))
        kwargs["node_type"] = draw(arrays(rows, tame))
    return kwargs


def _ints(value: Any) -> np.ndarray:
    return np.asarray(value.numpy() if isinstance(value, torch.Tensor) else value, dtype=np.int64)


def _check_graph(g: HeteroGraph, kwargs: dict[str, Any]) -> None:
    """An accepted graph holds exactly the input edges, sorted by type, all in range."""
    ei, et = _ints(kwargs["edge_index"]), _ints(kwargs["edge_type"])
    perm = g.perm.numpy()
    assert sorted(perm.tolist()) == list(range(et.shape[0]))
    assert (g.src.numpy() == ei[0][perm]).all()
    assert (g.dst.numpy() == ei[1][perm]).all()
    assert (g.etype.numpy() == et[perm]).all()
    assert (np.diff(g.etype.numpy()) >= 0).all()
    assert g.etype_ptr[-1] == g.num_edges == et.shape[0]
    for ids, bound in ((g.src, g.num_nodes), (g.dst, g.num_nodes), (g.etype, g.num_etypes)):
        assert ((ids >= 0) & (ids < bound)).all()
    assert torch.isfinite(g.norm_dst_etype).all()
    assert torch.isfinite(g.norm_dst).all()


# -- HeteroGraph and random_graph -------------------------------------------------------------


@FUZZ
@given(edge_lists())
def test_from_edge_index_accepts_exactly_or_rejects_cleanly(kwargs: dict[str, Any]) -> None:
    outcome, g = classify(lambda: HeteroGraph.from_edge_index(**kwargs))
    if outcome == "accepted":
        _check_graph(g, kwargs)


@FUZZ
@given(
    nodes=st.integers(2**24, 2**31 + 8),
    etypes=st.one_of(st.just(1), st.integers(2**24, 2**31 + 8)),
)
def test_from_edge_index_rejects_over_limit_sizes_before_allocating(
    nodes: int, etypes: int
) -> None:
    edges = torch.tensor([[0, 1], [1, 0]])
    outcome, err = classify(
        lambda: HeteroGraph.from_edge_index(
            edges, torch.tensor([0, 0]), num_nodes=nodes, num_etypes=etypes
        )
    )
    assert outcome == "clean"
    if max(nodes, etypes) > MAX_COUNT:
        assert "does not fit in int32" in str(err)
    else:  # 2**24 nodes or edge types need more than the 256 MiB limit
        assert isinstance(err, ResourceLimitError), err
        assert "over the limit of 256 MiB (HECTOR_MEMORY_LIMIT" in str(err)


@FUZZ
@given(
    nodes=COUNTS,
    edges=st.one_of(st.integers(0, 300), st.integers(0, 300), st.sampled_from([2**40, -1, 3.0])),
    etypes=COUNTS,
    ntypes=st.one_of(st.integers(1, 4), st.sampled_from([0, 2**40, None])),
    empty=st.lists(st.integers(-1, 6), max_size=2),
    isolated=st.one_of(st.just(0), st.integers(-1, 12)),
    seed=st.one_of(st.integers(0, 2**16), st.integers(0, 2**16), st.sampled_from([-1, 2**64, "7"])),
)
def test_random_graph_is_valid_or_rejected(
    nodes: Any, edges: Any, etypes: Any, ntypes: Any, empty: list[int], isolated: int, seed: Any
) -> None:
    outcome, g = classify(
        lambda: random_graph(
            nodes,
            edges,
            etypes,
            num_ntypes=ntypes,
            empty_etypes=empty,
            isolated_nodes=isolated,
            seed=seed,
        )
    )
    if outcome == "accepted":
        assert (g.num_nodes, g.num_edges, g.num_etypes) == (int(nodes), edges, int(etypes))
        for r in empty:
            assert int(g.etype_ptr[r + 1] - g.etype_ptr[r]) == 0
        if g.num_edges:
            assert int(g.src.max()) < g.num_nodes - isolated
            assert int(g.dst.max()) < g.num_nodes - isolated


# -- datasets.from_edge_index -----------------------------------------------------------------


@FUZZ
@given(edge_lists(), st.one_of(st.none(), st.integers(-1, 6), st.just(2**40)))
def test_dataset_from_edge_index_is_consistent_or_a_dataset_error(
    kwargs: dict[str, Any], relations: Any
) -> None:
    args = {k: v for k, v in kwargs.items() if k not in ("num_etypes", "num_ntypes")}
    outcome, ds = classify(
        lambda: datasets.from_edge_index(**args, num_relations=relations),
        clean=(datasets.DatasetError,),
    )
    if outcome != "accepted":
        return
    ei = _ints(kwargs["edge_index"])
    perm = ds.info.get("node_perm")
    inverse = torch.argsort(perm).numpy() if perm is not None else None
    want = ei if inverse is None else inverse[ei]
    assert (ds.edge_index.numpy() == want).all()
    assert (ds.edge_type.numpy() == _ints(kwargs["edge_type"])).all()
    assert (np.diff(ds.node_type.numpy()) >= 0).all()
    _check_graph(ds.hetero_graph(), {"edge_index": ds.edge_index, "edge_type": ds.edge_type})


# -- a compiled function ------------------------------------------------------------------------

N_NODES, N_EDGES, N_ETYPES, IN, OUT = 20, 60, 3, 4, 2
RGCN_ARGS = ("x", "weight", "root", "bias")
GOOD_SHAPES = {"x": (N_NODES, IN), "weight": (N_ETYPES, IN, OUT), "root": (IN, OUT), "bias": (OUT,)}


@pytest.fixture(scope="module")
def rgcn_graph() -> HeteroGraph:
    return random_graph(N_NODES, N_EDGES, N_ETYPES, seed=1)


def _rgcn_reference(g: HeteroGraph, x, weight, root, bias) -> torch.Tensor:
    msg = torch.einsum("ei,eio->eo", x[g.src.long()], weight[g.etype.long()]) * g.norm_dst_etype
    return torch.zeros(g.num_nodes, OUT).index_add_(0, g.dst.long(), msg) + x @ root + bias


@st.composite
def rgcn_arguments(draw: st.DrawFn) -> list[Any]:
    """The four tensors, one or two of them spoiled: NumPy, a list, a wrong dtype or shape."""
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    args: list[Any] = [torch.randn(*GOOD_SHAPES[n], generator=gen) for n in RGCN_ARGS]
    for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
        i = draw(st.integers(0, 3))
        how = draw(
            st.sampled_from(
                ["numpy", "list", "float64", "int64", "rows", "width", "rank", "scalar", "none"]
            )
        )
        t = (
            args[i]
            if isinstance(args[i], torch.Tensor)
            else torch.randn(*GOOD_SHAPES[RGCN_ARGS[i]])
        )
        args[i] = {
            "numpy": lambda t=t: t.numpy(),
            "list": lambda t=t: t.tolist(),
            "float64": lambda t=t: t.double(),
            "int64": lambda t=t: t.long(),
            "rows": lambda t=t: torch.randn(t.shape[0] + 1, *t.shape[1:]),
            "width": lambda t=t: torch.randn(*t.shape[:-1], t.shape[-1] + 1),
            "rank": lambda t=t: t.unsqueeze(0),
            "scalar": lambda t=t: torch.tensor(1.0),
            "none": lambda t=t: None,
        }[how]()
    if draw(st.integers(0, 5)) == 0:
        args = args[: draw(st.integers(0, 3))]  # too few tensors
    return args


@settings(FUZZ, max_examples=40)
@given(rgcn_arguments(), st.booleans())
def test_compiled_function_is_correct_or_rejects_arguments(
    rgcn_graph: HeteroGraph, args: list[Any], grad: bool
) -> None:
    if grad:
        args = [
            a.requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
            for a in args
        ]
    # A shape only the verifier can judge is a located compile diagnostic (PipelineError).
    clean = (TypeError, ValueError, hector.TraceError, diagnostics.PipelineError)
    outcome, out = classify(lambda: rgcn_layer(rgcn_graph, *args), clean=clean)
    if outcome == "accepted":
        torch.testing.assert_close(out, _rgcn_reference(rgcn_graph, *args), atol=1e-4, rtol=1e-4)


# -- HGT's x_dict -------------------------------------------------------------------------------

NODE_TYPES = ["paper", "author"]
EDGE_TYPES = [("paper", "cites", "paper"), ("author", "writes", "paper")]
TYPE_ROWS = {"paper": 6, "author": 4}


@pytest.fixture(scope="module")
def hgt() -> tuple[HeteroGraph, HGTLayer]:
    edge_index = torch.tensor([[0, 1, 2, 6, 7, 9], [1, 2, 0, 0, 3, 5]])
    ds = datasets.from_edge_index(
        edge_index,
        torch.tensor([0, 0, 0, 1, 1, 1]),
        node_type=torch.tensor([0] * 6 + [1] * 4),
        node_types=NODE_TYPES,
        edge_types=EDGE_TYPES,
    )
    torch.manual_seed(0)
    return ds.hetero_graph(), HGTLayer(IN, IN, NODE_TYPES, EDGE_TYPES)


@st.composite
def x_dicts(draw: st.DrawFn) -> Any:
    """Features per node type, possibly spoiled: rows moved between types, keys missing or
    extra, wrong widths or dtypes, NumPy values, or no dict at all."""
    rows = dict(TYPE_ROWS)
    if draw(st.booleans()):
        moved = draw(st.integers(-2, 2))
        rows = {"paper": rows["paper"] + moved, "author": rows["author"] - moved}
    x: Any = {t: torch.randn(max(n, 0), IN) for t, n in rows.items()}
    spoil = draw(
        st.sampled_from(["", "", "missing", "extra", "width", "double", "numpy", "tensor", "list"])
    )
    if spoil == "missing":
        x.pop(draw(st.sampled_from(NODE_TYPES)))
    elif spoil == "extra":
        x["venue"] = torch.randn(2, IN)
    elif spoil == "width":
        x["author"] = torch.randn(rows["author"], IN + 1)
    elif spoil == "double":
        x["paper"] = x["paper"].double()
    elif spoil == "numpy":
        x["paper"] = x["paper"].numpy()
    elif spoil == "tensor":
        x = torch.cat(list(x.values()))
    elif spoil == "list":
        x = list(x.values())
    return x


@settings(FUZZ, max_examples=40)
@given(x_dicts())
def test_hgt_accepts_matching_features_or_rejects_before_compute(
    hgt: tuple[HeteroGraph, HGTLayer], x: Any
) -> None:
    g, layer = hgt
    outcome, out = classify(lambda: layer(g, x))
    if outcome == "accepted":
        assert {k: tuple(v.shape) for k, v in x.items()} == {
            t: (n, IN) for t, n in TYPE_ROWS.items()
        }
        assert set(out) == {"paper"}  # the only destination type
        assert out["paper"].shape == (TYPE_ROWS["paper"], IN)
        assert torch.isfinite(out["paper"]).all()


# -- model constructors -------------------------------------------------------------------------

SIZES = st.one_of(
    st.integers(1, 8),
    st.integers(1, 8),
    st.integers(-1, 8),
    st.sampled_from([2**20, 2**31, True, 2.5, "4", None]),
)
TYPE_NAMES = st.lists(st.sampled_from(["a", "b", "c", 3]), max_size=3)
TRIPLES = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "z"]), st.sampled_from(["r", "s"]), st.sampled_from(["a", "b"])
    ),
    max_size=3,
)


@FUZZ
@given(
    model=st.sampled_from(["rgcn", "rgat", "hgt", "RGCN", "RGAT", "HGT"]),
    in_dim=SIZES,
    out_dim=SIZES,
    relations=SIZES,
    heads=SIZES,
    layers=st.one_of(st.integers(1, 3), st.sampled_from([0, -1, 2**40])),
    node_types=TYPE_NAMES,
    edge_types=TRIPLES,
)
def test_model_constructors_build_or_reject(
    model: str,
    in_dim: Any,
    out_dim: Any,
    relations: Any,
    heads: Any,
    layers: Any,
    node_types: list[Any],
    edge_types: list[Any],
) -> None:
    build = {
        "rgcn": lambda: models.RGCNLayer(in_dim, out_dim, relations),
        "rgat": lambda: models.RGATLayer(in_dim, out_dim, relations, heads=heads),
        "hgt": lambda: models.HGTLayer(in_dim, out_dim, node_types, edge_types, heads=heads),
        "RGCN": lambda: models.RGCN(in_dim, out_dim, out_dim, relations, num_layers=layers),
        "RGAT": lambda: models.RGAT(in_dim, 2, out_dim, relations, layers, heads=heads),
        "HGT": lambda: models.HGT(in_dim, out_dim, node_types, edge_types, layers, heads=heads),
    }[model]
    outcome, layer = classify(build)
    if outcome == "accepted":
        assert 4 * sum(p.numel() for p in layer.parameters()) <= LIMIT_BYTES
        assert all(torch.isfinite(p).all() for p in layer.parameters())
