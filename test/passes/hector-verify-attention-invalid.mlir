// RUN: hector-opt %s --split-input-file --verify-diagnostics --no-hector-verify -p hector-verify

// hector-verify on the attention, gradient, compact and weight-product ops: each invalid use is
// reported at the op, with what is wrong.

func.func @dot_heads_not_dividing(%x: tensor<?x8xf32>, %y: tensor<?x8xf32>) -> tensor<?x3xf32> {
  // expected-error @+1 {{result width 3 (heads) must divide the operand width 8}}
  %0 = "hector_inter.dot"(%x, %y) : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x3xf32>
  return %0 : tensor<?x3xf32>
}

// -----

func.func @dot_widths_differ(%x: tensor<?x8xf32>, %y: tensor<?x4xf32>) -> tensor<?x2xf32> {
  // expected-error @+1 {{operand widths differ: 8 vs 4}}
  %0 = "hector_inter.dot"(%x, %y) : (tensor<?x8xf32>, tensor<?x4xf32>) -> tensor<?x2xf32>
  return %0 : tensor<?x2xf32>
}

// -----

func.func @softmax_of_node_rows(%g: !hector_inter.graph, %x: tensor<?x2xf32>) -> tensor<?x2xf32> {
  %n = "hector_inter.sum_to_dst"(%g, %x) : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
  // expected-error @+1 {{edge rows must be edge-wise, but it is node-wise}}
  %0 = "hector_inter.edge_softmax"(%g, %n) {by = "dst"} : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
  return %0 : tensor<?x2xf32>
}

// -----

func.func @softmax_grad_shapes(%g: !hector_inter.graph, %y: tensor<?x2xf32>, %dy: tensor<?x4xf32>) -> tensor<?x2xf32> {
  // expected-error @+1 {{operand and result shapes differ: 4 vs 2}}
  %0 = "hector_inter.edge_softmax_grad"(%g, %y, %dy) {by = "dst"} : (!hector_inter.graph, tensor<?x2xf32>, tensor<?x4xf32>) -> tensor<?x2xf32>
  return %0 : tensor<?x2xf32>
}

// -----

func.func @maximum_of_node_rows(%g: !hector_inter.graph, %x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %n = "hector_inter.sum_to_dst"(%g, %x) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  // expected-error @+1 {{edge rows must be edge-wise, but it is node-wise}}
  %0 = "hector_inter.edge_max"(%g, %n) {by = "dst"} : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

func.func @maximum_grad_shapes(%g: !hector_inter.graph, %x: tensor<?x8xf32>, %dy: tensor<?x4xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{operand and result shapes differ: 4 vs 8}}
  %0 = "hector_inter.edge_max_grad"(%g, %x, %x, %dy) {by = "dst"} : (!hector_inter.graph, tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x4xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

func.func @typed_bias_of_unknown_rows(%g: !hector_inter.graph, %x: tensor<?x4xf32>, %b: tensor<2x4xf32>) -> tensor<?x4xf32> {
  // expected-error @+1 {{a typed bias needs rows of a known kind (node-wise or edge-wise)}}
  %0 = "hector_inter.add"(%x, %b, %g) : (tensor<?x4xf32>, tensor<2x4xf32>, !hector_inter.graph) -> tensor<?x4xf32>
  return %0 : tensor<?x4xf32>
}

// -----

func.func @sum_rows_by_type_without_graph(%x: tensor<?x4xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{sum_rows with by = "type" needs the graph operand}}
  %0 = "hector_inter.sum_rows"(%x) {by = "type"} : (tensor<?x4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

func.func @weight_grad_width(%g: !hector_inter.graph, %x: tensor<?x4xf32> {hector.kind = "edge"}, %dy: tensor<?x6xf32>) -> tensor<3x5x6xf32> {
  // expected-error @+1 {{input width does not match the weight gradient: 4 vs 5}}
  %0 = "hector_inter.typed_linear_weight_grad"(%g, %x, %dy) {slice = "etype"} : (!hector_inter.graph, tensor<?x4xf32>, tensor<?x6xf32>) -> tensor<3x5x6xf32>
  return %0 : tensor<3x5x6xf32>
}

// -----

func.func @unary_grad_shapes(%x: tensor<?x4xf32>, %dy: tensor<?x6xf32>) -> tensor<?x6xf32> {
  // expected-error @+1 {{ref and dy shapes differ: 4 vs 6}}
  %0 = "hector_inter.unary_grad"(%x, %dy) {fn = "relu", slope = 0.0 : f32} : (tensor<?x4xf32>, tensor<?x6xf32>) -> tensor<?x6xf32>
  return %0 : tensor<?x6xf32>
}

// -----

func.func @expand_of_node_rows(%g: !hector_inter.graph, %x: tensor<?x4xf32> {hector.kind = "node"}) -> tensor<?x4xf32> {
  // expected-error @+1 {{gathered features must be compact, but it is node-wise}}
  %0 = "hector_inter.expand_compact"(%g, %x) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %0 : tensor<?x4xf32>
}

// -----

func.func @weight_product_inner_dim(%w: tensor<3x16x8xf32>, %q: tensor<4x2xf32>) -> tensor<3x16x2xf32> {
  // expected-error @+1 {{a's output dimension does not match b's rows: 8 vs 4}}
  %0 = "hector_inter.weight_product"(%w, %q) {variant = "xw"} : (tensor<3x16x8xf32>, tensor<4x2xf32>) -> tensor<3x16x2xf32>
  return %0 : tensor<3x16x2xf32>
}

// -----

func.func @weight_product_of_rows(%g: !hector_inter.graph, %x: tensor<?x8xf32> {hector.kind = "node"}, %q: tensor<8x2xf32>) -> tensor<?x2xf32> {
  // expected-error @+1 {{operand of a weight_product must be weight, but it is node-wise}}
  %0 = "hector_inter.weight_product"(%x, %q) {variant = "xw"} : (tensor<?x8xf32>, tensor<8x2xf32>) -> tensor<?x2xf32>
  return %0 : tensor<?x2xf32>
}

// -----

func.func @per_slice_count(%a: tensor<4x16x8xf32>, %wr: tensor<5x8x4xf32>) -> tensor<4x16x4xf32> {
  // expected-error @+1 {{per-slice product: a and b must have the same slice count: 4 vs 5}}
  %0 = "hector_inter.weight_product"(%a, %wr) {variant = "xw"} : (tensor<4x16x8xf32>, tensor<5x8x4xf32>) -> tensor<4x16x4xf32>
  return %0 : tensor<4x16x4xf32>
}

// -----

func.func @per_slice_xty_shape(%a: tensor<5x16x8xf32>, %d: tensor<5x16x4xf32>) -> tensor<5x4x8xf32> {
  // expected-error @+1 {{result must be [N, H] (or [R, N, H] per slice): 4 vs 8}}
  %0 = "hector_inter.weight_product"(%a, %d) {variant = "xty"} : (tensor<5x16x8xf32>, tensor<5x16x4xf32>) -> tensor<5x4x8xf32>
  return %0 : tensor<5x4x8xf32>
}

// -----

func.func @etype_src_weight_untyped(%g: !hector_inter.graph, %w: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{the weight must be typed: rank 2 or more ([T, ...])}}
  %0 = "hector_inter.etype_src_weight"(%g, %w) : (!hector_inter.graph, tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

func.func @etype_src_weight_shape(%g: !hector_inter.graph, %w: tensor<2x16x8xf32>) -> tensor<5x8x16xf32> {
  // expected-error @+1 {{result must keep the weight's per-type shape: 8 vs 16}}
  %0 = "hector_inter.etype_src_weight"(%g, %w) : (!hector_inter.graph, tensor<2x16x8xf32>) -> tensor<5x8x16xf32>
  return %0 : tensor<5x8x16xf32>
}

// -----

func.func @etype_src_weight_rows(%g: !hector_inter.graph, %x: tensor<?x8xf32> {hector.kind = "node"}) -> tensor<?x8xf32> {
  // expected-error @+1 {{operand of etype_src_weight must be weight, but it is node-wise}}
  %0 = "hector_inter.etype_src_weight"(%g, %x) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}
