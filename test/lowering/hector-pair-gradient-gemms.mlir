// RUN: hector-opt %s -p hector-pair-gradient-gemms | FileCheck %s
// RUN: hector-opt %s -p "hector-pair-gradient-gemms, hector-outline-templates" | FileCheck %s --check-prefix=OUTLINE
// RUN: hector-opt %s -p "hector-pair-gradient-gemms, hector-outline-templates, convert-hector-intra-to-scf" | FileCheck %s --check-prefix=LOOPS

// An RGCN backward's per-(destination, relation) products: the input gradient (xwt) reads
// dy[dst] through its gather_index, the weight gradient (xty) reads the same rows through its
// scatter_index, both by relation. The xwt moves past the zero fill of dW, right before its
// xty, and is marked.
// CHECK-LABEL: func.func @per_relation(
// CHECK-SAME: %[[DY:[^:]*]]: memref<?x16xf32>, %[[W:[^:]*]]: memref<3x16x16xf32>, %[[DST:[^:]*]]: memref<?xi32>, %[[ET:[^:]*]]: memref<?xi32>, %[[P:[^:]*]]: memref<?x16xf32>, %[[DP:[^:]*]]: memref<?x16xf32>, %[[DW:[^:]*]]: memref<3x16x16xf32>)
// CHECK-NEXT: %[[ZERO:.*]] = arith.constant
// CHECK-NEXT: linalg.fill ins(%[[ZERO]] : f32) outs(%[[DW]] : memref<3x16x16xf32>)
// CHECK-NEXT: "hector_intra.gemm_template"(%[[DY]], %[[W]], %[[DST]], %[[ET]], %[[DP]]) {{.*}}hector.gradient_pair{{.*}}variant = "xwt"
// CHECK-NEXT: "hector_intra.gemm_template"(%[[P]], %[[DY]], %[[ET]], %[[DST]], %[[DW]]) {{.*}}variant = "xty"
// CHECK-NEXT: return

// The pair becomes one outlined function, called where the xty stood, taking each operand
// once; convert-hector-intra-to-scf lowers it as one loop nest.
// OUTLINE-LABEL: func.func @per_relation(
// OUTLINE: linalg.fill
// OUTLINE-NEXT: call @per_relation_template0(%arg0, %arg1, %arg2, %arg3, %arg5, %arg4, %arg6)
// OUTLINE-NEXT: return
// OUTLINE-LABEL: func.func @shared_with_timers(
// OUTLINE: call @shared_with_timers_template0(
// OUTLINE-NOT: call @shared_with_timers_template1(
// OUTLINE-LABEL: func.func private @per_relation_template0(
// OUTLINE-NEXT: "hector_intra.gemm_template"(%arg0, %arg1, %arg2, %arg3, %arg4) {{.*}}variant = "xwt"
// OUTLINE-NEXT: "hector_intra.gemm_template"(%arg5, %arg0, %arg3, %arg2, %arg6) {{.*}}variant = "xty"
// OUTLINE-NEXT: return
// LOOPS-LABEL: func.func private @per_relation_template0(
// LOOPS-NOT: hector_intra
// LOOPS: return
func.func @per_relation(%dy: memref<?x16xf32>, %w: memref<3x16x16xf32>, %dst: memref<?xi32>, %et: memref<?xi32>, %p: memref<?x16xf32>, %dp: memref<?x16xf32>, %dw: memref<3x16x16xf32>) {
  "hector_intra.gemm_template"(%dy, %w, %dst, %et, %dp) {block_size = 256 : i64, epilogue = "store", operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1>, schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64, tile_m = 8 : i64, tile_n = 16 : i64, unroll = 4 : i64, vector = 16 : i64}, tile_n = 8 : i64, variant = "xwt"} : (memref<?x16xf32>, memref<3x16x16xf32>, memref<?xi32>, memref<?xi32>, memref<?x16xf32>) -> ()
  %zero = arith.constant 0.000000e+00 : f32
  linalg.fill ins(%zero : f32) outs(%dw : memref<3x16x16xf32>)
  "hector_intra.gemm_template"(%p, %dy, %et, %dst, %dw) {block_size = 256 : i64, epilogue = "add", operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 0, 1>, schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64, tile_m = 8 : i64, tile_n = 16 : i64, unroll = 4 : i64, vector = 16 : i64}, tile_n = 8 : i64, variant = "xty"} : (memref<?x16xf32>, memref<?x16xf32>, memref<?xi32>, memref<?xi32>, memref<3x16x16xf32>) -> ()
  return
}

// A shared weight (the root weight: no index at all), with hector-profile-kernels' timers
// between the two: the xwt moves past calls without operands and the counters' loads and
// stores, into the xty's timer. The two keep their own register blocks (unroll, tile_n).
// CHECK-LABEL: func.func @shared_with_timers(
// CHECK: %[[T0:.*]] = call @clock()
// CHECK-NEXT: %[[T1:.*]] = call @clock()
// CHECK: memref.store
// CHECK: linalg.fill
// CHECK-NEXT: "hector_intra.gemm_template"({{.*}}hector.gradient_pair{{.*}}variant = "xwt"
// CHECK-NEXT: "hector_intra.gemm_template"({{.*}}variant = "xty"
memref.global @counters : memref<2xf64> = dense<0.0>
func.func private @clock() -> f64
func.func @shared_with_timers(%dy: memref<?x16xf32>, %root: memref<16x16xf32>, %x: memref<?x16xf32>, %dx: memref<?x16xf32>, %droot: memref<16x16xf32>) {
  %t0 = call @clock() : () -> f64
  "hector_intra.gemm_template"(%dy, %root, %dx) {block_size = 256 : i64, epilogue = "store", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64, tile_m = 8 : i64, tile_n = 16 : i64, unroll = 4 : i64, vector = 16 : i64}, tile_n = 8 : i64, variant = "xwt"} : (memref<?x16xf32>, memref<16x16xf32>, memref<?x16xf32>) -> ()
  %t1 = call @clock() : () -> f64
  %counters = memref.get_global @counters : memref<2xf64>
  %c0 = arith.constant 0 : index
  %old = memref.load %counters[%c0] : memref<2xf64>
  %d = arith.subf %t1, %t0 : f64
  %new = arith.addf %old, %d : f64
  memref.store %new, %counters[%c0] : memref<2xf64>
  %zero = arith.constant 0.000000e+00 : f32
  linalg.fill ins(%zero : f32) outs(%droot : memref<16x16xf32>)
  "hector_intra.gemm_template"(%x, %dy, %droot) {block_size = 256 : i64, epilogue = "add", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64, tile_m = 8 : i64, tile_n = 8 : i64, unroll = 2 : i64, vector = 8 : i64}, tile_n = 8 : i64, variant = "xty"} : (memref<?x16xf32>, memref<?x16xf32>, memref<16x16xf32>) -> ()
  return
}

// Left alone: an op between them fills the buffer whose view the xwt reads (the view is not
// the filled value itself, but the same memory).
// CHECK-LABEL: func.func @view_filled_between(
// CHECK-NOT: hector.gradient_pair
// CHECK: return
func.func @view_filled_between(%root: memref<16x16xf32>, %x: memref<?x16xf32>, %dx: memref<?x16xf32>, %droot: memref<16x16xf32>, %n: index) {
  %buf = memref.alloc(%n) : memref<?x16xf32>
  %dy = memref.cast %buf : memref<?x16xf32> to memref<?x16xf32>
  "hector_intra.gemm_template"(%dy, %root, %dx) {block_size = 256 : i64, epilogue = "store", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64, tile_m = 8 : i64, tile_n = 16 : i64, unroll = 4 : i64, vector = 16 : i64}, tile_n = 8 : i64, variant = "xwt"} : (memref<?x16xf32>, memref<16x16xf32>, memref<?x16xf32>) -> ()
  %zero = arith.constant 0.000000e+00 : f32
  linalg.fill ins(%zero : f32) outs(%buf : memref<?x16xf32>)
  "hector_intra.gemm_template"(%x, %dy, %droot) {block_size = 256 : i64, epilogue = "add", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64, tile_m = 8 : i64, tile_n = 16 : i64, unroll = 4 : i64, vector = 16 : i64}, tile_n = 8 : i64, variant = "xty"} : (memref<?x16xf32>, memref<?x16xf32>, memref<16x16xf32>) -> ()
  return
}

// Left alone: an op between them writes what the xwt reads (a fill of dy).
// CHECK-LABEL: func.func @written_between(
// CHECK-NOT: hector.gradient_pair
// CHECK: return
func.func @written_between(%dy: memref<?x16xf32>, %root: memref<16x16xf32>, %x: memref<?x16xf32>, %dx: memref<?x16xf32>, %droot: memref<16x16xf32>) {
  "hector_intra.gemm_template"(%dy, %root, %dx) {block_size = 256 : i64, epilogue = "store", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64, tile_m = 8 : i64, tile_n = 16 : i64, unroll = 4 : i64, vector = 16 : i64}, tile_n = 8 : i64, variant = "xwt"} : (memref<?x16xf32>, memref<16x16xf32>, memref<?x16xf32>) -> ()
  %zero = arith.constant 0.000000e+00 : f32
  linalg.fill ins(%zero : f32) outs(%dy : memref<?x16xf32>)
  "hector_intra.gemm_template"(%x, %dy, %droot) {block_size = 256 : i64, epilogue = "add", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64, tile_m = 8 : i64, tile_n = 16 : i64, unroll = 4 : i64, vector = 16 : i64}, tile_n = 8 : i64, variant = "xty"} : (memref<?x16xf32>, memref<?x16xf32>, memref<16x16xf32>) -> ()
  return
}

// Left alone: different schedules, a scattering xwt (the transform-first input gradient,
// summed onto sources), and an xty that reads other rows (another scatter_index).
// CHECK-LABEL: func.func @not_pairs(
// CHECK-NOT: hector.gradient_pair
// CHECK: return
func.func @not_pairs(%dy: memref<?x16xf32>, %root: memref<16x16xf32>, %x: memref<?x16xf32>, %dx: memref<?x16xf32>, %droot: memref<16x16xf32>, %w: memref<3x16x16xf32>, %dst: memref<?xi32>, %other: memref<?xi32>, %et: memref<?xi32>, %src: memref<?xi32>, %dw: memref<3x16x16xf32>) {
  "hector_intra.gemm_template"(%dy, %root, %dx) {block_size = 256 : i64, epilogue = "store", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64, tile_m = 8 : i64, tile_n = 16 : i64, unroll = 4 : i64, vector = 16 : i64}, tile_n = 8 : i64, variant = "xwt"} : (memref<?x16xf32>, memref<16x16xf32>, memref<?x16xf32>) -> ()
  "hector_intra.gemm_template"(%x, %dy, %droot) {block_size = 256 : i64, epilogue = "add", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, schedule = {pack = true, parallel = "rows", threads = 1 : i64, tile_k = 1 : i64, tile_m = 8 : i64, tile_n = 16 : i64, unroll = 4 : i64, vector = 16 : i64}, tile_n = 8 : i64, variant = "xty"} : (memref<?x16xf32>, memref<?x16xf32>, memref<16x16xf32>) -> ()
  "hector_intra.gemm_template"(%dy, %w, %dst, %et, %src, %dx) {block_size = 256 : i64, epilogue = "add", operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 1>, schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64, tile_m = 8 : i64, tile_n = 16 : i64, unroll = 4 : i64, vector = 16 : i64}, tile_n = 8 : i64, variant = "xwt"} : (memref<?x16xf32>, memref<3x16x16xf32>, memref<?xi32>, memref<?xi32>, memref<?xi32>, memref<?x16xf32>) -> ()
  "hector_intra.gemm_template"(%x, %dy, %et, %dst, %dw) {block_size = 256 : i64, epilogue = "add", operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 0, 1>, schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64, tile_m = 8 : i64, tile_n = 16 : i64, unroll = 4 : i64, vector = 16 : i64}, tile_n = 8 : i64, variant = "xty"} : (memref<?x16xf32>, memref<?x16xf32>, memref<?xi32>, memref<?xi32>, memref<3x16x16xf32>) -> ()
  "hector_intra.gemm_template"(%dy, %w, %dst, %et, %dx) {block_size = 256 : i64, epilogue = "store", operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1>, schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64, tile_m = 8 : i64, tile_n = 16 : i64, unroll = 4 : i64, vector = 16 : i64}, tile_n = 8 : i64, variant = "xwt"} : (memref<?x16xf32>, memref<3x16x16xf32>, memref<?xi32>, memref<?xi32>, memref<?x16xf32>) -> ()
  "hector_intra.gemm_template"(%x, %dy, %et, %other, %dw) {block_size = 256 : i64, epilogue = "add", operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 0, 1>, schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64, tile_m = 8 : i64, tile_n = 16 : i64, unroll = 4 : i64, vector = 16 : i64}, tile_n = 8 : i64, variant = "xty"} : (memref<?x16xf32>, memref<?x16xf32>, memref<?xi32>, memref<?xi32>, memref<3x16x16xf32>) -> ()
  return
}
