"""``hector-skip-empty-launches``: a GPU launch over an empty grid is skipped on the host.

A launch over an empty index array (an empty graph, an edge type without edges) would ask the
driver for a zero-block grid, which it refuses. Every host ``gpu.launch_func`` is put under an
``scf.if`` its grid has a block; the pass runs after ``gpu-async-region``, and threads the
async tokens through the guard.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, scf

from ...passes.registry import PassFailure, register_pass
from .host_emulation import ops_named


def _nonempty_grid(launch: ir.Operation) -> ir.Value:
    """``gridX != 0 && gridY != 0 && gridZ != 0`` before ``launch``."""
    view = launch.opview
    zero = arith.constant(ir.IndexType.get(), 0)
    ne = arith.CmpIPredicate.ne
    conds = [arith.cmpi(ne, g, zero) for g in (view.gridSizeX, view.gridSizeY, view.gridSizeZ)]
    return arith.andi(arith.andi(conds[0], conds[1]), conds[2])


def guard_launch(launch: ir.Operation) -> None:
    """Put ``launch`` under ``scf.if`` its grid has a block: a launch over an empty index array
    (an empty graph, an edge type without edges) is skipped instead of asking the driver for
    a zero-block grid, which it refuses.

    After ``gpu-async-region`` a launch is ``%t = gpu.launch_func async [%dep]``, on the one
    stream ``%dep`` stands for (``gpu-to-llvm`` maps every token of the chain to that stream);
    uses of ``%t`` then take ``%dep`` itself, so no token crosses the ``scf.if`` (a token that
    became a block argument would be taken for an event by ``gpu-to-llvm``)."""
    view = launch.opview
    token = view.asyncToken
    deps = list(view.asyncDependencies)
    if token is not None:
        if len(deps) != 1:
            raise PassFailure(
                "an async gpu.launch_func must have exactly one dependency to be guarded",
                launch.location,
            )
        token.replace_all_uses_with(deps[0])
    with launch.location, ir.InsertionPoint(launch):
        if_op = scf.IfOp(_nonempty_grid(launch))
    with launch.location, ir.InsertionPoint(if_op.then_block):
        yield_op = scf.YieldOp([])
    launch.move_before(yield_op)


# Every op nested in an op whose name is one of a tuple, in walk order (one helper for both).


def _launches(op: ir.Operation) -> list[ir.Operation]:
    return ops_named(op, ("gpu.launch_func",))


@register_pass(
    "hector-skip-empty-launches",
    "Guard every host gpu.launch_func with scf.if its grid is non-empty (run after "
    "gpu-async-region: async tokens are threaded through the guard)",
)
def run_skip_empty(module_op: ir.Operation) -> None:
    """Pass entry point: guard the launches of every host function."""
    for op in module_op.regions[0].blocks[0].operations:
        if op.operation.name == "func.func":
            for launch in _launches(op.operation):
                guard_launch(launch)
