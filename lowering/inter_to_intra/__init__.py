"""Relational ops to GEMM and traversal templates (``convert-hector-inter-to-intra``).

:mod:`~hector.lowering.inter_to_intra.destination_passing` is the pass: it rebuilds each
function on tensors as a function on memrefs (the graph as its arrays, results as output
arguments). :mod:`~hector.lowering.inter_to_intra.fusion` decides which ops are folded into
their users (from ``hector-fuse``'s marks), and each other op is lowered by its handler
(:mod:`~hector.lowering.inter_to_intra.handlers`, a registry keyed by op name) through the
function's buffers, reads and template builders
(:mod:`~hector.lowering.inter_to_intra.function`).
"""
