// RUN: hector-opt %s --split-input-file --verify-diagnostics -p hector-half-saved

// A training function whose backward function is missing: the saved values' storage must
// change in both at once, so the pass refuses the pair.

// expected-error @+1 {{@layer: hector-half-saved needs both @layer_train and @layer_backward}}
func.func @layer_train(%g: !hector_inter.graph, %x: tensor<?x16xf32> {hector.kind = "node", hector.storage = bf16}) -> (tensor<?x16xf32>, tensor<?x16xf32>) attributes {hector.num_saved = 1 : i64, hector.result_kinds = ["node", "node"], hector.train_of = "layer"} {
  %t = "hector_inter.unary"(%x) {fn = "tanh", slope = 0.0 : f32} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  return %t, %t : tensor<?x16xf32>, tensor<?x16xf32>
}

// -----

// A saved value whose type differs between the pair.

func.func @pair_train(%g: !hector_inter.graph, %x: tensor<?x16xf32> {hector.kind = "node", hector.storage = bf16}) -> (tensor<?x16xf32>, tensor<?x16xf32>) attributes {hector.num_saved = 1 : i64, hector.result_kinds = ["node", "node"], hector.train_of = "pair"} {
  %t = "hector_inter.unary"(%x) {fn = "tanh", slope = 0.0 : f32} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  return %t, %t : tensor<?x16xf32>, tensor<?x16xf32>
}
// expected-error @+1 {{saved value #0 is tensor<?x16xf32> in @_train but tensor<?x32xf32> in @_backward}}
func.func @pair_backward(%g: !hector_inter.graph, %x: tensor<?x16xf32> {hector.kind = "node", hector.storage = bf16}, %s: tensor<?x32xf32> {hector.kind = "node"}, %d: tensor<?x16xf32> {hector.kind = "node"}) -> tensor<?x16xf32> attributes {hector.backward_of = "pair", hector.grad_of = [0], hector.result_kinds = ["node"]} {
  return %d : tensor<?x16xf32>
}
