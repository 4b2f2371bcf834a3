// RUN: hector-opt %s -p "hector-schedule{threads=1}, convert-hector-intra-to-scf" | FileCheck %s
// RUN: hector-opt %s -p "hector-schedule{threads=1}, convert-hector-intra-to-scf" | FileCheck %s --check-prefix=WIDE

// An xw product narrower than a vector (4 output columns: no register block) runs row at a
// time as dot products along K: the weight transposed once per call into [S, N, K], then per
// row N running sums of 8 lanes (one vector.fma each per step), added across the lanes.

// CHECK-LABEL: func.func @edge_logits
// CHECK: %[[WT:.*]] = memref.alloc() : memref<3x4x64xf32>
// CHECK: memref.store %{{.*}}, %[[WT]]
// CHECK: scf.for
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
// CHECK: vector.transfer_read %{{.*}} : memref<?x64xf16>, vector<8xf16>
// CHECK: vector.fma
// CHECK: vector.reduction <add>, %{{.*}} fastmath<reassoc,contract> : vector<8xf32> into f32
// CHECK: memref.dealloc %[[WT]] : memref<3x4x64xf32>
func.func @edge_logits(%x: memref<?x64xf16>, %w: memref<3x64x4xf32>, %dst: memref<?xi32>,
                       %etype: memref<?xi32>, %out: memref<?x4xf32>) {
  "hector_intra.gemm_template"(%x, %w, %dst, %etype, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1>}
      : (memref<?x64xf16>, memref<3x64x4xf32>, memref<?xi32>, memref<?xi32>,
         memref<?x4xf32>) -> ()
  return
}

// Its weight gradient (xty, 4-wide row gradients): the worker sums its rows in a transposed
// accumulator [S, N, K], a vector of a's row times each broadcast gradient element per step,
// then adds it into its output once.
// CHECK-LABEL: func.func @edge_logits_gradient
// CHECK: %[[ACC:.*]] = memref.alloc() : memref<3x4x64xf32>
// CHECK: vector.transfer_write %{{.*}}, %[[ACC]]
// CHECK: vector.broadcast
// CHECK: vector.fma
// CHECK: vector.transfer_write %{{.*}}, %[[ACC]]
// CHECK: memref.load %[[ACC]]
// CHECK: memref.dealloc %[[ACC]] : memref<3x4x64xf32>
func.func @edge_logits_gradient(%x: memref<?x64xf32>, %dy: memref<?x4xf32>, %dst: memref<?xi32>,
                                %etype: memref<?xi32>, %dw: memref<3x64x4xf32>) {
  "hector_intra.gemm_template"(%x, %dy, %dst, %etype, %dw)
      {variant = "xty", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1>}
      : (memref<?x64xf32>, memref<?x4xf32>, memref<?xi32>, memref<?xi32>,
         memref<3x64x4xf32>) -> ()
  return
}

// A reduction that is no whole number of vectors (K = 12) keeps the element form.
// WIDE-LABEL: func.func @short_reduction
// WIDE-NOT: vector.fma
// WIDE-NOT: memref.alloc
// WIDE: return
func.func @short_reduction(%x: memref<?x12xf32>, %w: memref<12x4xf32>, %out: memref<?x4xf32>) {
  "hector_intra.gemm_template"(%x, %w, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>}
      : (memref<?x12xf32>, memref<12x4xf32>, memref<?x4xf32>) -> ()
  return
}
