"""``placement``: where each value lives and what happens to it.

Memory spaces: ``device`` (GPU memory), ``pinned_host`` (page-locked host memory),
``unified`` (pinned host memory mapped into the GPU's address space, read zero-copy by
kernels) and ``ssd`` (the offload store). A unified value also has an *affinity*, ``gpu`` or
``host``, that decides where operators on it run (docs/unified.md).
Activation decisions (``keep`` / ``offload`` / ``prefetch`` / ``recompute``) name the forward
scope that saved the value, so the tensor cache can follow a plan written as IR. A plan for
the saved values of a compiled joint forward/backward graph (``hector.offload.joint``) names
each saved value with ``saved`` (its index among the forward graph's saved outputs and its
bytes); its decisions' ``scope`` is the position of the plan function's argument holding
the value. Every op returns its operand unchanged in value: placement never changes numbers.
"""

from __future__ import annotations

from typing import Any

from .builders import OpAccess, builders
from .builders import view as _view
from .spec import Attr, DialectDef, OpDef, Operand

SPACES = ("device", "pinned_host", "unified", "ssd")
AFFINITIES = ("gpu", "host", "none")


def _one(
    name: str, summary: str, description: str, attrs: tuple[Attr, ...], attr_text: str
) -> OpDef:
    return OpDef(
        name=name,
        summary=summary,
        description=description,
        operands=(Operand("value", "any", "the value placed or decided on"),),
        results=(Operand("out", "any", "the same value, with the placement applied"),),
        attributes=attrs,
        example=(
            "func.func @example(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {\n"
            f'  %0 = "placement.{name}"(%x) {{{attr_text}}} '
            ": (tensor<?x64xf32>) -> tensor<?x64xf32>\n"
            "  return %0 : tensor<?x64xf32>\n}"
        ),
    )


_SCOPE = Attr(
    "scope",
    "int",
    "index of the forward scope (module) that saved the value; in a joint-graph plan, of the "
    "plan function's argument holding the saved value (named by `placement.saved`)",
)

PLACE = _one(
    "place",
    "Declare the memory space (and affinity) a value lives in.",
    "Pins a value to a memory space. `affinity` is meaningful for `unified` values only and is "
    '`"none"` elsewhere; placement inference reads it to decide where consumers run.',
    (
        Attr("space", "enum", "memory space", SPACES),
        Attr("affinity", "enum", "where operators on a unified value run", AFFINITIES),
    ),
    'space = "unified", affinity = "gpu"',
)

TRANSFER = _one(
    "transfer",
    "Copy a value from one memory space to another.",
    "An explicit copy, inserted where a consumer needs its operand in another space.",
    (
        Attr("from", "enum", "source space", SPACES),
        Attr("to", "enum", "destination space", SPACES),
    ),
    'from = "pinned_host", to = "device"',
)

KEEP = _one(
    "keep",
    "Keep a saved activation resident until backward uses it.",
    "Decision for an activation whose offload could not hide behind compute.",
    (_SCOPE,),
    "scope = 3 : i64",
)

OFFLOAD = _one(
    "offload",
    "Write a saved activation out as soon as it is produced.",
    "The write is asynchronous; until it completes the value is served from memory.",
    (_SCOPE, Attr("target", "enum", "where it goes", ("ssd", "pinned_host"))),
    'scope = 0 : i64, target = "ssd"',
)

PREFETCH = _one(
    "prefetch",
    "Read an offloaded activation back before backward reaches its scope.",
    "Loads are issued in reverse order of the forward scopes; `ahead` is how many scopes early.",
    (_SCOPE, Attr("ahead", "int", "scopes of lead time")),
    "scope = 0 : i64, ahead = 1 : i64",
)

RECOMPUTE = _one(
    "recompute",
    "Drop a saved activation and recompute its scope in backward.",
    "Chosen where recomputation costs less than keeping the value or waiting for its I/O. "
    "In a joint-graph plan: the value's forward ops run again in the backward graph "
    "(AOTAutograd's partition made with them marked must-recompute) instead of the store's "
    "write and read of its bytes.",
    (_SCOPE,),
    "scope = 2 : i64",
)

SAVED = _one(
    "saved",
    "Name one saved value of a compiled joint forward/backward graph.",
    "The forward graph AOTAutograd's partitioner made returns its outputs, then the values "
    "the backward graph reads (the saved values). `index` is the value's position among "
    "them, `bytes` its size. Its operand is the plan function's argument standing for it, "
    "whose `placement.name` is the forward graph's node that produces it; the decision on "
    "it (`keep`, `offload` + `prefetch`, `recompute`) has that argument's position as "
    "`scope`. A value decided `recompute` is not saved by the final partition: the backward "
    "computes it again from saved values and the graph's inputs (its chain of forward ops, "
    "never one drawing random numbers), so its `index` is its position among the saved "
    "outputs of the partition the plan was made on (before recomputation), and its "
    "argument also carries `placement.recompute_ns`, the chain's estimated time.",
    (
        Attr("index", "int", "position among the forward graph's saved outputs"),
        Attr("bytes", "int", "the saved value's size in bytes"),
    ),
    "index = 4 : i64, bytes = 1048576 : i64",
)

DIALECT = DialectDef(
    name="placement",
    summary="Memory placement and activation decisions: device, pinned host, unified, SSD.",
    description=__doc__ or "",
    ops=(PLACE, TRANSFER, KEEP, OFFLOAD, PREFETCH, RECOMPUTE, SAVED),
)

#: Typed builders, one per op (``OPS.<op>(operand=..., attr=..., result=type, loc=loc)``).
OPS = builders(DIALECT)


def view(op: Any) -> OpAccess:
    """Operands and attributes of one of this dialect's ops, by their spec names."""
    return _view(DIALECT, op)
