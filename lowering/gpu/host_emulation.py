"""How GPU kernels with barriers run on the host, for tests (``hector-gpu-kernels-on-host``,
:mod:`~hector.lowering.gpu.kernels_on_host`).

A kernel with barriers becomes a function per block whose straight-line runs between barriers
are each a loop over the block's threads: every thread reaches the barrier before any goes on,
as on the GPU. Shared memory is one
buffer per block; private memory one row per thread. A warp's ``nvgpu.mma.sync`` becomes a
software m16n8k16 between barriers (:mod:`.mma_on_host`).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, memref, scf

from ...passes.registry import PassFailure
from .mma_on_host import MMA_NAME, emulate_mma, scratch_type


def has_barrier(op: ir.Operation) -> bool:
    """Whether ``op`` is or contains a ``gpu.barrier``."""
    return bool(ops_named(op, ("gpu.barrier",)))


def _hoist_constants(func_op: ir.Operation, to: ir.Operation) -> None:
    """Move every ``arith.constant`` before ``to``: constants are the same in every thread, and
    a run of ops between barriers may then use one built in another."""
    consts = ops_named(func_op, ("arith.constant",))
    for c in consts:
        c.move_before(to)


class _Threads:
    """Turns a kernel body with barriers into per-block host code (see :func:`block_function`)."""

    def __init__(
        self, private: list[tuple[ir.Value, ir.Value]], bdim: ir.Value, entry: ir.Block
    ) -> None:
        self.private = private  # (private attribution, its [threads, n] host buffer)
        self.bdim = bdim
        # Where a block argument is the same for every thread: the function's entry (the
        # kernel's arguments, block id and size) and the bodies of loops holding barriers.
        self.uniform_blocks = [entry]
        self.uniform_ops: list[ir.Operation] = []

    def _uniform(self, op: ir.Operation) -> bool:
        """Whether ``op`` computes the same value in every thread: pure index arithmetic or a
        ``memref.dim`` of uniform values. Such ops stay outside the thread loops (a loop's
        bounds or an id derived from the block id may then cross a barrier)."""
        if not (op.name.startswith("arith.") or op.name == "memref.dim") or len(op.regions):
            return False
        for v in op.operands:
            owner = v.owner
            if isinstance(owner, ir.Block):
                if not any(owner == blk for blk in self.uniform_blocks):
                    return False
                continue
            src = owner.operation
            if src.name != "arith.constant" and not any(src == u for u in self.uniform_ops):
                return False
        return True

    def split_ops(self, ops: list[ir.Operation]) -> None:
        """Put each barrier-free run of ``ops`` (one block's, terminator aside) in a loop over
        the threads; then do the same in each loop holding barriers, nested ones after their
        parents (a worklist, not recursion: input may nest loops deeper than Python recurses).

        A loop body's ops see only the values of ops before the loop (the runs already
        placed) and of their own loop; the ops after the loop cannot read the body's (loops
        with barriers have no results), so placing a body after the rest of its block
        decides the same as placing it first."""
        pending = [ops]
        while pending:
            run: list[ir.Operation] = []
            for op in pending.pop(0):
                if op.name == "gpu.barrier":
                    self._threads_loop(run)
                    run = []
                    op.erase()
                elif has_barrier(op):
                    self._threads_loop(run)
                    run = []
                    body = op.regions[0].blocks[0]
                    self.uniform_blocks.append(body)
                    inner = [o.operation for o in body.operations]
                    pending.append([o for o in inner[:-1] if o.name != "arith.constant"])
                else:
                    run.append(op)
            self._threads_loop(run)

    def _threads_loop(self, ops: list[ir.Operation]) -> None:
        run: list[ir.Operation] = []
        for op in ops:
            if self._uniform(op):
                self.uniform_ops.append(op)
                if run:  # before the run's loop, which will stand where its first op is
                    op.move_before(run[0])
            else:
                run.append(op)
        if not run:
            return
        first = run[0]
        index = ir.IndexType.get()
        with first.location, ir.InsertionPoint(first):
            c0, c1 = arith.constant(index, 0), arith.constant(index, 1)
            loop = scf.ForOp(c0, self.bdim, c1)
        with first.location, ir.InsertionPoint(loop.body):
            tid = loop.induction_variable
            views = [self._private_view(buf, tid, attr) for attr, buf in self.private]
            end = scf.YieldOp([])
        for op in run:
            op.move_before(end)
        for (attr, _), view in zip(self.private, views, strict=True):
            _replace_uses_inside(attr, view, loop.operation)
        for op in run:  # before the thread ids go: they are among the run's ops
            for result in op.results:
                for use in result.uses:
                    if not _defined_inside_op(use.owner, loop.operation):
                        raise PassFailure(
                            "a value crosses a gpu.barrier: the kernel cannot run on the host "
                            "phase by phase",
                            op.location,
                        )
        for t in ops_named(loop.operation, ("gpu.thread_id",)):
            t.results[0].replace_all_uses_with(tid)
            t.erase()

    def _private_view(self, buf: ir.Value, tid: ir.Value, attr: ir.Value) -> ir.Value:
        """Row ``tid`` of the private buffer ``[threads, n]`` as a ``[n]`` view."""
        ptype = ir.MemRefType(attr.type)
        n = ptype.shape[0]
        dyn = ir.ShapedType.get_dynamic_size()
        layout = ir.StridedLayoutAttr.get(dyn, [1])
        view_type = ir.MemRefType.get([n], ptype.element_type, layout=layout)
        dyn_offset = [dyn, 0]
        return memref.SubViewOp(view_type, buf, [tid], [], [], dyn_offset, [1, n], [1, 1]).result


def _defined_inside_op(user: ir.Operation | ir.OpView, op: ir.Operation) -> bool:
    node: ir.Operation | None = user.operation
    while node is not None:
        if node == op:
            return True
        parent = node.parent
        node = parent.operation if parent is not None else None
    return False


def _replace_uses_inside(old: ir.Value, new: ir.Value, op: ir.Operation) -> None:
    """Uses of ``old`` nested in ``op`` take ``new``."""
    for use in list(old.uses):
        if _defined_inside_op(use.owner, op):
            use.owner.operands[use.operand_number] = new


def plain_type(t: ir.Type) -> ir.MemRefType:
    """A memref type without its memory space (host memory)."""
    m = ir.MemRefType(t)
    return ir.MemRefType.get(list(m.shape), m.element_type)


def ops_named(op: ir.Operation, names: tuple[str, ...]) -> list[ir.Operation]:
    """Every op nested in ``op`` named one of ``names``, in walk order (collected first: an
    exception raised inside a walk callback loses its message)."""
    found: list[ir.Operation] = []

    def visit(inner: ir.Operation) -> ir.WalkResult:
        if inner.name in names:
            found.append(inner)
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return found


def _check_barriers(kernel: ir.Operation) -> None:
    """Refuse, before anything moves, a barrier or an MMA (a warp's collective, run between
    barriers) nested in anything but loops without results."""
    for barrier in ops_named(kernel, ("gpu.barrier", MMA_NAME)):
        node = barrier.parent
        while node is not None and node.operation != kernel:
            if node.name != "scf.for" or len(node.results):
                raise PassFailure(
                    f"a {barrier.name} may only be inside scf.for loops without results to run "
                    "on the host",
                    node.location,
                )
            node = node.operation.parent


def block_function(kernel: ir.Operation, at: ir.Operation) -> str:
    """Move ``kernel``'s body into ``__block_<kernel>(args..., block id, block size)`` before
    ``at``: one block of the kernel, each barrier-free run of ops a loop over its threads,
    shared memory one buffer for the block, private memory one row per thread. Returns its
    name. Refuses (``PassFailure``, nothing moved) a kernel whose barriers are in anything but
    the body or loops without results, or whose private memory is not rank 1."""
    from mlir.dialects import func

    old = kernel.regions[0].blocks[0]
    attrs = kernel.attributes
    n_wg = (
        ir.IntegerAttr(attrs["workgroup_attributions"]).value
        if "workgroup_attributions" in attrs
        else 0
    )
    inputs = ir.FunctionType(ir.TypeAttr(attrs["function_type"]).value).inputs
    n_args = len(inputs)
    args_old = list(old.arguments)[:n_args]
    wg_old = list(old.arguments)[n_args : n_args + n_wg]
    priv_old = list(old.arguments)[n_args + n_wg :]
    for op in ops_named(kernel, ("gpu.block_id", "gpu.thread_id", "gpu.block_dim")):
        if str(op.attributes["dimension"]) != "#gpu<dim x>":
            raise PassFailure("only x-dimension kernels run on the host", op.location)
    for p in priv_old:
        if ir.MemRefType(p.type).rank != 1:
            raise PassFailure("only rank-1 private memory runs on the host", kernel.location)
    _check_barriers(kernel)
    index = ir.IndexType.get()
    name = "__block_" + ir.StringAttr(attrs["sym_name"]).value
    with kernel.location, ir.InsertionPoint(at):
        fn = func.FuncOp(name, ir.FunctionType.get([*inputs, index, index], []))
        fn.attributes["sym_visibility"] = ir.StringAttr.get("private")
    block = fn.add_entry_block()
    *args, bid, bdim = list(block.arguments)
    dyn = ir.ShapedType.get_dynamic_size()
    with kernel.location, ir.InsertionPoint(block):
        shared = [memref.alloc(plain_type(w.type), [], []) for w in wg_old]
        private = []
        for p in priv_old:
            ptype = ir.MemRefType(p.type)
            rows = ir.MemRefType.get([dyn, ptype.shape[0]], ptype.element_type)
            private.append(memref.alloc(rows, [bdim], []))
        mmas = ops_named(kernel, (MMA_NAME,))
        scratch = [memref.alloc(scratch_type(), [bdim], [])] if mmas else []
        ret = func.ReturnOp([])
    for a, new in zip([*args_old, *wg_old], [*args, *shared], strict=True):
        a.replace_all_uses_with(new)
    ids = {"gpu.block_id": bid, "gpu.block_dim": bdim}
    # phases rebuild the block's coordinates: ids sit in nested regions too
    for op in ops_named(kernel, tuple(ids)):
        op.results[0].replace_all_uses_with(ids[op.name])
        op.erase()
    moved: list[ir.Operation] = []
    for op in list(old.operations):
        op = op.operation
        if op.name == "gpu.return":
            op.erase()
        else:
            op.move_before(ret)
            moved.append(op)
    with kernel.location, ir.InsertionPoint(ret):
        for buf in (*shared, *private, *scratch):
            memref.dealloc(buf)
    for mma in mmas:
        emulate_mma(mma, scratch[0])
    _hoist_constants(fn.operation, block.operations[0].operation)
    threads = _Threads(list(zip(priv_old, private, strict=True)), bdim, block)
    threads.split_ops([op for op in moved if op.name != "arith.constant"])
    return name
