// RUN: hector-opt %s --split-input-file --verify-diagnostics -p 'convert-hector-intra-to-gpu{mma=true}'

// A schedule the tensor-core kernel cannot run (lowering/gpu/mma.py: mma_tiling, the tiles
// rounded to whole 16 × 8 × 16 fragments) is refused at the template, naming the limit.

func.func @too_many_accumulators(%x: memref<?x64xbf16>, %w: memref<64x72xbf16>, %out: memref<?x72xf32>) {
  // expected-error @+1 {{tensor-core tile 32 × 72 gives each thread 72 accumulators (2 × 9 fragments of 16 × 8 per warp), more than 64}}
  "hector_intra.gemm_template"(%x, %w, %out) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, schedule = {tile_m = 32 : i64, tile_n = 72 : i64, tile_k = 16 : i64, vector = 4 : i64, unroll = 4 : i64}, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x64xbf16>, memref<64x72xbf16>, memref<?x72xf32>) -> ()
  return
}

// -----

func.func @too_much_shared_memory(%x: memref<?x1024xbf16>, %w: memref<1024x64xbf16>, %out: memref<?x64xf32>) {
  // expected-error @+1 {{tensor-core tiles take 264192 bytes of shared memory per block ((tile_m + tile_n) × (tile_k + 8) = (64 + 64) × 1032 16-bit values), more than the 49152 a block may use}}
  "hector_intra.gemm_template"(%x, %w, %out) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, schedule = {tile_m = 64 : i64, tile_n = 64 : i64, tile_k = 0 : i64, vector = 4 : i64, unroll = 4 : i64}, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x1024xbf16>, memref<1024x64xbf16>, memref<?x64xf32>) -> ()
  return
}
