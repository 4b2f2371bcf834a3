"""Where a model's forward is: its pass, its group and the innermost scope running.

A tensor cache groups the tensors a forward saves by scope (:mod:`.scopes` finds the scopes).
:class:`ScopeTracker` puts forward pre-/post-hooks on them (run eagerly, wherever they are
called from): each forward of the model is a *pass*, each scope entered in it opens a new
*group* (so a block run twice, or micro-batches, get groups of their own), and the stack of
scopes running says which scope saves a tensor now. Scope names are kept in the order the
first forward entered them. Under ``torch.compile`` the scopes compiled as regions are the
model's blocks (:meth:`ScopeTracker.for_regions`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .compiled import eager
from .scopes import default_scopes

__all__ = ["ScopeTracker"]

Scopes = list[tuple[str, nn.Module]]


class ScopeTracker:
    """The pass, the group and the scopes running in a model's forward (see the module).

    Args:
        module: the model (None: none, so no scopes).
        entered: called with a scope's name and the group it opened, as its forward starts.
        left: called with a scope's name as its forward ends.
        given: the scopes were given by the caller (not found by :func:`default_scopes`).
    """

    def __init__(
        self,
        module: nn.Module | None,
        entered: Callable[[str, int], None],
        left: Callable[[str], None],
        given: bool,
    ) -> None:
        self._module = module
        self._entered = entered
        self._left = left
        self.given = given
        #: The forward pass (one per forward of the model, counted from 1).
        self.pass_ = 0
        #: The group the scope running last opened in this pass (0: none yet).
        self.group = 0
        #: The scopes running now, innermost last.
        self.stack: list[str] = []
        #: Scope names in the order the first forward entered them.
        self.names: list[str] = []
        #: The scopes tracked.
        self.scopes: Scopes = []
        self._hooks: list[Any] = []  # the scopes' forward hooks

    def new_pass(self) -> None:
        """A forward of the model starts: a new pass, no group yet."""
        self.pass_ += 1
        self.group = 0

    def track(self, scopes: Scopes) -> None:
        """Track ``scopes`` (forward hooks), replacing the scopes tracked so far."""
        self.remove()
        self._hooks = [
            hook
            for name, m in scopes
            for hook in (
                m.register_forward_pre_hook(eager(self._pre(name))),
                m.register_forward_hook(eager(self._post(name))),
            )
        ]
        self.scopes = scopes

    def for_regions(self) -> Scopes:
        """The scopes compiled as regions, once the model turns out to be compiled: the
        scopes given, else the model's blocks (``granularity="block"``: a region holds no
        scope of its own, whose hooks would break its graph), tracked from now on."""
        if self._module is not None and not self.given:
            blocks = default_scopes(self._module, "block")
            if [n for n, _ in blocks] != [n for n, _ in self.scopes]:
                self.track(blocks)
        return self.scopes

    def remove(self) -> None:
        """Remove the scopes' hooks."""
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def _pre(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any) -> None:
            if not torch.is_grad_enabled():
                return
            if name not in self.names:
                self.names.append(name)
            self.group += 1
            self.stack.append(name)
            self._entered(name, self.group)

        return hook

    def _post(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if not torch.is_grad_enabled():
                return
            if self.stack and self.stack[-1] == name:
                self.stack.pop()
            self._left(name)

        return hook
