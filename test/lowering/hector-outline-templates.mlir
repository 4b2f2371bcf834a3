// RUN: hector-opt %s -p hector-outline-templates | FileCheck %s
// RUN: hector-opt %s -p hector-outline-templates --mlir-print-debuginfo | FileCheck %s --check-prefix=LOC
// RUN: hector-opt %s -p "hector-outline-templates, convert-hector-intra-to-scf, hector-merge-identical-functions" | FileCheck %s --check-prefix=MERGED

// Each template moves, unchanged, into a private function of its own that takes its operands
// (their own types: static sizes stay static), and is called where it stood. The function
// around it keeps everything else.

// CHECK-LABEL: func.func @f(
// CHECK-SAME: %[[A:[^:]*]]: memref<?x16xf32>, %[[W:[^:]*]]: memref<3x16x8xf32>, %[[SRC:[^:]*]]: memref<?xi32>, %[[ET:[^:]*]]: memref<?xi32>, %[[OUT:[^:]*]]: memref<?x8xf32>, %[[OUT2:[^:]*]]: memref<?x8xf32>)
// CHECK-NEXT: call @f_template0(%[[A]], %[[W]], %[[SRC]], %[[ET]], %[[OUT]])
// CHECK-NEXT: %[[C0:.*]] = arith.constant 0 : index
// CHECK-NEXT: call @f_template1(%[[A]], %[[W]], %[[SRC]], %[[ET]], %[[OUT2]])
// CHECK-NEXT: return
// CHECK-NOT: hector_intra
// CHECK-LABEL: func.func @existing
// CHECK-LABEL: func.func private @f_template0(
// CHECK-SAME: %[[TA:[^:]*]]: memref<?x16xf32>, %[[TW:[^:]*]]: memref<3x16x8xf32>, %[[TS:[^:]*]]: memref<?xi32>, %[[TE:[^:]*]]: memref<?xi32>, %[[TO:[^:]*]]: memref<?x8xf32>)
// CHECK-NEXT: "hector_intra.gemm_template"(%[[TA]], %[[TW]], %[[TS]], %[[TE]], %[[TO]]) {block_size = 128 : i64
// CHECK-NEXT: return
// CHECK-LABEL: func.func private @f_template1(

// A name already taken gets a suffix.
// CHECK-LABEL: func.func private @g_template0_(
// CHECK: hector_intra.traversal_template

// Calls and outlined functions carry the template's location.
// LOC: #[[GEMM:loc[0-9]*]] = loc("gemm.py":3:1)
// LOC: call @f_template0{{.*}} loc(#[[GEMM]])
// LOC: func.func private @f_template0(%arg0: memref<?x16xf32> loc("gemm.py":3:1)

// The two identical templates become identical functions: one is kept, called twice.
// MERGED-LABEL: func.func @f(
// MERGED: call @f_template0(
// MERGED: call @f_template0(
// MERGED-NOT: func.func private @f_template1(

func.func @f(%a: memref<?x16xf32>, %w: memref<3x16x8xf32>, %src: memref<?xi32>, %etype: memref<?xi32>, %out: memref<?x8xf32>, %out2: memref<?x8xf32>) {
  "hector_intra.gemm_template"(%a, %w, %src, %etype, %out) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1>} : (memref<?x16xf32>, memref<3x16x8xf32>, memref<?xi32>, memref<?xi32>, memref<?x8xf32>) -> () loc("gemm.py":3:1)
  %c0 = arith.constant 0 : index
  "hector_intra.gemm_template"(%a, %w, %src, %etype, %out2) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1>} : (memref<?x16xf32>, memref<3x16x8xf32>, memref<?xi32>, memref<?xi32>, memref<?x8xf32>) -> ()
  return
}

func.func @existing() {
  return
}

func.func private @g_template0() {
  return
}

func.func @g(%x: memref<?x8xf32>, %out: memref<?x8xf32>) {
  "hector_intra.traversal_template"(%x, %out) {parallel = "node", fn = "relu", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x8xf32>, memref<?x8xf32>) -> ()
  return
}
