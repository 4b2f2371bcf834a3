// RUN: hector-opt %s --split-input-file --verify-diagnostics

// One case per IRDL constraint of hector_inter: attribute values, missing attributes,
// operand and result types, operand and result counts.

func.func @typed_linear_bad_slice(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: tensor<3x16x8xf32>) {
  // expected-error @+1 {{'"edge"' does not satisfy the constraint}}
  %0 = "hector_inter.typed_linear"(%g, %x, %w) {slice = "edge"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<3x16x8xf32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @typed_linear_missing_slice(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: tensor<3x16x8xf32>) {
  // expected-error @+1 {{'hector_inter.typed_linear' op attribute "slice" is expected but not provided}}
  %0 = "hector_inter.typed_linear"(%g, %x, %w) : (!hector_inter.graph, tensor<?x16xf32>, tensor<3x16x8xf32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @typed_linear_weight_not_tensor(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: memref<3x16x8xf32>) {
  // expected-error @+1 {{expected base type 'builtin.tensor' but got 'builtin.memref'}}
  %0 = "hector_inter.typed_linear"(%g, %x, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, memref<3x16x8xf32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @gather_src_graph_not_graph(%g: tensor<4xi32>, %x: tensor<?x16xf32>) {
  // expected-error @+1 {{expected base type 'hector_inter.graph' but got 'builtin.tensor'}}
  %0 = "hector_inter.gather_src"(%g, %x) : (tensor<4xi32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  return
}

// -----

func.func @gather_src_memref_operand(%g: !hector_inter.graph, %x: memref<?x16xf32>) {
  // expected-error @+1 {{expected base type 'builtin.tensor' but got 'builtin.memref'}}
  %0 = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, memref<?x16xf32>) -> tensor<?x16xf32>
  return
}

// -----

func.func @gather_src_memref_result(%g: !hector_inter.graph, %x: tensor<?x16xf32>) {
  // expected-error @+1 {{expected base type 'builtin.tensor' but got 'builtin.memref'}}
  %0 = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x16xf32>) -> memref<?x16xf32>
  return
}

// -----

func.func @gather_src_two_results(%g: !hector_inter.graph, %x: tensor<?x16xf32>) {
  // expected-error @+1 {{op expects exactly 1 results, but got 2}}
  %0:2 = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x16xf32>) -> (tensor<?x16xf32>, tensor<?x16xf32>)
  return
}

// -----

func.func @gather_dst_graph_not_graph(%g: tensor<?x16xf32>, %x: tensor<?x16xf32>) {
  // expected-error @+1 {{expected base type 'hector_inter.graph' but got 'builtin.tensor'}}
  %0 = "hector_inter.gather_dst"(%g, %x) : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  return
}

// -----

func.func @gather_dst_missing_graph(%x: tensor<?x16xf32>) {
  // expected-error @+1 {{op expects exactly 2 operands, but got 1}}
  %0 = "hector_inter.gather_dst"(%x) : (tensor<?x16xf32>) -> tensor<?x16xf32>
  return
}

// -----

func.func @edge_softmax_bad_by(%g: !hector_inter.graph, %x: tensor<?x2xf32>) {
  // expected-error @+1 {{'"src"' does not satisfy the constraint}}
  %0 = "hector_inter.edge_softmax"(%g, %x) {by = "src"} : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
  return
}

// -----

func.func @edge_softmax_grad_without_by(%g: !hector_inter.graph, %y: tensor<?x2xf32>) {
  // expected-error @+1 {{attribute "by" is expected but not provided}}
  %0 = "hector_inter.edge_softmax_grad"(%g, %y, %y) : (!hector_inter.graph, tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  return
}

// -----

func.func @edge_max_bad_by(%g: !hector_inter.graph, %x: tensor<?x8xf32>) {
  // expected-error @+1 {{'"etype"' does not satisfy the constraint}}
  %0 = "hector_inter.edge_max"(%g, %x) {by = "etype"} : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @edge_max_grad_without_dy(%g: !hector_inter.graph, %x: tensor<?x8xf32>) {
  // expected-error @+1 {{op expects exactly 4 operands, but got 3}}
  %0 = "hector_inter.edge_max_grad"(%g, %x, %x) {by = "dst"} : (!hector_inter.graph, tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @degree_norm_bad_by(%g: !hector_inter.graph) {
  // expected-error @+1 {{'"src"' does not satisfy the constraint}}
  %0 = "hector_inter.degree_norm"(%g) {by = "src"} : (!hector_inter.graph) -> tensor<?x1xf32>
  return
}

// -----

func.func @degree_norm_missing_by(%g: !hector_inter.graph) {
  // expected-error @+1 {{'hector_inter.degree_norm' op attribute "by" is expected but not provided}}
  %0 = "hector_inter.degree_norm"(%g) : (!hector_inter.graph) -> tensor<?x1xf32>
  return
}

// -----

func.func @degree_norm_graph_not_graph(%g: tensor<4xi32>) {
  // expected-error @+1 {{expected base type 'hector_inter.graph' but got 'builtin.tensor'}}
  %0 = "hector_inter.degree_norm"(%g) {by = "dst"} : (tensor<4xi32>) -> tensor<?x1xf32>
  return
}

// -----

func.func @scale_memref_scalars(%x: tensor<?x8xf32>, %s: memref<?x1xf32>) {
  // expected-error @+1 {{expected base type 'builtin.tensor' but got 'builtin.memref'}}
  %0 = "hector_inter.scale"(%x, %s) : (tensor<?x8xf32>, memref<?x1xf32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @scale_three_operands(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{op expects exactly 2 operands, but got 3}}
  %0 = "hector_inter.scale"(%x, %x, %x) : (tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @sum_to_dst_graph_not_graph(%g: tensor<4xi32>, %x: tensor<?x8xf32>) {
  // expected-error @+1 {{expected base type 'hector_inter.graph' but got 'builtin.tensor'}}
  %0 = "hector_inter.sum_to_dst"(%g, %x) : (tensor<4xi32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @sum_to_dst_memref_rows(%g: !hector_inter.graph, %x: memref<?x8xf32>) {
  // expected-error @+1 {{expected base type 'builtin.tensor' but got 'builtin.memref'}}
  %0 = "hector_inter.sum_to_dst"(%g, %x) : (!hector_inter.graph, memref<?x8xf32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @add_graph_operand(%g: !hector_inter.graph, %x: tensor<?x8xf32>) {
  // expected-error @+1 {{expected base type 'builtin.tensor' but got 'hector_inter.graph'}}
  %0 = "hector_inter.add"(%x, %g) : (tensor<?x8xf32>, !hector_inter.graph) -> tensor<?x8xf32>
  return
}

// -----

func.func @add_no_result(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{op expects exactly 1 results, but got 0}}
  "hector_inter.add"(%x, %x) : (tensor<?x8xf32>, tensor<?x8xf32>) -> ()
  return
}

// -----

func.func @unary_bad_fn(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{'"softsign"' does not satisfy the constraint}}
  %0 = "hector_inter.unary"(%x) {fn = "softsign", slope = 0.0 : f32} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @unary_fn_not_string(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{'1 : i64' does not satisfy the constraint}}
  %0 = "hector_inter.unary"(%x) {fn = 1 : i64, slope = 0.0 : f32} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @unary_missing_fn(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{'hector_inter.unary' op attribute "fn" is expected but not provided}}
  %0 = "hector_inter.unary"(%x) {slope = 0.0 : f32} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @unknown_op(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{unregistered operation 'hector_inter.frobnicate' found in dialect ('hector_inter')}}
  %0 = "hector_inter.frobnicate"(%x) : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return
}
