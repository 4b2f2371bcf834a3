// RUN: hector-opt %s --split-input-file --verify-diagnostics -p convert-hector-intra-to-scf

// convert-hector-intra-to-scf checks every hector.gradient_pair mark again: the marked xwt
// must be followed right away by an xty that reads the same gradient rows.

// The xty after the mark reads other gradient rows (another scatter_index).
func.func @other_rows(%dy: memref<?x16xf32>, %w: memref<3x16x16xf32>, %dst: memref<?xi32>, %other: memref<?xi32>, %et: memref<?xi32>, %p: memref<?x16xf32>, %dp: memref<?x16xf32>, %dw: memref<3x16x16xf32>) {
  // expected-error@+1 {{stale hector.gradient_pair mark: the xwt's gather_index is not the xty's scatter_index}}
  "hector_intra.gemm_template"(%dy, %w, %dst, %et, %dp) {block_size = 256 : i64, epilogue = "store", hector.gradient_pair, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1>, schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64, tile_m = 8 : i64, tile_n = 16 : i64, unroll = 4 : i64, vector = 16 : i64}, tile_n = 8 : i64, variant = "xwt"} : (memref<?x16xf32>, memref<3x16x16xf32>, memref<?xi32>, memref<?xi32>, memref<?x16xf32>) -> ()
  "hector_intra.gemm_template"(%p, %dy, %et, %other, %dw) {block_size = 256 : i64, epilogue = "add", operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 0, 1>, schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64, tile_m = 8 : i64, tile_n = 16 : i64, unroll = 4 : i64, vector = 16 : i64}, tile_n = 8 : i64, variant = "xty"} : (memref<?x16xf32>, memref<?x16xf32>, memref<?xi32>, memref<?xi32>, memref<3x16x16xf32>) -> ()
  return
}

// -----

// Something else stands between the mark and its xty.
func.func @not_adjacent(%dy: memref<?x16xf32>, %root: memref<16x16xf32>, %x: memref<?x16xf32>, %dx: memref<?x16xf32>, %droot: memref<16x16xf32>) {
  // expected-error@+1 {{stale hector.gradient_pair mark: both ops must be hector_intra.gemm_template}}
  "hector_intra.gemm_template"(%dy, %root, %dx) {block_size = 256 : i64, epilogue = "store", hector.gradient_pair, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64, tile_m = 8 : i64, tile_n = 16 : i64, unroll = 4 : i64, vector = 16 : i64}, tile_n = 8 : i64, variant = "xwt"} : (memref<?x16xf32>, memref<16x16xf32>, memref<?x16xf32>) -> ()
  %zero = arith.constant 0.000000e+00 : f32
  linalg.fill ins(%zero : f32) outs(%droot : memref<16x16xf32>)
  "hector_intra.gemm_template"(%x, %dy, %droot) {block_size = 256 : i64, epilogue = "add", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64, tile_m = 8 : i64, tile_n = 16 : i64, unroll = 4 : i64, vector = 16 : i64}, tile_n = 8 : i64, variant = "xty"} : (memref<?x16xf32>, memref<?x16xf32>, memref<16x16xf32>) -> ()
  return
}

// -----

// A pair needs the same packed f32 schedule on both templates.
func.func @unscheduled(%dy: memref<?x16xf32>, %root: memref<16x16xf32>, %x: memref<?x16xf32>, %dx: memref<?x16xf32>, %droot: memref<16x16xf32>) {
  // expected-error@+1 {{stale hector.gradient_pair mark: both templates need a schedule}}
  "hector_intra.gemm_template"(%dy, %root, %dx) {block_size = 256 : i64, epilogue = "store", hector.gradient_pair, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, tile_n = 8 : i64, variant = "xwt"} : (memref<?x16xf32>, memref<16x16xf32>, memref<?x16xf32>) -> ()
  "hector_intra.gemm_template"(%x, %dy, %droot) {block_size = 256 : i64, epilogue = "add", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, tile_n = 8 : i64, variant = "xty"} : (memref<?x16xf32>, memref<?x16xf32>, memref<16x16xf32>) -> ()
  return
}

// -----

// A mark on the last template of its block has no xty to pair with.
func.func @last(%dy: memref<?x16xf32>, %root: memref<16x16xf32>, %dx: memref<?x16xf32>) {
  // expected-error@+1 {{stale hector.gradient_pair mark: both ops must be hector_intra.gemm_template}}
  "hector_intra.gemm_template"(%dy, %root, %dx) {block_size = 256 : i64, epilogue = "store", hector.gradient_pair, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64, tile_m = 8 : i64, tile_n = 16 : i64, unroll = 4 : i64, vector = 16 : i64}, tile_n = 8 : i64, variant = "xwt"} : (memref<?x16xf32>, memref<16x16xf32>, memref<?x16xf32>) -> ()
  return
}
