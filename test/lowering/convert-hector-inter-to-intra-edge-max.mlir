// RUN: hector-opt %s --split-input-file -p 'convert-hector-inter-to-intra' | FileCheck %s

// edge_max: each group's maximum by a reducing traversal into rows filled with -inf (one per
// (destination, edge type) pair with "dst_etype"), read back onto the group's edges.
// CHECK-LABEL: func.func @maximum
// CHECK-SAME: %[[X:[^:]*]]: memref<?x8xf32>, %[[OUT:[^:]*]]: memref<?x8xf32>)
// CHECK: %[[TOP:.*]] = memref.alloc(%{{.*}}) : memref<?x8xf32>
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%[[TOP]]
// CHECK: "hector_intra.traversal_template"(%[[PAIR:[^,]*]], %[[X]], %[[TOP]]) {{.*}}fn = "copy"{{.*}}reduce = "max"
// CHECK: "hector_intra.traversal_template"(%[[PAIR]], %[[TOP]], %[[OUT]]) {{.*}}fn = "copy"{{.*}}reduce = "none"
func.func @maximum(%g: !hector_inter.graph, %x: tensor<?x8xf32> {hector.kind = "edge"}) -> tensor<?x8xf32> {
  %y = "hector_inter.edge_max"(%g, %x) {by = "dst_etype"} : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

// edge_max_grad: which edges hold their group's maximum ("eq"), per group the summed gradient
// and the number of holders, their quotient read back onto the holders (ties share evenly).
// CHECK-LABEL: func.func @maximum_grad
// CHECK-SAME: %[[X:[^:]*]]: memref<?x8xf32>, %[[Y:[^:]*]]: memref<?x8xf32>, %[[DY:[^:]*]]: memref<?x8xf32>, %[[DX:[^:]*]]: memref<?x8xf32>)
// CHECK: "hector_intra.traversal_template"(%[[X]], %[[Y]], %[[HOLDS:[^)]*]]) {{.*}}fn = "eq"
// CHECK: "hector_intra.traversal_template"(%[[DST:[^,]*]], %[[DY]], %[[TOTAL:[^)]*]]) {{.*}}reduce = "sum"
// CHECK: "hector_intra.traversal_template"(%[[DST]], %[[HOLDS]], %[[TIES:[^)]*]]) {{.*}}reduce = "sum"
// CHECK: "hector_intra.traversal_template"(%[[TOTAL]], %[[TIES]], %[[SHARE:[^)]*]]) {{.*}}fn = "div"
// CHECK: "hector_intra.traversal_template"(%[[DST]], %[[HOLDS]], %[[SHARE]], %[[DX]]) {{.*}}fn = "mul"
func.func @maximum_grad(%g: !hector_inter.graph, %x: tensor<?x8xf32> {hector.kind = "edge"}, %y: tensor<?x8xf32> {hector.kind = "edge"}, %dy: tensor<?x8xf32> {hector.kind = "edge"}) -> tensor<?x8xf32> {
  %dx = "hector_inter.edge_max_grad"(%g, %x, %y, %dy) {by = "dst"} : (!hector_inter.graph, tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %dx : tensor<?x8xf32>
}
