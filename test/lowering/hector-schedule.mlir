// RUN: hector-opt %s -p "hector-schedule{threads=2}" | FileCheck %s
// RUN: hector-opt %s -p "hector-schedule{threads=1}" | FileCheck %s --check-prefix=ONE
// RUN: hector-opt %s -p "hector-schedule{target=gpu}" | FileCheck %s --check-prefix=GPU
// RUN: hector-opt %s -p "hector-schedule{threads=2 vector_bits=256}" | FileCheck %s --check-prefix=AVX2

// hector-schedule picks each template's schedule from its shapes: the register block is
// `unroll` rows × `tile_n` columns (the widest of 32/16/8 dividing the output width), rows are
// packed in tiles of 8 register blocks (32 rows; 48 on AVX2), and rows spread over the workers
// when there are several.

// CHECK-LABEL: func.func @rgcn_messages
// A per-edge product 64 → 64: tiles of 32 packed rows, a 4 × 32 register block, two workers.
// CHECK: schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64, tile_m = 32 : i64, tile_n = 32 : i64, unroll = 4 : i64, vector = 32 : i64}
// CHECK-SAME: variant = "xw"
// ONE-LABEL: func.func @rgcn_messages
// For the GPU, 64-row tiles staged in shared memory 16 columns at a time, 4 x 4 register
// blocks (convert-hector-intra-to-gpu's tiled kernel).
// GPU-LABEL: func.func @rgcn_messages
// GPU: schedule = {pack = true, parallel = "none", threads = 1 : i64, tile_k = 16 : i64, tile_m = 64 : i64, tile_n = 64 : i64, unroll = 4 : i64, vector = 4 : i64}
// On AVX2's 16 vector registers the accumulators take 12 of them: a 6 × 16 block, in tiles of
// 48 rows.
// AVX2-LABEL: func.func @rgcn_messages
// AVX2: schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64, tile_m = 48 : i64, tile_n = 16 : i64, unroll = 6 : i64, vector = 16 : i64}
// ONE: schedule = {pack = true, parallel = "none", threads = 1 : i64
func.func @rgcn_messages(%x: memref<?x64xf32>, %w: memref<3x64x64xf32>, %src: memref<?xi32>,
                         %etype: memref<?xi32>, %dst: memref<?xi32>, %out: memref<?x64xf32>) {
  "hector_intra.gemm_template"(%x, %w, %src, %etype, %dst, %out)
      {variant = "xw", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 1>}
      : (memref<?x64xf32>, memref<3x64x64xf32>, memref<?xi32>, memref<?xi32>, memref<?xi32>,
         memref<?x64xf32>) -> ()
  return
}

// CHECK-LABEL: func.func @wide_reduction
// A weight 1024 columns wide (a row of 4 KiB, a page) is multiplied in column panels; a
// reduction of 8200 steps would make a panel [K, 32] of 8200 x 32 x 4 bytes, past PANEL_BYTES
// (512 KiB), so tile_k splits it into blocks of 4096 steps (the last one shorter).
// CHECK: schedule = {pack = true, panels = true, parallel = "rows", threads = 2 : i64, tile_k = 4096 : i64, tile_m = 32 : i64, tile_n = 32 : i64, unroll = 4 : i64, vector = 32 : i64}
// A reduction of 4096 steps fits: one block (tile_k = 1, the micro-kernel's own step).
// CHECK-LABEL: func.func @panel_fits
// CHECK: schedule = {pack = true, panels = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64, tile_m = 32 : i64
// On AVX2 a panel's reduction block fits the 32 KiB L1 cache: blocks of 512 steps of 16 columns.
// AVX2-LABEL: func.func @panel_fits
// AVX2: schedule = {pack = true, panels = true, parallel = "rows", threads = 2 : i64, tile_k = 512 : i64, tile_m = 48 : i64, tile_n = 16 : i64, unroll = 6 : i64
// 256 columns (1 KiB rows) keep the weight as it is, whatever the reduction.
// CHECK-LABEL: func.func @no_panels
// CHECK: schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64, tile_m = 32 : i64, tile_n = 32 : i64
func.func @wide_reduction(%x: memref<?x8200xf32>, %w: memref<8200x1024xf32>, %out: memref<?x1024xf32>) {
  "hector_intra.gemm_template"(%x, %w, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>}
      : (memref<?x8200xf32>, memref<8200x1024xf32>, memref<?x1024xf32>) -> ()
  return
}
func.func @panel_fits(%x: memref<?x4096xf32>, %w: memref<4096x1024xf32>, %out: memref<?x1024xf32>) {
  "hector_intra.gemm_template"(%x, %w, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>}
      : (memref<?x4096xf32>, memref<4096x1024xf32>, memref<?x1024xf32>) -> ()
  return
}
func.func @no_panels(%x: memref<?x8200xf32>, %w: memref<8200x256xf32>, %out: memref<?x256xf32>) {
  "hector_intra.gemm_template"(%x, %w, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>}
      : (memref<?x8200xf32>, memref<8200x256xf32>, memref<?x256xf32>) -> ()
  return
}

// CHECK-LABEL: func.func @narrow
// Five output columns: no vector block divides them, so rows stay one at a time (unpacked),
// spread over the workers all the same.
// CHECK: schedule = {pack = false, parallel = "rows", threads = 2 : i64, tile_k = 0 : i64, tile_m = 1 : i64, tile_n = 0 : i64, unroll = 1 : i64, vector = 1 : i64}
func.func @narrow(%x: memref<?x16xf32>, %w: memref<16x5xf32>, %out: memref<?x5xf32>) {
  "hector_intra.gemm_template"(%x, %w, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>}
      : (memref<?x16xf32>, memref<16x5xf32>, memref<?x5xf32>) -> ()
  return
}

// CHECK-LABEL: func.func @weight_gradient
// A weight gradient multiplies the transposed tile [K = 6, 32] by the row gradients [32, 16]:
// the register block's rows divide K (2), its columns the gradient's width (16).
// CHECK: schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64, tile_m = 32 : i64, tile_n = 16 : i64, unroll = 2 : i64, vector = 16 : i64}
// CHECK-SAME: variant = "xty"
func.func @weight_gradient(%x: memref<?x6xf32>, %dy: memref<?x16xf32>, %src: memref<?xi32>,
                           %etype: memref<?xi32>, %dw: memref<3x6x16xf32>) {
  "hector_intra.gemm_template"(%x, %dy, %src, %etype, %dw)
      {variant = "xty", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1>}
      : (memref<?x6xf32>, memref<?x16xf32>, memref<?xi32>, memref<?xi32>,
         memref<3x6x16xf32>) -> ()
  return
}

// CHECK-LABEL: func.func @hand_written
// A schedule written in the file is kept as it is.
// CHECK: schedule = {pack = true, parallel = "none", threads = 1 : i64, tile_k = 1 : i64, tile_m = 8 : i64, tile_n = 8 : i64, unroll = 2 : i64, vector = 8 : i64}
func.func @hand_written(%x: memref<?x16xf32>, %w: memref<16x8xf32>, %out: memref<?x8xf32>) {
  "hector_intra.gemm_template"(%x, %w, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>,
       schedule = {pack = true, parallel = "none", threads = 1 : i64, tile_k = 1 : i64,
                   tile_m = 8 : i64, tile_n = 8 : i64, unroll = 2 : i64, vector = 8 : i64}}
      : (memref<?x16xf32>, memref<16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// CHECK-LABEL: func.func @aggregate
// A traversal's rows spread over the workers (its sum reduces into per-worker partials).
// CHECK: "hector_intra.traversal_template"
// CHECK-SAME: schedule = {pack = false, parallel = "rows", threads = 2 : i64
// ONE-LABEL: func.func @aggregate
// GPU-LABEL: func.func @aggregate
// GPU-NOT: schedule
// ONE: schedule = {pack = false, parallel = "none", threads = 1 : i64
func.func @aggregate(%dst: memref<?xi32>, %m: memref<?x8xf32>, %out: memref<?x8xf32>) {
  "hector_intra.traversal_template"(%dst, %m, %out)
      {parallel = "edge", fn = "copy", reduce = "sum", slope = 0.0 : f32,
       block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 1, 0, 1, 0, 1>}
      : (memref<?xi32>, memref<?x8xf32>, memref<?x8xf32>) -> ()
  return
}

// CHECK-LABEL: func.func @typed_linear_64
// A typed linear at K = 64: its rows are not gathered, so whole tiles multiply a's rows where
// they lie (in_place), on AVX-512 and AVX2 alike; the GPU has no such field.
// CHECK: schedule = {in_place = true, pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64, tile_m = 32 : i64, tile_n = 32 : i64, unroll = 4 : i64, vector = 32 : i64}
// ONE-LABEL: func.func @typed_linear_64
// ONE: schedule = {in_place = true, pack = true, parallel = "none", threads = 1 : i64
// GPU-LABEL: func.func @typed_linear_64
// GPU-NOT: in_place
// AVX2-LABEL: func.func @typed_linear_64
// AVX2: schedule = {in_place = true, pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64, tile_m = 48 : i64, tile_n = 16 : i64, unroll = 6 : i64, vector = 16 : i64}
func.func @typed_linear_64(%x: memref<?x64xf32>, %w: memref<64x64xf32>, %out: memref<?x64xf32>) {
  "hector_intra.gemm_template"(%x, %w, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>}
      : (memref<?x64xf32>, memref<64x64xf32>, memref<?x64xf32>) -> ()
  return
}

// CHECK-LABEL: func.func @typed_linear_128
// At K = 128 (past IN_PLACE_MAX_K) the rows are packed, as they are when gathered
// (@rgcn_messages) or stored in bf16 (@bf16_rows).
// CHECK: schedule = {pack = true, parallel = "rows"
// AVX2-LABEL: func.func @typed_linear_128
// AVX2: schedule = {pack = true, parallel = "rows"
func.func @typed_linear_128(%x: memref<?x128xf32>, %w: memref<128x128xf32>, %out: memref<?x128xf32>) {
  "hector_intra.gemm_template"(%x, %w, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>}
      : (memref<?x128xf32>, memref<128x128xf32>, memref<?x128xf32>) -> ()
  return
}

// CHECK-LABEL: func.func @bf16_rows
// CHECK: schedule = {pack = true, parallel = "rows"
// AVX2-LABEL: func.func @bf16_rows
// AVX2: schedule = {pack = true, parallel = "rows"
func.func @bf16_rows(%x: memref<?x64xbf16>, %w: memref<64x64xf32>, %out: memref<?x64xf32>) {
  "hector_intra.gemm_template"(%x, %w, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>}
      : (memref<?x64xbf16>, memref<64x64xf32>, memref<?x64xf32>) -> ()
  return
}
