// RUN: hector-opt %s --split-input-file --verify-diagnostics --no-hector-verify -p hector-schedule
// RUN: hector-opt %s --split-input-file --verify-diagnostics --no-hector-verify -p convert-hector-intra-to-scf
// RUN: hector-opt %s --split-input-file --verify-diagnostics --no-hector-verify -p convert-hector-intra-to-gpu

// Without hector-verify (which refuses them first), each conversion still reports a dynamic
// width at the template, as an error rather than an internal error with a Python traceback.

func.func @gemm(%x: memref<?x?xf32>, %w: memref<16x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{dimension 1 of memref<?x?xf32> must be static}}
  "hector_intra.gemm_template"(%x, %w, %out) {block_size = 256 : i64, epilogue = "store", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, tile_n = 8 : i64, variant = "xw"} : (memref<?x?xf32>, memref<16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

func.func @gemm_out(%x: memref<?x16xf32>, %w: memref<16x8xf32>, %out: memref<?x?xf32>) {
  // expected-error @+1 {{dimension 1 of memref<?x?xf32> must be static}}
  "hector_intra.gemm_template"(%x, %w, %out) {block_size = 256 : i64, epilogue = "store", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, tile_n = 8 : i64, variant = "xw"} : (memref<?x16xf32>, memref<16x8xf32>, memref<?x?xf32>) -> ()
  return
}
