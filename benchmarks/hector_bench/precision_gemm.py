"""``hector bench precision --gemm 256x256,...``: a GEMM template against ``torch.mm`` per type.

For each ``KxN`` shape and each type of ``--dtypes``: Hector's typed linear
(``g.typed_linear(x, w, slice="none")``, ``--gemm-rows`` rows, under ``no_grad``, so inputs
and result are in the type) and ``torch.mm`` on the same shape and type, into a preallocated
result. GFLOP/s (``2·M·K·N`` per call) of the fastest of ``--runs`` calls, timed with
``--clock``; both in this process, one after the other.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

#: What each call counts as.
COLUMNS = (
    ("shape", "shape"),
    ("dtype", "type"),
    ("hector_gflops", "Hector GFLOP/s"),
    ("torch_mm_gflops", "torch.mm GFLOP/s"),
    ("vs_torch_mm", "vs torch.mm"),
)


def shapes(text: str) -> list[tuple[int, int]]:
    """``"256x256,256x1024"`` as ``[(256, 256), (256, 1024)]``; ``ValueError`` otherwise."""
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        k, sep, n = part.partition("x")
        if not sep or not k.isdigit() or not n.isdigit() or int(k) < 1 or int(n) < 1:
            raise ValueError(f"--gemm wants KxN shapes such as 256x256, got {part!r}")
        out.append((int(k), int(n)))
    return out


def _fastest(fn: Any, runs: int, now: Callable[[], float]) -> float:
    fn()
    best = float("inf")
    for _ in range(runs):
        t0 = now()
        fn()
        best = min(best, now() - t0)
    return max(best, 1e-9)


def measure(
    dtypes: list[str], a: argparse.Namespace, now: Callable[[], float]
) -> list[dict[str, Any]]:
    """One row per shape of ``a.gemm`` and type, timed with the clock ``now``."""
    import torch

    import hector

    rows = a.gemm_rows
    g = hector.random_graph(rows, 8, 1, seed=a.seed)

    @hector.compile
    def linear(g: Any, x: Any, w: Any) -> Any:
        return g.typed_linear(x, w, slice="none")

    out = []
    gen = torch.Generator().manual_seed(a.seed)
    for k, n in shapes(a.gemm):
        x32 = torch.randn(rows, k, generator=gen)
        w32 = torch.randn(k, n, generator=gen) / k**0.5
        flops = 2.0 * rows * k * n
        for name in dtypes:
            dtype = getattr(torch, name)
            x, w, res = x32.to(dtype), w32.to(dtype), torch.empty(rows, n, dtype=dtype)
            with torch.no_grad():
                mine = _fastest(lambda x=x, w=w: linear(g, x, w), a.runs, now)
                ref = _fastest(lambda x=x, w=w, r=res: torch.mm(x, w, out=r), a.runs, now)
            out.append(
                {
                    "shape": f"[{rows}, {k}] x [{k}, {n}]",
                    "dtype": name,
                    "hector_gflops": round(flops / mine / 1e9, 3),
                    "torch_mm_gflops": round(flops / ref / 1e9, 3),
                    "vs_torch_mm": round(ref / mine, 3),
                }
            )
    return out
