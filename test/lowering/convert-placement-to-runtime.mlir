// RUN: hector-opt %s -p 'hector-autodiff, convert-hector-inter-to-intra, placement-plan-saved{memory_budget=0 nodes=100 edges=1000 compact=500 recompute=false max_write_lag=0}, convert-placement-to-runtime' | FileCheck %s
// RUN: hector-opt %s -p 'hector-autodiff, convert-hector-inter-to-intra, placement-plan-saved{memory_budget=0 nodes=100 edges=1000 compact=500 recompute=false}, convert-placement-to-runtime' | FileCheck %s --check-prefix=LAG
// RUN: hector-opt %s -p 'hector-autodiff, convert-hector-inter-to-intra, placement-plan-saved{memory_budget=0 nodes=100 edges=1000 compact=500 recompute=false}, convert-hector-intra-to-scf, convert-placement-to-runtime, hector-lower-llvm-cpu' | FileCheck %s --check-prefix=LLVM
// RUN: hector-opt %s -p 'hector-autodiff, convert-hector-inter-to-intra, placement-plan-saved{memory_budget=0 nodes=100 edges=1000 compact=500}, convert-placement-to-runtime' | FileCheck %s --check-prefix=RECOMPUTE
// RUN: hector-opt %S/../passes/Inputs/plan-saved-rgat.mlir -p 'hector-autodiff, hector-fuse, convert-hector-inter-to-intra, placement-plan-saved{memory_budget=0.5 nodes=19397 edges=422220 compact=46125 dst_compact=46125}, convert-hector-intra-to-scf, convert-placement-to-runtime, hector-lower-llvm-cpu' | FileCheck %s --check-prefix=RGAT
// RUN: hector-opt %S/../passes/Inputs/plan-saved-hgt.mlir -p 'hector-autodiff, hector-fuse, convert-hector-inter-to-intra, placement-plan-saved{memory_budget=0.5 nodes=19397 edges=422220 compact=46125 dst_compact=46125}, convert-hector-intra-to-scf, convert-placement-to-runtime, hector-lower-llvm-cpu' | FileCheck %s --check-prefix=HGT

// tanh's output (saved value 0, 8*N bytes) is offloaded. @layer_train no longer returns it: it
// owns the buffer and starts the write as soon as the value is complete (after tanh), so the
// gather that still reads it overlaps the write; it waits and frees the buffer before the GEMM,
// the first kernel that touches a new buffer (overlapping that one would hold both at once):
// the lowering's rule, alone here (max_write_lag=0).
// @layer_backward no longer takes it: it allocates the buffer ahead of the first use (as early
// as the modeled peak allows: here at its start, two kernels ahead) and starts the read there, waits right before the first use, and releases the stored copy and
// the buffer after the last use.
// CHECK-DAG: func.func private @hector_place_write(i64, i64, i64)
// CHECK-DAG: func.func private @hector_place_wait(i64)
// CHECK-DAG: func.func private @hector_place_prefetch(i64, i64, i64)
// CHECK-DAG: func.func private @hector_place_release(i64)
// CHECK-LABEL: func.func @layer_train(
// CHECK-SAME: %{{[a-z0-9]+}}: memref<?x2xf32>, %{{[a-z0-9]+}}: memref<3x2x2xf32>, %{{[a-z0-9]+}}: memref<?x2xf32>) attributes
// CHECK-SAME: hector.num_saved = 0 : i64, hector.outputs = 1 : i64
// CHECK-SAME: placement.lowered = [0]
// CHECK: %[[T:.*]] = memref.alloc(%{{.*}}) {alignment = 4096 : i64} : memref<?x2xf32>
// CHECK: "hector_intra.traversal_template"(%{{[a-z0-9_]+}}, %[[T]]) {{.*}}fn = "tanh",
// CHECK-NEXT: %[[PTR:.*]] = memref.extract_aligned_pointer_as_index %[[T]]
// CHECK: call @hector_place_write(%{{.*}}, %{{.*}}, %{{.*}}) : (i64, i64, i64) -> ()
// CHECK: "hector_intra.traversal_template"(%{{[a-z0-9_]+}}, %[[T]], %{{[a-z0-9_]+}}) {{.*}}fn = "copy"
// CHECK: call @hector_place_wait(
// CHECK-NEXT: memref.dealloc %[[T]]
// CHECK-NEXT: "hector_intra.gemm_template"
// CHECK-NOT: "placement.
// CHECK-LABEL: func.func @layer_backward(
// CHECK-NOT: "placement.
// CHECK: memref.extract_aligned_pointer_as_index %[[B:[a-z0-9_]+]]
// CHECK: call @hector_place_prefetch(
// CHECK: "hector_intra.gemm_template"
// CHECK: call @hector_place_wait(
// CHECK-NEXT: "hector_intra.traversal_template"(%{{[a-z0-9_]+}}, %[[B]], %{{[a-z0-9_]+}}) {{.*}}fn = "copy"
// CHECK: "hector_intra.traversal_template"(%{{[a-z0-9_]+}}, %[[B]], %{{[a-z0-9_]+}}) {{.*}}fn = "tanh_grad"
// CHECK: call @hector_place_release(
// CHECK-NEXT: memref.dealloc %[[B]]

// Without max_write_lag=0 the planner lets the write overlap every kernel left in the forward:
// the step's modeled peak is in the backward, so holding tanh's output through the GEMM and the
// sum costs nothing there (placement.write_lag). The wait and the free close the forward.
// LAG-LABEL: func.func @layer_train(
// LAG: %[[T:.*]] = memref.alloc(%{{.*}}) {alignment = 4096 : i64} : memref<?x2xf32>
// LAG: call @hector_place_write(
// LAG-NOT: call @hector_place_wait(
// LAG: "hector_intra.gemm_template"
// LAG-NOT: call @hector_place_wait(
// LAG: "hector_intra.traversal_template"(%{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}) {{.*}}fn = "copy"
// LAG: call @hector_place_wait(
// LAG-NEXT: memref.dealloc %[[T]]
// LAG-NEXT: return

// In the LLVM dialect the decisions are plain calls of the runtime's C functions, which the CPU
// JIT resolves against libhector_runtime.so.
// LLVM-DAG: llvm.func @hector_place_write(i64, i64, i64)
// LLVM-DAG: llvm.func @hector_place_prefetch(i64, i64, i64)
// LLVM-LABEL: llvm.func @layer_train(
// LLVM: llvm.call @hector_place_write(%{{.*}}, %{{.*}}, %{{.*}}) : (i64, i64, i64) -> ()
// LLVM: llvm.call @hector_place_wait(%{{.*}}) : (i64) -> ()
// LLVM-LABEL: llvm.func @layer_backward(
// LLVM: llvm.call @hector_place_prefetch(%{{.*}}, %{{.*}}, %{{.*}}) : (i64, i64, i64) -> ()
// LLVM: llvm.call @hector_place_wait(%{{.*}}) : (i64) -> ()
// LLVM: llvm.call @hector_place_release(%{{.*}}) : (i64) -> ()

// RGAT's training program at half its saved bytes (placement-plan-saved.mlir): its two
// edge-wise saved values are written by @rgat_layer_train and read back by @rgat_layer_backward.
// RGAT-LABEL: llvm.func @rgat_layer_train(
// RGAT-COUNT-2: llvm.call @hector_place_write(
// RGAT-NOT: llvm.call @hector_place_prefetch(
// RGAT-LABEL: llvm.func @rgat_layer_backward(
// RGAT-COUNT-2: llvm.call @hector_place_prefetch(
// RGAT-NOT: llvm.call @hector_place_write(

// HGT's at half its saved bytes: three values (the compact keys and values, a node-wise value)
// go through the store, each written once and read back once per step.
// HGT-LABEL: llvm.func @hgt_layer_train(
// HGT-COUNT-3: llvm.call @hector_place_write(
// HGT-NOT: llvm.call @hector_place_prefetch(
// HGT-LABEL: llvm.func @hgt_layer_backward(
// HGT-COUNT-3: llvm.call @hector_place_prefetch(
// HGT-NOT: llvm.call @hector_place_write(
// HGT: llvm.call @hector_place_release(

// A recomputed value needs no runtime call: it just leaves the ABI (and its marker goes).
// RECOMPUTE-LABEL: func.func @layer_train(
// RECOMPUTE-SAME: hector.num_saved = 0 : i64
// RECOMPUTE-NOT: call @hector_place
// RECOMPUTE-LABEL: func.func @layer_backward(
// RECOMPUTE-NOT: call @hector_place
// RECOMPUTE-NOT: "placement.
// RECOMPUTE: fn = "tanh_grad"
func.func @layer(%g: !hector_inter.graph, %x: tensor<?x2xf32> {hector.kind = "node"}, %w: tensor<3x2x2xf32> {hector.kind = "weight"}) -> tensor<?x2xf32> {
  %t = "hector_inter.unary"(%x) {fn = "tanh", slope = 0.0 : f32} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %ts = "hector_inter.gather_src"(%g, %t) : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
  %m = "hector_inter.typed_linear"(%g, %ts, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x2xf32>, tensor<3x2x2xf32>) -> tensor<?x2xf32>
  %o = "hector_inter.sum_to_dst"(%g, %m) : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
  return %o : tensor<?x2xf32>
}
