// RUN: hector-opt --torch %s | FileCheck %s

// PyG FastRGCNConv(4, 6, R = 3, aggr="mean") whole, as hector.import_model and the Dynamo
// backend export it (torch-mlir's FX importer, output_type="torch", the importer's
// decompositions; N = 10, E = 32; only the graph bindings were added). Its mean counts each
// edge's (dst, etype) with a one-hot:
//   norm = zeros(E, R).scatter_(1, edge_type.unsqueeze(1), 1)
//   norm = scatter(norm, dst, dim=0, dim_size=N, reduce="sum")[dst]
//   norm = 1.0 / norm.gather(1, edge_type.view(-1, 1)).clamp_(1.)
// which raises to degree_norm {by = "dst_etype"}: the layer is raised completely.

// CHECK-LABEL: func.func @fast_rgcn_conv_mean(
// CHECK-NOT: torch.aten.{{(scatter|gather|clamp|reciprocal)}}
// CHECK: "hector_inter.gather_src"
// CHECK: "hector_inter.typed_linear"{{.*}}slice = "etype"
// CHECK: %[[N:.*]] = "hector_inter.degree_norm"({{.*}}) {by = "dst_etype"}
// CHECK: %[[S:.*]] = "hector_inter.scale"(%{{.*}}, %[[N]])
// CHECK: "hector_inter.sum_to_dst"(%{{.*}}, %[[S]])
// CHECK-NOT: torch.aten.{{(scatter|gather|clamp|reciprocal)}}
// CHECK: return
func.func @fast_rgcn_conv_mean(%arg0: !torch.vtensor<[3,4,6],f32>, %arg1: !torch.vtensor<[4,6],f32>, %arg2: !torch.vtensor<[6],f32>, %arg3: !torch.vtensor<[10,4],f32>, %arg4: !torch.vtensor<[2,32],si64> {hector.data.graph = "edge_index"}, %arg5: !torch.vtensor<[32],si64> {hector.data.graph = "etype"}) -> !torch.vtensor<[10,6],f32> {
  %0 = torch.vtensor.literal(dense<0.000000e+00> : tensor<10x6xf32>) : !torch.vtensor<[10,6],f32>
  %1 = torch.vtensor.literal(dense<0.000000e+00> : tensor<10x3xf32>) : !torch.vtensor<[10,3],f32>
  %2 = torch.vtensor.literal(dense<1.000000e+00> : tensor<32x1xf32>) : !torch.vtensor<[32,1],f32>
  %3 = torch.vtensor.literal(dense<0.000000e+00> : tensor<32x3xf32>) : !torch.vtensor<[32,3],f32>
  %float1.000000e00 = torch.constant.float 1.000000e+00
  %int10 = torch.constant.int 10
  %int-1 = torch.constant.int -1
  %none = torch.constant.none
  %false = torch.constant.bool false
  %int6 = torch.constant.int 6
  %int3 = torch.constant.int 3
  %int32 = torch.constant.int 32
  %int-2 = torch.constant.int -2
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %4 = torch.aten.slice.Tensor %arg4, %int0, %int1, %int2, %int1 : !torch.vtensor<[2,32],si64>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[1,32],si64>
  %5 = torch.aten.squeeze.dim %4, %int0 : !torch.vtensor<[1,32],si64>, !torch.int -> !torch.vtensor<[32],si64>
  %6 = torch.aten.slice.Tensor %arg4, %int0, %int0, %int1, %int1 : !torch.vtensor<[2,32],si64>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[1,32],si64>
  %7 = torch.aten.squeeze.dim %6, %int0 : !torch.vtensor<[1,32],si64>, !torch.int -> !torch.vtensor<[32],si64>
  %8 = torch.aten.index_select %arg3, %int0, %7 : !torch.vtensor<[10,4],f32>, !torch.int, !torch.vtensor<[32],si64> -> !torch.vtensor<[32,4],f32>
  %9 = torch.aten.unsqueeze %8, %int-2 : !torch.vtensor<[32,4],f32>, !torch.int -> !torch.vtensor<[32,1,4],f32>
  %10 = torch.prim.ListConstruct %arg5 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %11 = torch.aten.index.Tensor_hacked_twin %arg0, %10 : !torch.vtensor<[3,4,6],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4,6],f32>
  %12 = torch.aten.bmm %9, %11 : !torch.vtensor<[32,1,4],f32>, !torch.vtensor<[32,4,6],f32> -> !torch.vtensor<[32,1,6],f32>
  %13 = torch.aten.squeeze.dim %12, %int1 : !torch.vtensor<[32,1,6],f32>, !torch.int -> !torch.vtensor<[32,6],f32>
  %14 = torch.prim.ListConstruct %int32, %int3 : (!torch.int, !torch.int) -> !torch.list<int>
  %cpu = torch.constant.device "cpu"
  %15 = torch.aten.empty.memory_format %14, %int6, %int0, %cpu, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[32,3],f32>
  %16 = torch.aten.unsqueeze %arg5, %int1 : !torch.vtensor<[32],si64>, !torch.int -> !torch.vtensor<[32,1],si64>
  %17 = torch.aten.scatter.src %3, %int1, %16, %2 : !torch.vtensor<[32,3],f32>, !torch.int, !torch.vtensor<[32,1],si64>, !torch.vtensor<[32,1],f32> -> !torch.vtensor<[32,3],f32>
  %18 = torch.prim.ListConstruct %int-1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
  %19 = torch.aten.view %5, %18 : !torch.vtensor<[32],si64>, !torch.list<int> -> !torch.vtensor<[32,1],si64>
  %20 = torch.prim.ListConstruct %int32, %int3 : (!torch.int, !torch.int) -> !torch.list<int>
  %21 = torch.aten.broadcast_to %19, %20 : !torch.vtensor<[32,1],si64>, !torch.list<int> -> !torch.vtensor<[32,3],si64>
  %22 = torch.prim.ListConstruct %int10, %int3 : (!torch.int, !torch.int) -> !torch.list<int>
  %cpu_0 = torch.constant.device "cpu"
  %23 = torch.aten.empty.memory_format %22, %int6, %int0, %cpu_0, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[10,3],f32>
  %24 = torch.aten.scatter_add %1, %int0, %21, %17 : !torch.vtensor<[10,3],f32>, !torch.int, !torch.vtensor<[32,3],si64>, !torch.vtensor<[32,3],f32> -> !torch.vtensor<[10,3],f32>
  %25 = torch.prim.ListConstruct %5 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %26 = torch.aten.index.Tensor_hacked_twin %24, %25 : !torch.vtensor<[10,3],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,3],f32>
  %27 = torch.prim.ListConstruct %int-1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
  %28 = torch.aten.view %arg5, %27 : !torch.vtensor<[32],si64>, !torch.list<int> -> !torch.vtensor<[32,1],si64>
  %29 = torch.aten.gather %26, %int1, %28, %false : !torch.vtensor<[32,3],f32>, !torch.int, !torch.vtensor<[32,1],si64>, !torch.bool -> !torch.vtensor<[32,1],f32>
  %30 = torch.aten.clamp %29, %float1.000000e00, %none : !torch.vtensor<[32,1],f32>, !torch.float, !torch.none -> !torch.vtensor<[32,1],f32>
  %31 = torch.aten.reciprocal %30 : !torch.vtensor<[32,1],f32> -> !torch.vtensor<[32,1],f32>
  %32 = torch.aten.mul.Scalar %31, %float1.000000e00 : !torch.vtensor<[32,1],f32>, !torch.float -> !torch.vtensor<[32,1],f32>
  %33 = torch.aten.mul.Tensor %32, %13 : !torch.vtensor<[32,1],f32>, !torch.vtensor<[32,6],f32> -> !torch.vtensor<[32,6],f32>
  %34 = torch.prim.ListConstruct %int-1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
  %35 = torch.aten.view %5, %34 : !torch.vtensor<[32],si64>, !torch.list<int> -> !torch.vtensor<[32,1],si64>
  %36 = torch.prim.ListConstruct %int32, %int6 : (!torch.int, !torch.int) -> !torch.list<int>
  %37 = torch.aten.broadcast_to %35, %36 : !torch.vtensor<[32,1],si64>, !torch.list<int> -> !torch.vtensor<[32,6],si64>
  %38 = torch.prim.ListConstruct %int10, %int6 : (!torch.int, !torch.int) -> !torch.list<int>
  %cpu_1 = torch.constant.device "cpu"
  %39 = torch.aten.empty.memory_format %38, %int6, %int0, %cpu_1, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[10,6],f32>
  %40 = torch.aten.scatter_add %0, %int0, %37, %33 : !torch.vtensor<[10,6],f32>, !torch.int, !torch.vtensor<[32,6],si64>, !torch.vtensor<[32,6],f32> -> !torch.vtensor<[10,6],f32>
  %41 = torch.aten.mm %arg3, %arg1 : !torch.vtensor<[10,4],f32>, !torch.vtensor<[4,6],f32> -> !torch.vtensor<[10,6],f32>
  %42 = torch.aten.add.Tensor %40, %41, %int1 : !torch.vtensor<[10,6],f32>, !torch.vtensor<[10,6],f32>, !torch.int -> !torch.vtensor<[10,6],f32>
  %43 = torch.aten.add.Tensor %42, %arg2, %int1 : !torch.vtensor<[10,6],f32>, !torch.vtensor<[6],f32>, !torch.int -> !torch.vtensor<[10,6],f32>
  return %43 : !torch.vtensor<[10,6],f32>
}
