// RUN: hector-opt %s -p 'placement-plan-offload{memory_budget=3000000}' | FileCheck %s
// RUN: hector-opt %s -p 'placement-plan-offload{memory_budget=3000000 recompute=false}' | FileCheck %s --check-prefix=NORECOMP
// RUN: hector-opt %s -p 'placement-plan-offload{memory_budget=3000000 ahead=2}' | FileCheck %s --check-prefix=AHEAD

// T = 5 ms. At 100 MB/s even scope 0 cannot be offloaded (2·1 MiB / 15 ms = 139.8 MB/s), so
// all 4 MiB would be kept, over the 3 MB budget: the scope with the least forward time per byte
// (scope 3: 0.5 ms for 1 MiB) is recomputed first, then scope 2 (1 ms); 2 MiB remain kept.
// CHECK-LABEL: func.func @tight
// CHECK: "placement.keep"(%arg0) {scope = 0 : i64}
// CHECK-NEXT: "placement.keep"(%arg1) {scope = 1 : i64}
// CHECK-NEXT: "placement.recompute"(%arg2) {scope = 2 : i64}
// CHECK-NEXT: "placement.recompute"(%arg3) {scope = 3 : i64}
// NORECOMP-NOT: placement.recompute
// NORECOMP-COUNT-4: "placement.keep"
// AHEAD-NOT: placement.prefetch
func.func @tight(
    %s0: tensor<1048576xi8> {placement.forward_ns = 2000000 : i64},
    %s1: tensor<1048576xi8> {placement.forward_ns = 1500000 : i64},
    %s2: tensor<1048576xi8> {placement.forward_ns = 1000000 : i64},
    %s3: tensor<1048576xi8> {placement.forward_ns = 500000 : i64})
    attributes {placement.write_bandwidth = 100000000 : i64} {
  return
}
