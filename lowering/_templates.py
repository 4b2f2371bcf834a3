"""What the two hector_intra templates compute, as loop bodies shared by the CPU and GPU lowerings.

``intra_to_scf`` wraps these bodies in ``scf.for`` loops; ``intra_to_gpu`` wraps them in one
kernel per template with a thread→(row, column) mapping. Keeping the element-level semantics in
one place means the two back ends cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from ._emit import Writer, grouped_operands, int_attr, str_attr

GEMM_OPERANDS = ("a", "weight", "gather_index", "weight_index", "scatter_index", "out")
TRAVERSAL_OPERANDS = ("gather_index", "scatter_index", "x", "y", "out")


@dataclass
class Operands:
    """An op's operands by role: SSA name and type text (absent roles are missing)."""

    names: dict[str, str]
    types: dict[str, str]
    values: dict[str, ir.Value]

    def has(self, role: str) -> bool:
        """Whether the optional operand ``role`` is present."""
        return role in self.names


def operands(op: ir.Operation, roles: tuple[str, ...], w: Writer) -> Operands:
    """Collect an op's operands by role, named as in the function being rebuilt."""
    names, types, values = {}, {}, {}
    for role, value in grouped_operands(op, roles).items():
        if value is not None:
            names[role] = w.name(value)
            types[role] = str(value.type)
            values[role] = value
    return Operands(names, types, values)


def static_dim(value: ir.Value, i: int) -> int:
    """A static dimension of a shaped value (feature widths are static in Hector)."""
    shape = ir.ShapedType(value.type)
    d = shape.get_dim_size(i)
    if d == ir.ShapedType.get_dynamic_size():
        raise ValueError(f"dimension {i} of {value.type} must be static")
    return d


class Body:
    """Emits scalar code for one template element into a Writer at a given indentation."""

    def __init__(self, w: Writer, indent: int) -> None:
        self.w = w
        self.indent = indent

    def emit(self, line: str) -> None:
        """Append a line at the current indentation."""
        self.w.emit(line, self.indent)

    def const(self, value: int) -> str:
        """An ``index`` constant."""
        return self.w.const_index(value, self.indent)

    def load_index(self, ops: Operands, role: str, i: str) -> str:
        """``index_cast(role[i])``: a row number read from an i32 index array."""
        raw = self.w.fresh(role[:1] + "i32")
        idx = self.w.fresh(role[:1] + "row")
        self.emit(f"{raw} = memref.load {ops.names[role]}[{i}] : {ops.types[role]}")
        self.emit(f"{idx} = arith.index_cast {raw} : i32 to index")
        return idx

    def load(self, ops: Operands, role: str, *idx: str) -> str:
        """Load one f32 element."""
        v = self.w.fresh(role)
        self.emit(f"{v} = memref.load {ops.names[role]}[{', '.join(idx)}] : {ops.types[role]}")
        return v

    def store(self, ops: Operands, role: str, v: str, *idx: str) -> None:
        """Store one f32 element."""
        self.emit(f"memref.store {v}, {ops.names[role]}[{', '.join(idx)}] : {ops.types[role]}")

    def accumulate(self, ops: Operands, role: str, v: str, atomic: bool, *idx: str) -> None:
        """``role[idx] += v``, atomically when several threads may hit one element."""
        if atomic:
            old = self.w.fresh("old")
            self.emit(
                f"{old} = memref.atomic_rmw addf {v}, {ops.names[role]}[{', '.join(idx)}] "
                f": ({'f32'}, {ops.types[role]}) -> f32"
            )
            return
        cur = self.load(ops, role, *idx)
        s = self.w.fresh("sum")
        self.emit(f"{s} = arith.addf {cur}, {v} : f32")
        self.store(ops, role, s, *idx)

    def open_for(self, lo: str, hi: str, step: str, hint: str) -> str:
        """Open an ``scf.for`` loop and return its induction variable."""
        iv = self.w.fresh(hint)
        self.emit(f"scf.for {iv} = {lo} to {hi} step {step} {{")
        self.indent += 2
        return iv

    def close(self) -> None:
        """Close the innermost region."""
        self.indent -= 2
        self.emit("}")


def gemm_rows(op: ir.Operation, ops: Operands, w: Writer, c0: str) -> str:
    """Emit the row count ``M`` of a GEMM template and return its name."""
    for role in ("gather_index", "weight_index"):
        if ops.has(role):
            m = w.fresh("m")
            w.emit(f"{m} = memref.dim {ops.names[role]}, {c0} : {ops.types[role]}")
            return m
    m = w.fresh("m")
    w.emit(f"{m} = memref.dim {ops.names['a']}, {c0} : {ops.types['a']}")
    return m


def gemm_row_prologue(b: Body, ops: Operands, i: str) -> tuple[str, str | None, str]:
    """Rows read, weight slice and row written for GEMM row ``i``."""
    r = b.load_index(ops, "gather_index", i) if ops.has("gather_index") else i
    t = b.load_index(ops, "weight_index", i) if ops.has("weight_index") else None
    o = b.load_index(ops, "scatter_index", i) if ops.has("scatter_index") else i
    return r, t, o


def gemm_element(
    b: Body, ops: Operands, r: str, t: str | None, o: str, j: str, k_extent: int, epilogue: str
) -> None:
    """GPU form: ``out[o, j] (=, +=, atomic +=) Σ_k a[r, k] * weight[t, k, j]``."""
    c0, c1, ck = b.const(0), b.const(1), b.const(k_extent)
    zero = b.w.fresh("zero")
    b.emit(f"{zero} = arith.constant 0.000000e+00 : f32")
    acc, k, acc_in = b.w.fresh("acc"), b.w.fresh("k"), b.w.fresh("acc_in")
    b.emit(f"{acc} = scf.for {k} = {c0} to {ck} step {c1} iter_args({acc_in} = {zero}) -> (f32) {{")
    b.indent += 2
    av = b.load(ops, "a", r, k)
    wv = b.load(ops, "weight", *([t] if t is not None else []), k, j)
    p, s = b.w.fresh("p"), b.w.fresh("s")
    b.emit(f"{p} = arith.mulf {av}, {wv} : f32")
    b.emit(f"{s} = arith.addf {acc_in}, {p} : f32")
    b.emit(f"scf.yield {s} : f32")
    b.close()
    if epilogue == "store":
        b.store(ops, "out", acc, o, j)
    else:
        b.accumulate(ops, "out", acc, epilogue == "atomic_add", o, j)


def gemm_row_cpu(
    b: Body,
    ops: Operands,
    r: str,
    t: str | None,
    o: str,
    k_extent: int,
    n_extent: int,
    epilogue: str,
) -> None:
    """CPU form of one GEMM row: ``k`` outer, ``j`` inner, so the inner loop walks contiguous
    weight and output rows (LLVM vectorises it)."""
    c0, c1 = b.const(0), b.const(1)
    ck, cn = b.const(k_extent), b.const(n_extent)
    if epilogue == "store":
        zero = b.w.fresh("zero")
        b.emit(f"{zero} = arith.constant 0.000000e+00 : f32")
        j = b.open_for(c0, cn, c1, "j")
        b.store(ops, "out", zero, o, j)
        b.close()
    k = b.open_for(c0, ck, c1, "k")
    av = b.load(ops, "a", r, k)
    j = b.open_for(c0, cn, c1, "j")
    wv = b.load(ops, "weight", *([t] if t is not None else []), k, j)
    p = b.w.fresh("p")
    b.emit(f"{p} = arith.mulf {av}, {wv} : f32")
    b.accumulate(ops, "out", p, False, o, j)
    b.close()
    b.close()


def traversal_rows(ops: Operands, w: Writer, c0: str) -> str:
    """Emit the row count ``M`` of a traversal template and return its name."""
    role = "gather_index" if ops.has("gather_index") else "x"
    m = w.fresh("m")
    w.emit(f"{m} = memref.dim {ops.names[role]}, {c0} : {ops.types[role]}")
    return m


def traversal_element(
    b: Body, op: ir.Operation, ops: Operands, i: str, xr: str, d: str | None, j: str, atomic: bool
) -> None:
    """``out[d or i, j] (=, +=) fn(x[xr, j], y)`` for one element; ``atomic`` when several
    threads may add into one element (the GPU), whatever the template's ``reduce`` says."""
    fn, reduce = str_attr(op, "fn"), str_attr(op, "reduce")
    v = b.load(ops, "x", xr, j)
    if fn == "scale":
        s = b.load(ops, "y", i, b.const(0))
        r = b.w.fresh("scaled")
        b.emit(f"{r} = arith.mulf {v}, {s} : f32")
        v = r
    elif fn in ("add", "add_bias"):
        y = b.load(ops, "y", i, j) if fn == "add" else b.load(ops, "y", j)
        r = b.w.fresh("added")
        b.emit(f"{r} = arith.addf {v}, {y} : f32")
        v = r
    elif fn == "relu":
        zero, r = b.w.fresh("zero"), b.w.fresh("relu")
        b.emit(f"{zero} = arith.constant 0.000000e+00 : f32")
        b.emit(f"{r} = arith.maximumf {v}, {zero} : f32")
        v = r
    if reduce == "none":
        b.store(ops, "out", v, i, j)
    else:
        assert d is not None
        b.accumulate(ops, "out", v, atomic, d, j)


def block_size(op: ir.Operation) -> int:
    """The template's threads-per-block schedule."""
    return int_attr(op, "block_size")
