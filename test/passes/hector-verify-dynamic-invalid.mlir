// RUN: hector-opt %s --split-input-file --verify-diagnostics --no-hector-verify -p hector-verify
// RUN: hector-opt %s --split-input-file --verify-diagnostics -p hector-lower-cpu

// Only rows may be dynamic: dimension 0 of a node-wise, edge-wise or compact tensor (of rank 2
// or more). Feature widths, vectors and every dimension of a weight are static: the templates
// are built for their widths (tiles, vector lanes, loop bounds).

func.func @dynamic_width(%g: !hector_inter.graph, %x: tensor<?x?xf32>) -> tensor<?x?xf32> {
  // expected-error @+1 {{operand 'x': dimension 1 of tensor<?x?xf32> must be static (only the rows, dimension 0 of rank 2 or more, may be dynamic: the templates are built for static widths)}}
  %0 = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x?xf32>) -> tensor<?x?xf32>
  return %0 : tensor<?x?xf32>
}

// -----

func.func @dynamic_result_width(%x: tensor<?x8xf32>) -> tensor<?x?xf32> {
  // expected-error @+1 {{result #0: dimension 1 of tensor<?x?xf32> must be static}}
  %0 = "hector_inter.unary"(%x) {fn = "relu", slope = 0.0 : f32} : (tensor<?x8xf32>) -> tensor<?x?xf32>
  return %0 : tensor<?x?xf32>
}

// -----

func.func @dynamic_slices(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: tensor<?x16x8xf32>) -> tensor<?x8xf32> {
  %0 = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  // expected-error @+1 {{weight: every dimension of tensor<?x16x8xf32> must be static (a weight has no rows)}}
  %1 = "hector_inter.typed_linear"(%g, %0, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<?x16x8xf32>) -> tensor<?x8xf32>
  return %1 : tensor<?x8xf32>
}

// -----

func.func @dynamic_weight_rows(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: tensor<?x8xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{weight: every dimension of tensor<?x8xf32> must be static (a weight has no rows)}}
  %0 = "hector_inter.typed_linear"(%g, %x, %w) {slice = "none"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

func.func @dynamic_bias(%x: tensor<?x8xf32>, %b: tensor<?xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{bias: every dimension of tensor<?xf32> must be static (a weight has no rows)}}
  %0 = "hector_inter.add"(%x, %b) : (tensor<?x8xf32>, tensor<?xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

func.func @dynamic_weight_grad(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %dy: tensor<?x8xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{result: every dimension of tensor<?x8xf32> must be static (a weight has no rows)}}
  %0 = "hector_inter.typed_linear_weight_grad"(%g, %x, %dy) {slice = "none"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

func.func @intra_dynamic_width(%x: memref<?x?xf32>, %w: memref<16x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{operand 'a': dimension 1 of memref<?x?xf32> must be static}}
  "hector_intra.gemm_template"(%x, %w, %out) {block_size = 256 : i64, epilogue = "store", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, tile_n = 8 : i64, variant = "xw"} : (memref<?x?xf32>, memref<16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

func.func @intra_dynamic_weight(%x: memref<?x16xf32>, %w: memref<?x16x8xf32>, %et: memref<?xi32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{weight: every dimension of memref<?x16x8xf32> must be static (a weight has no rows)}}
  "hector_intra.gemm_template"(%x, %w, %et, %out) {block_size = 256 : i64, epilogue = "store", operandSegmentSizes = array<i32: 1, 1, 0, 1, 0, 0, 1>, tile_n = 8 : i64, variant = "xw"} : (memref<?x16xf32>, memref<?x16x8xf32>, memref<?xi32>, memref<?x8xf32>) -> ()
  return
}

// -----

func.func @intra_dynamic_weight_gradient(%x: memref<?x16xf32>, %dy: memref<?x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{out: every dimension of memref<?x8xf32> must be static (a weight has no rows)}}
  "hector_intra.gemm_template"(%x, %dy, %out) {block_size = 256 : i64, epilogue = "add", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>, tile_n = 8 : i64, variant = "xty"} : (memref<?x16xf32>, memref<?x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

func.func @intra_dynamic_sum(%x: memref<?x8xf32>, %out: memref<?xf32>) {
  // expected-error @+1 {{operand 'out': dimension 0 of memref<?xf32> must be static}}
  "hector_intra.traversal_template"(%x, %out) {parallel = "node", fn = "copy", reduce = "sum", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x8xf32>, memref<?xf32>) -> ()
  return
}
