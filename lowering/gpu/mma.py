"""The tensor-core form of a scheduled ``gemm_template`` (``xw``/``xwt``) on bf16 or f16
operands: warp-level ``nvgpu.mma.sync`` (m16n8k16, f32 accumulators) on tiles staged in
shared memory.

**When.** ``convert-hector-intra-to-gpu{mma=true}`` (the GPU stage for a chip with
``mma.sync`` on 16-bit types, sm_80 and newer) gives a scheduled ``xw``/``xwt`` GEMM this kernel
when :func:`mma_element_type` finds a 16-bit type for its operands: bf16 when one operand is
stored in bf16 and the other in bf16 or f32 (rounded to bf16 as it is staged, as autocast
rounds a matmul's inputs), f16 when both are f16. Other GEMMs keep the FMA kernel of
:mod:`.gemm`.

**The kernel.** One block computes one ``tile_m × tile_n`` output tile (:class:`MmaTiling`:
``tile_m`` a multiple of 16, ``tile_n`` of 8, ``tile_k`` of 16) with ``warps_m × warps_n``
warps, each owning a ``warp_m × warp_n`` sub-tile of 16 × 8 fragments. The reduction runs in
``tile_k``-deep steps; each step

1. stages the gathered rows of ``a`` in the 16-bit type into ``As`` (``tile_m × (tile_k + 8)``)
   and the weight tile, transposed, into ``Bs`` (``tile_n × (tile_k + 8)``: the pairs of
   reduction steps a thread's B fragment holds are adjacent); zero past the last row, column
   or reduction step, so ragged M, N and K edges compute on zeros;
2. ``gpu.barrier``;
3. for each 16-deep slice of the step and each fragment of the warp's sub-tile: each thread
   loads its A fragment (``vector<4x2>``: rows ``group`` and ``group + 8``, columns
   ``2·tig + {0, 1}`` and ``+ 8``, ``group = lane / 4``, ``tig = lane mod 4``) and B fragment
   (``vector<2x2>``: reduction steps ``2·tig + {0, 1}`` and ``+ 8`` of column ``group``)
   from shared memory and its four accumulators (``vector<2x2>``: rows ``group``,
   ``group + 8``, columns ``2·tig + {0, 1}``) from the private register block, and issues one
   ``nvgpu.mma.sync``;
4. ``gpu.barrier``.

With a sliced weight, the block first records each row's slice (``Ts``) and stages the slice
of its first row; rows of another slice (a tile spanning two relations) are zero in ``As``,
and each thread adds their products for its accumulators with f32 FMAs from global memory,
on the same 16-bit values. The epilogue applies ``row_scale``, ``scatter_index`` and
``store``/``add``/atomic add as the other GEMM kernels do.

Each fragment load and accumulator access is rebuilt per ``mma`` from the thread id (LLVM
merges the repeats): nothing thread-dependent lives across an ``mma``, which is what lets
:mod:`.mma_on_host` run the kernel on the host with a software m16n8k16.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, gpu, memref, nvgpu, vector

from ...dialects.hector_intra import Schedule
from ...passes.registry import PassFailure
from .. import templates as T
from .tile_support import (
    MAX_REGISTER_BLOCK,
    MAX_THREADS,
    SHARED_BYTES_LIMIT,
    address_space,
    fma_contract,
    strided,
    ult,
)

#: The ``mma.sync`` shape: a 16 × 16 A fragment times a 16 × 8 B fragment into 16 × 8.
MMA_M, MMA_N, MMA_K = 16, 8, 16
WARP = 32
#: Elements each shared row is padded by (16 bytes: fragment rows fall in different banks).
ROW_PAD = 8
HALF_BYTES = 2


def _element(t: ir.Type) -> ir.Type:
    return ir.MemRefType(t).element_type


def mma_element_type(a: ir.Type, weight: ir.Type) -> ir.Type | None:
    """The 16-bit type a GEMM of memrefs ``a`` and ``weight`` multiplies in on tensor cores:
    bf16 when one is bf16 and the other bf16 or f32, f16 when both are f16; None otherwise
    (the FMA kernel)."""
    ea, ew = _element(a), _element(weight)
    pair = (type(ea), type(ew))
    if ir.BF16Type in pair and all(t in (ir.BF16Type, ir.F32Type) for t in pair):
        return ir.BF16Type.get()
    if pair == (ir.F16Type, ir.F16Type):
        return ir.F16Type.get()
    return None


def _up(x: int, m: int) -> int:
    return -(-max(1, x) // m) * m


def _warps(extent: int, width: int) -> int:
    """Warps along a tile's extent: one per ``width`` when it divides, else one."""
    return extent // width if extent % width == 0 else 1


@dataclass(frozen=True)
class MmaTiling:
    """A schedule resolved for tensor cores: the block's tile, its warps, whether rows may
    read different weight slices."""

    tile_m: int
    tile_n: int
    tile_k: int
    warps_m: int
    warps_n: int
    sliced: bool

    @property
    def frags_m(self) -> int:
        """16-row fragments per warp."""
        return self.tile_m // self.warps_m // MMA_M

    @property
    def frags_n(self) -> int:
        """8-column fragments per warp."""
        return self.tile_n // self.warps_n // MMA_N

    @property
    def threads(self) -> int:
        """Threads per block."""
        return WARP * self.warps_m * self.warps_n

    @property
    def accumulators(self) -> int:
        """f32 accumulators per thread (4 per fragment)."""
        return 4 * self.frags_m * self.frags_n

    @property
    def stride(self) -> int:
        """Row length of ``As`` and ``Bs``."""
        return self.tile_k + ROW_PAD

    @property
    def shared_bytes(self) -> int:
        """Shared memory per block: ``As``, ``Bs`` and ``Ts`` (when sliced)."""
        halves = (self.tile_m + self.tile_n) * self.stride
        return HALF_BYTES * halves + (4 * self.tile_m if self.sliced else 0)


def mma_tiling(s: Schedule, k: int, n: int, sliced: bool, loc: ir.Location) -> MmaTiling:
    """Schedule ``s`` rounded to whole fragments (``tile_m`` up to a multiple of 16,
    ``tile_n`` of 8, ``tile_k`` of 16; 0 means the whole extent), or a ``PassFailure`` at
    ``loc`` naming the GPU limit it breaks."""
    tile_m = _up(s.tile_m, MMA_M)
    tile_n = _up(s.tile_n or n, MMA_N)
    tile_k = _up(min(s.tile_k or k, k), MMA_K)
    t = MmaTiling(
        tile_m, tile_n, tile_k, _warps(tile_m, 2 * MMA_M), _warps(tile_n, 4 * MMA_N), sliced
    )
    if t.accumulators > MAX_REGISTER_BLOCK:
        raise PassFailure(
            f"tensor-core tile {tile_m} × {tile_n} gives each thread {t.accumulators} "
            f"accumulators ({t.frags_m} × {t.frags_n} fragments of 16 × 8 per warp), more than "
            f"{MAX_REGISTER_BLOCK}",
            loc,
        )
    if t.threads > MAX_THREADS:
        raise PassFailure(
            f"tensor-core tile needs {t.threads} threads per block, more than {MAX_THREADS}", loc
        )
    if t.shared_bytes > SHARED_BYTES_LIMIT:
        raise PassFailure(
            f"tensor-core tiles take {t.shared_bytes} bytes of shared memory per block "
            f"((tile_m + tile_n) × (tile_k + {ROW_PAD}) = ({tile_m} + {tile_n}) × {t.stride} "
            f"16-bit values), more than the {SHARED_BYTES_LIMIT} a block may use",
            loc,
        )
    return t


@dataclass(frozen=True)
class MmaKernel:
    """What the kernel's body needs: the GEMM's shape and epilogue, the row→slice rule, the
    tiling and the 16-bit type (``"bf16"`` or ``"f16"``)."""

    k: int
    n: int
    epilogue: str  # store | add | atomic_add
    transposed: bool  # xwt: weight[t, j, k]
    slice_rows: int | None
    tiling: MmaTiling
    half: str

    def element(self) -> ir.Type:
        """The 16-bit type in the current context."""
        return ir.BF16Type.get() if self.half == "bf16" else ir.F16Type.get()

    @property
    def n_tiles(self) -> int:
        """Column tiles per row tile."""
        return -(-self.n // self.tiling.tile_n)

    def grid(self, b: T.Body, rows: ir.Value) -> ir.Value:
        """Blocks: ``ceil(rows / tile_m) · ceil(n / tile_n)``."""
        tm = self.tiling.tile_m
        return arith.muli(
            arith.divui(arith.addi(rows, b.index(tm - 1)), b.index(tm)), b.index(self.n_tiles)
        )


def attribution_types(g: MmaKernel) -> tuple[list[ir.Type], list[ir.Type]]:
    """Shared (``As``, ``Bs``, ``Ts`` when sliced) and private (the accumulators) types."""
    tl, half = g.tiling, g.element()
    shared = address_space("workgroup")
    wg = [
        ir.MemRefType.get([tl.tile_m, tl.stride], half, memory_space=shared),
        ir.MemRefType.get([tl.tile_n, tl.stride], half, memory_space=shared),
    ]
    if tl.sliced:
        i32 = ir.IntegerType.get_signless(32)
        wg.append(ir.MemRefType.get([tl.tile_m], i32, memory_space=shared))
    acc = ir.MemRefType.get([tl.accumulators], T.f32_type(), memory_space=address_space("private"))
    return wg, [acc]


@dataclass(frozen=True)
class MmaMemory:
    """The kernel's attributions by role."""

    a: ir.Value
    b: ir.Value
    t: ir.Value | None
    acc: ir.Value


def mma_memory(wg: list[ir.Value], private: list[ir.Value]) -> MmaMemory:
    """The attributions bound to their roles."""
    return MmaMemory(wg[0], wg[1], wg[2] if len(wg) > 2 else None, private[0])


@dataclass(frozen=True)
class Block:
    """The block's tile: first row and column, and the GEMM's row count."""

    m0: ir.Value
    n0: ir.Value
    rows: ir.Value


def _block(b: T.Body, g: MmaKernel) -> Block:
    bid = gpu.block_id(gpu.Dimension.x)
    nt = b.index(g.n_tiles)
    m0 = arith.muli(arith.divui(bid, nt), b.index(g.tiling.tile_m))
    n0 = arith.muli(arith.remui(bid, nt), b.index(g.tiling.tile_n))
    return Block(m0, n0, T.gemm_rows(b, b.index(0)))


@dataclass(frozen=True)
class Lane:
    """A thread's place in the fragments: its warp sub-tile's first row and column in the
    block's tile, ``group = lane / 4`` and ``tig = lane mod 4``."""

    row0: ir.Value
    col0: ir.Value
    group: ir.Value
    tig: ir.Value


def _lane(b: T.Body, g: MmaKernel) -> Lane:
    """The calling thread's :class:`Lane`, from a fresh ``gpu.thread_id``."""
    tl = g.tiling
    tid = gpu.thread_id(gpu.Dimension.x)
    warp, lane = arith.divui(tid, b.index(WARP)), arith.remui(tid, b.index(WARP))
    wn = b.index(tl.warps_n)
    row0 = arith.muli(arith.divui(warp, wn), b.index(tl.frags_m * MMA_M))
    col0 = arith.muli(arith.remui(warp, wn), b.index(tl.frags_n * MMA_N))
    return Lane(row0, col0, arith.divui(lane, b.index(4)), arith.remui(lane, b.index(4)))


def _acc_index(g: MmaKernel, fm: int, fn: int, c: int) -> int:
    return (fm * g.tiling.frags_n + fn) * 4 + c


def _acc_place(b: T.Body, ln: Lane, fm: int, fn: int, c: int) -> tuple[ir.Value, ir.Value]:
    """Tile row and column of accumulator ``c`` of fragment ``(fm, fn)``: row ``group`` (+8
    for ``c ≥ 2``), column ``2·tig + c mod 2``."""
    row = arith.addi(ln.row0, arith.addi(ln.group, b.index(fm * MMA_M + 8 * (c // 2))))
    col = arith.addi(ln.col0, arith.addi(arith.muli(ln.tig, b.index(2)), b.index(fn * 8 + c % 2)))
    return row, col


def _half(b: T.Body, g: MmaKernel, role: str, *idx: ir.Value) -> ir.Value:
    """``role[idx]`` in the 16-bit type (an f32 operand rounded to nearest even)."""
    return T.from_f32(memref.load(b.ops[role], list(idx)), g.element())


def _select_half(
    b: T.Body, g: MmaKernel, ok: ir.Value, load: tuple[str, list[ir.Value]]
) -> ir.Value:
    """``ok ? role[idx] : 0`` in the 16-bit type, loading only when ``ok``."""
    from mlir.dialects import scf

    half = g.element()
    branch = scf.IfOp(ok, [half], has_else=True)
    with ir.InsertionPoint(branch.then_block):
        scf.yield_([_half(b, g, load[0], *load[1])])
    with ir.InsertionPoint(branch.else_block):
        scf.yield_([arith.constant(half, 0.0)])
    return branch.results[0]


def _slice_of(b: T.Body, g: MmaKernel, i: ir.Value) -> ir.Value:
    """Weight slice of row ``i`` as index."""
    if b.ops.has("weight_index"):
        return b.load_index("weight_index", i)
    assert g.slice_rows is not None
    return arith.divui(i, b.index(g.slice_rows))


def _slice(mem: MmaMemory, r: ir.Value) -> ir.Value:
    assert mem.t is not None
    return arith.index_cast(ir.IndexType.get(), memref.load(mem.t, [r]))


def _record_slices(b: T.Body, g: MmaKernel, mem: MmaMemory) -> None:
    """Phase: ``Ts[r]`` = slice of row ``m0 + r`` (rows past the end take row ``m0``'s)."""
    assert mem.t is not None
    blk = _block(b, g)
    i32 = ir.IntegerType.get_signless(32)
    tid = gpu.thread_id(gpu.Dimension.x)
    with strided(b, tid, g.tiling.tile_m, g.tiling.threads) as r:
        i = arith.addi(blk.m0, r)
        i = arith.select(ult(i, blk.rows), i, blk.m0)
        memref.store(arith.index_cast(i32, _slice_of(b, g, i)), mem.t, [r])


def _a_row(b: T.Body, i: ir.Value) -> ir.Value:
    return b.load_index("gather_index", i) if b.ops.has("gather_index") else i


def _stage(b: T.Body, g: MmaKernel, mem: MmaMemory, step: ir.Value) -> None:
    """Phase: ``As[r, kk] = a[row(m0 + r), k0 + kk]`` (0 past the edges, and for rows of
    another slice than row ``m0``'s), ``Bs[jj, kk] = weight[t0, k0 + kk, n0 + jj]``
    (``[t0, n0 + jj, k0 + kk]`` for ``xwt``)."""
    tl = g.tiling
    blk = _block(b, g)
    k0 = arith.muli(step, b.index(tl.tile_k))
    ck, tid = b.index(g.k), gpu.thread_id(gpu.Dimension.x)
    with strided(b, tid, tl.tile_m * tl.tile_k, tl.threads) as e:
        r, kk = arith.divui(e, b.index(tl.tile_k)), arith.remui(e, b.index(tl.tile_k))
        i, k = arith.addi(blk.m0, r), arith.addi(k0, kk)
        ok = arith.andi(ult(i, blk.rows), ult(k, ck))
        if mem.t is not None:
            same = arith.cmpi(arith.CmpIPredicate.eq, _slice(mem, r), _slice(mem, b.index(0)))
            ok = arith.andi(ok, same)
        memref.store(_select_half(b, g, ok, ("a", [_a_row(b, i), k])), mem.a, [r, kk])
    t0 = _slice(mem, b.index(0)) if mem.t is not None else None
    with strided(b, tid, tl.tile_k * tl.tile_n, tl.threads) as e:
        if g.transposed:  # consecutive threads read consecutive k, the weight's inner extent
            kk, jj = arith.remui(e, b.index(tl.tile_k)), arith.divui(e, b.index(tl.tile_k))
        else:
            kk, jj = arith.divui(e, b.index(tl.tile_n)), arith.remui(e, b.index(tl.tile_n))
        k, j = arith.addi(k0, kk), arith.addi(blk.n0, jj)
        ok = arith.andi(ult(k, ck), ult(j, b.index(g.n)))
        idx = T.sliced(t0, *((j, k) if g.transposed else (k, j)))
        memref.store(_select_half(b, g, ok, ("weight", list(idx))), mem.b, [jj, kk])


def _fragment(
    b: T.Body, tile: ir.Value, places: list[tuple[ir.Value, ir.Value]], shape: list[int]
) -> ir.Value:
    """A fragment of ``shape`` from shared ``tile`` at ``places`` (row-major)."""
    element = ir.MemRefType(tile.type).element_type
    values = [memref.load(tile, [r, c]) for r, c in places]
    return vector.from_elements(ir.VectorType.get(shape, element), values)


def _mma(b: T.Body, g: MmaKernel, mem: MmaMemory, ks: int, fm: int, fn: int) -> None:
    """One ``nvgpu.mma.sync``: fragment ``(fm, fn)`` of the warp's sub-tile over reduction
    steps ``16·ks …`` of the staged tiles, its accumulators read from and written back to the
    register block."""
    ln = _lane(b, g)

    def at(base: ir.Value, off: int) -> ir.Value:
        return arith.addi(base, b.index(off))

    arow = at(ln.row0, fm * MMA_M)
    arow = arith.addi(arow, ln.group)
    bcol = arith.addi(at(ln.col0, fn * MMA_N), ln.group)
    kb = arith.addi(arith.muli(ln.tig, b.index(2)), b.index(ks * MMA_K))
    # A register q holds row group + 8·(q mod 2), columns 2·tig + 8·(q div 2) + {0, 1}.
    a_at = [(at(arow, 8 * (q % 2)), at(kb, 8 * (q // 2) + h)) for q in range(4) for h in (0, 1)]
    # B register q holds reduction steps 2·tig + 8·q + {0, 1} of column group.
    b_at = [(bcol, at(kb, 8 * q + h)) for q in range(2) for h in (0, 1)]
    a = _fragment(b, mem.a, a_at, [4, 2])
    w = _fragment(b, mem.b, b_at, [2, 2])
    slots = [_acc_index(g, fm, fn, c) for c in range(4)]
    c_vals = [memref.load(mem.acc, [b.index(s)]) for s in slots]
    acc_type = ir.VectorType.get([2, 2], T.f32_type())
    d = nvgpu.mma_sync(
        acc_type, a, w, vector.from_elements(acc_type, c_vals), [MMA_M, MMA_N, MMA_K]
    )
    for c, s in enumerate(slots):
        memref.store(vector.extract(d, [], [c // 2, c % 2]), mem.acc, [b.index(s)])


def _other_slices(b: T.Body, g: MmaKernel, mem: MmaMemory, step: ir.Value) -> None:
    """Rows whose slice is not row ``m0``'s (zero in ``As``): each accumulator of such a row
    adds ``Σ_kk a[row, k0 + kk] · weight[slice, k0 + kk, col]`` on the 16-bit values, in f32
    FMAs from global memory (columns past ``n`` read column ``n - 1``; the epilogue drops
    them)."""
    tl = g.tiling
    blk, ln = _block(b, g), _lane(b, g)
    k0 = arith.muli(step, b.index(tl.tile_k))
    depth = arith.minui(b.index(tl.tile_k), arith.subi(b.index(g.k), k0))
    t0, last = _slice(mem, b.index(0)), b.index(g.n - 1)
    for fm in range(tl.frags_m):
        for fn in range(tl.frags_n):
            for c in range(4):
                row, col = _acc_place(b, ln, fm, fn, c)
                t = _slice(mem, row)
                with b.guard(arith.cmpi(arith.CmpIPredicate.ne, t, t0)):
                    ar = _a_row(b, arith.addi(blk.m0, row))
                    j = arith.minui(arith.addi(blk.n0, col), last)
                    slot = [b.index(_acc_index(g, fm, fn, c))]
                    init = memref.load(mem.acc, slot)
                    total = b.reduce(
                        b.index(0), depth, b.index(1), init, _product(b, g, k0, ar, j, t)
                    )
                    memref.store(total, mem.acc, slot)


def _product(
    b: T.Body, g: MmaKernel, k0: ir.Value, ar: ir.Value, j: ir.Value, t: ir.Value
) -> Callable[[ir.Value, ir.Value], ir.Value]:
    """``s + a[ar, k0 + kk] · weight[t, k0 + kk, j]`` on the 16-bit values, as an f32 FMA."""
    contract = fma_contract()

    def step(kk: ir.Value, s: ir.Value) -> ir.Value:
        k = arith.addi(k0, kk)
        x = T.to_f32(_half(b, g, "a", ar, k))
        w = T.to_f32(_half(b, g, "weight", *T.sliced(t, *((j, k) if g.transposed else (k, j)))))
        return arith.addf(s, arith.mulf(x, w, fastmath=contract), fastmath=contract)

    return step


def _multiply(b: T.Body, g: MmaKernel, mem: MmaMemory, step: ir.Value) -> None:
    """Phase: every ``mma`` of the step, then the rows of other slices."""
    tl = g.tiling
    for ks in range(tl.tile_k // MMA_K):
        for fm in range(tl.frags_m):
            for fn in range(tl.frags_n):
                _mma(b, g, mem, ks, fm, fn)
    if mem.t is not None:
        _other_slices(b, g, mem, step)


def _epilogue(b: T.Body, g: MmaKernel, mem: MmaMemory) -> None:
    """Phase: each accumulator of an existing row and column, scaled by ``row_scale[i]``,
    reaches ``out[scatter_index[i] or i, j]`` by the template's epilogue."""
    tl = g.tiling
    blk, ln = _block(b, g), _lane(b, g)
    for fm in range(tl.frags_m):
        for half in (0, 1):
            row, _ = _acc_place(b, ln, fm, 0, 2 * half)
            i = arith.addi(blk.m0, row)
            with b.guard(ult(i, blk.rows)):
                o = b.load_index("scatter_index", i) if b.ops.has("scatter_index") else i
                scale = b.load("row_scale", i, b.index(0)) if b.ops.has("row_scale") else None
                for fn in range(tl.frags_n):
                    for c in (2 * half, 2 * half + 1):
                        _, col = _acc_place(b, ln, fm, fn, c)
                        j = arith.addi(blk.n0, col)
                        with b.guard(ult(j, b.index(g.n))):
                            v = memref.load(mem.acc, [b.index(_acc_index(g, fm, fn, c))])
                            if scale is not None:
                                v = arith.mulf(v, scale)
                            if g.epilogue == "store":
                                b.store("out", v, o, j)
                            else:
                                b.accumulate("out", v, g.epilogue == "atomic_add", o, j)


def mma_gemm_body(b: T.Body, g: MmaKernel, mem: MmaMemory) -> None:
    """The whole kernel body (see the module docstring): phases separated by
    ``gpu.barrier``."""
    if mem.t is not None:
        _record_slices(b, g, mem)
        gpu.barrier()
    for e in range(g.tiling.accumulators):
        memref.store(b.f32(0.0), mem.acc, [b.index(e)])
    with b.loop(b.index(0), b.index(-(-g.k // g.tiling.tile_k)), b.index(1)) as step:
        _stage(b, g, mem, step)
        gpu.barrier()
        _multiply(b, g, mem, step)
        gpu.barrier()
    _epilogue(b, g, mem)
