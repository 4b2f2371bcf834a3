"""Offloading under ``torch.compile``: each scope its own compiled region, Hector's hooks in none.

A saved-tensor hook or a forward hook that runs inside a frame Dynamo traces breaks the graph
there (Dynamo cannot trace the store's I/O), and the hook's tensor addresses make it recompile.
So an offloaded model is compiled *by regions* (PyTorch's "regional compilation"): the
model's own forward (the glue between its scopes: the block loop, residual adds of the top
level) runs eagerly, each scope's forward (a transformer block, the embedding, the head; see
:func:`~hector.offload.scopes.default_scopes`) is one compiled region, and Hector's hooks run
between the regions, outside every graph:

* a scope's forward pre-/post-hooks run around its region;
* the pack hook runs as the region's compiled forward saves its activations (AOTAutograd's
  ``save_for_backward`` applies the hooks active around a compiled region to the region's
  saved tensors), so each scope's activations go to the store as the scope ends — the same
  granularity as in eager mode;
* the unpack hook runs as the region's compiled backward starts.

The regions are compiled by the same Dynamo callback (backend, mode, ``fullgraph``, dynamic
shapes) as the ``torch.compile`` the user called, whichever way round it was applied:
``hector.offload(torch.compile(model))`` takes the compiled module's callback;
``torch.compile(hector.offload(model))`` (and ``torch.compile`` of a model with
:func:`hector.offload.attach`) finds it active when the forward starts. The repeated blocks
(the elements of one container, of one class) share one code object for their region, so
one graph (one compile, no recompile: Dynamo guards on the block's class and its parameters'
properties, not on the instance); every other scope has its own and compiles once.

Hector's hooks are :func:`torch.compiler.disable`-d, so Dynamo never traces them even where a
compiled region calls them; the frames that switch Dynamo's callback (the offloaded forward,
the region runner) are skipped by Dynamo (their nested frames are not).
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import nn
from torch._C._dynamo import eval_frame as _eval_frame
from torch._dynamo.eval_frame import skip_code

__all__ = ["CompiledRegions", "eager", "unwrap_compiled"]

F = TypeVar("F", bound=Callable[..., Any])
Wrapped = tuple[nn.Module, Any]


def eager(fn: F) -> F:
    """``fn`` run eagerly whoever calls it: Dynamo never traces it, nor what it calls."""
    return torch.compiler.disable(fn, reason="Hector offload hook: runs between compiled regions")


def unwrap_compiled(model: nn.Module) -> tuple[nn.Module, Any | None]:
    """``model`` without its ``torch.compile`` wrapper and the Dynamo callback that compiled
    it; ``(model, None)`` for a model ``torch.compile`` did not wrap."""
    if isinstance(model, torch._dynamo.eval_frame.OptimizedModule):
        callback = getattr(model.dynamo_ctx, "callback", None)
        if callable(callback):
            return model._orig_mod, callback
    return model, None


def _region_key(name: str, module: nn.Module) -> str:
    """Which scopes share a region's code (so one graph): the elements of one container of
    one class (``encoder.layers.0``, ``encoder.layers.1``: the repeated blocks); every other
    scope has its own (GPT-2's two embeddings take inputs of different shapes)."""
    return f"{type(module).__qualname__}:{re.sub(r'[.][0-9]+$', '.*', name)}"


def _region_entry(key: str) -> Callable[..., Any]:
    """A frame of its own for the regions of ``key``: Dynamo compiles it, inlining the
    scope's forward (a ``torch.nn`` module's forward, skipped by Dynamo as a top frame, is
    inlined this way too)."""

    def region(forward: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return forward(*args, **kwargs)

    name = "hector_region_" + "".join(c if c.isalnum() else "_" for c in key)
    code = region.__code__.replace(co_name=name, co_qualname=name)
    return types.FunctionType(code, region.__globals__, name)


class CompiledRegions:
    """The compiled regions of one offloaded model: its scopes' forwards, compiled by a
    Dynamo callback, while the model's own forward runs eagerly.

    ``callback`` is the Dynamo callback of the ``torch.compile`` that wrapped the model
    (:func:`unwrap_compiled`), or None. A forward started under ``torch.compile``
    (:meth:`enter`) compiles its regions with that ``torch.compile``'s callback; one started
    outside, with ``callback`` (None: the model runs eagerly, as without compilation). The
    scopes' forwards are replaced by their regions' runners the first time a forward
    compiles; outside a forward they run their plain forwards.
    """

    def __init__(
        self,
        wrapped: list[Wrapped],
        scopes: Callable[[], list[tuple[str, nn.Module]]],
        callback: Any | None = None,
    ) -> None:
        self._own_callback = callback  # hector.offload(torch.compile(model))'s
        self.callback = callback  # this forward's: its own, else the active torch.compile's
        self._scopes = scopes  # called once a callback is known: the scopes to compile
        self._wrapped = wrapped  # the cache's: close() restores the forwards, last first
        self._entries: dict[str, Callable[..., Any]] = {}
        self._depth = 0
        self._installed = False

    @property
    def compiling(self) -> bool:
        """Whether the model runs by compiled regions (a callback is known)."""
        return self.callback is not None

    def _install(self) -> None:
        """Route each scope's forward through its region (once), recording the original
        forwards with the cache's wrapped modules."""
        self._installed = True
        for name, module in self._scopes():
            key = _region_key(name, module)
            original = module.forward
            entry = self._entries.get(key) or self._entries.setdefault(key, _region_entry(key))
            module.forward = self._runner(entry, original)
            self._wrapped.append((module, original))

    def _runner(self, entry: Callable[..., Any], forward: Callable[..., Any]) -> Any:
        regions = self

        def run(*args: Any, **kwargs: Any) -> Any:
            callback = regions.callback
            if regions._depth == 0 or callback is None:
                return forward(*args, **kwargs)
            prior = _eval_frame.set_eval_frame(callback)
            try:
                return entry(forward, *args, **kwargs)
            finally:
                _eval_frame.set_eval_frame(prior)

        skip_code(run.__code__)
        return run

    def enter(self) -> Any:
        """Start a forward of the model: take the active Dynamo callback (``torch.compile``
        runs the caller) as the regions' own and run the model's own forward eagerly.
        Returns what :meth:`leave` restores."""
        prior = _eval_frame.set_eval_frame(None)
        self.callback = prior if callable(prior) else self._own_callback
        if self.callback is not None and not self._installed:
            self._install()
        self._depth += 1
        return prior

    def leave(self, prior: Any) -> None:
        """End a forward started by :meth:`enter`."""
        self._depth -= 1
        _eval_frame.set_eval_frame(prior)


skip_code(CompiledRegions.enter.__code__)
skip_code(CompiledRegions.leave.__code__)
