// RUN: hector-opt %s --split-input-file -p 'hector-vector-dots' | FileCheck %s
// RUN: hector-opt %s --split-input-file -p 'hector-schedule{threads=2}, hector-vector-dots, hector-outline-templates, convert-hector-intra-to-scf' | FileCheck %s --check-prefix=LOOPS

// A per-head dot product whose heads are whole 16-lane vectors is marked hector.vector_dot,
// in an f32 program as in a half one: each head's products summed in one 16-lane vector
// (two steps a head of 32), added across the lanes with reassociation. A dot whose heads are
// not whole vectors (8 wide) and a dot that reduces are left to the element form.
// CHECK-LABEL: func.func @f32_gradient
// CHECK: fn = "dot"{{.*}}hector.vector_dot
// CHECK-LABEL: func.func @bf16_scores
// CHECK: fn = "dot"{{.*}}hector.vector_dot
// CHECK-LABEL: func.func @narrow_heads
// CHECK-NOT: hector.vector_dot
// CHECK-LABEL: func.func @summed_dot
// CHECK-NOT: hector.vector_dot
// CHECK: return
// LOOPS-LABEL: func.func private @f32_gradient_template0
// LOOPS: scf.forall
// LOOPS-COUNT-2: vector.transfer_read %{{.*}} : memref<?x64xf32>, vector<16xf32>
// LOOPS: vector.reduction <add>, %{{.*}} fastmath<reassoc> : vector<16xf32> into f32
// LOOPS-LABEL: func.func private @bf16_scores_template0
// LOOPS: scf.forall
// LOOPS-COUNT-2: vector.transfer_read %{{.*}} : memref<?x64xbf16>, vector<16xbf16>
// LOOPS: vector.reduction <add>, %{{.*}} fastmath<reassoc> : vector<16xf32> into f32
// LOOPS-LABEL: func.func private @narrow_heads_template0
// LOOPS-NOT: vector.reduction
// LOOPS: return
func.func @f32_gradient(%dout: memref<?x64xf32>, %h: memref<?x64xf32>, %src: memref<?xi32>, %dst: memref<?xi32>, %res: memref<?x2xf32>) {
  "hector_intra.traversal_template"(%src, %dst, %h, %dout, %res) {fn = "dot", reduce = "none", parallel = "edge", block_size = 256 : i64, slope = 0.0 : f32, operandSegmentSizes = array<i32: 1, 0, 1, 1, 1, 1>} : (memref<?xi32>, memref<?xi32>, memref<?x64xf32>, memref<?x64xf32>, memref<?x2xf32>) -> ()
  return
}
func.func @bf16_scores(%k: memref<?x64xbf16>, %q: memref<?x64xf32>, %dst: memref<?xi32>, %res: memref<?x2xbf16>) attributes {hector.outputs = 1 : i64} {
  "hector_intra.traversal_template"(%dst, %k, %q, %res) {fn = "dot", reduce = "none", parallel = "edge", block_size = 256 : i64, slope = 0.0 : f32, operandSegmentSizes = array<i32: 0, 0, 1, 1, 1, 1>} : (memref<?xi32>, memref<?x64xbf16>, memref<?x64xf32>, memref<?x2xbf16>) -> ()
  return
}
func.func @narrow_heads(%k: memref<?x64xf32>, %q: memref<?x64xf32>, %dst: memref<?xi32>, %res: memref<?x8xf32>) {
  "hector_intra.traversal_template"(%dst, %k, %q, %res) {fn = "dot", reduce = "none", parallel = "edge", block_size = 256 : i64, slope = 0.0 : f32, operandSegmentSizes = array<i32: 0, 0, 1, 1, 1, 1>} : (memref<?xi32>, memref<?x64xf32>, memref<?x64xf32>, memref<?x8xf32>) -> ()
  return
}
func.func @summed_dot(%k: memref<?x64xf32>, %q: memref<?x64xf32>, %dst: memref<?xi32>, %res: memref<?x2xf32>) {
  "hector_intra.traversal_template"(%dst, %k, %q, %res) {fn = "dot", reduce = "sum", parallel = "edge", block_size = 256 : i64, slope = 0.0 : f32, operandSegmentSizes = array<i32: 0, 1, 0, 1, 1, 1>} : (memref<?xi32>, memref<?x64xf32>, memref<?x64xf32>, memref<?x2xf32>) -> ()
  return
}

