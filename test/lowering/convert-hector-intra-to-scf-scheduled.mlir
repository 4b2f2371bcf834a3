// RUN: hector-opt %s -p convert-hector-intra-to-scf | FileCheck %s

// Scheduled templates lower to packed tiles, micro-kernels and workers. The schedules are
// written here (hector-schedule's choices are tested in hector-schedule.mlir).

// CHECK-LABEL: func.func @messages
// Two workers may add into one destination row: the second gets a partial output, which it
// zeroes itself (in parallel, into its own cache).
// CHECK: %[[PARTIAL:.*]] = memref.alloc(%{{.*}}) : memref<1x?x16xf32>
// CHECK-NOT: linalg.fill
// CHECK: scf.forall (%[[W:.*]]) in (2) {
// The first worker writes to `out`, the other to its partial, which it zeroes first; the tile
// code exists once and writes to whichever the worker got (as the partial's strided type).
// CHECK: %[[FIRST:.*]] = arith.cmpi eq, %[[W]], %{{.*}} : index
// CHECK: %[[MINE:.*]] = memref.subview %[[PARTIAL]]
// CHECK: %[[DEST:.*]] = scf.if %[[FIRST]] -> (memref<?x16xf32, strided<[16, 1], offset: ?>>) {
// CHECK-NEXT: %[[OUT:.*]] = memref.cast %{{.*}} : memref<?x16xf32> to memref<?x16xf32, strided<[16, 1], offset: ?>>
// CHECK-NEXT: scf.yield %[[OUT]]
// CHECK-NEXT: } else {
// CHECK-NEXT: linalg.fill ins(%{{.*}} : f32) outs(%[[MINE]]
// CHECK-NEXT: scf.yield %[[MINE]]
// A packed tile of 8 gathered rows and its product.
// CHECK: memref.alloca() : memref<8x16xf32>
// CHECK: memref.alloca() : memref<8x16xf32>
// The micro-kernel multiplies by one weight slice: the tile's rows go run by run of rows
// sharing a slice (the end of each run is the first row of another type); a run of at least 8
// rows is packed, a shorter one goes row at a time.
// CHECK: scf.while (%[[START:.*]] = %{{.*}}) : (index) -> index {
// CHECK: scf.condition
// CHECK: } do {
// CHECK: scf.for %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (index)
// CHECK: arith.cmpi ne
// CHECK: %[[LONG:.*]] = arith.cmpi uge, %{{.*}}, %c8 : index
// CHECK: scf.if %[[LONG]]
// Packing: each gathered row is one vector load and store into the tile, zeros past the last
// row.
// CHECK: arith.cmpi ult
// CHECK: vector.transfer_read {{.*}} {in_bounds = [true]} : memref<?x16xf32>, vector<16xf32>
// CHECK: vector.transfer_write {{.*}} {in_bounds = [true]} : vector<16xf32>, memref<8x16xf32>
// The micro-kernel: the transform script tiled the matmul to its 2 x 16 register block and
// vectorised it; multiply-adds contract to FMAs.
// CHECK: memref.subview %{{.*}} [2, 16] [1, 1] : memref<8x16xf32> to memref<2x16xf32
// CHECK: vector.transfer_read {{.*}} vector<2x16xf32>
// CHECK: arith.mulf {{.*}} fastmath<contract> : vector<2x16x1xf32>
// CHECK: arith.addf {{.*}} fastmath<contract> : vector<2x16xf32>
// CHECK: vector.transfer_write {{.*}} vector<2x16xf32>
// CHECK-NOT: linalg.matmul
// The epilogue adds each row of the product into its destination row as one vector, rounded
// like the row-at-a-time form (no fastmath contraction).
// CHECK: %[[PRODUCT:.*]] = vector.transfer_read %{{.*}} : memref<8x16xf32>, vector<16xf32>
// CHECK-NEXT: %[[OLD:.*]] = vector.transfer_read %[[DEST]]{{.*}} : memref<?x16xf32, strided<[16, 1], offset: ?>>, vector<16xf32>
// CHECK-NEXT: %[[NEW:.*]] = arith.addf %[[OLD]], %[[PRODUCT]] : vector<16xf32>
// CHECK-NEXT: vector.transfer_write %[[NEW]], %[[DEST]]
// A short run goes row at a time, into the same destination; no second copy of the tile code.
// CHECK: memref.store %{{.*}}, %[[DEST]]
// CHECK-NOT: vector<2x16xf32>
// Partials fold into `out` in worker order, in parallel over rows, a row as one vector; then
// they are freed.
// CHECK: scf.forall (%{{.*}}) in (2) {
// CHECK: vector.transfer_read %[[PARTIAL]]
// CHECK: arith.addf {{.*}} : vector<16xf32>
// CHECK: memref.dealloc %[[PARTIAL]]
func.func @messages(%x: memref<?x16xf32>, %w: memref<3x16x16xf32>, %src: memref<?xi32>,
                    %etype: memref<?xi32>, %dst: memref<?xi32>, %out: memref<?x16xf32>) {
  "hector_intra.gemm_template"(%x, %w, %src, %etype, %dst, %out)
      {variant = "xw", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 1>,
       schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64,
                   tile_m = 8 : i64, tile_n = 16 : i64, unroll = 2 : i64, vector = 16 : i64}}
      : (memref<?x16xf32>, memref<3x16x16xf32>, memref<?xi32>, memref<?xi32>, memref<?xi32>,
         memref<?x16xf32>) -> ()
  return
}

// CHECK-LABEL: func.func @input_gradient
// xwt multiplies by the weight transposed into a buffer of the worker's own, once, in blocks
// transposed in registers (one shuffle), not element by element. One worker: no scf.forall, no
// partials, no copy of the weight on the heap.
// CHECK-NOT: scf.forall
// CHECK-NOT: memref.alloc(
// CHECK: %[[WT:.*]] = memref.alloca() : memref<16x8xf32>
// CHECK: %[[BLOCK:.*]] = vector.transfer_read %{{.*}} : memref<8x16xf32>, vector<8x16xf32>
// CHECK: %[[FLAT:.*]] = vector.shape_cast %[[BLOCK]] : vector<8x16xf32> to vector<128xf32>
// CHECK: %[[SHUFFLED:.*]] = vector.shuffle %[[FLAT]], %[[FLAT]] [0, 16, 32,
// CHECK: %[[FLIPPED:.*]] = vector.shape_cast %[[SHUFFLED]] : vector<128xf32> to vector<16x8xf32>
// CHECK: vector.transfer_write %[[FLIPPED]], %[[WT]]
// CHECK: scf.for
// The micro-kernel reads the transposed weight's rows.
// CHECK: memref.subview %[[WT]]
// CHECK: vector.transfer_read {{.*}} vector<4x8xf32>
// The epilogue stores each row of the product as one vector.
// CHECK: %[[ROW:.*]] = vector.transfer_read %{{.*}} : memref<8x8xf32>, vector<8xf32>
// CHECK-NEXT: vector.transfer_write %[[ROW]], %{{.*}} : vector<8xf32>, memref<?x8xf32>
// CHECK-NOT: memref.dealloc
// CHECK: return
func.func @input_gradient(%dy: memref<?x16xf32>, %w: memref<8x16xf32>, %dx: memref<?x8xf32>) {
  "hector_intra.gemm_template"(%dy, %w, %dx)
      {variant = "xwt", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>,
       schedule = {pack = true, parallel = "none", threads = 1 : i64, tile_k = 1 : i64,
                   tile_m = 8 : i64, tile_n = 8 : i64, unroll = 4 : i64, vector = 8 : i64}}
      : (memref<?x16xf32>, memref<8x16xf32>, memref<?x8xf32>) -> ()
  return
}

// CHECK-LABEL: func.func @input_gradient_sliced
// With a weight slice per row, each worker holds one slice transposed and remembers which
// (none at first: the number of slices).
// CHECK: scf.forall
// CHECK: %[[WT:.*]] = memref.alloca() : memref<16x8xf32>
// CHECK: %[[HELD:.*]] = memref.alloca() : memref<1xindex>
// CHECK: memref.store %c3, %[[HELD]][%c0] : memref<1xindex>
// A packed run transposes its slice only when the worker holds another.
// CHECK: %[[LONG:.*]] = arith.cmpi uge, %{{.*}}, %c8 : index
// CHECK: scf.if %[[LONG]] {
// CHECK: %[[WAS:.*]] = memref.load %[[HELD]][%c0] : memref<1xindex>
// CHECK: %[[OTHER:.*]] = arith.cmpi ne, %[[WAS]], %[[T:.*]] : index
// CHECK: scf.if %[[OTHER]] {
// CHECK: memref.subview %{{.*}}[%[[T]], 0, 0] [1, 8, 16]
// CHECK: vector.shuffle
// CHECK: vector.transfer_write %{{.*}}, %[[WT]]
// CHECK: memref.store %[[T]], %[[HELD]][%c0] : memref<1xindex>
// CHECK: }
// CHECK: vector.transfer_read {{.*}} vector<4x8xf32>
// A short run goes row at a time: a row of the held slice like an xw row over the transposed
// copy, any other by dot products over the weight's own rows.
// CHECK: } else {
// CHECK: %[[NOW:.*]] = memref.load %[[HELD]][%c0] : memref<1xindex>
// CHECK: %[[SAME:.*]] = arith.cmpi eq, %[[NOW]], %{{.*}} : index
// CHECK: scf.if %[[SAME]] {
// CHECK: memref.load %[[WT]]
// CHECK: } else {
// CHECK: scf.for {{.*}} iter_args
// CHECK: memref.load %{{.*}} : memref<3x8x16xf32>
func.func @input_gradient_sliced(%dy: memref<?x16xf32>, %w: memref<3x8x16xf32>,
                                 %dst: memref<?xi32>, %etype: memref<?xi32>,
                                 %dx: memref<?x8xf32>) {
  "hector_intra.gemm_template"(%dy, %w, %dst, %etype, %dx)
      {variant = "xwt", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1>,
       schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64,
                   tile_m = 8 : i64, tile_n = 8 : i64, unroll = 4 : i64, vector = 8 : i64}}
      : (memref<?x16xf32>, memref<3x8x16xf32>, memref<?xi32>, memref<?xi32>,
         memref<?x8xf32>) -> ()
  return
}

// CHECK-LABEL: func.func @weight_gradient
// Are the rows sorted by slice (weight_index never decreasing)?
// CHECK: %[[SOME:.*]] = arith.cmpi ugt, %{{.*}}, %c0 : index
// CHECK: %[[ORDERED:.*]] = scf.for {{.*}} iter_args(%{{.*}} = %true) -> (i1) {
// CHECK: arith.cmpi sle, %{{.*}}, %{{.*}} : i32
// CHECK: %[[SORTED:.*]] = arith.andi %[[SOME]], %[[ORDERED]] : i1
// CHECK: scf.if %[[SORTED]] {
// Sorted: no partial copy of the gradient, one [K, N] buffer per worker after the first, for
// its first slice (the only one it may share with the workers before it).
// CHECK: %[[OWN:.*]] = memref.alloc() : memref<1x8x16xf32>
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%[[OWN]] : memref<1x8x16xf32>)
// CHECK: scf.forall (%[[P:.*]]) in (2) {
// CHECK: %[[LATER:.*]] = arith.cmpi ugt, %[[P]], %c0 : index
// CHECK: %[[MINE:.*]] = memref.subview %[[OWN]]
// xty packs the gathered rows transposed ([K, tile_m], rows packed as vectors, then transposed
// in registers) and the row gradients ([tile_m, N]) ...
// CHECK: memref.alloca() : memref<8x8xf32>
// CHECK: memref.alloca() : memref<8x8xf32>
// CHECK: memref.alloca() : memref<8x16xf32>
// CHECK: vector.transfer_write {{.*}} : vector<8xf32>, memref<8x8xf32>
// CHECK: vector.shuffle
// CHECK: vector.transfer_write {{.*}} : vector<8x8xf32>, memref<8x8xf32>
// ... and adds their product into the worker's own buffer when the run's slice is its first,
// else straight into the gradient's slice.
// CHECK: %[[FIRST:.*]] = arith.cmpi eq, %{{.*}}, %{{.*}} : index
// CHECK: %[[SHARED:.*]] = arith.andi %[[LATER]], %[[FIRST]] : i1
// CHECK: %[[SLICE:.*]] = memref.subview %{{.*}}[%{{.*}}, 0, 0] [1, 8, 16] [1, 1, 1] : memref<3x8x16xf32> to memref<8x16xf32, strided<[16, 1], offset: ?>>
// CHECK: %[[DEST:.*]] = arith.select %[[SHARED]], %[[MINE]], %[[SLICE]]
// CHECK: memref.subview %[[DEST]]
// CHECK: vector.transfer_read {{.*}} vector<4x16xf32>
// Short runs go row at a time into the same place.
// CHECK: } else {
// CHECK: arith.select
// CHECK: scf.yield
// The buffers are added into their slices in worker order, a row as one vector.
// CHECK: scf.if
// CHECK: %[[TO:.*]] = memref.subview %{{.*}} : memref<3x8x16xf32> to memref<8x16xf32
// CHECK: %[[FROM:.*]] = memref.subview %[[OWN]][0, 0, 0]
// CHECK: vector.transfer_read %[[TO]]
// CHECK: vector.transfer_read %[[FROM]]
// CHECK: arith.addf {{.*}} : vector<16xf32>
// CHECK: memref.dealloc %[[OWN]]
// Rows in any order: the workers' partial copies of the whole gradient.
// CHECK: } else {
// CHECK: memref.alloc() : memref<1x3x8x16xf32>
// CHECK: scf.forall
// CHECK: memref.subview %{{.*}}[%{{.*}}, 0, 0, 0] [1, 3, 8, 16] [1, 1, 1, 1] : memref<1x3x8x16xf32> to memref<3x8x16xf32, strided<[128, 16, 1], offset: ?>>
// CHECK: memref.cast %{{.*}} : memref<3x8x16xf32> to memref<3x8x16xf32, strided<[128, 16, 1], offset: ?>>
// CHECK: memref.subview %{{.*}}[%{{.*}}, 0, 0] [1, 8, 16] [1, 1, 1] : memref<3x8x16xf32, strided<[128, 16, 1], offset: ?>> to memref<8x16xf32, strided<[16, 1], offset: ?>>
// CHECK: vector.transfer_read {{.*}} vector<4x16xf32>
func.func @weight_gradient(%x: memref<?x8xf32>, %dy: memref<?x16xf32>, %src: memref<?xi32>,
                           %etype: memref<?xi32>, %dw: memref<3x8x16xf32>) {
  "hector_intra.gemm_template"(%x, %dy, %src, %etype, %dw)
      {variant = "xty", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1>,
       schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64,
                   tile_m = 8 : i64, tile_n = 16 : i64, unroll = 4 : i64, vector = 16 : i64}}
      : (memref<?x8xf32>, memref<?x16xf32>, memref<?xi32>, memref<?xi32>,
         memref<3x8x16xf32>) -> ()
  return
}

// CHECK-LABEL: func.func @weight_gradient_per_slice_rows
// slice_rows: rows are sorted by slice by construction, so no check and no partial copy of the
// gradient, only the workers' buffers for their first slice.
// CHECK-NOT: cmpi sle
// CHECK-NOT: memref<1x3x8x16xf32>
// CHECK: memref.alloc() : memref<1x8x16xf32>
// CHECK: scf.forall
// CHECK-NOT: memref<1x3x8x16xf32>
// CHECK: return
func.func @weight_gradient_per_slice_rows(%x: memref<?x8xf32>, %dy: memref<?x16xf32>,
                                          %dw: memref<3x8x16xf32>) {
  "hector_intra.gemm_template"(%x, %dy, %dw)
      {variant = "xty", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64,
       slice_rows = 4 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>,
       schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64,
                   tile_m = 8 : i64, tile_n = 16 : i64, unroll = 4 : i64, vector = 16 : i64}}
      : (memref<?x8xf32>, memref<?x16xf32>, memref<3x8x16xf32>) -> ()
  return
}

// The gradient rows read in place: packing row r of the gradient tile loads row
// scatter_index[i] of dy (the row the forward product wrote) as one vector and multiplies it by
// row_scale[i].
// CHECK-LABEL: func.func @weight_gradient_scattered
// CHECK: scf.forall
// CHECK: %[[G:.*]] = vector.transfer_read %{{.*}}[%{{.*}}, %{{.*}}], %{{.*}} {in_bounds = [true]} : memref<?x16xf32>, vector<16xf32>
// CHECK-NEXT: %[[S:.*]] = memref.load %{{.*}}[%{{.*}}, %{{.*}}] : memref<?x1xf32>
// CHECK-NEXT: %[[B:.*]] = vector.broadcast %[[S]] : f32 to vector<16xf32>
// CHECK-NEXT: arith.mulf %[[G]], %[[B]]
// CHECK: vector.transfer_write {{.*}} : vector<16xf32>, memref<8x16xf32>
// CHECK: vector.transfer_read {{.*}} vector<4x16xf32>
func.func @weight_gradient_scattered(%x: memref<?x8xf32>, %dy: memref<?x16xf32>,
                                     %src: memref<?xi32>, %etype: memref<?xi32>,
                                     %dst: memref<?xi32>, %norm: memref<?x1xf32>,
                                     %dw: memref<3x8x16xf32>) {
  "hector_intra.gemm_template"(%x, %dy, %src, %etype, %dst, %norm, %dw)
      {variant = "xty", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1>,
       schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64,
                   tile_m = 8 : i64, tile_n = 16 : i64, unroll = 4 : i64, vector = 16 : i64}}
      : (memref<?x8xf32>, memref<?x16xf32>, memref<?xi32>, memref<?xi32>, memref<?xi32>,
         memref<?x1xf32>, memref<3x8x16xf32>) -> ()
  return
}

// CHECK-LABEL: func.func @max_to_dst
// Workers only when there are at least 4 rows per output row (decided at run time: partials
// cost about as much as the rows they save otherwise); a max reduction's partials start at
// -inf and fold with maximumf.
// CHECK: %[[NEG:.*]] = arith.constant 0xFF800000 : f32
// CHECK: %[[ENOUGH:.*]] = arith.cmpi uge, %{{.*}}, %{{.*}} : index
// CHECK: scf.if %[[ENOUGH]] {
// CHECK: memref.alloc(%{{.*}}) : memref<2x?x4xf32>
// CHECK: scf.forall (%{{.*}}) in (3) {
// CHECK: linalg.fill ins(%[[NEG]] : f32) outs(%{{.*}} : memref<?x4xf32, strided<[4, 1], offset: ?>>)
// CHECK: arith.maximumf
// CHECK: scf.forall (%{{.*}}) in (3) {
// CHECK-COUNT-2: arith.maximumf
// One worker otherwise, straight into `out`.
// CHECK: } else {
// CHECK-NOT: scf.forall
// CHECK: arith.maximumf
// CHECK: return
func.func @max_to_dst(%dst: memref<?xi32>, %m: memref<?x4xf32>, %out: memref<?x4xf32>) {
  "hector_intra.traversal_template"(%dst, %m, %out)
      {parallel = "edge", fn = "copy", reduce = "max", slope = 0.0 : f32,
       block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 1, 0, 1, 0, 1>,
       schedule = {pack = false, parallel = "rows", threads = 3 : i64, tile_k = 0 : i64,
                   tile_m = 1 : i64, tile_n = 0 : i64, unroll = 1 : i64, vector = 1 : i64}}
      : (memref<?xi32>, memref<?x4xf32>, memref<?x4xf32>) -> ()
  return
}

// CHECK-LABEL: func.func @sum_to_wide_dst
// Output rows of 8 or more columns are owned: each of the 2 workers takes a share of `out`'s
// rows, reads every row's scatter index and reduces only those landing in its share. No
// partial copy of `out`, no fold, no run-time choice of one worker.
// CHECK-NOT: memref.alloc
// CHECK: %[[ROWS:.*]] = memref.dim %{{.*}}, %{{.*}} : memref<?x16xf32>
// CHECK: scf.forall (%[[P:.*]]) in (2) {
// CHECK: %[[LO:.*]] = arith.divui
// CHECK: %[[HI:.*]] = arith.divui
// CHECK: scf.for %[[I:.*]] =
// CHECK: %[[D:.*]] = arith.index_cast
// CHECK: %[[GE:.*]] = arith.cmpi uge, %[[D]], %[[LO]] : index
// CHECK: %[[LT:.*]] = arith.cmpi ult, %[[D]], %[[HI]] : index
// CHECK: %[[MINE:.*]] = arith.andi %[[GE]], %[[LT]] : i1
// CHECK: scf.if %[[MINE]] {
// CHECK: arith.addf
// CHECK-NOT: scf.forall
// CHECK: return
func.func @sum_to_wide_dst(%dst: memref<?xi32>, %m: memref<?x16xf32>, %out: memref<?x16xf32>) {
  "hector_intra.traversal_template"(%dst, %m, %out)
      {parallel = "edge", fn = "copy", reduce = "sum", slope = 0.0 : f32,
       block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 1, 0, 1, 0, 1>,
       schedule = {pack = false, parallel = "rows", threads = 2 : i64, tile_k = 0 : i64,
                   tile_m = 1 : i64, tile_n = 0 : i64, unroll = 1 : i64, vector = 1 : i64}}
      : (memref<?xi32>, memref<?x16xf32>, memref<?x16xf32>) -> ()
  return
}

// CHECK-LABEL: func.func @scaled_rows_through_a_scratch_row
// Each worker keeps one f32 scratch row on its stack, made before its row loop: a row's values
// go into it in one column loop (gathered row times its scale), then into `out` in a second
// (read, add, store), so neither loop stores where the other's inputs might be.
// CHECK: scf.forall (%{{.*}}) in (2) {
// CHECK: %[[ROW:.*]] = memref.alloca() : memref<16xf32>
// CHECK: scf.for %{{.*}} =
// CHECK: scf.if %{{.*}} {
// CHECK: scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step
// CHECK: %[[X:.*]] = memref.load %{{.*}}[%{{.*}}, %[[J]]] : memref<?x16xf32>
// CHECK: %[[S:.*]] = memref.load %{{.*}}[%{{.*}}, %{{.*}}] : memref<?x1xf32>
// CHECK: %[[V:.*]] = arith.mulf %[[X]], %[[S]] : f32
// CHECK: memref.store %[[V]], %[[ROW]][%[[J]]] : memref<16xf32>
// CHECK: }
// CHECK: scf.for %[[K:.*]] = %{{.*}} to %{{.*}} step
// CHECK: %[[R:.*]] = memref.load %[[ROW]][%[[K]]] : memref<16xf32>
// CHECK: %[[OLD:.*]] = memref.load %{{.*}}[%{{.*}}, %[[K]]] : memref<?x16xf32>
// CHECK: %[[SUM:.*]] = arith.addf %[[OLD]], %[[R]] : f32
// CHECK: memref.store %[[SUM]], %{{.*}}[%{{.*}}, %[[K]]] : memref<?x16xf32>
// CHECK-NOT: memref.alloca
// CHECK: return
func.func @scaled_rows_through_a_scratch_row(%src: memref<?xi32>, %dst: memref<?xi32>,
    %x: memref<?x16xf32>, %norm: memref<?x1xf32>, %out: memref<?x16xf32>) {
  "hector_intra.traversal_template"(%src, %dst, %x, %norm, %out)
      {parallel = "edge", fn = "scale", reduce = "sum", slope = 0.0 : f32,
       block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 1>,
       schedule = {pack = false, parallel = "rows", threads = 2 : i64, tile_k = 0 : i64,
                   tile_m = 1 : i64, tile_n = 0 : i64, unroll = 1 : i64, vector = 1 : i64}}
      : (memref<?xi32>, memref<?xi32>, memref<?x16xf32>, memref<?x1xf32>, memref<?x16xf32>) -> ()
  return
}

// CHECK-LABEL: func.func @rows_too_wide_for_a_scratch_row
// Rows over 4096 columns (16 KiB of stack per worker) go into `out` element by element.
// CHECK-NOT: memref.alloca
// CHECK: arith.mulf
// CHECK-NEXT: memref.load %{{.*}} : memref<?x4097xf32>
// CHECK-NEXT: arith.addf
// CHECK-NEXT: memref.store %{{.*}} : memref<?x4097xf32>
// CHECK-NOT: memref.alloca
// CHECK: return
func.func @rows_too_wide_for_a_scratch_row(%src: memref<?xi32>, %dst: memref<?xi32>,
    %x: memref<?x4097xf32>, %norm: memref<?x1xf32>, %out: memref<?x4097xf32>) {
  "hector_intra.traversal_template"(%src, %dst, %x, %norm, %out)
      {parallel = "edge", fn = "scale", reduce = "sum", slope = 0.0 : f32,
       block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 1>,
       schedule = {pack = false, parallel = "rows", threads = 2 : i64, tile_k = 0 : i64,
                   tile_m = 1 : i64, tile_n = 0 : i64, unroll = 1 : i64, vector = 1 : i64}}
      : (memref<?xi32>, memref<?xi32>, memref<?x4097xf32>, memref<?x1xf32>, memref<?x4097xf32>) -> ()
  return
}

// CHECK-LABEL: func.func @weight_panels
// An f32 xw whose schedule says panels (64 columns, tile_n = 32) multiplies by its weight
// packed once per call in column panels [2, K, 32], a weight row of 32 at a time; it is freed
// after the tiles.
// CHECK: %[[PANELS:.*]] = memref.alloc() : memref<2x40x32xf32>
// CHECK: vector.transfer_read %{{.*}} : memref<40x64xf32>, vector<32xf32>
// CHECK: vector.transfer_write %{{.*}}, %[[PANELS]][%{{.*}}, %{{.*}}, %{{.*}}] {{.*}} : vector<32xf32>, memref<2x40x32xf32>
// CHECK: %[[TILE:.*]] = memref.alloca() : memref<8x40xf32>
// CHECK: %[[ACC:.*]] = memref.alloca() : memref<8x64xf32>
// tile_k = 16 splits the reduction of 40 steps: two whole blocks in a loop, then the last 8.
// CHECK: %[[REST:.*]] = memref.subview %[[TILE]][0, 32] [8, 8] [1, 1]
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%[[ACC]] : memref<8x64xf32>)
// CHECK: scf.for %[[K0:.*]] = %c0 to %c32 step %c16 {
// CHECK: memref.subview %[[TILE]][0, %[[K0]]] [8, 16] [1, 1]
// Within a block, panel by panel; the panel's rows of the block, the accumulators' columns.
// CHECK: scf.for %[[J:.*]] = %c0 to %c2 step %c1 {
// CHECK: %[[PANEL:.*]] = memref.subview %[[PANELS]][%[[J]], 0, 0] [1, 40, 32]
// CHECK: memref.subview %[[PANEL]][%[[K0]], 0] [16, 32] [1, 1]
// CHECK: memref.subview %[[ACC]][0, %{{.*}}] [8, 32] [1, 1] : memref<8x64xf32> to memref<8x32xf32, strided<[64, 1], offset: ?>>
// The register blocks run over the tile's rows inside the panel (rows inner), each over the
// block's 16 steps, reading the panel's row as one contiguous vector.
// CHECK: scf.for %{{.*}} = %c0 to %c8 step %c2 {
// CHECK: scf.for %{{.*}} = %c0 to %c16 step %c1 {
// CHECK: vector.transfer_read {{.*}} : memref<1x32xf32, strided<[32, 1], offset: ?>>, vector<1x32xf32>
// CHECK: arith.addf {{.*}} fastmath<contract> : vector<2x32xf32>
// The last, shorter block: 8 steps from step 32.
// CHECK: scf.for %[[J2:.*]] = %c0 to %c2 step %c1 {
// CHECK: %[[PANEL2:.*]] = memref.subview %[[PANELS]][%[[J2]], 0, 0] [1, 40, 32]
// CHECK: memref.subview %[[PANEL2]][32, 0] [8, 32] [1, 1]
// CHECK: scf.for %{{.*}} = %c0 to %c8 step %c1 {
// CHECK: memref.subview %[[REST]]
// CHECK: memref.dealloc %[[PANELS]] : memref<2x40x32xf32>
func.func @weight_panels(%x: memref<?x40xf32>, %w: memref<40x64xf32>, %out: memref<?x64xf32>) {
  "hector_intra.gemm_template"(%x, %w, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>,
       schedule = {pack = true, panels = true, parallel = "none", threads = 1 : i64,
                   tile_k = 16 : i64, tile_m = 8 : i64, tile_n = 32 : i64, unroll = 2 : i64,
                   vector = 32 : i64}}
      : (memref<?x40xf32>, memref<40x64xf32>, memref<?x64xf32>) -> ()
  return
}

// CHECK-LABEL: func.func @rows_in_place
// An in-place schedule (a typed linear, rows not gathered): a whole tile of 8 rows multiplies
// a's own rows [i0, i0 + 8) as a strided view, not a packed copy; a tile cut short by the end
// of the rows is packed as before (zero rows past the last).
// CHECK: %[[TILE:.*]] = memref.alloca() : memref<8x16xf32>
// CHECK: %[[WHOLE:.*]] = arith.cmpi eq, %{{.*}}, %c8 : index
// CHECK: scf.if %[[WHOLE]] {
// The tile's rows of out (the epilogue's stores) are prefetched for writing, a line a time.
// CHECK: memref.prefetch %arg2[%{{.*}}, %c0], write, locality<3>, data : memref<?x16xf32>
// CHECK: %[[ROWS:.*]] = memref.subview %arg0[%{{.*}}, 0] [8, 16] [1, 1] : memref<?x16xf32> to memref<8x16xf32, strided<[16, 1], offset: ?>>
// CHECK-NOT: vector.transfer_write {{.*}} %[[TILE]]
// CHECK: memref.subview %[[ROWS]][%{{.*}}, %{{.*}}] [2, 1] [1, 1]
// CHECK: arith.mulf {{.*}} fastmath<contract> : vector<2x16x1xf32>
// CHECK: } else {
// CHECK: vector.transfer_write {{.*}} {in_bounds = [true]} : vector<16xf32>, memref<8x16xf32>
// CHECK: memref.subview %[[TILE]][%{{.*}}, %{{.*}}] [2, 1] [1, 1]
// CHECK: arith.mulf {{.*}} fastmath<contract> : vector<2x16x1xf32>
func.func @rows_in_place(%x: memref<?x16xf32>, %w: memref<16x16xf32>, %out: memref<?x16xf32>) {
  "hector_intra.gemm_template"(%x, %w, %out)
      {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64,
       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>,
       schedule = {in_place = true, pack = true, parallel = "none", threads = 1 : i64,
                   tile_k = 1 : i64, tile_m = 8 : i64, tile_n = 16 : i64, unroll = 2 : i64,
                   vector = 16 : i64}}
      : (memref<?x16xf32>, memref<16x16xf32>, memref<?x16xf32>) -> ()
  return
}
