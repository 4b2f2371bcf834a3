"""Hector: an MLIR-based compiler stack for data-efficient GNN training.

``hector.compile`` traces a forward function written against the graph API
(:class:`hector.frontends.graph_api.GraphProxy`) into the ``hector_inter`` dialect and compiles it;
``hector.HeteroGraph`` holds a validated heterogeneous graph.

The public names are imported lazily, so tools that only need the compiler (``hector-opt``)
start without loading PyTorch, and the runtime layer (``hector.runtime``, ``hector.data.unified``,
``hector.data.graph``, prebuilt bundles) imports where MLIR and torch-mlir are not installed: the
compiler is loaded on first use.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

__version__ = "0.1.0"


def _load_mlir_before_torch_mlir() -> None:
    """Load Hector's MLIR native library now, before anything can load torch-mlir's.

    Both ``mlir`` and ``torch_mlir`` ship their own MLIR/LLVM shared libraries. When torch-mlir's
    load first, Hector's JIT-compiled kernels resolve runtime symbols into torch-mlir's copy and
    crash (segmentation fault). Loading ``mlir``'s library here (~50 ms, no PyTorch) fixes the
    order for every program that imports ``hector`` first; one that imported torch-mlir's
    bindings first gets a clear :class:`ImportError` instead of a crash later.

    Where MLIR is not installed (a GPU node that runs prebuilt kernels and bundles) this does
    nothing: the runtime layer needs no compiler, and the compiler's modules raise their own
    ``ModuleNotFoundError`` for ``mlir`` when first used.
    """
    if "mlir._mlir_libs._mlir" in sys.modules:
        return
    if any(name.startswith("torch_mlir._mlir_libs.") for name in sys.modules):
        raise ImportError(
            "hector must be imported before torch_mlir: torch-mlir's MLIR libraries are already "
            "loaded, and Hector's JIT-compiled kernels would crash against them; move "
            "'import hector' above the first torch_mlir import"
        )
    try:
        importlib.import_module("mlir._mlir_libs._mlir")
    except ModuleNotFoundError as err:
        # Only the absence of the whole ``mlir`` package means "no compiler here"; a broken
        # install (a missing submodule or native library) still fails loudly.
        if err.name != "mlir":
            raise


_load_mlir_before_torch_mlir()

from .dialects.hector_inter import UNARY_FUNCTIONS  # noqa: E402  (a spec table; no MLIR)

_EXPORTS = {
    "CompiledFunction": "frontends.compiled",
    "TraceError": "frontends.graph_api",
    "compile": "frontends.compiled",
    "relu": "frontends.graph_api",
    "HeteroGraph": "data.graph",
    "random_graph": "data.graph",
    "unified": "data.unified",
    "offload": "offload",
    "import_model": "frontends.importer",
    # torch.compile(model, backend="hector"): using either name registers the backend.
    "backend": "dynamo.backend",
    "explain": "dynamo.backend",
    # The graph API's elementwise functions, one per traced unary function of the dialect.
    **{f.name: "frontends.graph_api" for f in UNARY_FUNCTIONS if f.traced},
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hector' has no attribute {name!r}")
