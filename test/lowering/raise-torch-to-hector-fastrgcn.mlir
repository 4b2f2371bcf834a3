// RUN: hector-opt --torch %s | FileCheck %s

// PyG FastRGCNConv's per-relation product,
//   bmm(x_j.unsqueeze(-2), weight.index_select(0, edge_type)).squeeze(-2)
// with x_j = x.index_select(0, src), summed onto dst with index_add. Exported by torch-mlir's
// FX importer (output_type="torch", hector.import_model's decompositions) from a small
// nn.Module (N = 10 nodes, E = 32 edges, R = 3 relations); only the graph bindings were added.
// The negative axis (unsqueeze -2, squeeze exported as dim 1) raises like unsqueeze(1).

// CHECK-LABEL: func.func @fast_rgcn_unsqueeze_m2(
// CHECK-NOT: torch.aten
// CHECK: hector_inter.gather_src
// CHECK: hector_inter.typed_linear{{.*}}slice = "etype"
// CHECK: hector_inter.sum_to_dst
// CHECK-NOT: torch.aten
// CHECK: return
func.func @fast_rgcn_unsqueeze_m2(%arg0: !torch.vtensor<[3,4,6],f32>, %arg1: !torch.vtensor<[10,4],f32>, %arg2: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %arg3: !torch.vtensor<[32],si64> {hector.data.graph = "dst"}, %arg4: !torch.vtensor<[32],si64> {hector.data.graph = "etype"}) -> !torch.vtensor<[10,6],f32> {
  %0 = torch.vtensor.literal(dense<0.000000e+00> : tensor<10x6xf32>) : !torch.vtensor<[10,6],f32>
  %none = torch.constant.none
  %int1 = torch.constant.int 1
  %true = torch.constant.bool true
  %false = torch.constant.bool false
  %int6 = torch.constant.int 6
  %int10 = torch.constant.int 10
  %int-2 = torch.constant.int -2
  %int0 = torch.constant.int 0
  %1 = torch.aten.index_select %arg1, %int0, %arg2 : !torch.vtensor<[10,4],f32>, !torch.int, !torch.vtensor<[32],si64> -> !torch.vtensor<[32,4],f32>
  %2 = torch.aten.unsqueeze %1, %int-2 : !torch.vtensor<[32,4],f32>, !torch.int -> !torch.vtensor<[32,1,4],f32>
  %3 = torch.aten.index_select %arg0, %int0, %arg4 : !torch.vtensor<[3,4,6],f32>, !torch.int, !torch.vtensor<[32],si64> -> !torch.vtensor<[32,4,6],f32>
  %4 = torch.aten.bmm %2, %3 : !torch.vtensor<[32,1,4],f32>, !torch.vtensor<[32,4,6],f32> -> !torch.vtensor<[32,1,6],f32>
  %5 = torch.aten.squeeze.dim %4, %int1 : !torch.vtensor<[32,1,6],f32>, !torch.int -> !torch.vtensor<[32,6],f32>
  %6 = torch.prim.ListConstruct %int10, %int6 : (!torch.int, !torch.int) -> !torch.list<int>
  %cpu = torch.constant.device "cpu"
  %7 = torch.aten.empty.memory_format %6, %int6, %int0, %cpu, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[10,6],f32>
  %8 = torch.prim.ListConstruct %arg3 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %9 = torch.aten.index_put.hacked_twin %0, %8, %5, %true : !torch.vtensor<[10,6],f32>, !torch.list<vtensor>, !torch.vtensor<[32,6],f32>, !torch.bool -> !torch.vtensor<[10,6],f32>
  return %9 : !torch.vtensor<[10,6],f32>
}
