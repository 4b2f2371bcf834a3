// RUN: not hector-opt --torch-strict %s 2>&1 | FileCheck %s
// Strict mode: one diagnostic per op left unraised, with its line, in program order. The
// function holds one near-miss of each kind: a gather along dim 1, scatter_reduce amax
// outside a softmax (with its index broadcast), bmm with a weight picked by a non-etype index,
// tanh GELU, a matmul whose weight is computed from row data, and sin (no hector op).
// CHECK: raise-torch-to-hector-strict-kinds.mlir:31: error: cannot raise 'torch.aten.index_select' to hector_inter
// CHECK-NEXT: raise-torch-to-hector-strict-kinds.mlir:33: error: cannot raise 'torch.aten.unsqueeze' to hector_inter
// CHECK-NEXT: raise-torch-to-hector-strict-kinds.mlir:35: error: cannot raise 'torch.aten.broadcast_to' to hector_inter
// CHECK-NEXT: raise-torch-to-hector-strict-kinds.mlir:36: error: cannot raise 'torch.aten.scatter_reduce.two' to hector_inter
// CHECK-NEXT: raise-torch-to-hector-strict-kinds.mlir:39: error: cannot raise 'torch.aten.index.Tensor_hacked_twin' to hector_inter
// CHECK-NEXT: raise-torch-to-hector-strict-kinds.mlir:40: error: cannot raise 'torch.aten.unsqueeze' to hector_inter
// CHECK-NEXT: raise-torch-to-hector-strict-kinds.mlir:41: error: cannot raise 'torch.aten.bmm' to hector_inter
// CHECK-NEXT: raise-torch-to-hector-strict-kinds.mlir:42: error: cannot raise 'torch.aten.squeeze.dim' to hector_inter
// CHECK-NEXT: raise-torch-to-hector-strict-kinds.mlir:44: error: cannot raise 'torch.aten.gelu' to hector_inter
// CHECK-NEXT: raise-torch-to-hector-strict-kinds.mlir:46: error: cannot raise 'torch.aten.t' to hector_inter
// CHECK-NEXT: raise-torch-to-hector-strict-kinds.mlir:47: error: cannot raise 'torch.aten.mm' to hector_inter
// CHECK-NEXT: raise-torch-to-hector-strict-kinds.mlir:48: error: cannot raise 'torch.aten.mm' to hector_inter
// CHECK-NEXT: raise-torch-to-hector-strict-kinds.mlir:50: error: cannot raise 'torch.aten.sin' to hector_inter
// CHECK-NOT: error
func.func @kinds(%x: !torch.vtensor<[10,32],f32>, %xs: !torch.vtensor<[10,4],f32>, %w: !torch.vtensor<[3,4,6],f32>, %other: !torch.vtensor<[32],si64>, %src: !torch.vtensor<[32],si64> {hector.data.graph = "src"}, %dst: !torch.vtensor<[32],si64> {hector.data.graph = "dst"}, %et: !torch.vtensor<[32],si64> {hector.data.graph = "etype"}) -> (!torch.vtensor<[10,32],f32>, !torch.vtensor<[10,4],f32>, !torch.vtensor<[32,6],f32>, !torch.vtensor<[32,4],f32>, !torch.vtensor<[10,4],f32>) {
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %int-1 = torch.constant.int -1
  %int4 = torch.constant.int 4
  %false = torch.constant.bool false
  %amax = torch.constant.str "amax"
  %tanh = torch.constant.str "tanh"
  %z = torch.vtensor.literal(dense<0.000000e+00> : tensor<10x4xf32>) : !torch.vtensor<[10,4],f32>
  %e = torch.aten.index_select %xs, %int0, %src : !torch.vtensor<[10,4],f32>, !torch.int, !torch.vtensor<[32],si64> -> !torch.vtensor<[32,4],f32>
  // index_select along dim 1 (not a row gather)
  %0 = torch.aten.index_select %x, %int1, %src : !torch.vtensor<[10,32],f32>, !torch.int, !torch.vtensor<[32],si64> -> !torch.vtensor<[10,32],f32>
  // scatter_reduce "amax" outside a softmax
  %i1 = torch.aten.unsqueeze %dst, %int-1 : !torch.vtensor<[32],si64>, !torch.int -> !torch.vtensor<[32,1],si64>
  %l = torch.prim.ListConstruct %int-1, %int4 : (!torch.int, !torch.int) -> !torch.list<int>
  %i2 = torch.aten.broadcast_to %i1, %l : !torch.vtensor<[32,1],si64>, !torch.list<int> -> !torch.vtensor<[32,4],si64>
  %1 = torch.aten.scatter_reduce.two %z, %int0, %i2, %e, %amax, %false : !torch.vtensor<[10,4],f32>, !torch.int, !torch.vtensor<[32,4],si64>, !torch.vtensor<[32,4],f32>, !torch.str, !torch.bool -> !torch.vtensor<[10,4],f32>
  // bmm with a weight picked by a non-etype index (four ops stay)
  %ol = torch.prim.ListConstruct %other : (!torch.vtensor<[32],si64>) -> !torch.list<vtensor>
  %wo = torch.aten.index.Tensor_hacked_twin %w, %ol : !torch.vtensor<[3,4,6],f32>, !torch.list<vtensor> -> !torch.vtensor<[32,4,6],f32>
  %u = torch.aten.unsqueeze %e, %int1 : !torch.vtensor<[32,4],f32>, !torch.int -> !torch.vtensor<[32,1,4],f32>
  %b = torch.aten.bmm %u, %wo : !torch.vtensor<[32,1,4],f32>, !torch.vtensor<[32,4,6],f32> -> !torch.vtensor<[32,1,6],f32>
  %2 = torch.aten.squeeze.dim %b, %int1 : !torch.vtensor<[32,1,6],f32>, !torch.int -> !torch.vtensor<[32,6],f32>
  // tanh-approximated GELU
  %3 = torch.aten.gelu %e, %tanh : !torch.vtensor<[32,4],f32>, !torch.str -> !torch.vtensor<[32,4],f32>
  // a matmul whose weight is computed from row data (x.t() @ x)
  %xt = torch.aten.t %xs : !torch.vtensor<[10,4],f32> -> !torch.vtensor<[4,10],f32>
  %wx = torch.aten.mm %xt, %xs : !torch.vtensor<[4,10],f32>, !torch.vtensor<[10,4],f32> -> !torch.vtensor<[4,4],f32>
  %4 = torch.aten.mm %xs, %wx : !torch.vtensor<[10,4],f32>, !torch.vtensor<[4,4],f32> -> !torch.vtensor<[10,4],f32>
  // no hector_inter op at all
  %5 = torch.aten.sin %4 : !torch.vtensor<[10,4],f32> -> !torch.vtensor<[10,4],f32>
  return %0, %1, %2, %3, %5 : !torch.vtensor<[10,32],f32>, !torch.vtensor<[10,4],f32>, !torch.vtensor<[32,6],f32>, !torch.vtensor<[32,4],f32>, !torch.vtensor<[10,4],f32>
}
