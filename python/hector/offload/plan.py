"""Offload plans: the output of ``placement-plan-offload``, as a ``placement`` module.

A :class:`Plan` maps each forward scope (module name) to ``"keep"``, ``"offload"`` or
``"recompute"``. It is made by running the pass on a profile (:meth:`Plan.from_profile`), and
printed, saved and loaded as IR text (:meth:`Plan.save`, :meth:`Plan.load`), so a plan can be
inspected, edited by hand and checked with ``hector-opt``. MLIR is imported only here, lazily.
"""

from __future__ import annotations

import itertools
import os
import types
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hector.passes.plan_offload import ScopeProfile

__all__ = [
    "OVERHEAD_TARGET",
    "Plan",
    "PlanError",
    "PlanWithoutIRWarning",
    "StepModel",
    "measure_store_bandwidth",
    "measure_write_bandwidth",
    "plan_hidden",
    "profile_from",
]


#: The step-time overhead over keep-all an adaptive plan may spend by default (a fraction).
#: What a plan does not spend on its decisions goes to the heap trim, which the heavier GPT's
#: peak RSS needs to fall by more than a third: at 5% it never fit, and at 8%, once the
#: release cost counted the ``madvise`` itself, it fit in 2 of 3 runs (RSS -19% in the third).
#: Under this 10% its adaptive steps measured +8.3% and +10.6% in two interleaved records
#: (rounds -2.5% to +20.1% on a host whose speed drifts).
OVERHEAD_TARGET = 0.10


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


@dataclass(frozen=True)
class StepModel:
    """What a plan would do to one step, from the profile (nanoseconds, bytes).

    Attributes:
        exposed_ns: time backward waits for reads that did not arrive in time.
        recompute_ns: forward time run again for recomputed scopes.
        step_ns: the keep-all step (forward + backward) the plan is measured against.
        kept_in_memory: offloaded scopes whose write would still be running when their read is
            due (the cache keeps them in memory: I/O spent, nothing saved).
        read_at_peak: offloaded scopes whose read is requested when backward starts — where
            memory peaks — so they are back in memory at the peak: I/O spent, no peak saved.
        offload_cpu_ns: time the training thread itself spends per step on the offloaded bytes
            (their memory handed back and faulted in again), ``offload_ns_per_byte`` times the
            bytes offloaded.
    """

    exposed_ns: float
    recompute_ns: float
    step_ns: float
    kept_in_memory: tuple[int, ...]
    read_at_peak: tuple[int, ...] = ()
    offload_cpu_ns: float = 0.0

    @property
    def overhead(self) -> float:
        """Modelled step-time overhead over keep-all (a fraction)."""
        spent = self.exposed_ns + self.recompute_ns + self.offload_cpu_ns
        return spent / max(self.step_ns, 1.0)


def simulate_step(
    forward_ns: Sequence[float],
    backward_ns: Sequence[float],
    nbytes: Sequence[int],
    decisions: Sequence[str],
    write_bandwidth: float,
    read_bandwidth: float,
    ahead: int = 1,
    offload_ns_per_byte: float = 0.0,
) -> StepModel:
    """Model one step of ``decisions`` (SSDTrain's timeline, one I/O queue shared in order).

    Forward runs the scopes in order; each offloaded scope's write joins the queue when its
    forward ends. Backward runs them in reverse; the read of scope ``i`` is requested when
    backward enters scope ``i + ahead`` (the forward's end for the last ones) and must land
    before backward enters ``i``; a late read delays everything after it. Each offloaded byte
    also costs the training thread ``offload_ns_per_byte`` (measured: its memory handed back
    and faulted in again, see :func:`measure_release_cost`), which no I/O overlap hides.
    """
    n = len(forward_ns)
    fwd_end = list(itertools.accumulate(forward_ns))
    total_fwd = fwd_end[-1] if n else 0.0
    io_free = 0.0
    write_done: dict[int, float] = {}
    for i in range(n):
        if decisions[i] == "offload":
            io_free = max(io_free, fwd_end[i]) + nbytes[i] * 1e9 / write_bandwidth
            write_done[i] = io_free
    clock = total_fwd  # backward's clock, delayed by every late read
    enter: dict[int, float] = {}
    exposed = 0.0
    kept: list[int] = []
    at_peak: list[int] = []
    for i in range(n - 1, -1, -1):
        if i in write_done:
            request = enter.get(i + ahead, total_fwd)
            if request <= total_fwd:
                at_peak.append(i)
            if write_done[i] > request:
                kept.append(i)  # still being written when wanted: served from memory
            else:
                io_free = max(io_free, request) + nbytes[i] * 1e9 / read_bandwidth
                if io_free > clock:
                    exposed += io_free - clock
                    clock = io_free
        enter[i] = clock
        clock += backward_ns[i]
    recompute = sum(f for f, d in zip(forward_ns, decisions, strict=True) if d == "recompute")
    step = total_fwd + sum(backward_ns)
    offloaded = sum(b for b, d in zip(nbytes, decisions, strict=True) if d == "offload")
    return StepModel(
        exposed,
        recompute,
        step,
        tuple(sorted(kept)),
        tuple(sorted(at_peak)),
        offloaded * offload_ns_per_byte,
    )


def plan_hidden(
    forward_ns: Sequence[float],
    backward_ns: Sequence[float],
    nbytes: Sequence[int],
    write_bandwidth: float,
    read_bandwidth: float,
    *,
    overhead_target: float = OVERHEAD_TARGET,
    recompute: bool = True,
    ahead: int = 1,
    offload_ns_per_byte: float = 0.0,
) -> list[str]:
    """SSDTrain's rule on measured times: offload what compute hides, recompute what is cheap.

    Scopes are tried in forward order (the earliest have the most compute left to hide their
    I/O): a scope is offloaded when, with it, :func:`simulate_step` still exposes no more than
    1% of the step in read waits, its write ends before its read is due, that read is not
    due as backward starts (otherwise offloading it saves nothing at the peak: all-offload's
    last scopes are read back, or kept, right there), and the modelled overhead — the
    training thread's own cost of the offloaded bytes (``offload_ns_per_byte``) included —
    stays within ``overhead_target`` (on a small model, where a byte carries little compute,
    that cost is what limits offloading). Of the rest, all but the last scope
    (whose backward comes first, so recomputing it frees nothing at the peak) are recomputed
    cheapest first (least forward time per byte) while the modelled overhead stays within
    ``overhead_target`` — but only a scope that is cheap to recompute: whose forward time per
    byte is no more than moving a byte out and back at the measured bandwidths would take
    (``1/write + 1/read``). A transformer block on a compute-heavy model costs several times
    that: recomputing it would spend most of the target for bytes offloading can save, and a
    plan that spends its whole target lands above it as soon as anything it does not model
    (the hooks, a slower moment of the host) adds to the step.
    Everything else is kept.
    """
    if write_bandwidth <= 0 or read_bandwidth <= 0:
        raise ValueError("write and read bandwidth must be > 0 bytes/s")
    n = len(nbytes)
    decisions = ["keep"] * n

    costs = (write_bandwidth, read_bandwidth, ahead, offload_ns_per_byte)

    def model() -> StepModel:
        return simulate_step(forward_ns, backward_ns, nbytes, decisions, *costs)

    base = model()
    for i in range(n):
        if nbytes[i] <= 0:
            continue
        decisions[i] = "offload"
        m = model()
        wasted = i in m.kept_in_memory or i in m.read_at_peak
        exposed = m.exposed_ns > 0.01 * base.step_ns
        if wasted or exposed or m.overhead > overhead_target:
            decisions[i] = "keep"
    if recompute:
        moving_ns_per_byte = 1e9 / write_bandwidth + 1e9 / read_bandwidth
        cheap = sorted(
            (
                i
                for i in range(n - 1)
                if decisions[i] == "keep"
                and nbytes[i] > 0
                and forward_ns[i] / nbytes[i] <= moving_ns_per_byte
            ),
            key=lambda i: (forward_ns[i] / nbytes[i], i),
        )
        for i in cheap:
            decisions[i] = "recompute"
            if model().overhead > overhead_target:
                decisions[i] = "keep"
    return decisions


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
    """

    decisions: dict[str, str]
    policy: str
    text: str
    scopes: list[str] = field(default_factory=list)
    nbytes: dict[str, int] = field(default_factory=dict)
    trim_budget_ns: int = 0
    modelled_overhead: float | None = None
    offload_ns_per_byte: float = 0.0

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
    ) -> Plan:
        """The adaptive plan of :func:`plan_hidden`, as ``placement`` IR.

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
        forward = [float(s.forward_ns) for s in scopes]
        nbytes = [int(s.nbytes) for s in scopes]
        decisions = plan_hidden(
            forward,
            backward_ns,
            nbytes,
            write_bandwidth,
            read_bandwidth,
            overhead_target=overhead_target,
            recompute=recompute,
            ahead=ahead,
            offload_ns_per_byte=offload_ns_per_byte,
        )
        costs = (write_bandwidth, read_bandwidth, ahead, offload_ns_per_byte)
        model = simulate_step(forward, backward_ns, nbytes, decisions, *costs)
        trim_budget = 0.0
        if trim_heap and "offload" in decisions:
            trim_budget = max(overhead_target - model.overhead, 0.0) * model.step_ns
        missing = _mlir_missing()
        if missing is not None:
            warnings.warn(
                f"hector.offload: the MLIR Python bindings do not import here ({missing}): the "
                "adaptive plan is followed, but not written as placement IR (it cannot be "
                "printed or saved)",
                PlanWithoutIRWarning,
                stacklevel=2,
            )
            names = [s.name for s in scopes]
            return cls(
                dict(zip(names, decisions, strict=True)),
                "adaptive",
                "",
                names,
                dict(zip(names, nbytes, strict=True)),
                int(trim_budget),
                model.overhead,
                offload_ns_per_byte,
            )
        text = _decisions_ir(
            scopes,
            backward_ns,
            decisions,
            (write_bandwidth, read_bandwidth, offload_ns_per_byte),
            ahead,
            model,
            trim_budget,
        )
        return cls.from_ir(text)

    @classmethod
    def from_ir(cls, text: str, source: str = "<plan>") -> Plan:
        """Read the decisions of the first planned function in a ``placement`` module."""
        from mlir import ir

        from hector.dialects import make_context
        from hector.passes._pipeline import parse_module  # refuses what would abort MLIR

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
                return cls(
                    decisions, policy, str(module), names, nbytes, trim, modelled, offload_ns
                )
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
    decisions: Sequence[str],
    costs: tuple[float, float, float],
    ahead: int,
    model: StepModel,
    trim_budget_ns: float = 0.0,
) -> str:
    """The profile function of ``scopes`` with ``decisions`` built in (see from_measurements);
    ``costs``: write and read bandwidth (bytes/s) and the offload cost per byte (ns);
    ``trim_budget_ns``: what each forward may spend trimming the heap (0: never)."""
    write_bandwidth, read_bandwidth, offload_ns_per_byte = costs
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
        fn.attributes["placement.rule"] = ir.StringAttr.get("hidden-io")
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
