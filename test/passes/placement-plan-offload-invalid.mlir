// RUN: hector-opt %s --split-input-file --verify-diagnostics -p placement-plan-offload
// RUN: not hector-opt %s -p 'placement-plan-offload{policy=sometimes}' 2>&1 | FileCheck %s --check-prefix=POLICY

// POLICY: expected one of adaptive, all, none, got 'sometimes'

// expected-error @+1 {{adaptive planning needs the write bandwidth: set placement.write_bandwidth (bytes/s) on the function or the pass option write_bandwidth}}
func.func @no_bandwidth(%s0: tensor<16xi8> {placement.forward_ns = 1 : i64}) {
  return
}

// -----

// expected-error @+1 {{profile argument #1 has no placement.forward_ns attribute}}
func.func @missing_time(%s0: tensor<16xi8> {placement.forward_ns = 1 : i64}, %s1: tensor<16xi8>)
    attributes {placement.write_bandwidth = 1000 : i64} {
  return
}

// -----

// expected-error @+1 {{profile argument #0 must be tensor<Nxi8> (N = saved bytes), got tensor<16xf32>}}
func.func @wrong_type(%s0: tensor<16xf32> {placement.forward_ns = 1 : i64})
    attributes {placement.write_bandwidth = 1000 : i64} {
  return
}

// -----

// expected-error @+1 {{profile argument #0: placement.forward_ns must be a non-negative integer (nanoseconds), got -5 : i64}}
func.func @negative_time(%s0: tensor<16xi8> {placement.forward_ns = -5 : i64})
    attributes {placement.write_bandwidth = 1000 : i64} {
  return
}
