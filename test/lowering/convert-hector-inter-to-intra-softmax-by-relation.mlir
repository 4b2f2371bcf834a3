// RUN: hector-opt %s -p 'convert-hector-inter-to-intra' | FileCheck %s
// RUN: hector-opt %s -p 'convert-hector-inter-to-intra, convert-hector-intra-to-scf' | FileCheck %s --check-prefix=LOOPS

// Within-relation attention (edge_softmax {by = "dst_etype"}): the softmax's maxima and sums
// run per unique (destination, edge type) pair. The reductions scatter through the graph's
// edge_dst_compact (the 14th graph array) into buffers with one row per pair (as many as
// dst_compact_dst, the 12th), where {by = "dst"} uses dst and one row per node.

// CHECK-LABEL: func.func @within_relation
// CHECK-SAME: (%[[SRC:[^:]*]]: memref<?xi32>, %[[DST:[^:]*]]: memref<?xi32>, %{{[^:]*}}: memref<?xi32>, %[[NTYPE:[^:]*]]: memref<?xi32>
// CHECK-SAME: %[[PAIRS:arg11]]: memref<?xi32>, %{{[^:]*}}: memref<?xi32>, %[[PAIR:arg13]]: memref<?xi32>, %[[X:[^:]*]]: memref<?x2xf32>
// CHECK: %[[C0:.*]] = arith.constant 0 : index
// CHECK: %[[NP:.*]] = memref.dim %[[PAIRS]], %[[C0]]
// CHECK: %[[NMAX:.*]] = memref.alloc(%[[NP]]) : memref<?x2xf32>
// CHECK: "hector_intra.traversal_template"(%[[PAIR]], %[[X]], %[[NMAX]]) {{.*}}fn = "copy", {{.*}}reduce = "max"
// CHECK: "hector_intra.traversal_template"(%[[PAIR]], %[[X]], %[[NMAX]], %[[EX:[^)]*]]) {{.*}}fn = "exp_sub"
// CHECK: "hector_intra.traversal_template"(%[[PAIR]], %[[EX]], %[[NSUM:[^)]*]]) {{.*}}fn = "copy", {{.*}}reduce = "sum"
// CHECK: "hector_intra.traversal_template"(%[[PAIR]], %[[EX]], %[[NSUM]], %{{[^)]*}}) {{.*}}fn = "div"
// CHECK: return
// LOOPS-LABEL: func.func @within_relation
// LOOPS-NOT: hector_intra.
// LOOPS: return
func.func @within_relation(%g: !hector_inter.graph, %x: tensor<?x2xf32>) -> tensor<?x2xf32> {
  %s = "hector_inter.edge_softmax"(%g, %x) {by = "dst_etype"} : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
  return %s : tensor<?x2xf32>
}

// The gradient's sum per group runs through the same pairs.
// CHECK-LABEL: func.func @within_relation_grad
// CHECK-SAME: %[[PAIR2:arg13]]: memref<?xi32>
// CHECK: "hector_intra.traversal_template"(%[[PAIR2]], %{{.*}}) {{.*}}fn = "mul", {{.*}}reduce = "sum"
// CHECK: "hector_intra.traversal_template"(%[[PAIR2]], %{{.*}}) {{.*}}fn = "sub"
// CHECK: fn = "mul", {{.*}}reduce = "none"
func.func @within_relation_grad(%g: !hector_inter.graph, %y: tensor<?x2xf32>, %dy: tensor<?x2xf32>) -> tensor<?x2xf32> {
  %d = "hector_inter.edge_softmax_grad"(%g, %y, %dy) {by = "dst_etype"} : (!hector_inter.graph, tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  return %d : tensor<?x2xf32>
}
