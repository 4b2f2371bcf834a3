// RUN: not hector-opt %s --no-hector-verify -p "hector-schedule{threads=0}" 2>&1 | FileCheck %s --check-prefix=THREADS
// RUN: not hector-opt %s --no-hector-verify -p "hector-schedule{target=fpga}" 2>&1 | FileCheck %s --check-prefix=TARGET
// RUN: not hector-opt %s --no-hector-verify -p "hector-schedule{vector_bits=384}" 2>&1 | FileCheck %s --check-prefix=BITS
// RUN: hector-opt %s --split-input-file --verify-diagnostics -p convert-hector-intra-to-scf

// THREADS: error: hector-schedule: threads must be at least 1, got 0
// TARGET: error: hector-schedule: unknown target 'fpga' (known: cpu
// BITS: error: hector-schedule: vector_bits must be one of 128, 256, 512, got 384

func.func @unknown_field(%x: memref<?x16xf32>, %w: memref<16x8xf32>, %out: memref<?x8xf32>) {
  // expected-error@+1 {{invalid schedule: unknown schedule field 'tiles' (known: tile_m, tile_n, tile_k, vector, unroll, pack, parallel, threads, products, panels, in_place)}}
  "hector_intra.gemm_template"(%x, %w, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, schedule = {tiles = 4 : i64}}
      : (memref<?x16xf32>, memref<16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

func.func @bad_parallel(%x: memref<?x16xf32>, %w: memref<16x8xf32>, %out: memref<?x8xf32>) {
  // expected-error@+1 {{invalid schedule: schedule field parallel must be one of rows, none, got 'columns'}}
  "hector_intra.gemm_template"(%x, %w, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, schedule = {parallel = "columns"}}
      : (memref<?x16xf32>, memref<16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

func.func @zero_threads(%dst: memref<?xi32>, %m: memref<?x4xf32>, %out: memref<?x4xf32>) {
  // expected-error@+1 {{invalid schedule: schedule field threads must be a positive integer, got 0}}
  "hector_intra.traversal_template"(%dst, %m, %out)
      {parallel = "edge", fn = "copy", reduce = "sum", slope = 0.0 : f32,
       block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 1, 0, 1, 0, 1>,
       schedule = {threads = 0 : i64}}
      : (memref<?xi32>, memref<?x4xf32>, memref<?x4xf32>) -> ()
  return
}

// -----

func.func @block_too_wide(%x: memref<?x16xf32>, %w: memref<16x8xf32>, %out: memref<?x8xf32>) {
  // expected-error@+1 {{invalid schedule: the register block (unroll 3 x tile_n 16) must divide the product (8 x 8)}}
  "hector_intra.gemm_template"(%x, %w, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>,
       schedule = {pack = true, tile_m = 8 : i64, tile_n = 16 : i64, unroll = 3 : i64}}
      : (memref<?x16xf32>, memref<16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

// Weight panels are for f32 xw tiles: a weight gradient's right operand is its row gradients.
func.func @panels_of_a_weight_gradient(%x: memref<?x16xf32>, %dy: memref<?x64xf32>, %dw: memref<16x64xf32>) {
  // expected-error@+1 {{invalid schedule: weight panels are for packed xw tiles of f32 products}}
  "hector_intra.gemm_template"(%x, %dy, %dw)
      {variant = "xty", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>,
       schedule = {pack = true, panels = true, tile_m = 8 : i64, tile_n = 32 : i64, unroll = 2 : i64}}
      : (memref<?x16xf32>, memref<?x64xf32>, memref<16x64xf32>) -> ()
  return
}

// -----

// In-place tiles read a's rows where they lie: gathered rows must be packed.
func.func @gathered_rows_in_place(%x: memref<?x16xf32>, %w: memref<16x8xf32>, %src: memref<?xi32>, %out: memref<?x8xf32>) {
  // expected-error@+1 {{invalid schedule: in-place tiles are for an xw reading ungathered f32 rows of a}}
  "hector_intra.gemm_template"(%x, %w, %src, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 1>,
       schedule = {in_place = true, pack = true, tile_m = 8 : i64, tile_n = 8 : i64, unroll = 2 : i64}}
      : (memref<?x16xf32>, memref<16x8xf32>, memref<?xi32>, memref<?x8xf32>) -> ()
  return
}

// -----

// Schedule fields are bounded: the lowerings build buffers of the tiles' extents and combine
// the workers' partial outputs one by one (2^62 workers aborted MLIR on the partials' type).
func.func @huge_threads(%x: memref<?x16xf32>, %w: memref<16x8xf32>, %out: memref<?x8xf32>) {
  // expected-error@+1 {{invalid schedule: schedule field threads must be at most 1024, got 4611686018427387904}}
  "hector_intra.gemm_template"(%x, %w, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>,
       schedule = {threads = 4611686018427387904 : i64, parallel = "rows"}}
      : (memref<?x16xf32>, memref<16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

// bf16 products (`products = "bf16"`, AVX512-BF16's pair dot product): pairs of reduction
// steps in 16-lane vectors of f32 accumulators, on packed tiles only.
func.func @unknown_products(%x: memref<?x16xbf16>, %w: memref<16x16xf32>, %out: memref<?x16xf32>) {
  // expected-error@+1 {{invalid schedule: schedule field products must be one of f32, bf16, got 'fp8'}}
  "hector_intra.gemm_template"(%x, %w, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, schedule = {products = "fp8"}}
      : (memref<?x16xbf16>, memref<16x16xf32>, memref<?x16xf32>) -> ()
  return
}

// -----

func.func @bf16_unpacked(%x: memref<?x16xbf16>, %w: memref<16x16xf32>, %out: memref<?x16xf32>) {
  // expected-error@+1 {{invalid schedule: bf16 products multiply packed tiles: the schedule must pack}}
  "hector_intra.gemm_template"(%x, %w, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, schedule = {products = "bf16"}}
      : (memref<?x16xbf16>, memref<16x16xf32>, memref<?x16xf32>) -> ()
  return
}

// -----

func.func @bf16_odd_depth(%x: memref<?x15xbf16>, %w: memref<15x16xf32>, %out: memref<?x16xf32>) {
  // expected-error@+1 {{invalid schedule: bf16 products pair the reduction's steps: its extent 15 is odd}}
  "hector_intra.gemm_template"(%x, %w, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>,
       schedule = {pack = true, tile_m = 32 : i64, tile_n = 16 : i64, unroll = 4 : i64, products = "bf16"}}
      : (memref<?x15xbf16>, memref<15x16xf32>, memref<?x16xf32>) -> ()
  return
}

// -----

func.func @bf16_narrow_block(%x: memref<?x16xbf16>, %w: memref<16x16xf32>, %out: memref<?x16xf32>) {
  // expected-error@+1 {{invalid schedule: bf16 products need tile_n a multiple of 16 up to 64, got 8}}
  "hector_intra.gemm_template"(%x, %w, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>,
       schedule = {pack = true, tile_m = 32 : i64, tile_n = 8 : i64, unroll = 4 : i64, products = "bf16"}}
      : (memref<?x16xbf16>, memref<16x16xf32>, memref<?x16xf32>) -> ()
  return
}

// -----

func.func @bf16_spilling_block(%x: memref<?x16xbf16>, %w: memref<16x64xf32>, %out: memref<?x64xf32>) {
  // expected-error@+1 {{invalid schedule: the bf16 register block (unroll 8 x tile_n 64) holds more than 16 accumulator vectors}}
  "hector_intra.gemm_template"(%x, %w, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>,
       schedule = {pack = true, tile_m = 32 : i64, tile_n = 64 : i64, unroll = 8 : i64, products = "bf16"}}
      : (memref<?x16xbf16>, memref<16x64xf32>, memref<?x64xf32>) -> ()
  return
}
