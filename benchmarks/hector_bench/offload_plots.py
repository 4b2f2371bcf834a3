"""The figures ``hector bench offload`` draws from its record: saved activations over one step,
each system's traced step, and step time against peak memory (the frontier). Matplotlib is
imported only when a figure is drawn.
"""

from __future__ import annotations

import os
import statistics
from typing import Any

__all__ = ["frontier_plot", "memory_trace_plot", "timeline_plot"]


def timeline_plot(path: str, results: list[dict[str, Any]], title: str) -> None:
    """Saved activations resident over one training step, one line per result that recorded
    a ``timeline`` (keep-all and the offload systems)."""
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


def memory_trace_plot(path: str, record: dict[str, Any]) -> None:
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


def frontier_plot(path: str, record: dict[str, Any]) -> None:
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
