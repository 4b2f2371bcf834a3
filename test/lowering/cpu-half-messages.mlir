// RUN: hector-opt %s --split-input-file -p 'hector-half-messages' | FileCheck %s
// RUN: hector-opt %s --split-input-file -p 'hector-schedule{threads=2}, hector-half-messages, hector-outline-templates, convert-hector-intra-to-scf' | FileCheck %s --check-prefix=LOOPS

// A function whose results are all bf16 stores the f32 GEMM output only traversals read (a
// per-edge message, summed into destinations) in bf16: the GEMM rounds it as it writes it,
// the sum widens it as it reads it. The sum becomes a segmented sum (each row written once,
// so its zero fill goes) and, since only the copy rounding it into the bf16 result reads it,
// writes the result itself: the f32 buffer and the copy go.
// CHECK-LABEL: func.func @message
// CHECK-SAME: %[[RES:[a-z0-9]*]]: memref<?x32xbf16>) attributes
// CHECK: %[[M:.*]] = memref.alloc(%{{.*}}) : memref<?x32xbf16>
// CHECK: "hector_intra.gemm_template"(%{{.*}}, %{{.*}}, %{{.*}}, %[[M]]) {{.*}} : (memref<?x16xbf16>, memref<16x32xbf16>, memref<?xi32>, memref<?x32xbf16>) -> ()
// CHECK-NOT: memref.alloc
// CHECK-NOT: linalg.fill
// CHECK: "hector_intra.traversal_template"(%{{.*}}, %[[M]], %{{.*}}, %[[RES]]) {{.*}}fn = "scale"{{.*}}hector.segmented_sum
// CHECK-NOT: fn = "copy"
// CHECK: memref.dealloc %[[M]] : memref<?x32xbf16>
// CHECK-NEXT: return

// Loops: the packed GEMM's epilogue rounds a whole f32 row of its tile to bf16 as integers
// (bias 0x7FFF, the kept lowest bit, NaN as 0x7FC0) and writes it as one bf16 vector; the sum
// reads bf16 elements.
// LOOPS-LABEL: func.func private @message_template0
// LOOPS-DAG: arith.constant dense<32704> : vector<32xi16>
// LOOPS-DAG: arith.constant dense<32767> : vector<32xi32>
// LOOPS: %[[ACC:.*]] = vector.transfer_read %{{.*}} : memref<32x32xf32>, vector<32xf32>
// LOOPS: arith.bitcast %[[ACC]] : vector<32xf32> to vector<32xi32>
// LOOPS: arith.select %{{.*}} : vector<32xi1>, vector<32xi16>
// LOOPS: %[[ROW:.*]] = arith.bitcast %{{.*}} : vector<32xi16> to vector<32xbf16>
// LOOPS: vector.transfer_write %[[ROW]], %{{.*}} : vector<32xbf16>, memref<?x32xbf16>
// LOOPS-LABEL: func.func private @message_template1
// LOOPS: vector.transfer_read %{{.*}} : memref<?x32xbf16>, vector<16xbf16>
// LOOPS: vector.transfer_write %{{.*}} : vector<16xbf16>, memref<?x32xbf16>
// LOOPS-NOT: func.func private @message_template2
func.func @message(%x: memref<?x16xbf16>, %w: memref<16x32xbf16>, %src: memref<?xi32>, %dst: memref<?xi32>, %s: memref<?x1xf32>, %res: memref<?x32xbf16>) attributes {hector.outputs = 1 : i64} {
  %c0 = arith.constant 0 : index
  %n = memref.dim %src, %c0 : memref<?xi32>
  %m = memref.alloc(%n) : memref<?x32xf32>
  "hector_intra.gemm_template"(%x, %w, %src, %m) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 1>} : (memref<?x16xbf16>, memref<16x32xbf16>, memref<?xi32>, memref<?x32xf32>) -> ()
  %r = memref.dim %res, %c0 : memref<?x32xbf16>
  %acc = memref.alloc(%r) : memref<?x32xf32>
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%acc : memref<?x32xf32>)
  "hector_intra.traversal_template"(%dst, %m, %s, %acc) {fn = "scale", reduce = "sum", parallel = "edge", block_size = 256 : i64, slope = 0.0 : f32, operandSegmentSizes = array<i32: 0, 1, 0, 1, 1, 1>} : (memref<?xi32>, memref<?x32xf32>, memref<?x1xf32>, memref<?x32xf32>) -> ()
  "hector_intra.traversal_template"(%acc, %res) {fn = "copy", reduce = "none", parallel = "node", block_size = 256 : i64, slope = 0.0 : f32, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x32xf32>, memref<?x32xbf16>) -> ()
  memref.dealloc %acc : memref<?x32xf32>
  memref.dealloc %m : memref<?x32xf32>
  return
}

// -----

// An f32 result (training, or f32 weights): nothing changes.
// CHECK-LABEL: func.func @f32_result
// CHECK: memref.alloc(%{{.*}}) : memref<?x32xf32>
// CHECK-NOT: bf16
func.func @f32_result(%x: memref<?x16xf32>, %w: memref<16x32xf32>, %src: memref<?xi32>, %res: memref<?x32xf32>) attributes {hector.outputs = 1 : i64} {
  %c0 = arith.constant 0 : index
  %n = memref.dim %src, %c0 : memref<?xi32>
  %m = memref.alloc(%n) : memref<?x32xf32>
  "hector_intra.gemm_template"(%x, %w, %src, %m) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 1>} : (memref<?x16xf32>, memref<16x32xf32>, memref<?xi32>, memref<?x32xf32>) -> ()
  "hector_intra.traversal_template"(%m, %res) {fn = "relu", reduce = "none", parallel = "node", block_size = 256 : i64, slope = 0.0 : f32, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x32xf32>, memref<?x32xf32>) -> ()
  memref.dealloc %m : memref<?x32xf32>
  return
}

// -----

// Kept in f32: a message another GEMM reads, one a GEMM accumulates into (each partial sum
// would be rounded), a score column (narrower than 16: a softmax's input), and node rows (no
// gather: as many rows as the result, such as RGCN's root product).
// CHECK-LABEL: func.func @kept
// CHECK-NOT: memref.alloc{{.*}}bf16
// CHECK: return
func.func @kept(%x: memref<?x16xbf16>, %w: memref<16x32xbf16>, %w2: memref<32x32xbf16>, %q: memref<16x4xbf16>, %src: memref<?xi32>, %res: memref<?x32xbf16>, %res2: memref<?x32xbf16>, %res3: memref<?x4xbf16>, %res4: memref<?x32xbf16>) attributes {hector.outputs = 4 : i64} {
  %c0 = arith.constant 0 : index
  %n = memref.dim %src, %c0 : memref<?xi32>
  %m = memref.alloc(%n) : memref<?x32xf32>
  "hector_intra.gemm_template"(%x, %w, %src, %m) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 1>} : (memref<?x16xbf16>, memref<16x32xbf16>, memref<?xi32>, memref<?x32xf32>) -> ()
  "hector_intra.gemm_template"(%m, %w2, %res) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x32xf32>, memref<32x32xbf16>, memref<?x32xbf16>) -> ()
  %a = memref.alloc(%n) : memref<?x32xf32>
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%a : memref<?x32xf32>)
  "hector_intra.gemm_template"(%x, %w, %src, %a) {variant = "xw", epilogue = "add", tile_n = 8 : i64, block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 1>} : (memref<?x16xbf16>, memref<16x32xbf16>, memref<?xi32>, memref<?x32xf32>) -> ()
  "hector_intra.traversal_template"(%a, %res2) {fn = "relu", reduce = "none", parallel = "node", block_size = 256 : i64, slope = 0.0 : f32, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x32xf32>, memref<?x32xbf16>) -> ()
  %s = memref.alloc(%n) : memref<?x4xf32>
  "hector_intra.gemm_template"(%x, %q, %src, %s) {variant = "xw", epilogue = "store", tile_n = 4 : i64, block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 1>} : (memref<?x16xbf16>, memref<16x4xbf16>, memref<?xi32>, memref<?x4xf32>) -> ()
  "hector_intra.traversal_template"(%s, %res3) {fn = "relu", reduce = "none", parallel = "node", block_size = 256 : i64, slope = 0.0 : f32, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x4xf32>, memref<?x4xbf16>) -> ()
  %rows = memref.dim %x, %c0 : memref<?x16xbf16>
  %nodes = memref.alloc(%rows) : memref<?x32xf32>
  "hector_intra.gemm_template"(%x, %w, %nodes) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x16xbf16>, memref<16x32xbf16>, memref<?x32xf32>) -> ()
  "hector_intra.traversal_template"(%nodes, %res4) {fn = "relu", reduce = "none", parallel = "node", block_size = 256 : i64, slope = 0.0 : f32, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x32xf32>, memref<?x32xbf16>) -> ()
  memref.dealloc %nodes : memref<?x32xf32>
  memref.dealloc %s : memref<?x4xf32>
  memref.dealloc %a : memref<?x32xf32>
  memref.dealloc %m : memref<?x32xf32>
  return
}

// -----

// An unpacked GEMM (rows one at a time) into a bf16 message sums each row in an f32 scratch
// row, then rounds each element as it stores it: out never holds a partial sum.
// CHECK-LABEL: func.func @message_rows
// CHECK: memref.alloc(%{{.*}}) : memref<?x32xbf16>
// LOOPS-LABEL: func.func private @message_rows_template0
// LOOPS: %[[ROW:.*]] = memref.alloca() : memref<32xf32>
// LOOPS-NOT: memref<?x32xbf16>
// LOOPS: %[[SUM:.*]] = arith.addf %{{.*}} : f32
// LOOPS-NEXT: memref.store %[[SUM]], %[[ROW]][%{{.*}}] : memref<32xf32>
// LOOPS-NOT: memref<?x32xbf16>
// LOOPS: arith.bitcast %[[V:.*]] : f32 to i32
// LOOPS: arith.cmpf uno, %[[V]], %[[V]] : f32
// LOOPS: %[[E:.*]] = arith.bitcast %{{.*}} : i16 to bf16
// LOOPS-NEXT: memref.store %[[E]], %{{.*}} : memref<?x32xbf16>
func.func @message_rows(%x: memref<?x16xbf16>, %w: memref<16x32xbf16>, %src: memref<?xi32>, %res: memref<?x32xbf16>) attributes {hector.outputs = 1 : i64} {
  %c0 = arith.constant 0 : index
  %n = memref.dim %src, %c0 : memref<?xi32>
  %m = memref.alloc(%n) : memref<?x32xf32>
  "hector_intra.gemm_template"(%x, %w, %src, %m) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 256 : i64, schedule = {pack = false, parallel = "rows", threads = 2 : i64, tile_k = 0 : i64, tile_m = 1 : i64, tile_n = 0 : i64, unroll = 1 : i64, vector = 1 : i64}, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 1>} : (memref<?x16xbf16>, memref<16x32xbf16>, memref<?xi32>, memref<?x32xf32>) -> ()
  "hector_intra.traversal_template"(%m, %res) {fn = "relu", reduce = "none", parallel = "node", block_size = 256 : i64, slope = 0.0 : f32, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x32xf32>, memref<?x32xbf16>) -> ()
  memref.dealloc %m : memref<?x32xf32>
  return
}

// -----

// A function whose trailing "outputs" are not buffers is left alone (no diagnostic).
// CHECK-LABEL: func.func @not_buffers
// CHECK: memref.alloc(%{{.*}}) : memref<?x32xf32>
func.func @not_buffers(%x: memref<?x16xbf16>, %w: memref<16x32xbf16>, %src: memref<?xi32>, %res: memref<?x32xbf16>, %k: index) attributes {hector.outputs = 1 : i64} {
  %c0 = arith.constant 0 : index
  %n = memref.dim %src, %c0 : memref<?xi32>
  %m = memref.alloc(%n) : memref<?x32xf32>
  "hector_intra.gemm_template"(%x, %w, %src, %m) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 1>} : (memref<?x16xbf16>, memref<16x32xbf16>, memref<?xi32>, memref<?x32xf32>) -> ()
  "hector_intra.traversal_template"(%m, %res) {fn = "relu", reduce = "none", parallel = "node", block_size = 256 : i64, slope = 0.0 : f32, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x32xf32>, memref<?x32xbf16>) -> ()
  memref.dealloc %m : memref<?x32xf32>
  return
}

// -----

// A sum of gathered rows (aggregate-first RGCN: scaled source rows summed into the
// (destination, relation) pairs) that only a GEMM reads as its rows is stored in bf16 as well:
// its zero fill goes, and the sum becomes a segmented sum (hector.segmented_sum), which writes
// every pair's row once, rounded from its f32 sum. The sum into the result stays f32.
// CHECK-LABEL: func.func @pair_sums
// CHECK: %[[P:.*]] = memref.alloc(%{{.*}}) : memref<?x32xbf16>
// CHECK-NOT: linalg.fill ins(%{{.*}} : f32) outs(%[[P]]
// CHECK: "hector_intra.traversal_template"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[P]]) {{.*}}hector.segmented_sum
// CHECK: %[[ACC:.*]] = memref.alloc(%{{.*}}) : memref<?x32xf32>
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%[[ACC]]
// CHECK: "hector_intra.gemm_template"(%[[P]], {{.*}} : (memref<?x32xbf16>,
// CHECK-NOT: hector.segmented_sum

// Loops: the rows grouped by pair (counts, prefix sums, the rows placed in order), then per
// pair its rows summed in two f32 vectors carried by the loop over them (bf16 x widened, times
// the row's scale), each rounded to bf16 once and written as one vector.
// LOOPS-LABEL: func.func private @pair_sums_template0
// LOOPS: memref.alloc(%{{.*}}) : memref<?xindex>
// LOOPS: memref.alloc(%{{.*}}) : memref<?xindex>
// LOOPS: memref.alloc(%{{.*}}) : memref<?xindex>
// LOOPS: scf.forall
// LOOPS: %[[SUMS:.*]]:2 = scf.for {{.*}} iter_args(%[[A:.*]] = %{{.*}}, %[[B:.*]] = %{{.*}}) -> (vector<16xf32>, vector<16xf32>)
// LOOPS: vector.transfer_read {{.*}} : memref<?x32xbf16>, vector<16xbf16>
// LOOPS: arith.addf %[[A]]
// LOOPS: arith.addf %[[B]]
// LOOPS: arith.bitcast %[[SUMS]]#0 : vector<16xf32> to vector<16xi32>
// LOOPS: vector.transfer_write %{{.*}} : vector<16xbf16>, memref<?x32xbf16>
// LOOPS: vector.transfer_write %{{.*}} : vector<16xbf16>, memref<?x32xbf16>
// LOOPS-NOT: memref.alloca
// LOOPS: return
func.func @pair_sums(%x: memref<?x32xbf16>, %w: memref<4x32x32xbf16>, %src: memref<?xi32>, %pair: memref<?xi32>, %s: memref<?x1xf32>, %pdst: memref<?xi32>, %ptype: memref<?xi32>, %res: memref<?x32xbf16>) attributes {hector.outputs = 1 : i64} {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0.0 : f32
  %d = memref.dim %pdst, %c0 : memref<?xi32>
  %p = memref.alloc(%d) : memref<?x32xf32>
  linalg.fill ins(%zero : f32) outs(%p : memref<?x32xf32>)
  "hector_intra.traversal_template"(%src, %pair, %x, %s, %p) {fn = "scale", reduce = "sum", parallel = "edge", block_size = 256 : i64, slope = 0.0 : f32, operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 1>} : (memref<?xi32>, memref<?xi32>, memref<?x32xbf16>, memref<?x1xf32>, memref<?x32xf32>) -> ()
  %n = memref.dim %res, %c0 : memref<?x32xbf16>
  %acc = memref.alloc(%n) : memref<?x32xf32>
  linalg.fill ins(%zero : f32) outs(%acc : memref<?x32xf32>)
  "hector_intra.gemm_template"(%p, %w, %ptype, %pdst, %acc) {variant = "xw", epilogue = "add", tile_n = 8 : i64, block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 0, 1>} : (memref<?x32xf32>, memref<4x32x32xbf16>, memref<?xi32>, memref<?xi32>, memref<?x32xf32>) -> ()
  "hector_intra.traversal_template"(%acc, %res) {fn = "relu", reduce = "none", parallel = "node", block_size = 256 : i64, slope = 0.0 : f32, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x32xf32>, memref<?x32xbf16>) -> ()
  memref.dealloc %acc : memref<?x32xf32>
  memref.dealloc %p : memref<?x32xf32>
  return
}

// -----

// A row function the vector form does not take (a product with a second row) sums each pair
// in an f32 scratch row instead, an element at a time, rounded to bf16 as each element is
// stored.
// CHECK-LABEL: func.func @pair_products
// CHECK: "hector_intra.traversal_template"{{.*}}fn = "mul"{{.*}}hector.segmented_sum
// LOOPS-LABEL: func.func private @pair_products_template0
// LOOPS: scf.forall
// LOOPS: %[[S:.*]] = memref.alloca() : memref<1x32xf32>
// LOOPS: memref.store %{{.*}}, %[[S]]
// LOOPS: arith.mulf
// LOOPS: memref.store %{{.*}}, %[[S]]
// LOOPS: memref.load %[[S]]
// LOOPS: arith.bitcast %{{.*}} : i16 to bf16
// LOOPS: memref.store %{{.*}} : memref<?x32xbf16>
func.func @pair_products(%x: memref<?x32xbf16>, %y: memref<?x32xf32>, %w: memref<32x32xbf16>, %src: memref<?xi32>, %pair: memref<?xi32>, %pdst: memref<?xi32>, %res: memref<?x32xbf16>) attributes {hector.outputs = 1 : i64} {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0.0 : f32
  %d = memref.dim %pdst, %c0 : memref<?xi32>
  %p = memref.alloc(%d) : memref<?x32xf32>
  linalg.fill ins(%zero : f32) outs(%p : memref<?x32xf32>)
  "hector_intra.traversal_template"(%src, %pair, %x, %y, %p) {fn = "mul", reduce = "sum", parallel = "edge", block_size = 256 : i64, slope = 0.0 : f32, operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 1>} : (memref<?xi32>, memref<?xi32>, memref<?x32xbf16>, memref<?x32xf32>, memref<?x32xf32>) -> ()
  "hector_intra.gemm_template"(%p, %w, %res) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x32xf32>, memref<32x32xbf16>, memref<?x32xbf16>) -> ()
  memref.dealloc %p : memref<?x32xf32>
  return
}

// -----

// An edge-wise traversal that does not reduce (HGT's message plus its relation's bias, one
// row per edge) writes a message too: stored in bf16 when only traversals read it. A
// node-wise one (parallel = "node") whose only other reader is the copy rounding it into the
// bf16 result writes the result itself, rounding each element as it writes it (the copy goes).
// CHECK-LABEL: func.func @biased_messages
// CHECK-SAME: %[[RES:[a-z0-9]*]]: memref<?x32xbf16>) attributes
// CHECK: %[[B:.*]] = memref.alloc(%{{.*}}) : memref<?x32xbf16>
// CHECK: "hector_intra.traversal_template"(%{{.*}}, %{{.*}}, %{{.*}}, %[[B]]) {{.*}}fn = "add"{{.*}}parallel = "edge"
// CHECK: "hector_intra.traversal_template"(%{{.*}}, %[[B]], %{{.*}}) {{.*}}fn = "copy"{{.*}}reduce = "sum"
// CHECK-NOT: memref.alloc
// CHECK: "hector_intra.traversal_template"(%{{.*}}, %[[RES]]) {{.*}}fn = "relu"
// CHECK-NOT: fn = "copy"
// Loops: the edge-wise add reads and writes bf16 rows 16 columns at a time (x and the bias row
// read as vectors, the sum rounded as a vector); the relu stays an element loop, rounding
// each element to bf16 as it stores it.
// LOOPS-LABEL: func.func private @biased_messages_template0
// LOOPS: scf.forall
// LOOPS: vector.transfer_read %{{.*}} : memref<?x32xbf16>, vector<16xbf16>
// LOOPS: vector.transfer_read %{{.*}} : memref<4x32xf32>, vector<16xf32>
// LOOPS: arith.addf %{{.*}} : vector<16xf32>
// LOOPS: arith.bitcast %{{.*}} : vector<16xi16> to vector<16xbf16>
// LOOPS: vector.transfer_write %{{.*}} : vector<16xbf16>, memref<?x32xbf16>
// LOOPS-LABEL: func.func private @biased_messages_template2
// LOOPS-NOT: vector.transfer_write
// LOOPS: memref.store %{{.*}} : memref<?x32xbf16>
// LOOPS-NOT: func.func private @biased_messages_template3
func.func @biased_messages(%m: memref<?x32xbf16>, %etype: memref<?xi32>, %bias: memref<4x32xf32>, %dst: memref<?xi32>, %res: memref<?x32xbf16>) attributes {hector.outputs = 1 : i64} {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0.0 : f32
  %e = memref.dim %etype, %c0 : memref<?xi32>
  %b = memref.alloc(%e) : memref<?x32xf32>
  "hector_intra.traversal_template"(%etype, %m, %bias, %b) {fn = "add", reduce = "none", parallel = "edge", block_size = 256 : i64, slope = 0.0 : f32, operandSegmentSizes = array<i32: 0, 0, 1, 1, 1, 1>} : (memref<?xi32>, memref<?x32xbf16>, memref<4x32xf32>, memref<?x32xf32>) -> ()
  %n = memref.dim %res, %c0 : memref<?x32xbf16>
  %acc = memref.alloc(%n) : memref<?x32xf32>
  linalg.fill ins(%zero : f32) outs(%acc : memref<?x32xf32>)
  "hector_intra.traversal_template"(%dst, %b, %acc) {fn = "copy", reduce = "sum", parallel = "edge", block_size = 256 : i64, slope = 0.0 : f32, operandSegmentSizes = array<i32: 0, 1, 0, 1, 0, 1>} : (memref<?xi32>, memref<?x32xf32>, memref<?x32xf32>) -> ()
  %node = memref.alloc(%n) : memref<?x32xf32>
  "hector_intra.traversal_template"(%acc, %node) {fn = "relu", reduce = "none", parallel = "node", block_size = 256 : i64, slope = 0.0 : f32, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x32xf32>, memref<?x32xf32>) -> ()
  "hector_intra.traversal_template"(%node, %res) {fn = "copy", reduce = "none", parallel = "node", block_size = 256 : i64, slope = 0.0 : f32, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x32xf32>, memref<?x32xbf16>) -> ()
  memref.dealloc %node : memref<?x32xf32>
  memref.dealloc %acc : memref<?x32xf32>
  memref.dealloc %b : memref<?x32xf32>
  return
}

// -----

// A training step's function (f32 results) on bf16 features whose GEMMs compute on bf16 pairs
// (products = "bf16"): its half type is its arguments', bf16. RGCN's pair sums, read by the
// scatter-GEMM and copied at the end into the bf16 saved output (`hector-half-saved`), become
// a segmented sum that writes that output itself (the f32 buffer, its zero fill and the copy
// go); the GEMM reads the bf16 pairs, which its pair products round to bf16 anyway. The f32
// result stays f32.
// CHECK-LABEL: func.func @training_step
// CHECK-SAME: %[[OUT:[a-z0-9]*]]: memref<?x32xf32>, %[[SAVED:[a-z0-9]*]]: memref<?x32xbf16>) attributes
// CHECK-NOT: memref.alloc
// CHECK: "hector_intra.traversal_template"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[SAVED]]) {{.*}}hector.segmented_sum
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%[[OUT]]
// CHECK: "hector_intra.gemm_template"(%[[SAVED]], {{.*}}, %[[OUT]]) {{.*}} : (memref<?x32xbf16>,
// CHECK-NOT: fn = "copy"
// CHECK-NOT: memref.dealloc
// CHECK: return
func.func @training_step(%x: memref<?x32xbf16>, %w: memref<4x32x32xf32>, %src: memref<?xi32>, %pair: memref<?xi32>, %s: memref<?x1xf32>, %pdst: memref<?xi32>, %ptype: memref<?xi32>, %res: memref<?x32xf32>, %saved: memref<?x32xbf16>) attributes {hector.outputs = 2 : i64} {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0.0 : f32
  %d = memref.dim %pdst, %c0 : memref<?xi32>
  %p = memref.alloc(%d) : memref<?x32xf32>
  linalg.fill ins(%zero : f32) outs(%p : memref<?x32xf32>)
  "hector_intra.traversal_template"(%src, %pair, %x, %s, %p) {fn = "scale", reduce = "sum", parallel = "edge", block_size = 256 : i64, slope = 0.0 : f32, operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 1>} : (memref<?xi32>, memref<?xi32>, memref<?x32xbf16>, memref<?x1xf32>, memref<?x32xf32>) -> ()
  linalg.fill ins(%zero : f32) outs(%res : memref<?x32xf32>)
  "hector_intra.gemm_template"(%p, %w, %ptype, %pdst, %res) {variant = "xw", epilogue = "add", tile_n = 8 : i64, block_size = 256 : i64, schedule = {pack = true, parallel = "rows", products = "bf16", threads = 2 : i64, tile_k = 1 : i64, tile_m = 32 : i64, tile_n = 32 : i64, unroll = 8 : i64, vector = 16 : i64}, operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 0, 1>} : (memref<?x32xf32>, memref<4x32x32xf32>, memref<?xi32>, memref<?xi32>, memref<?x32xf32>) -> ()
  "hector_intra.traversal_template"(%p, %saved) {fn = "copy", reduce = "none", parallel = "node", block_size = 256 : i64, slope = 0.0 : f32, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x32xf32>, memref<?x32xbf16>) -> ()
  memref.dealloc %p : memref<?x32xf32>
  return
}

// -----

// Declined: the same step whose GEMM computes in f32 (no AVX512-BF16, or HECTOR_BF16_DOT=off):
// f32 results and no bf16 pair products, so no half type; the sum accumulates in f32 and the
// copy rounds it into the saved output, as converted.
// CHECK-LABEL: func.func @training_step_f32_products
// CHECK: %[[P:.*]] = memref.alloc(%{{.*}}) : memref<?x32xf32>
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%[[P]]
// CHECK-NOT: hector.segmented_sum
// CHECK: "hector_intra.traversal_template"(%[[P]], %{{.*}}) {{.*}}fn = "copy"
func.func @training_step_f32_products(%x: memref<?x32xbf16>, %w: memref<4x32x32xf32>, %src: memref<?xi32>, %pair: memref<?xi32>, %s: memref<?x1xf32>, %pdst: memref<?xi32>, %ptype: memref<?xi32>, %res: memref<?x32xf32>, %saved: memref<?x32xbf16>) attributes {hector.outputs = 2 : i64} {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0.0 : f32
  %d = memref.dim %pdst, %c0 : memref<?xi32>
  %p = memref.alloc(%d) : memref<?x32xf32>
  linalg.fill ins(%zero : f32) outs(%p : memref<?x32xf32>)
  "hector_intra.traversal_template"(%src, %pair, %x, %s, %p) {fn = "scale", reduce = "sum", parallel = "edge", block_size = 256 : i64, slope = 0.0 : f32, operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 1>} : (memref<?xi32>, memref<?xi32>, memref<?x32xbf16>, memref<?x1xf32>, memref<?x32xf32>) -> ()
  linalg.fill ins(%zero : f32) outs(%res : memref<?x32xf32>)
  "hector_intra.gemm_template"(%p, %w, %ptype, %pdst, %res) {variant = "xw", epilogue = "add", tile_n = 8 : i64, block_size = 256 : i64, schedule = {pack = true, parallel = "rows", threads = 2 : i64, tile_k = 1 : i64, tile_m = 32 : i64, tile_n = 32 : i64, unroll = 4 : i64, vector = 16 : i64}, operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 0, 1>} : (memref<?x32xf32>, memref<4x32x32xf32>, memref<?xi32>, memref<?xi32>, memref<?x32xf32>) -> ()
  "hector_intra.traversal_template"(%p, %saved) {fn = "copy", reduce = "none", parallel = "node", block_size = 256 : i64, slope = 0.0 : f32, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x32xf32>, memref<?x32xbf16>) -> ()
  memref.dealloc %p : memref<?x32xf32>
  return
}

// -----

// Declined fold: a buffer two templates write (a GEMM then an accumulating GEMM) keeps its
// copy into the bf16 result: neither writer may round it alone.
// CHECK-LABEL: func.func @two_writers
// CHECK: %[[A:.*]] = memref.alloc(%{{.*}}) : memref<?x32xf32>
// CHECK: "hector_intra.traversal_template"(%[[A]], %{{.*}}) {{.*}}fn = "copy"
func.func @two_writers(%x: memref<?x16xbf16>, %w: memref<16x32xbf16>, %res: memref<?x32xbf16>) attributes {hector.outputs = 1 : i64} {
  %c0 = arith.constant 0 : index
  %n = memref.dim %x, %c0 : memref<?x16xbf16>
  %a = memref.alloc(%n) : memref<?x32xf32>
  "hector_intra.gemm_template"(%x, %w, %a) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x16xbf16>, memref<16x32xbf16>, memref<?x32xf32>) -> ()
  "hector_intra.gemm_template"(%x, %w, %a) {variant = "xw", epilogue = "add", tile_n = 8 : i64, block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x16xbf16>, memref<16x32xbf16>, memref<?x32xf32>) -> ()
  "hector_intra.traversal_template"(%a, %res) {fn = "copy", reduce = "none", parallel = "node", block_size = 256 : i64, slope = 0.0 : f32, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x32xf32>, memref<?x32xbf16>) -> ()
  memref.dealloc %a : memref<?x32xf32>
  return
}
