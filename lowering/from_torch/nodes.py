"""What ``raise-torch-to-hector`` works with: the attribute names that bind a torch function
to the graph, torch-mlir's types and locations read as data, the hector_inter nodes being
built (:class:`HNode`), the pass's report and its error."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ...dialects import Kind
from ...dialects import hector_inter as inter

GRAPH_ATTR = "hector.data.graph"
GLUE_ATTR = "hector.glue"
KIND_ATTR = "hector.kind"
BINDINGS = ("src", "dst", "etype", "ntype", "edge_index")
#: The rows a per-type weight or bias is picked for, by the graph's type array that picks it.
TYPE_ARRAY_ROWS: dict[str, Kind] = {"etype": Kind.EDGE, "ntype": Kind.NODE}
LEAF = "leaf"


def _index_ops(reduce: bool, src: Kind, dst: Kind) -> dict[str, str]:
    """hector_inter index ops moving rows ``src`` → ``dst`` by graph array (from the specs)."""
    return {
        s.rowmap.array: s.name
        for s in inter.DIALECT.ops
        if s.rowmap is not None
        and (s.rowmap.reduce, s.rowmap.src, s.rowmap.dst) == (reduce, src, dst)
    }


#: ``x[I]`` with ``I`` a graph array → the gather through it (``src`` → ``gather_src``).
GATHER_BY_ARRAY = _index_ops(False, Kind.NODE, Kind.EDGE)
#: ``zeros.index_add(0, I, m)`` with ``I`` a graph array → the sum through it.
SUM_BY_ARRAY = _index_ops(True, Kind.EDGE, Kind.NODE)


# -- torch-mlir's types and locations ---------------------------------------------------------
# torch-mlir's Python package has no classes for its own types (``torch_mlir.dialects.torch``
# holds op builders only; its native module exports ``register_dialect`` alone) and its
# ``Location`` has no accessors (no ``filename``/``start_line``): its own FX importer builds
# ``!torch.vtensor`` types by parsing their text. These helpers are the one place Hector reads
# or builds torch-mlir types and locations, and they do it the same way.

_VTENSOR = re.compile(r"!torch\.vtensor<\[([-0-9,]*)\],(\w+)>")
_FILE_LOC = re.compile(r'"([^"]+)":(\d+)')


@dataclass(frozen=True)
class VTensor:
    """A ``!torch.vtensor<[dims],dtype>`` type as data (``dtype`` as torch-mlir spells it:
    ``f32``, ``si64``, ``i1``)."""

    shape: tuple[int, ...]
    dtype: str


def vtensor(t: Any) -> VTensor | None:
    """Shape and dtype of a statically shaped ``!torch.vtensor`` type, else None."""
    m = _VTENSOR.fullmatch(str(t))  # torch-mlir's type syntax: it has no Python type API
    if m is None:
        return None
    return VTensor(tuple(int(d) for d in m.group(1).split(",") if d), m.group(2))


def vtensor_type(shape: tuple[int, ...], dtype: str) -> Any:
    """The ``!torch.vtensor`` type of ``shape`` and ``dtype`` in the current torch-mlir
    context (parsed, as torch-mlir's FX importer does: no Python type API to build it)."""
    from torch_mlir import ir

    dims = ",".join(str(d) for d in shape)
    return ir.Type.parse(f"!torch.vtensor<[{dims}],{dtype}>")


def source_location(loc: Any) -> str:
    """``file:line`` of a torch-mlir location (its first file location), or ``<unknown>``."""
    m = _FILE_LOC.search(str(loc))  # torch-mlir's Location has no accessors to read it by
    return f"{m.group(1)}:{m.group(2)}" if m else "<unknown>"


class RaiseError(Exception):
    """The input cannot be raised (bad bindings) or, under ``strict``, ops stayed unraised."""

    def __init__(self, message: str, unsupported: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.unsupported = unsupported or []


@dataclass(eq=False)
class HNode:
    """A hector_inter value being built: an op over other nodes, or a leaf torch value."""

    op: str  # hector_inter op name, or LEAF
    kind: Kind
    shape: tuple[int, ...]
    operands: dict[str, HNode] = field(default_factory=dict)  # by the spec's operand names
    attrs: dict[str, Any] = field(default_factory=dict)  # by the spec's attribute names
    graph: bool = False  # pass the graph where the spec makes it optional (typed bias)
    value: Any = None  # leaf: the torch value
    anchor: Any = None  # the torch op the node replaces (insertion point)
    glue_t: bool = False  # leaf: transpose the torch value first (linear weights)


@dataclass
class RaiseReport:
    """What the pass did: raised hector ops by name, and torch ops left as eager code."""

    raised: dict[str, int] = field(default_factory=dict)
    unsupported: list[tuple[str, str]] = field(default_factory=list)  # (op name, file:line)


def value_shape(v: Any) -> tuple[tuple[int, ...], str] | None:
    """Shape and dtype of a torch value of static ``!torch.vtensor`` type, else None."""
    t = vtensor(v.type)
    return None if t is None else (t.shape, t.dtype)


def defining_op(v: Any) -> Any:
    """The op defining ``v`` (None for block arguments)."""
    owner = v.owner
    return None if owner.__class__.__name__ == "Block" else owner.operation


def op_name(op: Any) -> str:
    """The name of ``op``, ``""`` for None (a block argument's missing definition)."""
    return op.name if op is not None else ""


#: A raised value's static shape.
Shape = tuple[int, ...]
