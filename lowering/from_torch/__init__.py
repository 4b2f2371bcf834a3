"""Raising torch-mlir's torch dialect to ``hector_inter`` (``raise-torch-to-hector``).

:mod:`~hector.lowering.from_torch.raise_to_hector` is the pass; it matches FX-level patterns
over the torch ops' use-def graph (:mod:`~hector.lowering.from_torch.nodes`) and rewrites each
match with its handler (:mod:`~hector.lowering.from_torch.handlers`, a registry keyed by
pattern). A handler asks the function being raised
(:mod:`~hector.lowering.from_torch.function`) what a value is: a constant
(:mod:`~hector.lowering.from_torch.torch_values`), a graph index, gather, sum or count
(:mod:`~hector.lowering.from_torch.graph_patterns`), rows or a weight.
"""
