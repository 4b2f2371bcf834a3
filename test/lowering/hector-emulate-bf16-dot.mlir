// RUN: hector-opt %s -p hector-emulate-bf16-dot | FileCheck %s
// RUN: hector-opt %s -p "hector-emulate-bf16-dot, hector-lower-llvm-cpu" | FileCheck %s --check-prefix=LLVM
// RUN: hector-opt %s -p "hector-schedule{threads=2 bf16_dot=true}, hector-outline-templates, convert-hector-intra-to-scf, hector-emulate-bf16-dot, hector-lower-llvm-cpu" | FileCheck %s --check-prefix=GEMM

// hector-emulate-bf16-dot (lowering/cpu/bf16_emulation.py, HECTOR_BF16_DOT=emulate): each
// vdpbf16ps becomes f32 vector arithmetic with its results: the pairs' odd (high) and even
// (low) halves widened by integer shifts and masks, subnormals read as zero, the odd product
// added first, then the even one; each rounding of f32 to bf16 (vcvtneps2bf16) becomes the
// integer rounding to the nearest even.

// CHECK-LABEL: func.func @dot
// CHECK-NOT: x86vector.avx512.dot
// CHECK: vector.bitcast %{{.*}} : vector<32xbf16> to vector<16xi32>
// CHECK: arith.shli %{{.*}} : vector<16xi32>
// CHECK: %[[AL:.*]] = arith.bitcast %{{.*}} : vector<16xi32> to vector<16xf32>
// CHECK: %[[AH:.*]] = arith.bitcast %{{.*}} : vector<16xi32> to vector<16xf32>
// CHECK: vector.bitcast %{{.*}} : vector<32xbf16> to vector<16xi32>
// CHECK: %[[BL:.*]] = arith.bitcast %{{.*}} : vector<16xi32> to vector<16xf32>
// CHECK: %[[BH:.*]] = arith.bitcast %{{.*}} : vector<16xi32> to vector<16xf32>
// CHECK: %[[ACC:.*]] = arith.bitcast %{{.*}} : vector<16xi32> to vector<16xf32>
// CHECK: %[[HIGH:.*]] = arith.mulf %[[AH]], %[[BH]] : vector<16xf32>
// CHECK: arith.addf %[[ACC]], %[[HIGH]] : vector<16xf32>
// CHECK: %[[ODD:.*]] = arith.bitcast %{{.*}} : vector<16xi32> to vector<16xf32>
// CHECK: %[[LOW:.*]] = arith.mulf %[[AL]], %[[BL]] : vector<16xf32>
// CHECK: arith.addf %[[ODD]], %[[LOW]] : vector<16xf32>
// CHECK-NOT: x86vector.avx512.dot
// CHECK: return
// LLVM-LABEL: llvm.func @dot
// LLVM-NOT: dpbf16ps
// LLVM: llvm.fmul %{{.*}} : vector<16xf32>
// LLVM-NOT: dpbf16ps
// LLVM: llvm.return
func.func @dot(%acc: vector<16xf32>, %a: vector<32xbf16>, %b: vector<32xbf16>) -> vector<16xf32> {
  %0 = x86vector.avx512.dot %acc, %a, %b : vector<32xbf16> -> vector<16xf32>
  return %0 : vector<16xf32>
}

// CHECK-LABEL: func.func @rounding
// CHECK-NOT: arith.truncf
// CHECK: arith.constant dense<32767> : vector<16xi32>
// CHECK: arith.cmpf uno
// CHECK: arith.trunci %{{.*}} : vector<16xi32> to vector<16xi16>
// CHECK: arith.bitcast %{{.*}} : vector<16xi16> to vector<16xbf16>
// CHECK-NOT: arith.truncf
// CHECK: return
// The f16 rounding stays (vcvtps2ph is AVX2's F16C).
// CHECK-LABEL: func.func @f16_rounding
// CHECK: arith.truncf %{{.*}} : vector<16xf32> to vector<16xf16>
func.func @rounding(%x: vector<16xf32>) -> vector<16xbf16> {
  %0 = arith.truncf %x : vector<16xf32> to vector<16xbf16>
  return %0 : vector<16xbf16>
}
func.func @f16_rounding(%x: vector<16xf32>) -> vector<16xf16> {
  %0 = arith.truncf %x : vector<16xf32> to vector<16xf16>
  return %0 : vector<16xf16>
}

// A scheduled GEMM of bf16 pairs lowers to LLVM without AVX512-BF16's intrinsics.
// GEMM-LABEL: llvm.func @linear_template0
// GEMM-NOT: avx512bf16
// GEMM: llvm.fmul %{{.*}} : vector<16xf32>
// GEMM-NOT: avx512bf16
// GEMM: llvm.return
func.func @linear(%x: memref<?x32xbf16>, %w: memref<32x64xbf16>, %out: memref<?x64xbf16>) {
  "hector_intra.gemm_template"(%x, %w, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>}
      : (memref<?x32xbf16>, memref<32x64xbf16>, memref<?x64xbf16>) -> ()
  return
}
