// RUN: hector-opt %s --split-input-file -p 'hector-autodiff, hector-half-saved' | FileCheck %s

// A training pair fed bf16 features: the saved per-edge messages (32 columns) are a bf16
// result of @rgat_train and a bf16 argument of @rgat_backward; the saved attention scores
// (2 columns, narrower than 16), the incoming gradient and the features' storage stay as
// they were.
// CHECK-LABEL: func.func @rgat_train(
// CHECK-SAME: -> (tensor<?x32xf32>, tensor<?x2xf32>, tensor<?x32xf32> {hector.storage = bf16})
// CHECK-LABEL: func.func @rgat_backward(
// CHECK-SAME: %{{[^:]*}}: tensor<?x2xf32> {hector.kind = "edge"}, %{{[^:]*}}: tensor<?x32xf32> {hector.kind = "edge", hector.storage = bf16}, %{{[^:]*}}: tensor<?x32xf32> {hector.kind = "node"})
func.func @rgat(%g: !hector_inter.graph, %x: tensor<?x16xf32> {hector.storage = bf16, hector.kind = "node", hector.no_grad}, %w: tensor<3x16x32xf32> {hector.kind = "weight"}, %wa: tensor<3x16x2xf32> {hector.kind = "weight"}) -> tensor<?x32xf32> {
  %xs = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  %m = "hector_inter.typed_linear"(%g, %xs, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<3x16x32xf32>) -> tensor<?x32xf32>
  %t = "hector_inter.unary"(%m) {fn = "tanh", slope = 0.0 : f32} : (tensor<?x32xf32>) -> tensor<?x32xf32>
  %a = "hector_inter.typed_linear"(%g, %xs, %wa) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<3x16x2xf32>) -> tensor<?x2xf32>
  %s = "hector_inter.edge_softmax"(%g, %a) {by = "dst"} : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
  %ms = "hector_inter.scale"(%t, %s) : (tensor<?x32xf32>, tensor<?x2xf32>) -> tensor<?x32xf32>
  %o = "hector_inter.sum_to_dst"(%g, %ms) : (!hector_inter.graph, tensor<?x32xf32>) -> tensor<?x32xf32>
  return %o : tensor<?x32xf32>
}

// -----

// Declined: features in f32 (no bf16 argument), and features in f16 (the CPU has no f16
// pair products): the saved values stay f32.
// CHECK-LABEL: func.func @f32_train(
// CHECK-NOT: hector.storage
// CHECK-LABEL: func.func @f16_train(
// CHECK-SAME: -> (tensor<?x32xf32>, tensor<?x32xf32>)
// CHECK-LABEL: func.func @f16_backward(
// CHECK-NOT: hector.storage = bf16
func.func @f32(%g: !hector_inter.graph, %x: tensor<?x16xf32> {hector.kind = "node", hector.no_grad}, %w: tensor<3x16x32xf32> {hector.kind = "weight"}) -> tensor<?x32xf32> {
  %xs = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  %m = "hector_inter.typed_linear"(%g, %xs, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<3x16x32xf32>) -> tensor<?x32xf32>
  %t = "hector_inter.unary"(%m) {fn = "tanh", slope = 0.0 : f32} : (tensor<?x32xf32>) -> tensor<?x32xf32>
  %o = "hector_inter.sum_to_dst"(%g, %t) : (!hector_inter.graph, tensor<?x32xf32>) -> tensor<?x32xf32>
  return %o : tensor<?x32xf32>
}
func.func @f16(%g: !hector_inter.graph, %x: tensor<?x16xf32> {hector.storage = f16, hector.kind = "node", hector.no_grad}, %w: tensor<3x16x32xf32> {hector.kind = "weight"}) -> tensor<?x32xf32> {
  %xs = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  %m = "hector_inter.typed_linear"(%g, %xs, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<3x16x32xf32>) -> tensor<?x32xf32>
  %t = "hector_inter.unary"(%m) {fn = "tanh", slope = 0.0 : f32} : (tensor<?x32xf32>) -> tensor<?x32xf32>
  %o = "hector_inter.sum_to_dst"(%g, %t) : (!hector_inter.graph, tensor<?x32xf32>) -> tensor<?x32xf32>
  return %o : tensor<?x32xf32>
}
