// RUN: hector-opt %s | hector-opt | FileCheck %s
// RUN: hector-opt %s --mlir-print-op-generic | hector-opt | FileCheck %s

// Every hector_intra op parses, verifies and prints back (ops print in generic form; the
// optional index operands are counted by operandSegmentSizes).

// A gathered, per-edge-type GEMM: out[e] = x[src[e]] @ w[etype[e]].
// CHECK-LABEL: func.func @gemm_gather_etype
// CHECK-SAME: (%[[X:.*]]: memref<?x16xf32>, %[[W:.*]]: memref<3x16x8xf32>, %[[SRC:.*]]: memref<?xi32>, %[[ET:.*]]: memref<?xi32>, %[[OUT:.*]]: memref<?x8xf32>)
func.func @gemm_gather_etype(%x: memref<?x16xf32>, %w: memref<3x16x8xf32>, %src: memref<?xi32>, %etype: memref<?xi32>, %out: memref<?x8xf32>) {
  // CHECK: "hector_intra.gemm_template"(%[[X]], %[[W]], %[[SRC]], %[[ET]], %[[OUT]])
  // CHECK-SAME: block_size = 128 : i64
  // CHECK-SAME: epilogue = "store"
  // CHECK-SAME: operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1>
  // CHECK-SAME: tile_n = 8 : i64
  // CHECK-SAME: : (memref<?x16xf32>, memref<3x16x8xf32>, memref<?xi32>, memref<?xi32>, memref<?x8xf32>) -> ()
  "hector_intra.gemm_template"(%x, %w, %src, %etype, %out) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1>} : (memref<?x16xf32>, memref<3x16x8xf32>, memref<?xi32>, memref<?xi32>, memref<?x8xf32>) -> ()
  return
}

// A shared-weight GEMM accumulated into its output.
// CHECK-LABEL: func.func @gemm_shared_add
func.func @gemm_shared_add(%x: memref<?x16xf32>, %w: memref<16x8xf32>, %out: memref<?x8xf32>) {
  // CHECK: "hector_intra.gemm_template"(%{{[0-9a-z_]+}}, %{{[0-9a-z_]+}}, %{{[0-9a-z_]+}})
  // CHECK-SAME: epilogue = "add"
  // CHECK-SAME: operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>
  "hector_intra.gemm_template"(%x, %w, %out) {variant = "xw", epilogue = "add", tile_n = 4 : i64, block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x16xf32>, memref<16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// Per-edge-type weights scattered with atomic accumulation onto destination rows.
// CHECK-LABEL: func.func @gemm_scatter_atomic
func.func @gemm_scatter_atomic(%x: memref<?x16xf32>, %w: memref<3x16x8xf32>, %etype: memref<?xi32>, %dst: memref<?xi32>, %out: memref<?x8xf32>) {
  // CHECK: "hector_intra.gemm_template"(%{{[0-9a-z_]+}}, %{{[0-9a-z_]+}}, %{{[0-9a-z_]+}}, %{{[0-9a-z_]+}}, %{{[0-9a-z_]+}})
  // CHECK-SAME: epilogue = "atomic_add"
  // CHECK-SAME: operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 0, 1>
  "hector_intra.gemm_template"(%x, %w, %etype, %dst, %out) {variant = "xw", epilogue = "atomic_add", tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 0, 1>} : (memref<?x16xf32>, memref<3x16x8xf32>, memref<?xi32>, memref<?xi32>, memref<?x8xf32>) -> ()
  return
}

// Edge-parallel scale, scattered and summed onto destination nodes.
// CHECK-LABEL: func.func @traversal_edge_scale_sum
// CHECK-SAME: (%[[DST:.*]]: memref<?xi32>, %[[M:.*]]: memref<?x8xf32>, %[[N:.*]]: memref<?x1xf32>, %[[O:.*]]: memref<?x8xf32>)
func.func @traversal_edge_scale_sum(%dst: memref<?xi32>, %m: memref<?x8xf32>, %norm: memref<?x1xf32>, %out: memref<?x8xf32>) {
  // CHECK: "hector_intra.traversal_template"(%[[DST]], %[[M]], %[[N]], %[[O]])
  // CHECK-SAME: block_size = 256 : i64
  // CHECK-SAME: fn = "scale"
  // CHECK-SAME: operandSegmentSizes = array<i32: 0, 1, 0, 1, 1, 1>
  // CHECK-SAME: parallel = "edge"
  // CHECK-SAME: reduce = "sum"
  // CHECK-SAME: : (memref<?xi32>, memref<?x8xf32>, memref<?x1xf32>, memref<?x8xf32>) -> ()
  "hector_intra.traversal_template"(%dst, %m, %norm, %out) {parallel = "edge", fn = "scale", reduce = "sum", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 1, 0, 1, 1, 1>} : (memref<?xi32>, memref<?x8xf32>, memref<?x1xf32>, memref<?x8xf32>) -> ()
  return
}

// Edge-parallel copy with atomic accumulation onto destination nodes.
// CHECK-LABEL: func.func @traversal_edge_copy_atomic
func.func @traversal_edge_copy_atomic(%dst: memref<?xi32>, %m: memref<?x8xf32>, %out: memref<?x8xf32>) {
  // CHECK: "hector_intra.traversal_template"(%{{[0-9a-z_]+}}, %{{[0-9a-z_]+}}, %{{[0-9a-z_]+}})
  // CHECK-SAME: fn = "copy"
  // CHECK-SAME: operandSegmentSizes = array<i32: 0, 1, 0, 1, 0, 1>
  // CHECK-SAME: reduce = "atomic_sum"
  "hector_intra.traversal_template"(%dst, %m, %out) {parallel = "edge", fn = "copy", reduce = "atomic_sum", slope = 0.0 : f32, block_size = 128 : i64, operandSegmentSizes = array<i32: 0, 1, 0, 1, 0, 1>} : (memref<?xi32>, memref<?x8xf32>, memref<?x8xf32>) -> ()
  return
}

// Which edges hold their group's maximum: 1 where x equals y, else 0 (edge_max's gradient).
// CHECK-LABEL: func.func @traversal_edge_eq
func.func @traversal_edge_eq(%x: memref<?x8xf32>, %y: memref<?x8xf32>, %out: memref<?x8xf32>) {
  // CHECK: "hector_intra.traversal_template"(%{{[0-9a-z_]+}}, %{{[0-9a-z_]+}}, %{{[0-9a-z_]+}})
  // CHECK-SAME: fn = "eq"
  // CHECK-SAME: reduce = "none"
  "hector_intra.traversal_template"(%x, %y, %out) {parallel = "edge", fn = "eq", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>} : (memref<?x8xf32>, memref<?x8xf32>, memref<?x8xf32>) -> ()
  return
}

// Edge-parallel gather of source rows onto edges.
// CHECK-LABEL: func.func @traversal_edge_gather
func.func @traversal_edge_gather(%src: memref<?xi32>, %x: memref<?x8xf32>, %out: memref<?x8xf32>) {
  // CHECK: "hector_intra.traversal_template"(%{{[0-9a-z_]+}}, %{{[0-9a-z_]+}}, %{{[0-9a-z_]+}})
  // CHECK-SAME: fn = "copy"
  // CHECK-SAME: operandSegmentSizes = array<i32: 1, 0, 0, 1, 0, 1>
  // CHECK-SAME: reduce = "none"
  "hector_intra.traversal_template"(%src, %x, %out) {parallel = "edge", fn = "copy", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 0, 0, 1, 0, 1>} : (memref<?xi32>, memref<?x8xf32>, memref<?x8xf32>) -> ()
  return
}

// Node-parallel elementwise maps, without indices.
// CHECK-LABEL: func.func @traversal_node
func.func @traversal_node(%a: memref<?x8xf32>, %b: memref<?x8xf32>, %bias: memref<8xf32>, %out: memref<?x8xf32>) {
  // CHECK: "hector_intra.traversal_template"(%{{[0-9a-z_]+}}, %{{[0-9a-z_]+}}, %{{[0-9a-z_]+}})
  // CHECK-SAME: fn = "add"
  // CHECK-SAME: operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>
  // CHECK-SAME: parallel = "node"
  // CHECK-SAME: reduce = "none"
  "hector_intra.traversal_template"(%a, %b, %out) {parallel = "node", fn = "add", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>} : (memref<?x8xf32>, memref<?x8xf32>, memref<?x8xf32>) -> ()
  // CHECK: "hector_intra.traversal_template"(%{{[0-9a-z_]+}}, %{{[0-9a-z_]+}}, %{{[0-9a-z_]+}})
  // CHECK-SAME: fn = "add_bias"
  "hector_intra.traversal_template"(%out, %bias, %out) {parallel = "node", fn = "add_bias", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>} : (memref<?x8xf32>, memref<8xf32>, memref<?x8xf32>) -> ()
  // CHECK: "hector_intra.traversal_template"(%{{[0-9a-z_]+}}, %{{[0-9a-z_]+}})
  // CHECK-SAME: fn = "relu"
  // CHECK-SAME: operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>
  "hector_intra.traversal_template"(%out, %out) {parallel = "node", fn = "relu", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x8xf32>, memref<?x8xf32>) -> ()
  return
}
