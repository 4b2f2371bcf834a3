// RUN: hector-opt %s -p "hector-schedule{threads=2 bf16_dot=true}" | FileCheck %s
// RUN: hector-opt %s -p "hector-schedule{threads=2}" | FileCheck %s --check-prefix=F32
// RUN: hector-opt %s -p "hector-schedule{threads=2 bf16_dot=true}, hector-outline-templates, convert-hector-intra-to-scf" | FileCheck %s --check-prefix=LOOPS
// RUN: hector-opt %s -p "hector-schedule{threads=2 bf16_dot=true}, hector-outline-templates, convert-hector-intra-to-scf, hector-lower-llvm-cpu" | FileCheck %s --check-prefix=LLVM
// RUN: hector-opt %s -p "hector-schedule{threads=2}, hector-outline-templates, convert-hector-intra-to-scf, hector-lower-llvm-cpu" | FileCheck %s --check-prefix=LLVM-F32

// bf16 products (lowering/cpu/bf16.py): where the CPU has AVX512-BF16 (hector.compile passes
// bf16_dot=true), a packed GEMM with an operand stored in bf16, or in a function taking a bf16
// argument, multiplies bf16 pairs into f32
// accumulators (x86vector.avx512.dot, vdpbf16ps) in 4 x 64 register blocks (16 vectors of
// accumulators); without the option, or with no bf16 operand, it stays on the f32 FMAs.

// CHECK-LABEL: func.func @messages
// CHECK: schedule = {pack = true, parallel = "rows", products = "bf16", threads = 2 : i64, tile_k = 1 : i64, tile_m = 32 : i64, tile_n = 64 : i64, unroll = 4 : i64, vector = 16 : i64}
// F32-LABEL: func.func @messages
// F32-NOT: products
// F32: tile_n = 32 : i64, unroll = 4 : i64, vector = 32 : i64
// The weight is packed in pairs once per call: [3, 32 / 2, 64] i32, rows 2k and 2k + 1
// interleaved lane by lane (the low half holds row 2k).
// LOOPS-LABEL: func.func private @messages_template0
// LOOPS: %[[PAIRS:.*]] = memref.alloc() : memref<3x16x64xi32>
// LOOPS: arith.shli %{{.*}} : vector<64xi32>
// LOOPS: arith.ori %{{.*}} : vector<64xi32>
// LOOPS: vector.transfer_write %{{.*}}, %{{.*}} : vector<64xi32>, memref<16x64xi32, strided<[64, 1], offset: ?>>
// A packed row of bf16 features is its own pairs: read as bf16 and bitcast.
// LOOPS: vector.transfer_read %{{.*}} : memref<?x32xbf16>, vector<32xbf16>
// LOOPS: vector.bitcast %{{.*}} : vector<32xbf16> to vector<16xi32>
// The micro-kernel: 16 accumulators carried through the reduction's 16 pairs; a pair of the
// left operand broadcast, four vectors of right-hand pairs.
// LOOPS: scf.for %{{.*}} = %{{.*}} to %c16 step %{{.*}} iter_args(
// LOOPS-COUNT-16: x86vector.avx512.dot %{{.*}} : vector<32xbf16> -> vector<16xf32>
// LOOPS: scf.yield
// LOOPS: memref.dealloc %[[PAIRS]]
// In the LLVM dialect (the workers' bodies are outlined functions of MLIR's async runtime):
// LLVM: llvm.call_intrinsic "llvm.x86.avx512bf16.dpbf16ps.512"({{.*}}) : (vector<16xf32>, vector<32xbf16>, vector<32xbf16>) -> vector<16xf32>
// LLVM-F32-NOT: dpbf16ps
func.func @messages(%x: memref<?x32xbf16>, %w: memref<3x32x64xbf16>, %src: memref<?xi32>,
                    %etype: memref<?xi32>, %dst: memref<?xi32>, %out: memref<?x64xf32>) {
  "hector_intra.gemm_template"(%x, %w, %src, %etype, %dst, %out)
      {variant = "xw", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 1>}
      : (memref<?x32xbf16>, memref<3x32x64xbf16>, memref<?xi32>, memref<?xi32>, memref<?xi32>,
         memref<?x64xf32>) -> ()
  return
}

// The weight gradient of bf16 features, in tiles of 64 rows (the reduction's pair steps
// between a register block's loads and stores of its accumulators): the tile's rows of
// features interleaved two by two as they are stored, [32, K = 48] i32 (no transpose, no rounding), the f32 row gradients
// rounded to bf16 (arith.truncf) and interleaved ([32, N] i32); the micro-kernel broadcasts a pair read down
// a column of the features' pairs (memref.load %lhs[step, row]); the register block's 8 rows
// divide K, its 32 columns the gradient's width.
// CHECK-LABEL: func.func @weight_gradient
// CHECK: products = "bf16", {{.*}}tile_m = 64 : i64, tile_n = 32 : i64, unroll = 8 : i64
// LOOPS-LABEL: func.func private @weight_gradient_template0
// LOOPS-DAG: %[[LHS:.*]] = memref.alloca() : memref<32x48xi32>
// LOOPS-DAG: %[[RHS:.*]] = memref.alloca() : memref<32x32xi32>
// LOOPS-NOT: vector.transpose
// The gradients are rounded by arith.truncf (vcvtneps2bf16), not by integer arithmetic.
// LOOPS-NOT: arith.addi %{{.*}} : vector<32xi32>
// LOOPS: arith.truncf %{{.*}} : vector<32xf32> to vector<32xbf16>
// LOOPS-NOT: arith.addi %{{.*}} : vector<32xi32>
// LOOPS: vector.transfer_write %{{.*}}, %[[RHS]][%{{.*}}, %{{.*}}] {{.*}} : vector<32xi32>, memref<32x32xi32>
// LOOPS: vector.transfer_read %{{.*}} : memref<?x48xbf16>, vector<48xbf16>
// LOOPS-NOT: arith.addi %{{.*}} : vector<48xi32>
// LOOPS: arith.bitcast %{{.*}} : vector<48xbf16> to vector<48xi16>
// LOOPS: arith.shli %{{.*}} : vector<48xi32>
// LOOPS: arith.ori %{{.*}} : vector<48xi32>
// LOOPS: vector.transfer_write %{{.*}}, %[[LHS]][%{{.*}}, %{{.*}}] {{.*}} : vector<48xi32>, memref<32x48xi32>
// LOOPS-NOT: vector.transpose
// LOOPS: scf.for %[[STEP:.*]] = %{{.*}} to %c32 step %{{.*}} iter_args(
// LOOPS: vector.load %[[RHS]][%[[STEP]], %{{.*}}] : memref<32x32xi32>, vector<16xi32>
// LOOPS: memref.load %[[LHS]][%[[STEP]], %{{.*}}] : memref<32x48xi32>
// LOOPS: x86vector.avx512.dot
// LOOPS-NOT: vector.transpose
// LOOPS: return
func.func @weight_gradient(%x: memref<?x48xbf16>, %dy: memref<?x32xf32>, %src: memref<?xi32>,
                           %etype: memref<?xi32>, %dw: memref<3x48x32xf32>) {
  "hector_intra.gemm_template"(%x, %dy, %src, %etype, %dw)
      {variant = "xty", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1>}
      : (memref<?x48xbf16>, memref<?x32xf32>, memref<?xi32>, memref<?xi32>,
         memref<3x48x32xf32>) -> ()
  return
}

// An input gradient by a bf16 weight: each worker's transposed slice also held in pairs.
// CHECK-LABEL: func.func @input_gradient
// CHECK: products = "bf16", {{.*}}tile_n = 16 : i64, unroll = 8 : i64
// LOOPS-LABEL: func.func private @input_gradient_template0
// LOOPS: memref.alloca() : memref<16x16xi32>
// LOOPS: x86vector.avx512.dot
func.func @input_gradient(%dy: memref<?x32xf32>, %w: memref<3x16x32xbf16>, %etype: memref<?xi32>,
                          %dx: memref<?x16xf32>) {
  "hector_intra.gemm_template"(%dy, %w, %etype, %dx)
      {variant = "xwt", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 1, 0, 0, 1>}
      : (memref<?x32xf32>, memref<3x16x32xbf16>, memref<?xi32>, memref<?x16xf32>) -> ()
  return
}

// A function taking a bf16 argument computes every GEMM it can in bf16, as under autocast:
// here a product of two f32 buffers (an activation by a float32 weight) rounds both.
// CHECK-LABEL: func.func @second_layer
// CHECK: products = "bf16"
// F32-LABEL: func.func @second_layer
// F32-NOT: products
// LOOPS-LABEL: func.func private @second_layer_template0
// LOOPS: memref.alloc() : memref<16x64xi32>
// LOOPS: x86vector.avx512.dot
func.func @second_layer(%x: memref<?x32xbf16>, %h: memref<?x32xf32>, %w: memref<32x64xf32>,
                        %out: memref<?x64xf32>) {
  "hector_intra.gemm_template"(%h, %w, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>}
      : (memref<?x32xf32>, memref<32x64xf32>, memref<?x64xf32>) -> ()
  return
}

// No argument or operand in bf16: f32 products even with the option.
// CHECK-LABEL: func.func @all_f32
// CHECK-NOT: products
// CHECK: return
func.func @all_f32(%x: memref<?x32xf32>, %w: memref<32x64xf32>, %out: memref<?x64xf32>) {
  "hector_intra.gemm_template"(%x, %w, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>}
      : (memref<?x32xf32>, memref<32x64xf32>, memref<?x64xf32>) -> ()
  return
}

// An odd reduction (15) cannot be paired: f32 products.
// CHECK-LABEL: func.func @odd_depth
// CHECK-NOT: products
// CHECK: return
func.func @odd_depth(%x: memref<?x15xbf16>, %w: memref<15x64xbf16>, %out: memref<?x64xf32>) {
  "hector_intra.gemm_template"(%x, %w, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>}
      : (memref<?x15xbf16>, memref<15x64xbf16>, memref<?x64xf32>) -> ()
  return
}

// A bf16 result: the epilogue takes each register block's rows from the registers once its
// reduction ends (no f32 tile of [32, 64] stored and read back), drops the rows past the
// tile's end (r < mt), rounds each 16-lane vector to bf16 (to the nearest even, as integers)
// and stores it into its output row.
// LOOPS-LABEL: func.func private @half_result_template0
// LOOPS-NOT: memref<32x64xf32>
// LOOPS: %[[SUMS:.*]]:16 = scf.for {{.*}} iter_args(
// LOOPS-COUNT-16: x86vector.avx512.dot
// LOOPS: scf.yield
// LOOPS: %[[INSIDE:.*]] = arith.cmpi ult
// LOOPS: scf.if %[[INSIDE]] {
// LOOPS: arith.bitcast %[[SUMS]]#0 : vector<16xf32> to vector<16xi32>
// LOOPS: arith.trunci %{{.*}} : vector<16xi32> to vector<16xi16>
// LOOPS: vector.transfer_write %{{.*}}, %{{.*}} : vector<16xbf16>, memref<?x64xbf16>
// LOOPS-NOT: memref<32x64xf32>
// LOOPS: return
func.func @half_result(%x: memref<?x48xbf16>, %w: memref<48x64xbf16>, %out: memref<?x64xbf16>) {
  "hector_intra.gemm_template"(%x, %w, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>}
      : (memref<?x48xbf16>, memref<48x64xbf16>, memref<?x64xbf16>) -> ()
  return
}
