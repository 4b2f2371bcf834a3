"""The layer programs' calls in a compiled graph, run without ``torch.library``'s dispatch.

Dynamo records a routed layer as a ``hector::pyg_layer`` node (:mod:`hector.dynamo.pyg_route`):
the custom op gives it a fake implementation and an autograd formula while the frame is traced.
Once the graph is captured, running it through the op costs, every call, the dispatcher and
``torch.library``'s Python autograd wrapper (its default-filling and ``pytree`` walks over the
arguments, forward and backward): about 0.3 ms a training step on a 2-core machine, some 3% of
the RGCN route's step. :func:`direct_calls` rewrites the captured graph's op nodes into calls of
:func:`call_layer`, a ``torch.autograd.Function`` around the same implementation and the same
backward (``pyg_route``'s), last of :mod:`hector.dynamo.pyg_passes`' rewrites. Results and
gradients are the same bits; the op stays what Dynamo traces and what :func:`program_names`
finds.
"""

from __future__ import annotations

from typing import Any

import torch

from . import pyg_route

#: The op's own implementation (below its autograd formula).
_IMPLEMENTATION = pyg_route.run_layer


class _LayerCall(torch.autograd.Function):
    """``hector::pyg_layer`` as an autograd function: the op's implementation forward, its
    registered formula (``pyg_route._backward``) backward."""

    @staticmethod
    def forward(
        ctx: Any,
        program: str,
        train: list[int],
        graph: list[torch.Tensor],
        sizes: list[int],
        ends: list[int],
        *tensors: torch.Tensor,
    ) -> torch.Tensor:
        out = _IMPLEMENTATION(program, train, graph, sizes, ends, list(tensors))
        ctx.program = program
        ctx.no_grads = []  # pyg_route._backward: only the tensors' gradients, as one list
        ctx.hector = pyg_route._SAVED.pop(id(out), None)
        ctx.save_for_backward(*tensors)
        ctx.set_materialize_grads(True)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        (grads,) = pyg_route._backward(ctx, grad)
        return (None, None, None, None, None, *grads)


def call_layer(
    program: str,
    train: list[int],
    graph: list[torch.Tensor],
    sizes: list[int],
    ends: list[int],
    tensors: list[torch.Tensor],
) -> torch.Tensor:
    """``torch.ops.hector.pyg_layer(...)`` with the same arguments and results, gradients
    included, called directly (:class:`_LayerCall`)."""
    return _LayerCall.apply(program, train, graph, sizes, ends, *tensors)


pyg_route.LAYER_CALLS.add(call_layer)
_OP_TARGETS = (torch.ops.hector.pyg_layer.default, torch.ops.hector.pyg_layer)


def direct_calls(gm: torch.fx.GraphModule) -> int:
    """Make every ``hector::pyg_layer`` node of a captured graph a call of :func:`call_layer`
    (after :mod:`hector.dynamo.pyg_passes`' other rewrites, which read the op's nodes).
    Returns the number of calls rewritten."""
    done = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _OP_TARGETS:
            node.target = call_layer
            done += 1
    if done:
        gm.recompile()
    return done
