// RUN: hector-opt %s | hector-opt | FileCheck %s
// RUN: hector-opt %s --mlir-print-op-generic | hector-opt | FileCheck %s

// A plan for the saved values of a compiled joint graph (hector.offload.joint): one argument
// per saved value the store may take (tensor<BYTESxi8>, placement.name = the forward node),
// placement.saved naming its index among the forward graph's saved outputs and its bytes,
// then the budget rule's decisions with scope = the argument's position.

// CHECK-LABEL: func.func @profile
// CHECK-SAME: placement.name = "addmm"
// CHECK-SAME: placement.name = "gt"
// CHECK-SAME: placement.plan = "joint"
// CHECK: "placement.saved"(%arg0) {bytes = 131072 : i64, index = 3 : i64} : (tensor<131072xi8>) -> tensor<131072xi8>
// CHECK: "placement.saved"(%arg1) {bytes = 32768 : i64, index = 4 : i64} : (tensor<32768xi8>) -> tensor<32768xi8>
// CHECK: %[[OUT:.*]] = "placement.offload"(%arg0) {scope = 0 : i64, target = "ssd"}
// CHECK: "placement.prefetch"(%[[OUT]]) {ahead = 1 : i64, scope = 0 : i64}
// CHECK: "placement.keep"(%arg1) {scope = 1 : i64}
func.func @profile(%arg0: tensor<131072xi8> {placement.backward_ns = 451200 : i64, placement.forward_ns = 348651 : i64, placement.name = "addmm"}, %arg1: tensor<32768xi8> {placement.backward_ns = 81900 : i64, placement.forward_ns = 173700 : i64, placement.name = "gt"}) attributes {placement.memory_budget = 98304 : i64, placement.modelled_overhead_ppm = 81797 : i64, placement.modelled_peak_bytes = 229376 : i64, placement.offload_ps_per_byte = 0 : i64, placement.plan = "joint", placement.read_bandwidth = 1000000000 : i64, placement.rule = "budget", placement.write_bandwidth = 1000000000 : i64} {
  %0 = "placement.saved"(%arg0) {bytes = 131072 : i64, index = 3 : i64} : (tensor<131072xi8>) -> tensor<131072xi8>
  %1 = "placement.saved"(%arg1) {bytes = 32768 : i64, index = 4 : i64} : (tensor<32768xi8>) -> tensor<32768xi8>
  %2 = "placement.offload"(%arg0) {scope = 0 : i64, target = "ssd"} : (tensor<131072xi8>) -> tensor<131072xi8>
  %3 = "placement.prefetch"(%2) {ahead = 1 : i64, scope = 0 : i64} : (tensor<131072xi8>) -> tensor<131072xi8>
  %4 = "placement.keep"(%arg1) {scope = 1 : i64} : (tensor<32768xi8>) -> tensor<32768xi8>
  return
}
