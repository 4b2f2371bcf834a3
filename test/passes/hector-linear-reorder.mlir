// RUN: hector-opt %s --split-input-file -p hector-linear-reorder | FileCheck %s
// RUN: hector-opt %s --split-input-file -p 'hector-linear-reorder{rows=2}' | FileCheck %s --check-prefix=FEW

// hector-linear-reorder on RGAT's attention logits. The destination side `q · (W_r h_i)` has no
// other use of `W_r h_i`: it becomes `(W_r q) · h_i` with `W_r q` computed once per edge type
// (weight_product), and the per-edge projection of h_i disappears. The source side `k · (W_r h_j)`
// must not move: `W_r h_j` is needed for the messages anyway and K (16) >= N (8), so moving it
// would add work.
// CHECK-LABEL: func.func @rgat
// CHECK: %[[XS:.*]] = "hector_inter.gather_src"
// CHECK-NEXT: %[[HS:.*]] = "hector_inter.typed_linear"(%{{.*}}, %[[XS]], %[[W:[^)]*]]) {slice = "etype"}
// CHECK-NEXT: %[[XD:.*]] = "hector_inter.gather_dst"
// CHECK-NEXT: %[[WQ:.*]] = "hector_inter.weight_product"(%[[W]], %[[Q:[^)]*]]) {variant = "xw"} : (tensor<3x16x8xf32>, tensor<8x2xf32>) -> tensor<3x16x2xf32>
// CHECK-NEXT: %[[QI:.*]] = "hector_inter.typed_linear"(%{{.*}}, %[[XD]], %[[WQ]]) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<3x16x2xf32>) -> tensor<?x2xf32>
// CHECK-NEXT: %[[KJ:.*]] = "hector_inter.typed_linear"(%{{.*}}, %[[HS]], %{{.*}}) {slice = "none"}
// CHECK-NEXT: "hector_inter.add"(%[[QI]], %[[KJ]])
// CHECK-NOT: weight_product

// With only two rows, computing W_r q (3·16·8·2 multiply-adds) costs more than it saves.
// FEW-LABEL: func.func @rgat
// FEW-NOT: weight_product
// FEW: "hector_inter.typed_linear"(%{{.*}}, %{{.*}}, %{{.*}}) {slice = "none"}
// FEW: "hector_inter.typed_linear"(%{{.*}}, %{{.*}}, %{{.*}}) {slice = "none"}
func.func @rgat(%g: !hector_inter.graph, %x: tensor<?x16xf32> {hector.kind = "node"}, %w: tensor<3x16x8xf32> {hector.kind = "weight"}, %q: tensor<8x2xf32> {hector.kind = "weight"}, %k: tensor<8x2xf32> {hector.kind = "weight"}) -> tensor<?x8xf32> {
  %xs = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  %hs = "hector_inter.typed_linear"(%g, %xs, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<3x16x8xf32>) -> tensor<?x8xf32>
  %xd = "hector_inter.gather_dst"(%g, %x) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  %hd = "hector_inter.typed_linear"(%g, %xd, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<3x16x8xf32>) -> tensor<?x8xf32>
  %qi = "hector_inter.typed_linear"(%g, %hd, %q) {slice = "none"} : (!hector_inter.graph, tensor<?x8xf32>, tensor<8x2xf32>) -> tensor<?x2xf32>
  %kj = "hector_inter.typed_linear"(%g, %hs, %k) {slice = "none"} : (!hector_inter.graph, tensor<?x8xf32>, tensor<8x2xf32>) -> tensor<?x2xf32>
  %l = "hector_inter.add"(%qi, %kj) : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %a = "hector_inter.unary"(%l) {fn = "leaky_relu", slope = 0.2 : f32} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %s = "hector_inter.edge_softmax"(%g, %a) {by = "dst"} : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
  %m = "hector_inter.scale"(%hs, %s) : (tensor<?x8xf32>, tensor<?x2xf32>) -> tensor<?x8xf32>
  %o = "hector_inter.sum_to_dst"(%g, %m) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %o : tensor<?x8xf32>
}

// -----

// A chain whose inner input is narrower than its output (K = 4 < N = 8): moving the shared linear
// pays even though the inner product has another use.
// CHECK-LABEL: func.func @narrow
// CHECK: "hector_inter.weight_product"
// CHECK: "hector_inter.typed_linear"(%{{.*}}, %{{.*}}, %{{.*}}) {slice = "ntype"} : (!hector_inter.graph, tensor<?x4xf32>, tensor<2x4x2xf32>) -> tensor<?x2xf32>
func.func @narrow(%g: !hector_inter.graph, %x: tensor<?x4xf32> {hector.kind = "node"}, %w: tensor<2x4x8xf32>, %q: tensor<8x2xf32>) -> (tensor<?x8xf32>, tensor<?x2xf32>) {
  %h = "hector_inter.typed_linear"(%g, %x, %w) {slice = "ntype"} : (!hector_inter.graph, tensor<?x4xf32>, tensor<2x4x8xf32>) -> tensor<?x8xf32>
  %p = "hector_inter.typed_linear"(%g, %h, %q) {slice = "none"} : (!hector_inter.graph, tensor<?x8xf32>, tensor<8x2xf32>) -> tensor<?x2xf32>
  return %h, %p : tensor<?x8xf32>, tensor<?x2xf32>
}

// -----

// Not a chain of linears: nothing to reorder.
// CHECK-LABEL: func.func @no_chain
// CHECK-NOT: weight_product
func.func @no_chain(%g: !hector_inter.graph, %x: tensor<?x8xf32> {hector.kind = "node"}, %q: tensor<8x2xf32>) -> tensor<?x2xf32> {
  %r = "hector_inter.unary"(%x) {fn = "relu", slope = 0.0 : f32} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %p = "hector_inter.typed_linear"(%g, %r, %q) {slice = "none"} : (!hector_inter.graph, tensor<?x8xf32>, tensor<8x2xf32>) -> tensor<?x2xf32>
  return %p : tensor<?x2xf32>
}
