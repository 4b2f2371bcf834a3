"""Hector: an MLIR-based compiler stack for data-efficient GNN training.

``hector.compile`` traces a forward function written against the graph API
(:class:`hector.frontend.GraphProxy`) into the ``hector_inter`` dialect and compiles it;
``hector.HeteroGraph`` holds a validated heterogeneous graph.
"""

from .frontend import CompiledFunction, TraceError, compile, relu
from .graph import HeteroGraph, random_graph

__version__ = "0.1.0"

__all__ = ["CompiledFunction", "HeteroGraph", "TraceError", "compile", "random_graph", "relu"]
