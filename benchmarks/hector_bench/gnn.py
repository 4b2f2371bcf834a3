"""``hector bench gnn``: RGCN / RGAT / HGT layers, Hector against PyG, inference or training.

One *cell* = (model, dataset, mode). For a cell the benchmark loads the dataset
(:mod:`hector.datasets`), builds the PyG layer with a fixed seed (``RGCNConv``, ``RGATConv`` or
``HGTConv``), loads the very same weights into Hector's layer (``hector.models.<X>Layer
.from_pyg``) and into every other applicable PyG layer (``FastRGCNConv``), and then measures each
system in its own worker process (``python -m hector_bench.gnn --system-worker``), under an
address-space cap, so a system that runs out of memory, crashes or hangs is a ``"failed"`` row
with its reason and never costs the run or the record:

* checks correctness against the reference PyG layer (or, when it failed, the next PyG layer
  that ran): max abs error and max relative error (over max |reference|) of the forward output
  and, in training mode, of the input gradient and of the parameter gradients whose names and
  shapes match;
* times it: one untimed first call (Hector compiles there; its compile time is reported
  separately), one warm-up call, then the median / min / max of ``--runs`` calls. A training
  call is ``zero_grad`` + forward + ``out.square().mean()`` + backward;
* measures peak memory in a fresh subprocess (``python -m hector_bench.gnn --memory-worker``):
  peak RSS above the subprocess's baseline on CPU, ``torch.cuda.max_memory_allocated`` above the
  allocated baseline on CUDA (see :mod:`hector_bench._common`).

The record (``--json``) follows DESIGN.md "Benchmark records". ``--suite`` runs the grid
{rgcn, rgat, hgt} x {synthetic:aifb, synthetic:mutag, synthetic:bgs, ogbn_mag_0.1} x
{inference, training} (restricted by ``--model`` / ``--dataset`` / ``--mode`` when given), one
JSON per cell into a directory plus ``summary.json``, a summary table and a plot.

A cell whose Hector layer does not exist yet (``hector.models`` without ``RGATLayer``, ...)
says so in its record (``status: "unavailable"``) and the benchmark goes on with the peers.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import re
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hector import cli_args as _args

from . import _common, roofline
from .plot_args import PLOT

MODELS = ("rgcn", "rgat", "hgt")
MODES = ("inference", "training")
#: Suite datasets and their default scale (BGS scaled so a cell runs in minutes on 2 cores).
SUITE_DATASETS: dict[str, float] = {
    "synthetic:aifb": 1.0,
    "synthetic:mutag": 1.0,
    "synthetic:bgs": 0.1,
    "ogbn_mag_0.1": 1.0,
}
#: Reference PyG layer (correctness baseline) per model.
REFERENCE = {"rgcn": "RGCNConv", "rgat": "RGATConv", "hgt": "HGTConv"}
#: Hector layer class per model, in ``hector.models``.
HECTOR_CLASS = {"rgcn": "RGCNLayer", "rgat": "RGATLayer", "hgt": "HGTLayer"}


class BenchError(Exception):
    """A bad benchmark argument or unusable dataset; printed as ``error: ...``."""


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One benchmark cell and every setting that determines its graph, weights and inputs."""

    model: str
    dataset: str
    mode: str
    hidden: int = 64
    in_dim: int = 64
    heads: int = 1
    runs: int = 5
    scale: float = 1.0
    seed: int = 0
    device: str = "cpu"
    max_peer_mem_gb: float = 4.0
    max_system_mem_gb: float | None = None  # cap per system's worker (default: 80% available)
    system_timeout_s: float = 3600.0  # a system's worker is killed (failed) after this
    ablation: bool = False  # measure Hector under U, C, R, C+R, C+R+F
    time_peers: bool = True  # False: PyG layers run once, as the error reference, untimed
    order: str = "auto"  # Hector's linear messages: auto (cost model), or a forced order
    roofline: bool = True  # Hector's CPU templates timed one by one, against torch.mm (roofline.py)

    @property
    def training(self) -> bool:
        """Whether a timed call includes the backward pass."""
        return self.mode == "training"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the ``hector bench gnn`` options to ``p``."""
    p.add_argument("--model", choices=MODELS, help="model (required unless --suite)")
    p.add_argument(
        "--dataset",
        help="synthetic:<name>, ogbn_mag_0.1, a COO directory or a triple file "
        "(required unless --suite)",
    )
    p.add_argument("--mode", choices=MODES, help="inference or training (required unless --suite)")
    p.add_argument(
        "--hidden", type=_args.WIDTH, default=64, help="output features per head (default 64)"
    )
    p.add_argument(
        "--in-dim", type=_args.WIDTH, default=None, help="input features (default: --hidden)"
    )
    p.add_argument(
        "--heads", type=_args.HEADS, default=None, help="attention heads (rgat/hgt; default 1)"
    )
    p.add_argument(
        "--runs", type=_args.RUNS, default=5, help="timed runs per system (median; default 5)"
    )
    p.add_argument(
        "--scale",
        type=_args.SCALE,
        default=None,
        help="size factor for synthetic datasets (default 1; in --suite: bgs 0.1, others 1)",
    )
    p.add_argument("--seed", type=_args.SEED, default=0, help="seed of graph, weights and inputs")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--json", metavar="PATH", help="write the record (with --suite: a directory)")
    p.add_argument(
        "--plot", type=PLOT, metavar="PATH", help="bar chart of time and memory per system"
    )
    p.add_argument("--suite", action="store_true", help="run the model x dataset x mode grid")
    p.add_argument(
        "--ablation",
        action="store_true",
        help="measure Hector under U (no optimization), C, R, C+R and C+R+F",
    )
    p.add_argument(
        "--no-memory",
        action="store_true",
        help="skip the per-system peak-memory subprocesses (peak_mem_bytes is null)",
    )
    p.add_argument(
        "--max-peer-mem-gb",
        type=_args.GIB,
        default=4.0,
        help="skip a PyG layer whose estimated extra memory exceeds this (FastRGCNConv "
        "materializes one weight matrix per edge; default 4)",
    )
    p.add_argument(
        "--max-system-mem-gb",
        type=_args.GIB,
        default=None,
        help="address-space cap of each system's worker process; a system that needs more "
        "fails with 'out of memory' (default: 80%% of the memory available when it starts)",
    )
    p.add_argument(
        "--system-timeout",
        type=_args.SECONDS,
        default=3600.0,
        metavar="SECONDS",
        help="a system still running after this many seconds is killed and reported as "
        "failed (default 3600)",
    )
    p.add_argument(
        "--no-roofline",
        action="store_true",
        help="do not time Hector's kernels one by one (the per-kernel FLOPs, bytes, GFLOP/s and "
        "torch.mm references of the record's kernel_profile; docs/benchmarks.md, Roofline)",
    )
    p.add_argument(
        "--order",
        choices=("auto", "transform-first", "aggregate-first"),
        default="auto",
        help="order of Hector's linear messages (hector-aggregation-order): the cost model's "
        "choice per layer and graph (default), or one forced",
    )
    p.add_argument(
        "--no-peer-timing",
        action="store_true",
        help="run the PyG layers once, as the reference for the error columns, without timing "
        "or memory (for --ablation on graphs where a PyG step takes minutes)",
    )


# ---------------------------------------------------------------------------------------------
# Set-up: dataset, inputs, layers, one step function per system
# ---------------------------------------------------------------------------------------------


@dataclass
class System:
    """A system to measure: ``build()`` returns (layer module, forward(x) callable)."""

    name: str  # "hector" or "pyg"
    variant: str
    build: Callable[[], tuple[Any, Callable[[Any], Any]]]
    reference: bool = False
    skip_reason: str | None = None  # set: does not run (unavailable / too big)
    skip_status: str = "skipped"


@dataclass
class Setup:
    """Everything a cell's systems share: the dataset, the graph forms, the inputs."""

    cell: Cell
    dataset: Any
    x: Any  # Tensor [N, in] or dict[str, Tensor]
    systems: list[System]
    stats: dict[str, Any]


def _hector_class(model: str) -> Any:
    """``hector.models.<Model>Layer`` or None when it does not exist yet."""
    import importlib

    models = importlib.import_module("hector.models")
    return getattr(models, HECTOR_CLASS[model], None)


# Ablation variants: (label, compact, reorder, fuse), as in the Hector paper's ablation.
ABLATION = (
    ("U", False, False, False),
    ("C", True, False, False),
    ("R", False, True, False),
    ("C+R", True, True, False),
    ("C+R+F", True, True, True),
)


def _hector_systems(
    cell: Cell, hector_cls: Any, ref: Any, dev: Any, graph: Callable[[], Any]
) -> list[System]:
    """Hector's layer loaded from the PyG reference: one system with every optimization, or
    one per ablation variant (``--ablation``)."""
    variants = ABLATION if cell.ablation else (ABLATION[-1],)
    systems = []
    for label, compact, reorder, fuse in variants:

        def build(c: bool = compact, r: bool = reorder, f: bool = fuse) -> tuple[Any, Any]:
            layer = hector_cls.from_pyg(ref).to(dev).optimize(c, r, f)
            layer.compiled.order = cell.order  # optimize() gave it its own compiled core
            g = graph()
            return layer, lambda xx: layer(g, xx)

        name = HECTOR_CLASS[cell.model] + (f" {label}" if cell.ablation else "")
        systems.append(System("hector", name, build))
        systems[-1].optimizations = label  # type: ignore[attr-defined]
    return systems


def saved_bytes(
    module: Any, stats: dict[str, Any], dst_ratio: float | None = None
) -> dict[str, int] | None:
    """Bytes of the activations a training step saves for its backward pass, by row kind
    (``edge``, ``compact``, ``dst_compact``, ``node``): read off ``<f>_train``'s ABI (the shapes
    and kinds of its saved results), with the graph's edge, compact-row and node counts
    (``stats``) and its unique (destination, relation) pairs per edge (``dst_ratio``)."""
    fn = getattr(module, "compiled", None)
    if fn is None or not fn._cache:
        return None
    entry = list(fn._cache.values())[-1]
    abi = entry.staged.abi.get(f"{entry.traced.name}_train")
    if abi is None:
        return None
    edges = stats["edges"]
    compact = round(stats["compaction_ratio"] * edges)
    rows = {"edge": edges, "compact": compact, "node": stats["nodes"]}
    if dst_ratio is not None:
        rows["dst_compact"] = round(dst_ratio * edges)
    out = {"edge": 0, "compact": 0, "node": 0, "weight": 0}
    saved = range(len(abi.result_kinds) - abi.num_saved, len(abi.result_kinds))
    for i in saved:
        kind = str(abi.result_kinds[i])
        count = 1
        for d in abi.result_shapes[i]:
            count *= rows.get(kind, 1) if d is None else int(d)
        out[kind] = out.get(kind, 0) + 4 * count
    return out


def _compaction_effect(
    ran: dict[str | None, dict[str, Any]], stats: dict[str, Any]
) -> dict[str, Any] | None:
    """How much of what compaction can save C saved, in training: the allowance is
    ``(1 - ratio)`` of the edge-wise activations U saves for backward (what shrinking them from
    ``E`` to ``C`` rows would free); the saving is U's peak memory minus C's (measured)."""
    u, c = ran.get("U"), ran.get("C")
    if not u or not c or not u.get("saved_bytes") or not u.get("peak_mem_bytes"):
        return None
    if not c.get("peak_mem_bytes"):
        return None
    allowance = (1 - stats["compaction_ratio"]) * u["saved_bytes"]["edge"]
    saving = u["peak_mem_bytes"] - c["peak_mem_bytes"]
    return {
        "edge_saved_bytes_U": u["saved_bytes"]["edge"],
        "allowance_bytes": round(allowance),
        "saving_bytes": saving,
        "fraction_of_allowance": round(saving / allowance, 4) if allowance else None,
        "method": "allowance = (1 - compaction_ratio) x edge-wise activations U saves for "
        "backward (from <f>_train's saved results); saving = U peak - C peak (measured)",
    }


def kernel_count(module: Any, training: bool) -> int | None:
    """Templates (= kernels on the GPU) in the functions one call runs: the forward function,
    or ``_train`` and ``_backward`` in training."""
    fn = getattr(module, "compiled", None)
    if fn is None or not fn._cache:
        return None
    entry = list(fn._cache.values())[-1]
    name = entry.traced.name
    wanted = (f"@{name}_train(", f"@{name}_backward(") if training else (f"@{name}(",)
    count = 0
    for chunk in entry.ir("intra").split("func.func ")[1:]:
        if chunk.startswith(wanted):
            count += chunk.count("hector_intra.gemm_template")
            count += chunk.count("hector_intra.traversal_template")
    return count


def aggregation_order(module: Any) -> list[str] | None:
    """The order ``hector-aggregation-order`` chose for each linear message of the layer's
    forward function (``transform-first`` / ``aggregate-first``), read off the compiled IR."""
    fn = getattr(module, "compiled", None)
    if fn is None or not fn._cache:
        return None
    entry = list(fn._cache.values())[-1]
    name = f"@{entry.traced.name}("
    chunks = entry.ir("intra").split("func.func ")[1:]
    head = next((c for c in chunks if c.startswith(name)), "").split("\n", 1)[0]
    found = re.search(r"hector\.aggregation_order = \[([^\]]*)\]", head)
    return [] if found is None else [v.strip().strip('"') for v in found.group(1).split(",")]


def _dst_compaction_ratio(setup: Setup) -> float | None:
    """``D / E`` of the graph the layer ran on (what the aggregation order is chosen by)."""
    ds = setup.dataset
    edges = int(ds.edge_type.numel())
    if not edges:
        return None
    pairs = ds.edge_type.long() * max(int(ds.num_nodes), 1) + ds.edge_index[1].long()
    return round(int(pairs.unique().numel()) / edges, 6)


def build_setup(cell: Cell) -> Setup:
    """Load the dataset and create inputs, layers and systems for ``cell`` (deterministic)."""
    import torch

    from hector import datasets

    try:
        ds = datasets.load(cell.dataset, scale=cell.scale, seed=cell.seed)
    except datasets.DatasetError as err:
        raise BenchError(str(err)) from None
    dev = torch.device(cell.device)
    gen = torch.Generator().manual_seed(cell.seed)
    torch.manual_seed(cell.seed)
    if cell.model == "hgt":
        counts, edge_index_dict = ds.pyg_hetero()
        x: Any = {t: torch.randn(n, cell.in_dim, generator=gen).to(dev) for t, n in counts.items()}
        edge_index_dict = {k: v.to(dev) for k, v in edge_index_dict.items()}
    else:
        x = torch.randn(ds.num_nodes, cell.in_dim, generator=gen).to(dev)
        edge_index, edge_type = (t.to(dev) for t in ds.pyg_homogeneous())

    graph_cache: dict[str, Any] = {}

    def hector_graph() -> Any:
        if "g" not in graph_cache:
            graph_cache["g"] = ds.hetero_graph()
        return graph_cache["g"]

    systems: list[System] = []
    hector_cls = _hector_class(cell.model)
    from torch_geometric import nn as pyg_nn

    if cell.model == "rgcn":
        ref = pyg_nn.RGCNConv(cell.in_dim, cell.hidden, ds.num_relations, aggr="mean").to(dev)

        def pyg_forward(conv: Any) -> Callable[[Any], Any]:
            return lambda xx: conv(xx, edge_index, edge_type)

        def build_fast() -> tuple[Any, Callable[[Any], Any]]:
            fast = pyg_nn.FastRGCNConv(cell.in_dim, cell.hidden, ds.num_relations, aggr="mean").to(
                dev
            )
            fast.load_state_dict(ref.state_dict())
            return fast, pyg_forward(fast)

        systems.append(System("pyg", "RGCNConv", lambda: (ref, pyg_forward(ref)), reference=True))
        # FastRGCNConv gathers one [in, out] weight per edge (and its gradient in training).
        est = ds.num_edges * cell.in_dim * cell.hidden * 4 * (3 if cell.training else 1)
        fast_sys = System("pyg", "FastRGCNConv", build_fast)
        if est > cell.max_peer_mem_gb * 2**30:
            fast_sys.skip_reason = (
                f"needs ~{est / 2**30:.1f} GiB for per-edge weights "
                f"(> --max-peer-mem-gb {cell.max_peer_mem_gb:g})"
            )
        systems.append(fast_sys)
        if hector_cls is not None:
            systems[:0] = _hector_systems(cell, hector_cls, ref, dev, hector_graph)
        elif not cell.training:
            from hector.models import rgcn_layer

            def build_fn() -> tuple[Any, Callable[[Any], Any]]:
                g = hector_graph()
                w = [p.detach() for p in (ref.weight, ref.root, ref.bias)]
                return rgcn_layer, lambda xx: rgcn_layer(g, xx, *w)

            systems.insert(0, System("hector", "rgcn_layer", build_fn))
        else:
            systems.insert(
                0,
                System(
                    "hector",
                    HECTOR_CLASS["rgcn"],
                    lambda: (None, lambda xx: None),
                    skip_reason="hector.models.RGCNLayer (trainable) is not available yet",
                    skip_status="unavailable",
                ),
            )
    else:
        if cell.model == "rgat":
            ref = pyg_nn.RGATConv(
                cell.in_dim, cell.hidden, ds.num_relations, heads=cell.heads, concat=True
            ).to(dev)
            systems.append(
                System(
                    "pyg",
                    "RGATConv",
                    lambda: (ref, lambda xx: ref(xx, edge_index, edge_type)),
                    reference=True,
                )
            )
        else:
            ref = pyg_nn.HGTConv(cell.in_dim, cell.hidden, ds.metadata(), heads=cell.heads).to(dev)
            systems.append(
                System(
                    "pyg",
                    "HGTConv",
                    lambda: (ref, lambda xx: ref(xx, edge_index_dict)),
                    reference=True,
                )
            )
        name = HECTOR_CLASS[cell.model]
        if hector_cls is not None:
            systems[:0] = _hector_systems(cell, hector_cls, ref, dev, hector_graph)
        else:
            systems.insert(
                0,
                System(
                    "hector",
                    name,
                    lambda: (None, lambda xx: None),
                    skip_reason=f"hector.models.{name} is not available yet",
                    skip_status="unavailable",
                ),
            )
    return Setup(cell, ds, x, systems, ds.stats())


# ---------------------------------------------------------------------------------------------
# Running one system
# ---------------------------------------------------------------------------------------------


def _fresh_input(x: Any, requires_grad: bool) -> Any:
    """A leaf copy of the input (dict or tensor) so systems never share gradients."""
    if isinstance(x, dict):
        return {k: v.detach().clone().requires_grad_(requires_grad) for k, v in x.items()}
    return x.detach().clone().requires_grad_(requires_grad)


def _values(out: Any) -> list[Any]:
    """The output tensors (a dict's non-None values, in key order) or ``[out]``."""
    if isinstance(out, dict):
        return [v for _, v in sorted(out.items()) if v is not None]
    return [out]


def loss_of(out: Any) -> Any:
    """``mean(out ** 2)`` over every output element (all node types for a dict)."""
    vals = _values(out)
    total = sum(v.numel() for v in vals)
    return sum(v.square().sum() for v in vals) / max(total, 1)


def _zero_grad(module: Any, x: Any) -> None:
    if module is not None and hasattr(module, "zero_grad"):
        module.zero_grad(set_to_none=True)
    for v in x.values() if isinstance(x, dict) else [x]:
        v.grad = None


def make_step(module: Any, forward: Callable[[Any], Any], x: Any, training: bool) -> Callable:
    """One timed call: forward (no_grad) or zero_grad + forward + loss + backward."""
    import torch

    if not training:

        def infer() -> Any:
            with torch.no_grad():
                return forward(x)

        return infer

    def train() -> Any:
        _zero_grad(module, x)
        out = forward(x)
        loss_of(out).backward()
        return out

    return train


def _max_abs_diff(a: Any, b: Any) -> float | None:
    """Max abs difference of two outputs (tensors, or dicts compared on their common keys)."""
    if isinstance(a, dict) and isinstance(b, dict):
        diffs = [
            _max_abs_diff(a[k], b[k]) for k in a if k in b and a[k] is not None and b[k] is not None
        ]
        found = [d for d in diffs if d is not None]
        return max(found) if found else None
    if a is None or b is None or getattr(a, "shape", None) != getattr(b, "shape", None):
        return None
    if a.numel() == 0:
        return 0.0
    return float((a.detach().float() - b.detach().float()).abs().max())


def _zeros_like(x: Any) -> Any:
    """Zeros shaped like a tensor or a dict of tensors (None stays None)."""
    if isinstance(x, dict):
        return {k: _zeros_like(v) for k, v in x.items()}
    return None if x is None else x.new_zeros(x.shape)


def _grads(module: Any, x: Any) -> tuple[Any, dict[str, Any]]:
    """``(input grad(s), {param name: grad})`` after a backward pass."""
    xg = {k: v.grad for k, v in x.items()} if isinstance(x, dict) else x.grad
    params = {}
    if module is not None and hasattr(module, "named_parameters"):
        params = {n: p.grad for n, p in module.named_parameters() if p.grad is not None}
    return xg, params


def _sync(device: str) -> Callable[[], None] | None:
    if device != "cuda":
        return None
    import torch

    return torch.cuda.synchronize


def _compiled_functions(module: Any) -> list[Any]:
    """Hector compiled functions a layer calls (its own attributes, the module-level RGCN)."""
    from hector import frontend, models

    found = [module, *getattr(module, "__dict__", {}).values()]
    if type(module).__name__ == "RGCNLayer":
        found.append(getattr(models, "rgcn_layer", None))
    out: list[Any] = []
    for obj in found:
        if isinstance(obj, frontend.CompiledFunction) and all(obj is not o for o in out):
            out.append(obj)
    return out


def _cache_state(fns: list[Any]) -> list[int]:
    return [len(getattr(f, "_cache", ())) for f in fns]


def _compile_seconds(fns: list[Any], before: list[int]) -> float | None:
    """Compile time Hector reports (``compile_seconds``) for functions that compiled since
    ``before``; 0.0 when every kernel came from the cache; None when nothing reports one."""
    if not fns or not all(isinstance(getattr(f, "compile_seconds", None), float) for f in fns):
        return None
    after = _cache_state(fns)
    return sum(f.compile_seconds for f, b, a in zip(fns, before, after, strict=True) if a > b)


def measure_system(
    setup: Setup, system: System, progress: Callable[[int], None] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run one system in this process: first call, then (unless it is an untimed peer) the
    warm-up and the timed calls.

    Returns ``(entry, tensors)``: the result entry without error columns, and the output and
    gradients of the first call (``out``, ``grad_input``, ``grad_params``) for comparison.
    """
    cell = setup.cell
    sync = _sync(cell.device)

    class _Bar:
        def update(self, n: int = 1) -> None:
            if progress is not None:
                progress(n)

    entry: dict[str, Any] = {"system": system.name, "variant": system.variant}
    module, forward = system.build()
    x = _fresh_input(setup.x, cell.training)
    step = make_step(module, forward, x, cell.training)
    fns = _compiled_functions(module) if system.name == "hector" else []
    cache_before = _cache_state(fns)
    profile = bool(fns) and cell.roofline and cell.device == "cpu"
    t0 = time.perf_counter()
    with roofline.profiling() if profile else contextlib.nullcontext():
        out = step()  # first call: Hector compiles here
    if sync is not None:
        sync()
    first_ms = (time.perf_counter() - t0) * 1e3
    profiled = roofline.profiled_entries(fns) if profile else []
    roofline.reset(profiled)  # count the warm calls only
    _Bar().update(1)
    grads = _grads(module, x) if cell.training else (None, {})
    tensors = {
        "out": _detached(out),
        "grad_input": _detached(grads[0]),
        "grad_params": {n: _detached(g) for n, g in grads[1].items()},
    }
    del out, grads
    if system.name != "hector" and not cell.time_peers:
        entry.update(
            status="untimed",
            reason="--no-peer-timing: run once as the error reference",
            first_call_ms=round(first_ms, 3),
        )
        return entry, tensors
    timing = _common.time_calls(step, cell.runs, warmup=1, sync=sync, progress=_Bar())
    entry.update(status="ok", **timing.as_record())
    if system.name == "hector":
        reported = _compile_seconds(fns, cache_before)
        if reported is not None:
            entry["compile_ms"] = round(reported * 1e3, 3)
            entry["compile_ms_method"] = "reported by hector (compile_seconds)"
        else:
            entry["compile_ms"] = round(max(first_ms - timing.median_ms, 0.0), 3)
            entry["compile_ms_method"] = "first call minus median run"
    entry["first_call_ms"] = round(first_ms, 3)
    if system.name == "hector":
        entry["optimizations"] = getattr(system, "optimizations", "C+R+F")
        entry["kernels"] = kernel_count(module, cell.training)
        entry["aggregation_order"] = aggregation_order(module)
        entry["dst_compaction_ratio"] = _dst_compaction_ratio(setup)
        if cell.training:
            entry["saved_bytes"] = saved_bytes(module, setup.stats, entry["dst_compaction_ratio"])
        if profiled:
            import torch

            entry["kernel_profile"] = roofline.measure(profiled, torch.get_num_threads())
    return entry, tensors


def _detached(value: Any) -> Any:
    """A tensor (or dict of tensors) detached and on the CPU, for saving and comparing."""
    if isinstance(value, dict):
        return {k: _detached(v) for k, v in value.items()}
    return None if value is None else value.detach().cpu()


def _max_abs(value: Any) -> float | None:
    """Largest |value| of a tensor or a dict of tensors (None when there is nothing)."""
    if isinstance(value, dict):
        found = [m for m in (_max_abs(v) for v in value.values()) if m is not None]
        return max(found) if found else None
    if value is None:
        return None
    return float(value.detach().float().abs().max()) if value.numel() else 0.0


def _relative(abs_err: float | None, scale: float | None) -> float | None:
    """``abs_err / scale`` (``max_rel_err``); None where either is missing or the scale is 0."""
    if abs_err is None or not scale:
        return None
    return abs_err / scale


def error_columns(tensors: dict[str, Any], ref: dict[str, Any], training: bool) -> dict[str, Any]:
    """A system's errors against the reference's output and gradients.

    Every ``max_abs_err*`` column comes with ``max_rel_err*`` = it over max |reference| of the
    same tensors (``ref_*max_abs``), so an error on a graph with large hubs (large outputs) can be
    told apart from a bug. Parameters compared: those whose names and shapes match the
    reference's.
    """
    cols: dict[str, Any] = {}
    cols["max_abs_err"] = _max_abs_diff(tensors["out"], ref["out"])
    cols["ref_max_abs"] = _max_abs(ref["out"])
    cols["max_rel_err"] = _relative(cols["max_abs_err"], cols["ref_max_abs"])
    if not training:
        return cols
    cols["max_abs_err_grad_input"] = _max_abs_diff(tensors["grad_input"], ref["grad_input"])
    # The scale the gradient errors compare against (the loss is a mean: gradients are small).
    cols["ref_grad_input_max_abs"] = _max_abs(ref["grad_input"])
    cols["max_rel_err_grad_input"] = _relative(
        cols["max_abs_err_grad_input"], cols["ref_grad_input_max_abs"]
    )
    mine, theirs = tensors["grad_params"], ref["grad_params"]
    common = [n for n, g in mine.items() if n in theirs and theirs[n].shape == g.shape]
    cols["grad_params_compared"] = common
    cols["max_abs_err_grad_params"] = (
        max(float((mine[n].float() - theirs[n].float()).abs().max()) for n in common)
        if common
        else None
    )
    cols["ref_grad_params_max_abs"] = _max_abs({n: theirs[n] for n in common}) if common else None
    cols["max_rel_err_grad_params"] = _relative(
        cols["max_abs_err_grad_params"], cols["ref_grad_params_max_abs"]
    )
    return cols


def _memory_budget(cell: Cell) -> int | None:
    """Bytes one system's worker may map beyond its imports: ``--max-system-mem-gb`` capped by
    80% of the memory available now (so the machine keeps a margin for everyone else), but not
    under 1 GiB (address space, not resident memory: a smaller cap fails on mappings the work
    never touches; past what is free, the worker is the OOM killer's first choice)."""
    avail = _common.available_memory_bytes()
    budget = None if avail is None else max(int(0.8 * avail), 2**30)
    if cell.max_system_mem_gb is not None:
        cap = int(cell.max_system_mem_gb * 2**30)
        budget = cap if budget is None else min(budget, cap)
    return budget


def _gib(nbytes: float) -> str:
    if nbytes < 2**30:
        return f"{nbytes / 2**20:.0f} MiB"
    return f"{nbytes / 2**30:.1f} GiB"


def _run_isolated(
    cell: Cell, system: System, workdir: str, progress: Callable[[int], object]
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Measure ``system`` in a fresh worker process (``--system-worker``) under a memory cap.

    Returns its entry and its tensors (loaded from the file the worker saved, then deleted); a
    worker that runs out of memory, crashes or times out gives a ``"failed"`` entry and no
    tensors.
    """
    import torch

    base: dict[str, Any] = {"system": system.name, "variant": system.variant}
    budget = _memory_budget(cell)
    path = os.path.join(workdir, f"{system.name}-{_slug(system.variant)}.pt")
    payload = {
        "cell": asdict(cell),
        "system": system.name,
        "variant": system.variant,
        "tensors_path": path,
        "mem_limit_bytes": budget,
    }
    outcome = _common.run_worker(
        "hector_bench.gnn",
        "--system-worker",
        payload,
        timeout=cell.system_timeout_s,
        on_progress=progress,
    )
    try:
        if outcome.failure is not None or outcome.answer is None:
            why = outcome.failure or "no answer"
            if budget is not None and "SIGKILL" in why:
                why += f"; its memory cap was {_gib(budget)}"
            return {**base, "status": "failed", "reason": why}, None
        entry = dict(outcome.answer)
        if entry.get("status") not in ("ok", "untimed") or not os.path.exists(path):
            return entry, None
        return entry, torch.load(path, weights_only=True)
    finally:
        if os.path.exists(path):
            os.unlink(path)


def _run_order(systems: list[System]) -> list[System]:
    """The reference first (every other system is compared with it), then the other peers (a
    fall-back reference when it fails), then Hector."""
    return sorted(systems, key=lambda s: (not s.reference, s.name == "hector"))


def run_cell(cell: Cell, *, memory: bool = True, quiet: bool = False) -> dict[str, Any]:
    """Measure every system of ``cell``, each in its own worker process, and return its record
    (DESIGN.md format). A system that fails, runs out of memory or crashes is a row with
    ``status: "failed"`` and its ``reason``; the record is always complete."""
    import tempfile

    import torch
    from tqdm import tqdm

    setup = build_setup(cell)
    active = [s for s in setup.systems if s.skip_reason is None]
    total = len(active) * (cell.runs + 2) + (len(active) if memory else 0)
    bar = tqdm(
        total=total,
        desc=f"{cell.model}/{cell.dataset}/{cell.mode}",
        file=sys.stderr,
        leave=False,
        disable=quiet or None,
    )

    def say(text: str) -> None:
        if not quiet:
            tqdm.write(text, file=sys.stderr)

    results: list[dict[str, Any]] = []
    ref: tuple[str, dict[str, Any]] | None = None  # (label, tensors) of the error reference
    measured: list[tuple[System, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="hector-bench-") as workdir:
        for system in _run_order(setup.systems):
            label = f"{system.name} {system.variant}"
            if system.skip_reason is not None:
                entry: dict[str, Any] = {
                    "system": system.name,
                    "variant": system.variant,
                    "status": system.skip_status,
                    "reason": system.skip_reason,
                }
                say(f"{label}: {system.skip_reason}")
                results.append(entry)
                continue
            bar.set_postfix_str(label)
            entry, tensors = _run_isolated(cell, system, workdir, bar.update)
            if entry.get("status") not in ("ok", "untimed"):
                say(f"{label} {entry.get('status')}: {entry.get('reason')}")
            elif tensors is not None and ref is None and system.name != "hector":
                ref = (label, tensors)  # against itself: zero errors, the reference's scales
            if tensors is not None and ref is not None:
                entry.update(error_columns(tensors, ref[1], cell.training))
                entry["error_reference"] = ref[0]
            elif tensors is not None:
                entry.update(max_abs_err=None, max_rel_err=None, error_reference=None)
                entry["reason"] = "no PyG layer ran to compare with: errors not measured"
            if entry.get("status") == "ok":
                measured.append((system, entry))
            results.append(entry)
            del tensors
            gc.collect()
    if cell.device == "cuda":
        torch.cuda.empty_cache()

    # Peak memory: one fresh subprocess per system that ran.
    for system, entry in measured:
        entry["peak_mem_bytes"] = None
        if not memory:
            continue
        bar.set_postfix_str(f"memory: {system.name} {system.variant}")
        answer = _common.measure_in_subprocess(
            "hector_bench.gnn",
            {
                "cell": asdict(cell),
                "variant": system.variant,
                "system": system.name,
                "mem_limit_bytes": _memory_budget(cell),
            },
            timeout=cell.system_timeout_s,
            env={"MALLOC_MMAP_THRESHOLD_": "65536"},
        )
        if "error" in answer:
            entry["peak_mem_error"] = answer["error"]
        else:
            entry["peak_mem_bytes"] = answer["peak_mem_bytes"]
            entry["peak_mem_method"] = answer["method"]
        bar.update(1)
    bar.close()

    # Keep the order hector, then peers as built.
    by_variant = {(r["system"], r["variant"]): r for r in results}
    results = [by_variant[(s.name, s.variant)] for s in setup.systems]
    speedup, mem_ratio = _common.best_peer_ratios(results)
    from hector import __version__

    ablation = None
    if cell.ablation:
        ran = {r.get("optimizations"): r for r in results if r["system"] == "hector"}
        base = ran.get("U", {})
        ablation = {
            label: {
                "median_ms": r.get("median_ms"),
                "peak_mem_bytes": r.get("peak_mem_bytes"),
                "kernels": r.get("kernels"),
                **({"saved_bytes": r["saved_bytes"]} if r.get("saved_bytes") else {}),
                "speedup_vs_U": (
                    round(base["median_ms"] / r["median_ms"], 4)
                    if base.get("median_ms") and r.get("median_ms")
                    else None
                ),
                "memory_vs_U": (
                    round(r["peak_mem_bytes"] / base["peak_mem_bytes"], 4)
                    if base.get("peak_mem_bytes") and r.get("peak_mem_bytes")
                    else None
                ),
            }
            for label, r in ran.items()
            if label is not None
        }
        compaction = _compaction_effect(ran, setup.stats) if cell.training else None
        if compaction is not None:
            ablation["compaction_memory"] = compaction

    return {
        "benchmark": "gnn",
        "model": cell.model,
        "dataset": cell.dataset,
        "mode": cell.mode,
        "device": cell.device,
        "hector_version": __version__,
        "host": _common.host_info(cell.device),
        "config": {
            "hidden": cell.hidden,
            "in_dim": cell.in_dim,
            "heads": cell.heads,
            "runs": cell.runs,
            "warmup": 1,
            "scale": cell.scale,
            "seed": cell.seed,
            "loss": "mean(out**2)" if cell.training else None,
        },
        "graph": setup.stats,
        "results": results,
        "speedup_vs_best_peer": speedup,
        "memory_ratio_vs_best_peer": mem_ratio,
        **({"ablation": ablation} if ablation is not None else {}),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


# ---------------------------------------------------------------------------------------------
# Memory worker (runs in a fresh subprocess)
# ---------------------------------------------------------------------------------------------


def _malloc_trim() -> None:
    """Return freed heap memory to the OS (glibc), so RSS tracks live memory."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def memory_worker(payload: dict[str, Any], steps: int = 2) -> dict[str, Any]:
    """Peak memory of one system's steady-state calls, above the set-up baseline.

    Builds the cell (imports, dataset, inputs, layer), makes one untimed call (Hector compiles;
    caches fill), drops gradients, then takes the baseline and runs ``steps`` calls.
    """
    import torch

    _isolate(payload.get("mem_limit_bytes"))
    cell = Cell(**payload["cell"])
    setup = build_setup(cell)
    system = _find_system(setup, payload)
    module, forward = system.build()
    x = _fresh_input(setup.x, cell.training)
    step = make_step(module, forward, x, cell.training)
    step()  # warm-up (compile)
    _zero_grad(module, x)
    gc.collect()
    if cell.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        return {
            "peak_mem_bytes": int(torch.cuda.max_memory_allocated() - base),
            "method": "torch.cuda.max_memory_allocated above allocated baseline",
        }
    _malloc_trim()
    meter = _common.PeakRSS()
    meter.start()
    for _ in range(steps):
        out = step()
        del out
    return {"peak_mem_bytes": meter.peak_bytes(), "method": meter.method}


# ---------------------------------------------------------------------------------------------
# Output: table, plot
# ---------------------------------------------------------------------------------------------

_COLUMNS = [
    ("system", "system"),
    ("variant", "variant"),
    ("status", "status"),
    ("median_ms", "median ms"),
    ("min_ms", "min ms"),
    ("max_ms", "max ms"),
    ("peak_mib", "peak MiB"),
    ("max_abs_err", "max|err|"),
    ("max_rel_err", "rel err"),
    ("grad_err", "grad max|err|"),
    ("grad_rel_err", "grad rel err"),
    ("compile_ms", "compile ms"),
    ("kernels", "kernels"),
    ("order", "order"),
]


def format_record(record: dict[str, Any]) -> str:
    """The result table of one cell plus its speed-up / memory-ratio line."""
    rows = []
    for r in record["results"]:
        row = dict(r)
        row["peak_mib"] = _common.mib(r.get("peak_mem_bytes"))
        errs = [r.get("max_abs_err_grad_input"), r.get("max_abs_err_grad_params")]
        errs = [e for e in errs if e is not None]
        row["grad_err"] = max(errs) if errs else None
        rels = [r.get("max_rel_err_grad_input"), r.get("max_rel_err_grad_params")]
        rels = [e for e in rels if e is not None]
        row["grad_rel_err"] = max(rels) if rels else None
        orders = r.get("aggregation_order")
        row["order"] = ",".join(o.split("-")[0] for o in orders) if orders else None
        rows.append(row)
    head = (
        f"{record['model']} on {record['dataset']} ({record['mode']}, {record['device']}; "
        f"{record['graph']['nodes']} nodes, {record['graph']['edges']} edges, "
        f"{record['graph']['relations']} relations, compaction ratio "
        f"{record['graph']['compaction_ratio']:.3f})"
    )
    s, m = record["speedup_vs_best_peer"], record["memory_ratio_vs_best_peer"]
    tail = (
        f"speed-up vs best PyG layer: {f'{s:.2f}x' if s is not None else 'n/a'}; "
        f"peak memory vs best PyG layer: {f'{m:.2f}x' if m is not None else 'n/a'}"
    )
    notes = [
        f"  {r['system']} {r['variant']}: {r['reason']}"
        for r in record["results"]
        if r.get("reason")
    ]
    kernels = [
        roofline.format_profile(f"{r['system']} {r['variant']}", r["kernel_profile"])
        for r in record["results"]
        if r.get("kernel_profile")
    ]
    return "\n".join([head, _common.format_table(rows, _COLUMNS), tail, *notes, *kernels])


def plot_record(record: dict[str, Any], path: str) -> None:
    """Bar chart: median time (min/max whiskers) and peak memory per system."""
    rs = record["results"]
    labels = [f"{r['system']}\n{r['variant']}" for r in rs]
    labels = [lab.replace("\n", " ") for lab in labels]
    times = [r.get("median_ms") for r in rs]
    ranges = [(r.get("min_ms") or 0.0, r.get("max_ms") or 0.0) for r in rs]
    mem = [_common.mib(r.get("peak_mem_bytes")) for r in rs]
    _common.bar_plot(
        path,
        f"{record['model']} {record['mode']} on {record['dataset']} ({record['device']})",
        labels,
        [("median time (ms)", times, ranges), ("peak memory (MiB)", mem, None)],
    )


# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------


def _cell_from_args(args: argparse.Namespace, model: str, dataset: str, mode: str) -> Cell:
    scale = args.scale if args.scale is not None else SUITE_DATASETS.get(dataset, 1.0)
    if not args.suite and args.scale is None:
        scale = 1.0
    heads = args.heads if args.heads is not None else 1
    return Cell(
        model=model,
        dataset=dataset,
        mode=mode,
        hidden=args.hidden,
        in_dim=args.in_dim if args.in_dim is not None else args.hidden,
        heads=heads,
        runs=args.runs,
        scale=scale,
        seed=args.seed,
        device=args.device,
        max_peer_mem_gb=args.max_peer_mem_gb,
        max_system_mem_gb=getattr(args, "max_system_mem_gb", None),
        system_timeout_s=getattr(args, "system_timeout", 3600.0),
        ablation=getattr(args, "ablation", False),
        time_peers=not getattr(args, "no_peer_timing", False),
        roofline=not getattr(args, "no_roofline", False),
        order=getattr(args, "order", "auto"),
    )


def _validate(args: argparse.Namespace) -> None:
    if args.hidden is None or args.hidden <= 0:
        raise BenchError(f"--hidden must be > 0, got {args.hidden}")
    if args.in_dim is not None and args.in_dim <= 0:
        raise BenchError(f"--in-dim must be > 0, got {args.in_dim}")
    if args.heads is not None and args.heads <= 0:
        raise BenchError(f"--heads must be > 0, got {args.heads}")
    if args.runs < 1:
        raise BenchError(f"--runs must be >= 1, got {args.runs}")
    if args.scale is not None and not 0 < args.scale <= 1000:
        raise BenchError(f"--scale must be in (0, 1000], got {args.scale}")
    if args.max_peer_mem_gb <= 0:
        raise BenchError(f"--max-peer-mem-gb must be > 0, got {args.max_peer_mem_gb}")
    if getattr(args, "max_system_mem_gb", None) is not None and args.max_system_mem_gb <= 0:
        raise BenchError(f"--max-system-mem-gb must be > 0, got {args.max_system_mem_gb}")
    if getattr(args, "system_timeout", 1.0) <= 0:
        raise BenchError(f"--system-timeout must be > 0, got {args.system_timeout}")
    if args.heads is not None and args.heads > 1 and args.model == "rgcn":
        raise BenchError("--heads applies to rgat and hgt only")
    if args.model == "hgt" and args.heads and args.hidden % args.heads:
        raise BenchError(
            f"hgt needs --hidden divisible by --heads (HGTConv splits {args.hidden} "
            f"channels over {args.heads} heads)"
        )
    if not args.suite:
        missing = [f"--{k}" for k in ("model", "dataset", "mode") if getattr(args, k) is None]
        if missing:
            raise BenchError(f"{', '.join(missing)} required (or use --suite)")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise BenchError("--device cuda: no CUDA device is available here")
    if args.dataset is not None and not args.dataset.startswith("synthetic:"):
        from hector import datasets

        if args.dataset not in datasets.SHARED_DATASETS and not os.path.exists(args.dataset):
            raise BenchError(
                f"unknown dataset {args.dataset!r}: not a file or directory; valid names: "
                + ", ".join(datasets.available())
            )
    if args.dataset is not None and args.dataset.startswith("synthetic:"):
        from hector import datasets

        if args.dataset.removeprefix("synthetic:") not in datasets.SYNTHETIC_SPECS:
            raise BenchError(
                f"unknown synthetic dataset {args.dataset!r}; valid: "
                + ", ".join(f"synthetic:{k}" for k in datasets.SYNTHETIC_SPECS)
            )


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")


def run_single(args: argparse.Namespace) -> int:
    """One cell: run, print the table, write JSON / plot."""
    cell = _cell_from_args(args, args.model, args.dataset, args.mode)
    record = run_cell(cell, memory=not args.no_memory)
    _common.emit_record(record, format_record(record), args.json, args.plot, plot_record)
    if args.json:
        _plot_roofline(record, args.json)
    return 0


def _plot_roofline(record: dict[str, Any], json_path: str | Path) -> None:
    """The kernels' roofline plot next to the record, ``<record>_roofline.png``."""
    path = Path(json_path)
    target = path.with_name(f"{path.stem}_roofline.png")
    if roofline.plot(record, str(target)):
        print(f"roofline plot written to {target}")


def run_suite(args: argparse.Namespace) -> int:
    """The grid: one JSON per cell into a directory, then summary.json, table and plot."""
    models = [args.model] if args.model else list(MODELS)
    data = [args.dataset] if args.dataset else list(SUITE_DATASETS)
    modes = [args.mode] if args.mode else list(MODES)
    out_dir = Path(args.json or "bench-results/gnn")
    if out_dir.exists() and not out_dir.is_dir():
        raise BenchError(f"--json {out_dir} must be a directory with --suite")
    out_dir.mkdir(parents=True, exist_ok=True)
    cells = [(m, d, mode) for m in models for d in data for mode in modes]
    summary_rows: list[dict[str, Any]] = []
    for i, (model, dataset, mode) in enumerate(cells, 1):
        cell = _cell_from_args(args, model, dataset, mode)
        print(f"[{i}/{len(cells)}] {model} {dataset} {mode} (scale {cell.scale:g})", flush=True)
        try:
            record = run_cell(cell, memory=not args.no_memory)
        except BenchError as err:
            print(f"  error: {err}")
            summary_rows.append(
                {"model": model, "dataset": dataset, "mode": mode, "status": f"error: {err}"}
            )
            continue
        path = out_dir / f"{model}_{_slug(dataset)}_{mode}.json"
        _common.write_json(path, record)
        print(format_record(record), flush=True)
        hector = next(r for r in record["results"] if r["system"] == "hector")
        summary_rows.append(
            {
                "model": model,
                "dataset": dataset,
                "mode": mode,
                "status": hector.get("status"),
                "hector_ms": hector.get("median_ms"),
                "best_peer_ms": min(
                    (
                        r["median_ms"]
                        for r in record["results"]
                        if r["system"] != "hector" and r.get("status") == "ok"
                    ),
                    default=None,
                ),
                "speedup_vs_best_peer": record["speedup_vs_best_peer"],
                "memory_ratio_vs_best_peer": record["memory_ratio_vs_best_peer"],
                "max_abs_err": hector.get("max_abs_err"),
                "max_rel_err": hector.get("max_rel_err"),
                "file": path.name,
            }
        )
    geo = {
        mode: {
            "speedup": _common.geomean(
                r.get("speedup_vs_best_peer") for r in summary_rows if r["mode"] == mode
            ),
            "memory_ratio": _common.geomean(
                r.get("memory_ratio_vs_best_peer") for r in summary_rows if r["mode"] == mode
            ),
            "cells_measured": sum(
                1
                for r in summary_rows
                if r["mode"] == mode and r.get("speedup_vs_best_peer") is not None
            ),
        }
        for mode in modes
    }
    from hector import __version__

    summary = {
        "benchmark": "gnn-suite",
        "device": args.device,
        "hector_version": __version__,
        "host": _common.host_info(args.device),
        "config": {"hidden": args.hidden, "heads": args.heads or 1, "runs": args.runs},
        "cells": summary_rows,
        "geomean": geo,
    }
    _common.write_json(out_dir / "summary.json", summary)
    print("\nsummary (speed-up and memory ratio of hector vs the best PyG layer per cell)")
    print(
        _common.format_table(
            summary_rows,
            [
                ("model", "model"),
                ("dataset", "dataset"),
                ("mode", "mode"),
                ("status", "hector"),
                ("hector_ms", "hector ms"),
                ("best_peer_ms", "best PyG ms"),
                ("speedup_vs_best_peer", "speed-up"),
                ("memory_ratio_vs_best_peer", "mem ratio"),
            ],
        )
    )
    for mode, g in geo.items():
        sp, mr = g["speedup"], g["memory_ratio"]
        print(
            f"geomean {mode}: speed-up {f'{sp:.2f}x' if sp else 'n/a'}, memory ratio "
            f"{f'{mr:.2f}x' if mr else 'n/a'} over {g['cells_measured']} cells"
        )
    plot_path = args.plot or str(out_dir / "summary.png")
    labels = [
        f"{r['model']} {r['dataset'].removeprefix('synthetic:')} {r['mode'][:5]}"
        for r in summary_rows
    ]
    _common.bar_plot(
        plot_path,
        "hector vs best PyG layer (geomean: "
        + ", ".join(f"{m} {g['speedup']:.2f}x" for m, g in geo.items() if g["speedup"] is not None)
        + ")",
        labels,
        [
            (
                "speed-up vs best PyG (x)",
                [r.get("speedup_vs_best_peer") for r in summary_rows],
                None,
            ),
            (
                "peak memory / best PyG",
                [r.get("memory_ratio_vs_best_peer") for r in summary_rows],
                None,
            ),
        ],
    )
    print(f"records in {out_dir}/ (summary.json); plot {plot_path}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Entry point of ``hector bench gnn``: bad arguments print ``error: ...`` and return 1."""
    try:
        _validate(args)
        return run_suite(args) if args.suite else run_single(args)
    except BenchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


def _find_system(setup: Setup, payload: dict[str, Any]) -> System:
    """The system a worker's payload names (``system`` and ``variant``)."""
    for s in setup.systems:
        if s.variant == payload["variant"] and s.name == payload["system"]:
            return s
    raise BenchError(f"no system {payload['system']} {payload['variant']} in this cell")


def _isolate(mem_limit_bytes: int | None) -> None:
    """Worker set-up: heavy imports and PyTorch's worker threads first (so the cap counts only
    the work, not the libraries or the threads' stack reservations), then the address space
    cap, and the OOM killer's first choice should memory still run out."""
    import torch  # noqa: F401
    import torch_geometric  # noqa: F401

    import hector.models  # noqa: F401
    from hector import compiler  # noqa: F401  (the MLIR bindings, loaded lazily otherwise)
    from hector.lowering import cpu_jit

    cpu_jit.runtime_symbols()  # MLIR's async runtime and runner utilities
    _common.start_thread_pools()  # their stacks in the baseline, whatever the core count
    _common.limit_address_space(mem_limit_bytes)
    _common.prefer_oom_kill()


def _is_out_of_memory(err: BaseException) -> bool:
    text = str(err)
    return isinstance(err, MemoryError) or any(
        s in text for s in ("can't allocate memory", "out of memory", "Cannot allocate memory")
    )


def system_worker(payload: dict[str, Any]) -> dict[str, Any]:
    """One system of one cell, in this (fresh) process: its result entry (see
    :func:`measure_system`); its tensors go to ``payload["tensors_path"]`` (``torch.save``).

    Progress (one line per call) and the answer are protocol lines on stdout
    (:func:`hector_bench._common.run_worker`). An exception becomes a ``"failed"`` entry whose
    reason says ``out of memory`` (with the cap) when an allocation failed.
    """
    import torch

    limit = payload.get("mem_limit_bytes")
    _isolate(limit)
    base = {"system": payload["system"], "variant": payload["variant"]}
    try:
        setup = build_setup(Cell(**payload["cell"]))
        system = _find_system(setup, payload)
        entry, tensors = measure_system(
            setup, system, lambda n: _common.emit_worker_line({"progress": n})
        )
        torch.save(tensors, payload["tensors_path"])
        return entry
    except Exception as err:  # noqa: BLE001 — reported to the parent as a failed row
        if os.environ.get("HECTOR_DEBUG"):
            traceback.print_exc()
        message = f"{type(err).__name__}: {err}".strip().splitlines()[0][:400]
        if _is_out_of_memory(err):
            cap = f" (cap {_gib(limit)} above the worker's imports)" if limit else ""
            message = f"out of memory{cap}: {message}"
        return {**base, "status": "failed", "reason": message}


def _worker_main(argv: list[str]) -> int:
    """``python -m hector_bench.gnn --system-worker JSON`` (or ``--memory-worker JSON``): the
    answer as one protocol line (system worker) or one JSON line (memory worker)."""
    p = argparse.ArgumentParser(prog="hector_bench.gnn")
    kind = p.add_mutually_exclusive_group(required=True)
    kind.add_argument("--system-worker")
    kind.add_argument("--memory-worker")
    args = p.parse_args(argv)
    if args.system_worker is not None:
        _common.emit_worker_line({"result": system_worker(json.loads(args.system_worker))})
        return 0
    try:
        answer = memory_worker(json.loads(args.memory_worker))
    except Exception as err:  # noqa: BLE001 — reported to the parent as JSON
        answer = {"error": f"{type(err).__name__}: {err}"}
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
