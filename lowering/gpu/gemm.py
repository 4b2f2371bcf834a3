"""The GPU form of a scheduled ``gemm_template`` (``xw``/``xwt``): a shared-memory tiled
kernel.

**The GEMM kernel** (``xw`` and ``xwt``; the schedule is ``hector_intra.Schedule``). One
thread block computes one output tile of ``tile_m`` rows × ``tile_n`` columns; each of its
``(tile_m / unroll) × (tile_n / vector)`` threads holds an ``unroll`` × ``vector`` register
block (rows ``ty·unroll + p``, columns ``tx + q·(tile_n / vector)``, so neighbouring threads
read neighbouring columns). The reduction runs in ``tile_k``-deep steps; each step

1. stages the gathered rows of ``a`` (``a[gather_index[i], k0:k0+tile_k]``) into shared memory
   (``As``, ``tile_m × (tile_k + 1)``: rows padded against bank conflicts), and, when more
   than one row reads it (``tile_m > 1``) and the tile's rows share one weight slice, the
   weight tile (``Ws``, ``tile_k × tile_n``);
2. ``gpu.barrier``;
3. multiplies out of shared memory into the register block (rows whose weight slices differ
   read the weight from global memory, each row its own slice);
4. ``gpu.barrier`` (the next step overwrites the tiles).

With a sliced weight the block first records each row's slice in shared memory (``Ts``) and
whether they are all equal (``Ts[tile_m]``), one barrier each. The epilogue applies
``row_scale``, ``scatter_index`` and ``store``/``add``/atomic add exactly as the untiled
kernel. Products are summed in the same order (``k`` ascending from 0); unlike the untiled
kernel's, the multiply-adds may contract into FMAs (``fastmath<contract>``: one ``fma.rn``
per product on the GPU instead of ``mul.rn`` + ``add.rn``), so results agree to rounding.

The register block lives in a private attribution (``memref<unroll·vector x f32>`` in the
private address space): every access has a constant index, so LLVM keeps it in registers.
Nothing but the loop counter and values derived from the block id crosses a barrier, which is
what lets :func:`.host_emulation.block_function` run such a kernel on the host.
"""

from __future__ import annotations

from collections.abc import Callable
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


@dataclass(frozen=True)
class GemmTiling:
    """A schedule resolved against one GEMM's shape: tiles, register block, threads per block,
    and what is staged in shared memory."""

    tile_m: int
    tile_n: int
    tile_k: int
    rows: int  # rows of the register block (schedule.unroll)
    cols: int  # columns of the register block (schedule.vector)
    sliced: bool  # rows may read different weight slices
    stage_weight: bool  # the weight tile goes through shared memory when rows share a slice

    @property
    def m_threads(self) -> int:
        """Threads along the tile's rows."""
        return self.tile_m // self.rows

    @property
    def n_threads(self) -> int:
        """Threads along the tile's columns."""
        return self.tile_n // self.cols

    @property
    def threads(self) -> int:
        """Threads per block."""
        return self.m_threads * self.n_threads

    @property
    def a_stride(self) -> int:
        """Row length of ``As``: ``tile_k`` padded by one float, so the rows a warp reads at
        one ``kk`` fall in different shared-memory banks."""
        return self.tile_k + 1 if self.tile_m > 1 else self.tile_k

    @property
    def shared_bytes(self) -> int:
        """Shared memory per block: ``As``, ``Ws`` (when staged) and ``Ts`` (when sliced)."""
        floats = self.tile_m * self.a_stride + (
            self.tile_k * self.tile_n if self.stage_weight else 0
        )
        return F32_BYTES * floats + (4 * (self.tile_m + 1) if self.sliced else 0)


def _fitting_tile_k(tile_m: int, tile_n: int, k: int, sliced: bool) -> int:
    """``tile_k = 0`` (the whole reduction): all of ``k`` when its tiles fit in shared memory,
    else the deepest step that does (at least 1; a tile too big even then is refused)."""
    per_k = F32_BYTES * (tile_m + (tile_n if tile_m > 1 else 0))
    fixed = 4 * (tile_m + 1) * (2 if sliced else 1)  # Ts, and the padding of As's rows
    return max(1, min(k, (SHARED_BYTES_LIMIT - fixed) // per_k))


def gemm_tiling(s: Schedule, k: int, n: int, sliced: bool, loc: ir.Location) -> GemmTiling:
    """Resolve schedule ``s`` for a GEMM with reduction ``k`` and ``n`` output columns, or a
    ``PassFailure`` at ``loc`` saying which GPU limit it breaks."""
    # The whole row, in whole register blocks (one block when it is empty: no tile is run).
    tile_n = s.tile_n or max(1, -(-n // s.vector)) * s.vector
    tile_k = max(1, min(s.tile_k, k)) if s.tile_k else _fitting_tile_k(s.tile_m, tile_n, k, sliced)
    if s.tile_m % s.unroll:
        raise PassFailure(
            f"schedule tile_m = {s.tile_m} must be a multiple of unroll = {s.unroll} "
            "(the rows of one GPU thread's register block)",
            loc,
        )
    if tile_n % s.vector:
        raise PassFailure(
            f"schedule tile_n = {tile_n} must be a multiple of vector = {s.vector} "
            "(the columns of one GPU thread's register block)",
            loc,
        )
    if s.unroll * s.vector > MAX_REGISTER_BLOCK:
        raise PassFailure(
            f"schedule register block unroll × vector = {s.unroll} × {s.vector} holds more than "
            f"{MAX_REGISTER_BLOCK} accumulators per GPU thread",
            loc,
        )
    tiling = GemmTiling(s.tile_m, tile_n, tile_k, s.unroll, s.vector, sliced, s.tile_m > 1)
    if tiling.threads > MAX_THREADS:
        raise PassFailure(
            f"schedule needs {tiling.threads} threads per block ((tile_m / unroll) × "
            f"(tile_n / vector) = {tiling.m_threads} × {tiling.n_threads}), more than a GPU "
            f"block's {MAX_THREADS}",
            loc,
        )
    if tiling.shared_bytes > SHARED_BYTES_LIMIT:
        raise PassFailure(
            f"schedule tiles take {tiling.shared_bytes} bytes of shared memory per block "
            f"(tile_m × (tile_k + 1) = {s.tile_m} × {tiling.a_stride} rows of a"
            + (f", tile_k × tile_n = {tile_k} × {tile_n} of the weight" if s.tile_m > 1 else "")
            + f"), more than the {SHARED_BYTES_LIMIT} a block may use",
            loc,
        )
    return tiling


@dataclass(frozen=True)
class TileMemory:
    """The kernel's attributions: shared ``As``/``Ws``/``Ts`` (None when not used) and the
    private register block ``acc``."""

    a: ir.Value
    w: ir.Value | None
    t: ir.Value | None
    acc: ir.Value


def attribution_types(tiling: GemmTiling) -> tuple[list[ir.Type], list[ir.Type]]:
    """Workgroup (shared) and private attribution types of the tiled kernel, in the order
    :class:`TileMemory` takes them."""
    f32, i32 = T.f32_type(), ir.IntegerType.get_signless(32)
    shared = address_space("workgroup")
    wg = [ir.MemRefType.get([tiling.tile_m, tiling.a_stride], f32, memory_space=shared)]
    if tiling.stage_weight:
        wg.append(ir.MemRefType.get([tiling.tile_k, tiling.tile_n], f32, memory_space=shared))
    if tiling.sliced:
        wg.append(ir.MemRefType.get([tiling.tile_m + 1], i32, memory_space=shared))
    private = [
        ir.MemRefType.get([tiling.rows * tiling.cols], f32, memory_space=address_space("private"))
    ]
    return wg, private


def tile_memory(tiling: GemmTiling, wg: list[ir.Value], private: list[ir.Value]) -> TileMemory:
    """The attributions bound to their roles."""
    rest = list(wg[1:])
    w = rest.pop(0) if tiling.stage_weight else None
    t = rest.pop(0) if tiling.sliced else None
    return TileMemory(wg[0], w, t, private[0])


@dataclass(frozen=True)
class GemmKernel:
    """What the tiled kernel's body needs: the GEMM's shape and epilogue, the row→slice rule,
    and the tiling."""

    k: int
    n: int
    epilogue: str  # store | add | atomic_add
    transposed: bool  # xwt: weight[t, j, k]
    slice_rows: int | None
    tiling: GemmTiling

    def grid(self, b: T.Body, rows: ir.Value) -> ir.Value:
        """Blocks: ``ceil(rows / tile_m) · ceil(n / tile_n)``."""
        tm = self.tiling.tile_m
        m_tiles = arith.divui(arith.addi(rows, b.index(tm - 1)), b.index(tm))
        return arith.muli(m_tiles, b.index(self.n_tiles))

    @property
    def n_tiles(self) -> int:
        """Column tiles per row tile."""
        return -(-self.n // self.tiling.tile_n)


@dataclass(frozen=True)
class Coords:
    """Where a block and one of its threads are, rebuilt at the start of every phase (nothing
    thread-dependent crosses a barrier): rows ``m0 …``, columns ``n0 …``, the row count, the
    thread id and its place ``(ty, tx)`` in the block."""

    m0: ir.Value
    n0: ir.Value
    rows: ir.Value
    tid: ir.Value
    ty: ir.Value
    tx: ir.Value


def _coords(b: T.Body, g: GemmKernel) -> Coords:
    tl = g.tiling
    bid = gpu.block_id(gpu.Dimension.x)
    ntiles = b.index(g.n_tiles)
    m0 = arith.muli(arith.divui(bid, ntiles), b.index(tl.tile_m))
    n0 = arith.muli(arith.remui(bid, ntiles), b.index(tl.tile_n))
    tid = gpu.thread_id(gpu.Dimension.x)
    cnt = b.index(tl.n_threads)
    ty, tx = arith.divui(tid, cnt), arith.remui(tid, cnt)
    return Coords(m0, n0, T.gemm_rows(b, b.index(0)), tid, ty, tx)


def _slice_of(b: T.Body, g: GemmKernel, i: ir.Value) -> ir.Value:
    """Weight slice of row ``i`` (``weight_index[i]`` or ``i / slice_rows``), as index."""
    if b.ops.has("weight_index"):
        return b.load_index("weight_index", i)
    assert g.slice_rows is not None
    return arith.divui(i, b.index(g.slice_rows))


def _record_slices(b: T.Body, g: GemmKernel, mem: TileMemory) -> None:
    """Phase: ``Ts[r] = slice of row m0 + r`` (rows past the end take row ``m0``'s, a valid
    slice that cannot break the tile's uniformity)."""
    assert mem.t is not None
    c = _coords(b, g)
    i32 = ir.IntegerType.get_signless(32)
    with strided(b, c.tid, g.tiling.tile_m, g.tiling.threads) as r:
        i = arith.addi(c.m0, r)
        i = arith.select(ult(i, c.rows), i, c.m0)
        memref.store(arith.index_cast(i32, _slice_of(b, g, i)), mem.t, [r])


def _record_uniform(b: T.Body, g: GemmKernel, mem: TileMemory) -> None:
    """Phase: thread 0 sets ``Ts[tile_m]`` to 1 when every row of the tile has ``Ts[0]``'s
    slice, else 0."""
    assert mem.t is not None
    c = _coords(b, g)
    i1 = ir.IntegerType.get_signless(1)
    i32 = ir.IntegerType.get_signless(32)
    with b.guard(arith.cmpi(arith.CmpIPredicate.eq, c.tid, b.index(0))):
        first = memref.load(mem.t, [b.index(0)])
        same = b.reduce(
            b.index(1),
            b.index(g.tiling.tile_m),
            b.index(1),
            arith.constant(i1, 1),
            lambda r, acc: arith.andi(
                acc, arith.cmpi(arith.CmpIPredicate.eq, memref.load(mem.t, [r]), first)
            ),
        )
        memref.store(arith.extui(i32, same), mem.t, [b.index(g.tiling.tile_m)])


def _uniform(b: T.Body, g: GemmKernel, mem: TileMemory) -> ir.Value | None:
    """Whether the tile's rows share one slice (i1), read from ``Ts[tile_m]``; None for a
    shared weight (always one slice)."""
    if mem.t is None:
        return None
    flag = memref.load(mem.t, [b.index(g.tiling.tile_m)])
    return arith.cmpi(arith.CmpIPredicate.ne, flag, arith.constant(flag.type, 0))


def _zero_acc(b: T.Body, g: GemmKernel, mem: TileMemory) -> None:
    """Phase: the register block starts at 0."""
    for e in range(g.tiling.rows * g.tiling.cols):
        memref.store(b.f32(0.0), mem.acc, [b.index(e)])


def _weight_at(b: T.Body, g: GemmKernel, t: ir.Value | None, k: ir.Value, j: ir.Value) -> ir.Value:
    idx = (j, k) if g.transposed else (k, j)
    return b.load("weight", *T.sliced(t, *idx))


def _stage(b: T.Body, g: GemmKernel, mem: TileMemory, step: ir.Value) -> None:
    """Phase: step ``step``'s gathered rows of ``a`` into ``As`` (0 past the last row or
    column), and the weight tile into ``Ws`` when staged and the rows share a slice."""
    tl = g.tiling
    c = _coords(b, g)
    k0 = arith.muli(step, b.index(tl.tile_k))
    ck = b.index(g.k)
    with strided(b, c.tid, tl.tile_m * tl.tile_k, tl.threads) as e:
        r, kk = arith.divui(e, b.index(tl.tile_k)), arith.remui(e, b.index(tl.tile_k))
        i, k = arith.addi(c.m0, r), arith.addi(k0, kk)

        def gathered() -> ir.Value:
            row = b.load_index("gather_index", i) if b.ops.has("gather_index") else i
            return b.load("a", row, k)

        ok = arith.andi(ult(i, c.rows), ult(k, ck))
        memref.store(select_load(b, ok, gathered), mem.a, [r, kk])
    if mem.w is None:
        return
    uniform = _uniform(b, g, mem)
    if uniform is None:
        _stage_weight(b, g, mem, c, k0)
        return
    with b.guard(uniform):
        _stage_weight(b, g, mem, c, k0)


def _stage_weight(b: T.Body, g: GemmKernel, mem: TileMemory, c: Coords, k0: ir.Value) -> None:
    """``Ws[kk, jj] = weight[t0, k0 + kk, n0 + jj]`` (``[t0, n0 + jj, k0 + kk]`` for ``xwt``;
    consecutive threads then take consecutive ``kk``, the weight's contiguous dimension)."""
    assert mem.w is not None
    tl = g.tiling
    t0 = arith.index_cast(ir.IndexType.get(), memref.load(mem.t, [b.index(0)])) if mem.t else None
    with strided(b, c.tid, tl.tile_k * tl.tile_n, tl.threads) as e:
        if g.transposed:
            kk, jj = arith.remui(e, b.index(tl.tile_k)), arith.divui(e, b.index(tl.tile_k))
        else:
            kk, jj = arith.divui(e, b.index(tl.tile_n)), arith.remui(e, b.index(tl.tile_n))
        k, j = arith.addi(k0, kk), arith.addi(c.n0, jj)
        ok = arith.andi(ult(k, b.index(g.k)), ult(j, b.index(g.n)))
        memref.store(select_load(b, ok, lambda: _weight_at(b, g, t0, k, j)), mem.w, [kk, jj])


def _tile_rows(c: Coords, g: GemmKernel, b: T.Body) -> list[ir.Value]:
    """The thread's rows inside the tile (``ty·unroll + p``)."""
    base = arith.muli(c.ty, b.index(g.tiling.rows))
    return [arith.addi(base, b.index(p)) for p in range(g.tiling.rows)]


def _tile_cols(c: Coords, g: GemmKernel, b: T.Body) -> list[ir.Value]:
    """The thread's columns inside the tile (``tx + q·n_threads``)."""
    return [arith.addi(c.tx, b.index(q * g.tiling.n_threads)) for q in range(g.tiling.cols)]


def _multiply(b: T.Body, g: GemmKernel, mem: TileMemory, step: ir.Value) -> None:
    """Phase: ``acc[p, q] += Σ_{kk < step} As[row_p, kk] · w(row_p, kk, col_q)``, ``w`` from
    ``Ws`` when staged (and the rows share a slice), else from global memory, each row its
    own slice (columns past ``n`` read column ``n - 1``; the epilogue drops them)."""
    tl = g.tiling
    c = _coords(b, g)
    k0 = arith.muli(step, b.index(tl.tile_k))
    rows, cols = _tile_rows(c, g, b), _tile_cols(c, g, b)
    # Whole steps have a constant depth (LLVM can unroll the kk loop); a last partial one not.
    if g.k % tl.tile_k == 0:
        steps = b.index(tl.tile_k)
    else:
        steps = arith.minui(b.index(tl.tile_k), arith.subi(b.index(g.k), k0))
    uniform = _uniform(b, g, mem)

    def product(shared: bool) -> None:
        if shared:
            weight = lambda p, kk, q: memref.load(mem.w, [kk, cols[q]])  # noqa: E731
        else:
            last = b.index(g.n - 1)
            gcols = [arith.minui(arith.addi(c.n0, col), last) for col in cols]
            slices: list[ir.Value | None] = [None] * tl.rows
            if mem.t is not None:
                index = ir.IndexType.get()
                slices = [arith.index_cast(index, memref.load(mem.t, [r])) for r in rows]

            def weight(p: int, kk: ir.Value, q: int) -> ir.Value:
                return _weight_at(b, g, slices[p], arith.addi(k0, kk), gcols[q])

        _accumulate(b, g, mem, rows, steps, weight)

    if mem.w is None:
        product(False)
    elif uniform is None:
        product(True)
    else:
        branch = scf.IfOp(uniform, [], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            product(True)
            scf.yield_([])
        with ir.InsertionPoint(branch.else_block):
            product(False)
            scf.yield_([])


#: Reduction steps unrolled per iteration of the ``kk`` loop when a step's depth is constant.
KK_UNROLL = (4, 2, 1)


def _accumulate(
    b: T.Body,
    g: GemmKernel,
    mem: TileMemory,
    rows: list[ir.Value],
    steps: ir.Value,
    weight: Callable[[int, ir.Value, int], ir.Value],
) -> None:
    """The register block through one step: loaded, ``kk``-loop of ``unroll × vector`` FMAs
    carried in registers (unrolled by up to 4 when the depth is constant), stored back."""
    tl = g.tiling
    n_acc = tl.rows * tl.cols
    whole = g.k % tl.tile_k == 0
    by = next(u for u in KK_UNROLL if tl.tile_k % u == 0) if whole else 1
    init = [memref.load(mem.acc, [b.index(e)]) for e in range(n_acc)]
    loop = scf.ForOp(b.index(0), steps, b.index(by), init)
    contract = fma_contract()
    with ir.InsertionPoint(loop.body):
        acc = list(loop.inner_iter_args)
        for u in range(by):
            kk = loop.induction_variable
            if u:
                kk = arith.addi(kk, b.index(u))
            avals = [memref.load(mem.a, [r, kk]) for r in rows]
            wvals = {(p, q): weight(p, kk, q) for p in range(tl.rows) for q in range(tl.cols)}
            for p in range(tl.rows):
                for q in range(tl.cols):
                    prod = arith.mulf(avals[p], wvals[p, q], fastmath=contract)
                    e = p * tl.cols + q
                    acc[e] = arith.addf(acc[e], prod, fastmath=contract)
        scf.yield_(acc)
    for e in range(n_acc):
        memref.store(loop.results[e], mem.acc, [b.index(e)])


def _epilogue(b: T.Body, g: GemmKernel, mem: TileMemory) -> None:
    """Phase: each register ``(p, q)`` of an existing row and column, scaled by
    ``row_scale[i]``, reaches ``out[scatter_index[i] or i, j]`` by the template's epilogue."""
    tl = g.tiling
    c = _coords(b, g)
    rows, cols = _tile_rows(c, g, b), _tile_cols(c, g, b)
    for p in range(tl.rows):
        i = arith.addi(c.m0, rows[p])
        with b.guard(ult(i, c.rows)):
            o = b.load_index("scatter_index", i) if b.ops.has("scatter_index") else i
            scale = b.load("row_scale", i, b.index(0)) if b.ops.has("row_scale") else None
            for q in range(tl.cols):
                j = arith.addi(c.n0, cols[q])
                with b.guard(ult(j, b.index(g.n))):
                    v = memref.load(mem.acc, [b.index(p * tl.cols + q)])
                    if scale is not None:
                        v = arith.mulf(v, scale)
                    if g.epilogue == "store":
                        b.store("out", v, o, j)
                    else:
                        b.accumulate("out", v, g.epilogue == "atomic_add", o, j)


def tiled_gemm_body(b: T.Body, g: GemmKernel, mem: TileMemory) -> None:
    """The whole kernel body (see the module docstring): phases separated by ``gpu.barrier``."""
    if mem.t is not None:
        _record_slices(b, g, mem)
        gpu.barrier()
        _record_uniform(b, g, mem)
        gpu.barrier()
    _zero_acc(b, g, mem)
    tk = g.tiling.tile_k
    with b.loop(b.index(0), b.index(-(-g.k // tk)), b.index(1)) as step:
        _stage(b, g, mem, step)
        gpu.barrier()
        _multiply(b, g, mem, step)
        gpu.barrier()
    _epilogue(b, g, mem)
