// RUN: hector-opt %s --no-hector-verify -p hector-verify | FileCheck %s

// Sizes at the edge of what 64-bit sizes and strides hold are accepted: 2^61 - 1 f32 elements
// are 2^63 - 4 bytes. Zero and one-element dimensions and dynamic rows are fine too.

// CHECK-LABEL: func.func @at_the_limit
// CHECK-SAME: tensor<?x2305843009213693951xf32>
func.func @at_the_limit(%x: tensor<?x2305843009213693951xf32>) -> tensor<?x2305843009213693951xf32> {
  %0 = "hector_inter.unary"(%x) {fn = "relu", slope = 0.0 : f32} : (tensor<?x2305843009213693951xf32>) -> tensor<?x2305843009213693951xf32>
  return %0 : tensor<?x2305843009213693951xf32>
}

// CHECK-LABEL: func.func @empty_and_single
// CHECK-SAME: tensor<?x0xf32>
// CHECK-SAME: tensor<1x1xf32>
func.func @empty_and_single(%g: !hector_inter.graph, %x: tensor<?x0xf32>, %w: tensor<0x1xf32>, %b: tensor<1x1xf32>) -> tensor<?x1xf32> {
  %0 = "hector_inter.typed_linear"(%g, %x, %w) {slice = "none"} : (!hector_inter.graph, tensor<?x0xf32>, tensor<0x1xf32>) -> tensor<?x1xf32>
  return %0 : tensor<?x1xf32>
}
