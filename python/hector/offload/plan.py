"""Offload plans: the output of ``placement-plan-offload``, as a ``placement`` module.

A :class:`Plan` maps each forward scope (module name) to ``"keep"``, ``"offload"`` or
``"recompute"``. It is made by running the pass on a profile (:meth:`Plan.from_profile`), and
printed, saved and loaded as IR text (:meth:`Plan.save`, :meth:`Plan.load`), so a plan can be
inspected, edited by hand and checked with ``hector-opt``. MLIR is imported only here, lazily.
"""

from __future__ import annotations

import os
import types
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hector.passes.offload_model import (
    DECISION_SHARE,
    OVERHEAD_TARGET,
    StepModel,
    plan_hidden,
    plan_within_budget,
    simulate_step,
)

if TYPE_CHECKING:
    from hector.passes.plan_offload import ScopeProfile

__all__ = [
    "DECISION_SHARE",
    "OVERHEAD_TARGET",
    "Plan",
    "PlanError",
    "PlanWithoutIRWarning",
    "StepModel",
    "measure_store_bandwidth",
    "measure_write_bandwidth",
    "plan_hidden",
    "plan_within_budget",
    "profile_from",
    "simulate_step",
]


class PlanError(ValueError):
    """A plan file or text is unreadable, malformed or contains no decisions."""


class PlanWithoutIRWarning(UserWarning):
    """The MLIR Python bindings do not import here: an adaptive plan is made (the same
    decisions), but not written as ``placement`` IR, so it cannot be printed or saved."""


def _mlir_missing() -> str | None:
    """Why the MLIR Python bindings do not import in this process (None: they do)."""
    try:
        import mlir.ir  # noqa: F401
    except ImportError as err:
        return str(err)
    return None


def _scope_profile() -> type[ScopeProfile]:
    # Imported lazily: the pass module needs MLIR.
    from hector.passes.plan_offload import ScopeProfile

    return ScopeProfile


def profile_from(names: Sequence[str], profile: dict[str, list[float]]) -> list[ScopeProfile]:
    """``ScopeProfile`` list from the cache's per-scope ``[seconds, bytes]`` records (records
    with the same fields where the MLIR bindings, which the pass module needs, do not
    import: :meth:`Plan.from_measurements` then plans without IR)."""
    make: Any = types.SimpleNamespace if _mlir_missing() else _scope_profile()
    out = []
    for name in names:
        seconds, nbytes = profile.get(name, [0.0, 0.0])
        out.append(make(name=name, forward_ns=int(seconds * 1e9), nbytes=int(nbytes)))
    return out


def measure_write_bandwidth(store: Any, nbytes: int = 64 << 20, pieces: int = 16) -> float:
    """Write ``nbytes`` in ``pieces`` concurrent objects through ``store``; return bytes/s."""
    return measure_store_bandwidth(store, nbytes, pieces)[0]


def measure_store_bandwidth(
    store: Any, nbytes: int = 64 << 20, pieces: int = 16
) -> tuple[float, float]:
    """Write then read back ``nbytes`` in ``pieces`` concurrent objects through ``store``
    (:func:`hector.runtime.bandwidth.store_bandwidth`).

    Returns:
        ``(write, read)`` bandwidth in bytes/s (bytes / wall time of all pieces).
    """
    from hector.runtime.bandwidth import store_bandwidth

    measured = store_bandwidth(store, nbytes, pieces)
    return measured.write, measured.read


@dataclass
class Plan:
    """Decisions per scope name, with the IR they came from.

    Attributes:
        decisions: scope name → ``"keep"`` | ``"offload"`` | ``"recompute"``.
        policy: the policy the pass ran with (``placement.plan``).
        text: the planned ``placement`` module, as printed by MLIR (empty for a plan made
            where the MLIR bindings do not import: :class:`PlanWithoutIRWarning`).
        scopes: scope names in forward order (argument order of the plan function).
        nbytes: saved bytes per scope, from the profile.
        trim_budget_ns: what each forward that offloaded may spend on ``malloc_trim``'s
            refaults (``placement.trim_budget_ns``; 0: never trim; see
            :meth:`from_measurements`).
        modelled_overhead: the step-time overhead over keep-all the plan's model predicts
            (``placement.modelled_overhead_ppm``; None when the plan does not say).
        offload_ns_per_byte: what the plan counted each offloaded byte to cost the training
            thread (its memory handed back and faulted in again;
            ``placement.offload_ps_per_byte``; 0.0 when the plan does not say).
        memory_budget: the activation bytes a budgeted plan was made to fit
            (``placement.memory_budget``; 0: no budget).
        modelled_peak: the activation bytes in memory at the step's peak the budget rule
            modelled (``placement.modelled_peak_bytes``; None when the plan does not say).
    """

    decisions: dict[str, str]
    policy: str
    text: str
    scopes: list[str] = field(default_factory=list)
    nbytes: dict[str, int] = field(default_factory=dict)
    trim_budget_ns: int = 0
    modelled_overhead: float | None = None
    offload_ns_per_byte: float = 0.0
    memory_budget: int = 0
    modelled_peak: int | None = None

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
        from hector.passes.plan_offload import profile_module
        from hector.passes.registry import pass_info

        with make_context() as ctx, ir.Location.unknown():
            module = profile_module(scopes, max(int(write_bandwidth), 1), context=ctx)
            pass_info("placement-plan-offload").run(
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
    def from_measurements(
        cls,
        scopes: Sequence[Any],
        backward_ns: Sequence[float],
        write_bandwidth: float,
        read_bandwidth: float,
        *,
        overhead_target: float = OVERHEAD_TARGET,
        recompute: bool = True,
        ahead: int = 1,
        offload_ns_per_byte: float = 0.0,
        trim_heap: bool = False,
        memory_budget: int = 0,
        unscoped: int = 0,
    ) -> Plan:
        """The adaptive plan of :func:`plan_hidden`, its decisions spending
        ``DECISION_SHARE`` of ``overhead_target`` — or, with ``memory_budget`` (bytes),
        :func:`plan_within_budget`'s, ``unscoped`` being the saved bytes outside every scope
        — as ``placement`` IR.

        ``trim_heap``: the heap's free memory can be handed back once per step that offloads
        (``malloc_trim``, as backward starts or at the forward's end: the cache's
        ``trim_point``). A plan that offloads then gives it the overhead budget its
        decisions leave (``placement.trim_budget_ns``): the cache trims when the free bytes
        it finds there, each faulted in again later at the measured cost, fit in it.

        ``scopes`` are ``ScopeProfile`` (name, measured forward ns, saved bytes) in forward
        order, ``backward_ns`` each scope's measured backward time. The IR is the profile
        function of ``placement-plan-offload`` with each scope's ``placement.backward_ns``, the
        read bandwidth, the training thread's cost per offloaded byte
        (``placement.offload_ps_per_byte``, picoseconds) and
        ``placement.rule = "hidden-io"`` recorded, and one decision per
        scope (``offload`` + ``prefetch``, ``keep`` or ``recompute``) before the return, so it
        prints, saves, loads and edits like any plan (running the pass on it re-plans with the
        pass's own rule).
        """
        nbytes = [int(s.nbytes) for s in scopes]
        costs = (write_bandwidth, read_bandwidth, offload_ns_per_byte)
        decided = _decide(
            [float(s.forward_ns) for s in scopes],
            backward_ns,
            nbytes,
            costs,
            ahead,
            overhead_target=overhead_target,
            recompute=recompute,
            trim_heap=trim_heap,
            memory_budget=memory_budget,
            unscoped=unscoped,
        )
        missing = _mlir_missing()
        if missing is not None:
            warnings.warn(
                f"hector.offload: the MLIR Python bindings do not import here ({missing}): the "
                "adaptive plan is followed, but not written as placement IR (it cannot be "
                "printed or saved)",
                PlanWithoutIRWarning,
                stacklevel=2,
            )
            return cls._without_ir([s.name for s in scopes], nbytes, decided, offload_ns_per_byte)
        return cls.from_ir(_decisions_ir(scopes, backward_ns, decided, costs, ahead))

    @classmethod
    def from_decisions(
        cls,
        scopes: Sequence[Any],
        backward_ns: Sequence[float],
        decisions: Sequence[str],
        write_bandwidth: float,
        read_bandwidth: float,
        *,
        ahead: int = 1,
        memory_budget: int = 0,
        modelled_peak: int | None = None,
    ) -> Plan:
        """``decisions`` made elsewhere (one per scope: a compiled graph's budget rule, which
        models its step by liveness) as the ``placement`` IR :meth:`from_measurements` writes,
        with the step model they make, ``memory_budget`` and ``modelled_peak`` recorded
        (``placement.memory_budget``, ``placement.modelled_peak_bytes``)."""
        forward = [float(s.forward_ns) for s in scopes]
        nbytes = [int(s.nbytes) for s in scopes]
        if len(decisions) != len(scopes):
            raise ValueError(f"{len(decisions)} decisions for {len(scopes)} scopes")
        model = simulate_step(
            forward, backward_ns, nbytes, decisions, write_bandwidth, read_bandwidth, ahead
        )
        decided = _Decided(list(decisions), model, 0.0, memory_budget, modelled_peak)
        costs = (write_bandwidth, read_bandwidth, 0.0)
        return cls.from_ir(_decisions_ir(scopes, backward_ns, decided, costs, ahead))

    @classmethod
    def _without_ir(
        cls, names: list[str], nbytes: list[int], decided: _Decided, offload_ns_per_byte: float
    ) -> Plan:
        """The plan of ``decided`` for scopes ``names`` saving ``nbytes``, with no IR."""
        return cls(
            dict(zip(names, decided.decisions, strict=True)),
            "adaptive",
            "",
            names,
            dict(zip(names, nbytes, strict=True)),
            int(decided.trim_budget_ns),
            decided.model.overhead,
            offload_ns_per_byte,
            decided.memory_budget,
            decided.peak,
        )

    @classmethod
    def from_ir(cls, text: str, source: str = "<plan>") -> Plan:
        """Read the decisions of the first planned function in a ``placement`` module."""
        from mlir import ir

        from hector.dialects import make_context
        from hector.passes.module_text import parse_module  # refuses what would abort MLIR

        with make_context():
            try:
                module = parse_module(text)
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
                trim = 0
                if "placement.trim_budget_ns" in func.attributes:
                    trim = ir.IntegerAttr(func.attributes["placement.trim_budget_ns"]).value
                modelled = None
                if "placement.modelled_overhead_ppm" in func.attributes:
                    ppm = ir.IntegerAttr(func.attributes["placement.modelled_overhead_ppm"])
                    modelled = ppm.value / 1e6
                offload_ns = 0.0
                if "placement.offload_ps_per_byte" in func.attributes:
                    ps = ir.IntegerAttr(func.attributes["placement.offload_ps_per_byte"])
                    offload_ns = ps.value / 1e3
                budget = _int_attr(func, "placement.memory_budget")
                peak = _int_attr(func, "placement.modelled_peak_bytes")
                return cls(
                    decisions, policy, str(module), names, nbytes, trim, modelled, offload_ns,
                    budget or 0, peak,
                )  # fmt: skip
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
        """Write the plan's IR to ``path``.

        Raises:
            PlanError: the plan was made without the MLIR bindings and has no IR.
        """
        if not self.text:
            raise PlanError(
                "this plan was made where the MLIR Python bindings do not import: it has no "
                "placement IR to save"
            )
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


@dataclass(frozen=True)
class _Decided:
    """An adaptive plan's decisions (one per scope), the step the model predicts for them,
    the heap-trim budget they leave each step (ns), and the memory budget they were made to
    fit with the modelled peak ((0, None): no budget)."""

    decisions: list[str]
    model: StepModel
    trim_budget_ns: float
    memory_budget: int
    peak: int | None


def _decide(
    forward: Sequence[float],
    backward_ns: Sequence[float],
    nbytes: Sequence[int],
    costs: tuple[float, float, float],
    ahead: int,
    *,
    overhead_target: float,
    recompute: bool,
    trim_heap: bool,
    memory_budget: int,
    unscoped: int,
) -> _Decided:
    """The decisions of :func:`plan_within_budget` under a ``memory_budget`` (bytes;
    ``unscoped``: the bytes saved outside every scope), else of :func:`plan_hidden` spending
    ``DECISION_SHARE`` of ``overhead_target``; then the model of the step they make and, with
    ``trim_heap`` and something offloaded, the overhead they leave to heap trims (see
    :meth:`Plan.from_measurements`). ``costs``: write and read bandwidth (bytes/s) and the
    offload cost per byte (ns)."""
    write_bandwidth, read_bandwidth, offload_ns_per_byte = costs
    peak = None
    if memory_budget > 0:
        budgeted = plan_within_budget(
            forward, backward_ns, nbytes, write_bandwidth, read_bandwidth, memory_budget,
            unscoped=unscoped, ahead=ahead, offload_ns_per_byte=offload_ns_per_byte,
        )  # fmt: skip
        decisions, peak = budgeted.decisions, budgeted.peak_bytes
    else:
        decisions = plan_hidden(
            forward, backward_ns, nbytes, write_bandwidth, read_bandwidth,
            overhead_target=overhead_target * DECISION_SHARE, recompute=recompute,
            ahead=ahead, offload_ns_per_byte=offload_ns_per_byte,
        )  # fmt: skip
    model = simulate_step(
        forward, backward_ns, nbytes, decisions, write_bandwidth, read_bandwidth, ahead,
        offload_ns_per_byte,
    )  # fmt: skip
    trim_budget = 0.0
    if trim_heap and "offload" in decisions:
        trim_budget = max(overhead_target - model.overhead, 0.0) * model.step_ns
    return _Decided(list(decisions), model, trim_budget, memory_budget, peak)


def _int_attr(func: Any, name: str) -> int | None:
    """The integer attribute ``name`` of ``func`` (None: absent)."""
    from mlir import ir

    return ir.IntegerAttr(func.attributes[name]).value if name in func.attributes else None


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


def _decisions_ir(
    scopes: Sequence[Any],
    backward_ns: Sequence[float],
    decided: _Decided,
    costs: tuple[float, float, float],
    ahead: int,
) -> str:
    """The profile function of ``scopes`` with ``decided``'s decisions, model, trim budget
    (what each forward may spend trimming the heap; 0: never) and memory budget built in (see
    from_measurements); ``costs``: write and read bandwidth (bytes/s) and the offload cost per
    byte (ns)."""
    write_bandwidth, read_bandwidth, offload_ns_per_byte = costs
    decisions, model, trim_budget_ns = decided.decisions, decided.model, decided.trim_budget_ns
    budget = (decided.memory_budget, decided.peak)
    from mlir import ir

    from hector.dialects import make_context, placement
    from hector.passes.plan_offload import profile_module

    def i64(value: float) -> ir.Attribute:
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(value))

    with make_context() as ctx, ir.Location.unknown() as loc:
        module = profile_module(scopes, max(int(write_bandwidth), 1), context=ctx)
        fn = module.body.operations[0].operation
        attrs = ir.ArrayAttr(fn.attributes["arg_attrs"])
        fn.attributes["arg_attrs"] = ir.ArrayAttr.get(
            [
                ir.DictAttr.get(
                    {
                        **{a.name: a.attr for a in ir.DictAttr(attrs[i])},
                        "placement.backward_ns": i64(backward_ns[i]),
                    }
                )
                for i in range(len(scopes))
            ]
        )
        fn.attributes["placement.read_bandwidth"] = i64(max(read_bandwidth, 1))
        fn.attributes["placement.offload_ps_per_byte"] = i64(offload_ns_per_byte * 1e3)
        if trim_budget_ns > 0:
            fn.attributes["placement.trim_budget_ns"] = i64(trim_budget_ns)
        fn.attributes["placement.rule"] = ir.StringAttr.get("budget" if budget[0] else "hidden-io")
        if budget[0]:
            fn.attributes["placement.memory_budget"] = i64(budget[0])
            fn.attributes["placement.modelled_peak_bytes"] = i64(budget[1] or 0)
        fn.attributes["placement.modelled_overhead_ppm"] = i64(model.overhead * 1e6)
        fn.attributes["placement.plan"] = ir.StringAttr.get("adaptive")
        block = fn.regions[0].blocks[0]
        with ir.InsertionPoint.at_block_terminator(block):
            for i, (arg, decision) in enumerate(zip(block.arguments, decisions, strict=True)):
                if decision == "offload":
                    out = placement.OPS.offload(
                        value=arg, scope=i, target="ssd", result=arg.type, loc=loc
                    )
                    placement.OPS.prefetch(
                        value=out, scope=i, ahead=ahead, result=arg.type, loc=loc
                    )
                elif decision == "recompute":
                    placement.OPS.recompute(value=arg, scope=i, result=arg.type, loc=loc)
                else:
                    placement.OPS.keep(value=arg, scope=i, result=arg.type, loc=loc)
        return str(module)
