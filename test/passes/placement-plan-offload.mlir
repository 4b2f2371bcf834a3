// RUN: hector-opt %s --split-input-file -p placement-plan-offload | FileCheck %s
// RUN: hector-opt %s --split-input-file -p 'placement-plan-offload{policy=all}' | FileCheck %s --check-prefix=ALL
// RUN: hector-opt %s --split-input-file -p 'placement-plan-offload{policy=none}' | FileCheck %s --check-prefix=NONE
// RUN: hector-opt %s --split-input-file -p placement-plan-offload | hector-opt --split-input-file -p placement-plan-offload | FileCheck %s
// RUN: hector-opt %s --split-input-file -p 'placement-plan-offload{write_bandwidth=1000000000}' | FileCheck %s --check-prefix=FAST

// Four equal scopes (1 MiB saved, 1 ms forward each; T = 4 ms) at 500 MB/s. Required bandwidth
// (Σ earlier offloaded + 2·bytes) / (3T − 2·Σ earlier time): 2 MiB / 12 ms = 174.8 MB/s,
// 3 MiB / 10 ms = 314.6 MB/s, 4 MiB / 8 ms = 524.3 MB/s > 500 MB/s: scopes 2 and 3 are kept.

// CHECK-LABEL: func.func @gpt
// CHECK-SAME: placement.plan = "adaptive"
// CHECK: %[[O0:.*]] = "placement.offload"(%arg0) {placement.required_bandwidth = 174762666 : i64, scope = 0 : i64, target = "ssd"}
// CHECK-NEXT: "placement.prefetch"(%[[O0]]) {ahead = 1 : i64, scope = 0 : i64}
// CHECK-NEXT: %[[O1:.*]] = "placement.offload"(%arg1) {placement.required_bandwidth = 314572800 : i64, scope = 1 : i64, target = "ssd"}
// CHECK-NEXT: "placement.prefetch"(%[[O1]]) {ahead = 1 : i64, scope = 1 : i64}
// CHECK-NEXT: "placement.keep"(%arg2) {scope = 2 : i64}
// CHECK-NEXT: "placement.keep"(%arg3) {scope = 3 : i64}
// CHECK-NEXT: return
// ALL-LABEL: func.func @gpt
// ALL-COUNT-4: "placement.offload"
// NONE-LABEL: func.func @gpt
// NONE-NOT: placement.offload
// NONE-COUNT-4: "placement.keep"
// FAST-LABEL: func.func @gpt
// FAST-COUNT-4: "placement.offload"
// FAST-NOT: placement.keep
func.func @gpt(
    %s0: tensor<1048576xi8> {placement.forward_ns = 1000000 : i64, placement.name = "blocks.0"},
    %s1: tensor<1048576xi8> {placement.forward_ns = 1000000 : i64, placement.name = "blocks.1"},
    %s2: tensor<1048576xi8> {placement.forward_ns = 1000000 : i64, placement.name = "blocks.2"},
    %s3: tensor<1048576xi8> {placement.forward_ns = 1000000 : i64, placement.name = "blocks.3"})
    attributes {placement.write_bandwidth = 500000000 : i64} {
  return
}

// -----

// A scope that saves nothing is kept; a slow first scope buys time for a big second one.
// T = 10 ms: scope 1 needs (0 + 2·8 MiB) / (30 ms − 2·9 ms) = 1398 MB/s.
// CHECK-LABEL: func.func @uneven
// CHECK: "placement.keep"(%arg0) {scope = 0 : i64}
// CHECK-NEXT: "placement.offload"(%arg1) {placement.required_bandwidth = 1398101333 : i64, scope = 1 : i64, target = "ssd"}
// With write_bandwidth=1000000000 (1 GB/s < 1398 MB/s) scope 1 is kept instead.
// FAST-LABEL: func.func @uneven
// FAST: "placement.keep"(%arg1) {scope = 1 : i64}
// ALL-LABEL: func.func @uneven
// ALL: "placement.keep"(%arg0)
// ALL: "placement.offload"(%arg1)
func.func @uneven(
    %s0: tensor<0xi8> {placement.forward_ns = 9000000 : i64},
    %s1: tensor<8388608xi8> {placement.forward_ns = 1000000 : i64})
    attributes {placement.write_bandwidth = 2000000000 : i64} {
  return
}

// -----

// Functions without a profile are left alone.
// CHECK-LABEL: func.func @not_a_profile
// CHECK-NOT: placement.
// CHECK: return
func.func @not_a_profile(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// A function declaration (no body) is skipped, not a crash (it used to raise IndexError).
// CHECK-LABEL: func.func private @declared(tensor<16xi8>)
// CHECK-NOT: placement.
// ALL-LABEL: func.func private @declared
// NONE-LABEL: func.func private @declared
// FAST-LABEL: func.func private @declared
func.func private @declared(tensor<16xi8>)
