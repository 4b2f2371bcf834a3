"""The tensor cache's counters, hook timings and resident bytes, and each pass's marks."""

from __future__ import annotations

import collections
import time

__all__ = ["COUNTER_KEYS", "TIMING_KEYS", "CacheStatistics"]

#: What the cache counts: saved storages packed, offloaded, kept and aliased (another view of
#: a storage already saved), reads served from memory, prefetched or waited for, failed
#: writes, the bytes offloaded and the heap trims.
COUNTER_KEYS = (
    "packed",
    "offloaded",
    "kept",
    "aliased",
    "served_from_memory",
    "prefetched",
    "read_waits",
    "write_errors",
    "bytes_offloaded",
    "heap_trims",
)

#: Parts of the hooks' time, in ns: the whole pack/unpack hooks, what they spend submitting
#: I/O to the store, waiting for writes (a released tensor whose write is in flight) and reads,
#: allocating read-back buffers, staging copies (CUDA), polling completions and handing
#: pages back (``madvise``, inside the others); and, outside the hooks, the heap trims'
#: ``malloc_trim`` calls and, while profiling, the waits for a scope's writes and the pages
#: handed back then (``outside_ns``).
TIMING_KEYS = (
    "pack_ns",
    "unpack_ns",
    "release_ns",
    "submit_ns",
    "write_wait_ns",
    "read_wait_ns",
    "alloc_ns",
    "staging_ns",
    "drain_ns",
    "madvise_ns",
    "trim_ns",
    "outside_ns",
    "hook_calls",
)


class CacheStatistics:
    """What a tensor cache measured: counters, the hooks' time by part, the saved bytes it
    holds in memory (now, at the peak, and optionally over time), and where the current
    forward pass started from (the counters and timings at its start)."""

    def __init__(self, record_timeline: bool) -> None:
        """Statistics at zero; ``record_timeline``: keep ``(seconds, resident bytes)`` after
        each change of the resident bytes in :attr:`timeline`."""
        self.counters = dict.fromkeys(COUNTER_KEYS, 0)
        # Nanoseconds spent in each part of the hooks (time_breakdown() reports them).
        self.timing = dict.fromkeys(TIMING_KEYS, 0)
        self.read_wait_s = 0.0
        self.resident_bytes = 0
        self.peak_resident_bytes = 0
        #: Each forward pass's peak of :attr:`resident_bytes`, from its start to the next
        #: pass's (its backward included), the latest last (the last 4,096 passes).
        self.step_peaks: collections.deque[int] = collections.deque(maxlen=4096)
        self.record_timeline = record_timeline
        self.timeline: list[tuple[float, int]] = []
        self._t0 = time.perf_counter()
        self.offloaded_before_pass = 0
        # At this pass's start: the hooks' timing and the bytes offloaded so far.
        self.pass_marks: tuple[dict[str, int], int] = ({}, 0)

    def restart_timeline(self) -> None:
        """Empty :attr:`timeline` and count its seconds from now."""
        self.timeline.clear()
        self._t0 = time.perf_counter()

    def add_resident(self, n: int) -> None:
        """The cache now holds ``n`` more saved bytes in memory (negative: fewer)."""
        self.resident_bytes += n
        self.peak_resident_bytes = max(self.peak_resident_bytes, self.resident_bytes)
        if self.step_peaks and self.resident_bytes > self.step_peaks[-1]:
            self.step_peaks[-1] = self.resident_bytes
        if self.record_timeline:
            self.timeline.append((time.perf_counter() - self._t0, self.resident_bytes))

    def start_pass(self) -> None:
        """A forward pass starts: remember the counters and timings it starts from."""
        self.offloaded_before_pass = self.counters["offloaded"]
        self.step_peaks.append(self.resident_bytes)
        self.pass_marks = (dict(self.timing), self.counters["bytes_offloaded"])

    def offloaded_this_pass(self) -> bool:
        """Whether the current pass started any write."""
        return self.counters["offloaded"] > self.offloaded_before_pass

    def bytes_offloaded_this_pass(self) -> int:
        """The bytes the current pass offloaded so far."""
        return self.counters["bytes_offloaded"] - self.pass_marks[1]

    def waited_ns(self) -> int:
        """Time so far not spent on the model: waiting for the store's writes and reads, and
        trimming the heap (ns)."""
        t = self.timing
        return t["read_wait_ns"] + t["write_wait_ns"] + t["outside_ns"] + t["trim_ns"]

    def own_hook_ns_this_pass(self) -> float:
        """The hooks' own time since this pass started: all of it but the waits for I/O
        (the plan models those) and ``madvise`` (system time, which the fault meter counts)."""
        before, now = self.pass_marks[0], self.timing
        if not before:
            return 0.0
        spent = sum(now[k] - before[k] for k in ("pack_ns", "unpack_ns", "release_ns"))
        left_out = ("write_wait_ns", "read_wait_ns", "madvise_ns")
        return float(max(spent - sum(now[k] - before[k] for k in left_out), 0))

    def time_breakdown(self) -> dict[str, int]:
        """Nanoseconds spent in the hooks since creation, by part, measured (see
        :meth:`TensorCache.time_breakdown`)."""
        t = dict(self.timing)
        inside = sum(
            t[k] for k in ("submit_ns", "write_wait_ns", "read_wait_ns", "alloc_ns", "staging_ns")
        )
        t["hooks_ns"] = t["pack_ns"] + t["unpack_ns"] + t["release_ns"]
        t["python_ns"] = max(t["hooks_ns"] - inside - t["drain_ns"], 0)
        return t
