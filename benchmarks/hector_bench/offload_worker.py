"""One system's training run, measured in the worker process of ``hector bench offload``.

:func:`measure_system` builds the model, sets the system up (:mod:`hector_bench.offload_systems`),
runs its warm-up and timed steps and returns timings, memory and I/O figures as JSON-ready
values: median step time comes from the driver, peak bytes of saved activations from hector's
cache or a keep-everything counter, peak RSS above the baseline (on a GPU: the device's peak
of allocated bytes), and the offload store's bytes moved and busy-time bandwidth. After its
timed steps each system runs one more step traced at every scope boundary
(:mod:`hector_bench.memory_trace`).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

from .offload_systems import SYSTEMS, System, UnsupportedSystem

__all__ = ["measure_system", "run_until_planned"]


def measure_system(payload: dict[str, Any]) -> dict[str, Any]:
    """Train with one system; return timings, memory and I/O figures (runs in a subprocess).

    ``payload``: ``system`` (a :data:`~hector_bench.offload_systems.SYSTEMS` name), ``config``
    (the model), ``steps``, ``warmup``, and optionally ``root``, ``threads``, ``device``,
    ``release_memory``, ``granularity`` and ``cache_options`` (hector's cache).
    """
    import torch

    from hector_bench.offload_models import build_model

    torch.set_num_threads(int(payload.get("threads", torch.get_num_threads())))
    system = SYSTEMS[payload["system"]]
    cfg = payload["config"]
    if os.environ.get("HECTOR_BENCH_CPU_ALLOCATOR") == "caching":
        from hector.offload import enable_caching_allocator

        enable_caching_allocator()
    system.prepare_process()
    device = torch.device(payload.get("device", "cpu"))
    model = build_model(
        cfg["model"], cfg["layers"], cfg["hidden"], cfg["heads"], cfg["vocab"], cfg["seq"]
    ).to(device)
    try:
        forward, cache = system.setup(model, payload)
    except UnsupportedSystem as err:
        return {"unsupported": str(err)}
    from hector_bench._common import StepPeaks

    peaks = StepPeaks()
    step = peaks.step(_make_step(system, model, forward, {**cfg, "device": device.type}))
    gpu = _DeviceMemory(device)
    peaks.start()  # the RSS before the first step: what the user's run starts from
    try:
        done = run_until_planned(step, cache)
        for i in range(done, done + payload["warmup"]):
            step(i)
    except UnsupportedSystem as err:
        return {"unsupported": str(err)}
    before = _io_snapshot(cache)
    first_timed = len(peaks.absolute)
    out = _timed_steps(step, cache, gpu, payload["steps"], peaks)
    peaks.active = False
    out.update(_whole_run_figures(peaks, first_timed, cache))
    if cache is not None:
        out.update(_cache_figures(cache, before, _io_snapshot(cache), payload["steps"]))
        out.update(_offloaded_step(model, step, cache, trace=not (gpu.active or system.compiled)))
        return out
    out.update(_counted_step(system, model, step, gpu.active))
    return out


def _whole_run_figures(peaks: Any, first_timed: int, cache: Any) -> dict[str, Any]:
    """What the user's run held: each step's peak RSS above the RSS before the first step
    (warm-up and planning steps included), their maximum over all steps and over the timed
    (steady-state) ones; for a hector cache, each step's peak of saved bytes in memory, its
    budget and the plan's modelled peak."""
    per_step = peaks.above_baseline()
    out: dict[str, Any] = {
        "step_rss_bytes": per_step,
        "all_steps_peak_rss_bytes": max(per_step, default=None),
        "steady_peak_rss_bytes": max(per_step[first_timed:], default=None),
        "step_rss_method": "VmHWM per step (reset after each) above VmRSS before the first step"
        if peaks.resettable
        else "running VmHWM above VmRSS before the first step (not resettable)",
    }
    if cache is not None:
        out["step_saved_peak_bytes"] = list(cache.step_peaks)[: len(per_step)]
        out["memory_budget_bytes"] = cache.budget_bytes
        out["modelled_peak_bytes"] = getattr(cache.plan, "modelled_peak", None)
    return out


def _timed_steps(
    step: Any, cache: Any, gpu: _DeviceMemory, steps: int, peaks: Any
) -> dict[str, Any]:
    """The timed steps: their times (ms), what the kernel did per step, the peak RSS above
    the trimmed baseline (on a GPU: the device's peak, the host's kept beside it), huge pages
    and the caching CPU allocator's counters. ``peaks`` (:class:`StepPeaks`) records each
    step's high-water mark and resets it: the timed steps' peak is the highest of theirs."""
    import torch

    from hector.offload import huge_pages_in_effect
    from hector.runtime import cpu_allocator
    from hector_bench._common import KernelTime, PeakRSS

    if cache is not None:  # the timed steps' peak, not warm-up's
        cache.peak_resident_bytes = cache.resident_bytes
        cache.timeline.clear()
    _trim()  # return memory freed by warm-up to the OS so the RSS peak is this phase's
    rss = PeakRSS()
    rss.start()
    first = len(peaks.absolute)
    kernel = KernelTime()
    kernel.start()
    gpu.start()
    times = []
    for i in range(steps):
        start = time.perf_counter()
        step(i)  # on a GPU it ends when its kernels have run: it reads the loss back
        times.append((time.perf_counter() - start) * 1e3)
    out: dict[str, Any] = {
        "times_ms": times,
        "kernel_per_step": kernel.per(steps),
        "peak_rss_bytes": max(max(peaks.absolute[first:], default=0) - rss.baseline_bytes, 0),
        "rss_method": rss.method,
        "huge_pages": huge_pages_in_effect(),
        "cpu_allocator": cpu_allocator.stats(),  # empty unless installed (calloc, or hector's)
    }
    if gpu.active:
        # The table's peak memory on a GPU: the device's; the host's stays in the record.
        out["host_peak_rss_bytes"] = out["peak_rss_bytes"]
        out["peak_rss_bytes"] = gpu.peak_bytes()
        out["rss_method"] = gpu.method
        out["gpu"] = torch.cuda.get_device_name(gpu.device)
    return out


def _offloaded_step(model: Any, step: Any, cache: Any, trace: bool) -> dict[str, Any]:
    """One more step of a hector system with its cache's timeline recorded alone, then (with
    ``trace``: not on a GPU, not compiled) the traced step; closes the cache."""
    cache.statistics.restart_timeline()  # the timeline of this step alone, from its start
    step(0)
    out = {
        "timeline": cache.timeline[:: max(len(cache.timeline) // 400, 1)],
        "memory_trace": _trace(model, step) if trace else None,
    }
    cache.close()  # what closing the wrapped module does
    return out


def _counted_step(system: System, model: Any, step: Any, on_gpu: bool) -> dict[str, Any]:
    """For a system without hector's cache: the saved activations of one more step, counted by
    a keep-everything cache (and their timeline, where the system draws one), then the traced
    step (not on a GPU), and the system's note."""
    from hector.offload import TensorCache

    out: dict[str, Any] = {}
    if system.compiled:  # a scope-hooked counting or traced step would recompile the model
        return {"note": system.note, "memory_trace": None}
    counter = TensorCache("none", model, threshold=0, record_timeline=True)
    with counter.hooks():
        step(0, counting=True)  # save_on_cpu: its host copies have these same sizes
    out["saved_peak_bytes"] = counter.peak_resident_bytes
    if system.draws_timeline:
        t0 = counter.timeline[0][0] if counter.timeline else 0.0
        tl = [(t - t0, b) for t, b in counter.timeline]
        out["timeline"] = tl[:: max(len(tl) // 400, 1)]
    counter.close()
    out["memory_trace"] = None if on_gpu else _trace(model, step)
    if system.note:
        out["note"] = system.note
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


def _trace(model: Any, step: Any) -> dict[str, Any]:
    """Two more steps, the second traced at every scope boundary
    (:mod:`hector_bench.memory_trace`), relative to a trimmed heap as the timed steps were:
    its figures are on the scale of the run's peak RSS above baseline."""
    from hector.offload import default_scopes
    from hector_bench.memory_trace import trace_step

    _trim()
    return trace_step(model, default_scopes(model), step, settle=1)


def _make_step(system: System, model: Any, forward: Any, cfg: dict[str, Any]) -> Any:
    """One training step (forward, loss, backward, SGD update) of ``system``."""
    import torch
    import torch.nn.functional as F

    from hector_bench.offload_user_models import make_input

    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    device = cfg.get("device", "cpu")
    shape = (cfg["model"], cfg["batch"], cfg["seq"], cfg["vocab"])
    batches = [tuple(t.to(device) for t in make_input(*shape, gen)) for _ in range(4)]

    def step(i: int, counting: bool = False) -> float:
        inputs, targets = batches[i % len(batches)]
        ctx = contextlib.nullcontext() if counting else system.saving(device)
        try:
            with ctx:
                logits = forward(inputs)
                loss = F.cross_entropy(logits.reshape(-1, cfg["vocab"]), targets.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
        except (RuntimeError, ValueError, AssertionError) as err:
            refused = system.refusal(err)  # e.g. DeepSpeed refusing this device/config
            if refused is not None:
                raise refused from None
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
