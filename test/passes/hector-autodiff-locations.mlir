// RUN: hector-opt %s -p hector-autodiff --mlir-print-debuginfo | FileCheck %s

// The generated functions carry the forward function's location, and every backward op the
// location of the forward op whose adjoint it is (a re-emitted gather, its own; an accumulating
// add, the op whose rule added the gradient), so a diagnostic raised on the backward program
// points at the user's line. Saved values and result adjoints are located at their values.
// CHECK-LABEL: func.func @layer(
// CHECK: "hector_inter.gather_src"{{.*}} loc(#[[GS:loc[0-9]*]])
// CHECK: "hector_inter.typed_linear"{{.*}} loc(#[[TL:loc[0-9]*]])
// CHECK: "hector_inter.unary"{{.*}} loc(#[[UN:loc[0-9]*]])
// CHECK: "hector_inter.sum_to_dst"{{.*}} loc(#[[SD:loc[0-9]*]])
// CHECK: "hector_inter.add"{{.*}} loc(#[[ADD:loc[0-9]*]])
// CHECK: return {{.*}} loc(#[[RET:loc[0-9]*]])
// CHECK: } loc(#[[FN:loc[0-9]*]])
// CHECK-LABEL: func.func @layer_train(
// CHECK-SAME: loc("model.py":10:0)
// CHECK-NEXT: "hector_inter.gather_src"{{.*}} loc(#[[GS]])
// CHECK-NEXT: "hector_inter.typed_linear"{{.*}} loc(#[[TL]])
// CHECK-NEXT: "hector_inter.unary"{{.*}} loc(#[[UN]])
// CHECK-NEXT: "hector_inter.sum_to_dst"{{.*}} loc(#[[SD]])
// CHECK-NEXT: "hector_inter.add"{{.*}} loc(#[[ADD]])
// CHECK-NEXT: return {{.*}} loc(#[[RET]])
// CHECK-NEXT: } loc(#[[FN]])
// CHECK-LABEL: func.func @layer_backward(
// CHECK-SAME: %{{[^:]*}}: !hector_inter.graph loc("model.py":10:0)
// CHECK-SAME: {hector.kind = "edge"} loc("model.py":13:4), %{{[^:]*}}: tensor<?x4xf32> {hector.kind = "node"} loc("model.py":15:4))
// CHECK-NEXT: "hector_inter.gather_dst"{{.*}} loc(#[[SD]])
// CHECK-NEXT: "hector_inter.unary_grad"{{.*}} loc(#[[UN]])
// CHECK-NEXT: "hector_inter.typed_linear_transposed"{{.*}} loc(#[[TL]])
// CHECK-NEXT: "hector_inter.gather_src"{{.*}} loc(#[[GS]])
// CHECK-NEXT: "hector_inter.typed_linear_weight_grad"{{.*}} loc(#[[TL]])
// CHECK-NEXT: "hector_inter.sum_to_src"{{.*}} loc(#[[GS]])
// CHECK-NEXT: "hector_inter.add"{{.*}} loc(#[[GS]])
// CHECK-NEXT: return {{.*}} loc(#[[RET]])
// CHECK-NEXT: } loc(#[[FN]])
// CHECK-DAG: #[[FN]] = loc("model.py":9:0)
// CHECK-DAG: #[[GS]] = loc("model.py":11:4)
// CHECK-DAG: #[[TL]] = loc("model.py":12:4)
// CHECK-DAG: #[[RET]] = loc("model.py":16:4)
func.func @layer(%g: !hector_inter.graph loc("model.py":10:0), %x: tensor<?x4xf32> {hector.kind = "node"} loc("model.py":10:1), %w: tensor<4x4xf32> {hector.kind = "weight"} loc("model.py":10:2)) -> tensor<?x4xf32> {
  %xs = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32> loc("model.py":11:4)
  %m = "hector_inter.typed_linear"(%g, %xs, %w) {slice = "none"} : (!hector_inter.graph, tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32> loc("model.py":12:4)
  %t = "hector_inter.unary"(%m) {fn = "tanh", slope = 0.0 : f32} : (tensor<?x4xf32>) -> tensor<?x4xf32> loc("model.py":13:4)
  %o = "hector_inter.sum_to_dst"(%g, %t) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32> loc("model.py":14:4)
  %r = "hector_inter.add"(%o, %x) : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32> loc("model.py":15:4)
  return %r : tensor<?x4xf32> loc("model.py":16:4)
} loc("model.py":9:0)
