// The graph's sizes are synthetic:mag at scale 0.01 (N = 19397, E = 422220, C = D = 46125).
// RUN: hector-opt %S/Inputs/plan-saved-rgat.mlir -p 'hector-autodiff, hector-fuse, convert-hector-inter-to-intra, placement-plan-saved{memory_budget=0.5 nodes=19397 edges=422220 compact=46125 dst_compact=46125}' | FileCheck %s --check-prefix=RGAT-TIGHT
// RUN: hector-opt %S/Inputs/plan-saved-rgat.mlir -p 'hector-autodiff, hector-fuse, convert-hector-inter-to-intra, placement-plan-saved{memory_budget=0.9 nodes=19397 edges=422220 compact=46125 dst_compact=46125}' | FileCheck %s --check-prefix=RGAT-LOOSE
// RUN: hector-opt %S/Inputs/plan-saved-hgt.mlir -p 'hector-autodiff, hector-fuse, convert-hector-inter-to-intra, placement-plan-saved{memory_budget=0.5 nodes=19397 edges=422220 compact=46125 dst_compact=46125}' | FileCheck %s --check-prefix=HGT-TIGHT
// RUN: hector-opt %S/Inputs/plan-saved-hgt.mlir -p 'hector-autodiff, hector-fuse, convert-hector-inter-to-intra, placement-plan-saved{memory_budget=0.9 nodes=19397 edges=422220 compact=46125 dst_compact=46125}' | FileCheck %s --check-prefix=HGT-LOOSE
// RUN: hector-opt %s -p 'hector-autodiff, convert-hector-inter-to-intra, placement-plan-saved{memory_budget=0.5 nodes=100 edges=1000 compact=500}' | FileCheck %s --check-prefix=RECOMPUTE
// RUN: hector-opt %s -p 'hector-autodiff, convert-hector-inter-to-intra, placement-plan-saved{memory_budget=0.5 nodes=100 edges=1000 compact=500 recompute=false}' | FileCheck %s --check-prefix=NORECOMPUTE

// RGAT saves the attention (8*E bytes: 2 heads), the pre-activation logits (8*E), the
// compact transformed rows (64*C) and a folded weight (1 KiB). The planner weighs each move by
// the step's modeled peak (placement.keep_all_peak_bytes -> placement.peak_bytes: the bytes
// alive at the worst kernel of forward and backward, passes/saved_liveness.py). Half of
// keep-all's 9.7 MB: both edge-wise values go to the store; the compact rows and the weight
// stay. Each offload is written once its value is complete, and its write may overlap the
// kernels after its last use for as long as the modeled peak allows (placement.write_lag: the
// peak is in the backward, so here to the end of the forward); it is prefetched ahead of its
// first use in the backward (as early as the peak allows); neither crosses the ABI any more
// (placement.dropped).
// RGAT-TIGHT-LABEL: func.func @rgat_layer_train(
// RGAT-TIGHT-SAME: placement.budget_bytes = 4854272 : i64, placement.dropped = [0, 2], placement.keep_all_peak_bytes = [[KEEPALL:[0-9]+]] : i64, placement.kept_bytes = 2953024 : i64, placement.peak_bytes = {{[0-9]+}} : i64, placement.saved_bytes = 9708544 : i64
// RGAT-TIGHT-DAG: "placement.keep"(%{{.*}}) {placement.bytes = "1024", scope = 3 : i64}
// RGAT-TIGHT-DAG: "placement.offload"(%{{.*}}) {placement.bytes = "8*E", placement.write_lag = 64 : i64, scope = 2 : i64, target = "ssd"}
// RGAT-TIGHT-DAG: "placement.keep"(%{{.*}}) {placement.bytes = "64*C", scope = 1 : i64}
// RGAT-TIGHT-DAG: "placement.offload"(%{{.*}}) {placement.bytes = "8*E", placement.write_lag = 64 : i64, scope = 0 : i64, target = "ssd"}
// RGAT-TIGHT: return
// RGAT-TIGHT-LABEL: func.func @rgat_layer_backward(
// RGAT-TIGHT-SAME: placement.dropped = [0, 2]
// RGAT-TIGHT-DAG: "placement.prefetch"(%{{.*}}) {ahead = {{[0-9]+}} : i64, placement.bytes = "8*E", scope = 0 : i64}
// RGAT-TIGHT-DAG: "placement.prefetch"(%{{.*}}) {ahead = {{[0-9]+}} : i64, placement.bytes = "8*E", scope = 2 : i64}

// At 90% only one edge-wise value has to move: the logits, the move that lowers the modeled
// peak most; moving more would not lower it by min_gain (10%) each.
// RGAT-LOOSE-LABEL: func.func @rgat_layer_train(
// RGAT-LOOSE-SAME: placement.dropped = [2], placement.keep_all_peak_bytes = {{[0-9]+}} : i64, placement.kept_bytes = 6330784 : i64
// RGAT-LOOSE-DAG: "placement.keep"(%{{.*}}) {placement.bytes = "8*E", scope = 0 : i64}
// RGAT-LOOSE-DAG: "placement.offload"(%{{.*}}) {placement.bytes = "8*E", placement.write_lag = 64 : i64, scope = 2 : i64, target = "ssd"}
// RGAT-LOOSE-LABEL: func.func @rgat_layer_backward(
// RGAT-LOOSE: "placement.prefetch"(%{{.*}}) {ahead = {{[0-9]+}} : i64, placement.bytes = "8*E", scope = 2 : i64}
// RGAT-LOOSE-NOT: placement.prefetch

// HGT saves node-wise keys, queries and values (64*N each), compact per-relation keys and
// values (64*C), the attention (8*E), the aggregate (64*N) and two 8 KiB weights. At half the
// saved bytes the compact keys and values and the node-wise value 0 move — the values alive at
// the modeled peak; the attention (8*E), which largest-first would move, stays.
// HGT-TIGHT-LABEL: func.func @hgt_layer_train(
// HGT-TIGHT-SAME: placement.budget_bytes = 7131888 : i64, placement.dropped = [0, 4, 5], placement.keep_all_peak_bytes = {{[0-9]+}} : i64, placement.kept_bytes = 7118368 : i64, placement.peak_bytes = {{[0-9]+}} : i64, placement.saved_bytes = 14263776 : i64
// HGT-TIGHT-DAG: "placement.offload"(%{{.*}}) {placement.bytes = "64*C", placement.write_lag = 128 : i64, scope = 5 : i64, target = "ssd"}
// HGT-TIGHT-DAG: "placement.offload"(%{{.*}}) {placement.bytes = "64*C", placement.write_lag = 128 : i64, scope = 4 : i64, target = "ssd"}
// HGT-TIGHT-DAG: "placement.keep"(%{{.*}}) {placement.bytes = "8*E", scope = 3 : i64}
// HGT-TIGHT-DAG: "placement.offload"(%{{.*}}) {placement.bytes = "64*N", placement.write_lag = 128 : i64, scope = 0 : i64, target = "ssd"}
// HGT-TIGHT-DAG: "placement.keep"(%{{.*}}) {placement.bytes = "8192", scope = 8 : i64}
// HGT-TIGHT-LABEL: func.func @hgt_layer_backward(
// HGT-TIGHT-DAG: "placement.prefetch"(%{{.*}}) {ahead = {{[0-9]+}} : i64, placement.bytes = "64*C", scope = 4 : i64}
// HGT-TIGHT-DAG: "placement.prefetch"(%{{.*}}) {ahead = {{[0-9]+}} : i64, placement.bytes = "64*N", scope = 0 : i64}
// HGT-TIGHT-DAG: "placement.prefetch"(%{{.*}}) {ahead = {{[0-9]+}} : i64, placement.bytes = "64*C", scope = 5 : i64}

// At 90% the two compact values move.
// HGT-LOOSE-LABEL: func.func @hgt_layer_train(
// HGT-LOOSE-SAME: placement.dropped = [4, 5], placement.keep_all_peak_bytes = {{[0-9]+}} : i64, placement.kept_bytes = 8359776 : i64
// HGT-LOOSE-DAG: "placement.keep"(%{{.*}}) {placement.bytes = "64*N", scope = 0 : i64}
// HGT-LOOSE-DAG: "placement.offload"(%{{.*}}) {placement.bytes = "64*C", placement.write_lag = 128 : i64, scope = 4 : i64, target = "ssd"}
// HGT-LOOSE-DAG: "placement.offload"(%{{.*}}) {placement.bytes = "64*C", placement.write_lag = 128 : i64, scope = 5 : i64, target = "ssd"}
// HGT-LOOSE-LABEL: func.func @hgt_layer_backward(
// HGT-LOOSE-DAG: "placement.prefetch"(%{{.*}}) {ahead = {{[0-9]+}} : i64, placement.bytes = "64*C", scope = 4 : i64}
// HGT-LOOSE-DAG: "placement.prefetch"(%{{.*}}) {ahead = {{[0-9]+}} : i64, placement.bytes = "64*C", scope = 5 : i64}

// tanh's output is saved (its derivative and the weight gradient's gathered rows read it),
// but one elementwise pass over the input rebuilds it: the backward recomputes it with a copy
// of the forward's traversal, and the value no longer crosses the ABI.
// RECOMPUTE-LABEL: func.func @layer_train(
// RECOMPUTE-SAME: placement.dropped = [0], {{.*}}placement.kept_bytes = 0 : i64, {{.*}}placement.saved_bytes = 800 : i64
// RECOMPUTE: "hector_intra.traversal_template"(%{{[a-z0-9_]+}}, %[[OUT:[a-z0-9_]+]]) {{.*}}fn = "tanh",
// RECOMPUTE: "placement.recompute"(%[[OUT]]) {placement.bytes = "8*N", scope = 0 : i64}
// RECOMPUTE-LABEL: func.func @layer_backward(
// RECOMPUTE: "hector_intra.traversal_template"(%{{[a-z0-9_]+}}, %[[T:[a-z0-9_]+]]) {{.*}}fn = "tanh",
// RECOMPUTE-NEXT: "placement.recompute"(%[[T]]) {placement.bytes = "8*N", scope = 0 : i64}
// RECOMPUTE: "hector_intra.traversal_template"(%{{[a-z0-9_]+}}, %[[T]], %{{[a-z0-9_]+}}) {{.*}}fn = "tanh_grad"
// RECOMPUTE: memref.dealloc %[[T]]

// Without recomputation the same value is offloaded.
// NORECOMPUTE-LABEL: func.func @layer_train(
// NORECOMPUTE: "placement.offload"(%{{.*}}) {placement.bytes = "8*N", placement.write_lag = 16 : i64, scope = 0 : i64, target = "ssd"}
func.func @layer(%g: !hector_inter.graph, %x: tensor<?x2xf32> {hector.kind = "node"}, %w: tensor<3x2x2xf32> {hector.kind = "weight"}) -> tensor<?x2xf32> {
  %t = "hector_inter.unary"(%x) {fn = "tanh", slope = 0.0 : f32} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %ts = "hector_inter.gather_src"(%g, %t) : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
  %m = "hector_inter.typed_linear"(%g, %ts, %w) {slice = "etype"} : (!hector_inter.graph, tensor<?x2xf32>, tensor<3x2x2xf32>) -> tensor<?x2xf32>
  %o = "hector_inter.sum_to_dst"(%g, %m) : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
  return %o : tensor<?x2xf32>
}
