"""The GPU form of a scheduled ``gemm_template``: a shared-memory tiled kernel, and how kernels
with barriers run on the host for tests.

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

**The weight gradient** (``xty``, :func:`tiled_xty_body`) keeps the untiled form's chunks of
rows, each writing its own partial ``[C, (T,) K, N]`` summed over chunks in order; a block
owns one ``(chunk, tile_k × tile_n tile of out)`` and walks its chunk ``tile_m`` rows at a
time: rows of ``a`` (gathered) and of the row gradients staged in shared memory, then each
thread adds the rows' outer products into its ``unroll × vector`` registers, flushing them
into the partial of the slice being summed when the rows' slice changes.

The register block lives in a private attribution (``memref<unroll·vector x f32>`` in the
private address space): every access has a constant index, so LLVM keeps it in registers.
Nothing but the loop counter and values derived from the block id crosses a barrier, which is
what lets :func:`block_function` run such a kernel on the host.

**Host execution** (``hector-gpu-kernels-on-host``): a kernel with barriers becomes a function
per block whose straight-line runs between barriers are each a loop over the block's threads:
every thread reaches the barrier before any goes on, as on the GPU. Shared memory is one
buffer per block; private memory one row per thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, gpu, memref, scf

from ..dialects.hector_intra import Schedule
from ..passes._registry import PassFailure
from . import _templates as T

#: Static shared memory a block may use without an opt-in (CUDA's 48 KiB).
SHARED_BYTES_LIMIT = 48 * 1024
#: Threads per block (every NVIDIA GPU since sm_20).
MAX_THREADS = 1024
#: Accumulators one thread may hold (its ``unroll × vector`` register block): beyond this the
#: register file spills to local memory.
MAX_REGISTER_BLOCK = 64
F32_BYTES = 4


def _address_space(name: str) -> ir.Attribute:
    # The bindings have no builder for #gpu.address_space; the attribute is a constant.
    return ir.Attribute.parse(f"#gpu.address_space<{name}>")


def _contract() -> ir.Attribute:
    # The micro-kernel's multiply-adds may fuse (one FMA each on the GPU); the bindings have
    # no builder for #arith.fastmath.
    return ir.Attribute.parse("#arith.fastmath<contract>")


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
    shared = _address_space("workgroup")
    wg = [ir.MemRefType.get([tiling.tile_m, tiling.a_stride], f32, memory_space=shared)]
    if tiling.stage_weight:
        wg.append(ir.MemRefType.get([tiling.tile_k, tiling.tile_n], f32, memory_space=shared))
    if tiling.sliced:
        wg.append(ir.MemRefType.get([tiling.tile_m + 1], i32, memory_space=shared))
    private = [
        ir.MemRefType.get([tiling.rows * tiling.cols], f32, memory_space=_address_space("private"))
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


def _ult(x: ir.Value, y: ir.Value) -> ir.Value:
    return arith.cmpi(arith.CmpIPredicate.ult, x, y)


def _select_load(b: T.Body, cond: ir.Value, load: Callable[[], ir.Value]) -> ir.Value:
    """``cond ? load() : 0.0``, the load only executed when ``cond`` holds."""
    f32 = T.f32_type()
    if_op = scf.IfOp(cond, [f32], has_else=True)
    with ir.InsertionPoint(if_op.then_block):
        scf.yield_([load()])
    with ir.InsertionPoint(if_op.else_block):
        scf.yield_([b.f32(0.0)])
    return if_op.results[0]


def _slice_of(b: T.Body, g: GemmKernel, i: ir.Value) -> ir.Value:
    """Weight slice of row ``i`` (``weight_index[i]`` or ``i / slice_rows``), as index."""
    if b.ops.has("weight_index"):
        return b.load_index("weight_index", i)
    assert g.slice_rows is not None
    return arith.divui(i, b.index(g.slice_rows))


@contextmanager
def _strided(b: T.Body, start: ir.Value, total: int, step: int) -> Iterator[ir.Value]:
    """``for e = start; e < total; e += step`` (a block's threads sharing ``total`` items)."""
    with b.loop(start, b.index(total), b.index(step)) as e:
        yield e


def _record_slices(b: T.Body, g: GemmKernel, mem: TileMemory) -> None:
    """Phase: ``Ts[r] = slice of row m0 + r`` (rows past the end take row ``m0``'s, a valid
    slice that cannot break the tile's uniformity)."""
    assert mem.t is not None
    c = _coords(b, g)
    i32 = ir.IntegerType.get_signless(32)
    with _strided(b, c.tid, g.tiling.tile_m, g.tiling.threads) as r:
        i = arith.addi(c.m0, r)
        i = arith.select(_ult(i, c.rows), i, c.m0)
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
    with _strided(b, c.tid, tl.tile_m * tl.tile_k, tl.threads) as e:
        r, kk = arith.divui(e, b.index(tl.tile_k)), arith.remui(e, b.index(tl.tile_k))
        i, k = arith.addi(c.m0, r), arith.addi(k0, kk)

        def gathered() -> ir.Value:
            row = b.load_index("gather_index", i) if b.ops.has("gather_index") else i
            return b.load("a", row, k)

        ok = arith.andi(_ult(i, c.rows), _ult(k, ck))
        memref.store(_select_load(b, ok, gathered), mem.a, [r, kk])
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
    with _strided(b, c.tid, tl.tile_k * tl.tile_n, tl.threads) as e:
        if g.transposed:
            kk, jj = arith.remui(e, b.index(tl.tile_k)), arith.divui(e, b.index(tl.tile_k))
        else:
            kk, jj = arith.divui(e, b.index(tl.tile_n)), arith.remui(e, b.index(tl.tile_n))
        k, j = arith.addi(k0, kk), arith.addi(c.n0, jj)
        ok = arith.andi(_ult(k, b.index(g.k)), _ult(j, b.index(g.n)))
        memref.store(_select_load(b, ok, lambda: _weight_at(b, g, t0, k, j)), mem.w, [kk, jj])


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
    contract = _contract()
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
        with b.guard(_ult(i, c.rows)):
            o = b.load_index("scatter_index", i) if b.ops.has("scatter_index") else i
            scale = b.load("row_scale", i, b.index(0)) if b.ops.has("row_scale") else None
            for q in range(tl.cols):
                j = arith.addi(c.n0, cols[q])
                with b.guard(_ult(j, b.index(g.n))):
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


# ---- the weight gradient: X_r^T · G_r over each chunk of rows ---------------------------------


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
    shared = _address_space("workgroup")
    tm = tiling.tile_m
    wg = [
        ir.MemRefType.get([tm, tiling.tile_k + 1], f32, memory_space=shared),
        ir.MemRefType.get([tm, tiling.tile_n], f32, memory_space=shared),
    ]
    if tiling.sliced:
        wg.append(ir.MemRefType.get([tm], i32, memory_space=shared))
    private = _address_space("private")
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
    with _strided(b, c.tid, tl.tile_m * tl.tile_k, tl.threads) as e:
        r, kk = arith.divui(e, b.index(tl.tile_k)), arith.remui(e, b.index(tl.tile_k))
        i, k = arith.addi(base, r), arith.addi(c.k0, kk)

        def gathered() -> ir.Value:
            row = b.load_index("gather_index", i) if b.ops.has("gather_index") else i
            return b.load("a", row, k)

        ok = arith.andi(_ult(i, c.hi), _ult(k, b.index(x.k)))
        memref.store(_select_load(b, ok, gathered), mem[0], [r, kk])
    with _strided(b, c.tid, tl.tile_m * tl.tile_n, tl.threads) as e:
        r, jj = arith.divui(e, b.index(tl.tile_n)), arith.remui(e, b.index(tl.tile_n))
        i, j = arith.addi(base, r), arith.addi(c.n0, jj)
        ok = arith.andi(_ult(i, c.hi), _ult(j, b.index(x.n)))
        memref.store(_select_load(b, ok, lambda: T.xty_gradient(b, i, j)), mem[1], [r, jj])
    if not tl.sliced:
        return
    with _strided(b, c.tid, tl.tile_m, tl.threads) as r:
        i = arith.addi(base, r)
        t = scf.IfOp(_ult(i, c.hi), [i32], has_else=True)
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
            with b.guard(_ult(ks[p], b.index(x.k))):
                for q in range(tl.cols):
                    with b.guard(_ult(ns[q], b.index(x.n))):
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
    contract = _contract()
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


# ---- host execution of kernels with barriers -------------------------------------------------


def has_barrier(op: ir.Operation) -> bool:
    """Whether ``op`` is or contains a ``gpu.barrier``."""
    return bool(_ops_named(op, ("gpu.barrier",)))


def _hoist_constants(func_op: ir.Operation, to: ir.Operation) -> None:
    """Move every ``arith.constant`` before ``to``: constants are the same in every thread, and
    a run of ops between barriers may then use one built in another."""
    consts = _ops_named(func_op, ("arith.constant",))
    for c in consts:
        c.move_before(to)


class _Threads:
    """Turns a kernel body with barriers into per-block host code (see :func:`block_function`)."""

    def __init__(
        self, private: list[tuple[ir.Value, ir.Value]], bdim: ir.Value, entry: ir.Block
    ) -> None:
        self.private = private  # (private attribution, its [threads, n] host buffer)
        self.bdim = bdim
        # Where a block argument is the same for every thread: the function's entry (the
        # kernel's arguments, block id and size) and the bodies of loops holding barriers.
        self.uniform_blocks = [entry]
        self.uniform_ops: list[ir.Operation] = []

    def _uniform(self, op: ir.Operation) -> bool:
        """Whether ``op`` computes the same value in every thread: pure index arithmetic or a
        ``memref.dim`` of uniform values. Such ops stay outside the thread loops (a loop's
        bounds or an id derived from the block id may then cross a barrier)."""
        if not (op.name.startswith("arith.") or op.name == "memref.dim") or len(op.regions):
            return False
        for v in op.operands:
            owner = v.owner
            if isinstance(owner, ir.Block):
                if not any(owner == blk for blk in self.uniform_blocks):
                    return False
                continue
            src = owner.operation
            if src.name != "arith.constant" and not any(src == u for u in self.uniform_ops):
                return False
        return True

    def split_ops(self, ops: list[ir.Operation]) -> None:
        """Put each barrier-free run of ``ops`` (one block's, terminator aside) in a loop over
        the threads; then do the same in each loop holding barriers, nested ones after their
        parents (a worklist, not recursion: input may nest loops deeper than Python recurses).

        A loop body's ops see only the values of ops before the loop (the runs already
        placed) and of their own loop; the ops after the loop cannot read the body's (loops
        with barriers have no results), so placing a body after the rest of its block
        decides the same as placing it first."""
        pending = [ops]
        while pending:
            run: list[ir.Operation] = []
            for op in pending.pop(0):
                if op.name == "gpu.barrier":
                    self._threads_loop(run)
                    run = []
                    op.erase()
                elif has_barrier(op):
                    self._threads_loop(run)
                    run = []
                    body = op.regions[0].blocks[0]
                    self.uniform_blocks.append(body)
                    inner = [o.operation for o in body.operations]
                    pending.append([o for o in inner[:-1] if o.name != "arith.constant"])
                else:
                    run.append(op)
            self._threads_loop(run)

    def _threads_loop(self, ops: list[ir.Operation]) -> None:
        run: list[ir.Operation] = []
        for op in ops:
            if self._uniform(op):
                self.uniform_ops.append(op)
                if run:  # before the run's loop, which will stand where its first op is
                    op.move_before(run[0])
            else:
                run.append(op)
        if not run:
            return
        first = run[0]
        index = ir.IndexType.get()
        with first.location, ir.InsertionPoint(first):
            c0, c1 = arith.constant(index, 0), arith.constant(index, 1)
            loop = scf.ForOp(c0, self.bdim, c1)
        with first.location, ir.InsertionPoint(loop.body):
            tid = loop.induction_variable
            views = [self._private_view(buf, tid, attr) for attr, buf in self.private]
            end = scf.YieldOp([])
        for op in run:
            op.move_before(end)
        for (attr, _), view in zip(self.private, views, strict=True):
            _replace_uses_inside(attr, view, loop.operation)
        for op in run:  # before the thread ids go: they are among the run's ops
            for result in op.results:
                for use in result.uses:
                    if not _defined_inside_op(use.owner, loop.operation):
                        raise PassFailure(
                            "a value crosses a gpu.barrier: the kernel cannot run on the host "
                            "phase by phase",
                            op.location,
                        )
        for t in _ops_named(loop.operation, ("gpu.thread_id",)):
            t.results[0].replace_all_uses_with(tid)
            t.erase()

    def _private_view(self, buf: ir.Value, tid: ir.Value, attr: ir.Value) -> ir.Value:
        """Row ``tid`` of the private buffer ``[threads, n]`` as a ``[n]`` view."""
        ptype = ir.MemRefType(attr.type)
        n = ptype.shape[0]
        dyn = ir.ShapedType.get_dynamic_size()
        layout = ir.StridedLayoutAttr.get(dyn, [1])
        view_type = ir.MemRefType.get([n], ptype.element_type, layout=layout)
        dyn_offset = [dyn, 0]
        return memref.SubViewOp(view_type, buf, [tid], [], [], dyn_offset, [1, n], [1, 1]).result


def _defined_inside_op(user: ir.Operation | ir.OpView, op: ir.Operation) -> bool:
    node: ir.Operation | None = user.operation
    while node is not None:
        if node == op:
            return True
        parent = node.parent
        node = parent.operation if parent is not None else None
    return False


def _replace_uses_inside(old: ir.Value, new: ir.Value, op: ir.Operation) -> None:
    """Uses of ``old`` nested in ``op`` take ``new``."""
    for use in list(old.uses):
        if _defined_inside_op(use.owner, op):
            use.owner.operands[use.operand_number] = new


def plain_type(t: ir.Type) -> ir.MemRefType:
    """A memref type without its memory space (host memory)."""
    m = ir.MemRefType(t)
    return ir.MemRefType.get(list(m.shape), m.element_type)


def _ops_named(op: ir.Operation, names: tuple[str, ...]) -> list[ir.Operation]:
    """Every op nested in ``op`` named one of ``names``, in walk order (collected first: an
    exception raised inside a walk callback loses its message)."""
    found: list[ir.Operation] = []

    def visit(inner: ir.Operation) -> ir.WalkResult:
        if inner.name in names:
            found.append(inner)
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return found


def _check_barriers(kernel: ir.Operation) -> None:
    """Refuse, before anything moves, a barrier nested in anything but loops without results."""
    for barrier in _ops_named(kernel, ("gpu.barrier",)):
        node = barrier.parent
        while node is not None and node.operation != kernel:
            if node.name != "scf.for" or len(node.results):
                raise PassFailure(
                    "a gpu.barrier may only be inside scf.for loops without results to run on "
                    "the host",
                    node.location,
                )
            node = node.operation.parent


def block_function(kernel: ir.Operation, at: ir.Operation) -> str:
    """Move ``kernel``'s body into ``__block_<kernel>(args..., block id, block size)`` before
    ``at``: one block of the kernel, each barrier-free run of ops a loop over its threads,
    shared memory one buffer for the block, private memory one row per thread. Returns its
    name. Refuses (``PassFailure``, nothing moved) a kernel whose barriers are in anything but
    the body or loops without results, or whose private memory is not rank 1."""
    from mlir.dialects import func

    old = kernel.regions[0].blocks[0]
    attrs = kernel.attributes
    n_wg = (
        ir.IntegerAttr(attrs["workgroup_attributions"]).value
        if "workgroup_attributions" in attrs
        else 0
    )
    inputs = ir.FunctionType(ir.TypeAttr(attrs["function_type"]).value).inputs
    n_args = len(inputs)
    args_old = list(old.arguments)[:n_args]
    wg_old = list(old.arguments)[n_args : n_args + n_wg]
    priv_old = list(old.arguments)[n_args + n_wg :]
    for op in _ops_named(kernel, ("gpu.block_id", "gpu.thread_id", "gpu.block_dim")):
        if str(op.attributes["dimension"]) != "#gpu<dim x>":
            raise PassFailure("only x-dimension kernels run on the host", op.location)
    for p in priv_old:
        if ir.MemRefType(p.type).rank != 1:
            raise PassFailure("only rank-1 private memory runs on the host", kernel.location)
    _check_barriers(kernel)
    index = ir.IndexType.get()
    name = "__block_" + ir.StringAttr(attrs["sym_name"]).value
    with kernel.location, ir.InsertionPoint(at):
        fn = func.FuncOp(name, ir.FunctionType.get([*inputs, index, index], []))
        fn.attributes["sym_visibility"] = ir.StringAttr.get("private")
    block = fn.add_entry_block()
    *args, bid, bdim = list(block.arguments)
    dyn = ir.ShapedType.get_dynamic_size()
    with kernel.location, ir.InsertionPoint(block):
        shared = [memref.alloc(plain_type(w.type), [], []) for w in wg_old]
        private = []
        for p in priv_old:
            ptype = ir.MemRefType(p.type)
            rows = ir.MemRefType.get([dyn, ptype.shape[0]], ptype.element_type)
            private.append(memref.alloc(rows, [bdim], []))
        ret = func.ReturnOp([])
    for a, new in zip([*args_old, *wg_old], [*args, *shared], strict=True):
        a.replace_all_uses_with(new)
    ids = {"gpu.block_id": bid, "gpu.block_dim": bdim}
    # phases rebuild the block's coordinates: ids sit in nested regions too
    for op in _ops_named(kernel, tuple(ids)):
        op.results[0].replace_all_uses_with(ids[op.name])
        op.erase()
    moved: list[ir.Operation] = []
    for op in list(old.operations):
        op = op.operation
        if op.name == "gpu.return":
            op.erase()
        else:
            op.move_before(ret)
            moved.append(op)
    with kernel.location, ir.InsertionPoint(ret):
        for buf in (*shared, *private):
            memref.dealloc(buf)
    _hoist_constants(fn.operation, block.operations[0].operation)
    threads = _Threads(list(zip(priv_old, private, strict=True)), bdim, block)
    threads.split_ops([op for op in moved if op.name != "arith.constant"])
    return name


# ---- a GPU schedule from the shapes, and the kernels scripts/gpu_check.sh times ---------------

#: Rows per block and per thread of the GPU chooser (64 × 64 output tiles of 16 × 16 threads,
#: 4 × 4 registers each: the classic shared-memory SGEMM shape).
GPU_TILE_M, GPU_UNROLL, GPU_TILE_K, GPU_MAX_TILE_N = 64, 4, 16, 64

#: Rows one thread of the weight-gradient GEMM sums before its partial is written.
XTY_ROWS_PER_CHUNK = 256
#: Most floats the weight gradient's per-chunk partials may take (256 MiB): sliced weights
#: (``[T, K, N]``) get fewer, longer chunks.
XTY_PARTIAL_BUDGET = 1 << 26


def _register_block(extent: int) -> int:
    """A register block's width along an extent: 4, or less for narrow ones."""
    return 4 if extent >= 16 else (2 if extent >= 4 else 1)


def gpu_gemm_schedule(variant: str, k: int, n: int) -> Schedule:
    """The GPU schedule of a GEMM of reduction ``k`` and ``n`` output columns: ``xw``/``xwt``
    take 64-row tiles, up to 64 columns in 4-wide register blocks (narrower outputs take
    narrower blocks) and ``tile_k = 16``; the weight gradient (``xty``) takes ``out`` tiles of
    up to 64 × 64 in 4 × 4 blocks, 32 rows staged per step."""
    vector = _register_block(n)
    tile_n = min(GPU_MAX_TILE_N, -(-n // vector) * vector)
    if variant == "xty":
        unroll = _register_block(k)
        tile_k = min(GPU_MAX_TILE_N, -(-k // unroll) * unroll)
        return Schedule(
            tile_m=32, tile_n=tile_n, tile_k=tile_k, vector=vector, unroll=unroll, pack=True
        )
    return Schedule(
        tile_m=GPU_TILE_M,
        tile_n=tile_n,
        tile_k=min(GPU_TILE_K, k),
        vector=vector,
        unroll=GPU_UNROLL,
        pack=True,
    )


@dataclass(frozen=True)
class BenchShape:
    """One GEMM timed by ``scripts/gpu_check.sh``, on RGCN's edges (types sorted, as edges
    are): the message product ``out[i] = a[gather[i]] @ w[type[i]]`` (``xw``) or the weight
    gradient ``out[t] += a[gather[i]]ᵀ ⊗ g[i]`` (``xty``)."""

    rows: int  # M, edges
    nodes: int  # rows of a
    k: int
    n: int
    slices: int
    variant: str = "xw"

    @property
    def name(self) -> str:
        """``<variant>_m<M>_k<K>_n<N>_s<S>``."""
        return f"{self.variant}_m{self.rows}_k{self.k}_n{self.n}_s{self.slices}"

    def chunks(self) -> int:
        """Row chunks of the weight gradient (``intra_to_gpu._xty_chunks``, on the host)."""
        wanted = -(-self.rows // XTY_ROWS_PER_CHUNK)
        cap = max(1, XTY_PARTIAL_BUDGET // (self.slices * self.k * self.n))
        return max(1, min(wanted, cap))


BENCH_SHAPES = (
    BenchShape(1 << 20, 1 << 17, 64, 64, 8),
    BenchShape(1 << 20, 1 << 17, 128, 128, 8),
    BenchShape(1 << 20, 1 << 17, 64, 64, 8, "xty"),
)
#: The untiled kernel's defaults (convert-hector-inter-to-intra's options).
UNTILED_TILE_N, UNTILED_BLOCK = 8, 256
#: Arguments of the template's kernel, by role (``partials``: the weight gradient's
#: temporary, zeroed before each run).
BENCH_ARGS = ("a", "weight", "gather_index", "weight_index", "out")


def _bench_module(shape: BenchShape, schedule: Schedule | None) -> ir.Module:
    """``@gemm(a, weight, gather_index, weight_index, out)`` around one template."""
    from mlir.dialects import func

    from ..dialects import hector_intra as intra

    dyn = ir.ShapedType.get_dynamic_size()
    f32, i32 = T.f32_type(), ir.IntegerType.get_signless(32)
    xty = shape.variant == "xty"
    kn = [shape.k, shape.n]
    types = [
        ir.MemRefType.get([dyn, shape.k], f32),
        ir.MemRefType.get([dyn, shape.n] if xty else [shape.slices, *kn], f32),
        ir.MemRefType.get([dyn], i32),
        ir.MemRefType.get([dyn], i32),
        ir.MemRefType.get([shape.slices, *kn] if xty else [dyn, shape.n], f32),
    ]
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        fn = func.FuncOp("gemm", ir.FunctionType.get(types, []))
        block = fn.add_entry_block()
        a, w, gather, wtype, out = block.arguments
        with ir.InsertionPoint(block):
            extra = {} if schedule is None else {"schedule": schedule.to_attr()}
            intra.OPS.gemm_template(
                a=a,
                weight=w,
                gather_index=gather,
                weight_index=wtype,
                out=out,
                variant=shape.variant,
                epilogue="add" if xty else "store",
                tile_n=UNTILED_TILE_N,
                block_size=UNTILED_BLOCK,
                extra=extra,
            )
            func.ReturnOp([])
    return module


def _ceil(x: int, y: int) -> int:
    return -(-x // y)


def _bench_launches(shape: BenchShape, schedule: Schedule | None) -> list[dict[str, object]]:
    """The launches the lowering's host code makes for ``shape`` (grid and block, as the
    host computes them, and the arguments by role)."""
    from ..dialects import make_context

    with make_context():
        loc = ir.Location.unknown()
        if shape.variant == "xty":
            c, kn = shape.chunks(), shape.k * shape.n
            if schedule is None:
                first = (_ceil(c * kn, UNTILED_BLOCK), UNTILED_BLOCK)
            else:
                xt = xty_tiling(schedule, shape.k, shape.n, True, loc)
                tiles = _ceil(shape.k, xt.tile_k) * _ceil(shape.n, xt.tile_n)
                first = (c * tiles, xt.threads)
            reduce = (_ceil(shape.slices * kn, UNTILED_BLOCK), UNTILED_BLOCK)
            return [
                {
                    "entry": "gemm_0_gemm",
                    "grid": first[0],
                    "block": first[1],
                    "args": [*BENCH_ARGS, "partials"],
                },
                {
                    "entry": "gemm_0_gemm_reduce",
                    "grid": reduce[0],
                    "block": reduce[1],
                    "args": ["partials", "out"],
                },
            ]
        if schedule is None:
            threads = shape.rows * _ceil(shape.n, UNTILED_TILE_N)
            grid, block = _ceil(threads, UNTILED_BLOCK), UNTILED_BLOCK
        else:
            tl = gemm_tiling(schedule, shape.k, shape.n, True, loc)
            grid = _ceil(shape.rows, tl.tile_m) * _ceil(shape.n, tl.tile_n)
            block = tl.threads
    return [{"entry": "gemm_0_gemm", "grid": grid, "block": block, "args": list(BENCH_ARGS)}]


def bench_kernels(
    chip: str, shapes: tuple[BenchShape, ...] = BENCH_SHAPES
) -> list[dict[str, object]]:
    """PTX and launches of the tiled and the untiled kernels for each of ``shapes``
    (JSON-ready records; ``ptx`` holds the text; ``temps``: temporaries by role, with their
    shapes, zeroed before each run)."""
    from ..dialects import make_context
    from ..passes._pipeline import run_pipeline
    from .pipelines import ptx_pipeline
    from .ptx import extract_ptx

    records: list[dict[str, object]] = []
    for shape in shapes:
        schedule = gpu_gemm_schedule(shape.variant, shape.k, shape.n)
        temps = {}
        if shape.variant == "xty":
            temps["partials"] = [shape.chunks(), shape.slices, shape.k, shape.n]
        for kind, sched in (("tiled", schedule), ("untiled", None)):
            with make_context(), ir.Location.unknown():
                module = _bench_module(shape, sched)
                run_pipeline(module, "convert-hector-intra-to-gpu", verify=False)
                run_pipeline(module, ptx_pipeline(chip), verify=False)
                ptx = "\n".join(extract_ptx(module).values())
            schedule_fields = None
            if sched is not None:
                schedule_fields = {f: getattr(sched, f) for f in Schedule.FIELDS}
            records.append(
                {
                    "shape": shape.name,
                    "kind": kind,
                    "variant": shape.variant,
                    "rows": shape.rows,
                    "nodes": shape.nodes,
                    "k": shape.k,
                    "n": shape.n,
                    "slices": shape.slices,
                    "launches": _bench_launches(shape, sched),
                    "temps": temps,
                    "ptx": ptx,
                    "schedule": schedule_fields,
                }
            )
    return records


def write_bench_kernels(
    folder: str, chip: str = "sm_90", shapes: tuple[BenchShape, ...] = BENCH_SHAPES
) -> list[str]:
    """Write :func:`bench_kernels` as ``<shape>_<kind>.ptx`` files and ``kernels.json`` (the
    records without their PTX, naming each file) under ``folder``; returns the files."""
    import json
    import os

    os.makedirs(folder, exist_ok=True)
    index, files = [], []
    for rec in bench_kernels(chip, shapes):
        name = f"{rec['shape']}_{rec['kind']}.ptx"
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            f.write(str(rec.pop("ptx")))
        index.append({**rec, "file": name, "chip": chip})
        files.append(name)
    with open(os.path.join(folder, "kernels.json"), "w", encoding="utf-8") as f:
        json.dump(index, f, indent=1)
    return [*files, "kernels.json"]
