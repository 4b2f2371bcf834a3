// RUN: hector-opt %s --split-input-file --verify-diagnostics -p hector-autodiff

// Programs hector-autodiff cannot differentiate, each rejected at its location.

// expected-error @+1 {{hector-autodiff needs exactly one !hector_inter.graph argument}}
func.func @no_graph(%x: tensor<?x4xf32> {hector.kind = "node"}) -> tensor<?x4xf32> {
  %r = "hector_inter.unary"(%x) {fn = "relu", slope = 0.0 : f32} : (tensor<?x4xf32>) -> tensor<?x4xf32>
  return %r : tensor<?x4xf32>
}

// -----

func.func @backward_op(%g: !hector_inter.graph, %y: tensor<?x2xf32> {hector.kind = "edge"}, %dy: tensor<?x2xf32> {hector.kind = "edge"}) -> tensor<?x2xf32> {
  // expected-error @+1 {{hector-autodiff: no derivative for 'hector_inter.edge_softmax_grad'}}
  %r = "hector_inter.edge_softmax_grad"(%g, %y, %dy) {by = "dst"} : (!hector_inter.graph, tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  return %r : tensor<?x2xf32>
}
