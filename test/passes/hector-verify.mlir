// RUN: hector-opt %s --no-hector-verify -p hector-verify | FileCheck %s
// RUN: hector-opt %s --no-hector-verify -p hector-verify | hector-opt --no-hector-verify -p hector-verify | FileCheck %s

// hector-verify accepts well-formed programs and rewrites nothing: every op comes out as it
// went in (names are renumbered by the printer). Invalid inputs are in hector-verify-invalid.mlir.

// RGCN layer: gather → etype-sliced linear → scale by degree norm → sum → self loop, bias, relu.
// CHECK-LABEL: func.func @rgcn
// CHECK-SAME: (%[[G:.*]]: !hector_inter.graph, %[[X:.*]]: tensor<?x16xf32>, %[[W:.*]]: tensor<3x16x8xf32>, %[[W0:.*]]: tensor<16x8xf32>, %[[B:.*]]: tensor<8xf32>) -> tensor<?x8xf32>
// CHECK-NEXT: %[[XS:.*]] = "hector_inter.gather_src"(%[[G]], %[[X]]) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
// CHECK-NEXT: %[[M:.*]] = "hector_inter.typed_linear"(%[[G]], %[[XS]], %[[W]]) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<3x16x8xf32>) -> tensor<?x8xf32>
// CHECK-NEXT: %[[N:.*]] = "hector_inter.degree_norm"(%[[G]]) {by = "dst_etype"} : (!hector_inter.graph) -> tensor<?x1xf32>
// CHECK-NEXT: %[[MN:.*]] = "hector_inter.scale"(%[[M]], %[[N]]) : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
// CHECK-NEXT: %[[AGG:.*]] = "hector_inter.sum_to_dst"(%[[G]], %[[MN]]) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
// CHECK-NEXT: %[[SELF:.*]] = "hector_inter.typed_linear"(%[[G]], %[[X]], %[[W0]]) {slice = "none"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
// CHECK-NEXT: %[[H:.*]] = "hector_inter.add"(%[[AGG]], %[[SELF]]) : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
// CHECK-NEXT: %[[HB:.*]] = "hector_inter.add"(%[[H]], %[[B]]) : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
// CHECK-NEXT: %[[R:.*]] = "hector_inter.unary"(%[[HB]]) {fn = "relu", slope = 0.000000e+00 : f32} : (tensor<?x8xf32>) -> tensor<?x8xf32>
// CHECK-NEXT: return %[[R]] : tensor<?x8xf32>
func.func @rgcn(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: tensor<3x16x8xf32>, %w0: tensor<16x8xf32>, %b: tensor<8xf32>) -> tensor<?x8xf32> {
  %xs = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  %m = "hector_inter.typed_linear"(%g, %xs, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<3x16x8xf32>) -> tensor<?x8xf32>
  %n = "hector_inter.degree_norm"(%g) {by = "dst_etype"} : (!hector_inter.graph) -> tensor<?x1xf32>
  %mn = "hector_inter.scale"(%m, %n) : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %agg = "hector_inter.sum_to_dst"(%g, %mn) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %self = "hector_inter.typed_linear"(%g, %x, %w0) {slice = "none"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  %h = "hector_inter.add"(%agg, %self) : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %hb = "hector_inter.add"(%h, %b) : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  %r = "hector_inter.unary"(%hb) {fn = "relu", slope = 0.0 : f32} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %r : tensor<?x8xf32>
}

// A node-type-sliced linear (node-wise rows, [T, K, N] weight), a shared linear on edge-wise
// rows, the destination-side gather and the all-edges normaliser.
// CHECK-LABEL: func.func @ntype_and_edge_rows
// CHECK-NEXT: "hector_inter.typed_linear"(%{{.*}}) {slice = "ntype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<2x16x4xf32>) -> tensor<?x4xf32>
// CHECK-NEXT: "hector_inter.gather_dst"(%{{.*}}) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
// CHECK-NEXT: "hector_inter.typed_linear"(%{{.*}}) {slice = "none"} : (!hector_inter.graph, tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
// CHECK-NEXT: "hector_inter.degree_norm"(%{{.*}}) {by = "dst"} : (!hector_inter.graph) -> tensor<?x1xf32>
// CHECK-NEXT: "hector_inter.scale"
// CHECK-NEXT: "hector_inter.sum_to_dst"
// CHECK-NEXT: "hector_inter.unary"(%{{.*}}) {fn = "copy", slope = 0.000000e+00 : f32}
// CHECK-NEXT: return
func.func @ntype_and_edge_rows(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %wt: tensor<2x16x4xf32>, %ws: tensor<4x4xf32>) -> tensor<?x4xf32> {
  %0 = "hector_inter.typed_linear"(%g, %x, %wt) {slice = "ntype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<2x16x4xf32>) -> tensor<?x4xf32>
  %1 = "hector_inter.gather_dst"(%g, %0) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  %2 = "hector_inter.typed_linear"(%g, %1, %ws) {slice = "none"} : (!hector_inter.graph, tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %3 = "hector_inter.degree_norm"(%g) {by = "dst"} : (!hector_inter.graph) -> tensor<?x1xf32>
  %4 = "hector_inter.scale"(%2, %3) : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %5 = "hector_inter.sum_to_dst"(%g, %4) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  %6 = "hector_inter.unary"(%5) {fn = "copy", slope = 0.0 : f32} : (tensor<?x4xf32>) -> tensor<?x4xf32>
  return %6 : tensor<?x4xf32>
}

// Valid hector.kind argument attributes are accepted and kept; an edge-wise argument can be
// summed and added to other edge-wise rows. Static row counts that agree are fine.
// CHECK-LABEL: func.func @kinds
// CHECK-SAME: tensor<5x8xf32> {hector.kind = "edge"}
// CHECK-SAME: tensor<5x8xf32> {hector.kind = "edge"}
// CHECK-SAME: tensor<8xf32> {hector.kind = "weight"}
// CHECK-NEXT: "hector_inter.add"({{.*}}) : (tensor<5x8xf32>, tensor<5x8xf32>) -> tensor<5x8xf32>
// CHECK-NEXT: "hector_inter.add"({{.*}}) : (tensor<5x8xf32>, tensor<8xf32>) -> tensor<5x8xf32>
// CHECK-NEXT: "hector_inter.sum_to_dst"
func.func @kinds(%g: !hector_inter.graph, %a: tensor<5x8xf32> {hector.kind = "edge"}, %b: tensor<5x8xf32> {hector.kind = "edge"}, %c: tensor<8xf32> {hector.kind = "weight"}) -> tensor<?x8xf32> {
  %0 = "hector_inter.add"(%a, %b) : (tensor<5x8xf32>, tensor<5x8xf32>) -> tensor<5x8xf32>
  %1 = "hector_inter.add"(%0, %c) : (tensor<5x8xf32>, tensor<8xf32>) -> tensor<5x8xf32>
  %2 = "hector_inter.sum_to_dst"(%g, %1) : (!hector_inter.graph, tensor<5x8xf32>) -> tensor<?x8xf32>
  return %2 : tensor<?x8xf32>
}

// A function without Hector ops is not looked at.
// CHECK-LABEL: func.func @plain
// CHECK-NEXT: arith.addf
func.func @plain(%a: f32) -> f32 {
  %0 = arith.addf %a, %a : f32
  return %0 : f32
}

// hector_intra templates with every optional operand combination the lowerings produce.
// CHECK-LABEL: func.func @intra
// CHECK-NEXT: "hector_intra.gemm_template"({{.*}}) {block_size = 128 : i64, epilogue = "store", operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1>, tile_n = 8 : i64, variant = "xw"}
// CHECK-NEXT: "hector_intra.gemm_template"({{.*}}) {block_size = 128 : i64, epilogue = "atomic_add", operandSegmentSizes = array<i32: 1, 1, 0, 0, 1, 0, 1>, tile_n = 4 : i64, variant = "xw"}
// CHECK-NEXT: "hector_intra.traversal_template"({{.*}}) {block_size = 256 : i64, fn = "scale", operandSegmentSizes = array<i32: 0, 1, 0, 1, 1, 1>, parallel = "edge", reduce = "sum", slope = 0.000000e+00 : f32}
// CHECK-NEXT: "hector_intra.traversal_template"({{.*}}) {block_size = 256 : i64, fn = "copy", operandSegmentSizes = array<i32: 1, 0, 0, 1, 0, 1>, parallel = "edge", reduce = "none", slope = 0.000000e+00 : f32}
// CHECK-NEXT: "hector_intra.traversal_template"({{.*}}) {block_size = 256 : i64, fn = "add_bias", operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>, parallel = "node", reduce = "none", slope = 0.000000e+00 : f32}
// CHECK-NEXT: "hector_intra.traversal_template"({{.*}}) {block_size = 256 : i64, fn = "relu", operandSegmentSizes = array<i32: 0, 1, 0, 1, 0, 1>, parallel = "edge", reduce = "atomic_sum", slope = 0.000000e+00 : f32}
// CHECK-NEXT: return
func.func @intra(%x: memref<?x16xf32>, %w: memref<3x16x8xf32>, %w0: memref<16x8xf32>, %src: memref<?xi32>, %etype: memref<?xi32>, %dst: memref<?xi32>, %m: memref<?x8xf32>, %norm: memref<?x1xf32>, %bias: memref<8xf32>, %out: memref<?x8xf32>, %e16: memref<?x16xf32>) {
  "hector_intra.gemm_template"(%x, %w, %src, %etype, %m) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1>} : (memref<?x16xf32>, memref<3x16x8xf32>, memref<?xi32>, memref<?xi32>, memref<?x8xf32>) -> ()
  "hector_intra.gemm_template"(%x, %w0, %dst, %out) {variant = "xw", epilogue = "atomic_add", tile_n = 4 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 1, 0, 1>} : (memref<?x16xf32>, memref<16x8xf32>, memref<?xi32>, memref<?x8xf32>) -> ()
  "hector_intra.traversal_template"(%dst, %m, %norm, %out) {parallel = "edge", fn = "scale", reduce = "sum", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 1, 0, 1, 1, 1>} : (memref<?xi32>, memref<?x8xf32>, memref<?x1xf32>, memref<?x8xf32>) -> ()
  "hector_intra.traversal_template"(%src, %x, %e16) {parallel = "edge", fn = "copy", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 0, 0, 1, 0, 1>} : (memref<?xi32>, memref<?x16xf32>, memref<?x16xf32>) -> ()
  "hector_intra.traversal_template"(%out, %bias, %out) {parallel = "node", fn = "add_bias", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>} : (memref<?x8xf32>, memref<8xf32>, memref<?x8xf32>) -> ()
  "hector_intra.traversal_template"(%dst, %m, %out) {parallel = "edge", fn = "relu", reduce = "atomic_sum", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 1, 0, 1, 0, 1>} : (memref<?xi32>, memref<?x8xf32>, memref<?x8xf32>) -> ()
  return
}
