"""Hector: an MLIR-based compiler stack for data-efficient GNN training.

``hector.compile`` traces a forward function written against the graph API
(:class:`hector.frontend.GraphProxy`) into the ``hector_inter`` dialect and compiles it;
``hector.HeteroGraph`` holds a validated heterogeneous graph.

The public names are imported lazily, so tools that only need the compiler (``hector-opt``)
start without loading PyTorch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "CompiledFunction": "frontend",
    "TraceError": "frontend",
    "compile": "frontend",
    "relu": "frontend",
    "HeteroGraph": "graph",
    "random_graph": "graph",
    "unified": "unified",
    "offload": "offload",
    "import_model": "importer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hector' has no attribute {name!r}")
