// RUN: hector-opt %s -p hector-lower-cuda | FileCheck %s
// RUN: hector-opt %s -p hector-lower-cuda | FileCheck %s --check-prefix=ORDER
// RUN: hector-opt %s -p hector-lower-cuda | FileCheck %s --check-prefix=GONE
// RUN: hector-opt %s -p hector-lower-cuda | mlir-translate --mlir-to-llvmir | FileCheck %s --check-prefix=LLVMIR
// RUN: hector-opt %s -p 'hector-lower-gpu, hector-lower-gpu-host' | FileCheck %s --check-prefix=ORDER
// RUN: hector-opt %s -p 'hector-lower-gpu, func.func(gpu-async-region), hector-skip-empty-launches' | FileCheck %s --check-prefix=GUARD
// RUN: hector-opt %s -p hector-lower-cuda | FileCheck %s --check-prefix=SKIP

// Target "cuda" (hector.targets.cuda): after the GPU stages (kernels → PTX in a gpu.binary), the
// host stage `hector-lower-gpu-host` lowers the host functions to the LLVM dialect. Every GPU
// op of a function runs on one stream (gpu-async-region): temporaries come from mgpuMemAlloc,
// zero-fills are mgpuMemset32, launches stay gpu.launch_func on that stream until translation,
// and the function frees its temporaries and synchronizes the stream before returning. Each
// function gets a C-interface wrapper (one descriptor pointer per memref: 10 graph arrays,
// the tensors, the outputs) for the ExecutionEngine.

// CHECK-LABEL: llvm.func @rgcn(
// CHECK-SAME: llvm.emit_c_interface
// CHECK: %[[S:.*]] = llvm.call @mgpuStreamCreate() : () -> !llvm.ptr
// CHECK: llvm.call @mgpuMemAlloc(%{{.*}}, %[[S]], %{{.*}}) : (i64, !llvm.ptr, i8) -> !llvm.ptr
// CHECK: llvm.call @mgpuMemset32(%{{.*}}, %{{.*}}, %{{.*}}, %[[S]])
// CHECK: gpu.launch_func <%[[S]] : !llvm.ptr> @hector_kernels::@rgcn_5_gemm
// CHECK: gpu.launch_func <%[[S]] : !llvm.ptr> @hector_kernels::@rgcn_8_gemm
// CHECK: llvm.call @mgpuMemFree(%{{.*}}, %[[S]])
// CHECK: llvm.call @mgpuStreamSynchronize(%[[S]])
// CHECK-NEXT: llvm.call @mgpuStreamDestroy(%[[S]])
// CHECK-NEXT: llvm.return
// CHECK-LABEL: llvm.func @_mlir_ciface_rgcn(
// CHECK-SAME: %arg18: !llvm.ptr)
// CHECK: llvm.call @rgcn(
// CHECK-LABEL: llvm.func @sum_copy(
// CHECK: llvm.call @mgpuMemset32
// CHECK: gpu.launch_func <%{{.*}} : !llvm.ptr> @hector_kernels::@sum_copy_3_traversal
// CHECK-LABEL: llvm.func @_mlir_ciface_sum_copy(
// CHECK: gpu.binary @hector_kernels
// CHECK-SAME: #nvvm.target<chip = "sm_90", features = "+ptx80">
// CHECK-SAME: .entry rgcn_5_gemm(
// CHECK-DAG: llvm.func @mgpuStreamCreate() -> !llvm.ptr
// CHECK-DAG: llvm.func @mgpuMemFree(!llvm.ptr, !llvm.ptr)

// RGCN allocates four temporaries and frees all four, after its five launches.
// ORDER-LABEL: llvm.func @rgcn(
// ORDER-COUNT-4: llvm.call @mgpuMemAlloc
// ORDER-NOT: llvm.call @mgpuMemAlloc
// ORDER-COUNT-4: llvm.call @mgpuMemFree
// ORDER-NOT: gpu.launch_func
// ORDER: llvm.call @mgpuStreamSynchronize
// ORDER-LABEL: llvm.func @_mlir_ciface_rgcn(

// Launches over nothing are skipped (hector-skip-empty-launches, after gpu-async-region): each
// launch sits under `scf.if` its grid has a block, so an empty graph or an edge type without
// edges never asks the driver for a zero-block grid. The guarded launch's token is not used
// after it: what followed it waits on its dependency, the same stream (no token crosses the
// branch, so gpu-to-llvm still sees one stream and synchronizes and destroys it at the end).
// GUARD-LABEL: func.func @sum_copy(
// GUARD: %[[S:.*]] = gpu.wait async
// GUARD-NEXT: %[[T:.*]] = gpu.memset async [%[[S]]]
// GUARD: %[[GRID:.*]] = arith.divui
// GUARD: %[[NZ:.*]] = arith.cmpi ne, %[[GRID]], %{{.*}} : index
// GUARD: %[[YZ:.*]] = arith.andi %[[NZ]], %{{.*}} : i1
// GUARD-NEXT: %[[ALL:.*]] = arith.andi %[[YZ]], %{{.*}} : i1
// GUARD-NEXT: scf.if %[[ALL]] {
// GUARD-NEXT: gpu.launch_func async [%[[T]]] @hector_kernels::@sum_copy_3_traversal blocks in (%[[GRID]],
// GUARD-NEXT: }
// GUARD-NEXT: gpu.wait [%[[T]]]
// GUARD-NEXT: return
// SKIP-LABEL: llvm.func @sum_copy(
// SKIP: %[[S:.*]] = llvm.call @mgpuStreamCreate()
// SKIP: %[[GRID:.*]] = llvm.udiv
// SKIP-NEXT: %[[NZ:.*]] = llvm.icmp "ne" %[[GRID]], %{{.*}} : i64
// SKIP-NEXT: llvm.cond_br %[[NZ]], ^[[BODY:bb[0-9]+]], ^[[DONE:bb[0-9]+]]
// SKIP-NEXT: ^[[BODY]]:
// SKIP: gpu.launch_func <%[[S]] : !llvm.ptr> @hector_kernels::@sum_copy_3_traversal blocks in (%[[GRID]],
// SKIP-NEXT: llvm.br ^[[DONE]]
// SKIP-NEXT: ^[[DONE]]:
// SKIP-NEXT: llvm.call @mgpuStreamSynchronize(%[[S]])
// SKIP-NEXT: llvm.call @mgpuStreamDestroy(%[[S]])

// Nothing above the LLVM dialect is left on the host; no gpu.module, no memref or func ops.
// GONE-NOT: func.func
// GONE-NOT: gpu.module
// GONE-NOT: memref.
// GONE-NOT: hector_inter
// GONE-NOT: hector_intra

// Translated to LLVM IR (what the ExecutionEngine compiles): the PTX is a constant loaded
// once by a global constructor through the driver's JIT (mgpuModuleLoadJIT), and every launch
// is mgpuModuleGetFunction + mgpuLaunchKernel with the kernel's parameter count.
// LLVMIR: @hector_kernels_binary = internal constant
// LLVMIR-SAME: .target sm_90
// LLVMIR: @llvm.global_ctors = appending global {{.*}} @hector_kernels_load
// LLVMIR: @hector_kernels_rgcn_5_gemm_name = {{.*}} c"rgcn_5_gemm\00"
// LLVMIR-LABEL: define void @rgcn(
// LLVMIR: call ptr @mgpuModuleGetFunction(ptr %{{.*}}, ptr @hector_kernels_rgcn_5_gemm_name)
// LLVMIR: call void @mgpuLaunchKernel(ptr %{{.*}}, i64 %{{.*}}, i64 1, i64 1, i64 256, i64 1, i64 1, i32 0, ptr %{{.*}}, ptr %{{.*}}, ptr null, i64 {{[0-9]+}})
// LLVMIR-LABEL: define void @_mlir_ciface_rgcn(
// LLVMIR-LABEL: define internal void @hector_kernels_load()
// LLVMIR: call ptr @mgpuModuleLoadJIT(ptr @hector_kernels_binary, i32 {{[0-9]}})

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
func.func @sum_copy(%g: !hector_inter.graph, %m: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %0 = "hector_inter.sum_to_dst"(%g, %m) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %0 : tensor<?x4xf32>
}
