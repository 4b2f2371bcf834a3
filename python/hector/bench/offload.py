"""``hector bench offload``: activation offloading vs keep-all, save_on_cpu and checkpointing.

Trains a GPT-2-style decoder or a BERT-style encoder (random init) with each system, each in a
fresh subprocess, and reports per system: median step time, peak bytes of saved activations
resident in memory, peak resident memory (RSS) of the process above its baseline, bytes
written/read by the offload store and its achieved write/read bandwidth (bytes moved / time
with at least one request in flight), next to the raw bandwidth of the same disk measured in
the same run (sequential 4 MiB ``O_DIRECT`` writes then reads of one file). ``--plot`` draws
the saved-activation bytes resident over one training step for keep-all and the offload
systems. Module-level imports stay light: ``hector --help`` imports this file.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import sys
import time
from typing import Any

SYSTEMS = ("keep-all", "hector-all", "hector-adaptive", "save_on_cpu", "checkpoint")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``hector bench offload``."""
    parser.add_argument("--model", choices=("gpt", "bert"), default="gpt")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=4, help="timed steps per system")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument(
        "--systems", default=",".join(SYSTEMS), help=f"comma-separated subset of {SYSTEMS}"
    )
    parser.add_argument("--root", default=None, help="offload root (default: $TMPDIR)")
    parser.add_argument("--raw-mib", type=int, default=256, help="raw disk test size (MiB)")
    parser.add_argument("--json", metavar="PATH", default=None, help="write the JSON record")
    parser.add_argument("--plot", metavar="PATH", default=None, help="memory-over-time plot")


# ---- raw disk bandwidth ---------------------------------------------------------------------


def raw_disk_bandwidth(directory: str, total_mib: int = 256, block_mib: int = 4) -> dict[str, Any]:
    """Sequential write then read of one file with ``O_DIRECT`` (buffered where refused)."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f".hector-rawbw-{os.getpid()}")
    block = block_mib << 20
    count = max(total_mib // block_mib, 1)
    buf = mmap.mmap(-1, block)  # page-aligned, as O_DIRECT needs
    buf.write(os.urandom(4096) * (block // 4096))
    flags = os.O_CREAT | os.O_TRUNC | os.O_RDWR
    direct = True
    try:
        fd = os.open(path, flags | getattr(os, "O_DIRECT", 0), 0o600)
    except OSError:
        direct = False
        fd = os.open(path, flags, 0o600)
    try:
        start = time.perf_counter()
        for i in range(count):
            os.pwritev(fd, [buf], i * block)
        os.fsync(fd)
        write_s = time.perf_counter() - start
        if not direct:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        start = time.perf_counter()
        for i in range(count):
            os.preadv(fd, [buf], i * block)
        read_s = time.perf_counter() - start
    except OSError:
        if direct:  # some filesystems accept the flag but not the I/O
            os.close(fd)
            os.unlink(path)
            return raw_disk_bandwidth_buffered(directory, total_mib, block_mib)
        raise
    finally:
        if fd >= 0:
            with _suppress():
                os.close(fd)
        with _suppress():
            os.unlink(path)
    total = count * block
    return {
        "bytes": total,
        "direct": direct,
        "write_bandwidth": total / write_s,
        "read_bandwidth": total / read_s,
    }


def raw_disk_bandwidth_buffered(directory: str, total_mib: int, block_mib: int) -> dict[str, Any]:
    """Fallback of :func:`raw_disk_bandwidth` without ``O_DIRECT``."""
    path = os.path.join(directory, f".hector-rawbw-{os.getpid()}")
    block = os.urandom(block_mib << 20)
    count = max(total_mib // block_mib, 1)
    try:
        with open(path, "wb", buffering=0) as f:
            start = time.perf_counter()
            for _ in range(count):
                f.write(block)
            os.fsync(f.fileno())
            write_s = time.perf_counter() - start
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        with open(path, "rb", buffering=0) as f:
            start = time.perf_counter()
            while f.read(len(block)):
                pass
            read_s = time.perf_counter() - start
    finally:
        with _suppress():
            os.unlink(path)
    total = count * len(block)
    return {
        "bytes": total,
        "direct": False,
        "write_bandwidth": total / write_s,
        "read_bandwidth": total / read_s,
    }


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return exc[0] is not None and issubclass(exc[0], OSError)  # type: ignore[arg-type]


# ---- one system, in a fresh process ------------------------------------------------------------


def _worker(payload: dict[str, Any]) -> dict[str, Any]:
    """Train with one system; return timings, memory and I/O figures (runs in a subprocess)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    from hector.bench._common import PeakRSS
    from hector.offload import TensorCache, wrap
    from hector.offload.models import build_model

    torch.set_num_threads(int(payload.get("threads", torch.get_num_threads())))
    system = payload["system"]
    cfg = payload["config"]
    model = build_model(
        cfg["model"], cfg["layers"], cfg["hidden"], cfg["heads"], cfg["vocab"], cfg["seq"]
    )
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    batches = [
        torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"]), generator=gen) for _ in range(4)
    ]
    cache: TensorCache | None = None
    forward: nn.Module = model
    root = payload.get("root")
    if system in ("hector-all", "hector-adaptive"):
        policy = "all" if system == "hector-all" else "adaptive"
        wrapped = wrap(model, policy, root=root, record_timeline=True)
        forward, cache = wrapped, wrapped.cache
    elif system == "checkpoint":
        from torch.utils.checkpoint import checkpoint

        for block in model.blocks:
            original = block.forward
            block.forward = lambda x, _f=original: checkpoint(_f, x, use_reentrant=True)

    def step(i: int, counting: bool = False) -> float:
        ids = batches[i % len(batches)]
        ctx: Any = (
            torch.autograd.graph.save_on_cpu(pin_memory=False)
            if system == "save_on_cpu" and not counting
            else _null()
        )
        with ctx:
            logits = forward(ids)
            loss = F.cross_entropy(logits.reshape(-1, cfg["vocab"]), ids.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(loss)

    for i in range(payload["warmup"]):
        step(i)
    if cache is not None:
        cache.peak_resident_bytes = cache.resident_bytes
        cache.timeline.clear()
        io_before = cache.store.stats()
    _trim()  # return memory freed by warm-up to the OS so the RSS peak is this phase's
    rss = PeakRSS()
    rss.start()
    times = []
    for i in range(payload["steps"]):
        start = time.perf_counter()
        step(i)
        times.append((time.perf_counter() - start) * 1e3)
    peak_rss = rss.peak_bytes()
    out: dict[str, Any] = {"times_ms": times, "peak_rss_bytes": peak_rss, "rss_method": rss.method}
    if cache is not None:
        io = cache.store.stats()
        written = io["bytes_written"] - io_before["bytes_written"]
        read = io["bytes_read"] - io_before["bytes_read"]
        wbusy = io["write_busy_ns"] - io_before["write_busy_ns"]
        rbusy = io["read_busy_ns"] - io_before["read_busy_ns"]
        steps = payload["steps"]
        out.update(
            saved_peak_bytes=cache.peak_resident_bytes,
            bytes_written_per_step=written // steps,
            bytes_read_per_step=read // steps,
            write_bandwidth=written / (wbusy * 1e-9) if wbusy else None,
            read_bandwidth=read / (rbusy * 1e-9) if rbusy else None,
            direct_io=cache.store.direct,
            read_wait_ms_per_step=cache.read_wait_s * 1e3 / max(steps, 1),
            plan=cache.plan.summary() if cache.plan is not None else None,
            write_errors=cache.counters["write_errors"],
        )
        # One more step with the timeline recorded alone.
        cache.timeline.clear()
        cache._t0 = time.perf_counter()
        step(0)
        out["timeline"] = cache.timeline[:: max(len(cache.timeline) // 400, 1)]
        cache.close()  # what closing the wrapped module does
    else:
        # Count the saved activations of one more step with a keep-everything cache.
        counter = TensorCache("none", model, threshold=0, record_timeline=True)
        with counter.hooks():
            step(0, counting=True)  # save_on_cpu: its host copies have these same sizes
        out["saved_peak_bytes"] = counter.peak_resident_bytes
        if system == "keep-all":
            t0 = counter.timeline[0][0] if counter.timeline else 0.0
            tl = [(t - t0, b) for t, b in counter.timeline]
            out["timeline"] = tl[:: max(len(tl) // 400, 1)]
        counter.close()
        if system == "save_on_cpu":
            out["note"] = "on CPU the saved copies stay in host memory (nothing is freed)"
    return out


def _trim() -> None:
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def engine_bandwidth(root: str, total_mib: int = 256, piece_mib: int = 16) -> dict[str, Any]:
    """Write then read ``total_mib`` through the native store alone (16 MiB objects)."""
    import numpy as np

    from hector.runtime.offload import TensorStore

    with TensorStore(root) as store:
        pieces = max(total_mib // piece_mib, 1)
        bufs = [np.full(piece_mib << 20, i, dtype=np.uint8) for i in range(pieces)]
        start = time.perf_counter()
        keys = [store.write_array(b) for b in bufs]
        for k in keys:
            store.wait(k)
        write_s = time.perf_counter() - start
        start = time.perf_counter()
        for k, b in zip(keys, bufs, strict=True):
            store.read(k, b.ctypes.data, b.nbytes)
        for k in keys:
            store.wait(k)
        read_s = time.perf_counter() - start
        total = pieces * (piece_mib << 20)
        return {
            "bytes": total,
            "direct": store.direct,
            "threads": store.threads,
            "write_bandwidth": total / write_s,
            "read_bandwidth": total / read_s,
        }


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


# ---- driver -----------------------------------------------------------------------------------


def _plot(path: str, results: list[dict[str, Any]], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    for r in results:
        tl = r.get("timeline")
        if not tl:
            continue
        t0 = tl[0][0]
        ax.step(
            [(t - t0) * 1e3 for t, _ in tl],
            [b / 2**20 for _, b in tl],
            where="post",
            label=r["system"],
        )
    ax.set_xlabel("time in one training step (ms)")
    ax.set_ylabel("saved activations resident (MiB)")
    ax.set_title(title, fontsize=10)
    ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    """Run every system in a fresh subprocess, print a table, write JSON / plot."""
    from tqdm import tqdm

    from hector import __version__
    from hector.bench._common import format_table, host_info, measure_in_subprocess, write_json
    from hector.runtime.offload import IO_BACKEND, default_root

    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    bad = [s for s in systems if s not in SYSTEMS]
    if bad or not systems:
        print(
            f"error: unknown system(s) {', '.join(bad)}; choose from {', '.join(SYSTEMS)}",
            file=sys.stderr,
        )
        return 1
    for name in ("layers", "hidden", "heads", "seq", "batch", "vocab", "steps"):
        if getattr(args, name) < 1:
            print(f"error: --{name} must be >= 1", file=sys.stderr)
            return 1
    if args.hidden % args.heads:
        print("error: --hidden must be divisible by --heads", file=sys.stderr)
        return 1
    root = args.root or default_root()
    config = {
        k: getattr(args, k) for k in ("model", "layers", "hidden", "heads", "seq", "batch", "vocab")
    }
    raw = raw_disk_bandwidth(root, args.raw_mib)
    engine = engine_bandwidth(root, args.raw_mib)
    for what in ("write", "read"):
        engine[f"{what}_vs_raw"] = round(engine[f"{what}_bandwidth"] / raw[f"{what}_bandwidth"], 4)
    results: list[dict[str, Any]] = []
    for system in tqdm(systems, desc="offload bench", file=sys.stderr):
        payload = {
            "system": system,
            "config": config,
            "steps": args.steps,
            "warmup": args.warmup,
            "root": root,
        }
        answer = measure_in_subprocess("hector.bench.offload", payload)
        entry: dict[str, Any] = {"system": system}
        if "error" in answer:
            entry.update(status="error", error=answer["error"])
        else:
            import statistics

            times = answer.pop("times_ms")
            entry.update(
                status="ok",
                median_ms=round(statistics.median(times), 3),
                min_ms=round(min(times), 3),
                max_ms=round(max(times), 3),
                runs=len(times),
                peak_mem_bytes=answer.pop("peak_rss_bytes"),
                **answer,
            )
        results.append(entry)
    base = next((r for r in results if r["system"] == "keep-all" and r["status"] == "ok"), None)
    for r in results:
        if base is None or r["status"] != "ok":
            continue
        r["step_time_overhead"] = round(r["median_ms"] / base["median_ms"] - 1, 4)
        if base.get("saved_peak_bytes"):
            r["saved_peak_reduction"] = round(
                1 - r["saved_peak_bytes"] / base["saved_peak_bytes"], 4
            )
        for what in ("write", "read"):
            bw = r.get(f"{what}_bandwidth")
            if bw:
                r[f"{what}_bandwidth_vs_raw"] = round(bw / raw[f"{what}_bandwidth"], 4)
    rows = []
    for r in results:
        rows.append(
            {
                "system": r["system"],
                "median ms": r.get("median_ms"),
                "overhead": r.get("step_time_overhead"),
                "saved MiB": (r["saved_peak_bytes"] / 2**20) if r.get("saved_peak_bytes") else None,
                "saved -%": r.get("saved_peak_reduction"),
                "RSS MiB": (r["peak_mem_bytes"] / 2**20) if r.get("peak_mem_bytes") else None,
                "W MB/s": (r["write_bandwidth"] / 1e6) if r.get("write_bandwidth") else None,
                "R MB/s": (r["read_bandwidth"] / 1e6) if r.get("read_bandwidth") else None,
                "error": r.get("error"),
            }
        )
    cols = [(k, k) for k in rows[0]] if rows else []
    print(format_table(rows, cols))
    print(
        f"raw disk ({'O_DIRECT' if raw['direct'] else 'buffered'}): "
        f"write {raw['write_bandwidth'] / 1e6:.0f} MB/s, read {raw['read_bandwidth'] / 1e6:.0f} "
        f"MB/s; engine alone ({IO_BACKEND}): write {engine['write_bandwidth'] / 1e6:.0f} MB/s "
        f"({engine['write_vs_raw']:.0%}), read {engine['read_bandwidth'] / 1e6:.0f} MB/s "
        f"({engine['read_vs_raw']:.0%})"
    )
    record = {
        "benchmark": "offload",
        **config,
        "mode": "training",
        "device": "cpu",
        "hector_version": __version__,
        "host": host_info("cpu"),
        "io_backend": IO_BACKEND,
        "raw_disk": raw,
        "engine_alone": engine,
        "results": [{k: v for k, v in r.items() if k != "timeline"} for r in results],
    }
    if args.json:
        write_json(args.json, record)
    if args.plot:
        _plot(
            args.plot,
            [r for r in results if r.get("timeline")],
            f"{args.model}: saved activations over one step",
        )
    return 0 if all(r["status"] == "ok" for r in results) else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--memory-worker":
        print(json.dumps(_worker(json.loads(sys.argv[2]))))
    else:
        print("usage: python -m hector.bench.offload --memory-worker JSON", file=sys.stderr)
        sys.exit(2)
