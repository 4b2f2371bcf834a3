// RUN: hector-opt %s -p convert-hector-intra-to-scf | FileCheck %s
// RUN: hector-opt %s -p convert-hector-intra-to-scf | FileCheck %s --check-prefix=NOTEMPLATE
// RUN: hector-opt %s -p convert-hector-intra-to-scf,hector-lower-llvm-cpu | FileCheck %s --check-prefix=LLVM
// RUN: hector-opt %s -p convert-hector-intra-to-scf --mlir-print-debuginfo | FileCheck %s --check-prefix=LOC

// Each template becomes an scf.for nest over memrefs; functions that held templates get
// llvm.emit_c_interface so the CPU JIT can call them. No template survives.
// NOTEMPLATE-NOT: hector_intra

// The loop nests lower on through the upstream CPU pipeline, with C wrappers.
// LLVM-DAG: llvm.func @_mlir_ciface_gemm_gather_etype(
// LLVM-DAG: llvm.func @_mlir_ciface_traversal_kinds(
// LLVM-NOT: llvm.func @_mlir_ciface_plain(
// LLVM-NOT: scf.for

// ---- GEMM: rows gathered by src, weight slice by etype, store epilogue ----------------------
// out[i, :] = a[src[i], :] @ w[etype[i]]: the row loop runs over the gather index, each row
// zero-fills its output row, then k outer, j inner, accumulating a[r, k] * w[t, k, j].

// CHECK-LABEL: func.func @gemm_gather_etype
// CHECK-SAME: (%[[A:[^:]*]]: memref<?x16xf32>, %[[W:[^:]*]]: memref<3x16x8xf32>, %[[SRC:[^:]*]]: memref<?xi32>, %[[ET:[^:]*]]: memref<?xi32>, %[[OUT:[^:]*]]: memref<?x8xf32>)
// CHECK-SAME: attributes {llvm.emit_c_interface}
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : index
// CHECK: %[[M:.*]] = memref.dim %[[SRC]], %[[C0]] : memref<?xi32>
// CHECK: scf.for %[[I:.*]] = %[[C0]] to %[[M]] step %[[C1]] {
// CHECK-NEXT: %[[RI:.*]] = memref.load %[[SRC]][%[[I]]] : memref<?xi32>
// CHECK-NEXT: %[[R:.*]] = arith.index_cast %[[RI]] : i32 to index
// CHECK-NEXT: %[[TI:.*]] = memref.load %[[ET]][%[[I]]] : memref<?xi32>
// CHECK-NEXT: %[[T:.*]] = arith.index_cast %[[TI]] : i32 to index
// CHECK-DAG: %[[K16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[N8:.*]] = arith.constant 8 : index
// CHECK-DAG: %[[Z:.*]] = arith.constant 0.000000e+00 : f32
// CHECK: scf.for %[[J0:.*]] = %{{.*}} to %[[N8]] step %{{.*}} {
// CHECK-NEXT: memref.store %[[Z]], %[[OUT]][%[[I]], %[[J0]]] : memref<?x8xf32>
// CHECK-NEXT: }
// CHECK-NEXT: scf.for %[[K:.*]] = %{{.*}} to %[[K16]] step %{{.*}} {
// CHECK-NEXT: %[[AV:.*]] = memref.load %[[A]][%[[R]], %[[K]]] : memref<?x16xf32>
// CHECK-NEXT: scf.for %[[J:.*]] = %{{.*}} to %[[N8]] step %{{.*}} {
// CHECK-NEXT: %[[WV:.*]] = memref.load %[[W]][%[[T]], %[[K]], %[[J]]] : memref<3x16x8xf32>
// CHECK-NEXT: %[[P:.*]] = arith.mulf %[[AV]], %[[WV]] : f32
// CHECK-NEXT: %[[OLD:.*]] = memref.load %[[OUT]][%[[I]], %[[J]]] : memref<?x8xf32>
// CHECK-NEXT: %[[NEW:.*]] = arith.addf %[[OLD]], %[[P]] : f32
// CHECK-NEXT: memref.store %[[NEW]], %[[OUT]][%[[I]], %[[J]]] : memref<?x8xf32>
// CHECK-NEXT: }
// CHECK-NEXT: }
// CHECK-NEXT: }
// CHECK-NEXT: return
// Every op the template becomes carries the template's location: the 23 ops of the loop nest
// (the row loop, its index loads, the zero-fill and the k/j loops) all print the template's
// line, and nothing else comes between them and the function's return.
// LOC-LABEL: func.func @gemm_gather_etype
// LOC-NEXT: arith.constant 0 : index loc([[T:#loc[0-9]+]])
// LOC-COUNT-22: loc([[T]])
// LOC-NEXT: return loc(
// LOC: [[T]] = loc("-":[[# @LINE + 2]]:3)
func.func @gemm_gather_etype(%a: memref<?x16xf32>, %w: memref<3x16x8xf32>, %src: memref<?xi32>, %etype: memref<?xi32>, %out: memref<?x8xf32>) {
  "hector_intra.gemm_template"(%a, %w, %src, %etype, %out) {variant = "xw", epilogue = "store", tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1>} : (memref<?x16xf32>, memref<3x16x8xf32>, memref<?xi32>, memref<?xi32>, memref<?x8xf32>) -> ()
  return
}

// ---- GEMM: shared weight, scattered rows, add epilogue --------------------------------------
// out[dst[i], :] += a[i, :] @ w: rows counted from a, no zero-fill of out, rows written at
// dst[i]. The row's product is summed in a scratch row first (one rounded addition per output
// element and row), then added to the output.

// CHECK-LABEL: func.func @gemm_scatter_add
// CHECK-SAME: (%[[A:[^:]*]]: memref<?x16xf32>, %[[W:[^:]*]]: memref<16x4xf32>, %[[DST:[^:]*]]: memref<?xi32>, %[[OUT:[^:]*]]: memref<?x4xf32>)
// CHECK: %[[M:.*]] = memref.dim %[[A]], %{{.*}} : memref<?x16xf32>
// CHECK: %[[ROW:.*]] = memref.alloca() : memref<4xf32>
// CHECK: scf.for %[[I:.*]] = %{{.*}} to %[[M]] step
// CHECK-NEXT: %[[OI:.*]] = memref.load %[[DST]][%[[I]]] : memref<?xi32>
// CHECK-NEXT: %[[O:.*]] = arith.index_cast %[[OI]] : i32 to index
// CHECK-NOT: memref.store %{{.*}}, %[[OUT]][%[[I]]
// CHECK: memref.store %{{.*}}, %[[ROW]][%{{.*}}] : memref<4xf32>
// CHECK: scf.for %[[K:.*]] =
// CHECK-NEXT: %[[AV:.*]] = memref.load %[[A]][%[[I]], %[[K]]] : memref<?x16xf32>
// CHECK-NEXT: scf.for %[[J:.*]] =
// CHECK-NEXT: %[[WV:.*]] = memref.load %[[W]][%[[K]], %[[J]]] : memref<16x4xf32>
// CHECK-NEXT: %[[P:.*]] = arith.mulf %[[AV]], %[[WV]] : f32
// CHECK-NEXT: %[[CUR:.*]] = memref.load %[[ROW]][%[[J]]] : memref<4xf32>
// CHECK-NEXT: %[[ACC:.*]] = arith.addf %[[CUR]], %[[P]] : f32
// CHECK-NEXT: memref.store %[[ACC]], %[[ROW]][%[[J]]] : memref<4xf32>
// CHECK: scf.for %[[J2:.*]] =
// CHECK-NEXT: %[[R:.*]] = memref.load %[[ROW]][%[[J2]]] : memref<4xf32>
// CHECK-NEXT: %[[OLD:.*]] = memref.load %[[OUT]][%[[O]], %[[J2]]] : memref<?x4xf32>
// CHECK-NEXT: %[[NEW:.*]] = arith.addf %[[OLD]], %[[R]] : f32
// CHECK-NEXT: memref.store %[[NEW]], %[[OUT]][%[[O]], %[[J2]]] : memref<?x4xf32>
func.func @gemm_scatter_add(%a: memref<?x16xf32>, %w: memref<16x4xf32>, %dst: memref<?xi32>, %out: memref<?x4xf32>) {
  "hector_intra.gemm_template"(%a, %w, %dst, %out) {variant = "xw", epilogue = "add", tile_n = 4 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 1, 0, 1>} : (memref<?x16xf32>, memref<16x4xf32>, memref<?xi32>, memref<?x4xf32>) -> ()
  return
}

// ---- traversals: scale+sum, gathered copy, bias, add, relu, atomic_sum ----------------------
// Non-template ops (alloc, fill, dealloc) stay where they are.

// CHECK-LABEL: func.func @traversal_kinds
// CHECK-SAME: (%[[SRC:[^:]*]]: memref<?xi32>, %[[DST:[^:]*]]: memref<?xi32>, %[[X:[^:]*]]: memref<?x8xf32>, %[[NORM:[^:]*]]: memref<?x1xf32>, %[[B:[^:]*]]: memref<8xf32>, %[[Y:[^:]*]]: memref<?x8xf32>, %[[OUT:[^:]*]]: memref<?x8xf32>)
// CHECK-SAME: attributes {hector.outputs = 1 : i64, llvm.emit_c_interface}
// CHECK: %[[T:.*]] = memref.alloc(%{{.*}}) : memref<?x8xf32>
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%[[T]] : memref<?x8xf32>)
//   scale + sum: out[dst[i], j] += x[i, j] * norm[i, 0]; rows counted from x
// CHECK: %[[M:.*]] = memref.dim %[[X]], %{{.*}} : memref<?x8xf32>
// CHECK: %[[W8:.*]] = arith.constant 8 : index
// CHECK: scf.for %[[I:.*]] = %{{.*}} to %[[M]] step
// CHECK-NEXT: %[[DI:.*]] = memref.load %[[DST]][%[[I]]] : memref<?xi32>
// CHECK-NEXT: %[[D:.*]] = arith.index_cast %[[DI]] : i32 to index
// CHECK-NEXT: scf.for %[[J:.*]] = %{{.*}} to %[[W8]] step
// CHECK-NEXT: %[[XV:.*]] = memref.load %[[X]][%[[I]], %[[J]]] : memref<?x8xf32>
// CHECK-NEXT: %[[Z:.*]] = arith.constant 0 : index
// CHECK-NEXT: %[[S:.*]] = memref.load %[[NORM]][%[[I]], %[[Z]]] : memref<?x1xf32>
// CHECK-NEXT: %[[SC:.*]] = arith.mulf %[[XV]], %[[S]] : f32
// CHECK-NEXT: %[[OLD:.*]] = memref.load %[[T]][%[[D]], %[[J]]] : memref<?x8xf32>
// CHECK-NEXT: %[[SUM:.*]] = arith.addf %[[OLD]], %[[SC]] : f32
// CHECK-NEXT: memref.store %[[SUM]], %[[T]][%[[D]], %[[J]]] : memref<?x8xf32>
//   gathered copy: out[i, j] = x[src[i], j]; rows counted from the gather index
// CHECK: %[[M2:.*]] = memref.dim %[[SRC]], %{{.*}} : memref<?xi32>
// CHECK: scf.for %[[I2:.*]] = %{{.*}} to %[[M2]] step
// CHECK-NEXT: %[[RI:.*]] = memref.load %[[SRC]][%[[I2]]] : memref<?xi32>
// CHECK-NEXT: %[[R:.*]] = arith.index_cast %[[RI]] : i32 to index
// CHECK-NEXT: scf.for %[[J2:.*]] =
// CHECK-NEXT: %[[XV2:.*]] = memref.load %[[X]][%[[R]], %[[J2]]] : memref<?x8xf32>
// CHECK-NEXT: memref.store %[[XV2]], %[[Y]][%[[I2]], %[[J2]]] : memref<?x8xf32>
//   bias: out[i, j] = x[i, j] + b[j]
// CHECK: scf.for %[[I3:.*]] =
// CHECK-NEXT: scf.for %[[J3:.*]] =
// CHECK-NEXT: %[[XV3:.*]] = memref.load %[[T]][%[[I3]], %[[J3]]] : memref<?x8xf32>
// CHECK-NEXT: %[[BV:.*]] = memref.load %[[B]][%[[J3]]] : memref<8xf32>
// CHECK-NEXT: %[[AB:.*]] = arith.addf %[[XV3]], %[[BV]] : f32
// CHECK-NEXT: memref.store %[[AB]], %[[T]][%[[I3]], %[[J3]]] : memref<?x8xf32>
//   add: out[i, j] = x[i, j] + y[i, j]
// CHECK: scf.for %[[I4:.*]] =
// CHECK-NEXT: scf.for %[[J4:.*]] =
// CHECK-NEXT: %[[XV4:.*]] = memref.load %[[T]][%[[I4]], %[[J4]]] : memref<?x8xf32>
// CHECK-NEXT: %[[YV4:.*]] = memref.load %[[Y]][%[[I4]], %[[J4]]] : memref<?x8xf32>
// CHECK-NEXT: %[[AD:.*]] = arith.addf %[[XV4]], %[[YV4]] : f32
// CHECK-NEXT: memref.store %[[AD]], %[[T]][%[[I4]], %[[J4]]] : memref<?x8xf32>
//   relu: out[i, j] = max(x[i, j], 0)
// CHECK: scf.for %[[I5:.*]] =
// CHECK-NEXT: scf.for %[[J5:.*]] =
// CHECK-NEXT: %[[XV5:.*]] = memref.load %[[T]][%[[I5]], %[[J5]]] : memref<?x8xf32>
// CHECK-NEXT: %[[ZF:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT: %[[RL:.*]] = arith.maximumf %[[XV5]], %[[ZF]] : f32
// CHECK-NEXT: memref.store %[[RL]], %[[OUT]][%[[I5]], %[[J5]]] : memref<?x8xf32>
//   atomic_sum (one thread on the CPU): still an accumulation into out[dst[i], j]
// CHECK: scf.for %[[I6:.*]] =
// CHECK-NEXT: %[[DI6:.*]] = memref.load %[[DST]][%[[I6]]] : memref<?xi32>
// CHECK-NEXT: %[[D6:.*]] = arith.index_cast %[[DI6]] : i32 to index
// CHECK-NEXT: scf.for %[[J6:.*]] =
// CHECK-NEXT: %[[XV6:.*]] = memref.load %[[X]][%[[I6]], %[[J6]]] : memref<?x8xf32>
// CHECK: {{(memref.atomic_rmw addf|arith.addf)}} {{.*}}%[[XV6]]
// CHECK: %[[OUT]][%[[D6]], %[[J6]]]
// CHECK: memref.dealloc %[[T]] : memref<?x8xf32>
// CHECK-NEXT: return
func.func @traversal_kinds(%src: memref<?xi32>, %dst: memref<?xi32>, %x: memref<?x8xf32>, %norm: memref<?x1xf32>, %b: memref<8xf32>, %y: memref<?x8xf32>, %out: memref<?x8xf32>) attributes {hector.outputs = 1 : i64} {
  %c0 = arith.constant 0 : index
  %n = memref.dim %out, %c0 : memref<?x8xf32>
  %t = memref.alloc(%n) : memref<?x8xf32>
  %zero = arith.constant 0.000000e+00 : f32
  linalg.fill ins(%zero : f32) outs(%t : memref<?x8xf32>)
  "hector_intra.traversal_template"(%dst, %x, %norm, %t) {parallel = "edge", fn = "scale", reduce = "sum", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 1, 0, 1, 1, 1>} : (memref<?xi32>, memref<?x8xf32>, memref<?x1xf32>, memref<?x8xf32>) -> ()
  "hector_intra.traversal_template"(%src, %x, %y) {parallel = "edge", fn = "copy", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 1, 0, 0, 1, 0, 1>} : (memref<?xi32>, memref<?x8xf32>, memref<?x8xf32>) -> ()
  "hector_intra.traversal_template"(%t, %b, %t) {parallel = "node", fn = "add_bias", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>} : (memref<?x8xf32>, memref<8xf32>, memref<?x8xf32>) -> ()
  "hector_intra.traversal_template"(%t, %y, %t) {parallel = "node", fn = "add", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>} : (memref<?x8xf32>, memref<?x8xf32>, memref<?x8xf32>) -> ()
  "hector_intra.traversal_template"(%t, %out) {parallel = "node", fn = "relu", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 0, 1>} : (memref<?x8xf32>, memref<?x8xf32>) -> ()
  "hector_intra.traversal_template"(%dst, %x, %out) {parallel = "edge", fn = "copy", reduce = "atomic_sum", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 1, 0, 1, 0, 1>} : (memref<?xi32>, memref<?x8xf32>, memref<?x8xf32>) -> ()
  memref.dealloc %t : memref<?x8xf32>
  return
}

// ---- functions without templates, and declarations, are left alone --------------------------

// CHECK-LABEL: func.func @plain(%arg0: memref<?x8xf32>) {
// CHECK-NOT: emit_c_interface
// CHECK-NEXT: return
// CHECK-LABEL: func.func private @decl(memref<?x8xf32>)
func.func @plain(%a: memref<?x8xf32>) {
  return
}
func.func private @decl(memref<?x8xf32>)
