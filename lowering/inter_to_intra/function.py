"""One function being lowered to templates: its buffers, the reads of its values, its templates.

Per-op handlers (:mod:`~hector.lowering.inter_to_intra.handlers`) get a
:class:`FunctionLowering` and build through it:

* :class:`FunctionBuffers` maps each old value (a tensor of the old function) to the memref
  holding it in the new one: an output argument, a graph array, or a ``memref.alloc`` sized by
  a row count, freed at the end;
* :class:`FunctionLowering` says how a template reads a value: through the index array of a
  fused gather, with the row scale of a fused scale, by the graph's per-row type arrays;
* :class:`TemplateEmitter` creates the ``gemm_template`` and ``traversal_template`` ops with the
  pass's schedule.

Ops are created at the insertion point (the end of the new function's entry block), in the
location context of the op being lowered.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, linalg, memref

from ...dialects import Kind, RowMap, spec
from ...dialects import hector_inter as inter
from ...dialects import hector_intra as intra
from ...passes import verify
from ...passes.registry import PassFailure

# ---- values and types ---------------------------------------------------------------------------


def memref_of(t: ir.Type, element: ir.Type | None = None) -> ir.Type:
    """The memref type holding a ranked tensor's values, in ``element`` where given (other
    types are kept)."""
    if isinstance(t, ir.RankedTensorType):
        return ir.MemRefType.get(t.shape, element or t.element_type)
    return t


def element_type(value: ir.Value) -> ir.Type:
    """The element type of a tensor or memref value."""
    return ir.ShapedType(value.type).element_type


def rank(value: ir.Value) -> int:
    """The rank of a tensor or memref value."""
    return ir.ShapedType(value.type).rank


def width(value: ir.Value) -> int:
    """The last dimension of a tensor or memref value."""
    shape = ir.ShapedType(value.type)
    return shape.get_dim_size(shape.rank - 1)


def _dynamic_rows(t: ir.Type) -> bool:
    shaped = ir.ShapedType(t)
    return shaped.rank > 0 and shaped.is_dynamic_dim(0)


def producer(value: ir.Value) -> ir.Operation | None:
    """The op defining ``value`` (None for a block argument)."""
    if isinstance(value, ir.BlockArgument):
        return None
    return value.owner.operation


def gather_map(op: ir.Operation | None) -> RowMap | None:
    """The row map of a gather op (None for anything else)."""
    s = spec(op.name) if op is not None else None
    return s.rowmap if s is not None and s.rowmap is not None and not s.rowmap.reduce else None


# ---- buffers ------------------------------------------------------------------------------------


class FunctionBuffers:
    """The memrefs of the new function: ``buf`` maps each old value to the memref holding it;
    ``out_param`` maps a returned value to the output argument it is computed into."""

    def __init__(self) -> None:
        self.buf: dict[ir.Value, ir.Value] = {}  # old value → memref holding it
        self.alloc: list[tuple[ir.Value, ir.Location]] = []  # buffers to free at the end
        self.out_param: dict[ir.Value, ir.Value] = {}  # returned value → where it is computed
        self.filled: set[ir.Value] = set()
        self.c0: ir.Value | None = None

    def dim(self, value: ir.Value) -> ir.Value:
        """The row count of a memref."""
        return memref.dim(value, self.c0)

    def src(self, value: ir.Value) -> ir.Value:
        """The buffer holding ``value``."""
        return self.buf[value]

    def out(self, value: ir.Value, rows_from: ir.Value) -> ir.Value:
        """The buffer ``value`` is written to: an output argument or a fresh allocation with
        as many rows as ``rows_from`` when its rows are dynamic."""
        if value in self.out_param:
            buffer = self.out_param.pop(value)
        else:
            mtype = memref_of(value.type)
            rows = [self.dim(rows_from)] if _dynamic_rows(mtype) else []
            buffer = self._alloc(mtype, rows)
        self.buf[value] = buffer
        return buffer

    def temp(self, mtype: ir.Type, rows: ir.Value) -> ir.Value:
        """A scratch buffer of ``mtype`` with ``rows`` dynamic rows."""
        return self._alloc(mtype, [rows])

    def _alloc(self, mtype: ir.Type, rows: list[ir.Value]) -> ir.Value:
        buffer = memref.alloc(mtype, rows, [])
        self.alloc.append((buffer, ir.Location.current))
        return buffer

    def free(self) -> None:
        """Free every allocated buffer, the last allocated first."""
        for buffer, loc in reversed(self.alloc):
            memref.dealloc(buffer, loc=loc)

    def fill(self, buffer: ir.Value, value: float) -> None:
        """Fill ``buffer`` with the f32 ``value``."""
        linalg.fill(arith.constant(ir.F32Type.get(), value), outs=[buffer])

    def zero(self, buffer: ir.Value) -> None:
        """Zero-fill ``buffer`` (once) before a template accumulates into it."""
        if buffer in self.filled:
            return
        self.fill(buffer, 0.0)
        self.filled.add(buffer)

    def collapse(self, value: ir.Value, per_type: bool = False) -> ir.Value:
        """View a rank-3 weight ``[R, K, N]`` as rows ``[R*K, N]``, or with ``per_type`` as one
        row per type ``[R, K*N]`` (no copy); other ranks are returned as they are."""
        t = ir.MemRefType(value.type)
        if t.rank != 3:
            return value
        r, k, n = t.shape
        shape, groups = ([r, k * n], [[0], [1, 2]]) if per_type else ([r * k, n], [[0, 1], [2]])
        return memref.collapse_shape(ir.MemRefType.get(shape, t.element_type), value, groups)


# ---- templates ----------------------------------------------------------------------------------


class TemplateEmitter:
    """Creates the templates with the pass's schedule (``block_size``, ``tile_n``)."""

    def __init__(self, block_size: int, tile_n: int) -> None:
        self.block_size = block_size
        self.tile_n = tile_n

    def gemm(
        self,
        a: ir.Value,
        weight: ir.Value,
        out: ir.Value,
        epilogue: str,
        variant: str = "xw",
        **optional: ir.Value | None,
    ) -> None:
        """One ``gemm_template``; ``optional`` holds the index and scale operands
        (``gather_index``, ``weight_index``, ``scatter_index``, ``row_scale``) and
        ``slice_rows``."""
        slice_rows = optional.pop("slice_rows", None)
        extra = None
        if slice_rows is not None:
            extra = {"slice_rows": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), slice_rows)}
        intra.OPS.gemm_template(
            a=a,
            weight=weight,
            out=out,
            variant=variant,
            epilogue=epilogue,
            tile_n=self.tile_n,
            block_size=self.block_size,
            extra=extra,
            **optional,
        )

    def trav(
        self,
        fn: str,
        out: ir.Value,
        x: ir.Value,
        *,
        y: ir.Value | None = None,
        gather: ir.Value | None = None,
        y_index: ir.Value | None = None,
        scatter: ir.Value | None = None,
        reduce: str = "none",
        parallel: str = "edge",
        slope: float = 0.0,
    ) -> None:
        """One ``traversal_template``."""
        intra.OPS.traversal_template(
            gather_index=gather,
            scatter_index=scatter,
            y_index=y_index,
            x=x,
            y=y,
            out=out,
            parallel=parallel,
            fn=fn,
            reduce=reduce,
            slope=slope,
            block_size=self.block_size,
        )


# ---- reads --------------------------------------------------------------------------------------


class FunctionLowering:
    """What the per-op handlers of one function build with: its ``buffers``, the templates
    they ``emit``, and how a template reads a value (through the ``graph``'s arrays and the
    ``fused`` producers, by the ``kinds`` of rows ``hector-verify`` found)."""

    def __init__(self, fn: ir.Operation, block_size: int, tile_n: int) -> None:
        self.buffers = FunctionBuffers()
        self.emit = TemplateEmitter(block_size, tile_n)
        self.graph: dict[str, ir.Value] = {}  # graph array name → block argument
        self.fused: set[ir.Operation] = set()
        self.kinds = verify.verify_function(fn)  # node/edge kind of every old value

    def graph_array(self, name: str, op: ir.Operation) -> ir.Value:
        """The graph array ``name``; ``op`` needs it."""
        if name not in self.graph:
            raise PassFailure(f"'{op.name}' needs a !hector_inter.graph argument", op.location)
        return self.graph[name]

    def count(self, array: str, op: ir.Operation) -> ir.Value:
        """The length of a graph array (``src`` → edges, ``ntype`` → nodes)."""
        return self.buffers.dim(self.graph_array(array, op))

    def fused_producer(self, value: ir.Value, name: str) -> ir.Operation | None:
        """``value``'s producer when it is a fused ``hector_inter.<name>``."""
        made_by = producer(value)
        if made_by is not None and made_by in self.fused and made_by.name == name:
            return made_by
        return None

    def read(self, value: ir.Value, op: ir.Operation) -> tuple[ir.Value, ir.Value | None]:
        """How a template reads ``value``: its buffer, and the index array when it is a fused
        gather (the gathered copy is never built)."""
        made_by = producer(value)
        rowmap = gather_map(made_by)
        if made_by is not None and made_by in self.fused and rowmap is not None:
            index = self.graph_array(rowmap.array, op)
            return self.buffers.src(inter.view(made_by).operand("x")), index
        return self.buffers.src(value), None

    def read_rows(
        self, value: ir.Value, op: ir.Operation
    ) -> tuple[ir.Value, ir.Value | None, ir.Value | None]:
        """How a GEMM reads its rows ``value``: :meth:`read`, plus the ``row_scale`` of a
        scale fused into it (``into_gemm``: the rows it scales are read instead)."""
        scale = self.fused_producer(value, "hector_inter.scale")
        if scale is None:
            return (*self.read(value, op), None)
        sv = inter.view(scale)
        return (*self.read(sv.operand("x"), op), self.buffers.src(sv.operand("s")))

    def weight_index(self, op: ir.Operation, rows: ir.Value) -> ir.Value | None:
        """The per-row weight slice array of a typed linear (or its gradient ops) on ``rows``."""
        slice_ = inter.view(op).attr("slice")
        if slice_ == "ntype":
            return self.graph_array("ntype", op)
        if slice_ == "none":
            return None
        compact = self.kinds.get(rows) == verify.COMPACT or (
            self.fused_producer(rows, "hector_inter.compact_gather_src") is not None
        )
        dst_pairs = self.kinds.get(rows) == Kind.DST_COMPACT or (
            self.fused_producer(rows, "hector_inter.dst_compact_gather_dst") is not None
        )
        if dst_pairs:
            return self.graph_array("dst_compact_etype", op)
        return self.graph_array("compact_etype" if compact else "etype", op)

    def parallel(self, value: ir.Value) -> str:
        """Whether rows of ``value`` are edges (or compact rows) or nodes."""
        rows = (verify.EDGE, verify.COMPACT, Kind.DST_COMPACT)
        return "edge" if self.kinds.get(value) in rows else "node"

    def type_array(self, value: ir.Value, op: ir.Operation) -> ir.Value:
        """The per-row type array of ``value``'s rows: edge types or node types."""
        kind = self.kinds.get(value)
        if kind == verify.EDGE:
            return self.graph_array("etype", op)
        if kind == verify.COMPACT:
            return self.graph_array("compact_etype", op)
        if kind == Kind.DST_COMPACT:
            return self.graph_array("dst_compact_etype", op)
        return self.graph_array("ntype", op)
