"""Where a training step's resident memory goes: a trace at every scope boundary.

The offload benchmark's peak RSS mixes two things: memory the step holds (live allocations)
and memory glibc keeps after it was freed (free heap chunks still resident). Offloading
lowers only the first. :func:`trace_step` runs one training step and, at each scope's forward
end, at the end of the whole forward, as backward finishes each scope's weights and after the
step, records three figures relative to the process when tracing began (before any
settling steps, see :func:`trace_step`):

- ``hwm``: the highest resident memory since the previous mark (``VmHWM``, reset at each mark
  through ``/proc/self/clear_refs``), so a spike inside an operator is not missed;
- ``rss``: resident memory at the mark;
- ``heap``: bytes glibc has handed out (``mallinfo2``: in use in its heaps plus its own
  mappings), the step's live host memory.

``rss - heap`` growing while ``heap`` does not is free memory the allocator keeps resident.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hector.offload.memory_timeline import reset_high_water_mark, status_kib

__all__ = ["MIB", "trace_step"]

MIB = 1 << 20


def _heap_in_use() -> int | None:
    """Bytes glibc has handed out now (None where ``mallinfo2`` is unknown)."""
    from hector.offload.cache import _mallinfo2

    mallinfo2 = _mallinfo2()
    if mallinfo2 is None:
        return None
    info = mallinfo2()
    return int(info.uordblks + info.hblkhd)


class _Tracer:
    """Collects ``(event, hwm, rss, heap)`` rows in MiB relative to the process when it was
    created; :meth:`start` resets the high-water mark before the first mark."""

    def __init__(self) -> None:
        self.rows: list[list[Any]] = []
        self.rss0 = (status_kib("VmRSS") or 0) * 1024
        self.heap0 = _heap_in_use()
        self.resets = False

    def start(self) -> None:
        self.resets = reset_high_water_mark()

    def mark(self, event: str) -> None:
        hwm = (status_kib("VmHWM") or 0) * 1024
        rss = (status_kib("VmRSS") or 0) * 1024
        heap = _heap_in_use()
        self.rows.append(
            [
                event,
                round((hwm - self.rss0) / MIB, 1) if self.resets else None,
                round((rss - self.rss0) / MIB, 1),
                None if heap is None or self.heap0 is None else round((heap - self.heap0) / MIB, 1),
            ]
        )
        reset_high_water_mark()


def trace_step(
    model: Any,
    scopes: list[tuple[str, Any]],
    step: Callable[[int], Any],
    i: int = 0,
    settle: int = 0,
) -> dict[str, Any]:
    """Run ``step(i)`` once with marks at ``scopes``' boundaries; the trace and its peak.

    The figures are relative to the process as this function is called; ``settle`` untraced
    steps run first, so that the traced one starts with what earlier steps left behind (a
    step after a heap trim is not a steady one: the trim handed back the memory that later
    steps keep resident).

    ``model`` is the module whose forward is the whole forward (its forward hook runs after
    those registered before it, e.g. an offload cache's heap trim); a scope's backward mark
    is the accumulation of its first trainable parameter's gradient (hooks on modules'
    backward would change what checkpointing recomputes). Returns ``{"events": rows,
    "peak": row}`` with ``rows`` as ``[event, hwm, rss, heap]`` in MiB (see the module
    docstring) and ``peak`` the row whose ``hwm`` is highest.
    """
    tracer: _Tracer | None = None

    def mark(event: str) -> Callable[..., None]:
        def hook(*_: Any) -> None:
            if tracer is not None:
                tracer.mark(event)

        return hook

    handles = [model.register_forward_hook(mark("forward"))]
    for name, module in scopes:
        handles.append(module.register_forward_hook(mark(f"forward {name}")))
        first = next((p for p in module.parameters() if p.requires_grad), None)
        if first is not None:
            handles.append(first.register_post_accumulate_grad_hook(mark(f"backward {name}")))
    try:
        baseline = _Tracer()
        for _ in range(settle):  # not marked: tracer is still None
            step(i)
        baseline.start()
        tracer = baseline
        step(i)
        tracer.mark("step end")
    finally:
        for handle in handles:
            handle.remove()
    rows = tracer.rows
    measured = [r for r in rows if r[1] is not None]
    peak = max(measured, key=lambda r: r[1]) if measured else max(rows, key=lambda r: r[2])
    return {"events": rows, "peak": peak}
