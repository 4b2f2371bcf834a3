// RUN: hector-opt %s --split-input-file -p 'hector-fuse, convert-hector-inter-to-intra' | FileCheck %s
// RUN: hector-opt %s --split-input-file -p 'hector-autodiff' | FileCheck %s --check-prefix=AUTODIFF
// RUN: hector-opt %s --split-input-file -p 'hector-fuse, convert-hector-inter-to-intra, hector-schedule{threads=2}, hector-outline-templates, convert-hector-intra-to-scf' | FileCheck %s --check-prefix=LOOPS

// Arguments a caller stores in f16 or bf16 (`hector.storage`): the function computes on their
// f32 values; the converted function takes them in their storage type and the templates that
// read them extend each element on load. Everything the templates write stays f32.

// CHECK-LABEL: func.func @rgcn
// CHECK-SAME: %[[X:[^:]*]]: memref<?x16xbf16>, %[[W:[^:]*]]: memref<3x16x8xbf16>, %[[W0:[^:]*]]: memref<16x8xf16>, %[[B:[^:]*]]: memref<8xf32>, %[[OUT:[^:]*]]: memref<?x8xf32>)
// CHECK: "hector_intra.gemm_template"(%[[X]], %[[W]], {{.*}} : (memref<?x16xbf16>, memref<3x16x8xbf16>, {{.*}}, memref<?x8xf32>) -> ()
// CHECK: "hector_intra.gemm_template"(%[[X]], %[[W0]], %{{.*}}) {{.*}} : (memref<?x16xbf16>, memref<16x8xf16>, memref<?x8xf32>) -> ()
// CHECK-NOT: memref.alloc{{.*}}bf16
// CHECK: return

// The training pair keeps the storage of the arguments it shares with the forward function.
// AUTODIFF-LABEL: func.func @rgcn_train
// AUTODIFF-SAME: %{{[^:]*}}: tensor<?x16xf32> {hector.kind = "node", hector.storage = bf16}, %{{[^:]*}}: tensor<3x16x8xf32> {hector.kind = "weight", hector.storage = bf16}, %{{[^:]*}}: tensor<16x8xf32> {hector.kind = "weight", hector.storage = f16}, %{{[^:]*}}: tensor<8xf32> {hector.kind = "weight"})
// AUTODIFF-LABEL: func.func @rgcn_backward
// AUTODIFF-SAME: %{{[^:]*}}: tensor<?x16xf32> {hector.kind = "node", hector.storage = bf16}, %{{[^:]*}}: tensor<3x16x8xf32> {hector.kind = "weight", hector.storage = bf16}, %{{[^:]*}}: tensor<16x8xf32> {hector.kind = "weight", hector.storage = f16}, %{{[^:]*}}: tensor<8xf32> {hector.kind = "weight"}

// Loops: a packed row of the bf16 input is read as bf16 lanes and widened to f32 (a bf16 is
// the top half of an f32: a shift left by 16 as integers) before the f32 micro-kernel; rows
// that go one at a time read 16 lanes at a time too. A half weight is copied to f32 once per call
// (the tiles re-read it), the f16 one through arith.extf.
// LOOPS-LABEL: func.func private @rgcn_template0
// LOOPS: %[[WIDE:.*]] = memref.alloc() : memref<3x16x8xf32>
// LOOPS: memref.load %{{.*}} : memref<3x16x8xbf16>
// LOOPS: arith.shli
// LOOPS: memref.store %{{.*}}, %[[WIDE]]
// LOOPS: vector.transfer_read {{.*}} : memref<?x16xbf16>, vector<16xbf16>
// LOOPS-NEXT: arith.bitcast %{{.*}} : vector<16xbf16> to vector<16xi16>
// LOOPS-NEXT: arith.extui %{{.*}} : vector<16xi16> to vector<16xi32>
// LOOPS-NEXT: arith.shli
// LOOPS-NEXT: arith.bitcast %{{.*}} : vector<16xi32> to vector<16xf32>
// LOOPS: vector.transfer_read {{.*}} : memref<?x16xbf16>, vector<16xbf16>
// LOOPS-NOT: memref.load {{.*}} : memref<?x16xbf16>
// LOOPS: memref.dealloc %[[WIDE]]
// LOOPS-LABEL: func.func private @rgcn_template1
// LOOPS: %[[WIDE1:.*]] = memref.alloc() : memref<16x8xf32>
// LOOPS: arith.extf %{{.*}} : f16 to f32
// LOOPS-NOT: xf16>
// LOOPS: memref.dealloc %[[WIDE1]]
func.func @rgcn(%g: !hector_inter.graph, %x: tensor<?x16xf32> {hector.storage = bf16, hector.kind = "node"}, %w: tensor<3x16x8xf32> {hector.storage = bf16}, %w0: tensor<16x8xf32> {hector.storage = f16}, %b: tensor<8xf32>) -> tensor<?x8xf32> {
  %xs = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  %m = "hector_inter.typed_linear"(%g, %xs, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<3x16x8xf32>) -> tensor<?x8xf32>
  %n = "hector_inter.degree_norm"(%g) {by = "dst_etype"} : (!hector_inter.graph) -> tensor<?x1xf32>
  %mn = "hector_inter.scale"(%m, %n) : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %agg = "hector_inter.sum_to_dst"(%g, %mn) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %self = "hector_inter.typed_linear"(%g, %x, %w0) {slice = "none"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  %h = "hector_inter.add"(%agg, %self) : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %hb = "hector_inter.add"(%h, %b) : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  %r = "hector_inter.unary"(%hb) {fn = "relu", slope = 0.0 : f32} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %r : tensor<?x8xf32>
}

// -----

// A stored input returned as it is becomes an f32 output through a copying traversal (which
// extends it), not a byte copy.
// CHECK-LABEL: func.func @returned
// CHECK-SAME: %[[X:[^:]*]]: memref<?x16xbf16>
// CHECK-NOT: memref.copy
// CHECK: "hector_intra.traversal_template"(%[[X]], %{{.*}}) {{.*}}fn = "copy"{{.*}} : (memref<?x16xbf16>, memref<?x16xf32>) -> ()
func.func @returned(%g: !hector_inter.graph, %x: tensor<?x16xf32> {hector.storage = bf16, hector.kind = "node"}, %w: tensor<16x8xf32>) -> (tensor<?x8xf32>, tensor<?x16xf32>) {
  %m = "hector_inter.typed_linear"(%g, %x, %w) {slice = "none"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  return %m, %x : tensor<?x8xf32>, tensor<?x16xf32>
}

// -----

// Results the caller takes in f16 or bf16 (`hector.storage` in `res_attrs`): computed in f32
// as ever (the fused GEMM sums into destinations in an f32 buffer). An elementwise traversal
// read by nothing else (the relu) rounds each element as it writes the half output itself, no
// f32 buffer between; a sum (which re-reads its output) is rounded by one copying traversal
// after it. A stored input returned in its own storage is a byte copy.
// CHECK-LABEL: func.func @stored_results
// CHECK-SAME: %[[X:[^:]*]]: memref<?x16xbf16>, %{{[^:]*}}: memref<16x8xf32>, %[[OUT:[^:]*]]: memref<?x8xbf16>, %[[OUT1:[^:]*]]: memref<?x8xf16>, %[[OUT2:[^:]*]]: memref<?x16xbf16>)
// CHECK: %[[SUM:.*]] = memref.alloc(%{{.*}}) : memref<?x8xf32>
// CHECK: "hector_intra.gemm_template"(%[[X]], {{.*}}, %[[SUM]])
// CHECK-NOT: memref.alloc
// CHECK: "hector_intra.traversal_template"(%[[SUM]], %[[OUT]]) {{.*}}fn = "relu"{{.*}} : (memref<?x8xf32>, memref<?x8xbf16>) -> ()
// CHECK-NOT: fn = "copy"{{.*}}memref<?x8xbf16>
// CHECK: "hector_intra.traversal_template"(%[[SUM]], %[[OUT1]]) {{.*}}fn = "copy"{{.*}} : (memref<?x8xf32>, memref<?x8xf16>) -> ()
// CHECK: memref.copy %[[X]], %[[OUT2]] : memref<?x16xbf16> to memref<?x16xbf16>

// Loops: the relu's bf16 output is rounded to the nearest even as integers, NaN as 0x7FC0
// (32704), from the f32 value the row's scratch holds; the f16 one through arith.truncf.
// LOOPS-LABEL: func.func private @stored_results_template1
// LOOPS-DAG: %[[NAN:.*]] = arith.constant 32704 : i16
// LOOPS-DAG: %[[BIAS:.*]] = arith.constant 32767 : i32
// LOOPS: %[[RELU:.*]] = arith.maximumf %{{.*}} : f32
// LOOPS-NEXT: memref.store %[[RELU]], %[[ROW:.*]][%{{.*}}] : memref<8xf32>
// LOOPS: %[[V:.*]] = memref.load %[[ROW]][%{{.*}}] : memref<8xf32>
// LOOPS-NEXT: %[[BITS:.*]] = arith.bitcast %[[V]] : f32 to i32
// LOOPS: arith.addi %{{.*}}, %[[BIAS]] : i32
// LOOPS: %[[ISNAN:.*]] = arith.cmpf uno, %[[V]], %[[V]] : f32
// LOOPS: %[[TOP:.*]] = arith.trunci %{{.*}} : i32 to i16
// LOOPS: %[[H:.*]] = arith.select %[[ISNAN]], %[[NAN]], %[[TOP]] : i16
// LOOPS: %[[B:.*]] = arith.bitcast %[[H]] : i16 to bf16
// LOOPS: memref.store %[[B]], %{{.*}} : memref<?x8xbf16>
// LOOPS-LABEL: func.func private @stored_results_template2
// LOOPS: %[[F:.*]] = arith.truncf %{{.*}} : f32 to f16
// LOOPS: memref.store %[[F]], %{{.*}} : memref<?x8xf16>
func.func @stored_results(%g: !hector_inter.graph, %x: tensor<?x16xf32> {hector.storage = bf16, hector.kind = "node"}, %w: tensor<16x8xf32>) -> (tensor<?x8xf32> {hector.storage = bf16}, tensor<?x8xf32> {hector.storage = f16}, tensor<?x16xf32> {hector.storage = bf16}) {
  %xs = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  %m = "hector_inter.typed_linear"(%g, %xs, %w) {slice = "none"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  %agg = "hector_inter.sum_to_dst"(%g, %m) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %r = "hector_inter.unary"(%agg) {fn = "relu", slope = 0.0 : f32} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %r, %agg, %x : tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x16xf32>
}

// -----

// A half result another op also reads keeps its f32 buffer (the reader takes the f32 values),
// rounded by a copy at the end; the relu that reads it, returned alone, writes its half output
// itself.
// CHECK-LABEL: func.func @read_again
// CHECK-SAME: %[[X:[^:]*]]: memref<?x8xf32>, %[[B:[^:]*]]: memref<8xf32>, %[[OUT:[^:]*]]: memref<?x8xbf16>, %[[OUT1:[^:]*]]: memref<?x8xbf16>)
// CHECK: %[[H:.*]] = memref.alloc(%{{.*}}) : memref<?x8xf32>
// CHECK: "hector_intra.traversal_template"(%[[X]], %[[B]], %[[H]]) {{.*}}fn = "add_bias"
// CHECK: "hector_intra.traversal_template"(%[[H]], %[[OUT1]]) {{.*}}fn = "relu"{{.*}} : (memref<?x8xf32>, memref<?x8xbf16>) -> ()
// CHECK: "hector_intra.traversal_template"(%[[H]], %[[OUT]]) {{.*}}fn = "copy"{{.*}} : (memref<?x8xf32>, memref<?x8xbf16>) -> ()
func.func @read_again(%g: !hector_inter.graph, %x: tensor<?x8xf32> {hector.kind = "node"}, %b: tensor<8xf32>) -> (tensor<?x8xf32> {hector.storage = bf16}, tensor<?x8xf32> {hector.storage = bf16}) {
  %h = "hector_inter.add"(%x, %b) : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  %r = "hector_inter.unary"(%h) {fn = "relu", slope = 0.0 : f32} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %h, %r : tensor<?x8xf32>, tensor<?x8xf32>
}

// -----

// A typed linear returned alone in bf16: its GEMM's store epilogue writes each row once, so it
// rounds into the half output itself (no f32 buffer and copy after it); the scheduled tile
// rounds each row of its f32 accumulators as one vector as it stores it. A typed linear that
// another op also reads keeps its f32 buffer and the copy.
// CHECK-LABEL: func.func @linear_result
// CHECK-SAME: %[[X:[^:]*]]: memref<?x16xf32>, %[[W:[^:]*]]: memref<16x32xf32>, %[[W2:[^:]*]]: memref<16x32xf32>, %[[OUT:[^:]*]]: memref<?x32xbf16>, %[[OUT1:[^:]*]]: memref<?x32xbf16>, %{{[^:]*}}: memref<?x32xf32>)
// CHECK: "hector_intra.gemm_template"(%[[X]], %[[W]], %[[OUT]]) {{.*}}epilogue = "store"{{.*}} : (memref<?x16xf32>, memref<16x32xf32>, memref<?x32xbf16>) -> ()
// CHECK: %[[H:.*]] = memref.alloc(%{{.*}}) : memref<?x32xf32>
// CHECK: "hector_intra.gemm_template"(%[[X]], %[[W2]], %[[H]])
// CHECK: "hector_intra.traversal_template"(%[[H]], %[[OUT1]]) {{.*}}fn = "copy"
// LOOPS-LABEL: func.func private @linear_result_template0
// LOOPS: %[[ROW:.*]] = vector.transfer_read %{{.*}} : memref<32x32xf32>, vector<32xf32>
// LOOPS: arith.bitcast %[[ROW]] : vector<32xf32> to vector<32xi32>
// LOOPS: %[[H16:.*]] = arith.bitcast %{{.*}} : vector<32xi16> to vector<32xbf16>
// LOOPS: vector.transfer_write %[[H16]], %{{.*}} : vector<32xbf16>, memref<?x32xbf16>
func.func @linear_result(%g: !hector_inter.graph, %x: tensor<?x16xf32> {hector.kind = "node"}, %w: tensor<16x32xf32>, %w2: tensor<16x32xf32>) -> (tensor<?x32xf32> {hector.storage = bf16}, tensor<?x32xf32> {hector.storage = bf16}, tensor<?x32xf32>) {
  %y = "hector_inter.typed_linear"(%g, %x, %w) {slice = "none"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<16x32xf32>) -> tensor<?x32xf32>
  %y1 = "hector_inter.typed_linear"(%g, %x, %w2) {slice = "none"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<16x32xf32>) -> tensor<?x32xf32>
  %r = "hector_inter.unary"(%y1) {fn = "relu", slope = 0.0 : f32} : (tensor<?x32xf32>) -> tensor<?x32xf32>
  return %y, %y1, %r : tensor<?x32xf32>, tensor<?x32xf32>, tensor<?x32xf32>
}
