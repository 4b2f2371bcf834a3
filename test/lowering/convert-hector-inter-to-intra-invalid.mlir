// RUN: hector-opt %s --split-input-file --verify-diagnostics -p convert-hector-inter-to-intra
// RUN: not hector-opt %s --split-input-file -p convert-hector-inter-to-intra 2>&1 | FileCheck %s

// Inputs convert-hector-inter-to-intra rejects, each with a diagnostic at the culprit.

// CHECK: error: 'arith.addf' cannot be lowered to hector_intra; only hector_inter ops may appear in a function with relational ops
func.func @arith_inside(%g: !hector_inter.graph, %x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %0 = "hector_inter.unary"(%x) {fn = "relu", slope = 0.0 : f32} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  // expected-error @+1 {{'arith.addf' cannot be lowered to hector_intra; only hector_inter ops may appear in a function with relational ops}}
  %1 = arith.addf %0, %0 : tensor<?x8xf32>
  return %1 : tensor<?x8xf32>
}

// -----

// CHECK: error: 'arith.constant' cannot be lowered to hector_intra
func.func @constant_bias(%g: !hector_inter.graph, %x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{'arith.constant' cannot be lowered to hector_intra}}
  %b = arith.constant dense<1.0> : tensor<8xf32>
  %0 = "hector_inter.add"(%x, %b) : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

// CHECK: error: a function may take at most one graph
// expected-error @+1 {{a function may take at most one graph}}
func.func @two_graphs(%g: !hector_inter.graph, %h: !hector_inter.graph, %x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %0 = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %1 = "hector_inter.sum_to_dst"(%h, %0) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %1 : tensor<?x8xf32>
}

// -----

// CHECK: error: argument of type f32 is not supported; expected a ranked tensor or !hector_inter.graph
// expected-error @+1 {{argument of type f32 is not supported; expected a ranked tensor or !hector_inter.graph}}
func.func @scalar_arg(%g: !hector_inter.graph, %x: tensor<?x8xf32>, %s: f32) -> tensor<?x8xf32> {
  %0 = "hector_inter.unary"(%x) {fn = "relu", slope = 0.0 : f32} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

// hector-verify runs first: an ill-typed program never reaches the conversion.
// CHECK: error: summed rows must be edge-wise, but it is node-wise
// CHECK-NOT: error:
func.func @verified_first(%g: !hector_inter.graph, %x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %0 = "hector_inter.sum_to_dst"(%g, %x) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  // expected-error @+1 {{summed rows must be edge-wise, but it is node-wise}}
  %1 = "hector_inter.sum_to_dst"(%g, %0) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %1 : tensor<?x8xf32>
}

// -----

// CHECK: error: hector.fuse = "index" on a gather that a user cannot read through an index
func.func @bad_fuse_mark(%g: !hector_inter.graph, %x: tensor<?x2xf32>) -> tensor<?x2xf32> {
  // expected-error @+1 {{hector.fuse = "index" on a gather that a user cannot read through an index}}
  %a = "hector_inter.gather_src"(%g, %x) {hector.fuse = "index"} : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
  %s = "hector_inter.edge_softmax"(%g, %a) {by = "dst"} : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
  return %s : tensor<?x2xf32>
}

// -----

// CHECK: error: hector.fuse = "into_sum" on a scale that is not summed exactly once
func.func @bad_sum_mark(%x: tensor<?x2xf32>, %s: tensor<?x1xf32>) -> tensor<?x2xf32> {
  // expected-error @+1 {{hector.fuse = "into_sum" on a scale that is not summed exactly once}}
  %m = "hector_inter.scale"(%x, %s) {hector.fuse = "into_sum"} : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  return %m : tensor<?x2xf32>
}

// -----

// CHECK: error: hector.fuse = "into_gemm" on a scale that a non-GEMM op reads
func.func @bad_gemm_mark(%x: tensor<?x2xf32>, %s: tensor<?x1xf32>) -> tensor<?x2xf32> {
  // expected-error @+1 {{hector.fuse = "into_gemm" on a scale that a non-GEMM op reads}}
  %m = "hector_inter.scale"(%x, %s) {hector.fuse = "into_gemm"} : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %u = "hector_inter.unary"(%m) {fn = "exp", slope = 0.0 : f32} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  return %u : tensor<?x2xf32>
}
