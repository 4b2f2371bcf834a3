"""``hector-vector-dots``: per-head dot products summed in vector lanes on the CPU.

A ``traversal_template`` with ``fn = "dot"`` and ``reduce = "none"`` computes one inner
product per head and row: RGAT's and HGT's attention scores, and in every attention
program's backward the coefficients' gradient, ``⟨∂out_i, h_j⟩`` per edge and head. Built in
the element form, each head's sum is one sequential chain of additions, an element at a time,
whose latency bounds the kernel (HANConv's backward on 59,000 edges: 11 ms of a 34 ms
program at 1.5 GFLOP/s).

This pass marks every such dot whose heads are each a whole number of
``traversal.LANES``-wide vectors (``traversal.vector_dot_fits``) ``hector.vector_dot``
(``hector_intra.VECTOR_DOT``); the CPU then sums each head's products in ``LANES`` running
vector sums added across the lanes at the end (``traversal.lower_vector_dot``). The sums are
reassociated, so the scores' rounding differs from the sequential form's within f32's, as a
BLAS dot's or PyTorch's own ``sum`` does; the result is the same on every run and for every
worker count (each row is one worker's). Dots with narrower heads keep the element form.

It runs in the CPU pipeline after ``hector-schedule`` and ``hector-half-messages``, on every
function (f32 and half programs alike); the GPU pipeline does not run it.
"""

from __future__ import annotations

from mlir import ir

from ...dialects import hector_intra as intra
from ...passes.registry import register_pass
from ...passes.walk import walk_ops
from . import traversal

_TRAVERSAL = "hector_intra.traversal_template"


def mark_vector_dots(op: ir.Operation) -> None:
    """Mark every per-head dot nested in ``op`` that :func:`traversal.vector_dot_fits`
    ``hector.vector_dot``."""
    for inner in walk_ops(op):
        if inner.name == _TRAVERSAL and traversal.vector_dot_fits(intra.view(inner)):
            inner.attributes[intra.VECTOR_DOT] = ir.UnitAttr.get()


@register_pass(
    "hector-vector-dots",
    "Mark the per-head dot products whose heads are whole vectors hector.vector_dot: each "
    "head summed in vector lanes, reassociated, instead of one element at a time (CPU)",
)
def run(module_op: ir.Operation) -> None:
    """Pass entry point: :func:`mark_vector_dots` over the whole module."""
    mark_vector_dots(module_op)
