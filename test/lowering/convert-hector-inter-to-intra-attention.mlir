// RUN: hector-opt %S/../dialects/hector_inter/ops-attention.mlir -p 'hector-fuse, convert-hector-inter-to-intra' | FileCheck %s
// RUN: hector-opt %S/../dialects/hector_inter/ops-attention.mlir -p 'hector-fuse, convert-hector-inter-to-intra, convert-hector-intra-to-scf' | FileCheck %s --check-prefix=LOOPS
// RUN: hector-opt %S/../dialects/hector_inter/ops-attention.mlir -p 'hector-fuse, convert-hector-inter-to-intra, convert-hector-intra-to-gpu' | FileCheck %s --check-prefix=GPU

// Attention, gradient, compact and weight-product ops (input: the dialect round-trip test) lowered
// to templates. Graph arrays come first: src, dst, etype, ntype, etype_ptr, norm_dst_etype,
// norm_dst, compact_src, compact_etype, edge_compact.

// q_i · k_j per head reads both gathers through indices: x by dst, y by src.
// CHECK-LABEL: func.func @attention
// CHECK-SAME: (%[[SRC:[^:]*]]: memref<?xi32>, %[[DST:[^:]*]]: memref<?xi32>, %{{[^:]*}}: memref<?xi32>, %[[NTYPE:[^:]*]]: memref<?xi32>
// CHECK-SAME: %[[Q:[^:]*]]: memref<?x8xf32>, %[[K:[^:]*]]: memref<?x8xf32>, %[[V:[^:]*]]: memref<?x8xf32>, %[[OUT:[^:]*]]: memref<?x8xf32>)
// CHECK: "hector_intra.traversal_template"(%[[DST]], %[[SRC]], %[[Q]], %[[K]], %[[L:[^)]*]]) {{.*}}fn = "dot", operandSegmentSizes = array<i32: 1, 0, 1, 1, 1, 1>
// CHECK: fn = "leaky_relu", {{.*}}slope = 2.000000e-01 : f32
//   edge softmax: max per destination (from -inf), exp(x - max[dst]), sum per destination, divide
// CHECK: %[[NMAX:.*]] = memref.alloc(%{{.*}}) : memref<?x2xf32>
// CHECK: %[[NEGINF:.*]] = arith.constant 0xFF800000 : f32
// CHECK-NEXT: linalg.fill ins(%[[NEGINF]] : f32) outs(%[[NMAX]] : memref<?x2xf32>)
// CHECK-NEXT: "hector_intra.traversal_template"(%[[DST]], %[[A:[^,]*]], %[[NMAX]]) {{.*}}fn = "copy", {{.*}}reduce = "max"
// CHECK: "hector_intra.traversal_template"(%[[DST]], %[[A]], %[[NMAX]], %[[EX:[^)]*]]) {{.*}}fn = "exp_sub", operandSegmentSizes = array<i32: 0, 0, 1, 1, 1, 1>
// CHECK: "hector_intra.traversal_template"(%[[DST]], %[[EX]], %[[NSUM:[^)]*]]) {{.*}}fn = "copy", {{.*}}reduce = "sum"
// CHECK: "hector_intra.traversal_template"(%[[DST]], %[[EX]], %[[NSUM]], %[[ALPHA:[^)]*]]) {{.*}}fn = "div"
//   weighted sum: gather v by src, scale per head by alpha, sum onto dst, in one traversal
// CHECK: "hector_intra.traversal_template"(%[[SRC]], %[[DST]], %[[V]], %[[ALPHA]], %[[OUT]]) {{.*}}fn = "scale", operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 1>, parallel = "edge", reduce = "sum"

// Input and weight gradients of typed_linear are GEMM variants; the gather of the weight
// gradient's rows folds into its index.
// CHECK-LABEL: func.func @gradients
// CHECK: "hector_intra.gemm_template"({{.*}}) {{.*}}epilogue = "store", {{.*}}variant = "xwt"
// CHECK: "hector_intra.gemm_template"({{.*}}) {{.*}}epilogue = "add", operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1>, {{.*}}variant = "xty"
// CHECK: fn = "mul", {{.*}}reduce = "sum"
// CHECK: fn = "sub", operandSegmentSizes = array<i32: 0, 0, 1, 1, 1, 1>
// CHECK: fn = "mul", {{.*}}reduce = "none"
// CHECK: "hector_intra.traversal_template"(%{{[^,]*}}, %{{[^)]*}}) {{.*}}fn = "copy", operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>, parallel = "edge", reduce = "sum"{{.*}} : (memref<?x6xf32>, memref<6xf32>)
// CHECK: fn = "tanh_grad"

// Compact rows: the GEMM gathers by compact_src and picks weights by compact_etype.
// CHECK-LABEL: func.func @compact_and_typed_bias
// CHECK-SAME: %[[CSRC:arg7]]: memref<?xi32>, %[[CET:arg8]]: memref<?xi32>, %[[EC:arg9]]: memref<?xi32>
// CHECK: "hector_intra.gemm_template"(%{{.*}}, %{{.*}}, %[[CSRC]], %[[CET]], %{{.*}}) {{.*}}variant = "xw"
// CHECK: "hector_intra.traversal_template"(%[[EC]], {{.*}}fn = "copy", operandSegmentSizes = array<i32: 1, 0, 0, 1, 0, 1>
// CHECK: "hector_intra.traversal_template"(%[[EC]], {{.*}}fn = "copy", operandSegmentSizes = array<i32: 0, 1, 0, 1, 0, 1>, parallel = "edge", reduce = "sum"
// CHECK: "hector_intra.traversal_template"(%[[CSRC]], {{.*}}fn = "copy", operandSegmentSizes = array<i32: 0, 1, 0, 1, 0, 1>, parallel = "edge", reduce = "sum"
// CHECK: fn = "add", operandSegmentSizes = array<i32: 0, 0, 1, 1, 1, 1>, parallel = "node"

// Weight products run as one GEMM over the weight's rows [R*K, N].
// CHECK-LABEL: func.func @weight_products
// CHECK: memref.collapse_shape %{{.*}} {{\[\[}}0, 1], [2]] : memref<3x16x8xf32> into memref<48x8xf32>
// CHECK: variant = "xw"
// CHECK: variant = "xwt"
// CHECK: variant = "xty"

// Per-relation weights: one row copy per type through etype_src_ntype (the 11th graph array),
// per-slice products as GEMMs whose row i uses slice i / K (slice_rows), the gradient summed
// back onto node types by a scattered copy.
// CHECK-LABEL: func.func @per_slice
// CHECK-SAME: %[[SRCT:arg10]]: memref<?xi32>, {{.*}}, %[[W:arg14]]: memref<2x16x8xf32>
// CHECK: %[[WROWS:.*]] = memref.collapse_shape %[[W]] {{\[\[}}0], [1, 2]] : memref<2x16x8xf32> into memref<2x128xf32>
// CHECK: "hector_intra.traversal_template"(%[[SRCT]], %[[WROWS]], %{{.*}}) {{.*}}fn = "copy", operandSegmentSizes = array<i32: 1, 0, 0, 1, 0, 1>
// CHECK: "hector_intra.gemm_template"({{.*}}) {{.*}}slice_rows = 16 : i64{{.*}}variant = "xw"} : (memref<80x8xf32>, memref<5x8x4xf32>, memref<80x4xf32>)
// CHECK: "hector_intra.gemm_template"({{.*}}) {{.*}}slice_rows = 1 : i64{{.*}}variant = "xw"} : (memref<5x8xf32>, memref<5x8x4xf32>, memref<5x4xf32>)
// CHECK: slice_rows = 16 : i64{{.*}}variant = "xwt"
// CHECK: epilogue = "add"{{.*}}slice_rows = 16 : i64{{.*}}variant = "xty"} : (memref<80x8xf32>, memref<80x4xf32>, memref<5x8x4xf32>)
// CHECK: "hector_intra.traversal_template"(%[[SRCT]], {{.*}}fn = "copy", operandSegmentSizes = array<i32: 0, 1, 0, 1, 0, 1>, parallel = "node", reduce = "sum"

// CPU loops: the max reduction and exp appear as scalar math; no templates remain.
// LOOPS-LABEL: func.func @attention
// LOOPS: arith.maximumf
// LOOPS: math.exp
// LOOPS-NOT: hector_intra

// On the GPU the max reduction becomes an atomic max, the sums atomic adds.
// GPU: gpu.func @attention_{{[0-9]+}}_traversal
// GPU: memref.atomic_rmw maximumf
// GPU: memref.atomic_rmw addf

// The slice of a per-slice GEMM row is its row number divided by K (16 rows per relation).
// LOOPS-LABEL: func.func @per_slice
// LOOPS: arith.divui %{{.*}}, %c16 : index
// LOOPS-NOT: hector_intra
