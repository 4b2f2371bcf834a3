// RUN: hector-opt --torch %s | FileCheck %s

// Near misses: each function is one raise pattern with one thing wrong. What does not
// match stays torch code (run eagerly by hector.import_model), and what still matches
// around it is raised.

// Softmax whose sum runs over src, not dst: no edge_softmax; the exp and the src sum are raised, the division stays.
// CHECK-LABEL: func.func @nm_softmax_sum_src(
// CHECK-NOT: hector_inter.edge_softmax
// CHECK: hector_inter.sum_to_src
// CHECK: torch.aten.div.Tensor
// CHECK: return
func.func @nm_softmax_sum_src(%arg0: !torch.vtensor<[32,2],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %arg2: !torch.vtensor<[32],si64> {hector.data.graph = "dst"}) -> !torch.vtensor<[32,2],f32> {
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
  %3 = torch.aten.unsqueeze %arg2, %int-1 : !torch.vtensor<[32],si64>, !torch.int -> !torch.vtensor<[32,1],si64>
  %4 = torch.prim.ListConstruct %int32, %int2 : (!torch.int, !torch.int) -> !torch.list<int>
  %5 = torch.aten.broadcast_to %3, %4 : !torch.vtensor<[32,1],si64>, !torch.list<int> -> !torch.vtensor<[32,2],si64>
  %6 = torch.aten.scatter_reduce.two %0, %int0, %5, %arg0, %str, %false : !torch.vtensor<[10,2],f32>, !torch.int, !torch.vtensor<[32,2],si64>, !torch.vtensor<[32,2],f32>, !torch.str, !torch.bool -> !torch.vtensor<[10,2],f32>
  %7 = torch.prim.ListConstruct %arg2 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
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
  %17 = torch.prim.ListConstruct %arg2 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %18 = torch.aten.index.Tensor_hacked_twin %16, %17 : !torch.vtensor<[10,2],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,2],f32>
  %19 = torch.aten.div.Tensor %10, %18 : !torch.vtensor<[32,2],f32>, !torch.vtensor<[32,2],f32> -> !torch.vtensor<[32,2],f32>
  return %19 : !torch.vtensor<[32,2],f32>
}

// Max over src gathered by dst: not the softmax's own max; the shift stays explicit before edge_softmax (a per-dst constant, so the value is unchanged).
// CHECK-LABEL: func.func @nm_softmax_max_src(
// CHECK: torch.aten.scatter_reduce.two
// CHECK: hector_inter.gather_dst
// CHECK: hector_inter.add
// CHECK: hector_inter.edge_softmax
// CHECK: return
func.func @nm_softmax_max_src(%arg0: !torch.vtensor<[32,2],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %arg2: !torch.vtensor<[32],si64> {hector.data.graph = "dst"}) -> !torch.vtensor<[32,2],f32> {
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
  %7 = torch.prim.ListConstruct %arg2 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %8 = torch.aten.index.Tensor_hacked_twin %6, %7 : !torch.vtensor<[10,2],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,2],f32>
  %9 = torch.aten.sub.Tensor %arg0, %8, %int1 : !torch.vtensor<[32,2],f32>, !torch.vtensor<[32,2],f32>, !torch.int -> !torch.vtensor<[32,2],f32>
  %10 = torch.aten.exp %9 : !torch.vtensor<[32,2],f32> -> !torch.vtensor<[32,2],f32>
  %11 = torch.prim.ListConstruct %int10, %int2 : (!torch.int, !torch.int) -> !torch.list<int>
  %cpu_0 = torch.constant.device "cpu"
  %12 = torch.aten.empty.memory_format %11, %int6, %int0, %cpu_0, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[10,2],f32>
  %13 = torch.aten.unsqueeze %arg2, %int-1 : !torch.vtensor<[32],si64>, !torch.int -> !torch.vtensor<[32,1],si64>
  %14 = torch.prim.ListConstruct %int32, %int2 : (!torch.int, !torch.int) -> !torch.list<int>
  %15 = torch.aten.broadcast_to %13, %14 : !torch.vtensor<[32,1],si64>, !torch.list<int> -> !torch.vtensor<[32,2],si64>
  %16 = torch.aten.scatter_add %0, %int0, %15, %10 : !torch.vtensor<[10,2],f32>, !torch.int, !torch.vtensor<[32,2],si64>, !torch.vtensor<[32,2],f32> -> !torch.vtensor<[10,2],f32>
  %17 = torch.prim.ListConstruct %arg2 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %18 = torch.aten.index.Tensor_hacked_twin %16, %17 : !torch.vtensor<[10,2],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,2],f32>
  %19 = torch.aten.div.Tensor %10, %18 : !torch.vtensor<[32,2],f32>, !torch.vtensor<[32,2],f32> -> !torch.vtensor<[32,2],f32>
  return %19 : !torch.vtensor<[32,2],f32>
}

// Softmax with a non-negligible epsilon (1.0): no edge_softmax.
// CHECK-LABEL: func.func @nm_softmax_big_eps(
// CHECK-NOT: hector_inter.edge_softmax
// CHECK: torch.aten.add.Scalar
// CHECK: torch.aten.div.Tensor
// CHECK: return
func.func @nm_softmax_big_eps(%arg0: !torch.vtensor<[32,2],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "dst"}) -> !torch.vtensor<[32,2],f32> {
  %0 = torch.vtensor.literal(dense<0.000000e+00> : tensor<10x2xf32>) : !torch.vtensor<[10,2],f32>
  %none = torch.constant.none
  %float1.000000e00 = torch.constant.float 1.000000e+00
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
  %17 = torch.aten.add.Scalar %16, %float1.000000e00, %int1 : !torch.vtensor<[10,2],f32>, !torch.float, !torch.int -> !torch.vtensor<[10,2],f32>
  %18 = torch.prim.ListConstruct %arg1 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %19 = torch.aten.index.Tensor_hacked_twin %17, %18 : !torch.vtensor<[10,2],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,2],f32>
  %20 = torch.aten.div.Tensor %10, %19 : !torch.vtensor<[32,2],f32>, !torch.vtensor<[32,2],f32> -> !torch.vtensor<[32,2],f32>
  return %20 : !torch.vtensor<[32,2],f32>
}

// bmm with a weight indexed by a tensor that is not the graph's etype: no typed_linear.
// CHECK-LABEL: func.func @nm_bmm_other_index(
// CHECK-NOT: hector_inter.typed_linear
// CHECK: torch.aten.bmm
// CHECK: return
func.func @nm_bmm_other_index(%arg0: !torch.vtensor<[3,4,6],f32>, %arg1: !torch.vtensor<[10,4],f32>, %arg2: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %arg3: !torch.vtensor<[32],si64> {hector.data.graph = "etype"}, %arg4: !torch.vtensor<[32],si64>) -> !torch.vtensor<[32,6],f32> {
  %int1 = torch.constant.int 1
  %0 = torch.prim.ListConstruct %arg2 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %1 = torch.aten.index.Tensor_hacked_twin %arg1, %0 : !torch.vtensor<[10,4],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4],f32>
  %2 = torch.aten.unsqueeze %1, %int1 : !torch.vtensor<[32,4],f32>, !torch.int -> !torch.vtensor<[32,1,4],f32>
  %3 = torch.prim.ListConstruct %arg4 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %4 = torch.aten.index.Tensor_hacked_twin %arg0, %3 : !torch.vtensor<[3,4,6],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4,6],f32>
  %5 = torch.aten.bmm %2, %4 : !torch.vtensor<[32,1,4],f32>, !torch.vtensor<[32,4,6],f32> -> !torch.vtensor<[32,1,6],f32>
  %6 = torch.aten.squeeze.dim %5, %int1 : !torch.vtensor<[32,1,6],f32>, !torch.int -> !torch.vtensor<[32,6],f32>
  return %6 : !torch.vtensor<[32,6],f32>
}

// scatter_reduce amax outside a softmax stays torch code.
// CHECK-LABEL: func.func @nm_amax_alone(
// CHECK-NOT: hector_inter
// CHECK: torch.aten.scatter_reduce.two
// CHECK: return
func.func @nm_amax_alone(%arg0: !torch.vtensor<[32,6],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "dst"}) -> !torch.vtensor<[10,6],f32> {
  %0 = torch.vtensor.literal(dense<0.000000e+00> : tensor<10x6xf32>) : !torch.vtensor<[10,6],f32>
  %none = torch.constant.none
  %str = torch.constant.str "amax"
  %int32 = torch.constant.int 32
  %int-1 = torch.constant.int -1
  %false = torch.constant.bool false
  %int0 = torch.constant.int 0
  %int10 = torch.constant.int 10
  %int6 = torch.constant.int 6
  %1 = torch.prim.ListConstruct %int10, %int6 : (!torch.int, !torch.int) -> !torch.list<int>
  %cpu = torch.constant.device "cpu"
  %2 = torch.aten.empty.memory_format %1, %int6, %int0, %cpu, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[10,6],f32>
  %3 = torch.aten.unsqueeze %arg1, %int-1 : !torch.vtensor<[32],si64>, !torch.int -> !torch.vtensor<[32,1],si64>
  %4 = torch.prim.ListConstruct %int32, %int6 : (!torch.int, !torch.int) -> !torch.list<int>
  %5 = torch.aten.broadcast_to %3, %4 : !torch.vtensor<[32,1],si64>, !torch.list<int> -> !torch.vtensor<[32,6],si64>
  %6 = torch.aten.scatter_reduce.two %0, %int0, %5, %arg0, %str, %false : !torch.vtensor<[10,6],f32>, !torch.int, !torch.vtensor<[32,6],si64>, !torch.vtensor<[32,6],f32>, !torch.str, !torch.bool -> !torch.vtensor<[10,6],f32>
  return %6 : !torch.vtensor<[10,6],f32>
}

// Matmul whose weight is computed from row data (x.t() @ x), not a parameter/argument.
// CHECK-LABEL: func.func @nm_weight_from_data(
// CHECK-NOT: hector_inter.typed_linear
// CHECK: torch.aten.mm
// CHECK: torch.aten.mm
// CHECK: return
func.func @nm_weight_from_data(%arg0: !torch.vtensor<[10,4],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "src"}) -> !torch.vtensor<[32,4],f32> {
  %int1 = torch.constant.int 1
  %int0 = torch.constant.int 0
  %0 = torch.prim.ListConstruct %int1, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
  %1 = torch.aten.permute %arg0, %0 : !torch.vtensor<[10,4],f32>, !torch.list<int> -> !torch.vtensor<[4,10],f32>
  %2 = torch.aten.mm %1, %arg0 : !torch.vtensor<[4,10],f32>, !torch.vtensor<[10,4],f32> -> !torch.vtensor<[4,4],f32>
  %3 = torch.aten.mm %arg0, %2 : !torch.vtensor<[10,4],f32>, !torch.vtensor<[4,4],f32> -> !torch.vtensor<[10,4],f32>
  %4 = torch.prim.ListConstruct %arg1 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %5 = torch.aten.index.Tensor_hacked_twin %3, %4 : !torch.vtensor<[10,4],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4],f32>
  return %5 : !torch.vtensor<[32,4],f32>
}

// Degree counted over src but gathered by dst: no degree_norm (the scale is raised).
// CHECK-LABEL: func.func @nm_degree_norm_src(
// CHECK-NOT: hector_inter.degree_norm
// CHECK: torch.aten.reciprocal
// CHECK: hector_inter.scale
// CHECK: return
func.func @nm_degree_norm_src(%arg0: !torch.vtensor<[10,4],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %arg2: !torch.vtensor<[32],si64> {hector.data.graph = "dst"}) -> !torch.vtensor<[32,4],f32> {
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
  %6 = torch.prim.ListConstruct %arg1 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
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

// Degree summed from edge weights, not ones: no degree_norm.
// CHECK-LABEL: func.func @nm_degree_not_ones(
// CHECK-NOT: hector_inter.degree_norm
// CHECK: torch.aten.reciprocal
// CHECK: return
func.func @nm_degree_not_ones(%arg0: !torch.vtensor<[10,4],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %arg2: !torch.vtensor<[32],si64> {hector.data.graph = "dst"}, %arg3: !torch.vtensor<[32],f32>) -> !torch.vtensor<[32,4],f32> {
  %0 = torch.vtensor.literal(dense<0.000000e+00> : tensor<10xf32>) : !torch.vtensor<[10],f32>
  %int-1 = torch.constant.int -1
  %float1.000000e00 = torch.constant.float 1.000000e+00
  %true = torch.constant.bool true
  %none = torch.constant.none
  %false = torch.constant.bool false
  %int0 = torch.constant.int 0
  %int6 = torch.constant.int 6
  %int1 = torch.constant.int 1
  %int10 = torch.constant.int 10
  %1 = torch.prim.ListConstruct %int10 : (!torch.int) -> !torch.list<int>
  %cpu = torch.constant.device "cpu"
  %2 = torch.aten.empty.memory_format %1, %int6, %int0, %cpu, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[10],f32>
  %3 = torch.prim.ListConstruct %arg2 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %4 = torch.aten.index_put.hacked_twin %0, %3, %arg3, %true : !torch.vtensor<[10],f32>, !torch.list<vtensor>, !torch.vtensor<[32],f32>, !torch.bool -> !torch.vtensor<[10],f32>
  %5 = torch.prim.ListConstruct %arg1 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %6 = torch.aten.index.Tensor_hacked_twin %arg0, %5 : !torch.vtensor<[10,4],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4],f32>
  %7 = torch.aten.clamp %4, %int1, %none : !torch.vtensor<[10],f32>, !torch.int, !torch.none -> !torch.vtensor<[10],f32>
  %8 = torch.prim.ListConstruct %arg2 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %9 = torch.aten.index.Tensor_hacked_twin %7, %8 : !torch.vtensor<[10],f32>, !torch.list<vtensor> -> !torch.vtensor<[32],f32>
  %10 = torch.aten.reciprocal %9 : !torch.vtensor<[32],f32> -> !torch.vtensor<[32],f32>
  %11 = torch.aten.mul.Scalar %10, %float1.000000e00 : !torch.vtensor<[32],f32>, !torch.float -> !torch.vtensor<[32],f32>
  %12 = torch.aten.unsqueeze %11, %int-1 : !torch.vtensor<[32],f32>, !torch.int -> !torch.vtensor<[32,1],f32>
  %13 = torch.aten.mul.Tensor %6, %12 : !torch.vtensor<[32,4],f32>, !torch.vtensor<[32,1],f32> -> !torch.vtensor<[32,4],f32>
  return %13 : !torch.vtensor<[32,4],f32>
}

// Per-relation count keyed by src * R + etype: no degree_norm.
// CHECK-LABEL: func.func @nm_degree_norm_src_etype(
// CHECK-NOT: hector_inter.degree_norm
// CHECK: torch.aten.reciprocal
// CHECK: return
func.func @nm_degree_norm_src_etype(%arg0: !torch.vtensor<[10,4],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %arg2: !torch.vtensor<[32],si64> {hector.data.graph = "dst"}, %arg3: !torch.vtensor<[32],si64> {hector.data.graph = "etype"}) -> !torch.vtensor<[32,4],f32> {
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
  %2 = torch.aten.mul.Scalar %arg1, %int3 : !torch.vtensor<[32],si64>, !torch.int -> !torch.vtensor<[32],si64>
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

// index_select along dim 1 is not a row gather.
// CHECK-LABEL: func.func @nm_gather_dim1(
// CHECK-NOT: hector_inter
// CHECK: torch.aten.index_select
// CHECK: return
func.func @nm_gather_dim1(%arg0: !torch.vtensor<[10,32],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "src"}) -> !torch.vtensor<[10,32],f32> {
  %int1 = torch.constant.int 1
  %0 = torch.aten.index_select %arg0, %int1, %arg1 : !torch.vtensor<[10,32],f32>, !torch.int, !torch.vtensor<[32],si64> -> !torch.vtensor<[10,32],f32>
  return %0 : !torch.vtensor<[10,32],f32>
}

// index_add / scatter_add onto a non-zero base: no sum_to_dst.
// CHECK-LABEL: func.func @nm_scatter_nonzero_base(
// CHECK-NOT: hector_inter
// CHECK: torch.aten.index_put
// CHECK: torch.aten.scatter_add
// CHECK: return
func.func @nm_scatter_nonzero_base(%arg0: !torch.vtensor<[32,6],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "dst"}, %arg2: !torch.vtensor<[10,6],f32>) -> (!torch.vtensor<[10,6],f32>, !torch.vtensor<[10,6],f32>) {
  %0 = torch.vtensor.literal(dense<1.000000e+00> : tensor<10x6xf32>) : !torch.vtensor<[10,6],f32>
  %none = torch.constant.none
  %int32 = torch.constant.int 32
  %int-1 = torch.constant.int -1
  %false = torch.constant.bool false
  %int0 = torch.constant.int 0
  %int6 = torch.constant.int 6
  %int10 = torch.constant.int 10
  %true = torch.constant.bool true
  %1 = torch.prim.ListConstruct %arg1 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %2 = torch.aten.index_put.hacked_twin %arg2, %1, %arg0, %true : !torch.vtensor<[10,6],f32>, !torch.list<vtensor>, !torch.vtensor<[32,6],f32>, !torch.bool -> !torch.vtensor<[10,6],f32>
  %3 = torch.prim.ListConstruct %int10, %int6 : (!torch.int, !torch.int) -> !torch.list<int>
  %cpu = torch.constant.device "cpu"
  %4 = torch.aten.empty.memory_format %3, %int6, %int0, %cpu, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[10,6],f32>
  %5 = torch.aten.unsqueeze %arg1, %int-1 : !torch.vtensor<[32],si64>, !torch.int -> !torch.vtensor<[32,1],si64>
  %6 = torch.prim.ListConstruct %int32, %int6 : (!torch.int, !torch.int) -> !torch.list<int>
  %7 = torch.aten.broadcast_to %5, %6 : !torch.vtensor<[32,1],si64>, !torch.list<int> -> !torch.vtensor<[32,6],si64>
  %8 = torch.aten.scatter_add %0, %int0, %7, %arg0 : !torch.vtensor<[10,6],f32>, !torch.int, !torch.vtensor<[32,6],si64>, !torch.vtensor<[32,6],f32> -> !torch.vtensor<[10,6],f32>
  return %2, %8 : !torch.vtensor<[10,6],f32>, !torch.vtensor<[10,6],f32>
}

// Bias picked by a non-etype index: an edge-wise operand (computed in torch), not a typed bias.
// CHECK-LABEL: func.func @nm_typed_bias_other(
// CHECK: torch.aten.index.Tensor
// CHECK-NOT: tensor<3x4xf32>, !hector_inter.graph
// CHECK: hector_inter.add
// CHECK: return
func.func @nm_typed_bias_other(%arg0: !torch.vtensor<[3,4],f32>, %arg1: !torch.vtensor<[10,4],f32>, %arg2: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %arg3: !torch.vtensor<[32],si64>) -> !torch.vtensor<[32,4],f32> {
  %int1 = torch.constant.int 1
  %0 = torch.prim.ListConstruct %arg2 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %1 = torch.aten.index.Tensor_hacked_twin %arg1, %0 : !torch.vtensor<[10,4],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4],f32>
  %2 = torch.prim.ListConstruct %arg3 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %3 = torch.aten.index.Tensor_hacked_twin %arg0, %2 : !torch.vtensor<[3,4],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4],f32>
  %4 = torch.aten.add.Tensor %1, %3, %int1 : !torch.vtensor<[32,4],f32>, !torch.vtensor<[32,4],f32>, !torch.int -> !torch.vtensor<[32,4],f32>
  return %4 : !torch.vtensor<[32,4],f32>
}

// Unary functions of plain tensors (no graph op upstream) stay torch code.
// CHECK-LABEL: func.func @nm_unary_on_plain(
// CHECK-NOT: hector_inter
// CHECK: torch.aten.relu
// CHECK: torch.aten.tanh
// CHECK: return
func.func @nm_unary_on_plain(%arg0: !torch.vtensor<[10,4],f32>, %arg1: !torch.vtensor<[32],si64>) -> !torch.vtensor<[10,4],f32> {
  %int1 = torch.constant.int 1
  %none = torch.constant.none
  %false = torch.constant.bool false
  %0 = torch.aten.relu %arg0 : !torch.vtensor<[10,4],f32> -> !torch.vtensor<[10,4],f32>
  %1 = torch.aten.tanh %0 : !torch.vtensor<[10,4],f32> -> !torch.vtensor<[10,4],f32>
  %2 = torch.prim.ListConstruct %arg1 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %3 = torch.aten.index.Tensor_hacked_twin %arg0, %2 : !torch.vtensor<[10,4],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4],f32>
  %4 = torch.prim.ListConstruct  : () -> !torch.list<int>
  %5 = torch.aten.sum.dim_IntList %3, %4, %false, %none : !torch.vtensor<[32,4],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[],f32>
  %6 = torch.aten.add.Tensor %1, %5, %int1 : !torch.vtensor<[10,4],f32>, !torch.vtensor<[],f32>, !torch.int -> !torch.vtensor<[10,4],f32>
  return %6 : !torch.vtensor<[10,4],f32>
}

// tanh-approximated GELU is not hector's (exact) gelu.
// CHECK-LABEL: func.func @nm_gelu_tanh(
// CHECK-NOT: fn = "gelu"
// CHECK: torch.aten.gelu
// CHECK: return
func.func @nm_gelu_tanh(%arg0: !torch.vtensor<[10,4],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "src"}) -> !torch.vtensor<[32,4],f32> {
  %str = torch.constant.str "tanh"
  %0 = torch.prim.ListConstruct %arg1 : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %1 = torch.aten.index.Tensor_hacked_twin %arg0, %0 : !torch.vtensor<[10,4],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4],f32>
  %2 = torch.aten.gelu %1, %str : !torch.vtensor<[32,4],f32>, !torch.str -> !torch.vtensor<[32,4],f32>
  return %2 : !torch.vtensor<[32,4],f32>
}

// Dot of two plain inputs (no graph op upstream) stays torch code.
// CHECK-LABEL: func.func @nm_dot_plain_inputs(
// CHECK-NOT: hector_inter
// CHECK: torch.aten.mul.Tensor
// CHECK: torch.aten.sum.dim_IntList
// CHECK: return
func.func @nm_dot_plain_inputs(%arg0: !torch.vtensor<[32,6],f32>, %arg1: !torch.vtensor<[32,6],f32> {hector.data.graph = "src"}, %arg2: !torch.vtensor<[32],si64>) -> !torch.vtensor<[32,1],f32> {
  %none = torch.constant.none
  %true = torch.constant.bool true
  %int-1 = torch.constant.int -1
  %0 = torch.aten.mul.Tensor %arg0, %arg1 : !torch.vtensor<[32,6],f32>, !torch.vtensor<[32,6],f32> -> !torch.vtensor<[32,6],f32>
  %1 = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %2 = torch.aten.sum.dim_IntList %0, %1, %true, %none : !torch.vtensor<[32,6],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[32,1],f32>
  return %2 : !torch.vtensor<[32,1],f32>
}


// Key dst * 3 + etype while the graph has 4 edge types (hector.num_etypes): keys collide across
// (dst, etype) pairs, so the count is not a per-relation degree: no degree_norm.
// CHECK-LABEL: func.func @nm_key_stride_too_small(
// CHECK-NOT: hector_inter.degree_norm
// CHECK: torch.aten.reciprocal
// CHECK: return
func.func @nm_key_stride_too_small(%arg0: !torch.vtensor<[10,4],f32>, %arg1: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %arg2: !torch.vtensor<[32],si64> {hector.data.graph = "dst"}, %arg3: !torch.vtensor<[32],si64> {hector.data.graph = "etype"}) -> !torch.vtensor<[32,4],f32> attributes {hector.num_etypes = 4 : i64} {
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
