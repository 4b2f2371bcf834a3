"""``placement-plan-offload``: decide keep / offload / recompute for each forward scope.

Input: a *profile function*, one argument per forward scope (module) in forward order::

    func.func @profile(
        %s0: tensor<4194304xi8> {placement.forward_ns = 1200000 : i64, placement.name = "h.0"},
        %s1: tensor<4194304xi8> {placement.forward_ns = 1150000 : i64, placement.name = "h.1"})
        attributes {placement.write_bandwidth = 1000000000 : i64} {
      return
    }

The size of each argument (``tensor<Nxi8>``) is the bytes of activations the scope saves,
``placement.forward_ns`` its forward time, ``placement.name`` (optional) its module name, and
``placement.write_bandwidth`` (bytes/s, or the ``write_bandwidth`` option) the measured write
bandwidth of the offload store. Functions whose arguments carry no ``placement.forward_ns`` are
left alone.

Output: the same function with one decision per scope inserted before the ``return`` —
``placement.offload`` (+ ``placement.prefetch`` of its result), ``placement.keep`` or
``placement.recompute`` with ``scope`` = the argument index — and ``placement.plan`` (the
policy) on the function. Offload decisions carry ``placement.required_bandwidth`` (bytes/s, the
left side of the rule below). Running the pass again re-plans (old decisions are dropped).

The adaptive rule (docs/offload.md, "The adaptive plan"): with ``T`` the total forward time,
scopes are visited in forward order and scope ``i`` is offloaded while::

    (Σ bytes of earlier offloaded scopes + 2·bytes(i)) / (3·T − 2·Σ forward time of scopes < i)
        ≤ write bandwidth

The first scope that fails the rule and every later one are not offloaded: their I/O could not
hide behind the rest of the step. They are kept, except that with ``memory_budget`` > 0 and
``recompute`` on, kept scopes are switched to recomputation — cheapest first (least forward
time per byte freed) — until the kept bytes fit the budget. ``policy=all`` offloads every scope
that saves bytes, ``policy=none`` keeps everything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import func as func_dialect

from ..dialects import placement
from .registry import Option, PassFailure, register_pass

__all__ = ["ScopeProfile", "decide", "profile_ir", "profile_module", "required_bandwidths"]

_DECISIONS = (placement.KEEP, placement.OFFLOAD, placement.PREFETCH, placement.RECOMPUTE)
DECISION_OPS = tuple(f"{placement.DIALECT.name}.{op.name}" for op in _DECISIONS)
# The builders of the decisions that take only their scope.
_BUILD = {"keep": placement.OPS.keep, "recompute": placement.OPS.recompute}
POLICIES = ("adaptive", "all", "none")


@dataclass(frozen=True)
class ScopeProfile:
    """Profile of one forward scope: its name, forward time (ns) and saved bytes."""

    name: str
    forward_ns: int
    nbytes: int


def required_bandwidths(scopes: Sequence[ScopeProfile]) -> list[float]:
    """Bandwidth (bytes/s) scope ``i`` needs if every earlier scope is offloaded.

    ``inf`` where the remaining step time is not positive.
    """
    total = sum(s.forward_ns for s in scopes)
    out: list[float] = []
    before_bytes = 0
    before_ns = 0
    for s in scopes:
        window_ns = 3 * total - 2 * before_ns
        need = (before_bytes + 2 * s.nbytes) / (window_ns * 1e-9) if window_ns > 0 else float("inf")
        out.append(need)
        before_bytes += s.nbytes
        before_ns += s.forward_ns
    return out


def decide(
    scopes: Sequence[ScopeProfile],
    write_bandwidth: float,
    policy: str = "adaptive",
    *,
    recompute: bool = True,
    memory_budget: int = 0,
) -> list[str]:
    """Decide ``"offload"``, ``"keep"`` or ``"recompute"`` per scope (the rule above).

    Args:
        scopes: the profile, in forward order.
        write_bandwidth: measured write bandwidth of the store, bytes/s (> 0 for adaptive).
        policy: ``"adaptive"``, ``"all"`` or ``"none"``.
        recompute: allow recomputation of scopes that are not offloaded.
        memory_budget: bytes the kept scopes may hold (0: unlimited).
    """
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    if policy == "none":
        return ["keep"] * len(scopes)
    if policy == "all":
        return ["offload" if s.nbytes > 0 else "keep" for s in scopes]
    if write_bandwidth <= 0:
        raise ValueError(f"write bandwidth must be > 0 bytes/s, got {write_bandwidth}")
    decisions = ["keep"] * len(scopes)
    for i, need in enumerate(required_bandwidths(scopes)):
        if need > write_bandwidth:
            break
        if scopes[i].nbytes > 0:
            decisions[i] = "offload"
    if recompute and memory_budget > 0:
        kept = [i for i, d in enumerate(decisions) if d == "keep" and scopes[i].nbytes > 0]
        kept_bytes = sum(scopes[i].nbytes for i in kept)
        for i in sorted(kept, key=lambda i: (scopes[i].forward_ns / scopes[i].nbytes, i)):
            if kept_bytes <= memory_budget:
                break
            decisions[i] = "recompute"
            kept_bytes -= scopes[i].nbytes
    return decisions


def profile_ir(
    scopes: Sequence[ScopeProfile], write_bandwidth: float, func_name: str = "profile"
) -> str:
    """The profile function for ``scopes`` as text (the pass's input format, as a file)."""
    from ..dialects import make_context

    return str(profile_module(scopes, write_bandwidth, func_name, make_context()))


def profile_module(
    scopes: Sequence[ScopeProfile],
    write_bandwidth: float,
    func_name: str = "profile",
    context: ir.Context | None = None,
) -> ir.Module:
    """The profile function for ``scopes`` (the pass's input), built in ``context`` (default:
    the current one): one ``tensor<Nxi8>`` argument per scope, N its saved bytes."""
    with context or ir.Context.current, ir.Location.unknown():
        module = ir.Module.create()
        i8 = ir.IntegerType.get_signless(8)
        inputs = [ir.RankedTensorType.get([int(s.nbytes)], i8) for s in scopes]
        with ir.InsertionPoint(module.body):
            fn = func_dialect.FuncOp(func_name, ir.FunctionType.get(inputs, []))
        fn.arg_attrs = ir.ArrayAttr.get([_scope_attrs(s) for s in scopes])
        fn.attributes["placement.write_bandwidth"] = _i64(int(write_bandwidth))
        with ir.InsertionPoint(fn.add_entry_block()):
            func_dialect.ReturnOp([])
    return module


def _scope_attrs(s: ScopeProfile) -> ir.DictAttr:
    return ir.DictAttr.get(
        {
            "placement.forward_ns": _i64(int(s.forward_ns)),
            "placement.name": ir.StringAttr.get(s.name),
        }
    )


def _i64(value: int) -> ir.Attribute:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(value))


def _profile_of(func: ir.Operation) -> list[ScopeProfile] | None:
    """The scopes of a profile function, or None when ``func`` is not one."""
    block = func.regions[0].blocks[0]
    arg_attrs = None
    if "arg_attrs" in func.attributes:
        arg_attrs = ir.ArrayAttr(func.attributes["arg_attrs"])
    dicts = [
        ir.DictAttr(arg_attrs[i]) if arg_attrs is not None else None
        for i in range(len(block.arguments))
    ]
    if not any(d is not None and "placement.forward_ns" in d for d in dicts):
        return None
    scopes = []
    for i, arg in enumerate(block.arguments):
        d = dicts[i]
        if d is None or "placement.forward_ns" not in d:
            raise PassFailure(
                f"profile argument #{i} has no placement.forward_ns attribute", func.location
            )
        t = arg.type
        ok = isinstance(t, ir.RankedTensorType)
        if ok:
            rt = ir.RankedTensorType(t)
            et = rt.element_type
            ok = (
                rt.rank == 1
                and isinstance(et, ir.IntegerType)
                and ir.IntegerType(et).width == 8
                and rt.shape[0] >= 0
                and not rt.is_dynamic_dim(0)
            )
        if not ok:
            raise PassFailure(
                f"profile argument #{i} must be tensor<Nxi8> (N = saved bytes), got {t}",
                func.location,
            )
        fwd = d["placement.forward_ns"]
        if not isinstance(fwd, ir.IntegerAttr) or ir.IntegerAttr(fwd).value < 0:
            raise PassFailure(
                f"profile argument #{i}: placement.forward_ns must be a non-negative integer "
                f"(nanoseconds), got {fwd}",
                func.location,
            )
        name = f"scope{i}"
        if "placement.name" in d:
            name = ir.StringAttr(d["placement.name"]).value
        nbytes = ir.RankedTensorType(t).shape[0]
        scopes.append(ScopeProfile(name, ir.IntegerAttr(fwd).value, nbytes))
    return scopes


def _decision(
    arg: ir.Value, scope: int, decision: str, need: float, ahead: int, loc: ir.Location
) -> None:
    """Write the decision for scope ``scope`` (argument ``arg``) at the insertion point."""
    if decision != "offload":
        _BUILD[decision](value=arg, scope=scope, result=arg.type, loc=loc)
        return
    required = _i64(int(need) if need != float("inf") else -1)
    out = placement.OPS.offload(
        value=arg,
        scope=scope,
        target="ssd",
        result=arg.type,
        loc=loc,
        extra={"placement.required_bandwidth": required},
    )
    placement.OPS.prefetch(value=out, scope=scope, ahead=ahead, result=arg.type, loc=loc)


def _plan_function(
    func: ir.Operation,
    policy: str,
    write_bandwidth: int,
    recompute: bool,
    memory_budget: int,
    ahead: int,
) -> None:
    scopes = _profile_of(func)
    if scopes is None:
        return
    bandwidth = write_bandwidth
    if bandwidth <= 0 and "placement.write_bandwidth" in func.attributes:
        attr = func.attributes["placement.write_bandwidth"]
        if isinstance(attr, ir.IntegerAttr):
            bandwidth = ir.IntegerAttr(attr).value
        elif isinstance(attr, ir.FloatAttr):
            bandwidth = ir.FloatAttr(attr).value
    if policy == "adaptive" and bandwidth <= 0:
        raise PassFailure(
            "adaptive planning needs the write bandwidth: set placement.write_bandwidth "
            "(bytes/s) on the function or the pass option write_bandwidth",
            func.location,
        )
    decisions = decide(scopes, bandwidth, policy, recompute=recompute, memory_budget=memory_budget)
    needs = required_bandwidths(scopes)
    block = func.regions[0].blocks[0]
    for op in reversed(list(block.operations)):  # users (prefetch) before their operands
        if op.operation.name in DECISION_OPS:
            op.operation.erase()
    with ir.InsertionPoint.at_block_terminator(block):
        for i, (arg, decision) in enumerate(zip(block.arguments, decisions, strict=True)):
            _decision(arg, i, decision, needs[i], ahead, func.location)
    func.attributes["placement.plan"] = ir.StringAttr.get(policy)


@register_pass(
    "placement-plan-offload",
    "Decide keep/offload/recompute per forward scope from a profile (adaptive offload rule)",
    policy=Option(str, "adaptive", "adaptive | all | none", POLICIES),
    write_bandwidth=Option(
        int, 0, "write bandwidth in bytes/s (0: the function's placement.write_bandwidth)", min=0
    ),
    recompute=Option(bool, True, "allow recomputation of scopes that are not offloaded"),
    memory_budget=Option(
        int, 0, "bytes kept scopes may hold before they are recomputed (0: unlimited)", min=0
    ),
    ahead=Option(int, 1, "prefetch lead, in scopes, recorded on placement.prefetch", min=0),
)
def run(
    module_op: ir.Operation,
    policy: str = "adaptive",
    write_bandwidth: int = 0,
    recompute: bool = True,
    memory_budget: int = 0,
    ahead: int = 1,
) -> None:
    """Pass entry point: plan every profile function of the module in place."""
    if write_bandwidth < 0 or memory_budget < 0 or ahead < 0:
        raise PassFailure(
            "write_bandwidth, memory_budget and ahead must be >= 0", module_op.location
        )
    for op in module_op.regions[0].blocks[0].operations:
        # a declaration (no body) has no arguments to plan
        if op.operation.name == "func.func" and len(op.operation.regions[0].blocks):
            _plan_function(op.operation, policy, write_bandwidth, recompute, memory_budget, ahead)
