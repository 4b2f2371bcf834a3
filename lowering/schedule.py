"""``hector-schedule``: choose each hector_intra template's schedule from its shapes.

The choice is an analytic model of the CPU micro-kernel, not a search: the register block is
``unroll`` rows by ``tile_n`` columns of f32 accumulators (:func:`accumulator_elements`),
which leaves the other registers for the weight row's vectors and the broadcast operand:
4 × 32 in 8 of AVX-512's 32 registers; 6 × 16 in 12 of AVX2's 16 (BLIS's block for Haswell:
two weight vectors and one broadcast beside them; 4 × 32 needed all 16 registers for its
accumulators alone and ran at 0.34-0.47x ``torch.mm``, 4 × 16 in 8 left the FMA units
waiting on too few independent sums). ``vector_bits`` is the pass option: ``hector.compile``
passes the host's, ``lowering/cpu/features.py``. ``tile_n`` is the widest of 32, 16, 8 that
divides the output width and whose 4-row block fits (the transform script needs whole blocks:
vectorisation wants static shapes), ``unroll`` the most rows of 6, 4, 2, 1 up to the width's
:data:`ROW_BLOCK` that divide the product's row extent (``tile_m`` for ``xw``/``xwt``, ``K``
for the weight gradient ``xty``) and fit.
Tiles of ``tile_m`` rows, 8 register blocks (:func:`tile_rows`: 32 rows, 48 on AVX2), are
packed (a weight gradient reduces over as many rows per tile). An f32 ``xw`` whose weight rows
are 2 KiB or more (:data:`PANEL_ROW_BYTES`: 512 columns) and wider than ``tile_n`` multiplies
by its weight packed in column panels ``[K, tile_n]`` (``panels``, ``lowering/cpu/tiles.py``),
panel by panel: read in place, every reduction step would reach a new cache line at the rows'
stride, and at a stride of 2 KiB those lines fall in a few cache sets, so the weight's reuse
across a tile's register blocks missed L1 and L2 (512 columns on the Zen 3 VM: 0.54-0.62x
``torch.mm`` in place, 0.77-1.06x in panels). Narrower weights keep their layout (their
per-call copy of every slice cost 5% on 90 relations at 256 columns). ``tile_k`` splits a panel
product's reduction into blocks where a panel would outgrow :data:`PANEL_BYTES` for the vector
width (``K × tile_n × 4`` bytes: beyond ``K = 4096`` at ``tile_n = 32`` on AVX-512, ``K = 512``
at ``tile_n = 16`` on AVX2), else stays 1 (the micro-kernel's own step: one block).
An f32 ``xw`` reading ungathered f32 rows of ``a`` (a typed linear, a layer's root term) with
``K`` up to :data:`IN_PLACE_MAX_K` multiplies whole tiles of those rows in place (``in_place``,
``lowering/cpu/in_place.py``): they already have the packed tile's layout, and their copy, with
the epilogue's cache misses the prefetches then hide, cost 14-16% at ``K = 64``.
Products too narrow for a vector (fewer than 8 output columns, or ``K`` below 4) keep
the row-at-a-time form, spread over the workers all the same.

``threads`` (the pass option; ``hector.compile`` passes ``torch.get_num_threads()``) sets the
workers: with more than one, every template runs its rows in ``threads`` chunks
(``parallel = "rows"``). A template that already has a schedule keeps it, so a hand-written
schedule in a ``.mlir`` file is lowered as written.

``bf16_dot`` (``hector.compile`` passes whether the CPU has AVX512-BF16) gives a packed GEMM
with a bf16 operand, or in a function taking a bf16 argument, ``products = "bf16"``: bf16
pairs multiplied into f32 (``lowering/cpu/bf16.py``) in register blocks of 16 accumulator
vectors (:data:`BF16_BLOCKS`); a weight gradient's tiles then hold
:data:`BF16_XTY_TILE_M` rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from mlir import ir

from ..dialects import hector_intra as intra
from ..dialects.builders import OpAccess
from ..passes.registry import Option, PassFailure, register_pass
from ..passes.walk import walk_ops
from . import templates as T
from .cpu.in_place import in_place_applies
from .gpu import schedule_choice as gpu_schedule_choice

#: Column blocks the micro-kernel accepts, widest first.
TILE_N_CHOICES = (32, 16, 8)
#: Register-block rows, largest first.
UNROLL_CHOICES = (6, 4, 2, 1)


#: Vector registers per width of them (``vector_bits``): AVX-512's 32, AVX2's and SSE's 16.
REGISTERS = {512: 32, 256: 16, 128: 16}
#: The registers a register block's accumulators may take: half of AVX-512's and SSE's; 12 of
#: AVX2's 16 (6 × 16: two more for the weight row's vectors, one for the broadcast operand).
ACCUMULATOR_REGISTERS = {512: 16, 256: 12, 128: 8}
#: The most rows of a register block: 4 (a 4 × 32 block on AVX-512), 6 on AVX2 (6 × 16).
ROW_BLOCK = {512: 4, 256: 6, 128: 4}


def _largest_divisor(extent: int, choices: tuple[int, ...]) -> int | None:
    return next((c for c in choices if extent % c == 0), None)


def _known(vector_bits: int) -> None:
    if vector_bits not in REGISTERS:
        known = ", ".join(str(b) for b in sorted(REGISTERS))
        raise ValueError(f"vector_bits must be one of {known}, got {vector_bits}")


def accumulator_elements(vector_bits: int) -> int:
    """The most f32 accumulators (``unroll × tile_n``) of a register block on registers of
    ``vector_bits`` bits (:data:`ACCUMULATOR_REGISTERS` of them): 256 on AVX-512 (4 × 32 in 8
    of its 32 registers), 96 on AVX2 (6 × 16 in 12 of its 16), 32 on SSE."""
    _known(vector_bits)
    return ACCUMULATOR_REGISTERS[vector_bits] * (vector_bits // 32)


def tile_rows(vector_bits: int) -> int:
    """Rows per packed tile: 8 register blocks of :data:`ROW_BLOCK` rows (32; 48 on AVX2);
    a weight gradient (``xty``) reduces over as many rows per tile, so it can share the tile
    of its input gradient's ``xwt`` (``hector-pair-gradient-gemms``)."""
    _known(vector_bits)
    return 8 * ROW_BLOCK[vector_bits]


def register_block(n_extent: int, rows: int, vector_bits: int) -> tuple[int | None, int]:
    """``(tile_n, unroll)``: the widest column block of :data:`TILE_N_CHOICES` dividing
    ``n_extent`` whose 4-row block fits :func:`accumulator_elements` (4 × 8 fits every width),
    then the most rows of :data:`UNROLL_CHOICES`, up to the width's :data:`ROW_BLOCK`,
    dividing ``rows`` that still fit; ``tile_n`` None when no choice divides ``n_extent``."""
    most = accumulator_elements(vector_bits)
    tile_n = _largest_divisor(n_extent, tuple(t for t in TILE_N_CHOICES if 4 * t <= most))
    unrolls = tuple(
        u for u in UNROLL_CHOICES if u <= ROW_BLOCK[vector_bits] and u * (tile_n or 0) <= most
    )
    return tile_n, _largest_divisor(rows, unrolls) or 1


#: The most bytes of one weight panel's reduction block (``tile_k × tile_n × 4``), by vector
#: width: on AVX-512, half the 1 MiB L2 cache of a Zen 4 core, which also holds the tile's rows
#: of that block; on AVX2, the 32 KiB L1 data cache of a Zen 3 core (``[20000, 1024] ×
#: [1024, 512]``: 0.87x and 1.07x ``torch.mm`` in one block, 1.04x and 1.05x in blocks of 512).
PANEL_BYTES = {512: 512 * 1024, 256: 32 * 1024, 128: 32 * 1024}
#: The least bytes of a weight row for which an f32 ``xw`` multiplies by weight panels.
PANEL_ROW_BYTES = 2048


def reduction_block(variant: str, k_extent: int, tile_n: int, vector_bits: int = 512) -> int:
    """``tile_k`` of a packed f32 GEMM: steps per reduction block of an ``xw``'s panels, the
    most whose panel block fits the width's :data:`PANEL_BYTES`, in multiples of 8 — or 1
    (no blocks) where the whole panel fits, and for the other variants."""
    most = PANEL_BYTES[vector_bits] // (4 * tile_n) // 8 * 8
    if variant != "xw" or k_extent <= most:
        return 1
    return max(most, 8)


#: The widest reduction whose f32 ``xw`` tiles read ``a``'s rows in place: at ``K = N = 64``,
#: 1 thread, same process, 0.78-0.84x ``torch.mm`` packed against 0.90-0.98x in place (0.69-0.73x
#: against 0.81-0.83x at ``K = 32``); forced at 128 the same or 1-2% slower, at 256 up to 10%
#: slower (``docs/optimizations.md``, "Small reductions: rows in place").
IN_PLACE_MAX_K = 64


def cpu_gemm_schedule(v: OpAccess, threads: int, vector_bits: int = 512) -> intra.Schedule:
    """The CPU schedule of one GEMM template (module docstring)."""
    ops = T.operands(v)
    variant = v.attr("variant")
    k_extent = T.static_dim(ops["a"], 1)
    n_extent = T.width(ops["weight"] if variant == "xty" else ops["out"])
    parallel = "rows" if threads > 1 else "none"
    tile_m = tile_rows(vector_bits)
    rows = k_extent if variant == "xty" else tile_m
    tile_n, unroll = register_block(n_extent, rows, vector_bits)
    if tile_n is None or k_extent < 4:
        return intra.Schedule(parallel=parallel, threads=threads)
    panels = variant == "xw" and n_extent > tile_n and 4 * n_extent >= PANEL_ROW_BYTES
    return intra.Schedule(
        tile_m=tile_m,
        tile_n=tile_n,
        tile_k=reduction_block(variant, k_extent, tile_n, vector_bits) if panels else 1,
        vector=tile_n,
        unroll=unroll,
        pack=True,
        parallel=parallel,
        threads=threads,
        panels=panels,
        in_place=not panels and k_extent <= IN_PLACE_MAX_K and in_place_applies(v),
    )


#: Register blocks of the bf16 micro-kernel, widest first: ``(tile_n, unroll)``, 16
#: accumulator vectors each (AVX-512 has 32 registers: the rest hold the right-hand pairs and
#: the broadcast left-hand pair).
BF16_BLOCKS = ((64, 4), (32, 8), (16, 8))
#: Rows per tile of a weight gradient (``xty``) on bf16 pairs: its reduction runs over the
#: tile's rows, so each register block loads and stores its accumulators (in ``out``) once per
#: ``tile_m / 2`` pair steps; 32 rows gave 16 steps, and the accumulators' traffic was a tenth
#: of the kernel.
BF16_XTY_TILE_M = 64


def bf16_products(v: OpAccess, s: intra.Schedule, bf16_inputs: bool = False) -> intra.Schedule:
    """``s`` multiplying bf16 pairs (``products = "bf16"``, ``lowering/cpu/bf16.py``) where
    that applies: a packed CPU GEMM with an operand stored in bf16 — or any packed GEMM of a
    function with ``bf16_inputs`` (an argument stored in bf16: its GEMMs compute in bf16 as
    under autocast) — with an even reduction and output columns in whole vectors of 16; else
    ``s`` as it is."""
    ops = T.operands(v)
    variant = v.attr("variant")
    stored = [ir.MemRefType(ops[r].type).element_type for r in ("a", "weight")]
    if not s.pack or not (bf16_inputs or any(isinstance(t, ir.BF16Type) for t in stored)):
        return s
    k_extent = T.static_dim(ops["a"], 1)
    n_extent = T.width(ops["weight"] if variant == "xty" else ops["out"])
    tile_m = BF16_XTY_TILE_M if variant == "xty" else s.tile_m
    depth, rows = (tile_m, k_extent) if variant == "xty" else (k_extent, tile_m)
    block = next(((n, u) for n, u in BF16_BLOCKS if n_extent % n == 0 and rows % u == 0), None)
    if depth % 2 or block is None:
        return s
    tile_n, unroll = block
    return dataclasses.replace(
        s,
        tile_m=tile_m,
        tile_n=tile_n,
        unroll=unroll,
        vector=16,
        products="bf16",
        panels=False,
        tile_k=1,
        in_place=False,
    )


def cpu_traversal_schedule(v: OpAccess, threads: int, vector_bits: int = 512) -> intra.Schedule:
    """The CPU schedule of one traversal template: its rows over the workers (``vector_bits``
    unused: a traversal's vectors are its rows' own width)."""
    return intra.Schedule(parallel="rows" if threads > 1 else "none", threads=threads)


#: A schedule chooser: the template, the CPU workers and the CPU's vector width in bits.
Chooser = Callable[[OpAccess, int, int], intra.Schedule]

#: How each template's CPU schedule is chosen, by op name.
CPU_CHOOSERS: dict[str, Chooser] = {
    "hector_intra.gemm_template": cpu_gemm_schedule,
    "hector_intra.traversal_template": cpu_traversal_schedule,
}


def gpu_gemm_schedule(v: OpAccess, threads: int, vector_bits: int = 512) -> intra.Schedule:
    """The GPU schedule of one GEMM template (``gpu_schedule_choice.gpu_gemm_schedule``: 64-row
    tiles staged in shared memory, 4-wide register blocks); ``threads`` and ``vector_bits``
    are the CPU's and unused."""
    ops = T.operands(v)
    variant = v.attr("variant")
    k_extent = T.static_dim(ops["a"], 1)
    n_extent = T.width(ops["weight"] if variant == "xty" else ops["out"])
    return gpu_schedule_choice.gpu_gemm_schedule(variant, k_extent, n_extent)


#: How each template's GPU schedule is chosen (traversals keep one thread per element).
GPU_CHOOSERS: dict[str, Chooser] = {
    "hector_intra.gemm_template": gpu_gemm_schedule,
}

#: Choosers by target (``hector-schedule{target=...}``).
CHOOSERS: dict[str, dict[str, Chooser]] = {
    "cpu": CPU_CHOOSERS,
    "gpu": GPU_CHOOSERS,
}


def bf16_inputs(op: ir.Operation) -> bool:
    """Whether the function holding ``op`` takes an argument stored in bf16."""
    parent = op.parent
    while parent is not None and parent.name != "func.func":
        parent = parent.parent
    if parent is None:
        return False
    for arg in parent.regions[0].blocks[0].arguments:
        if isinstance(arg.type, ir.MemRefType) and isinstance(
            ir.MemRefType(arg.type).element_type, ir.BF16Type
        ):
            return True
    return False


@register_pass(
    "hector-schedule",
    "Attach a schedule (tiles, packing, vector width, unroll, parallel rows, threads) to every "
    "hector_intra template that has none, chosen from its shapes by an analytic model",
    threads=Option(int, 1, "CPU workers (hector.compile passes torch.get_num_threads())"),
    target=Option(str, "cpu", "back end the schedule is for: cpu or gpu"),
    bf16_dot=Option(
        bool,
        False,
        "CPU GEMMs with a bf16 operand, or in a function with a bf16 argument, multiply bf16 "
        "pairs (AVX512-BF16; hector.compile passes whether the CPU has it)",
    ),
    vector_bits=Option(
        int,
        512,
        "width of the CPU's vector registers: 512 (AVX-512, 32 registers), 256 (AVX2, 16) or "
        "128; bounds the GEMM register block (hector.compile passes the host's)",
    ),
)
def run(
    module_op: ir.Operation,
    threads: int = 1,
    target: str = "cpu",
    bf16_dot: bool = False,
    vector_bits: int = 512,
) -> None:
    """Pass entry point."""
    if threads < 1:
        raise PassFailure(f"hector-schedule: threads must be at least 1, got {threads}")
    try:
        accumulator_elements(vector_bits)
    except ValueError as err:
        raise PassFailure(f"hector-schedule: {err}") from None
    if target not in CHOOSERS:
        raise PassFailure(
            f"hector-schedule: unknown target '{target}' (known: {', '.join(CHOOSERS)})"
        )
    choosers = CHOOSERS[target]

    for op in walk_ops(module_op):
        choose = choosers.get(op.name)
        if choose is not None and "schedule" not in op.attributes:
            with op.context, op.location:
                try:
                    schedule = choose(intra.view(op), threads, vector_bits)
                    if bf16_dot and target == "cpu" and op.name == "hector_intra.gemm_template":
                        schedule = bf16_products(intra.view(op), schedule, bf16_inputs(op))
                except ValueError as err:
                    raise PassFailure(f"cannot schedule {op.name}: {err}", op.location) from None
                op.attributes["schedule"] = schedule.to_attr()
