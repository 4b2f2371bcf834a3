"""``convert-hector-intra-to-gpu``: one GPU kernel per template, launched from the host function.

Each template becomes a ``gpu.func`` kernel in the module ``@hector_kernels`` (named
``<function>_<n>_<template>``, ``n`` the template's position in the function's body) and a
``gpu.launch_func`` in the host function:

* ``gemm_template``: one thread per ``(row, column tile)``; a thread computes ``tile_n``
  output columns of its row, each a ``k``-loop dot product, and writes them with the epilogue
  (``add`` with a scatter index becomes an atomic add, since rows may collide). With a
  ``schedule`` attribute (``xw``/``xwt``) it is the shared-memory tiled kernel of
  ``lowering/gpu/gemm.py`` instead: a block per output tile, gathered rows staged between
  ``gpu.barrier``s; the option ``tile`` gives unscheduled GEMMs the GPU chooser's schedule;
  with the option ``mma`` (a chip with ``mma.sync`` on 16-bit types) a scheduled one on
  bf16/f16 operands is the tensor-core kernel of ``lowering/gpu/mma.py``;
* ``traversal_template``: one thread per ``(row, column)`` element; ``sum`` reductions become
  atomic adds (``memref.atomic_rmw addf``); with ``align = "warp128"`` one warp per row, reading
  ``x`` in aligned 128-byte segments (:func:`_warp128_columns`, the zero-copy gather mapping);
* the grid is ``ceil(threads / block_size)`` blocks of ``block_size`` threads, computed on the
  host from the runtime row count.

Host buffers move to the device API: ``memref.alloc``/``dealloc`` → ``gpu.alloc``/``dealloc``,
``linalg.fill`` → ``gpu.memset``, ``memref.copy`` → ``gpu.memcpy``. The kernels then go through
upstream ``nvvm-attach-target``, ``convert-gpu-to-nvvm`` and ``gpu-module-to-binary`` to PTX.

Everything is rewritten in place through the dialect builders: the launch is built before the
template and the kernel at the end of ``@hector_kernels``, both under the template's location,
then the template is erased.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

from mlir import ir
from mlir.dialects import arith, gpu, memref, scf

from ...dialects import hector_intra as intra
from ...dialects.builders import OpAccess
from ...dialects.hector_intra import ALIGN_MODES
from ...passes.registry import Option, PassFailure, register_pass
from .. import templates as T
from ..cpu.intra_to_scf import functions
from . import gemm as gpu_gemm
from . import mma as gpu_mma
from . import xty as gpu_xty
from .host_emulation import ops_named
from .schedule_choice import gpu_gemm_schedule

KERNEL_MODULE = "hector_kernels"
WARP = 32


class KernelModule:
    """``gpu.module @hector_kernels``, created at the end of the module on first use."""

    def __init__(self, module_op: ir.Operation) -> None:
        self.module_op = module_op
        self._block: ir.Block | None = None

    def block(self) -> ir.Block:
        """The kernel module's body (the module is created on the first call)."""
        if self._block is None:
            with ir.InsertionPoint(self.module_op.regions[0].blocks[0]):
                kmod = gpu.GPUModuleOp(KERNEL_MODULE, loc=self.module_op.location)
            self._block = kmod.regions[0].blocks.append()
        return self._block


@dataclass(frozen=True)
class Template:
    """One template being lowered: its accessors and operands, its kernel's name and the
    kernel module."""

    view: OpAccess
    ops: T.Operands
    name: str
    kernels: KernelModule
    mma: bool = False  # the chip has mma.sync on 16-bit types (sm_80 and newer)

    @property
    def op(self) -> ir.Operation:
        """The template op."""
        return self.view.op

    def block_size(self) -> int:
        """Threads per block (the template's schedule)."""
        return int(self.view.attr("block_size"))


@contextmanager
def _kernel(t: Template) -> Iterator[tuple[T.Body, ir.Value]]:
    """Build a kernel whose arguments are the template's operands inside the ``with``; yields
    its body (operands bound to the kernel's arguments) and the global thread id."""
    ftype = ir.FunctionType.get([value.type for value in t.ops.values.values()], [])
    with ir.InsertionPoint(t.kernels.block()):
        func = gpu.GPUFuncOp(ftype, sym_name=t.name, kernel=True)
    block = func.add_entry_block()
    with ir.InsertionPoint(block):
        bid = gpu.block_id(gpu.Dimension.x)
        bdim = gpu.block_dim(gpu.Dimension.x)
        tid = gpu.thread_id(gpu.Dimension.x)
        gid = arith.addi(arith.muli(bid, bdim), tid)
        yield T.Body(t.ops.rebound(list(block.arguments))), gid
        gpu.return_([])


@contextmanager
def _kernel_with_memory(
    t: Template, wg: list[ir.Type], private: list[ir.Type]
) -> Iterator[tuple[T.Body, list[ir.Value]]]:
    """Like :func:`_kernel`, with shared (workgroup) and private memory attributions of the
    given types; yields the body and the attributions (shared first)."""
    ftype = ir.FunctionType.get([value.type for value in t.ops.values.values()], [])
    with ir.InsertionPoint(t.kernels.block()):
        func = gpu.GPUFuncOp(ftype, sym_name=t.name, kernel=True)
    i64 = ir.IntegerType.get_signless(64)
    func.attributes["workgroup_attributions"] = ir.IntegerAttr.get(i64, len(wg))
    block = func.body.blocks.append(*ftype.inputs, *wg, *private)
    args = list(block.arguments)
    n = len(ftype.inputs)
    with ir.InsertionPoint(block):
        yield T.Body(t.ops.rebound(args[:n])), args[n:]
        gpu.return_([])


@contextmanager
def _tiled_kernel(
    t: Template, tiling: gpu_gemm.GemmTiling
) -> Iterator[tuple[T.Body, gpu_gemm.TileMemory]]:
    """The tiled GEMM's kernel: its attributions bound to their roles."""
    wg, private = gpu_gemm.attribution_types(tiling)
    with _kernel_with_memory(t, wg, private) as (b, mem):
        yield b, gpu_gemm.tile_memory(tiling, mem[: len(wg)], mem[len(wg) :])


def _launch(t: Template, host: T.Body, threads: ir.Value) -> None:
    """Launch ``t``'s kernel on ``ceil(threads / block_size)`` blocks of ``block_size``
    threads."""
    bs = t.block_size()
    c1, cbs, cbs1 = host.index(1), host.index(bs), host.index(bs - 1)
    grid = arith.divui(arith.addi(threads, cbs1), cbs)
    gpu.LaunchFuncOp(
        [KERNEL_MODULE, t.name], (grid, c1, c1), (cbs, c1, c1), list(t.ops.values.values())
    )


def _split(gid: ir.Value, per_row: ir.Value, rows: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """``(gid / per_row, gid mod per_row, gid / per_row < rows)``: a thread's row, its place in
    the row, and whether the row exists."""
    i = arith.divui(gid, per_row)
    rem = arith.remui(gid, per_row)
    return i, rem, arith.cmpi(arith.CmpIPredicate.ult, i, rows)


# ---- GEMM -------------------------------------------------------------------------------------


# The weight gradient's chunking (defined with the tiled kernels, which share it).
XTY_ROWS_PER_CHUNK = gpu_xty.XTY_ROWS_PER_CHUNK
XTY_PARTIAL_BUDGET = gpu_xty.XTY_PARTIAL_BUDGET


def _xty_shape(t: Template) -> tuple[int | None, int, int]:
    """``(slices, k, n)`` of a weight gradient: ``out`` is ``[T, K, N]`` or ``[K, N]``."""
    out = ir.ShapedType(t.ops["out"].type)
    k, n = T.static_dim(t.ops["a"], 1), T.width(t.ops["weight"])
    return (T.static_dim(t.ops["out"], 0) if out.rank == 3 else None), k, n


def _xty_chunks(t: Template, host: T.Body, per_chunk_floats: int) -> ir.Value:
    """How many row chunks the partials have: ``max(1, min(ceil(M / rows_per_chunk),
    budget / per_chunk_floats))`` (at least one, so an empty graph still zeroes ``out``)."""
    m = T.gemm_rows(host, host.index(0))
    rows = host.index(XTY_ROWS_PER_CHUNK)
    wanted = arith.divui(arith.addi(m, host.index(XTY_ROWS_PER_CHUNK - 1)), rows)
    cap = host.index(max(1, XTY_PARTIAL_BUDGET // max(1, per_chunk_floats)))  # k or n may be 0
    return arith.maxui(arith.minui(wanted, cap), host.index(1))


def _gemm_xty(t: Template) -> None:
    """Weight gradient ``out[type(i), k, n] += Σ_i a[r(i), k] · g[i, n]``, parallel over rows
    and deterministic: the rows are cut into chunks; one thread per ``(chunk, k, n)`` sums its
    chunk's rows in order into its own slot of a partials buffer ``[C, (T,) K, N]`` (no
    atomics), then one thread per ``((t,) k, n)`` adds the chunks' partials in order into
    ``out``. The partials come from ``gpu.alloc`` like every temporary (PyTorch's caching
    allocator under a bundle)."""
    schedule = _schedule(t)
    slices, k, n = _xty_shape(t)
    per_chunk = (slices or 1) * k * n
    host = T.Body(t.ops)
    chunks = _xty_chunks(t, host, per_chunk)
    inner = [k, n] if slices is None else [slices, k, n]
    dyn = ir.ShapedType.get_dynamic_size()
    ptype = ir.MemRefType.get([dyn, *inner], T.f32_type())
    partials = gpu.alloc(ptype, None, [], [chunks], [])
    if slices is not None:  # a chunk touches only its rows' slices: the rest must read 0
        gpu.memset(None, [], partials, host.f32(0.0))
    part = Template(t.view, T.Operands({**t.ops.values, "partials": partials}), t.name, t.kernels)
    if schedule is not None:
        _xty_tiled_partials(part, schedule, k, n, chunks, host)
    else:
        _launch(part, host, arith.muli(chunks, host.index(k * n)))
        with _kernel(part) as (b, gid):
            _xty_partial_body(t, b, gid, k, n, slices)
    red_ops = T.Operands({"partials": partials, "out": t.ops["out"]})
    red = Template(t.view, red_ops, f"{t.name}_reduce", t.kernels)
    _launch(red, host, host.index(per_chunk))
    with _kernel(red) as (b, gid):
        _xty_reduce_body(b, gid, k, n, slices)
    gpu.dealloc(None, [], partials)


def _xty_tiled_partials(
    part: Template, schedule: intra.Schedule, k: int, n: int, chunks: ir.Value, host: T.Body
) -> None:
    """The partials of a scheduled weight gradient: a block per (chunk, ``out`` tile), each
    summing ``Xᵀ·G`` over its chunk's rows staged ``tile_m`` at a time in shared memory
    (``lowering/gpu/gemm.py``)."""
    v = part.view
    rows_per_slice = T.slice_rows(v)
    sliced = part.ops.has("weight_index") or rows_per_slice is not None
    tiling = gpu_xty.xty_tiling(schedule, k, n, sliced, part.op.location)
    x = gpu_xty.XtyKernel(k, n, rows_per_slice, tiling)
    c1 = host.index(1)
    grid = arith.muli(chunks, host.index(x.tiles))
    gpu.LaunchFuncOp(
        [KERNEL_MODULE, part.name],
        (grid, c1, c1),
        (host.index(tiling.threads), c1, c1),
        list(part.ops.values.values()),
    )
    with _kernel_with_memory(part, *gpu_xty.xty_attribution_types(tiling)) as (b, mem):
        gpu_xty.tiled_xty_body(b, x, mem)


def _xty_partial_body(
    t: Template, b: T.Body, gid: ir.Value, k: int, n: int, slices: int | None
) -> None:
    """Thread ``(c, kk, j)``: ``partials[c, (t,) kk, j] = Σ_{i in chunk c} a[r(i), kk] ·
    g[i, j]`` over the chunk's rows in order."""
    c0, c1 = b.index(0), b.index(1)
    m = T.gemm_rows(b, c0)
    chunks = memref.dim(b.ops["partials"], c0)
    c, rem, ok = _split(gid, b.index(k * n), chunks)
    kk, j = arith.divui(rem, b.index(n)), arith.remui(rem, b.index(n))
    with b.guard(ok):
        per = arith.divui(arith.addi(m, arith.subi(chunks, c1)), chunks)
        lo = arith.muli(c, per)
        hi = arith.minui(arith.addi(lo, per), m)
        lo = arith.minui(lo, m)
        if slices is None:

            def step(i: ir.Value, acc: ir.Value) -> ir.Value:
                row = T.gemm_row_prologue(b, i, T.slice_rows(t.view))
                g = T.xty_gradient(b, i, j)
                return arith.addf(acc, arith.mulf(b.load("a", row.r, kk), g))

            total = b.reduce(lo, hi, c1, b.f32(0.0), step)
            b.store("partials", total, c, kk, j)
            return
        _xty_runs(t, b, (lo, hi), c, kk, j, slices)


def _xty_runs(
    t: Template,
    b: T.Body,
    rows: tuple[ir.Value, ir.Value],
    c: ir.Value,
    kk: ir.Value,
    j: ir.Value,
    slices: int,
) -> None:
    """A sliced weight's chunk: rows of one type in a row (edges are sorted by type) are summed
    in a register, and each run is added to ``partials[c, type, kk, j]`` when the type changes
    and at the end; any order of types is still right, only slower."""
    f32 = T.f32_type()
    none = b.index(slices)  # no run yet: a type no row has
    loop = scf.ForOp(rows[0], rows[1], b.index(1), [b.f32(0.0), none])
    with ir.InsertionPoint(loop.body):
        i = loop.induction_variable
        acc, run = loop.inner_iter_args
        row = T.gemm_row_prologue(b, i, T.slice_rows(t.view))
        assert row.t is not None
        p = arith.mulf(b.load("a", row.r, kk), T.xty_gradient(b, i, j))
        same = scf.IfOp(arith.cmpi(arith.CmpIPredicate.eq, row.t, run), [f32], has_else=True)
        with ir.InsertionPoint(same.then_block):
            scf.yield_([arith.addf(acc, p)])
        with ir.InsertionPoint(same.else_block):
            _xty_flush(b, acc, run, c, kk, j, slices)
            scf.yield_([p])
        scf.yield_([same.results[0], row.t])
    _xty_flush(b, loop.results[0], loop.results[1], c, kk, j, slices)


def _xty_flush(
    b: T.Body,
    acc: ir.Value,
    run: ir.Value,
    c: ir.Value,
    kk: ir.Value,
    j: ir.Value,
    slices: int,
) -> None:
    """``partials[c, run, kk, j] += acc`` unless there is no run yet."""
    with b.guard(arith.cmpi(arith.CmpIPredicate.ult, run, b.index(slices))):
        b.accumulate("partials", acc, False, c, run, kk, j)


def _xty_reduce_body(b: T.Body, gid: ir.Value, k: int, n: int, slices: int | None) -> None:
    """Thread ``((t,) kk, j)``: ``out[(t,) kk, j] += Σ_c partials[c, (t,) kk, j]``, chunks in
    order."""
    c0, c1 = b.index(0), b.index(1)
    total = (slices or 1) * k * n
    chunks = memref.dim(b.ops["partials"], c0)
    with b.guard(arith.cmpi(arith.CmpIPredicate.ult, gid, b.index(total))):
        idx = [arith.divui(gid, b.index(k * n))] if slices is not None else []
        rem = arith.remui(gid, b.index(k * n))
        idx += [arith.divui(rem, b.index(n)), arith.remui(rem, b.index(n))]
        acc = b.reduce(
            c0, chunks, c1, b.f32(0.0), lambda c, s: arith.addf(s, b.load("partials", c, *idx))
        )
        b.accumulate("out", acc, False, *idx)


def _gemm_epilogue(t: Template) -> str:
    """The template's epilogue; ``add`` with a scatter index is an atomic add (rows may
    collide)."""
    epilogue = str(t.view.attr("epilogue"))
    return "atomic_add" if epilogue == "add" and t.ops.has("scatter_index") else epilogue


def _gemm_mma(t: Template, schedule: intra.Schedule, half: ir.Type) -> None:
    """``xw``/``xwt`` with a schedule on 16-bit operands, on a chip with ``mma.sync``: the
    tensor-core kernel of ``lowering/gpu/mma.py``."""
    v = t.view
    n, k = T.static_dim(t.ops["out"], 1), T.static_dim(t.ops["a"], 1)
    rows_per_slice = T.slice_rows(v)
    sliced = t.ops.has("weight_index") or rows_per_slice is not None
    tiling = gpu_mma.mma_tiling(schedule, k, n, sliced, t.op.location)
    transposed = v.attr("variant") == "xwt"
    name = "bf16" if isinstance(half, ir.BF16Type) else "f16"
    g = gpu_mma.MmaKernel(k, n, _gemm_epilogue(t), transposed, rows_per_slice, tiling, name)
    host = T.Body(t.ops)
    grid = g.grid(host, T.gemm_rows(host, host.index(0)))
    c1, threads = host.index(1), host.index(tiling.threads)
    gpu.LaunchFuncOp(
        [KERNEL_MODULE, t.name], (grid, c1, c1), (threads, c1, c1), list(t.ops.values.values())
    )
    wg, private = gpu_mma.attribution_types(g)
    with _kernel_with_memory(t, wg, private) as (b, mem):
        gpu_mma.mma_gemm_body(b, g, gpu_mma.mma_memory(mem[: len(wg)], mem[len(wg) :]))


def _gemm_scheduled(t: Template, schedule: intra.Schedule) -> None:
    """``xw``/``xwt`` with a schedule: a block per output tile, rows of ``a`` staged in shared
    memory ``tile_k`` columns at a time (``lowering/gpu/gemm.py``); on tensor cores
    (``lowering/gpu/mma.py``) when the chip has them and the operands are 16-bit."""
    half = gpu_mma.mma_element_type(t.ops["a"].type, t.ops["weight"].type) if t.mma else None
    if half is not None:
        _gemm_mma(t, schedule, half)
        return
    v = t.view
    n, k = T.static_dim(t.ops["out"], 1), T.static_dim(t.ops["a"], 1)
    epilogue = _gemm_epilogue(t)
    rows_per_slice = T.slice_rows(v)
    sliced = t.ops.has("weight_index") or rows_per_slice is not None
    tiling = gpu_gemm.gemm_tiling(schedule, k, n, sliced, t.op.location)
    g = gpu_gemm.GemmKernel(k, n, epilogue, v.attr("variant") == "xwt", rows_per_slice, tiling)
    host = T.Body(t.ops)
    grid = g.grid(host, T.gemm_rows(host, host.index(0)))
    c1, threads = host.index(1), host.index(tiling.threads)
    gpu.LaunchFuncOp(
        [KERNEL_MODULE, t.name], (grid, c1, c1), (threads, c1, c1), list(t.ops.values.values())
    )
    with _tiled_kernel(t, tiling) as (b, mem):
        gpu_gemm.tiled_gemm_body(b, g, mem)


def _schedule(t: Template) -> intra.Schedule | None:
    """The template's ``schedule`` attribute (None without one); a malformed one is a
    located error."""
    try:
        return intra.schedule_of(t.op)
    except ValueError as err:
        raise PassFailure(str(err), t.op.location) from None


def _gemm_tiled(t: Template) -> None:
    """``xw``/``xwt``: with a schedule the shared-memory tiled kernel; without one, one thread
    per ``(row, tile of tile_n columns)``."""
    schedule = _schedule(t)
    if schedule is not None:
        _gemm_scheduled(t, schedule)
        return
    v = t.view
    n, k = T.static_dim(t.ops["out"], 1), T.static_dim(t.ops["a"], 1)
    tile = max(1, min(int(v.attr("tile_n")), n))
    ntiles = (n + tile - 1) // tile
    epilogue, transposed = v.attr("epilogue"), v.attr("variant") == "xwt"
    if epilogue == "add" and t.ops.has("scatter_index"):
        epilogue = "atomic_add"
    host = T.Body(t.ops)
    m = T.gemm_rows(host, host.index(0))
    _launch(t, host, arith.muli(m, host.index(ntiles)))
    with _kernel(t) as (b, gid):
        km = T.gemm_rows(b, b.index(0))
        i, jt, ok = _split(gid, b.index(ntiles), km)
        with b.guard(ok):
            row = T.gemm_row_scale(b, T.gemm_row_prologue(b, i, T.slice_rows(v)))
            ctile, cn = b.index(tile), b.index(n)
            j0 = arith.muli(jt, ctile)
            for jj in range(tile):
                j = arith.addi(j0, b.index(jj))
                _gemm_column(b, row, j, cn if n % tile else None, k, epilogue, transposed)


def _gemm_column(
    b: T.Body,
    row: T.GemmRow,
    j: ir.Value,
    bound: ir.Value | None,
    k: int,
    epilogue: str,
    transposed: bool,
) -> None:
    """Column ``j`` of a tile, behind ``j < bound`` when the tiles overhang the row."""
    if bound is None:
        T.gemm_element(b, row, j, k, epilogue, transposed)
        return
    with b.guard(arith.cmpi(arith.CmpIPredicate.ult, j, bound)):
        T.gemm_element(b, row, j, k, epilogue, transposed)


# GEMM kernels by variant.
GEMM_VARIANTS: dict[str, Callable[[Template], None]] = {
    "xw": _gemm_tiled,
    "xwt": _gemm_tiled,
    "xty": _gemm_xty,
}


def _gemm(t: Template) -> None:
    GEMM_VARIANTS[t.view.attr("variant")](t)


# ---- traversal --------------------------------------------------------------------------------


def traversal_align(op: ir.Operation) -> str:
    """A traversal's optional ``align`` attribute (default ``"none"``), validated."""
    if "align" not in op.attributes:
        return "none"
    attr = op.attributes["align"]
    value = attr.value if isinstance(attr, ir.StringAttr) else None
    if value not in ALIGN_MODES:
        raise PassFailure(f'align must be "none" or "warp128", got {attr}', op.location)
    return value


@contextmanager
def _warp128_columns(b: T.Body, xr: ir.Value, lane: ir.Value, d: int) -> Iterator[ir.Value]:
    """The aligned thread→element mapping (``align = "warp128"``, see
    ``hector_bench.request_model``): one warp per row, lane ``lane`` of step ``k`` reads element
    ``32k + lane - s`` of the row, where ``s`` is the row's misalignment in floats,
    ``(address(x[xr, 0]) / 4) mod 32``. Every step then reads one aligned 128-byte segment.
    Yields the element index inside the step loop and the in-row guard."""
    ult, uge = arith.CmpIPredicate.ult, arith.CmpIPredicate.uge
    c4, cw, cw1, cd = b.index(4), b.index(WARP), b.index(WARP - 1), b.index(d)
    words = arith.divui(memref.extract_aligned_pointer_as_index(b.ops["x"]), c4)
    shift = arith.remui(arith.addi(words, arith.muli(xr, cd)), cw)
    steps = arith.divui(arith.addi(arith.addi(shift, cd), cw1), cw)
    with b.loop(b.index(0), steps, b.index(1)) as k:
        e0 = arith.addi(arith.muli(k, cw), lane)
        after = arith.cmpi(uge, e0, shift)
        e = arith.subi(e0, shift)
        with b.guard(arith.andi(after, arith.cmpi(ult, e, cd))):
            yield e


def _check_warp128(t: Template) -> None:
    """What the aligned mapping needs: an elementwise row function and whole warps."""
    op = t.op
    if T.width(t.ops["x"]) != T.width(t.ops["out"]) or t.view.attr("fn") == "dot":
        raise PassFailure(
            'align = "warp128" needs an elementwise row function with x and out of the same '
            "width (element j of out reads element j of x)",
            op.location,
        )
    bs = t.block_size()
    if bs % WARP:
        raise PassFailure(
            f'align = "warp128" needs a block_size that is a multiple of {WARP}, got {bs}',
            op.location,
        )


def _traversal_warp128(t: Template) -> None:
    """A traversal with ``align = "warp128"``: one warp (32 threads) per row, each warp reading
    its row of ``x`` in aligned 128-byte segments (the zero-copy gather kernel)."""
    _check_warp128(t)
    d, f = T.width(t.ops["out"]), T.RowFn.of(t.view)
    host = T.Body(t.ops)
    m = T.traversal_rows(host, host.index(0))
    _launch(t, host, arith.muli(m, host.index(WARP)))
    with _kernel(t) as (b, gid):
        km = T.traversal_rows(b, b.index(0))
        i, lane, ok = _split(gid, b.index(WARP), km)
        with b.guard(ok):
            row = T.row_indices(b, i)
            with _warp128_columns(b, row.xr, lane, d) as j:
                T.traversal_element(b, f, row.at(j), atomic=True)


def _traversal_flat(t: Template) -> None:
    """One thread per ``(row, column)`` element."""
    d, f = T.width(t.ops["out"]), T.RowFn.of(t.view)
    host = T.Body(t.ops)
    m = T.traversal_rows(host, host.index(0))
    _launch(t, host, arith.muli(m, host.index(d)))
    with _kernel(t) as (b, gid):
        km = T.traversal_rows(b, b.index(0))
        i, j, ok = _split(gid, b.index(d), km)
        with b.guard(ok):
            T.traversal_element(b, f, T.row_indices(b, i).at(j), atomic=True)


# Traversal kernels by thread mapping (the ``align`` attribute).
TRAVERSAL_ALIGN: dict[str, Callable[[Template], None]] = {
    "none": _traversal_flat,
    "warp128": _traversal_warp128,
}


def _traversal(t: Template) -> None:
    if intra.SEGMENTED_SUM in t.op.attributes:  # its grouped rows are the CPU's form only
        raise PassFailure("a segmented sum is built for the CPU only", t.op.location)
    if intra.VECTOR_DOT in t.op.attributes:
        raise PassFailure("a vector dot is built for the CPU only", t.op.location)
    TRAVERSAL_ALIGN[traversal_align(t.op)](t)


# ---- host ops and the driver ------------------------------------------------------------------

# Kernels by template op name: (builder, kernel name suffix).
KERNELS: dict[str, tuple[Callable[[Template], None], str]] = {
    "hector_intra.gemm_template": (_gemm, "gemm"),
    "hector_intra.traversal_template": (_traversal, "traversal"),
}


def _alloc(op: ir.Operation) -> None:
    new = gpu.alloc(op.results[0].type, None, [], list(op.operands), [])
    op.results[0].replace_all_uses_with(new)


def _dealloc(op: ir.Operation) -> None:
    gpu.dealloc(None, [], op.operands[0])


def _fill(op: ir.Operation) -> None:
    gpu.memset(None, [], op.operands[1], op.operands[0])


def _copy(op: ir.Operation) -> None:
    gpu.memcpy(None, [], op.operands[1], op.operands[0])


# Host buffer ops moved to the GPU API, by op name (each builds its replacement before the op).
HOST_OPS: dict[str, Callable[[ir.Operation], None]] = {
    "memref.alloc": _alloc,
    "memref.dealloc": _dealloc,
    "linalg.fill": _fill,
    "memref.copy": _copy,
}


def _rewrite(op: ir.Operation, build: Callable[[], None]) -> None:
    """Run ``build`` before ``op`` under its location, then erase ``op``."""
    with op.location, ir.InsertionPoint(op):
        build()
    op.erase()


def convert_function(
    func: ir.Operation, ops: list[ir.Operation], kernels: KernelModule, mma: bool = False
) -> None:
    """Launch every template among ``func``'s ``ops`` as a kernel (``mma``: scheduled GEMMs
    on 16-bit operands on tensor cores); move its buffers to the device API."""
    sym = ir.StringAttr(func.attributes["sym_name"]).value
    for n, op in enumerate(ops):
        if op.name in KERNELS:
            build, suffix = KERNELS[op.name]
            v = intra.view(op)
            template = Template(v, T.operands(v), f"{sym}_{n}_{suffix}", kernels, mma)
            try:
                _rewrite(op, partial(build, template))
            except ValueError as err:  # a shape the templates are not built for
                raise PassFailure(f"cannot lower {op.name}: {err}", op.location) from None
        elif op.name in HOST_OPS:
            _rewrite(op, partial(HOST_OPS[op.name], op))


def run_module(module_op: ir.Operation, mma: bool = False) -> None:
    """Convert every function with templates (``mma``: see :func:`convert_function`); add the
    kernel module when any was made."""
    for op in module_op.regions[0].blocks[0].operations:
        if op.operation.name == "gpu.module":
            raise PassFailure(
                "the module already holds a gpu.module; run this conversion once", op.location
            )
    module_op.attributes["gpu.container_module"] = ir.UnitAttr.get(module_op.context)
    kernels = KernelModule(module_op)
    for func, ops in functions(module_op):
        convert_function(func, ops, kernels, mma)


def choose_gpu_schedules(module_op: ir.Operation) -> int:
    """Give every GEMM template without a schedule the GPU chooser's
    (:func:`.schedule_choice.gpu_gemm_schedule`); returns how many got one."""
    chosen = 0
    for op in ops_named(module_op, ("hector_intra.gemm_template",)):
        if "schedule" in op.attributes:
            continue
        v = intra.view(op)
        ops = T.operands(v)
        k, n = T.static_dim(ops["a"], 1), T.width(ops["out"])
        variant = v.attr("variant")
        if variant == "xty":
            n = T.width(ops["weight"])
        with op.context:
            op.attributes["schedule"] = gpu_gemm_schedule(variant, k, n).to_attr()
        chosen += 1
    return chosen


@register_pass(
    "convert-hector-intra-to-gpu",
    "Lower hector_intra templates to one gpu.func kernel each plus host gpu.launch_func calls",
    tile=Option(
        bool,
        False,
        "give GEMMs without a schedule the GPU chooser's (shared-memory tiled kernels)",
    ),
    mma=Option(
        bool,
        False,
        "the chip has mma.sync on bf16/f16 (sm_80 and newer): scheduled xw/xwt GEMMs on 16-bit "
        "operands multiply on tensor cores (nvgpu.mma.sync m16n8k16, f32 accumulators)",
    ),
)
def run(module_op: ir.Operation, tile: bool = False, mma: bool = False) -> None:
    """Pass entry point."""
    if tile:
        choose_gpu_schedules(module_op)
    run_module(module_op, mma)
