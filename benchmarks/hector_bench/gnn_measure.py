"""Measuring one ``hector bench gnn`` system in this process: its first call (where Hector
compiles), the warm-up and timed calls, and the columns of its row (record fields:
docs/benchmarks.md, "Benchmark records"). The worker processes of :mod:`hector_bench.gnn_worker`
call it, one system per process.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from . import _common, roofline
from .gnn_compiled import (
    aggregation_order,
    cache_state,
    compile_seconds,
    compiled_functions,
    kernel_count,
    saved_bytes,
)
from .gnn_setup import Setup, System


def fresh_input(x: Any, requires_grad: bool, dtype: Any = None) -> Any:
    """A leaf copy of the input (dict or tensor) so systems never share gradients, converted to
    ``dtype`` when one is given (the float32 reference widens the rounded input: exactly)."""
    if isinstance(x, dict):
        return {k: fresh_input(v, requires_grad, dtype) for k, v in x.items()}
    return x.detach().to(dtype=dtype).clone().requires_grad_(requires_grad)


def input_dtype(setup: Setup, system: System) -> Any:
    """The ``torch.dtype`` a system is fed: its own (the float32 reference) or the cell's."""
    import torch

    return getattr(torch, system.dtype or setup.cell.dtype)


def _dtype_columns(setup: Setup, system: System, out: Any) -> dict[str, Any]:
    """The type the system ran in and the type(s) of what it returned (a PyG layer may
    accumulate a narrow type's products into a float32 output)."""
    kinds = sorted({str(v.dtype).removeprefix("torch.") for v in _values(out)})
    return {"dtype": system.dtype or setup.cell.dtype, "out_dtype": ",".join(kinds) or None}


def _values(out: Any) -> list[Any]:
    """The output tensors (a dict's non-None values, in key order) or ``[out]``."""
    if isinstance(out, dict):
        return [v for _, v in sorted(out.items()) if v is not None]
    return [out]


def loss_of(out: Any) -> Any:
    """``mean(out ** 2)`` over every output element (all node types for a dict)."""
    vals = _values(out)
    total = sum(v.numel() for v in vals)
    return sum(v.square().sum() for v in vals) / max(total, 1)


def zero_grad(module: Any, x: Any) -> None:
    """Drop the gradients of the layer's parameters and of the input (before a training step)."""
    if module is not None and hasattr(module, "zero_grad"):
        module.zero_grad(set_to_none=True)
    for v in x.values() if isinstance(x, dict) else [x]:
        v.grad = None


def make_step(module: Any, forward: Callable[[Any], Any], x: Any, training: bool) -> Callable:
    """One timed call: forward (no_grad) or zero_grad + forward + loss + backward."""
    import torch

    if not training:

        def infer() -> Any:
            with torch.no_grad():
                return forward(x)

        return infer

    def train() -> Any:
        zero_grad(module, x)
        out = forward(x)
        loss_of(out).backward()
        return out

    return train


def _grads(module: Any, x: Any) -> tuple[Any, dict[str, Any]]:
    """``(input grad(s), {param name: grad})`` after a backward pass."""
    xg = {k: v.grad for k, v in x.items()} if isinstance(x, dict) else x.grad
    params = {}
    if module is not None and hasattr(module, "named_parameters"):
        params = {n: p.grad for n, p in module.named_parameters() if p.grad is not None}
    return xg, params


def _sync(device: str) -> Callable[[], None] | None:
    """``torch.cuda.synchronize`` on CUDA (the clock stops after it), None on the CPU."""
    if device != "cuda":
        return None
    import torch

    return torch.cuda.synchronize


def _dst_compaction_ratio(setup: Setup) -> float | None:
    """``D / E`` of the graph the layer ran on (what the aggregation order is chosen by)."""
    ds = setup.dataset
    edges = int(ds.edge_type.numel())
    if not edges:
        return None
    pairs = ds.edge_type.long() * max(int(ds.num_nodes), 1) + ds.edge_index[1].long()
    return round(int(pairs.unique().numel()) / edges, 6)


def _detached(value: Any) -> Any:
    """A tensor (or dict of tensors) detached and on the CPU, for saving and comparing."""
    if isinstance(value, dict):
        return {k: _detached(v) for k, v in value.items()}
    return None if value is None else value.detach().cpu()


class _Progress:
    """The ``update(n)`` a timing loop reports its calls to, forwarded to ``progress``."""

    def __init__(self, progress: Callable[[int], None] | None) -> None:
        self._progress = progress

    def update(self, n: int = 1) -> None:
        """Report ``n`` more calls done."""
        if self._progress is not None:
            self._progress(n)


def _first_tensors(module: Any, x: Any, out: Any, training: bool) -> dict[str, Any]:
    """The output and, in training, the gradients of the first call, detached on the CPU."""
    grads = _grads(module, x) if training else (None, {})
    return {
        "out": _detached(out),
        "grad_input": _detached(grads[0]),
        "grad_params": {n: _detached(g) for n, g in grads[1].items()},
    }


def _compile_columns(
    fns: list[Any], cache_before: list[int], first_ms: float, median_ms: float
) -> dict[str, Any]:
    """Hector's compile time: as it reports it, else the first call minus the median run."""
    reported = compile_seconds(fns, cache_before)
    if reported is not None:
        return {
            "compile_ms": round(reported * 1e3, 3),
            "compile_ms_method": "reported by hector (compile_seconds)",
        }
    return {
        "compile_ms": round(max(first_ms - median_ms, 0.0), 3),
        "compile_ms_method": "first call minus median run",
    }


def _hector_columns(
    setup: Setup, system: System, module: Any, profiled: list[Any]
) -> dict[str, Any]:
    """What Hector's row adds: its optimizations, kernels, aggregation order, the saved
    activations (training) and the kernels' roofline profile (when they were profiled)."""
    cell = setup.cell
    cols: dict[str, Any] = {
        "optimizations": system.optimizations,
        "kernels": kernel_count(module, cell.training),
        "aggregation_order": aggregation_order(module),
        "dst_compaction_ratio": _dst_compaction_ratio(setup),
    }
    if cell.training:
        cols["saved_bytes"] = saved_bytes(module, setup.stats, cols["dst_compaction_ratio"])
    if profiled:
        import torch

        cols["kernel_profile"] = roofline.measure(profiled, torch.get_num_threads())
    return cols


def measure_system(
    setup: Setup, system: System, progress: Callable[[int], None] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run one system in this process: first call, then (unless it is an untimed peer) the
    warm-up and the timed calls.

    Returns ``(entry, tensors)``: the result entry without error columns, and the output and
    gradients of the first call (``out``, ``grad_input``, ``grad_params``) for comparison.
    """
    cell = setup.cell
    sync = _sync(cell.device)
    bar = _Progress(progress)
    entry: dict[str, Any] = {"system": system.name, "variant": system.variant}
    module, forward = system.build()
    x = fresh_input(setup.x, cell.training, input_dtype(setup, system))
    step = make_step(module, forward, x, cell.training)
    fns = compiled_functions(module) if system.name == "hector" else []
    cache_before = cache_state(fns)
    profile = bool(fns) and cell.roofline and cell.device == "cpu"
    t0 = time.perf_counter()
    with roofline.profiling() if profile else contextlib.nullcontext():
        out = step()  # first call: Hector compiles here
    if sync is not None:
        sync()
    first_ms = (time.perf_counter() - t0) * 1e3
    profiled = roofline.profiled_entries(fns) if profile else []
    roofline.reset(profiled)  # count the warm calls only
    bar.update(1)
    tensors = _first_tensors(module, x, out, cell.training)
    entry.update(_dtype_columns(setup, system, out))
    del out
    untimed = system.untimed_reason
    if system.name != "hector" and not cell.time_peers:
        untimed = untimed or "--no-peer-timing: run once as the error reference"
    if untimed is not None:
        entry.update(status="untimed", reason=untimed, first_call_ms=round(first_ms, 3))
        return entry, tensors
    timing = _common.time_calls(step, cell.runs, warmup=1, sync=sync, progress=bar)
    entry.update(status="ok", **timing.as_record())
    if system.name == "hector":
        entry.update(_compile_columns(fns, cache_before, first_ms, timing.median_ms))
    entry["first_call_ms"] = round(first_ms, 3)
    if system.name == "hector":
        entry.update(_hector_columns(setup, system, module, profiled))
    return entry, tensors
