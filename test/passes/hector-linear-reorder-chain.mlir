// RUN: hector-opt %s --split-input-file -p 'hector-linear-reorder{src_typed=true}' | FileCheck %s
// RUN: hector-opt %s --split-input-file -p hector-linear-reorder | FileCheck %s --check-prefix=MIXED
// RUN: hector-opt %s --split-input-file -p 'hector-linear-reorder{src_typed=true nodes=4}' | FileCheck %s --check-prefix=FEW

// HGT's key path: a node-typed projection with a typed bias, gathered to edges, projected again
// per relation. Folded: W_{src type(r)} W_rel[r] and b_{src type(r)} W_rel[r] once per relation,
// the node-wise projection and its bias are gone, and the edges read x directly.
// CHECK-LABEL: func.func @hgt_key
// CHECK-NOT: slice = "ntype"
// CHECK: %[[PW:.*]] = "hector_inter.etype_src_weight"(%[[G:[^,]*]], %[[W:[^)]*]]) : (!hector_inter.graph, tensor<2x16x8xf32>) -> tensor<5x16x8xf32>
// CHECK-NEXT: %[[FW:.*]] = "hector_inter.weight_product"(%[[PW]], %[[WR:[^)]*]]) {variant = "xw"} : (tensor<5x16x8xf32>, tensor<5x8x8xf32>) -> tensor<5x16x8xf32>
// CHECK-NEXT: %[[XS:.*]] = "hector_inter.gather_src"(%[[G]], %[[X:[^)]*]]) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
// CHECK-NEXT: %[[KE:.*]] = "hector_inter.typed_linear"(%[[G]], %[[XS]], %[[FW]]) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<5x16x8xf32>) -> tensor<?x8xf32>
// CHECK-NEXT: %[[PB:.*]] = "hector_inter.etype_src_weight"(%[[G]], %{{.*}}) : (!hector_inter.graph, tensor<2x8xf32>) -> tensor<5x8xf32>
// CHECK-NEXT: %[[FB:.*]] = "hector_inter.weight_product"(%[[PB]], %[[WR]]) {variant = "xw"} : (tensor<5x8xf32>, tensor<5x8x8xf32>) -> tensor<5x8xf32>
// CHECK-NEXT: %[[K:.*]] = "hector_inter.add"(%[[KE]], %[[FB]], %[[G]]) : (tensor<?x8xf32>, tensor<5x8xf32>, !hector_inter.graph) -> tensor<?x8xf32>
// CHECK-NEXT: return %[[K]]

// Without src_typed (a relation's sources may mix node types) the fold would be wrong: unchanged.
// MIXED-LABEL: func.func @hgt_key
// MIXED-NOT: etype_src_weight
// MIXED: "hector_inter.typed_linear"(%{{.*}}, %{{.*}}, %{{.*}}) {slice = "ntype"}
// MIXED: "hector_inter.typed_linear"(%{{.*}}, %{{.*}}, %{{.*}}) {slice = "etype"}

// With only 4 nodes, the folded per-edge product (K = 16 inputs instead of D = 8) costs more than
// the node-wise projection it removes.
// FEW-LABEL: func.func @hgt_key
// FEW-NOT: etype_src_weight
// FEW: {slice = "ntype"}
func.func @hgt_key(%g: !hector_inter.graph, %x: tensor<?x16xf32> {hector.kind = "node"}, %w: tensor<2x16x8xf32> {hector.kind = "weight"}, %b: tensor<2x8xf32> {hector.kind = "weight"}, %wr: tensor<5x8x8xf32> {hector.kind = "weight"}) -> tensor<?x8xf32> {
  %p = "hector_inter.typed_linear"(%g, %x, %w) {slice = "ntype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<2x16x8xf32>) -> tensor<?x8xf32>
  %k = "hector_inter.add"(%p, %b, %g) : (tensor<?x8xf32>, tensor<2x8xf32>, !hector_inter.graph) -> tensor<?x8xf32>
  %ks = "hector_inter.gather_src"(%g, %k) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %ke = "hector_inter.typed_linear"(%g, %ks, %wr) {slice = "etype"} : (!hector_inter.graph, tensor<?x8xf32>, tensor<5x8x8xf32>) -> tensor<?x8xf32>
  return %ke : tensor<?x8xf32>
}

// -----

// The projection is also read at the destination (gather_dst), so it would stay: folding would
// trade the per-edge D x H product for an equal K x H one and add the weight products. Unchanged.
// CHECK-LABEL: func.func @shared_projection
// CHECK-NOT: etype_src_weight
// CHECK: "hector_inter.typed_linear"(%{{.*}}, %{{.*}}, %{{.*}}) {slice = "ntype"}
// CHECK: "hector_inter.typed_linear"(%{{.*}}, %{{.*}}, %{{.*}}) {slice = "etype"}
func.func @shared_projection(%g: !hector_inter.graph, %x: tensor<?x8xf32> {hector.kind = "node"}, %w: tensor<2x8x8xf32> {hector.kind = "weight"}, %wr: tensor<5x8x8xf32> {hector.kind = "weight"}) -> (tensor<?x8xf32>, tensor<?x8xf32>) {
  %p = "hector_inter.typed_linear"(%g, %x, %w) {slice = "ntype"} : (!hector_inter.graph, tensor<?x8xf32>, tensor<2x8x8xf32>) -> tensor<?x8xf32>
  %ps = "hector_inter.gather_src"(%g, %p) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %pe = "hector_inter.typed_linear"(%g, %ps, %wr) {slice = "etype"} : (!hector_inter.graph, tensor<?x8xf32>, tensor<5x8x8xf32>) -> tensor<?x8xf32>
  %pd = "hector_inter.gather_dst"(%g, %p) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %pe, %pd : tensor<?x8xf32>, tensor<?x8xf32>
}

// -----

// A shared (slice "none") first projection is not a node-typed chain: unchanged.
// CHECK-LABEL: func.func @untyped_first
// CHECK-NOT: etype_src_weight
func.func @untyped_first(%g: !hector_inter.graph, %x: tensor<?x8xf32> {hector.kind = "node"}, %w: tensor<8x8xf32> {hector.kind = "weight"}, %wr: tensor<5x8x8xf32> {hector.kind = "weight"}) -> tensor<?x8xf32> {
  %p = "hector_inter.typed_linear"(%g, %x, %w) {slice = "none"} : (!hector_inter.graph, tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %ps = "hector_inter.gather_src"(%g, %p) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %pe = "hector_inter.typed_linear"(%g, %ps, %wr) {slice = "etype"} : (!hector_inter.graph, tensor<?x8xf32>, tensor<5x8x8xf32>) -> tensor<?x8xf32>
  return %pe : tensor<?x8xf32>
}
