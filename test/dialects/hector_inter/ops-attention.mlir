// RUN: hector-opt %s | hector-opt | FileCheck %s
// RUN: hector-opt %s --mlir-print-op-generic | hector-opt | FileCheck %s

// The operators RGAT, HGT, autodiff and the optimizations add to hector_inter parse, verify and
// print back.

// CHECK-LABEL: func.func @attention
func.func @attention(%g: !hector_inter.graph, %q: tensor<?x8xf32>, %k: tensor<?x8xf32>, %v: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %qd = "hector_inter.gather_dst"(%g, %q) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %ks = "hector_inter.gather_src"(%g, %k) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  // CHECK: "hector_inter.dot"(%{{.*}}, %{{.*}}) : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x2xf32>
  %l = "hector_inter.dot"(%qd, %ks) : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x2xf32>
  // CHECK: "hector_inter.unary"(%{{.*}}) {fn = "leaky_relu", slope = 2.000000e-01 : f32}
  %a = "hector_inter.unary"(%l) {fn = "leaky_relu", slope = 0.2 : f32} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  // CHECK: "hector_inter.edge_softmax"(%{{.*}}, %{{.*}}) {by = "dst"} : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
  %s = "hector_inter.edge_softmax"(%g, %a) {by = "dst"} : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
  %vs = "hector_inter.gather_src"(%g, %v) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  // CHECK: "hector_inter.scale"(%{{.*}}, %{{.*}}) : (tensor<?x8xf32>, tensor<?x2xf32>) -> tensor<?x8xf32>
  %m = "hector_inter.scale"(%vs, %s) : (tensor<?x8xf32>, tensor<?x2xf32>) -> tensor<?x8xf32>
  %o = "hector_inter.sum_to_dst"(%g, %m) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %o : tensor<?x8xf32>
}

// CHECK-LABEL: func.func @gradients
func.func @gradients(%g: !hector_inter.graph, %x: tensor<?x4xf32>, %dy: tensor<?x6xf32>, %w: tensor<3x4x6xf32>, %y: tensor<?x2xf32>, %dys: tensor<?x2xf32>) -> (tensor<?x4xf32>, tensor<3x4x6xf32>, tensor<?x2xf32>, tensor<?x4xf32>, tensor<6xf32>, tensor<?x2xf32>) {
  // CHECK: "hector_inter.typed_linear_transposed"(%{{.*}}, %{{.*}}, %{{.*}}) {slice = "etype"}
  %dx = "hector_inter.typed_linear_transposed"(%g, %dy, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x6xf32>, tensor<3x4x6xf32>) -> tensor<?x4xf32>
  %xe = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  // CHECK: "hector_inter.typed_linear_weight_grad"(%{{.*}}, %{{.*}}, %{{.*}}) {slice = "etype"} : (!hector_inter.graph, tensor<?x4xf32>, tensor<?x6xf32>) -> tensor<3x4x6xf32>
  %dw = "hector_inter.typed_linear_weight_grad"(%g, %xe, %dy) {slice = "etype"} : (!hector_inter.graph, tensor<?x4xf32>, tensor<?x6xf32>) -> tensor<3x4x6xf32>
  // CHECK: "hector_inter.edge_softmax_grad"
  %ds = "hector_inter.edge_softmax_grad"(%g, %y, %dys) {by = "dst"} : (!hector_inter.graph, tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  // CHECK: "hector_inter.sum_to_src"
  %dn = "hector_inter.sum_to_src"(%g, %dx) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  // CHECK: "hector_inter.sum_rows"(%{{.*}}) {by = "none"} : (tensor<?x6xf32>) -> tensor<6xf32>
  %db = "hector_inter.sum_rows"(%dy) {by = "none"} : (tensor<?x6xf32>) -> tensor<6xf32>
  // CHECK: "hector_inter.unary_grad"(%{{.*}}, %{{.*}}) {fn = "tanh", slope = 0.000000e+00 : f32}
  %du = "hector_inter.unary_grad"(%y, %dys) {fn = "tanh", slope = 0.0 : f32} : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  return %dn, %dw, %ds, %dx, %db, %du : tensor<?x4xf32>, tensor<3x4x6xf32>, tensor<?x2xf32>, tensor<?x4xf32>, tensor<6xf32>, tensor<?x2xf32>
}

// CHECK-LABEL: func.func @compact_and_typed_bias
func.func @compact_and_typed_bias(%g: !hector_inter.graph, %x: tensor<?x4xf32>, %w: tensor<3x4x6xf32>, %b: tensor<2x4xf32>) -> (tensor<?x6xf32>, tensor<?x4xf32>, tensor<?x6xf32>) {
  // CHECK: "hector_inter.compact_gather_src"
  %c = "hector_inter.compact_gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  %p = "hector_inter.typed_linear"(%g, %c, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x4xf32>, tensor<3x4x6xf32>) -> tensor<?x6xf32>
  // CHECK: "hector_inter.expand_compact"
  %e = "hector_inter.expand_compact"(%g, %p) : (!hector_inter.graph, tensor<?x6xf32>) -> tensor<?x6xf32>
  // CHECK: "hector_inter.sum_to_compact"
  %s = "hector_inter.sum_to_compact"(%g, %e) : (!hector_inter.graph, tensor<?x6xf32>) -> tensor<?x6xf32>
  // CHECK: "hector_inter.sum_compact_to_src"
  %n = "hector_inter.sum_compact_to_src"(%g, %s) : (!hector_inter.graph, tensor<?x6xf32>) -> tensor<?x6xf32>
  // CHECK: "hector_inter.add"(%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<?x4xf32>, tensor<2x4xf32>, !hector_inter.graph) -> tensor<?x4xf32>
  %tb = "hector_inter.add"(%x, %b, %g) : (tensor<?x4xf32>, tensor<2x4xf32>, !hector_inter.graph) -> tensor<?x4xf32>
  return %n, %tb, %e : tensor<?x6xf32>, tensor<?x4xf32>, tensor<?x6xf32>
}

// CHECK-LABEL: func.func @weight_products
func.func @weight_products(%w: tensor<3x16x8xf32>, %q: tensor<8x2xf32>, %d: tensor<3x16x2xf32>) -> (tensor<3x16x2xf32>, tensor<3x16x8xf32>, tensor<8x2xf32>) {
  // CHECK: "hector_inter.weight_product"(%{{.*}}, %{{.*}}) {variant = "xw"} : (tensor<3x16x8xf32>, tensor<8x2xf32>) -> tensor<3x16x2xf32>
  %p = "hector_inter.weight_product"(%w, %q) {variant = "xw"} : (tensor<3x16x8xf32>, tensor<8x2xf32>) -> tensor<3x16x2xf32>
  // CHECK: {variant = "xwt"}
  %dw = "hector_inter.weight_product"(%d, %q) {variant = "xwt"} : (tensor<3x16x2xf32>, tensor<8x2xf32>) -> tensor<3x16x8xf32>
  // CHECK: {variant = "xty"}
  %dq = "hector_inter.weight_product"(%w, %d) {variant = "xty"} : (tensor<3x16x8xf32>, tensor<3x16x2xf32>) -> tensor<8x2xf32>
  return %p, %dw, %dq : tensor<3x16x2xf32>, tensor<3x16x8xf32>, tensor<8x2xf32>
}

// Per-slice weight products and per-relation weights picked by source node type (HGT's fold).
// CHECK-LABEL: func.func @per_slice
func.func @per_slice(%g: !hector_inter.graph, %w: tensor<2x16x8xf32>, %b: tensor<2x8xf32>, %wr: tensor<5x8x4xf32>, %d: tensor<5x16x4xf32>) -> (tensor<5x16x4xf32>, tensor<5x4xf32>, tensor<5x16x8xf32>, tensor<5x8x4xf32>, tensor<2x16x8xf32>) {
  // CHECK: "hector_inter.etype_src_weight"(%{{.*}}, %{{.*}}) : (!hector_inter.graph, tensor<2x16x8xf32>) -> tensor<5x16x8xf32>
  %pw = "hector_inter.etype_src_weight"(%g, %w) : (!hector_inter.graph, tensor<2x16x8xf32>) -> tensor<5x16x8xf32>
  // CHECK: "hector_inter.etype_src_weight"(%{{.*}}, %{{.*}}) : (!hector_inter.graph, tensor<2x8xf32>) -> tensor<5x8xf32>
  %pb = "hector_inter.etype_src_weight"(%g, %b) : (!hector_inter.graph, tensor<2x8xf32>) -> tensor<5x8xf32>
  // CHECK: {variant = "xw"} : (tensor<5x16x8xf32>, tensor<5x8x4xf32>) -> tensor<5x16x4xf32>
  %fw = "hector_inter.weight_product"(%pw, %wr) {variant = "xw"} : (tensor<5x16x8xf32>, tensor<5x8x4xf32>) -> tensor<5x16x4xf32>
  // CHECK: {variant = "xw"} : (tensor<5x8xf32>, tensor<5x8x4xf32>) -> tensor<5x4xf32>
  %fb = "hector_inter.weight_product"(%pb, %wr) {variant = "xw"} : (tensor<5x8xf32>, tensor<5x8x4xf32>) -> tensor<5x4xf32>
  // CHECK: {variant = "xwt"} : (tensor<5x16x4xf32>, tensor<5x8x4xf32>) -> tensor<5x16x8xf32>
  %da = "hector_inter.weight_product"(%d, %wr) {variant = "xwt"} : (tensor<5x16x4xf32>, tensor<5x8x4xf32>) -> tensor<5x16x8xf32>
  // CHECK: {variant = "xty"} : (tensor<5x16x8xf32>, tensor<5x16x4xf32>) -> tensor<5x8x4xf32>
  %db = "hector_inter.weight_product"(%pw, %d) {variant = "xty"} : (tensor<5x16x8xf32>, tensor<5x16x4xf32>) -> tensor<5x8x4xf32>
  // CHECK: "hector_inter.etype_src_weight_grad"(%{{.*}}, %{{.*}}) : (!hector_inter.graph, tensor<5x16x8xf32>) -> tensor<2x16x8xf32>
  %dw = "hector_inter.etype_src_weight_grad"(%g, %da) : (!hector_inter.graph, tensor<5x16x8xf32>) -> tensor<2x16x8xf32>
  return %fw, %fb, %da, %db, %dw : tensor<5x16x4xf32>, tensor<5x4xf32>, tensor<5x16x8xf32>, tensor<5x8x4xf32>, tensor<2x16x8xf32>
}

// CHECK-LABEL: func.func @maxima
func.func @maxima(%g: !hector_inter.graph, %x: tensor<?x8xf32>, %dy: tensor<?x8xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>) {
  // CHECK: "hector_inter.edge_max"(%{{.*}}, %{{.*}}) {by = "dst_etype"} : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %y = "hector_inter.edge_max"(%g, %x) {by = "dst_etype"} : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  // CHECK: "hector_inter.edge_max_grad"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) {by = "dst_etype"}
  %dx = "hector_inter.edge_max_grad"(%g, %x, %y, %dy) {by = "dst_etype"} : (!hector_inter.graph, tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %y, %dx : tensor<?x8xf32>, tensor<?x8xf32>
}
