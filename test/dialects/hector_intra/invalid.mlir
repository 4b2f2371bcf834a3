// RUN: hector-opt %s --split-input-file --verify-diagnostics

// One case per IRDL constraint of hector_intra: attribute values and kinds, missing
// attributes, memref operands, no results, and the optional-operand segments.

func.func @gemm_bad_epilogue(%x: memref<?x16xf32>, %w: memref<16x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{'"max"' does not satisfy the constraint}}
  "hector_intra.gemm_template"(%x, %w, %out) {variant = "xw", epilogue = "max", tile_n = 4 : i64, block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x16xf32>, memref<16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

func.func @gemm_missing_epilogue(%x: memref<?x16xf32>, %w: memref<16x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{'hector_intra.gemm_template' op attribute "epilogue" is expected but not provided}}
  "hector_intra.gemm_template"(%x, %w, %out) {variant = "xw", tile_n = 4 : i64, block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x16xf32>, memref<16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

func.func @gemm_missing_tile_n(%x: memref<?x16xf32>, %w: memref<16x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{'hector_intra.gemm_template' op attribute "tile_n" is expected but not provided}}
  "hector_intra.gemm_template"(%x, %w, %out) {variant = "xw", epilogue = "add", block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x16xf32>, memref<16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

func.func @gemm_tile_n_not_integer(%x: memref<?x16xf32>, %w: memref<16x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{expected base attribute 'builtin.integer' but got 'builtin.string'}}
  "hector_intra.gemm_template"(%x, %w, %out) {variant = "xw", epilogue = "add", tile_n = "4", block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x16xf32>, memref<16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

func.func @gemm_block_size_not_integer(%x: memref<?x16xf32>, %w: memref<16x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{expected base attribute 'builtin.integer' but got 'builtin.float'}}
  "hector_intra.gemm_template"(%x, %w, %out) {variant = "xw", epilogue = "add", tile_n = 4 : i64, block_size = 2.5e2 : f32, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x16xf32>, memref<16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

func.func @gemm_tensor_operand(%x: tensor<?x16xf32>, %w: memref<16x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{expected base type 'builtin.memref' but got 'builtin.tensor'}}
  "hector_intra.gemm_template"(%x, %w, %out) {variant = "xw", epilogue = "add", tile_n = 4 : i64, block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (tensor<?x16xf32>, memref<16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

func.func @gemm_tensor_index(%x: memref<?x16xf32>, %w: memref<3x16x8xf32>, %etype: tensor<?xi32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{expected base type 'builtin.memref' but got 'builtin.tensor'}}
  "hector_intra.gemm_template"(%x, %w, %etype, %out) {variant = "xw", epilogue = "store", tile_n = 4 : i64, block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 1, 0, 0, 1>} : (memref<?x16xf32>, memref<3x16x8xf32>, tensor<?xi32>, memref<?x8xf32>) -> ()
  return
}

// -----

func.func @gemm_has_result(%x: memref<?x16xf32>, %w: memref<16x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{op expects exactly 0 results, but got 1}}
  %r = "hector_intra.gemm_template"(%x, %w, %out) {variant = "xw", epilogue = "add", tile_n = 4 : i64, block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x16xf32>, memref<16x8xf32>, memref<?x8xf32>) -> memref<?x8xf32>
  return
}

// -----

func.func @gemm_missing_segments(%x: memref<?x16xf32>, %w: memref<16x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{'operandSegmentSizes' attribute is expected but not provided}}
  "hector_intra.gemm_template"(%x, %w, %out) {variant = "xw", epilogue = "add", tile_n = 4 : i64, block_size = 256 : i64} : (memref<?x16xf32>, memref<16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

func.func @gemm_segments_miscount(%x: memref<?x16xf32>, %w: memref<16x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{sum of elements in 'operandSegmentSizes' attribute must be equal to the number of operands}}
  "hector_intra.gemm_template"(%x, %w, %out) {variant = "xw", epilogue = "add", tile_n = 4 : i64, block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 1>} : (memref<?x16xf32>, memref<16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

func.func @gemm_segments_too_many(%x: memref<?x16xf32>, %w: memref<16x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{'operandSegmentSizes' attribute for specifying operand segments must have 7 elements, but got 8}}
  "hector_intra.gemm_template"(%x, %w, %out) {variant = "xw", epilogue = "add", tile_n = 4 : i64, block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1, 0>} : (memref<?x16xf32>, memref<16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

func.func @gemm_optional_twice(%x: memref<?x16xf32>, %w: memref<16x8xf32>, %i: memref<?xi32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{element 4 in 'operandSegmentSizes' attribute must be equal to 0 or 1}}
  "hector_intra.gemm_template"(%x, %w, %i, %i, %out) {variant = "xw", epilogue = "add", tile_n = 4 : i64, block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 2, 0, 1>} : (memref<?x16xf32>, memref<16x8xf32>, memref<?xi32>, memref<?xi32>, memref<?x8xf32>) -> ()
  return
}

// -----

func.func @traversal_bad_parallel(%x: memref<?x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{'"warp"' does not satisfy the constraint}}
  "hector_intra.traversal_template"(%x, %out) {parallel = "warp", fn = "relu", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

func.func @traversal_bad_fn(%x: memref<?x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{'"softsign"' does not satisfy the constraint}}
  "hector_intra.traversal_template"(%x, %out) {parallel = "node", fn = "softsign", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

func.func @traversal_bad_reduce(%dst: memref<?xi32>, %x: memref<?x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{'"min"' does not satisfy the constraint}}
  "hector_intra.traversal_template"(%dst, %x, %out) {parallel = "edge", fn = "copy", reduce = "min", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 1, 0, 1, 0, 1>} : (memref<?xi32>, memref<?x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

func.func @traversal_missing_reduce(%x: memref<?x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{'hector_intra.traversal_template' op attribute "reduce" is expected but not provided}}
  "hector_intra.traversal_template"(%x, %out) {parallel = "node", fn = "relu", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

func.func @traversal_missing_block_size(%x: memref<?x8xf32>, %out: memref<?x8xf32>) {
  // expected-error @+1 {{'hector_intra.traversal_template' op attribute "block_size" is expected but not provided}}
  "hector_intra.traversal_template"(%x, %out) {parallel = "node", fn = "relu", reduce = "none", slope = 0.0 : f32, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

func.func @traversal_tensor_out(%x: memref<?x8xf32>, %out: tensor<?x8xf32>) {
  // expected-error @+1 {{expected base type 'builtin.memref' but got 'builtin.tensor'}}
  "hector_intra.traversal_template"(%x, %out) {parallel = "node", fn = "relu", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x8xf32>, tensor<?x8xf32>) -> ()
  return
}

// -----

func.func @traversal_missing_out(%x: memref<?x8xf32>) {
  // expected-error @+1 {{sum of elements in 'operandSegmentSizes' attribute must be equal to the number of operands}}
  "hector_intra.traversal_template"(%x) {parallel = "node", fn = "relu", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x8xf32>) -> ()
  return
}
