"""What ``placement-plan-saved`` and its memory model (``saved_liveness``) both read of a
training step: the row symbol of each kind, and the ops that use a buffer through its views."""

from __future__ import annotations

from mlir import ir

#: Row symbol and the graph array whose length is that row count, per kind.
ROWS: dict[str, tuple[str, str]] = {
    "node": ("N", "ntype"),
    "edge": ("E", "src"),
    "compact": ("C", "compact_src"),
    "dst_compact": ("D", "dst_compact_dst"),
}


def top_level(op: ir.Operation, fn: ir.Operation) -> ir.Operation:
    """The ancestor of ``op`` directly in ``fn``'s body."""
    while True:
        parent = op.parent
        if parent is None or parent.operation == fn:
            return op
        op = parent.operation


VIEWS = ("memref.collapse_shape", "memref.expand_shape", "memref.subview", "memref.cast")


def users(value: ir.Value, fn: ir.Operation, skip: tuple[ir.Operation, ...] = ()) -> list:
    """The top-level ops of ``fn`` that read or write ``value`` (through views too), in order."""
    found: dict[ir.Operation, None] = {}
    pending = [value]
    while pending:
        v = pending.pop()
        for use in v.uses:
            owner = use.owner.operation if hasattr(use.owner, "operation") else use.owner
            if owner in skip:
                continue
            if owner.name in VIEWS:
                pending.extend(owner.results)
            found[top_level(owner, fn)] = None
    order = {op: i for i, op in enumerate(o.operation for o in fn.regions[0].blocks[0].operations)}
    return sorted(found, key=lambda o: order[o])
