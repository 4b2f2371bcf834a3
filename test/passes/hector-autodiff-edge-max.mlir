// RUN: hector-opt %s -p 'hector-autodiff' | FileCheck %s

// Max aggregation: the adjoint of edge_max reads the forward's input (the gathered rows,
// re-emitted in the backward) and output (saved by @max_aggregation_train) and the output
// gradient; the gather's adjoint sums the result onto the sources.
// CHECK-LABEL: func.func @max_aggregation_train
// CHECK: hector.num_saved = 1
// CHECK-LABEL: func.func @max_aggregation_backward
// CHECK: %[[XS:.*]] = "hector_inter.gather_src"
// CHECK: "hector_inter.edge_max_grad"(%{{[^,]*}}, %[[XS]], %{{[^,]*}}, %{{[^)]*}}) {by = "dst"}
// CHECK: "hector_inter.sum_to_src"
func.func @max_aggregation(%g: !hector_inter.graph, %x: tensor<?x8xf32> {hector.kind = "node"}) -> tensor<?x8xf32> {
  %xs = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %top = "hector_inter.edge_max"(%g, %xs) {by = "dst"} : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %n = "hector_inter.degree_norm"(%g) {by = "dst"} : (!hector_inter.graph) -> tensor<?x1xf32>
  %m = "hector_inter.scale"(%top, %n) : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %agg = "hector_inter.sum_to_dst"(%g, %m) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %agg : tensor<?x8xf32>
}
