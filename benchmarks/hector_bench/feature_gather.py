"""Feature gather of sampled mini-batches from a feature file: Hector's ways, side by side.

``python3 -m hector_bench.feature_gather --dataset synthetic:mag --json out.json``

Samples ``--batches`` batches exactly as ``hector bench minibatch`` does (same loader seed,
fan-outs, batch size and seed node type, so the same node sets), then gathers each batch's
feature rows from the cached ``.npy`` file (``--cache-dir``, written by ``hector bench
minibatch`` or here) in each way, timed alone in this process (no training competes):

* ``pread``: :class:`hector.data.loader.FeatureStore` default, native ``pread`` in file order into a
  reused buffer;
* ``pread-fresh``: the same into a new array per batch;
* ``pread@G``: ``pread`` with ``max_gap_bytes=G`` (wanted rows at most G bytes apart share a
  read);
* ``mmap-release``: copy out of the memory mapping in file-order chunks, dropping each chunk's
  stretch of the mapping after it (the previous default);
* ``mmap``: copy out of the mapping, nothing released (the table ends up mapped in);
* ``numpy``: ``table[node_ids]`` on the ``np.memmap`` (one thread), the plain Python way.

Per way: median and per-batch seconds, GB/s of rows delivered, threads, and the most bytes of
the file resident in this process (``/proc/self/smaps``) after a gather. With ``--cold`` the
file's pages are first evicted from the page cache (``posix_fadvise(DONTNEED)`` on this file
only) before one more gather per way, to show reads that go to the disk.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

from hector.tools import cli_args as _args

from . import _cache, _common
from .minibatch import FEATURE_DTYPES


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of the feature gather benchmark."""
    p.add_argument("--dataset", default="synthetic:mag")
    p.add_argument("--scale", type=_args.SCALE, default=1.0)
    p.add_argument(
        "--fanouts", type=_args.FANOUTS, default="10,10", help="fan-out per hop, every relation"
    )
    p.add_argument("--batch-size", type=_args.BATCH, default=1024)
    p.add_argument("--feat", type=_args.WIDTH, default=128, help="feature width of the file")
    p.add_argument(
        "--feat-dtype",
        choices=FEATURE_DTYPES,
        default="float32",
        help="type of the feature file (float16: half the bytes per row)",
    )
    p.add_argument("--classes", type=_args.CLASSES, default=349)
    p.add_argument("--batches", type=_args.RUNS, default=5, help="batches gathered per way")
    p.add_argument(
        "--ways",
        default="pread,pread-fresh,mmap-release,mmap,numpy",
        help="comma-separated; pread@G: pread with max_gap_bytes=G",
    )
    p.add_argument(
        "--threads", type=_args.THREADS_OR_AUTO, default=0, help="0: torch.get_num_threads()"
    )
    p.add_argument("--cold", action="store_true", help="also one gather per way, cache evicted")
    p.add_argument("--seed", type=_args.SEED, default=0)
    p.add_argument(
        "--cache-dir",
        default=None,
        help="a directory private to you (as hector bench minibatch's; default: its default)",
    )
    p.add_argument("--json", default=None)
    p.add_argument("--note", default="")


def _store(path: Any, way: str, threads: int) -> Any:
    from hector.data.loader import FeatureStore

    if way.startswith("pread@"):
        return FeatureStore(path, threads=threads, max_gap_bytes=int(way.split("@", 1)[1]))
    if way in ("pread", "pread-fresh"):
        return FeatureStore(path, threads=threads, reuse_buffers=way == "pread")
    return FeatureStore(path, read="mmap", release=way == "mmap-release", threads=threads)


def _gather(store: Any, way: str, ids: np.ndarray) -> Any:
    if way == "numpy":
        return np.asarray(store.table[ids])
    return store.gather(ids)


def measure_way(path: Any, way: str, batches: list[np.ndarray], threads: int, cold: bool) -> dict:
    """Gather every batch once in ``way`` (after one untimed warm-up gather); the record."""
    store = _store(path, way, threads)
    store.track_resident = way != "numpy"
    _gather(store, way, batches[0])  # warm-up: page cache, buffers, thread start
    times, resident = [], 0
    reference = None
    for ids in batches:
        t0 = time.perf_counter()
        out = _gather(store, way, ids)
        times.append(time.perf_counter() - t0)
        resident = max(resident, store.resident_bytes() or 0)
        reference = out
        del out
    rows = float(np.mean([len(b) for b in batches]))
    median = statistics.median(times)
    rec: dict[str, Any] = {
        "way": way,
        "threads": 1 if way == "numpy" else store.threads,
        "median_s": round(median, 5),
        "per_batch_s": [round(t, 5) for t in times],
        "gbytes_per_s": round(rows * store.dim * store.table.dtype.itemsize / median / 1e9, 3),
        "rows_per_s": round(rows / median),
        "max_file_resident_bytes": max(resident, store.peak_resident_bytes),
        "checksum": float(np.asarray(reference, dtype=np.float64).sum()),
    }
    if cold:
        _common.evict_page_cache(path)
        t0 = time.perf_counter()
        _gather(store, way, batches[0])
        rec["cold_s"] = round(time.perf_counter() - t0, 5)
    store.close()
    return rec


def run(args: argparse.Namespace) -> int:
    """Sample the batches, measure every way, print a table, write the record."""
    import torch

    from hector.data.loader import NeighborLoader

    from .minibatch import cache_dir_of, cached_dataset, feature_store, seed_type

    try:
        cache = cache_dir_of(args.cache_dir)
    except _cache.UnsafeDirectoryError as err:
        where = "--cache-dir" if args.cache_dir is not None else "cache directory"
        print(f"error: {where}: {err}", file=sys.stderr)
        return 2
    threads = args.threads or torch.get_num_threads()
    ds = cached_dataset(args.dataset, args.scale, cache)
    store = feature_store(ds, cache, args.feat, args.classes, args.seed, args.feat_dtype)
    if not hasattr(store, "path"):
        print(
            f"error: {ds.name}: features in one file per node type are not measured here",
            file=sys.stderr,
        )
        return 2
    path = store.path
    loader = NeighborLoader(
        ds,
        [int(f) for f in args.fanouts.split(",")],
        input_nodes=seed_type(ds),
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=True,
        seed=args.seed,
        num_workers=0,
    )
    batches, sampling = [], []
    for i, batch in enumerate(loader):
        if i == args.batches:
            break
        batches.append(batch.node_ids.numpy())
        sampling.append(batch.times["sampling"])
    del loader, batch
    results = []
    for way in [w.strip() for w in args.ways.split(",") if w.strip()]:
        results.append(measure_way(path, way, batches, threads, args.cold))
        r = results[-1]
        print(
            f"{way:13s} threads={r['threads']} median {r['median_s'] * 1e3:8.1f} ms "
            f"{r['gbytes_per_s']:6.2f} GB/s {r['rows_per_s'] / 1e6:6.2f} M rows/s  "
            f"file resident {r['max_file_resident_bytes'] >> 20} MiB"
            + (f"  cold {r['cold_s'] * 1e3:.0f} ms" if "cold_s" in r else "")
        )
        sys.stdout.flush()
    sums = {r["checksum"] for r in results}
    record = {
        "benchmark": "feature_gather",
        "config": {k: v for k, v in vars(args).items() if k not in ("json", "cache_dir")},
        "host": _common.host_info("cpu"),
        "load_average": os.getloadavg(),
        "feature_file_bytes": os.path.getsize(path),
        "batch_rows": [len(b) for b in batches],
        "sampling_median_s": round(statistics.median(sampling), 5),
        "same_rows_every_way": len(sums) == 1,
        "results": results,
    }
    if args.json:
        _common.write_json(args.json, record)
        print(f"wrote {args.json}")
    return 0 if len(sums) == 1 else 1


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
