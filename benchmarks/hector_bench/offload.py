"""``hector bench offload``: activation offloading vs keep-all, save_on_cpu and checkpointing.

Trains a GPT-2-style decoder or a BERT-style encoder (random init) with each system, each in a
fresh subprocess, and reports per system: median step time, peak bytes of saved activations
resident in memory, peak resident memory (RSS) of the process above its baseline, bytes
written/read by the offload store and its achieved write/read bandwidth (bytes moved / time
with at least one request in flight), next to the raw bandwidth of the same disk measured in
the same run (sequential 4 MiB ``O_DIRECT`` writes then reads of one file). ``--plot`` draws
the saved-activation bytes resident over one training step for keep-all and the offload
systems. After its timed steps each system runs one more step traced at every scope
boundary (:mod:`hector_bench.memory_trace`: resident memory against the heap in use), drawn
next to the JSON record as ``<record>_memory.png``. Module-level imports stay light:
``hector --help`` imports this file.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from hector import cli_args as _args

from .plot_args import PLOT

SYSTEMS = (
    "keep-all",
    "keep-all-mmap",
    "save_on_cpu",
    "checkpoint",
    "hector-all",
    "hector-adaptive",
    "deepspeed-checkpoint",
    "deepspeed-cpu-checkpoint",
)
#: Systems that run only where an optional package imports (``deepspeed``); where it does not,
#: or where the package refuses the configuration, their row says so (status "unsupported").
OPTIONAL = ("deepspeed-checkpoint", "deepspeed-cpu-checkpoint")
#: Variants a system can run under, as ``<system>+<variant>`` (``keep-all+thp``): the extra
#: environment of its worker process. ``thp``: PyTorch's own huge-page allocation (every CPU
#: block of 2 MiB or more marked ``madvise(MADV_HUGEPAGE)``, so it faults in 2 MiB at a time;
#: read at the first allocation, hence set before the process starts).
#: ``calloc``: Hector's caching CPU allocator, installed before the model is built
#: (:func:`hector.offload.enable_caching_allocator`, default limits); hector's systems
#: otherwise install it as their cache is made (``release_memory="auto"``), after the model.
#: ``torchalloc``: PyTorch's own CPU allocator throughout (``HECTOR_CPU_ALLOCATOR=pytorch``:
#: hector's cache hands freed activations back with ``madvise`` instead).
VARIANTS: dict[str, dict[str, str]] = {
    "thp": {"THP_MEM_ALLOC_ENABLE": "1"},
    "calloc": {"HECTOR_BENCH_CPU_ALLOCATOR": "caching"},
    "torchalloc": {"HECTOR_CPU_ALLOCATOR": "pytorch"},
}
#: Variants that are options of a hector system's cache rather than environment:
#: ``fwdtrim`` trims the heap at the forward's end instead of as backward starts.
#: ``measuredtrim`` decides its trims by what the steps spend (``trim_rule="measured"``).
CACHE_VARIANTS: dict[str, dict[str, Any]] = {
    "fwdtrim": {"trim_point": "forward end"},
    "measuredtrim": {"trim_rule": "measured"},
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``hector bench offload``."""
    from hector.offload.cache import GRANULARITIES

    parser.add_argument("--model", choices=("gpt", "bert"), default="gpt")
    parser.add_argument("--layers", type=_args.LAYERS, default=4)
    parser.add_argument("--hidden", type=_args.WIDTH, default=256)
    parser.add_argument("--heads", type=_args.HEADS, default=4)
    parser.add_argument("--seq", type=_args.SEQ, default=128)
    parser.add_argument("--batch", type=_args.BATCH, default=4)
    parser.add_argument("--vocab", type=_args.VOCAB, default=1024)
    parser.add_argument("--steps", type=_args.RUNS, default=4, help="timed steps per system")
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where the model trains (default cpu). cuda: peak memory is torch.cuda's peak of "
        "allocated bytes above what the timed steps started with (not RSS), steps are timed "
        "to their kernels' end, save_on_cpu pins its host copies",
    )
    parser.add_argument(
        "--threads",
        type=_args.THREADS,
        default=1,
        help="torch intra-op threads per system (default 1: the I/O workers and other "
        "processes get the other cores; 2 threads on a shared 2-core machine ran 3-5x slower)",
    )
    parser.add_argument(
        "--warmup",
        type=_args.WARMUP,
        default=2,
        help="untimed steps first (hector-adaptive: after the steps it profiles and plans on)",
    )
    parser.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help=f"comma-separated subset of {SYSTEMS}, in the order to run (repeat them for "
        "interleaved rounds); a system may name a variant: keep-all+thp runs under PyTorch's "
        "huge-page allocation (THP_MEM_ALLOC_ENABLE=1), +calloc under Hector's caching CPU "
        "allocator installed before the model, +torchalloc under PyTorch's own allocator",
    )
    parser.add_argument(
        "--release-memory",
        choices=("auto", "advise", "mmap", "trim", "off"),
        default="auto",
        help="hector systems: how freed activations leave the process (TensorCache "
        "release_memory; default auto: under Hector's caching CPU allocator, which the "
        "cache installs)",
    )
    parser.add_argument(
        "--granularity",
        choices=GRANULARITIES,
        default="block",
        help="hector systems: offload scopes (TensorCache granularity; default block)",
    )
    parser.add_argument("--root", default=None, help="offload root (default: $TMPDIR)")
    parser.add_argument(
        "--raw-mib", type=_args.RAW_MIB, default=256, help="raw disk test size (MiB)"
    )
    parser.add_argument(
        "--raw-probes",
        type=_args.PROBES,
        default=3,
        help="raw disk probes just before and just after each hector run (default 3 each); "
        "the run's bandwidth is compared with their median",
    )
    parser.add_argument("--json", metavar="PATH", default=None, help="write the JSON record")
    parser.add_argument(
        "--plot", type=PLOT, metavar="PATH", default=None, help="memory-over-time plot"
    )
    parser.add_argument(
        "--frontier",
        type=PLOT,
        metavar="PATH",
        default=None,
        help="step time vs peak memory plot (default: <json>_frontier.png next to --json)",
    )
    parser.add_argument(
        "--pool",
        nargs="+",
        metavar="RECORD",
        default=None,
        help="run nothing: pool the rounds of earlier records of one configuration (their "
        "--json files) into one table, each round still against its own keep-all; with "
        "--json, write it (and its frontier plot)",
    )


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

    from hector.offload import TensorCache, huge_pages_in_effect
    from hector.runtime import cpu_allocator
    from hector_bench._common import KernelTime, PeakRSS
    from hector_bench.offload_models import build_model

    torch.set_num_threads(int(payload.get("threads", torch.get_num_threads())))
    system = payload["system"]
    cfg = payload["config"]
    if os.environ.get("HECTOR_BENCH_CPU_ALLOCATOR") == "caching":
        from hector.offload import enable_caching_allocator

        enable_caching_allocator()
    if system == "keep-all-mmap":
        from hector.offload.cache import _release_freed_memory

        _release_freed_memory(True)  # the allocator setting hector's cache makes, nothing else
    device = torch.device(payload.get("device", "cpu"))
    model = build_model(
        cfg["model"], cfg["layers"], cfg["hidden"], cfg["heads"], cfg["vocab"], cfg["seq"]
    ).to(device)
    try:
        forward, cache = _setup_system(system, model, payload)
    except _Unsupported as err:
        return {"unsupported": str(err)}
    step = _make_step(system, model, forward, {**cfg, "device": device.type})
    gpu = _DeviceMemory(device)
    try:
        done = run_until_planned(step, cache)
        for i in range(done, done + payload["warmup"]):
            step(i)
    except _Unsupported as err:
        return {"unsupported": str(err)}
    before = _io_snapshot(cache)
    if cache is not None:  # the timed steps' peak, not warm-up's
        cache.peak_resident_bytes = cache.resident_bytes
        cache.timeline.clear()
    _trim()  # return memory freed by warm-up to the OS so the RSS peak is this phase's
    rss = PeakRSS()
    rss.start()
    kernel = KernelTime()
    kernel.start()
    gpu.start()
    times = []
    for i in range(payload["steps"]):
        start = time.perf_counter()
        step(i)  # on a GPU it ends when its kernels have run: it reads the loss back
        times.append((time.perf_counter() - start) * 1e3)
    out: dict[str, Any] = {
        "times_ms": times,
        "kernel_per_step": kernel.per(payload["steps"]),
        "peak_rss_bytes": rss.peak_bytes(),
        "rss_method": rss.method,
        "huge_pages": huge_pages_in_effect(),
        "cpu_allocator": cpu_allocator.stats(),  # empty unless installed (calloc, or hector's)
    }
    if gpu.active:
        # The table's peak memory on a GPU: the device's; the host's stays in the record.
        out["host_peak_rss_bytes"] = out["peak_rss_bytes"]
        out["peak_rss_bytes"] = gpu.peak_bytes()
        out["rss_method"] = gpu.method
        out["gpu"] = torch.cuda.get_device_name(device)
    if cache is not None:
        out.update(_cache_figures(cache, before, _io_snapshot(cache), payload["steps"]))
        cache.timeline.clear()  # one more step with the timeline recorded alone
        cache._t0 = time.perf_counter()
        step(0)
        out["timeline"] = cache.timeline[:: max(len(cache.timeline) // 400, 1)]
        out["memory_trace"] = None if gpu.active else _trace(model, step)
        cache.close()  # what closing the wrapped module does
        return out
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
    out["memory_trace"] = None if gpu.active else _trace(model, step)
    if system == "save_on_cpu":
        out["note"] = "on CPU the saved copies stay in host memory (nothing is freed)"
    if system.startswith("deepspeed"):
        out["note"] = "saved bytes: what the keep-everything counter sees under DeepSpeed"
    return out


class _DeviceMemory:
    """On a CUDA device: the timed steps' peak of allocated bytes above what they started with
    (``torch.cuda.max_memory_allocated``). On CPU it does nothing (``active`` is False)."""

    method = "torch.cuda.max_memory_allocated above the bytes allocated as the timed steps start"

    def __init__(self, device: Any) -> None:
        import torch

        self.active = device.type == "cuda"
        self.device = device
        self.base = 0
        self._torch = torch

    def start(self) -> None:
        """Before the timed steps: the peak counter restarts from what is allocated now."""
        if self.active:
            self._torch.cuda.synchronize(self.device)
            self._torch.cuda.reset_peak_memory_stats(self.device)
            self.base = self._torch.cuda.memory_allocated(self.device)

    def peak_bytes(self) -> int:
        """The peak of allocated bytes since :meth:`start`, above what was allocated then."""
        return int(self._torch.cuda.max_memory_allocated(self.device) - self.base)


def run_until_planned(step: Callable[[int], Any], cache: Any, limit: int = 16) -> int:
    """Run ``step(0)``, ``step(1)``, ... until an adaptive ``cache`` has made its plan (its
    warm-up, profiled and planning steps: timing them would mislead); return how many ran
    (none for another cache, or none at all).

    Raises:
        RuntimeError: no plan after ``limit`` steps.
    """
    done = 0
    if cache is None or cache.policy != "adaptive":
        return done
    while cache.plan is None and done < limit:
        step(done)
        done += 1
    if cache.plan is None:
        raise RuntimeError(f"hector-adaptive made no plan in {done} steps")
    return done


def _kernel_columns(kernel: dict[str, Any] | None) -> dict[str, Any]:
    """The printed table's view of what the kernel did per timed step: the training thread's
    system time (page faults, ``madvise``, trims: time the step waits for) and the process's
    minor page faults in thousands."""
    kernel = kernel or {}
    faults = kernel.get("minor_faults")
    return {
        "sys ms": kernel.get("thread_system_ms"),
        "faults k": None if faults is None else round(faults / 1e3, 1),
        "others ms": kernel.get("others_cpu_ms"),
        "steal ms": kernel.get("host_steal_ms"),
    }


def _trace_columns(trace: dict[str, Any] | None) -> dict[str, Any]:
    """The printed table's view of a traced step: where its memory peaked, and how much of
    the resident memory there was freed memory the allocator kept (resident minus in use)."""
    peak = (trace or {}).get("peak")
    if not peak:
        return {"traced peak at": None, "kept free MiB": None}
    kept = None if peak[3] is None else round(peak[2] - peak[3], 1)
    return {"traced peak at": peak[0], "kept free MiB": kept}


def _trace(model: Any, step: Any) -> dict[str, Any]:
    """Two more steps, the second traced at every scope boundary
    (:mod:`hector_bench.memory_trace`), relative to a trimmed heap as the timed steps were:
    its figures are on the scale of the run's peak RSS above baseline."""
    from hector.offload import default_scopes
    from hector_bench.memory_trace import trace_step

    _trim()
    return trace_step(model, default_scopes(model), step, settle=1)


class _Unsupported(RuntimeError):
    """The system cannot run here (package missing, or it refuses this configuration)."""


def _setup_system(system: str, model: Any, payload: dict[str, Any]) -> tuple[Any, Any]:
    """The callable that runs the forward, and the hector cache (None for the others)."""
    from hector.offload import wrap

    if system in ("hector-all", "hector-adaptive"):
        policy = "all" if system == "hector-all" else "adaptive"
        release = payload.get("release_memory", "auto")
        wrapped = wrap(
            model,
            policy,
            root=payload.get("root"),
            record_timeline=True,
            release_memory=False if release == "off" else release,
            granularity=payload.get("granularity", "block"),
            **payload.get("cache_options", {}),
        )
        return wrapped, wrapped.cache
    if system == "checkpoint":
        from torch.utils.checkpoint import checkpoint

        for block in model.blocks:
            original = block.forward
            block.forward = lambda x, _f=original: checkpoint(_f, x, use_reentrant=True)
    elif system.startswith("deepspeed"):
        device = payload.get("device", "cpu")
        _deepspeed_checkpointing(model, cpu=system == "deepspeed-cpu-checkpoint", device=device)
    return model, None


def _deepspeed_checkpointing(model: Any, cpu: bool, device: str = "cpu") -> None:
    """Wrap each block in DeepSpeed's activation checkpointing (``checkpoint_in_cpu=cpu``)."""
    os.environ.setdefault("DS_ACCELERATOR", device)
    try:
        import importlib

        import torch.distributed as dist

        # Imported by name: an optional package without type information.
        deepspeed = importlib.import_module("deepspeed")
        ds_ckpt = importlib.import_module(
            "deepspeed.runtime.activation_checkpointing.checkpointing"
        )
    except Exception as err:  # noqa: BLE001  (any import failure means: not available here)
        raise _Unsupported(f"deepspeed does not import: {type(err).__name__}: {err}") from None
    if not dist.is_initialized():  # DeepSpeed's checkpointing asks for a process group
        for k, v in (("MASTER_ADDR", "127.0.0.1"), ("RANK", "0"), ("WORLD_SIZE", "1")):
            os.environ.setdefault(k, v)
        os.environ.setdefault("LOCAL_RANK", "0")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        deepspeed.init_distributed(dist_backend="gloo", verbose=False)
    ds_ckpt.configure(
        None,
        partition_activations=False,
        checkpoint_in_cpu=cpu,
        contiguous_checkpointing=False,
        num_checkpoints=len(model.blocks),
        synchronize=False,
        profile=False,
    )
    for block in model.blocks:
        original = block.forward
        block.forward = lambda x, _f=original: ds_ckpt.checkpoint(_f, x)


def _make_step(system: str, model: Any, forward: Any, cfg: dict[str, Any]) -> Any:
    """One training step (forward, loss, backward, SGD update) of ``system``."""
    import torch
    import torch.nn.functional as F

    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    device = cfg.get("device", "cpu")
    batches = [
        torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"]), generator=gen).to(device)
        for _ in range(4)
    ]

    def step(i: int, counting: bool = False) -> float:
        ids = batches[i % len(batches)]
        ctx: Any = (
            torch.autograd.graph.save_on_cpu(pin_memory=device == "cuda")
            if system == "save_on_cpu" and not counting
            else _null()
        )
        try:
            with ctx:
                logits = forward(ids)
                loss = F.cross_entropy(logits.reshape(-1, cfg["vocab"]), ids.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
        except (RuntimeError, ValueError, AssertionError) as err:
            if system.startswith("deepspeed"):  # DeepSpeed refusing this device/config
                raise _Unsupported(
                    f"deepspeed failed in training: {type(err).__name__}: {err}"
                ) from None
            raise
        opt.step()
        return float(loss.detach())  # on a GPU this waits for the step's kernels, opt.step's too

    return step


def _io_snapshot(cache: Any) -> dict[str, Any] | None:
    """The cache's hook timings and the store's counters now (None without a cache)."""
    if cache is None:
        return None
    return {
        "timing": cache.time_breakdown(),
        "store": dict(cache.store.stats()),
        "read_wait_s": cache.read_wait_s,
        "counters": dict(cache.counters),
        "released_bytes": cache.released_bytes,
    }


def _cache_figures(
    cache: Any, before: dict[str, Any] | None, after: dict[str, Any] | None, steps: int
) -> dict[str, Any]:
    """Per-step I/O, bandwidth and time breakdown of a hector system over the timed steps."""
    assert before is not None
    assert after is not None
    io0, io1 = before["store"], after["store"]

    def delta(key: str) -> int:
        return int(io1.get(key, 0) - io0.get(key, 0))

    written, read = delta("bytes_written"), delta("bytes_read")
    wbusy, rbusy = delta("write_busy_ns"), delta("read_busy_ns")
    steps = max(steps, 1)
    breakdown = {
        k: round((after["timing"][k] - before["timing"][k]) / steps / 1e6, 3)
        for k in after["timing"]
        if k.endswith("_ns")
    }
    store_phases = {
        k: round(delta(k) / steps / 1e6, 3)
        for k, v in io1.items()
        if k.endswith("_ns")
        and isinstance(v, int | float)
        and k not in ("write_busy_ns", "read_busy_ns")
    }
    stats = cache.stats()
    counters = {
        # Averages, not floors: one trim in three steps is not zero trims per step.
        k: round((after["counters"][k] - before["counters"][k]) / steps, 2)
        for k in after["counters"]
    }
    return {
        "saved_peak_bytes": cache.peak_resident_bytes,
        "trim_point": cache.trim_point,
        "bytes_written_per_step": written // steps,
        "bytes_read_per_step": read // steps,
        "objects_written_per_step": delta("objects_written") / steps,
        "files_reused_per_step": delta("files_reused") / steps,
        "write_bandwidth": written / (wbusy * 1e-9) if wbusy else None,
        "read_bandwidth": read / (rbusy * 1e-9) if rbusy else None,
        "write_busy_ms_per_step": round(wbusy / steps / 1e6, 3),
        "read_busy_ms_per_step": round(rbusy / steps / 1e6, 3),
        "direct_io": cache.store.direct,
        "io_backend": io1.get("backend", _default_backend()),
        "read_wait_ms_per_step": round(
            (after["read_wait_s"] - before["read_wait_s"]) * 1e3 / steps, 3
        ),
        # Measured per step, in ms: the hooks by part (cache.time_breakdown) and the store's
        # own per-phase counters where the native store reports them.
        "time_breakdown_ms_per_step": {**{k.removesuffix("_ns"): v for k, v in breakdown.items()}},
        "store_phases_ms_per_step": {k.removesuffix("_ns"): v for k, v in store_phases.items()},
        "counters_per_step": counters,
        "plan": cache.plan.summary() if cache.plan is not None else None,
        "plan_decisions": dict(cache.plan.decisions) if cache.plan is not None else None,
        "modelled_overhead": cache.plan.modelled_overhead if cache.plan is not None else None,
        # False where the MLIR bindings do not import: the plan was followed, not written as IR.
        "plan_has_ir": bool(cache.plan.text) if cache.plan is not None else None,
        "write_errors": cache.counters["write_errors"],
        "measured_write_bandwidth": cache.write_bandwidth,
        "measured_read_bandwidth": cache.read_bandwidth,
        "measured_offload_ns_per_byte": cache.offload_ns_per_byte,
        "release_memory": cache.release_memory,
        "cpu_allocator_note": cache.cpu_allocator_note or None,  # why "auto" could not install
        "trim_yield": cache.trim_yield,
        # What the last trim decision counted per byte, and from where ("training": the
        # training thread's steps, FaultCostMeter; "probe": measure_release_cost).
        "trim_ns_per_byte": cache.trim_ns_per_byte,
        "trim_cost_source": cache.trim_cost_source,
        "trim_rule": cache.trim_rule,
        "last_trim_decision": cache.last_trim_decision,
        **{k: stats[k] for k in ("fault_ns_per_byte", "probe_ns_per_byte", "fault_cost_steps")},
        "released_bytes_per_step": (after["released_bytes"] - before["released_bytes"]) // steps,
        "huge_pages_advice": stats["huge_pages_advice"],
    }


def _default_backend() -> str:
    from hector.runtime.offload import IO_BACKEND

    return IO_BACKEND


def _trim() -> None:
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    from hector.runtime import cpu_allocator

    cpu_allocator.empty_cache()  # its cached blocks too: the baseline holds no freed memory


def engine_bandwidth(root: str, total_mib: int = 256, piece_mib: int = 16) -> dict[str, Any]:
    """Write then read ``total_mib`` through the native store alone (16 MiB objects)."""
    from hector.offload.plan import measure_store_bandwidth
    from hector.runtime.offload import TensorStore

    with TensorStore(root) as store:
        pieces = max(total_mib // piece_mib, 1)
        total = pieces * (piece_mib << 20)
        write_bps, read_bps = measure_store_bandwidth(store, total, pieces)
        return {
            "bytes": total,
            "direct": store.direct,
            "threads": store.threads,
            "write_bandwidth": write_bps,
            "read_bandwidth": read_bps,
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


def _save_figure(fig: Any, path: str, record: dict[str, Any], what: str) -> None:
    """Title ``fig`` with the record's model and configuration, write it to ``path``, close it."""
    import matplotlib.pyplot as plt

    cfg = ", ".join(f"{k} {record[k]}" for k in ("layers", "hidden", "heads", "seq", "batch"))
    fig.suptitle(f"{record['model']} ({cfg}): {what}", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _memory_trace_plot(path: str, record: dict[str, Any]) -> None:
    """Each system's traced step (its first run): resident memory, its high-water mark since
    the previous mark, and the heap in use, at every scope boundary; the gap between resident
    and in use is freed memory the allocator kept."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    traced: dict[str, list[list[Any]]] = {}
    for r in record["results"]:
        if r.get("status") == "ok" and r.get("memory_trace"):
            traced.setdefault(r["system"], r["memory_trace"]["events"])
    if not traced:
        return
    cols = 2 if len(traced) > 1 else 1
    rows = math.ceil(len(traced) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 3.2 * rows), squeeze=False)
    top = max(max((e[1] or e[2]), e[2]) for events in traced.values() for e in events)
    for ax, (name, events) in zip(axes.flat, traced.items(), strict=False):
        x = range(len(events))
        ax.plot(x, [e[2] for e in events], "-o", ms=3, label="resident (RSS)")
        if all(e[1] is not None for e in events):
            ax.plot(x, [e[1] for e in events], ":", label="high-water since last mark")
        if all(e[3] is not None for e in events):
            ax.plot(x, [e[3] for e in events], "--", label="heap in use")
        ax.set_xticks(
            list(x),
            [e[0].replace("backward", "bwd").replace("forward", "fwd") for e in events],
            rotation=70,
            fontsize=6,
        )
        ax.set_ylim(min(0.0, *(min(e[2], e[3] or 0) for e in events)) - 5, top * 1.08 + 5)
        ax.set_title(name, fontsize=9)
        ax.set_ylabel("MiB above the trimmed baseline", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(traced) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    _save_figure(fig, path, record, "memory over one traced step")


def _frontier_plot(path: str, record: dict[str, Any]) -> None:
    """Step time against peak memory (RSS above baseline, and saved activations), every system:
    one colour per system, each run (round) faint, the median over its runs labelled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in record["results"] if r.get("status") == "ok"]
    names = list(dict.fromkeys(r["system"] for r in ok))
    colours = plt.get_cmap("tab10")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, label in (
        (
            axes[0],
            "peak_mem_bytes",
            f"{record.get('memory_metric', 'peak RSS above baseline')} (MiB)",
        ),
        (axes[1], "saved_peak_bytes", "saved activations at peak (MiB)"),
    ):
        for i, name in enumerate(names):
            runs = [r for r in ok if r["system"] == name and r.get(key) is not None]
            if not runs:
                continue
            xs = [r[key] / 2**20 for r in runs]
            ys = [r["median_ms"] for r in runs]
            style = {"marker": "*", "s": 140} if name.startswith("hector") else {"s": 50}
            if len(runs) > 1:
                ax.scatter(xs, ys, color=colours(i % 10), alpha=0.3, zorder=2, **style)
            x, y = statistics.median(xs), statistics.median(ys)
            ax.scatter([x], [y], color=colours(i % 10), zorder=3, **style)
            ax.annotate(name, (x, y), fontsize=8)
        ax.set_xlabel(label)
        ax.set_ylabel("median step time (ms)")
        ax.grid(alpha=0.3)
    _save_figure(fig, path, record, "lower-left is better")


def _number_rounds(results: list[dict[str, Any]]) -> None:
    """Give each result its ``round``: how many runs of the same system came before it."""
    seen: dict[str, int] = {}
    for r in results:
        r["round"] = seen.get(r["system"], 0)
        seen[r["system"]] = r["round"] + 1


def _raw_around(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> dict[str, Any]:
    """The raw disk probes taken just before and just after one system's run, and their
    medians (``write_bandwidth``, ``read_bandwidth``): what that run's I/O is compared with.

    On these shared disks one probe says more about its moment than about the disk: the write
    figure taken at the start of one benchmark was 1522 MB/s and those of the next half hour
    799-1497; in session s16 two probes taken back to back read 893 and 2367 MB/s. The median
    of several probes (``--raw-probes`` each side) is the run's raw figure; the record keeps
    every probe and their range (``write_range``, ``read_range``)."""
    probes = [*before, *after]
    out: dict[str, Any] = {"before": before, "after": after}
    for what in ("write", "read"):
        values = [p[f"{what}_bandwidth"] for p in probes]
        out[f"{what}_bandwidth"] = statistics.median(values)
        out[f"{what}_range"] = [min(values), max(values)]
    return out


def _same_environment_peer(system: str, under_allocator: bool = False) -> str:
    """The keep-all that ran under the same process environment as ``system``: ``keep-all+thp``
    for ``hector-adaptive+thp`` (the allocator's huge pages change plain training too),
    ``keep-all+calloc`` for a hector system whose cache installed the caching CPU allocator
    (``under_allocator``), plain ``keep-all`` for the others."""
    _, _, variant = system.partition("+")
    if variant in VARIANTS:
        return f"keep-all+{variant}"
    return "keep-all+calloc" if under_allocator else "keep-all"


def _pooled_against(
    runs: list[dict[str, Any]], peer: list[dict[str, Any]]
) -> tuple[float | None, float | None]:
    """The median of ``runs``' timed steps against ``peer``'s (overhead), and the median of
    their peak RSS against ``peer``'s (reduction); None where ``peer`` did not run."""
    if not peer:
        return None, None
    ms = statistics.median(t for r in runs for t in r["times_ms"])
    peer_ms = statistics.median(t for r in peer for t in r["times_ms"])
    peaks = [r["peak_mem_bytes"] for r in runs if r.get("peak_mem_bytes")]
    peer_peaks = [r["peak_mem_bytes"] for r in peer if r.get("peak_mem_bytes")]
    rss = (
        round(1 - statistics.median(peaks) / statistics.median(peer_peaks), 4)
        if peaks and peer_peaks
        else None
    )
    return round(ms / peer_ms - 1, 4), rss


def _pooled_intervals(
    runs: list[dict[str, Any]], peer: list[dict[str, Any]]
) -> tuple[tuple[float, float] | None, tuple[float, float] | None]:
    """90% bootstrap intervals of :func:`_pooled_against`'s overhead and RSS reduction, over
    the rounds both ran (each run paired with ``peer``'s run of the same ``round``, the pair
    resampled as one unit: :func:`hector_bench._common.round_bootstrap`)."""
    from hector_bench._common import round_bootstrap

    by_round = {r.get("round"): r for r in peer}
    pairs = [(r, by_round[r.get("round")]) for r in runs if r.get("round") in by_round]

    def figure(k: int) -> Callable[[Sequence[int]], float | None]:
        def statistic(drawn: Sequence[int]) -> float | None:
            return _pooled_against([pairs[i][0] for i in drawn], [pairs[i][1] for i in drawn])[k]

        return statistic

    return round_bootstrap(len(pairs), figure(0)), round_bootstrap(len(pairs), figure(1))


def _dominators(rows: list[dict[str, Any]]) -> None:
    """Set each pooled row's ``dominated by``: the systems both faster (lower pooled overhead)
    and lighter (larger pooled peak-RSS reduction) than it, the issue's frontier test."""
    points = {
        row["system"]: (row["pooled overhead"], row["RSS -% pooled"])
        for row in rows
        if row["pooled overhead"] is not None and row["RSS -% pooled"] is not None
    }
    for row in rows:
        t, m = points.get(row["system"], (None, None))
        row["dominated by"] = [
            name for name, (u, n) in points.items() if t is not None and u < t and n > m
        ]


def pooled_summary(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per system, over the rounds of a run that repeats systems (``--systems a,b,a,b``): the median
    of all its timed steps against keep-all's (pooled), each round's median against that round's
    keep-all, the median of its runs' peak RSS against keep-all's, the range of its peak RSS
    reduction and its lowest write and read bandwidth against the raw disk around its run (systems
    that do I/O); and the pooled time and RSS against the keep-all that ran in the same process
    environment (``same-env``: ``keep-all+thp`` for a ``+thp`` system, ``keep-all+calloc`` for one
    under the caching CPU allocator, where it ran); 90% bootstrap intervals of the pooled overhead
    and RSS reduction over rounds (``overhead 90% CI``, ``RSS -% 90% CI``: None for keep-all and for
    one round), and the systems that dominate it (``dominated by``: faster and lighter, pooled).
    Empty when no system repeats or keep-all did not run. Rounds need ``round``
    (:func:`_number_rounds`)."""
    ok = [r for r in results if r["status"] == "ok"]
    names = list(dict.fromkeys(r["system"] for r in ok))
    keep = [r for r in ok if r["system"] == "keep-all"]
    if not keep or len(ok) == len(names):
        return []
    rows = []
    for name in names:
        runs = [r for r in ok if r["system"] == name]
        pooled_ms = statistics.median(t for r in runs for t in r["times_ms"])
        rss = [r["peak_rss_reduction"] for r in runs if "peak_rss_reduction" in r]
        # Against the rounds this system ran in: pooled records need not all run every system.
        ran = {r.get("round") for r in runs}
        overhead, pooled_rss = _pooled_against(runs, [k for k in keep if k.get("round") in ran])
        under_allocator = any(r.get("release_memory") == "allocator" for r in runs)
        peer_name = _same_environment_peer(name, under_allocator)
        peer = [r for r in ok if r["system"] == peer_name and r.get("round") in ran]
        same_env_overhead, same_env_rss = _pooled_against(runs, peer)
        overhead_ci, rss_ci = _pooled_intervals(runs, keep) if name != "keep-all" else (None,) * 2
        w = [r["write_bandwidth_vs_raw"] for r in runs if r.get("write_bandwidth_vs_raw")]
        rd = [r["read_bandwidth_vs_raw"] for r in runs if r.get("read_bandwidth_vs_raw")]
        vs_all, faster = _paired_with_all_offload(name, runs, ok)
        rows.append(
            {
                "system": name,
                "pooled ms": round(pooled_ms, 1),
                "pooled overhead": overhead,
                "rounds": [r.get("step_time_overhead") for r in runs],
                "RSS -% pooled": pooled_rss,
                "RSS -% min": min(rss) if rss else None,
                "RSS -% max": max(rss) if rss else None,
                "W/raw min": min(w) if w else None,
                "R/raw min": min(rd) if rd else None,
                "same-env overhead": same_env_overhead,
                "same-env RSS -%": same_env_rss,
                "overhead 90% CI": overhead_ci,
                "RSS -% 90% CI": rss_ci,
                "vs all-offload, paired": vs_all,
                "faster than all-offload": faster,
            }
        )
    _dominators(rows)
    return rows


def _paired_with_all_offload(
    name: str, runs: list[dict[str, Any]], ok: list[dict[str, Any]]
) -> tuple[float | None, str | None]:
    """``hector-adaptive`` (or a variant of it) against ``hector-all`` of the same variant,
    round by round (a round's two runs are minutes apart): the median of the ratios of their
    median steps, minus one, and in how many rounds adaptive was the faster (``"k/n"``). The
    issue's "never slower than all-offload" judged on pairs: two pooled medians each move
    with the rounds' own keep-all. ``(None, None)`` for other systems, or without
    all-offload."""
    base, _, variant = name.partition("+")
    if base != "hector-adaptive":
        return None, None
    peer = "hector-all" + (f"+{variant}" if variant else "")
    by_round = {r.get("round"): statistics.median(r["times_ms"]) for r in ok if r["system"] == peer}
    ratios = [
        statistics.median(r["times_ms"]) / by_round[r.get("round")] - 1
        for r in runs
        if r.get("round") in by_round
    ]
    if not ratios:
        return None, None
    return round(statistics.median(ratios), 4), f"{sum(x < 0 for x in ratios)}/{len(ratios)}"


def _shown_pooled_row(row: dict[str, Any]) -> dict[str, Any]:
    """A :func:`pooled_summary` row as the printed table shows it (percent strings)."""

    def interval(ci: tuple[float, float] | None) -> str | None:
        return None if ci is None else f"{ci[0]:+.1%}..{ci[1]:+.1%}"

    return {
        **row,
        "rounds": " ".join(f"{x:+.1%}" for x in row["rounds"] if x is not None),
        "vs all-offload, paired": None
        if row.get("vs all-offload, paired") is None
        else f"{row['vs all-offload, paired']:+.1%}",
        "overhead 90% CI": interval(row["overhead 90% CI"]),
        "RSS -% 90% CI": interval(row["RSS -% 90% CI"]),
        "dominated by": ", ".join(row["dominated by"]) or None,
    }


def _split_system(name: str) -> tuple[str, str] | None:
    """``("keep-all", "thp")`` for ``"keep-all+thp"``, ``(name, "")`` for a plain system, None
    for an unknown system or variant."""
    base, _, variant = name.partition("+")
    if base not in SYSTEMS:
        return None
    if variant in CACHE_VARIANTS:  # an option of hector's cache: nothing to set for the others
        return (base, variant) if base.startswith("hector-") else None
    return (base, variant) if not variant or variant in VARIANTS else None


#: What must match for records to be pooled: the model and the steps timed per run.
_POOLED_CONFIG = ("model", "layers", "hidden", "heads", "seq", "batch", "vocab", "threads")


def pool_records(records: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """One record from the rounds of several (``(path, record)`` pairs, same configuration):
    their results with rounds renamed ``"<record>:<round>"`` so each run still pairs with its
    own round's keep-all, and :func:`pooled_summary` over all of them.

    On a shared host one record's six rounds leave a wide interval (the heavier GPT's
    adaptive run measured +6.0, +15.3 and +6.8% pooled in three records of one tree), so the
    figure to compare with a target is the one over every round taken.

    Raises:
        ValueError: a record that is not an offload benchmark's, or whose configuration
            differs from the first one's (naming the field and both values).
    """
    first_path, first = records[0]
    results: list[dict[str, Any]] = []
    for i, (path, record) in enumerate(records):
        if record.get("benchmark") != "offload" or not isinstance(record.get("results"), list):
            raise ValueError(f"{path}: not a record of hector bench offload")
        for key in _POOLED_CONFIG:
            if record.get(key) != first.get(key):
                raise ValueError(
                    f"{path}: {key} is {record.get(key)!r}, but {first_path} has "
                    f"{first.get(key)!r}; only records of one configuration pool"
                )
        runs = [dict(r) for r in record["results"]]
        if any("round" not in r for r in runs):
            _number_rounds(runs)
        for r in runs:
            r["round"] = f"{i}:{r['round']}"
            r["record"] = path
        results.extend(runs)
    return {
        "benchmark": "offload-pooled",
        **{key: first.get(key) for key in _POOLED_CONFIG},
        "records": [path for path, _ in records],
        "results": results,
        "pooled": pooled_summary(results),
    }


def _run_pool(args: argparse.Namespace) -> int:
    """``--pool``: read the records, print the pooled table, write JSON and the frontier."""
    from hector_bench._common import format_table, write_json

    records = []
    for path in args.pool:
        try:
            with open(path) as f:
                records.append((path, json.load(f)))
        except (OSError, ValueError) as err:
            print(f"error: cannot read record {path}: {err}", file=sys.stderr)
            return 1
    try:
        pooled = pool_records(records)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if not pooled["pooled"]:
        print("error: nothing to pool: no system ran twice next to keep-all", file=sys.stderr)
        return 1
    rounds = {r["round"] for r in pooled["results"]}
    print(
        f"pooled over {len(rounds)} rounds of {len(records)} record(s) "
        "(each round against its own keep-all):"
    )
    shown = [_shown_pooled_row(row) for row in pooled["pooled"]]
    print(format_table(shown, [(k, k) for k in shown[0]]))
    if args.json:
        write_json(args.json, pooled)
    frontier = args.frontier or (
        os.path.splitext(args.json)[0] + "_frontier.png" if args.json else None
    )
    if frontier:
        _frontier_plot(frontier, pooled)
    return 0


def run(args: argparse.Namespace) -> int:
    """Run every system in a fresh subprocess, print a table, write JSON / plot (``--pool``:
    pool earlier records instead, :func:`pool_records`)."""
    from tqdm import tqdm

    if args.pool:
        return _run_pool(args)

    from hector import __version__
    from hector.offload.hugepages import huge_page_mode
    from hector.runtime.offload import IO_BACKEND, default_root
    from hector_bench._common import format_table, host_info, measure_in_subprocess, write_json

    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    bad = [s for s in systems if _split_system(s) is None]
    if bad or not systems:
        print(
            f"error: unknown system(s) {', '.join(bad)}; choose from {', '.join(SYSTEMS)}, "
            f"each optionally +{' or +'.join(VARIANTS)}",
            file=sys.stderr,
        )
        return 1
    for name in (
        "layers",
        "hidden",
        "heads",
        "seq",
        "batch",
        "vocab",
        "steps",
        "threads",
        "raw_probes",
    ):
        if getattr(args, name) < 1:
            print(f"error: --{name.replace('_', '-')} must be >= 1", file=sys.stderr)
            return 1
    if args.hidden % args.heads:
        print("error: --hidden must be divisible by --heads", file=sys.stderr)
        return 1
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print(
                "error: --device cuda: no CUDA device here (torch.cuda.is_available() is False)",
                file=sys.stderr,
            )
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
        base, variant = _split_system(system) or (system, "")
        payload = {
            "system": base,
            "config": config,
            "steps": args.steps,
            "warmup": args.warmup,
            "root": root,
            "threads": args.threads,
            "device": args.device,
            "release_memory": args.release_memory,
            "granularity": args.granularity,
            "cache_options": CACHE_VARIANTS.get(variant, {}),
        }
        does_io = base.startswith("hector-")
        probes = args.raw_probes if does_io else 0
        raw_before = [raw_disk_bandwidth(root, args.raw_mib) for _ in range(probes)]
        answer = measure_in_subprocess("hector_bench.offload", payload, env=VARIANTS.get(variant))
        entry: dict[str, Any] = {"system": system}
        if raw_before:
            raw_after = [raw_disk_bandwidth(root, args.raw_mib) for _ in range(probes)]
            entry["raw_disk_around"] = _raw_around(raw_before, raw_after)
        if "error" in answer:
            entry.update(status="error", error=answer["error"])
        elif "unsupported" in answer:
            entry.update(status="unsupported", error=answer["unsupported"])
        else:
            times = answer.pop("times_ms")
            entry.update(
                times_ms=[round(t, 3) for t in times],
                status="ok",
                median_ms=round(statistics.median(times), 3),
                min_ms=round(min(times), 3),
                max_ms=round(max(times), 3),
                runs=len(times),
                peak_mem_bytes=answer.pop("peak_rss_bytes"),
                **answer,
            )
        results.append(entry)
    _number_rounds(results)
    keep_all = {r["round"]: r for r in results if r["system"] == "keep-all" and r["status"] == "ok"}
    for r in results:
        # Each round against its own keep-all: the host's speed drifts between rounds.
        base = keep_all.get(r["round"]) or next(iter(keep_all.values()), None)
        if base is None or r["status"] != "ok":
            continue
        r["step_time_overhead"] = round(r["median_ms"] / base["median_ms"] - 1, 4)
        if base.get("peak_mem_bytes"):
            r["peak_rss_reduction"] = round(1 - r["peak_mem_bytes"] / base["peak_mem_bytes"], 4)
        if base.get("saved_peak_bytes"):
            r["saved_peak_reduction"] = round(
                1 - r["saved_peak_bytes"] / base["saved_peak_bytes"], 4
            )
        for what in ("write", "read"):
            bw = r.get(f"{what}_bandwidth")
            if bw:
                # Against the disk as it was around this run: its speed drifts within minutes.
                near = r.get("raw_disk_around", raw)
                r[f"{what}_bandwidth_vs_raw"] = round(bw / near[f"{what}_bandwidth"], 4)
                r[f"{what}_bandwidth_vs_start_raw"] = round(bw / raw[f"{what}_bandwidth"], 4)
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
                "RSS -%": r.get("peak_rss_reduction"),
                "W MB/s": (r["write_bandwidth"] / 1e6) if r.get("write_bandwidth") else None,
                "W/raw": r.get("write_bandwidth_vs_raw"),
                "R MB/s": (r["read_bandwidth"] / 1e6) if r.get("read_bandwidth") else None,
                "R/raw": r.get("read_bandwidth_vs_raw"),
                **_kernel_columns(r.get("kernel_per_step")),
                **_trace_columns(r.get("memory_trace")),
                "error": (r.get("error") or "")[:60] or None,
            }
        )
    cols = [(k, k) for k in rows[0]] if rows else []
    print(format_table(rows, cols))
    if args.device == "cuda":
        print("on cuda the RSS columns are torch.cuda's peak of allocated bytes (see --device)")
    print(
        f"raw disk ({'O_DIRECT' if raw['direct'] else 'buffered'}): "
        f"write {raw['write_bandwidth'] / 1e6:.0f} MB/s, read {raw['read_bandwidth'] / 1e6:.0f} "
        f"MB/s; engine alone ({IO_BACKEND}): write {engine['write_bandwidth'] / 1e6:.0f} MB/s "
        f"({engine['write_vs_raw']:.0%}), read {engine['read_bandwidth'] / 1e6:.0f} MB/s "
        f"({engine['read_vs_raw']:.0%})"
    )
    advised = {r["system"]: r["huge_pages_advice"] for r in results if r.get("huge_pages_advice")}
    if advised:
        print(f"advice to {', '.join(advised)}: {next(iter(advised.values()))}")
    pooled = pooled_summary(results)
    if pooled:
        shown = [_shown_pooled_row(row) for row in pooled]
        print(
            "pooled over the rounds (each round against its own keep-all; same-env: against "
            "the keep-all run in the same process environment, e.g. keep-all+thp, or "
            "keep-all+calloc for a hector system under the caching allocator it installed):"
        )
        print(format_table(shown, [(k, k) for k in shown[0]]))
    record = {
        "benchmark": "offload",
        **config,
        "mode": "training",
        "device": args.device,
        "memory_metric": "peak RSS above baseline"
        if args.device == "cpu"
        else "torch.cuda peak allocated above the timed steps' start",
        "hector_version": __version__,
        "host": host_info(args.device),
        "io_backend": next((r["io_backend"] for r in results if r.get("io_backend")), IO_BACKEND),
        "threads": args.threads,
        "release_memory": args.release_memory,
        "granularity": args.granularity,
        "kernel_huge_page_mode": huge_page_mode(),
        "load_average": os.getloadavg(),
        "raw_disk": raw,
        "engine_alone": engine,
        "results": [{k: v for k, v in r.items() if k != "timeline"} for r in results],
        "pooled": pooled,
    }
    if args.json:
        write_json(args.json, record)
    if args.plot:
        _plot(
            args.plot,
            [r for r in results if r.get("timeline")],
            f"{args.model}: saved activations over one step",
        )
    frontier = args.frontier
    if frontier is None and args.json:
        frontier = os.path.splitext(args.json)[0] + "_frontier.png"
    if frontier:
        _frontier_plot(frontier, record)
    if args.json:
        _memory_trace_plot(os.path.splitext(args.json)[0] + "_memory.png", record)
    return 0 if all(r["status"] in ("ok", "unsupported") for r in results) else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--memory-worker":
        print(json.dumps(_worker(json.loads(sys.argv[2]))))
    else:
        print("usage: python -m hector_bench.offload --memory-worker JSON", file=sys.stderr)
        sys.exit(2)
