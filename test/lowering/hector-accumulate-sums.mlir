// RUN: hector-opt %s -p hector-accumulate-sums | FileCheck %s

// An input gradient summed from a GEMM's stored rows and a traversal's scatter-sum (RGCN's
// backward): the GEMM stores into the output, the traversal adds onto it; the fill, the add
// and both buffers go.
// CHECK-LABEL: func.func @root_plus_messages(
// CHECK-SAME: %[[G:[^:]*]]: memref<?x8xf32>, %[[ROOT:[^:]*]]: memref<16x8xf32>, %[[DAGG:[^:]*]]: memref<?x16xf32>, %[[EC:[^:]*]]: memref<?xi32>, %[[SRC:[^:]*]]: memref<?xi32>, %[[NORM:[^:]*]]: memref<?x1xf32>, %[[DX:[^:]*]]: memref<?x16xf32>)
// CHECK-NOT: memref.alloc
// CHECK-NOT: linalg.fill
// CHECK: "hector_intra.gemm_template"(%[[G]], %[[ROOT]], %[[DX]]) {{.*}}epilogue = "store"
// CHECK: "hector_intra.traversal_template"(%[[EC]], %[[SRC]], %[[DAGG]], %[[NORM]], %[[DX]]) {{.*}}reduce = "sum"
// CHECK-NOT: fn = "add"
// CHECK-NOT: memref.dealloc
// CHECK: return
func.func @root_plus_messages(%g: memref<?x8xf32>, %root: memref<16x8xf32>, %dagg: memref<?x16xf32>, %ec: memref<?xi32>, %src: memref<?xi32>, %norm: memref<?x1xf32>, %dx: memref<?x16xf32>) {
  %c0 = arith.constant 0 : index
  %n = memref.dim %g, %c0 : memref<?x8xf32>
  %p = memref.alloc(%n) : memref<?x16xf32>
  "hector_intra.gemm_template"(%g, %root, %p) {block_size = 256 : i64, epilogue = "store", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, tile_n = 8 : i64, variant = "xwt"} : (memref<?x8xf32>, memref<16x8xf32>, memref<?x16xf32>) -> ()
  %q = memref.alloc(%n) : memref<?x16xf32>
  %zero = arith.constant 0.000000e+00 : f32
  linalg.fill ins(%zero : f32) outs(%q : memref<?x16xf32>)
  "hector_intra.traversal_template"(%ec, %src, %dagg, %norm, %q) {block_size = 256 : i64, fn = "scale", operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 1>, parallel = "edge", reduce = "sum", slope = 0.000000e+00 : f32} : (memref<?xi32>, memref<?xi32>, memref<?x16xf32>, memref<?x1xf32>, memref<?x16xf32>) -> ()
  "hector_intra.traversal_template"(%q, %p, %dx) {block_size = 256 : i64, fn = "add", operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>, parallel = "node", reduce = "none", slope = 0.000000e+00 : f32} : (memref<?x16xf32>, memref<?x16xf32>, memref<?x16xf32>) -> ()
  memref.dealloc %q : memref<?x16xf32>
  memref.dealloc %p : memref<?x16xf32>
  return
}

// The accumulating writer may be a scattering GEMM (epilogue "add"), either operand of the add.
// CHECK-LABEL: func.func @root_plus_scattered_gemm(
// CHECK-SAME: %[[OUT:[^:]*]]: memref<?x16xf32>)
// CHECK: "hector_intra.gemm_template"({{.*}}, %[[OUT]]) {{.*}}epilogue = "store"
// CHECK: "hector_intra.gemm_template"({{.*}}, %[[OUT]]) {{.*}}epilogue = "add"
// CHECK-NOT: hector_intra.traversal_template
// CHECK: return
func.func @root_plus_scattered_gemm(%g: memref<?x8xf32>, %root: memref<16x8xf32>, %w: memref<3x16x8xf32>, %idx: memref<?xi32>, %et: memref<?xi32>, %dst: memref<?xi32>, %out: memref<?x16xf32>) {
  %c0 = arith.constant 0 : index
  %n = memref.dim %g, %c0 : memref<?x8xf32>
  %p = memref.alloc(%n) : memref<?x16xf32>
  "hector_intra.gemm_template"(%g, %root, %p) {block_size = 256 : i64, epilogue = "store", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, tile_n = 8 : i64, variant = "xwt"} : (memref<?x8xf32>, memref<16x8xf32>, memref<?x16xf32>) -> ()
  %q = memref.alloc(%n) : memref<?x16xf32>
  %zero = arith.constant 0.000000e+00 : f32
  linalg.fill ins(%zero : f32) outs(%q : memref<?x16xf32>)
  "hector_intra.gemm_template"(%g, %w, %idx, %et, %dst, %q) {block_size = 256 : i64, epilogue = "add", operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 1>, tile_n = 8 : i64, variant = "xwt"} : (memref<?x8xf32>, memref<3x16x8xf32>, memref<?xi32>, memref<?xi32>, memref<?xi32>, memref<?x16xf32>) -> ()
  "hector_intra.traversal_template"(%p, %q, %out) {block_size = 256 : i64, fn = "add", operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>, parallel = "node", reduce = "none", slope = 0.000000e+00 : f32} : (memref<?x16xf32>, memref<?x16xf32>, memref<?x16xf32>) -> ()
  memref.dealloc %q : memref<?x16xf32>
  memref.dealloc %p : memref<?x16xf32>
  return
}

// Left alone: the stored rows come after the accumulated ones (the RGCN forward's order: the
// store would overwrite the sum).
// CHECK-LABEL: func.func @store_after_accumulate(
// CHECK: linalg.fill
// CHECK: fn = "add"
func.func @store_after_accumulate(%g: memref<?x8xf32>, %root: memref<16x8xf32>, %dagg: memref<?x16xf32>, %ec: memref<?xi32>, %src: memref<?xi32>, %norm: memref<?x1xf32>, %dx: memref<?x16xf32>) {
  %c0 = arith.constant 0 : index
  %n = memref.dim %g, %c0 : memref<?x8xf32>
  %q = memref.alloc(%n) : memref<?x16xf32>
  %zero = arith.constant 0.000000e+00 : f32
  linalg.fill ins(%zero : f32) outs(%q : memref<?x16xf32>)
  "hector_intra.traversal_template"(%ec, %src, %dagg, %norm, %q) {block_size = 256 : i64, fn = "scale", operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 1>, parallel = "edge", reduce = "sum", slope = 0.000000e+00 : f32} : (memref<?xi32>, memref<?xi32>, memref<?x16xf32>, memref<?x1xf32>, memref<?x16xf32>) -> ()
  %p = memref.alloc(%n) : memref<?x16xf32>
  "hector_intra.gemm_template"(%g, %root, %p) {block_size = 256 : i64, epilogue = "store", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, tile_n = 8 : i64, variant = "xwt"} : (memref<?x8xf32>, memref<16x8xf32>, memref<?x16xf32>) -> ()
  "hector_intra.traversal_template"(%q, %p, %dx) {block_size = 256 : i64, fn = "add", operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>, parallel = "node", reduce = "none", slope = 0.000000e+00 : f32} : (memref<?x16xf32>, memref<?x16xf32>, memref<?x16xf32>) -> ()
  return
}

// Left alone: a summand read by another op, an accumulation onto a buffer that is not zeroed,
// and an output used between the stored rows' writer and the sum.
// CHECK-LABEL: func.func @not_fresh(
// CHECK-COUNT-3: fn = "add"
// CHECK: return
func.func @not_fresh(%g: memref<?x8xf32>, %root: memref<16x8xf32>, %dagg: memref<?x16xf32>, %ec: memref<?xi32>, %src: memref<?xi32>, %norm: memref<?x1xf32>, %dx: memref<?x16xf32>, %other: memref<?x16xf32>, %bias: memref<16xf32>) {
  %c0 = arith.constant 0 : index
  %n = memref.dim %g, %c0 : memref<?x8xf32>
  %zero = arith.constant 0.000000e+00 : f32
  %p = memref.alloc(%n) : memref<?x16xf32>
  "hector_intra.gemm_template"(%g, %root, %p) {block_size = 256 : i64, epilogue = "store", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, tile_n = 8 : i64, variant = "xwt"} : (memref<?x8xf32>, memref<16x8xf32>, memref<?x16xf32>) -> ()
  %q = memref.alloc(%n) : memref<?x16xf32>
  linalg.fill ins(%zero : f32) outs(%q : memref<?x16xf32>)
  "hector_intra.traversal_template"(%ec, %src, %dagg, %norm, %q) {block_size = 256 : i64, fn = "scale", operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 1>, parallel = "edge", reduce = "sum", slope = 0.000000e+00 : f32} : (memref<?xi32>, memref<?xi32>, memref<?x16xf32>, memref<?x1xf32>, memref<?x16xf32>) -> ()
  "hector_intra.traversal_template"(%p, %bias, %other) {block_size = 256 : i64, fn = "add_bias", operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>, parallel = "node", reduce = "none", slope = 0.000000e+00 : f32} : (memref<?x16xf32>, memref<16xf32>, memref<?x16xf32>) -> ()
  "hector_intra.traversal_template"(%p, %q, %dx) {block_size = 256 : i64, fn = "add", operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>, parallel = "node", reduce = "none", slope = 0.000000e+00 : f32} : (memref<?x16xf32>, memref<?x16xf32>, memref<?x16xf32>) -> ()
  %p2 = memref.alloc(%n) : memref<?x16xf32>
  "hector_intra.gemm_template"(%g, %root, %p2) {block_size = 256 : i64, epilogue = "store", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, tile_n = 8 : i64, variant = "xwt"} : (memref<?x8xf32>, memref<16x8xf32>, memref<?x16xf32>) -> ()
  %q2 = memref.alloc(%n) : memref<?x16xf32>
  "hector_intra.traversal_template"(%ec, %src, %dagg, %norm, %q2) {block_size = 256 : i64, fn = "scale", operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 1>, parallel = "edge", reduce = "sum", slope = 0.000000e+00 : f32} : (memref<?xi32>, memref<?xi32>, memref<?x16xf32>, memref<?x1xf32>, memref<?x16xf32>) -> ()
  "hector_intra.traversal_template"(%p2, %q2, %dx) {block_size = 256 : i64, fn = "add", operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>, parallel = "node", reduce = "none", slope = 0.000000e+00 : f32} : (memref<?x16xf32>, memref<?x16xf32>, memref<?x16xf32>) -> ()
  %p3 = memref.alloc(%n) : memref<?x16xf32>
  "hector_intra.gemm_template"(%g, %root, %p3) {block_size = 256 : i64, epilogue = "store", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, tile_n = 8 : i64, variant = "xwt"} : (memref<?x8xf32>, memref<16x8xf32>, memref<?x16xf32>) -> ()
  "hector_intra.traversal_template"(%other, %bias, %other) {block_size = 256 : i64, fn = "add_bias", operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>, parallel = "node", reduce = "none", slope = 0.000000e+00 : f32} : (memref<?x16xf32>, memref<16xf32>, memref<?x16xf32>) -> ()
  %q3 = memref.alloc(%n) : memref<?x16xf32>
  linalg.fill ins(%zero : f32) outs(%q3 : memref<?x16xf32>)
  "hector_intra.traversal_template"(%ec, %src, %dagg, %norm, %q3) {block_size = 256 : i64, fn = "scale", operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 1>, parallel = "edge", reduce = "sum", slope = 0.000000e+00 : f32} : (memref<?xi32>, memref<?xi32>, memref<?x16xf32>, memref<?x1xf32>, memref<?x16xf32>) -> ()
  "hector_intra.traversal_template"(%p3, %q3, %other) {block_size = 256 : i64, fn = "add", operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>, parallel = "node", reduce = "none", slope = 0.000000e+00 : f32} : (memref<?x16xf32>, memref<?x16xf32>, memref<?x16xf32>) -> ()
  return
}
