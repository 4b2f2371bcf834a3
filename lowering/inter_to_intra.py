"""``convert-hector-inter-to-intra``: relational ops to GEMM and traversal templates.

Each function on tensors becomes a function on memrefs in destination-passing style:

* the ``!hector_inter.graph`` argument is replaced, in place, by the graph's arrays
  (``_emit.GRAPH_ARRAYS``: ``src, dst, etype, ntype, etype_ptr, norm_dst_etype, norm_dst``);
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
from ..passes.verify import EDGE, verify_function
from . import _emit
from ._emit import GRAPH_ARRAYS, Writer

_GEMM_OPERANDS = ("a", "weight", "gather_index", "weight_index", "scatter_index", "out")
_TRAV_OPERANDS = ("gather_index", "scatter_index", "x", "y", "out")


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

    def _gemm(self, ops: dict[str, str | None], types: dict[str, str], epilogue: str) -> None:
        names = [ops[k] for k in _GEMM_OPERANDS if ops.get(k) is not None]
        tys = [types[k] for k in _GEMM_OPERANDS if ops.get(k) is not None]
        seg = ", ".join("1" if ops.get(k) is not None else "0" for k in _GEMM_OPERANDS)
        self.w.emit(
            f'"hector_intra.gemm_template"({", ".join(names)}) {{epilogue = "{epilogue}", '
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
    ) -> None:
        names = [ops[k] for k in _TRAV_OPERANDS if ops.get(k) is not None]
        tys = [types[k] for k in _TRAV_OPERANDS if ops.get(k) is not None]
        seg = ", ".join("1" if ops.get(k) is not None else "0" for k in _TRAV_OPERANDS)
        self.w.emit(
            f'"hector_intra.traversal_template"({", ".join(names)}) {{parallel = "{parallel}", '
            f'fn = "{fn}", reduce = "{reduce}", block_size = {self.block_size} : i64, '
            f"operandSegmentSizes = array<i32: {seg}>}} : ({', '.join(tys)}) -> ()"
        )

    # -- the function ----------------------------------------------------------------------
    def run(self) -> str | None:
        ops = _emit.body_ops(self.func)
        if not any(op.name.startswith("hector_inter.") for op in ops):
            return None
        block = self.func.regions[0].blocks[0]
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
        for op in ops:
            if op.name == "hector_inter.typed_linear":
                x = op.operands[1]
                producer = x.owner if not isinstance(x, ir.BlockArgument) else None
                if (
                    producer is not None
                    and producer.name in ("hector_inter.gather_src", "hector_inter.gather_dst")
                    and all(u.name == "hector_inter.typed_linear" for u in _users(x))
                    and ir.StringAttr(op.attributes["slice"]).value != "ntype"
                ):
                    self.fused.add(producer)
            if op.name == "hector_inter.sum_to_dst":
                x = op.operands[1]
                producer = x.owner if not isinstance(x, ir.BlockArgument) else None
                if (
                    producer is not None
                    and producer.name == "hector_inter.scale"
                    and len(_users(x)) == 1
                    and x not in self.out_param
                ):
                    self.fused.add(producer)
            if op.name == "hector_inter.degree_norm":
                self.fused.add(op)  # a graph array, nothing to compute
        for op in ops:
            if op.name == "hector_inter.degree_norm":
                by = ir.StringAttr(op.attributes["by"]).value
                self.buf[op.results[0]] = self._graph(f"norm_{by}", op)

    def _parallel(self, value: ir.Value) -> str:
        """Whether rows of ``value`` are edges or nodes (for the schedule's record)."""
        return "edge" if self.kinds.get(value) == EDGE else "node"

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
        idx = "memref<?xi32>"
        if kind == "typed_linear":
            slice_ = ir.StringAttr(op.attributes["slice"]).value
            x = op.operands[1]
            gather = None
            if not isinstance(x, ir.BlockArgument) and x.owner in self.fused:
                producer = x.owner
                a, atype = self._src(producer.operands[1])
                gather = self._graph("src" if producer.name.endswith("src") else "dst", op)
            else:
                a, atype = self._src(x)
            w, wtype = self._src(op.operands[2])
            windex = None
            if slice_ == "etype":
                windex = self._graph("etype", op)
            elif slice_ == "ntype":
                windex = self._graph("ntype", op)
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
            )
        elif kind in ("gather_src", "gather_dst"):
            gather = self._graph("src" if kind.endswith("src") else "dst", op)
            x, xtype = self._src(op.operands[1])
            out = self._out(res, (gather, idx))
            self._traversal(
                {"gather_index": gather, "x": x, "out": out},
                {"gather_index": idx, "x": xtype, "out": rtype},
                "edge",
                "copy",
                "none",
            )
        elif kind == "sum_to_dst":
            dst = self._graph("dst", op)
            m = op.operands[1]
            out = self._out(res, (self._graph("ntype", op), idx))
            self._zero(out, rtype)
            if not isinstance(m, ir.BlockArgument) and m.owner in self.fused:
                x, xtype = self._src(m.owner.operands[0])
                y, ytype = self._src(m.owner.operands[1])
                self._traversal(
                    {"scatter_index": dst, "x": x, "y": y, "out": out},
                    {"scatter_index": idx, "x": xtype, "y": ytype, "out": rtype},
                    "edge",
                    "scale",
                    "sum",
                )
            else:
                x, xtype = self._src(m)
                self._traversal(
                    {"scatter_index": dst, "x": x, "out": out},
                    {"scatter_index": idx, "x": xtype, "out": rtype},
                    "edge",
                    "copy",
                    "sum",
                )
        elif kind in ("scale", "add", "unary"):
            x, xtype = self._src(op.operands[0])
            out = self._out(res, (x, xtype))
            parallel = self._parallel(op.operands[0])
            if kind == "unary":
                fn = ir.StringAttr(op.attributes["fn"]).value
                self._traversal(
                    {"x": x, "out": out}, {"x": xtype, "out": rtype}, parallel, fn, "none"
                )
                return
            y, ytype = self._src(op.operands[1])
            bias = ir.ShapedType(op.operands[1].type).rank == 1
            fn = "scale" if kind == "scale" else ("add_bias" if bias else "add")
            self._traversal(
                {"x": x, "y": y, "out": out},
                {"x": xtype, "y": ytype, "out": rtype},
                parallel,
                fn,
                "none",
            )
        else:
            raise PassFailure(f"no lowering for '{name}' yet", op.location)


@register_pass(
    "convert-hector-inter-to-intra",
    "Lower hector_inter relational ops to hector_intra GEMM/traversal templates on memrefs",
    block_size=Option(int, 256, "threads per block recorded in each template's schedule"),
    tile_n=Option(int, 8, "output columns per thread recorded in GEMM templates"),
)
def run(module_op: ir.Operation, block_size: int = 256, tile_n: int = 8) -> None:
    """Pass entry point: convert every function that holds hector_inter ops."""
    _emit.rebuild(module_op, lambda f: _FuncLowering(f, block_size, tile_n).run())
