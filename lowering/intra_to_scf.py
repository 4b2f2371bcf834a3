"""``convert-hector-intra-to-scf``: templates to ``scf.for`` loop nests for the CPU.

Each ``gemm_template`` becomes a row loop whose body walks ``k`` then ``j`` (contiguous weight
and output rows, which LLVM vectorises); each ``traversal_template`` becomes a row loop with an
inner column loop. Reductions accumulate sequentially (``atomic_sum`` needs no atomics on one
thread). Functions gain ``llvm.emit_c_interface`` so the CPU JIT can call them with memref
descriptors. Everything else in the function is kept as it is.
"""

from __future__ import annotations

from mlir import ir

from ..passes._registry import register_pass
from . import _emit
from . import _templates as T
from ._emit import Writer


def header(func: ir.Operation, w: Writer, extra_attr: str = "") -> str:
    """``func.func @name(args) attributes {...} {`` with the AsmState's argument names."""
    sym = ir.StringAttr(func.attributes["sym_name"]).value
    block = func.regions[0].blocks[0]
    args = ", ".join(f"{w.name(a)}: {a.type}" for a in block.arguments)
    fty = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    res = ", ".join(str(t) for t in fty.results)
    ret = f" -> ({res})" if fty.results else ""
    attrs = _emit.func_attrs_text(func, drop=(extra_attr.split(" ")[0],), add=extra_attr)
    return f"func.func @{sym}({args}){ret}{attrs} {{"


def _lower_gemm(op: ir.Operation, w: Writer) -> None:
    ops = T.operands(op, T.GEMM_OPERANDS, w)
    c0, c1 = w.const_index(0), w.const_index(1)
    m = T.gemm_rows(op, ops, w, c0)
    variant = _emit.str_attr(op, "variant")
    scratch = None
    if variant == "xw" and _emit.str_attr(op, "epilogue") != "store":
        scratch = w.fresh("scratch")  # one row, reused by every iteration
        w.emit(f"{scratch} = memref.alloca() : memref<{T.width(ops.values['out'])}xf32>")
    b = T.Body(w, 2)
    i = b.open_for(c0, m, c1, "i")
    r, t, o = T.gemm_row_prologue(b, ops, i, T.slice_rows(op))
    scale = T.gemm_row_scale(b, ops, i)
    k_extent = T.static_dim(ops.values["a"], 1)
    n_extent = T.width(ops.values["weight"] if variant == "xty" else ops.values["out"])
    T.gemm_row_cpu(
        b,
        ops,
        r,
        t,
        o,
        k_extent,
        n_extent,
        _emit.str_attr(op, "epilogue"),
        variant,
        i,
        scale,
        scratch,
    )
    b.close()


def _lower_traversal(op: ir.Operation, w: Writer) -> None:
    ops = T.operands(op, T.TRAVERSAL_OPERANDS, w)
    c0, c1 = w.const_index(0), w.const_index(1)
    m = T.traversal_rows(ops, w, c0)
    width = w.const_index(T.width(ops.values["out"]))
    b = T.Body(w, 2)
    i = b.open_for(c0, m, c1, "i")
    xr, yr, d = T.row_indices(b, ops, i)
    j = b.open_for(c0, width, c1, "j")
    T.traversal_element(b, op, ops, i, xr, yr, d, j, atomic=False)
    b.close()
    b.close()


def convert_function(func: ir.Operation) -> str | None:
    """The CPU form of one function, or None when it holds no templates."""
    ops = _emit.body_ops(func)
    if "hector.outputs" not in func.attributes and not any(
        op.name.startswith("hector_intra.") for op in ops
    ):
        return None
    w = Writer(ir.AsmState(func))
    for op in ops:
        if op.name == "hector_intra.gemm_template":
            _lower_gemm(op, w)
        elif op.name == "hector_intra.traversal_template":
            _lower_traversal(op, w)
        else:
            w.print_op(op)
    return "\n".join([header(func, w, "llvm.emit_c_interface"), *w.lines, "}"])


@register_pass(
    "convert-hector-intra-to-scf",
    "Lower hector_intra templates to scf.for loop nests over memrefs (CPU back end)",
)
def run(module_op: ir.Operation) -> None:
    """Pass entry point."""
    _emit.rebuild(module_op, convert_function)
