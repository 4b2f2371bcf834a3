"""Building a ``hector bench gnn`` cell: its dataset, inputs and the systems to measure.

For a cell (:class:`~hector_bench.gnn_cell.Cell`) this loads the dataset, draws the inputs,
builds the reference PyG layer with a fixed seed and describes every system (Hector's layer with
the reference's weights, the other PyG layers) as a :class:`System` whose ``build()`` makes its
layer. Inputs and weights are drawn in float32 and rounded to the cell's ``dtype``; in a
narrower type every system runs in it, and one more, untimed system — the reference PyG layer in
float32 on the same rounded weights and inputs — is the error reference, so the errors are
those of the narrow type's arithmetic. Everything is deterministic, so a worker process that
rebuilds the cell measures the very same layer and inputs as its parent described.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .gnn_cell import HECTOR_CLASS, REFERENCE, BenchError, Cell

# Ablation variants: (label, compact, reorder, fuse), as in the Hector paper's ablation.
ABLATION = (
    ("U", False, False, False),
    ("C", True, False, False),
    ("R", False, True, False),
    ("C+R", True, True, False),
    ("C+R+F", True, True, True),
)


@dataclass
class System:
    """A system to measure: ``build()`` returns (layer module, forward(x) callable)."""

    name: str  # "hector" or "pyg"
    variant: str
    build: Callable[[], tuple[Any, Callable[[Any], Any]]]
    reference: bool = False
    skip_reason: str | None = None  # set: does not run (unavailable / too big)
    skip_status: str = "skipped"
    optimizations: str = "C+R+F"  # Hector's optimizations (an ABLATION label)
    dtype: str | None = None  # the type its inputs are fed in (None: the cell's dtype)
    untimed_reason: str | None = None  # set: run once, as the error reference, not timed


@dataclass
class Setup:
    """Everything a cell's systems share: the dataset, the graph forms, the inputs."""

    cell: Cell
    dataset: Any
    x: Any  # Tensor [N, in] or dict[str, Tensor]
    systems: list[System]
    stats: dict[str, Any]


#: The row reason of the float32 error reference of a narrower cell.
FLOAT32_REFERENCE = (
    "error reference: the same PyG layer in float32 on the {dtype}-rounded weights and inputs "
    "(run once, untimed)"
)


def torch_dtype(cell: Cell) -> Any:
    """The cell's element type as a ``torch.dtype``."""
    import torch

    return getattr(torch, cell.dtype)


def _float32_reference(
    cell: Cell, ref: Any, call: Callable[[Any, Any], Any], variant: str
) -> list[System]:
    """In a narrower type than float32: the reference layer once more, in float32 on a copy of
    its (already rounded) weights, fed the rounded inputs widened back — the error reference
    (untimed). Nothing in float32."""
    if not cell.low_precision:
        return []

    def build() -> tuple[Any, Callable[[Any], Any]]:
        import copy

        ref32 = copy.deepcopy(ref).float()
        return ref32, lambda xx: call(ref32, xx)

    return [
        System(
            "pyg",
            f"{variant} float32",
            build,
            reference=True,
            dtype="float32",
            untimed_reason=FLOAT32_REFERENCE.format(dtype=cell.dtype),
        )
    ]


def _hector_class(model: str) -> Any:
    """``hector.models.<Model>Layer`` or None when it does not exist yet."""
    import importlib

    models = importlib.import_module("hector.models")
    return getattr(models, HECTOR_CLASS[model], None)


def _hector_systems(
    cell: Cell, hector_cls: Any, ref: Any, dev: Any, graph: Callable[[], Any]
) -> list[System]:
    """Hector's layer loaded from the PyG reference: one system with every optimization, or
    one per ablation variant (``--ablation``)."""
    variants = ABLATION if cell.ablation else (ABLATION[-1],)
    systems = []
    for label, compact, reorder, fuse in variants:

        def build(c: bool = compact, r: bool = reorder, f: bool = fuse) -> tuple[Any, Any]:
            layer = hector_cls.from_pyg(ref).to(dev, torch_dtype(cell)).optimize(c, r, f)
            layer.compiled.order = cell.order  # optimize() gave it its own compiled core
            g = graph()
            return layer, lambda xx: layer(g, xx)

        name = HECTOR_CLASS[cell.model] + (f" {label}" if cell.ablation else "")
        systems.append(System("hector", name, build, optimizations=label))
    return systems


def _unavailable(name: str, reason: str) -> System:
    """A Hector system that cannot run here: a row with ``status: "unavailable"``."""
    return System(
        "hector",
        name,
        lambda: (None, lambda xx: None),
        skip_reason=reason,
        skip_status="unavailable",
    )


def _load_dataset(cell: Cell) -> Any:
    """The cell's dataset (:func:`hector.datasets.load`); a dataset error is a BenchError."""
    from hector import datasets

    try:
        return datasets.load(cell.dataset, scale=cell.scale, seed=cell.seed)
    except datasets.DatasetError as err:
        raise BenchError(str(err)) from None


def _inputs(cell: Cell, ds: Any, dev: Any, gen: Any) -> tuple[Any, Any]:
    """``(x, edges)``: the input features drawn from ``gen`` (in float32, then rounded to the
    cell's dtype) and the graph in the form the PyG layers take (``edge_index_dict`` for HGT,
    ``(edge_index, edge_type)`` otherwise)."""
    import torch

    dt = torch_dtype(cell)
    if cell.model == "hgt":
        counts, edge_index_dict = ds.pyg_hetero()
        x: Any = {
            t: torch.randn(n, cell.in_dim, generator=gen).to(dev, dt) for t, n in counts.items()
        }
        return x, {k: v.to(dev) for k, v in edge_index_dict.items()}
    x = torch.randn(ds.num_nodes, cell.in_dim, generator=gen).to(dev, dt)
    edge_index, edge_type = (t.to(dev) for t in ds.pyg_homogeneous())
    return x, (edge_index, edge_type)


def _rgcn_hector_systems(
    cell: Cell, hector_cls: Any, ref: Any, dev: Any, hector_graph: Callable[[], Any]
) -> list[System]:
    """Hector's RGCN: the layer class when there is one, else the ``rgcn_layer`` function in
    inference, else an unavailable row."""
    if hector_cls is not None:
        return _hector_systems(cell, hector_cls, ref, dev, hector_graph)
    if not cell.training:
        from hector.models import rgcn_layer

        def build_fn() -> tuple[Any, Callable[[Any], Any]]:
            g = hector_graph()
            w = [p.detach() for p in (ref.weight, ref.root, ref.bias)]
            return rgcn_layer, lambda xx: rgcn_layer(g, xx, *w)

        return [System("hector", "rgcn_layer", build_fn)]
    return [
        _unavailable(
            HECTOR_CLASS["rgcn"], "hector.models.RGCNLayer (trainable) is not available yet"
        )
    ]


def _rgcn_systems(
    cell: Cell, ds: Any, dev: Any, edges: Any, hector_cls: Any, hector_graph: Callable[[], Any]
) -> list[System]:
    """Hector's RGCN, the reference ``RGCNConv`` and ``FastRGCNConv`` (skipped when its per-edge
    weights would exceed ``--max-peer-mem-gb``)."""
    from torch_geometric import nn as pyg_nn

    edge_index, edge_type = edges
    dt = torch_dtype(cell)
    ref = pyg_nn.RGCNConv(cell.in_dim, cell.hidden, ds.num_relations, aggr="mean").to(dev, dt)

    def pyg_forward(conv: Any) -> Callable[[Any], Any]:
        return lambda xx: conv(xx, edge_index, edge_type)

    def build_fast() -> tuple[Any, Callable[[Any], Any]]:
        fast = pyg_nn.FastRGCNConv(cell.in_dim, cell.hidden, ds.num_relations, aggr="mean")
        fast.to(dev, dt).load_state_dict(ref.state_dict())
        return fast, pyg_forward(fast)

    def call(conv: Any, xx: Any) -> Any:
        return conv(xx, edge_index, edge_type)

    peers = [
        *_float32_reference(cell, ref, call, "RGCNConv"),
        System(
            "pyg", "RGCNConv", lambda: (ref, pyg_forward(ref)), reference=not cell.low_precision
        ),
    ]
    # FastRGCNConv gathers one [in, out] weight per edge (and its gradient in training).
    itemsize = dt.itemsize
    est = ds.num_edges * cell.in_dim * cell.hidden * itemsize * (3 if cell.training else 1)
    fast_sys = System("pyg", "FastRGCNConv", build_fast)
    if est > cell.max_peer_mem_gb * 2**30:
        fast_sys.skip_reason = (
            f"needs ~{est / 2**30:.1f} GiB for per-edge weights "
            f"(> --max-peer-mem-gb {cell.max_peer_mem_gb:g})"
        )
    peers.append(fast_sys)
    return [*_rgcn_hector_systems(cell, hector_cls, ref, dev, hector_graph), *peers]


def _attention_systems(
    cell: Cell, ds: Any, dev: Any, edges: Any, hector_cls: Any, hector_graph: Callable[[], Any]
) -> list[System]:
    """Hector's RGAT or HGT and its reference PyG layer (``RGATConv`` / ``HGTConv``)."""
    from torch_geometric import nn as pyg_nn

    dt = torch_dtype(cell)
    call: Callable[[Any, Any], Any]
    if cell.model == "rgat":
        edge_index, edge_type = edges
        ref = pyg_nn.RGATConv(
            cell.in_dim, cell.hidden, ds.num_relations, heads=cell.heads, concat=True
        ).to(dev, dt)

        def call(conv: Any, xx: Any) -> Any:
            return conv(xx, edge_index, edge_type)
    else:
        ref = pyg_nn.HGTConv(cell.in_dim, cell.hidden, ds.metadata(), heads=cell.heads)
        ref = ref.to(dev, dt)

        def call(conv: Any, xx: Any) -> Any:
            return conv(xx, edges)

    variant = REFERENCE[cell.model]
    peers = [
        *_float32_reference(cell, ref, call, variant),
        System(
            "pyg",
            variant,
            lambda: (ref, lambda xx: call(ref, xx)),
            reference=not cell.low_precision,
        ),
    ]
    name = HECTOR_CLASS[cell.model]
    if hector_cls is not None:
        return [*_hector_systems(cell, hector_cls, ref, dev, hector_graph), *peers]
    return [_unavailable(name, f"hector.models.{name} is not available yet"), *peers]


def build_setup(cell: Cell) -> Setup:
    """Load the dataset and create inputs, layers and systems for ``cell`` (deterministic)."""
    import torch

    ds = _load_dataset(cell)
    dev = torch.device(cell.device)
    gen = torch.Generator().manual_seed(cell.seed)
    torch.manual_seed(cell.seed)
    x, edges = _inputs(cell, ds, dev, gen)

    graph_cache: dict[str, Any] = {}

    def hector_graph() -> Any:
        if "g" not in graph_cache:
            graph_cache["g"] = ds.hetero_graph()
        return graph_cache["g"]

    hector_cls = _hector_class(cell.model)
    make = _rgcn_systems if cell.model == "rgcn" else _attention_systems
    systems = make(cell, ds, dev, edges, hector_cls, hector_graph)
    return Setup(cell, ds, x, systems, ds.stats())


def find_system(setup: Setup, payload: dict[str, Any]) -> System:
    """The system a worker's payload names (``system`` and ``variant``)."""
    for s in setup.systems:
        if s.variant == payload["variant"] and s.name == payload["system"]:
            return s
    raise BenchError(f"no system {payload['system']} {payload['variant']} in this cell")
