"""``hector bench minibatch``: sampled mini-batch training, Hector vs PyG layers, 1 vs N processes.

For each model (RGCN, RGAT, HGT) and dataset, one :class:`hector.data.loader.NeighborLoader` config
(fan-outs, batch size, seed) gives the *same* sampled batches to every system: Hector's compiled
layers and the PyG layers they load their weights from (``RGCNConv``, ``RGATConv``, ``HGTConv``;
same initial weights). Features (float32, ``--feat`` wide) and labels live in ``.npy`` files in
``--cache-dir``, memory-mapped and gathered per batch by the loader's workers, overlapped with
the previous step. Each run trains ``--warmup`` + ``--steps`` batches and reports:

* batches/s over the measured steps (wall clock, loader waits included);
* per-phase seconds per step: ``sampling`` and ``gather`` (in the loader's worker threads,
  overlapped with compute, so their wall time includes waiting for the cores the step's
  compute holds), ``wait`` (the training loop blocked on the loader: the part of
  sampling + gather that was not hidden), ``forward`` (with the loss), ``backward`` (with DDP's
  all-reduce), ``optimizer``;
* ``loader_alone_s``: the measured batches' sampling and gather prepared again after training,
  alone in the process, and their share of the step (``sampling_plus_gather_alone_share``);
* ``step_without_loader_s``: those same batches trained again from memory, with no loader
  running beside the step, and ``loader_cost_share``: what sampling and gather cost the
  training loop as a share of its step, measured: the step's slowdown while the loader ran
  beside it (``phase_s["step"]`` over ``step_without_loader_s``) plus the waits (``wait``).
  The worker's own wall times (``sampling``, ``gather``) overstate it on shared cores, where
  the same work stretches while the step holds them;
* compilations of Hector's compiled functions: after warm-up they must not grow (one kernel per
  layer per mode; an inference pass over ``--eval-batches`` batches adds the inference mode);
* peak RSS during the measured steps (high-water mark reset after set-up) against the feature
  file's size, and the file-backed part of RSS;
* with ``--procs 1,2``: the same training under ``torch.distributed`` (gloo, spawned ranks, each
  sampling its shard of the seeds, DDP), and its scaling over one process.

``--cold-features`` drops the feature files' pages from the page cache
(``posix_fadvise(DONTNEED)``) before every batch's gather: the rows come from storage each
time, as from a table larger than memory (IGBH's ``large`` and ``full`` sizes), which is where a
float16 table's half bytes shorten the step.

Generated datasets (``synthetic:*``) are written once to ``--cache-dir`` as ``.npy`` files and
memory-mapped afterwards, so the ranks of a multi-process run share them through the page cache.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from hector.tools import cli_args as _args

from . import _cache, _common, igbh_files, mlperf_rgat

MODELS = ("rgcn", "rgat", "hgt", "mlperf-rgat")
WORKLOADS = {"mlperf-rgat": mlperf_rgat.WORKLOAD}
FEATURE_DTYPES = ("float32", "float16")
DEFAULT_DATASETS = ("synthetic:mag", "ogbn_mag_0.1")
PHASES = ("sampling", "gather", "wait", "forward", "backward", "optimizer")
SYSTEMS = ("hector", "pyg", *mlperf_rgat.SYSTEMS)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the benchmark's options to its ``hector bench minibatch`` parser."""
    p.add_argument(
        "--workload",
        choices=sorted(WORKLOADS),
        default=None,
        help="a benchmarked configuration: mlperf-rgat is MLPerf Training's R-GAT (3 layers, "
        "hidden 512, 4 heads, fan-outs 15,10,5, batch 1024, 1024-wide float16 features, 2983 "
        "classes, synthetic:igbh-small); an option left at its default takes the workload's "
        "value, one given otherwise overrides it",
    )
    p.add_argument(
        "--models",
        default="rgcn,rgat,hgt",
        help="comma-separated: rgcn,rgat,hgt,mlperf-rgat",
    )
    p.add_argument("--datasets", default=",".join(DEFAULT_DATASETS), help="comma-separated")
    p.add_argument("--scale", type=_args.SCALE, default=1.0, help="scale of synthetic datasets")
    p.add_argument(
        "--fanouts", type=_args.FANOUTS, default="10,10", help="fan-out per hop, every relation"
    )
    p.add_argument(
        "--batch-size", type=_args.BATCH, default=1024, help="seeds per batch (per rank)"
    )
    p.add_argument("--feat", type=_args.WIDTH, default=128, help="input feature width")
    p.add_argument(
        "--feat-dtype",
        choices=FEATURE_DTYPES,
        default="float32",
        help="type of the feature file (float16: half the bytes read; models compute in float32)",
    )
    p.add_argument("--hidden", type=_args.WIDTH, default=64, help="hidden width")
    p.add_argument("--classes", type=_args.CLASSES, default=349, help="label classes")
    p.add_argument("--heads", type=_args.HEADS, default=1, help="attention heads (RGAT, HGT)")
    p.add_argument("--steps", type=_args.RUNS, default=4, help="measured training steps")
    p.add_argument("--warmup", type=_args.WARMUP, default=1, help="unmeasured steps (compilation)")
    p.add_argument(
        "--eval-batches", type=_args.WARMUP, default=2, help="inference batches after training"
    )
    p.add_argument(
        "--systems",
        default="hector,pyg",
        help="comma-separated: hector (Hector's layers), pyg (eager PyG); mlperf-rgat also: "
        "pyg-trim (trim_to_layer between layers), pyg-hector, pyg-inductor (the PyG model "
        "under torch.compile with that backend) and their -trim forms",
    )
    p.add_argument(
        "--dynamic",
        action="store_true",
        help="compile the pyg-hector/pyg-inductor systems with torch.compile(..., dynamic=True): "
        "one Dynamo compilation for every batch's sizes, instead of a recompilation with "
        "dynamic sizes at the second batch",
    )
    p.add_argument("--procs", type=_args.PROCS, default="1,2", help="process counts, e.g. 1,2")
    p.add_argument(
        "--pyg-procs",
        type=_args.PROCS,
        default=None,
        help="process counts for PyG (default: --procs)",
    )
    p.add_argument("--workers", type=_args.THREADS_OR_AUTO, default=1, help="loader worker threads")
    p.add_argument(
        "--prefetch", type=_args.THREADS_OR_AUTO, default=1, help="batches prepared ahead"
    )
    p.add_argument("--seed", type=_args.SEED, default=0)
    p.add_argument(
        "--cold-features",
        action="store_true",
        help="evict the feature files from the page cache before each batch's gather",
    )
    p.add_argument(
        "--cache-dir",
        default=None,
        help="where generated graphs and feature files are kept: a directory private to you "
        "(created with mode 0700; one that others can write, or a link, is refused; default "
        "$HECTOR_CACHE_DIR/minibatch or ~/.cache/hector/minibatch)",
    )
    p.add_argument("--json", default=None, help="write the record to this file")
    p.add_argument("--note", default="", help="free text stored in the record")


# ---------------------------------------------------------------------------------------------
# Data: cached graphs, feature files
# ---------------------------------------------------------------------------------------------


def _slug(name: str, scale: float) -> str:
    return f"{name.replace(':', '_').replace('/', '_')}_s{scale:g}"


def cache_dir_of(cache_dir: str | os.PathLike[str] | None) -> str:
    """The cache directory to use: ``cache_dir`` checked as private to the current user
    (created ``0700`` when missing), or the per-user default
    (:func:`hector_bench._cache.cache_root`); raises ``UnsafeDirectoryError`` (an OSError)."""
    return str(_cache.cache_root(cache_dir))


_GRAPH_FILES = ["edge_index.npy", "edge_type.npy", "node_type.npy"]
_GRAPH_META = {"num_nodes", "node_types", "edge_types", "info"}


def cached_dataset(name: str, scale: float, cache_dir: str) -> Any:
    """The dataset ``name`` (generated ones read back memory-mapped from the private
    ``cache_dir``, checked against their manifest; regenerated when they do not match)."""
    from hector import datasets

    if not name.startswith("synthetic:"):
        return datasets.load(name)
    folder = _cache.subdir(_cache.cache_root(cache_dir), _slug(name, scale))
    found = _cache.load_group(folder, "graph", _GRAPH_FILES)
    if found is not None and not _GRAPH_META <= found[1].keys():
        warnings.warn(
            f"cached graph in {folder} lacks {sorted(_GRAPH_META - found[1].keys())}; "
            "regenerating it",
            _cache.CacheIntegrityWarning,
            stacklevel=2,
        )
        found = None
    if found is None:
        ds = datasets.load(name, scale=scale)
        info = {k: v for k, v in ds.info.items() if isinstance(v, int | float | str | bool)}
        meta = {
            "num_nodes": ds.num_nodes,
            "node_types": ds.node_types,
            "edge_types": ds.edge_types,
            "info": info,
        }
        arrays = {
            "edge_index.npy": ds.edge_index.numpy(),
            "edge_type.npy": ds.edge_type.numpy(),
            "node_type.npy": ds.node_type.numpy(),
        }
        _cache.write_group(
            folder, "graph", {k: _cache.array_producer(v) for k, v in arrays.items()}, meta
        )
        return ds
    import torch

    arrays, m = found
    with warnings.catch_warnings():  # read-only maps: nothing writes to them
        warnings.simplefilter("ignore", UserWarning)
        return datasets.Dataset(
            name=name,
            num_nodes=m["num_nodes"],
            node_type=torch.from_numpy(arrays["node_type.npy"]),
            node_types=m["node_types"],
            edge_index=torch.from_numpy(arrays["edge_index.npy"]),
            edge_type=torch.from_numpy(arrays["edge_type.npy"]),
            edge_types=[tuple(e) for e in m["edge_types"]],
            info={**m["info"], "cached_in": str(folder)},
        )


def _feature_chunks(
    num_rows: int, dim: int, seed: int, dtype: str = "float32", chunk_rows: int = 1 << 16
) -> Any:
    """Standard normal rows, chunk by chunk, as ``hector.data.loader.write_random_features`` draws
    them (same seed, same values; rounded to ``dtype``)."""
    rng = np.random.default_rng(seed)
    for start in range(0, num_rows, chunk_rows):
        stop = min(num_rows, start + chunk_rows)
        yield rng.standard_normal((stop - start, dim), dtype=np.float32).astype(dtype, copy=False)


def feature_store(
    ds: Any, cache_dir: str, dim: int, classes: int, seed: int, dtype: str = "float32"
) -> Any:
    """A :class:`hector.data.loader.FeatureStore` of random ``dtype`` features and labels for
    ``ds``, kept in the private ``cache_dir`` (checked against their manifests before use;
    regenerated when they do not match); for a dataset read from IGBH's files, its own
    features and labels (:func:`hector_bench.igbh_files.igbh_store`)."""
    from hector.data.loader import FeatureStore

    if igbh_files.is_igbh(ds):  # the dataset's own features, from its files
        return igbh_files.igbh_store(ds, cache_dir, dim, classes, dtype)
    scale = ds.info.get("scale", 1.0)
    folder = _cache.subdir(_cache.cache_root(cache_dir), _slug(ds.name, float(scale)))
    kind = "" if dtype == "float32" else f"_{dtype}"
    feats = f"features_f{dim}{kind}_seed{seed}.npy"
    labels = f"labels_c{classes}_seed{seed}.npy"
    if _cache.load_group(folder, feats[:-4], [feats]) is None:
        rows = _feature_chunks(ds.num_nodes, dim, seed, dtype)
        producer = _cache.chunked_producer(np.dtype(dtype), (ds.num_nodes, dim), rows)
        _cache.write_group(folder, feats[:-4], {feats: producer})
    if _cache.load_group(folder, labels[:-4], [labels]) is None:
        rng = np.random.default_rng(seed + 1)
        y = rng.integers(0, classes, ds.num_nodes, dtype=np.int64)
        _cache.write_group(folder, labels[:-4], {labels: _cache.array_producer(y)})
    # Checked just now, in a directory only this user can write: the store opens them by name.
    return FeatureStore(folder / feats, folder / labels)


def seed_type(ds: Any) -> str:
    """The node type whose nodes are the seeds: ``paper`` where there is one, else the first
    node type that receives edges."""
    if "paper" in ds.node_types:
        return "paper"
    receiving = {d for _, _, d in ds.edge_types}
    return next(t for t in ds.node_types if t in receiving)


# ---------------------------------------------------------------------------------------------
# Models: a PyG stack and a Hector stack with the same weights
# ---------------------------------------------------------------------------------------------


def build_models(
    kind: str, ds: Any, feat: int, hidden: int, classes: int, heads: int, seed: int
) -> tuple[Any, Any]:
    """``(hector_model, pyg_model)``: two layers of ``kind`` plus (HGT) a linear classifier,
    Hector's loading the PyG layers' weights. Both map a :class:`~hector.data.loader.Batch` to the
    seeds' logits ``[B, classes]``."""
    import torch
    from torch import nn
    from torch_geometric import nn as pyg_nn

    from hector import models

    if kind == "mlperf-rgat":
        return mlperf_rgat.build_models(ds, feat, hidden, classes, heads, seed)
    torch.manual_seed(seed)
    r = ds.num_relations
    node_types, edge_types = ds.metadata()
    target = seed_type(ds)

    class PygModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            if kind == "rgcn":
                self.convs = nn.ModuleList(
                    [
                        pyg_nn.RGCNConv(feat, hidden, r, aggr="mean"),
                        pyg_nn.RGCNConv(hidden, classes, r, aggr="mean"),
                    ]
                )
            elif kind == "rgat":
                self.convs = nn.ModuleList(
                    [
                        pyg_nn.RGATConv(feat, hidden, r, heads=heads),
                        pyg_nn.RGATConv(hidden * heads, classes, r, heads=1),
                    ]
                )
            else:
                self.convs = nn.ModuleList(
                    [
                        pyg_nn.HGTConv(feat, hidden, (node_types, edge_types), heads=heads),
                        pyg_nn.HGTConv(hidden, hidden, (node_types, edge_types), heads=heads),
                    ]
                )
                self.head = nn.Linear(hidden, classes)

        def forward(self, batch: Any) -> Any:
            if kind == "hgt":
                x, edges = batch.to_pyg_hetero(node_types, edge_types)
                x = {t: v.float() for t, v in x.items()}
                for i, conv in enumerate(self.convs):
                    out = conv(x, edges)
                    x = {t: out[t] if out.get(t) is not None else x[t] for t in node_types}
                    if i + 1 < len(self.convs):
                        x = {t: v.relu() for t, v in x.items()}
                return self.head(x[target][: len(batch.seed_local)])
            inputs = batch.to_pyg()
            x = inputs["x"].float()
            for i, conv in enumerate(self.convs):
                x = conv(x, inputs["edge_index"], inputs["edge_type"])
                if i + 1 < len(self.convs):
                    x = x.relu()
            return x[batch.seed_local]

    class HectorModel(nn.Module):
        def __init__(self, ref: PygModel) -> None:
            super().__init__()
            make = {
                "rgcn": models.RGCNLayer.from_pyg,
                "rgat": models.RGATLayer.from_pyg,
                "hgt": models.HGTLayer.from_pyg,
            }[kind]
            self.layers = nn.ModuleList([make(conv) for conv in ref.convs])
            if kind == "hgt":
                self.head = nn.Linear(hidden, classes)
                self.head.load_state_dict(ref.head.state_dict())

        def forward(self, batch: Any) -> Any:
            g = batch.graph
            if kind == "hgt":
                x = batch.x_dict(node_types, batch.x)  # float16 rows: read as stored
                for i, layer in enumerate(self.layers):
                    out = layer(g, x)
                    x = {t: out.get(t, x[t]) for t in node_types}
                    if i + 1 < len(self.layers):
                        x = {t: v.relu() for t, v in x.items()}
                return self.head(x[target][: len(batch.seed_local)])
            x = batch.x  # a float16 table's rows reach the kernels as they are
            for i, layer in enumerate(self.layers):
                x = layer(g, x)
                if i + 1 < len(self.layers):
                    x = x.relu()
            return x[batch.seed_local]

    pyg = PygModel()
    return HectorModel(pyg), pyg


def compiled_functions(model: Any) -> list[Any]:
    """The distinct compiled functions behind a Hector model's layers."""
    seen: dict[int, Any] = {}
    for m in model.modules():
        fn = getattr(m, "_fn", None)
        if fn is not None and hasattr(fn, "compilations"):
            seen[id(fn)] = fn
    return list(seen.values())


def _compilations(model: Any) -> int:
    return sum(fn.compilations for fn in compiled_functions(model))


def pyg_skip_reason(kind: str, batch: Any, feat: int, hidden: int, heads: int) -> str | None:
    """Why the PyG layer cannot run this batch here, or None. ``RGATConv`` gathers one
    ``[in, heads*out]`` weight per edge (and its gradient in training)."""
    if kind != "rgat":
        return None
    need = 2 * 4 * batch.num_edges * feat * hidden * heads
    limit = _common.available_memory_bytes()
    if limit is not None and need > limit:
        return (
            f"RGATConv's per-edge weights need ~{need / 2**30:.0f} GiB for "
            f"{batch.num_edges} edges, {limit / 2**30:.0f} GiB available"
        )
    return None


# ---------------------------------------------------------------------------------------------
# Training loop with per-phase times
# ---------------------------------------------------------------------------------------------


def _status_bytes(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def train(
    model: Any,
    loader: Any,
    *,
    steps: int,
    warmup: int,
    eval_batches: int = 0,
    lr: float = 0.01,
    hector_model: Any = None,
    features: Any = None,
) -> dict[str, Any]:
    """Train ``warmup + steps`` batches from ``loader``; return throughput, phase times,
    compilation counts and peak memory (see the module docstring)."""
    import torch

    from hector.offload.memory_timeline import reset_high_water_mark

    counted = hector_model if hector_model is not None else model
    compiles_start = _compilations(counted)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    it = iter(loader)
    phases: dict[str, list[float]] = defaultdict(list)
    losses: list[float] = []
    compiles_warm = compiles_start
    rss_file_max = 0
    if features is not None:
        features.track_resident = True
    measured_start = time.perf_counter()
    first_step = 0.0
    for i in range(warmup + steps):
        if i == warmup:
            compiles_warm = _compilations(counted)
            reset_high_water_mark()  # peak RSS of the measured steps only
            measured_start = time.perf_counter()
        t0 = time.perf_counter()
        batch = next(it)
        t1 = time.perf_counter()
        loss, t2, t3, t4 = _step(model, opt, batch)
        if i == 0:  # the first call compiles (Hector's layers, torch.compile's graphs)
            first_step = t4 - t1
        if i >= warmup:
            for name, value in (
                ("sampling", batch.times["sampling"]),
                ("gather", batch.times["gather"]),
                ("wait", t1 - t0),
                ("forward", t2 - t1),
                ("backward", t3 - t2),
                ("optimizer", t4 - t3),
                ("step", t4 - t0),
            ):
                phases[name].append(value)
            losses.append(loss.item())
            rss_file_max = max(rss_file_max, _status_bytes("RssFile") or 0)
    wall = time.perf_counter() - measured_start
    compiles_end = _compilations(counted)
    peak = _status_bytes("VmHWM")
    out: dict[str, Any] = {
        "steps": steps,
        "warmup": warmup,
        "wall_s": round(wall, 4),
        "first_step_s": round(first_step, 4),
        "step_s_each": [round(v, 4) for v in phases["step"]],
        "batches_per_s": round(steps / wall, 4) if wall > 0 else None,
        "phase_s": {k: round(float(np.mean(v)), 5) for k, v in phases.items()},
        "phase_share_of_step": {
            k: round(float(np.sum(v) / np.sum(phases["step"])), 4)
            for k, v in phases.items()
            if k != "step"
        },
        "loss_first_last": [losses[0], losses[-1]] if losses else None,
        "peak_rss_bytes": peak,
        "max_rss_file_bytes": rss_file_max,
        "max_feature_file_resident_bytes": features.peak_resident_bytes if features else None,
        "batch": {"nodes": batch.num_nodes, "edges": batch.num_edges},
    }
    share = out["phase_share_of_step"]
    out["sampling_plus_gather_share"] = round(share["sampling"] + share["gather"], 4)
    out["exposed_loader_share"] = share["wait"]
    if hector_model is not None:
        out["compilations"] = {
            "during_warmup": compiles_warm - compiles_start,
            "after_warmup": compiles_end - compiles_warm,
            "layers": len(list(getattr(hector_model, "layers", []))),
        }
        if eval_batches:
            model.eval()
            before = _compilations(counted)
            with torch.no_grad():
                for _ in range(eval_batches):
                    model(next(it))
            out["compilations"]["inference"] = _compilations(counted) - before
            model.train()
    it.close()  # stop the prefetching workers before timing the loader alone
    out.update(_loader_cost(model, opt, loader, range(warmup, warmup + steps), out))
    return out


def _loader_cost(
    model: Any, opt: Any, loader: Any, measured: range, out: dict[str, Any]
) -> dict[str, Any]:
    """What the loader costs the training loop ``out`` measured: the loader alone over the
    ``measured`` batches, and the step on the same batches already in memory (no loader beside
    it): the slowdown sampling and gather cause there plus the waits."""
    alone, batches = loader_alone(loader, measured)
    cols: dict[str, Any] = {
        "loader_alone_s": alone,
        "sampling_plus_gather_alone_share": round(
            (alone["sampling"] + alone["gather"]) / out["phase_s"]["step"], 4
        ),
    }
    quiet = []
    for batch in batches:
        t0 = time.perf_counter()
        _step(model, opt, batch)
        quiet.append(time.perf_counter() - t0)
    del batches
    step_quiet = float(np.mean(quiet))
    cols["step_without_loader_s"] = round(step_quiet, 5)
    step_loop = out["phase_s"]["step"]
    slowdown = max(step_loop - step_quiet, 0.0) / step_loop
    cols["loader_cost_share"] = round(slowdown + out["phase_share_of_step"]["wait"], 4)
    return cols


def _step(model: Any, opt: Any, batch: Any) -> tuple[Any, float, float, float]:
    """One training step on ``batch``: the loss and the clock after forward (with the loss),
    backward and the optimizer."""
    import torch.nn.functional as F

    loss = F.cross_entropy(model(batch), batch.y)
    t_forward = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    t_backward = time.perf_counter()
    opt.step()
    return loss, t_forward, t_backward, time.perf_counter()


def loader_alone(loader: Any, indices: Any) -> tuple[dict[str, float], list[Any]]:
    """Mean seconds of sampling and of the feature gather of batches ``indices`` of the
    loader's current epoch, prepared again in this thread with nothing else running in the
    process (the training loop's figures are wall times of a worker thread that shares the
    cores with the step's compute), and those batches."""
    shard = loader._shard()
    times: dict[str, list[float]] = defaultdict(list)
    batches = []
    for i in indices:
        batch = loader.sample(shard[i * loader.batch_size : (i + 1) * loader.batch_size], index=i)
        for k in ("sampling", "gather"):
            times[k].append(batch.times[k])
        batches.append(batch)
    return {k: round(float(np.mean(v)), 5) for k, v in times.items()}, batches


# ---------------------------------------------------------------------------------------------
# One run (one process, or one rank of several)
# ---------------------------------------------------------------------------------------------


def read_cold(store: Any) -> None:
    """Make every gather of ``store`` (a feature store, or one per node type) read its rows from
    storage: the feature files are evicted from the page cache first."""
    paths = [s.path for s in getattr(store, "stores", [store])]
    gather = store._gather

    def cold_gather(node_ids: Any, out: Any) -> Any:
        for path in paths:
            _common.evict_page_cache(path)
        return gather(node_ids, out)

    store._gather = cold_gather


def _loader(cfg: dict[str, Any], ds: Any, store: Any, rank: int, world: int) -> Any:
    from hector.data.loader import NeighborLoader

    return NeighborLoader(
        ds,
        cfg["fanouts"],
        input_nodes=seed_type(ds),
        batch_size=cfg["batch_size"],
        shuffle=True,
        drop_last=True,
        seed=cfg["seed"],
        features=store,
        num_workers=cfg["workers"],
        prefetch=cfg["prefetch"],
        threads=cfg["sample_threads"],
        rank=rank,
        world_size=world,
    )


def run_one(cfg: dict[str, Any], rank: int = 0, world: int = 1) -> dict[str, Any]:
    """Train one (model, dataset, system) config in this process; with ``world > 1`` the
    process group must be initialized and the model is wrapped in DDP."""
    import torch

    ds = cached_dataset(cfg["dataset"], cfg["scale"], cfg["cache_dir"])
    store = feature_store(
        ds, cfg["cache_dir"], cfg["feat"], cfg["classes"], cfg["seed"], cfg["feat_dtype"]
    )
    if cfg.get("cold_features"):
        read_cold(store)
    loader = _loader(cfg, ds, store, rank, world)
    hector_model, pyg_model = build_models(
        cfg["model"], ds, cfg["feat"], cfg["hidden"], cfg["classes"], cfg["heads"], cfg["seed"]
    )
    system = cfg["system"]
    model = hector_model if system == "hector" else pyg_model
    if system in mlperf_rgat.SYSTEMS:
        mlperf_rgat.prepare_system(pyg_model, system, dynamic=cfg.get("dynamic", False))
    result: dict[str, Any] = {"system": system, "procs": world}
    if system != "hector":
        probe = next(iter(loader))
        reason = pyg_skip_reason(cfg["model"], probe, cfg["feat"], cfg["hidden"], cfg["heads"])
        if reason:
            return {**result, "status": "skipped", "reason": reason}
    if world > 1:
        # PyG's HGTConv/RGATConv hold parameters a batch may not reach (a relation or node
        # type without edges in it), and an HGT layer whose input and output widths differ
        # has no gated residual (its `skip` is unused).
        model = torch.nn.parallel.DistributedDataParallel(
            model, find_unused_parameters=system == "pyg" or cfg["model"] == "hgt"
        )
    result.update(
        train(
            model,
            loader,
            steps=cfg["steps"],
            warmup=cfg["warmup"],
            eval_batches=cfg["eval_batches"] if system == "hector" else 0,
            hector_model=hector_model if system == "hector" else None,
            features=store,
        )
    )
    if system in mlperf_rgat.SYSTEMS:
        result["compiled"] = mlperf_rgat.compiled_stats(system)
    if system == "hector":
        # Same weights, same batch: the two systems' logits agree (a sanity check, on a fresh
        # pair after training so that train() counts the inference compilations).
        fresh_hector, fresh_pyg = build_models(
            cfg["model"], ds, cfg["feat"], cfg["hidden"], cfg["classes"], cfg["heads"], cfg["seed"]
        )
        probe = loader.sample(loader.seeds[: min(16, len(loader.seeds))], index=0)
        fresh_hector.eval()  # no dropout: the same function of the same weights
        fresh_pyg.eval()
        with torch.no_grad():
            if pyg_skip_reason(cfg["model"], probe, cfg["feat"], cfg["hidden"], cfg["heads"]):
                result["max_abs_diff_vs_pyg"] = None
            else:
                diff = (fresh_hector(probe) - fresh_pyg(probe)).abs().max()
                result["max_abs_diff_vs_pyg"] = float(diff)
    result["status"] = "ok"
    result["feature_file_bytes"] = store.nbytes
    # Seeds trained per second on this rank, and an epoch (every seed-type node once, each
    # of the `world` ranks training its shard) at that rate.
    seeds_per_s = (result["batches_per_s"] or 0.0) * cfg["batch_size"]
    result["seeds_per_s"] = round(seeds_per_s, 3)
    epoch = len(loader.seeds) / (seeds_per_s * world) if seeds_per_s else None
    result["epoch_estimate_s"] = None if epoch is None else round(epoch, 3)
    return result


def _rank_main(rank: int, world: int, port: int, cfg: dict[str, Any], out: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        result = run_one({**cfg, "sample_threads": 1}, rank, world)
    except Exception as err:  # noqa: BLE001 - reported in the record, not a traceback
        result = {"system": cfg["system"], "procs": world, "status": "error", "reason": str(err)}
    finally:
        dist.destroy_process_group()
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_distributed(cfg: dict[str, Any], world: int) -> dict[str, Any]:
    """Run ``cfg`` on ``world`` gloo ranks (spawned); rank 0's result with the global
    throughput (every rank trains its own batches)."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as out:
        mp.spawn(_rank_main, args=(world, _free_port(), cfg, out), nprocs=world, join=True)
        ranks = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(world)]
    result = ranks[0]
    if result.get("status") == "ok":
        result["global_batches_per_s"] = round(
            sum(r["batches_per_s"] for r in ranks if r.get("batches_per_s")), 4
        )
        result["peak_rss_bytes_per_rank"] = [r.get("peak_rss_bytes") for r in ranks]
    return result


# ---------------------------------------------------------------------------------------------
# The benchmark
# ---------------------------------------------------------------------------------------------


def _parse_list(text: str, allowed: tuple[str, ...] | None, what: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise ValueError(f"--{what} is empty")
    if allowed is not None:
        bad = [t for t in items if t not in allowed]
        if bad:
            raise ValueError(f"--{what}: unknown {bad}; choose from {', '.join(allowed)}")
    return items


def _apply_workload(args: argparse.Namespace) -> None:
    """Give the options ``--workload`` sets its values where they were left at their
    defaults."""
    if args.workload is None:
        return
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    for name, value in WORKLOADS[args.workload].items():
        if getattr(args, name) == parser.get_default(name):
            setattr(args, name, value)


def _config(args: argparse.Namespace) -> tuple[dict[str, Any], list[str], list[str], list[str]]:
    _apply_workload(args)
    try:
        fanouts = [int(f) for f in _parse_list(args.fanouts, None, "fanouts")]
        procs = [int(p) for p in _parse_list(args.procs, None, "procs")]
    except ValueError as err:
        if str(err).startswith("--"):
            raise
        raise ValueError("--fanouts and --procs take comma-separated integers") from None
    if any(p < 1 for p in procs):
        raise ValueError("--procs must be positive")
    for name in ("batch_size", "feat", "hidden", "classes", "heads", "steps"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
    cfg = {
        "workload": args.workload,
        "scale": args.scale,
        "fanouts": fanouts,
        "batch_size": args.batch_size,
        "feat": args.feat,
        "feat_dtype": args.feat_dtype,
        "hidden": args.hidden,
        "classes": args.classes,
        "heads": args.heads,
        "steps": args.steps,
        "warmup": args.warmup,
        "eval_batches": args.eval_batches,
        "workers": args.workers,
        "prefetch": args.prefetch,
        "sample_threads": 0,
        "seed": args.seed,
        "cold_features": args.cold_features,
        "dynamic": args.dynamic,
        "cache_dir": args.cache_dir,
        "procs": procs,
        "pyg_procs": [int(p) for p in _parse_list(args.pyg_procs, None, "pyg-procs")]
        if args.pyg_procs
        else procs,
    }
    models_ = _parse_list(args.models, MODELS, "models")
    systems = _parse_list(args.systems, SYSTEMS, "systems")
    return cfg, models_, _parse_list(args.datasets, None, "datasets"), systems


def _print_row(r: dict[str, Any]) -> None:
    if r.get("status") != "ok":
        print(f"    {r['system']:17s} procs={r['procs']}: {r.get('status')}: {r.get('reason')}")
        return
    ph = r["phase_s"]
    comp = r.get("compilations")
    print(
        f"    {r['system']:17s} procs={r['procs']}: {r['batches_per_s']:.3f} batches/s/rank "
        + f"(first step {r['first_step_s']:.2f} s) "
        + f"({r['seeds_per_s']:.1f} seeds/s, epoch ~{r['epoch_estimate_s'] or 0:.0f} s)"
        + (f" ({r['global_batches_per_s']:.3f} global)" if "global_batches_per_s" in r else "")
        + "  "
        + " ".join(f"{k}={ph[k] * 1e3:.0f}ms" for k in (*PHASES, "step"))
        + f"  sampling+gather {r['sampling_plus_gather_share']:.0%} of step (overlapped), "
        + f"{r['sampling_plus_gather_alone_share']:.0%} (alone), exposed "
        + f"{r['exposed_loader_share']:.0%}, cost to the loop {r['loader_cost_share']:.0%} "
        + f"(step without the loader {r['step_without_loader_s'] * 1e3:.0f}ms)"
        + (f"  compilations {comp}" if comp else "")
    )
    sys.stdout.flush()


def run(args: argparse.Namespace) -> int:
    """Run the benchmark; print a table and write the JSON record."""
    try:
        cfg, models_, dataset_names, systems = _config(args)
        cfg["cache_dir"] = cache_dir_of(args.cache_dir)
    except _cache.UnsafeDirectoryError as err:
        where = "--cache-dir" if args.cache_dir is not None else "cache directory"
        print(f"error: {where}: {err}", file=sys.stderr)
        return 2
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    import torch

    from hector import datasets

    record: dict[str, Any] = {
        "benchmark": "minibatch",
        "config": {k: v for k, v in cfg.items() if k != "cache_dir"},
        "device": "cpu",
        "host": _common.host_info("cpu"),
        "note": args.note,
        "cells": [],
    }
    for name in dataset_names:
        known = name.startswith("synthetic:") or name in datasets.available()
        if not known and not os.path.isdir(name):
            record["cells"].append({"dataset": name, "status": "unavailable"})
            continue
        try:
            ds = cached_dataset(name, cfg["scale"], cfg["cache_dir"])
            store = feature_store(
                ds, cfg["cache_dir"], cfg["feat"], cfg["classes"], cfg["seed"], cfg["feat_dtype"]
            )
        except (ValueError, OSError) as err:
            print(f"{name}: not available ({err})")
            record["cells"].append({"dataset": name, "status": "unavailable", "reason": str(err)})
            continue
        stats = {"nodes": ds.num_nodes, "edges": ds.num_edges, "relations": ds.num_relations}
        del ds
        for model in models_:
            print(f"{name} {model} (fan-outs {cfg['fanouts']}, batch {cfg['batch_size']})")
            cell: dict[str, Any] = {
                "dataset": name,
                "graph": stats,
                "model": model,
                "feature_file_bytes": store.nbytes,
                "results": [],
            }
            for system in systems:
                for procs in cfg["procs"] if system == "hector" else cfg["pyg_procs"]:
                    one = {**cfg, "dataset": name, "model": model, "system": system}
                    try:
                        if procs == 1:
                            torch.set_num_threads(os.cpu_count() or 1)
                            r = run_one(one)
                        else:
                            r = run_distributed(one, procs)
                    except Exception as err:  # noqa: BLE001 - one failed row, not the run
                        r = {"system": system, "procs": procs, "status": "error"}
                        r["reason"] = f"{type(err).__name__}: {err}"
                    cell["results"].append(r)
                    _print_row(r)
            ok = {(r["system"], r["procs"]): r for r in cell["results"] if r.get("status") == "ok"}
            h1, p1, h2 = ok.get(("hector", 1)), ok.get(("pyg", 1)), ok.get(("hector", 2))
            if h1 and p1:
                cell["hector_speedup_vs_pyg"] = round(h1["batches_per_s"] / p1["batches_per_s"], 3)
            for other in mlperf_rgat.SYSTEMS:  # the reference's forms, against both peers
                o1 = ok.get((other, 1))
                if o1 and h1:
                    cell.setdefault("speedup_vs_hector", {})[other] = round(
                        o1["batches_per_s"] / h1["batches_per_s"], 3
                    )
                if o1 and p1:
                    cell.setdefault("speedup_vs_pyg", {})[other] = round(
                        o1["batches_per_s"] / p1["batches_per_s"], 3
                    )
            if h1 and h2:
                cell["hector_2proc_scaling"] = round(
                    h2["global_batches_per_s"] / h1["batches_per_s"], 3
                )
            record["cells"].append(cell)
            if args.json:
                _common.write_json(args.json, record)
    if args.json:
        _common.write_json(args.json, record)
        print(f"wrote {args.json}")
    return 0
