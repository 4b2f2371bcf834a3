"""What the two hector_intra templates compute, as loop bodies shared by the CPU and GPU lowerings.

``intra_to_scf`` wraps these bodies in ``scf.for`` loops; ``intra_to_gpu`` wraps them in one
kernel per template with a thread→(row, column) mapping. Keeping the element-level semantics in
one place means the two back ends cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from ._emit import Writer, grouped_operands, int_attr, str_attr

GEMM_OPERANDS = (
    "a",
    "weight",
    "gather_index",
    "weight_index",
    "scatter_index",
    "row_scale",
    "out",
)
TRAVERSAL_OPERANDS = ("gather_index", "scatter_index", "y_index", "x", "y", "out")


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


def slice_rows(op: ir.Operation) -> int | None:
    """A GEMM template's optional ``slice_rows``: row ``i`` uses weight slice ``i / slice_rows``
    (per-slice weight products); None when absent."""
    if "slice_rows" not in op.attributes:
        return None
    return ir.IntegerAttr(op.attributes["slice_rows"]).value


def gemm_row_prologue(
    b: Body, ops: Operands, i: str, rows_per_slice: int | None = None
) -> tuple[str, str | None, str]:
    """Rows read, weight slice and row written for GEMM row ``i`` (the slice from
    ``weight_index``, or ``i / rows_per_slice``)."""
    r = b.load_index(ops, "gather_index", i) if ops.has("gather_index") else i
    t = b.load_index(ops, "weight_index", i) if ops.has("weight_index") else None
    if t is None and rows_per_slice is not None:
        t = b.w.fresh("slice")
        b.emit(f"{t} = arith.divui {i}, {b.const(rows_per_slice)} : index")
    o = b.load_index(ops, "scatter_index", i) if ops.has("scatter_index") else i
    return r, t, o


def gemm_row_scale(b: Body, ops: Operands, i: str) -> str | None:
    """The factor of GEMM row ``i`` (``row_scale[i, 0]``), or None without ``row_scale``."""
    return b.load(ops, "row_scale", i, b.const(0)) if ops.has("row_scale") else None


def _weight_index(t: str | None, k: str, j: str, transposed: bool) -> list[str]:
    return [*([t] if t is not None else []), *((j, k) if transposed else (k, j))]


def gemm_element(
    b: Body,
    ops: Operands,
    r: str,
    t: str | None,
    o: str,
    j: str,
    k_extent: int,
    epilogue: str,
    transposed: bool = False,
    scale: str | None = None,
) -> None:
    """GPU form: ``out[o, j] (=, +=, atomic +=) scale * Σ_k a[r, k] * weight[t, k, j]``
    (``weight[t, j, k]`` when ``transposed``; ``scale`` the row's ``row_scale``, if any)."""
    c0, c1, ck = b.const(0), b.const(1), b.const(k_extent)
    zero = b.w.fresh("zero")
    b.emit(f"{zero} = arith.constant 0.000000e+00 : f32")
    acc, k, acc_in = b.w.fresh("acc"), b.w.fresh("k"), b.w.fresh("acc_in")
    b.emit(f"{acc} = scf.for {k} = {c0} to {ck} step {c1} iter_args({acc_in} = {zero}) -> (f32) {{")
    b.indent += 2
    av = b.load(ops, "a", r, k)
    wv = b.load(ops, "weight", *_weight_index(t, k, j, transposed))
    p, s = b.w.fresh("p"), b.w.fresh("s")
    b.emit(f"{p} = arith.mulf {av}, {wv} : f32")
    b.emit(f"{s} = arith.addf {acc_in}, {p} : f32")
    b.emit(f"scf.yield {s} : f32")
    b.close()
    if scale is not None:
        scaled = b.w.fresh("rs")
        b.emit(f"{scaled} = arith.mulf {acc}, {scale} : f32")
        acc = scaled
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
    variant: str = "xw",
    i: str | None = None,
    scale: str | None = None,
    scratch: str | None = None,
) -> None:
    """CPU form of one GEMM row (``scratch``: a ``memref<N x f32>`` row buffer, needed by
    accumulating epilogues): ``k`` outer, ``j`` inner, so the inner loop walks contiguous
    weight and output rows (LLVM vectorises it). ``xwt`` reads the weight transposed (``j``
    outer, a dot product over contiguous weight rows inside); ``xty`` adds the outer product of
    row ``r`` of ``a`` and row ``i`` of the gradient into ``out[t]``."""
    if variant == "xty":
        c0, c1 = b.const(0), b.const(1)
        ck, cn = b.const(k_extent), b.const(n_extent)
        k = b.open_for(c0, ck, c1, "k")
        av = b.load(ops, "a", r, k)
        j = b.open_for(c0, cn, c1, "j")
        gv = b.load(ops, "weight", i, j)
        p = b.w.fresh("p")
        b.emit(f"{p} = arith.mulf {av}, {gv} : f32")
        b.accumulate(ops, "out", p, False, *([t] if t is not None else []), k, j)
        b.close()
        b.close()
        return
    if variant == "xwt":
        c0, c1 = b.const(0), b.const(1)
        cn = b.const(n_extent)
        j = b.open_for(c0, cn, c1, "j")
        gemm_element(b, ops, r, t, o, j, k_extent, epilogue, transposed=True, scale=scale)
        b.close()
        return
    c0, c1 = b.const(0), b.const(1)
    ck, cn = b.const(k_extent), b.const(n_extent)
    # An accumulating epilogue sums the row's product in a scratch row first: adding K partial
    # products of every incoming row straight into the output would round like a K*degree-term
    # sum; this way each output element receives one rounded product per row, as on the GPU.
    target, tname = ("out", o) if epilogue == "store" else ("scratch", None)
    zero = b.w.fresh("zero")
    b.emit(f"{zero} = arith.constant 0.000000e+00 : f32")
    j = b.open_for(c0, cn, c1, "j")
    if target == "out":
        b.store(ops, "out", zero, o, j)
    else:
        b.emit(f"memref.store {zero}, {scratch}[{j}] : memref<{n_extent}xf32>")
    b.close()
    k = b.open_for(c0, ck, c1, "k")
    av = b.load(ops, "a", r, k)
    j = b.open_for(c0, cn, c1, "j")
    wv = b.load(ops, "weight", *([t] if t is not None else []), k, j)
    p = b.w.fresh("p")
    b.emit(f"{p} = arith.mulf {av}, {wv} : f32")
    if target == "out":
        b.accumulate(ops, "out", p, False, tname, j)
    else:
        cur, acc = b.w.fresh("cur"), b.w.fresh("acc")
        b.emit(f"{cur} = memref.load {scratch}[{j}] : memref<{n_extent}xf32>")
        b.emit(f"{acc} = arith.addf {cur}, {p} : f32")
        b.emit(f"memref.store {acc}, {scratch}[{j}] : memref<{n_extent}xf32>")
    b.close()
    b.close()
    if target == "out":
        if scale is not None:
            j = b.open_for(c0, cn, c1, "j")
            v = b.load(ops, "out", o, j)
            sv = b.w.fresh("rs")
            b.emit(f"{sv} = arith.mulf {v}, {scale} : f32")
            b.store(ops, "out", sv, o, j)
            b.close()
        return
    j = b.open_for(c0, cn, c1, "j")
    v = b.w.fresh("row")
    b.emit(f"{v} = memref.load {scratch}[{j}] : memref<{n_extent}xf32>")
    if scale is not None:
        sv = b.w.fresh("rs")
        b.emit(f"{sv} = arith.mulf {v}, {scale} : f32")
        v = sv
    b.accumulate(ops, "out", v, False, o, j)
    b.close()


def row_indices(b: Body, ops: Operands, i: str) -> tuple[str, str, str | None]:
    """For traversal row ``i``: the row of ``x`` read, the row of ``y`` read, and the output
    row of a reduction (None without ``scatter_index``)."""
    xr = b.load_index(ops, "gather_index", i) if ops.has("gather_index") else i
    yr = b.load_index(ops, "y_index", i) if ops.has("y_index") else i
    d = b.load_index(ops, "scatter_index", i) if ops.has("scatter_index") else None
    return xr, yr, d


def traversal_rows(ops: Operands, w: Writer, c0: str) -> str:
    """Emit the row count ``M`` of a traversal template and return its name."""
    role = "gather_index" if ops.has("gather_index") else "x"
    m = w.fresh("m")
    w.emit(f"{m} = memref.dim {ops.names[role]}, {c0} : {ops.types[role]}")
    return m


def _f32_const(b: Body, value: float, hint: str = "cst") -> str:
    c = b.w.fresh(hint)
    b.emit(f"{c} = arith.constant {value!r} : f32")
    return c


def _arith(b: Body, opname: str, *args: str, hint: str = "t") -> str:
    r = b.w.fresh(hint)
    b.emit(f"{r} = arith.{opname} {', '.join(args)} : f32")
    return r


def _exp(b: Body, v: str) -> str:
    r = b.w.fresh("exp")
    b.emit(f"{r} = math.exp {v} : f32")
    return r


def _sigmoid(b: Body, v: str) -> str:
    """``1 / (1 + exp(-v))``: saturates cleanly to 0 and 1 for large ``|v|``."""
    e = _exp(b, _arith(b, "negf", v))
    one = _f32_const(b, 1.0)
    return _arith(b, "divf", one, _arith(b, "addf", one, e), hint="sig")


def _tanh(b: Body, v: str) -> str:
    """``1 - 2 / (exp(2v) + 1)``: exact limits ±1, no overflow to NaN."""
    one, two = _f32_const(b, 1.0), _f32_const(b, 2.0)
    e = _exp(b, _arith(b, "mulf", v, two))
    return _arith(b, "subf", one, _arith(b, "divf", two, _arith(b, "addf", e, one)), hint="tanh")


_ERF = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429, 0.3275911)


def _erf(b: Body, v: str) -> str:
    """Abramowitz–Stegun 7.1.26 (|error| < 1.5e-7), written in arith + one exp so the CPU and
    GPU back ends need no libm/libdevice."""
    a1, a2, a3, a4, a5, p = (_f32_const(b, c) for c in _ERF)
    one, zero = _f32_const(b, 1.0), _f32_const(b, 0.0)
    ax = b.w.fresh("ax")
    b.emit(f"{ax} = math.absf {v} : f32")
    t = _arith(b, "divf", one, _arith(b, "addf", one, _arith(b, "mulf", p, ax)))
    poly = a5
    for a in (a4, a3, a2, a1):
        poly = _arith(b, "addf", _arith(b, "mulf", poly, t), a)
    poly = _arith(b, "mulf", poly, t)
    e = _exp(b, _arith(b, "negf", _arith(b, "mulf", ax, ax)))
    y = _arith(b, "subf", one, _arith(b, "mulf", poly, e))
    neg = b.w.fresh("neg")
    b.emit(f"{neg} = arith.cmpf olt, {v}, {zero} : f32")
    ny = _arith(b, "negf", y)
    r = b.w.fresh("erf")
    b.emit(f"{r} = arith.select {neg}, {ny}, {y} : f32")
    return r


def _gelu(b: Body, v: str) -> str:
    """Exact GELU ``v/2 · (1 + erf(v/√2))`` (PyTorch's default)."""
    half, one = _f32_const(b, 0.5), _f32_const(b, 1.0)
    rs2 = _f32_const(b, 0.7071067811865476)
    cdf = _arith(b, "mulf", half, _arith(b, "addf", one, _erf(b, _arith(b, "mulf", v, rs2))))
    return _arith(b, "mulf", v, cdf, hint="gelu")


def _gelu_grad(b: Body, v: str) -> str:
    """``d/dv gelu(v) = Φ(v) + v·φ(v)``."""
    half, one = _f32_const(b, 0.5), _f32_const(b, 1.0)
    rs2 = _f32_const(b, 0.7071067811865476)
    inv_sqrt_2pi = _f32_const(b, 0.3989422804014327)
    cdf = _arith(b, "mulf", half, _arith(b, "addf", one, _erf(b, _arith(b, "mulf", v, rs2))))
    sq = _arith(b, "mulf", _arith(b, "mulf", v, v), half)
    pdf = _arith(b, "mulf", inv_sqrt_2pi, _exp(b, _arith(b, "negf", sq)))
    return _arith(b, "addf", cdf, _arith(b, "mulf", v, pdf), hint="dgelu")


def _leaky(b: Body, v: str, slope: float, pos: str, negv: str) -> str:
    zero = _f32_const(b, 0.0)
    c = b.w.fresh("pos")
    b.emit(f"{c} = arith.cmpf ogt, {v}, {zero} : f32")
    r = b.w.fresh("sel")
    b.emit(f"{r} = arith.select {c}, {pos}, {negv} : f32")
    return r


def unary_value(b: Body, fn: str, v: str, slope: float) -> str:
    """``fn(v)`` for the unary row functions."""
    if fn == "relu":
        return _arith(b, "maximumf", v, _f32_const(b, 0.0), hint="relu")
    if fn == "leaky_relu":
        return _leaky(b, v, slope, v, _arith(b, "mulf", v, _f32_const(b, slope)))
    if fn == "exp":
        return _exp(b, v)
    if fn == "tanh":
        return _tanh(b, v)
    if fn == "sigmoid":
        return _sigmoid(b, v)
    if fn == "gelu":
        return _gelu(b, v)
    if fn == "neg":
        return _arith(b, "negf", v)
    raise ValueError(f"unknown unary function {fn!r}")


def grad_value(b: Body, fn: str, dy: str, ref: str, slope: float) -> str:
    """``dy * fn'(…)`` where ``ref`` is the forward input (relu, leaky_relu, gelu) or the
    forward output (exp, tanh, sigmoid)."""
    base = fn.removesuffix("_grad")
    if base == "relu":
        return _leaky(b, ref, 0.0, dy, _f32_const(b, 0.0))
    if base == "leaky_relu":
        return _leaky(b, ref, slope, dy, _arith(b, "mulf", dy, _f32_const(b, slope)))
    if base == "gelu":
        return _arith(b, "mulf", dy, _gelu_grad(b, ref))
    if base == "exp":
        return _arith(b, "mulf", dy, ref)
    if base == "tanh":
        one = _f32_const(b, 1.0)
        return _arith(b, "mulf", dy, _arith(b, "subf", one, _arith(b, "mulf", ref, ref)))
    if base == "sigmoid":
        one = _f32_const(b, 1.0)
        return _arith(b, "mulf", dy, _arith(b, "mulf", ref, _arith(b, "subf", one, ref)))
    raise ValueError(f"unknown gradient function {fn!r}")


def width(value: ir.Value) -> int:
    """The static width (last dimension) of a row tensor or vector."""
    shape = ir.ShapedType(value.type)
    return static_dim(value, shape.rank - 1)


def traversal_element(
    b: Body,
    op: ir.Operation,
    ops: Operands,
    i: str,
    xr: str,
    yr: str,
    d: str | None,
    j: str,
    atomic: bool,
) -> None:
    """``out[d or i, j] (=, +=, max=) fn(x[xr, :], y[yr, :])[j]`` for one element; ``atomic``
    when several threads may update one element (the GPU), whatever ``reduce`` says."""
    fn, reduce = str_attr(op, "fn"), str_attr(op, "reduce")
    slope = float(ir.FloatAttr(op.attributes["slope"]).value)
    if fn == "dot":
        dx, do = width(ops.values["x"]), width(ops.values["out"])
        dh = dx // do
        c0, c1, cdh = b.const(0), b.const(1), b.const(dh)
        base = b.w.fresh("base")
        b.emit(f"{base} = arith.muli {j}, {cdh} : index")
        zero = _f32_const(b, 0.0, "zero")
        acc, k, acc_in = b.w.fresh("acc"), b.w.fresh("k"), b.w.fresh("acc_in")
        b.emit(
            f"{acc} = scf.for {k} = {c0} to {cdh} step {c1} "
            f"iter_args({acc_in} = {zero}) -> (f32) {{"
        )
        b.indent += 2
        col = b.w.fresh("col")
        b.emit(f"{col} = arith.addi {base}, {k} : index")
        xv, yv = b.load(ops, "x", xr, col), b.load(ops, "y", yr, col)
        s = _arith(b, "addf", acc_in, _arith(b, "mulf", xv, yv))
        b.emit(f"scf.yield {s} : f32")
        b.close()
        v = acc
    else:
        v = b.load(ops, "x", xr, j)
        if fn == "copy":
            pass
        elif fn == "scale":
            dx, dy_ = width(ops.values["x"]), width(ops.values["y"])
            col = b.const(0)
            if dy_ > 1:
                col = b.w.fresh("head")
                b.emit(f"{col} = arith.divui {j}, {b.const(dx // dy_)} : index")
            v = _arith(b, "mulf", v, b.load(ops, "y", yr, col), hint="scaled")
        elif fn == "add_bias":
            v = _arith(b, "addf", v, b.load(ops, "y", j), hint="added")
        elif fn in ("add", "mul", "sub", "div", "exp_sub"):
            y = b.load(ops, "y", yr, j)
            name = {"add": "addf", "mul": "mulf", "div": "divf"}.get(fn, "subf")
            v = _arith(b, name, v, y)
            if fn == "exp_sub":
                v = _exp(b, v)
        elif fn.endswith("_grad"):
            v = grad_value(b, fn, v, b.load(ops, "y", yr, j), slope)
        else:
            v = unary_value(b, fn, v, slope)
    if reduce == "none":
        b.store(ops, "out", v, i, j)
    elif reduce == "max":
        assert d is not None
        if atomic:
            old = b.w.fresh("old")
            b.emit(
                f"{old} = memref.atomic_rmw maximumf {v}, {ops.names['out']}[{d}, {j}] "
                f": (f32, {ops.types['out']}) -> f32"
            )
        else:
            cur = b.load(ops, "out", d, j)
            b.store(ops, "out", _arith(b, "maximumf", cur, v), d, j)
    else:
        idx = (d, j) if d is not None else (j,)
        b.accumulate(ops, "out", v, atomic, *idx)


def block_size(op: ir.Operation) -> int:
    """The template's threads-per-block schedule."""
    return int_attr(op, "block_size")
