"""``hector bench hetero-conv``: PyG heterogeneous models as users write them (``HeteroConv``,
``to_hetero``), trained eagerly, under ``torch.compile`` (Inductor) and under
``torch.compile(backend="hector")``.

The models are MLPerf Training's GNN reference (``graph_neural_network/rgnn.py``) as written:
``layers`` ``HeteroConv`` layers of one conv per relation, summed, leaky ReLU between layers, a
linear classifier on the ``paper`` rows. ``rgat``: ``GATConv(in, hidden // heads, heads=heads,
add_self_loops=False)``; ``rsage``: ``SAGEConv(in, hidden, root_weight=False)``. The ``to_hetero``
models are PyG's benchmark models (``benchmark/utils/hetero_sage.py``, ``hetero_gat.py``):
``to-hetero-sage``: ``to_hetero(GraphSAGE((-1, -1), hidden, layers, classes))``;
``to-hetero-gat``: ``to_hetero(GAT((-1, -1), hidden, layers, classes, heads=heads,
add_self_loops=False))``; ``to-hetero-gin``: ``to_hetero(GIN(-1, hidden, layers, classes))``
(PyG's basic GIN: ``GINConv(MLP([in, out, out]))`` per layer); relations summed, the
``paper`` rows' classes the output (lazy widths set by one eager call, as PyG's examples do).
``hetero-sage`` is PyG's DBLP example
(``examples/hetero/hetero_conv_dblp.py``): ``HeteroConv`` of ``SAGEConv((-1, -1), hidden)`` per
relation, summed, in the same layer stack as ``rsage``. Dropout is left out of these (the
systems would draw other masks, and the outputs are compared). ``han`` is PyG's HAN example
(``examples/hetero/han_imdb.py``): ``HANConv(-1, hidden, metadata, heads=heads, dropout=0.6)``
and a linear classifier on the ``paper`` rows, trained with its attention dropout: each system's
first step starts from ``--seed``, so eager PyG and Hector (which draws PyG's masks) compare,
and Inductor (its own random numbers) differs by the masks. The graph is random and
IGBH-shaped: the four node types of IGBH (``paper``, ``author``, ``institute``, ``fos``), its four
relations and their reverses (8), endpoints uniform in their types. With ``--graph
synthetic:mag`` the input is instead one sampled mini-batch of the ogbn-mag replica (at
``--scale``; :mod:`hector.data.synthetic`: skewed degrees, MAG's four node types and relations)
drawn by Hector's ``NeighborLoader`` (``--fanouts`` per hop, ``--batch-size`` ``paper`` seeds)
and converted to PyG's dicts (the replica has each relation's reverse, as ``ToUndirected``
gives PyG's MAG examples); features random, ``--width`` wide.

A step is forward, ``mean(out**2)``, backward; the systems take turns each round (one step
each, so machine load drifts over all alike), and the record has each system's median over
``--runs`` rounds after ``--warmup``, the ratios to eager, and each system's largest output
difference from eager.
"""

from __future__ import annotations

import argparse
from typing import Any

from hector.tools import cli_args as _args

from . import _common

MODELS = (
    "rgat",
    "rsage",
    "to-hetero-sage",
    "to-hetero-gat",
    "to-hetero-gin",
    "hetero-sage",
    "han",
)
SYSTEMS = ("eager", "inductor", "hector")
TYPES = ("paper", "author", "institute", "fos")
GRAPHS = ("random", "synthetic:mag")
#: IGBH's relations (source type, name, destination type); each also reversed.
RELATIONS = (
    ("paper", "cites", "paper"),
    ("paper", "written_by", "author"),
    ("paper", "topic", "fos"),
    ("author", "affiliated_to", "institute"),
)


class BenchError(Exception):
    """Bad arguments: printed as ``error: ...``."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``hector bench hetero-conv``."""
    p.add_argument("--model", default="rgat", help=f"comma-separated subset of {MODELS}")
    p.add_argument(
        "--nodes", default="3000,2000,300,800", help="node counts of paper,author,institute,fos"
    )
    p.add_argument("--edges", type=_args.WIDTH, default=59_000, help="edges over 8 relations")
    p.add_argument("--width", type=_args.WIDTH, default=128, help="input and hidden width")
    p.add_argument("--heads", type=_args.HEADS, default=4)
    p.add_argument("--layers", type=_args.WIDTH, default=3)
    p.add_argument("--classes", type=_args.WIDTH, default=19)
    p.add_argument("--systems", default=",".join(SYSTEMS), help="subset of eager,inductor,hector")
    p.add_argument("--runs", type=_args.RUNS, default=5)
    p.add_argument("--warmup", type=_args.WARMUP, default=1)
    p.add_argument("--seed", type=_args.SEED, default=0)
    p.add_argument(
        "--graph", default="random", choices=GRAPHS, help="random IGBH-shaped, or a MAG batch"
    )
    p.add_argument("--scale", type=_args.SCALE, default=0.05, help="scale of synthetic:mag")
    p.add_argument("--fanouts", default="15,10,5", help="synthetic:mag: fan-out per hop")
    p.add_argument("--batch-size", type=_args.WIDTH, default=1024, help="synthetic:mag: seeds")
    p.add_argument("--json", default=None, help="write the record here")


def graph(nodes: list[int], edges: int, width: int, seed: int) -> tuple[Any, Any]:
    """``(x_dict, edge_index_dict)`` of the random IGBH-shaped graph."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    sizes = dict(zip(TYPES, nodes, strict=True))
    x = {t: torch.randn(n, width, generator=gen) for t, n in sizes.items()}
    relations = [*RELATIONS, *((d, f"rev_{r}", s) for s, r, d in RELATIONS)]
    per = edges // len(relations)
    ei = {}
    for s, r, d in relations:
        src = torch.randint(sizes[s], (per,), generator=gen)
        ei[(s, r, d)] = torch.stack([src, torch.randint(sizes[d], (per,), generator=gen)])
    return x, ei


def mag_batch(args: argparse.Namespace) -> tuple[Any, Any]:
    """``(x_dict, edge_index_dict)`` of one sampled batch of ``synthetic:mag`` (module
    docstring)."""
    import torch

    from hector.data.loader import NeighborLoader
    from hector.data.synthetic import synthetic

    try:
        fanouts = [int(f) for f in args.fanouts.split(",")]
    except ValueError:
        raise BenchError(f"--fanouts needs integers, got {args.fanouts!r}") from None
    ds = synthetic("mag", scale=args.scale, seed=args.seed)
    node_types, edge_types = ds.metadata()
    loader = NeighborLoader(
        ds, fanouts, input_nodes="paper", batch_size=args.batch_size, shuffle=True, seed=args.seed
    )
    batch = next(iter(loader))
    g, ptr = batch.graph, batch.ntype_ptr.tolist()
    eptr, index = g.etype_ptr.tolist(), {t: i for i, t in enumerate(node_types)}
    edges = {
        (s, r, d): torch.stack(
            [
                g.src[eptr[k] : eptr[k + 1]].long() - ptr[index[s]],
                g.dst[eptr[k] : eptr[k + 1]].long() - ptr[index[d]],
            ]
        )
        for k, (s, r, d) in enumerate(edge_types)
    }
    gen = torch.Generator().manual_seed(args.seed)
    sizes = zip(node_types, batch.ntype_ptr.diff().tolist(), strict=True)
    x = {t: torch.randn(int(n), args.width, generator=gen) for t, n in sizes}
    # a relation the batch's hops never reach is left out, with the types only it touches
    ei = {e: v for e, v in edges.items() if v.shape[1]}
    touched = {t for s, _, d in ei for t in (s, d)}
    return {t: v for t, v in x.items() if t in touched}, ei


def inputs(args: argparse.Namespace) -> tuple[Any, Any, dict[str, int]]:
    """The cell's ``(x_dict, edge_index_dict)`` and its node counts (``--graph``)."""
    if args.graph == "synthetic:mag":
        x, ei = mag_batch(args)
        return x, ei, {t: int(v.shape[0]) for t, v in x.items()}
    nodes = [int(n) for n in args.nodes.split(",")]
    if len(nodes) != len(TYPES) or min(nodes) < 1:
        raise BenchError(f"--nodes needs {len(TYPES)} positive counts, got {args.nodes!r}")
    x, ei = graph(nodes, args.edges, args.width, args.seed)
    return x, ei, dict(zip(TYPES, nodes, strict=True))


def model(name: str, relations: list[Any], args: argparse.Namespace) -> Any:
    """MLPerf's ``RGNN`` (``rgat`` or ``rsage``) over ``relations``, dropout left out, or a
    ``to_hetero`` model (:func:`to_hetero_model`)."""
    import torch
    from torch import nn
    from torch_geometric.nn import GATConv, HeteroConv, SAGEConv

    if name.startswith("to-hetero-"):
        return to_hetero_model(name, relations, args)
    if name == "han":
        return han_model(relations, args)
    w, heads = args.width, args.heads

    def conv() -> Any:
        if name == "rgat":
            return GATConv(w, w // heads, heads=heads, add_self_loops=False)
        if name == "hetero-sage":  # PyG's examples/hetero/hetero_conv_dblp.py
            return SAGEConv((-1, -1), w)
        return SAGEConv(w, w, root_weight=False)

    class Rgnn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.convs = nn.ModuleList(
                HeteroConv({e: conv() for e in relations}) for _ in range(args.layers)
            )
            self.linear = nn.Linear(w, args.classes)

        def forward(self, x_dict: Any, edge_index_dict: Any) -> Any:
            for i, c in enumerate(self.convs):
                # a type no relation of a sampled batch reaches keeps its features (on the
                # random graph every type is reached, as in MLPerf's rgnn.py)
                x_dict = {**x_dict, **c(x_dict, edge_index_dict)}
                if i != len(self.convs) - 1:
                    x_dict = {k: nn.functional.leaky_relu(v) for k, v in x_dict.items()}
            return self.linear(x_dict["paper"])

    torch.manual_seed(args.seed)
    net = Rgnn()
    return _lazy_widths_set(net, relations, w) if name == "hetero-sage" else net


def han_model(relations: list[Any], args: argparse.Namespace) -> Any:
    """PyG's HAN example (``examples/hetero/han_imdb.py``) over ``relations``, the ``paper``
    rows' classes the output (lazy widths set by one eager call)."""
    import torch
    from torch_geometric.nn import HANConv

    types = list(dict.fromkeys(t for s, _, d in relations for t in (s, d)))

    class Han(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            metadata = (types, relations)
            self.han_conv = HANConv(-1, args.width, metadata, heads=args.heads, dropout=0.6)
            self.lin = torch.nn.Linear(args.width, args.classes)

        def forward(self, x_dict: Any, edge_index_dict: Any) -> Any:
            return self.lin(self.han_conv(x_dict, edge_index_dict)["paper"])

    torch.manual_seed(args.seed)
    return _lazy_widths_set(Han(), relations, args.width)


def to_hetero_model(name: str, relations: list[Any], args: argparse.Namespace) -> Any:
    """PyG's benchmark ``to_hetero`` model (``to-hetero-sage``, ``-gat`` or ``-gin``),
    returning the ``paper`` rows; the lazy widths set by one eager call on :func:`graph`'s
    features."""
    import torch
    from torch_geometric.nn import GAT, GIN, GraphSAGE, to_hetero

    torch.manual_seed(args.seed)
    if name == "to-hetero-sage":
        body = GraphSAGE((-1, -1), args.width, args.layers, args.classes)
    elif name == "to-hetero-gin":
        body = GIN(-1, args.width, args.layers, args.classes)
    else:
        body = GAT(
            (-1, -1), args.width, args.layers, args.classes, heads=args.heads, add_self_loops=False
        )
    types = list(dict.fromkeys(t for s, _, d in relations for t in (s, d)))
    hetero = to_hetero(body, (types, relations), aggr="sum")

    class PaperRows(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = hetero

        def forward(self, x_dict: Any, edge_index_dict: Any) -> Any:
            return self.model(x_dict, edge_index_dict)["paper"]

    return _lazy_widths_set(PaperRows(), relations, args.width)


def _lazy_widths_set(net: Any, relations: list[Any], width: int) -> Any:
    """``net`` after one eager call on a tiny graph of ``relations`` (PyG's lazy widths)."""
    import torch

    types = dict.fromkeys(t for s, _, d in relations for t in (s, d))
    x = {t: torch.zeros(2, width) for t in types}
    ei = {e: torch.zeros(2, 1, dtype=torch.long) for e in relations}
    with torch.no_grad():
        net(x, ei)
    return net


def _step(net: Any, fn: Any, x: Any, ei: Any) -> Any:
    def run() -> Any:
        for p in net.parameters():
            p.grad = None
        out = fn(x, ei)
        out.square().mean().backward()
        return out.detach()

    return run


def run_model(name: str, args: argparse.Namespace, systems: list[str]) -> dict[str, Any]:
    """One model's cell: each system's step times (rounds interleaved) and output error."""
    import torch

    import hector.dynamo.backend
    from hector.dynamo import pyg_route

    pyg_route.FALLBACKS.clear()  # the record's fallbacks and programs: this cell's own
    pyg_route.reset_stats()
    x, ei, nodes = inputs(args)
    net = model(name, list(ei), args)
    fns: dict[str, Any] = {"eager": net}
    backend = hector.dynamo.backend.HectorBackend()
    if "inductor" in systems:
        fns["inductor"] = torch.compile(net, backend="inductor")
    if "hector" in systems:
        fns["hector"] = torch.compile(net, backend=backend)
    steps = {s: _step(net, fns[s], x, ei) for s in systems}
    # the same masks where a model drops (han)
    turns = _common.steps_in_turns(steps, args.runs, args.warmup, seed=args.seed)
    first, compile_s, timing = turns.first, turns.first_s, turns.timing
    ref = first.get("eager")
    results = []
    for s in systems:
        entry = {"system": s, **timing[s].as_record(), "first_step_s": round(compile_s[s], 3)}
        if ref is not None:
            entry["max_abs_err_vs_eager"] = (first[s] - ref).abs().max().item()
            entry["speedup_vs_eager"] = round(timing["eager"].median_ms / timing[s].median_ms, 3)
        results.append(entry)
    stats = backend.stats() if "hector" in systems else {}
    return {
        "model": name,
        "graph": {
            "kind": args.graph if args.graph == "random" else f"{args.graph}@{args.scale} batch",
            "nodes": nodes,
            "edges": sum(int(v.shape[1]) for v in ei.values()),
            "relations": len(ei),
        },
        "results": results,
        "hector_programs": sorted(stats.get("layer_programs", {})),
        "hector_layer_fallbacks": stats.get("layer_fallbacks", {}),
    }


def _print_cell(cell: dict[str, Any]) -> None:
    for r in cell["results"]:
        print(
            f"{cell['model']:14s} {r['system']:9s} median {r['median_ms']:9.2f} ms  "
            f"x{r.get('speedup_vs_eager', 1.0):.2f} vs eager  "
            f"err {r.get('max_abs_err_vs_eager', 0.0):.2e}  first step {r['first_step_s']} s",
            flush=True,
        )
    print(f"{cell['model']:14s} hector programs: {cell['hector_programs']}", flush=True)
    for layer, reason in cell["hector_layer_fallbacks"].items():
        print(f"{cell['model']:14s} fallback {layer}: {reason}", flush=True)


def run(args: argparse.Namespace) -> int:
    """Run the cells, print a line per system, write the record."""
    models = [m for m in args.model.split(",") if m]
    systems = [s for s in args.systems.split(",") if s]
    bad = [m for m in models if m not in MODELS] + [s for s in systems if s not in SYSTEMS]
    if bad or not models or "eager" not in systems:
        print(f"error: unknown names {bad} (models {MODELS}, systems {SYSTEMS}, eager needed)")
        return 2
    cells = []
    for m in models:  # each cell printed as it ends (a run on a loaded machine is long)
        try:
            cells.append(run_model(m, args, systems))
        except BenchError as err:
            print(f"error: {err}")
            return 2
        _print_cell(cells[-1])
    _common.write_cells(args, "hetero-conv", cells)
    return 0
