"""Roofline rows for ``hector bench gnn``: each template's time, work and distance from the machine.

Hector's CPU kernels are compiled with ``hector-profile-kernels`` (``HECTOR_PROFILE_KERNELS=1``
around the first call, which compiles): each template then counts its wall time, rows and calls
(:mod:`hector.lowering.profile_kernels`). After the timed calls the benchmark reads the counters
of every compiled function the layer ran and turns them into *kernel rows*: mean milliseconds per
call, nominal FLOPs and compulsory bytes, achieved GFLOP/s and GB/s, and two references measured
in the same process at the same ``torch.get_num_threads()``:

* ``torch_mm_gflops`` (and ``torch_mm_gflops_1thread``; a GEMM's ``fraction_of_torch_mm`` is
  against the better of the two) — ``torch.mm`` on the GEMM template's own shape
  (``[M, K] @ [K, N]`` for ``xw``, ``[M, K] @ [N, K]ᵀ`` for ``xwt``, ``[M, K]ᵀ @ [M, N]`` for
  ``xty``), contiguous operands, one weight, in the template's own type (``dtype``: bfloat16
  where its operands are stored in bf16 and it multiplies bf16 pairs, else float32): the dense
  GEMM the template would be if its rows were packed;
* ``copy_gbps`` — ``Tensor.copy_`` of 64 MiB (bytes read + written per second; the better of
  the two thread counts): the memory ceiling a traversal (memory-bound) is compared with.

References and kernels are both the fastest of their repeated calls, so other work on a shared
machine costs both sides alike.

Formulas and fields: ``docs/benchmarks.md``, "Roofline".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from . import _common

#: Seconds one reference measurement may spend repeating a call (after one warm-up call), and
#: how many such measurements, spread over time (round-robin over the shapes), keep their best:
#: a burst of other work on a shared machine then spoils one round, not the reference.
REFERENCE_SECONDS = 0.15
REFERENCE_ROUNDS = 3
#: Bytes of the copy the memory ceiling is measured on (well past any cache).
COPY_BYTES = 64 * 2**20

METHOD = (
    "per template: wall time between rtclock() reads around it (hector-profile-kernels) over "
    "the warm-up and timed calls: ms = mean, min_ms = fastest call; flops = 2*M*K*N (GEMM) or "
    "the row function's nominal count (traversal); bytes = compulsory f32/i32 traffic, gathered "
    "rows counted at each use; gflops/gbps = of the fastest call; torch_mm_gflops = fastest "
    "torch.mm on the template's [M,K]x[K,N] shape (contiguous, one weight, out= a preallocated "
    "result; 3 rounds of about "
    "0.15 s, round-robin over the shapes) and copy_gbps = fastest Tensor.copy_ of 64 MiB, both "
    "in the same process at the same "
    "torch.get_num_threads(), and on one thread (torch_mm_gflops_1thread; copy_gbps is the "
    "better of the two): fraction_of_torch_mm = gflops / torch_mm_best_gflops, the better of "
    "the two, since on a shared machine a multi-threaded torch.mm of a small shape can lose "
    "more to descheduled threads than it gains; gemm_fraction_of_torch_mm = torch_mm_ms "
    "(the GEMM templates' flops at torch_mm_best_gflops) / gemm_min_ms; a gradient pair's "
    "xwt reads no time (it runs in its xty's timer): pair_fraction_of_torch_mm on the xty = "
    "torch.mm's time for both products' work / the xty's min_ms"
)


@contextmanager
def profiling() -> Iterator[None]:
    """CPU kernels compiled inside the ``with`` are profiled (``HECTOR_PROFILE_KERNELS=1``)."""
    import os

    from hector.lowering.profile_kernels import ENV

    before = os.environ.get(ENV)
    os.environ[ENV] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ[ENV]
        else:
            os.environ[ENV] = before


def profiled_entries(fns: Iterable[Any]) -> list[Any]:
    """The compiled entries of ``fns`` (Hector ``CompiledFunction`` objects) that carry kernel
    timers."""
    out = []
    for fn in fns:
        for entry in getattr(fn, "_cache", {}).values():
            if getattr(entry, "profiled", None):
                out.append(entry)
    return out


def reset(entries: Iterable[Any]) -> None:
    """Zero the counters of ``entries`` (what ran before is not counted)."""
    for entry in entries:
        entry.kernel_profile()


def _best_seconds(call: Callable[[], object], budget_s: float = REFERENCE_SECONDS) -> float:
    """Seconds of the fastest call of ``call`` after one warm-up call, repeated for about
    ``budget_s`` (at least 3 times, at most 200): the ceiling, as little disturbed as can be by
    other work on the machine (Hector's kernel rows take their fastest call too)."""
    call()
    times: list[float] = []
    spent = 0.0
    while len(times) < 3 or (spent < budget_s and len(times) < 200):
        t0 = time.perf_counter()
        call()
        dt = time.perf_counter() - t0
        times.append(dt)
        spent += dt
    return min(times)


def torch_mm_gflops(
    variant: str,
    m: int,
    k: int,
    n: int,
    threads: int | None = None,
    budget_s: float = REFERENCE_SECONDS,
    dtype: str = "float32",
) -> float | None:
    """``torch.mm``'s GFLOP/s (``2·M·K·N`` per call, fastest call of about ``budget_s``) on the
    shape of a GEMM template of ``variant``, in ``dtype`` (a ``torch`` type's name), at
    ``threads`` (default: ``torch.get_num_threads()``); None for an empty shape."""
    import torch

    if threads is not None and threads != torch.get_num_threads():
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return torch_mm_gflops(variant, m, k, n, budget_s=budget_s, dtype=dtype)
        finally:
            torch.set_num_threads(before)

    if min(m, k, n) <= 0:
        return None
    gen = torch.Generator().manual_seed(0)
    kind = getattr(torch, dtype)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(kind)

    a = randn(m, k)
    # Into a preallocated output, as a template writes its caller's buffer: a fresh [M, N]
    # result per call would time the allocator's page faults too.
    if variant == "xty":
        g = randn(m, n)
        at, dw = a.t(), torch.empty(k, n, dtype=kind)

        def call() -> object:
            return torch.mm(at, g, out=dw)
    elif variant == "xwt":
        w = randn(n, k)
        wt, out = w.t(), torch.empty(m, n, dtype=kind)

        def call() -> object:
            return torch.mm(a, wt, out=out)
    else:
        w = randn(k, n)
        out = torch.empty(m, n, dtype=kind)

        def call() -> object:
            return torch.mm(a, w, out=out)

    with torch.no_grad():
        seconds = _best_seconds(call, budget_s)
    return 2.0 * m * k * n / seconds / 1e9


def copy_gbps(threads: int | None = None) -> float:
    """GB/s of ``Tensor.copy_`` on :data:`COPY_BYTES` (read + written), at ``threads`` (default:
    the current ``torch.get_num_threads()``)."""
    import torch

    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        src = torch.ones(COPY_BYTES // 4)
        dst = torch.empty_like(src)
        seconds = _best_seconds(lambda: dst.copy_(src))
    finally:
        torch.set_num_threads(before)
    return 2.0 * COPY_BYTES / seconds / 1e9


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def kernel_rows(entries: Iterable[Any]) -> list[dict[str, Any]]:
    """One row per template that ran since the counters were last read (counters then zeroed),
    with its ``torch.mm`` reference (GEMMs; one measurement per distinct shape)."""
    rows: list[dict[str, Any]] = []
    timings = []
    for entry in entries:
        for t in entry.kernel_profile():
            if not t.calls:
                continue  # a function of the module this call did not run
            k = t.info
            m = round(t.mean_rows)
            row: dict[str, Any] = {
                "name": k.name,
                "function": k.function,
                "template": k.template,
                "variant": k.variant,
                "combine": k.combine,
                "M": m,
                "K": k.k,
                "N": k.n,
                "dtype": k.dtype,
                "calls": t.calls,
                "ms": _round(t.ms),
                "min_ms": _round(t.min_ms),
                "flops": int(t.flops),
                "bytes": int(t.bytes),
                "intensity": _round(t.flops / t.bytes if t.bytes else None),
                "gflops": _round(t.gflops, 3),
                "gbps": _round(t.gbps, 3),
                "source": k.source,
            }
            rows.append(row)
            timings.append(t)
    shapes = {
        (r["variant"], r["M"], r["K"], r["N"], threads, r["dtype"]): None
        for r in rows
        if r["template"] == "gemm"
        for threads in (None, 1)
    }
    references: dict[tuple[str, int, int, int, int | None, str], float | None] = {}
    for _ in range(REFERENCE_ROUNDS):
        for shape in shapes:
            variant, m, k, n, threads, dtype = shape
            got = torch_mm_gflops(variant, m, k, n, threads, dtype=dtype)
            old = references.get(shape)
            references[shape] = got if old is None or (got is not None and got > old) else old
    for row, t in zip(rows, timings, strict=True):
        if row["template"] != "gemm":
            continue
        for threads, key in ((None, "torch_mm_gflops"), (1, "torch_mm_gflops_1thread")):
            row[key] = _round(
                references[(row["variant"], row["M"], row["K"], row["N"], threads, row["dtype"])],
                3,
            )
        refs = [row["torch_mm_gflops"], row["torch_mm_gflops_1thread"]]
        ref = max((r for r in refs if r is not None), default=None)
        row["torch_mm_best_gflops"] = ref
        row["fraction_of_torch_mm"] = (
            _round(t.gflops / ref) if t.gflops is not None and ref else None
        )
    _pair_fractions(rows)
    return rows


def _mm_seconds(row: dict[str, Any]) -> float | None:
    """The seconds ``torch.mm`` takes for a GEMM row's work at its best reference."""
    ref = row.get("torch_mm_best_gflops")
    return row["flops"] / (ref * 1e9) if ref else None


def _pair_fractions(rows: list[dict[str, Any]]) -> None:
    """A gradient pair (``hector-pair-gradient-gemms``: an ``xwt`` computed inside the tiles
    of the ``xty`` after it, on the same rows) has one timer, the ``xty``'s; its ``xwt`` row
    reads no time. Each such ``xwt`` is matched with the first later ``xty`` of its function
    over the same ``M`` rows; both rows get ``paired_with`` (the other's name), and the ``xty``
    gets ``pair_fraction_of_torch_mm``: ``torch.mm``'s time for both products' work over the
    pair's fastest call (its ``fraction_of_torch_mm`` counts the ``xty``'s work alone)."""
    for i, xwt in enumerate(rows):
        if xwt["variant"] != "xwt" or xwt["template"] != "gemm" or xwt["gflops"] is not None:
            continue
        xty = next(
            (
                r
                for r in rows[i + 1 :]
                if r["function"] == xwt["function"]
                and r["template"] == "gemm"
                and r["variant"] == "xty"
                and r["M"] == xwt["M"]
                and "paired_with" not in r
            ),
            None,
        )
        if xty is None:
            continue
        xwt["paired_with"], xty["paired_with"] = xty["name"], xwt["name"]
        mm = [_mm_seconds(xwt), _mm_seconds(xty)]
        seconds = xty["min_ms"] / 1e3
        xty["pair_fraction_of_torch_mm"] = (
            _round(sum(m for m in mm if m is not None) / seconds)
            if seconds > 0 and None not in mm
            else None
        )


def summary(rows: list[dict[str, Any]], ceiling_gbps: float | None) -> dict[str, Any]:
    """The machine references and the GEMM templates taken together: their total time against
    ``torch.mm``'s time on the same shapes (``gemm_fraction_of_torch_mm``), and the least
    fraction of any one GEMM template; each row also gets ``fraction_of_copy_gbps``."""
    for r in rows:
        r["fraction_of_copy_gbps"] = (
            _round(r["gbps"] / ceiling_gbps) if r["gbps"] is not None and ceiling_gbps else None
        )
    gemms = [r for r in rows if r["template"] == "gemm" and r.get("torch_mm_best_gflops")]
    # Fastest calls on both sides: the GEMM templates' time against torch.mm's for their work.
    ms = sum(r["min_ms"] for r in gemms)
    mm_ms = sum(r["flops"] / (r["torch_mm_best_gflops"] * 1e6) for r in gemms)
    fractions = [r["fraction_of_torch_mm"] for r in gemms if r["fraction_of_torch_mm"] is not None]
    return {
        "copy_gbps": _round(ceiling_gbps, 3),
        "kernel_ms": _round(sum(r["ms"] for r in rows)),
        "gemm_ms": _round(sum(r["ms"] for r in gemms)),
        "gemm_min_ms": _round(ms),
        "torch_mm_ms": _round(mm_ms),
        "gemm_fraction_of_torch_mm": _round(mm_ms / ms if ms else None),
        "min_gemm_fraction_of_torch_mm": _round(min(fractions) if fractions else None),
        "method": METHOD,
    }


def measure(entries: list[Any], threads: int) -> dict[str, Any]:
    """Kernel rows of ``entries`` (counters read and zeroed) plus the run's machine references,
    at ``threads`` (``torch.get_num_threads()`` of the timed calls; references on one thread
    too), measured outside any address-space cap of this process."""
    # The references are the benchmark's apparatus, not the system's work: in a worker under
    # an address-space cap (hector bench gnn) they run with the cap lifted, so the 2 x 64 MiB
    # copy never fails (or crowds out) the system measured there.
    with _common.address_space_cap_lifted():
        rows = kernel_rows(entries)
        ceiling = max(copy_gbps(t) for _ in range(REFERENCE_ROUNDS) for t in (None, 1))
    out = summary(rows, ceiling)
    return {"threads": threads, **out, "kernels": rows}


_KERNEL_COLUMNS = [
    ("name", "kernel"),
    ("combine", "combine"),
    ("M", "M"),
    ("K", "K"),
    ("N", "N"),
    ("dtype", "type"),
    ("ms", "mean ms"),
    ("min_ms", "min ms"),
    ("gflops", "GFLOP/s"),
    ("gbps", "GB/s"),
    ("torch_mm_gflops", "torch.mm GFLOP/s"),
    ("torch_mm_gflops_1thread", "(1 thread)"),
    ("fraction_of_torch_mm", "of torch.mm"),
    ("pair_fraction_of_torch_mm", "pair of torch.mm"),
    ("fraction_of_copy_gbps", "of copy GB/s"),
]


def format_profile(label: str, profile: dict[str, Any]) -> str:
    """The kernel rows of one Hector system as a table, headed by the machine references."""
    frac = profile.get("gemm_fraction_of_torch_mm")
    head = (
        f"kernels of {label} (mean per call; references at {profile['threads']} threads: "
        f"copy {profile.get('copy_gbps')} GB/s; GEMM templates together at "
        f"{f'{frac:.1%}' if frac is not None else 'n/a'} of torch.mm)"
    )
    return "\n".join([head, _common.format_table(profile["kernels"], _KERNEL_COLUMNS)])


def plot(record: dict[str, Any], path: str) -> bool:
    """Roofline plot of a record's Hector kernels: achieved GFLOP/s against arithmetic intensity
    (log-log), GEMMs below their ``torch_mm_best_gflops``, with the copy bandwidth's slope. Returns
    False (nothing written) when the record has no kernel rows."""
    profiles = [
        (r["variant"], r["kernel_profile"])
        for r in record["results"]
        if r.get("system") == "hector" and r.get("kernel_profile")
    ]
    points = [k for _, p in profiles for k in p["kernels"] if k.get("gflops")]
    if not points:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    xs = [k["intensity"] for k in points if k["intensity"]]
    lo, hi = min(xs) / 2, max(xs) * 2
    ceiling = profiles[0][1].get("copy_gbps")
    if ceiling:
        ax.plot([lo, hi], [ceiling * lo, ceiling * hi], "k--", lw=1, label=f"copy {ceiling} GB/s")
    for k in points:
        marker = "o" if k["template"] == "gemm" else "s"
        ax.scatter(k["intensity"], k["gflops"], marker=marker, s=30)
        ax.annotate(k["name"].split(" ", 1)[0], (k["intensity"], k["gflops"]), fontsize=6)
        best = k.get("torch_mm_best_gflops")
        if best:
            ax.scatter(k["intensity"], best, marker="_", s=200, color="red")
            ax.plot([k["intensity"]] * 2, [k["gflops"], best], ":", color="red", lw=0.8)
    ax.scatter([], [], marker="_", color="red", s=200, label="torch.mm, same shape (best)")
    ax.scatter([], [], marker="o", color="gray", label="GEMM template")
    ax.scatter([], [], marker="s", color="gray", label="traversal template")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / compulsory byte)")
    ax.set_ylabel("GFLOP/s")
    threads = profiles[0][1]["threads"]
    ax.set_title(
        f"{record['model']} {record['mode']} on {record['dataset']}: Hector kernels "
        f"({threads} threads)"
    )
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
