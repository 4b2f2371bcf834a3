// RUN: hector-opt %s -p hector-lower-cpu | FileCheck %s
// RUN: hector-opt %s -p hector-lower-cpu | FileCheck %s --check-prefix=GONE
// RUN: hector-opt %s -p hector-lower-cpu | FileCheck %s --check-prefix=ALLOC
// RUN: hector-opt %s -p hector-lower-cpu | mlir-translate --mlir-to-llvmir | FileCheck %s --check-prefix=LLVMIR

// The named CPU pipeline (inter → intra → loops → llvm) takes an RGCN layer all the way to the
// LLVM dialect: the function takes expanded memref descriptors, and a C-interface wrapper
// `_mlir_ciface_rgcn` takes one descriptor pointer per memref (14 graph arrays, 4 tensors,
// 1 output) for the CPU JIT. Without graph statistics hector-aggregation-order keeps RGCN's
// messages transform-first and records it.

// Buffers go through MLIR's generic allocation functions, which the CPU JIT binds to Hector's
// host memory cache (runtime/host_memory.py).
// CHECK: llvm.func @_mlir_memref_to_llvm_free(!llvm.ptr)
// CHECK: llvm.func @_mlir_memref_to_llvm_alloc(i64) -> !llvm.ptr
// CHECK-LABEL: llvm.func @rgcn(
// CHECK-SAME: attributes {hector.aggregation_order = ["transform-first"], hector.aggregation_widths = [16, 8], hector.outputs = 1 : i64, llvm.emit_c_interface}
//   each template is a private function of its own (hector-outline-templates), called in order
// CHECK: llvm.call @rgcn_template0(
// CHECK: llvm.call @rgcn_template1(
// CHECK: llvm.return
// CHECK-LABEL: llvm.func @_mlir_ciface_rgcn(
// CHECK-SAME: %arg0: !llvm.ptr, %arg1: !llvm.ptr, %arg2: !llvm.ptr, %arg3: !llvm.ptr, %arg4: !llvm.ptr, %arg5: !llvm.ptr, %arg6: !llvm.ptr, %arg7: !llvm.ptr, %arg8: !llvm.ptr, %arg9: !llvm.ptr, %arg10: !llvm.ptr, %arg11: !llvm.ptr, %arg12: !llvm.ptr, %arg13: !llvm.ptr, %arg14: !llvm.ptr, %arg15: !llvm.ptr, %arg16: !llvm.ptr, %arg17: !llvm.ptr, %arg18: !llvm.ptr)
// CHECK-SAME: attributes {hector.aggregation_order = ["transform-first"], hector.aggregation_widths = [16, 8], hector.outputs = 1 : i64, llvm.emit_c_interface}
// CHECK: llvm.call @rgcn(
// CHECK: llvm.return
//   in the templates' functions (no C interface of their own), row indices (src, etype, dst)
//   are sign-extended i32 loads; the GEMM and scale multiply, sums add, relu is a maximum;
//   loops became branches
// CHECK-LABEL: llvm.func @rgcn_template0(
// CHECK-SAME: attributes {sym_visibility = "private"}
// CHECK-DAG: llvm.sext %{{.*}} : i32 to i64
// CHECK-DAG: llvm.fmul %{{.*}}, %{{.*}} : f32
// CHECK-DAG: llvm.fadd %{{.*}}, %{{.*}} : f32
// CHECK-DAG: llvm.intr.maximum(%{{.*}}, %{{.*}}) : (f32, f32) -> f32
// CHECK-DAG: llvm.cond_br
// CHECK-NOT: llvm.func @_mlir_ciface_rgcn_template

// Four intermediate buffers (aggregation, self loop, h, h + bias; the scatter-GEMM stores no
// per-edge messages): four allocations from the cache, then four frees; the output is the
// caller's.
// ALLOC-LABEL: llvm.func @rgcn(
// ALLOC-COUNT-4: llvm.call @_mlir_memref_to_llvm_alloc
// ALLOC-NOT: llvm.call @_mlir_memref_to_llvm_alloc
// ALLOC-COUNT-4: llvm.call @_mlir_memref_to_llvm_free
// ALLOC-NOT: llvm.call @_mlir_memref_to_llvm_free
// ALLOC: llvm.return

// Nothing of the higher levels survives.
// GONE-NOT: func.func
// GONE-NOT: hector_
// GONE-NOT: memref.
// GONE-NOT: scf.
// GONE-NOT: arith.
// GONE-NOT: linalg.
// GONE-NOT: cf.
// GONE-NOT: unrealized_conversion_cast

// The result translates to LLVM IR.
// LLVMIR: define void @rgcn(
// LLVMIR: define void @_mlir_ciface_rgcn(ptr %0, ptr %1, ptr %2, ptr %3, ptr %4, ptr %5, ptr %6, ptr %7, ptr %8, ptr %9, ptr %10, ptr %11, ptr %12, ptr %13, ptr %14, ptr %15, ptr %16, ptr %17, ptr %18)
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
