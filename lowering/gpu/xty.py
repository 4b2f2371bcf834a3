"""The GPU form of a scheduled weight-gradient ``gemm_template`` (``xty``).

**The weight gradient** (``xty``, :func:`tiled_xty_body`) keeps the untiled form's chunks of
rows, each writing its own partial ``[C, (T,) K, N]`` summed over chunks in order; a block
owns one ``(chunk, tile_k × tile_n tile of out)`` and walks its chunk ``tile_m`` rows at a
time: rows of ``a`` (gathered) and of the row gradients staged in shared memory, then each
thread adds the rows' outer products into its ``unroll × vector`` registers, flushing them
into the partial of the slice being summed when the rows' slice changes.

The register block lives in a private attribution (``memref<unroll·vector x f32>`` in the
private address space): every access has a constant index, so LLVM keeps it in registers.
Nothing but the loop counter and values derived from the block id crosses a barrier, which is
what lets :func:`.host_emulation.block_function` run such a kernel on the host.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, gpu, memref, scf

from ...dialects.hector_intra import Schedule
from ...passes.registry import PassFailure
from .. import templates as T
from .tile_support import (
    F32_BYTES,
    MAX_REGISTER_BLOCK,
    MAX_THREADS,
    SHARED_BYTES_LIMIT,
    address_space,
    fma_contract,
    select_load,
    strided,
    ult,
)

#: Rows one thread of the weight-gradient GEMM sums before its partial is written.
XTY_ROWS_PER_CHUNK = 256
#: Most floats the weight gradient's per-chunk partials may take (256 MiB): sliced weights
#: (``[T, K, N]``) get fewer, longer chunks.
XTY_PARTIAL_BUDGET = 1 << 26


@dataclass(frozen=True)
class XtyTiling:
    """A schedule resolved for a weight gradient ``out[t] += a[r(i)]^T ⊗ g[i]``: each block
    owns a ``tile_k × tile_n`` tile of ``out`` for one chunk of rows and walks the chunk
    ``tile_m`` rows at a time; its ``(tile_k / unroll) × (tile_n / vector)`` threads each hold
    an ``unroll × vector`` register block."""

    tile_m: int
    tile_k: int
    tile_n: int
    rows: int  # k per thread (schedule.unroll)
    cols: int  # n per thread (schedule.vector)
    sliced: bool

    @property
    def k_threads(self) -> int:
        """Threads along the tile's ``k``."""
        return self.tile_k // self.rows

    @property
    def n_threads(self) -> int:
        """Threads along the tile's ``n``."""
        return self.tile_n // self.cols

    @property
    def threads(self) -> int:
        """Threads per block."""
        return self.k_threads * self.n_threads

    @property
    def shared_bytes(self) -> int:
        """``Xs`` (rows padded by one float), ``Gs`` and ``Ts`` (when sliced)."""
        floats = self.tile_m * (self.tile_k + 1) + self.tile_m * self.tile_n
        return F32_BYTES * floats + (4 * self.tile_m if self.sliced else 0)


def xty_tiling(s: Schedule, k: int, n: int, sliced: bool, loc: ir.Location) -> XtyTiling:
    """Resolve ``s`` for a weight gradient (``tile_k``/``tile_n``: the ``out`` tile, 0 for all
    of it; ``tile_m``: rows staged per step), or a ``PassFailure`` naming the broken limit."""
    tile_k = s.tile_k or max(1, -(-k // s.unroll)) * s.unroll  # one block when k = 0
    tile_n = s.tile_n or max(1, -(-n // s.vector)) * s.vector
    for field, tile, block, what in (
        ("tile_k", tile_k, s.unroll, "unroll"),
        ("tile_n", tile_n, s.vector, "vector"),
    ):
        if tile % block:
            raise PassFailure(
                f"schedule {field} = {tile} must be a multiple of {what} = {block} (one GPU "
                "thread's register block of the weight gradient)",
                loc,
            )
    if s.unroll * s.vector > MAX_REGISTER_BLOCK:
        raise PassFailure(
            f"schedule register block unroll × vector = {s.unroll} × {s.vector} holds more than "
            f"{MAX_REGISTER_BLOCK} accumulators per GPU thread",
            loc,
        )
    tiling = XtyTiling(s.tile_m, tile_k, tile_n, s.unroll, s.vector, sliced)
    if tiling.threads > MAX_THREADS:
        raise PassFailure(
            f"schedule needs {tiling.threads} threads per block of the weight gradient "
            f"((tile_k / unroll) × (tile_n / vector) = {tiling.k_threads} × "
            f"{tiling.n_threads}), more than a GPU block's {MAX_THREADS}",
            loc,
        )
    if tiling.shared_bytes > SHARED_BYTES_LIMIT:
        raise PassFailure(
            f"schedule tiles of the weight gradient take {tiling.shared_bytes} bytes of shared "
            f"memory per block (tile_m = {s.tile_m} rows of tile_k + 1 = {tile_k + 1} and "
            f"tile_n = {tile_n} floats), more than the {SHARED_BYTES_LIMIT} a block may use",
            loc,
        )
    return tiling


def xty_attribution_types(tiling: XtyTiling) -> tuple[list[ir.Type], list[ir.Type]]:
    """Shared ``Xs``, ``Gs`` (and ``Ts``), private ``acc`` and ``run`` (the slice the
    registers are summing, ``-1`` for none)."""
    f32, i32 = T.f32_type(), ir.IntegerType.get_signless(32)
    shared = address_space("workgroup")
    tm = tiling.tile_m
    wg = [
        ir.MemRefType.get([tm, tiling.tile_k + 1], f32, memory_space=shared),
        ir.MemRefType.get([tm, tiling.tile_n], f32, memory_space=shared),
    ]
    if tiling.sliced:
        wg.append(ir.MemRefType.get([tm], i32, memory_space=shared))
    private = address_space("private")
    regs = [ir.MemRefType.get([tiling.rows * tiling.cols], f32, memory_space=private)]
    if tiling.sliced:
        regs.append(ir.MemRefType.get([1], i32, memory_space=private))
    return wg, regs


@dataclass(frozen=True)
class XtyKernel:
    """What the tiled weight-gradient kernel needs: shape, row→slice rule, tiling."""

    k: int
    n: int
    slice_rows: int | None
    tiling: XtyTiling

    @property
    def tiles(self) -> int:
        """``out`` tiles per chunk."""
        return -(-self.k // self.tiling.tile_k) * -(-self.n // self.tiling.tile_n)

    def slice_of(self, b: T.Body, i: ir.Value) -> ir.Value:
        """Weight slice of row ``i`` (``weight_index[i]`` or ``i / slice_rows``)."""
        if b.ops.has("weight_index"):
            return b.load_index("weight_index", i)
        assert self.slice_rows is not None
        return arith.divui(i, b.index(self.slice_rows))


@dataclass(frozen=True)
class XtyCoords:
    """A block's chunk ``c`` and its rows ``[lo, hi)``, its ``out`` tile at ``(k0, n0)``, and
    the thread's ``(tk, tn)``."""

    c: ir.Value
    lo: ir.Value
    hi: ir.Value
    k0: ir.Value
    n0: ir.Value
    tid: ir.Value
    tk: ir.Value
    tn: ir.Value


def _xty_coords(b: T.Body, x: XtyKernel) -> XtyCoords:
    tl = x.tiling
    c0, c1 = b.index(0), b.index(1)
    bid = gpu.block_id(gpu.Dimension.x)
    tiles = b.index(x.tiles)
    c, tile = arith.divui(bid, tiles), arith.remui(bid, tiles)
    n_tiles = b.index(-(-x.n // tl.tile_n))
    k0 = arith.muli(arith.divui(tile, n_tiles), b.index(tl.tile_k))
    n0 = arith.muli(arith.remui(tile, n_tiles), b.index(tl.tile_n))
    m = T.gemm_rows(b, c0)
    chunks = memref.dim(b.ops["partials"], c0)
    per = arith.divui(arith.addi(m, arith.subi(chunks, c1)), chunks)
    lo = arith.minui(arith.muli(c, per), m)
    hi = arith.minui(arith.addi(lo, per), m)
    tid = gpu.thread_id(gpu.Dimension.x)
    cnt = b.index(tl.n_threads)
    return XtyCoords(c, lo, hi, k0, n0, tid, arith.divui(tid, cnt), arith.remui(tid, cnt))


def _xty_stage(b: T.Body, x: XtyKernel, mem: list[ir.Value], step: ir.Value) -> None:
    """Phase: rows ``lo + step·tile_m …`` of the chunk: ``Xs[r, kk] = a[r(i), k0 + kk]``,
    ``Gs[r, jj] = g[i, n0 + jj]`` (0 past the chunk or the tile), ``Ts[r]`` = the row's slice
    (-1 past the chunk)."""
    tl = x.tiling
    c = _xty_coords(b, x)
    i32 = ir.IntegerType.get_signless(32)
    base = arith.addi(c.lo, arith.muli(step, b.index(tl.tile_m)))
    with strided(b, c.tid, tl.tile_m * tl.tile_k, tl.threads) as e:
        r, kk = arith.divui(e, b.index(tl.tile_k)), arith.remui(e, b.index(tl.tile_k))
        i, k = arith.addi(base, r), arith.addi(c.k0, kk)

        def gathered() -> ir.Value:
            row = b.load_index("gather_index", i) if b.ops.has("gather_index") else i
            return b.load("a", row, k)

        ok = arith.andi(ult(i, c.hi), ult(k, b.index(x.k)))
        memref.store(select_load(b, ok, gathered), mem[0], [r, kk])
    with strided(b, c.tid, tl.tile_m * tl.tile_n, tl.threads) as e:
        r, jj = arith.divui(e, b.index(tl.tile_n)), arith.remui(e, b.index(tl.tile_n))
        i, j = arith.addi(base, r), arith.addi(c.n0, jj)
        ok = arith.andi(ult(i, c.hi), ult(j, b.index(x.n)))
        memref.store(select_load(b, ok, lambda: T.xty_gradient(b, i, j)), mem[1], [r, jj])
    if not tl.sliced:
        return
    with strided(b, c.tid, tl.tile_m, tl.threads) as r:
        i = arith.addi(base, r)
        t = scf.IfOp(ult(i, c.hi), [i32], has_else=True)
        with ir.InsertionPoint(t.then_block):
            scf.yield_([arith.index_cast(i32, x.slice_of(b, i))])
        with ir.InsertionPoint(t.else_block):
            scf.yield_([arith.constant(i32, -1)])
        memref.store(t.results[0], mem[2], [r])


def _xty_flush(
    b: T.Body, x: XtyKernel, c: XtyCoords, acc: list[ir.Value], run: ir.Value | None
) -> None:
    """The registers into the chunk's partials: ``partials[c, run, k, n] += acc`` (sliced,
    unless no run yet) or ``partials[c, k, n] = acc``."""
    tl = x.tiling

    def write() -> None:
        ks = [
            arith.addi(c.k0, arith.addi(arith.muli(c.tk, b.index(tl.rows)), b.index(p)))
            for p in range(tl.rows)
        ]
        ns = [arith.addi(c.n0, arith.addi(c.tn, b.index(q * tl.n_threads))) for q in range(tl.cols)]
        for p in range(tl.rows):
            with b.guard(ult(ks[p], b.index(x.k))):
                for q in range(tl.cols):
                    with b.guard(ult(ns[q], b.index(x.n))):
                        v = acc[p * tl.cols + q]
                        if run is None:
                            b.store("partials", v, c.c, ks[p], ns[q])
                        else:
                            t = arith.index_cast(ir.IndexType.get(), run)
                            b.accumulate("partials", v, False, c.c, t, ks[p], ns[q])

    if run is None:
        write()
        return
    with b.guard(arith.cmpi(arith.CmpIPredicate.sge, run, arith.constant(run.type, 0))):
        write()


def _xty_multiply(b: T.Body, x: XtyKernel, mem: list[ir.Value]) -> None:
    """Phase: ``acc[p, q] += Xs[r, k_p] · Gs[r, n_q]`` over the step's rows in order; with
    slices, a row of another slice first flushes the registers into the partials of the slice
    they were summing (rows past the chunk, slice -1, add nothing)."""
    tl = x.tiling
    c = _xty_coords(b, x)
    n_acc = tl.rows * tl.cols
    acc_mem = mem[-2] if tl.sliced else mem[-1]
    kp = [arith.addi(arith.muli(c.tk, b.index(tl.rows)), b.index(p)) for p in range(tl.rows)]
    nq = [arith.addi(c.tn, b.index(q * tl.n_threads)) for q in range(tl.cols)]
    init = [memref.load(acc_mem, [b.index(e)]) for e in range(n_acc)]
    f32, i32 = T.f32_type(), ir.IntegerType.get_signless(32)
    if tl.sliced:
        init.append(memref.load(mem[-1], [b.index(0)]))
    loop = scf.ForOp(b.index(0), b.index(tl.tile_m), b.index(1), init)
    contract = fma_contract()
    with ir.InsertionPoint(loop.body):
        r = loop.induction_variable
        acc = list(loop.inner_iter_args)[:n_acc]
        run = loop.inner_iter_args[n_acc] if tl.sliced else None
        if run is not None:
            t = memref.load(mem[2], [r])
            minus1 = arith.constant(i32, -1)
            change = arith.andi(
                arith.cmpi(arith.CmpIPredicate.ne, t, run),
                arith.cmpi(arith.CmpIPredicate.ne, t, minus1),
            )
            switch = scf.IfOp(change, [f32] * n_acc + [i32], has_else=True)
            with ir.InsertionPoint(switch.then_block):
                _xty_flush(b, x, c, acc, run)
                scf.yield_([b.f32(0.0)] * n_acc + [t])
            with ir.InsertionPoint(switch.else_block):
                scf.yield_([*acc, run])
            acc, run = list(switch.results)[:n_acc], switch.results[n_acc]
        xs = [memref.load(mem[0], [r, k]) for k in kp]
        gs = [memref.load(mem[1], [r, j]) for j in nq]
        out = []
        for p in range(tl.rows):
            for q in range(tl.cols):
                prod = arith.mulf(xs[p], gs[q], fastmath=contract)
                out.append(arith.addf(acc[p * tl.cols + q], prod, fastmath=contract))
        scf.yield_([*out, *([run] if run is not None else [])])
    for e in range(n_acc):
        memref.store(loop.results[e], acc_mem, [b.index(e)])
    if tl.sliced:
        memref.store(loop.results[n_acc], mem[-1], [b.index(0)])


def _xty_start(b: T.Body, x: XtyKernel, mem: list[ir.Value]) -> None:
    """Phase: registers at 0, no run."""
    tl = x.tiling
    acc_mem = mem[-2] if tl.sliced else mem[-1]
    for e in range(tl.rows * tl.cols):
        memref.store(b.f32(0.0), acc_mem, [b.index(e)])
    if tl.sliced:
        i32 = ir.IntegerType.get_signless(32)
        memref.store(arith.constant(i32, -1), mem[-1], [b.index(0)])


def _xty_finish(b: T.Body, x: XtyKernel, mem: list[ir.Value]) -> None:
    """Phase: the last registers into the partials."""
    tl = x.tiling
    c = _xty_coords(b, x)
    acc_mem = mem[-2] if tl.sliced else mem[-1]
    acc = [memref.load(acc_mem, [b.index(e)]) for e in range(tl.rows * tl.cols)]
    run = memref.load(mem[-1], [b.index(0)]) if tl.sliced else None
    _xty_flush(b, x, c, acc, run)


def tiled_xty_body(b: T.Body, x: XtyKernel, mem: list[ir.Value]) -> None:
    """The tiled weight-gradient kernel: per step of ``tile_m`` rows of the block's chunk,
    stage, barrier, multiply, barrier; then the last flush. A thread owns its ``(chunk,
    slice, k, n)`` partials alone, so no atomics, and rows are summed in order: the
    chunk's partial is the untiled kernel's."""
    _xty_start(b, x, mem)
    c = _xty_coords(b, x)  # uniform: the host runner keeps it outside the thread loops
    tm = b.index(x.tiling.tile_m)
    steps = arith.divui(arith.addi(arith.subi(c.hi, c.lo), b.index(x.tiling.tile_m - 1)), tm)
    with b.loop(b.index(0), steps, b.index(1)) as step:
        _xty_stage(b, x, mem, step)
        gpu.barrier()
        _xty_multiply(b, x, mem)
        gpu.barrier()
    _xty_finish(b, x, mem)
