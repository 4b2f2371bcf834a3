// RUN: hector-opt %s | hector-opt | FileCheck %s
// RUN: hector-opt %s --mlir-print-op-generic | hector-opt | FileCheck %s

// Every hector_inter op parses, verifies and prints back (ops print in generic form).

// CHECK-LABEL: func.func @gathers
// CHECK-SAME: (%[[G:.*]]: !hector_inter.graph, %[[X:.*]]: tensor<?x16xf32>)
func.func @gathers(%g: !hector_inter.graph, %x: tensor<?x16xf32>) -> (tensor<?x16xf32>, tensor<?x16xf32>) {
  // CHECK: "hector_inter.gather_src"(%[[G]], %[[X]]) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  %0 = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  // CHECK: "hector_inter.gather_dst"(%[[G]], %[[X]]) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  %1 = "hector_inter.gather_dst"(%g, %x) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  return %0, %1 : tensor<?x16xf32>, tensor<?x16xf32>
}

// CHECK-LABEL: func.func @typed_linear_etype
func.func @typed_linear_etype(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: tensor<3x16x8xf32>) -> tensor<?x8xf32> {
  %0 = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  // CHECK: "hector_inter.typed_linear"(%{{[0-9a-z_]+}}, %{{[0-9a-z_]+}}, %{{[0-9a-z_]+}}) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<3x16x8xf32>) -> tensor<?x8xf32>
  %1 = "hector_inter.typed_linear"(%g, %0, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<3x16x8xf32>) -> tensor<?x8xf32>
  return %1 : tensor<?x8xf32>
}

// CHECK-LABEL: func.func @typed_linear_ntype
func.func @typed_linear_ntype(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: tensor<2x16x8xf32>) -> tensor<?x8xf32> {
  // CHECK: "hector_inter.typed_linear"(%{{[0-9a-z_]+}}, %{{[0-9a-z_]+}}, %{{[0-9a-z_]+}}) {slice = "ntype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<2x16x8xf32>) -> tensor<?x8xf32>
  %0 = "hector_inter.typed_linear"(%g, %x, %w) {slice = "ntype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<2x16x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// CHECK-LABEL: func.func @typed_linear_shared
func.func @typed_linear_shared(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: tensor<16x8xf32>) -> tensor<?x8xf32> {
  // CHECK: "hector_inter.typed_linear"(%{{[0-9a-z_]+}}, %{{[0-9a-z_]+}}, %{{[0-9a-z_]+}}) {slice = "none"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  %0 = "hector_inter.typed_linear"(%g, %x, %w) {slice = "none"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// CHECK-LABEL: func.func @degree_norm
func.func @degree_norm(%g: !hector_inter.graph) -> (tensor<?x1xf32>, tensor<?x1xf32>) {
  // CHECK: "hector_inter.degree_norm"(%{{[0-9a-z_]+}}) {by = "dst_etype"} : (!hector_inter.graph) -> tensor<?x1xf32>
  %0 = "hector_inter.degree_norm"(%g) {by = "dst_etype"} : (!hector_inter.graph) -> tensor<?x1xf32>
  // CHECK: "hector_inter.degree_norm"(%{{[0-9a-z_]+}}) {by = "dst"} : (!hector_inter.graph) -> tensor<?x1xf32>
  %1 = "hector_inter.degree_norm"(%g) {by = "dst"} : (!hector_inter.graph) -> tensor<?x1xf32>
  return %0, %1 : tensor<?x1xf32>, tensor<?x1xf32>
}

// RGCN's message passing: scale each message by 1/c, sum onto destinations, add the
// self-loop and a bias, then relu.
// CHECK-LABEL: func.func @rgcn_layer
func.func @rgcn_layer(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: tensor<3x16x8xf32>, %w0: tensor<16x8xf32>, %b: tensor<8xf32>) -> tensor<?x8xf32> {
  %0 = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  %1 = "hector_inter.typed_linear"(%g, %0, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<3x16x8xf32>) -> tensor<?x8xf32>
  %2 = "hector_inter.degree_norm"(%g) {by = "dst_etype"} : (!hector_inter.graph) -> tensor<?x1xf32>
  // CHECK: "hector_inter.scale"(%{{[0-9a-z_]+}}, %{{[0-9a-z_]+}}) : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %3 = "hector_inter.scale"(%1, %2) : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  // CHECK: "hector_inter.sum_to_dst"(%{{[0-9a-z_]+}}, %{{[0-9a-z_]+}}) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %4 = "hector_inter.sum_to_dst"(%g, %3) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %5 = "hector_inter.typed_linear"(%g, %x, %w0) {slice = "none"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  // CHECK: "hector_inter.add"(%{{[0-9a-z_]+}}, %{{[0-9a-z_]+}}) : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %6 = "hector_inter.add"(%4, %5) : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  // CHECK: "hector_inter.add"(%{{[0-9a-z_]+}}, %{{[0-9a-z_]+}}) : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  %7 = "hector_inter.add"(%6, %b) : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  // CHECK: "hector_inter.unary"(%{{[0-9a-z_]+}}) {fn = "relu", slope = 0.000000e+00 : f32} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %8 = "hector_inter.unary"(%7) {fn = "relu", slope = 0.0 : f32} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  // CHECK: "hector_inter.unary"(%{{[0-9a-z_]+}}) {fn = "copy", slope = 0.000000e+00 : f32} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %9 = "hector_inter.unary"(%8) {fn = "copy", slope = 0.0 : f32} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %9 : tensor<?x8xf32>
}
