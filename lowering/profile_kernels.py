"""``hector-profile-kernels``: time every ``hector_intra`` template, for roofline reports.

The pass runs on ``hector_intra`` IR, before any back end lowers the templates, so it does not
depend on how a template becomes loops (scalar nests, tiled and vectorised, parallel): each
template is bracketed by two calls to ``rtclock()`` (MLIR's ``libmlir_c_runner_utils.so``, wall
seconds as ``f64``), and the difference, the template's dynamic row count ``M`` and a call count
are added to its row of one module-level buffer::

    memref.global @__hector_kernel_profile : memref<T x 3 x f64>   // seconds, rows, calls

A generated function ``@__hector_kernel_profile_take(memref<T x 3 x f64>)`` (C interface)
copies the buffer out and zeroes it. What the run-time counters cannot say — which template a
row is, its variant, its static widths ``K``/``N`` — is the module attribute
``hector.kernel_profile``: one dictionary per template, in buffer order. :func:`read_kernels`
reads it back as :class:`KernelInfo`, whose :meth:`KernelInfo.flops` and
:meth:`KernelInfo.bytes` give a template's nominal work for a row count (formulas in
``docs/benchmarks.md``, "Roofline").

Profiling costs two clock reads and three read-modify-writes of the buffer per template call,
and nothing when the pass does not run (it is off unless asked for: ``Options(profile=True)``
or ``HECTOR_PROFILE_KERNELS=1``). The counters are plain loads and stores: two threads calling
the same compiled module at once would race on them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, func, memref, scf

from ..dialects import hector_intra as intra
from ..dialects.builders import OpAccess
from ..passes.registry import PassFailure, register_pass
from ..passes.walk import walk_ops
from .schedule import bf16_inputs

#: The module-level counter buffer, its reader and the clock the timers call.
BUFFER = "__hector_kernel_profile"
TAKE = "__hector_kernel_profile_take"
CLOCK = "rtclock"
#: The pass's name, and the variable that turns it on for every CPU compilation.
PASS, ENV = "hector-profile-kernels", "HECTOR_PROFILE_KERNELS"
#: The module attribute holding one dictionary per profiled template, in buffer order.
ATTRIBUTE = "hector.kernel_profile"
#: The counters of one template, in buffer column order.
COUNTERS: tuple[str, ...] = ("seconds", "rows", "calls", "min_seconds")
#: The library that defines ``rtclock`` (under ``site-packages/mlir/lib``).
CLOCK_LIBRARY = "libmlir_c_runner_utils.so"

_GEMM = "hector_intra.gemm_template"
_TRAVERSAL = "hector_intra.traversal_template"
# The operand whose length is a template's row count M, first present first (the templates'
# spec: "M is the length of the first index operand present, else a's row count" for the GEMM,
# "gather_index's length, else x's row count" for the traversal).
_ROWS_FROM = {
    _GEMM: ("gather_index", "weight_index", "a"),
    _TRAVERSAL: ("gather_index", "x"),
}
# Optional per-row operands that cost one i32 (or f32) read per row.
_PER_ROW = {
    _GEMM: ("gather_index", "weight_index", "scatter_index", "row_scale"),
    _TRAVERSAL: ("gather_index", "scatter_index", "y_index"),
}
# Nominal floating-point operations per output element of a traversal's row function (``dot``
# is counted from its widths instead); a reduction adds one more.
_FN_FLOPS = {"copy": 0, "exp_sub": 2, **{f: 2 for f in intra.GRAD_FNS}}


@dataclass(frozen=True)
class KernelInfo:
    """One profiled template: where it is, what it computes and its static widths.

    ``template`` is ``gemm`` or ``traversal``; ``variant`` the GEMM's ``variant`` (``xw``,
    ``xwt``, ``xty``) or the traversal's ``fn``; ``combine`` the GEMM's ``epilogue`` or the
    traversal's ``reduce``. ``k`` and ``n`` are the GEMM's reduction and output widths (the
    traversal's ``x`` and ``out`` widths); ``y_width`` the traversal's ``y`` width (0 without
    ``y``). ``per_row`` names the optional per-row operands present. ``fixed_elems``: elements
    touched once per call whatever ``M`` is (a GEMM's weight, or an ``xty`` output; a
    traversal's bias vector or unscattered sum). ``dtype``: the PyTorch type a GEMM's operands
    take (``bfloat16`` where an operand, or an argument of its function, is stored in bf16, as
    ``hector-schedule`` chooses bf16 products; else ``float32``), the type its ``torch.mm``
    reference is timed in.
    """

    index: int
    function: str
    template: str
    variant: str
    combine: str
    k: int
    n: int
    y_width: int
    per_row: tuple[str, ...]
    fixed_elems: int
    source: str
    dtype: str = "float32"

    @property
    def name(self) -> str:
        """A short label: ``<function>#<index> <template> <variant>``."""
        return f"{self.function}#{self.index} {self.template} {self.variant}"

    @property
    def is_gemm(self) -> bool:
        """Whether this is a GEMM template (compared with ``torch.mm``)."""
        return self.template == "gemm"

    def flops(self, rows: float) -> float:
        """Nominal floating-point operations of one call over ``rows`` rows: ``2·M·K·N`` for a
        GEMM; per output element, the row function's operations (``dot``: ``2·K/N``) plus one
        for a reduction, for a traversal."""
        if self.is_gemm:
            return 2.0 * rows * self.k * self.n
        per_elem = (
            2.0 * self.k / self.n if self.variant == "dot" else _FN_FLOPS.get(self.variant, 1)
        )
        if self.combine != "none":
            per_elem += 1
        return rows * self.n * per_elem

    def bytes(self, rows: float) -> float:
        """Compulsory bytes of one call over ``rows`` rows (f32 / i32 elements, 4 bytes): every
        row's reads (its ``K``-wide input row, gathered rows counted each time, its index and
        scale entries, a traversal's ``y`` row) and output traffic (a write, or a read and a
        write when accumulating), plus the ``fixed_elems`` read once (and written back when
        they are an accumulated output). Caches can only lower the real traffic of gathered
        rows; so can fusion of the row loops, never below this for the rows themselves."""
        per_row = len(self.per_row) + self.k
        fixed = self.fixed_elems
        if self.is_gemm:
            if self.variant == "xty":
                per_row += self.n  # the gradient row; the [R, K, N] output is read and written
                fixed *= 2
            else:
                per_row += self.n * (1 if self.combine == "store" else 2)
        else:
            if self.variant != "add_bias":
                per_row += self.y_width
            if self.combine == "none":
                per_row += self.n
            elif "scatter_index" in self.per_row:
                per_row += 2 * self.n
            else:
                fixed += 2 * self.n  # an unscattered sum: one output row
        return 4.0 * (rows * per_row + fixed)


# ---- the pass ---------------------------------------------------------------------------------


def _templates(region_holder: ir.Operation) -> Iterator[ir.Operation]:
    """Every template nested in ``region_holder``, in program order (not inside templates)."""
    for op in walk_ops(region_holder, into=lambda op: op.name not in _ROWS_FROM):
        if op.name in _ROWS_FROM:
            yield op


def _static(value: ir.Value, dim: int, role: str, op: ir.Operation) -> int:
    shape = ir.ShapedType(value.type)
    if dim >= shape.rank or shape.is_dynamic_dim(dim):
        raise PassFailure(
            f"cannot profile {op.name}: dimension {dim} of '{role}' ({value.type}) must be "
            "static to count its work",
            op.location,
        )
    return shape.get_dim_size(dim)


def _elements(value: ir.Value, role: str, op: ir.Operation) -> int:
    shape = ir.ShapedType(value.type)
    count = 1
    for d in range(shape.rank):
        count *= _static(value, d, role, op)
    return count


def _last(value: ir.Value, role: str, op: ir.Operation) -> int:
    return _static(value, ir.ShapedType(value.type).rank - 1, role, op)


def _source(loc: ir.Location) -> str:
    """``file:line:col`` of the first file location in ``loc`` (the printed form otherwise)."""
    text = str(loc)
    found = re.search(r'"((?:[^"\\]|\\.)*)":(\d+):(\d+)', text)
    return f"{found[1]}:{found[2]}:{found[3]}" if found else text


def _info(index: int, function: str, v: OpAccess) -> KernelInfo:
    """The static description of template ``v`` (its widths checked static)."""
    op = v.op
    per_row = tuple(r for r in _PER_ROW[op.name] if v.has(r))
    source = _source(op.location)
    if op.name == _GEMM:
        variant = v.attr("variant")
        k = _last(v.operand("a"), "a", op)
        if variant == "xty":
            n = _last(v.operand("weight"), "weight", op)
            fixed = _elements(v.operand("out"), "out", op)
        else:
            n = _last(v.operand("out"), "out", op)
            fixed = _elements(v.operand("weight"), "weight", op)
        stored = [ir.MemRefType(v.operand(r).type).element_type for r in ("a", "weight")]
        bf16 = bf16_inputs(op) or any(isinstance(t, ir.BF16Type) for t in stored)
        return KernelInfo(
            index,
            function,
            "gemm",
            variant,
            v.attr("epilogue"),
            k,
            n,
            0,
            per_row,
            fixed,
            source,
            "bfloat16" if bf16 else "float32",
        )
    fn, reduce = v.attr("fn"), v.attr("reduce")
    y = v.operand("y")
    y_width = _last(y, "y", op) if y is not None else 0
    fixed = y_width if fn == "add_bias" else 0
    x_width, out_width = _last(v.operand("x"), "x", op), _last(v.operand("out"), "out", op)
    return KernelInfo(
        index,
        function,
        "traversal",
        fn,
        reduce,
        x_width,
        out_width,
        y_width,
        per_row,
        fixed,
        source,
    )


def _int(value: int) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)


def _metadata(k: KernelInfo) -> ir.DictAttr:
    """``k`` as the dictionary the module attribute holds (read back by :func:`read_kernels`;
    ``dtype`` only where it is not ``float32``)."""
    dtype = {} if k.dtype == "float32" else {"dtype": ir.StringAttr.get(k.dtype)}
    return ir.DictAttr.get(
        {
            **dtype,
            "function": ir.StringAttr.get(k.function),
            "template": ir.StringAttr.get(k.template),
            "variant": ir.StringAttr.get(k.variant),
            "combine": ir.StringAttr.get(k.combine),
            "k": _int(k.k),
            "n": _int(k.n),
            "y_width": _int(k.y_width),
            "per_row": ir.ArrayAttr.get([ir.StringAttr.get(r) for r in k.per_row]),
            "fixed_elems": _int(k.fixed_elems),
            "source": ir.StringAttr.get(k.source),
        }
    )


def read_kernels(module_op: ir.Operation) -> list[KernelInfo]:
    """The profiled templates of a module the pass ran on, in buffer order (``[]`` when it did
    not run or found no template)."""
    if ATTRIBUTE not in module_op.attributes:
        return []
    out = []
    for i, entry in enumerate(ir.ArrayAttr(module_op.attributes[ATTRIBUTE])):
        d = ir.DictAttr(entry)

        def text(key: str, d: ir.DictAttr = d) -> str:
            return ir.StringAttr(d[key]).value

        def number(key: str, d: ir.DictAttr = d) -> int:
            return ir.IntegerAttr(d[key]).value

        out.append(
            KernelInfo(
                i,
                text("function"),
                text("template"),
                text("variant"),
                text("combine"),
                number("k"),
                number("n"),
                number("y_width"),
                tuple(ir.StringAttr(r).value for r in ir.ArrayAttr(d["per_row"])),
                number("fixed_elems"),
                text("source"),
                text("dtype") if "dtype" in d else "float32",
            )
        )
    return out


def _buffer_type(count: int) -> ir.MemRefType:
    return ir.MemRefType.get([count, len(COUNTERS)], ir.F64Type.get())


def _rows(v: OpAccess) -> ir.Value:
    """The template's row count ``M`` as an ``f64``, computed before it runs."""
    role = next(r for r in _ROWS_FROM[v.op.name] if v.has(r))
    dim = memref.dim(v.operand(role), arith.constant(ir.IndexType.get(), 0))
    as_int = arith.index_cast(ir.IntegerType.get_signless(64), dim)
    return arith.uitofp(ir.F64Type.get(), as_int)


def _add(buffer: ir.Value, row: ir.Value, column: int, value: ir.Value) -> ir.Value:
    """``buffer[row, column] += value``; returns the value it held before."""
    col = arith.constant(ir.IndexType.get(), column)
    old = memref.load(buffer, [row, col])
    memref.store(arith.addf(old, value), buffer, [row, col])
    return old


def _least(
    buffer: ir.Value, row: ir.Value, column: int, value: ir.Value, calls_before: ir.Value
) -> None:
    """``buffer[row, column] = value`` on the first call (``calls_before == 0``), else the
    minimum of the two."""
    col = arith.constant(ir.IndexType.get(), column)
    old = memref.load(buffer, [row, col])
    first = arith.cmpf(arith.CmpFPredicate.OEQ, calls_before, arith.constant(ir.F64Type.get(), 0.0))
    least = arith.select(first, value, arith.minimumf(old, value))
    memref.store(least, buffer, [row, col])


def _wrap(index: int, v: OpAccess, count: int) -> None:
    """Bracket one template with clock reads and add its counters to row ``index``."""
    op = v.op
    f64 = ir.F64Type.get()
    with op.location, ir.InsertionPoint(op):
        rows = _rows(v)
        start = func.call([f64], CLOCK, [])
    after = ir.InsertionPoint.after(op)
    with op.location, after:
        stop = func.call([f64], CLOCK, [])
        buffer = memref.get_global(_buffer_type(count), BUFFER)
        row = arith.constant(ir.IndexType.get(), index)
        elapsed = arith.subf(stop, start)
        _least(buffer, row, 3, elapsed, _add(buffer, row, 2, arith.constant(f64, 1.0)))
        _add(buffer, row, 0, elapsed)
        _add(buffer, row, 1, rows)


def _symbols(module_op: ir.Operation) -> dict[str, ir.Operation]:
    out = {}
    for op in module_op.regions[0].blocks[0].operations:
        op = op.operation
        if "sym_name" in op.attributes:
            out[ir.StringAttr(op.attributes["sym_name"]).value] = op
    return out


def _declare(module_op: ir.Operation, count: int, symbols: dict[str, ir.Operation]) -> None:
    """The counter buffer, the clock's declaration (unless the module has it) and the reader."""
    f64 = ir.F64Type.get()
    clock_type = ir.FunctionType.get([], [f64])
    body = module_op.regions[0].blocks[0]
    with ir.Location.unknown(), ir.InsertionPoint.at_block_begin(body):
        zeros = ir.DenseElementsAttr.get_splat(
            ir.RankedTensorType.get([count, len(COUNTERS)], f64), ir.FloatAttr.get(f64, 0.0)
        )
        # Public, so the JIT keeps it whatever LLVM's optimizer sees of its uses.
        memref.global_(BUFFER, ir.TypeAttr.get(_buffer_type(count)), initial_value=zeros)
        if CLOCK not in symbols:
            func.FuncOp(CLOCK, clock_type, visibility="private")
        take = func.FuncOp(TAKE, ir.FunctionType.get([_buffer_type(count)], []))
        take.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
        with ir.InsertionPoint(take.add_entry_block()):
            buffer = memref.get_global(_buffer_type(count), BUFFER)
            memref.copy(buffer, take.arguments[0])
            index = ir.IndexType.get()
            c0, c1 = arith.constant(index, 0), arith.constant(index, 1)
            zero = arith.constant(f64, 0.0)
            loop = scf.ForOp(c0, arith.constant(index, count), c1)
            with ir.InsertionPoint(loop.body):
                for column in range(len(COUNTERS)):
                    col = arith.constant(index, column)
                    memref.store(zero, buffer, [loop.induction_variable, col])
                scf.yield_([])
            func.return_([])


def _check_symbols(module_op: ir.Operation, symbols: dict[str, ir.Operation]) -> None:
    for name in (BUFFER, TAKE):
        if name in symbols:
            raise PassFailure(
                f"the module already defines @{name}: hector-profile-kernels runs once, on "
                "unprofiled hector_intra IR",
                symbols[name].location,
            )
    clock = symbols.get(CLOCK)
    if clock is not None:
        want = ir.FunctionType.get([], [ir.F64Type.get()])
        have = (
            ir.TypeAttr(clock.attributes["function_type"]).value
            if clock.name == "func.func"
            else None
        )
        if have != want or len(clock.regions[0].blocks):
            raise PassFailure(
                f"@{CLOCK} is taken: the timers call MLIR's runner-utils clock, "
                "'func.func private @rtclock() -> f64', and the module defines another",
                clock.location,
            )


@register_pass(
    PASS,
    "Time every hector_intra template with rtclock() into a per-template counter buffer "
    "(seconds, rows, calls), described by the module attribute hector.kernel_profile",
)
def run(module_op: ir.Operation) -> None:
    """Pass entry point."""
    symbols = _symbols(module_op)
    _check_symbols(module_op, symbols)
    found: list[tuple[str, ir.Operation]] = []
    for name, op in symbols.items():
        if op.name == "func.func":
            found += [(name, t) for t in _templates(op)]
    infos = [_info(i, fname, intra.view(t)) for i, (fname, t) in enumerate(found)]
    module_op.attributes[ATTRIBUTE] = ir.ArrayAttr.get([_metadata(k) for k in infos])
    if not found:
        return
    _declare(module_op, len(found), symbols)
    for i, (_, t) in enumerate(found):
        _wrap(i, intra.view(t), len(found))


# ---- reading the counters back ----------------------------------------------------------------


@dataclass(frozen=True)
class KernelTiming:
    """One template's counters since they were last taken: total ``seconds``, total ``rows``,
    ``calls`` and the fastest call's ``min_seconds``. Work per call is at the mean row count;
    rates (:attr:`gflops`, :attr:`gbps`) are of the fastest call, like a best-of-N reference."""

    info: KernelInfo
    seconds: float
    rows: float
    calls: int
    min_seconds: float = 0.0

    @property
    def mean_rows(self) -> float:
        """Rows per call (``M``)."""
        return self.rows / self.calls if self.calls else 0.0

    @property
    def ms(self) -> float:
        """Mean milliseconds per call."""
        return 1e3 * self.seconds / self.calls if self.calls else 0.0

    @property
    def min_ms(self) -> float:
        """Milliseconds of the fastest call."""
        return 1e3 * self.min_seconds

    @property
    def flops(self) -> float:
        """Nominal FLOPs per call (:meth:`KernelInfo.flops`)."""
        return self.info.flops(self.mean_rows)

    @property
    def bytes(self) -> float:
        """Compulsory bytes per call (:meth:`KernelInfo.bytes`)."""
        return self.info.bytes(self.mean_rows)

    @property
    def gflops(self) -> float | None:
        """GFLOP/s of the fastest call (None when it never ran or took no measurable time)."""
        return self.flops / self.min_seconds / 1e9 if self.min_seconds > 0 else None

    @property
    def gbps(self) -> float | None:
        """GB/s of compulsory traffic of the fastest call (None when not measurable)."""
        return self.bytes / self.min_seconds / 1e9 if self.min_seconds > 0 else None


def take(kernel: object, infos: list[KernelInfo]) -> list[KernelTiming]:
    """Read and zero the counters of a JIT-compiled profiled module (``kernel``: a
    :class:`hector.lowering.cpu.jit.CpuKernel`; ``infos``: :func:`read_kernels` of its module)."""
    import numpy as np

    if not infos:
        return []
    counters = np.zeros((len(infos), len(COUNTERS)), dtype=np.float64)
    kernel(TAKE, counters)  # type: ignore[operator]
    return [
        KernelTiming(k, float(row[0]), float(row[1]), int(row[2]), float(row[3]))
        for k, row in zip(infos, counters, strict=True)
    ]
