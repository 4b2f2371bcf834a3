"""What ``hector bench offload`` prints and compares: each result against the keep-all of its
own round and the raw disk around it, the table's rows, and the summary under the table.
"""

from __future__ import annotations

from typing import Any

from ._common import mib
from .offload_pooling import pooled_summary, shown_pooled_row

__all__ = ["compare_with_keep_all", "kernel_columns", "print_report", "table_rows", "trace_columns"]


def compare_with_keep_all(results: list[dict[str, Any]], raw: dict[str, Any]) -> None:
    """Add to each ok result its step-time overhead and peak-memory reductions against the
    keep-all of its own round (the host's speed drifts between rounds), and its bandwidth
    against the raw disk around its run and at the start (``raw``). Results need ``round``."""
    keep_all = {r["round"]: r for r in results if r["system"] == "keep-all" and r["status"] == "ok"}
    for r in results:
        # Each round against its own keep-all: the host's speed drifts between rounds.
        base = keep_all.get(r["round"]) or next(iter(keep_all.values()), None)
        if base is None or r["status"] != "ok":
            continue
        r["step_time_overhead"] = round(r["median_ms"] / base["median_ms"] - 1, 4)
        if base.get("peak_mem_bytes"):
            r["peak_rss_reduction"] = round(1 - r["peak_mem_bytes"] / base["peak_mem_bytes"], 4)
        if base.get("all_steps_peak_rss_bytes") and r.get("all_steps_peak_rss_bytes"):
            # What decides whether a run fits: the process peak over every step, warm-up too.
            ratio = r["all_steps_peak_rss_bytes"] / base["all_steps_peak_rss_bytes"]
            r["all_steps_rss_vs_keep_all"] = round(ratio, 4)
        if r.get("memory_budget_bytes") and r.get("step_saved_peak_bytes"):
            worst = max(r["step_saved_peak_bytes"]) / r["memory_budget_bytes"]
            r["worst_step_vs_budget"] = round(worst, 4)
        if base.get("saved_peak_bytes") and r.get("saved_peak_bytes"):
            r["saved_peak_reduction"] = round(
                1 - r["saved_peak_bytes"] / base["saved_peak_bytes"], 4
            )
        _against_compiled_keep_all(r, results)
        for what in ("write", "read"):
            bw = r.get(f"{what}_bandwidth")
            if bw:
                # Against the disk as it was around this run: its speed drifts within minutes.
                near = r.get("raw_disk_around", raw)
                r[f"{what}_bandwidth_vs_raw"] = round(bw / near[f"{what}_bandwidth"], 4)
                r[f"{what}_bandwidth_vs_start_raw"] = round(bw / raw[f"{what}_bandwidth"], 4)


def _against_compiled_keep_all(r: dict[str, Any], results: list[dict[str, Any]]) -> None:
    """For a compiled system (``*-compiled*``): its step and whole-run peak RSS against the
    ``keep-all-compiled`` of its round (the issue-55 targets: step <= 1.10x, peak <= 0.6x)."""
    if "-compiled" not in r["system"] or r["system"] == "keep-all-compiled":
        return
    base = next(
        (
            b
            for b in results
            if b["system"] == "keep-all-compiled"
            and b["status"] == "ok"
            and b.get("round") == r.get("round")
        ),
        None,
    )
    if base is None:
        return
    r["step_vs_compiled_keep_all"] = round(r["median_ms"] / base["median_ms"], 4)
    if base.get("all_steps_peak_rss_bytes") and r.get("all_steps_peak_rss_bytes"):
        ratio = r["all_steps_peak_rss_bytes"] / base["all_steps_peak_rss_bytes"]
        r["all_steps_rss_vs_compiled_keep_all"] = round(ratio, 4)


def table_rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The printed table: one row per result, sizes in MiB and bandwidths in MB/s."""
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
                "all-steps MiB": mib(r.get("all_steps_peak_rss_bytes")),
                "all/keep": r.get("all_steps_rss_vs_keep_all"),
                "worst/budget": r.get("worst_step_vs_budget"),
                "step/comp.": r.get("step_vs_compiled_keep_all"),
                "all/comp.": r.get("all_steps_rss_vs_compiled_keep_all"),
                "W MB/s": (r["write_bandwidth"] / 1e6) if r.get("write_bandwidth") else None,
                "W/raw": r.get("write_bandwidth_vs_raw"),
                "R MB/s": (r["read_bandwidth"] / 1e6) if r.get("read_bandwidth") else None,
                "R/raw": r.get("read_bandwidth_vs_raw"),
                **kernel_columns(r.get("kernel_per_step")),
                **trace_columns(r.get("memory_trace")),
                "error": (r.get("error") or "")[:60] or None,
            }
        )
    return rows


def print_report(
    results: list[dict[str, Any]], raw: dict[str, Any], engine: dict[str, Any], device: str
) -> list[dict[str, Any]]:
    """Print the table, the raw disk and engine-alone figures, the cache's huge-page advice
    and the table pooled over rounds; return the pooled rows (:func:`pooled_summary`)."""
    from hector.runtime.offload import IO_BACKEND
    from hector_bench._common import format_table

    rows = table_rows(results)
    cols = [(k, k) for k in rows[0]] if rows else []
    print(format_table(rows, cols))
    if device == "cuda":
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
        shown = [shown_pooled_row(row) for row in pooled]
        print(
            "pooled over the rounds (each round against its own keep-all; same-env: against "
            "the keep-all run in the same process environment, e.g. keep-all+thp, or "
            "keep-all+calloc for a hector system under the caching allocator it installed):"
        )
        print(format_table(shown, [(k, k) for k in shown[0]]))
    return pooled


def kernel_columns(kernel: dict[str, Any] | None) -> dict[str, Any]:
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


def trace_columns(trace: dict[str, Any] | None) -> dict[str, Any]:
    """The printed table's view of a traced step: where its memory peaked, and how much of
    the resident memory there was freed memory the allocator kept (resident minus in use)."""
    peak = (trace or {}).get("peak")
    if not peak:
        return {"traced peak at": None, "kept free MiB": None}
    kept = None if peak[3] is None else round(peak[2] - peak[3], 1)
    return {"traced peak at": peak[0], "kept free MiB": kept}
