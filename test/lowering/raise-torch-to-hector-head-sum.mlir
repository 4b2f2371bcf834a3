// RUN: hector-opt --torch %s | FileCheck %s

// The per-head weighted sum as PyG's RGATConv writes its message and aggregation:
//   p = alpha.view(-1, H, 1) * x_j.view(-1, H, Dh)       (or alpha.unsqueeze(-1))
//   zeros(N, H, Dh).scatter_add(0, dst.view(-1, 1, 1).expand_as(p), p).view(-1, H * Dh)
// raises to sum_to_dst(scale(x_j, alpha)); summed by an index that is not a graph array it
// stays torch code. Exported by torch-mlir's FX importer (output_type="torch", the importer's
// decompositions) from small nn.Modules (N = 10, E = 32, H = 2, Dh = 3); only the graph
// bindings were added.

// CHECK-LABEL: func.func @head_sum_view(
// CHECK-NOT: torch.aten.scatter_add
// CHECK: hector_inter.gather_src
// CHECK: hector_inter.typed_linear{{.*}}slice = "none"
// CHECK: %[[S:.*]] = "hector_inter.scale"
// CHECK: "hector_inter.sum_to_dst"(%{{.*}}, %[[S]])
// CHECK-NOT: torch.aten.scatter_add
// CHECK: return

// CHECK-LABEL: func.func @head_sum_unsqueeze(
// CHECK-NOT: torch.aten.scatter_add
// CHECK: hector_inter.scale
// CHECK: hector_inter.sum_to_dst
// CHECK-NOT: torch.aten.scatter_add
// CHECK: return

// CHECK-LABEL: func.func @head_sum_not_by_dst(
// CHECK-NOT: hector_inter.sum_to_dst
// CHECK: torch.aten.mul.Tensor
// CHECK: torch.aten.scatter_add
// CHECK: return

func.func @head_sum_view(%arg0: !torch.vtensor<[6,2],f32>, %arg1: !torch.vtensor<[10,6],f32>, %arg2: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %arg3: !torch.vtensor<[32],si64> {hector.data.graph = "dst"}) -> !torch.vtensor<[10,6],f32> {
    %0 = torch.vtensor.literal(dense<0.000000e+00> : tensor<10x2x3xf32>) : !torch.vtensor<[10,2,3],f32>
    %none = torch.constant.none
    %int32 = torch.constant.int 32
    %false = torch.constant.bool false
    %int0 = torch.constant.int 0
    %int6 = torch.constant.int 6
    %int10 = torch.constant.int 10
    %int3 = torch.constant.int 3
    %int1 = torch.constant.int 1
    %int2 = torch.constant.int 2
    %int-1 = torch.constant.int -1
    %1 = torch.prim.ListConstruct %arg2 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
    %2 = torch.aten.index.Tensor_hacked_twin %arg1, %1 : !torch.vtensor<[10,6],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,6],f32>
    %3 = torch.aten.mm %2, %arg0 : !torch.vtensor<[32,6],f32>, !torch.vtensor<[6,2],f32> -> !torch.vtensor<[32,2],f32>
    %4 = torch.prim.ListConstruct %int-1, %int2, %int1 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
    %5 = torch.aten.view %3, %4 : !torch.vtensor<[32,2],f32>, !torch.list<int> -> !torch.vtensor<[32,2,1],f32>
    %6 = torch.prim.ListConstruct %int-1, %int2, %int3 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
    %7 = torch.aten.view %2, %6 : !torch.vtensor<[32,6],f32>, !torch.list<int> -> !torch.vtensor<[32,2,3],f32>
    %8 = torch.aten.mul.Tensor %5, %7 : !torch.vtensor<[32,2,1],f32>, !torch.vtensor<[32,2,3],f32> -> !torch.vtensor<[32,2,3],f32>
    %9 = torch.prim.ListConstruct %int10, %int2, %int3 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
    %cpu = torch.constant.device "cpu"
    %10 = torch.aten.empty.memory_format %9, %int6, %int0, %cpu, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[10,2,3],f32>
    %11 = torch.prim.ListConstruct %int-1, %int1, %int1 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
    %12 = torch.aten.view %arg3, %11 : !torch.vtensor<[32],si64>, !torch.list<int> -> !torch.vtensor<[32,1,1],si64>
    %13 = torch.prim.ListConstruct %int32, %int2, %int3 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
    %14 = torch.aten.broadcast_to %12, %13 : !torch.vtensor<[32,1,1],si64>, !torch.list<int> -> !torch.vtensor<[32,2,3],si64>
    %15 = torch.aten.scatter_add %0, %int0, %14, %8 : !torch.vtensor<[10,2,3],f32>, !torch.int, !torch.vtensor<[32,2,3],si64>, !torch.vtensor<[32,2,3],f32> -> !torch.vtensor<[10,2,3],f32>
    %16 = torch.prim.ListConstruct %int-1, %int6 : (!torch.int, !torch.int) -> !torch.list<int>
    %17 = torch.aten.view %15, %16 : !torch.vtensor<[10,2,3],f32>, !torch.list<int> -> !torch.vtensor<[10,6],f32>
    return %17 : !torch.vtensor<[10,6],f32>
  }

func.func @head_sum_unsqueeze(%arg0: !torch.vtensor<[6,2],f32>, %arg1: !torch.vtensor<[10,6],f32>, %arg2: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %arg3: !torch.vtensor<[32],si64> {hector.data.graph = "dst"}) -> !torch.vtensor<[10,6],f32> {
    %0 = torch.vtensor.literal(dense<0.000000e+00> : tensor<10x2x3xf32>) : !torch.vtensor<[10,2,3],f32>
    %none = torch.constant.none
    %int32 = torch.constant.int 32
    %false = torch.constant.bool false
    %int0 = torch.constant.int 0
    %int1 = torch.constant.int 1
    %int6 = torch.constant.int 6
    %int10 = torch.constant.int 10
    %int3 = torch.constant.int 3
    %int2 = torch.constant.int 2
    %int-1 = torch.constant.int -1
    %1 = torch.prim.ListConstruct %arg2 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
    %2 = torch.aten.index.Tensor_hacked_twin %arg1, %1 : !torch.vtensor<[10,6],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,6],f32>
    %3 = torch.aten.mm %2, %arg0 : !torch.vtensor<[32,6],f32>, !torch.vtensor<[6,2],f32> -> !torch.vtensor<[32,2],f32>
    %4 = torch.aten.unsqueeze %3, %int-1 : !torch.vtensor<[32,2],f32>, !torch.int -> !torch.vtensor<[32,2,1],f32>
    %5 = torch.prim.ListConstruct %int-1, %int2, %int3 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
    %6 = torch.aten.view %2, %5 : !torch.vtensor<[32,6],f32>, !torch.list<int> -> !torch.vtensor<[32,2,3],f32>
    %7 = torch.aten.mul.Tensor %4, %6 : !torch.vtensor<[32,2,1],f32>, !torch.vtensor<[32,2,3],f32> -> !torch.vtensor<[32,2,3],f32>
    %8 = torch.prim.ListConstruct %int10, %int2, %int3 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
    %cpu = torch.constant.device "cpu"
    %9 = torch.aten.empty.memory_format %8, %int6, %int0, %cpu, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[10,2,3],f32>
    %10 = torch.prim.ListConstruct %int-1, %int1, %int1 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
    %11 = torch.aten.view %arg3, %10 : !torch.vtensor<[32],si64>, !torch.list<int> -> !torch.vtensor<[32,1,1],si64>
    %12 = torch.prim.ListConstruct %int32, %int2, %int3 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
    %13 = torch.aten.broadcast_to %11, %12 : !torch.vtensor<[32,1,1],si64>, !torch.list<int> -> !torch.vtensor<[32,2,3],si64>
    %14 = torch.aten.scatter_add %0, %int0, %13, %7 : !torch.vtensor<[10,2,3],f32>, !torch.int, !torch.vtensor<[32,2,3],si64>, !torch.vtensor<[32,2,3],f32> -> !torch.vtensor<[10,2,3],f32>
    %15 = torch.prim.ListConstruct %int-1, %int6 : (!torch.int, !torch.int) -> !torch.list<int>
    %16 = torch.aten.view %14, %15 : !torch.vtensor<[10,2,3],f32>, !torch.list<int> -> !torch.vtensor<[10,6],f32>
    return %16 : !torch.vtensor<[10,6],f32>
  }

func.func @head_sum_not_by_dst(%arg0: !torch.vtensor<[6,2],f32>, %arg1: !torch.vtensor<[10,6],f32>, %arg2: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %arg3: !torch.vtensor<[32],si64> {hector.data.graph = "dst"}) -> !torch.vtensor<[10,6],f32> {
    %0 = torch.vtensor.literal(dense<0.000000e+00> : tensor<10x2x3xf32>) : !torch.vtensor<[10,2,3],f32>
    %none = torch.constant.none
    %int32 = torch.constant.int 32
    %false = torch.constant.bool false
    %int0 = torch.constant.int 0
    %int6 = torch.constant.int 6
    %int10 = torch.constant.int 10
    %int3 = torch.constant.int 3
    %int1 = torch.constant.int 1
    %int2 = torch.constant.int 2
    %int-1 = torch.constant.int -1
    %1 = torch.prim.ListConstruct %arg2 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
    %2 = torch.aten.index.Tensor_hacked_twin %arg1, %1 : !torch.vtensor<[10,6],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,6],f32>
    %3 = torch.aten.mm %2, %arg0 : !torch.vtensor<[32,6],f32>, !torch.vtensor<[6,2],f32> -> !torch.vtensor<[32,2],f32>
    %4 = torch.prim.ListConstruct %int-1, %int2, %int1 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
    %5 = torch.aten.view %3, %4 : !torch.vtensor<[32,2],f32>, !torch.list<int> -> !torch.vtensor<[32,2,1],f32>
    %6 = torch.prim.ListConstruct %int-1, %int2, %int3 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
    %7 = torch.aten.view %2, %6 : !torch.vtensor<[32,6],f32>, !torch.list<int> -> !torch.vtensor<[32,2,3],f32>
    %8 = torch.aten.mul.Tensor %5, %7 : !torch.vtensor<[32,2,1],f32>, !torch.vtensor<[32,2,3],f32> -> !torch.vtensor<[32,2,3],f32>
    %9 = torch.aten.add.Scalar %arg3, %int1, %int1 : !torch.vtensor<[32],si64>, !torch.int, !torch.int -> !torch.vtensor<[32],si64>
    %10 = torch.aten.remainder.Scalar %9, %int10 : !torch.vtensor<[32],si64>, !torch.int -> !torch.vtensor<[32],si64>
    %11 = torch.prim.ListConstruct %int10, %int2, %int3 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
    %cpu = torch.constant.device "cpu"
    %12 = torch.aten.empty.memory_format %11, %int6, %int0, %cpu, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[10,2,3],f32>
    %13 = torch.prim.ListConstruct %int-1, %int1, %int1 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
    %14 = torch.aten.view %10, %13 : !torch.vtensor<[32],si64>, !torch.list<int> -> !torch.vtensor<[32,1,1],si64>
    %15 = torch.prim.ListConstruct %int32, %int2, %int3 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
    %16 = torch.aten.broadcast_to %14, %15 : !torch.vtensor<[32,1,1],si64>, !torch.list<int> -> !torch.vtensor<[32,2,3],si64>
    %17 = torch.aten.scatter_add %0, %int0, %16, %8 : !torch.vtensor<[10,2,3],f32>, !torch.int, !torch.vtensor<[32,2,3],si64>, !torch.vtensor<[32,2,3],f32> -> !torch.vtensor<[10,2,3],f32>
    %18 = torch.prim.ListConstruct %int-1, %int6 : (!torch.int, !torch.int) -> !torch.list<int>
    %19 = torch.aten.view %17, %18 : !torch.vtensor<[10,2,3],f32>, !torch.list<int> -> !torch.vtensor<[10,6],f32>
    return %19 : !torch.vtensor<[10,6],f32>
  }

