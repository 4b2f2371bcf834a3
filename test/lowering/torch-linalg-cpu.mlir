// RUN: hector-opt --torch -p 'convert-torch-to-linalg-cpu{emit=linalg}' %s | FileCheck %s --check-prefix=LINALG
// RUN: hector-opt --torch -p 'convert-torch-to-linalg-cpu{emit=loops}' %s | FileCheck %s --check-prefix=LOOPS
// RUN: hector-opt --torch -p convert-torch-to-linalg-cpu %s | FileCheck %s --check-prefix=LLVM

// A torch segment the raise pass leaves alone (sin, a matmul, index_add onto zeros), exported
// by torch-mlir's FX importer from
//   torch.zeros(4, 3).index_add(0, dst, torch.sin(h) @ w)
// and taken down torch-mlir's linalg path for the CPU JIT.

// LINALG-LABEL: func.func @segment(
// LINALG-SAME: tensor<6x5xf32>
// LINALG: math.sin
// LINALG: linalg.matmul
// LINALG: tm_tensor.scatter
// LINALG-NOT: torch.aten

// Bufferized with the result as an out-parameter, everything as scf loops.
// LOOPS-LABEL: func.func @segment(
// LOOPS-SAME: %{{.*}}: memref<6x5xf32>, %{{.*}}: memref<5x3xf32>, %{{.*}}: memref<6xi64>, %{{.*}}: memref<4x3xf32>)
// LOOPS-NOT: linalg.
// LOOPS-NOT: tm_tensor.
// LOOPS: scf.for
// LOOPS: math.sin
// LOOPS: return

// LLVM: llvm.func @segment(
// LLVM: llvm.func @_mlir_ciface_segment(
// LLVM-NOT: scf.for
func.func @segment(%arg0: !torch.vtensor<[6,5],f32>, %arg1: !torch.vtensor<[5,3],f32>, %arg2: !torch.vtensor<[6],si64>) -> !torch.vtensor<[4,3],f32> {
  %0 = torch.vtensor.literal(dense<0.000000e+00> : tensor<4x3xf32>) : !torch.vtensor<[4,3],f32>
  %none = torch.constant.none
  %true = torch.constant.bool true
  %false = torch.constant.bool false
  %int0 = torch.constant.int 0
  %int6 = torch.constant.int 6
  %int3 = torch.constant.int 3
  %int4 = torch.constant.int 4
  %1 = torch.aten.sin %arg0 : !torch.vtensor<[6,5],f32> -> !torch.vtensor<[6,5],f32>
  %2 = torch.aten.mm %1, %arg1 : !torch.vtensor<[6,5],f32>, !torch.vtensor<[5,3],f32> -> !torch.vtensor<[6,3],f32>
  %3 = torch.prim.ListConstruct %int4, %int3 : (!torch.int, !torch.int) -> !torch.list<int>
  %cpu = torch.constant.device "cpu"
  %4 = torch.aten.empty.memory_format %3, %int6, %int0, %cpu, %false, %none : !torch.list<int>, !torch.int, !torch.int, !torch.Device, !torch.bool, !torch.none -> !torch.vtensor<[4,3],f32>
  %5 = torch.prim.ListConstruct %arg2 : (!torch.vtensor<[6],si64>) -> !torch.list<vtensor>
  %6 = torch.aten.index_put.hacked_twin %0, %5, %2, %true : !torch.vtensor<[4,3],f32>, !torch.list<vtensor>, !torch.vtensor<[6,3],f32>, !torch.bool -> !torch.vtensor<[4,3],f32>
  return %6 : !torch.vtensor<[4,3],f32>
}
