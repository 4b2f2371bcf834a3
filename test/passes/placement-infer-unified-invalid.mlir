// RUN: hector-opt %s --split-input-file --verify-diagnostics -p placement-infer-unified
// RUN: not hector-opt %s --split-input-file -p placement-infer-unified 2>&1 | FileCheck %s --check-prefix=COUNT

// Every rejection of placement-infer-unified, each at the offending op. The second RUN line
// checks that without --verify-diagnostics each case fails with exactly its message.

// COUNT: error: a unified value needs an affinity, "gpu" or "host"; got "none"
func.func @unified_without_affinity(%x: tensor<?x16xf32>) -> tensor<?x16xf32> {
  // expected-error @+1 {{a unified value needs an affinity, "gpu" or "host"; got "none"}}
  %0 = "placement.place"(%x) {space = "unified", affinity = "none"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  return %0 : tensor<?x16xf32>
}

// -----

// COUNT: error: affinity "gpu" is meaningful only for unified values, not for a value in "device"
func.func @affinity_on_device(%x: tensor<?x16xf32>) -> tensor<?x16xf32> {
  // expected-error @+1 {{affinity "gpu" is meaningful only for unified values, not for a value in "device"}}
  %0 = "placement.place"(%x) {space = "device", affinity = "gpu"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  return %0 : tensor<?x16xf32>
}

// -----

// COUNT: error: operand #1 lives on SSD, where no operator can read it; prefetch or transfer it to memory first
func.func @ssd_operand(%x: tensor<?x16xf32>, %s: tensor<?x16xf32>) -> tensor<?x16xf32> {
  %ux = "placement.place"(%x) {space = "unified", affinity = "gpu"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %ss = "placement.place"(%s) {space = "ssd", affinity = "none"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  // expected-error @+1 {{operand #1 lives on SSD, where no operator can read it; prefetch or transfer it to memory first}}
  %0 = "hector_inter.add"(%ux, %ss) : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  return %0 : tensor<?x16xf32>
}

// -----

// COUNT: error: operator is pinned to run on the GPU (placement.run_on = "gpu"), but operand #1 is a host-affine unified tensor, which makes it run on the host
func.func @pinned_gpu_host_affine(%x: tensor<?x16xf32>, %h: tensor<?x16xf32>) -> tensor<?x16xf32> {
  %ux = "placement.place"(%x) {space = "unified", affinity = "gpu"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %uh = "placement.place"(%h) {space = "unified", affinity = "host"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  // expected-error @+1 {{operator is pinned to run on the GPU (placement.run_on = "gpu"), but operand #1 is a host-affine unified tensor, which makes it run on the host}}
  %0 = "hector_inter.add"(%ux, %uh) {placement.run_on = "gpu"} : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  return %0 : tensor<?x16xf32>
}

// -----

// COUNT: error: operator is pinned to run on the host (placement.run_on = "host"), but operand #0 is a GPU-affine unified tensor, which makes it run on the GPU
func.func @pinned_host_gpu_affine(%x: tensor<?x16xf32>, %d: tensor<?x16xf32>) -> tensor<?x16xf32> {
  %ux = "placement.place"(%x) {space = "unified", affinity = "gpu"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %dd = "placement.place"(%d) {space = "device", affinity = "none"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  // expected-error @+1 {{operator is pinned to run on the host (placement.run_on = "host"), but operand #0 is a GPU-affine unified tensor, which makes it run on the GPU}}
  %0 = "hector_inter.add"(%ux, %dd) {placement.run_on = "host"} : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  return %0 : tensor<?x16xf32>
}

// -----

// COUNT: error: placement.run_on must be "gpu" or "host", got "tpu"
func.func @bad_pin(%d: tensor<?x16xf32>) -> tensor<?x16xf32> {
  %dd = "placement.place"(%d) {space = "device", affinity = "none"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  // expected-error @+1 {{placement.run_on must be "gpu" or "host", got "tpu"}}
  %0 = arith.negf %dd {placement.run_on = "tpu"} : tensor<?x16xf32>
  return %0 : tensor<?x16xf32>
}

// -----

// COUNT: error: placement.run_on must be "gpu" or "host", got 1 : i64
func.func @pin_not_a_string(%d: tensor<?x16xf32>) -> tensor<?x16xf32> {
  %dd = "placement.place"(%d) {space = "device", affinity = "none"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  // expected-error @+1 {{placement.run_on must be "gpu" or "host", got 1 : i64}}
  %0 = arith.negf %dd {placement.run_on = 1} : tensor<?x16xf32>
  return %0 : tensor<?x16xf32>
}

// -----

// COUNT: error: transfer from "pinned_host", but its operand lives in "device"
func.func @transfer_from_wrong_space(%d: tensor<?x16xf32>) -> tensor<?x16xf32> {
  %dd = "placement.place"(%d) {space = "device", affinity = "none"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  // expected-error @+1 {{transfer from "pinned_host", but its operand lives in "device"}}
  %0 = "placement.transfer"(%dd) {from = "pinned_host", to = "device"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  return %0 : tensor<?x16xf32>
}

// -----

// COUNT: error: transfer from "device" to "device" moves nothing
func.func @transfer_to_itself(%d: tensor<?x16xf32>) -> tensor<?x16xf32> {
  // expected-error @+1 {{transfer from "device" to "device" moves nothing}}
  %0 = "placement.transfer"(%d) {from = "device", to = "device"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  return %0 : tensor<?x16xf32>
}

// -----

// COUNT: error: operand #0 is a unified value without affinity; declare it with placement.place and affinity "gpu" or "host"
func.func @transferred_to_unified(%d: tensor<?x16xf32>) -> tensor<?x16xf32> {
  %dd = "placement.place"(%d) {space = "device", affinity = "none"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %u = "placement.transfer"(%dd) {from = "device", to = "unified"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  // expected-error @+1 {{operand #0 is a unified value without affinity; declare it with placement.place and affinity "gpu" or "host"}}
  %0 = arith.negf %u : tensor<?x16xf32>
  return %0 : tensor<?x16xf32>
}
// COUNT-NOT: error:
