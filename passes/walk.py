"""Walks over nested IR without Python recursion.

Input IR may nest regions as deep as MLIR's parser allows (an ``scf.execute_region`` in an
``scf.execute_region`` ..., a thousand deep): a walk that recursed once per level would stop
with ``RecursionError`` long before MLIR does. These walks keep their own stack, so their depth
is bounded by memory alone. (``ir.Operation.walk`` recurses in C++ instead, and an exception
raised in its Python callback loses its message: collect ops with these, then act on them.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from mlir import ir


def _children(op: ir.Operation) -> Iterator[ir.Operation]:
    """The ops directly inside ``op``'s regions, in order (read lazily, as a walk goes)."""
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield inner.operation


def walk_ops(
    op: ir.Operation | ir.OpView, *, into: Callable[[ir.Operation], bool] | None = None
) -> Iterator[ir.Operation]:
    """Every op nested in ``op`` (not ``op`` itself), in pre-order: each op before the ops of
    its regions, those before its next sibling. With ``into``, the regions of an op are only
    entered when ``into(op)`` holds (the op itself is still yielded).

    Like a recursive generator, the walk reads each block when it gets there, so ops that the
    caller erases or adds in a block not yet reached are seen as they are then; do not erase
    the op just yielded or its ancestors while walking (collect first, then change)."""
    stack = [_children(op.operation)]
    while stack:
        inner = next(stack[-1], None)
        if inner is None:
            stack.pop()
            continue
        yield inner
        if into is None or into(inner):
            stack.append(_children(inner))


def blocks_of(op: ir.Operation | ir.OpView) -> Iterator[ir.Block]:
    """Every block nested in ``op`` (its own regions' blocks included), in pre-order."""
    for region in op.operation.regions:
        yield from region.blocks
    for inner in walk_ops(op):
        for region in inner.regions:
            yield from region.blocks
