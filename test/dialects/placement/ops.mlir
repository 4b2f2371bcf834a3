// RUN: hector-opt %s | hector-opt | FileCheck %s
// RUN: hector-opt %s --mlir-print-op-generic | hector-opt | FileCheck %s

// Every placement op parses, verifies and prints back (ops print in generic form). Their
// operands accept any type: tensors before bufferization, memrefs after.

// CHECK-LABEL: func.func @place
// CHECK-SAME: (%[[X:.*]]: tensor<?x64xf32>, %[[M:.*]]: memref<?x64xf32>)
func.func @place(%x: tensor<?x64xf32>, %m: memref<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>, memref<?x64xf32>, memref<?x64xf32>) {
  // CHECK: "placement.place"(%[[X]]) {affinity = "gpu", space = "unified"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %0 = "placement.place"(%x) {space = "unified", affinity = "gpu"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  // CHECK: "placement.place"(%[[X]]) {affinity = "host", space = "unified"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %1 = "placement.place"(%x) {space = "unified", affinity = "host"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  // CHECK: "placement.place"(%[[M]]) {affinity = "none", space = "device"} : (memref<?x64xf32>) -> memref<?x64xf32>
  %2 = "placement.place"(%m) {space = "device", affinity = "none"} : (memref<?x64xf32>) -> memref<?x64xf32>
  // CHECK: "placement.place"(%[[M]]) {affinity = "none", space = "pinned_host"} : (memref<?x64xf32>) -> memref<?x64xf32>
  %3 = "placement.place"(%m) {space = "pinned_host", affinity = "none"} : (memref<?x64xf32>) -> memref<?x64xf32>
  return %0, %1, %2, %3 : tensor<?x64xf32>, tensor<?x64xf32>, memref<?x64xf32>, memref<?x64xf32>
}

// CHECK-LABEL: func.func @transfer
func.func @transfer(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  // CHECK: "placement.transfer"(%{{[0-9a-z_]+}}) {from = "pinned_host", to = "device"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %0 = "placement.transfer"(%x) {from = "pinned_host", to = "device"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  // CHECK: "placement.transfer"(%{{[0-9a-z_]+}}) {from = "device", to = "ssd"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %1 = "placement.transfer"(%0) {from = "device", to = "ssd"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  // CHECK: "placement.transfer"(%{{[0-9a-z_]+}}) {from = "ssd", to = "unified"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %2 = "placement.transfer"(%1) {from = "ssd", to = "unified"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return %2 : tensor<?x64xf32>
}

// The activation plan of one scope: keep, offload, prefetch back, or recompute.
// CHECK-LABEL: func.func @activations
func.func @activations(%a: tensor<?x64xf32>, %b: tensor<?x64xf32>, %c: tensor<?x64xf32>, %d: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>) {
  // CHECK: "placement.keep"(%{{[0-9a-z_]+}}) {scope = 3 : i64} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %0 = "placement.keep"(%a) {scope = 3 : i64} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  // CHECK: "placement.offload"(%{{[0-9a-z_]+}}) {scope = 0 : i64, target = "ssd"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %1 = "placement.offload"(%b) {scope = 0 : i64, target = "ssd"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  // CHECK: "placement.offload"(%{{[0-9a-z_]+}}) {scope = 1 : i64, target = "pinned_host"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %2 = "placement.offload"(%c) {scope = 1 : i64, target = "pinned_host"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  // CHECK: "placement.prefetch"(%{{[0-9a-z_]+}}) {ahead = 1 : i64, scope = 0 : i64} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %3 = "placement.prefetch"(%1) {scope = 0 : i64, ahead = 1 : i64} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  // CHECK: "placement.recompute"(%{{[0-9a-z_]+}}) {scope = 2 : i64} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %4 = "placement.recompute"(%d) {scope = 2 : i64} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return %0, %2, %3, %4, %1 : tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>
}
