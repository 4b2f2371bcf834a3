"""``hector bench bases-gin``: a ``to_hetero_with_bases`` model of ``GINConv`` layers trained
eagerly (PyG) and under ``torch.compile(backend="hector")`` with each of two ways to compute the
bases' aggregates.

The model is ``--layers`` ``GINConv(MLP([w, w, w]))`` layers (PyG's ``MLP``: batch norm, ReLU;
as PyG's ``GIN`` builds them), ReLU between, ``to_hetero_with_bases`` with ``--bases`` bases over
one node type and ``--relations`` relations of random edges (endpoints uniform). Systems:

- ``eager``: PyG's ``HeteroBasisConv`` (``B`` scatters of hook-scaled messages per layer);
- ``hector``: :mod:`hector.dynamo.pyg_bases_gin` as shipped, the relations' sums ``S_r`` as one
  ``bases-gin:sum`` program, then ``agg_b = (1 + ε_b) x + Σ_r a_{r,b} S_r`` as an ``einsum``;
- ``hector-identity``: the aggregates from ``hetero-bases:sum`` with ``W_r = [a_{r,1} I | … |
  a_{r,B} I]`` (``[R, K, B·K]``) and root ``[(1 + ε_1) I | …]``: one program, every message
  multiplied by a block of identities (:func:`identity_block_aggregates`, swapped in for that
  system's compilation and steps).

A step is forward, ``mean(out**2)``, backward; the systems take turns each round, and the record
has each system's median over ``--runs`` rounds after ``--warmup``, its ratio to eager and its
largest output difference from eager.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
from collections.abc import Iterator
from typing import Any

from hector.tools import cli_args as _args

from . import _common

SYSTEMS = ("eager", "hector", "hector-identity")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``hector bench bases-gin``."""
    p.add_argument("--nodes", type=_args.WIDTH, default=20_000)
    p.add_argument("--edges", type=_args.BATCH, default=200_000)
    p.add_argument("--relations", type=_args.WIDTH, default=8)
    p.add_argument("--width", type=_args.WIDTH, default=64)
    p.add_argument("--bases", type=_args.WIDTHS, default="2,3,4", help="one cell per count")
    p.add_argument("--layers", type=_args.LAYERS, default=2)
    p.add_argument("--systems", default=",".join(SYSTEMS), help=f"subset of {SYSTEMS}")
    p.add_argument("--runs", type=_args.RUNS, default=5)
    p.add_argument("--warmup", type=_args.WARMUP, default=1)
    p.add_argument("--seed", type=_args.SEED, default=0)
    p.add_argument("--json", default=None, help="write the record here")


def identity_block_aggregates(layer: Any, x: Any, edge_index: Any, edge_type: Any) -> Any:
    """``[B, N, K]`` aggregates from one ``hetero-bases:sum`` call with identity blocks."""
    import torch

    from hector.dynamo import pyg_route

    nodes, width = x.shape
    att = torch.cat([c.edge_type_weight for c in layer.convs])  # [B, R]
    eps = torch.cat([c.eps.view(1) for c in layer.convs])
    eye = torch.eye(width, dtype=x.dtype)
    weight = torch.einsum("br,ij->ribj", att, eye).reshape(att.shape[1], width, -1)
    root = torch.einsum("b,ij->ibj", 1 + eps, eye).reshape(width, -1)
    tensors = [x, weight, root, x.new_zeros(root.shape[1])]
    out = torch.ops.hector.pyg_layer(
        "hetero-bases:sum",
        pyg_route._train(tensors),
        [edge_index, edge_type],
        [nodes, layer.num_relations],
        [],
        tensors,
    )
    return out.view(nodes, len(layer.convs), width).transpose(0, 1)


@contextlib.contextmanager
def _aggregates_by(system: str) -> Iterator[None]:
    """``hector-identity``: :func:`identity_block_aggregates` in place of the shipped one."""
    from hector.dynamo import pyg_bases_gin

    shipped = pyg_bases_gin.aggregates
    if system == "hector-identity":
        pyg_bases_gin.aggregates = identity_block_aggregates
    try:
        yield
    finally:
        pyg_bases_gin.aggregates = shipped


def inputs(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """``(x_dict, edge_index_dict, metadata)``: one node type, ``--relations`` relations."""
    import torch

    gen = torch.Generator().manual_seed(args.seed)
    x = {"n": torch.randn(args.nodes, args.width, generator=gen)}
    relations = [("n", f"r{r}", "n") for r in range(args.relations)]
    per = args.edges // args.relations
    ei = {e: torch.randint(args.nodes, (2, per), generator=gen) for e in relations}
    return x, ei, (["n"], relations)


def model(args: argparse.Namespace, metadata: Any, bases: int) -> Any:
    """The ``to_hetero_with_bases`` model of ``--layers`` ``GINConv(MLP)`` layers."""
    import torch
    from torch_geometric.nn import MLP, GINConv, to_hetero_with_bases

    w = args.width

    class Gin(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.convs = torch.nn.ModuleList(
                GINConv(MLP([w, w, w]), train_eps=True) for _ in range(args.layers)
            )

        def forward(self, x: Any, edge_index: Any) -> Any:
            for i, conv in enumerate(self.convs):
                x = conv(x, edge_index)
                x = x.relu() if i < len(self.convs) - 1 else x
            return x

    torch.manual_seed(args.seed)
    net = to_hetero_with_bases(Gin(), metadata, num_bases=bases)
    with torch.no_grad():
        for name, p in net.named_parameters():  # one basis: PyG leaves them uninitialised
            if name.endswith("edge_type_weight") and bases == 1:
                p.uniform_(-1.0, 1.0)
    return net


def _step(net: Any, fn: Any, x: Any, ei: Any, system: str) -> Any:
    def run() -> Any:
        for p in net.parameters():
            p.grad = None
        with _aggregates_by(system):
            out = fn(x, ei)["n"]
            out.square().mean().backward()
        return out.detach()

    return run


def run_cell(args: argparse.Namespace, bases: int, systems: list[str]) -> dict[str, Any]:
    """One ``--bases`` count: each system's step times (rounds interleaved) and error."""
    import torch

    from hector.dynamo import pyg_route
    from hector.dynamo.backend import HectorBackend

    torch._dynamo.reset()
    pyg_route.FALLBACKS.clear()
    pyg_route.reset_stats()
    x, ei, metadata = inputs(args)
    base = model(args, metadata, bases)
    backends = {s: HectorBackend() for s in systems if s != "eager"}
    steps = {}
    for s in systems:  # a copy each: its own compiled code and gradients
        net = copy.deepcopy(base)
        fn = net if s == "eager" else torch.compile(net, backend=backends[s])
        steps[s] = _step(net, fn, x, ei, s)
    turns = _common.steps_in_turns(steps, args.runs, args.warmup)
    first, first_s, timing = turns.first, turns.first_s, turns.timing
    results = []
    for s in systems:
        entry: dict[str, Any] = {"system": s, **timing[s].as_record(), "first_step_s": first_s[s]}
        if "eager" in first:
            entry["max_abs_err_vs_eager"] = (first[s] - first["eager"]).abs().max().item()
            entry["speedup_vs_eager"] = round(timing["eager"].median_ms / timing[s].median_ms, 3)
        if s in backends:
            entry["compilations"] = backends[s].stats()["compilations"]
        results.append(entry)
    return {
        "bases": bases,
        "graph": {"nodes": args.nodes, "edges": args.edges, "relations": args.relations},
        "results": results,
        "programs": {p: v.calls for p, v in pyg_route.STATS.items()},
        "fallbacks": dict(pyg_route.FALLBACKS),
    }


def run(args: argparse.Namespace) -> int:
    """Run one cell per ``--bases`` count, print a line per system, write the record."""
    systems = [s for s in args.systems.split(",") if s]
    if any(s not in SYSTEMS for s in systems) or "eager" not in systems:
        print(f"error: --systems is a subset of {SYSTEMS} with eager, got {args.systems!r}")
        return 2
    cells = []
    for bases in (int(b) for b in args.bases.split(",")):
        cell = run_cell(args, bases, systems)
        cells.append(cell)
        for r in cell["results"]:
            print(
                f"B={bases} {r['system']:16s} median {r['median_ms']:9.2f} ms  "
                f"x{r.get('speedup_vs_eager', 1.0):.2f} vs eager  "
                f"err {r.get('max_abs_err_vs_eager', 0.0):.2e}  first step {r['first_step_s']} s",
                flush=True,
            )
        print(f"B={bases} programs {cell['programs']} fallbacks {cell['fallbacks']}", flush=True)
    _common.write_cells(args, "bases-gin", cells)
    return 0
