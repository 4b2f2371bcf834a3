// RUN: hector-opt %s | hector-opt | FileCheck %s
// RUN: hector-opt %s --mlir-print-op-generic | hector-opt | FileCheck %s

// A joint-graph plan with recomputed values (hector.offload.joint, the pre-norm block of
// test_offload_joint.py): the values the store may take are kept here, two more arguments
// stand for values recomputed in the backward (placement.recompute_ns = their chain's
// estimated time), named by placement.saved with their index in the partition the plan was
// made on, and decided placement.recompute with scope = the argument's position.

// CHECK-LABEL: func.func @profile
// CHECK-SAME: placement.name = "getitem", placement.recompute_ns = 13363 : i64
// CHECK-SAME: placement.name = "gelu", placement.recompute_ns = 26214 : i64
// CHECK: "placement.keep"(%arg1) {scope = 1 : i64}
// CHECK: "placement.saved"(%arg2) {bytes = 32768 : i64, index = 6 : i64}
// CHECK: "placement.recompute"(%arg2) {scope = 2 : i64} : (tensor<32768xi8>) -> tensor<32768xi8>
// CHECK: "placement.saved"(%arg3) {bytes = 131072 : i64, index = 10 : i64}
// CHECK: "placement.recompute"(%arg3) {scope = 3 : i64} : (tensor<131072xi8>) -> tensor<131072xi8>
func.func @profile(%arg0: tensor<131072xi8> {placement.backward_ns = 465955 : i64, placement.forward_ns = 110356 : i64, placement.name = "addmm"}, %arg1: tensor<32768xi8> {placement.backward_ns = 144721 : i64, placement.forward_ns = 143895 : i64, placement.name = "relu"}, %arg2: tensor<32768xi8> {placement.name = "getitem", placement.recompute_ns = 13363 : i64}, %arg3: tensor<131072xi8> {placement.name = "gelu", placement.recompute_ns = 26214 : i64}) attributes {placement.memory_budget = 164448 : i64, placement.modelled_overhead_ppm = 0 : i64, placement.modelled_peak_bytes = 163840 : i64, placement.offload_ps_per_byte = 0 : i64, placement.plan = "joint", placement.read_bandwidth = 4000000000 : i64, placement.rule = "budget", placement.write_bandwidth = 4000000000 : i64} {
  %0 = "placement.saved"(%arg0) {bytes = 131072 : i64, index = 6 : i64} : (tensor<131072xi8>) -> tensor<131072xi8>
  %1 = "placement.saved"(%arg1) {bytes = 32768 : i64, index = 7 : i64} : (tensor<32768xi8>) -> tensor<32768xi8>
  %2 = "placement.keep"(%arg0) {scope = 0 : i64} : (tensor<131072xi8>) -> tensor<131072xi8>
  %3 = "placement.keep"(%arg1) {scope = 1 : i64} : (tensor<32768xi8>) -> tensor<32768xi8>
  %4 = "placement.saved"(%arg2) {bytes = 32768 : i64, index = 6 : i64} : (tensor<32768xi8>) -> tensor<32768xi8>
  %5 = "placement.recompute"(%arg2) {scope = 2 : i64} : (tensor<32768xi8>) -> tensor<32768xi8>
  %6 = "placement.saved"(%arg3) {bytes = 131072 : i64, index = 10 : i64} : (tensor<131072xi8>) -> tensor<131072xi8>
  %7 = "placement.recompute"(%arg3) {scope = 3 : i64} : (tensor<131072xi8>) -> tensor<131072xi8>
  return
}
