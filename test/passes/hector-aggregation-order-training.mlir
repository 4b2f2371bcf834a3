// RUN: hector-opt %s -p 'hector-aggregation-order{order=aggregate-first training=true}, hector-autodiff, hector-fuse' | FileCheck %s
// RUN: hector-opt %s -p 'hector-aggregation-order{order=aggregate-first training=true}, hector-autodiff, hector-fuse, convert-hector-inter-to-intra' | FileCheck %s --check-prefix=INTRA
// RUN: hector compile %s --emit intra --order aggregate-first | FileCheck %s --check-prefix=CLI
// RUN: hector compile %s --emit intra --dst-ratio 0.1 | FileCheck %s --check-prefix=CLI-AUTO
// RUN: not hector compile %s --emit intra --dst-ratio 2 2>&1 | FileCheck %s --check-prefix=CLI-BAD

// What hector-autodiff makes of aggregate-then-transform: the backward program is as cheap as
// the forward. The output gradient is read once per (destination, relation) pair, the input-
// and weight-gradient GEMMs run over those pairs (not over the edges), the weight gradient
// reads the saved per-pair sums, and the input gradient goes back through the edges by one
// scaled scatter onto the sources. No per-edge product, no per-edge GEMM.
// CHECK-LABEL: func.func @rgcn_train
// CHECK-SAME: hector.result_kinds = ["node", "dst_compact"]
// CHECK: %[[P:.*]] = "hector_inter.sum_to_dst_compact"
// CHECK: return %{{.*}}, %[[P]]
// CHECK-LABEL: func.func @rgcn_backward
// CHECK-SAME: %[[SAVED:arg[0-9]+]]: tensor<?x16xf32> {hector.kind = "dst_compact"}, %[[DY:arg[0-9]+]]: tensor<?x8xf32> {hector.kind = "node"}
// CHECK: %[[DYP:.*]] = "hector_inter.dst_compact_gather_dst"(%{{.*}}, %[[DY]]) {hector.fuse = "index"}
// CHECK-NEXT: %[[DP:.*]] = "hector_inter.typed_linear_transposed"(%{{.*}}, %[[DYP]], %{{.*}}) {slice = "etype"}
// CHECK-NEXT: %[[DW:.*]] = "hector_inter.typed_linear_weight_grad"(%{{.*}}, %[[SAVED]], %[[DYP]]) {slice = "etype"}
// CHECK-NEXT: %[[DE:.*]] = "hector_inter.expand_dst_compact"(%{{.*}}, %[[DP]]) {hector.fuse = "index"}
// CHECK-NEXT: %[[N:.*]] = "hector_inter.degree_norm"
// CHECK-NEXT: %[[DS:.*]] = "hector_inter.scale"(%[[DE]], %[[N]]) {hector.fuse = "into_sum"}
// CHECK-NEXT: "hector_inter.sum_to_src"(%{{.*}}, %[[DS]])
// CHECK-NOT: "hector_inter.typed_linear_transposed"
// CHECK-NOT: "hector_inter.typed_linear_weight_grad"

// The templates: the pair arrays (dst_compact_dst = arg11, dst_compact_etype = arg12,
// edge_dst_compact = arg13) index them. Forward: one traversal gathers x by src, scales by the
// norm and sums into the pairs; one GEMM over the pairs picks each pair's relation weight and
// adds its product into the pair's node (a scatter-GEMM: the per-pair products are never
// stored). Backward: the input-gradient GEMM and the weight-gradient GEMM both run over the
// pairs and read the output gradient of each pair's node in place (the input gradient through
// its gather_index, the weight gradient through its scatter_index): no per-pair copy of it.
// INTRA-LABEL: func.func @rgcn(
// INTRA: "hector_intra.traversal_template"(%arg0, %arg13, %arg14, %arg5, %{{.*}}) {{.*}}fn = "scale"{{.*}}reduce = "sum"
// INTRA: "hector_intra.gemm_template"(%{{.*}}, %arg15, %arg12, %arg11, %{{.*}}) {{.*}}epilogue = "add"{{.*}}variant = "xw"
// INTRA-LABEL: func.func @rgcn_backward(
// INTRA-NOT: fn = "copy"
// INTRA: "hector_intra.gemm_template"(%[[DY:[^,]*]], %arg15, %arg11, %arg12, %{{.*}}) {{.*}}variant = "xwt"
// INTRA: "hector_intra.gemm_template"(%{{.*}}, %[[DY]], %arg12, %arg11, %{{.*}}) {{.*}}variant = "xty"
// INTRA: "hector_intra.traversal_template"(%arg13, %arg0, %{{.*}}, %arg5, %{{.*}}) {{.*}}fn = "scale"{{.*}}reduce = "sum"
// `hector compile` takes the order (or the graph's D/E for the cost model) as options; the
// forward function alone, at K = 16, N = 8, is not worth aggregating first even at D/E = 0.1.
// CLI: func.func @rgcn({{.*}}hector.aggregation_order = ["aggregate-first"]
// CLI: "hector_intra.traversal_template"(%arg0, %arg13, {{.*}}fn = "scale"{{.*}}reduce = "sum"
// CLI-AUTO: func.func @rgcn({{.*}}hector.aggregation_order = ["transform-first"]
// CLI-BAD: hector compile: error: argument --dst-ratio: must be a finite number x <= 1, got 2
func.func @rgcn(%g: !hector_inter.graph, %x: tensor<?x16xf32> {hector.kind = "node"}, %w: tensor<3x16x8xf32> {hector.kind = "weight"}) -> tensor<?x8xf32> {
  %xs = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  %m = "hector_inter.typed_linear"(%g, %xs, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<3x16x8xf32>) -> tensor<?x8xf32>
  %n = "hector_inter.degree_norm"(%g) {by = "dst_etype"} : (!hector_inter.graph) -> tensor<?x1xf32>
  %sm = "hector_inter.scale"(%m, %n) : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %agg = "hector_inter.sum_to_dst"(%g, %sm) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %agg : tensor<?x8xf32>
}
