"""``convert-hector-inter-to-intra``: relational ops to GEMM and traversal templates.

Each function on tensors becomes a function on memrefs in destination-passing style:

* the ``!hector_inter.graph`` argument is replaced, in place, by the graph's arrays
  (``_emit.GRAPH_ARRAYS``: ``src, dst, etype, ntype, etype_ptr, norm_dst_etype, norm_dst``, the
  compaction map ``compact_src, compact_etype, edge_compact`` and ``etype_src_ntype``);
* every result becomes a trailing output argument (``hector.outputs`` counts them) and the
  function returns nothing;
* intermediate values get ``memref.alloc`` buffers, sized by the edge count (``dim src``), the node
  count (``dim ntype``) or their input's row count, and freed at the end.

Op mapping (the first fusion, the one every program needs):

* ``typed_linear(gather_src|gather_dst(x), W)`` → one ``gemm_template`` whose left rows are
  gathered by ``src``/``dst`` (the gathered copy is never built when the gather has no other use),
  weight picked by ``etype`` / ``ntype`` / shared;
* ``sum_to_dst(scale(m, s))`` → one edge-parallel ``traversal_template`` (``fn = scale``,
  ``reduce = sum`` by ``dst``) when the scale has no other use; ``sum_to_dst(m)`` → ``fn = copy``;
* ``degree_norm`` reads the graph's cached ``norm_dst_etype`` / ``norm_dst`` array (no op);
* ``gather_*`` alone, ``scale``, ``add`` (or bias add), ``unary`` → row-parallel traversals.
"""

from __future__ import annotations

from mlir import ir

from ..passes._registry import Option, PassFailure, register_pass
from ..passes.fuse import MARK, SUMS, reads_gathered
from ..passes.verify import COMPACT, EDGE, verify_function
from . import _emit
from ._emit import GRAPH_ARRAYS, Writer
from ._templates import GEMM_OPERANDS as _GEMM_OPERANDS
from ._templates import TRAVERSAL_OPERANDS as _TRAV_OPERANDS


def _is_graph(t: ir.Type) -> bool:
    return str(t) == "!hector_inter.graph"


def _users(value: ir.Value) -> list[ir.Operation]:
    return [use.owner for use in value.uses]


class _FuncLowering:
    def __init__(self, func: ir.Operation, block_size: int, tile_n: int) -> None:
        self.func = func
        self.block_size = block_size
        self.tile_n = tile_n
        self.w = Writer(ir.AsmState(func))
        self.buf: dict[ir.Value, str] = {}  # value → memref SSA name holding it
        self.alloc: list[tuple[str, str]] = []  # (name, type) to free at the end
        self.graph: dict[str, str] = {}  # array name → SSA name
        self.fused: set[ir.Operation] = set()
        self.filled: set[str] = set()
        self.kinds = verify_function(func)  # node/edge kind of every value

    # -- helpers ---------------------------------------------------------------------------
    def _dim(self, memref: str, mtype: str) -> str:
        n = self.w.fresh("rows")
        self.w.emit(f"{n} = memref.dim {memref}, {self.c0} : {mtype}")
        return n

    def _graph(self, name: str, op: ir.Operation) -> str:
        if name not in self.graph:
            raise PassFailure(f"'{op.name}' needs a !hector_inter.graph argument", op.location)
        return self.graph[name]

    def _out(self, value: ir.Value, rows_from: tuple[str, str]) -> str:
        """The buffer ``value`` is written to: an output argument or a fresh allocation."""
        if value in self.out_param:
            name = self.out_param.pop(value)
        else:
            mtype = _emit.to_memref(value.type)
            name = self.w.fresh("buf")
            if "?" in mtype.split("x")[0]:
                rows = self._dim(*rows_from)
                self.w.emit(f"{name} = memref.alloc({rows}) : {mtype}")
            else:
                self.w.emit(f"{name} = memref.alloc() : {mtype}")
            self.alloc.append((name, mtype))
        self.buf[value] = name
        return name

    def _zero(self, name: str, mtype: str) -> None:
        if name in self.filled:
            return
        z = self.w.fresh("zero")
        self.w.emit(f"{z} = arith.constant 0.000000e+00 : f32")
        self.w.emit(f"linalg.fill ins({z} : f32) outs({name} : {mtype})")
        self.filled.add(name)

    def _src(self, value: ir.Value) -> tuple[str, str]:
        return self.buf[value], _emit.to_memref(value.type)

    def _gemm(
        self,
        ops: dict[str, str | None],
        types: dict[str, str],
        epilogue: str,
        variant: str = "xw",
        slice_rows: int | None = None,
    ) -> None:
        names = [ops[k] for k in _GEMM_OPERANDS if ops.get(k) is not None]
        tys = [types[k] for k in _GEMM_OPERANDS if ops.get(k) is not None]
        seg = ", ".join("1" if ops.get(k) is not None else "0" for k in _GEMM_OPERANDS)
        rows = f"slice_rows = {slice_rows} : i64, " if slice_rows is not None else ""
        self.w.emit(
            f'"hector_intra.gemm_template"({", ".join(names)}) {{variant = "{variant}", '
            f'epilogue = "{epilogue}", {rows}'
            f"tile_n = {self.tile_n} : i64, block_size = {self.block_size} : i64, "
            f"operandSegmentSizes = array<i32: {seg}>}} : ({', '.join(tys)}) -> ()"
        )

    def _traversal(
        self,
        ops: dict[str, str | None],
        types: dict[str, str],
        parallel: str,
        fn: str,
        reduce: str,
        slope: float = 0.0,
    ) -> None:
        names = [ops[k] for k in _TRAV_OPERANDS if ops.get(k) is not None]
        tys = [types[k] for k in _TRAV_OPERANDS if ops.get(k) is not None]
        seg = ", ".join("1" if ops.get(k) is not None else "0" for k in _TRAV_OPERANDS)
        self.w.emit(
            f'"hector_intra.traversal_template"({", ".join(names)}) {{parallel = "{parallel}", '
            f'fn = "{fn}", reduce = "{reduce}", slope = {float(slope)!r} : f32, '
            f"block_size = {self.block_size} : i64, "
            f"operandSegmentSizes = array<i32: {seg}>}} : ({', '.join(tys)}) -> ()"
        )

    def _trav(
        self,
        fn: str,
        out: tuple[str, str],
        x: tuple[str, str],
        *,
        y: tuple[str, str] | None = None,
        gather: str | None = None,
        y_index: str | None = None,
        scatter: str | None = None,
        reduce: str = "none",
        parallel: str = "edge",
        slope: float = 0.0,
    ) -> None:
        """Emit one traversal from (name, type) pairs and index array names."""
        idx = "memref<?xi32>"
        ops = {"gather_index": gather, "scatter_index": scatter, "y_index": y_index}
        types = {"gather_index": idx, "scatter_index": idx, "y_index": idx}
        ops["x"], types["x"] = x
        ops["out"], types["out"] = out
        if y is not None:
            ops["y"], types["y"] = y
        self._traversal(ops, types, parallel, fn, reduce, slope)

    def _temp(self, mtype: str, rows: str | None) -> tuple[str, str]:
        """A scratch buffer of ``mtype`` with ``rows`` (an index SSA name) dynamic rows."""
        name = self.w.fresh("tmp")
        self.w.emit(f"{name} = memref.alloc({rows or ''}) : {mtype}")
        self.alloc.append((name, mtype))
        return name, mtype

    def _fill(self, name: str, mtype: str, value: str) -> None:
        c = self.w.fresh("fill")
        self.w.emit(f"{c} = arith.constant {value} : f32")
        self.w.emit(f"linalg.fill ins({c} : f32) outs({name} : {mtype})")

    def _count(self, array: str, op: ir.Operation) -> str:
        """The length of a graph array (``src`` → edges, ``ntype`` → nodes)."""
        return self._dim(self._graph(array, op), "memref<?xi32>")

    # -- the function ----------------------------------------------------------------------
    def run(self) -> str | None:
        ops = _emit.body_ops(self.func)
        block = self.func.regions[0].blocks[0]
        takes_graph = any(_is_graph(a.type) for a in block.arguments)
        if not takes_graph and not any(op.name.startswith("hector_inter.") for op in ops):
            return None  # not a Hector function (a graph argument makes one, even op-free)
        sym = ir.StringAttr(self.func.attributes["sym_name"]).value
        args: list[str] = []
        graph_args = [a for a in block.arguments if _is_graph(a.type)]
        if len(graph_args) > 1:
            raise PassFailure("a function may take at most one graph", self.func.location)
        for arg in block.arguments:
            if _is_graph(arg.type):
                for name, ty in GRAPH_ARRAYS:
                    ssa = f"%{name}"
                    self.graph[name] = ssa
                    args.append(f"{ssa}: {ty}")
            else:
                if not isinstance(arg.type, ir.RankedTensorType):
                    raise PassFailure(
                        f"argument of type {arg.type} is not supported; expected a ranked "
                        "tensor or !hector_inter.graph",
                        self.func.location,
                    )
                name = self.w.name(arg)
                self.buf[arg] = name
                args.append(f"{name}: {_emit.to_memref(arg.type)}")
        ret = ops[-1]
        results = list(ret.operands)
        self.out_param: dict[ir.Value, str] = {}
        copies: list[tuple[str, ir.Value]] = []
        for i, value in enumerate(results):
            name = f"%out{i}"
            args.append(f"{name}: {_emit.to_memref(value.type)}")
            if (
                value in self.out_param
                or isinstance(value, ir.BlockArgument)
                or (value.owner.name == "hector_inter.degree_norm")
            ):
                copies.append((name, value))  # returned twice, or not computed here: copy
            else:
                self.out_param[value] = name

        attrs = _emit.func_attrs_text(self.func, add=f"hector.outputs = {len(results)} : i64")
        header = f"func.func @{sym}({', '.join(args)}){attrs} {{"
        self.c0 = self.w.fresh("c0")
        self.w.emit(f"{self.c0} = arith.constant 0 : index")
        self._plan_fusion(ops)
        for op in ops[:-1]:
            if op in self.fused:
                continue
            self._lower(op)
        for name, value in copies:
            src, _ = self._src(value)
            self.w.emit(
                f"memref.copy {src}, {name} : {_emit.to_memref(value.type)} to "
                f"{_emit.to_memref(value.type)}"
            )
        for name, mtype in reversed(self.alloc):
            self.w.emit(f"memref.dealloc {name} : {mtype}")
        self.w.emit("return")
        return "\n".join([header, *self.w.lines, "}"])

    def _plan_fusion(self, ops: list[ir.Operation]) -> None:
        """Fuse what ``hector-fuse`` marked (``hector.fuse``), after checking the marks still
        hold; degree norms always read the graph's cached arrays."""
        for op in ops:
            mark = ir.StringAttr(op.attributes[MARK]).value if MARK in op.attributes else None
            if mark == "into_sum":
                out = op.results[0]
                users = _users(out)
                if len(users) != 1 or users[0].name not in SUMS or out in self.out_param:
                    raise PassFailure(
                        'hector.fuse = "into_sum" on a scale that is not summed exactly once',
                        op.location,
                    )
                self.fused.add(op)
            elif mark == "scatter" and op.name == "hector_inter.typed_linear":
                users = _users(op.results[0])
                if (
                    len(users) != 1
                    or users[0].name != "hector_inter.scale"
                    or MARK not in users[0].attributes
                    or op.results[0] in self.out_param
                ):
                    raise PassFailure(
                        'hector.fuse = "scatter" on a typed_linear that is not scaled once and '
                        "summed",
                        op.location,
                    )
                self.fused.add(op)
            elif mark == "index" and op.name in _GATHER_INDEX:
                out = op.results[0]
                uses = [(u.owner, u.operand_number) for u in out.uses]
                if out in self.out_param or not all(reads_gathered(*u) for u in uses):
                    raise PassFailure(
                        'hector.fuse = "index" on a gather that a user cannot read through an '
                        "index",
                        op.location,
                    )
                self.fused.add(op)
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
                by = ir.StringAttr(op.attributes["by"]).value
                self.buf[op.results[0]] = self._graph(f"norm_{by}", op)

    def _is_gathered(self, value: ir.Value) -> bool:
        return not isinstance(value, ir.BlockArgument) and value.owner in self.fused

    def _read(self, value: ir.Value, op: ir.Operation) -> tuple[tuple[str, str], str | None]:
        """How a template reads ``value``: its buffer, and the index array when it is a fused
        gather (the gathered copy is never built)."""
        if self._is_gathered(value) and value.owner.name in _GATHER_INDEX:
            producer = value.owner
            index = self._graph(_GATHER_INDEX[producer.name], op)
            return self._src(producer.operands[1]), index
        return self._src(value), None

    def _weight_index(self, op: ir.Operation) -> str | None:
        """The per-row weight slice array of a typed linear (or its gradient ops)."""
        slice_ = ir.StringAttr(op.attributes["slice"]).value
        if slice_ == "ntype":
            return self._graph("ntype", op)
        if slice_ == "none":
            return None
        rows = op.operands[1]
        compact = self.kinds.get(rows) == COMPACT or (
            self._is_gathered(rows) and rows.owner.name == "hector_inter.compact_gather_src"
        )
        return self._graph("compact_etype" if compact else "etype", op)

    def _parallel(self, value: ir.Value) -> str:
        """Whether rows of ``value`` are edges (or compact rows) or nodes (the schedule's
        record)."""
        return "edge" if self.kinds.get(value) in (EDGE, COMPACT) else "node"

    def _type_array(self, value: ir.Value, op: ir.Operation) -> str:
        """The per-row type array of ``value``'s rows: edge types or node types."""
        kind = self.kinds.get(value)
        name = {EDGE: "etype", COMPACT: "compact_etype"}.get(kind, "ntype")
        return self._graph(name, op)

    def _lower(self, op: ir.Operation) -> None:
        name = op.name
        if not name.startswith("hector_inter."):
            raise PassFailure(
                f"'{name}' cannot be lowered to hector_intra; only hector_inter ops may appear "
                "in a function with relational ops",
                op.location,
            )
        kind = name.removeprefix("hector_inter.")
        res = op.results[0]
        rtype = _emit.to_memref(res.type)
        idx = _IDX
        if kind in ("typed_linear", "typed_linear_transposed", "typed_linear_weight_grad"):
            (a, atype), gather = self._read(op.operands[1], op)
            windex = self._weight_index(op)
            if kind == "typed_linear_weight_grad":
                g, gtype = self._src(op.operands[2])
                out = self._out(res, (a, atype))
                self._zero(out, rtype)
                self._gemm(
                    {
                        "a": a,
                        "weight": g,
                        "gather_index": gather,
                        "weight_index": windex,
                        "out": out,
                    },
                    {
                        "a": atype,
                        "weight": gtype,
                        "gather_index": idx,
                        "weight_index": idx,
                        "out": rtype,
                    },
                    "add",
                    "xty",
                )
                return
            w, wtype = self._src(op.operands[2])
            rows = (gather, idx) if gather is not None else (a, atype)
            out = self._out(res, rows)
            self._gemm(
                {"a": a, "weight": w, "gather_index": gather, "weight_index": windex, "out": out},
                {
                    "a": atype,
                    "weight": wtype,
                    "gather_index": idx,
                    "weight_index": idx,
                    "out": rtype,
                },
                "store",
                "xw" if kind == "typed_linear" else "xwt",
            )
        elif op.name in _GATHER_INDEX:
            gather = self._graph(_GATHER_INDEX[op.name], op)
            x = self._src(op.operands[1])
            out = self._out(res, (gather, idx))
            self._trav("copy", (out, rtype), x, gather=gather)
        elif op.name in _SCATTER_INDEX:
            index, rows = _SCATTER_INDEX[op.name]
            scatter = self._graph(index, op)
            m = op.operands[1]
            out = self._out(res, (self._graph(rows, op), idx))
            self._zero(out, rtype)
            if (
                self._is_gathered(m)
                and m.owner.name == "hector_inter.scale"
                and (
                    self._is_gathered(m.owner.operands[0])
                    and m.owner.operands[0].owner.name == "hector_inter.typed_linear"
                )
            ):
                self._scatter_gemm(m.owner, scatter, (out, rtype))
            elif self._is_gathered(m) and m.owner.name == "hector_inter.scale":
                x, gather = self._read(m.owner.operands[0], op)
                y, y_index = self._read(m.owner.operands[1], op)
                self._trav(
                    "scale",
                    (out, rtype),
                    x,
                    y=y,
                    gather=gather,
                    y_index=y_index,
                    scatter=scatter,
                    reduce="sum",
                )
            else:
                x, gather = self._read(m, op)
                self._trav("copy", (out, rtype), x, gather=gather, scatter=scatter, reduce="sum")
        elif kind == "weight_product":
            self._weight_product(op, rtype)
        elif kind in ("etype_src_weight", "etype_src_weight_grad"):
            self._etype_src_weight(op, rtype, grad=kind.endswith("_grad"))
        elif kind in ("scale", "add", "dot", "unary_grad"):
            lhs, rhs = op.operands[0], op.operands[1]
            if kind == "unary_grad":
                lhs, rhs = op.operands[1], op.operands[0]  # x = dy, y = forward ref
            x, gather = self._read(lhs, op)
            rows = (gather, idx) if gather is not None else x
            out = self._out(res, rows)
            parallel = self._parallel(lhs)
            if kind == "add" and ir.ShapedType(rhs.type).rank == 1:
                self._trav(
                    "add_bias", (out, rtype), x, y=self._src(rhs), gather=gather, parallel=parallel
                )
                return
            if kind == "add" and len(op.operands) > 2:  # typed bias
                self._trav(
                    "add",
                    (out, rtype),
                    x,
                    y=self._src(rhs),
                    gather=gather,
                    y_index=self._type_array(lhs, op),
                    parallel=parallel,
                )
                return
            y, y_index = self._read(rhs, op)
            fn = kind
            slope = 0.0
            if kind == "unary_grad":
                base = ir.StringAttr(op.attributes["fn"]).value
                slope = float(ir.FloatAttr(op.attributes["slope"]).value)
                if base in ("copy", "neg"):
                    self._trav(base, (out, rtype), x, gather=gather, parallel=parallel)
                    return
                fn = f"{base}_grad"
            self._trav(
                fn,
                (out, rtype),
                x,
                y=y,
                gather=gather,
                y_index=y_index,
                parallel=parallel,
                slope=slope,
            )
        elif kind == "unary":
            x, gather = self._read(op.operands[0], op)
            out = self._out(res, (gather, idx) if gather is not None else x)
            fn = ir.StringAttr(op.attributes["fn"]).value
            slope = float(ir.FloatAttr(op.attributes["slope"]).value)
            self._trav(
                fn,
                (out, rtype),
                x,
                gather=gather,
                slope=slope,
                parallel=self._parallel(op.operands[0]),
            )
        elif kind == "edge_softmax":
            self._edge_softmax(op, rtype)
        elif kind == "edge_softmax_grad":
            self._edge_softmax_grad(op, rtype)
        elif kind == "sum_rows":
            x, gather = self._read(op.operands[0], op)
            out = self._out(res, x)
            self._zero(out, rtype)
            scatter = None
            if ir.StringAttr(op.attributes["by"]).value == "type":
                scatter = self._type_array(op.operands[0], op)
            self._trav(
                "copy",
                (out, rtype),
                x,
                gather=gather,
                scatter=scatter,
                reduce="sum",
                parallel=self._parallel(op.operands[0]),
            )
        else:
            raise PassFailure(f"no lowering for '{name}' yet", op.location)

    def _scatter_gemm(self, scale: ir.Operation, scatter: str, out: tuple[str, str]) -> None:
        """``sum(scale(typed_linear(x, W), s))`` as one GEMM: gathered rows times the typed
        weight, scaled per row and accumulated into the scattered output rows."""
        linear = scale.operands[0].owner
        (a, atype), gather = self._read(linear.operands[1], linear)
        w, wtype = self._src(linear.operands[2])
        s, stype = self._src(scale.operands[1])
        windex = self._weight_index(linear)
        self._gemm(
            {
                "a": a,
                "weight": w,
                "gather_index": gather,
                "weight_index": windex,
                "scatter_index": scatter,
                "row_scale": s,
                "out": out[0],
            },
            {
                "a": atype,
                "weight": wtype,
                "gather_index": _IDX,
                "weight_index": _IDX,
                "scatter_index": _IDX,
                "row_scale": stype,
                "out": out[1],
            },
            "add",
        )

    def _collapse(self, name: str, mtype: str, per_type: bool = False) -> tuple[str, str]:
        """View a rank-3 weight ``[R, K, N]`` as rows ``[R*K, N]``, or with ``per_type`` as one
        row per type ``[R, K*N]`` (no copy)."""
        dims = mtype.removeprefix("memref<").removesuffix(">").split("x")  # [R, K, N, f32]
        if len(dims) != 4:
            return name, mtype
        r, k, n = (int(d) for d in dims[:3])
        new = self.w.fresh("typed" if per_type else "rows")
        shape, groups = (
            (f"{r}x{k * n}", "[[0], [1, 2]]") if per_type else (f"{r * k}x{n}", "[[0, 1], [2]]")
        )
        ntype = f"memref<{shape}xf32>"
        self.w.emit(f"{new} = memref.collapse_shape {name} {groups} : {mtype} into {ntype}")
        return new, ntype

    def _etype_src_weight(self, op: ir.Operation, rtype: str, grad: bool) -> None:
        """Per-relation weights picked from (or summed onto) source node types: one row copy
        per type through the graph's ``etype_src_ntype`` array."""
        w = self._src(op.operands[1])
        out = self._out(op.results[0], w)
        index = self._graph("etype_src_ntype", op)
        x, o = self._collapse(*w, per_type=True), self._collapse(out, rtype, per_type=True)
        if grad:
            self._zero(out, rtype)
            self._trav("copy", o, x, scatter=index, reduce="sum", parallel="node")
        else:
            self._trav("copy", o, x, gather=index, parallel="node")

    def _weight_product(self, op: ir.Operation, rtype: str) -> None:
        """``W[r] @ q`` and its gradients as one GEMM over the weight's rows ``[R*K, N]``; the
        per-slice form (``b`` or the ``xty`` result of rank 3) picks slice ``i / K`` for row
        ``i`` (the template's ``slice_rows``)."""
        variant = ir.StringAttr(op.attributes["variant"]).value
        a, b = self._src(op.operands[0]), self._src(op.operands[1])
        out = self._out(op.results[0], a)
        a_shape = ir.ShapedType(op.operands[0].type).shape
        per_slice = (
            ir.ShapedType(op.results[0].type).rank == 3
            if variant == "xty"
            else ir.ShapedType(op.operands[1].type).rank == 3
        )
        if per_slice:
            k = a_shape[1] if len(a_shape) == 3 else 1
            a = self._collapse(*a)
            if variant == "xty":
                self._zero(out, rtype)
                b = self._collapse(*b)
                o, epilogue = (out, rtype), "add"
            else:
                o, epilogue = self._collapse(out, rtype), "store"
            self._gemm(
                {"a": a[0], "weight": b[0], "out": o[0]},
                {"a": a[1], "weight": b[1], "out": o[1]},
                epilogue,
                variant,
                slice_rows=k,
            )
            return
        if variant == "xty":
            self._zero(out, rtype)
            a, b = self._collapse(*a), self._collapse(*b)
            o = (out, rtype)
            epilogue = "add"
        else:
            a = self._collapse(*a)
            o = self._collapse(out, rtype)
            epilogue = "store"
        self._gemm(
            {"a": a[0], "weight": b[0], "out": o[0]},
            {"a": a[1], "weight": b[1], "out": o[1]},
            epilogue,
            variant,
        )

    def _node_temp(self, width: int, op: ir.Operation) -> tuple[str, str]:
        return self._temp(f"memref<?x{width}xf32>", self._count("ntype", op))

    def _edge_softmax(self, op: ir.Operation, rtype: str) -> None:
        """max per destination → exp(x - max) → sum per destination → divide."""
        res = op.results[0]
        x = self._src(op.operands[1])
        heads = _emit_width(res)
        dst = self._graph("dst", op)
        nmax = self._node_temp(heads, op)
        self._fill(*nmax, "0xFF800000")  # -inf
        self._trav("copy", nmax, x, scatter=dst, reduce="max")
        ex = self._temp(rtype, self._count("src", op))
        self._trav("exp_sub", ex, x, y=nmax, y_index=dst)
        nsum = self._node_temp(heads, op)
        self._fill(*nsum, "0.000000e+00")
        self._trav("copy", nsum, ex, scatter=dst, reduce="sum")
        out = self._out(res, (dst, _IDX))
        self._trav("div", (out, rtype), ex, y=nsum, y_index=dst)

    def _edge_softmax_grad(self, op: ir.Operation, rtype: str) -> None:
        """``y * (dy - Σ_dst dy*y)``: one reducing traversal, then two row traversals."""
        res = op.results[0]
        y, dy = self._src(op.operands[1]), self._src(op.operands[2])
        heads = _emit_width(res)
        dst = self._graph("dst", op)
        nsum = self._node_temp(heads, op)
        self._fill(*nsum, "0.000000e+00")
        self._trav("mul", nsum, dy, y=y, scatter=dst, reduce="sum")
        diff = self._temp(rtype, self._count("src", op))
        self._trav("sub", diff, dy, y=nsum, y_index=dst)
        out = self._out(res, (dst, _IDX))
        self._trav("mul", (out, rtype), diff, y=y)


_IDX = "memref<?xi32>"
# gather op → the graph array it reads rows through
_GATHER_INDEX = {
    "hector_inter.gather_src": "src",
    "hector_inter.gather_dst": "dst",
    "hector_inter.compact_gather_src": "compact_src",
    "hector_inter.expand_compact": "edge_compact",
}
# sum op → (scatter index, graph array whose length is the result's row count)
_SCATTER_INDEX = {
    "hector_inter.sum_to_dst": ("dst", "ntype"),
    "hector_inter.sum_to_src": ("src", "ntype"),
    "hector_inter.sum_to_compact": ("edge_compact", "compact_src"),
    "hector_inter.sum_compact_to_src": ("compact_src", "ntype"),
}


def _emit_width(value: ir.Value) -> int:
    shape = ir.ShapedType(value.type)
    return shape.get_dim_size(shape.rank - 1)


@register_pass(
    "convert-hector-inter-to-intra",
    "Lower hector_inter relational ops to hector_intra GEMM/traversal templates on memrefs",
    block_size=Option(int, 256, "threads per block recorded in each template's schedule"),
    tile_n=Option(int, 8, "output columns per thread recorded in GEMM templates"),
)
def run(module_op: ir.Operation, block_size: int = 256, tile_n: int = 8) -> None:
    """Pass entry point: convert every function that holds hector_inter ops."""
    _emit.rebuild(module_op, lambda f: _FuncLowering(f, block_size, tile_n).run())
