// RUN: hector-opt %s --split-input-file --verify-diagnostics --no-hector-verify -p hector-verify
// RUN: hector-opt %s --split-input-file --verify-diagnostics --no-hector-verify -p convert-hector-inter-to-intra
// RUN: hector-opt %s --split-input-file --verify-diagnostics --no-hector-verify -p hector-schedule
// RUN: hector-opt %s --split-input-file --verify-diagnostics --no-hector-verify -p convert-hector-intra-to-scf
// RUN: hector-opt %s --split-input-file --verify-diagnostics --no-hector-verify -p hector-outline-templates
// RUN: hector-opt %s --split-input-file --verify-diagnostics --no-hector-verify -p convert-hector-intra-to-gpu
// RUN: hector-opt %s --split-input-file --verify-diagnostics -p hector-lower-cpu

// Types whose static sizes overflow 64-bit sizes and strides: MLIR's strided-layout code would
// abort the process on them (an assertion, no diagnostic). hector-verify refuses each type once,
// where it first appears, and every Hector pass checks its input the same way before it runs,
// so --no-hector-verify cannot carry such a type into a lowering.

// expected-error @+2 {{argument #2 of 'func.func': type tensor<3x4294967296x4294967296xf32> is too large for 64-bit sizes and strides: its static dimensions hold 55340232221128654848 elements of 4 bytes, more than 2^63 - 1 bytes}}
// expected-error @+1 {{argument #3 of 'func.func': type tensor<4294967296x4294967296xf32> is too large}}
func.func @rgcn_layer(%g: !hector_inter.graph, %x: tensor<?x4294967296xf32>, %w: tensor<3x4294967296x4294967296xf32>, %w0: tensor<4294967296x4294967296xf32>) -> tensor<?x4294967296xf32> {
  %0 = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x4294967296xf32>) -> tensor<?x4294967296xf32>
  %1 = "hector_inter.typed_linear"(%g, %0, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x4294967296xf32>, tensor<3x4294967296x4294967296xf32>) -> tensor<?x4294967296xf32>
  %2 = "hector_inter.sum_to_dst"(%g, %1) : (!hector_inter.graph, tensor<?x4294967296xf32>) -> tensor<?x4294967296xf32>
  %3 = "hector_inter.typed_linear"(%g, %x, %w0) {slice = "none"} : (!hector_inter.graph, tensor<?x4294967296xf32>, tensor<4294967296x4294967296xf32>) -> tensor<?x4294967296xf32>
  %4 = "hector_inter.add"(%2, %3) : (tensor<?x4294967296xf32>, tensor<?x4294967296xf32>) -> tensor<?x4294967296xf32>
  return %4 : tensor<?x4294967296xf32>
}

// -----

// The result of an op: a width of 2^62 f32 is 2^64 bytes per row.
func.func @wide_result(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: tensor<16x1xf32>) -> tensor<?x1xf32> {
  %0 = "hector_inter.typed_linear"(%g, %x, %w) {slice = "none"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<16x1xf32>) -> tensor<?x1xf32>
  // expected-error @+1 {{result #0 of 'hector_inter.unary': type tensor<?x4611686018427387904xf32> is too large for 64-bit sizes and strides: its static dimensions hold 4611686018427387904 elements of 4 bytes, more than 2^63 - 1 bytes}}
  %1 = "hector_inter.unary"(%0) {fn = "relu", slope = 0.0 : f32} : (tensor<?x1xf32>) -> tensor<?x4611686018427387904xf32>
  return %0 : tensor<?x1xf32>
}

// -----

// A zero dimension does not make the rest fit: MLIR's canonical strides multiply them anyway.
// expected-error @+1 {{argument #0 of 'func.func': type memref<0x4294967296x4294967296xf32> is too large}}
func.func @zero_rows(%x: memref<0x4294967296x4294967296xf32>) {
  return
}

// -----

// An explicit strided layout whose farthest element lies past 2^63 - 1 bytes.
// expected-error @+1 {{argument #0 of 'func.func': type memref<4x4xf32, strided<[4611686018427387904, 1]>> is too large for 64-bit offsets and strides: its layout reaches past 2^63 - 1 bytes}}
func.func @far_stride(%x: memref<4x4xf32, strided<[4611686018427387904, 1]>>, %out: memref<4x4xf32>) {
  "hector_intra.traversal_template"(%x, %out) {parallel = "node", fn = "relu", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<4x4xf32, strided<[4611686018427387904, 1]>>, memref<4x4xf32>) -> ()
  return
}

// -----

// Bytes count, not elements: 2^61 f64 elements are 2^64 bytes.
// expected-error @+1 {{argument #0 of 'func.func': type memref<2305843009213693952xf64> is too large for 64-bit sizes and strides: its static dimensions hold 2305843009213693952 elements of 8 bytes}}
func.func private @declared(memref<2305843009213693952xf64>)

// -----

// Nested regions and their block arguments are checked too.
func.func @nested(%n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {
    // expected-error @+1 {{result #0 of 'memref.alloc': type memref<?x4611686018427387904x4xf32> is too large}}
    %a = memref.alloc(%n) : memref<?x4611686018427387904x4xf32>
    memref.dealloc %a : memref<?x4611686018427387904x4xf32>
  }
  return
}
