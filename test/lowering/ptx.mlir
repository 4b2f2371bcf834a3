// RUN: hector-opt %s -p hector-lower-gpu | FileCheck %s
// RUN: hector compile %s --emit ptx | FileCheck %s --check-prefix=PTX

// The named GPU pipeline (inter → intra → gpu → ptx) compiles every template to a PTX entry
// for sm_90, all in one gpu.binary @hector_kernels; the host functions keep their launches.
// The PTX is an escaped string ("\0A" newlines) in the binary's `assembly`; `hector compile
// --emit ptx` prints it as text.

// CHECK-LABEL: func.func @rgcn
// CHECK-COUNT-2: gpu.launch_func @hector_kernels::@rgcn_{{[0-9]+}}_gemm
// CHECK-LABEL: func.func @sum_copy
// CHECK: gpu.memset
// CHECK: gpu.launch_func @hector_kernels::@sum_copy_3_traversal
// CHECK: gpu.binary @hector_kernels
// CHECK-SAME: #nvvm.target<chip = "sm_90", features = "+ptx80">
// CHECK-SAME: assembly = "
// CHECK-SAME: .version 8.0\0A.target sm_90\0A
// CHECK-SAME: .entry rgcn_5_gemm(
// CHECK-SAME: atom.global.add.f32
// CHECK-SAME: .entry rgcn_8_gemm(
// CHECK-SAME: .entry rgcn_11_traversal(
// CHECK-SAME: .entry rgcn_14_traversal(
// CHECK-SAME: .entry rgcn_15_traversal(
// CHECK-SAME: .entry sum_copy_3_traversal(
// CHECK-SAME: atom.global.add.f32
// CHECK-NOT: gpu.binary
// CHECK-NOT: gpu.module

// One entry per template (5 for RGCN — message passing is one scatter-GEMM —, 1 for the plain
// sum); atomics only where rows accumulate into destination rows.
// PTX: .target sm_90
// PTX: .address_size 64
// PTX-LABEL: .visible .entry rgcn_5_gemm(
// PTX: atom.global.add.f32
// PTX-LABEL: .visible .entry rgcn_8_gemm(
// PTX-NOT: atom.
// PTX-LABEL: .visible .entry rgcn_11_traversal(
// PTX-NOT: atom.
// PTX-LABEL: .visible .entry rgcn_14_traversal(
// PTX-NOT: atom.
// PTX-LABEL: .visible .entry rgcn_15_traversal(
// PTX-NOT: atom.
// PTX-LABEL: .visible .entry sum_copy_3_traversal(
// PTX: atom.global.add.f32
// PTX-NOT: .entry
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
