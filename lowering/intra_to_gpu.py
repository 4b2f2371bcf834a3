"""``convert-hector-intra-to-gpu``: one GPU kernel per template, launched from the host function.

Each template becomes a ``gpu.func`` kernel in the module ``@hector_kernels`` (named
``<function>_<n>_<template>``) and a ``gpu.launch_func`` in the host function:

* ``gemm_template``: one thread per ``(row, column tile)``; a thread computes ``tile_n``
  output columns of its row, each a ``k``-loop dot product, and writes them with the epilogue
  (``add`` with a scatter index becomes an atomic add, since rows may collide);
* ``traversal_template``: one thread per ``(row, column)`` element; ``sum`` reductions become
  atomic adds (``memref.atomic_rmw addf``); with ``align = "warp128"`` one warp per row, reading
  ``x`` in aligned 128-byte segments (:func:`_warp128_columns`, the zero-copy gather mapping);
* the grid is ``ceil(threads / block_size)`` blocks of ``block_size`` threads, computed on the
  host from the runtime row count.

Host buffers move to the device API: ``memref.alloc``/``dealloc`` → ``gpu.alloc``/``dealloc``,
``linalg.fill`` → ``gpu.memset``, ``memref.copy`` → ``gpu.memcpy``. The kernels then go through
upstream ``nvvm-attach-target``, ``convert-gpu-to-nvvm`` and ``gpu-module-to-binary`` to PTX.
"""

from __future__ import annotations

from mlir import ir

from ..passes._registry import PassFailure, register_pass
from . import _emit
from . import _templates as T
from ._emit import Writer
from .intra_to_scf import header

KERNEL_MODULE = "hector_kernels"


class _Kernels:
    def __init__(self) -> None:
        self.texts: list[str] = []

    def module(self) -> str:
        body = "\n".join(self.texts)
        return f"gpu.module @{KERNEL_MODULE} {{\n{body}\n}}"


def _kernel(
    kernels: _Kernels, name: str, op: ir.Operation, ops: T.Operands, roles: tuple[str, ...]
) -> tuple[Writer, T.Operands, str]:
    """Open a kernel whose arguments are the op's operands; returns (writer, operands, tid)."""
    kw = Writer()
    args = []
    knames: dict[str, str] = {}
    for role in roles:
        if ops.has(role):
            knames[role] = f"%{role}"
            args.append(f"%{role}: {ops.types[role]}")
    kops = T.Operands(knames, dict(ops.types), dict(ops.values))
    kw.lines.append(f"  gpu.func @{name}({', '.join(args)}) kernel {{")
    bid, bdim, tid, base, gid = (kw.fresh(h) for h in ("bid", "bdim", "tid", "base", "gid"))
    kw.emit(f"{bid} = gpu.block_id x", 4)
    kw.emit(f"{bdim} = gpu.block_dim x", 4)
    kw.emit(f"{tid} = gpu.thread_id x", 4)
    kw.emit(f"{base} = arith.muli {bid}, {bdim} : index", 4)
    kw.emit(f"{gid} = arith.addi {base}, {tid} : index", 4)
    return kw, kops, gid


def _finish(kw: Writer, kernels: _Kernels) -> None:
    """Close a kernel opened by :func:`_kernel` and add it to the module."""
    kw.emit("gpu.return", 4)
    kw.lines.append("  }")
    kernels.texts.append("\n".join(kw.lines))


def _launch(w: Writer, kernel: str, ops: T.Operands, roles, threads: str, bs: int) -> None:
    c1 = w.const_index(1)
    cbs = w.const_index(bs)
    cbs1 = w.const_index(bs - 1)
    padded, grid = w.fresh("padded"), w.fresh("grid")
    w.emit(f"{padded} = arith.addi {threads}, {cbs1} : index")
    w.emit(f"{grid} = arith.divui {padded}, {cbs} : index")
    args = ", ".join(f"{ops.names[r]} : {ops.types[r]}" for r in roles if ops.has(r))
    w.emit(
        f"gpu.launch_func @{KERNEL_MODULE}::@{kernel} blocks in ({grid}, {c1}, {c1}) "
        f"threads in ({cbs}, {c1}, {c1}) args({args})"
    )


def _gemm_xty(op: ir.Operation, w: Writer, kernels: _Kernels, kname: str) -> None:
    """Weight gradient: one thread per ``(k, n)`` weight element walks every row and adds into
    ``out[type(row), k, n]``; a thread owns its ``(k, n)`` for all types, so no atomics."""
    ops = T.operands(op, T.GEMM_OPERANDS, w)
    k, n = T.static_dim(ops.values["a"], 1), T.width(ops.values["weight"])
    threads = w.const_index(k * n)
    _launch(w, kname, ops, T.GEMM_OPERANDS, threads, T.block_size(op))
    kw, kops, gid = _kernel(kernels, kname, op, ops, T.GEMM_OPERANDS)
    b = T.Body(kw, 4)
    kc0, kc1 = b.const(0), b.const(1)
    km = T.gemm_rows(op, kops, kw, kc0)
    cn, ckn = b.const(n), b.const(k * n)
    kk, j, ok = kw.fresh("k"), kw.fresh("j"), kw.fresh("ok")
    b.emit(f"{kk} = arith.divui {gid}, {cn} : index")
    b.emit(f"{j} = arith.remui {gid}, {cn} : index")
    b.emit(f"{ok} = arith.cmpi ult, {gid}, {ckn} : index")
    b.emit(f"scf.if {ok} {{")
    b.indent += 2
    i = b.open_for(kc0, km, kc1, "i")
    r, t, _ = T.gemm_row_prologue(b, kops, i, T.slice_rows(op))
    av, gv, p = b.load(kops, "a", r, kk), b.load(kops, "weight", i, j), kw.fresh("p")
    b.emit(f"{p} = arith.mulf {av}, {gv} : f32")
    b.accumulate(kops, "out", p, False, *([t] if t is not None else []), kk, j)
    b.close()
    b.close()
    _finish(kw, kernels)


def _gemm(op: ir.Operation, w: Writer, kernels: _Kernels, kname: str) -> None:
    variant = _emit.str_attr(op, "variant")
    if variant == "xty":
        _gemm_xty(op, w, kernels, kname)
        return
    ops = T.operands(op, T.GEMM_OPERANDS, w)
    n = T.static_dim(ops.values["out"], 1)
    k = T.static_dim(ops.values["a"], 1)
    tile = max(1, min(_emit.int_attr(op, "tile_n"), n))
    ntiles = (n + tile - 1) // tile
    epilogue = _emit.str_attr(op, "epilogue")
    if epilogue == "add" and ops.has("scatter_index"):
        epilogue = "atomic_add"
    # host side: threads = M * ntiles
    c0 = w.const_index(0)
    m = T.gemm_rows(op, ops, w, c0)
    cnt, threads = w.const_index(ntiles), w.fresh("threads")
    w.emit(f"{threads} = arith.muli {m}, {cnt} : index")
    _launch(w, kname, ops, T.GEMM_OPERANDS, threads, T.block_size(op))
    # device side
    kw, kops, gid = _kernel(kernels, kname, op, ops, T.GEMM_OPERANDS)
    b = T.Body(kw, 4)
    kc0 = b.const(0)
    role = next((r for r in ("gather_index", "weight_index") if kops.has(r)), "a")
    km = kw.fresh("m")
    b.emit(f"{km} = memref.dim {kops.names[role]}, {kc0} : {kops.types[role]}")
    ct = b.const(ntiles)
    i, jt, ok = kw.fresh("i"), kw.fresh("jt"), kw.fresh("ok")
    b.emit(f"{i} = arith.divui {gid}, {ct} : index")
    b.emit(f"{jt} = arith.remui {gid}, {ct} : index")
    b.emit(f"{ok} = arith.cmpi ult, {i}, {km} : index")
    b.emit(f"scf.if {ok} {{")
    b.indent += 2
    r, t, o = T.gemm_row_prologue(b, kops, i, T.slice_rows(op))
    scale = T.gemm_row_scale(b, kops, i)
    ctile, cn = b.const(tile), b.const(n)
    j0 = kw.fresh("j0")
    b.emit(f"{j0} = arith.muli {jt}, {ctile} : index")
    for jj in range(tile):
        j = kw.fresh("j")
        cjj = b.const(jj)
        b.emit(f"{j} = arith.addi {j0}, {cjj} : index")
        if n % tile:
            inb = kw.fresh("inb")
            b.emit(f"{inb} = arith.cmpi ult, {j}, {cn} : index")
            b.emit(f"scf.if {inb} {{")
            b.indent += 2
        T.gemm_element(b, kops, r, t, o, j, k, epilogue, transposed=variant == "xwt", scale=scale)
        if n % tile:
            b.close()
    b.close()
    _finish(kw, kernels)


ALIGN_MODES = ("none", "warp128")
WARP = 32


def traversal_align(op: ir.Operation) -> str:
    """A traversal's optional ``align`` attribute (default ``"none"``), validated."""
    if "align" not in op.attributes:
        return "none"
    attr = op.attributes["align"]
    value = ir.StringAttr(attr).value if isinstance(attr, ir.StringAttr) else None
    if value not in ALIGN_MODES:
        raise PassFailure(f'align must be "none" or "warp128", got {attr}', op.location)
    return value


def _warp128_columns(b: T.Body, kops: T.Operands, xr: str, lane: str, d: int) -> str:
    """The aligned thread→element mapping (``align = "warp128"``, see
    ``passes/request_model.py``): one warp per row, lane ``lane`` of step ``k`` reads element
    ``32k + lane - s`` of the row, where ``s`` is the row's misalignment in floats,
    ``(address(x[xr, 0]) / 4) mod 32``. Every step then reads one aligned 128-byte segment.
    Opens the step loop and the in-row guard (two regions the caller closes) and returns the
    element index."""
    kw = b.w
    x, xt = kops.names["x"], kops.types["x"]
    ptr, words, rowstart, addr, shift = (kw.fresh(h) for h in ("ptr", "words", "rs", "a", "s"))
    c4, cw, cw1, cd = b.const(4), b.const(WARP), b.const(WARP - 1), b.const(d)
    b.emit(f"{ptr} = memref.extract_aligned_pointer_as_index {x} : {xt} -> index")
    b.emit(f"{words} = arith.divui {ptr}, {c4} : index")
    b.emit(f"{rowstart} = arith.muli {xr}, {cd} : index")
    b.emit(f"{addr} = arith.addi {words}, {rowstart} : index")
    b.emit(f"{shift} = arith.remui {addr}, {cw} : index")
    span, padded, steps = kw.fresh("span"), kw.fresh("padded"), kw.fresh("steps")
    b.emit(f"{span} = arith.addi {shift}, {cd} : index")
    b.emit(f"{padded} = arith.addi {span}, {cw1} : index")
    b.emit(f"{steps} = arith.divui {padded}, {cw} : index")
    k = b.open_for(b.const(0), steps, b.const(1), "step")
    base, e0, e = kw.fresh("sbase"), kw.fresh("e0"), kw.fresh("e")
    after, inrow, ok = kw.fresh("after"), kw.fresh("inrow"), kw.fresh("inb")
    b.emit(f"{base} = arith.muli {k}, {cw} : index")
    b.emit(f"{e0} = arith.addi {base}, {lane} : index")
    b.emit(f"{after} = arith.cmpi uge, {e0}, {shift} : index")
    b.emit(f"{e} = arith.subi {e0}, {shift} : index")
    b.emit(f"{inrow} = arith.cmpi ult, {e}, {cd} : index")
    b.emit(f"{ok} = arith.andi {after}, {inrow} : i1")
    b.emit(f"scf.if {ok} {{")
    b.indent += 2
    return e


def _traversal_warp128(op: ir.Operation, w: Writer, kernels: _Kernels, kname: str) -> None:
    """A traversal with ``align = "warp128"``: one warp (32 threads) per row, each warp reading
    its row of ``x`` in aligned 128-byte segments (the zero-copy gather kernel)."""
    ops = T.operands(op, T.TRAVERSAL_OPERANDS, w)
    d = T.width(ops.values["out"])
    if T.width(ops.values["x"]) != d or _emit.str_attr(op, "fn") == "dot":
        raise PassFailure(
            'align = "warp128" needs an elementwise row function with x and out of the same '
            "width (element j of out reads element j of x)",
            op.location,
        )
    bs = T.block_size(op)
    if bs % WARP:
        raise PassFailure(
            f'align = "warp128" needs a block_size that is a multiple of {WARP}, got {bs}',
            op.location,
        )
    c0 = w.const_index(0)
    m = T.traversal_rows(ops, w, c0)
    cw, threads = w.const_index(WARP), w.fresh("threads")
    w.emit(f"{threads} = arith.muli {m}, {cw} : index")
    _launch(w, kname, ops, T.TRAVERSAL_OPERANDS, threads, bs)
    kw, kops, gid = _kernel(kernels, kname, op, ops, T.TRAVERSAL_OPERANDS)
    b = T.Body(kw, 4)
    km = T.traversal_rows(kops, kw, b.const(0))
    ckw = b.const(WARP)
    i, lane, ok = kw.fresh("i"), kw.fresh("lane"), kw.fresh("ok")
    b.emit(f"{i} = arith.divui {gid}, {ckw} : index")
    b.emit(f"{lane} = arith.remui {gid}, {ckw} : index")
    b.emit(f"{ok} = arith.cmpi ult, {i}, {km} : index")
    b.emit(f"scf.if {ok} {{")
    b.indent += 2
    xr, yr, dst = T.row_indices(b, kops, i)
    j = _warp128_columns(b, kops, xr, lane, d)
    T.traversal_element(b, op, kops, i, xr, yr, dst, j, atomic=True)
    b.close()
    b.close()
    b.close()
    _finish(kw, kernels)


def _traversal(op: ir.Operation, w: Writer, kernels: _Kernels, kname: str) -> None:
    if traversal_align(op) == "warp128":
        _traversal_warp128(op, w, kernels, kname)
        return
    ops = T.operands(op, T.TRAVERSAL_OPERANDS, w)
    d = T.width(ops.values["out"])
    c0 = w.const_index(0)
    m = T.traversal_rows(ops, w, c0)
    cd, threads = w.const_index(d), w.fresh("threads")
    w.emit(f"{threads} = arith.muli {m}, {cd} : index")
    _launch(w, kname, ops, T.TRAVERSAL_OPERANDS, threads, T.block_size(op))
    kw, kops, gid = _kernel(kernels, kname, op, ops, T.TRAVERSAL_OPERANDS)
    b = T.Body(kw, 4)
    kc0 = b.const(0)
    km = T.traversal_rows(kops, kw, kc0)
    ckd = b.const(d)
    i, j, ok = kw.fresh("i"), kw.fresh("j"), kw.fresh("ok")
    b.emit(f"{i} = arith.divui {gid}, {ckd} : index")
    b.emit(f"{j} = arith.remui {gid}, {ckd} : index")
    b.emit(f"{ok} = arith.cmpi ult, {i}, {km} : index")
    b.emit(f"scf.if {ok} {{")
    b.indent += 2
    xr, yr, dst = T.row_indices(b, kops, i)
    T.traversal_element(b, op, kops, i, xr, yr, dst, j, atomic=True)
    b.close()
    _finish(kw, kernels)


def _host_op(op: ir.Operation, w: Writer) -> bool:
    """Move host buffer ops to the GPU API; False when the op is kept as it is."""
    name = op.name
    if name == "memref.alloc":
        sizes = ", ".join(w.name(v) for v in op.operands)
        w.emit(f"{w.name(op.results[0])} = gpu.alloc ({sizes}) : {op.results[0].type}")
    elif name == "memref.dealloc":
        v = op.operands[0]
        w.emit(f"gpu.dealloc {w.name(v)} : {v.type}")
    elif name == "linalg.fill":
        value, out = op.operands[0], op.operands[1]
        w.emit(f"gpu.memset {w.name(out)}, {w.name(value)} : {out.type}, {value.type}")
    elif name == "memref.copy":
        src, dst = op.operands[0], op.operands[1]
        w.emit(f"gpu.memcpy {w.name(dst)}, {w.name(src)} : {dst.type}, {src.type}")
    else:
        return False
    return True


def run_module(module_op: ir.Operation) -> None:
    """Convert every function with templates; add the kernel module when any was made."""
    kernels = _Kernels()

    def convert(func: ir.Operation) -> str | None:
        ops = _emit.body_ops(func)
        if "hector.outputs" not in func.attributes and not any(
            op.name.startswith("hector_intra.") for op in ops
        ):
            return None
        sym = ir.StringAttr(func.attributes["sym_name"]).value
        w = Writer(ir.AsmState(func))
        for n, op in enumerate(ops):
            if op.name == "hector_intra.gemm_template":
                _gemm(op, w, kernels, f"{sym}_{n}_gemm")
            elif op.name == "hector_intra.traversal_template":
                _traversal(op, w, kernels, f"{sym}_{n}_traversal")
            elif not _host_op(op, w):
                w.print_op(op)
        return "\n".join([header(func, w), *w.lines, "}"])

    for op in module_op.regions[0].blocks[0].operations:
        if op.operation.name == "gpu.module":
            raise PassFailure(
                "the module already holds a gpu.module; run this conversion once", op.location
            )
    _emit.rebuild(
        module_op,
        convert,
        extra=lambda: kernels.module() if kernels.texts else "",
        attrs="gpu.container_module",
    )


@register_pass(
    "convert-hector-intra-to-gpu",
    "Lower hector_intra templates to one gpu.func kernel each plus host gpu.launch_func calls",
)
def run(module_op: ir.Operation) -> None:
    """Pass entry point."""
    run_module(module_op)
