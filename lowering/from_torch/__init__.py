"""Raising torch-mlir's torch dialect to ``hector_inter`` (``raise-torch-to-hector``).

:mod:`~hector.lowering.from_torch.raise_to_hector` is the pass; it matches FX-level patterns
(:mod:`~hector.lowering.from_torch.patterns`) over the torch ops' use-def graph
(:mod:`~hector.lowering.from_torch.nodes`) and rewrites each match with its handler
(:mod:`~hector.lowering.from_torch.handlers`, a registry keyed by pattern).
"""
