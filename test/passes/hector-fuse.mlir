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
  %s = "hector_inter.edge_softmax"(%g, %b) {by = "dst"} : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
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
  %s = "hector_inter.edge_softmax"(%g, %l) {by = "dst"} : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
  %v = "hector_inter.expand_compact"(%g, %vc) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %m = "hector_inter.scale"(%v, %s) : (tensor<?x8xf32>, tensor<?x2xf32>) -> tensor<?x8xf32>
  %o = "hector_inter.sum_to_dst"(%g, %m) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %o : tensor<?x8xf32>
}

// -----

// RGCN's backward (transform-first): the gradient rows gathered to edges and scaled per row are
// never built. The scale folds into both GEMMs that read it (into_gemm: their row_scale), the
// gather is read through an index by both (the input gradient's gathered rows, the weight
// gradient's gradient rows), and the input gradient is summed onto sources in its epilogue.
// CHECK-LABEL: func.func @rgcn_backward
// CHECK: "hector_inter.gather_dst"({{.*}}) {hector.fuse = "index"}
// CHECK: "hector_inter.scale"({{.*}}) {hector.fuse = "into_gemm"}
// CHECK: "hector_inter.typed_linear_transposed"({{.*}}) {hector.fuse = "scatter", slice = "etype"}
// CHECK: "hector_inter.gather_src"({{.*}}) {hector.fuse = "index"}
// CHECK: "hector_inter.typed_linear_weight_grad"({{.*}}) {slice = "etype"}
// CHECK: "hector_inter.sum_to_src"
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

// A scale read by anything but a GEMM's rows (here a returned value, and a unary) stays a
// traversal of its own, and so does the gather feeding it.
// CHECK-LABEL: func.func @scale_not_into_gemm
// CHECK: "hector_inter.gather_dst"({{.*}}) :
// CHECK: "hector_inter.scale"({{.*}}) :
// CHECK: "hector_inter.typed_linear_transposed"({{.*}}) {slice = "etype"}
func.func @scale_not_into_gemm(%g: !hector_inter.graph, %w: tensor<3x16x8xf32>, %dy: tensor<?x8xf32> {hector.kind = "node"}) -> (tensor<?x16xf32>, tensor<?x8xf32>) {
  %d = "hector_inter.gather_dst"(%g, %dy) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %n = "hector_inter.degree_norm"(%g) {by = "dst_etype"} : (!hector_inter.graph) -> tensor<?x1xf32>
  %ds = "hector_inter.scale"(%d, %n) : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %dm = "hector_inter.typed_linear_transposed"(%g, %ds, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x8xf32>, tensor<3x16x8xf32>) -> tensor<?x16xf32>
  return %dm, %ds : tensor<?x16xf32>, tensor<?x8xf32>
}

// -----

// Aggregate-first RGCN: the per-(destination, relation) products are summed onto destinations
// by the GEMM's epilogue (a scatter-GEMM without a scale); its backward reads the gradient rows
// of the pairs through an index in both GEMMs.
// CHECK-LABEL: func.func @aggregate_first
// CHECK: "hector_inter.typed_linear"({{.*}}) {hector.fuse = "scatter", slice = "etype"}
// CHECK: "hector_inter.sum_dst_compact_to_dst"
// CHECK: "hector_inter.dst_compact_gather_dst"({{.*}}) {hector.fuse = "index"}
// CHECK: "hector_inter.typed_linear_transposed"({{.*}}) {slice = "etype"}
// CHECK: "hector_inter.typed_linear_weight_grad"({{.*}}) {slice = "etype"}
func.func @aggregate_first(%g: !hector_inter.graph, %a: tensor<?x16xf32> {hector.kind = "dst_compact"}, %w: tensor<3x16x8xf32>, %dy: tensor<?x8xf32> {hector.kind = "node"}) -> (tensor<?x8xf32>, tensor<?x16xf32>, tensor<3x16x8xf32>) {
  %m = "hector_inter.typed_linear"(%g, %a, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<3x16x8xf32>) -> tensor<?x8xf32>
  %o = "hector_inter.sum_dst_compact_to_dst"(%g, %m) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %d = "hector_inter.dst_compact_gather_dst"(%g, %dy) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %da = "hector_inter.typed_linear_transposed"(%g, %d, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x8xf32>, tensor<3x16x8xf32>) -> tensor<?x16xf32>
  %dw = "hector_inter.typed_linear_weight_grad"(%g, %a, %d) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<?x8xf32>) -> tensor<3x16x8xf32>
  return %o, %da, %dw : tensor<?x8xf32>, tensor<?x16xf32>, tensor<3x16x8xf32>
}
