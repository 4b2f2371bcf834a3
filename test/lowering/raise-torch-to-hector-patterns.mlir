// RUN: hector-opt --torch %s | FileCheck %s

// Every raise pattern, as torch-mlir's FX importer exports it (generated from small
// nn.Modules; N = 10 nodes, E = 32 edges, R = 3 relations). Each function is raised
// completely: no torch.aten op is left.

// Gathers by the src and dst index: index_select and x[I].
// CHECK-LABEL: func.func @gather_src_dst(
// CHECK-NOT: torch.aten
// CHECK: hector_inter.gather_src
// CHECK: hector_inter.gather_dst
// CHECK: hector_inter.add
// CHECK-NOT: torch.aten
// CHECK: return
func.func @gather_src_dst(%arg0: !torch.vtensor<[10,4],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %arg2: !torch.vtensor<[32],si64> {hector.data.graph = "dst"}) -> !torch.vtensor<[32,4],f32> {
  %int1 = torch.constant.int 1
  %int0 = torch.constant.int 0
  %0 = torch.aten.index_select %arg0, %int0, %arg1 : !torch.vtensor<[10,4],f32>, !torch.int, !torch.vtensor<[32],si64> -> !torch.vtensor<[32,4],f32>
  %1 = torch.prim.ListConstruct %arg2 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %2 = torch.aten.index.Tensor_hacked_twin %arg0, %1 : !torch.vtensor<[10,4],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4],f32>
  %3 = torch.aten.add.Tensor %0, %2, %int1 : !torch.vtensor<[32,4],f32>, !torch.vtensor<[32,4],f32>, !torch.int -> !torch.vtensor<[32,4],f32>
  return %3 : !torch.vtensor<[32,4],f32>
}

// Gathers through edge_index[0] / edge_index[1] (slice + squeeze) and select.int.
// CHECK-LABEL: func.func @gather_edge_index(
// CHECK-NOT: torch.aten
// CHECK: hector_inter.gather_src
// CHECK: hector_inter.gather_dst
// CHECK-NOT: torch.aten
// CHECK: return
func.func @gather_edge_index(%arg0: !torch.vtensor<[10,4],f32>, %arg1: !torch.vtensor<[2,32],si64> {hector.data.graph = "edge_index"}) -> (!torch.vtensor<[32,4],f32>, !torch.vtensor<[32,4],f32>) {
  %int2 = torch.constant.int 2
  %int1 = torch.constant.int 1
  %int0 = torch.constant.int 0
  %0 = torch.aten.slice.Tensor %arg1, %int0, %int0, %int1, %int1 : !torch.vtensor<[2,32],si64>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[1,32],si64>
  %1 = torch.aten.squeeze.dim %0, %int0 : !torch.vtensor<[1,32],si64>, !torch.int -> !torch.vtensor<[32],si64>
  %2 = torch.prim.ListConstruct %1 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %3 = torch.aten.index.Tensor_hacked_twin %arg0, %2 : !torch.vtensor<[10,4],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4],f32>
  %4 = torch.aten.slice.Tensor %arg1, %int0, %int1, %int2, %int1 : !torch.vtensor<[2,32],si64>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[1,32],si64>
  %5 = torch.aten.squeeze.dim %4, %int0 : !torch.vtensor<[1,32],si64>, !torch.int -> !torch.vtensor<[32],si64>
  %6 = torch.aten.index_select %arg0, %int0, %5 : !torch.vtensor<[10,4],f32>, !torch.int, !torch.vtensor<[32],si64> -> !torch.vtensor<[32,4],f32>
  return %3, %6 : !torch.vtensor<[32,4],f32>, !torch.vtensor<[32,4],f32>
}

// Typed linear by etype: bmm(x[src].unsqueeze(1), index_select(W, 0, etype)).squeeze(1).
// CHECK-LABEL: func.func @typed_linear_etype_index_select(
// CHECK-NOT: torch.aten
// CHECK: hector_inter.gather_src
// CHECK: hector_inter.typed_linear"({{.*}}) {slice = "etype"}
// CHECK-NOT: torch.aten
// CHECK: return
func.func @typed_linear_etype_index_select(%arg0: !torch.vtensor<[3,4,6],f32>, %arg1: !torch.vtensor<[10,4],f32>, %arg2: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %arg3: !torch.vtensor<[32],si64> {hector.data.graph = "etype"}) -> !torch.vtensor<[32,6],f32> {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %0 = torch.prim.ListConstruct %arg2 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %1 = torch.aten.index.Tensor_hacked_twin %arg1, %0 : !torch.vtensor<[10,4],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4],f32>
  %2 = torch.aten.unsqueeze %1, %int1 : !torch.vtensor<[32,4],f32>, !torch.int -> !torch.vtensor<[32,1,4],f32>
  %3 = torch.aten.index_select %arg0, %int0, %arg3 : !torch.vtensor<[3,4,6],f32>, !torch.int, !torch.vtensor<[32],si64> -> !torch.vtensor<[32,4,6],f32>
  %4 = torch.aten.bmm %2, %3 : !torch.vtensor<[32,1,4],f32>, !torch.vtensor<[32,4,6],f32> -> !torch.vtensor<[32,1,6],f32>
  %5 = torch.aten.squeeze.dim %4, %int1 : !torch.vtensor<[32,1,6],f32>, !torch.int -> !torch.vtensor<[32,6],f32>
  return %5 : !torch.vtensor<[32,6],f32>
}

// Typed linear by etype written with matmul and W[etype].
// CHECK-LABEL: func.func @typed_linear_etype_matmul(
// CHECK-NOT: torch.aten
// CHECK: hector_inter.typed_linear"({{.*}}) {slice = "etype"}
// CHECK-NOT: torch.aten
// CHECK: return
func.func @typed_linear_etype_matmul(%arg0: !torch.vtensor<[3,4,6],f32>, %arg1: !torch.vtensor<[10,4],f32>, %arg2: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %arg3: !torch.vtensor<[32],si64> {hector.data.graph = "etype"}) -> !torch.vtensor<[32,6],f32> {
  %int6 = torch.constant.int 6
  %int4 = torch.constant.int 4
  %int32 = torch.constant.int 32
  %int1 = torch.constant.int 1
  %0 = torch.prim.ListConstruct %arg2 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %1 = torch.aten.index.Tensor_hacked_twin %arg1, %0 : !torch.vtensor<[10,4],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4],f32>
  %2 = torch.aten.unsqueeze %1, %int1 : !torch.vtensor<[32,4],f32>, !torch.int -> !torch.vtensor<[32,1,4],f32>
  %3 = torch.prim.ListConstruct %arg3 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %4 = torch.aten.index.Tensor_hacked_twin %arg0, %3 : !torch.vtensor<[3,4,6],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4,6],f32>
  %5 = torch.prim.ListConstruct %int32, %int1, %int4 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %6 = torch.aten.view %2, %5 : !torch.vtensor<[32,1,4],f32>, !torch.list<int> -> !torch.vtensor<[32,1,4],f32>
  %7 = torch.prim.ListConstruct %int32, %int4, %int6 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %8 = torch.aten.view %4, %7 : !torch.vtensor<[32,4,6],f32>, !torch.list<int> -> !torch.vtensor<[32,4,6],f32>
  %9 = torch.aten.bmm %6, %8 : !torch.vtensor<[32,1,4],f32>, !torch.vtensor<[32,4,6],f32> -> !torch.vtensor<[32,1,6],f32>
  %10 = torch.prim.ListConstruct %int32, %int1, %int6 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %11 = torch.aten.view %9, %10 : !torch.vtensor<[32,1,6],f32>, !torch.list<int> -> !torch.vtensor<[32,1,6],f32>
  %12 = torch.aten.squeeze.dim %11, %int1 : !torch.vtensor<[32,1,6],f32>, !torch.int -> !torch.vtensor<[32,6],f32>
  return %12 : !torch.vtensor<[32,6],f32>
}

// Typed linear by node type: bmm(x.unsqueeze(1), W[ntype]).squeeze(1).
// CHECK-LABEL: func.func @typed_linear_ntype(
// CHECK-NOT: torch.aten
// CHECK: hector_inter.typed_linear"({{.*}}) {slice = "ntype"}
// CHECK: hector_inter.gather_src
// CHECK-NOT: torch.aten
// CHECK: return
func.func @typed_linear_ntype(%arg0: !torch.vtensor<[2,4,6],f32>, %arg1: !torch.vtensor<[10,4],f32>, %arg2: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %arg3: !torch.vtensor<[10],si64> {hector.data.graph = "ntype"}) -> !torch.vtensor<[32,6],f32> {
  %int1 = torch.constant.int 1
  %0 = torch.aten.unsqueeze %arg1, %int1 : !torch.vtensor<[10,4],f32>, !torch.int -> !torch.vtensor<[10,1,4],f32>
  %1 = torch.prim.ListConstruct %arg3 : (!torch.vtensor<[10],si64>) -> !torch.list<vtensor>
  %2 = torch.aten.index.Tensor_hacked_twin %arg0, %1 : !torch.vtensor<[2,4,6],f32>, !torch.list<vtensor> -> !torch.vtensor<[10,4,6],f32>
  %3 = torch.aten.bmm %0, %2 : !torch.vtensor<[10,1,4],f32>, !torch.vtensor<[10,4,6],f32> -> !torch.vtensor<[10,1,6],f32>
  %4 = torch.aten.squeeze.dim %3, %int1 : !torch.vtensor<[10,1,6],f32>, !torch.int -> !torch.vtensor<[10,6],f32>
  %5 = torch.prim.ListConstruct %arg2 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %6 = torch.aten.index.Tensor_hacked_twin %4, %5 : !torch.vtensor<[10,6],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,6],f32>
  return %6 : !torch.vtensor<[32,6],f32>
}

// Shared-weight linear: x @ W (mm), nn.Linear with and without bias (aten.linear; weight transposed by a glue op).
// CHECK-LABEL: func.func @shared_linear(
// CHECK: torch.aten.t %{{.*}} {hector.glue}
// CHECK: torch.aten.t %{{.*}} {hector.glue}
// CHECK-NOT: torch.aten
// CHECK: hector_inter.typed_linear"({{.*}}) {slice = "none"}
// CHECK: hector_inter.typed_linear"({{.*}}) {slice = "none"}
// CHECK: hector_inter.add
// CHECK: hector_inter.typed_linear"({{.*}}) {slice = "none"}
// CHECK-NOT: torch.aten
// CHECK: return
func.func @shared_linear(%arg0: !torch.vtensor<[4,6],f32>, %arg1: !torch.vtensor<[6,4],f32>, %arg2: !torch.vtensor<[6],f32>, %arg3: !torch.vtensor<[6,4],f32>, %arg4: !torch.vtensor<[10,4],f32>, %arg5: !torch.vtensor<[32],si64> {hector.data.graph = "src"}) -> !torch.vtensor<[32,6],f32> {
  %none = torch.constant.none
  %int1 = torch.constant.int 1
  %0 = torch.aten.mm %arg4, %arg0 : !torch.vtensor<[10,4],f32>, !torch.vtensor<[4,6],f32> -> !torch.vtensor<[10,6],f32>
  %1 = torch.prim.ListConstruct %arg5 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %2 = torch.aten.index.Tensor_hacked_twin %0, %1 : !torch.vtensor<[10,6],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,6],f32>
  %3 = torch.aten.linear %arg4, %arg1, %arg2 : !torch.vtensor<[10,4],f32>, !torch.vtensor<[6,4],f32>, !torch.vtensor<[6],f32> -> !torch.vtensor<[10,6],f32>
  %4 = torch.prim.ListConstruct %arg5 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %5 = torch.aten.index.Tensor_hacked_twin %3, %4 : !torch.vtensor<[10,6],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,6],f32>
  %6 = torch.aten.add.Tensor %2, %5, %int1 : !torch.vtensor<[32,6],f32>, !torch.vtensor<[32,6],f32>, !torch.int -> !torch.vtensor<[32,6],f32>
  %7 = torch.aten.linear %arg4, %arg3, %none : !torch.vtensor<[10,4],f32>, !torch.vtensor<[6,4],f32>, !torch.none -> !torch.vtensor<[10,6],f32>
  %8 = torch.prim.ListConstruct %arg5 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %9 = torch.aten.index.Tensor_hacked_twin %7, %8 : !torch.vtensor<[10,6],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,6],f32>
  %10 = torch.aten.add.Tensor %6, %9, %int1 : !torch.vtensor<[32,6],f32>, !torch.vtensor<[32,6],f32>, !torch.int -> !torch.vtensor<[32,6],f32>
  return %10 : !torch.vtensor<[32,6],f32>
}

// Segment softmax with max subtraction (scatter_reduce amax, exp, scatter_add, div).
// CHECK-LABEL: func.func @softmax_max(
// CHECK-NOT: torch.aten
// CHECK: hector_inter.edge_softmax"(%arg{{.*}}
// CHECK-NOT: torch.aten
// CHECK: return
func.func @softmax_max(%arg0: !torch.vtensor<[32,2],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "dst"}) -> !torch.vtensor<[32,2],f32> {
  %0 = torch.vtensor.literal(dense<0.000000e+00> : tensor<10x2xf32>) : !torch.vtensor<[10,2],f32>
  %none = torch.constant.none
  %str = torch.constant.str "amax"
  %int32 = torch.constant.int 32
  %int-1 = torch.constant.int -1
  %false = torch.constant.bool false
  %int0 = torch.constant.int 0
  %int6 = torch.constant.int 6
  %int1 = torch.constant.int 1
  %int10 = torch.constant.int 10
  %int2 = torch.constant.int 2
  %1 = torch.prim.ListConstruct %int10, %int2 : (!torch.int, !torch.int) -> !torch.list<int>
  %cpu = torch.constant.device "cpu"
  %2 = torch.aten.empty.memory_format %1, %int6, %int0, %cpu, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[10,2],f32>
  %3 = torch.aten.unsqueeze %arg1, %int-1 : !torch.vtensor<[32],si64>, !torch.int -> !torch.vtensor<[32,1],si64>
  %4 = torch.prim.ListConstruct %int32, %int2 : (!torch.int, !torch.int) -> !torch.list<int>
  %5 = torch.aten.broadcast_to %3, %4 : !torch.vtensor<[32,1],si64>, !torch.list<int> -> !torch.vtensor<[32,2],si64>
  %6 = torch.aten.scatter_reduce.two %0, %int0, %5, %arg0, %str, %false : !torch.vtensor<[10,2],f32>, !torch.int, !torch.vtensor<[32,2],si64>, !torch.vtensor<[32,2],f32>, !torch.str, !torch.bool -> !torch.vtensor<[10,2],f32>
  %7 = torch.prim.ListConstruct %arg1 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %8 = torch.aten.index.Tensor_hacked_twin %6, %7 : !torch.vtensor<[10,2],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,2],f32>
  %9 = torch.aten.sub.Tensor %arg0, %8, %int1 : !torch.vtensor<[32,2],f32>, !torch.vtensor<[32,2],f32>, !torch.int -> !torch.vtensor<[32,2],f32>
  %10 = torch.aten.exp %9 : !torch.vtensor<[32,2],f32> -> !torch.vtensor<[32,2],f32>
  %11 = torch.prim.ListConstruct %int10, %int2 : (!torch.int, !torch.int) -> !torch.list<int>
  %cpu_0 = torch.constant.device "cpu"
  %12 = torch.aten.empty.memory_format %11, %int6, %int0, %cpu_0, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[10,2],f32>
  %13 = torch.aten.unsqueeze %arg1, %int-1 : !torch.vtensor<[32],si64>, !torch.int -> !torch.vtensor<[32,1],si64>
  %14 = torch.prim.ListConstruct %int32, %int2 : (!torch.int, !torch.int) -> !torch.list<int>
  %15 = torch.aten.broadcast_to %13, %14 : !torch.vtensor<[32,1],si64>, !torch.list<int> -> !torch.vtensor<[32,2],si64>
  %16 = torch.aten.scatter_add %0, %int0, %15, %10 : !torch.vtensor<[10,2],f32>, !torch.int, !torch.vtensor<[32,2],si64>, !torch.vtensor<[32,2],f32> -> !torch.vtensor<[10,2],f32>
  %17 = torch.prim.ListConstruct %arg1 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %18 = torch.aten.index.Tensor_hacked_twin %16, %17 : !torch.vtensor<[10,2],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,2],f32>
  %19 = torch.aten.div.Tensor %10, %18 : !torch.vtensor<[32,2],f32>, !torch.vtensor<[32,2],f32> -> !torch.vtensor<[32,2],f32>
  return %19 : !torch.vtensor<[32,2],f32>
}

// Segment softmax without the max.
// CHECK-LABEL: func.func @softmax_nomax(
// CHECK-NOT: torch.aten
// CHECK: hector_inter.edge_softmax
// CHECK-NOT: torch.aten
// CHECK: return
func.func @softmax_nomax(%arg0: !torch.vtensor<[32,2],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "dst"}) -> !torch.vtensor<[32,2],f32> {
  %0 = torch.vtensor.literal(dense<0.000000e+00> : tensor<10x2xf32>) : !torch.vtensor<[10,2],f32>
  %none = torch.constant.none
  %int32 = torch.constant.int 32
  %int-1 = torch.constant.int -1
  %false = torch.constant.bool false
  %int0 = torch.constant.int 0
  %int6 = torch.constant.int 6
  %int2 = torch.constant.int 2
  %int10 = torch.constant.int 10
  %1 = torch.aten.exp %arg0 : !torch.vtensor<[32,2],f32> -> !torch.vtensor<[32,2],f32>
  %2 = torch.prim.ListConstruct %int10, %int2 : (!torch.int, !torch.int) -> !torch.list<int>
  %cpu = torch.constant.device "cpu"
  %3 = torch.aten.empty.memory_format %2, %int6, %int0, %cpu, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[10,2],f32>
  %4 = torch.aten.unsqueeze %arg1, %int-1 : !torch.vtensor<[32],si64>, !torch.int -> !torch.vtensor<[32,1],si64>
  %5 = torch.prim.ListConstruct %int32, %int2 : (!torch.int, !torch.int) -> !torch.list<int>
  %6 = torch.aten.broadcast_to %4, %5 : !torch.vtensor<[32,1],si64>, !torch.list<int> -> !torch.vtensor<[32,2],si64>
  %7 = torch.aten.scatter_add %0, %int0, %6, %1 : !torch.vtensor<[10,2],f32>, !torch.int, !torch.vtensor<[32,2],si64>, !torch.vtensor<[32,2],f32> -> !torch.vtensor<[10,2],f32>
  %8 = torch.prim.ListConstruct %arg1 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %9 = torch.aten.index.Tensor_hacked_twin %7, %8 : !torch.vtensor<[10,2],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,2],f32>
  %10 = torch.aten.div.Tensor %1, %9 : !torch.vtensor<[32,2],f32>, !torch.vtensor<[32,2],f32> -> !torch.vtensor<[32,2],f32>
  return %10 : !torch.vtensor<[32,2],f32>
}

// Segment softmax with an epsilon on the denominator (torch_geometric.utils.softmax).
// CHECK-LABEL: func.func @softmax_eps(
// CHECK-NOT: torch.aten
// CHECK: hector_inter.edge_softmax
// CHECK-NOT: torch.aten
// CHECK: return
func.func @softmax_eps(%arg0: !torch.vtensor<[32,2],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "dst"}) -> !torch.vtensor<[32,2],f32> {
  %0 = torch.vtensor.literal(dense<0.000000e+00> : tensor<10x2xf32>) : !torch.vtensor<[10,2],f32>
  %none = torch.constant.none
  %float9.999990e-17 = torch.constant.float 9.9999999999999997E-17
  %str = torch.constant.str "amax"
  %int32 = torch.constant.int 32
  %int-1 = torch.constant.int -1
  %false = torch.constant.bool false
  %int0 = torch.constant.int 0
  %int6 = torch.constant.int 6
  %int1 = torch.constant.int 1
  %int10 = torch.constant.int 10
  %int2 = torch.constant.int 2
  %1 = torch.prim.ListConstruct %int10, %int2 : (!torch.int, !torch.int) -> !torch.list<int>
  %cpu = torch.constant.device "cpu"
  %2 = torch.aten.empty.memory_format %1, %int6, %int0, %cpu, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[10,2],f32>
  %3 = torch.aten.unsqueeze %arg1, %int-1 : !torch.vtensor<[32],si64>, !torch.int -> !torch.vtensor<[32,1],si64>
  %4 = torch.prim.ListConstruct %int32, %int2 : (!torch.int, !torch.int) -> !torch.list<int>
  %5 = torch.aten.broadcast_to %3, %4 : !torch.vtensor<[32,1],si64>, !torch.list<int> -> !torch.vtensor<[32,2],si64>
  %6 = torch.aten.scatter_reduce.two %0, %int0, %5, %arg0, %str, %false : !torch.vtensor<[10,2],f32>, !torch.int, !torch.vtensor<[32,2],si64>, !torch.vtensor<[32,2],f32>, !torch.str, !torch.bool -> !torch.vtensor<[10,2],f32>
  %7 = torch.prim.ListConstruct %arg1 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %8 = torch.aten.index.Tensor_hacked_twin %6, %7 : !torch.vtensor<[10,2],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,2],f32>
  %9 = torch.aten.sub.Tensor %arg0, %8, %int1 : !torch.vtensor<[32,2],f32>, !torch.vtensor<[32,2],f32>, !torch.int -> !torch.vtensor<[32,2],f32>
  %10 = torch.aten.exp %9 : !torch.vtensor<[32,2],f32> -> !torch.vtensor<[32,2],f32>
  %11 = torch.prim.ListConstruct %int10, %int2 : (!torch.int, !torch.int) -> !torch.list<int>
  %cpu_0 = torch.constant.device "cpu"
  %12 = torch.aten.empty.memory_format %11, %int6, %int0, %cpu_0, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[10,2],f32>
  %13 = torch.aten.unsqueeze %arg1, %int-1 : !torch.vtensor<[32],si64>, !torch.int -> !torch.vtensor<[32,1],si64>
  %14 = torch.prim.ListConstruct %int32, %int2 : (!torch.int, !torch.int) -> !torch.list<int>
  %15 = torch.aten.broadcast_to %13, %14 : !torch.vtensor<[32,1],si64>, !torch.list<int> -> !torch.vtensor<[32,2],si64>
  %16 = torch.aten.scatter_add %0, %int0, %15, %10 : !torch.vtensor<[10,2],f32>, !torch.int, !torch.vtensor<[32,2],si64>, !torch.vtensor<[32,2],f32> -> !torch.vtensor<[10,2],f32>
  %17 = torch.aten.add.Scalar %16, %float9.999990e-17, %int1 : !torch.vtensor<[10,2],f32>, !torch.float, !torch.int -> !torch.vtensor<[10,2],f32>
  %18 = torch.prim.ListConstruct %arg1 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %19 = torch.aten.index.Tensor_hacked_twin %17, %18 : !torch.vtensor<[10,2],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,2],f32>
  %20 = torch.aten.div.Tensor %10, %19 : !torch.vtensor<[32,2],f32>, !torch.vtensor<[32,2],f32> -> !torch.vtensor<[32,2],f32>
  return %20 : !torch.vtensor<[32,2],f32>
}

// Per-edge dot product: (X * Y).sum(-1, keepdim=True).
// CHECK-LABEL: func.func @dot_keepdim(
// CHECK-NOT: torch.aten
// CHECK: hector_inter.dot
// CHECK-NOT: torch.aten
// CHECK: return
func.func @dot_keepdim(%arg0: !torch.vtensor<[10,4],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %arg2: !torch.vtensor<[32],si64> {hector.data.graph = "dst"}) -> !torch.vtensor<[32,1],f32> {
  %none = torch.constant.none
  %true = torch.constant.bool true
  %int-1 = torch.constant.int -1
  %0 = torch.prim.ListConstruct %arg1 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %1 = torch.aten.index.Tensor_hacked_twin %arg0, %0 : !torch.vtensor<[10,4],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4],f32>
  %2 = torch.prim.ListConstruct %arg2 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %3 = torch.aten.index.Tensor_hacked_twin %arg0, %2 : !torch.vtensor<[10,4],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4],f32>
  %4 = torch.aten.mul.Tensor %1, %3 : !torch.vtensor<[32,4],f32>, !torch.vtensor<[32,4],f32> -> !torch.vtensor<[32,4],f32>
  %5 = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %6 = torch.aten.sum.dim_IntList %4, %5, %true, %none : !torch.vtensor<[32,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[32,1],f32>
  return %6 : !torch.vtensor<[32,1],f32>
}

// Per-head dot product: (X.view(M, H, Dh) * Y.view(M, H, Dh)).sum(-1).
// CHECK-LABEL: func.func @dot_heads(
// CHECK-NOT: torch.aten
// CHECK: hector_inter.dot{{.*}} -> tensor<32x2xf32>
// CHECK-NOT: torch.aten
// CHECK: return
func.func @dot_heads(%arg0: !torch.vtensor<[10,4],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %arg2: !torch.vtensor<[32],si64> {hector.data.graph = "dst"}) -> !torch.vtensor<[32,2],f32> {
  %none = torch.constant.none
  %false = torch.constant.bool false
  %int2 = torch.constant.int 2
  %int-1 = torch.constant.int -1
  %0 = torch.prim.ListConstruct %arg1 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %1 = torch.aten.index.Tensor_hacked_twin %arg0, %0 : !torch.vtensor<[10,4],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4],f32>
  %2 = torch.prim.ListConstruct %int-1, %int2, %int2 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %3 = torch.aten.view %1, %2 : !torch.vtensor<[32,4],f32>, !torch.list<int> -> !torch.vtensor<[32,2,2],f32>
  %4 = torch.prim.ListConstruct %arg2 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %5 = torch.aten.index.Tensor_hacked_twin %arg0, %4 : !torch.vtensor<[10,4],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4],f32>
  %6 = torch.prim.ListConstruct %int-1, %int2, %int2 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %7 = torch.aten.view %5, %6 : !torch.vtensor<[32,4],f32>, !torch.list<int> -> !torch.vtensor<[32,2,2],f32>
  %8 = torch.aten.mul.Tensor %3, %7 : !torch.vtensor<[32,2,2],f32>, !torch.vtensor<[32,2,2],f32> -> !torch.vtensor<[32,2,2],f32>
  %9 = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %10 = torch.aten.sum.dim_IntList %8, %9, %false, %none : !torch.vtensor<[32,2,2],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[32,2],f32>
  return %10 : !torch.vtensor<[32,2],f32>
}

// Row scale: X * s[M, 1].
// CHECK-LABEL: func.func @scale_row(
// CHECK-NOT: torch.aten
// CHECK: hector_inter.scale{{.*}}tensor<32x1xf32>) -> tensor<32x4xf32>
// CHECK-NOT: torch.aten
// CHECK: return
func.func @scale_row(%arg0: !torch.vtensor<[10,4],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %arg2: !torch.vtensor<[32,1],f32>) -> !torch.vtensor<[32,4],f32> {
  %0 = torch.prim.ListConstruct %arg1 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %1 = torch.aten.index.Tensor_hacked_twin %arg0, %0 : !torch.vtensor<[10,4],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4],f32>
  %2 = torch.aten.mul.Tensor %1, %arg2 : !torch.vtensor<[32,4],f32>, !torch.vtensor<[32,1],f32> -> !torch.vtensor<[32,4],f32>
  return %2 : !torch.vtensor<[32,4],f32>
}

// Per-head scale: (X.view(M, H, Dh) * A.unsqueeze(-1)).view(M, D).
// CHECK-LABEL: func.func @scale_heads(
// CHECK-NOT: torch.aten
// CHECK: hector_inter.scale{{.*}}tensor<32x2xf32>) -> tensor<32x4xf32>
// CHECK-NOT: torch.aten
// CHECK: return
func.func @scale_heads(%arg0: !torch.vtensor<[10,4],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %arg2: !torch.vtensor<[32,2],f32>) -> !torch.vtensor<[32,4],f32> {
  %int4 = torch.constant.int 4
  %int2 = torch.constant.int 2
  %int-1 = torch.constant.int -1
  %0 = torch.prim.ListConstruct %arg1 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %1 = torch.aten.index.Tensor_hacked_twin %arg0, %0 : !torch.vtensor<[10,4],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4],f32>
  %2 = torch.prim.ListConstruct %int-1, %int2, %int2 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %3 = torch.aten.view %1, %2 : !torch.vtensor<[32,4],f32>, !torch.list<int> -> !torch.vtensor<[32,2,2],f32>
  %4 = torch.aten.unsqueeze %arg2, %int-1 : !torch.vtensor<[32,2],f32>, !torch.int -> !torch.vtensor<[32,2,1],f32>
  %5 = torch.aten.mul.Tensor %3, %4 : !torch.vtensor<[32,2,2],f32>, !torch.vtensor<[32,2,1],f32> -> !torch.vtensor<[32,2,2],f32>
  %6 = torch.prim.ListConstruct %int-1, %int4 : (!torch.int, !torch.int) -> !torch.list<int>
  %7 = torch.aten.view %5, %6 : !torch.vtensor<[32,2,2],f32>, !torch.list<int> -> !torch.vtensor<[32,4],f32>
  return %7 : !torch.vtensor<[32,4],f32>
}

// Degree normalisation 1 / deg.clamp(min=1)[dst], deg = index_add of ones.
// CHECK-LABEL: func.func @degree_norm_dst(
// CHECK-NOT: torch.aten
// CHECK: hector_inter.degree_norm"(%{{.*}}) {by = "dst"}
// CHECK: hector_inter.scale
// CHECK-NOT: torch.aten
// CHECK: return
func.func @degree_norm_dst(%arg0: !torch.vtensor<[10,4],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %arg2: !torch.vtensor<[32],si64> {hector.data.graph = "dst"}) -> !torch.vtensor<[32,4],f32> {
  %0 = torch.vtensor.literal(dense<1.000000e+00> : tensor<32xf32>) : !torch.vtensor<[32],f32>
  %1 = torch.vtensor.literal(dense<0.000000e+00> : tensor<10xf32>) : !torch.vtensor<[10],f32>
  %int-1 = torch.constant.int -1
  %float1.000000e00 = torch.constant.float 1.000000e+00
  %true = torch.constant.bool true
  %int32 = torch.constant.int 32
  %none = torch.constant.none
  %false = torch.constant.bool false
  %int0 = torch.constant.int 0
  %int6 = torch.constant.int 6
  %int1 = torch.constant.int 1
  %int10 = torch.constant.int 10
  %2 = torch.prim.ListConstruct %int10 : (!torch.int) -> !torch.list<int>
  %cpu = torch.constant.device "cpu"
  %3 = torch.aten.empty.memory_format %2, %int6, %int0, %cpu, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[10],f32>
  %4 = torch.prim.ListConstruct %int32 : (!torch.int) -> !torch.list<int>
  %cpu_0 = torch.constant.device "cpu"
  %5 = torch.aten.empty.memory_format %4, %int6, %int0, %cpu_0, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[32],f32>
  %6 = torch.prim.ListConstruct %arg2 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %7 = torch.aten.index_put.hacked_twin %1, %6, %0, %true : !torch.vtensor<[10],f32>, !torch.list<vtensor>, !torch.vtensor<[32],f32>, !torch.bool -> !torch.vtensor<[10],f32>
  %8 = torch.prim.ListConstruct %arg1 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %9 = torch.aten.index.Tensor_hacked_twin %arg0, %8 : !torch.vtensor<[10,4],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4],f32>
  %10 = torch.aten.clamp %7, %int1, %none : !torch.vtensor<[10],f32>, !torch.int, !torch.none -> !torch.vtensor<[10],f32>
  %11 = torch.prim.ListConstruct %arg2 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %12 = torch.aten.index.Tensor_hacked_twin %10, %11 : !torch.vtensor<[10],f32>, !torch.list<vtensor> -> !torch.vtensor<[32],f32>
  %13 = torch.aten.reciprocal %12 : !torch.vtensor<[32],f32> -> !torch.vtensor<[32],f32>
  %14 = torch.aten.mul.Scalar %13, %float1.000000e00 : !torch.vtensor<[32],f32>, !torch.float -> !torch.vtensor<[32],f32>
  %15 = torch.aten.unsqueeze %14, %int-1 : !torch.vtensor<[32],f32>, !torch.int -> !torch.vtensor<[32,1],f32>
  %16 = torch.aten.mul.Tensor %9, %15 : !torch.vtensor<[32,4],f32>, !torch.vtensor<[32,1],f32> -> !torch.vtensor<[32,4],f32>
  return %16 : !torch.vtensor<[32,4],f32>
}

// Per-relation mean: 1 / count[dst * R + etype], count = index_add of ones.
// CHECK-LABEL: func.func @degree_norm_dst_etype(
// CHECK-NOT: torch.aten
// CHECK: hector_inter.degree_norm"(%{{.*}}) {by = "dst_etype"}
// CHECK: hector_inter.scale
// CHECK-NOT: torch.aten
// CHECK: return
func.func @degree_norm_dst_etype(%arg0: !torch.vtensor<[10,4],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %arg2: !torch.vtensor<[32],si64> {hector.data.graph = "dst"}, %arg3: !torch.vtensor<[32],si64> {hector.data.graph = "etype"}) -> !torch.vtensor<[32,4],f32> {
  %0 = torch.vtensor.literal(dense<1.000000e+00> : tensor<32xf32>) : !torch.vtensor<[32],f32>
  %1 = torch.vtensor.literal(dense<0.000000e+00> : tensor<30xf32>) : !torch.vtensor<[30],f32>
  %int-1 = torch.constant.int -1
  %float1.000000e00 = torch.constant.float 1.000000e+00
  %true = torch.constant.bool true
  %int32 = torch.constant.int 32
  %none = torch.constant.none
  %false = torch.constant.bool false
  %int0 = torch.constant.int 0
  %int6 = torch.constant.int 6
  %int30 = torch.constant.int 30
  %int1 = torch.constant.int 1
  %int3 = torch.constant.int 3
  %2 = torch.aten.mul.Scalar %arg2, %int3 : !torch.vtensor<[32],si64>, !torch.int -> !torch.vtensor<[32],si64>
  %3 = torch.aten.add.Tensor %2, %arg3, %int1 : !torch.vtensor<[32],si64>, !torch.vtensor<[32],si64>, !torch.int -> !torch.vtensor<[32],si64>
  %4 = torch.prim.ListConstruct %int30 : (!torch.int) -> !torch.list<int>
  %cpu = torch.constant.device "cpu"
  %5 = torch.aten.empty.memory_format %4, %int6, %int0, %cpu, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[30],f32>
  %6 = torch.prim.ListConstruct %int32 : (!torch.int) -> !torch.list<int>
  %cpu_0 = torch.constant.device "cpu"
  %7 = torch.aten.empty.memory_format %6, %int6, %int0, %cpu_0, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[32],f32>
  %8 = torch.prim.ListConstruct %3 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %9 = torch.aten.index_put.hacked_twin %1, %8, %0, %true : !torch.vtensor<[30],f32>, !torch.list<vtensor>, !torch.vtensor<[32],f32>, !torch.bool -> !torch.vtensor<[30],f32>
  %10 = torch.prim.ListConstruct %arg1 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %11 = torch.aten.index.Tensor_hacked_twin %arg0, %10 : !torch.vtensor<[10,4],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4],f32>
  %12 = torch.aten.clamp %9, %int1, %none : !torch.vtensor<[30],f32>, !torch.int, !torch.none -> !torch.vtensor<[30],f32>
  %13 = torch.prim.ListConstruct %3 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %14 = torch.aten.index.Tensor_hacked_twin %12, %13 : !torch.vtensor<[30],f32>, !torch.list<vtensor> -> !torch.vtensor<[32],f32>
  %15 = torch.aten.reciprocal %14 : !torch.vtensor<[32],f32> -> !torch.vtensor<[32],f32>
  %16 = torch.aten.mul.Scalar %15, %float1.000000e00 : !torch.vtensor<[32],f32>, !torch.float -> !torch.vtensor<[32],f32>
  %17 = torch.aten.unsqueeze %16, %int-1 : !torch.vtensor<[32],f32>, !torch.int -> !torch.vtensor<[32,1],f32>
  %18 = torch.aten.mul.Tensor %11, %17 : !torch.vtensor<[32,4],f32>, !torch.vtensor<[32,1],f32> -> !torch.vtensor<[32,4],f32>
  return %18 : !torch.vtensor<[32,4],f32>
}

// Per-relation mean written as X / count[etype * N + dst] (scatter_add of ones).
// CHECK-LABEL: func.func @degree_norm_etype_major(
// CHECK-NOT: torch.aten
// CHECK: hector_inter.degree_norm"(%{{.*}}) {by = "dst_etype"}
// CHECK: hector_inter.scale
// CHECK-NOT: torch.aten
// CHECK: return
func.func @degree_norm_etype_major(%arg0: !torch.vtensor<[10,4],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %arg2: !torch.vtensor<[32],si64> {hector.data.graph = "dst"}, %arg3: !torch.vtensor<[32],si64> {hector.data.graph = "etype"}) -> !torch.vtensor<[32,4],f32> {
  %0 = torch.vtensor.literal(dense<1.000000e+00> : tensor<32xf32>) : !torch.vtensor<[32],f32>
  %1 = torch.vtensor.literal(dense<0.000000e+00> : tensor<30xf32>) : !torch.vtensor<[30],f32>
  %none = torch.constant.none
  %int-1 = torch.constant.int -1
  %int32 = torch.constant.int 32
  %false = torch.constant.bool false
  %int0 = torch.constant.int 0
  %int6 = torch.constant.int 6
  %int30 = torch.constant.int 30
  %int1 = torch.constant.int 1
  %int10 = torch.constant.int 10
  %2 = torch.aten.mul.Scalar %arg3, %int10 : !torch.vtensor<[32],si64>, !torch.int -> !torch.vtensor<[32],si64>
  %3 = torch.aten.add.Tensor %2, %arg2, %int1 : !torch.vtensor<[32],si64>, !torch.vtensor<[32],si64>, !torch.int -> !torch.vtensor<[32],si64>
  %4 = torch.prim.ListConstruct %int30 : (!torch.int) -> !torch.list<int>
  %cpu = torch.constant.device "cpu"
  %5 = torch.aten.empty.memory_format %4, %int6, %int0, %cpu, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[30],f32>
  %6 = torch.prim.ListConstruct %int32 : (!torch.int) -> !torch.list<int>
  %cpu_0 = torch.constant.device "cpu"
  %7 = torch.aten.empty.memory_format %6, %int6, %int0, %cpu_0, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[32],f32>
  %8 = torch.aten.scatter_add %1, %int0, %3, %0 : !torch.vtensor<[30],f32>, !torch.int, !torch.vtensor<[32],si64>, !torch.vtensor<[32],f32> -> !torch.vtensor<[30],f32>
  %9 = torch.prim.ListConstruct %arg1 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %10 = torch.aten.index.Tensor_hacked_twin %arg0, %9 : !torch.vtensor<[10,4],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4],f32>
  %11 = torch.prim.ListConstruct %3 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %12 = torch.aten.index.Tensor_hacked_twin %8, %11 : !torch.vtensor<[30],f32>, !torch.list<vtensor> -> !torch.vtensor<[32],f32>
  %13 = torch.aten.unsqueeze %12, %int-1 : !torch.vtensor<[32],f32>, !torch.int -> !torch.vtensor<[32,1],f32>
  %14 = torch.aten.div.Tensor %10, %13 : !torch.vtensor<[32,4],f32>, !torch.vtensor<[32,1],f32> -> !torch.vtensor<[32,4],f32>
  return %14 : !torch.vtensor<[32,4],f32>
}

// Bias [D], typed bias B[etype], and sub of rows (add of a negation).
// CHECK-LABEL: func.func @bias(
// CHECK-NOT: torch.aten
// CHECK: hector_inter.add
// CHECK: hector_inter.add{{.*}}tensor<3x4xf32>, !hector_inter.graph)
// CHECK: hector_inter.unary"({{.*}}) {fn = "neg"
// CHECK: hector_inter.add
// CHECK-NOT: torch.aten
// CHECK: return
func.func @bias(%arg0: !torch.vtensor<[4],f32>, %arg1: !torch.vtensor<[3,4],f32>, %arg2: !torch.vtensor<[10,4],f32>, %arg3: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %arg4: !torch.vtensor<[32],si64> {hector.data.graph = "etype"}) -> (!torch.vtensor<[32,4],f32>, !torch.vtensor<[32,4],f32>, !torch.vtensor<[32,4],f32>) {
  %int1 = torch.constant.int 1
  %0 = torch.prim.ListConstruct %arg3 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %1 = torch.aten.index.Tensor_hacked_twin %arg2, %0 : !torch.vtensor<[10,4],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4],f32>
  %2 = torch.aten.add.Tensor %1, %arg0, %int1 : !torch.vtensor<[32,4],f32>, !torch.vtensor<[4],f32>, !torch.int -> !torch.vtensor<[32,4],f32>
  %3 = torch.prim.ListConstruct %arg3 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %4 = torch.aten.index.Tensor_hacked_twin %arg2, %3 : !torch.vtensor<[10,4],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4],f32>
  %5 = torch.prim.ListConstruct %arg4 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %6 = torch.aten.index.Tensor_hacked_twin %arg1, %5 : !torch.vtensor<[3,4],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4],f32>
  %7 = torch.aten.add.Tensor %4, %6, %int1 : !torch.vtensor<[32,4],f32>, !torch.vtensor<[32,4],f32>, !torch.int -> !torch.vtensor<[32,4],f32>
  %8 = torch.prim.ListConstruct %arg3 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %9 = torch.aten.index.Tensor_hacked_twin %arg2, %8 : !torch.vtensor<[10,4],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4],f32>
  %10 = torch.prim.ListConstruct %arg3 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %11 = torch.aten.index.Tensor_hacked_twin %arg2, %10 : !torch.vtensor<[10,4],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4],f32>
  %12 = torch.aten.relu %11 : !torch.vtensor<[32,4],f32> -> !torch.vtensor<[32,4],f32>
  %13 = torch.aten.sub.Tensor %9, %12, %int1 : !torch.vtensor<[32,4],f32>, !torch.vtensor<[32,4],f32>, !torch.int -> !torch.vtensor<[32,4],f32>
  return %2, %7, %13 : !torch.vtensor<[32,4],f32>, !torch.vtensor<[32,4],f32>, !torch.vtensor<[32,4],f32>
}

// Each unary function on a raised value.
// CHECK-LABEL: func.func @unary(
// CHECK-NOT: torch.aten
// CHECK: {fn = "relu"
// CHECK: {fn = "leaky_relu", slope = 1.000000e-01
// CHECK: {fn = "gelu"
// CHECK: {fn = "exp"
// CHECK: {fn = "tanh"
// CHECK: {fn = "sigmoid"
// CHECK: {fn = "neg"
// CHECK-NOT: torch.aten
// CHECK: return
func.func @unary(%arg0: !torch.vtensor<[10,4],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "src"}) -> (!torch.vtensor<[32,4],f32>, !torch.vtensor<[32,4],f32>, !torch.vtensor<[32,4],f32>, !torch.vtensor<[32,4],f32>, !torch.vtensor<[32,4],f32>, !torch.vtensor<[32,4],f32>, !torch.vtensor<[32,4],f32>) {
  %str = torch.constant.str "none"
  %float1.000000e-01 = torch.constant.float 1.000000e-01
  %0 = torch.prim.ListConstruct %arg1 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %1 = torch.aten.index.Tensor_hacked_twin %arg0, %0 : !torch.vtensor<[10,4],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4],f32>
  %2 = torch.aten.relu %1 : !torch.vtensor<[32,4],f32> -> !torch.vtensor<[32,4],f32>
  %3 = torch.aten.leaky_relu %1, %float1.000000e-01 : !torch.vtensor<[32,4],f32>, !torch.float -> !torch.vtensor<[32,4],f32>
  %4 = torch.aten.gelu %1, %str : !torch.vtensor<[32,4],f32>, !torch.str -> !torch.vtensor<[32,4],f32>
  %5 = torch.aten.exp %1 : !torch.vtensor<[32,4],f32> -> !torch.vtensor<[32,4],f32>
  %6 = torch.aten.tanh %1 : !torch.vtensor<[32,4],f32> -> !torch.vtensor<[32,4],f32>
  %7 = torch.aten.sigmoid %1 : !torch.vtensor<[32,4],f32> -> !torch.vtensor<[32,4],f32>
  %8 = torch.aten.neg %1 : !torch.vtensor<[32,4],f32> -> !torch.vtensor<[32,4],f32>
  return %2, %3, %4, %5, %6, %7, %8 : !torch.vtensor<[32,4],f32>, !torch.vtensor<[32,4],f32>, !torch.vtensor<[32,4],f32>, !torch.vtensor<[32,4],f32>, !torch.vtensor<[32,4],f32>, !torch.vtensor<[32,4],f32>, !torch.vtensor<[32,4],f32>
}

// SiLU: raised through its declaration in the spec (UnaryFn.torch), like every unary function.
// CHECK-LABEL: func.func @silu(
// CHECK-NOT: torch.aten
// CHECK: {fn = "silu"
// CHECK-NOT: torch.aten
// CHECK: return
func.func @silu(%arg0: !torch.vtensor<[10,4],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "src"}) -> !torch.vtensor<[32,4],f32> {
  %0 = torch.prim.ListConstruct %arg1 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %1 = torch.aten.index.Tensor_hacked_twin %arg0, %0 : !torch.vtensor<[10,4],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4],f32>
  %2 = torch.aten.silu %1 : !torch.vtensor<[32,4],f32> -> !torch.vtensor<[32,4],f32>
  return %2 : !torch.vtensor<[32,4],f32>
}

// Sums onto nodes: index_add, scatter_add and scatter_reduce sum onto zeros by dst; index_add by src.
// CHECK-LABEL: func.func @scatter_sums(
// CHECK-NOT: torch.aten
// CHECK: hector_inter.sum_to_dst
// CHECK: hector_inter.sum_to_dst
// CHECK: hector_inter.sum_to_dst
// CHECK: hector_inter.sum_to_src
// CHECK-NOT: torch.aten
// CHECK: return
func.func @scatter_sums(%arg0: !torch.vtensor<[32,6],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %arg2: !torch.vtensor<[32],si64> {hector.data.graph = "dst"}) -> (!torch.vtensor<[10,6],f32>, !torch.vtensor<[10,6],f32>, !torch.vtensor<[10,6],f32>, !torch.vtensor<[10,6],f32>) {
  %0 = torch.vtensor.literal(dense<0.000000e+00> : tensor<10x6xf32>) : !torch.vtensor<[10,6],f32>
  %none = torch.constant.none
  %str = torch.constant.str "sum"
  %true = torch.constant.bool true
  %int0 = torch.constant.int 0
  %int10 = torch.constant.int 10
  %false = torch.constant.bool false
  %int6 = torch.constant.int 6
  %int32 = torch.constant.int 32
  %int-1 = torch.constant.int -1
  %1 = torch.aten.unsqueeze %arg2, %int-1 : !torch.vtensor<[32],si64>, !torch.int -> !torch.vtensor<[32,1],si64>
  %2 = torch.prim.ListConstruct %int32, %int6 : (!torch.int, !torch.int) -> !torch.list<int>
  %3 = torch.aten.broadcast_to %1, %2 : !torch.vtensor<[32,1],si64>, !torch.list<int> -> !torch.vtensor<[32,6],si64>
  %4 = torch.prim.ListConstruct %int10, %int6 : (!torch.int, !torch.int) -> !torch.list<int>
  %cpu = torch.constant.device "cpu"
  %5 = torch.aten.empty.memory_format %4, %int6, %int0, %cpu, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[10,6],f32>
  %6 = torch.prim.ListConstruct %arg2 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %7 = torch.aten.index_put.hacked_twin %0, %6, %arg0, %true : !torch.vtensor<[10,6],f32>, !torch.list<vtensor>, !torch.vtensor<[32,6],f32>, !torch.bool -> !torch.vtensor<[10,6],f32>
  %8 = torch.prim.ListConstruct %int10, %int6 : (!torch.int, !torch.int) -> !torch.list<int>
  %cpu_0 = torch.constant.device "cpu"
  %9 = torch.aten.empty.memory_format %8, %int6, %int0, %cpu_0, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[10,6],f32>
  %10 = torch.aten.scatter_add %0, %int0, %3, %arg0 : !torch.vtensor<[10,6],f32>, !torch.int, !torch.vtensor<[32,6],si64>, !torch.vtensor<[32,6],f32> -> !torch.vtensor<[10,6],f32>
  %11 = torch.prim.ListConstruct %int10, %int6 : (!torch.int, !torch.int) -> !torch.list<int>
  %cpu_1 = torch.constant.device "cpu"
  %12 = torch.aten.empty.memory_format %11, %int6, %int0, %cpu_1, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[10,6],f32>
  %13 = torch.aten.scatter_reduce.two %0, %int0, %3, %arg0, %str, %true : !torch.vtensor<[10,6],f32>, !torch.int, !torch.vtensor<[32,6],si64>, !torch.vtensor<[32,6],f32>, !torch.str, !torch.bool -> !torch.vtensor<[10,6],f32>
  %14 = torch.prim.ListConstruct %int10, %int6 : (!torch.int, !torch.int) -> !torch.list<int>
  %cpu_2 = torch.constant.device "cpu"
  %15 = torch.aten.empty.memory_format %14, %int6, %int0, %cpu_2, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[10,6],f32>
  %16 = torch.prim.ListConstruct %arg1 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %17 = torch.aten.index_put.hacked_twin %0, %16, %arg0, %true : !torch.vtensor<[10,6],f32>, !torch.list<vtensor>, !torch.vtensor<[32,6],f32>, !torch.bool -> !torch.vtensor<[10,6],f32>
  return %7, %10, %13, %17 : !torch.vtensor<[10,6],f32>, !torch.vtensor<[10,6],f32>, !torch.vtensor<[10,6],f32>, !torch.vtensor<[10,6],f32>
}

