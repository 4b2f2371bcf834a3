"""The GPU schedule the lowering gives a GEMM template from its shapes alone (64-row tiles of
4 × 4 register blocks for ``xw``/``xwt``; 64 × 64 ``out`` tiles for the weight gradient)."""

from __future__ import annotations

from ...dialects.hector_intra import Schedule

#: Rows per block and per thread of the GPU chooser (64 × 64 output tiles of 16 × 16 threads,
#: 4 × 4 registers each: the classic shared-memory SGEMM shape).
GPU_TILE_M, GPU_UNROLL, GPU_TILE_K, GPU_MAX_TILE_N = 64, 4, 16, 64


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
