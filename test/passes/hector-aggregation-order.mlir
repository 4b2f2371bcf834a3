// RUN: hector-opt %s --split-input-file -p hector-aggregation-order | FileCheck %s --check-prefix=UNKNOWN
// RUN: hector-opt %s --split-input-file -p 'hector-aggregation-order{dst_ratio=0.1}' | FileCheck %s --check-prefix=DENSE
// RUN: hector-opt %s --split-input-file -p 'hector-aggregation-order{dst_ratio=0.95}' | FileCheck %s --check-prefix=SPARSE
// RUN: hector-opt %s --split-input-file -p 'hector-aggregation-order{dst_ratio=0.8}' | FileCheck %s --check-prefix=INFER
// RUN: hector-opt %s --split-input-file -p 'hector-aggregation-order{dst_ratio=0.8 training=true}' | FileCheck %s --check-prefix=TRAIN
// RUN: hector-opt %s --split-input-file -p 'hector-aggregation-order{dst_ratio=0.8}' | FileCheck %s --check-prefix=SPLIT
// RUN: hector-opt %s --split-input-file -p 'hector-aggregation-order{order=aggregate-first dst_ratio=1.0}' | FileCheck %s --check-prefix=FORCE-AGG
// RUN: hector-opt %s --split-input-file -p 'hector-aggregation-order{order=transform-first dst_ratio=0.01}' | FileCheck %s --check-prefix=FORCE-TF

// RGCN's message passing, `Σ_r Σ_{j ∈ N_r(i)} (1/c_{i,r}) W_r h_j` (K = N = 64). Without graph
// statistics the IR stays transform-then-aggregate (one scatter-GEMM per edge after fusion).
// UNKNOWN-LABEL: func.func @rgcn
// UNKNOWN-SAME: hector.aggregation_order = ["transform-first"]
// UNKNOWN-SAME: hector.aggregation_widths = [64, 64]
// UNKNOWN-NOT: dst_compact
// UNKNOWN: "hector_inter.typed_linear"(%{{.*}}) {slice = "etype"}
// UNKNOWN: "hector_inter.sum_to_dst"

// A knowledge graph with ten triples per (entity, relation) (D/E = 0.1): the scaled source rows
// are summed per (destination, relation) pair first, one GEMM runs per pair, and the pairs are
// summed per node.
// DENSE-LABEL: func.func @rgcn
// DENSE-SAME: hector.aggregation_order = ["aggregate-first"]
// DENSE: %[[XS:.*]] = "hector_inter.gather_src"(%[[G:[^,]*]], %[[X:[^)]*]])
// DENSE: %[[N:.*]] = "hector_inter.degree_norm"(%[[G]]) {by = "dst_etype"}
// DENSE-NEXT: %[[S:.*]] = "hector_inter.scale"(%[[XS]], %[[N]]) : (tensor<?x64xf32>, tensor<?x1xf32>)
// DENSE-NEXT: %[[P:.*]] = "hector_inter.sum_to_dst_compact"(%[[G]], %[[S]]) : (!hector_inter.graph, tensor<?x64xf32>) -> tensor<?x64xf32>
// DENSE-NEXT: %[[H:.*]] = "hector_inter.typed_linear"(%[[G]], %[[P]], %{{.*}}) {slice = "etype"}
// DENSE-NEXT: %[[A:.*]] = "hector_inter.sum_dst_compact_to_dst"(%[[G]], %[[H]])
// DENSE-NOT: "hector_inter.sum_to_dst"
// DENSE: "hector_inter.add"(%[[A]],

// Almost one triple per pair (D/E = 0.95): aggregating first would add a pass over the edges
// and save nothing.
// SPARSE-LABEL: func.func @rgcn
// SPARSE-SAME: hector.aggregation_order = ["transform-first"]
// SPARSE-NOT: dst_compact

// D/E = 0.8 at K = N = 64: not worth it for inference (the scatter of E scaled rows into the
// pairs costs as much as the GEMM rows it saves), but the backward program's two GEMMs per edge
// (input and weight gradient) tip training to aggregate first.
// INFER-LABEL: func.func @rgcn
// INFER-SAME: hector.aggregation_order = ["transform-first"]
// TRAIN-LABEL: func.func @rgcn
// TRAIN-SAME: hector.aggregation_order = ["aggregate-first"]
// TRAIN: "hector_inter.sum_to_dst_compact"

// A forced order ignores the statistics.
// FORCE-AGG-LABEL: func.func @rgcn
// FORCE-AGG-SAME: hector.aggregation_order = ["aggregate-first"]
// FORCE-AGG: "hector_inter.sum_to_dst_compact"
// FORCE-TF-LABEL: func.func @rgcn
// FORCE-TF-SAME: hector.aggregation_order = ["transform-first"]
// FORCE-TF-NOT: dst_compact
func.func @rgcn(%g: !hector_inter.graph, %x: tensor<?x64xf32> {hector.kind = "node"}, %w: tensor<3x64x64xf32> {hector.kind = "weight"}, %root: tensor<64x64xf32> {hector.kind = "weight"}) -> tensor<?x64xf32> {
  %xs = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x64xf32>) -> tensor<?x64xf32>
  %m = "hector_inter.typed_linear"(%g, %xs, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x64xf32>, tensor<3x64x64xf32>) -> tensor<?x64xf32>
  %n = "hector_inter.degree_norm"(%g) {by = "dst_etype"} : (!hector_inter.graph) -> tensor<?x1xf32>
  %sm = "hector_inter.scale"(%m, %n) : (tensor<?x64xf32>, tensor<?x1xf32>) -> tensor<?x64xf32>
  %agg = "hector_inter.sum_to_dst"(%g, %sm) : (!hector_inter.graph, tensor<?x64xf32>) -> tensor<?x64xf32>
  %self = "hector_inter.typed_linear"(%g, %x, %root) {slice = "none"} : (!hector_inter.graph, tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %out = "hector_inter.add"(%agg, %self) : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
  return %out : tensor<?x64xf32>
}

// -----

// Two layers in one program, decided per layer: at D/E = 0.8 the first (K = 4 → N = 64: its
// scatter-GEMM writes 64 columns per edge, the pair sums read only 4) aggregates first, the
// second (K = N = 64: summing 64 columns per edge into the pairs costs as much as the GEMM rows
// it saves) transforms first. The second has no scale (a plain sum) and a shared weight; the
// first a learned per-edge factor.
// DENSE-LABEL: func.func @two_layers
// DENSE-SAME: hector.aggregation_order = ["aggregate-first", "aggregate-first"]
// DENSE-SAME: hector.aggregation_widths = [4, 64, 64, 64]
// FORCE-TF-LABEL: func.func @two_layers
// FORCE-TF-SAME: hector.aggregation_order = ["transform-first", "transform-first"]
// SPLIT-LABEL: func.func @two_layers
// SPLIT-SAME: hector.aggregation_order = ["aggregate-first", "transform-first"]
// SPLIT: %[[S:.*]] = "hector_inter.scale"(%{{.*}}, %{{.*}}) : (tensor<?x4xf32>, tensor<?x1xf32>)
// SPLIT-NEXT: %[[P:.*]] = "hector_inter.sum_to_dst_compact"(%{{.*}}, %[[S]]) : (!hector_inter.graph, tensor<?x4xf32>)
// SPLIT-NEXT: "hector_inter.typed_linear"(%{{.*}}, %[[P]], %{{.*}}) {slice = "etype"} : (!hector_inter.graph, tensor<?x4xf32>, tensor<3x4x64xf32>)
// SPLIT-NEXT: "hector_inter.sum_dst_compact_to_dst"
// SPLIT: "hector_inter.typed_linear"(%{{.*}}) {slice = "none"} : (!hector_inter.graph, tensor<?x64xf32>, tensor<64x64xf32>)
// SPLIT-NEXT: "hector_inter.sum_to_dst"
func.func @two_layers(%g: !hector_inter.graph, %x: tensor<?x4xf32> {hector.kind = "node"}, %w1: tensor<3x4x64xf32> {hector.kind = "weight"}, %w2: tensor<64x64xf32> {hector.kind = "weight"}, %a: tensor<?x1xf32> {hector.kind = "edge"}) -> tensor<?x64xf32> {
  %xs = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  %m = "hector_inter.typed_linear"(%g, %xs, %w1) {slice = "etype"} : (!hector_inter.graph, tensor<?x4xf32>, tensor<3x4x64xf32>) -> tensor<?x64xf32>
  %sm = "hector_inter.scale"(%m, %a) : (tensor<?x64xf32>, tensor<?x1xf32>) -> tensor<?x64xf32>
  %h = "hector_inter.sum_to_dst"(%g, %sm) : (!hector_inter.graph, tensor<?x64xf32>) -> tensor<?x64xf32>
  %r = "hector_inter.unary"(%h) {fn = "relu", slope = 0.0 : f32} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %xs2 = "hector_inter.gather_src"(%g, %r) : (!hector_inter.graph, tensor<?x64xf32>) -> tensor<?x64xf32>
  %m2 = "hector_inter.typed_linear"(%g, %xs2, %w2) {slice = "none"} : (!hector_inter.graph, tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %out = "hector_inter.sum_to_dst"(%g, %m2) : (!hector_inter.graph, tensor<?x64xf32>) -> tensor<?x64xf32>
  return %out : tensor<?x64xf32>
}

// -----

// Not linear messages: the product is also returned (it is needed per edge anyway), and a
// node-typed linear. Nothing moves and no order is recorded.
// DENSE-LABEL: func.func @not_messages
// DENSE-NOT: hector.aggregation_order
// DENSE-NOT: dst_compact
// DENSE: return
func.func @not_messages(%g: !hector_inter.graph, %x: tensor<?x4xf32> {hector.kind = "node"}, %w: tensor<3x4x4xf32> {hector.kind = "weight"}, %wn: tensor<2x4x4xf32> {hector.kind = "weight"}) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>) {
  %xs = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  %m = "hector_inter.typed_linear"(%g, %xs, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x4xf32>, tensor<3x4x4xf32>) -> tensor<?x4xf32>
  %s1 = "hector_inter.sum_to_dst"(%g, %m) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  %p = "hector_inter.typed_linear"(%g, %x, %wn) {slice = "ntype"} : (!hector_inter.graph, tensor<?x4xf32>, tensor<2x4x4xf32>) -> tensor<?x4xf32>
  %pe = "hector_inter.gather_src"(%g, %p) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  %s2 = "hector_inter.sum_to_dst"(%g, %pe) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %s1, %m, %s2 : tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>
}
