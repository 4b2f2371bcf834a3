// raise-torch-to-hector is a pass like any other for `hector-opt -p`: it runs in torch-mlir's
// context on torch-dialect input (--torch and --torch-strict are its shorthands).

// RUN: hector-opt -p raise-torch-to-hector %s | FileCheck %s
// RUN: hector-opt -p 'builtin.module(raise-torch-to-hector)' %s | FileCheck %s
// RUN: hector-opt --torch %s > %t.torch && hector-opt -p raise-torch-to-hector %s > %t.pass
// RUN: diff %t.torch %t.pass
// RUN: not hector-opt -p 'raise-torch-to-hector{strict=true}' %s 2>&1 | FileCheck %s --check-prefix=STRICT
// RUN: not hector-opt -p 'raise-torch-to-hector, hector-verify' %s 2>&1 | FileCheck %s --check-prefix=MIXED
// RUN: hector-opt --list-passes | FileCheck %s --check-prefix=LIST

// CHECK-LABEL: func.func @gather_sin
// CHECK: "hector_inter.gather_src"
// CHECK: torch.aten.sin

// STRICT: raise-torch-pass.mlir:[[@LINE+10]]: error: cannot raise 'torch.aten.sin' to hector_inter

// MIXED: error: 'raise-torch-to-hector' runs in torch-mlir's context on torch-dialect input, so it makes up a pipeline on its own

// LIST: raise-torch-to-hector — {{.*}}torch-mlir's context
// LIST-NEXT: strict=false

func.func @gather_sin(%x: !torch.vtensor<[10,4],f32>, %src: !torch.vtensor<[30],si64> {hector.data.graph = "src"}) -> !torch.vtensor<[30,4],f32> {
  %int0 = torch.constant.int 0
  %0 = torch.aten.index_select %x, %int0, %src : !torch.vtensor<[10,4],f32>, !torch.int, !torch.vtensor<[30],si64> -> !torch.vtensor<[30,4],f32>
  %1 = torch.aten.sin %0 : !torch.vtensor<[30,4],f32> -> !torch.vtensor<[30,4],f32>
  return %1 : !torch.vtensor<[30,4],f32>
}
