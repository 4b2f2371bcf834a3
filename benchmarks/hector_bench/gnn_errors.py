"""How far a ``hector bench gnn`` system's output and gradients are from the reference PyG
layer's: the ``max_abs_err*`` / ``max_rel_err*`` columns of its row (docs/benchmarks.md,
"Benchmark records")."""

from __future__ import annotations

from typing import Any


def _max_abs_diff(a: Any, b: Any) -> float | None:
    """Max abs difference of two outputs (tensors, or dicts compared on their common keys)."""
    if isinstance(a, dict) and isinstance(b, dict):
        diffs = [
            _max_abs_diff(a[k], b[k]) for k in a if k in b and a[k] is not None and b[k] is not None
        ]
        found = [d for d in diffs if d is not None]
        return max(found) if found else None
    if a is None or b is None or getattr(a, "shape", None) != getattr(b, "shape", None):
        return None
    if a.numel() == 0:
        return 0.0
    return float((a.detach().float() - b.detach().float()).abs().max())


def _max_abs(value: Any) -> float | None:
    """Largest |value| of a tensor or a dict of tensors (None when there is nothing)."""
    if isinstance(value, dict):
        found = [m for m in (_max_abs(v) for v in value.values()) if m is not None]
        return max(found) if found else None
    if value is None:
        return None
    return float(value.detach().float().abs().max()) if value.numel() else 0.0


def _relative(abs_err: float | None, scale: float | None) -> float | None:
    """``abs_err / scale`` (``max_rel_err``); None where either is missing or the scale is 0."""
    if abs_err is None or not scale:
        return None
    return abs_err / scale


def error_columns(tensors: dict[str, Any], ref: dict[str, Any], training: bool) -> dict[str, Any]:
    """A system's errors against the reference's output and gradients.

    Every ``max_abs_err*`` column comes with ``max_rel_err*`` = it over max |reference| of the
    same tensors (``ref_*max_abs``), so an error on a graph with large hubs (large outputs) can be
    told apart from a bug. Parameters compared: those whose names and shapes match the
    reference's.
    """
    cols: dict[str, Any] = {}
    cols["max_abs_err"] = _max_abs_diff(tensors["out"], ref["out"])
    cols["ref_max_abs"] = _max_abs(ref["out"])
    cols["max_rel_err"] = _relative(cols["max_abs_err"], cols["ref_max_abs"])
    if not training:
        return cols
    cols["max_abs_err_grad_input"] = _max_abs_diff(tensors["grad_input"], ref["grad_input"])
    # The scale the gradient errors compare against (the loss is a mean: gradients are small).
    cols["ref_grad_input_max_abs"] = _max_abs(ref["grad_input"])
    cols["max_rel_err_grad_input"] = _relative(
        cols["max_abs_err_grad_input"], cols["ref_grad_input_max_abs"]
    )
    mine, theirs = tensors["grad_params"], ref["grad_params"]
    common = [n for n, g in mine.items() if n in theirs and theirs[n].shape == g.shape]
    cols["grad_params_compared"] = common
    cols["max_abs_err_grad_params"] = (
        max(float((mine[n].float() - theirs[n].float()).abs().max()) for n in common)
        if common
        else None
    )
    cols["ref_grad_params_max_abs"] = _max_abs({n: theirs[n] for n in common}) if common else None
    cols["max_rel_err_grad_params"] = _relative(
        cols["max_abs_err_grad_params"], cols["ref_grad_params_max_abs"]
    )
    return cols
