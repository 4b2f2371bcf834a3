"""Pooling the rounds of ``hector bench offload``: each system against keep-all over the rounds
of one run (``--systems a,b,a,b``) or of several records (``--pool``), with bootstrap intervals
over rounds, same-environment comparisons and the systems that dominate each other.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from .offload_systems import VARIANTS

__all__ = [
    "number_rounds",
    "pool_records",
    "pooled_summary",
    "same_environment_peer",
    "shown_pooled_row",
]


def number_rounds(results: list[dict[str, Any]]) -> None:
    """Give each result its ``round``: how many runs of the same system came before it."""
    seen: dict[str, int] = {}
    for r in results:
        r["round"] = seen.get(r["system"], 0)
        seen[r["system"]] = r["round"] + 1


def same_environment_peer(system: str, under_allocator: bool = False) -> str:
    """The keep-all that ran under the same process environment as ``system``: ``keep-all+thp``
    for ``hector-adaptive+thp`` (the allocator's huge pages change plain training too),
    ``keep-all+calloc`` for a hector system whose cache installed the caching CPU allocator
    (``under_allocator``), plain ``keep-all`` for the others."""
    _, _, name = system.partition("+")
    variant = VARIANTS.get(name)
    if variant is not None and variant.changes_environment:
        return f"keep-all+{name}"
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
    reduction, the median over rounds of its process peak over all steps (warm-up included)
    against keep-all's (``all/keep median``), its worst step's saved bytes against its memory
    budget (``worst/budget max``), and its lowest write and read bandwidth against the raw disk
    around its run (systems that do I/O); and the pooled time and RSS against the keep-all that
    ran in the same process environment (``same-env``: ``keep-all+thp`` for a ``+thp`` system,
    ``keep-all+calloc`` for one under the caching CPU allocator, where it ran); 90% bootstrap
    intervals of the pooled overhead and RSS reduction over rounds (``overhead 90% CI``,
    ``RSS -% 90% CI``: None for keep-all and for one round), and the systems that dominate it
    (``dominated by``: faster and lighter, pooled). Empty when no system repeats or keep-all did
    not run. Rounds need ``round`` (:func:`number_rounds`)."""
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
        peer_name = same_environment_peer(name, under_allocator)
        peer = [r for r in ok if r["system"] == peer_name and r.get("round") in ran]
        same_env_overhead, same_env_rss = _pooled_against(runs, peer)
        overhead_ci, rss_ci = _pooled_intervals(runs, keep) if name != "keep-all" else (None,) * 2
        w = [r["write_bandwidth_vs_raw"] for r in runs if r.get("write_bandwidth_vs_raw")]
        rd = [r["read_bandwidth_vs_raw"] for r in runs if r.get("read_bandwidth_vs_raw")]
        vs_all, faster = _paired_with_all_offload(name, runs, ok)
        whole = [r["all_steps_rss_vs_keep_all"] for r in runs if "all_steps_rss_vs_keep_all" in r]
        budget = [r["worst_step_vs_budget"] for r in runs if "worst_step_vs_budget" in r]
        rows.append(
            {
                "system": name,
                "pooled ms": round(pooled_ms, 1),
                "pooled overhead": overhead,
                "rounds": [r.get("step_time_overhead") for r in runs],
                "RSS -% pooled": pooled_rss,
                "RSS -% min": min(rss) if rss else None,
                "RSS -% max": max(rss) if rss else None,
                "all/keep median": round(statistics.median(whole), 4) if whole else None,
                "worst/budget max": max(budget) if budget else None,
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


def shown_pooled_row(row: dict[str, Any]) -> dict[str, Any]:
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
            number_rounds(runs)
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
