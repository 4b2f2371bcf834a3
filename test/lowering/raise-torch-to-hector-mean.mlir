// RUN: hector-opt --torch %s | FileCheck %s

// PyG's mean aggregation (MeanAggregation, scatter(..., reduce="mean"), as RGCNConv's
// per-relation loop and SAGEConv run it): the messages summed onto dst, divided by the
// in-degree counted from ones and clamped to 1, viewed [N, 1] and expanded:
//   out = zeros(N, D).scatter_add_(0, dst.view(-1, 1).expand_as(x_j), x_j)
//   count = zeros(N).scatter_add_(0, dst, ones(E)).clamp(min=1)
//   out / count.view(-1, 1).expand_as(out)
// raises to sum_to_dst(scale(x_j, degree_norm {by = "dst"})). Without the clamp an isolated
// node computes 0 / 0 (NaN), which degree_norm would make 0: that division stays torch code.
// Exported by torch-mlir's FX importer from small nn.Modules (N = 10, E = 32, D = 4); only the
// graph bindings were added.

// CHECK-LABEL: func.func @mean_of_sum(
// CHECK-NOT: torch.aten.div
// CHECK: %[[X:.*]] = "hector_inter.gather_src"
// CHECK: %[[N:.*]] = "hector_inter.degree_norm"({{.*}}) {by = "dst"}
// CHECK: %[[S:.*]] = "hector_inter.scale"(%[[X]], %[[N]])
// CHECK: "hector_inter.sum_to_dst"(%{{.*}}, %[[S]])
// CHECK-NOT: torch.aten.div
// CHECK: return

// CHECK-LABEL: func.func @mean_of_sum_unclamped(
// CHECK-NOT: hector_inter.degree_norm
// CHECK: torch.aten.div.Tensor
// CHECK: return

func.func @mean_of_sum(%arg0: !torch.vtensor<[10,4],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %arg2: !torch.vtensor<[32],si64> {hector.data.graph = "dst"}) -> !torch.vtensor<[10,4],f32> {
    %0 = torch.vtensor.literal(dense<1.000000e+00> : tensor<32xf32>) : !torch.vtensor<[32],f32>
    %1 = torch.vtensor.literal(dense<0.000000e+00> : tensor<10xf32>) : !torch.vtensor<[10],f32>
    %2 = torch.vtensor.literal(dense<0.000000e+00> : tensor<10x4xf32>) : !torch.vtensor<[10,4],f32>
    %int32 = torch.constant.int 32
    %int-1 = torch.constant.int -1
    %none = torch.constant.none
    %false = torch.constant.bool false
    %int6 = torch.constant.int 6
    %int1 = torch.constant.int 1
    %int4 = torch.constant.int 4
    %int10 = torch.constant.int 10
    %int0 = torch.constant.int 0
    %3 = torch.aten.index_select %arg0, %int0, %arg1 : !torch.vtensor<[10,4],f32>, !torch.int, !torch.vtensor<[32],si64> -> !torch.vtensor<[32,4],f32>
    %4 = torch.prim.ListConstruct %int10, %int4 : (!torch.int, !torch.int) -> !torch.list<int>
    %cpu = torch.constant.device "cpu"
    %5 = torch.aten.empty.memory_format %4, %int6, %int0, %cpu, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[10,4],f32>
    %6 = torch.prim.ListConstruct %int-1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
    %7 = torch.aten.view %arg2, %6 : !torch.vtensor<[32],si64>, !torch.list<int> -> !torch.vtensor<[32,1],si64>
    %8 = torch.prim.ListConstruct %int32, %int4 : (!torch.int, !torch.int) -> !torch.list<int>
    %9 = torch.aten.broadcast_to %7, %8 : !torch.vtensor<[32,1],si64>, !torch.list<int> -> !torch.vtensor<[32,4],si64>
    %10 = torch.aten.scatter_add %2, %int0, %9, %3 : !torch.vtensor<[10,4],f32>, !torch.int, !torch.vtensor<[32,4],si64>, !torch.vtensor<[32,4],f32> -> !torch.vtensor<[10,4],f32>
    %11 = torch.prim.ListConstruct %int10 : (!torch.int) -> !torch.list<int>
    %cpu_0 = torch.constant.device "cpu"
    %12 = torch.aten.empty.memory_format %11, %int6, %int0, %cpu_0, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[10],f32>
    %13 = torch.prim.ListConstruct %int32 : (!torch.int) -> !torch.list<int>
    %cpu_1 = torch.constant.device "cpu"
    %14 = torch.aten.empty.memory_format %13, %int6, %int0, %cpu_1, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[32],f32>
    %15 = torch.aten.scatter_add %1, %int0, %arg2, %0 : !torch.vtensor<[10],f32>, !torch.int, !torch.vtensor<[32],si64>, !torch.vtensor<[32],f32> -> !torch.vtensor<[10],f32>
    %16 = torch.aten.clamp %15, %int1, %none : !torch.vtensor<[10],f32>, !torch.int, !torch.none -> !torch.vtensor<[10],f32>
    %17 = torch.prim.ListConstruct %int-1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
    %18 = torch.aten.view %16, %17 : !torch.vtensor<[10],f32>, !torch.list<int> -> !torch.vtensor<[10,1],f32>
    %19 = torch.prim.ListConstruct %int10, %int4 : (!torch.int, !torch.int) -> !torch.list<int>
    %20 = torch.aten.broadcast_to %18, %19 : !torch.vtensor<[10,1],f32>, !torch.list<int> -> !torch.vtensor<[10,4],f32>
    %21 = torch.aten.div.Tensor %10, %20 : !torch.vtensor<[10,4],f32>, !torch.vtensor<[10,4],f32> -> !torch.vtensor<[10,4],f32>
    return %21 : !torch.vtensor<[10,4],f32>
  }

func.func @mean_of_sum_unclamped(%arg0: !torch.vtensor<[10,4],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %arg2: !torch.vtensor<[32],si64> {hector.data.graph = "dst"}) -> !torch.vtensor<[10,4],f32> {
    %0 = torch.vtensor.literal(dense<1.000000e+00> : tensor<32xf32>) : !torch.vtensor<[32],f32>
    %1 = torch.vtensor.literal(dense<0.000000e+00> : tensor<10xf32>) : !torch.vtensor<[10],f32>
    %2 = torch.vtensor.literal(dense<0.000000e+00> : tensor<10x4xf32>) : !torch.vtensor<[10,4],f32>
    %none = torch.constant.none
    %int32 = torch.constant.int 32
    %int-1 = torch.constant.int -1
    %false = torch.constant.bool false
    %int6 = torch.constant.int 6
    %int1 = torch.constant.int 1
    %int4 = torch.constant.int 4
    %int10 = torch.constant.int 10
    %int0 = torch.constant.int 0
    %3 = torch.aten.index_select %arg0, %int0, %arg1 : !torch.vtensor<[10,4],f32>, !torch.int, !torch.vtensor<[32],si64> -> !torch.vtensor<[32,4],f32>
    %4 = torch.prim.ListConstruct %int10, %int4 : (!torch.int, !torch.int) -> !torch.list<int>
    %cpu = torch.constant.device "cpu"
    %5 = torch.aten.empty.memory_format %4, %int6, %int0, %cpu, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[10,4],f32>
    %6 = torch.prim.ListConstruct %int-1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
    %7 = torch.aten.view %arg2, %6 : !torch.vtensor<[32],si64>, !torch.list<int> -> !torch.vtensor<[32,1],si64>
    %8 = torch.prim.ListConstruct %int32, %int4 : (!torch.int, !torch.int) -> !torch.list<int>
    %9 = torch.aten.broadcast_to %7, %8 : !torch.vtensor<[32,1],si64>, !torch.list<int> -> !torch.vtensor<[32,4],si64>
    %10 = torch.aten.scatter_add %2, %int0, %9, %3 : !torch.vtensor<[10,4],f32>, !torch.int, !torch.vtensor<[32,4],si64>, !torch.vtensor<[32,4],f32> -> !torch.vtensor<[10,4],f32>
    %11 = torch.prim.ListConstruct %int10 : (!torch.int) -> !torch.list<int>
    %cpu_0 = torch.constant.device "cpu"
    %12 = torch.aten.empty.memory_format %11, %int6, %int0, %cpu_0, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[10],f32>
    %13 = torch.prim.ListConstruct %int32 : (!torch.int) -> !torch.list<int>
    %cpu_1 = torch.constant.device "cpu"
    %14 = torch.aten.empty.memory_format %13, %int6, %int0, %cpu_1, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[32],f32>
    %15 = torch.aten.scatter_add %1, %int0, %arg2, %0 : !torch.vtensor<[10],f32>, !torch.int, !torch.vtensor<[32],si64>, !torch.vtensor<[32],f32> -> !torch.vtensor<[10],f32>
    %16 = torch.prim.ListConstruct %int-1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
    %17 = torch.aten.view %15, %16 : !torch.vtensor<[10],f32>, !torch.list<int> -> !torch.vtensor<[10,1],f32>
    %18 = torch.prim.ListConstruct %int10, %int4 : (!torch.int, !torch.int) -> !torch.list<int>
    %19 = torch.aten.broadcast_to %17, %18 : !torch.vtensor<[10,1],f32>, !torch.list<int> -> !torch.vtensor<[10,4],f32>
    %20 = torch.aten.div.Tensor %10, %19 : !torch.vtensor<[10,4],f32>, !torch.vtensor<[10,4],f32> -> !torch.vtensor<[10,4],f32>
    return %20 : !torch.vtensor<[10,4],f32>
  }

