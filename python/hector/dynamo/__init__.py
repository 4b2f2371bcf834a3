"""``torch.compile(model, backend="hector")``: the Dynamo backend and the PyG layer routes.

:mod:`~hector.dynamo.backend` receives each FX graph Dynamo captures, imports what Hector
recognises through torch-mlir and hands the rest to the default compiler;
:mod:`~hector.dynamo.pyg_route` swaps PyG's relational layers (``RGCNConv``, ``FastRGCNConv``,
``RGATConv``, ``HGTConv``) for Hector's, :mod:`~hector.dynamo.pyg_hetero` compiles a
``HeteroConv`` over all its relations as one program, :mod:`~hector.dynamo.pyg_to_hetero`
hands each layer of a ``to_hetero`` model to that program, :mod:`~hector.dynamo.pyg_han` runs
``HANConv``'s node-level attention as that program's GAT form, and :mod:`~hector.dynamo.pyg_rgat`
holds the ``RGATConv`` parameter mapping. ``backend`` and ``explain`` are exported here
(imported on first use) and from :mod:`hector`.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["backend", "explain"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module(".backend", __name__), name)
    raise AttributeError(f"module 'hector.dynamo' has no attribute {name!r}")
