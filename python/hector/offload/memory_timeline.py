"""Where in a training step the process's resident memory peaks: a timeline of marks.

A :class:`MemoryTimeline` splits a step into intervals at *marks* — the training loop's own
(``forward``, ``loss``, ``backward``, ``optimizer``) and, while it is :func:`active`, the
runtime calls a compiled graph planned under a memory budget makes
(:mod:`hector.offload.joint_ops`: ``put``/``wait`` in the forward, ``prefetch``/``get`` in
the backward). At each mark it reads the kernel's resident high-water mark (``VmHWM``, the
exact peak since the previous mark: the kernel keeps it, no sampling) and the resident size
(``VmRSS``), then resets the high-water mark (``5`` to ``/proc/self/clear_refs``). Each
interval's peak is therefore the process's real peak between two marks; the step's peak is
the largest of them and :meth:`MemoryTimeline.peak` says between which marks it is.

Reading ``/proc/self/status`` and resetting the mark take some 10-50 us per mark, so a step
with a hundred marks is slowed by a few milliseconds; a timeline is for diagnosis, not for
timed runs. Linux only: elsewhere (or where ``clear_refs`` is not writable) :attr:`exact` is
False and each interval's figure is the running high-water mark.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

__all__ = [
    "Interval",
    "MemoryTimeline",
    "active",
    "note",
    "reset_high_water_mark",
    "resident_bytes",
    "status_kib",
]


def status_kib(name: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``) in KiB; None where it
    cannot be read."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(name + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def resident_bytes() -> int:
    """The process's resident size now (``VmRSS``, bytes; 0 where it cannot be read)."""
    return (status_kib("VmRSS") or 0) * 1024


def reset_high_water_mark() -> bool:
    """Reset the kernel's resident high-water mark of this process (``VmHWM``) by writing ``5``
    to ``/proc/self/clear_refs``; False where that is not allowed."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


@dataclass(frozen=True)
class Interval:
    """The stretch of a step between two marks.

    Attributes:
        step: the step it belongs to (0: the first).
        start, end: the marks' labels (``start`` empty for a step's first interval).
        peak_bytes: the process's resident high-water mark over the interval, above the
            timeline's baseline.
        end_bytes: its resident size at ``end``, above the baseline.
        seconds: its wall time (the marks' own cost included).
    """

    step: int
    start: str
    end: str
    peak_bytes: int
    end_bytes: int
    seconds: float = 0.0


@dataclass
class MemoryTimeline:
    """Marks through training steps and the resident peak between each two.

    ``start()`` takes the baseline (``VmRSS``) and resets the high-water mark; ``begin_step()``
    opens a step; ``mark(label)`` closes the interval since the previous mark.
    """

    baseline_bytes: int = 0
    exact: bool = False
    intervals: list[Interval] = field(default_factory=list)
    _step: int = -1
    _last: str = ""
    _at: float = 0.0

    def start(self) -> None:
        """The baseline is the resident size now; the high-water mark restarts."""
        self.baseline_bytes = (status_kib("VmRSS") or 0) * 1024
        self.exact = reset_high_water_mark()

    def begin_step(self) -> None:
        """Open the next step (its first interval starts here)."""
        self.mark("")  # closes what ran between steps, if anything did
        self._step += 1
        self._last = "step start"

    def mark(self, label: str) -> None:
        """Close the interval from the previous mark to here, named ``label``."""
        now = time.perf_counter()
        hwm, rss = (status_kib("VmHWM") or 0) * 1024, (status_kib("VmRSS") or 0) * 1024
        if self.exact:
            reset_high_water_mark()
        if label and self._step >= 0:
            base = self.baseline_bytes
            peak, end = max(hwm - base, 0), max(rss - base, 0)
            seconds = now - self._at
            self.intervals.append(Interval(self._step, self._last, label, peak, end, seconds))
        self._last, self._at = label, time.perf_counter()

    def peak(self, step: int | None = None) -> Interval | None:
        """The interval with the highest peak (of ``step``, or of every step)."""
        chosen = [i for i in self.intervals if step is None or i.step == step]
        return max(chosen, key=lambda i: i.peak_bytes, default=None)

    def to_records(self, step: int | None = None) -> list[dict[str, object]]:
        """The intervals (of ``step``, or all) as JSON-ready dicts."""
        return [
            {
                "step": i.step,
                "from": i.start,
                "to": i.end,
                "peak_bytes": i.peak_bytes,
                "end_bytes": i.end_bytes,
                "seconds": i.seconds,
            }
            for i in self.intervals
            if step is None or i.step == step
        ]

    def report(self, step: int, top: int = 8) -> str:
        """The ``top`` highest intervals of ``step``, in step order, one line each (MiB)."""
        rows = [i for i in self.intervals if i.step == step]
        keep = sorted(rows, key=lambda i: i.peak_bytes, reverse=True)[:top]
        lines = [f"step {step}: {len(rows)} intervals, highest {len(keep)}:"]
        for i in rows:
            if i in keep:
                lines.append(
                    f"  {i.start:>24} -> {i.end:<24} peak {i.peak_bytes / 2**20:8.1f} MiB  "
                    f"end {i.end_bytes / 2**20:8.1f} MiB"
                )
        return "\n".join(lines)


_ACTIVE: list[MemoryTimeline] = []


def active(timeline: MemoryTimeline | None) -> None:
    """Make ``timeline`` the one the runtime calls mark (None: none)."""
    _ACTIVE[:] = [timeline] if timeline is not None else []


def note(label: str) -> None:
    """Mark ``label`` on the active timeline, if there is one."""
    if _ACTIVE:
        _ACTIVE[0].mark(label)
