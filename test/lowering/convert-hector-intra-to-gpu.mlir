// RUN: hector-opt %s --split-input-file -p convert-hector-intra-to-gpu | FileCheck %s
// RUN: hector-opt %s --split-input-file -p convert-hector-intra-to-gpu | FileCheck %s --check-prefix=KERNELS
// RUN: hector-opt %s --split-input-file -p convert-hector-intra-to-gpu | FileCheck %s --check-prefix=NOTEMPLATE
// RUN: hector-opt %s --split-input-file -p convert-hector-intra-to-gpu --mlir-print-debuginfo | FileCheck %s --check-prefix=LOC
// RUN: hector-opt %s --split-input-file -p 'convert-hector-intra-to-gpu, hector-gpu-kernels-on-host' | FileCheck %s --check-prefix=HOST

// One gpu.func kernel per template in gpu.module @hector_kernels, one gpu.launch_func per
// template in the host function, host buffers moved to the gpu dialect's allocation API
// (functions without templates keep theirs).
// NOTEMPLATE-NOT: hector_intra
// NOTEMPLATE-NOT: linalg.fill
// NOTEMPLATE-NOT: memref.copy

// ---- host side ------------------------------------------------------------------------------

// CHECK: module attributes {gpu.container_module}
// CHECK-LABEL: func.func @rgcn
// CHECK-SAME: (%[[SRC:[^:]*]]: memref<?xi32>, %[[DST:[^:]*]]: memref<?xi32>, %[[ET:[^:]*]]: memref<?xi32>, %[[NT:[^:]*]]: memref<?xi32>, %[[NORM:[^:]*]]: memref<?x1xf32>, %[[X:[^:]*]]: memref<?x16xf32>, %[[W:[^:]*]]: memref<3x16x8xf32>, %[[B:[^:]*]]: memref<8xf32>, %[[OUT:[^:]*]]: memref<?x8xf32>, %[[OUT2:[^:]*]]: memref<?x8xf32>)
// CHECK-SAME: attributes {hector.outputs = 2 : i64}
// CHECK-NOT: llvm.emit_c_interface
//   messages: gpu.alloc; one thread per (edge, tile of 8 columns): grid = ceil(E * 1 / 128)
// CHECK: %[[E:.*]] = memref.dim %[[SRC]], %{{.*}} : memref<?xi32>
// CHECK-NEXT: %[[MSG:.*]] = gpu.alloc (%[[E]]) : memref<?x8xf32>
// CHECK: %[[M1:.*]] = memref.dim %[[SRC]], %{{.*}} : memref<?xi32>
// CHECK-NEXT: %[[NT1:.*]] = arith.constant 1 : index
// CHECK-NEXT: %[[TH1:.*]] = arith.muli %[[M1]], %[[NT1]] : index
// CHECK-NEXT: %[[ONE1:.*]] = arith.constant 1 : index
// CHECK-NEXT: %[[BS1:.*]] = arith.constant 128 : index
// CHECK-NEXT: %[[BSM1:.*]] = arith.constant 127 : index
// CHECK-NEXT: %[[PAD1:.*]] = arith.addi %[[TH1]], %[[BSM1]] : index
// CHECK-NEXT: %[[GRID1:.*]] = arith.divui %[[PAD1]], %[[BS1]] : index
// CHECK-NEXT: gpu.launch_func @hector_kernels::@rgcn_3_gemm blocks in (%[[GRID1]], %[[ONE1]], %[[ONE1]]) threads in (%[[BS1]], %[[ONE1]], %[[ONE1]]) args(%[[X]] : memref<?x16xf32>, %[[W]] : memref<3x16x8xf32>, %[[SRC]] : memref<?xi32>, %[[ET]] : memref<?xi32>, %[[MSG]] : memref<?x8xf32>)
//   aggregation: zero-filled with gpu.memset; one thread per (edge, column): grid = ceil(E * 8 / 256)
// CHECK: %[[AGG:.*]] = gpu.alloc (%{{.*}}) : memref<?x8xf32>
// CHECK-NEXT: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT: gpu.memset %[[AGG]], %[[ZERO]] : memref<?x8xf32>, f32
// CHECK: %[[M2:.*]] = memref.dim %[[MSG]], %{{.*}} : memref<?x8xf32>
// CHECK-NEXT: %[[D2:.*]] = arith.constant 8 : index
// CHECK-NEXT: %[[TH2:.*]] = arith.muli %[[M2]], %[[D2]] : index
// CHECK-NEXT: %[[ONE2:.*]] = arith.constant 1 : index
// CHECK-NEXT: %[[BS2:.*]] = arith.constant 256 : index
// CHECK-NEXT: %[[BSM2:.*]] = arith.constant 255 : index
// CHECK-NEXT: %[[PAD2:.*]] = arith.addi %[[TH2]], %[[BSM2]] : index
// CHECK-NEXT: %[[GRID2:.*]] = arith.divui %[[PAD2]], %[[BS2]] : index
// CHECK-NEXT: gpu.launch_func @hector_kernels::@rgcn_8_traversal blocks in (%[[GRID2]], %[[ONE2]], %[[ONE2]]) threads in (%[[BS2]], %[[ONE2]], %[[ONE2]]) args(%[[DST]] : memref<?xi32>, %[[MSG]] : memref<?x8xf32>, %[[NORM]] : memref<?x1xf32>, %[[AGG]] : memref<?x8xf32>)
// CHECK: gpu.launch_func @hector_kernels::@rgcn_9_traversal {{.*}} args(%[[AGG]] : memref<?x8xf32>, %[[B]] : memref<8xf32>, %[[AGG]] : memref<?x8xf32>)
// CHECK: gpu.launch_func @hector_kernels::@rgcn_10_traversal {{.*}} args(%[[AGG]] : memref<?x8xf32>, %[[OUT]] : memref<?x8xf32>)
// CHECK-NEXT: gpu.memcpy %[[OUT2]], %[[OUT]] : memref<?x8xf32>, memref<?x8xf32>
// CHECK-NEXT: gpu.dealloc %[[AGG]] : memref<?x8xf32>
// CHECK-NEXT: gpu.dealloc %[[MSG]] : memref<?x8xf32>
// CHECK-NEXT: return

// ---- device side ----------------------------------------------------------------------------

// KERNELS-LABEL: gpu.module @hector_kernels
//   the GEMM: thread -> (row i, column tile); rows gathered by src, weight slice by etype
// KERNELS: gpu.func @rgcn_3_gemm(%[[A:[^:]*]]: memref<?x16xf32>, %[[W:[^:]*]]: memref<3x16x8xf32>, %[[G:[^:]*]]: memref<?xi32>, %[[T:[^:]*]]: memref<?xi32>, %[[O:[^:]*]]: memref<?x8xf32>) kernel
// KERNELS-NEXT: %[[BID:.*]] = gpu.block_id x
// KERNELS-NEXT: %[[BDIM:.*]] = gpu.block_dim x
// KERNELS-NEXT: %[[TID:.*]] = gpu.thread_id x
// KERNELS-NEXT: %[[BASE:.*]] = arith.muli %[[BID]], %[[BDIM]] : index
// KERNELS-NEXT: %[[GID:.*]] = arith.addi %[[BASE]], %[[TID]] : index
// KERNELS: %[[KM:.*]] = memref.dim %[[G]], %{{.*}} : memref<?xi32>
// KERNELS: %[[I:.*]] = arith.divui %[[GID]], %{{.*}} : index
// KERNELS-NEXT: %{{.*}} = arith.remui %[[GID]], %{{.*}} : index
// KERNELS-NEXT: %[[OK:.*]] = arith.cmpi ult, %[[I]], %[[KM]] : index
// KERNELS-NEXT: scf.if %[[OK]] {
// KERNELS-NEXT: %[[RI:.*]] = memref.load %[[G]][%[[I]]] : memref<?xi32>
// KERNELS-NEXT: %[[R:.*]] = arith.index_cast %[[RI]] : i32 to index
// KERNELS-NEXT: %[[TI:.*]] = memref.load %[[T]][%[[I]]] : memref<?xi32>
// KERNELS-NEXT: %[[TT:.*]] = arith.index_cast %[[TI]] : i32 to index
//   a tile of 8 = all 8 columns: 8 k-loops, no column bound check
// KERNELS-NOT: scf.if
// KERNELS-COUNT-8: scf.for %[[K:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (f32) {
// KERNELS-NEXT: memref.load %[[A]][%[[R]], %[[K]]] : memref<?x16xf32>
// KERNELS-NEXT: memref.load %[[W]][%[[TT]], %[[K]], %{{.*}}] : memref<3x16x8xf32>
// KERNELS-NEXT: arith.mulf
// KERNELS-NEXT: arith.addf
// KERNELS-NEXT: scf.yield
// KERNELS-NEXT: }
// KERNELS-NEXT: memref.store %{{.*}}, %[[O]][%[[I]], %{{.*}}] : memref<?x8xf32>
// KERNELS-NOT: atomic_rmw
// KERNELS: gpu.return
//   the scaled sum: one thread per (edge, column), atomic accumulation into out[dst[i], j]
// KERNELS: gpu.func @rgcn_8_traversal(%[[DI:[^:]*]]: memref<?xi32>, %[[X:[^:]*]]: memref<?x8xf32>, %[[Y:[^:]*]]: memref<?x1xf32>, %[[O:[^:]*]]: memref<?x8xf32>) kernel
// KERNELS: %[[KM:.*]] = memref.dim %[[X]], %{{.*}} : memref<?x8xf32>
// KERNELS-NEXT: %[[C8:.*]] = arith.constant 8 : index
// KERNELS-NEXT: %[[I:.*]] = arith.divui %{{.*}}, %[[C8]] : index
// KERNELS-NEXT: %[[J:.*]] = arith.remui %{{.*}}, %[[C8]] : index
// KERNELS-NEXT: %[[OK:.*]] = arith.cmpi ult, %[[I]], %[[KM]] : index
// KERNELS-NEXT: scf.if %[[OK]] {
// KERNELS-NEXT: %[[DR:.*]] = memref.load %[[DI]][%[[I]]] : memref<?xi32>
// KERNELS-NEXT: %[[D:.*]] = arith.index_cast %[[DR]] : i32 to index
// KERNELS-NEXT: %[[V:.*]] = memref.load %[[X]][%[[I]], %[[J]]] : memref<?x8xf32>
// KERNELS-NEXT: %[[Z:.*]] = arith.constant 0 : index
// KERNELS-NEXT: %[[S:.*]] = memref.load %[[Y]][%[[I]], %[[Z]]] : memref<?x1xf32>
// KERNELS-NEXT: %[[P:.*]] = arith.mulf %[[V]], %[[S]] : f32
// KERNELS-NEXT: %{{.*}} = memref.atomic_rmw addf %[[P]], %[[O]][%[[D]], %[[J]]] : (f32, memref<?x8xf32>) -> f32
// KERNELS-NEXT: }
// KERNELS-NEXT: gpu.return
//   bias and relu: plain stores
// KERNELS: gpu.func @rgcn_9_traversal(%{{[^:]*}}: memref<?x8xf32>, %[[B:[^:]*]]: memref<8xf32>, %{{[^:]*}}: memref<?x8xf32>) kernel
// KERNELS: memref.load %[[B]][%{{.*}}] : memref<8xf32>
// KERNELS-NEXT: arith.addf
// KERNELS-NEXT: memref.store
// KERNELS: gpu.func @rgcn_10_traversal
// KERNELS: arith.maximumf
// KERNELS-NEXT: memref.store
// KERNELS-NOT: atomic_rmw
// KERNELS: gpu.return
func.func @rgcn(%src: memref<?xi32>, %dst: memref<?xi32>, %etype: memref<?xi32>, %ntype: memref<?xi32>, %norm: memref<?x1xf32>, %x: memref<?x16xf32>, %w: memref<3x16x8xf32>, %b: memref<8xf32>, %out: memref<?x8xf32>, %out2: memref<?x8xf32>) attributes {hector.outputs = 2 : i64} {
  %c0 = arith.constant 0 : index
  %e = memref.dim %src, %c0 : memref<?xi32>
  %msg = memref.alloc(%e) : memref<?x8xf32>
  "hector_intra.gemm_template"(%x, %w, %src, %etype, %msg) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1>} : (memref<?x16xf32>, memref<3x16x8xf32>, memref<?xi32>, memref<?xi32>, memref<?x8xf32>) -> ()
  %n = memref.dim %ntype, %c0 : memref<?xi32>
  %agg = memref.alloc(%n) : memref<?x8xf32>
  %zero = arith.constant 0.000000e+00 : f32
  linalg.fill ins(%zero : f32) outs(%agg : memref<?x8xf32>)
  "hector_intra.traversal_template"(%dst, %msg, %norm, %agg) {parallel = "edge", fn = "scale", reduce = "sum", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 1, 0, 1, 1, 1>} : (memref<?xi32>, memref<?x8xf32>, memref<?x1xf32>, memref<?x8xf32>) -> ()
  "hector_intra.traversal_template"(%agg, %b, %agg) {parallel = "node", fn = "add_bias", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>} : (memref<?x8xf32>, memref<8xf32>, memref<?x8xf32>) -> ()
  "hector_intra.traversal_template"(%agg, %out) {parallel = "node", fn = "relu", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x8xf32>, memref<?x8xf32>) -> ()
  memref.copy %out, %out2 : memref<?x8xf32> to memref<?x8xf32>
  memref.dealloc %agg : memref<?x8xf32>
  memref.dealloc %msg : memref<?x8xf32>
  return
}

// -----

// ---- a scattered GEMM with an "add" epilogue accumulates atomically; tile_n = 3 over 8 columns
// gives 3 tiles per row and a bound check on each column; static buffers -------------------------

// CHECK-LABEL: func.func @scatter_gemm
// CHECK: %[[BUF:.*]] = gpu.alloc () : memref<4x8xf32>
// CHECK: %[[M:.*]] = memref.dim %{{.*}}, %{{.*}} : memref<?x16xf32>
// CHECK-NEXT: %[[NT:.*]] = arith.constant 3 : index
// CHECK-NEXT: %[[TH:.*]] = arith.muli %[[M]], %[[NT]] : index
// CHECK: arith.constant 64 : index
// CHECK-NEXT: arith.constant 63 : index
// CHECK: gpu.launch_func @hector_kernels::@scatter_gemm_1_gemm
// CHECK: gpu.dealloc %[[BUF]] : memref<4x8xf32>
// CHECK: func.func @untouched(%arg0: memref<?x8xf32>) {
// CHECK-NEXT: memref.alloc
// CHECK-NEXT: memref.dealloc
// CHECK-NEXT: return
// CHECK: func.func private @decl(memref<?x8xf32>)

// KERNELS-LABEL: gpu.func @scatter_gemm_1_gemm
// KERNELS-SAME: kernel
// KERNELS: %[[C3:.*]] = arith.constant 3 : index
// KERNELS-NEXT: %[[I:.*]] = arith.divui %{{.*}}, %[[C3]] : index
// KERNELS-NEXT: %[[JT:.*]] = arith.remui %{{.*}}, %[[C3]] : index
// KERNELS: %[[J0:.*]] = arith.muli %[[JT]], %{{.*}} : index
// KERNELS: %[[INB0:.*]] = arith.cmpi ult, %{{.*}}, %[[N:.*]] : index
// KERNELS-NEXT: scf.if %[[INB0]] {
// KERNELS: memref.atomic_rmw addf
// KERNELS: %[[INB1:.*]] = arith.cmpi ult, %{{.*}}, %[[N]] : index
// KERNELS-NEXT: scf.if %[[INB1]] {
// KERNELS: memref.atomic_rmw addf
// KERNELS: %[[INB2:.*]] = arith.cmpi ult, %{{.*}}, %[[N]] : index
// KERNELS-NEXT: scf.if %[[INB2]] {
// KERNELS: memref.atomic_rmw addf
// KERNELS-NOT: memref.atomic_rmw
// KERNELS: gpu.return
// KERNELS-NOT: gpu.func

// Every op a template becomes, on the host (the 10 ops of the grid size and the launch) and in
// its kernel (62 ops, then gpu.return), carries the template's location; the buffer ops moved
// to the device API keep their own. (The template's location is printed first: the kernel's
// arguments use it too.)
// LOC: // -----
// LOC: [[T:#loc[0-9]+]] = loc("-":[[# @LINE + 13]]:3)
// LOC: func.func @scatter_gemm(
// LOC-NEXT: gpu.alloc {{.*}} loc([[ALLOC:#loc[0-9]+]])
// LOC-NEXT: arith.constant 0 : index loc([[T]])
// LOC-COUNT-9: loc([[T]])
// LOC-NEXT: gpu.dealloc {{.*}} loc([[DEALLOC:#loc[0-9]+]])
// LOC: gpu.func @scatter_gemm_1_gemm(
// LOC-COUNT-62: loc([[T]])
// LOC-NEXT: gpu.return loc([[T]])
// LOC: [[ALLOC]] = loc("-":[[# @LINE + 3]]:8)
// LOC-NEXT: [[DEALLOC]] = loc("-":[[# @LINE + 4]]:3)
func.func @scatter_gemm(%a: memref<?x16xf32>, %w: memref<16x8xf32>, %dst: memref<?xi32>) {
  %t = memref.alloc() : memref<4x8xf32>
  "hector_intra.gemm_template"(%a, %w, %dst, %t) {variant = "xw", epilogue = "add", tile_n = 3 : i64, block_size = 64 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 1, 0, 1>} : (memref<?x16xf32>, memref<16x8xf32>, memref<?xi32>, memref<4x8xf32>) -> ()
  memref.dealloc %t : memref<4x8xf32>
  return
}
func.func @untouched(%a: memref<?x8xf32>) {
  %t = memref.alloc() : memref<4x8xf32>
  memref.dealloc %t : memref<4x8xf32>
  return
}
func.func private @decl(memref<?x8xf32>)

// -----

// ---- weight gradients (variant "xty"): parallel over rows, deterministic --------------------
// The rows are cut into C = max(1, min(ceil(M / 256), 2^26 / (T*K*N))) chunks; one thread per
// (chunk, k, n) sums its chunk's rows in order into its own slot of a partials temporary
// [C, (T,) K, N] (gpu.alloc: PyTorch's caching allocator under a bundle), then one thread per
// ((t,) k, n) adds the C partials in order into the gradient. No atomics anywhere, so the
// result does not depend on thread scheduling; a grid of C*K*N threads instead of K*N.

// CHECK-LABEL: func.func @wgrad
//   sliced by edge type: the partials are [C, 3, 16, 8], zeroed (a chunk touches only its types)
// CHECK: %[[M:.*]] = memref.dim %{{.*}}, %{{.*}} : memref<?xi32>
// CHECK-NEXT: %[[R:.*]] = arith.constant 256 : index
// CHECK-NEXT: %[[R1:.*]] = arith.constant 255 : index
// CHECK-NEXT: %[[MP:.*]] = arith.addi %[[M]], %[[R1]] : index
// CHECK-NEXT: %[[WANT:.*]] = arith.divui %[[MP]], %[[R]] : index
// CHECK-NEXT: %[[CAP:.*]] = arith.constant 174762 : index
// CHECK-NEXT: %[[MIN:.*]] = arith.minui %[[WANT]], %[[CAP]] : index
// CHECK-NEXT: %[[ONE:.*]] = arith.constant 1 : index
// CHECK-NEXT: %[[C:.*]] = arith.maxui %[[MIN]], %[[ONE]] : index
// CHECK-NEXT: %[[P:.*]] = gpu.alloc (%[[C]]) : memref<?x3x16x8xf32>
// CHECK-NEXT: %[[Z:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT: gpu.memset %[[P]], %[[Z]] : memref<?x3x16x8xf32>, f32
// CHECK-NEXT: %[[KN:.*]] = arith.constant 128 : index
// CHECK-NEXT: %[[TH:.*]] = arith.muli %[[C]], %[[KN]] : index
// CHECK: gpu.launch_func @hector_kernels::@wgrad_2_gemm blocks in ({{.*}}) threads in ({{.*}}) args({{.*}}, %[[P]] : memref<?x3x16x8xf32>)
// CHECK-NEXT: %[[TKN:.*]] = arith.constant 384 : index
// CHECK: gpu.launch_func @hector_kernels::@wgrad_2_gemm_reduce blocks in ({{.*}}) threads in ({{.*}}) args(%[[P]] : memref<?x3x16x8xf32>, %[[DW:.*]] : memref<3x16x8xf32>)
// CHECK-NEXT: gpu.dealloc %[[P]] : memref<?x3x16x8xf32>
//   shared weight: partials [C, 16, 8], each slot written once (no memset)
// CHECK: %[[P2:.*]] = gpu.alloc (%{{.*}}) : memref<?x16x8xf32>
// CHECK-NOT: gpu.memset
// CHECK: gpu.launch_func @hector_kernels::@wgrad_4_gemm {{.*}} args({{.*}}, %[[P2]] : memref<?x16x8xf32>)
// CHECK: gpu.launch_func @hector_kernels::@wgrad_4_gemm_reduce {{.*}} args(%[[P2]] : memref<?x16x8xf32>, %{{.*}} : memref<16x8xf32>)
// CHECK-NEXT: gpu.dealloc %[[P2]] : memref<?x16x8xf32>

// KERNELS-LABEL: gpu.func @wgrad_2_gemm(
//   thread (chunk c, k, n); chunk c covers rows [c*per, min((c+1)*per, M)), per = ceil(M / C)
// KERNELS: %[[M:.*]] = memref.dim %{{.*}}, %{{.*}} : memref<?xi32>
// KERNELS-NEXT: %[[C:.*]] = memref.dim %[[P:.*]], %{{.*}} : memref<?x3x16x8xf32>
// KERNELS: %[[CH:.*]] = arith.divui %{{.*}}, %{{.*}} : index
// KERNELS: %[[OK:.*]] = arith.cmpi ult, %[[CH]], %[[C]] : index
// KERNELS: scf.if %[[OK]] {
// KERNELS: %[[PER:.*]] = arith.divui %{{.*}}, %[[C]] : index
// KERNELS-NEXT: %[[LO:.*]] = arith.muli %[[CH]], %[[PER]] : index
// KERNELS-NEXT: %[[END:.*]] = arith.addi %[[LO]], %[[PER]] : index
// KERNELS-NEXT: %[[HI:.*]] = arith.minui %[[END]], %[[M]] : index
// KERNELS-NEXT: %[[LO2:.*]] = arith.minui %[[LO]], %[[M]] : index
//   a run of rows of one type is summed in a register (edges are sorted by type); the run is
//   added to the partial's slice of its type when the type changes and after the last row
//   (type 3 = "no run yet"); a plain add: the thread owns partials[c, *, k, n]
// KERNELS: %[[NONE:.*]] = arith.constant 3 : index
// KERNELS: %[[RUNS:.*]]:2 = scf.for %[[I:.*]] = %[[LO2]] to %[[HI]] step %{{.*}} iter_args(%[[ACC:.*]] = %{{.*}}, %[[CUR:.*]] = %[[NONE]]) -> (f32, index) {
// KERNELS: %[[R:.*]] = arith.index_cast %{{.*}} : i32 to index
// KERNELS-NEXT: memref.load %{{.*}}[%[[I]]] : memref<?xi32>
// KERNELS-NEXT: %[[T:.*]] = arith.index_cast %{{.*}} : i32 to index
// KERNELS: %[[P:.*]] = arith.mulf
// KERNELS-NEXT: %[[SAME:.*]] = arith.cmpi eq, %[[T]], %[[CUR]] : index
// KERNELS-NEXT: %[[NEXT:.*]] = scf.if %[[SAME]] -> (f32) {
// KERNELS-NEXT: %[[SUM:.*]] = arith.addf %[[ACC]], %[[P]] : f32
// KERNELS-NEXT: scf.yield %[[SUM]] : f32
// KERNELS-NEXT: } else {
// KERNELS: scf.if %{{.*}} {
// KERNELS-NEXT: memref.load %[[P4:.*]][%[[CH]], %[[CUR]], %{{.*}}, %{{.*}}] : memref<?x3x16x8xf32>
// KERNELS-NEXT: arith.addf %{{.*}}, %[[ACC]] : f32
// KERNELS-NEXT: memref.store %{{.*}}, %[[P4]][%[[CH]], %[[CUR]], %{{.*}}, %{{.*}}] : memref<?x3x16x8xf32>
// KERNELS: scf.yield %[[P]] : f32
// KERNELS: scf.yield %[[NEXT]], %[[T]] : f32, index
// KERNELS: arith.cmpi ult, %[[RUNS]]#1, %{{.*}} : index
// KERNELS: memref.store %{{.*}}, %{{.*}}[%[[CH]], %[[RUNS]]#1, %{{.*}}, %{{.*}}] : memref<?x3x16x8xf32>
// KERNELS-NOT: atomic_rmw
// KERNELS: gpu.return
// KERNELS-LABEL: gpu.func @wgrad_2_gemm_reduce(
//   thread (t, k, n) of the 384 gradient elements sums the C partials in chunk order
// KERNELS: %[[C:.*]] = memref.dim %[[P:.*]], %{{.*}} : memref<?x3x16x8xf32>
// KERNELS: arith.cmpi ult, %{{.*}}, %{{.*}} : index
// KERNELS: %[[S:.*]] = scf.for %[[CI:.*]] = %{{.*}} to %[[C]] step %{{.*}} iter_args
// KERNELS-NEXT: memref.load %[[P]][%[[CI]], %{{.*}}, %{{.*}}, %{{.*}}] : memref<?x3x16x8xf32>
// KERNELS-NEXT: arith.addf
// KERNELS-NEXT: scf.yield
// KERNELS: memref.load %{{.*}} : memref<3x16x8xf32>
// KERNELS-NEXT: arith.addf %{{.*}}, %[[S]] : f32
// KERNELS-NEXT: memref.store
// KERNELS-NOT: atomic_rmw
// KERNELS: gpu.return
// KERNELS-LABEL: gpu.func @wgrad_4_gemm(
//   shared weight: the chunk's sum in a register, one store per thread
// KERNELS: scf.for {{.*}} iter_args
// KERNELS: memref.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] : memref<?x16x8xf32>
// KERNELS-NOT: atomic_rmw
// KERNELS: gpu.return
// Testing pass hector-gpu-kernels-on-host (the Python tests run GPU kernels' own code on the
// CPU with it): each kernel's body becomes a private function of (args, block, thread, block
// size), called for every block and thread by a public __grid_<kernel>, which the launch calls.
// HOST-LABEL: func.func @wgrad(
// HOST-NOT: gpu.
// HOST: %[[P:.*]] = memref.alloc(%{{.*}}) : memref<?x3x16x8xf32>
// HOST: linalg.fill ins(%{{.*}} : f32) outs(%[[P]] : memref<?x3x16x8xf32>)
// HOST: call @__grid_wgrad_2_gemm(%{{.*}}, %[[P]], %[[G:.*]], %[[B:.*]]) :
// HOST: call @__grid_wgrad_2_gemm_reduce(%[[P]], %{{.*}}, %{{.*}}, %{{.*}}) :
// HOST: memref.dealloc %[[P]] : memref<?x3x16x8xf32>
// HOST-LABEL: func.func private @__kernel_wgrad_2_gemm(
// HOST-SAME: %{{[^:]*}}: memref<?x3x16x8xf32>, %[[BID:[^:]*]]: index, %[[TID:[^:]*]]: index, %[[BDIM:[^:]*]]: index)
// HOST-NEXT: %[[BASE:.*]] = arith.muli %[[BID]], %[[BDIM]] : index
// HOST-NEXT: arith.addi %[[BASE]], %[[TID]] : index
// HOST-LABEL: func.func @__grid_wgrad_2_gemm(
// HOST-SAME: %[[GRID:[^:]*]]: index, %[[THREADS:[^:]*]]: index)
// HOST: scf.for %[[BLK:.*]] = %{{.*}} to %[[GRID]] step
// HOST-NEXT: scf.for %[[THR:.*]] = %{{.*}} to %[[THREADS]] step
// HOST-NEXT: call @__kernel_wgrad_2_gemm(%{{.*}}, %[[BLK]], %[[THR]], %[[THREADS]])
// HOST-NOT: gpu.module
func.func @wgrad(%a: memref<?x16xf32>, %g: memref<?x8xf32>, %src: memref<?xi32>, %et: memref<?xi32>, %dw: memref<3x16x8xf32>, %dr: memref<16x8xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  linalg.fill ins(%zero : f32) outs(%dw : memref<3x16x8xf32>)
  "hector_intra.gemm_template"(%a, %g, %src, %et, %dw) {variant = "xty", epilogue = "add", tile_n = 1 : i64, block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1>} : (memref<?x16xf32>, memref<?x8xf32>, memref<?xi32>, memref<?xi32>, memref<3x16x8xf32>) -> ()
  linalg.fill ins(%zero : f32) outs(%dr : memref<16x8xf32>)
  "hector_intra.gemm_template"(%a, %g, %dr) {variant = "xty", epilogue = "add", tile_n = 1 : i64, block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>} : (memref<?x16xf32>, memref<?x8xf32>, memref<16x8xf32>) -> ()
  return
}
