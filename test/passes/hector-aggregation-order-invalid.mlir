// RUN: hector-opt %s --verify-diagnostics -p 'hector-aggregation-order{order=aggregate-first}'
// RUN: hector-opt %s -p 'hector-aggregation-order{dst_ratio=0.01}' | FileCheck %s
// RUN: not hector-opt %s -p 'hector-aggregation-order{dst_ratio=1.5}' 2>&1 | FileCheck %s --check-prefix=RATIO
// RUN: not hector-opt %s -p 'hector-aggregation-order{order=sideways}' 2>&1 | FileCheck %s --check-prefix=ORDER

// A message scaled per head (two heads over four columns, RGAT's and HGT's multi-head
// attention) cannot be aggregated before its product: the factor multiplies column groups of
// the product, not the rows it is computed from. Forcing the order is an error at the sum;
// the cost model leaves it alone however dense the graph.
// CHECK-LABEL: func.func @per_head
// CHECK-NOT: hector.aggregation_order
// CHECK-NOT: dst_compact
// CHECK: "hector_inter.sum_to_dst"
func.func @per_head(%g: !hector_inter.graph, %x: tensor<?x4xf32> {hector.kind = "node"}, %w: tensor<3x4x4xf32> {hector.kind = "weight"}, %heads: tensor<?x2xf32> {hector.kind = "edge"}) -> tensor<?x4xf32> {
  %xs = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  %m = "hector_inter.typed_linear"(%g, %xs, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x4xf32>, tensor<3x4x4xf32>) -> tensor<?x4xf32>
  %sm = "hector_inter.scale"(%m, %heads) : (tensor<?x4xf32>, tensor<?x2xf32>) -> tensor<?x4xf32>
  // expected-error @+1 {{hector-aggregation-order: cannot aggregate before transforming: the message is scaled per head, not per edge}}
  %s = "hector_inter.sum_to_dst"(%g, %sm) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %s : tensor<?x4xf32>
}

// A graph has at most one (destination, edge type) pair per edge: D/E above 1 is refused
// before the pass runs, and so is an unknown order.
// RATIO: option 'dst_ratio': must be at most 1, got 1.5
// ORDER: option 'order': expected one of auto, transform-first, aggregate-first, got 'sideways'
