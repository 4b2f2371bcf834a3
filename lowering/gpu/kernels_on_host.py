"""``hector-gpu-kernels-on-host`` (testing): a GPU module's kernels run sequentially on the host.

For modules right after ``convert-hector-intra-to-gpu``: each kernel's body becomes a host
function taking the kernel's arguments and its block and thread ids, and each launch a call of
``__grid_<kernel>``, a loop over blocks and threads calling that body. A kernel with barriers or
shared/private memory runs a block at a time, its threads phase by phase between barriers
(:func:`.host_emulation.block_function`). Device buffers go back to host memory ops. Lowered to
LLVM, ``__grid_<kernel>`` takes the kernel's parameters as the GPU kernel does, so a fake
driver can run a launch by calling it.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, func, linalg, memref, scf

from ...passes.registry import PassFailure, register_pass
from ..cpu.bf16_emulation import emulated_rounding
from .host_emulation import block_function, has_barrier, ops_named
from .mma_on_host import MMA_NAME

_DEVICE_BUFFER_OPS = ("gpu.alloc", "gpu.dealloc", "gpu.memset", "gpu.memcpy")


def _launches(op: ir.Operation) -> list[ir.Operation]:
    return ops_named(op, ("gpu.launch_func",))


def _kernel_as_function(kernel: ir.Operation, at: ir.Operation) -> str:
    """Move ``kernel``'s body into a ``func.func`` before ``at`` taking the kernel's arguments
    and then ``(block id, thread id, block size)``; returns its name."""
    old = kernel.regions[0].blocks[0]
    ids_ops = ("gpu.block_id", "gpu.thread_id", "gpu.block_dim")
    for op in old.operations:  # refuse before moving anything: a half-moved body cannot be undone
        if op.name in ids_ops and str(op.attributes["dimension"]) != "#gpu<dim x>":
            raise PassFailure("only x-dimension kernels run on the host", op.location)
    index = ir.IndexType.get()
    name = "__kernel_" + ir.StringAttr(kernel.attributes["sym_name"]).value
    types = [a.type for a in old.arguments] + [index] * 3
    with kernel.location, ir.InsertionPoint(at):
        fn = func.FuncOp(name, ir.FunctionType.get(types, []))
        fn.attributes["sym_visibility"] = ir.StringAttr.get("private")
    block = fn.add_entry_block()
    with kernel.location, ir.InsertionPoint(block):
        ret = func.ReturnOp([])
    *args, bid, tid, bdim = list(block.arguments)
    for a, new in zip(old.arguments, args, strict=True):
        a.replace_all_uses_with(new)
    ids = {"gpu.block_id": bid, "gpu.thread_id": tid, "gpu.block_dim": bdim}
    for op in list(old.operations):
        op = op.operation
        if op.name == "gpu.return":
            op.erase()
            continue
        if op.name in ids:
            op.results[0].replace_all_uses_with(ids[op.name])
            op.erase()
            continue
        op.move_before(ret)
    return name


def _grid_function(
    kernel: ir.Operation, body: str, at: ir.Operation, per_block: bool = False
) -> str:
    """A public ``__grid_<kernel>(args..., grid_x, block_x)`` before ``at``: ``for block in
    grid_x: for thread in block_x: body(args, block, thread, block_x)`` (``per_block``: ``for
    block in grid_x: body(args, block, block_x)``, the body running the block's threads phase
    by phase). Lowered to LLVM it takes the kernel's parameters as the GPU kernel does
    (memrefs expanded), then the sizes, so a fake driver can run a launch by calling it;
    returns its name."""
    index = ir.IndexType.get()
    ftype = ir.FunctionType(ir.TypeAttr(kernel.attributes["function_type"]).value)
    arg_types = list(ftype.inputs)
    name = "__grid_" + ir.StringAttr(kernel.attributes["sym_name"]).value
    with kernel.location, ir.InsertionPoint(at):
        fn = func.FuncOp(name, ir.FunctionType.get([*arg_types, index, index], []))
    block = fn.add_entry_block()
    *args, grid, threads = list(block.arguments)
    with kernel.location, ir.InsertionPoint(block):
        c0, c1 = (arith.constant(index, v) for v in (0, 1))
        blocks = scf.ForOp(c0, grid, c1)
        with ir.InsertionPoint(blocks.body):
            if per_block:
                func.CallOp([], body, [*args, blocks.induction_variable, threads])
            else:
                in_block = scf.ForOp(c0, threads, c1)
                with ir.InsertionPoint(in_block.body):
                    ids = [blocks.induction_variable, in_block.induction_variable, threads]
                    func.CallOp([], body, [*args, *ids])
                    scf.yield_([])
            scf.yield_([])
        func.ReturnOp([])
    return name


def _launch_as_call(launch: ir.Operation, callee: str) -> None:
    """``gpu.launch_func`` → ``func.call @__grid_<kernel>(args, grid.x, block.x)``."""
    view = launch.opview
    with launch.location, ir.InsertionPoint(launch):
        func.CallOp([], callee, [*view.kernelOperands, view.gridSizeX, view.blockSizeX])
    launch.erase()


def _host_buffer(op: ir.Operation) -> None:
    """``gpu.alloc``/``dealloc``/``memset``/``memcpy`` back to host memory ops."""
    with op.location, ir.InsertionPoint(op):
        if op.name == "gpu.alloc":
            new = memref.alloc(op.results[0].type, list(op.operands), [])
            op.results[0].replace_all_uses_with(new)
        elif op.name == "gpu.dealloc":
            memref.dealloc(op.operands[0])
        elif op.name == "gpu.memset":
            linalg.fill(op.operands[1], outs=[op.operands[0]])
        else:
            memref.copy(op.operands[1], op.operands[0])
    op.erase()


def _runs_per_block(kernel: ir.Operation) -> bool:
    """Whether ``kernel`` has barriers, MMAs (a warp's collective) or shared/private memory:
    then its threads run phase by phase (:func:`.host_emulation.block_function`), not one
    after another."""
    entry = kernel.regions[0].blocks[0]
    ftype = ir.FunctionType(ir.TypeAttr(kernel.attributes["function_type"]).value)
    if len(entry.arguments) > len(ftype.inputs) or has_barrier(kernel):
        return True
    return bool(ops_named(kernel, (MMA_NAME,)))


@register_pass(
    "hector-gpu-kernels-on-host",
    "Testing: run a GPU module's kernels sequentially on the host (each launch a call of "
    "__grid_<kernel>, a loop over blocks and threads calling the kernel's body; device buffers "
    "in host memory)",
)
def run_kernels_on_host(module_op: ir.Operation) -> None:
    """Pass entry point: for modules right after ``convert-hector-intra-to-gpu``."""
    top = module_op.regions[0].blocks[0]
    kernels: dict[str, str] = {}
    for op in list(top.operations):
        op = op.operation
        if op.name == "gpu.module":
            for kernel in list(op.regions[0].blocks[0].operations):
                kop = kernel.operation
                if kop.name == "gpu.func":
                    sym = ir.StringAttr(kop.attributes["sym_name"]).value
                    if _runs_per_block(kop):
                        body = block_function(kop, op)
                        kernels[sym] = _grid_function(kop, body, op, per_block=True)
                    else:
                        body = _kernel_as_function(kop, op)
                        kernels[sym] = _grid_function(kop, body, op)
            op.erase()
    for op in top.operations:
        if op.operation.name != "func.func":
            continue
        for inner in _launches(op.operation):
            sym = ir.SymbolRefAttr(inner.attributes["kernel"]).value[-1]
            _launch_as_call(inner, kernels[sym])
        for inner in ops_named(op.operation, _DEVICE_BUFFER_OPS):
            _host_buffer(inner)
    if "gpu.container_module" in module_op.attributes:
        del module_op.attributes["gpu.container_module"]
    _define_bf16_rounding(module_op)


#: The compiler-rt builtin LLVM calls to round f32 to bf16 where the CPU has no instruction
#: for it (without AVX512-BF16, to move bf16 values the kernels hold); the JIT has no
#: compiler-rt, so the module defines it.
TRUNC_BUILTIN = "__truncsfbf2"


def _define_bf16_rounding(module_op: ir.Operation) -> None:
    """Add ``__truncsfbf2`` (``vcvtneps2bf16``'s rounding in integer arithmetic,
    :func:`hector.lowering.cpu.bf16_emulation.emulated_rounding`) to ``module_op`` unless it
    has one."""
    if TRUNC_BUILTIN in ir.SymbolTable(module_op):
        return
    top = module_op.regions[0].blocks[0]
    f32, bf16 = ir.F32Type.get(), ir.BF16Type.get()
    with ir.InsertionPoint.at_block_begin(top), ir.Location.unknown():
        fn = func.FuncOp(TRUNC_BUILTIN, ir.FunctionType.get([f32], [bf16]))
        entry = fn.add_entry_block()
        with ir.InsertionPoint(entry):
            func.ReturnOp([emulated_rounding(entry.arguments[0])])
