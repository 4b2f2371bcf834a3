"""Raw bandwidth and CPU cost of the native tensor store, per backend, in one run.

Every system runs in its own fresh subprocess, in rounds that alternate the systems (so the
machine's changing load falls on all of them alike); the record keeps every round and the
medians. Systems:

* ``io_uring`` and ``threads``: the store of this tree (``hector.runtime.offload``);
* ``previous`` (with ``--baseline-rev``): the store's ``offload.cpp`` of an older commit, built
  here into a private library and driven through its v1 C ABI (its own thread pool, a bounce
  copy of every unaligned chunk) -- the design the counters' ``copies_avoided_bytes`` refers to.

Two workloads per system: ``raw`` (page-aligned objects: the disk's figure the in-training
bandwidth is compared against, :func:`hector.runtime.offload.measure_raw_bandwidth`) and
``tensors`` (objects at the addresses PyTorch's CPU allocator gives, 64 or 3648 modulo 4096,
read back into buffers of such addresses). CPU seconds per GB are the process's user + system
time (all its threads, io_uring's kernel workers included) over the bytes moved. Last, the
time a small read started behind a big write takes (a prefetch behind a forward's offloads).

``hector bench offload-store --json FILE [--root DIR] [--mib 256] [--rounds 3]
[--baseline-rev REV]``; each system's process is ``python3 -m hector_bench.offload_store
--system NAME ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import hector
from hector.tools import cli_args as _args

from . import _common

#: The checkout this module is in (``--baseline-rev`` reads older commits from its git).
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Sizes of the "tensors" workload, MiB-scaled activations and small ones (bytes).
TENSOR_SIZES = [4 << 20, 1 << 20, 3 << 20, 256 << 10, 6 << 20, 100_000, 2 << 20, 12_288]
TORCH_PHASES = [64, 3648]


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process (every thread)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _tensor_plan(total: int) -> list[tuple[int, int, int]]:
    """(size, source phase, destination phase) of each object of the tensors workload."""
    plan, used, i = [], 0, 0
    while used < total:
        size = TENSOR_SIZES[i % len(TENSOR_SIZES)]
        plan.append((size, TORCH_PHASES[i % 2], TORCH_PHASES[(i // 2) % 2]))
        used += size
        i += 1
    return plan


class _Previous:
    """The v1 C ABI of an older store library: open / write / read / wait / remove / close."""

    def __init__(self, library: str, root: str, threads: int, chunk: int) -> None:
        import ctypes

        lib = ctypes.CDLL(library)
        p, i32, i64 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64
        lib.hector_store_open.argtypes = [ctypes.c_char_p, i32, i64, i32, ctypes.POINTER(p)]
        lib.hector_store_open.argtypes += [ctypes.c_char_p, i64]
        lib.hector_store_write.argtypes = [p, p, i64, ctypes.POINTER(i64)]
        lib.hector_store_read.argtypes = [p, i64, p, i64]
        for name in ("hector_store_wait", "hector_store_remove"):
            getattr(lib, name).argtypes = [p, i64]
        lib.hector_store_close.argtypes = [p]
        self.lib, self.ctypes = lib, ctypes
        handle, err = p(), ctypes.create_string_buffer(512)
        code = lib.hector_store_open(
            root.encode(), threads, chunk, 1, ctypes.byref(handle), err, len(err)
        )
        if code != 0:
            raise RuntimeError(f"previous store: {err.value.decode()}")
        self.h = handle.value
        self.backend, self.backend_reason = "previous", f"thread pool of {library}"

    def write(self, address: int, nbytes: int) -> int:
        key = self.ctypes.c_int64(0)
        assert self.lib.hector_store_write(self.h, address, nbytes, self.ctypes.byref(key)) == 0
        return int(key.value)

    def read(self, key: int, address: int, nbytes: int) -> None:
        assert self.lib.hector_store_read(self.h, key, address, nbytes) == 0

    def wait(self, key: int) -> None:
        code = self.lib.hector_store_wait(self.h, key)
        if code != 0:
            raise RuntimeError(f"previous store: operation on {key} failed ({code})")

    def remove(self, key: int) -> None:
        self.lib.hector_store_remove(self.h, key)

    def stats(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        self.lib.hector_store_close(self.h)


def _open(system: str, root: str, library: str | None, threads: int, chunk: int) -> Any:
    from hector.runtime.offload import TensorStore

    if system == "previous":
        assert library is not None
        return _Previous(library, root, threads, chunk)
    return TensorStore(root, threads=threads, chunk_bytes=chunk, backend=system)


def _run_workload(store: Any, plan: list[tuple[int, int, int]], in_phase: bool) -> dict:
    """Writes every object of plan (all in flight), waits, reads them back, checks the bytes."""
    import numpy as np

    from hector.runtime.offload import empty_in_phase

    sources = []
    for i, (size, phase, _) in enumerate(plan):
        a = empty_in_phase(size, phase)
        a[:] = (np.arange(size, dtype=np.uint32) * 2654435761 >> 13).astype(np.uint8) ^ i
        sources.append(a)
    total = sum(size for size, _, _ in plan)
    cpu0, t0 = _cpu_seconds(), time.perf_counter()
    keys = [store.write(a.ctypes.data, a.nbytes) for a in sources]
    t_calls = time.perf_counter()
    for k in keys:
        store.wait(k)
    cpu1, t1 = _cpu_seconds(), time.perf_counter()
    targets = [
        empty_in_phase(size, phase if in_phase else dst_phase) for (size, phase, dst_phase) in plan
    ]
    for out in targets:  # fault the pages in first: the reads are timed, not the allocator
        out[:] = 0
    cpu_alloc, t_alloc = _cpu_seconds(), time.perf_counter()
    for k, out in zip(keys, targets, strict=True):
        store.read(k, out.ctypes.data, out.nbytes)
    t_read_calls = time.perf_counter()
    for k in keys:
        store.wait(k)
    cpu2, t2 = _cpu_seconds(), time.perf_counter()
    for k, a, out in zip(keys, sources, targets, strict=True):
        if not np.array_equal(a, out):
            raise RuntimeError(f"object {k} read back differs from what was written")
        store.remove(k)
    return {
        "bytes": total,
        "objects": len(plan),
        "write_MBps": total / (t1 - t0) / 1e6,
        "read_MBps": total / (t2 - t_alloc) / 1e6,
        "write_call_us": (t_calls - t0) / len(plan) * 1e6,
        "read_call_us": (t_read_calls - t_alloc) / len(plan) * 1e6,
        "write_cpu_s_per_GB": (cpu1 - cpu0) / total * 1e9,
        "read_cpu_s_per_GB": (cpu2 - cpu_alloc) / total * 1e9,
    }


def _read_behind_write(store: Any, repeats: int = 9) -> float:
    """Median ms for a 64 KiB read (a prefetch) started 2 ms after a 32 MiB write (a forward's
    offloads) to complete: how long a backward pass waits behind queued writes."""
    from hector.runtime.offload import empty_in_phase

    small = empty_in_phase(64 << 10)
    small[:] = 3
    key = store.write(small.ctypes.data, small.nbytes)
    store.wait(key)
    big = empty_in_phase(32 << 20)
    big[:] = 1
    out = empty_in_phase(small.nbytes)
    waits = []
    for _ in range(repeats):
        big_key = store.write(big.ctypes.data, big.nbytes)
        time.sleep(0.002)
        t0 = time.perf_counter()
        store.read(key, out.ctypes.data, out.nbytes)
        store.wait(key)
        waits.append(time.perf_counter() - t0)
        store.wait(big_key)
        store.remove(big_key)
    store.remove(key)
    return statistics.median(waits) * 1e3


def _child(args: argparse.Namespace) -> None:
    """One system in this (fresh) process: both workloads, one JSON line on stdout."""
    os.environ.pop("HECTOR_OFFLOAD_BACKEND", None)
    total = args.mib << 20
    objects = 8
    raw_plan = [(total // objects, 0, 0)] * objects
    tensor_plan = _tensor_plan(total)
    store = _open(args.system, args.root, args.library, args.threads, args.chunk)
    try:
        result: dict[str, Any] = {"system": args.system, "backend": store.backend}
        result["backend_reason"] = store.backend_reason
        _run_workload(store, raw_plan[:2], True)  # warm-up: threads, files, staging
        before = store.stats()
        result["raw"] = _run_workload(store, raw_plan, True)
        result["tensors_in_phase"] = _run_workload(store, tensor_plan, True)
        result["tensors_torch_phase"] = _run_workload(store, tensor_plan, False)
        after = store.stats()
        result["read_behind_write_ms"] = _read_behind_write(store)
        levels = ("bytes_on_disk", "peak_bytes_on_disk", "registered_bytes")
        result["stats"] = {
            k: v - before.get(k, 0) if isinstance(v, int) and k not in levels else v
            for k, v in after.items()
        }
    finally:
        store.close()
    print(json.dumps(result))


#: The store's sources: one file before the store was split by job, these files after.
STORE_SOURCES = (
    "crc32c.cpp",
    "offload_abi.cpp",
    "store_faults.cpp",
    "store_files.cpp",
    "store_jobs.cpp",
    "store_workers.cpp",
)


def _git(*args: str) -> bytes:
    return subprocess.run(["git", "-C", REPO, *args], check=True, capture_output=True).stdout


def _build_previous(rev: str, workdir: str) -> str:
    """Compiles the store of commit rev into workdir/libprevious.so; returns its path."""
    listed = _git("ls-tree", "-r", "--name-only", rev, "runtime/src", "runtime/include/hector")
    paths = listed.decode().split()
    for path in paths:
        dest = os.path.join(workdir, path)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "wb") as f:
            f.write(_git("show", f"{rev}:{path}"))
    single = "runtime/src/offload.cpp"
    names = [single] if single in paths else [f"runtime/src/{n}" for n in STORE_SOURCES]
    if any(n.endswith(("io_uring.cpp", "workers.cpp")) for n in names):
        names.append("runtime/src/io_uring_ring.cpp")
    library = os.path.join(workdir, "libprevious.so")
    subprocess.run(
        ["c++", "-std=c++17", "-O3", "-shared", "-fPIC", "-pthread"]
        + [
            "-I",
            os.path.join(workdir, "runtime/include"),
            "-I",
            os.path.join(workdir, "runtime/src"),
        ]
        + [os.path.join(workdir, n) for n in names]
        + ["-o", library],
        check=True,
    )
    return library


def _median(records: list[dict], workload: str, key: str) -> float:
    return statistics.median(r[workload][key] for r in records)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of the tensor store benchmark."""
    p.add_argument("--json", default=None, help="write the record here")
    p.add_argument("--root", default=None, help="offload root (default: the store's)")
    p.add_argument("--mib", type=_args.RAW_MIB, default=256, help="MiB moved per workload")
    p.add_argument("--rounds", type=_args.RUNS, default=3)
    p.add_argument("--threads", type=_args.THREADS, default=4)
    p.add_argument("--chunk", type=_args.POSITIVE_DIM, default=4 << 20, help="chunk bytes")
    p.add_argument("--baseline-rev", default=None, help="commit of the previous store")
    p.add_argument("--system", help=argparse.SUPPRESS)
    p.add_argument("--library", help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    """Run the rounds (or, with ``--system``, one system in this process), print a summary
    table and write the record."""
    if args.system:
        _child(args)
        return 0
    from hector.runtime.offload import default_root

    root = args.root or default_root()
    systems = ["io_uring", "threads"]
    library = None
    with tempfile.TemporaryDirectory() as work:
        if args.baseline_rev:
            library = _build_previous(args.baseline_rev, work)
            systems.append("previous")
        records: dict[str, list[dict]] = {s: [] for s in systems}
        for _ in range(args.rounds):
            for system in systems:
                cmd = [sys.executable, "-m", __name__, "--system", system, "--root", root]
                cmd += ["--mib", str(args.mib), "--threads", str(args.threads)]
                cmd += ["--chunk", str(args.chunk)]
                if library:
                    cmd += ["--library", library]
                out = subprocess.run(cmd, check=False, capture_output=True, text=True)
                if out.returncode != 0:
                    why = (out.stderr.strip().splitlines() or ["no output"])[-1]
                    print(f"error: system {system}: {why}", file=sys.stderr)
                    return 1
                records[system].append(json.loads(out.stdout.strip().splitlines()[-1]))
    workloads = ("raw", "tensors_in_phase", "tensors_torch_phase")
    keys: tuple[str, ...] = ("write_MBps", "read_MBps", "write_cpu_s_per_GB")
    keys += ("read_cpu_s_per_GB", "write_call_us", "read_call_us")
    summary = {
        s: {w: {k: _median(records[s], w, k) for k in keys} for w in workloads} for s in systems
    }
    behind = {s: statistics.median(r["read_behind_write_ms"] for r in records[s]) for s in systems}
    record = {
        "benchmark": "offload-store",
        "what": "native tensor store, raw bandwidth and CPU per byte per backend",
        "hector_version": hector.__version__,
        "host": _common.host_info(),
        "load": os.getloadavg(),
        "uname": os.uname().release,
        "root": root,
        "mib": args.mib,
        "rounds": args.rounds,
        "threads": args.threads,
        "chunk_bytes": args.chunk,
        "baseline_rev": args.baseline_rev,
        "median": summary,
        "read_behind_write_ms_median": behind,
        "rounds_records": records,
    }
    print(
        f"{'system':10} {'workload':20} {'write MB/s':>10} {'read MB/s':>10} "
        f"{'w cpu s/GB':>10} {'r cpu s/GB':>10} {'write() us':>10} {'read() us':>10}"
    )
    for s in systems:
        for w in workloads:
            m = summary[s][w]
            print(
                f"{s:10} {w:20} {m['write_MBps']:10.0f} {m['read_MBps']:10.0f} "
                f"{m['write_cpu_s_per_GB']:10.3f} {m['read_cpu_s_per_GB']:10.3f} "
                f"{m['write_call_us']:10.1f} {m['read_call_us']:10.1f}"
            )
    print("read behind write (ms): " + ", ".join(f"{s} {v:.1f}" for s, v in behind.items()))
    print(f"load {record['load']}")
    if args.json:
        _common.write_json(args.json, record)
        print(f"record written to {args.json}")
    return 0


if __name__ == "__main__":  # one system's process (--system), started by run()
    _parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(_parser)
    sys.exit(run(_parser.parse_args()))
