"""The units an imported program is cut into: compiled hector_inter regions and torch segments.

:class:`Region` is one maximal region of raised ops, compiled by Hector; :class:`TorchSegment` a
maximal run of the torch ops between them, run compiled (torch-mlir's linalg path), as views
or eagerly. :class:`TorchSegmentFunction` runs a compiled torch segment under autograd.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..dialects import Kind
from .import_ops import DTYPES, FLOAT_DTYPES, ImportError_, is_glue, static_vtensor_shape

#: Gives a linalg segment's compiled vjp for a gradient mask and example inputs: ``(function,
#: differentiable input positions, floating-point output positions)``, built on first use
#: (:meth:`hector.frontends.import_plan.ImportPlan.backward_of`).
BackwardOf = Callable[["TorchSegment", tuple[bool, ...], list[Any]], Any]


@dataclass
class Region:
    """One compiled hector_inter region: its ops, inputs, outputs and compiled entry."""

    name: str
    ops: list[Any] = field(default_factory=list)
    inputs: list[Any] = field(default_factory=list)
    outputs: list[Any] = field(default_factory=list)
    input_kinds: list[Kind] = field(default_factory=list)
    output_kinds: list[Kind] = field(default_factory=list)
    text: str = ""
    entry: Any = None


@dataclass
class TorchSegment:
    """A maximal run of torch ops between hector regions (one phase of the plan).

    ``kind`` says how it runs: ``"linalg"`` (compiled through torch-mlir's linalg path,
    :attr:`compiled`), ``"view"`` (only metadata ops: constants, lists, views; run as torch
    views, no kernel) or ``"eager"`` (``fallback="eager"``: op by op with ``torch.ops.aten``).
    ``ops`` are in program order and include the scalar glue (constants, lists) the segment
    reads, cloned into it; ``backward`` caches one compiled vjp per gradient mask.
    """

    name: str
    ops: list[Any] = field(default_factory=list)
    inputs: list[Any] = field(default_factory=list)
    input_types: list[Any] = field(default_factory=list)
    outputs: list[Any] = field(default_factory=list)
    kind: str = "linalg"
    text: str = ""
    compiled: Any = None
    backward: dict[tuple[bool, ...], Any] = field(default_factory=dict)

    def ir(self, stage: str = "torch") -> str:
        """The segment's IR after ``stage`` (``torch``, ``linalg``, ``loops``, ``llvm``)."""
        if stage == "torch":
            return self.text
        if self.compiled is None:
            raise KeyError(f"segment {self.name} runs as {self.kind!r}: it has no {stage!r} IR")
        return self.compiled.ir(stage)

    def op_names(self) -> str:
        """The names of the segment's ops (not its glue), sorted, the first six of them."""
        names = sorted({op.name for op in self.ops if not is_glue(op)})
        return ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")


def lowering_error(
    seg: TorchSegment,
    err: Any,
    what: str,
    advice: str = "import with fallback='eager' to run this segment's ops with PyTorch instead",
) -> ImportError_:
    """The :class:`ImportError_` for a segment torch-mlir cannot lower (each op with its
    ``file:line``), ending with ``advice`` (by default: ``fallback="eager"``)."""
    from hector.lowering.from_torch.raise_to_hector import source_location

    found = list(err.ops)
    if not found:
        # The diagnostic names an op torch-mlir produced on the way: name the user's torch
        # ops at the same source line instead.
        for op in seg.ops:
            where = source_location(op.location)
            if where in err.locations and not is_glue(op) and (op.name, where) not in found:
                found.append((op.name, where))
    lines = "\n".join(f"  {where}: {name}" for name, where in found)
    detail = "\n".join("  " + ln for ln in str(err).splitlines()[1:])
    lines = (lines + "\n  torch-mlir said:\n" + detail) if lines else detail or f"  {err}"
    return ImportError_(
        f"torch-mlir cannot lower the {what} of {seg.name} to linalg for the CPU "
        f"(fallback='linalg'):\n{lines}\n{advice}"
    )


class TorchSegmentFunction(torch.autograd.Function):
    """A compiled torch segment under autograd: forward runs the compiled forward, backward
    the compiled vjp (built on the first backward, per gradient mask)."""

    @staticmethod
    def forward(ctx: Any, backward_of: BackwardOf, seg: TorchSegment, *tensors: Any) -> Any:
        """Run the compiled forward and save the inputs for the vjp."""
        outs = seg.compiled(*tensors)
        ctx.backward_of, ctx.seg = backward_of, seg
        ctx.save_for_backward(*tensors)
        ctx.mark_non_differentiable(*(o for o in outs if not o.is_floating_point()))
        return tuple(outs)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        """Run the compiled vjp of the segment."""
        seg: TorchSegment = ctx.seg
        tensors = list(ctx.saved_tensors)
        mask = tuple(
            bool(need) and t.is_floating_point()
            for need, t in zip(ctx.needs_input_grad[2:], tensors, strict=True)
        )
        if not any(mask):
            return (None, None, *([None] * len(tensors)))
        cts = []
        for j, r in enumerate(seg.outputs):
            shape, dt = static_vtensor_shape(r.type)
            if dt in FLOAT_DTYPES:
                g = grads[j]
                zero = torch.zeros(shape, dtype=DTYPES.get(dt, torch.float32))
                cts.append(zero if g is None else g.contiguous())
        with torch.no_grad():
            fn, diff, _ = ctx.backward_of(seg, mask, [*tensors, *cts])
            res = fn(*tensors, *cts)
        out: list[Any] = [None] * len(tensors)
        for i, gi in zip(diff, res, strict=True):
            out[i] = gi
        return (None, None, *out)
