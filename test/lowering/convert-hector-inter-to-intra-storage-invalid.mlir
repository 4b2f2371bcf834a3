// RUN: hector-opt %s --split-input-file --verify-diagnostics -p convert-hector-inter-to-intra

// A storage type must be f16, bf16 or f32, named at the function.
// expected-error @+1 {{argument #1: hector.storage must be one of the types f16, bf16, f32, got i8}}
func.func @not_a_float(%g: !hector_inter.graph, %x: tensor<?x16xf32> {hector.storage = i8}, %w: tensor<16x8xf32>) -> tensor<?x8xf32> {
  %m = "hector_inter.typed_linear"(%g, %x, %w) {slice = "none"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  return %m : tensor<?x8xf32>
}

// -----

// expected-error @+1 {{argument #1: hector.storage must be one of the types f16, bf16, f32, got "bf16"}}
func.func @a_string(%g: !hector_inter.graph, %x: tensor<?x16xf32> {hector.storage = "bf16"}, %w: tensor<16x8xf32>) -> tensor<?x8xf32> {
  %m = "hector_inter.typed_linear"(%g, %x, %w) {slice = "none"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  return %m : tensor<?x8xf32>
}

// -----

// Only templates read stored halves, row by row: a bias vector returned as it is in f32
// cannot be extended.
func.func @returned_bias(%g: !hector_inter.graph, %x: tensor<?x8xf32>, %b: tensor<8xf32> {hector.storage = bf16}) -> (tensor<?x8xf32>, tensor<8xf32>) {
  %h = "hector_inter.add"(%x, %b) : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  // expected-error @+1 {{a result of type memref<8xbf16> converted to memref<8xf32>: only [rows, width] results change element type}}
  return %h, %b : tensor<?x8xf32>, tensor<8xf32>
}

// -----

// A result changes element type row by row: a vector result stays in f32.
func.func @stored_vector(%g: !hector_inter.graph, %x: tensor<?x8xf32>, %b: tensor<8xf32>) -> (tensor<?x8xf32>, tensor<8xf32> {hector.storage = bf16}) {
  %h = "hector_inter.add"(%x, %b) : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  // expected-error @+1 {{a result of type memref<8xf32> converted to memref<8xbf16>: only [rows, width] results change element type}}
  return %h, %b : tensor<?x8xf32>, tensor<8xf32>
}

// -----

// expected-error @+1 {{result #0: hector.storage must be one of the types f16, bf16, f32, got i8}}
func.func @result_not_a_float(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: tensor<16x8xf32>) -> (tensor<?x8xf32> {hector.storage = i8}) {
  %m = "hector_inter.typed_linear"(%g, %x, %w) {slice = "none"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  return %m : tensor<?x8xf32>
}
