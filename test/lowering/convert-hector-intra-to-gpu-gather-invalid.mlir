// RUN: hector-opt %s --split-input-file --verify-diagnostics -p convert-hector-intra-to-gpu
// RUN: not hector-opt %s --split-input-file -p convert-hector-intra-to-gpu 2>&1 | FileCheck %s

// The optional `align` attribute of traversal_template is checked by the GPU lowering (IRDL
// cannot declare optional attributes): its value, and what the aligned mapping needs.

// CHECK: error: align must be "none" or "warp128", got "warp64"
func.func @bad_align(%idx: memref<?xi32>, %x: memref<?x100xf32>, %out: memref<?x100xf32>) {
  // expected-error @+1 {{align must be "none" or "warp128", got "warp64"}}
  "hector_intra.traversal_template"(%idx, %x, %out) {parallel = "node", fn = "copy", reduce = "none", slope = 0.0 : f32, block_size = 128 : i64, align = "warp64", operandSegmentSizes = array<i32: 1, 0, 0, 1, 0, 1>} : (memref<?xi32>, memref<?x100xf32>, memref<?x100xf32>) -> ()
  return
}

// -----

// CHECK: error: align must be "none" or "warp128", got 128 : i64
func.func @align_not_a_string(%idx: memref<?xi32>, %x: memref<?x100xf32>, %out: memref<?x100xf32>) {
  // expected-error @+1 {{align must be "none" or "warp128", got 128 : i64}}
  "hector_intra.traversal_template"(%idx, %x, %out) {parallel = "node", fn = "copy", reduce = "none", slope = 0.0 : f32, block_size = 128 : i64, align = 128, operandSegmentSizes = array<i32: 1, 0, 0, 1, 0, 1>} : (memref<?xi32>, memref<?x100xf32>, memref<?x100xf32>) -> ()
  return
}

// -----

// CHECK: error: align = "warp128" needs a block_size that is a multiple of 32, got 100
func.func @block_not_warps(%idx: memref<?xi32>, %x: memref<?x100xf32>, %out: memref<?x100xf32>) {
  // expected-error @+1 {{align = "warp128" needs a block_size that is a multiple of 32, got 100}}
  "hector_intra.traversal_template"(%idx, %x, %out) {parallel = "node", fn = "copy", reduce = "none", slope = 0.0 : f32, block_size = 100 : i64, align = "warp128", operandSegmentSizes = array<i32: 1, 0, 0, 1, 0, 1>} : (memref<?xi32>, memref<?x100xf32>, memref<?x100xf32>) -> ()
  return
}

// -----

// CHECK: error: align = "warp128" needs an elementwise row function with x and out of the same width (element j of out reads element j of x)
func.func @dot_not_elementwise(%x: memref<?x8xf32>, %y: memref<?x8xf32>, %out: memref<?x2xf32>) {
  // expected-error @+1 {{align = "warp128" needs an elementwise row function with x and out of the same width (element j of out reads element j of x)}}
  "hector_intra.traversal_template"(%x, %y, %out) {parallel = "edge", fn = "dot", reduce = "none", slope = 0.0 : f32, block_size = 128 : i64, align = "warp128", operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>} : (memref<?x8xf32>, memref<?x8xf32>, memref<?x2xf32>) -> ()
  return
}
// CHECK-NOT: error:
