"""``placement-infer-unified``: where each operator runs and where its result lives.

Placements start at ``placement.place`` ops (``space`` + ``affinity``) and flow along the data
flow of each function's top-level block. For every other op with at least one placed operand
the pass decides (docs/unified.md, "Placement rules"):

1. if any unified operand is **host-affine**, the op runs on the host and its result stays in
   host memory (``pinned_host``);
2. else, if it has unified operands (all **GPU-affine**), it runs on the GPU and its result goes
   to device memory (``device``);
3. without unified operands, it runs on the GPU when any operand is in ``device`` memory, else
   on the host.

An op already carrying ``placement.run_on`` is *pinned*: the pin decides case 3 and must agree
with cases 1 and 2. Operands are then made reachable from where the op runs by explicit
``placement.transfer`` ops (``pinned_host → device`` for GPU ops, ``device → pinned_host`` for
host ops; unified operands are read in place, zero-copy, from either side). One transfer per
value and destination is shared by all its consumers. A ``placement.place`` of a computed value
in another space gets a transfer in front of it. Decisions are recorded as attributes:
``placement.run_on = "gpu" | "host"`` and ``placement.result_space``.

Rejected, with a diagnostic at the op: a unified value without affinity (``"none"``), an
affinity on a non-unified value, an operand on ``ssd`` (it must be prefetched first), a
``placement.transfer`` whose ``from`` is not where its operand lives or that moves nothing, a
``placement.run_on`` that is not ``"gpu"``/``"host"`` or that contradicts rules 1–2. Unplaced
values (no ``placement.place`` upstream) constrain nothing; ops in nested regions are not
visited. Running the pass twice gives the same IR.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mlir import ir

from ..dialects import placement
from .registry import PassFailure, register_pass

RUN_ON = "placement.run_on"
RESULT_SPACE = "placement.result_space"
_PREFIX = f"{placement.DIALECT.name}."
# Activation decisions: the value stays where it is.
_PASS_THROUGH = tuple(
    _PREFIX + op.name
    for op in (placement.KEEP, placement.OFFLOAD, placement.PREFETCH, placement.RECOMPUTE)
)


@dataclass(frozen=True)
class Placement:
    """Where a value lives: a memory space and, for unified values, an affinity."""

    space: str
    affinity: str = "none"

    def describe(self) -> str:
        """Human-readable form used in diagnostics."""
        if self.space == "unified":
            return f'a {self.affinity}-affine unified value ("unified", affinity "{self.affinity}")'
        return f'in "{self.space}"'


def decide(operands: list[Placement | None], pinned: str | None = None) -> tuple[str, str]:
    """The rule itself, on plain data: ``(run_on, result_space)`` for an op whose operands live
    at ``operands`` (``None`` = unplaced). Raises ``ValueError`` on a contradicting pin."""
    unified = [(k, p) for k, p in enumerate(operands) if p is not None and p.space == "unified"]
    host = [k for k, p in unified if p.affinity == "host"]
    if host:
        run, why = "host", f"operand #{host[0]} is a host-affine unified tensor"
    elif unified:
        run, why = "gpu", f"operand #{unified[0][0]} is a GPU-affine unified tensor"
    else:
        on_device = any(p is not None and p.space == "device" for p in operands)
        run, why = ("gpu" if on_device else "host"), ""
        if pinned is not None:
            run = pinned
    if pinned is not None and why and pinned != run:
        raise ValueError(
            f'operator is pinned to run on the {_where(pinned)} (placement.run_on = "{pinned}"), '
            f"but {why}, which makes it run on the {_where(run)}"
        )
    return run, ("device" if run == "gpu" else "pinned_host")


def _where(run: str) -> str:
    return "GPU" if run == "gpu" else "host"


class _Function:
    """Placement inference over one function's top-level block."""

    def __init__(self) -> None:
        self.where: dict[ir.Value, Placement] = {}
        self.moved: dict[tuple[ir.Value, str], ir.Value] = {}

    def transfer(self, value: ir.Value, src: str, dst: str, before: ir.Operation) -> ir.Value:
        """A ``placement.transfer`` of ``value`` from ``src`` to ``dst``, one per (value, dst)."""
        key = (value, dst)
        if key not in self.moved:
            with ir.InsertionPoint(before):
                # ``from`` is a Python keyword: the attributes go in as a mapping
                moved = placement.OPS.transfer(
                    value=value, result=value.type, loc=before.location, **{"from": src, "to": dst}
                )
            self.moved[key] = moved
            self.where[moved] = Placement(dst)
        return self.moved[key]

    def place(self, op: ir.Operation) -> None:
        v = placement.view(op)
        space, affinity = v.attr("space"), v.attr("affinity")
        if space == "unified" and affinity == "none":
            raise PassFailure(
                'a unified value needs an affinity, "gpu" or "host"; got "none"', op.location
            )
        if space != "unified" and affinity != "none":
            raise PassFailure(
                f'affinity "{affinity}" is meaningful only for unified values, '
                f'not for a value in "{space}"',
                op.location,
            )
        src = op.operands[0]
        have = self.where.get(src)
        if have is not None and have.space != space:
            op.operands[0] = self.transfer(src, have.space, space, op)
        self.where[op.results[0]] = Placement(space, affinity)

    def explicit_transfer(self, op: ir.Operation) -> None:
        v = placement.view(op)
        src, dst = v.attr("from"), v.attr("to")
        if src == dst:
            raise PassFailure(f'transfer from "{src}" to "{dst}" moves nothing', op.location)
        have = self.where.get(op.operands[0])
        if have is not None and have.space != src:
            raise PassFailure(
                f'transfer from "{src}", but its operand lives in "{have.space}"', op.location
            )
        self.where[op.results[0]] = Placement(dst)
        self.moved.setdefault((op.operands[0], dst), op.results[0])

    def operator(self, op: ir.Operation) -> None:
        operands = list(op.operands)
        placements = [self.where.get(v) for v in operands]
        if all(p is None for p in placements):
            return
        for k, p in enumerate(placements):
            if p is None:
                continue
            if p.space == "ssd":
                raise PassFailure(
                    f"operand #{k} lives on SSD, where no operator can read it; "
                    "prefetch or transfer it to memory first",
                    op.location,
                )
            if p.space == "unified" and p.affinity == "none":
                raise PassFailure(
                    f"operand #{k} is a unified value without affinity; "
                    'declare it with placement.place and affinity "gpu" or "host"',
                    op.location,
                )
        pinned = None
        if RUN_ON in op.attributes:
            attr = op.attributes[RUN_ON]
            pinned = ir.StringAttr(attr).value if isinstance(attr, ir.StringAttr) else None
            if pinned not in ("gpu", "host"):
                raise PassFailure(
                    f'placement.run_on must be "gpu" or "host", got {attr}', op.location
                )
        try:
            run, result_space = decide(placements, pinned)
        except ValueError as err:
            raise PassFailure(str(err), op.location) from None
        need_from = "pinned_host" if run == "gpu" else "device"
        need_to = "device" if run == "gpu" else "pinned_host"
        for k, (v, p) in enumerate(zip(operands, placements, strict=True)):
            if p is not None and p.space == need_from:
                op.operands[k] = self.transfer(v, need_from, need_to, op)
        op.attributes[RUN_ON] = ir.StringAttr.get(run)
        if len(op.results):
            op.attributes[RESULT_SPACE] = ir.StringAttr.get(result_space)
            for r in op.results:
                self.where[r] = Placement(result_space)

    def pass_through(self, op: ir.Operation) -> None:
        have = self.where.get(op.operands[0])
        if have is not None:
            self.where[op.results[0]] = have

    def run(self, func: ir.Operation) -> None:
        handlers: dict[str, Callable[[ir.Operation], None]] = {
            _PREFIX + placement.PLACE.name: self.place,
            _PREFIX + placement.TRANSFER.name: self.explicit_transfer,
            **{name: self.pass_through for name in _PASS_THROUGH},
            "func.return": lambda op: None,
        }
        for op in list(func.regions[0].blocks[0].operations):
            op = op.operation
            handler = handlers.get(op.name)
            if handler is not None:
                handler(op)
            elif len(op.operands):
                self.operator(op)


def infer_module(module_op: ir.Operation) -> None:
    """Infer placements in every function of ``module_op``, rewriting it in place."""
    for op in module_op.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "func.func" and len(op.regions[0].blocks):
            _Function().run(op)


@register_pass(
    "placement-infer-unified",
    "Decide where each operator runs and where its result lives from unified-tensor "
    "affinities; insert placement.transfer where an operand is out of reach",
)
def run(module_op: ir.Operation) -> None:
    """Pass entry point."""
    infer_module(module_op)
