// RUN: hector-opt %s --split-input-file -p 'hector-fuse, convert-hector-inter-to-intra' | FileCheck %s
// RUN: hector-opt %s --split-input-file -p 'hector-fuse, convert-hector-inter-to-intra{block_size=64 tile_n=4}' | FileCheck %s --check-prefix=SCHED
// RUN: hector-opt %s --split-input-file -p 'hector-fuse, convert-hector-inter-to-intra' | hector-opt --split-input-file -p hector-verify | FileCheck %s --check-prefix=REVERIFY

// The output of the conversion is valid hector_intra (the templates pass hector-verify again).
// REVERIFY-COUNT-2: "hector_intra.gemm_template"
// REVERIFY: "hector_intra.traversal_template"

// ---- RGCN: gather, per-etype GEMM, 1/c scale and sum in ONE scatter-GEMM -------------------

// The graph argument becomes its 10 arrays (src, dst, etype, ntype, etype_ptr, norm_dst_etype,
// norm_dst, compact_src, compact_etype, edge_compact), in place; the tensors become memrefs; the
// result becomes a trailing output.
// CHECK-LABEL: func.func @rgcn
// CHECK-SAME: (%[[SRC:[^:]*]]: memref<?xi32>, %[[DST:[^:]*]]: memref<?xi32>, %[[ETYPE:[^:]*]]: memref<?xi32>, %[[NTYPE:[^:]*]]: memref<?xi32>, %[[PTR:[^:]*]]: memref<?xi32>, %[[NORM:[^:]*]]: memref<?x1xf32>, %[[NORMD:[^:]*]]: memref<?x1xf32>,
// CHECK-SAME: %[[X:[^:]*]]: memref<?x16xf32>, %[[W:[^:]*]]: memref<3x16x8xf32>, %[[W0:[^:]*]]: memref<16x8xf32>, %[[B:[^:]*]]: memref<8xf32>, %[[OUT:[^:]*]]: memref<?x8xf32>)
// CHECK-SAME: attributes {hector.outputs = 1 : i64}
// CHECK-NOT: -> tensor
// CHECK: %[[C0:.*]] = arith.constant 0 : index
//   aggregation: one row per node (rows = #ntype), zero-filled; each edge's x[src] @ W[etype],
//   scaled by its 1/c, is accumulated into row dst: no per-edge message is ever stored
// CHECK-NEXT: %[[N:.*]] = memref.dim %[[NTYPE]], %[[C0]] : memref<?xi32>
// CHECK-NEXT: %[[AGG:.*]] = memref.alloc(%[[N]]) : memref<?x8xf32>
// CHECK-NEXT: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT: linalg.fill ins(%[[ZERO]] : f32) outs(%[[AGG]] : memref<?x8xf32>)
// CHECK-NEXT: "hector_intra.gemm_template"(%[[X]], %[[W]], %[[SRC]], %[[ETYPE]], %[[DST]], %[[NORM]], %[[AGG]])
// CHECK-SAME: block_size = 256 : i64, epilogue = "add", operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1>, tile_n = 8 : i64, variant = "xw"
//   self loop: shared weight, no gather
// CHECK: %[[SELF:.*]] = memref.alloc(%{{.*}}) : memref<?x8xf32>
// CHECK-NEXT: "hector_intra.gemm_template"(%[[X]], %[[W0]], %[[SELF]])
// CHECK-SAME: epilogue = "store", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>
//   h = agg + self; hb = h + bias; out = relu(hb), written straight into the output
// CHECK: %[[H:.*]] = memref.alloc(%{{.*}}) : memref<?x8xf32>
// CHECK-NEXT: "hector_intra.traversal_template"(%[[AGG]], %[[SELF]], %[[H]])
// CHECK-SAME: fn = "add", operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>, parallel = "node", reduce = "none"
// CHECK: %[[HB:.*]] = memref.alloc(%{{.*}}) : memref<?x8xf32>
// CHECK-NEXT: "hector_intra.traversal_template"(%[[H]], %[[B]], %[[HB]])
// CHECK-SAME: fn = "add_bias", operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>, parallel = "node", reduce = "none"
// CHECK-NEXT: "hector_intra.traversal_template"(%[[HB]], %[[OUT]])
// CHECK-SAME: fn = "relu", operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>, parallel = "node", reduce = "none"
//   every intermediate buffer is freed, the last allocated first
// CHECK-NEXT: memref.dealloc %[[HB]] : memref<?x8xf32>
// CHECK-NEXT: memref.dealloc %[[H]] : memref<?x8xf32>
// CHECK-NEXT: memref.dealloc %[[SELF]] : memref<?x8xf32>
// CHECK-NEXT: memref.dealloc %[[AGG]] : memref<?x8xf32>
// CHECK-NEXT: return{{$}}
// CHECK-NOT: hector_inter
// CHECK-NOT: memref.dealloc %[[OUT]]

// Two GEMM templates and three traversals in all; no degree_norm op survives (it is a graph
// array).
// SCHED-LABEL: func.func @rgcn
// SCHED-COUNT-2: "hector_intra.gemm_template"({{.*}}block_size = 64 : i64{{.*}}tile_n = 4 : i64, variant = "xw"}
// SCHED-COUNT-3: "hector_intra.traversal_template"({{.*}}block_size = 64 : i64
// SCHED-NOT: degree_norm
// SCHED: return
func.func @rgcn(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: tensor<3x16x8xf32>, %w0: tensor<16x8xf32>, %b: tensor<8xf32>) -> tensor<?x8xf32> {
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

// ---- a gather with another use is materialised, and the GEMM reads the copy -----------------

// CHECK-LABEL: func.func @gather_reused
// CHECK-SAME: (%[[SRC:[^:]*]]: memref<?xi32>, %[[DST:[^:]*]]: memref<?xi32>, %[[ETYPE:[^:]*]]: memref<?xi32>, {{.*}}, %[[X:[^:]*]]: memref<?x16xf32>, %[[W:[^:]*]]: memref<3x16x8xf32>, %[[OUT0:[^:]*]]: memref<?x8xf32>, %[[OUT1:[^:]*]]: memref<?x16xf32>)
// CHECK-SAME: attributes {hector.outputs = 2 : i64}
// CHECK: %[[XS:.*]] = memref.alloc(%{{.*}}) : memref<?x16xf32>
// CHECK-NEXT: "hector_intra.traversal_template"(%[[SRC]], %[[X]], %[[XS]])
// CHECK-SAME: fn = "copy", operandSegmentSizes = array<i32: 1, 0, 0, 1, 0, 1>, parallel = "edge", reduce = "none"
//   sum_to_dst without a scale: the GEMM adds each edge's product into its destination row
//   of the first output (a scatter-GEMM), no per-edge product stored
// CHECK-NOT: memref.alloc
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%[[OUT0]] : memref<?x8xf32>)
// CHECK-NEXT: "hector_intra.gemm_template"(%[[XS]], %[[W]], %[[ETYPE]], %[[DST]], %[[OUT0]])
// CHECK-SAME: epilogue = "add", operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 0, 1>
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%[[OUT1]] : memref<?x16xf32>)
// CHECK-NEXT: "hector_intra.traversal_template"(%{{.*}}, %[[XS]], %[[OUT1]])
// CHECK-SAME: fn = "copy", {{.*}}parallel = "edge", reduce = "sum"
// CHECK-NEXT: memref.dealloc %[[XS]]
// CHECK-NEXT: return
func.func @gather_reused(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: tensor<3x16x8xf32>) -> (tensor<?x8xf32>, tensor<?x16xf32>) {
  %xs = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  %m = "hector_inter.typed_linear"(%g, %xs, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<3x16x8xf32>) -> tensor<?x8xf32>
  %s = "hector_inter.sum_to_dst"(%g, %m) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %r = "hector_inter.sum_to_compact"(%g, %xs) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  return %s, %r : tensor<?x8xf32>, tensor<?x16xf32>
}

// -----

// ---- a gather used by two linears is folded into both; a returned gather is materialised ----

// CHECK-LABEL: func.func @gather_two_linears
// CHECK-SAME: (%[[SRC:[^:]*]]: memref<?xi32>, %{{[^:]*}}: memref<?xi32>, %[[ETYPE:[^:]*]]: memref<?xi32>, {{.*}}, %[[X:[^:]*]]: memref<?x16xf32>, %[[W:[^:]*]]: memref<3x16x8xf32>, %[[W0:[^:]*]]: memref<16x8xf32>, %[[O0:[^:]*]]: memref<?x8xf32>, %[[O1:[^:]*]]: memref<?x8xf32>)
// CHECK-NEXT: arith.constant 0 : index
// CHECK-NEXT: "hector_intra.gemm_template"(%[[X]], %[[W]], %[[SRC]], %[[ETYPE]], %[[O0]])
// CHECK-NEXT: "hector_intra.gemm_template"(%[[X]], %[[W0]], %[[SRC]], %[[O1]])
// CHECK-SAME: operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 1>
// CHECK-NEXT: return
func.func @gather_two_linears(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: tensor<3x16x8xf32>, %w0: tensor<16x8xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>) {
  %xs = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  %a = "hector_inter.typed_linear"(%g, %xs, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<3x16x8xf32>) -> tensor<?x8xf32>
  %b = "hector_inter.typed_linear"(%g, %xs, %w0) {slice = "none"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  return %a, %b : tensor<?x8xf32>, tensor<?x8xf32>
}

// -----

// CHECK-LABEL: func.func @gather_returned
// CHECK-SAME: %[[OXS:[^:]*]]: memref<?x16xf32>, %[[OM:[^:]*]]: memref<?x8xf32>)
// CHECK: "hector_intra.traversal_template"(%{{.*}}, %{{.*}}, %[[OXS]])
// CHECK-SAME: fn = "copy"
// CHECK-NEXT: "hector_intra.gemm_template"(%[[OXS]], %{{.*}}, %{{.*}}, %[[OM]])
// CHECK-SAME: operandSegmentSizes = array<i32: 1, 1, 0, 1, 0, 0, 1>
func.func @gather_returned(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: tensor<3x16x8xf32>) -> (tensor<?x16xf32>, tensor<?x8xf32>) {
  %xs = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  %m = "hector_inter.typed_linear"(%g, %xs, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<3x16x8xf32>) -> tensor<?x8xf32>
  return %xs, %m : tensor<?x16xf32>, tensor<?x8xf32>
}

// -----

// ---- gather_dst folds with index dst; degree_norm by dst reads norm_dst; scale alone --------

// CHECK-LABEL: func.func @gather_dst_scale
// CHECK-SAME: (%{{[^:]*}}: memref<?xi32>, %[[DST:[^:]*]]: memref<?xi32>, {{.*}}, %[[NORMDE:[^:]*]]: memref<?x1xf32>, %[[NORMD:[^:]*]]: memref<?x1xf32>, %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xi32>, %[[X:[^:]*]]: memref<?x16xf32>, %[[W:[^:]*]]: memref<16x8xf32>, %[[OUT:[^:]*]]: memref<?x8xf32>)
// CHECK: %[[E:.*]] = memref.dim %[[DST]], %{{.*}} : memref<?xi32>
// CHECK-NEXT: %[[M:.*]] = memref.alloc(%[[E]])
// CHECK-NEXT: "hector_intra.gemm_template"(%[[X]], %[[W]], %[[DST]], %[[M]])
// CHECK-SAME: operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 1>
// CHECK-NEXT: "hector_intra.traversal_template"(%[[M]], %[[NORMD]], %[[OUT]])
// CHECK-SAME: fn = "scale", operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>, parallel = "edge", reduce = "none"
// CHECK-NOT: linalg.fill
// CHECK: return
func.func @gather_dst_scale(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: tensor<16x8xf32>) -> tensor<?x8xf32> {
  %0 = "hector_inter.gather_dst"(%g, %x) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  %1 = "hector_inter.typed_linear"(%g, %0, %w) {slice = "none"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  %n = "hector_inter.degree_norm"(%g) {by = "dst"} : (!hector_inter.graph) -> tensor<?x1xf32>
  %2 = "hector_inter.scale"(%1, %n) : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  return %2 : tensor<?x8xf32>
}

// -----

// ---- a scale with another use is not fused into the sum ----------------------------------

// CHECK-LABEL: func.func @scale_returned
// CHECK-SAME: %[[NORMDE:[^:]*]]: memref<?x1xf32>, %{{[^:]*}}: memref<?x1xf32>, %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xi32>, %[[M:[^:]*]]: memref<?x8xf32>, %[[OSUM:[^:]*]]: memref<?x8xf32>, %[[OSC:[^:]*]]: memref<?x8xf32>)
// CHECK: "hector_intra.traversal_template"(%[[M]], %[[NORMDE]], %[[OSC]])
// CHECK-SAME: fn = "scale", {{.*}}reduce = "none"
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%[[OSUM]] : memref<?x8xf32>)
// CHECK-NEXT: "hector_intra.traversal_template"(%{{.*}}, %[[OSC]], %[[OSUM]])
// CHECK-SAME: fn = "copy", {{.*}}reduce = "sum"
func.func @scale_returned(%g: !hector_inter.graph, %m: tensor<?x8xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>) {
  %n = "hector_inter.degree_norm"(%g) {by = "dst_etype"} : (!hector_inter.graph) -> tensor<?x1xf32>
  %s = "hector_inter.scale"(%m, %n) : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %r = "hector_inter.sum_to_dst"(%g, %s) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %r, %s : tensor<?x8xf32>, tensor<?x8xf32>
}

// -----

// ---- node-type slicing: weight picked by ntype, rows are the nodes -------------------------

// CHECK-LABEL: func.func @ntype
// CHECK-SAME: (%{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xi32>, %[[NTYPE:[^:]*]]: memref<?xi32>, {{.*}}, %[[X:[^:]*]]: memref<?x16xf32>, %[[W:[^:]*]]: memref<2x16x8xf32>, %[[OUT:[^:]*]]: memref<?x8xf32>)
// CHECK-NEXT: arith.constant 0 : index
// CHECK-NEXT: "hector_intra.gemm_template"(%[[X]], %[[W]], %[[NTYPE]], %[[OUT]])
// CHECK-SAME: epilogue = "store", operandSegmentSizes = array<i32: 1, 1, 0, 1, 0, 0, 1>
// CHECK-NEXT: return
func.func @ntype(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: tensor<2x16x8xf32>) -> tensor<?x8xf32> {
  %0 = "hector_inter.typed_linear"(%g, %x, %w) {slice = "ntype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<2x16x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

// ---- values not computed here are copied into the outputs -----------------------------------

// CHECK-LABEL: func.func @copies
// CHECK-SAME: %[[NORMD:[^:]*]]: memref<?x1xf32>, %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xi32>, %[[X:[^:]*]]: memref<?x8xf32>, %[[O0:[^:]*]]: memref<?x8xf32>, %[[O1:[^:]*]]: memref<?x8xf32>, %[[O2:[^:]*]]: memref<?x8xf32>, %[[O3:[^:]*]]: memref<?x1xf32>)
// CHECK-SAME: attributes {hector.outputs = 4 : i64}
// CHECK: "hector_intra.traversal_template"(%[[X]], %[[O0]])
// CHECK-SAME: fn = "relu"
// CHECK-NEXT: memref.copy %[[O0]], %[[O1]] : memref<?x8xf32> to memref<?x8xf32>
// CHECK-NEXT: memref.copy %[[X]], %[[O2]] : memref<?x8xf32> to memref<?x8xf32>
// CHECK-NEXT: memref.copy %[[NORMD]], %[[O3]] : memref<?x1xf32> to memref<?x1xf32>
// CHECK-NEXT: return
func.func @copies(%g: !hector_inter.graph, %x: tensor<?x8xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x1xf32>) {
  %0 = "hector_inter.unary"(%x) {fn = "relu", slope = 0.0 : f32} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %n = "hector_inter.degree_norm"(%g) {by = "dst"} : (!hector_inter.graph) -> tensor<?x1xf32>
  return %0, %0, %x, %n : tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x1xf32>
}

// -----

// ---- static row counts allocate static buffers; functions without a graph keep their args --

// CHECK-LABEL: func.func @static_rows
// CHECK-SAME: (%[[A:[^:]*]]: memref<5x8xf32>, %[[B:[^:]*]]: memref<5x8xf32>, %[[OUT:[^:]*]]: memref<5x8xf32>)
// CHECK: %[[T:.*]] = memref.alloc() : memref<5x8xf32>
// CHECK-NEXT: "hector_intra.traversal_template"(%[[A]], %[[B]], %[[T]])
// CHECK-SAME: fn = "add"
// CHECK-NEXT: "hector_intra.traversal_template"(%[[T]], %[[OUT]])
// CHECK-SAME: fn = "copy"
// CHECK-NEXT: memref.dealloc %[[T]] : memref<5x8xf32>
func.func @static_rows(%a: tensor<5x8xf32>, %b: tensor<5x8xf32>) -> tensor<5x8xf32> {
  %0 = "hector_inter.add"(%a, %b) : (tensor<5x8xf32>, tensor<5x8xf32>) -> tensor<5x8xf32>
  %1 = "hector_inter.unary"(%0) {fn = "copy", slope = 0.0 : f32} : (tensor<5x8xf32>) -> tensor<5x8xf32>
  return %1 : tensor<5x8xf32>
}

// -----

// ---- a function without hector ops is left as it is, next to one that is converted ---------

// CHECK-LABEL: func.func @plain(%arg0: tensor<4xf32>) -> tensor<4xf32> {
// CHECK-NEXT: %[[S:.*]] = arith.addf %arg0, %arg0 : tensor<4xf32>
// CHECK-NEXT: return %[[S]] : tensor<4xf32>
// CHECK-LABEL: func.func @converted
// CHECK-SAME: attributes {hector.outputs = 1 : i64}
// CHECK: "hector_intra.traversal_template"
// CHECK-LABEL: func.func private @decl(tensor<?x8xf32>) -> tensor<?x8xf32>
func.func @plain(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = arith.addf %a, %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @converted(%g: !hector_inter.graph, %x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %0 = "hector_inter.unary"(%x) {fn = "relu", slope = 0.0 : f32} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}
func.func private @decl(tensor<?x8xf32>) -> tensor<?x8xf32>
