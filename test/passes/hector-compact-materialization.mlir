// RUN: hector-opt %s --split-input-file -p hector-compact-materialization | FileCheck %s
// RUN: hector-opt %s --split-input-file -p 'hector-compact-materialization{ratio=0.99}' | FileCheck %s --check-prefix=DENSE

// hector-compact-materialization on RGAT: the source-side projection W_r h_j depends only on
// (source node, edge type), so it is computed on compact rows and read per edge through
// expand_compact; k · (W_r h_j) follows it onto the compact rows. The destination side
// (gather_dst) is per edge and stays as it is.
// CHECK-LABEL: func.func @rgat
// CHECK-NEXT: %[[C:.*]] = "hector_inter.compact_gather_src"(%[[G:[^,]*]], %[[X:[^)]*]])
// CHECK-NEXT: %[[HC:.*]] = "hector_inter.typed_linear"(%[[G]], %[[C]], %{{.*}}) {slice = "etype"}
// CHECK-NEXT: %[[HS:.*]] = "hector_inter.expand_compact"(%[[G]], %[[HC]])
// CHECK-NEXT: %[[XD:.*]] = "hector_inter.gather_dst"(%[[G]], %[[X]])
// CHECK-NEXT: %[[HD:.*]] = "hector_inter.typed_linear"(%[[G]], %[[XD]], %{{.*}}) {slice = "etype"}
// CHECK-NEXT: %[[QI:.*]] = "hector_inter.typed_linear"(%[[G]], %[[HD]], %{{.*}}) {slice = "none"}
// CHECK-NEXT: %[[KC:.*]] = "hector_inter.typed_linear"(%[[G]], %[[HC]], %{{.*}}) {slice = "none"}
// CHECK-NEXT: %[[KJ:.*]] = "hector_inter.expand_compact"(%[[G]], %[[KC]])
// CHECK-NEXT: "hector_inter.add"(%[[QI]], %[[KJ]])
// CHECK: "hector_inter.scale"(%[[HS]], %{{.*}})
// CHECK-NOT: "hector_inter.gather_src"

// A graph whose compaction ratio is above max_ratio: left unchanged.
// DENSE-LABEL: func.func @rgat
// DENSE-NOT: compact
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

// A node-type-sliced linear and a gather_dst are not per (source, edge type): untouched.
// CHECK-LABEL: func.func @not_per_source
// CHECK-NOT: compact
func.func @not_per_source(%g: !hector_inter.graph, %x: tensor<?x4xf32> {hector.kind = "node"}, %w: tensor<2x4x4xf32>, %we: tensor<3x4x4xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>) {
  %h = "hector_inter.typed_linear"(%g, %x, %w) {slice = "ntype"} : (!hector_inter.graph, tensor<?x4xf32>, tensor<2x4x4xf32>) -> tensor<?x4xf32>
  %d = "hector_inter.gather_dst"(%g, %x) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e = "hector_inter.typed_linear"(%g, %d, %we) {slice = "etype"} : (!hector_inter.graph, tensor<?x4xf32>, tensor<3x4x4xf32>) -> tensor<?x4xf32>
  return %h, %e : tensor<?x4xf32>, tensor<?x4xf32>
}

// -----

// Unary functions and biases of a compact value stay compact; a binary op with one per-edge
// operand reads the compact one through the expansion.
// CHECK-LABEL: func.func @chain
// CHECK: %[[P:.*]] = "hector_inter.typed_linear"(%{{.*}}, %{{.*}}, %{{.*}}) {slice = "etype"}
// CHECK-NEXT: %[[T:.*]] = "hector_inter.unary"(%[[P]]) {fn = "tanh"
// CHECK-NEXT: %[[B:.*]] = "hector_inter.add"(%[[T]], %{{.*}}) : (tensor<?x4xf32>, tensor<4xf32>)
// CHECK-NEXT: %[[E:.*]] = "hector_inter.expand_compact"(%{{.*}}, %[[B]])
// CHECK: "hector_inter.add"(%[[E]], %{{.*}}) : (tensor<?x4xf32>, tensor<?x4xf32>)
func.func @chain(%g: !hector_inter.graph, %x: tensor<?x4xf32> {hector.kind = "node"}, %w: tensor<3x4x4xf32>, %b: tensor<4xf32>) -> tensor<?x4xf32> {
  %s = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  %p = "hector_inter.typed_linear"(%g, %s, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x4xf32>, tensor<3x4x4xf32>) -> tensor<?x4xf32>
  %t = "hector_inter.unary"(%p) {fn = "tanh", slope = 0.0 : f32} : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %u = "hector_inter.add"(%t, %b) : (tensor<?x4xf32>, tensor<4xf32>) -> tensor<?x4xf32>
  %d = "hector_inter.gather_dst"(%g, %x) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  %v = "hector_inter.add"(%u, %d) : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %o = "hector_inter.sum_to_dst"(%g, %v) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %o : tensor<?x4xf32>
}
