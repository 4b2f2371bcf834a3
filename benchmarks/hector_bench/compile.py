"""``hector bench compile``: PyG layers under ``torch.compile``: eager vs Inductor vs Hector.

The PyG layer (``RGCNConv``, ``RGATConv`` or ``HGTConv``; ``--layer fastrgcn`` for
``FastRGCNConv``) is built once with a fixed seed and copied into three systems that run in
this process on the same inputs: eager PyG, ``torch.compile(layer, backend="inductor")`` and
``torch.compile(layer, backend=HectorBackend())``. Each system's first call (Dynamo capture,
import or C++ compilation) is timed apart as ``compile_s``; then ``--warmup`` untimed and
``--runs`` timed steps (training: forward, ``mean(out**2)``, backward; inference under
``no_grad``). The record holds per system the timing, the number of graphs Dynamo compiled,
the output/gradient error against eager, and for Hector the specialisations, the graphs that
fell back (with the reason) and the fraction of the step spent inside Hector's compiled regions.

Compile times are cold and warm. The run uses its own empty compilation cache
(``HECTOR_CACHE_DIR`` set to a fresh private directory, removed at the end), so Hector's
``compile_s`` is a cold compile; then a fresh process builds the same layer and inputs (same
seed), runs one eager step and times Hector's first call again against the cache the first
process filled: ``warm_compile_s``, ``warm_over_cold`` and that process's cache hits and misses
(``warm_cache``) are in the Hector row. ``--no-warm`` leaves the second process out.

``--clock cpu`` times the steps in the process's CPU time (all its threads) instead of elapsed
time: on a machine other work shares, it counts the work of a step rather than how long it
waited for a core (``config.clock`` in the record). ``hector_kernel_fraction`` divides the
elapsed time in Hector's compiled code by the steps' times on that clock.

``--model`` and ``--dataset`` take comma-separated lists: every (model, dataset) pair is a
cell of one record, measured in this one process (``cells``; each with its graph size, load
average before and after, ``speedup_vs_eager``, ``hector_vs_inductor`` and ``target_met``:
Hector at least 2x eager and faster than Inductor). The record is rewritten after every cell.
Under the Hector backend ``RGCNConv`` and ``HGTConv`` run as one ``hector::pyg_layer`` op
(:mod:`hector.dynamo.pyg_route`); their program's calls are in ``hector.layer_programs``.

``--systems`` may add ``hector-team``: Hector's backend again, its steps run with team calls on
(``HECTOR_TEAM_CALLS=1`` set around each step; :mod:`hector.runtime.team_calls`), and
``hector-mlir``: its steps run with pool calls off (``HECTOR_POOL_CALLS=0``: the workers'
chunks go to MLIR's async pool, as before pool calls were the default), so one process
compares Hector's helper threads (``hector``), PyTorch's OpenMP threads and MLIR's pool on the
same program.

``--cell NAME`` runs a named cell (:data:`CELLS`) that guards one result: it fixes the layer,
graph, widths and systems (``--runs``, ``--warmup``, ``--clock`` and ``--json`` still apply)
and its ``target_met`` is its own target (``cell_target`` in the cell). ``rgcn-route`` is
issue 54's: ``RGCNConv(16, 24, 6, aggr="mean")`` training with the features' gradient on a
20,000-node, 200,000-edge graph, Hector at least 2x eager PyG.

    hector bench compile --model rgcn,rgat,hgt --dataset synthetic:aifb,synthetic:mutag \
        --runs 3 --json compile.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hector.tools import cli_args as _args

from . import _common, random_graph

MODELS = ("rgcn", "rgat", "hgt")
SYSTEMS = ("eager", "inductor", "hector", "hector-team", "hector-mlir")
#: The system that runs Hector's backend with team calls on (``HECTOR_TEAM_CALLS=1`` during its
#: calls only: ``hector.runtime.team_calls``), beside ``hector`` with them as the process has.
TEAM_SYSTEM = "hector-team"
#: The system that runs Hector's backend with pool calls off (``HECTOR_POOL_CALLS=0`` during
#: its calls: the chunks go to MLIR's async pool).
MLIR_POOL_SYSTEM = "hector-mlir"
#: The environment each of those systems' steps run under.
STEP_ENVIRONMENT = {
    TEAM_SYSTEM: {"HECTOR_TEAM_CALLS": "1"},
    MLIR_POOL_SYSTEM: {"HECTOR_POOL_CALLS": "0"},
}


class BenchError(Exception):
    """Bad arguments or an unknown dataset: printed as ``error: ...``."""


@dataclass(frozen=True)
class NamedCell:
    """A cell that guards one result (``--cell``): the settings it fixes and its target,
    Hector's median step at least ``min_speedup`` times faster than eager PyG's."""

    description: str
    min_speedup: float
    settings: dict[str, Any] = field(default_factory=dict)


#: The named cells, by ``--cell`` name.
CELLS = {
    "rgcn-route": NamedCell(
        "issue 54: RGCNConv(16, 24, 6, aggr='mean') training with the features' gradient on "
        "20,000 nodes and 200,000 edges under backend='hector', at least 2x eager PyG",
        2.0,
        {
            "model": "rgcn",
            "layer": "default",
            "dataset": "random:20000x200000x6",
            "mode": "training",
            "in_dim": 16,
            "hidden": 24,
            "input_grad": True,
            "dynamic": False,
            "systems": f"eager,hector,{TEAM_SYSTEM},{MLIR_POOL_SYSTEM}",
            "warm": False,
        },
    ),
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``hector bench compile``."""
    p.add_argument(
        "--model",
        default="rgat",
        help=f"comma-separated subset of {','.join(MODELS)} (every model x dataset is a cell)",
    )
    p.add_argument(
        "--layer",
        choices=("default", "fastrgcn"),
        default="default",
        help="rgcn only: FastRGCNConv instead of RGCNConv",
    )
    p.add_argument(
        "--dataset",
        default="synthetic:aifb",
        help="comma-separated datasets; random:NODESxEDGESxRELATIONS for a small random graph",
    )
    p.add_argument("--mode", choices=("training", "inference"), default="training")
    p.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help="comma-separated subset of eager,inductor,hector,hector-team,hector-mlir (Hector "
        "with team calls on; with MLIR's pool instead of its own helpers)",
    )
    p.add_argument("--in-dim", type=_args.WIDTH, default=16)
    p.add_argument(
        "--hidden", type=_args.WIDTH, default=16, help="output features (per head: RGAT)"
    )
    p.add_argument("--heads", type=_args.HEADS, default=2)
    p.add_argument("--runs", type=_args.RUNS, default=5)
    p.add_argument("--warmup", type=_args.WARMUP, default=1)
    p.add_argument("--seed", type=_args.SEED, default=0)
    p.add_argument(
        "--dynamic",
        action="store_true",
        help="torch.compile(..., dynamic=True) for both compiled systems",
    )
    p.add_argument(
        "--input-grad",
        action="store_true",
        help="training: the features require grad, as a hidden layer's do (their gradient is "
        "computed and compared too)",
    )
    _common.add_clock_argument(p)
    p.add_argument(
        "--cell",
        choices=sorted(CELLS),
        default=None,
        help="a named cell guarding one result (fixes the layer, graph, widths and systems; "
        "rgcn-route: issue 54's RGCNConv(aggr='mean') training, target 2x eager)",
    )
    p.add_argument("--json", default=None, help="write the record here")
    p.add_argument("--note", default=None, help="free text stored in the record")
    p.add_argument(
        "--no-warm",
        dest="warm",
        action="store_false",
        help="skip the second process that times a warm compile (from the compilation cache)",
    )


def _build(
    args: argparse.Namespace, model: str, dataset: str
) -> tuple[Any, Any, tuple[Any, ...], dict[str, Any]]:
    """The dataset, the PyG layer, its inputs (features first) and the graph's size."""
    import torch
    from torch_geometric import nn as pyg_nn

    from hector import datasets

    try:
        if dataset.startswith(random_graph.PREFIX):
            ds = random_graph.random_graph(dataset, seed=args.seed)
        else:
            ds = datasets.load(dataset, seed=args.seed)
    except datasets.DatasetError as err:
        raise BenchError(str(err)) from None
    gen = torch.Generator().manual_seed(args.seed)
    torch.manual_seed(args.seed)
    size = {"nodes": ds.num_nodes, "edges": ds.num_edges, "relations": ds.num_relations}
    grad = bool(getattr(args, "input_grad", False)) and args.mode == "training"
    if model == "hgt":
        counts, eid = ds.pyg_hetero()
        xd = {
            t: torch.randn(n, args.in_dim, generator=gen).requires_grad_(grad)
            for t, n in counts.items()
        }
        layer = pyg_nn.HGTConv(args.in_dim, args.hidden, ds.metadata(), heads=args.heads)
        return ds, layer, (xd, eid), size
    ei, et = ds.pyg_homogeneous()
    x = torch.randn(ds.num_nodes, args.in_dim, generator=gen).requires_grad_(grad)
    if model == "rgcn":
        cls = pyg_nn.FastRGCNConv if args.layer == "fastrgcn" else pyg_nn.RGCNConv
        layer = cls(args.in_dim, args.hidden, ds.num_relations, aggr="mean")
    else:
        layer = pyg_nn.RGATConv(args.in_dim, args.hidden, ds.num_relations, heads=args.heads)
    return ds, layer, (x, ei, et), size


def _leaves(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for k in sorted(value) for t in _leaves(value[k])]
    return [t for v in value for t in _leaves(v)]


def _step(layer: Any, fn: Callable[..., Any], inputs: tuple[Any, ...], training: bool) -> Any:
    """One call of the benchmark: a training step (forward, loss, backward) or inference."""
    import torch

    x, rest = inputs[0], inputs[1:]

    def run() -> Any:
        if not training:
            with torch.no_grad():
                return _leaves(fn(x, *rest))
        for p in [*layer.parameters(), *_leaves(x)]:
            p.grad = None
        outs = _leaves(fn(x, *rest))
        loss = sum(o.square().mean() for o in outs)
        loss.backward()
        return outs

    return run


def _with_environment(step: Callable[[], Any], env: dict[str, str]) -> Callable[[], Any]:
    """``step`` run with the variables of ``env`` set during the call (as they were after)."""

    def run() -> Any:
        old = {name: os.environ.get(name) for name in env}
        os.environ.update(env)
        try:
            return step()
        finally:
            for name, value in old.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    return run


def _max_err(a: list[Any], b: list[Any]) -> float | None:
    errs = [(u.detach() - v.detach()).abs().max().item() for u, v in zip(a, b, strict=True)]
    return max(errs) if errs else None


def _names(text: str, allowed: tuple[str, ...] | None, what: str) -> list[str]:
    names = [s for s in text.split(",") if s]
    bad = [s for s in names if allowed is not None and s not in allowed]
    if bad or not names:
        raise BenchError(f"{what} takes a subset of {','.join(allowed or ())}, got {text!r}")
    return names


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    """Measure every system on every (model, dataset) cell, in this process (with a cache of
    its own, so the first compile is cold); the record. A named cell (``--cell``) sets its
    settings on ``args`` first."""
    named = getattr(args, "cell", None)
    if named is not None:
        if named not in CELLS:
            raise BenchError(f"--cell takes one of {', '.join(sorted(CELLS))}, got {named!r}")
        for key, value in CELLS[named].settings.items():
            setattr(args, key, value)
    old = os.environ.get("HECTOR_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="hector-bench-cache-") as cache_dir:
        os.environ["HECTOR_CACHE_DIR"] = cache_dir
        try:
            return _run_cells(args)
        finally:
            if old is None:
                os.environ.pop("HECTOR_CACHE_DIR", None)
            else:
                os.environ["HECTOR_CACHE_DIR"] = old


def _run_cells(args: argparse.Namespace) -> dict[str, Any]:
    systems = _names(args.systems, SYSTEMS, "--systems")
    models = _names(args.model, MODELS, "--model")
    sets = _names(args.dataset, None, "--dataset")
    if args.runs < 1 or args.warmup < 0:
        raise BenchError("--runs must be >= 1 and --warmup >= 0")
    cells: list[dict[str, Any]] = []
    record = {
        "benchmark": "compile",
        "mode": args.mode,
        "config": {
            "in_dim": args.in_dim,
            "hidden": args.hidden,
            "heads": args.heads,
            "runs": args.runs,
            "warmup": args.warmup,
            "seed": args.seed,
            "dynamic": bool(args.dynamic),
            "input_grad": bool(args.input_grad),
            "systems": systems,
            "clock": getattr(args, "clock", "wall"),
            "cell": getattr(args, "cell", None),
        },
        "host": _common.host_info(),
        "note": args.note,
        "cells": cells,
        "targets": {},
    }
    for model in models:
        for dataset in sets:
            load_before = os.getloadavg()
            start = time.perf_counter()
            cell = run_cell(args, model, dataset, systems)
            _named_target(cell, getattr(args, "cell", None))
            cell["wall_s"] = round(time.perf_counter() - start, 1)
            cell["loadavg_before"] = [round(v, 2) for v in load_before]
            cell["loadavg_after"] = [round(v, 2) for v in os.getloadavg()]
            cells.append(cell)
            goal = args.cell or "hector_2x_eager_and_faster_than_inductor"
            record["targets"] = {
                goal: {f"{c['layer']}@{c['dataset']}": c["target_met"] for c in cells}
            }
            print(_cell_line(cell), flush=True)
            if args.json:  # after every cell: a long run that dies keeps what it measured
                _common.write_json(args.json, record)
    return record


def _named_target(cell: dict[str, Any], named: str | None) -> None:
    """Replace ``cell``'s ``target_met`` by a named cell's own target (``cell_target``)."""
    if named is None:
        return
    target = CELLS[named]
    speedup = cell["speedup_vs_eager"].get("hector")
    cell["cell_target"] = {
        "name": named,
        "description": target.description,
        "min_speedup_vs_eager": target.min_speedup,
    }
    cell["target_met"] = bool(speedup is not None and speedup >= target.min_speedup)


def _cell_line(cell: dict[str, Any]) -> str:
    su = cell["speedup_vs_eager"]
    return (
        f"{cell['layer']} {cell['dataset']}: vs eager {su}, hector vs inductor "
        f"{cell['hector_vs_inductor']}, target met: {cell['target_met']} "
        f"({cell['wall_s']} s, load {cell['loadavg_before'][0]} -> {cell['loadavg_after'][0]})"
    )


def _compiled(name: str, layer: Any, args: argparse.Namespace, counted: list[int]) -> Any:
    """``(callable, backend)`` of one system: the eager layer, ``torch.compile`` with Inductor
    (its compilations counted in ``counted``) or with Hector's backend (returned, for its
    statistics; None otherwise)."""
    import torch
    from torch._inductor.compile_fx import compile_fx

    import hector.dynamo.backend as hd
    from hector.dynamo import pyg_route

    if name == "eager":
        return layer, None
    if name == "inductor":

        def inductor(gm: Any, example: Any, counted: list[int] = counted) -> Any:
            counted[0] += 1
            return compile_fx(gm, example)

        return torch.compile(layer, backend=inductor, dynamic=args.dynamic or None), None
    backend = hd.HectorBackend()
    pyg_route.reset_stats()  # the layer programs' counts are per cell
    return torch.compile(layer, backend=backend, dynamic=args.dynamic or None), backend


def _backend_columns(backend: Any, timing: Any, args: argparse.Namespace) -> dict[str, Any]:
    """What Hector's backend reports for its row: compilations, its statistics, the share of
    the timed runs spent in Hector's kernels, and every graph Dynamo gave it."""
    stats = backend.stats()
    total = sum(timing.times_ms) / 1e3
    # hector_seconds also counted the warm-up calls: scale to the timed runs only.
    per_call = stats["hector_seconds"] / max(args.runs + args.warmup, 1)
    return {
        "dynamo_compilations": stats["compilations"],
        "hector": stats,
        "hector_kernel_fraction": round(per_call * args.runs / total, 4),
        "graphs": [
            {
                "index": g.index,
                "status": g.status,
                "reason": g.reason
                or next((s.reason for s in g.specializations.values() if s.reason), None),
                "layer_programs": g.layers,
                "raised": g.raised(),
                "unraised_ops": sorted({n for n, _ in g.unraised()}),
                "calls": g.calls,
            }
            for g in backend.graphs
        ],
    }


def _cell_record(
    model: str, layer: str, dataset: str, size: Any, results: list[dict[str, Any]]
) -> dict[str, Any]:
    """The cell of the record: its rows, the speed-ups over eager and Hector over Inductor."""
    eager_ms = next((r["median_ms"] for r in results if r["system"] == "eager"), None)
    speedups = {
        r["system"]: round(eager_ms / r["median_ms"], 3)
        for r in results
        if r.get("status") == "ok" and eager_ms and r["system"] != "eager"
    }
    hector_ms = next(
        (r["median_ms"] for r in results if r["system"] == "hector" and r.get("status") == "ok"),
        None,
    )
    inductor_ms = next(
        (r["median_ms"] for r in results if r["system"] == "inductor" and r.get("status") == "ok"),
        None,
    )
    vs_inductor = round(inductor_ms / hector_ms, 3) if hector_ms and inductor_ms else None
    hector_vs_eager = speedups.get("hector")
    return {
        "model": model,
        "layer": layer,
        "dataset": dataset,
        "graph": size,
        "results": results,
        "speedup_vs_eager": speedups,
        "hector_vs_inductor": vs_inductor,
        # issue 16: >= 2x eager PyG and faster than Inductor, both measured in this run
        "target_met": bool(
            hector_vs_eager is not None
            and vs_inductor is not None
            and hector_vs_eager >= 2.0
            and vs_inductor > 1.0
        ),
    }


def run_cell(
    args: argparse.Namespace, model: str, dataset: str, systems: list[str]
) -> dict[str, Any]:
    """Measure every system on one PyG layer and dataset; the cell of the record."""
    import torch
    import torch._dynamo

    ds, base, inputs, size = _build(args, model, dataset)
    training = args.mode == "training"
    results: list[dict[str, Any]] = []
    reference: dict[str, Any] = {}
    for name in ["eager", *[s for s in systems if s != "eager"]]:
        torch._dynamo.reset()
        layer = copy.deepcopy(base)
        counted = [0]
        fn, backend = _compiled(name, layer, args, counted)
        step = _step(layer, fn, inputs, training)
        if name in STEP_ENVIRONMENT:
            step = _with_environment(step, STEP_ENVIRONMENT[name])
        entry: dict[str, Any] = {"system": name, "mode": args.mode}
        try:
            start = time.perf_counter()
            outs = step()
            entry["compile_s"] = round(time.perf_counter() - start, 3)
            grads = [p.grad for p in layer.parameters() if p.grad is not None]
            grads += [t.grad for t in _leaves(inputs[0]) if t.grad is not None]
            entry["grads_compared"] = len(grads) if training else 0
            if name == "eager":
                reference = {"outs": outs, "grads": grads}
            else:
                entry["max_abs_err_out"] = _max_err(outs, reference["outs"])
                if training:
                    entry["max_abs_err_grad"] = _max_err(grads, reference["grads"])
            if backend is not None:
                backend.reset_clock()
            clock = _common.clock_named(getattr(args, "clock", "wall"))
            timing = _common.time_calls(step, args.runs, warmup=args.warmup, clock=clock)
        except Exception as err:  # one system failing must not lose the others' rows
            entry["status"] = "error"
            entry["error"] = f"{type(err).__name__}: {str(err).strip().splitlines()[0][:300]}"
            results.append(entry)
            continue
        entry["status"] = "ok"
        entry.update(timing.as_record())
        if name == "inductor":
            entry["dynamo_compilations"] = counted[0]
        if backend is not None:
            entry.update(_backend_columns(backend, timing, args))
            if args.warm:
                entry.update(_warm_columns(args, model, dataset, entry["compile_s"]))
        results.append(entry)
    return _cell_record(model, type(base).__name__, dataset, size, results)


def _warm_columns(
    args: argparse.Namespace, model: str, dataset: str, cold_s: float
) -> dict[str, Any]:
    """Hector's first call timed again in a fresh process that finds this one's cache."""
    plain = {k: v for k, v in vars(args).items() if isinstance(v, str | int | float | bool | None)}
    import torch

    # The compiled code's key holds the thread count it was scheduled for: the warm process
    # must run with this one's, whatever changed it here, to find this one's program.
    threads = torch.get_num_threads()
    spec = json.dumps({**plain, "model": model, "dataset": dataset, "torch_threads": threads})
    code = f"from hector_bench.compile import warm_main; warm_main({spec!r})"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=1800, check=False
    )
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or ["no output"]
        return {"warm_error": lines[-1][:300]}
    warm = json.loads(done.stdout.strip().splitlines()[-1])
    ratio = round(warm["compile_s"] / cold_s, 4) if cold_s > 0 else None
    return {
        "warm_compile_s": warm["compile_s"],
        "warm_over_cold": ratio,
        "warm_cache": warm["cache"],
    }


def warm_main(spec: str) -> None:
    """The warm process: one eager step, then Hector's first call timed; prints JSON."""
    import torch

    from hector.targets import cpu_cache

    args = argparse.Namespace(**json.loads(spec))
    torch.set_num_threads(args.torch_threads)
    _, base, inputs, _ = _build(args, args.model, args.dataset)
    training = args.mode == "training"
    _step(base, base, inputs, training)()  # PyG's and autograd's own first-call costs
    layer = copy.deepcopy(base)
    fn, _ = _compiled("hector", layer, args, [0])
    start = time.perf_counter()
    _step(layer, fn, inputs, training)()
    seconds = time.perf_counter() - start
    torch._dynamo.reset()
    print(json.dumps({"compile_s": round(seconds, 3), "cache": dict(cpu_cache.STATS)}))


def run(args: argparse.Namespace) -> int:
    """Entry point of ``hector bench compile``: bad arguments print ``error: ...``, exit 1."""
    try:
        record = run_bench(args)
    except BenchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    rows = []
    for cell in record["cells"]:
        for r in cell["results"]:
            rows.append(
                {
                    "layer": cell["layer"],
                    "dataset": cell["dataset"],
                    "system": r["system"],
                    "status": r.get("status"),
                    "compile_s": r.get("compile_s"),
                    "warm_s": r.get("warm_compile_s"),
                    "median_ms": r.get("median_ms"),
                    "speedup": cell["speedup_vs_eager"].get(r["system"]),
                    "graphs": r.get("dynamo_compilations"),
                    "in_hector": r.get("hector_kernel_fraction"),
                    "err": r.get("max_abs_err_grad", r.get("max_abs_err_out")),
                }
            )
            if r.get("status") == "error":
                print(f"{cell['layer']} {cell['dataset']} {r['system']}: {r['error']}")
            for g in r.get("graphs", []):
                if g["status"] != "hector":
                    print(f"hector graph {g['index']} fell back: {g['reason']}")
    table = _common.format_table(
        rows,
        [
            ("layer", "layer"),
            ("dataset", "dataset"),
            ("system", "system"),
            ("status", "status"),
            ("compile_s", "first call s"),
            ("warm_s", "warm first call s"),
            ("median_ms", "median ms"),
            ("speedup", "vs eager"),
            ("graphs", "graphs compiled"),
            ("in_hector", "time in Hector"),
            ("err", "max abs err"),
        ],
    )
    _common.emit_record(record, table, args.json, None, None)
    return 0
