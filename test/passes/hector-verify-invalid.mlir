// RUN: hector-opt %s --split-input-file --verify-diagnostics --no-hector-verify -p hector-verify
// RUN: not hector-opt %s --split-input-file --no-hector-verify -p hector-verify 2>&1 | FileCheck %s --check-prefix=COUNT

// One case per rule of hector-verify; each must produce exactly the expected diagnostic at the
// offending op. Without --verify-diagnostics every case fails, and the second RUN line checks
// that one error is printed per case (each message once, in order).

// ---- hector_inter: shapes ------------------------------------------------------------------

// COUNT: error: input width does not match the weight's input dimension: 16 vs 12
func.func @k_mismatch(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: tensor<3x12x8xf32>) -> tensor<?x8xf32> {
  %0 = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  // expected-error @+1 {{input width does not match the weight's input dimension: 16 vs 12}}
  %1 = "hector_inter.typed_linear"(%g, %0, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<3x12x8xf32>) -> tensor<?x8xf32>
  return %1 : tensor<?x8xf32>
}

// -----

// COUNT: error: input width does not match the weight's input dimension: 16 vs 4
func.func @k_mismatch_shared(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: tensor<4x8xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{input width does not match the weight's input dimension: 16 vs 4}}
  %0 = "hector_inter.typed_linear"(%g, %x, %w) {slice = "none"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

// COUNT: error: result width does not match the weight's output dimension: 4 vs 8
func.func @n_mismatch(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: tensor<2x16x8xf32>) -> tensor<?x4xf32> {
  // expected-error @+1 {{result width does not match the weight's output dimension: 4 vs 8}}
  %0 = "hector_inter.typed_linear"(%g, %x, %w) {slice = "ntype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<2x16x8xf32>) -> tensor<?x4xf32>
  return %0 : tensor<?x4xf32>
}

// -----

// COUNT: error: result rows do not match input rows: 5 vs 6
func.func @rows_mismatch(%g: !hector_inter.graph, %x: tensor<5x16xf32>, %w: tensor<16x8xf32>) -> tensor<6x8xf32> {
  // expected-error @+1 {{result rows do not match input rows: 5 vs 6}}
  %0 = "hector_inter.typed_linear"(%g, %x, %w) {slice = "none"} : (!hector_inter.graph, tensor<5x16xf32>, tensor<16x8xf32>) -> tensor<6x8xf32>
  return %0 : tensor<6x8xf32>
}

// -----

// COUNT: error: weight of a typed_linear with slice = "etype" must have rank 3, got rank 2
func.func @etype_weight_rank(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: tensor<16x8xf32>) -> tensor<?x8xf32> {
  %0 = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  // expected-error @+1 {{weight of a typed_linear with slice = "etype" must have rank 3, got rank 2}}
  %1 = "hector_inter.typed_linear"(%g, %0, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  return %1 : tensor<?x8xf32>
}

// -----

// COUNT: error: weight of a typed_linear with slice = "ntype" must have rank 3, got rank 2
func.func @ntype_weight_rank(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: tensor<16x8xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{weight of a typed_linear with slice = "ntype" must have rank 3, got rank 2}}
  %0 = "hector_inter.typed_linear"(%g, %x, %w) {slice = "ntype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

// COUNT: error: weight of a typed_linear with slice = "none" must have rank 2, got rank 3
func.func @shared_weight_rank(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: tensor<3x16x8xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{weight of a typed_linear with slice = "none" must have rank 2, got rank 3}}
  %0 = "hector_inter.typed_linear"(%g, %x, %w) {slice = "none"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<3x16x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

// COUNT: error: input rows must have rank 2, got rank 3
func.func @input_rank(%g: !hector_inter.graph, %x: tensor<?x2x16xf32>, %w: tensor<16x8xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{input rows must have rank 2, got rank 3}}
  %0 = "hector_inter.typed_linear"(%g, %x, %w) {slice = "none"} : (!hector_inter.graph, tensor<?x2x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

// COUNT: error: gathered features must have rank 2, got rank 1
func.func @gather_rank(%g: !hector_inter.graph, %x: tensor<?xf32>) -> tensor<?x1xf32> {
  // expected-error @+1 {{gathered features must have rank 2, got rank 1}}
  %0 = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?xf32>) -> tensor<?x1xf32>
  return %0 : tensor<?x1xf32>
}

// -----

// COUNT: error: feature width of input and result differ: 16 vs 8
func.func @gather_width(%g: !hector_inter.graph, %x: tensor<?x16xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{feature width of input and result differ: 16 vs 8}}
  %0 = "hector_inter.gather_dst"(%g, %x) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

// COUNT: error: feature width of input and result differ: 8 vs 4
func.func @sum_width(%g: !hector_inter.graph, %m: tensor<?x8xf32>) -> tensor<?x4xf32> {
  // expected-error @+1 {{feature width of input and result differ: 8 vs 4}}
  %0 = "hector_inter.sum_to_dst"(%g, %m) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x4xf32>
  return %0 : tensor<?x4xf32>
}

// -----

// COUNT: error: result must be an edge-wise column [E, 1], got tensor<?x2xf32>
func.func @degree_norm_shape(%g: !hector_inter.graph) -> tensor<?x2xf32> {
  // expected-error @+1 {{result must be an edge-wise column [E, 1], got tensor<?x2xf32>}}
  %0 = "hector_inter.degree_norm"(%g) {by = "dst"} : (!hector_inter.graph) -> tensor<?x2xf32>
  return %0 : tensor<?x2xf32>
}

// -----

// COUNT: error: scale width 3 (heads) must divide the row width 8
func.func @scale_heads_not_dividing(%a: tensor<?x8xf32>, %s: tensor<?x3xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{scale width 3 (heads) must divide the row width 8}}
  %0 = "hector_inter.scale"(%a, %s) : (tensor<?x8xf32>, tensor<?x3xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

// COUNT: error: scale must have rank 2, got rank 1
func.func @scale_vector(%a: tensor<?x8xf32>, %s: tensor<?xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{scale must have rank 2, got rank 1}}
  %0 = "hector_inter.scale"(%a, %s) : (tensor<?x8xf32>, tensor<?xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

// COUNT: error: rows of the input and the scale differ: 4 vs 5
func.func @scale_rows(%a: tensor<4x8xf32>, %s: tensor<5x1xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{rows of the input and the scale differ: 4 vs 5}}
  %0 = "hector_inter.scale"(%a, %s) : (tensor<4x8xf32>, tensor<5x1xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// COUNT: error: bias width does not match the rows: 8 vs 4
func.func @bias_width(%a: tensor<?x8xf32>, %b: tensor<4xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{bias width does not match the rows: 8 vs 4}}
  %0 = "hector_inter.add"(%a, %b) : (tensor<?x8xf32>, tensor<4xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

// COUNT: error: operand widths differ: 8 vs 4
func.func @add_widths(%a: tensor<?x8xf32>, %b: tensor<?x4xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{operand widths differ: 8 vs 4}}
  %0 = "hector_inter.add"(%a, %b) : (tensor<?x8xf32>, tensor<?x4xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

// COUNT: error: operand rows differ: 3 vs 7
func.func @add_rows(%a: tensor<3x8xf32>, %b: tensor<7x8xf32>) -> tensor<3x8xf32> {
  // expected-error @+1 {{operand rows differ: 3 vs 7}}
  %0 = "hector_inter.add"(%a, %b) : (tensor<3x8xf32>, tensor<7x8xf32>) -> tensor<3x8xf32>
  return %0 : tensor<3x8xf32>
}

// -----

// COUNT: error: result width differs from operands: 8 vs 4
func.func @add_result_width(%a: tensor<?x8xf32>, %b: tensor<?x8xf32>) -> tensor<?x4xf32> {
  // expected-error @+1 {{result width differs from operands: 8 vs 4}}
  %0 = "hector_inter.add"(%a, %b) : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x4xf32>
  return %0 : tensor<?x4xf32>
}

// -----

// COUNT: error: result dimension 1 differs from the operand: 8 vs 4
func.func @unary_shape(%a: tensor<?x8xf32>) -> tensor<?x4xf32> {
  // expected-error @+1 {{result dimension 1 differs from the operand: 8 vs 4}}
  %0 = "hector_inter.unary"(%a) {fn = "relu", slope = 0.0 : f32} : (tensor<?x8xf32>) -> tensor<?x4xf32>
  return %0 : tensor<?x4xf32>
}

// ---- hector_inter: element types -----------------------------------------------------------

// -----

// COUNT: error: gathered features must have f32 elements, got tensor<?x16xf16>
func.func @gather_f16(%g: !hector_inter.graph, %x: tensor<?x16xf16>) -> tensor<?x16xf16> {
  // expected-error @+1 {{gathered features must have f32 elements, got tensor<?x16xf16>}}
  %0 = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x16xf16>) -> tensor<?x16xf16>
  return %0 : tensor<?x16xf16>
}

// -----

// COUNT: error: weight must have f32 elements, got tensor<3x16x8xf64>
func.func @weight_f64(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: tensor<3x16x8xf64>) -> tensor<?x8xf32> {
  %0 = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  // expected-error @+1 {{weight must have f32 elements, got tensor<3x16x8xf64>}}
  %1 = "hector_inter.typed_linear"(%g, %0, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<3x16x8xf64>) -> tensor<?x8xf32>
  return %1 : tensor<?x8xf32>
}

// -----

// COUNT: error: operand must have f32 elements, got tensor<?x8xi32>
func.func @unary_i32(%a: tensor<?x8xi32>) -> tensor<?x8xi32> {
  // expected-error @+1 {{operand must have f32 elements, got tensor<?x8xi32>}}
  %0 = "hector_inter.unary"(%a) {fn = "relu", slope = 0.0 : f32} : (tensor<?x8xi32>) -> tensor<?x8xi32>
  return %0 : tensor<?x8xi32>
}

// -----

// COUNT: error: result must have f32 elements, got tensor<?x1xbf16>
func.func @degree_norm_bf16(%g: !hector_inter.graph) -> tensor<?x1xbf16> {
  // expected-error @+1 {{result must have f32 elements, got tensor<?x1xbf16>}}
  %0 = "hector_inter.degree_norm"(%g) {by = "dst_etype"} : (!hector_inter.graph) -> tensor<?x1xbf16>
  return %0 : tensor<?x1xbf16>
}

// ---- hector_inter: node-wise / edge-wise / weight kinds ------------------------------------

// -----

// COUNT: error: summed rows must be edge-wise, but it is node-wise
func.func @sum_of_node_wise(%g: !hector_inter.graph, %x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %0 = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  // %x is node-wise (it was gathered), so it cannot be summed onto destination nodes.
  // expected-error @+1 {{summed rows must be edge-wise, but it is node-wise}}
  %1 = "hector_inter.sum_to_dst"(%g, %x) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %1 : tensor<?x8xf32>
}

// -----

// COUNT: error: summed rows must be edge-wise, but it is node-wise
func.func @sum_twice(%g: !hector_inter.graph, %m: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %0 = "hector_inter.sum_to_dst"(%g, %m) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  // expected-error @+1 {{summed rows must be edge-wise, but it is node-wise}}
  %1 = "hector_inter.sum_to_dst"(%g, %0) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %1 : tensor<?x8xf32>
}

// -----

// COUNT: error: gathered features must be node-wise, but it is edge-wise
func.func @gather_of_edge_wise(%g: !hector_inter.graph, %x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %0 = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  // expected-error @+1 {{gathered features must be node-wise, but it is edge-wise}}
  %1 = "hector_inter.gather_dst"(%g, %0) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %1 : tensor<?x8xf32>
}

// -----

// COUNT: error: gathered features must be node-wise, but it is edge-wise
func.func @gather_of_degree_norm(%g: !hector_inter.graph) -> tensor<?x1xf32> {
  %0 = "hector_inter.degree_norm"(%g) {by = "dst"} : (!hector_inter.graph) -> tensor<?x1xf32>
  // expected-error @+1 {{gathered features must be node-wise, but it is edge-wise}}
  %1 = "hector_inter.gather_src"(%g, %0) : (!hector_inter.graph, tensor<?x1xf32>) -> tensor<?x1xf32>
  return %1 : tensor<?x1xf32>
}

// -----

// COUNT: error: input rows of a typed_linear with slice = "etype" must be edge-wise, but it is node-wise
func.func @etype_linear_on_nodes(%g: !hector_inter.graph, %m: tensor<?x16xf32>, %w: tensor<3x16x8xf32>) -> tensor<?x8xf32> {
  %0 = "hector_inter.sum_to_dst"(%g, %m) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  // expected-error @+1 {{input rows of a typed_linear with slice = "etype" must be edge-wise, but it is node-wise}}
  %1 = "hector_inter.typed_linear"(%g, %0, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<3x16x8xf32>) -> tensor<?x8xf32>
  return %1 : tensor<?x8xf32>
}

// -----

// COUNT: error: input rows of a typed_linear with slice = "ntype" must be node-wise, but it is edge-wise
func.func @ntype_linear_on_edges(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: tensor<2x16x8xf32>) -> tensor<?x8xf32> {
  %0 = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  // expected-error @+1 {{input rows of a typed_linear with slice = "ntype" must be node-wise, but it is edge-wise}}
  %1 = "hector_inter.typed_linear"(%g, %0, %w) {slice = "ntype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<2x16x8xf32>) -> tensor<?x8xf32>
  return %1 : tensor<?x8xf32>
}

// -----

// COUNT: error: weight must be weight, but it is node-wise
func.func @rows_as_weight(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %m: tensor<?x16xf32>) -> tensor<?x16xf32> {
  %0 = "hector_inter.sum_to_dst"(%g, %m) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  // %0 holds node rows; it cannot be the weight of a linear.
  // expected-error @+1 {{weight must be weight, but it is node-wise}}
  %1 = "hector_inter.typed_linear"(%g, %x, %0) {slice = "none"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  return %1 : tensor<?x16xf32>
}

// -----

// COUNT: error: input rows must be node-wise or edge-wise, not a weight
func.func @weight_as_rows(%g: !hector_inter.graph, %w: tensor<16x16xf32>) -> tensor<16x16xf32> {
  // expected-error @+1 {{input rows must be node-wise or edge-wise, not a weight}}
  %0 = "hector_inter.typed_linear"(%g, %w, %w) {slice = "none"} : (!hector_inter.graph, tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  return %0 : tensor<16x16xf32>
}

// -----

// COUNT: error: scaled rows are node-wise but scale are edge-wise
func.func @scale_node_by_edge(%g: !hector_inter.graph, %m: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %0 = "hector_inter.sum_to_dst"(%g, %m) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %1 = "hector_inter.degree_norm"(%g) {by = "dst_etype"} : (!hector_inter.graph) -> tensor<?x1xf32>
  // expected-error @+1 {{scaled rows are node-wise but scale are edge-wise}}
  %2 = "hector_inter.scale"(%0, %1) : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  return %2 : tensor<?x8xf32>
}

// -----

// COUNT: error: cannot add edge-wise rows to node-wise rows
func.func @add_edge_to_node(%g: !hector_inter.graph, %x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %0 = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %1 = "hector_inter.sum_to_dst"(%g, %0) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  // expected-error @+1 {{cannot add edge-wise rows to node-wise rows}}
  %2 = "hector_inter.add"(%0, %1) : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %2 : tensor<?x8xf32>
}

// -----

// COUNT: error: left operand must be node-wise or edge-wise, not a weight
func.func @add_to_weight(%g: !hector_inter.graph, %x: tensor<?x8xf32>, %w: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = "hector_inter.typed_linear"(%g, %x, %w) {slice = "none"} : (!hector_inter.graph, tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  // expected-error @+1 {{left operand must be node-wise or edge-wise, not a weight}}
  %1 = "hector_inter.add"(%w, %w) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  return %1 : tensor<8x8xf32>
}

// -----

// COUNT: error: bias must be weight, but it is edge-wise
func.func @bias_is_rows(%g: !hector_inter.graph, %x: tensor<?x8xf32>, %v: tensor<8xf32> {hector.kind = "edge"}) -> tensor<?x8xf32> {
  // expected-error @+1 {{bias must be weight, but it is edge-wise}}
  %0 = "hector_inter.add"(%x, %v) : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

// COUNT: error: operand must be node-wise or edge-wise, not a weight
func.func @relu_of_weight(%g: !hector_inter.graph, %x: tensor<?x8xf32>, %w: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = "hector_inter.typed_linear"(%g, %x, %w) {slice = "none"} : (!hector_inter.graph, tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  // expected-error @+1 {{operand must be node-wise or edge-wise, not a weight}}
  %1 = "hector_inter.unary"(%w) {fn = "relu", slope = 0.0 : f32} : (tensor<8x8xf32>) -> tensor<8x8xf32>
  return %1 : tensor<8x8xf32>
}

// ---- hector.kind argument attributes --------------------------------------------------------

// -----

// COUNT: error: argument #1: hector.kind must be one of node, edge, weight; got 'vertex'
// expected-error @+1 {{argument #1: hector.kind must be one of node, edge, weight; got 'vertex'}}
func.func @bad_kind(%g: !hector_inter.graph, %x: tensor<?x8xf32> {hector.kind = "vertex"}) -> tensor<?x8xf32> {
  %0 = "hector_inter.unary"(%x) {fn = "relu", slope = 0.0 : f32} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

// A hector.kind that is not a string is an error at the function, not a crash.
// COUNT: error: argument #1: hector.kind must be a string (node, edge, weight), got 3 : i64
// expected-error @+1 {{argument #1: hector.kind must be a string (node, edge, weight), got 3 : i64}}
func.func @kind_not_a_string(%g: !hector_inter.graph, %x: tensor<?x8xf32> {hector.kind = 3 : i64}) -> tensor<?x8xf32> {
  %0 = "hector_inter.unary"(%x) {fn = "relu", slope = 0.0 : f32} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

// COUNT: error: gathered features must be node-wise, but it is edge-wise
func.func @declared_edge_gathered(%g: !hector_inter.graph, %x: tensor<?x8xf32> {hector.kind = "edge"}) -> tensor<?x8xf32> {
  // expected-error @+1 {{gathered features must be node-wise, but it is edge-wise}}
  %0 = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

// COUNT: error: summed rows must be edge-wise, but it is node-wise
func.func @declared_node_summed(%g: !hector_inter.graph, %x: tensor<?x8xf32> {hector.kind = "node"}) -> tensor<?x8xf32> {
  // expected-error @+1 {{summed rows must be edge-wise, but it is node-wise}}
  %0 = "hector_inter.sum_to_dst"(%g, %x) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

// COUNT: error: weight must be weight, but it is node-wise
func.func @declared_node_weight(%g: !hector_inter.graph, %x: tensor<?x8xf32>, %w: tensor<8x8xf32> {hector.kind = "node"}) -> tensor<?x8xf32> {
  // expected-error @+1 {{weight must be weight, but it is node-wise}}
  %0 = "hector_inter.typed_linear"(%g, %x, %w) {slice = "none"} : (!hector_inter.graph, tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// ---- hector_intra: template rules ----------------------------------------------------------

// -----

// COUNT: error: a scattered GEMM must accumulate (epilogue "add" or "atomic_add"): several rows may land on one output row
func.func @gemm_scatter_store(%a: memref<?x16xf32>, %w: memref<16x8xf32>, %dst: memref<?xi32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{a scattered GEMM must accumulate (epilogue "add" or "atomic_add")}}
  "hector_intra.gemm_template"(%a, %w, %dst, %out) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 1, 0, 1>} : (memref<?x16xf32>, memref<16x8xf32>, memref<?xi32>, memref<?x8xf32>) -> ()
  return
}

// -----

// COUNT: error: an xty GEMM accumulates (epilogue "add")
func.func @xty_store(%a: memref<?x16xf32>, %dy: memref<?x8xf32>, %dst: memref<?xi32>, %dw: memref<16x8xf32>) {
  // expected-error @+1 {{an xty GEMM accumulates (epilogue "add")}}
  "hector_intra.gemm_template"(%a, %dy, %dst, %dw) {variant = "xty", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 1, 0, 1>} : (memref<?x16xf32>, memref<?x8xf32>, memref<?xi32>, memref<16x8xf32>) -> ()
  return
}

// -----

// COUNT: error: row_scale must be a column [M, 1]
func.func @row_scale_not_a_column(%a: memref<?x16xf32>, %dy: memref<?x8xf32>, %s: memref<?x2xf32>, %dw: memref<16x8xf32>) {
  // expected-error @+1 {{row_scale must be a column [M, 1]}}
  "hector_intra.gemm_template"(%a, %dy, %s, %dw) {variant = "xty", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 1, 1>} : (memref<?x16xf32>, memref<?x8xf32>, memref<?x2xf32>, memref<16x8xf32>) -> ()
  return
}

// -----

// COUNT: error: slice_rows must be positive and excludes a weight_index
func.func @gemm_slice_rows_and_index(%a: memref<?x16xf32>, %w: memref<3x16x8xf32>, %etype: memref<?xi32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{slice_rows must be positive and excludes a weight_index}}
  "hector_intra.gemm_template"(%a, %w, %etype, %out) {variant = "xw", epilogue = "store", slice_rows = 4 : i64, tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 1, 0, 0, 1>} : (memref<?x16xf32>, memref<3x16x8xf32>, memref<?xi32>, memref<?x8xf32>) -> ()
  return
}

// -----

// COUNT: error: weight with slice_rows must have rank 3, got rank 2
func.func @gemm_slice_rows_rank(%a: memref<?x16xf32>, %w: memref<16x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{weight with slice_rows must have rank 3, got rank 2}}
  "hector_intra.gemm_template"(%a, %w, %out) {variant = "xw", epilogue = "store", slice_rows = 4 : i64, tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x16xf32>, memref<16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

// COUNT: error: weight with a weight_index must have rank 3, got rank 2
func.func @gemm_weight_index_rank(%a: memref<?x16xf32>, %w: memref<16x8xf32>, %etype: memref<?xi32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{weight with a weight_index must have rank 3, got rank 2}}
  "hector_intra.gemm_template"(%a, %w, %etype, %out) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 1, 0, 0, 1>} : (memref<?x16xf32>, memref<16x8xf32>, memref<?xi32>, memref<?x8xf32>) -> ()
  return
}

// -----

// COUNT: error: weight must have rank 2, got rank 3
func.func @gemm_shared_weight_rank(%a: memref<?x16xf32>, %w: memref<3x16x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{weight must have rank 2, got rank 3}}
  "hector_intra.gemm_template"(%a, %w, %out) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x16xf32>, memref<3x16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

// COUNT: error: a's width does not match the weight's input dimension: 12 vs 16
func.func @gemm_k(%a: memref<?x12xf32>, %w: memref<16x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{a's width does not match the weight's input dimension: 12 vs 16}}
  "hector_intra.gemm_template"(%a, %w, %out) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x12xf32>, memref<16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

// COUNT: error: out's width does not match the weight's output dimension: 4 vs 8
func.func @gemm_n(%a: memref<?x16xf32>, %w: memref<16x8xf32>, %out: memref<?x4xf32>) {
  // expected-error @+1 {{out's width does not match the weight's output dimension: 4 vs 8}}
  "hector_intra.gemm_template"(%a, %w, %out) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x16xf32>, memref<16x8xf32>, memref<?x4xf32>) -> ()
  return
}

// -----

// COUNT: error: gather_index must be memref<?xi32>, got memref<?xi64>
func.func @gemm_index_type(%a: memref<?x16xf32>, %w: memref<16x8xf32>, %src: memref<?xi64>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{gather_index must be memref<?xi32>, got memref<?xi64>}}
  "hector_intra.gemm_template"(%a, %w, %src, %out) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 1>} : (memref<?x16xf32>, memref<16x8xf32>, memref<?xi64>, memref<?x8xf32>) -> ()
  return
}

// -----

// COUNT: error: tile_n and block_size must be positive
func.func @gemm_tile(%a: memref<?x16xf32>, %w: memref<16x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{tile_n and block_size must be positive}}
  "hector_intra.gemm_template"(%a, %w, %out) {variant = "xw", epilogue = "store", tile_n = 0 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x16xf32>, memref<16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

// Inputs may be stored in f16 or bf16 (extended on load). A GEMM that accumulates re-reads its
// out, which must then be f32 (only an xw product stored once per element, as
// hector-half-messages makes, rounds into half storage).
// COUNT: error: out must have f32 elements, got memref<?x8xf16>
func.func @gemm_f16_out(%a: memref<?x16xf16>, %w: memref<16x8xbf16>, %out: memref<?x8xf16>) {
  // expected-error @+1 {{out must have f32 elements, got memref<?x8xf16>}}
  "hector_intra.gemm_template"(%a, %w, %out) {variant = "xw", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x16xf16>, memref<16x8xbf16>, memref<?x8xf16>) -> ()
  return
}

// -----

// COUNT: error: out must have f32 elements, got memref<?x16xbf16>
func.func @gemm_xwt_bf16_out(%dy: memref<?x8xf32>, %w: memref<16x8xf32>, %out: memref<?x16xbf16>) {
  // expected-error @+1 {{out must have f32 elements, got memref<?x16xbf16>}}
  "hector_intra.gemm_template"(%dy, %w, %out) {variant = "xwt", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x8xf32>, memref<16x8xf32>, memref<?x16xbf16>) -> ()
  return
}

// -----

// A traversal that reduces re-reads its out, which must then be f32 (only an elementwise
// traversal rounds each element into half storage).
// COUNT: error: out must have f32 elements, got memref<?x8xbf16>
func.func @traversal_sum_into_bf16(%dst: memref<?xi32>, %m: memref<?x8xf32>, %out: memref<?x8xbf16>) {
  // expected-error @+1 {{out must have f32 elements, got memref<?x8xbf16>}}
  "hector_intra.traversal_template"(%dst, %m, %out) {fn = "copy", reduce = "sum", parallel = "edge", block_size = 128 : i64, slope = 0.0 : f32, operandSegmentSizes = array<i32: 0, 1, 0, 1, 0, 1>} : (memref<?xi32>, memref<?x8xf32>, memref<?x8xbf16>) -> ()
  return
}

// -----

// A segmented sum (hector-half-messages) groups its rows by output row: it needs a sum with a
// scatter_index (a max, or a sum over all rows, is not one).
// COUNT: error: hector.segmented_sum needs reduce = "sum" and a scatter_index
func.func @segmented_max(%dst: memref<?xi32>, %m: memref<?x8xf32>, %out: memref<?x8xbf16>) {
  // expected-error @+1 {{hector.segmented_sum needs reduce = "sum" and a scatter_index}}
  "hector_intra.traversal_template"(%dst, %m, %out) {fn = "copy", reduce = "max", parallel = "edge", block_size = 128 : i64, slope = 0.0 : f32, hector.segmented_sum, operandSegmentSizes = array<i32: 0, 1, 0, 1, 0, 1>} : (memref<?xi32>, memref<?x8xf32>, memref<?x8xbf16>) -> ()
  return
}

// -----

// COUNT: error: hector.segmented_sum needs reduce = "sum" and a scatter_index
func.func @segmented_without_index(%m: memref<?x8xf32>, %out: memref<8xf32>) {
  // expected-error @+1 {{hector.segmented_sum needs reduce = "sum" and a scatter_index}}
  "hector_intra.traversal_template"(%m, %out) {fn = "copy", reduce = "sum", parallel = "edge", block_size = 128 : i64, slope = 0.0 : f32, hector.segmented_sum, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x8xf32>, memref<8xf32>) -> ()
  return
}

// -----

// A vector dot (hector-half-messages) reassociates a per-head dot product's sums: it needs
// fn = "dot" without reduction.
// COUNT: error: hector.vector_dot needs fn = "dot" and reduce = "none"
func.func @vector_dot_of_a_copy(%m: memref<?x32xf32>, %out: memref<?x32xf32>) {
  // expected-error @+1 {{hector.vector_dot needs fn = "dot" and reduce = "none"}}
  "hector_intra.traversal_template"(%m, %out) {fn = "copy", reduce = "none", parallel = "edge", block_size = 128 : i64, slope = 0.0 : f32, hector.vector_dot, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x32xf32>, memref<?x32xf32>) -> ()
  return
}

// -----

// COUNT: error: block_size must be between 1 and 1024 (threads per block), got 2048
func.func @gemm_block_too_big(%a: memref<?x16xf32>, %w: memref<16x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{block_size must be between 1 and 1024 (threads per block), got 2048}}
  "hector_intra.gemm_template"(%a, %w, %out) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 2048 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x16xf32>, memref<16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

// A traversal's block_size is checked too (a launch with -1 threads per block is not valid).
// COUNT: error: block_size must be between 1 and 1024 (threads per block), got -1
func.func @traversal_block(%dst: memref<?xi32>, %m: memref<?x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{block_size must be between 1 and 1024 (threads per block), got -1}}
  "hector_intra.traversal_template"(%dst, %m, %out) {parallel = "edge", fn = "copy", reduce = "sum", slope = 0.0 : f32, block_size = -1 : i64, operandSegmentSizes = array<i32: 0, 1, 0, 1, 0, 1>} : (memref<?xi32>, memref<?x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

// Discardable attributes the passes read back have the type they read (once an internal
// error: "Cannot cast attribute to IntegerAttr/StringAttr").
// COUNT: error: slice_rows must be an integer, got "x"
func.func @slice_rows_string(%a: memref<?x16xf32>, %w: memref<3x16x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{slice_rows must be an integer, got "x"}}
  "hector_intra.gemm_template"(%a, %w, %out) {variant = "xw", epilogue = "store", slice_rows = "x", tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x16xf32>, memref<3x16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

// COUNT: error: hector.fuse must be a string, got 3 : i64
func.func @fuse_mark_integer(%g: !hector_inter.graph, %x: tensor<?x16xf32>) -> tensor<?x16xf32> {
  // expected-error @+1 {{hector.fuse must be a string, got 3 : i64}}
  %0 = "hector_inter.gather_src"(%g, %x) {hector.fuse = 3 : i64} : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  return %0 : tensor<?x16xf32>
}

// -----

// COUNT: error: out of a sum over all rows must have rank 1, got rank 2
func.func @reduce_without_index(%m: memref<?x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{out of a sum over all rows must have rank 1, got rank 2}}
  "hector_intra.traversal_template"(%m, %out) {parallel = "edge", fn = "copy", reduce = "sum", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

// COUNT: error: reduce = "max" needs a scatter_index operand
func.func @max_without_index(%m: memref<?x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{reduce = "max" needs a scatter_index operand}}
  "hector_intra.traversal_template"(%m, %out) {parallel = "edge", fn = "copy", reduce = "max", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

// COUNT: error: fn = "scale" needs a second input y
func.func @scale_without_y(%dst: memref<?xi32>, %m: memref<?x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{fn = "scale" needs a second input y}}
  "hector_intra.traversal_template"(%dst, %m, %out) {parallel = "edge", fn = "scale", reduce = "sum", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 1, 0, 1, 0, 1>} : (memref<?xi32>, memref<?x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

// COUNT: error: fn = "add_bias" needs a second input y
func.func @add_bias_without_y(%m: memref<?x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{fn = "add_bias" needs a second input y}}
  "hector_intra.traversal_template"(%m, %out) {parallel = "node", fn = "add_bias", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

// COUNT: error: fn = "relu" takes no second input
func.func @relu_with_y(%m: memref<?x8xf32>, %y: memref<?x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{fn = "relu" takes no second input}}
  "hector_intra.traversal_template"(%m, %y, %out) {parallel = "node", fn = "relu", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>} : (memref<?x8xf32>, memref<?x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

// COUNT: error: x and out widths differ: 8 vs 4
func.func @traversal_widths(%m: memref<?x8xf32>, %out: memref<?x4xf32>) {
  // expected-error @+1 {{x and out widths differ: 8 vs 4}}
  "hector_intra.traversal_template"(%m, %out) {parallel = "node", fn = "copy", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x8xf32>, memref<?x4xf32>) -> ()
  return
}

// -----

// COUNT: error: y width (heads) of a scale must divide x's width
func.func @traversal_scale_y(%dst: memref<?xi32>, %m: memref<?x8xf32>, %y: memref<?x3xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{y width (heads) of a scale must divide x's width}}
  "hector_intra.traversal_template"(%dst, %m, %y, %out) {parallel = "edge", fn = "scale", reduce = "sum", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 1, 0, 1, 1, 1>} : (memref<?xi32>, memref<?x8xf32>, memref<?x3xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

// COUNT: error: y of a add must have x's width: 8 vs 4
func.func @traversal_add_y(%m: memref<?x8xf32>, %y: memref<?x4xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{y of a add must have x's width: 8 vs 4}}
  "hector_intra.traversal_template"(%m, %y, %out) {parallel = "node", fn = "add", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>} : (memref<?x8xf32>, memref<?x4xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

// COUNT: error: y of an add_bias must be a vector of x's width
func.func @traversal_bias_y(%m: memref<?x8xf32>, %y: memref<4xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{y of an add_bias must be a vector of x's width}}
  "hector_intra.traversal_template"(%m, %y, %out) {parallel = "node", fn = "add_bias", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>} : (memref<?x8xf32>, memref<4xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

// COUNT: error: scatter_index must be memref<?xi32>, got memref<?x1xi32>
func.func @traversal_index_rank(%dst: memref<?x1xi32>, %m: memref<?x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{scatter_index must be memref<?xi32>, got memref<?x1xi32>}}
  "hector_intra.traversal_template"(%dst, %m, %out) {parallel = "edge", fn = "copy", reduce = "sum", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 1, 0, 1, 0, 1>} : (memref<?x1xi32>, memref<?x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

// COUNT: error: x must have f32, f16 or bf16 elements, got memref<?x8xf64>
func.func @traversal_f64(%m: memref<?x8xf64>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{x must have f32, f16 or bf16 elements, got memref<?x8xf64>}}
  "hector_intra.traversal_template"(%m, %out) {parallel = "node", fn = "copy", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x8xf64>, memref<?x8xf32>) -> ()
  return
}

// -----

// The verifier stops at the first error of a function, and checks every function.
// COUNT: error: operand widths differ: 8 vs 4
func.func @fine(%a: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %0 = "hector_inter.unary"(%a) {fn = "relu", slope = 0.0 : f32} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}
func.func @second_function_is_checked(%a: tensor<?x8xf32>, %b: tensor<?x4xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{operand widths differ: 8 vs 4}}
  %0 = "hector_inter.add"(%a, %b) : (tensor<?x8xf32>, tensor<?x4xf32>) -> tensor<?x8xf32>
  %1 = "hector_inter.add"(%0, %b) : (tensor<?x8xf32>, tensor<?x4xf32>) -> tensor<?x8xf32>
  return %1 : tensor<?x8xf32>
}

// -----

// add with a rank-1 result: the result rank must be checked (it once raised IndexError).
func.func @add_rank1_result(%a: tensor<?x8xf32>, %b: tensor<8xf32>) -> tensor<8xf32> {
  // COUNT: error: result must have rank 2, got rank 1
  // expected-error @+1 {{result must have rank 2, got rank 1}}
  %0 = "hector_inter.add"(%a, %b) : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// scale with a rank-1 result: the same check.
func.func @scale_rank1_result(%a: tensor<?x8xf32>, %s: tensor<?x1xf32>) -> tensor<8xf32> {
  // COUNT: error: result must have rank 2, got rank 1
  // expected-error @+1 {{result must have rank 2, got rank 1}}
  %0 = "hector_inter.scale"(%a, %s) : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// unary whose result has another rank than its operand: rejected (the shape check once
// only runs when the ranks are equal).
func.func @unary_rank_change(%a: tensor<?x8xf32>) -> tensor<?x8x2xf32> {
  // COUNT: error: result rank 3 differs from the operand's rank 2
  // expected-error @+1 {{result rank 3 differs from the operand's rank 2}}
  %0 = "hector_inter.unary"(%a) {fn = "relu", slope = 0.0 : f32} : (tensor<?x8xf32>) -> tensor<?x8x2xf32>
  return %0 : tensor<?x8x2xf32>
}

// COUNT-NOT: error:
