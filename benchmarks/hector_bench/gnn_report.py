"""What ``hector bench gnn`` shows: a cell's result table and bar chart, its kernels' roofline
plot, and the suite's summary table and plot (the records themselves: docs/benchmarks.md,
"Benchmark records")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import _common, roofline

_COLUMNS = [
    ("system", "system"),
    ("variant", "variant"),
    ("status", "status"),
    ("median_ms", "median ms"),
    ("min_ms", "min ms"),
    ("max_ms", "max ms"),
    ("peak_mib", "peak MiB"),
    ("max_abs_err", "max|err|"),
    ("max_rel_err", "rel err"),
    ("grad_err", "grad max|err|"),
    ("grad_rel_err", "grad rel err"),
    ("compile_ms", "compile ms"),
    ("kernels", "kernels"),
    ("order", "order"),
]


def format_record(record: dict[str, Any]) -> str:
    """The result table of one cell plus its speed-up / memory-ratio line."""
    rows = []
    for r in record["results"]:
        row = dict(r)
        row["peak_mib"] = _common.mib(r.get("peak_mem_bytes"))
        errs = [r.get("max_abs_err_grad_input"), r.get("max_abs_err_grad_params")]
        errs = [e for e in errs if e is not None]
        row["grad_err"] = max(errs) if errs else None
        rels = [r.get("max_rel_err_grad_input"), r.get("max_rel_err_grad_params")]
        rels = [e for e in rels if e is not None]
        row["grad_rel_err"] = max(rels) if rels else None
        orders = r.get("aggregation_order")
        row["order"] = ",".join(o.split("-")[0] for o in orders) if orders else None
        rows.append(row)
    head = (
        f"{record['model']} on {record['dataset']} ({record['mode']}, {record['device']}; "
        f"{record['graph']['nodes']} nodes, {record['graph']['edges']} edges, "
        f"{record['graph']['relations']} relations, compaction ratio "
        f"{record['graph']['compaction_ratio']:.3f})"
    )
    s, m = record["speedup_vs_best_peer"], record["memory_ratio_vs_best_peer"]
    tail = (
        f"speed-up vs best PyG layer: {f'{s:.2f}x' if s is not None else 'n/a'}; "
        f"peak memory vs best PyG layer: {f'{m:.2f}x' if m is not None else 'n/a'}"
    )
    notes = [
        f"  {r['system']} {r['variant']}: {r['reason']}"
        for r in record["results"]
        if r.get("reason")
    ]
    kernels = [
        roofline.format_profile(f"{r['system']} {r['variant']}", r["kernel_profile"])
        for r in record["results"]
        if r.get("kernel_profile")
    ]
    return "\n".join([head, _common.format_table(rows, _COLUMNS), tail, *notes, *kernels])


def plot_record(record: dict[str, Any], path: str) -> None:
    """Bar chart: median time (min/max whiskers) and peak memory per system."""
    rs = record["results"]
    labels = [f"{r['system']}\n{r['variant']}" for r in rs]
    labels = [lab.replace("\n", " ") for lab in labels]
    times = [r.get("median_ms") for r in rs]
    ranges = [(r.get("min_ms") or 0.0, r.get("max_ms") or 0.0) for r in rs]
    mem = [_common.mib(r.get("peak_mem_bytes")) for r in rs]
    _common.bar_plot(
        path,
        f"{record['model']} {record['mode']} on {record['dataset']} ({record['device']})",
        labels,
        [("median time (ms)", times, ranges), ("peak memory (MiB)", mem, None)],
    )


def plot_roofline(record: dict[str, Any], json_path: str | Path) -> None:
    """The kernels' roofline plot next to the record, ``<record>_roofline.png``."""
    path = Path(json_path)
    target = path.with_name(f"{path.stem}_roofline.png")
    if roofline.plot(record, str(target)):
        print(f"roofline plot written to {target}")


_SUITE_COLUMNS = [
    ("model", "model"),
    ("dataset", "dataset"),
    ("mode", "mode"),
    ("status", "hector"),
    ("hector_ms", "hector ms"),
    ("best_peer", "best PyG"),
    ("best_peer_ms", "best PyG ms"),
    ("speedup_vs_best_peer", "speed-up"),
    ("memory_ratio_vs_best_peer", "mem ratio"),
    ("max_rel_err", "hector rel err"),
    ("max_rel_err_grad", "hector grad rel err"),
    ("best_peer_max_rel_err", "PyG rel err"),
    ("best_peer_max_rel_err_grad", "PyG grad rel err"),
]


def format_suite(
    rows: list[dict[str, Any]], geo: dict[str, dict[str, Any]], dtype: str = "float32"
) -> str:
    """The suite's summary: one row per cell, then the geometric means per mode."""
    lines = [
        f"\nsummary, {dtype} (speed-up and memory ratio of hector vs the best PyG layer per "
        "cell; errors relative to the largest reference value)",
        _common.format_table(rows, _SUITE_COLUMNS),
    ]
    for mode, g in geo.items():
        sp, mr = g["speedup"], g["memory_ratio"]
        lines.append(
            f"geomean {mode}: speed-up {f'{sp:.2f}x' if sp else 'n/a'}, memory ratio "
            f"{f'{mr:.2f}x' if mr else 'n/a'} over {g['cells_measured']} cells"
        )
    return "\n".join(lines)


def plot_suite(
    path: str, rows: list[dict[str, Any]], geo: dict[str, dict[str, Any]], dtype: str = "float32"
) -> None:
    """Bar chart of the suite: Hector's speed-up and memory ratio against the best PyG layer,
    per cell."""
    labels = [
        f"{r['model']} {r['dataset'].removeprefix('synthetic:')} {r['mode'][:5]}" for r in rows
    ]
    _common.bar_plot(
        path,
        f"hector vs best PyG layer, {dtype} (geomean: "
        + ", ".join(f"{m} {g['speedup']:.2f}x" for m, g in geo.items() if g["speedup"] is not None)
        + ")",
        labels,
        [
            ("speed-up vs best PyG (x)", [r.get("speedup_vs_best_peer") for r in rows], None),
            ("peak memory / best PyG", [r.get("memory_ratio_vs_best_peer") for r in rows], None),
        ],
    )
