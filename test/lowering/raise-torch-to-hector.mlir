// RUN: hector-opt --torch %s --split-input-file | FileCheck %s

// RGCN: gather by src, per-relation bmm, per-edge norm, index_add onto dst, root, bias, relu.
// CHECK-LABEL: func.func @rgcn
// CHECK: hector_inter.gather_src
// CHECK: hector_inter.typed_linear"({{.*}}) {slice = "etype"}
// CHECK: hector_inter.scale
// CHECK: hector_inter.sum_to_dst
// CHECK: hector_inter.typed_linear"({{.*}}) {slice = "none"}
// CHECK: hector_inter.add
// CHECK: hector_inter.add
// CHECK: hector_inter.unary"({{.*}}) {fn = "relu"
// CHECK-NOT: torch.aten
// CHECK: return
func.func @rgcn(%x: !torch.vtensor<[10,4],f32>, %w: !torch.vtensor<[3,4,5],f32>, %root: !torch.vtensor<[4,5],f32>, %bias: !torch.vtensor<[5],f32>, %src: !torch.vtensor<[30],si64> {hector.data.graph = "src"}, %dst: !torch.vtensor<[30],si64> {hector.data.graph = "dst"}, %et: !torch.vtensor<[30],si64> {hector.data.graph = "etype"}, %norm: !torch.vtensor<[30,1],f32>) -> !torch.vtensor<[10,5],f32> {
  %0 = torch.vtensor.literal(dense<0.000000e+00> : tensor<10x5xf32>) : !torch.vtensor<[10,5],f32>
  %true = torch.constant.bool true
  %int1 = torch.constant.int 1
  %int0 = torch.constant.int 0
  %4 = torch.aten.index_select %x, %int0, %src : !torch.vtensor<[10,4],f32>, !torch.int, !torch.vtensor<[30],si64> -> !torch.vtensor<[30,4],f32>
  %5 = torch.prim.ListConstruct %et : (!torch.vtensor<[30],si64>) -> !torch.list<vtensor>
  %6 = torch.aten.index.Tensor_hacked_twin %w, %5 : !torch.vtensor<[3,4,5],f32>, !torch.list<vtensor> -> !torch.vtensor<[30,4,5],f32>
  %7 = torch.aten.unsqueeze %4, %int1 : !torch.vtensor<[30,4],f32>, !torch.int -> !torch.vtensor<[30,1,4],f32>
  %8 = torch.aten.bmm %7, %6 : !torch.vtensor<[30,1,4],f32>, !torch.vtensor<[30,4,5],f32> -> !torch.vtensor<[30,1,5],f32>
  %9 = torch.aten.squeeze.dim %8, %int1 : !torch.vtensor<[30,1,5],f32>, !torch.int -> !torch.vtensor<[30,5],f32>
  %10 = torch.aten.mul.Tensor %9, %norm : !torch.vtensor<[30,5],f32>, !torch.vtensor<[30,1],f32> -> !torch.vtensor<[30,5],f32>
  %13 = torch.prim.ListConstruct %dst : (!torch.vtensor<[30],si64>) -> !torch.list<vtensor>
  %14 = torch.aten.index_put.hacked_twin %0, %13, %10, %true : !torch.vtensor<[10,5],f32>, !torch.list<vtensor>, !torch.vtensor<[30,5],f32>, !torch.bool -> !torch.vtensor<[10,5],f32>
  %15 = torch.aten.mm %x, %root : !torch.vtensor<[10,4],f32>, !torch.vtensor<[4,5],f32> -> !torch.vtensor<[10,5],f32>
  %16 = torch.aten.add.Tensor %14, %15, %int1 : !torch.vtensor<[10,5],f32>, !torch.vtensor<[10,5],f32>, !torch.int -> !torch.vtensor<[10,5],f32>
  %17 = torch.aten.add.Tensor %16, %bias, %int1 : !torch.vtensor<[10,5],f32>, !torch.vtensor<[5],f32>, !torch.int -> !torch.vtensor<[10,5],f32>
  %18 = torch.aten.relu %17 : !torch.vtensor<[10,5],f32> -> !torch.vtensor<[10,5],f32>
  return %18 : !torch.vtensor<[10,5],f32>
}

// -----

// Near misses: a gather by an index that is not the graph's, a scatter onto a non-zero base,
// and a "mean" scatter_reduce stay torch code.
// CHECK-LABEL: func.func @near_misses
// CHECK-NOT: hector_inter.gather
// CHECK: torch.aten.index_select
// CHECK-NOT: hector_inter.sum_to_dst
// CHECK: torch.aten.index_put
// CHECK: torch.aten.scatter_reduce.two
func.func @near_misses(%x: !torch.vtensor<[10,4],f32>, %other: !torch.vtensor<[30],si64>, %dst: !torch.vtensor<[30],si64> {hector.data.graph = "dst"}, %e: !torch.vtensor<[30,4],f32>) -> (!torch.vtensor<[30,4],f32>, !torch.vtensor<[10,4],f32>, !torch.vtensor<[10,4],f32>) {
  %int0 = torch.constant.int 0
  %true = torch.constant.bool true
  %mean = torch.constant.str "mean"
  %int-1 = torch.constant.int -1
  %int4 = torch.constant.int 4
  %0 = torch.aten.index_select %x, %int0, %other : !torch.vtensor<[10,4],f32>, !torch.int, !torch.vtensor<[30],si64> -> !torch.vtensor<[30,4],f32>
  %1 = torch.prim.ListConstruct %dst : (!torch.vtensor<[30],si64>) -> !torch.list<vtensor>
  %2 = torch.aten.index_put.hacked_twin %x, %1, %e, %true : !torch.vtensor<[10,4],f32>, !torch.list<vtensor>, !torch.vtensor<[30,4],f32>, !torch.bool -> !torch.vtensor<[10,4],f32>
  %z = torch.vtensor.literal(dense<0.000000e+00> : tensor<10x4xf32>) : !torch.vtensor<[10,4],f32>
  %3 = torch.aten.unsqueeze %dst, %int-1 : !torch.vtensor<[30],si64>, !torch.int -> !torch.vtensor<[30,1],si64>
  %4 = torch.prim.ListConstruct %int-1, %int4 : (!torch.int, !torch.int) -> !torch.list<int>
  %5 = torch.aten.broadcast_to %3, %4 : !torch.vtensor<[30,1],si64>, !torch.list<int> -> !torch.vtensor<[30,4],si64>
  %6 = torch.aten.scatter_reduce.two %z, %int0, %5, %e, %mean, %true : !torch.vtensor<[10,4],f32>, !torch.int, !torch.vtensor<[30,4],si64>, !torch.vtensor<[30,4],f32>, !torch.str, !torch.bool -> !torch.vtensor<[10,4],f32>
  return %0, %2, %6 : !torch.vtensor<[30,4],f32>, !torch.vtensor<[10,4],f32>, !torch.vtensor<[10,4],f32>
}
