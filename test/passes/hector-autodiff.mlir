// RUN: hector-opt %s --split-input-file -p hector-autodiff | FileCheck %s

// hector-autodiff keeps @layer, adds @layer_train returning what the backward program reads
// (tanh's output for its derivative, the softmax output), and @layer_backward with one gradient
// per argument in argument order. The gather of x is re-emitted in the backward program (the
// lowering folds it into the weight-gradient GEMM), never saved.
// CHECK-LABEL: func.func @layer(
// CHECK-LABEL: func.func @layer_train(
// CHECK-SAME: -> (tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x2xf32>)
// CHECK-SAME: hector.num_saved = 2 : i64, hector.result_kinds = ["node", "node", "edge"], hector.train_of = "layer"
// CHECK: %[[T:.*]] = "hector_inter.unary"(%{{.*}}) {fn = "tanh"
// CHECK: return %{{.*}}, %[[T]], %{{.*}} :
// CHECK-LABEL: func.func @layer_backward(
// CHECK-SAME: %[[G:[^:]*]]: !hector_inter.graph, %[[X:[^:]*]]: tensor<?x4xf32> {hector.kind = "node"}, %[[W:[^:]*]]: tensor<3x4x2xf32> {hector.kind = "weight"}, %{{[^:]*}}: tensor<2xf32> {hector.kind = "weight"}, %[[ST:[^:]*]]: tensor<?x2xf32> {hector.kind = "node"}, %[[SS:[^:]*]]: tensor<?x2xf32> {hector.kind = "edge"}, %[[DY:[^:]*]]: tensor<?x2xf32> {hector.kind = "node"})
// CHECK-SAME: hector.backward_of = "layer", hector.grad_of = [0, 1, 2]
// CHECK-NEXT: %[[DB:.*]] = "hector_inter.sum_rows"(%[[DY]]) {by = "none"}
// CHECK-NEXT: %[[DT:.*]] = "hector_inter.unary_grad"(%[[ST]], %[[DY]]) {fn = "tanh"
// CHECK-NEXT: %[[DE:.*]] = "hector_inter.gather_dst"(%[[G]], %[[DT]])
// CHECK-NEXT: %[[DM:.*]] = "hector_inter.edge_softmax_grad"(%[[G]], %[[SS]], %[[DE]])
// CHECK-NEXT: %[[DXE:.*]] = "hector_inter.typed_linear_transposed"(%[[G]], %[[DM]], %[[W]]) {slice = "etype"}
// CHECK-NEXT: %[[XS:.*]] = "hector_inter.gather_src"(%[[G]], %[[X]])
// CHECK-NEXT: %[[DW:.*]] = "hector_inter.typed_linear_weight_grad"(%[[G]], %[[XS]], %[[DM]]) {slice = "etype"}
// CHECK-NEXT: %[[DX:.*]] = "hector_inter.sum_to_src"(%[[G]], %[[DXE]])
// CHECK-NEXT: return %[[DX]], %[[DW]], %[[DB]]
func.func @layer(%g: !hector_inter.graph, %x: tensor<?x4xf32> {hector.kind = "node"}, %w: tensor<3x4x2xf32> {hector.kind = "weight"}, %b: tensor<2xf32> {hector.kind = "weight"}) -> tensor<?x2xf32> {
  %xs = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  %m = "hector_inter.typed_linear"(%g, %xs, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x4xf32>, tensor<3x4x2xf32>) -> tensor<?x2xf32>
  %s = "hector_inter.edge_softmax"(%g, %m) {by = "dst"} : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
  %o = "hector_inter.sum_to_dst"(%g, %s) : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
  %t = "hector_inter.unary"(%o) {fn = "tanh", slope = 0.0 : f32} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %r = "hector_inter.add"(%t, %b) : (tensor<?x2xf32>, tensor<2xf32>) -> tensor<?x2xf32>
  return %r : tensor<?x2xf32>
}

// -----

// A weight used twice gets two partial gradients (summed by the caller): grad_of repeats it.
// CHECK-LABEL: func.func @shared_weight_backward(
// CHECK-SAME: hector.grad_of = [0, 1, 1]
func.func @shared_weight(%g: !hector_inter.graph, %x: tensor<?x4xf32> {hector.kind = "node"}, %w: tensor<4x4xf32> {hector.kind = "weight"}) -> tensor<?x4xf32> {
  %a = "hector_inter.typed_linear"(%g, %x, %w) {slice = "none"} : (!hector_inter.graph, tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %b = "hector_inter.typed_linear"(%g, %a, %w) {slice = "none"} : (!hector_inter.graph, tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  return %b : tensor<?x4xf32>
}


// -----

// An argument marked hector.no_grad (input features) gets no gradient, and nothing computed
// only from it does: no typed_linear_transposed, no sum_to_src, nothing saved for them;
// grad_of lists the weight alone.
// CHECK-LABEL: func.func @frozen_input_train(
// CHECK-SAME: hector.num_saved = 0 : i64
// CHECK-LABEL: func.func @frozen_input_backward(
// CHECK-SAME: hector.backward_of = "frozen_input", hector.grad_of = [1]
// CHECK-NOT: typed_linear_transposed
// CHECK-NOT: sum_to_src
// CHECK: "hector_inter.typed_linear_weight_grad"
// CHECK-NOT: typed_linear_transposed
// CHECK: return
func.func @frozen_input(%g: !hector_inter.graph, %x: tensor<?x4xf32> {hector.kind = "node", hector.no_grad}, %w: tensor<3x4x2xf32> {hector.kind = "weight"}) -> tensor<?x2xf32> {
  %xs = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  %m = "hector_inter.typed_linear"(%g, %xs, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x4xf32>, tensor<3x4x2xf32>) -> tensor<?x2xf32>
  %o = "hector_inter.sum_to_dst"(%g, %m) : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
  return %o : tensor<?x2xf32>
}
