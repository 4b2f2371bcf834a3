// RUN: hector-opt %s --split-input-file -p hector-compact-materialization | FileCheck %s --check-prefix=INFER
// RUN: hector-opt %s --split-input-file -p 'hector-compact-materialization{training=true}' | FileCheck %s --check-prefix=TRAIN

// Attention-weighted messages (HGT's values): typed linear → per-edge scale → sum. Inference
// keeps them per edge (hector-fuse makes one scatter-GEMM that stores nothing per edge). In
// training the scale factor needs a gradient, so autodiff saves the per-edge product: compact
// rows are the smaller thing to save.
// INFER-LABEL: func.func @weighted_messages
// INFER-NOT: compact
// INFER: "hector_inter.gather_src"
// TRAIN-LABEL: func.func @weighted_messages
// TRAIN: %[[C:.*]] = "hector_inter.compact_gather_src"
// TRAIN-NEXT: %[[V:.*]] = "hector_inter.typed_linear"(%{{.*}}, %[[C]], %{{.*}}) {slice = "etype"}
// TRAIN-NEXT: %[[E:.*]] = "hector_inter.expand_compact"(%{{.*}}, %[[V]])
// TRAIN-NEXT: "hector_inter.scale"(%[[E]], %{{.*}})
func.func @weighted_messages(%g: !hector_inter.graph, %x: tensor<?x4xf32> {hector.kind = "node"}, %w: tensor<3x4x4xf32> {hector.kind = "weight"}, %a: tensor<?x1xf32> {hector.kind = "edge"}) -> tensor<?x4xf32> {
  %xs = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  %v = "hector_inter.typed_linear"(%g, %xs, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x4xf32>, tensor<3x4x4xf32>) -> tensor<?x4xf32>
  %m = "hector_inter.scale"(%v, %a) : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %s = "hector_inter.sum_to_dst"(%g, %m) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %s : tensor<?x4xf32>
}

// -----

// RGCN's messages are scaled by a degree norm, which needs no gradient: nothing per edge is
// saved, so even in training the chain stays a scatter-GEMM.
// TRAIN-LABEL: func.func @normalized_messages
// TRAIN-NOT: compact
// TRAIN: "hector_inter.gather_src"
func.func @normalized_messages(%g: !hector_inter.graph, %x: tensor<?x4xf32> {hector.kind = "node"}, %w: tensor<3x4x4xf32> {hector.kind = "weight"}) -> tensor<?x4xf32> {
  %xs = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  %v = "hector_inter.typed_linear"(%g, %xs, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x4xf32>, tensor<3x4x4xf32>) -> tensor<?x4xf32>
  %n = "hector_inter.degree_norm"(%g) {by = "dst_etype"} : (!hector_inter.graph) -> tensor<?x1xf32>
  %m = "hector_inter.scale"(%v, %n) : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %s = "hector_inter.sum_to_dst"(%g, %m) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %s : tensor<?x4xf32>
}
