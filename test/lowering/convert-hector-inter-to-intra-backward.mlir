// RUN: hector-opt %s --split-input-file -p 'hector-fuse, convert-hector-inter-to-intra' | FileCheck %s
// RUN: hector-opt %s --split-input-file -p 'hector-fuse, convert-hector-inter-to-intra' | hector-opt --split-input-file -p hector-verify | FileCheck %s --check-prefix=REVERIFY

// Backward programs whose gradient rows are read in place (hector-fuse's into_gemm and index
// marks on them). The graph argument becomes its arrays: %arg0 src, %arg1 dst, %arg2 etype,
// %arg5 norm_dst_etype, %arg11 dst_compact_dst, %arg12 dst_compact_etype; then the tensors.
// REVERIFY-COUNT-5: "hector_intra.gemm_template"

// ---- transform-first RGCN: two GEMMs over the edges, nothing per edge stored ----------------
// The weight gradient: x gathered by src (gather_index), typed by etype (weight_index), the
// gradient row of each edge's destination (scatter_index = dst) scaled by 1/c (row_scale).
// CHECK-LABEL: func.func @rgcn_backward
// CHECK-NOT: memref.alloc
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%[[DW:.*]] : memref<3x16x8xf32>)
// CHECK-NEXT: "hector_intra.gemm_template"(%[[X:[^,]*]], %[[DY:[^,]*]], %arg0, %arg2, %arg1, %arg5, %[[DW]])
// CHECK-SAME: epilogue = "add", operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1>, tile_n = 8 : i64, variant = "xty"
// The input gradient: dy gathered by dst, times W[etype]^T, scaled by 1/c, summed onto src.
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%[[DX:.*]] : memref<?x16xf32>)
// CHECK-NEXT: "hector_intra.gemm_template"(%[[DY]], %{{[^,]*}}, %arg1, %arg2, %arg0, %arg5, %[[DX]])
// CHECK-SAME: epilogue = "add", operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1>, tile_n = 8 : i64, variant = "xwt"
// CHECK-NOT: hector_intra.traversal_template
// CHECK: return
func.func @rgcn_backward(%g: !hector_inter.graph, %x: tensor<?x16xf32> {hector.kind = "node"}, %w: tensor<3x16x8xf32>, %dy: tensor<?x8xf32> {hector.kind = "node"}) -> (tensor<?x16xf32>, tensor<3x16x8xf32>) {
  %d = "hector_inter.gather_dst"(%g, %dy) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %n = "hector_inter.degree_norm"(%g) {by = "dst_etype"} : (!hector_inter.graph) -> tensor<?x1xf32>
  %ds = "hector_inter.scale"(%d, %n) : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %dm = "hector_inter.typed_linear_transposed"(%g, %ds, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x8xf32>, tensor<3x16x8xf32>) -> tensor<?x16xf32>
  %xs = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  %dw = "hector_inter.typed_linear_weight_grad"(%g, %xs, %ds) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<?x8xf32>) -> tensor<3x16x8xf32>
  %dx = "hector_inter.sum_to_src"(%g, %dm) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  return %dx, %dw : tensor<?x16xf32>, tensor<3x16x8xf32>
}

// -----

// ---- aggregate-first RGCN --------------------------------------------------------------------
// Forward: one GEMM per (destination, relation) pair, scattered onto destinations by its
// epilogue. Backward: the pairs' gradient rows read through dst_compact_dst by both GEMMs.
// CHECK-LABEL: func.func @aggregate_first
// CHECK-NOT: memref.alloc
// CHECK: "hector_intra.gemm_template"(%[[A:[^,]*]], %[[W:[^,]*]], %arg12, %arg11, %{{[^)]*}})
// CHECK-SAME: epilogue = "add", operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 0, 1>, tile_n = 8 : i64, variant = "xw"
// CHECK-NEXT: "hector_intra.gemm_template"(%[[DY:[^,]*]], %[[W]], %arg11, %arg12, %{{[^)]*}})
// CHECK-SAME: epilogue = "store", operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1>, tile_n = 8 : i64, variant = "xwt"
// CHECK: "hector_intra.gemm_template"(%[[A]], %[[DY]], %arg12, %arg11, %{{[^)]*}})
// CHECK-SAME: epilogue = "add", operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 0, 1>, tile_n = 8 : i64, variant = "xty"
// CHECK-NOT: hector_intra.traversal_template
// CHECK: return
func.func @aggregate_first(%g: !hector_inter.graph, %a: tensor<?x16xf32> {hector.kind = "dst_compact"}, %w: tensor<3x16x8xf32>, %dy: tensor<?x8xf32> {hector.kind = "node"}) -> (tensor<?x8xf32>, tensor<?x16xf32>, tensor<3x16x8xf32>) {
  %m = "hector_inter.typed_linear"(%g, %a, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<3x16x8xf32>) -> tensor<?x8xf32>
  %o = "hector_inter.sum_dst_compact_to_dst"(%g, %m) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %d = "hector_inter.dst_compact_gather_dst"(%g, %dy) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %da = "hector_inter.typed_linear_transposed"(%g, %d, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x8xf32>, tensor<3x16x8xf32>) -> tensor<?x16xf32>
  %dw = "hector_inter.typed_linear_weight_grad"(%g, %a, %d) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<?x8xf32>) -> tensor<3x16x8xf32>
  return %o, %da, %dw : tensor<?x8xf32>, tensor<?x16xf32>, tensor<3x16x8xf32>
}
