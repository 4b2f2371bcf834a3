// RUN: hector-opt %s --split-input-file -p convert-hector-intra-to-gpu | FileCheck %s
// RUN: hector-opt %s --split-input-file -p 'convert-hector-intra-to-gpu, hector-gpu-kernels-on-host' | FileCheck %s --check-prefix=HOST
// RUN: hector-opt %s --split-input-file -p 'convert-hector-intra-to-gpu{tile=true}' | FileCheck %s --check-prefix=AUTO

// A gemm_template with a `schedule` lowers to the shared-memory tiled kernel
// (lowering/gpu/gemm.py): one block per tile_m × tile_n output tile, (tile_m / unroll) ×
// (tile_n / vector) threads each holding an unroll × vector register block (private memory),
// gathered rows of `a` staged in shared memory (workgroup attributions) tile_k columns at a
// time between gpu.barrier's. Without a schedule the template keeps the one-thread-per-row
// kernel.

// ---- RGCN's message GEMM: gathered rows, per-edge weight slices, scattered with a factor ----
// tile 16 × 8, register block 2 × 2: 8 × 4 = 32 threads; K = 16 in two steps of 8.

// CHECK-LABEL: func.func @messages
// CHECK: %[[M:.*]] = memref.dim %arg2, %{{.*}} : memref<?xi32>
// CHECK-NEXT: %[[C15:.*]] = arith.constant 15 : index
// CHECK-NEXT: %[[PAD:.*]] = arith.addi %[[M]], %[[C15]] : index
// CHECK-NEXT: %[[C16:.*]] = arith.constant 16 : index
// CHECK-NEXT: %[[MT:.*]] = arith.divui %[[PAD]], %[[C16]] : index
// CHECK-NEXT: %[[NT:.*]] = arith.constant 1 : index
// CHECK-NEXT: %[[GRID:.*]] = arith.muli %[[MT]], %[[NT]] : index
// CHECK-NEXT: %[[ONE:.*]] = arith.constant 1 : index
// CHECK-NEXT: %[[THREADS:.*]] = arith.constant 32 : index
// CHECK-NEXT: gpu.launch_func @hector_kernels::@messages_0_gemm blocks in (%[[GRID]], %[[ONE]], %[[ONE]]) threads in (%[[THREADS]], %[[ONE]], %[[ONE]])
// CHECK-LABEL: gpu.module @hector_kernels
// CHECK: gpu.func @messages_0_gemm(%[[A:[^:]*]]: memref<?x16xf32>, %[[W:[^:]*]]: memref<3x16x8xf32>, %[[G:[^:]*]]: memref<?xi32>, %[[T:[^:]*]]: memref<?xi32>, %[[S:[^:]*]]: memref<?xi32>, %[[SC:[^:]*]]: memref<?x1xf32>, %[[O:[^:]*]]: memref<?x8xf32>)
// CHECK-SAME: workgroup(%[[AS:.*]] : memref<16x9xf32, #gpu.address_space<workgroup>>, %[[WS:.*]] : memref<8x8xf32, #gpu.address_space<workgroup>>, %[[TS:.*]] : memref<17xi32, #gpu.address_space<workgroup>>)
// CHECK-SAME: private(%[[ACC:.*]] : memref<4xf32, #gpu.address_space<private>>) kernel
//   each row's weight slice recorded in shared memory, then whether the tile shares one
// CHECK: %[[SL:.*]] = memref.load %[[T]][%{{.*}}] : memref<?xi32>
// CHECK: memref.store %{{.*}}, %[[TS]][%{{.*}}] : memref<17xi32, #gpu.address_space<workgroup>>
// CHECK-NEXT: }
// CHECK-NEXT: gpu.barrier
// CHECK: memref.store %{{.*}}, %[[TS]][%{{.*}}] : memref<17xi32, #gpu.address_space<workgroup>>
// CHECK: gpu.barrier
//   the register block starts at zero
// CHECK-COUNT-4: memref.store %{{.*}}, %[[ACC]][%{{.*}}] : memref<4xf32, #gpu.address_space<private>>
//   two steps of tile_k = 8
// CHECK: %[[C2:.*]] = arith.constant 2 : index
// CHECK: scf.for %[[STEP:.*]] = %{{.*}} to %[[C2]] step
//   stage: gathered rows of a (row src[i]) into As, by all 32 threads
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK: %[[R:.*]] = memref.load %[[G]][%{{.*}}] : memref<?xi32>
// CHECK-NEXT: %[[RI:.*]] = arith.index_cast %[[R]] : i32 to index
// CHECK-NEXT: memref.load %[[A]][%[[RI]], %{{.*}}] : memref<?x16xf32>
// CHECK: memref.store %{{.*}}, %[[AS]][%{{.*}}, %{{.*}}] : memref<16x9xf32, #gpu.address_space<workgroup>>
//   the weight tile of the tile's one slice, when its rows share one
// CHECK: %[[UNI:.*]] = memref.load %[[TS]][%{{.*}}] : memref<17xi32, #gpu.address_space<workgroup>>
// CHECK: scf.if
// CHECK: memref.load %[[W]][%{{.*}}, %{{.*}}, %{{.*}}] : memref<3x16x8xf32>
// CHECK: memref.store %{{.*}}, %[[WS]][%{{.*}}, %{{.*}}] : memref<8x8xf32, #gpu.address_space<workgroup>>
// CHECK: gpu.barrier
//   multiply: shared rows × shared weight tile (one slice) ...
// CHECK: scf.if %{{.*}} {
// CHECK: scf.for %{{.*}} iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}) -> (f32, f32, f32, f32)
// CHECK-COUNT-2: memref.load %[[AS]]
// CHECK-COUNT-2: memref.load %[[WS]]
// CHECK-COUNT-4: arith.mulf
//   ... or each row its own slice, read from global memory
// CHECK: } else {
// CHECK-COUNT-2: memref.load %[[TS]]
// CHECK: scf.for
// CHECK-COUNT-2: memref.load %[[AS]]
// CHECK-COUNT-4: memref.load %[[W]]
// CHECK: gpu.barrier
// CHECK-NEXT: }
//   epilogue: row_scale, then an atomic add into the scattered row
// CHECK: memref.load %[[S]]
// CHECK: memref.load %[[SC]]
// CHECK: memref.load %[[ACC]]
// CHECK: arith.mulf
// CHECK: memref.atomic_rmw addf %{{.*}}, %[[O]]
// CHECK: gpu.return

// On the host each block is one call: every run of ops between barriers a loop over the
// block's threads, shared memory one buffer per block, private memory one row per thread.
// HOST-LABEL: func.func @messages
// HOST: call @__grid_messages_0_gemm
// HOST-LABEL: func.func private @__block_messages_0_gemm
// HOST-SAME: (%{{.*}}, %[[BID:[^:]*]]: index, %[[BDIM:[^:]*]]: index)
// HOST: %[[AS:.*]] = memref.alloc() : memref<16x9xf32>
// HOST-NEXT: %[[WS:.*]] = memref.alloc() : memref<8x8xf32>
// HOST-NEXT: %[[TS:.*]] = memref.alloc() : memref<17xi32>
// HOST-NEXT: %[[ACC:.*]] = memref.alloc(%[[BDIM]]) : memref<?x4xf32>
// HOST: scf.for %[[TID:.*]] = %{{.*}} to %[[BDIM]] step
// HOST-NEXT: memref.subview %[[ACC]][%[[TID]], 0] [1, 4] [1, 1]
// HOST-NOT: gpu.barrier
// HOST-NOT: gpu.thread_id
// HOST: memref.dealloc %[[AS]]
// HOST-LABEL: func.func @__grid_messages_0_gemm
// HOST: scf.for %[[B:.*]] = %{{.*}} to %{{.*}} step
// HOST-NEXT: call @__block_messages_0_gemm(%{{.*}}, %[[B]], %{{.*}})
func.func @messages(%x: memref<?x16xf32>, %w: memref<3x16x8xf32>, %src: memref<?xi32>, %et: memref<?xi32>, %dst: memref<?xi32>, %norm: memref<?x1xf32>, %out: memref<?x8xf32>) {
  "hector_intra.gemm_template"(%x, %w, %src, %et, %dst, %norm, %out) {variant = "xw", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64, schedule = {tile_m = 16 : i64, tile_n = 8 : i64, tile_k = 8 : i64, vector = 2 : i64, unroll = 2 : i64, pack = true, parallel = "none", threads = 1 : i64}, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1>} : (memref<?x16xf32>, memref<3x16x8xf32>, memref<?xi32>, memref<?xi32>, memref<?xi32>, memref<?x1xf32>, memref<?x8xf32>) -> ()
  return
}

// -----

// ---- a shared weight, one row per tile (tile_m = 1): nothing to share, so the weight is
// read in place; a plain store. tile_n = 0 (the whole row of 12, in blocks of vector = 4:
// 3 threads), tile_k = 0 (all of K = 5, one step).

// CHECK-LABEL: func.func @linear
// CHECK: %[[C3:.*]] = arith.constant 3 : index
// CHECK-NEXT: gpu.launch_func @hector_kernels::@linear_0_gemm blocks in (%{{.*}}, %{{.*}}, %{{.*}}) threads in (%[[C3]], %{{.*}}, %{{.*}})
// CHECK: gpu.func @linear_0_gemm(%[[A:[^:]*]]: memref<?x5xf32>, %[[W:[^:]*]]: memref<5x12xf32>, %{{.*}}: memref<?x12xf32>)
// CHECK-SAME: workgroup(%[[AS:.*]] : memref<1x5xf32, #gpu.address_space<workgroup>>)
// CHECK-SAME: private(%{{.*}} : memref<4xf32, #gpu.address_space<private>>) kernel
//   one step of all 5 columns, no slice to check
// CHECK-NOT: memref<{{[0-9]+}}xi32, #gpu.address_space<workgroup>>
// CHECK: memref.load %[[A]]
// CHECK: gpu.barrier
// CHECK: memref.load %[[AS]]
// CHECK-COUNT-4: memref.load %[[W]]
// CHECK: gpu.barrier
// CHECK-NOT: atomic
// CHECK: memref.store
// CHECK: gpu.return
func.func @linear(%x: memref<?x5xf32>, %w: memref<5x12xf32>, %out: memref<?x12xf32>) {
  "hector_intra.gemm_template"(%x, %w, %out) {variant = "xw", epilogue = "store", tile_n = 4 : i64, block_size = 64 : i64, schedule = {tile_m = 1 : i64, tile_n = 0 : i64, tile_k = 0 : i64, vector = 4 : i64, unroll = 1 : i64, pack = false, parallel = "none", threads = 1 : i64}, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x5xf32>, memref<5x12xf32>, memref<?x12xf32>) -> ()
  return
}

// -----

// ---- input gradient (xwt): the weight tile is read transposed, weight[t, j, k] ----

// CHECK-LABEL: gpu.func @grad_0_gemm
// CHECK-SAME: %[[W:[^:]*]]: memref<2x8x16xf32>
//   (staging the weight tile, when the rows share a slice)
// CHECK: arith.cmpi ne, %{{.*}}, %{{.*}} : i32
// CHECK: %[[KK:.*]] = arith.remui %[[E:[^,]*]], %{{.*}} : index
// CHECK-NEXT: %{{.*}} = arith.constant 4 : index
// CHECK-NEXT: %[[JJ:.*]] = arith.divui %[[E]], %{{.*}} : index
// CHECK-NEXT: %[[K:.*]] = arith.addi %{{.*}}, %[[KK]] : index
// CHECK-NEXT: %[[J:.*]] = arith.addi %{{.*}}, %[[JJ]] : index
// CHECK: memref.load %[[W]][%{{.*}}, %[[J]], %[[K]]] : memref<2x8x16xf32>
func.func @grad(%dy: memref<?x16xf32>, %w: memref<2x8x16xf32>, %et: memref<?xi32>, %dx: memref<?x8xf32>) {
  "hector_intra.gemm_template"(%dy, %w, %et, %dx) {variant = "xwt", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, schedule = {tile_m = 8 : i64, tile_n = 8 : i64, tile_k = 4 : i64, vector = 1 : i64, unroll = 1 : i64, pack = true, parallel = "none", threads = 1 : i64}, operandSegmentSizes = array<i32: 1, 1, 0, 1, 0, 0, 1>} : (memref<?x16xf32>, memref<2x8x16xf32>, memref<?xi32>, memref<?x8xf32>) -> ()
  return
}

// -----

// ---- the weight gradient (xty) with a schedule: rows still cut into chunks, each chunk's
// partial out[t] = X_rᵀ·G_r computed by blocks of one (chunk, tile_k × tile_n out tile):
// tile_m rows of a (gathered) and of the row gradients staged in shared memory per step,
// 2 × 2 register blocks (4 × 4 = 16 threads, 2 out tiles per chunk), a change of slice flushing the registers into the chunk's own
// partials (no atomics); the ordered reduction over chunks is unchanged. A template without
// a schedule keeps the one-thread-per-row kernel, unless the pass's option `tile` gives it
// the GPU chooser's schedule (gpu_gemm_schedule: for 8 columns, 64-row tiles of 4 × 2
// register blocks, 16 × 4 = 64 threads). Schedules already there stay. ----

// CHECK-LABEL: func.func @weights
// CHECK: %[[P:.*]] = gpu.alloc (%[[C:.*]]) : memref<?x3x16x8xf32>
// CHECK: gpu.memset %[[P]]
// CHECK: %[[TILES:.*]] = arith.constant 2 : index
// CHECK-NEXT: %[[GRID:.*]] = arith.muli %[[C]], %[[TILES]] : index
// CHECK-NEXT: %{{.*}} = arith.constant 16 : index
// CHECK-NEXT: gpu.launch_func @hector_kernels::@weights_0_gemm blocks in (%[[GRID]],
// CHECK: gpu.launch_func @hector_kernels::@weights_0_gemm_reduce
// CHECK: gpu.launch_func @hector_kernels::@weights_1_gemm
// CHECK-LABEL: gpu.module @hector_kernels
// CHECK: gpu.func @weights_0_gemm({{.*}}, %[[PART:[^:]*]]: memref<?x3x16x8xf32>)
// CHECK-SAME: workgroup(%[[XS:.*]] : memref<16x9xf32, #gpu.address_space<workgroup>>, %[[GS:.*]] : memref<16x8xf32, #gpu.address_space<workgroup>>, %[[TS:.*]] : memref<16xi32, #gpu.address_space<workgroup>>)
// CHECK-SAME: private(%[[ACC:.*]] : memref<4xf32, #gpu.address_space<private>>, %[[CUR:.*]] : memref<1xi32, #gpu.address_space<private>>)
// CHECK: memref.store %{{.*}}, %[[CUR]]
// CHECK: scf.for
// CHECK: memref.store %{{.*}}, %[[XS]]
// CHECK: memref.store %{{.*}}, %[[GS]]
// CHECK: memref.store %{{.*}}, %[[TS]]
// CHECK: gpu.barrier
// CHECK: scf.for %[[R:[^ ]*]] = {{.*}} -> (f32, f32, f32, f32, i32)
// CHECK-NEXT: memref.load %[[TS]][%[[R]]]
// CHECK: memref.store %{{.*}}, %[[PART]]
// CHECK: memref.load %[[XS]][%[[R]],
// CHECK: memref.load %[[GS]][%[[R]],
// CHECK: gpu.barrier
// CHECK-NOT: atomic
// CHECK: memref.store %{{.*}}, %[[PART]]
// CHECK: gpu.func @weights_0_gemm_reduce(
// CHECK: gpu.func @weights_1_gemm(
// CHECK-NOT: workgroup
// CHECK-SAME: kernel
// CHECK-NOT: gpu.barrier
// CHECK: gpu.return

// AUTO: gpu.launch_func @hector_kernels::@messages_0_gemm {{.*}} threads in (%c32,
// AUTO: gpu.launch_func @hector_kernels::@weights_1_gemm {{.*}} threads in (%c64{{[_0-9]*}},
// AUTO-LABEL: gpu.func @weights_1_gemm(
// AUTO-SAME: workgroup(%{{.*}} : memref<64x17xf32, #gpu.address_space<workgroup>>, %{{.*}} : memref<16x8xf32, #gpu.address_space<workgroup>>, %{{.*}} : memref<65xi32, #gpu.address_space<workgroup>>)
// AUTO-SAME: private(%{{.*}} : memref<8xf32, #gpu.address_space<private>>)
func.func @weights(%x: memref<?x16xf32>, %dy: memref<?x8xf32>, %src: memref<?xi32>, %et: memref<?xi32>, %dw: memref<3x16x8xf32>, %w: memref<3x16x8xf32>, %out: memref<?x8xf32>) {
  "hector_intra.gemm_template"(%x, %dy, %src, %et, %dw) {variant = "xty", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64, schedule = {tile_m = 16 : i64, tile_n = 8 : i64, tile_k = 8 : i64, vector = 2 : i64, unroll = 2 : i64, pack = true, parallel = "none", threads = 1 : i64}, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1>} : (memref<?x16xf32>, memref<?x8xf32>, memref<?xi32>, memref<?xi32>, memref<3x16x8xf32>) -> ()
  "hector_intra.gemm_template"(%x, %w, %src, %et, %out) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1>} : (memref<?x16xf32>, memref<3x16x8xf32>, memref<?xi32>, memref<?xi32>, memref<?x8xf32>) -> ()
  return
}
