"""What a Hector layer compiled, read off its compiled functions for a ``hector bench gnn`` row:
the activations a training step saves, the kernels one call runs, the aggregation order chosen,
and the compile time Hector reports (record fields: docs/benchmarks.md, "Benchmark records").
"""

from __future__ import annotations

import re
from typing import Any


def saved_bytes(
    module: Any, stats: dict[str, Any], dst_ratio: float | None = None
) -> dict[str, int] | None:
    """Bytes of the activations a training step saves for its backward pass, by row kind
    (``edge``, ``compact``, ``dst_compact``, ``node``): read off ``<f>_train``'s ABI (the shapes
    and kinds of its saved results), with the graph's edge, compact-row and node counts
    (``stats``) and its unique (destination, relation) pairs per edge (``dst_ratio``)."""
    fn = getattr(module, "compiled", None)
    if fn is None or not fn._cache:
        return None
    entry = list(fn._cache.values())[-1]
    abi = entry.staged.abi.get(f"{entry.traced.name}_train")
    if abi is None:
        return None
    edges = stats["edges"]
    compact = round(stats["compaction_ratio"] * edges)
    rows = {"edge": edges, "compact": compact, "node": stats["nodes"]}
    if dst_ratio is not None:
        rows["dst_compact"] = round(dst_ratio * edges)
    out = {"edge": 0, "compact": 0, "node": 0, "weight": 0}
    saved = range(len(abi.result_kinds) - abi.num_saved, len(abi.result_kinds))
    for i in saved:
        kind = str(abi.result_kinds[i])
        count = 1
        for d in abi.result_shapes[i]:
            count *= rows.get(kind, 1) if d is None else int(d)
        out[kind] = out.get(kind, 0) + 4 * count
    return out


def kernel_count(module: Any, training: bool) -> int | None:
    """Templates (= kernels on the GPU) in the functions one call runs: the forward function,
    or ``_train`` and ``_backward`` in training."""
    fn = getattr(module, "compiled", None)
    if fn is None or not fn._cache:
        return None
    entry = list(fn._cache.values())[-1]
    name = entry.traced.name
    wanted = (f"@{name}_train(", f"@{name}_backward(") if training else (f"@{name}(",)
    count = 0
    for chunk in entry.ir("intra").split("func.func ")[1:]:
        if chunk.startswith(wanted):
            count += chunk.count("hector_intra.gemm_template")
            count += chunk.count("hector_intra.traversal_template")
    return count


def aggregation_order(module: Any) -> list[str] | None:
    """The order ``hector-aggregation-order`` chose for each linear message of the layer's
    forward function (``transform-first`` / ``aggregate-first``), read off the compiled IR."""
    fn = getattr(module, "compiled", None)
    if fn is None or not fn._cache:
        return None
    entry = list(fn._cache.values())[-1]
    name = f"@{entry.traced.name}("
    chunks = entry.ir("intra").split("func.func ")[1:]
    head = next((c for c in chunks if c.startswith(name)), "").split("\n", 1)[0]
    found = re.search(r"hector\.aggregation_order = \[([^\]]*)\]", head)
    return [] if found is None else [v.strip().strip('"') for v in found.group(1).split(",")]


def compiled_functions(module: Any) -> list[Any]:
    """Hector compiled functions a layer calls (its own attributes, the module-level RGCN)."""
    from hector import models
    from hector.frontends import compiled as frontend

    found = [module, *getattr(module, "__dict__", {}).values()]
    if type(module).__name__ == "RGCNLayer":
        found.append(getattr(models, "rgcn_layer", None))
    out: list[Any] = []
    for obj in found:
        if isinstance(obj, frontend.CompiledFunction) and all(obj is not o for o in out):
            out.append(obj)
    return out


def cache_state(fns: list[Any]) -> list[int]:
    """How many compiled variants each function holds (a later count above it: it compiled)."""
    return [len(getattr(f, "_cache", ())) for f in fns]


def compile_seconds(fns: list[Any], before: list[int]) -> float | None:
    """Compile time Hector reports (``compile_seconds``) for functions that compiled since
    ``before``; 0.0 when every kernel came from the cache; None when nothing reports one."""
    if not fns or not all(isinstance(getattr(f, "compile_seconds", None), float) for f in fns):
        return None
    after = cache_state(fns)
    return sum(f.compile_seconds for f, b, a in zip(fns, before, after, strict=True) if a > b)
