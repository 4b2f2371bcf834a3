// RUN: hector-opt %s -p convert-hector-inter-to-intra | FileCheck %s
// RUN: hector-opt %s -p convert-hector-inter-to-intra --mlir-print-debuginfo | FileCheck %s --check-prefix=LOC

// Without hector-fuse marks (the ablation's C configuration) every op is its own template, but
// compact rows are still read per edge through edge_compact (the 10th graph array) by a
// template that can read through an index (here the attention dot): no E-row copy of the
// compact value is built.
// CHECK-LABEL: func.func @compact_logits
// CHECK-SAME: %[[EC:arg9]]: memref<?xi32>
// CHECK: "hector_intra.gemm_template"
// CHECK-NOT: fn = "copy"
// CHECK: "hector_intra.traversal_template"(%[[EC]], %{{.*}}, %{{.*}}, %{{.*}}) {{.*}}fn = "dot", operandSegmentSizes = array<i32: 1, 0, 0, 1, 1, 1>
// CHECK: return

// Every op the conversion creates carries the location of the hector_inter op it lowers (so a
// diagnostic of a later stage points at the user's line): the compact copy and its buffer, the
// GEMM and the dot sit at their ops' lines below.
// LOC: #[[DOT:loc[0-9]+]] = loc({{.*}}:[[@LINE+11]]:8)
// LOC: memref.alloc({{.*}} loc(#[[GATHER:loc[0-9]+]])
// LOC-NEXT: "hector_intra.traversal_template"{{.*}}fn = "copy"{{.*}} loc(#[[GATHER]])
// LOC: "hector_intra.gemm_template"{{.*}} loc(#[[LINEAR:loc[0-9]+]])
// LOC-NEXT: "hector_intra.traversal_template"{{.*}}fn = "dot"{{.*}} loc(#[[DOT]])
// LOC-DAG: #[[GATHER]] = loc({{.*}}:[[@LINE+3]]:8)
// LOC-DAG: #[[LINEAR]] = loc({{.*}}:[[@LINE+3]]:8)
func.func @compact_logits(%g: !hector_inter.graph, %x: tensor<?x4xf32> {hector.kind = "node"}, %w: tensor<3x4x4xf32> {hector.kind = "weight"}, %q: tensor<?x4xf32> {hector.kind = "edge"}) -> tensor<?x1xf32> {
  %c = "hector_inter.compact_gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  %v = "hector_inter.typed_linear"(%g, %c, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x4xf32>, tensor<3x4x4xf32>) -> tensor<?x4xf32>
  %e = "hector_inter.expand_compact"(%g, %v) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  %l = "hector_inter.dot"(%e, %q) : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x1xf32>
  return %l : tensor<?x1xf32>
}
