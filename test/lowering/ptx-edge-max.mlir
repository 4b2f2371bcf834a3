// RUN: hector compile %s --emit ptx | FileCheck %s

// edge_max and its gradient on the GPU. Each group's maximum is an atomic compare-and-swap
// loop over the f32 bits (PTX has no floating-point atomic max); the gradient marks the edges
// holding their group's maximum (`setp.eq.f32`, then 1 or 0), sums the gradient and the
// holders per group atomically, divides, and reads the share back onto the holders.

// CHECK: .visible .entry maximum_{{[0-9]+}}_traversal(
// CHECK: atom.{{.*}}global.cas.b32
// CHECK: .visible .entry maximum_grad_{{[0-9]+}}_traversal(
// CHECK: setp.eq.f32
// CHECK-NEXT: selp.f32 {{.*}}, 0f3F800000, 0f00000000,
// CHECK: .visible .entry maximum_grad_{{[0-9]+}}_traversal(
// CHECK: atom.global.add.f32
// CHECK: div.rn.f32

func.func @maximum(%g: !hector_inter.graph, %x: tensor<?x8xf32> {hector.kind = "edge"}) -> tensor<?x8xf32> {
  %y = "hector_inter.edge_max"(%g, %x) {by = "dst"} : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

func.func @maximum_grad(%g: !hector_inter.graph, %x: tensor<?x8xf32> {hector.kind = "edge"}, %y: tensor<?x8xf32> {hector.kind = "edge"}, %dy: tensor<?x8xf32> {hector.kind = "edge"}) -> tensor<?x8xf32> {
  %dx = "hector_inter.edge_max_grad"(%g, %x, %y, %dy) {by = "dst_etype"} : (!hector_inter.graph, tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %dx : tensor<?x8xf32>
}
