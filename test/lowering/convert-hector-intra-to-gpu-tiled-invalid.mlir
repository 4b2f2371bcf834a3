// RUN: hector-opt %s --split-input-file --verify-diagnostics -p convert-hector-intra-to-gpu

// A schedule the GPU cannot run is refused at the template, naming the limit it breaks
// (lowering/gpu/gemm.py: gemm_tiling), instead of failing later in the NVVM back end or the
// driver; a malformed schedule dictionary is refused by name.

func.func @too_much_shared_memory(%x: memref<?x256xf32>, %w: memref<256x64xf32>, %out: memref<?x64xf32>) {
  // expected-error @+1 {{schedule tiles take 131328 bytes of shared memory per block (tile_m × (tile_k + 1) = 64 × 257 rows of a, tile_k × tile_n = 256 × 64 of the weight), more than the 49152 a block may use}}
  "hector_intra.gemm_template"(%x, %w, %out) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, schedule = {tile_m = 64 : i64, tile_n = 64 : i64, tile_k = 256 : i64, vector = 4 : i64, unroll = 4 : i64}, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x256xf32>, memref<256x64xf32>, memref<?x64xf32>) -> ()
  return
}

// -----

func.func @too_many_threads(%x: memref<?x16xf32>, %w: memref<16x64xf32>, %out: memref<?x64xf32>) {
  // expected-error @+1 {{schedule needs 2048 threads per block ((tile_m / unroll) × (tile_n / vector) = 32 × 64), more than a GPU block's 1024}}
  "hector_intra.gemm_template"(%x, %w, %out) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, schedule = {tile_m = 32 : i64, tile_n = 64 : i64, tile_k = 8 : i64}, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x16xf32>, memref<16x64xf32>, memref<?x64xf32>) -> ()
  return
}

// -----

func.func @rows_not_in_register_blocks(%x: memref<?x16xf32>, %w: memref<16x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{schedule tile_m = 6 must be a multiple of unroll = 4 (the rows of one GPU thread's register block)}}
  "hector_intra.gemm_template"(%x, %w, %out) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, schedule = {tile_m = 6 : i64, unroll = 4 : i64}, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x16xf32>, memref<16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

func.func @columns_not_in_register_blocks(%x: memref<?x16xf32>, %w: memref<16x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{schedule tile_n = 6 must be a multiple of vector = 4 (the columns of one GPU thread's register block)}}
  "hector_intra.gemm_template"(%x, %w, %out) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, schedule = {tile_m = 4 : i64, tile_n = 6 : i64, vector = 4 : i64}, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x16xf32>, memref<16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

func.func @register_block_too_big(%x: memref<?x16xf32>, %w: memref<16x64xf32>, %out: memref<?x64xf32>) {
  // expected-error @+1 {{schedule register block unroll × vector = 8 × 16 holds more than 64 accumulators per GPU thread}}
  "hector_intra.gemm_template"(%x, %w, %out) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, schedule = {tile_m = 8 : i64, tile_n = 64 : i64, vector = 16 : i64, unroll = 8 : i64}, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x16xf32>, memref<16x64xf32>, memref<?x64xf32>) -> ()
  return
}

// -----

func.func @unknown_field(%x: memref<?x16xf32>, %w: memref<16x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{unknown schedule field 'block' (known: tile_m, tile_n, tile_k, vector, unroll, pack, parallel, threads, products, panels, in_place)}}
  "hector_intra.gemm_template"(%x, %w, %out) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, schedule = {block = 4 : i64}, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x16xf32>, memref<16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

func.func @negative_tile(%x: memref<?x16xf32>, %w: memref<16x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{schedule field tile_m must be at least 1, got 0}}
  "hector_intra.gemm_template"(%x, %w, %out) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, schedule = {tile_m = 0 : i64}, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x16xf32>, memref<16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

func.func @weight_gradient_schedule_checked(%x: memref<?x16xf32>, %dy: memref<?x8xf32>, %dw: memref<16x8xf32>) {
  // expected-error @+1 {{schedule field pack must be a bool, got 1 : i64}}
  "hector_intra.gemm_template"(%x, %dy, %dw) {variant = "xty", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64, schedule = {pack = 1 : i64}, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x16xf32>, memref<?x8xf32>, memref<16x8xf32>) -> ()
  return
}

// -----

func.func @weight_gradient_too_many_threads(%x: memref<?x64xf32>, %dy: memref<?x128xf32>, %dw: memref<64x128xf32>) {
  // expected-error @+1 {{schedule needs 2048 threads per block of the weight gradient ((tile_k / unroll) × (tile_n / vector) = 16 × 128), more than a GPU block's 1024}}
  "hector_intra.gemm_template"(%x, %dy, %dw) {variant = "xty", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64, schedule = {tile_m = 8 : i64, tile_k = 64 : i64, tile_n = 128 : i64, unroll = 4 : i64}, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x64xf32>, memref<?x128xf32>, memref<64x128xf32>) -> ()
  return
}

// -----

func.func @weight_gradient_too_much_shared_memory(%x: memref<?x64xf32>, %dy: memref<?x64xf32>, %dw: memref<64x64xf32>) {
  // expected-error @+1 {{schedule tiles of the weight gradient take 66048 bytes of shared memory per block (tile_m = 128 rows of tile_k + 1 = 65 and tile_n = 64 floats), more than the 49152 a block may use}}
  "hector_intra.gemm_template"(%x, %dy, %dw) {variant = "xty", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64, schedule = {tile_m = 128 : i64, tile_k = 64 : i64, tile_n = 64 : i64, unroll = 4 : i64, vector = 4 : i64}, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x64xf32>, memref<?x64xf32>, memref<64x64xf32>) -> ()
  return
}
