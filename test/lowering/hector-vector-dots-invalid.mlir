// RUN: hector-opt %s --split-input-file --verify-diagnostics -p hector-vector-dots

// Malformed input is refused before the pass runs, at the op's location: a vector_dot mark on
// a traversal that is not a per-head dot, and a dot whose output is not [rows, heads].
func.func @marked_copy(%m: memref<?x32xf32>, %out: memref<?x32xf32>) {
  // expected-error @+1 {{hector.vector_dot needs fn = "dot" and reduce = "none"}}
  "hector_intra.traversal_template"(%m, %out) {fn = "copy", reduce = "none", parallel = "edge", block_size = 128 : i64, slope = 0.0 : f32, hector.vector_dot, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x32xf32>, memref<?x32xf32>) -> ()
  return
}

// -----

func.func @dot_of_rank_one(%k: memref<?x64xf32>, %q: memref<?x64xf32>, %dst: memref<?xi32>, %res: memref<?xf32>) {
  // expected-error @+1 {{out must have rank 2, got rank 1}}
  "hector_intra.traversal_template"(%dst, %k, %q, %res) {fn = "dot", reduce = "none", parallel = "edge", block_size = 256 : i64, slope = 0.0 : f32, operandSegmentSizes = array<i32: 0, 0, 1, 1, 1, 1>} : (memref<?xi32>, memref<?x64xf32>, memref<?x64xf32>, memref<?xf32>) -> ()
  return
}
