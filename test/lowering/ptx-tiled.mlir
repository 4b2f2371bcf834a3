// RUN: hector compile %s --emit ptx | FileCheck %s

// The tiled GEMM in PTX for sm_90: its shared-memory tiles are `.shared` arrays, the gathered
// rows of `a` and the weight tile are stored there (`st.shared`) and multiplied from there
// (`ld.shared`) between `bar.sync`s; the register block stays in registers (no `.local`).
// Its multiply-adds are FMAs (fastmath<contract>); the untiled kernel keeps mul + add.
// The same template without a schedule is the one-thread-per-row kernel: no shared memory,
// no barrier.

// CHECK: .target sm_90
// CHECK-LABEL: .visible .entry tiled_0_gemm(
// CHECK-NOT: .local
// CHECK: .shared .align 4 .b8 __wg_tiled_0_gemm_0[2176];
// CHECK: .shared .align 4 .b8 __wg_tiled_0_gemm_1[2048];
// CHECK: .shared .align 4 .b8 __wg_tiled_0_gemm_2[132];
// CHECK-NOT: .local
// CHECK: st.shared.b32
// CHECK-NOT: .local
// CHECK: bar.sync 0;
// CHECK-NOT: .local
// CHECK: ld.shared.b32
// CHECK-NOT: .local
// CHECK: fma.rn.f32
// CHECK-NOT: .local
// CHECK: atom.global.add.f32
// CHECK-LABEL: .visible .entry untiled_0_gemm(
// CHECK-NOT: .shared
// CHECK-NOT: bar.sync
// CHECK-NOT: fma.rn.f32
// CHECK: atom.global.add.f32

// The weight gradient's tiled partials: shared tiles and barriers, FMAs, no atomics (each
// thread owns its partial); then the ordered reduction over chunks.
// CHECK-LABEL: .visible .entry grads_0_gemm(
// CHECK-NOT: .local
// CHECK: .shared .align 4 .b8 __wg_grads_0_gemm_0[
// CHECK-NOT: atom.
// CHECK: bar.sync 0;
// CHECK-NOT: atom.
// CHECK: fma.rn.f32
// CHECK-NOT: atom.
// CHECK-LABEL: .visible .entry grads_0_gemm_reduce(
// CHECK-NOT: .entry

func.func @tiled(%x: memref<?x64xf32>, %w: memref<4x64x32xf32>, %src: memref<?xi32>, %et: memref<?xi32>, %dst: memref<?xi32>, %norm: memref<?x1xf32>, %out: memref<?x32xf32>) {
  "hector_intra.gemm_template"(%x, %w, %src, %et, %dst, %norm, %out) {variant = "xw", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64, schedule = {tile_m = 32 : i64, tile_n = 32 : i64, tile_k = 16 : i64, vector = 4 : i64, unroll = 4 : i64, pack = true, parallel = "none", threads = 1 : i64}, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1>} : (memref<?x64xf32>, memref<4x64x32xf32>, memref<?xi32>, memref<?xi32>, memref<?xi32>, memref<?x1xf32>, memref<?x32xf32>) -> ()
  return
}
func.func @untiled(%x: memref<?x64xf32>, %w: memref<4x64x32xf32>, %src: memref<?xi32>, %et: memref<?xi32>, %dst: memref<?xi32>, %norm: memref<?x1xf32>, %out: memref<?x32xf32>) {
  "hector_intra.gemm_template"(%x, %w, %src, %et, %dst, %norm, %out) {variant = "xw", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1>} : (memref<?x64xf32>, memref<4x64x32xf32>, memref<?xi32>, memref<?xi32>, memref<?xi32>, memref<?x1xf32>, memref<?x32xf32>) -> ()
  return
}
func.func @grads(%x: memref<?x64xf32>, %dy: memref<?x32xf32>, %src: memref<?xi32>, %et: memref<?xi32>, %dw: memref<4x64x32xf32>) {
  "hector_intra.gemm_template"(%x, %dy, %src, %et, %dw) {variant = "xty", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64, schedule = {tile_m = 32 : i64, tile_n = 32 : i64, tile_k = 64 : i64, vector = 4 : i64, unroll = 4 : i64, pack = true, parallel = "none", threads = 1 : i64}, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1>} : (memref<?x64xf32>, memref<?x32xf32>, memref<?xi32>, memref<?xi32>, memref<4x64x32xf32>) -> ()
  return
}
