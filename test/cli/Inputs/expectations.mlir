func.func @met(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{'"tanh"' does not satisfy the constraint}}
  %0 = "hector_inter.unary"(%x) {fn = "tanh"} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  // expected-note @-1 {{see current operation}}
  // expected-error @below {{'"exp"' does not satisfy}}

  %1 = "hector_inter.unary"(%x) {fn = "exp"} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %2 = "hector_inter.unary"(%x) {fn = "log"} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  // expected-error @above {{'"log"'}}
  %3 = "hector_inter.unary"(%x) {fn = "sin"} : (tensor<?x8xf32>) -> tensor<?x8xf32> // expected-error {{"sin"}}
  // expected-error-re @+1 {{'"{{[a-z]+}}"' does not satisfy the constraint}}
  %4 = "hector_inter.unary"(%x) {fn = "cos"} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return
}

// -----


func.func @unmet(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{not the real message}}
  %0 = "hector_inter.unary"(%x) {fn = "tanh"} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @missing(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{nothing here}}
  return
}
