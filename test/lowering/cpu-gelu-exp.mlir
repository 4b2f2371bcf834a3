// GELU and its gradient compute exp(-v²) (erf) and exp(-v²/2) (the density) in arith alone
// (templates._exp, Cephes' expf): a floor, the polynomial and 2^n built in the exponent field,
// no math.exp, which the CPU lowered to one scalar expf call per element and kept its
// loop from vectorising. The other row functions keep math.exp.
// RUN: hector-opt %s -p convert-hector-intra-to-scf | FileCheck %s
// RUN: hector-opt %s -p convert-hector-intra-to-scf,hector-lower-llvm-cpu | FileCheck %s --check-prefix=LLVM

// CHECK-LABEL: func.func @gelu
// CHECK-NOT: math.exp
// CHECK: arith.maximumf
// CHECK: arith.minimumf
// CHECK: math.floor
// CHECK: arith.fptosi %{{.*}} : f32 to i32
// CHECK: arith.shli
// CHECK: arith.bitcast %{{.*}} : i32 to f32
// CHECK-NOT: math.exp
// CHECK: return
// LLVM-LABEL: llvm.func @gelu
// LLVM-NOT: llvm.intr.exp
// LLVM: llvm.intr.floor
// LLVM-NOT: llvm.intr.exp
// LLVM: llvm.return
func.func @gelu(%x: memref<?x16xf32>, %out: memref<?x16xf32>) {
  "hector_intra.traversal_template"(%x, %out) {parallel = "node", fn = "gelu", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x16xf32>, memref<?x16xf32>) -> ()
  return
}

// Two exps per element: erf's and the density's.
// CHECK-LABEL: func.func @gelu_grad
// CHECK-NOT: math.exp
// CHECK-COUNT-2: math.floor
// CHECK-NOT: math.exp
// CHECK: return
func.func @gelu_grad(%dy: memref<?x16xf32>, %x: memref<?x16xf32>, %out: memref<?x16xf32>) {
  "hector_intra.traversal_template"(%dy, %x, %out) {parallel = "node", fn = "gelu_grad", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>} : (memref<?x16xf32>, memref<?x16xf32>, memref<?x16xf32>) -> ()
  return
}

// CHECK-LABEL: func.func @exp
// CHECK: math.exp
// CHECK-NOT: math.floor
// CHECK: return
func.func @exp(%x: memref<?x16xf32>, %out: memref<?x16xf32>) {
  "hector_intra.traversal_template"(%x, %out) {parallel = "node", fn = "exp", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x16xf32>, memref<?x16xf32>) -> ()
  return
}
