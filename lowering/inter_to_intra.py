"""``convert-hector-inter-to-intra``: relational ops to GEMM and traversal templates.

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
block arguments), the old one's values are mapped to the new buffers, and the old function is
erased. Every op created carries the location of the ``hector_inter`` op it lowers.

Op mapping (the first fusion, the one every program needs), one handler per op name
(``_HANDLERS``):

* ``typed_linear(gather_src|gather_dst(x), W)`` → one ``gemm_template`` whose left rows are
  gathered by ``src``/``dst`` (the gathered copy is never built when the gather has no other use),
  weight picked by ``etype`` / ``ntype`` / shared;
* ``sum_to_dst(scale(m, s))`` → one edge-parallel ``traversal_template`` (``fn = scale``,
  ``reduce = sum`` by ``dst``) when the scale has no other use; ``sum_to_dst(m)`` → ``fn = copy``;
* gathers and sums in general are lowered from their spec's ``RowMap`` (the graph array they
  read rows through, and for sums the array whose length is the result's row count);
* ``degree_norm`` reads the graph's cached ``norm_dst_etype`` / ``norm_dst`` array (no op);
* ``gather_*`` alone, ``scale``, ``add`` (or bias add), ``unary`` → row-parallel traversals.
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir
from mlir.dialects import arith, func, linalg, memref

from ..dialects import Kind, RowMap, spec
from ..dialects import hector_inter as inter
from ..dialects import hector_intra as intra
from ..dialects.builders import OpHandlers
from ..dialects.hector_intra import GRAPH_LAYOUT
from ..passes import verify
from ..passes.fuse import MARK, ROW_SCALED, SCATTER_LINEARS, SUMS, reads_gathered, scatter_gemm
from ..passes.registry import Option, PassFailure, register_pass
from ..passes.saved_buffers import VIEWS, users

# Function attributes the rebuilt function gets from ``func.FuncOp`` itself (or drops: the
# argument and result attributes describe the old signature).
_INHERENT = ("sym_name", "function_type", "arg_attrs", "res_attrs", "sym_visibility")
_DYN = ir.ShapedType.get_dynamic_size()


# ---- types ------------------------------------------------------------------------------------


def _memref(t: ir.Type, element: ir.Type | None = None) -> ir.Type:
    """The memref type holding a ranked tensor's values, in ``element`` where given (other
    types are kept)."""
    if isinstance(t, ir.RankedTensorType):
        return ir.MemRefType.get(t.shape, element or t.element_type)
    return t


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


def _element(value: ir.Value) -> ir.Type:
    """The element type of a tensor or memref value."""
    return ir.ShapedType(value.type).element_type


def _dynamic_rows(t: ir.Type) -> bool:
    shaped = ir.ShapedType(t)
    return shaped.rank > 0 and shaped.is_dynamic_dim(0)


def _rank(value: ir.Value) -> int:
    return ir.ShapedType(value.type).rank


def _width(value: ir.Value) -> int:
    shape = ir.ShapedType(value.type)
    return shape.get_dim_size(shape.rank - 1)


def _producer(value: ir.Value) -> ir.Operation | None:
    """The op defining ``value`` (None for a block argument)."""
    if isinstance(value, ir.BlockArgument):
        return None
    return value.owner.operation


def _gather_map(op: ir.Operation | None) -> RowMap | None:
    """The row map of a gather op (None for anything else)."""
    s = spec(op.name) if op is not None else None
    return s.rowmap if s is not None and s.rowmap is not None and not s.rowmap.reduce else None


def _users(value: ir.Value) -> list[ir.Operation]:
    return [use.owner.operation for use in value.uses]


# ---- the lowering of one function -------------------------------------------------------------


class _FuncLowering:
    """Rebuilds one function on memrefs; handlers call its helpers to create ops.

    ``buf`` maps each old value (a tensor of the old function) to the memref holding it in the
    new one; ops are created at the end of the new function's entry block, in the location
    context of the op being lowered.
    """

    def __init__(self, fn: ir.Operation, graph_type: ir.Type, block_size: int, tile_n: int) -> None:
        self.func = fn
        self.graph_type = graph_type
        self.block_size = block_size
        self.tile_n = tile_n
        self.buf: dict[ir.Value, ir.Value] = {}  # old value → memref holding it
        self.alloc: list[tuple[ir.Value, ir.Location]] = []  # buffers to free at the end
        self.graph: dict[str, ir.Value] = {}  # graph array name → block argument
        self.outputs: list[tuple[ir.Value, ir.Value]] = []  # (returned value, output argument)
        self.out_param: dict[ir.Value, ir.Value] = {}  # returned value → where it is computed
        self.fused: set[ir.Operation] = set()
        self.filled: set[ir.Value] = set()
        self.kinds = verify.verify_function(fn)  # node/edge kind of every old value
        self.c0: ir.Value | None = None

    # -- helpers ---------------------------------------------------------------------------
    def dim(self, value: ir.Value) -> ir.Value:
        """The row count of a memref."""
        return memref.dim(value, self.c0)

    def graph_array(self, name: str, op: ir.Operation) -> ir.Value:
        """The graph array ``name``; ``op`` needs it."""
        if name not in self.graph:
            raise PassFailure(f"'{op.name}' needs a !hector_inter.graph argument", op.location)
        return self.graph[name]

    def count(self, array: str, op: ir.Operation) -> ir.Value:
        """The length of a graph array (``src`` → edges, ``ntype`` → nodes)."""
        return self.dim(self.graph_array(array, op))

    def out(self, value: ir.Value, rows_from: ir.Value) -> ir.Value:
        """The buffer ``value`` is written to: an output argument or a fresh allocation with
        as many rows as ``rows_from`` when its rows are dynamic."""
        if value in self.out_param:
            buffer = self.out_param.pop(value)
        else:
            mtype = _memref(value.type)
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

    def fill(self, buffer: ir.Value, value: float) -> None:
        """Fill ``buffer`` with the f32 ``value``."""
        linalg.fill(arith.constant(ir.F32Type.get(), value), outs=[buffer])

    def zero(self, buffer: ir.Value) -> None:
        """Zero-fill ``buffer`` (once) before a template accumulates into it."""
        if buffer in self.filled:
            return
        self.fill(buffer, 0.0)
        self.filled.add(buffer)

    def src(self, value: ir.Value) -> ir.Value:
        """The buffer holding ``value``."""
        return self.buf[value]

    def is_fused(self, value: ir.Value) -> bool:
        """Whether ``value``'s producer is folded into its users (never built on its own)."""
        return _producer(value) in self.fused

    def fused_producer(self, value: ir.Value, name: str) -> ir.Operation | None:
        """``value``'s producer when it is a fused ``hector_inter.<name>``."""
        producer = _producer(value)
        if producer is not None and producer in self.fused and producer.name == name:
            return producer
        return None

    def read(self, value: ir.Value, op: ir.Operation) -> tuple[ir.Value, ir.Value | None]:
        """How a template reads ``value``: its buffer, and the index array when it is a fused
        gather (the gathered copy is never built)."""
        producer = _producer(value)
        rowmap = _gather_map(producer)
        if producer is not None and producer in self.fused and rowmap is not None:
            index = self.graph_array(rowmap.array, op)
            return self.src(inter.view(producer).operand("x")), index
        return self.src(value), None

    def read_rows(
        self, value: ir.Value, op: ir.Operation
    ) -> tuple[ir.Value, ir.Value | None, ir.Value | None]:
        """How a GEMM reads its rows ``value``: :meth:`read`, plus the ``row_scale`` of a
        scale fused into it (``into_gemm``: the rows it scales are read instead)."""
        scale = self.fused_producer(value, "hector_inter.scale")
        if scale is None:
            return (*self.read(value, op), None)
        sv = inter.view(scale)
        return (*self.read(sv.operand("x"), op), self.src(sv.operand("s")))

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

    def collapse(self, value: ir.Value, per_type: bool = False) -> ir.Value:
        """View a rank-3 weight ``[R, K, N]`` as rows ``[R*K, N]``, or with ``per_type`` as one
        row per type ``[R, K*N]`` (no copy); other ranks are returned as they are."""
        t = ir.MemRefType(value.type)
        if t.rank != 3:
            return value
        r, k, n = t.shape
        shape, groups = ([r, k * n], [[0], [1, 2]]) if per_type else ([r * k, n], [[0, 1], [2]])
        return memref.collapse_shape(ir.MemRefType.get(shape, t.element_type), value, groups)

    def gemm(
        self,
        a: ir.Value,
        weight: ir.Value,
        out: ir.Value,
        epilogue: str,
        variant: str = "xw",
        **optional: ir.Value | None,
    ) -> None:
        """One ``gemm_template`` with this pass's schedule; ``optional`` holds the index and
        scale operands (``gather_index``, ``weight_index``, ``scatter_index``, ``row_scale``)
        and ``slice_rows``."""
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
        """One ``traversal_template`` with this pass's schedule."""
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

    # -- the function ----------------------------------------------------------------------
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
                inputs.append(_memref(arg.type, _storage_type(old, arg.arg_number)))
                locs.append(arg.location)
            else:
                raise PassFailure(
                    f"argument of type {arg.type} is not supported; expected a ranked "
                    "tensor or !hector_inter.graph",
                    old.location,
                )
        inputs += [_memref(v.type, _storage_type(old, i, "res")) for i, v in enumerate(results)]
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
                self.graph = {a.name: next(args) for a in GRAPH_LAYOUT}
            else:
                self.buf[arg] = next(args)
        self.outputs = [(value, next(args)) for value in results]
        return new

    def _body(self, ops: list[ir.Operation], ret: ir.Operation) -> None:
        """Lower the ops of the old body into the new entry block, then copy what is returned
        but not computed here, free the buffers and return."""
        copies: list[tuple[ir.Value, ir.Value]] = []
        for value, arg in self.outputs:
            producer = _producer(value)
            if (
                value in self.out_param
                or producer is None
                or producer.name == "hector_inter.degree_norm"
                or _element(arg) != _element(value)
            ):
                # Returned twice, not computed here, or stored as a half: copied at the end.
                copies.append((arg, value))
            else:
                self.out_param[value] = arg
        with self.func.location:
            self.c0 = arith.constant(ir.IndexType.get(), 0)
        self._plan_fusion(ops)
        for op in ops[:-1]:
            if op not in self.fused:
                with op.location:
                    _lower(self, op)
        with ret.location:
            for arg, value in copies:
                self._copy_out(arg, self.src(value), ret)
        for buffer, loc in reversed(self.alloc):
            memref.dealloc(buffer, loc=loc)
        func.ReturnOp([], loc=ret.location)

    def _copy_out(self, arg: ir.Value, src: ir.Value, ret: ir.Operation) -> None:
        """Copy a result into its output argument: bytes where the element types agree, else
        row by row through a traversal that converts each element (a stored half input
        returned as it is, extended; an f32 value returned in half storage, rounded)."""
        if _element(arg) == _element(src):
            memref.copy(src, arg)
            return
        if _rank(src) != 2:
            raise PassFailure(
                f"a result of type {src.type} converted to {arg.type}: only [rows, width] "
                "results change element type",
                ret.location,
            )
        self.trav("copy", arg, src, parallel="node")

    def _plan_fusion(self, ops: list[ir.Operation]) -> None:
        """Fuse what ``hector-fuse`` marked (``hector.fuse``), after checking the marks still
        hold; degree norms always read the graph's cached arrays."""
        for op in ops:
            mark = ir.StringAttr(op.attributes[MARK]).value if MARK in op.attributes else None
            if mark in _MARKS:
                _MARKS[mark](self, op)
            elif mark is None and op.name == "hector_inter.expand_compact":
                # Reading compact rows per edge through edge_compact is part of compact
                # materialization itself, not a fusion decision: without it C would build the
                # E-row copies it exists to avoid.
                out = op.results[0]
                uses = [(u.owner, u.operand_number) for u in out.uses]
                if uses and out not in self.out_param and all(reads_gathered(*u) for u in uses):
                    self.fused.add(op)
            if op.name == "hector_inter.degree_norm":
                self.fused.add(op)  # a graph array, nothing to compute
                by = inter.view(op).attr("by")
                self.buf[op.results[0]] = self.graph_array(f"norm_{by}", op)


# ---- fusion marks -------------------------------------------------------------------------------
# One check per ``hector.fuse`` value: the mark must still hold, then its op is folded into a
# user and never lowered on its own.


def _fuse_into_sum(lw: _FuncLowering, op: ir.Operation) -> None:
    """``into_sum`` (on a scale): the sum's traversal (or scatter-GEMM) computes it."""
    out = op.results[0]
    users = _users(out)
    if len(users) != 1 or users[0].name not in SUMS or out in lw.out_param:
        raise PassFailure(
            'hector.fuse = "into_sum" on a scale that is not summed exactly once', op.location
        )
    lw.fused.add(op)


def _fuse_scatter(lw: _FuncLowering, op: ir.Operation) -> None:
    """``scatter`` (on a linear): its sum's scatter-GEMM computes it."""
    if op.name not in SCATTER_LINEARS:
        return
    users = _users(op.results[0])
    scaled = bool(users) and users[0].name == "hector_inter.scale"
    if (
        not scatter_gemm(op)
        or (scaled and MARK not in users[0].attributes)
        or op.results[0] in lw.out_param
    ):
        raise PassFailure(
            f'hector.fuse = "scatter" on a {op.name} that is not summed (or scaled once and '
            "summed)",
            op.location,
        )
    lw.fused.add(op)


def _fuse_into_gemm(lw: _FuncLowering, op: ir.Operation) -> None:
    """``into_gemm`` (on a scale): every GEMM reading it scales its rows' products."""
    out = op.results[0]
    uses = [(u.owner, u.operand_number) for u in out.uses]
    if out in lw.out_param or not uses or any(u.name not in ROW_SCALED for u, _ in uses):
        raise PassFailure(
            'hector.fuse = "into_gemm" on a scale that a non-GEMM op reads', op.location
        )
    lw.fused.add(op)


def _fuse_index(lw: _FuncLowering, op: ir.Operation) -> None:
    """``index`` (on a gather): every user reads the gathered rows through the index array."""
    if _gather_map(op) is None:
        return
    out = op.results[0]
    uses = [(u.owner, u.operand_number) for u in out.uses]
    if out in lw.out_param or not all(reads_gathered(*u) for u in uses):
        raise PassFailure(
            'hector.fuse = "index" on a gather that a user cannot read through an index',
            op.location,
        )
    lw.fused.add(op)


_MARKS: dict[str, Callable[[_FuncLowering, ir.Operation], None]] = {
    "into_sum": _fuse_into_sum,
    "into_gemm": _fuse_into_gemm,
    "scatter": _fuse_scatter,
    "index": _fuse_index,
}


# ---- per-op handlers ----------------------------------------------------------------------------

Handler = Callable[[_FuncLowering, ir.Operation], None]
_HANDLERS: OpHandlers[Handler] = OpHandlers("lowering", prefix="hector_inter.")
_lowers = _HANDLERS.register


def _lower(lw: _FuncLowering, op: ir.Operation) -> None:
    """Lower one op with its handler, at the end of the new function."""
    handler = _HANDLERS.get(op.name)
    if handler is not None:
        handler(lw, op)
    elif op.name.startswith("hector_inter."):
        raise PassFailure(f"no lowering for '{op.name}' yet", op.location)
    else:
        raise PassFailure(
            f"'{op.name}' cannot be lowered to hector_intra; only hector_inter ops may appear "
            "in a function with relational ops",
            op.location,
        )


def _linear(lw: _FuncLowering, op: ir.Operation, rows_name: str, variant: str) -> None:
    """``rows @ W[slice]`` (``xw``) or ``rows @ W[slice]^T`` (``xwt``) as one GEMM reading
    gathered rows in place."""
    v = inter.view(op)
    rows = v.operand(rows_name)
    a, gather, row_scale = lw.read_rows(rows, op)
    windex = lw.weight_index(op, rows)
    w = lw.src(v.operand("weight"))
    out = lw.out(op.results[0], gather if gather is not None else a)
    lw.gemm(
        a, w, out, "store", variant, gather_index=gather, weight_index=windex, row_scale=row_scale
    )


@_lowers("typed_linear")
def _typed_linear(lw: _FuncLowering, op: ir.Operation) -> None:
    """The forward product ``x @ W[slice]``."""
    _linear(lw, op, "x", "xw")


@_lowers("typed_linear_transposed")
def _typed_linear_transposed(lw: _FuncLowering, op: ir.Operation) -> None:
    """The input gradient ``dy @ W[slice]^T``."""
    _linear(lw, op, "dy", "xwt")


@_lowers("typed_linear_weight_grad")
def _typed_linear_weight_grad(lw: _FuncLowering, op: ir.Operation) -> None:
    """``Σ rows^T ⊗ dy`` into each weight slice: one accumulating ``xty`` GEMM, reading
    gathered (and scaled) gradient rows in place."""
    v = inter.view(op)
    rows = v.operand("x")
    a, gather = lw.read(rows, op)
    windex = lw.weight_index(op, rows)
    g, g_rows, row_scale = lw.read_rows(v.operand("dy"), op)
    out = lw.out(op.results[0], a)
    lw.zero(out)
    lw.gemm(
        a,
        g,
        out,
        "add",
        "xty",
        gather_index=gather,
        weight_index=windex,
        scatter_index=g_rows,
        row_scale=row_scale,
    )


def _gather(lw: _FuncLowering, op: ir.Operation, array: str) -> None:
    """A gather on its own: a row copy through the graph array ``array``."""
    index = lw.graph_array(array, op)
    x = lw.src(inter.view(op).operand("x"))
    lw.trav("copy", lw.out(op.results[0], index), x, gather=index)


def _sum(lw: _FuncLowering, op: ir.Operation, array: str, rows: str) -> None:
    """A sum through the graph array ``array`` onto zeroed rows (as many as the graph array
    ``rows`` is long), with the scale (and the typed linear before it) it was fused with."""
    scatter = lw.graph_array(array, op)
    m = inter.view(op).operand("x")
    out = lw.out(op.results[0], lw.graph_array(rows, op))
    lw.zero(out)
    scale = lw.fused_producer(m, "hector_inter.scale")
    if scale is None:
        linear = _fused_linear(lw, m)
        if linear is not None:
            _scatter_gemm(lw, linear, None, scatter, out)
            return
        x, gather = lw.read(m, op)
        lw.trav("copy", out, x, gather=gather, scatter=scatter, reduce="sum")
        return
    sv = inter.view(scale)
    linear = _fused_linear(lw, sv.operand("x"))
    if linear is not None:
        _scatter_gemm(lw, linear, scale, scatter, out)
        return
    x, gather = lw.read(sv.operand("x"), op)
    y, y_index = lw.read(sv.operand("s"), op)
    lw.trav("scale", out, x, y=y, gather=gather, y_index=y_index, scatter=scatter, reduce="sum")


def _index_handler(name: str, rowmap: RowMap) -> Handler:
    """The handler of the index op ``name``, from its spec's row map."""
    array, rows = rowmap.array, rowmap.rows
    if not rowmap.reduce:
        return lambda lw, op: _gather(lw, op, array)
    if rows is None:
        raise ValueError(f"the row map of sum {name} must name the array giving its row count")
    return lambda lw, op: _sum(lw, op, array, rows)


# Gathers and sums are lowered from their spec's row map: one registration per index op.
for _op in inter.DIALECT.ops:
    if _op.rowmap is not None:
        _lowers(_op.name)(_index_handler(_op.name, _op.rowmap))


def _fused_linear(lw: _FuncLowering, value: ir.Value) -> ir.Operation | None:
    """``value``'s producer when it is a linear fused into a scatter-GEMM."""
    producer = _producer(value)
    if producer is not None and producer in lw.fused and producer.name in SCATTER_LINEARS:
        return producer
    return None


def _scatter_gemm(
    lw: _FuncLowering,
    linear: ir.Operation,
    scale: ir.Operation | None,
    scatter: ir.Value,
    out: ir.Value,
) -> None:
    """``sum((scale(linear(rows, W), s))`` as one GEMM: gathered rows times the typed weight
    (transposed for ``typed_linear_transposed``), scaled per row and accumulated into the
    scattered output rows."""
    rows_name, variant = SCATTER_LINEARS[linear.name]
    lv = inter.view(linear)
    rows = lv.operand(rows_name)
    a, gather, row_scale = lw.read_rows(rows, linear)
    if scale is not None:
        row_scale = lw.src(inter.view(scale).operand("s"))
    w = lw.src(lv.operand("weight"))
    windex = lw.weight_index(linear, rows)
    lw.gemm(
        a,
        w,
        out,
        "add",
        variant,
        gather_index=gather,
        weight_index=windex,
        scatter_index=scatter,
        row_scale=row_scale,
    )


def _row_output(
    lw: _FuncLowering, op: ir.Operation, lhs: ir.Value
) -> tuple[ir.Value, ir.Value | None, ir.Value, str]:
    """A row-parallel op's left input (buffer and gather index), its output buffer (one row
    per row read) and whether its rows are edges or nodes."""
    x, gather = lw.read(lhs, op)
    out = lw.out(op.results[0], gather if gather is not None else x)
    return x, gather, out, lw.parallel(lhs)


def _two_rows(lw: _FuncLowering, op: ir.Operation, fn: str, lhs: ir.Value, rhs: ir.Value) -> None:
    """``fn`` of two row sets, both read through their gathers."""
    x, gather, out, parallel = _row_output(lw, op, lhs)
    y, y_index = lw.read(rhs, op)
    lw.trav(fn, out, x, y=y, gather=gather, y_index=y_index, parallel=parallel)


@_lowers("scale")
def _scale(lw: _FuncLowering, op: ir.Operation) -> None:
    """Rows times a per-row (or per-head) factor."""
    v = inter.view(op)
    _two_rows(lw, op, "scale", v.operand("x"), v.operand("s"))


@_lowers("dot")
def _dot(lw: _FuncLowering, op: ir.Operation) -> None:
    """Per-head inner products of two row sets."""
    v = inter.view(op)
    _two_rows(lw, op, "dot", v.operand("x"), v.operand("y"))


@_lowers("add")
def _add(lw: _FuncLowering, op: ir.Operation) -> None:
    """Rows plus rows, plus a bias vector, or plus a per-type bias row (with the graph)."""
    v = inter.view(op)
    lhs, rhs = v.operand("lhs"), v.operand("rhs")
    x, gather, out, parallel = _row_output(lw, op, lhs)
    if _rank(rhs) == 1:
        lw.trav("add_bias", out, x, y=lw.src(rhs), gather=gather, parallel=parallel)
    elif v.has("graph"):  # typed bias
        y_index = lw.type_array(lhs, op)
        lw.trav("add", out, x, y=lw.src(rhs), gather=gather, y_index=y_index, parallel=parallel)
    else:
        y, y_index = lw.read(rhs, op)
        lw.trav("add", out, x, y=y, gather=gather, y_index=y_index, parallel=parallel)


@_lowers("unary")
def _unary(lw: _FuncLowering, op: ir.Operation) -> None:
    """An elementwise function of rows."""
    v = inter.view(op)
    x, gather, out, parallel = _row_output(lw, op, v.operand("x"))
    lw.trav(v.attr("fn"), out, x, gather=gather, slope=v.attr("slope"), parallel=parallel)


@_lowers("unary_grad")
def _unary_grad(lw: _FuncLowering, op: ir.Operation) -> None:
    """``dy * f'(ref)``; ``copy`` and ``neg`` need no reference."""
    v = inter.view(op)
    x, gather, out, parallel = _row_output(lw, op, v.operand("dy"))
    y, y_index = lw.read(v.operand("ref"), op)
    base = v.attr("fn")
    if base in ("copy", "neg"):
        lw.trav(base, out, x, gather=gather, parallel=parallel)
        return
    lw.trav(
        f"{base}_grad",
        out,
        x,
        y=y,
        gather=gather,
        y_index=y_index,
        parallel=parallel,
        slope=v.attr("slope"),
    )


@_lowers("sum_rows")
def _sum_rows(lw: _FuncLowering, op: ir.Operation) -> None:
    """All rows summed into one (or one per type, through the rows' type array)."""
    v = inter.view(op)
    rows = v.operand("x")
    x, gather = lw.read(rows, op)
    out = lw.out(op.results[0], x)
    lw.zero(out)
    scatter = lw.type_array(rows, op) if v.attr("by") == "type" else None
    lw.trav(
        "copy",
        out,
        x,
        gather=gather,
        scatter=scatter,
        reduce="sum",
        parallel=lw.parallel(rows),
    )


@_lowers("etype_src_weight", "etype_src_weight_grad")
def _etype_src_weight(lw: _FuncLowering, op: ir.Operation) -> None:
    """Per-relation weights picked from (or summed onto) source node types: one row copy
    per type through the graph's ``etype_src_ntype`` array."""
    grad = op.name.endswith("_grad")
    w = lw.src(inter.view(op).operand("dw" if grad else "w"))
    out = lw.out(op.results[0], w)
    index = lw.graph_array("etype_src_ntype", op)
    x, o = lw.collapse(w, per_type=True), lw.collapse(out, per_type=True)
    if grad:
        lw.zero(out)
        lw.trav("copy", o, x, scatter=index, reduce="sum", parallel="node")
    else:
        lw.trav("copy", o, x, gather=index, parallel="node")


@_lowers("weight_product")
def _weight_product(lw: _FuncLowering, op: ir.Operation) -> None:
    """``W[r] @ q`` and its gradients as one GEMM over the weight's rows ``[R*K, N]``; the
    per-slice form (``b`` or the ``xty`` result of rank 3) picks slice ``i / K`` for row
    ``i`` (the template's ``slice_rows``)."""
    v = inter.view(op)
    variant = v.attr("variant")
    a_in, b_in = v.operand("a"), v.operand("b")
    a, b = lw.src(a_in), lw.src(b_in)
    out = lw.out(op.results[0], a)
    per_slice = _rank(op.results[0]) == 3 if variant == "xty" else _rank(b_in) == 3
    slice_rows = None
    if per_slice:
        a_shape = ir.ShapedType(a_in.type).shape
        slice_rows = a_shape[1] if len(a_shape) == 3 else 1
    a = lw.collapse(a)
    if variant == "xty":
        lw.zero(out)
        b = lw.collapse(b)
        o, epilogue = out, "add"
    else:
        # per slice, the weight keeps its slices ([R, K, N]); otherwise b is a matrix
        o, epilogue = lw.collapse(out), "store"
    lw.gemm(a, b, o, epilogue, variant, slice_rows=slice_rows)


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
            if op.name == "memref.copy" and len({_element(v) for v in op.operands}) == 1:
                continue  # returned as it is, in the same storage
            if not op.name.startswith("hector_intra.") and op.name not in _SHAPE_OPS:
                raise PassFailure(
                    f"an argument stored as {t} is read by '{op.name}', which reads f32 only; "
                    f"give it in f32",
                    op.location,
                )


def _group_memref(width: int) -> ir.MemRefType:
    return ir.MemRefType.get([_DYN, width], ir.F32Type.get())


def _edge_groups(lw: _FuncLowering, op: ir.Operation, by: str) -> tuple[ir.Value, ir.Value]:
    """Each edge's group (a softmax's, a maximum's) and the group count: its destination
    (``by = "dst"``), or its unique (destination, edge type) pair (``"dst_etype"``, the graph's
    ``dst_compact``)."""
    if by == "dst_etype":
        return lw.graph_array("edge_dst_compact", op), lw.count("dst_compact_dst", op)
    return lw.graph_array("dst", op), lw.count("ntype", op)


@_lowers("edge_softmax")
def _edge_softmax(lw: _FuncLowering, op: ir.Operation) -> None:
    """Softmax over each group's edges (a destination, or a (destination, edge type) pair):
    max per group, exp(x - max), sum per group, divide."""
    res = op.results[0]
    v = inter.view(op)
    x = lw.src(v.operand("x"))
    heads = _width(res)
    dst, groups = _edge_groups(lw, op, v.attr("by"))
    nmax = lw.temp(_group_memref(heads), groups)
    lw.fill(nmax, float("-inf"))
    lw.trav("copy", nmax, x, scatter=dst, reduce="max")
    ex = lw.temp(_memref(res.type), lw.count("src", op))
    lw.trav("exp_sub", ex, x, y=nmax, y_index=dst)
    nsum = lw.temp(_group_memref(heads), groups)
    lw.fill(nsum, 0.0)
    lw.trav("copy", nsum, ex, scatter=dst, reduce="sum")
    out = lw.out(res, dst)
    lw.trav("div", out, ex, y=nsum, y_index=dst)


@_lowers("edge_softmax_grad")
def _edge_softmax_grad(lw: _FuncLowering, op: ir.Operation) -> None:
    """``y * (dy - Σ_dst dy*y)``: one reducing traversal, then two row traversals."""
    res = op.results[0]
    v = inter.view(op)
    y, dy = lw.src(v.operand("y")), lw.src(v.operand("dy"))
    heads = _width(res)
    dst, groups = _edge_groups(lw, op, v.attr("by"))
    nsum = lw.temp(_group_memref(heads), groups)
    lw.fill(nsum, 0.0)
    lw.trav("mul", nsum, dy, y=y, scatter=dst, reduce="sum")
    diff = lw.temp(_memref(res.type), lw.count("src", op))
    lw.trav("sub", diff, dy, y=nsum, y_index=dst)
    out = lw.out(res, dst)
    lw.trav("mul", out, diff, y=y)


@_lowers("edge_max")
def _edge_max(lw: _FuncLowering, op: ir.Operation) -> None:
    """Each group's maximum (a reducing traversal into ``-inf``), read back onto its edges."""
    res = op.results[0]
    v = inter.view(op)
    x = lw.src(v.operand("x"))
    group, groups = _edge_groups(lw, op, v.attr("by"))
    top = lw.temp(_group_memref(_width(res)), groups)
    lw.fill(top, float("-inf"))
    lw.trav("copy", top, x, scatter=group, reduce="max")
    lw.trav("copy", lw.out(res, group), top, gather=group)


@_lowers("edge_max_grad")
def _edge_max_grad(lw: _FuncLowering, op: ir.Operation) -> None:
    """``[x = y] · Σ_group dy / Σ_group [x = y]``: which edges hold the maximum, per group the
    summed gradient and the count of holders, their quotient read back onto the holders."""
    res = op.results[0]
    v = inter.view(op)
    x, y, dy = (lw.src(v.operand(n)) for n in ("x", "y", "dy"))
    group, groups = _edge_groups(lw, op, v.attr("by"))
    width = _width(res)
    holds = lw.temp(_memref(res.type), lw.count("src", op))
    lw.trav("eq", holds, x, y=y)
    total, ties, share = (lw.temp(_group_memref(width), groups) for _ in range(3))
    for sums, rows in ((total, dy), (ties, holds)):
        lw.fill(sums, 0.0)
        lw.trav("copy", sums, rows, scatter=group, reduce="sum")
    lw.trav("div", share, total, y=ties)
    lw.trav("mul", lw.out(res, group), holds, y=share, y_index=group)


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
            _FuncLowering(op, graph_type, block_size, tile_n).run()
