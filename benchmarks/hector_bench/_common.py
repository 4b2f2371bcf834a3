"""Helpers shared by the ``hector bench`` benchmarks: timing, peak memory, records, tables, plots.

Record format (docs/benchmarks.md, "Benchmark records"): one JSON object per run with
``benchmark``, the benchmark's configuration keys, ``device``, ``hector_version``, ``host``, a
``results`` list (one entry per system: ``system``, ``variant``, ``median_ms``, ``min_ms``,
``max_ms``, ``runs``, ``peak_mem_bytes``, ``max_abs_err``, ...) and ``speedup_vs_best_peer`` /
``memory_ratio_vs_best_peer`` comparing the ``"hector"`` entry with the best peer entry.

Peak memory is measured per system in a fresh subprocess (:func:`measure_in_subprocess`): on
CPU the peak resident set size above the subprocess's baseline (taken after imports, data and
model set-up), with the kernel's high-water mark reset through ``/proc/self/clear_refs`` right
before the measured calls (:class:`PeakRSS`); on CUDA ``torch.cuda.max_memory_allocated`` above
the allocated baseline.

Isolation (:func:`run_worker`): a benchmark may run each system in its own child process, under
an address-space limit (:func:`limit_address_space`) and first in line for the kernel's
out-of-memory killer (:func:`prefer_oom_kill`), so a system that runs out of memory or crashes
costs its own row and never the run, the record, or the other processes on the machine.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.metadata
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "CLOCKS",
    "KernelTime",
    "PeakRSS",
    "StepPeaks",
    "Timing",
    "WorkerOutcome",
    "add_clock_argument",
    "address_space_cap_lifted",
    "available_memory_bytes",
    "best_peer_ratios",
    "clock_named",
    "bar_plot",
    "format_table",
    "geomean",
    "host_info",
    "limit_address_space",
    "measure_in_subprocess",
    "mib",
    "prefer_oom_kill",
    "round_bootstrap",
    "run_worker",
    "start_thread_pools",
    "steps_in_turns",
    "write_cells",
    "time_calls",
    "write_json",
]


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """Wall-clock times of repeated calls, in milliseconds."""

    times_ms: tuple[float, ...]

    @property
    def median_ms(self) -> float:
        """Median of the timed runs."""
        return statistics.median(self.times_ms)

    @property
    def min_ms(self) -> float:
        """Fastest timed run."""
        return min(self.times_ms)

    @property
    def max_ms(self) -> float:
        """Slowest timed run."""
        return max(self.times_ms)

    def as_record(self) -> dict[str, Any]:
        """``median_ms``, ``min_ms``, ``max_ms`` and ``runs`` for a result entry."""
        return {
            "median_ms": round(self.median_ms, 4),
            "min_ms": round(self.min_ms, 4),
            "max_ms": round(self.max_ms, 4),
            "runs": len(self.times_ms),
        }


@dataclass(frozen=True)
class TurnTaking:
    """Systems' steps timed in turns: each system's ``first`` step (its result) and its
    ``first_s`` (capture and compilation included), then ``timing`` of the rounds."""

    first: dict[str, Any]
    first_s: dict[str, float]
    timing: dict[str, Timing]


def steps_in_turns(
    steps: dict[str, Callable[[], Any]], runs: int, warmup: int, seed: int | None = None
) -> TurnTaking:
    """Each system's first step (from generator state ``seed``, where given, so that systems
    drawing PyTorch's random numbers draw the same), then ``warmup`` untimed steps of it; then
    ``runs`` timed rounds in which the systems take turns, one step each, so that machine load
    drifts over all of them alike."""
    import torch

    first, first_s = {}, {}
    for name, step in steps.items():
        if seed is not None:
            torch.manual_seed(seed)
        start = time.perf_counter()
        first[name] = step()
        first_s[name] = round(time.perf_counter() - start, 3)
        for _ in range(warmup):
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(runs):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append((time.perf_counter() - start) * 1e3)
    return TurnTaking(first, first_s, {n: Timing(tuple(t)) for n, t in times.items()})


#: What ``--clock`` times calls with (``time``'s function of each name).
CLOCKS = {"wall": "perf_counter", "cpu": "process_time"}


def add_clock_argument(parser: Any) -> None:
    """Give a benchmark's parser ``--clock wall|cpu`` (default ``wall``)."""
    parser.add_argument(
        "--clock",
        choices=CLOCKS,
        default="wall",
        help="wall: elapsed time; cpu: the process's CPU time (all its threads), which other "
        "work on a shared machine disturbs less",
    )


def clock_named(name: str) -> Callable[[], float]:
    """``time``'s function for a ``--clock`` choice, looked up at the call (a patched
    ``time.process_time`` is the one returned)."""
    return getattr(time, CLOCKS[name])


def time_calls(
    fn: Callable[[], object],
    runs: int,
    *,
    warmup: int = 1,
    sync: Callable[[], None] | None = None,
    progress: Any | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Timing:
    """Call ``fn`` ``warmup`` times untimed, then ``runs`` times timed.

    Args:
        fn: the work to time (one call = one measured run).
        runs: timed calls (>= 1).
        warmup: untimed calls first (compilation, allocator and cache warm-up).
        sync: called after each call before the clock stops (``torch.cuda.synchronize``).
        progress: a tqdm bar to ``update(1)`` after every call (warm-up included).
        clock: seconds now (``time.perf_counter``: elapsed time; ``time.process_time``: the
            process's CPU time, all its threads).

    Returns:
        The timed runs.
    """
    if runs < 1:
        raise ValueError(f"runs must be >= 1, got {runs}")
    for _ in range(warmup):
        fn()
        if sync is not None:
            sync()
        if progress is not None:
            progress.update(1)
    times = []
    for _ in range(runs):
        start = clock()
        fn()
        if sync is not None:
            sync()
        times.append((clock() - start) * 1e3)
        if progress is not None:
            progress.update(1)
    return Timing(tuple(times))


# ---------------------------------------------------------------------------------------------
# Peak memory
# ---------------------------------------------------------------------------------------------


def status_kib(field_name: str) -> int | None:
    """:func:`hector.offload.memory_timeline.status_kib`, imported at the first call: this
    module stays free of ``hector`` (and so of torch) for workers that only talk the protocol."""
    from hector.offload.memory_timeline import status_kib as read

    return read(field_name)


def reset_high_water_mark() -> bool:
    """:func:`hector.offload.memory_timeline.reset_high_water_mark`, imported at the first call."""
    from hector.offload.memory_timeline import reset_high_water_mark as reset

    return reset()


def evict_page_cache(path: Any) -> None:
    """Drop this file's pages from the OS page cache (nothing else's): its next reads come from
    storage."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


class PeakRSS:
    """Peak resident memory of this process above a baseline, on Linux.

    ``start()`` records the current RSS as the baseline and resets the kernel's high-water mark
    (``VmHWM``) by writing ``5`` to ``/proc/self/clear_refs``; ``peak_bytes()`` is then
    ``VmHWM - baseline``. Where the reset is not allowed, the high-water mark of the whole
    process is used instead and :attr:`method` says so; without ``/proc`` it falls back to
    ``resource.getrusage`` (``ru_maxrss``, never reset).
    """

    def __init__(self) -> None:
        """Create an unstarted meter."""
        self.baseline_bytes = 0
        self.method = "unstarted"

    def start(self) -> None:
        """Take the baseline and reset the high-water mark."""
        rss = status_kib("VmRSS")
        if rss is None:
            import resource

            self.baseline_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            self.method = "ru_maxrss above baseline (high-water mark not reset)"
            return
        self.baseline_bytes = rss * 1024
        if reset_high_water_mark():
            self.method = "VmHWM above baseline RSS (VmHWM reset via /proc/self/clear_refs)"
        else:
            self.method = "VmHWM above baseline RSS (VmHWM not resettable: includes set-up)"

    def peak_bytes(self) -> int:
        """Peak RSS since :meth:`start`, minus the baseline (>= 0)."""
        hwm = status_kib("VmHWM")
        if hwm is None:
            import resource

            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        else:
            peak = hwm * 1024
        return max(peak - self.baseline_bytes, 0)


class StepPeaks:
    """Each training step's peak resident memory, from the RSS before the first step.

    ``start()`` takes the baseline (``VmRSS``) and resets the high-water mark; ``step(f)``
    wraps a step so that after each call while :attr:`active` its ``VmHWM`` is recorded
    (:attr:`absolute`, bytes) and the mark reset again, so each figure is that step's own
    peak. Where the reset is not allowed (:attr:`resettable` False) each figure is the running
    high-water mark of the process (set-up included).
    """

    def __init__(self) -> None:
        """An unstarted tracker."""
        self.baseline_bytes = 0
        self.absolute: list[int] = []
        self.resettable = False
        self.active = True

    def start(self) -> None:
        """The baseline is the RSS now; the high-water mark restarts."""
        self.baseline_bytes = (status_kib("VmRSS") or 0) * 1024
        self.resettable = reset_high_water_mark()

    def step(self, run: Callable[..., Any]) -> Callable[..., Any]:
        """``run``, recording each call's peak while :attr:`active`."""

        def tracked(*args: Any, **kwargs: Any) -> Any:
            out = run(*args, **kwargs)
            if self.active:
                self.absolute.append((status_kib("VmHWM") or 0) * 1024)
                if self.resettable:
                    reset_high_water_mark()
            return out

        return tracked

    def above_baseline(self, first: int = 0) -> list[int]:
        """The steps' peaks from step ``first`` on, above the baseline (bytes, >= 0)."""
        return [max(a - self.baseline_bytes, 0) for a in self.absolute[first:]]


class KernelTime:
    """What the kernel did for this process over a stretch of work, per unit of work:
    minor page faults (memory faulted in, no disk) and CPU time in system and user mode, for
    the whole process (``getrusage(RUSAGE_SELF)``: every thread, the I/O workers too) and for
    the thread that created it (``RUSAGE_THREAD``, Linux: the training thread, whose system
    time every step waits for; not its intra-op worker threads). ``start()``, the work, then
    ``per(n)``. Kernels with tick-based CPU accounting (``CONFIG_TICK_CPU_ACCOUNTING``, these
    machines at 250 Hz) split a thread's CPU time between user and system mode by sampling it
    every tick, so a figure of ``T`` ms carries a sampling error of about ``sqrt(T * 4)`` ms:
    average over several steps. Fault counts are exact.

    It also says what else ran meanwhile, from the machine's counters (``/proc/stat``, in
    clock ticks of 10 ms): ``others_cpu_ms``, the CPU time every other process of the machine
    used (all CPUs' busy time less this process's), and ``host_steal_ms``, the time the
    hypervisor ran something else on this machine's virtual CPUs (its other guests). On a
    shared host these separate a slow system from a busy moment."""

    _FIELDS = ("ru_minflt", "ru_stime", "ru_utime")

    def __init__(self) -> None:
        """Create an unstarted meter (``per`` before ``start`` counts since process start)."""
        self._before = self._now()

    @classmethod
    def _now(cls) -> dict[str, tuple[float, ...] | None]:
        import resource

        def take(who: int) -> tuple[float, ...]:
            usage = resource.getrusage(who)
            return tuple(float(getattr(usage, f)) for f in cls._FIELDS)

        thread = getattr(resource, "RUSAGE_THREAD", None)
        return {
            "process": take(resource.RUSAGE_SELF),
            "thread": take(thread) if thread is not None else None,
            "machine": _machine_cpu_ticks(),
        }

    def start(self) -> None:
        """Take the starting point."""
        self._before = self._now()

    def per(self, n: int) -> dict[str, float | None]:
        """Per unit of work since :meth:`start` (``n`` units): ``minor_faults``,
        ``system_ms``, ``user_ms`` of the process and ``thread_minor_faults``,
        ``thread_system_ms``, ``thread_user_ms`` of the creating thread (None without
        per-thread accounting), and ``others_cpu_ms`` and ``host_steal_ms`` of the machine
        (None without ``/proc/stat``)."""
        after, n = self._now(), max(n, 1)
        out: dict[str, float | None] = {}
        for who, prefix in (("process", ""), ("thread", "thread_")):
            a, b = self._before[who], after[who]
            scales = (1.0, 1e3, 1e3)  # faults, seconds -> ms, seconds -> ms
            for name, i in (("minor_faults", 0), ("system_ms", 1), ("user_ms", 2)):
                out[prefix + name] = (
                    None if a is None or b is None else round((b[i] - a[i]) * scales[i] / n, 1)
                )
        m0, m1 = self._before["machine"], after["machine"]
        out["others_cpu_ms"] = out["host_steal_ms"] = None
        if m0 is not None and m1 is not None:
            tick_ms = 1e3 / os.sysconf("SC_CLK_TCK")
            busy = (m1[0] - m0[0]) * tick_ms / n
            ours = (out["system_ms"] or 0.0) + (out["user_ms"] or 0.0)
            # Both are sampled per tick: a small negative difference is sampling, not time.
            out["others_cpu_ms"] = round(max(busy - ours, 0.0), 1)
            out["host_steal_ms"] = round((m1[1] - m0[1]) * tick_ms / n, 1)
        return out


def _machine_cpu_ticks() -> tuple[int, int] | None:
    """All CPUs' busy and stolen clock ticks since boot (``/proc/stat``), None elsewhere."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
    return user + nice + system + irq + softirq, steal


def measure_in_subprocess(
    module: str,
    payload: dict[str, Any],
    *,
    timeout: float = 900.0,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run ``python -m <module> --memory-worker <json payload>`` and return its JSON answer.

    ``env`` adds environment variables (e.g. ``MALLOC_MMAP_THRESHOLD_`` so freed buffers
    leave the resident set at once and RSS follows live memory).

    The worker prints one JSON object as its last stdout line. A crash, a timeout or an
    unreadable answer comes back as ``{"error": "..."}`` instead of an exception, so one failing
    system never stops a benchmark.
    """
    cmd = [sys.executable, "-m", module, "--memory-worker", json.dumps(payload)]
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"memory measurement timed out after {timeout:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else tail
        return {"error": f"memory worker failed (exit {proc.returncode}): {how}"}
    try:
        answer = json.loads(lines[-1])
    except json.JSONDecodeError:
        return {"error": f"memory worker printed no JSON: {lines[-1][:200]}"}
    return answer if isinstance(answer, dict) else {"error": "memory worker answer not a dict"}


# ---------------------------------------------------------------------------------------------
# Isolated workers: memory limits and crash containment
# ---------------------------------------------------------------------------------------------

#: Prefix of the protocol lines a worker prints on stdout (anything else there is ignored).
WORKER_TAG = "@@hector-bench "


def available_memory_bytes() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (what can be allocated without swapping
    or evicting others), or None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def limit_address_space(extra_bytes: int | None) -> int | None:
    """Cap this process's address space at its current size plus ``extra_bytes``.

    With ``RLIMIT_AS`` set, an allocation beyond the cap fails inside the process (PyTorch
    raises ``RuntimeError: ... can't allocate memory``, Python ``MemoryError``) instead of
    growing until the kernel's out-of-memory killer picks a victim, which may be someone else's
    process. The current size (``VmSize``, after the heavy imports) is added so the cap counts
    only what the work itself maps. Returns the limit set, or None when none was.
    """
    if extra_bytes is None:
        return None
    import resource

    size_kib = status_kib("VmSize")
    if size_kib is None:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = size_kib * 1024 + int(extra_bytes)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    return limit


@contextlib.contextmanager
def address_space_cap_lifted() -> Iterator[None]:
    """Lift this process's address-space cap (:func:`limit_address_space`) for the ``with``
    body, and set it again after: for the benchmark's own apparatus run inside a capped worker
    (the roofline's reference copies and GEMMs, 128 MiB and more), which is not the measured
    system's work and must not count against its budget. The soft limit goes up to the hard
    one, which an unprivileged process may always do."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == hard:
        yield
        return
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def start_thread_pools() -> int:
    """Start PyTorch's intra-op worker threads now, with one parallel op over every thread, and
    return how many threads the process has. Each thread's stack reserves ``RLIMIT_STACK``
    (8 MiB by default) of address space, hardly any memory: started before
    :func:`limit_address_space`, the stacks are part of the baseline the cap is set above, so
    a worker's budget does not shrink with the machine's core count (or ``OMP_NUM_THREADS``)."""
    import torch

    n = torch.get_num_threads()
    if n > 1:
        x = torch.zeros(n * 65536)  # n grains of at::internal::GRAIN_SIZE (32768) or more
        x.add_(1.0)
        del x
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


def prefer_oom_kill() -> None:
    """Make this process the out-of-memory killer's first choice (``oom_score_adj`` 1000), so
    a memory-hungry benchmark worker dies before any other process on the machine."""
    try:
        with open("/proc/self/oom_score_adj", "w", encoding="ascii") as f:
            f.write("1000")
    except OSError:
        pass


def emit_worker_line(payload: dict[str, Any]) -> None:
    """Print one protocol line (``WORKER_TAG`` + JSON) for the parent of a worker."""
    print(WORKER_TAG + json.dumps(payload), flush=True)


@dataclass
class WorkerOutcome:
    """What a worker process left: its answer (None when it gave none), exit status, why not."""

    answer: dict[str, Any] | None
    returncode: int
    failure: str | None  # None when the worker exited 0 with an answer


def _signal_name(number: int) -> str:
    import signal

    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _failure_text(returncode: int, stderr_tail: str, timed_out: bool, timeout: float) -> str:
    """Why a worker gave no answer, in words."""
    if timed_out:
        return f"timed out after {timeout:.0f} s (killed)"
    if returncode < 0:
        name = _signal_name(-returncode)
        hint = " (the kernel's out-of-memory killer)" if name == "SIGKILL" else ""
        last = f": {stderr_tail}" if stderr_tail else ""
        return f"crashed: killed by {name}{hint}{last}"
    if returncode != 0:
        return f"crashed: exit status {returncode}: {stderr_tail or 'no message'}"
    return f"gave no answer: {stderr_tail or 'no message'}"


def run_worker(
    module: str,
    flag: str,
    payload: dict[str, Any],
    *,
    timeout: float,
    on_progress: Callable[[int], object] | None = None,
    env: dict[str, str] | None = None,
) -> WorkerOutcome:
    """Run ``python -m <module> <flag> <json payload>`` and collect its answer.

    The worker talks through ``WORKER_TAG`` lines on stdout: ``{"progress": n}`` (passed to
    ``on_progress``) and ``{"result": {...}}`` (the answer). Its stderr goes to a temporary file
    whose last line explains a crash. A worker killed by a signal (the kernel's OOM killer), one
    that exits non-zero, one that gives no answer and one that runs past ``timeout`` seconds all
    come back as a :class:`WorkerOutcome` with ``failure`` set; nothing is raised.
    """
    import tempfile
    import threading

    cmd = [sys.executable, "-m", module, flag, json.dumps(payload)]
    # One malloc arena: each thread's own arena reserves 64 MiB of address space, which an
    # address-space cap (limit_address_space) would count as memory the work used.
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", MALLOC_ARENA_MAX="1", **(env or {}))
    answer: dict[str, Any] | None = None
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as err:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=full_env, errors="replace"
        )
        expired = threading.Event()

        def kill() -> None:
            expired.set()
            proc.kill()

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if not line.startswith(WORKER_TAG):
                    continue
                try:
                    msg = json.loads(line[len(WORKER_TAG) :])
                except json.JSONDecodeError:
                    continue
                if isinstance(msg, dict) and "progress" in msg and on_progress is not None:
                    on_progress(int(msg["progress"]))
                elif isinstance(msg, dict) and isinstance(msg.get("result"), dict):
                    answer = msg["result"]
            returncode = proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        err.seek(0)
        lines = [ln.strip() for ln in err.read().splitlines() if ln.strip()]
    tail = lines[-1][:300] if lines else ""
    if returncode == 0 and answer is not None and not expired.is_set():
        return WorkerOutcome(answer, returncode, None)
    return WorkerOutcome(
        answer, returncode, _failure_text(returncode, tail, expired.is_set(), timeout)
    )


# ---------------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------------


def host_info(device: str = "cpu") -> dict[str, Any]:
    """Machine and library versions for the ``host`` field of a record."""
    import torch

    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__.split("+")[0],
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "machine": platform.machine(),
    }
    try:  # its installed version, without importing it (seconds: it imports torch._dynamo)
        info["torch_geometric"] = importlib.metadata.version("torch_geometric")
    except importlib.metadata.PackageNotFoundError:
        pass
    if device == "cuda" and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def best_peer_ratios(
    results: Sequence[dict[str, Any]], system: str = "hector"
) -> tuple[float | None, float | None]:
    """``(speedup_vs_best_peer, memory_ratio_vs_best_peer)`` for ``system``.

    The speed-up divides the fastest peer's median by ``system``'s median; the memory ratio
    divides ``system``'s peak memory by the lowest peer peak memory. Peers are the entries of
    other systems that ran (``status == "ok"``, a median present). ``None`` where either side
    is missing.
    """

    def ok(r: dict[str, Any]) -> bool:
        return r.get("status", "ok") == "ok" and r.get("median_ms") is not None

    ours = [r for r in results if r["system"] == system and ok(r)]
    peers = [r for r in results if r["system"] != system and ok(r)]
    if not ours or not peers:
        return None, None
    # Hector with every optimization when several variants ran (an ablation).
    me = next((r for r in ours if r.get("optimizations", "C+R+F") == "C+R+F"), ours[0])
    speedup = min(p["median_ms"] for p in peers) / me["median_ms"] if me["median_ms"] else None
    peer_mem = [p["peak_mem_bytes"] for p in peers if p.get("peak_mem_bytes")]
    mem = None
    if me.get("peak_mem_bytes") is not None and peer_mem:
        mem = me["peak_mem_bytes"] / min(peer_mem)
    return (
        round(speedup, 4) if speedup is not None else None,
        round(mem, 4) if mem is not None else None,
    )


def write_cells(args: Any, benchmark: str, cells: list[dict[str, Any]]) -> None:
    """Write ``{"benchmark", "host", "args", "cells"}`` to ``args.json`` where given."""
    if args.json:
        record = {"benchmark": benchmark, "host": host_info(), "args": vars(args), "cells": cells}
        write_json(args.json, record)


def write_json(path: str | os.PathLike[str], record: Any) -> None:
    """Write ``record`` as indented JSON (creating parent folders); atomic via a temp file."""
    p = Path(path)
    if p.is_dir():
        raise IsADirectoryError(
            errno.EISDIR, "the record's path is a folder (give a .json file name)", str(p)
        )
    import tempfile

    p.parent.mkdir(parents=True, exist_ok=True)
    # A fresh name (O_EXCL, random): a fixed "<name>.tmp" in a shared folder could be a link
    # someone planted, and the record would be written through it.
    fd, tmp_name = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(record, indent=2, sort_keys=False) + "\n")
        os.chmod(tmp, 0o666 & ~_umask())
        tmp.replace(p)
    finally:
        if tmp.exists():
            tmp.unlink()


def _umask() -> int:
    """This process's umask (``/proc/self/status``; 022 where it cannot be read, rather than
    setting it and back, which races with other threads creating files)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def round_bootstrap(
    rounds: int,
    statistic: Callable[[Sequence[int]], float | None],
    *,
    level: float = 0.9,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of ``statistic`` over ``rounds`` resampled as units.

    A benchmark that repeats its systems in rounds (each round a fresh process per system,
    run close together in time) measures the host's drift as well as the systems: on a shared
    VM the same plan measured -3.5% to +32.8% against keep-all between the six rounds of one
    record, and keep-all itself 150-192 ms per step between its processes. Resampling whole
    round indices with replacement (``statistic`` gets the drawn indices, repeats included, and
    pairs each round's systems itself) keeps that drift in the interval, so a figure can be
    read as within the noise or beyond it.

    Args:
        rounds: how many rounds there are (indices ``0 .. rounds - 1``).
        statistic: the figure for a multiset of round indices (None: undefined for it; such
            draws are left out).
        level: the interval's coverage (default 0.9: the 5th and 95th percentiles).
        resamples: bootstrap draws.
        seed: fixes the draws, so a record's interval reproduces.

    Returns:
        ``(low, high)``, or None with fewer than two rounds or no defined draw.
    """
    import numpy as np

    if rounds < 2:
        return None
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, rounds, size=(resamples, rounds))
    values = [v for d in draws if (v := statistic(d.tolist())) is not None]
    if not values:
        return None
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)


def geomean(values: Iterable[float | None]) -> float | None:
    """Geometric mean of the positive values, or None when there are none."""
    vals = [v for v in values if v is not None and v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


# ---------------------------------------------------------------------------------------------
# Tables and plots
# ---------------------------------------------------------------------------------------------


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value == 0:
            return "0"
        if abs(value) >= 1e4 or abs(value) < 1e-3:
            return f"{value:.2e}"
        return f"{value:.3f}" if abs(value) < 100 else f"{value:.1f}"
    return str(value)


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    """A plain-text table: ``columns`` are ``(key, header)``; numbers right-aligned."""
    cells = [[_fmt(r.get(k)) for k, _ in columns] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, (_, h) in enumerate(columns)]
    numeric = [
        all(isinstance(r.get(k), int | float) or r.get(k) is None for r in rows) for k, _ in columns
    ]

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ).rstrip()

    out = [line([h for _, h in columns]), line(["-" * w for w in widths])]
    out += [line(c) for c in cells]
    return "\n".join(out)


def mib(nbytes: float | None) -> float | None:
    """Bytes → MiB (None stays None)."""
    return None if nbytes is None else nbytes / 2**20


def bar_plot(
    path: str | os.PathLike[str],
    title: str,
    labels: Sequence[str],
    panels: Sequence[tuple[str, Sequence[float | None], Sequence[tuple[float, float]] | None]],
) -> None:
    """Save side-by-side bar charts (matplotlib, Agg backend) to ``path``.

    Args:
        path: output image (format from the suffix, e.g. ``.png``, ``.svg``).
        title: figure title.
        labels: one label per bar (shared by all panels).
        panels: ``(y label, values, error ranges or None)`` per panel; a ``None`` value draws
            no bar (a system that did not run); error ranges are ``(low, high)`` absolute.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        1, len(panels), figsize=(max(4.5, 1.2 * len(labels)) * len(panels), 4.2), squeeze=False
    )
    xs = list(range(len(labels)))
    for ax, (ylabel, values, ranges) in zip(axes[0], panels, strict=True):
        heights = [v if v is not None else 0.0 for v in values]
        yerr = None
        if ranges is not None:
            yerr = [
                [max(h - lo, 0) for h, (lo, _) in zip(heights, ranges, strict=True)],
                [max(hi - h, 0) for h, (_, hi) in zip(heights, ranges, strict=True)],
            ]
        colors = ["tab:orange" if lab.startswith("hector") else "tab:blue" for lab in labels]
        ax.bar(xs, heights, color=colors, yerr=yerr, capsize=3)
        for x, v in zip(xs, values, strict=True):
            ax.annotate(
                "n/a" if v is None else _fmt(float(v)),
                (x, v or 0.0),
                ha="center",
                va="bottom",
                fontsize=8,
            )
        ax.set_xticks(xs)
        ax.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
        ax.set_ylabel(ylabel)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def emit_record(
    record: dict[str, Any],
    table: str,
    json_path: str | None,
    plot_path: str | None,
    plot: Any,
) -> None:
    """Print a benchmark's table, then write its JSON record and plot where asked."""
    print(table)
    if json_path:
        write_json(json_path, record)
        print(f"record written to {json_path}")
    if plot_path:
        plot(record, plot_path)
        print(f"plot written to {plot_path}")
