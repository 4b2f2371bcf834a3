// RUN: hector compile %s --emit ptx | FileCheck %s

// Inputs stored in bf16 or f16 on the GPU: each kernel loads 16-bit elements from global memory
// (`ld.global.b16`, half the bytes of f32) and extends them to f32 in registers — a bf16 is the
// top half of an f32 (`shl.b32` by 16), an f16 converts (`cvt.f32.f16`) — in the FMA tiled
// GEMM before they are stored to its shared tiles, which hold f32 (`st.shared.b32`), and
// computes and writes f32 as before. (A scheduled xw/xwt on bf16, or on f16 × f16, multiplies
// on tensor cores from sm_80 on instead: ptx-mma.mlir. f16 features with an f32 weight, as
// @tiled has, keep the FMA kernel.) An elementwise traversal may write a half output: it rounds each
// f32 in registers (bf16: integer add of the rounding bias 0x7FFF, NaN selected as 0x7FC0;
// f16: `cvt.rn.f16.f32`) and stores 16 bits (`st.global.b16`).

// CHECK: .target sm_90
// CHECK-LABEL: .visible .entry tiled_0_gemm(
// CHECK-DAG: .shared .align 4 .b8 __wg_tiled_0_gemm_0[
// CHECK-DAG: ld.global.b16
// CHECK-DAG: cvt.f32.f16
// CHECK-DAG: st.shared.b32
// CHECK-DAG: bar.sync 0;
// CHECK-DAG: fma.rn.f32
// CHECK-DAG: atom.global.add.f32
// CHECK-LABEL: .visible .entry untiled_0_gemm(
// CHECK-DAG: ld.global.b16
// CHECK-DAG: cvt.f32.f16
// CHECK-DAG: atom.global.add.f32
// CHECK-LABEL: .visible .entry grads_0_gemm(
// CHECK-DAG: ld.global.b16
// CHECK-DAG: shl.b32 {{.*}}, 16;
// CHECK-DAG: fma.rn.f32
// CHECK-LABEL: .visible .entry rows_0_traversal(
// CHECK-DAG: ld.global.b16
// CHECK-DAG: cvt.f32.f16
// CHECK-DAG: st.global.b32
// CHECK-NOT: st.global.b16
// CHECK-LABEL: .visible .entry written_bf16_0_traversal(
// CHECK-DAG: ld.global.b32
// CHECK-DAG: add.s32 {{.*}}, 32767;
// CHECK-DAG: selp.b16 {{.*}}, 0x7FC0,
// CHECK-DAG: st.global.b16
// CHECK-NOT: st.global.b32
// CHECK-LABEL: .visible .entry written_f16_0_traversal(
// CHECK-DAG: cvt.rn.f16.f32
// CHECK-DAG: st.global.b16
// CHECK-NOT: st.global.b32
// An xw product stored once per element may write a half output too (hector-half-messages
// makes such buffers on the CPU; the GPU kernels, untiled and tiled, round and store 16 bits).
// CHECK-LABEL: .visible .entry message_bf16_0_gemm(
// CHECK-DAG: add.s32 {{.*}}, 32767;
// CHECK-DAG: selp.b16 {{.*}}, 0x7FC0,
// CHECK-DAG: st.global.b16
// CHECK-NOT: st.global.b32
// CHECK-LABEL: .visible .entry message_tiled_bf16_0_gemm(
// CHECK-DAG: fma.rn.f32
// CHECK-DAG: add.s32 {{.*}}, 32767;
// CHECK-DAG: st.global.b16
// CHECK-NOT: st.global.b32

func.func @tiled(%x: memref<?x64xf16>, %w: memref<4x64x32xf32>, %src: memref<?xi32>, %et: memref<?xi32>, %dst: memref<?xi32>, %norm: memref<?x1xf32>, %out: memref<?x32xf32>) {
  "hector_intra.gemm_template"(%x, %w, %src, %et, %dst, %norm, %out) {variant = "xw", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64, schedule = {tile_m = 32 : i64, tile_n = 32 : i64, tile_k = 16 : i64, vector = 4 : i64, unroll = 4 : i64, pack = true, parallel = "none", threads = 1 : i64}, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1>} : (memref<?x64xf16>, memref<4x64x32xf32>, memref<?xi32>, memref<?xi32>, memref<?xi32>, memref<?x1xf32>, memref<?x32xf32>) -> ()
  return
}
func.func @untiled(%x: memref<?x64xf16>, %w: memref<4x64x32xf32>, %src: memref<?xi32>, %et: memref<?xi32>, %dst: memref<?xi32>, %norm: memref<?x1xf32>, %out: memref<?x32xf32>) {
  "hector_intra.gemm_template"(%x, %w, %src, %et, %dst, %norm, %out) {variant = "xw", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1>} : (memref<?x64xf16>, memref<4x64x32xf32>, memref<?xi32>, memref<?xi32>, memref<?xi32>, memref<?x1xf32>, memref<?x32xf32>) -> ()
  return
}
func.func @grads(%x: memref<?x64xbf16>, %dy: memref<?x32xf32>, %src: memref<?xi32>, %et: memref<?xi32>, %dw: memref<4x64x32xf32>) {
  "hector_intra.gemm_template"(%x, %dy, %src, %et, %dw) {variant = "xty", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64, schedule = {tile_m = 32 : i64, tile_n = 32 : i64, tile_k = 64 : i64, vector = 4 : i64, unroll = 4 : i64, pack = true, parallel = "none", threads = 1 : i64}, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1>} : (memref<?x64xbf16>, memref<?x32xf32>, memref<?xi32>, memref<?xi32>, memref<4x64x32xf32>) -> ()
  return
}
func.func @rows(%x: memref<?x8xf16>, %out: memref<?x8xf32>) {
  "hector_intra.traversal_template"(%x, %out) {parallel = "node", fn = "relu", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x8xf16>, memref<?x8xf32>) -> ()
  return
}
func.func @written_bf16(%x: memref<?x8xf32>, %out: memref<?x8xbf16>) {
  "hector_intra.traversal_template"(%x, %out) {parallel = "node", fn = "relu", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x8xf32>, memref<?x8xbf16>) -> ()
  return
}
func.func @written_f16(%x: memref<?x8xf32>, %out: memref<?x8xf16>) {
  "hector_intra.traversal_template"(%x, %out) {parallel = "node", fn = "copy", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x8xf32>, memref<?x8xf16>) -> ()
  return
}
func.func @message_bf16(%x: memref<?x64xf32>, %w: memref<64x32xf32>, %src: memref<?xi32>, %out: memref<?x32xbf16>) {
  "hector_intra.gemm_template"(%x, %w, %src, %out) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 1>} : (memref<?x64xf32>, memref<64x32xf32>, memref<?xi32>, memref<?x32xbf16>) -> ()
  return
}
func.func @message_tiled_bf16(%x: memref<?x64xf32>, %w: memref<64x32xf32>, %src: memref<?xi32>, %out: memref<?x32xbf16>) {
  "hector_intra.gemm_template"(%x, %w, %src, %out) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, schedule = {tile_m = 32 : i64, tile_n = 32 : i64, tile_k = 16 : i64, vector = 4 : i64, unroll = 4 : i64, pack = true, parallel = "none", threads = 1 : i64}, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 1>} : (memref<?x64xf32>, memref<64x32xf32>, memref<?xi32>, memref<?x32xbf16>) -> ()
  return
}
