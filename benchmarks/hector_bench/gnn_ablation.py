"""The ``ablation`` part of a ``hector bench gnn --ablation`` record: each of Hector's
optimization variants (U, C, R, C+R, C+R+F) against U, and how much of what compaction can save
C saved in training (fields: docs/benchmarks.md, "Benchmark records")."""

from __future__ import annotations

from typing import Any


def compaction_effect(
    ran: dict[str | None, dict[str, Any]], stats: dict[str, Any]
) -> dict[str, Any] | None:
    """How much of what compaction can save C saved, in training: the allowance is
    ``(1 - ratio)`` of the edge-wise activations U saves for backward (what shrinking them from
    ``E`` to ``C`` rows would free); the saving is U's peak memory minus C's (measured)."""
    u, c = ran.get("U"), ran.get("C")
    if not u or not c or not u.get("saved_bytes") or not u.get("peak_mem_bytes"):
        return None
    if not c.get("peak_mem_bytes"):
        return None
    allowance = (1 - stats["compaction_ratio"]) * u["saved_bytes"]["edge"]
    saving = u["peak_mem_bytes"] - c["peak_mem_bytes"]
    return {
        "edge_saved_bytes_U": u["saved_bytes"]["edge"],
        "allowance_bytes": round(allowance),
        "saving_bytes": saving,
        "fraction_of_allowance": round(saving / allowance, 4) if allowance else None,
        "method": "allowance = (1 - compaction_ratio) x edge-wise activations U saves for "
        "backward (from <f>_train's saved results); saving = U peak - C peak (measured)",
    }


def _against_u(r: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """One variant's time, memory and kernels, and its speed-up and memory ratio over U."""
    return {
        "median_ms": r.get("median_ms"),
        "peak_mem_bytes": r.get("peak_mem_bytes"),
        "kernels": r.get("kernels"),
        **({"saved_bytes": r["saved_bytes"]} if r.get("saved_bytes") else {}),
        "speedup_vs_U": (
            round(base["median_ms"] / r["median_ms"], 4)
            if base.get("median_ms") and r.get("median_ms")
            else None
        ),
        "memory_vs_U": (
            round(r["peak_mem_bytes"] / base["peak_mem_bytes"], 4)
            if base.get("peak_mem_bytes") and r.get("peak_mem_bytes")
            else None
        ),
    }


def ablation_summary(
    results: list[dict[str, Any]], stats: dict[str, Any], training: bool
) -> dict[str, Any]:
    """The record's ``ablation``: every Hector variant by its optimizations label, against U,
    plus ``compaction_memory`` (:func:`compaction_effect`) in training when it can be told."""
    ran = {r.get("optimizations"): r for r in results if r["system"] == "hector"}
    base = ran.get("U", {})
    ablation: dict[str, Any] = {
        label: _against_u(r, base) for label, r in ran.items() if label is not None
    }
    compaction = compaction_effect(ran, stats) if training else None
    if compaction is not None:
        ablation["compaction_memory"] = compaction
    return ablation
