"""Training through a compiled program: ``<f>_train`` forward, ``<f>_backward`` backward.

One ``torch.autograd.Function`` serves every program that carries the pair — functions compiled
by ``hector.compile``, the regions ``hector.import_model`` compiles, and ahead-of-time bundles —
so they save the same tensors (through ``ctx.save_for_backward``, hence through saved-tensor
hooks such as activation offloading) and sum gradients the same way. It needs only PyTorch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from . import host_memory


@dataclass(frozen=True)
class TrainingAbi:
    """What the autograd glue needs to know of ``<name>_train`` / ``<name>_backward``.

    ``result_kinds`` / ``result_shapes`` describe ``<name>``'s results (``None`` in a shape: the
    row count of that kind on the graph); ``grad_of`` gives, for each result of
    ``<name>_backward``, the tensor argument it is a gradient of.
    """

    name: str
    result_kinds: Sequence[str]
    result_shapes: Sequence[Sequence[int | None]]
    grad_of: Sequence[int]


class TrainingProgram(Protocol):
    """A program with a training pair: its ABI and a way to call its functions."""

    @property
    def training_abi(self) -> TrainingAbi:
        """The ABI of its ``<name>_train`` / ``<name>_backward`` pair."""
        ...

    def call(self, function: str, g: Any, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """Run ``function`` on graph ``g`` and ``tensors``; its results."""
        ...


def rows_of(kind: str, g: Any) -> int:
    """How many rows a value of ``kind`` has on graph ``g`` (weights have none: edges)."""
    if kind == "node":
        return int(g.num_nodes)
    if kind == "compact":
        return int(g.num_compact)
    if kind == "dst_compact":
        return int(g.num_dst_compact)
    return int(g.num_edges)


def _dense(grad: torch.Tensor) -> torch.Tensor:
    """``grad`` as a contiguous tensor, copied only when it is not (the gradient of a ``sum()``
    is one element expanded); a CPU copy comes from the host memory cache, as the compiled
    functions' own results do, so a training step does not fault a fresh buffer in."""
    if grad.is_contiguous():
        return grad
    if grad.device.type != "cpu":
        return grad.contiguous()
    dense = torch.from_numpy(host_memory.empty(tuple(grad.shape)))
    dense.copy_(grad)
    return dense


class TrainingStep(torch.autograd.Function):
    """``TrainingStep.apply(program, g, *tensors)``: the results of ``<f>_train``, with the
    values it saves kept for ``<f>_backward``."""

    @staticmethod
    def forward(ctx: Any, program: TrainingProgram, g: Any, *tensors: torch.Tensor) -> Any:
        """Run ``<f>_train``; save the inputs and the values the backward reads."""
        abi = program.training_abi
        # A program that offloads saved values (placement-plan-saved) runs each step in its
        # own frame of the store: its generated code writes and reads them itself.
        open_frame = getattr(program, "placement_frame", None)
        frame = open_frame() if open_frame is not None else None
        with frame.current(f"{abi.name}_train") if frame else contextlib.nullcontext():
            outs = program.call(f"{abi.name}_train", g, list(tensors))
        n = len(abi.result_kinds)
        ctx.program, ctx.g, ctx.n_inputs, ctx.frame = program, g, len(tensors), frame
        ctx.save_for_backward(*tensors, *outs[n:])
        for t in outs[n:]:
            ctx.mark_non_differentiable(t)
        return tuple(outs[:n])

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> Any:
        """Run ``<f>_backward`` (zeros for results without a gradient); sum each input's
        partial gradients."""
        program, g = ctx.program, ctx.g
        abi = program.training_abi
        stored = ctx.saved_tensors
        tensors, saved = list(stored[: ctx.n_inputs]), list(stored[ctx.n_inputs :])
        device = tensors[0].device if tensors else torch.device("cpu")
        d_outs = []
        for grad, kind, shape in zip(grads, abi.result_kinds, abi.result_shapes, strict=True):
            if grad is None:
                grad = torch.zeros([rows_of(kind, g) if d is None else d for d in shape])
            d_outs.append(_dense(grad.to(device).float()))
        frame = ctx.frame
        with frame.current(f"{abi.name}_backward") if frame else contextlib.nullcontext():
            partials = program.call(f"{abi.name}_backward", g, [*tensors, *saved, *d_outs])
        if frame is not None:
            frame.close()  # the step is over: its stored values go
        result: list[torch.Tensor | None] = [None] * ctx.n_inputs
        for pos, part in zip(abi.grad_of, partials, strict=True):
            # the partials are this call's own fresh results: sum them in place
            result[pos] = part if result[pos] is None else result[pos].add_(part)
        return (None, None, *result)
