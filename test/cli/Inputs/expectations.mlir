// Chunk 1: every designator is met.
func.func @plus(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{'"softsign"' does not satisfy the constraint}}
  %0 = "hector_inter.unary"(%x) {fn = "softsign", slope = 0.0 : f32} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  // expected-note @-1 {{see current operation}}
  return
}
func.func @below(%x: tensor<?x8xf32>) {
  // expected-error @below {{'"softplus"' does not satisfy}}
  %0 = "hector_inter.unary"(%x) {fn = "softplus", slope = 0.0 : f32} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return
}

func.func @above(%x: tensor<?x8xf32>) {
  %0 = "hector_inter.unary"(%x) {fn = "log", slope = 0.0 : f32} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  // expected-error @above {{'"log"'}}
  return
}
func.func @same_line(%x: tensor<?x8xf32>) {
  %0 = "hector_inter.unary"(%x) {fn = "sin", slope = 0.0 : f32} : (tensor<?x8xf32>) -> tensor<?x8xf32> // expected-error {{"sin"}}
  return
}
func.func @regex(%x: tensor<?x8xf32>) {
  // expected-error-re @+1 {{'"{{[a-z]+}}"' does not satisfy the constraint}}
  %0 = "hector_inter.unary"(%x) {fn = "cos", slope = 0.0 : f32} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return
}

// -----

// Chunk 2: the error text differs (line 34).
func.func @unmet(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{not the real message}}
  %0 = "hector_inter.unary"(%x) {fn = "softsign", slope = 0.0 : f32} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return
}

// -----

// Chunk 3: an expectation on a line without any diagnostic (line 43).
func.func @missing(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{nothing here}}
  return
}
