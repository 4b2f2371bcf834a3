// RUN: hector-opt %s --split-input-file -p placement-infer-unified | FileCheck %s
// RUN: hector-opt %s --split-input-file -p placement-infer-unified | hector-opt --split-input-file -p placement-infer-unified | FileCheck %s
// RUN: hector-opt %s --split-input-file -p placement-infer-unified | FileCheck %s --check-prefix=COUNT

// One case per rule of placement-infer-unified (docs/unified.md).
// The second RUN line checks that the pass is idempotent: its own output is a fixed point.
// Six transfers are inserted in all (the seventh is the explicit one of @explicit_transfer).
// COUNT-COUNT-7: placement.transfer
// COUNT-NOT: placement.transfer

// ---- rule 1: every unified operand GPU-affine → runs on the GPU, result in device memory,
// ---- unified operands read in place (no transfer) ------------------------------------------

// CHECK-LABEL: func.func @all_gpu_affine
// CHECK: %[[UX:.*]] = "placement.place"(%{{.*}}) {affinity = "gpu", space = "unified"}
// CHECK: %[[UY:.*]] = "placement.place"(%{{.*}}) {affinity = "gpu", space = "unified"}
// CHECK-NOT: placement.transfer
// CHECK: "hector_inter.add"(%[[UX]], %[[UY]]) {placement.result_space = "device", placement.run_on = "gpu"}
// CHECK-NEXT: return
func.func @all_gpu_affine(%x: tensor<?x16xf32>, %y: tensor<?x16xf32>) -> tensor<?x16xf32> {
  %ux = "placement.place"(%x) {space = "unified", affinity = "gpu"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %uy = "placement.place"(%y) {space = "unified", affinity = "gpu"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %0 = "hector_inter.add"(%ux, %uy) : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  return %0 : tensor<?x16xf32>
}

// -----

// ---- rule 1 with the graph (unplaced operands constrain nothing) and a GPU-affine unified
// ---- feature table next to device-resident weights: one gather, one typed linear on the GPU

// CHECK-LABEL: func.func @gather_unified_features
// CHECK: %[[UX:.*]] = "placement.place"
// CHECK: %[[W:.*]] = "placement.place"(%{{.*}}) {affinity = "none", space = "device"}
// CHECK-NOT: placement.transfer
// CHECK: %[[XS:.*]] = "hector_inter.gather_src"(%{{.*}}, %[[UX]]) {placement.result_space = "device", placement.run_on = "gpu"}
// CHECK: "hector_inter.typed_linear"(%{{.*}}, %[[XS]], %[[W]]) {placement.result_space = "device", placement.run_on = "gpu", slice = "etype"}
func.func @gather_unified_features(%g: !hector_inter.graph, %x: tensor<?x16xf32>, %w: tensor<3x16x8xf32>) -> tensor<?x8xf32> {
  %ux = "placement.place"(%x) {space = "unified", affinity = "gpu"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %dw = "placement.place"(%w) {space = "device", affinity = "none"} : (tensor<3x16x8xf32>) -> tensor<3x16x8xf32>
  %xs = "hector_inter.gather_src"(%g, %ux) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
  %m = "hector_inter.typed_linear"(%g, %xs, %dw) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<3x16x8xf32>) -> tensor<?x8xf32>
  return %m : tensor<?x8xf32>
}

// -----

// ---- rule 2: one host-affine unified operand is enough → runs on the host, result stays in
// ---- host memory, even next to a GPU-affine one ---------------------------------------------

// CHECK-LABEL: func.func @one_host_affine
// CHECK-NOT: placement.transfer
// CHECK: "hector_inter.add"(%{{.*}}, %{{.*}}) {placement.result_space = "pinned_host", placement.run_on = "host"}
func.func @one_host_affine(%x: tensor<?x16xf32>, %y: tensor<?x16xf32>) -> tensor<?x16xf32> {
  %ux = "placement.place"(%x) {space = "unified", affinity = "gpu"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %uy = "placement.place"(%y) {space = "unified", affinity = "host"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %0 = "hector_inter.add"(%ux, %uy) : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  return %0 : tensor<?x16xf32>
}

// -----

// ---- transfers: a GPU operator reading plain pinned host memory gets pinned_host → device;
// ---- a host operator reading device memory gets device → pinned_host; one transfer per value
// ---- and destination, shared by every consumer ------------------------------------------------

// CHECK-LABEL: func.func @transfers
// CHECK: %[[UX:.*]] = "placement.place"(%{{.*}}) {affinity = "gpu", space = "unified"}
// CHECK: %[[UH:.*]] = "placement.place"(%{{.*}}) {affinity = "host", space = "unified"}
// CHECK: %[[P:.*]] = "placement.place"(%{{.*}}) {affinity = "none", space = "pinned_host"}
// CHECK-NEXT: %[[PD:.*]] = "placement.transfer"(%[[P]]) {from = "pinned_host", to = "device"}
// CHECK-NEXT: %[[A:.*]] = "hector_inter.add"(%[[UX]], %[[PD]]) {placement.result_space = "device", placement.run_on = "gpu"}
// CHECK-NEXT: %[[AH:.*]] = "placement.transfer"(%[[A]]) {from = "device", to = "pinned_host"}
// CHECK-NEXT: "hector_inter.add"(%[[AH]], %[[UH]]) {placement.result_space = "pinned_host", placement.run_on = "host"}
// CHECK-NEXT: "hector_inter.add"(%[[UH]], %[[AH]]) {placement.result_space = "pinned_host", placement.run_on = "host"}
// CHECK-NEXT: return
func.func @transfers(%x: tensor<?x16xf32>, %h: tensor<?x16xf32>, %p: tensor<?x16xf32>) -> (tensor<?x16xf32>, tensor<?x16xf32>) {
  %ux = "placement.place"(%x) {space = "unified", affinity = "gpu"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %uh = "placement.place"(%h) {space = "unified", affinity = "host"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %pp = "placement.place"(%p) {space = "pinned_host", affinity = "none"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %a = "hector_inter.add"(%ux, %pp) : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  %b = "hector_inter.add"(%a, %uh) : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  %c = "hector_inter.add"(%uh, %a) : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  return %b, %c : tensor<?x16xf32>, tensor<?x16xf32>
}

// -----

// ---- rule 3, no unified operands: any device operand → GPU (pinned host operands moved);
// ---- only pinned host operands → host; results chain through -------------------------------

// CHECK-LABEL: func.func @no_unified
// CHECK: %[[D:.*]] = "placement.place"(%{{.*}}) {affinity = "none", space = "device"}
// CHECK: %[[P:.*]] = "placement.place"(%{{.*}}) {affinity = "none", space = "pinned_host"}
// CHECK-NEXT: %[[R:.*]] = arith.negf %[[P]] {placement.result_space = "pinned_host", placement.run_on = "host"}
// CHECK-NEXT: %[[RD:.*]] = "placement.transfer"(%[[R]]) {from = "pinned_host", to = "device"}
// CHECK-NEXT: "hector_inter.add"(%[[D]], %[[RD]]) {placement.result_space = "device", placement.run_on = "gpu"}
func.func @no_unified(%d: tensor<?x16xf32>, %p: tensor<?x16xf32>) -> tensor<?x16xf32> {
  %dd = "placement.place"(%d) {space = "device", affinity = "none"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %pp = "placement.place"(%p) {space = "pinned_host", affinity = "none"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %r = arith.negf %pp : tensor<?x16xf32>
  %s = "hector_inter.add"(%dd, %r) : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  return %s : tensor<?x16xf32>
}

// -----

// ---- a pin (placement.run_on set before the pass) decides where an op without unified
// ---- operands runs, and may agree with the unified rules; any op, upstream ones included ------------------------------------

// CHECK-LABEL: func.func @pinned
// CHECK: %[[D:.*]] = "placement.place"(%{{.*}}) {affinity = "none", space = "device"}
// CHECK-NEXT: %[[DH:.*]] = "placement.transfer"(%[[D]]) {from = "device", to = "pinned_host"}
// CHECK-NEXT: arith.negf %[[DH]] {placement.result_space = "pinned_host", placement.run_on = "host"}
// CHECK: arith.negf %{{.*}} {placement.result_space = "device", placement.run_on = "gpu"}
func.func @pinned(%d: tensor<?x16xf32>, %x: tensor<?x16xf32>) -> (tensor<?x16xf32>, tensor<?x16xf32>) {
  %dd = "placement.place"(%d) {space = "device", affinity = "none"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %r = arith.negf %dd {placement.run_on = "host"} : tensor<?x16xf32>
  %ux = "placement.place"(%x) {space = "unified", affinity = "gpu"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %s = arith.negf %ux {placement.run_on = "gpu"} : tensor<?x16xf32>
  return %r, %s : tensor<?x16xf32>, tensor<?x16xf32>
}

// -----

// ---- placing a computed value in another space inserts the transfer in front of the place;
// ---- re-declaring the affinity of a unified value moves nothing; activation decisions
// ---- (keep/offload/prefetch/recompute) pass the placement through ----------------------------

// CHECK-LABEL: func.func @place_computed
// CHECK: %[[A:.*]] = "hector_inter.add"(%{{.*}}, %{{.*}}) {placement.result_space = "device", placement.run_on = "gpu"}
// CHECK-NEXT: %[[K:.*]] = "placement.keep"(%[[A]]) {scope = 0 : i64}
// CHECK-NEXT: %[[T:.*]] = "placement.transfer"(%[[K]]) {from = "device", to = "unified"}
// CHECK-NEXT: %[[U:.*]] = "placement.place"(%[[T]]) {affinity = "host", space = "unified"}
// CHECK-NEXT: %[[U2:.*]] = "placement.place"(%[[U]]) {affinity = "gpu", space = "unified"}
// CHECK-NEXT: arith.negf %[[U2]] {placement.result_space = "device", placement.run_on = "gpu"}
func.func @place_computed(%x: tensor<?x16xf32>) -> tensor<?x16xf32> {
  %ux = "placement.place"(%x) {space = "unified", affinity = "gpu"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %a = "hector_inter.add"(%ux, %ux) : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  %k = "placement.keep"(%a) {scope = 0 : i64} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %u = "placement.place"(%k) {space = "unified", affinity = "host"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %u2 = "placement.place"(%u) {space = "unified", affinity = "gpu"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %r = arith.negf %u2 : tensor<?x16xf32>
  return %r : tensor<?x16xf32>
}

// -----

// ---- an explicit transfer is where its value lives afterwards; a prefetched SSD value can be
// ---- read once it is back in memory ---------------------------------------------------------

// CHECK-LABEL: func.func @explicit_transfer
// CHECK: %[[T:.*]] = "placement.transfer"(%{{.*}}) {from = "ssd", to = "pinned_host"}
// CHECK-NEXT: %[[TD:.*]] = "placement.transfer"(%[[T]]) {from = "pinned_host", to = "device"}
// CHECK-NEXT: "hector_inter.add"(%{{.*}}, %[[TD]]) {placement.result_space = "device", placement.run_on = "gpu"}
func.func @explicit_transfer(%x: tensor<?x16xf32>, %s: tensor<?x16xf32>) -> tensor<?x16xf32> {
  %ux = "placement.place"(%x) {space = "unified", affinity = "gpu"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %ss = "placement.place"(%s) {space = "ssd", affinity = "none"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %t = "placement.transfer"(%ss) {from = "ssd", to = "pinned_host"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %a = "hector_inter.add"(%ux, %t) : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  return %a : tensor<?x16xf32>
}

// -----

// ---- no placement anywhere: the function is left exactly as it was ----------------------------

// CHECK-LABEL: func.func @unplaced
// CHECK-NEXT: "hector_inter.add"(%{{.*}}, %{{.*}}) : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
// CHECK-NEXT: return
func.func @unplaced(%x: tensor<?x16xf32>, %y: tensor<?x16xf32>) -> tensor<?x16xf32> {
  %0 = "hector_inter.add"(%x, %y) : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  return %0 : tensor<?x16xf32>
}
