// RUN: hector-opt %s -p 'hector-linear-reorder{src_typed=true}, hector-fuse, convert-hector-inter-to-intra, convert-hector-intra-to-gpu, hector-lower-ptx' | FileCheck %s

// HGT's folded key path down to PTX (sm_90): picking W_k and b_k per relation (traversals over
// etype_src_ntype), the per-slice weight products (GEMMs with slice_rows), the folded edge
// GEMM and the per-relation bias: one kernel each.
// CHECK: .entry hgt_key_4_traversal
// CHECK: .entry hgt_key_8_gemm
// CHECK: .entry hgt_key_11_gemm
// CHECK: .entry hgt_key_13_traversal
// CHECK: .entry hgt_key_15_gemm
// CHECK: .entry hgt_key_16_traversal
// CHECK-NOT: .entry
func.func @hgt_key(%g: !hector_inter.graph, %x: tensor<?x16xf32> {hector.kind = "node"}, %w: tensor<2x16x8xf32> {hector.kind = "weight"}, %b: tensor<2x8xf32> {hector.kind = "weight"}, %wr: tensor<5x8x8xf32> {hector.kind = "weight"}) -> tensor<?x8xf32> {
  %p = "hector_inter.typed_linear"(%g, %x, %w) {slice = "ntype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<2x16x8xf32>) -> tensor<?x8xf32>
  %k = "hector_inter.add"(%p, %b, %g) : (tensor<?x8xf32>, tensor<2x8xf32>, !hector_inter.graph) -> tensor<?x8xf32>
  %ks = "hector_inter.gather_src"(%g, %k) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %ke = "hector_inter.typed_linear"(%g, %ks, %wr) {slice = "etype"} : (!hector_inter.graph, tensor<?x8xf32>, tensor<5x8x8xf32>) -> tensor<?x8xf32>
  return %ke : tensor<?x8xf32>
}
