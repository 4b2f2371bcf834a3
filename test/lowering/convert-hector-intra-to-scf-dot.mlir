// RUN: hector-opt %s -p convert-hector-intra-to-scf | FileCheck %s
// RUN: hector-opt %s -p convert-hector-intra-to-gpu | FileCheck %s --check-prefix=GPU
// A per-head inner product (fn = "dot") keeps up to 8 independent partial sums, lane l summing
// columns d = l (mod lanes) of its head, then adds them pairwise, neighbours first: one running
// sum would be a chain of dependent adds (the latency of one add per column). The lane count is
// the largest power of two up to 8 that divides the head width; the CPU and GPU lowerings build
// the same body (row functions live in lowering/_templates.py), so they sum in the same order.

// Heads of 8 columns: 8 lanes, one step of the column loop, a tree of 4 + 2 + 1 adds.
// CHECK-LABEL: func.func @dot_8_lanes
// CHECK: %[[P:.*]]:8 = scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args({{.*}}) -> (f32, f32, f32, f32, f32, f32, f32, f32) {
// CHECK-COUNT-8: arith.mulf
// CHECK: scf.yield
// CHECK-NEXT: }
// CHECK-NEXT: %[[A:.*]] = arith.addf %[[P]]#0, %[[P]]#1 : f32
// CHECK-NEXT: %[[B:.*]] = arith.addf %[[P]]#2, %[[P]]#3 : f32
// CHECK-NEXT: %[[C:.*]] = arith.addf %[[P]]#4, %[[P]]#5 : f32
// CHECK-NEXT: %[[D:.*]] = arith.addf %[[P]]#6, %[[P]]#7 : f32
// CHECK-NEXT: %[[AB:.*]] = arith.addf %[[A]], %[[B]] : f32
// CHECK-NEXT: %[[CD:.*]] = arith.addf %[[C]], %[[D]] : f32
// CHECK-NEXT: %[[S:.*]] = arith.addf %[[AB]], %[[CD]] : f32
// CHECK-NEXT: memref.store %[[S]], %{{.*}} : memref<?x2xf32>
// GPU-LABEL: gpu.func @dot_8_lanes
// GPU: scf.for {{.*}} -> (f32, f32, f32, f32, f32, f32, f32, f32) {
func.func @dot_8_lanes(%x: memref<?x16xf32>, %y: memref<?x16xf32>, %out: memref<?x2xf32>) {
  "hector_intra.traversal_template"(%x, %y, %out) {parallel = "edge", fn = "dot", reduce = "none", slope = 0.0 : f32, block_size = 128 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>} : (memref<?x16xf32>, memref<?x16xf32>, memref<?x2xf32>) -> ()
  return
}

// Heads of 6 columns: 2 lanes (8 and 4 do not divide 6), added once at the end.
// CHECK-LABEL: func.func @dot_2_lanes
// CHECK: %[[P:.*]]:2 = scf.for {{.*}} -> (f32, f32) {
// CHECK-COUNT-2: arith.mulf
// CHECK: scf.yield
// CHECK-NEXT: }
// CHECK-NEXT: %[[S:.*]] = arith.addf %[[P]]#0, %[[P]]#1 : f32
// CHECK-NEXT: memref.store %[[S]], %{{.*}} : memref<?x1xf32>
func.func @dot_2_lanes(%x: memref<?x6xf32>, %y: memref<?x6xf32>, %out: memref<?x1xf32>) {
  "hector_intra.traversal_template"(%x, %y, %out) {parallel = "edge", fn = "dot", reduce = "none", slope = 0.0 : f32, block_size = 128 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>} : (memref<?x6xf32>, memref<?x6xf32>, memref<?x1xf32>) -> ()
  return
}

// Odd head widths keep the single running sum: nothing is left to add after the loop.
// CHECK-LABEL: func.func @dot_1_lane
// CHECK: %[[S:.*]] = scf.for {{.*}} -> (f32) {
// CHECK-COUNT-1: arith.mulf
// CHECK-NOT: arith.mulf
// CHECK: scf.yield
// CHECK-NEXT: }
// CHECK-NEXT: memref.store %[[S]], %{{.*}} : memref<?x1xf32>
func.func @dot_1_lane(%x: memref<?x3xf32>, %y: memref<?x3xf32>, %out: memref<?x1xf32>) {
  "hector_intra.traversal_template"(%x, %y, %out) {parallel = "edge", fn = "dot", reduce = "none", slope = 0.0 : f32, block_size = 128 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>} : (memref<?x3xf32>, memref<?x3xf32>, memref<?x1xf32>) -> ()
  return
}
