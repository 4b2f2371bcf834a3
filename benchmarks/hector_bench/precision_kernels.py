"""``hector bench precision --kernels``: a training step's time per kernel, in each type.

For each model and type of ``--dtypes``, a separate copy of the training step (float32
weights, features in the type, as the ``training`` rows) is compiled with
``hector-profile-kernels`` (:func:`.roofline.profiling`) and run ``--runs`` times after the
compiling call. Each template of its ``_train`` and ``_backward`` functions gets the fastest
call's wall milliseconds (the timers' own, so a shared machine's load falls on the fastest
call least). Templates are matched across types by what they compute — function (``train``
or ``backward``), template, variant or row function, rows, ``K`` and ``N``, and their order
among equal ones — and each row gives float32's time over the type's; a template only one
type runs (a rounding copy the other folds away) has no ratio.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import roofline

#: Columns of the per-kernel table.
COLUMNS = (
    ("model", "model"),
    ("phase", "phase"),
    ("kernel", "kernel"),
    ("M", "M"),
    ("K", "K"),
    ("N", "N"),
    ("float32_ms", "f32 ms"),
    ("other_ms", "ms"),
    ("other", "type"),
    ("f32_over_type", "f32 / type"),
)


def _profile(step: Any, fn: Any, runs: int) -> dict[tuple, float]:
    """The fastest call's ms of each template of ``fn``'s profiled entries over ``runs``
    calls of ``step`` (after one compiling call), keyed as the module docstring says."""
    with roofline.profiling():
        step()
    entries = roofline.profiled_entries([fn])
    roofline.reset(entries)
    for _ in range(runs):
        step()
    out: dict[tuple, float] = {}
    seen: dict[tuple, int] = {}
    for entry in entries:
        for t in entry.kernel_profile():
            if not t.calls:
                continue
            k = t.info
            phase = k.function.rsplit("_", 1)[-1].split("#")[0]
            label = k.name.split(" ", 1)[-1] if " " in k.name else k.name
            key = (phase, label, round(t.mean_rows), k.k, k.n)
            seen[key] = seen.get(key, 0) + 1
            out[(*key, seen[key])] = t.min_ms
    return out


def measure(model: str, steps: dict[str, tuple[Callable[[], Any], Any]], runs: int) -> list[dict]:
    """Rows of the per-kernel table of ``model``'s training step: ``steps`` maps each type
    (float32 first) to its step and the compiled function it calls."""
    dtypes = list(steps)
    times = {name: _profile(step, fn, runs) for name, (step, fn) in steps.items()}
    base = times[dtypes[0]]
    rows = []
    for other in dtypes[1:]:
        have = times[other]
        for key in [*base, *(k for k in have if k not in base)]:
            f32, ms = base.get(key), have.get(key)
            rows.append(
                {
                    "model": model,
                    "phase": key[0],
                    "kernel": key[1],
                    "M": key[2],
                    "K": key[3],
                    "N": key[4],
                    "float32_ms": None if f32 is None else round(f32, 3),
                    "other_ms": None if ms is None else round(ms, 3),
                    "other": other,
                    "f32_over_type": round(f32 / ms, 2) if f32 and ms else None,
                }
            )
        total = {"float32": sum(base.values()), other: sum(have.values())}
        rows.append(
            {
                "model": model,
                "phase": "all",
                "kernel": "sum of the kernels",
                "float32_ms": round(total["float32"], 3),
                "other_ms": round(total[other], 3),
                "other": other,
                "f32_over_type": round(total["float32"] / total[other], 2)
                if total[other]
                else None,
            }
        )
    return rows
