// RUN: hector compile %s --emit ptx | FileCheck %s --check-prefixes=CHECK,MMA,SM90
// RUN: hector compile %s --emit ptx --chip sm_80 | FileCheck %s --check-prefixes=CHECK,MMA,SM80
// RUN: hector compile %s --emit ptx --chip sm_75 | FileCheck %s --check-prefixes=CHECK,FMA

// Tensor cores for scheduled GEMMs on 16-bit operands (lowering/gpu/mma.py): on sm_80 and
// newer the GPU stage is convert-hector-intra-to-gpu{mma=true}, and a scheduled xw/xwt whose
// operands are bf16 (or bf16 and f32, the f32 rounded as it is staged) or both f16 multiplies
// with mma.sync m16n8k16 into f32 accumulators, its tiles staged as 16-bit values in shared
// memory (st.shared.b16), each fragment register (two adjacent 16-bit values) loaded as one
// 32-bit word (ld.shared.b32), no spill to local memory. On sm_75 the same templates keep the FMA kernel
// (tiles in f32, fma.rn.f32); f32 operands and unscheduled templates keep theirs everywhere.

// SM90: .target sm_90
// SM80: .target sm_80
// FMA: .target sm_75

// CHECK-LABEL: .visible .entry bf16_0_gemm(
// CHECK-NOT: .local
// MMA: st.shared.b16
// MMA: bar.sync 0;
// MMA: ld.shared.b32
// MMA: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// MMA: atom.global.add.f32
// FMA-NOT: mma.sync
// FMA: fma.rn.f32
// FMA: atom.global.add.f32

// CHECK-LABEL: .visible .entry bf16_f32_weight_0_gemm(
// MMA: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// FMA-NOT: mma.sync
// FMA: fma.rn.f32

// CHECK-LABEL: .visible .entry f16_0_gemm(
// MMA: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
// FMA-NOT: mma.sync
// FMA: fma.rn.f32

// CHECK-LABEL: .visible .entry f32_0_gemm(
// CHECK-NOT: mma.sync
// CHECK: fma.rn.f32
// CHECK-NOT: mma.sync

// CHECK-LABEL: .visible .entry untiled_bf16_0_gemm(
// CHECK-NOT: mma.sync
// CHECK-NOT: bar.sync
// CHECK: atom.global.add.f32
// CHECK-NOT: mma.sync

func.func @bf16(%x: memref<?x64xbf16>, %w: memref<4x64x32xbf16>, %src: memref<?xi32>, %et: memref<?xi32>, %dst: memref<?xi32>, %norm: memref<?x1xf32>, %out: memref<?x32xf32>) {
  "hector_intra.gemm_template"(%x, %w, %src, %et, %dst, %norm, %out) {variant = "xw", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64, schedule = {tile_m = 64 : i64, tile_n = 32 : i64, tile_k = 32 : i64, vector = 4 : i64, unroll = 4 : i64, pack = true, parallel = "none", threads = 1 : i64}, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1>} : (memref<?x64xbf16>, memref<4x64x32xbf16>, memref<?xi32>, memref<?xi32>, memref<?xi32>, memref<?x1xf32>, memref<?x32xf32>) -> ()
  return
}
func.func @bf16_f32_weight(%dy: memref<?x32xbf16>, %w: memref<4x64x32xf32>, %et: memref<?xi32>, %dx: memref<?x64xf32>) {
  "hector_intra.gemm_template"(%dy, %w, %et, %dx) {variant = "xwt", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, schedule = {tile_m = 32 : i64, tile_n = 64 : i64, tile_k = 32 : i64, vector = 4 : i64, unroll = 4 : i64, pack = true, parallel = "none", threads = 1 : i64}, operandSegmentSizes = array<i32: 1, 1, 0, 1, 0, 0, 1>} : (memref<?x32xbf16>, memref<4x64x32xf32>, memref<?xi32>, memref<?x64xf32>) -> ()
  return
}
func.func @f16(%x: memref<?x48xf16>, %w: memref<48x24xf16>, %out: memref<?x24xf32>) {
  "hector_intra.gemm_template"(%x, %w, %out) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, schedule = {tile_m = 32 : i64, tile_n = 24 : i64, tile_k = 16 : i64, vector = 4 : i64, unroll = 4 : i64, pack = true, parallel = "none", threads = 1 : i64}, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x48xf16>, memref<48x24xf16>, memref<?x24xf32>) -> ()
  return
}
func.func @f32(%x: memref<?x64xf32>, %w: memref<64x32xf32>, %out: memref<?x32xf32>) {
  "hector_intra.gemm_template"(%x, %w, %out) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, schedule = {tile_m = 32 : i64, tile_n = 32 : i64, tile_k = 16 : i64, vector = 4 : i64, unroll = 4 : i64, pack = true, parallel = "none", threads = 1 : i64}, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x64xf32>, memref<64x32xf32>, memref<?x32xf32>) -> ()
  return
}
func.func @untiled_bf16(%x: memref<?x64xbf16>, %w: memref<4x64x32xbf16>, %src: memref<?xi32>, %et: memref<?xi32>, %dst: memref<?xi32>, %out: memref<?x32xf32>) {
  "hector_intra.gemm_template"(%x, %w, %src, %et, %dst, %out) {variant = "xw", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 1>} : (memref<?x64xbf16>, memref<4x64x32xbf16>, memref<?xi32>, memref<?xi32>, memref<?xi32>, memref<?x32xf32>) -> ()
  return
}
