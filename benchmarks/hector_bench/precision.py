"""``hector bench precision``: Hector's layers on float32, bfloat16 and float16 storage.

``hector bench precision --dataset random:20000x200000x8 --in-dim 1024 --json out.json``

For each model and type, on one graph, in this process (the types are compared with one
another, in one run):

* **inference**: the layer's weights and the features in the type, under ``no_grad`` — the
  kernels read both as stored (``hector.storage``) — against ``cast``: the same values copied
  to float32 first, as a user would without half-precision kernels;
* **training**: MLPerf's setting — features stored in the type (they take no gradient), weights
  in float32 — one forward and backward step;
* **error** against float32 features and weights: the largest absolute difference of the
  outputs and of each weight's gradient, relative to the largest float32 value;
* **bytes**: of the features and weights the kernels read, against float32's.

The record's ``products`` says how a bf16 GEMM multiplied: ``bf16 pairs`` (``vdpbf16ps``,
the CPU has AVX512-BF16 and ``HECTOR_BF16_DOT`` is not ``off``) or ``f32`` (bf16 storage
widened to f32: about float32's arithmetic, so a compute-bound bf16 step gains little); the
table's first line says it too, so a figure from a CPU without the instruction is not read as
the bf16 products'.

With ``--kernels``, the record's ``kernels`` rows time each kernel of every type's training
step against float32's (:mod:`.precision_kernels`), where a bf16 step loses against its twin.

Medians of ``--runs`` rounds after ``--warmup`` (compilation); each round times every type's
calls in turn, so the load of the shared machine falls on all of them alike. The record also
holds the load average. ``--clock cpu`` times the process's CPU time (all its threads) instead
of elapsed time: on a machine other work shares, it counts the work of the calls rather than
how long they waited for a core.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable
from typing import Any

from hector.tools import cli_args as _args

from . import _common, precision_gemm, precision_kernels, random_graph

DTYPES = ("float32", "bfloat16", "float16")
MODELS = ("rgcn", "rgat", "hgt")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of the precision benchmark."""
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated: rgcn,rgat,hgt")
    p.add_argument("--dataset", default="random:20000x200000x8")
    p.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated; float32 first")
    p.add_argument("--in-dim", type=_args.WIDTH, default=1024, help="feature width")
    p.add_argument("--hidden", type=_args.WIDTH, default=64)
    p.add_argument("--heads", type=_args.HEADS, default=2, help="attention heads (RGAT, HGT)")
    p.add_argument("--runs", type=_args.RUNS, default=5)
    p.add_argument("--warmup", type=_args.WARMUP, default=1)
    p.add_argument("--seed", type=_args.SEED, default=0)
    p.add_argument(
        "--gemm",
        default="",
        help="also time a typed linear against torch.mm per type on these KxN shapes "
        "(comma-separated, e.g. 256x256,256x1024)",
    )
    p.add_argument("--gemm-rows", type=_args.WIDTH, default=20000, help="rows of --gemm's input")
    p.add_argument(
        "--kernels",
        action="store_true",
        help="also time each kernel of every type's training step against float32's "
        "(a profiled copy of the step; precision_kernels.py)",
    )
    _common.add_clock_argument(p)
    p.add_argument("--json", default=None)


def _layer(model: str, ds: Any, g: Any, a: argparse.Namespace) -> tuple[Any, Any]:
    """A float32 layer and its float32 input (a dict per node type for HGT)."""
    import torch

    from hector import models

    torch.manual_seed(a.seed)
    if model == "rgcn":
        return models.RGCNLayer(a.in_dim, a.hidden, g.num_etypes), torch.randn(
            g.num_nodes, a.in_dim
        )
    if model == "rgat":
        rgat = models.RGATLayer(a.in_dim, a.hidden, g.num_etypes, heads=a.heads)
        return rgat, torch.randn(g.num_nodes, a.in_dim)
    layer = models.HGTLayer(a.in_dim, a.hidden, ds.node_types, ds.edge_types, heads=a.heads)
    counts = torch.bincount(ds.node_type, minlength=len(ds.node_types)).tolist()
    return layer, {t: torch.randn(n, a.in_dim) for t, n in zip(ds.node_types, counts, strict=True)}


def _to(x: Any, dtype: Any) -> Any:
    return {k: v.to(dtype) for k, v in x.items()} if isinstance(x, dict) else x.to(dtype)


def _flat(out: Any) -> Any:
    import torch

    return torch.cat([out[k] for k in sorted(out)]) if isinstance(out, dict) else out


def _nbytes(x: Any) -> int:
    return sum(v.nbytes for v in x.values()) if isinstance(x, dict) else int(x.nbytes)


def _rel(have: Any, want: Any) -> float:
    scale = max(float(want.abs().max()), 1e-30)
    return float((have.float() - want).abs().max()) / scale


def _train_step(layer: Any, g: Any, x: Any) -> dict[str, Any]:
    """One forward and backward step; the weights' gradients by name."""
    layer.zero_grad(set_to_none=True)
    _flat(layer(g, x)).float().square().sum().backward()
    return {n: p.grad.clone() for n, p in layer.named_parameters() if p.grad is not None}


def _interleaved(
    calls: dict[Any, Any], runs: int, warmup: int, clock: str = "wall"
) -> dict[Any, float]:
    """Median milliseconds of each call, timed in turns (one of each per round), so that
    whatever else the machine runs meanwhile falls on every call alike; ``clock`` names the
    clock (:data:`_common.CLOCKS`)."""
    import statistics

    now = _common.clock_named(clock)

    for fn in calls.values():
        for _ in range(warmup):
            fn()
    times: dict[Any, list[float]] = {k: [] for k in calls}
    for _ in range(runs):
        for k, fn in calls.items():
            t0 = now()
            fn()
            times[k].append((now() - t0) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def _variant(model: str, name: str, ds: Any, g: Any, x32: Any, a: argparse.Namespace) -> dict:
    """The calls of one type: inference on the stored layer and input, the same through
    float32 copies, and a training step of float32 weights on the stored input."""
    import torch

    dtype = getattr(torch, name)
    stored, fed = _layer(model, ds, g, a)[0].to(dtype), _to(x32, dtype)
    wide = _layer(model, ds, g, a)[0]  # the stored weights' values, in float32
    wide.load_state_dict({k: v.float() for k, v in stored.state_dict().items()})
    trainer = _layer(model, ds, g, a)[0]

    def infer() -> Any:
        with torch.no_grad():
            return _flat(stored(g, fed))

    def infer_cast() -> Any:
        with torch.no_grad():
            return _flat(wide(g, _to(fed, torch.float32)))

    return {
        "infer": infer,
        "cast": infer_cast,
        "train": lambda: _train_step(trainer, g, fed),
        "stored": stored,
        "fed": fed,
    }


def measure(model: str, dtypes: list[str], ds: Any, a: argparse.Namespace) -> list[dict]:
    """One record per type for ``model``, every type's calls timed in turns."""
    import torch

    g = ds.hetero_graph()
    ref, x32 = _layer(model, ds, g, a)
    with torch.no_grad():
        out32 = _flat(ref(g, x32))
    grads32 = _train_step(ref, g, x32)
    variants = {name: _variant(model, name, ds, g, x32, a) for name in dtypes}
    calls = {(n, k): v[k] for n, v in variants.items() for k in ("infer", "cast", "train")}
    ms = _interleaved(calls, a.runs, a.warmup, a.clock)
    rows = []
    for name, v in variants.items():
        grads = v["train"]()
        rows.append(
            {
                "model": model,
                "dtype": name,
                "infer_ms": round(ms[name, "infer"], 3),
                "infer_cast_ms": round(ms[name, "cast"], 3),
                "train_step_ms": round(ms[name, "train"], 3),
                "output_rel_error": _rel(v["infer"](), out32),
                "grad_rel_error": max(_rel(grads[n], grads32[n]) for n in grads32),
                "feature_bytes": _nbytes(v["fed"]),
                "weight_bytes": sum(p.nbytes for p in v["stored"].parameters()),
                "feature_bytes_f32": _nbytes(x32),
                "weight_bytes_f32": sum(p.nbytes for p in ref.parameters()),
            }
        )
    base = rows[0]
    for r in rows:
        r["infer_speedup_vs_f32"] = round(base["infer_ms"] / r["infer_ms"], 3)
        r["train_speedup_vs_f32"] = round(base["train_step_ms"] / r["train_step_ms"], 3)
    print(_common.format_table(rows, _COLUMNS))
    sys.stdout.flush()
    return rows


def _kernels(model: str, dtypes: list[str], ds: Any, a: argparse.Namespace) -> list[dict]:
    """:func:`.precision_kernels.measure` on a fresh layer's training step per type."""
    import torch

    from hector.frontends import compiled as frontend

    g = ds.hetero_graph()
    steps: dict[str, tuple[Callable[[], Any], Any]] = {}
    for name in dtypes:
        layer, x = _layer(model, ds, g, a)
        # Its own compiled function: the timed layers' cache holds unprofiled kernels.
        layer._fn = frontend.compile(layer._fn.fn)
        fed = _to(x, getattr(torch, name))
        steps[name] = (functools.partial(_train_step, layer, g, fed), layer._fn)
    return precision_kernels.measure(model, steps, a.runs)


_COLUMNS = (
    ("model", "model"),
    ("dtype", "type"),
    ("infer_ms", "infer ms"),
    ("infer_cast_ms", "cast ms"),
    ("train_step_ms", "train ms"),
    ("output_rel_error", "out err"),
    ("grad_rel_error", "grad err"),
    ("feature_bytes", "feature B"),
)


def products() -> dict[str, Any]:
    """How this process's compiled bf16 GEMMs multiply (module docstring): ``products``
    (``bf16 pairs`` or ``f32``), whether the CPU has AVX512-BF16 and the environment's
    ``HECTOR_BF16_DOT``."""
    from hector.lowering.cpu import features

    return {
        "products": "bf16 pairs" if features.bf16_dot() else "f32",
        "avx512_bf16": features.has_avx512_bf16(),
        features.ENV: os.environ.get(features.ENV, "auto"),
    }


def _products_line(p: dict[str, Any]) -> str:
    if p["products"] == "bf16 pairs":
        return "bf16 GEMMs: bf16 pairs (vdpbf16ps, AVX512-BF16)"
    why = "no AVX512-BF16 on this CPU" if not p["avx512_bf16"] else "HECTOR_BF16_DOT=off"
    return f"bf16 GEMMs: f32 products on widened bf16 ({why}): bf16 saves bytes, not arithmetic"


def run(args: argparse.Namespace) -> int:
    """Measure every model and type; print the table and write the record."""
    from hector import datasets

    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    bad = [d for d in dtypes if d not in DTYPES] + [m for m in models if m not in MODELS]
    if bad or not dtypes or dtypes[0] != "float32":
        print(f"error: unknown {bad} or float32 not first in --dtypes", file=sys.stderr)
        return 2
    try:
        gemm_shapes = precision_gemm.shapes(args.gemm)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.dataset.startswith(random_graph.PREFIX):
        ds = random_graph.random_graph(args.dataset, seed=args.seed)
    else:
        ds = datasets.load(args.dataset, seed=args.seed)
    rows = [r for m in models for r in measure(m, dtypes, ds, args)]
    how = products()
    record = {
        "benchmark": "precision",
        "config": {k: v for k, v in vars(args).items() if k != "json"},
        "host": _common.host_info("cpu"),
        "load_average": os.getloadavg(),
        "products": how,
        "results": rows,
    }
    cols = (*_COLUMNS, ("infer_speedup_vs_f32", "infer x"), ("train_speedup_vs_f32", "train x"))
    text = _products_line(how) + "\n" + _common.format_table(rows, cols)
    if args.kernels:
        kernels = [r for m in models for r in _kernels(m, dtypes, ds, args)]
        record["kernels"] = kernels
        text += "\n\n" + _common.format_table(kernels, precision_kernels.COLUMNS)
    if gemm_shapes:
        gemm = precision_gemm.measure(dtypes, args, _common.clock_named(args.clock))
        record["gemm"] = gemm
        text += "\n\n" + _common.format_table(gemm, precision_gemm.COLUMNS)
    _common.emit_record(record, text, args.json, None, None)
    return 0
