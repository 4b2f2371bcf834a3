// `hector compile --debug-info` prints every op's location with the stage's IR, inline, as
// `mlir-opt --mlir-print-debuginfo --mlir-print-local-scope` does; without it, no locations.
// hector-opt has MLIR's flag (locations as #loc aliases).

// RUN: hector compile %s --emit inter --debug-info | FileCheck %s --check-prefix=INTER
// RUN: hector compile %s --emit inter | FileCheck %s --check-prefix=PLAIN
// RUN: hector compile %s --emit intra --debug-info | FileCheck %s --check-prefix=INTRA
// RUN: hector-opt %s --mlir-print-debuginfo | FileCheck %s --check-prefix=OPT

// The ops are located at their lines in this file (the file is parsed under its own name).
// INTER: "hector_inter.gather_src"{{.*}} loc("{{.*}}debug-info.mlir":[[@LINE+18]]:8)
// INTER: "hector_inter.sum_to_dst"{{.*}} loc("{{.*}}debug-info.mlir":[[@LINE+18]]:8)

// hector-opt parses its input as MLIR's tools read stdin: the file is named "-".
// OPT: "hector_inter.gather_src"{{.*}} loc(#[[GATHER:loc[0-9]+]])
// OPT: #[[GATHER]] = loc("-":[[@LINE+13]]:8)

// PLAIN: "hector_inter.gather_src"
// PLAIN-NOT: loc("

// Lowered ops keep the location of the op they came from: the sum's traversal template (the
// gather folded into it) is at the sum's line.
// INTRA: "hector_intra.traversal_template"{{.*}} loc("{{.*}}debug-info.mlir":[[@LINE+7]]:8)

func.func @f(%g: !hector_inter.graph, %x: tensor<?x8xf32> {hector.kind = "node"}) -> tensor<?x8xf32> {
  // An edge per row of x's sources, then summed onto destinations.


  %0 = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  %1 = "hector_inter.sum_to_dst"(%g, %0) : (!hector_inter.graph, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %1 : tensor<?x8xf32>
}
