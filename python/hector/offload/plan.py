"""Offload plans: the output of ``placement-plan-offload``, as a ``placement`` module.

A :class:`Plan` maps each forward scope (module name) to ``"keep"``, ``"offload"`` or
``"recompute"``. It is made by running the pass on a profile (:meth:`Plan.from_profile`), and
printed, saved and loaded as IR text (:meth:`Plan.save`, :meth:`Plan.load`), so a plan can be
inspected, edited by hand and checked with ``hector-opt``. MLIR is imported only here, lazily.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hector.passes.plan_offload import ScopeProfile

__all__ = ["Plan", "PlanError", "measure_write_bandwidth", "profile_from"]


class PlanError(ValueError):
    """A plan file or text is unreadable, malformed or contains no decisions."""


def _scope_profile() -> type[ScopeProfile]:
    # Imported lazily: the pass module needs MLIR.
    from hector.passes.plan_offload import ScopeProfile

    return ScopeProfile


def profile_from(names: Sequence[str], profile: dict[str, list[float]]) -> list[ScopeProfile]:
    """``ScopeProfile`` list from the cache's per-scope ``[seconds, bytes]`` records."""
    scope_profile = _scope_profile()
    out = []
    for name in names:
        seconds, nbytes = profile.get(name, [0.0, 0.0])
        out.append(scope_profile(name, int(seconds * 1e9), int(nbytes)))
    return out


def measure_write_bandwidth(store: Any, nbytes: int = 64 << 20, pieces: int = 16) -> float:
    """Write ``nbytes`` in ``pieces`` concurrent objects through ``store``; return bytes/s."""
    import numpy as np

    size = max(nbytes // pieces, 4096)
    bufs = [np.full(size, i + 1, dtype=np.uint8) for i in range(pieces)]
    start = time.perf_counter()
    keys = [store.write_array(b) for b in bufs]
    for k in keys:
        store.wait(k)
    elapsed = time.perf_counter() - start
    for k in keys:
        store.remove(k)
    return size * pieces / max(elapsed, 1e-9)


@dataclass
class Plan:
    """Decisions per scope name, with the IR they came from.

    Attributes:
        decisions: scope name → ``"keep"`` | ``"offload"`` | ``"recompute"``.
        policy: the policy the pass ran with (``placement.plan``).
        text: the planned ``placement`` module, as printed by MLIR.
        scopes: scope names in forward order (argument order of the plan function).
        nbytes: saved bytes per scope, from the profile.
    """

    decisions: dict[str, str]
    policy: str
    text: str
    scopes: list[str] = field(default_factory=list)
    nbytes: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_profile(
        cls,
        scopes: Sequence[Any],
        write_bandwidth: float,
        *,
        policy: str = "adaptive",
        memory_budget: int = 0,
        recompute: bool = True,
    ) -> Plan:
        """Run ``placement-plan-offload`` on the profile IR of ``scopes`` and read the plan."""
        from mlir import ir

        from hector.dialects import make_context
        from hector.passes import PASSES
        from hector.passes.plan_offload import profile_module

        with make_context() as ctx, ir.Location.unknown():
            module = profile_module(scopes, max(int(write_bandwidth), 1), context=ctx)
            PASSES["placement-plan-offload"].run(
                module.operation,
                policy=policy,
                write_bandwidth=0,
                recompute=recompute,
                memory_budget=memory_budget,
                ahead=1,
            )
            planned = str(module)
        return cls.from_ir(planned)

    @classmethod
    def from_ir(cls, text: str, source: str = "<plan>") -> Plan:
        """Read the decisions of the first planned function in a ``placement`` module."""
        from mlir import ir

        from hector.dialects import make_context

        with make_context():
            try:
                module = ir.Module.parse(text)
            except ir.MLIRError as err:
                raise PlanError(f"{source}: not a valid placement plan: {err}") from None
            for op in module.body.operations:
                if op.operation.name != "func.func":
                    continue
                func = op.operation
                block = func.regions[0].blocks[0]
                names = _arg_names(func, len(block.arguments))
                decisions: dict[str, str] = {}
                for inner in block.operations:
                    kind = inner.operation.name.removeprefix("placement.")
                    if kind not in ("keep", "offload", "recompute"):
                        continue
                    scope = ir.IntegerAttr(inner.operation.attributes["scope"]).value
                    if not 0 <= scope < len(names):
                        raise PlanError(
                            f"{source}: decision for scope {scope}, but the plan function has "
                            f"{len(names)} scopes"
                        )
                    decisions[names[scope]] = kind
                if not decisions:
                    continue
                policy = "adaptive"
                if "placement.plan" in func.attributes:
                    policy = ir.StringAttr(func.attributes["placement.plan"]).value
                nbytes = {}
                for name, arg in zip(names, block.arguments, strict=True):
                    t = arg.type
                    if isinstance(t, ir.RankedTensorType) and ir.RankedTensorType(t).rank == 1:
                        nbytes[name] = ir.RankedTensorType(t).shape[0]
                return cls(decisions, policy, str(module), names, nbytes)
        raise PlanError(
            f"{source}: contains no placement decisions (run placement-plan-offload on a "
            "profile first)"
        )

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Plan:
        """Read a plan file written by :meth:`save` (or by ``hector-opt``)."""
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as err:
            raise PlanError(f"cannot read plan file {os.fspath(path)!r}: {err.strerror}") from None
        return cls.from_ir(text, os.fspath(path))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the plan's IR to ``path``."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.text)

    def __str__(self) -> str:
        return self.text

    def summary(self) -> dict[str, int]:
        """Number of scopes per decision."""
        out = {"keep": 0, "offload": 0, "recompute": 0}
        for d in self.decisions.values():
            out[d] += 1
        return out


def _arg_names(func: Any, n: int) -> list[str]:
    from mlir import ir

    names = [f"scope{i}" for i in range(n)]
    if "arg_attrs" in func.attributes:
        attrs = ir.ArrayAttr(func.attributes["arg_attrs"])
        for i in range(n):
            d = ir.DictAttr(attrs[i])
            if "placement.name" in d:
                names[i] = ir.StringAttr(d["placement.name"]).value
    return names
