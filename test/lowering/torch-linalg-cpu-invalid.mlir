// RUN: not hector-opt --torch -p convert-torch-to-linalg-cpu %s 2>&1 | FileCheck %s
// RUN: not hector-opt --torch -p 'convert-torch-to-linalg-cpu{emit=ptx}' %s 2>&1 | FileCheck %s --check-prefix=OPTION
// RUN: not hector-opt --torch -p canonicalize %s 2>&1 | FileCheck %s --check-prefix=PASS
// RUN: not hector-opt -p convert-torch-to-linalg-cpu %S/Inputs/empty-module.mlir 2>&1 | FileCheck %s --check-prefix=NOTORCH

// torch.erfinv (exported by torch-mlir from torch.erfinv(torch.tanh(h))) has no linalg
// lowering in torch-mlir: the error names the op and its line.
// CHECK: torch-linalg-cpu-invalid.mlir:[[# @LINE + 6]]: error: cannot lower 'torch.aten.erfinv' to linalg
// OPTION: error: convert-torch-to-linalg-cpu: bad option 'emit=ptx' (emit=linalg|loops|llvm)
// PASS: error: under --torch, -p takes 'convert-torch-to-linalg-cpu'
// NOTORCH: convert-torch-to-linalg-cpu takes torch-dialect input: run it as `hector-opt --torch -p convert-torch-to-linalg-cpu FILE.mlir`
func.func @bad(%arg0: !torch.vtensor<[6,5],f32>) -> !torch.vtensor<[6,5],f32> {
  %0 = torch.aten.tanh %arg0 : !torch.vtensor<[6,5],f32> -> !torch.vtensor<[6,5],f32>
  %1 = torch.aten.erfinv %0 : !torch.vtensor<[6,5],f32> -> !torch.vtensor<[6,5],f32>
  return %1 : !torch.vtensor<[6,5],f32>
}
