// RUN: hector-opt %s -p hector-profile-kernels | FileCheck %s
// RUN: hector-opt %s -p hector-profile-kernels | FileCheck %s --check-prefix=META
// RUN: hector-opt %s -p hector-profile-kernels,convert-hector-intra-to-scf,hector-lower-llvm-cpu | FileCheck %s --check-prefix=LLVM
// RUN: hector-opt %s -p hector-profile-kernels,convert-hector-intra-to-scf,hector-lower-llvm-cpu | grep "llvm.call @rtclock()" | count 6
// RUN: hector-opt %s -p hector-profile-kernels --mlir-print-debuginfo | FileCheck %s --check-prefix=LOC

// Every template, in every function, is bracketed by two rtclock() reads; after it, its row of
// the module's counter buffer gets the call (column 2), its fastest time (3), the elapsed time
// (0) and its row count M (1), which is read before the first clock. Rows are numbered in
// program order across functions; the buffer has one row per template.

// CHECK: memref.global @__hector_kernel_profile : memref<3x4xf64> = dense<0.000000e+00>
// CHECK: func.func private @rtclock() -> f64
// The reader copies the buffer out and zeroes it, through the C interface.
// CHECK-LABEL: func.func @__hector_kernel_profile_take
// CHECK-SAME: (%[[OUT:.*]]: memref<3x4xf64>) attributes {llvm.emit_c_interface}
// CHECK: %[[G:.*]] = memref.get_global @__hector_kernel_profile : memref<3x4xf64>
// CHECK-NEXT: memref.copy %[[G]], %[[OUT]]
// CHECK: scf.for
// CHECK-COUNT-3: memref.store

// M of a gathered GEMM is the gather index's length.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: %[[SRC:[^:]*]]: memref<?xi32>, %[[ET:[^:]*]]: memref<?xi32>
// CHECK: %[[M:.*]] = memref.dim %[[SRC]], %{{.*}} : memref<?xi32>
// CHECK-NEXT: %[[MI:.*]] = arith.index_cast %[[M]] : index to i64
// CHECK-NEXT: %[[MF:.*]] = arith.uitofp %[[MI]] : i64 to f64
// CHECK-NEXT: %[[T0:.*]] = call @rtclock() : () -> f64
// CHECK-NEXT: "hector_intra.gemm_template"
// CHECK-NEXT: %[[T1:.*]] = call @rtclock() : () -> f64
// CHECK-NEXT: %[[BUF:.*]] = memref.get_global @__hector_kernel_profile : memref<3x4xf64>
// CHECK-NEXT: %[[ROW:.*]] = arith.constant 0 : index
// CHECK-NEXT: %[[DT:.*]] = arith.subf %[[T1]], %[[T0]] : f64
// CHECK: %[[CALLS:.*]] = memref.load %[[BUF]][%[[ROW]], %{{.*}}]
// CHECK-NEXT: arith.addf %[[CALLS]]
// CHECK: %[[OLDMIN:.*]] = memref.load %[[BUF]][%[[ROW]], %{{.*}}]
// CHECK: %[[FIRST:.*]] = arith.cmpf oeq, %[[CALLS]]
// CHECK-NEXT: %[[LEAST:.*]] = arith.minimumf %[[OLDMIN]], %[[DT]] : f64
// CHECK-NEXT: arith.select %[[FIRST]], %[[DT]], %[[LEAST]] : f64
// CHECK: arith.addf %{{.*}}, %[[DT]] : f64
// CHECK: arith.addf %{{.*}}, %[[MF]] : f64
// A traversal without gather index: M is x's row count.
// CHECK: memref.dim %[[X:.*]], %{{.*}} : memref<?x8xf32>
// CHECK: call @rtclock()
// CHECK-NEXT: "hector_intra.traversal_template"
// CHECK-NEXT: call @rtclock()
// CHECK: arith.constant 1 : index
// CHECK: return

// A function without templates is left alone.
// CHECK-LABEL: func.func @plain
// CHECK-NOT: rtclock
// CHECK: return

// The weight gradient (xty) in another function: row 2.
// CHECK-LABEL: func.func @backward
// CHECK: call @rtclock()
// CHECK-NEXT: "hector_intra.gemm_template"
// CHECK-NEXT: call @rtclock()
// CHECK-NEXT: memref.get_global
// CHECK-NEXT: arith.constant 2 : index

// What the counters cannot say is the module attribute, one dictionary per row: the function,
// template, variant, combine, static widths K and N, per-row operands, elements read once and
// the template's source location.
// META: module attributes {hector.kernel_profile = [
// META-SAME: {combine = "add", fixed_elems = 384 : i64, function = "forward", k = 16 : i64, n = 8 : i64, per_row = ["gather_index", "weight_index", "scatter_index", "row_scale"], source = "{{.*}}:[[# @LINE + 20]]:3", template = "gemm", variant = "xw", y_width = 0 : i64},
// META-SAME: {combine = "none", fixed_elems = 8 : i64, function = "forward", k = 8 : i64, n = 8 : i64, per_row = [], source = "{{.*}}:[[# @LINE + 20]]:3", template = "traversal", variant = "add_bias", y_width = 8 : i64},
// META-SAME: {combine = "add", fixed_elems = 384 : i64, function = "backward", k = 16 : i64, n = 8 : i64, per_row = ["gather_index", "weight_index"], source = "{{.*}}:[[# @LINE + 28]]:3", template = "gemm", variant = "xty", y_width = 0 : i64}]}

// The timers lower with the loops to the LLVM dialect (calls of the external rtclock, the buffer as
// an external global the JIT can see, and the reader's C wrapper): two clock reads per template.
// LLVM-DAG: llvm.mlir.global external @__hector_kernel_profile(dense<0.000000e+00> : tensor<3x4xf64>)
// LLVM-DAG: llvm.func @rtclock() -> f64
// LLVM-DAG: llvm.func @_mlir_ciface___hector_kernel_profile_take(
// LLVM-DAG: llvm.func @_mlir_ciface_forward(
// LLVM-NOT: hector_intra.

// Every op the pass adds around a template carries the template's location.
// LOC-LABEL: func.func @backward
// LOC: memref.dim {{.*}} loc([[T:#loc[0-9]+]])
// LOC-COUNT-3: loc([[T]])
// LOC-NEXT: "hector_intra.gemm_template"{{.*}} loc([[T]])
// LOC-NEXT: call @rtclock() {{.*}} loc([[T]])

func.func @forward(%a: memref<?x16xf32>, %w: memref<3x16x8xf32>, %src: memref<?xi32>, %etype: memref<?xi32>, %dst: memref<?xi32>, %norm: memref<?x1xf32>, %out: memref<?x8xf32>, %x: memref<?x8xf32>, %bias: memref<8xf32>, %out2: memref<?x8xf32>) attributes {hector.outputs} {
  "hector_intra.gemm_template"(%a, %w, %src, %etype, %dst, %norm, %out) {variant = "xw", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1>} : (memref<?x16xf32>, memref<3x16x8xf32>, memref<?xi32>, memref<?xi32>, memref<?xi32>, memref<?x1xf32>, memref<?x8xf32>) -> ()
  "hector_intra.traversal_template"(%x, %bias, %out2) {parallel = "node", fn = "add_bias", reduce = "none", slope = 0.0 : f32, block_size = 256 : i64, operandSegmentSizes = array<i32: 0, 0, 0, 1, 1, 1>} : (memref<?x8xf32>, memref<8xf32>, memref<?x8xf32>) -> ()
  return
}

func.func @plain(%a: memref<?x8xf32>) {
  return
}

func.func @backward(%a: memref<?x16xf32>, %g: memref<?x8xf32>, %src: memref<?xi32>, %etype: memref<?xi32>, %dw: memref<3x16x8xf32>) attributes {hector.outputs} {
  "hector_intra.gemm_template"(%a, %g, %src, %etype, %dw) {variant = "xty", epilogue = "add", tile_n = 8 : i64, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1>} : (memref<?x16xf32>, memref<?x8xf32>, memref<?xi32>, memref<?xi32>, memref<3x16x8xf32>) -> ()
  return
}
