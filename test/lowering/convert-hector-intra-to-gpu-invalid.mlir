// RUN: hector-opt %s --split-input-file --verify-diagnostics -p convert-hector-intra-to-gpu
// RUN: not hector-opt %s --split-input-file -p convert-hector-intra-to-gpu,convert-hector-intra-to-gpu 2>&1 | FileCheck %s

// The conversion runs once per module: a second run (or an input that already holds a
// gpu.module) is refused at the existing kernel module.

// CHECK-COUNT-2: error: the module already holds a gpu.module; run this conversion once

func.func @host(%x: memref<?x8xf32>, %out: memref<?x8xf32>) {
  "hector_intra.traversal_template"(%x, %out) {parallel = "node", fn = "relu", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

// expected-error @+1 {{the module already holds a gpu.module; run this conversion once}}
gpu.module @hector_kernels {
}

// -----

// A segmented sum (hector-half-messages, CPU pipeline) groups its rows by output row; the GPU
// kernels have no such form and refuse it rather than accumulate into an unfilled buffer.
func.func @segmented_sum(%dst: memref<?xi32>, %m: memref<?x16xf32>, %out: memref<?x16xbf16>) {
  // expected-error @+1 {{a segmented sum is built for the CPU only}}
  "hector_intra.traversal_template"(%dst, %m, %out) {fn = "copy", reduce = "sum", parallel = "edge", block_size = 256 : i64, slope = 0.0 : f32, hector.segmented_sum, operandSegmentSizes = array<i32: 0, 1, 0, 1, 0, 1>} : (memref<?xi32>, memref<?x16xf32>, memref<?x16xbf16>) -> ()
  return
}

// -----

func.func @vector_dot(%k: memref<?x32xf32>, %q: memref<?x32xf32>, %out: memref<?x2xf32>) {
  // expected-error @+1 {{a vector dot is built for the CPU only}}
  "hector_intra.traversal_template"(%k, %q, %out) {fn = "dot", reduce = "none", parallel = "edge", block_size = 256 : i64, slope = 0.0 : f32, hector.vector_dot, operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>} : (memref<?x32xf32>, memref<?x32xf32>, memref<?x2xf32>) -> ()
  return
}
