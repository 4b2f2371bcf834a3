// RUN: not hector-opt --torch-strict %s 2>&1 | FileCheck %s

// CHECK: raise-torch-to-hector-strict.mlir:9: error: cannot raise 'torch.aten.sin' to hector_inter
// CHECK-NEXT: raise-torch-to-hector-strict.mlir:10: error: cannot raise 'torch.aten.sin' to hector_inter
func.func @strict(%x: !torch.vtensor<[10,4],f32>, %src: !torch.vtensor<[30],si64> {hector.data.graph = "src"}) -> !torch.vtensor<[30,4],f32> {
  %int0 = torch.constant.int 0
  %0 = torch.aten.index_select %x, %int0, %src : !torch.vtensor<[10,4],f32>, !torch.int, !torch.vtensor<[30],si64> -> !torch.vtensor<[30,4],f32>
  %1 = torch.aten.relu %0 : !torch.vtensor<[30,4],f32> -> !torch.vtensor<[30,4],f32>
  %2 = torch.aten.sin %1 : !torch.vtensor<[30,4],f32> -> !torch.vtensor<[30,4],f32>
  %3 = torch.aten.sin %2 : !torch.vtensor<[30,4],f32> -> !torch.vtensor<[30,4],f32>
  return %3 : !torch.vtensor<[30,4],f32>
}
