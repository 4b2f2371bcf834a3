"""``convert-hector-inter-to-intra``: each function on tensors rebuilt on memrefs.

Each function on tensors becomes a function on memrefs in destination-passing style:

* the ``!hector_inter.graph`` argument is replaced, in place, by the graph's arrays (one per
  ``GRAPH_LAYOUT`` entry of ``dialects/hector_intra.py``: ``src, dst, etype, ntype, etype_ptr,
  norm_dst_etype, norm_dst``, the compaction map ``compact_src, compact_etype, edge_compact``,
  ``etype_src_ntype`` and the destination pairs ``dst_compact_dst, dst_compact_etype,
  edge_dst_compact``);
* every result becomes a trailing output argument (``hector.outputs`` counts them) and the
  function returns nothing;
* intermediate values get ``memref.alloc`` buffers, sized by the edge count (``dim src``), the node
  count (``dim ntype``) or their input's row count, and freed at the end.

The new function is built through the MLIR Python API next to the old one (``func.FuncOp`` with
block arguments), the old one's values are mapped to the new buffers, each op not folded into a
user (:mod:`~hector.lowering.inter_to_intra.fusion`) is lowered by its handler
(:mod:`~hector.lowering.inter_to_intra.handlers`), and the old function is erased. Every op
created carries the location of the ``hector_inter`` op it lowers.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, func, memref

from ...dialects import hector_inter as inter
from ...dialects.hector_intra import GRAPH_LAYOUT
from ...passes import verify
from ...passes.registry import Option, PassFailure, register_pass
from ...passes.saved_buffers import VIEWS, users
from .function import FunctionLowering, element_type, gather_map, memref_of, producer, rank
from .fusion import plan_fusion
from .handlers import ELEMENTWISE_WRITERS, STORING_GEMMS, lower

# Function attributes the rebuilt function gets from ``func.FuncOp`` itself (or drops: the
# argument and result attributes describe the old signature).
_INHERENT = ("sym_name", "function_type", "arg_attrs", "res_attrs", "sym_visibility")


def _storage_type(fn: ir.Operation, i: int, of: str = "arg") -> ir.Type | None:
    """The element type argument ``i`` of ``fn`` (``of="res"``: result ``i``) is stored in (its
    ``hector.storage``: f16, bf16 or f32; None without one). The function computes on f32
    values: its templates extend a stored argument on load, and round a stored result once,
    when they write it."""
    if f"{of}_attrs" not in fn.attributes:
        return None
    attrs = ir.DictAttr(ir.ArrayAttr(fn.attributes[f"{of}_attrs"])[i])
    if inter.STORAGE not in attrs:
        return None
    attr = attrs[inter.STORAGE]
    what = "argument" if of == "arg" else "result"
    if not isinstance(attr, ir.TypeAttr) or not isinstance(attr.value, verify.INPUT_TYPES):
        raise PassFailure(
            f"{what} #{i}: {inter.STORAGE} must be one of the types f16, bf16, f32, got {attr}",
            fn.location,
        )
    return attr.value


class _FunctionRebuild:
    """Rebuilds one function on memrefs: its signature, then its body op by op."""

    def __init__(self, fn: ir.Operation, graph_type: ir.Type, block_size: int, tile_n: int) -> None:
        self.func = fn
        self.graph_type = graph_type
        self.lw = FunctionLowering(fn, block_size, tile_n)
        self.outputs: list[tuple[ir.Value, ir.Value]] = []  # (returned value, output argument)

    def run(self) -> None:
        """Rebuild the function on memrefs (nothing happens to a non-Hector function)."""
        old = self.func
        block = old.regions[0].blocks[0]
        ops = [op.operation for op in block.operations]
        graphs = [a for a in block.arguments if a.type == self.graph_type]
        if not graphs and not any(op.name.startswith("hector_inter.") for op in ops):
            return  # not a Hector function (a graph argument makes one, even op-free)
        if len(graphs) > 1:
            raise PassFailure("a function may take at most one graph", old.location)
        ret = ops[-1]
        new = self._signature(block, list(ret.operands))
        try:
            with ir.InsertionPoint(new.entry_block):
                self._body(ops, ret)
            _check_stored_inputs(new)
        except BaseException:
            new.operation.erase()  # leave the module as it was
            raise
        old.erase()

    def _signature(self, block: ir.Block, results: list[ir.Value]) -> func.FuncOp:
        """Create the new function next to the old one and map the old arguments to its block
        arguments: the graph to its arrays, tensors to memrefs, results to trailing outputs."""
        old = self.func
        inputs: list[ir.Type] = []
        locs: list[ir.Location] = []
        for arg in block.arguments:
            if arg.type == self.graph_type:
                inputs += [a.memref_type() for a in GRAPH_LAYOUT]
                locs += [arg.location] * len(GRAPH_LAYOUT)
            elif isinstance(arg.type, ir.RankedTensorType):
                inputs.append(memref_of(arg.type, _storage_type(old, arg.arg_number)))
                locs.append(arg.location)
            else:
                raise PassFailure(
                    f"argument of type {arg.type} is not supported; expected a ranked "
                    "tensor or !hector_inter.graph",
                    old.location,
                )
        inputs += [memref_of(v.type, _storage_type(old, i, "res")) for i, v in enumerate(results)]
        locs += [v.location for v in results]
        sym = ir.StringAttr(old.attributes["sym_name"]).value
        new = func.FuncOp(
            sym, ir.FunctionType.get(inputs, []), loc=old.location, ip=ir.InsertionPoint(old)
        )
        for i in range(len(old.attributes)):
            named = old.attributes[i]
            if named.name not in _INHERENT:
                new.attributes[named.name] = named.attr
        new.attributes["hector.outputs"] = ir.IntegerAttr.get(
            ir.IntegerType.get_signless(64), len(results)
        )
        args = iter(new.add_entry_block(locs).arguments)
        for arg in block.arguments:
            if arg.type == self.graph_type:
                self.lw.graph = {a.name: next(args) for a in GRAPH_LAYOUT}
            else:
                self.lw.buffers.buf[arg] = next(args)
        self.outputs = [(value, next(args)) for value in results]
        return new

    def _body(self, ops: list[ir.Operation], ret: ir.Operation) -> None:
        """Lower the ops of the old body into the new entry block, then copy what is returned
        but not computed here, free the buffers and return."""
        buffers = self.lw.buffers
        copies: list[tuple[ir.Value, ir.Value]] = []
        for value, arg in self.outputs:
            made_by = producer(value)
            if (
                value in buffers.out_param
                or made_by is None
                or made_by.name == "hector_inter.degree_norm"
                or (element_type(arg) != element_type(value) and not _rounds_as_written(value))
            ):
                # Returned twice, not computed here, or stored as a half by a template that
                # cannot round as it writes: copied at the end.
                copies.append((arg, value))
            else:
                buffers.out_param[value] = arg
        with self.func.location:
            buffers.c0 = arith.constant(ir.IndexType.get(), 0)
        plan_fusion(self.lw, ops)
        for op in ops[:-1]:
            if op not in self.lw.fused:
                with op.location:
                    lower(self.lw, op)
        with ret.location:
            for arg, value in copies:
                self._copy_out(arg, buffers.src(value), ret)
        buffers.free()
        func.ReturnOp([], loc=ret.location)

    def _copy_out(self, arg: ir.Value, src: ir.Value, ret: ir.Operation) -> None:
        """Copy a result into its output argument: bytes where the element types agree, else
        row by row through a traversal that converts each element (a stored half input
        returned as it is, extended; an f32 value returned in half storage, rounded)."""
        if element_type(arg) == element_type(src):
            memref.copy(src, arg)
            return
        if rank(src) != 2:
            raise PassFailure(
                f"a result of type {src.type} converted to {arg.type}: only [rows, width] "
                "results change element type",
                ret.location,
            )
        self.lw.emit.trav("copy", arg, src, parallel="node")


def _rounds_as_written(value: ir.Value) -> bool:
    """Whether a result the caller takes in half storage can be written in it by the template
    computing it: one elementwise traversal (:data:`~.handlers.ELEMENTWISE_WRITERS`, or a
    gather on its own) or one storing GEMM (:data:`~.handlers.STORING_GEMMS`) of
    ``[rows, width]`` rows, read by nothing but the return. It rounds each element once, from
    the f32 it computed, as the copy after it would: the same values, without an f32 buffer
    written and read again (for a bf16 GEMM of 256 columns into 1024, that buffer and its copy
    cost a tenth of the call)."""
    made_by = producer(value)
    if made_by is None or rank(value) != 2 or len(list(value.uses)) != 1:
        return False
    if made_by.name in ELEMENTWISE_WRITERS or made_by.name in STORING_GEMMS:
        return True
    return gather_map(made_by) is not None


#: Ops that read a buffer's shape or view it, not its elements.
_SHAPE_OPS = (*VIEWS, "memref.dim")


def _check_stored_inputs(fn: func.FuncOp) -> None:
    """An argument stored in f16 or bf16 is read only by templates (which convert on load)."""
    for arg in fn.entry_block.arguments:
        t = arg.type
        if not isinstance(t, ir.MemRefType) or not isinstance(
            t.element_type, ir.F16Type | ir.BF16Type
        ):
            continue
        for op in users(arg, fn.operation):  # through its views (reshapes, slices)
            if op.name == "memref.copy" and len({element_type(v) for v in op.operands}) == 1:
                continue  # returned as it is, in the same storage
            if not op.name.startswith("hector_intra.") and op.name not in _SHAPE_OPS:
                raise PassFailure(
                    f"an argument stored as {t} is read by '{op.name}', which reads f32 only; "
                    f"give it in f32",
                    op.location,
                )


@register_pass(
    "convert-hector-inter-to-intra",
    "Lower hector_inter relational ops to hector_intra GEMM/traversal templates on memrefs",
    block_size=Option(
        int, 256, "threads per block recorded in each template's schedule", min=1, max=1024
    ),
    tile_n=Option(int, 8, "output columns per thread recorded in GEMM templates", min=1, max=1024),
)
def run(module_op: ir.Operation, block_size: int = 256, tile_n: int = 8) -> None:
    """Pass entry point: convert every function that holds hector_inter ops."""
    graph_type = inter.graph_type(module_op.context)
    for op in list(module_op.regions[0].blocks[0].operations):
        op = op.operation
        if op.name == "func.func" and len(op.regions[0].blocks):
            _FunctionRebuild(op, graph_type, block_size, tile_n).run()
