// RUN: not hector-opt --torch -p convert-torch-to-linalg-cpu %s 2>&1 | FileCheck %s

// A relation with no edges in a batch gives zero-sized tensors; torch-mlir's lowering of a view
// over one divides by zero and kills the process (SIGFPE), so it is refused before torch-mlir
// runs, naming the op and its line.
// CHECK: torch-linalg-cpu-empty.mlir:[[# @LINE + 6]]:{{.*}}error:{{.*}}torch.aten.view{{.*}}zero-sized dimension
func.func @empty_relation(%arg0: !torch.vtensor<[0],si64>) -> !torch.vtensor<[0,8],si64> {
  %int1 = torch.constant.int 1
  %int-1 = torch.constant.int -1
  %int8 = torch.constant.int 8
  %0 = torch.prim.ListConstruct %int-1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
  %1 = torch.aten.view %arg0, %0 : !torch.vtensor<[0],si64>, !torch.list<int> -> !torch.vtensor<[0,1],si64>
  %int0 = torch.constant.int 0
  %2 = torch.prim.ListConstruct %int0, %int8 : (!torch.int, !torch.int) -> !torch.list<int>
  %3 = torch.aten.broadcast_to %1, %2 : !torch.vtensor<[0,1],si64>, !torch.list<int> -> !torch.vtensor<[0,8],si64>
  return %3 : !torch.vtensor<[0,8],si64>
}
