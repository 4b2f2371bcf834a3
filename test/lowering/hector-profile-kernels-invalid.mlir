// RUN: hector-opt %s --split-input-file --verify-diagnostics --no-hector-verify -p hector-profile-kernels

// The pass's own checks, without hector-verify (which refuses a dynamic width first).

// A template's work is counted from its static widths: a dynamic one cannot be profiled.
func.func @dynamic_width(%a: memref<?x?xf32>, %w: memref<16x8xf32>, %out: memref<?x8xf32>) {
  // expected-error@+1 {{cannot profile hector_intra.gemm_template: dimension 1 of 'a' (memref<?x?xf32>) must be static to count its work}}
  "hector_intra.gemm_template"(%a, %w, %out) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x?xf32>, memref<16x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

// The pass runs once: a module that already has the counter buffer was profiled before.
// expected-error@+1 {{the module already defines @__hector_kernel_profile: hector-profile-kernels runs once, on unprofiled hector_intra IR}}
memref.global @__hector_kernel_profile : memref<1x4xf64> = dense<0.0>
func.func @f(%x: memref<?x8xf32>, %out: memref<?x8xf32>) {
  "hector_intra.traversal_template"(%x, %out) {parallel = "node", fn = "relu", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x8xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

// The timers call MLIR's rtclock; a module whose own @rtclock is something else is refused.
// expected-error@+1 {{@rtclock is taken: the timers call MLIR's runner-utils clock, 'func.func private @rtclock() -> f64', and the module defines another}}
func.func @rtclock(%x: i32) -> i32 {
  return %x : i32
}
func.func @g(%x: memref<?x8xf32>, %out: memref<?x8xf32>) {
  "hector_intra.traversal_template"(%x, %out) {parallel = "node", fn = "relu", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x8xf32>, memref<?x8xf32>) -> ()
  return
}
