// RUN: hector-opt %s -p 'hector-schedule{target=gpu},convert-hector-intra-to-gpu' | FileCheck %s
// RUN: hector-opt %s -p 'convert-hector-intra-to-gpu{tile=true},hector-gpu-kernels-on-host' | FileCheck %s --check-prefix=HOST

// GEMMs with an empty width (K = 0 or N = 0, e.g. a zero-sized feature) lower with tiled
// schedules: one (empty) register block per row instead of a division by zero.

// CHECK-LABEL: func.func @empty_out
// CHECK: gpu.launch_func
// HOST-LABEL: func.func @empty_out
func.func @empty_out(%x: memref<?x0xf32>, %w: memref<0x0xf32>, %out: memref<?x0xf32>) {
  "hector_intra.gemm_template"(%x, %w, %out) {block_size = 256 : i64, epilogue = "store", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, tile_n = 8 : i64, variant = "xw"} : (memref<?x0xf32>, memref<0x0xf32>, memref<?x0xf32>) -> ()
  return
}

// CHECK-LABEL: func.func @empty_reduction
// CHECK: gpu.launch_func
// HOST-LABEL: func.func @empty_reduction
func.func @empty_reduction(%x: memref<?x0xf32>, %dy: memref<?x8xf32>, %out: memref<0x8xf32>) {
  "hector_intra.gemm_template"(%x, %dy, %out) {block_size = 256 : i64, epilogue = "add", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, tile_n = 8 : i64, variant = "xty"} : (memref<?x0xf32>, memref<?x8xf32>, memref<0x8xf32>) -> ()
  return
}
