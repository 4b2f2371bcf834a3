// RUN: hector-opt %s --split-input-file --verify-diagnostics -p convert-placement-to-runtime

// Placement ops the planner did not write (no placement.dropped on the function) are refused.
// expected-error @+1 {{convert-placement-to-runtime lowers the decisions of placement-plan-saved; this function's placement ops are not a plan of its saved values (no placement.dropped)}}
func.func @unplanned(%x: memref<?x2xf32>) {
  %0 = "placement.offload"(%x) {scope = 0 : i64, target = "ssd"} : (memref<?x2xf32>) -> memref<?x2xf32>
  return
}
