// RUN: not hector-opt %s -p 'hector-autodiff, placement-plan-saved{memory_budget=0.5 nodes=10 edges=20 compact=5}' 2>&1 | FileCheck %s --check-prefix=TENSORS
// RUN: not hector-opt %s -p 'hector-autodiff, convert-hector-inter-to-intra, placement-plan-saved{memory_budget=0.5}' 2>&1 | FileCheck %s --check-prefix=SIZES
// RUN: not hector-opt %s -p 'hector-autodiff, convert-hector-inter-to-intra, placement-plan-saved{memory_budget=0.5 nodes=10 edges=20 compact=5}, placement-plan-saved{memory_budget=0.5 nodes=10 edges=20 compact=5}' 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not hector-opt %s -p 'placement-plan-saved{memory_budget=-2}' 2>&1 | FileCheck %s --check-prefix=BUDGET
// RUN: not hector-opt %S/Inputs/plan-saved-orphan.mlir -p 'placement-plan-saved{memory_budget=0.5 nodes=10 edges=20 compact=5}' 2>&1 | FileCheck %s --check-prefix=ORPHAN

// Planning needs the memref form, where saved values are output arguments with a size.
// TENSORS: placement-plan-saved-invalid.mlir:[[# @LINE + 8]]:1: error: placement-plan-saved runs on the hector_intra form of a training program (after convert-hector-inter-to-intra); this function still takes tensors

// A fractional budget is weighed at the graph's sizes.
// SIZES: placement-plan-saved-invalid.mlir:[[# @LINE + 5]]:1: error: placement-plan-saved needs the graph's sizes (nodes=, edges=, compact=, dst_compact=) to weigh the saved values against a budget

// TWICE: error: placement-plan-saved: this training program is already planned
// BUDGET: pass 'placement-plan-saved', option 'memory_budget': must be at least 0, got -2.0
// ORPHAN: plan-saved-orphan.mlir:3:1: error: placement-plan-saved: @layer_train has no @layer_backward to read what it saves
func.func @layer(%g: !hector_inter.graph, %x: tensor<?x2xf32> {hector.kind = "node"}, %w: tensor<3x2x2xf32> {hector.kind = "weight"}) -> tensor<?x2xf32> {
  %t = "hector_inter.unary"(%x) {fn = "tanh", slope = 0.0 : f32} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %ts = "hector_inter.gather_src"(%g, %t) : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
  %m = "hector_inter.typed_linear"(%g, %ts, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x2xf32>, tensor<3x2x2xf32>) -> tensor<?x2xf32>
  %o = "hector_inter.sum_to_dst"(%g, %m) : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
  return %o : tensor<?x2xf32>
}
