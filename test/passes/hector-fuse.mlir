// RUN: hector-opt %s --split-input-file -p hector-fuse | FileCheck %s
// RUN: hector-opt %s --split-input-file -p hector-dce-cse | FileCheck %s --check-prefix=CLEAN

// RGCN: the gather feeds only the GEMM (its gathered left rows), the GEMM only a per-row scale
// and the scale only the sum: all four become one scatter-GEMM template.
// CHECK-LABEL: func.func @rgcn
// CHECK: "hector_inter.gather_src"({{.*}}) {hector.fuse = "index"}
// CHECK: "hector_inter.typed_linear"({{.*}}) {hector.fuse = "scatter", slice = "etype"}
// CHECK: "hector_inter.scale"({{.*}}) {hector.fuse = "into_sum"}
// CHECK: "hector_inter.sum_to_dst"
// CLEAN-LABEL: func.func @rgcn
// CLEAN-NOT: hector.fuse
func.func @rgcn(%g: !hector_inter.graph, %x: tensor<?x16xf32> {hector.kind = "node"}, %w: tensor<3x16x8xf32>) -> tensor<?x8xf32> {
  %xs = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  %m = "hector_inter.typed_linear"(%g, %xs, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<3x16x8xf32>) -> tensor<?x8xf32>
  %n = "hector_inter.degree_norm"(%g) {by = "dst_etype"} : (!hector_inter.graph) -> tensor<?x1xf32>
  %mn = "hector_inter.scale"(%m, %n) : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %o = "hector_inter.sum_to_dst"(%g, %mn) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %o : tensor<?x8xf32>
}

// -----

// Dead ops go; the second identical gather is replaced by the first (CSE); a gather read by an
// op that cannot take an index (edge_softmax) is materialised, and so is a returned scale.
// A per-head scale (width 2) of a typed linear is not a scatter-GEMM (tested in @attention).
// CHECK-LABEL: func.func @cleanup
// CHECK-NEXT: %[[A:.*]] = "hector_inter.gather_src"(%{{.*}}, %{{.*}}) : (
// CHECK-NEXT: %[[S:.*]] = "hector_inter.edge_softmax"(%{{.*}}, %[[A]])
// CHECK-NEXT: %[[M:.*]] = "hector_inter.scale"(%[[A]], %[[S]]) : (
// CHECK-NEXT: %[[O:.*]] = "hector_inter.sum_to_dst"(%{{.*}}, %[[M]])
// CHECK-NEXT: return %[[O]], %[[M]]
// CLEAN-LABEL: func.func @cleanup
// CLEAN-COUNT-1: "hector_inter.gather_src"
// CLEAN-NOT: "hector_inter.unary"
func.func @cleanup(%g: !hector_inter.graph, %x: tensor<?x2xf32> {hector.kind = "node"}) -> (tensor<?x2xf32>, tensor<?x2xf32>) {
  %a = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
  %b = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
  %dead = "hector_inter.unary"(%a) {fn = "exp", slope = 0.0 : f32} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %s = "hector_inter.edge_softmax"(%g, %b) : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
  %m = "hector_inter.scale"(%a, %s) : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %o = "hector_inter.sum_to_dst"(%g, %m) : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
  return %o, %m : tensor<?x2xf32>, tensor<?x2xf32>
}

// -----

// Attention: both gathers of dot(q_i, k_j) are read through indices, and the expansion of a
// compact value is read through edge_compact by the fused scale-and-sum.
// CHECK-LABEL: func.func @attention
// CHECK: "hector_inter.gather_dst"({{.*}}) {hector.fuse = "index"}
// CHECK: "hector_inter.gather_src"({{.*}}) {hector.fuse = "index"}
// CHECK: "hector_inter.expand_compact"({{.*}}) {hector.fuse = "index"}
// CHECK: "hector_inter.scale"({{.*}}) {hector.fuse = "into_sum"}
func.func @attention(%g: !hector_inter.graph, %q: tensor<?x8xf32> {hector.kind = "node"}, %k: tensor<?x8xf32> {hector.kind = "node"}, %vc: tensor<?x8xf32> {hector.kind = "compact"}) -> tensor<?x8xf32> {
  %qd = "hector_inter.gather_dst"(%g, %q) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %ks = "hector_inter.gather_src"(%g, %k) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %l = "hector_inter.dot"(%qd, %ks) : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x2xf32>
  %s = "hector_inter.edge_softmax"(%g, %l) : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
  %v = "hector_inter.expand_compact"(%g, %vc) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %m = "hector_inter.scale"(%v, %s) : (tensor<?x8xf32>, tensor<?x2xf32>) -> tensor<?x8xf32>
  %o = "hector_inter.sum_to_dst"(%g, %m) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %o : tensor<?x8xf32>
}
