// RUN: hector-opt %s -p 'convert-hector-intra-to-gpu{mma=true}' | FileCheck %s
// RUN: hector-opt %s -p convert-hector-intra-to-gpu | FileCheck %s --check-prefix=NOMMA
// RUN: hector-opt %s -p 'convert-hector-intra-to-gpu{mma=true}, hector-gpu-kernels-on-host' | FileCheck %s --check-prefix=HOST

// With `mma=true` (the GPU stage for sm_80 and newer) a scheduled xw/xwt GEMM on bf16 (or
// bf16 and f32) or f16 operands lowers to the tensor-core kernel (lowering/gpu/mma.py): one
// block per output tile of whole 16 × 8 fragments, one warp per 32 × 32 of it (a 64 × 32 tile:
// 2 × 1 warps, 64 threads, 2 × 4 fragments = 32 accumulators per thread), the operands staged
// in shared memory as 16-bit values (rows padded by 8), each fragment an nvgpu.mma.sync
// m16n8k16 into f32. Rows of another weight slice than the tile's first row's go through
// f32 FMAs (fastmath<contract>) on the same 16-bit values. f32 GEMMs keep the FMA kernel;
// without `mma=true` every GEMM does.

// CHECK-LABEL: func.func @messages
// CHECK: %[[GRID:.*]] = arith.muli
// CHECK-NEXT: %[[ONE:.*]] = arith.constant 1 : index
// CHECK-NEXT: %[[THREADS:.*]] = arith.constant 64 : index
// CHECK-NEXT: gpu.launch_func @hector_kernels::@messages_0_gemm blocks in (%[[GRID]], %[[ONE]], %[[ONE]]) threads in (%[[THREADS]], %[[ONE]], %[[ONE]])
// CHECK-LABEL: func.func @plain_f32
// CHECK-LABEL: gpu.module @hector_kernels
// CHECK: gpu.func @messages_0_gemm(
// CHECK-SAME: workgroup(%{{.*}} : memref<64x40xbf16, #gpu.address_space<workgroup>>, %{{.*}} : memref<32x40xbf16, #gpu.address_space<workgroup>>, %{{.*}} : memref<64xi32, #gpu.address_space<workgroup>>)
// CHECK-SAME: private(%{{.*}} : memref<32xf32, #gpu.address_space<private>>) kernel
// CHECK: gpu.barrier
// CHECK: scf.for
// CHECK: gpu.barrier
// CHECK: %[[A:.*]] = vector.from_elements {{.*}} : vector<4x2xbf16>
// CHECK: %[[B:.*]] = vector.from_elements {{.*}} : vector<2x2xbf16>
// CHECK: %[[C:.*]] = vector.from_elements {{.*}} : vector<2x2xf32>
// CHECK: nvgpu.mma.sync(%[[A]], %[[B]], %[[C]]) {mmaShape = [16, 8, 16]} : (vector<4x2xbf16>, vector<2x2xbf16>, vector<2x2xf32>) -> vector<2x2xf32>
// CHECK-COUNT-15: nvgpu.mma.sync
// CHECK-NOT: nvgpu.mma.sync
// CHECK: arith.mulf {{.*}} fastmath<contract>
// CHECK: gpu.barrier
// CHECK: memref.atomic_rmw addf
// CHECK: gpu.func @plain_f32_0_gemm(
// CHECK-NOT: nvgpu.mma.sync
// CHECK: gpu.return

// NOMMA-NOT: nvgpu.mma.sync

// On the host each MMA is a software m16n8k16 between two barriers (lowering/gpu/mma_on_host.py):
// fragments into a [threads, 20] scratch, each thread's 4 results summed over 16 steps, read back.
// The f32-to-bf16 rounding LLVM calls where the CPU has no instruction for it, defined:
// HOST-LABEL: func.func @__truncsfbf2(%{{.*}}: f32) -> bf16
// HOST: arith.cmpf uno
// HOST: arith.bitcast %{{.*}} : i16 to bf16
// HOST-LABEL: func.func private @__block_messages_0_gemm
// HOST: memref.alloc(%{{.*}}) : memref<?x20xf32>
// HOST-NOT: nvgpu.mma.sync
// HOST: scf.for %{{.*}} = %c0{{.*}} to %c16{{.*}} step %c1{{.*}} iter_args
// HOST-NOT: nvgpu.mma.sync
// HOST-NOT: gpu.barrier

func.func @messages(%x: memref<?x64xbf16>, %w: memref<4x64x32xbf16>, %src: memref<?xi32>, %et: memref<?xi32>, %dst: memref<?xi32>, %out: memref<?x32xf32>) {
  "hector_intra.gemm_template"(%x, %w, %src, %et, %dst, %out) {variant = "xw", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64, schedule = {tile_m = 64 : i64, tile_n = 32 : i64, tile_k = 32 : i64, vector = 4 : i64, unroll = 4 : i64}, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 1>} : (memref<?x64xbf16>, memref<4x64x32xbf16>, memref<?xi32>, memref<?xi32>, memref<?xi32>, memref<?x32xf32>) -> ()
  return
}
func.func @plain_f32(%x: memref<?x64xf32>, %w: memref<64x32xf32>, %out: memref<?x32xf32>) {
  "hector_intra.gemm_template"(%x, %w, %out) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, schedule = {tile_m = 32 : i64, tile_n = 32 : i64, tile_k = 16 : i64, vector = 4 : i64, unroll = 4 : i64}, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x64xf32>, memref<64x32xf32>, memref<?x32xf32>) -> ()
  return
}
