// RUN: hector-opt %s --split-input-file -p convert-hector-intra-to-gpu | FileCheck %s
// RUN: hector-opt %s --split-input-file -p convert-hector-intra-to-gpu | FileCheck %s --check-prefix=KERNEL
// RUN: %python -c "from hector.data.unified import gather_kernel_ptx as k; print(k(100, 'warp128')); print(k(100, 'none'))" | FileCheck %s --check-prefix=PTX

// The zero-copy gather: a traversal with fn = "copy", a gather_index and reduce = "none" reads
// rows of a (unified) table by index into device memory. Without `align` (or with
// align = "none") one thread owns one (row, column) element; with align = "warp128" one warp
// owns one row and walks it in aligned 128-byte segments: lane l of step k reads element
// 32k + l - s, where s = (address of x[xr, 0] / 4) mod 32 is the row's misalignment.

// ---- align = "warp128": host launches 32 threads per gathered row ----------------------------

// CHECK-LABEL: func.func @gather_aligned
// CHECK-SAME: (%[[IDX:[^:]*]]: memref<?xi32>, %[[X:[^:]*]]: memref<?x100xf32>, %[[OUT:[^:]*]]: memref<?x100xf32>)
// CHECK: %[[M:.*]] = memref.dim %[[IDX]], %{{.*}} : memref<?xi32>
// CHECK-NEXT: %[[W:.*]] = arith.constant 32 : index
// CHECK-NEXT: %[[TH:.*]] = arith.muli %[[M]], %[[W]] : index
// CHECK: %[[BS:.*]] = arith.constant 128 : index
// CHECK-NEXT: %[[BS1:.*]] = arith.constant 127 : index
// CHECK-NEXT: %[[PAD:.*]] = arith.addi %[[TH]], %[[BS1]] : index
// CHECK-NEXT: %[[GRID:.*]] = arith.divui %[[PAD]], %[[BS]] : index
// CHECK-NEXT: gpu.launch_func @hector_kernels::@gather_aligned_0_traversal blocks in (%[[GRID]], %{{.*}}, %{{.*}}) threads in (%[[BS]], %{{.*}}, %{{.*}}) args(%[[IDX]] : memref<?xi32>, %[[X]] : memref<?x100xf32>, %[[OUT]] : memref<?x100xf32>)

// KERNEL-LABEL: gpu.func @gather_aligned_0_traversal
// KERNEL-SAME: (%[[IDX:[^:]*]]: memref<?xi32>, %[[X:[^:]*]]: memref<?x100xf32>, %[[OUT:[^:]*]]: memref<?x100xf32>) kernel
// KERNEL: %[[GID:.*]] = arith.addi %{{.*}}, %{{.*}} : index
// KERNEL-NEXT: %{{.*}} = arith.constant 0 : index
// KERNEL-NEXT: %[[M:.*]] = memref.dim %[[IDX]], %{{.*}} : memref<?xi32>
// KERNEL-NEXT: %[[C32:.*]] = arith.constant 32 : index
//   warp i = gid / 32 owns output row i; lane = gid mod 32
// KERNEL-NEXT: %[[I:.*]] = arith.divui %[[GID]], %[[C32]] : index
// KERNEL-NEXT: %[[LANE:.*]] = arith.remui %[[GID]], %[[C32]] : index
// KERNEL-NEXT: %[[OK:.*]] = arith.cmpi ult, %[[I]], %[[M]] : index
// KERNEL-NEXT: scf.if %[[OK]] {
// KERNEL-NEXT: %[[RI:.*]] = memref.load %[[IDX]][%[[I]]] : memref<?xi32>
// KERNEL-NEXT: %[[R:.*]] = arith.index_cast %[[RI]] : i32 to index
// KERNEL-NEXT: %[[C4:.*]] = arith.constant 4 : index
// KERNEL-NEXT: %[[W:.*]] = arith.constant 32 : index
// KERNEL-NEXT: %[[W1:.*]] = arith.constant 31 : index
// KERNEL-NEXT: %[[D:.*]] = arith.constant 100 : index
//   s = (aligned pointer / 4 + r * 100) mod 32, from the table's real address
// KERNEL-NEXT: %[[P:.*]] = memref.extract_aligned_pointer_as_index %[[X]] : memref<?x100xf32> -> index
// KERNEL-NEXT: %[[PW:.*]] = arith.divui %[[P]], %[[C4]] : index
// KERNEL-NEXT: %[[RS:.*]] = arith.muli %[[R]], %[[D]] : index
// KERNEL-NEXT: %[[A:.*]] = arith.addi %[[PW]], %[[RS]] : index
// KERNEL-NEXT: %[[S:.*]] = arith.remui %[[A]], %[[W]] : index
//   ceil((s + 100) / 32) steps
// KERNEL-NEXT: %[[SPAN:.*]] = arith.addi %[[S]], %[[D]] : index
// KERNEL-NEXT: %[[SP:.*]] = arith.addi %[[SPAN]], %[[W1]] : index
// KERNEL-NEXT: %[[STEPS:.*]] = arith.divui %[[SP]], %[[W]] : index
// KERNEL-NEXT: %[[Z:.*]] = arith.constant 0 : index
// KERNEL-NEXT: %[[ONE:.*]] = arith.constant 1 : index
// KERNEL-NEXT: scf.for %[[K:.*]] = %[[Z]] to %[[STEPS]] step %[[ONE]] {
//   e = 32k + lane - s, read only when 0 <= e < 100
// KERNEL-NEXT: %[[KB:.*]] = arith.muli %[[K]], %[[W]] : index
// KERNEL-NEXT: %[[E0:.*]] = arith.addi %[[KB]], %[[LANE]] : index
// KERNEL-NEXT: %[[GE:.*]] = arith.cmpi uge, %[[E0]], %[[S]] : index
// KERNEL-NEXT: %[[E:.*]] = arith.subi %[[E0]], %[[S]] : index
// KERNEL-NEXT: %[[LT:.*]] = arith.cmpi ult, %[[E]], %[[D]] : index
// KERNEL-NEXT: %[[IN:.*]] = arith.andi %[[GE]], %[[LT]] : i1
// KERNEL-NEXT: scf.if %[[IN]] {
// KERNEL-NEXT: %[[V:.*]] = memref.load %[[X]][%[[R]], %[[E]]] : memref<?x100xf32>
// KERNEL-NEXT: memref.store %[[V]], %[[OUT]][%[[I]], %[[E]]] : memref<?x100xf32>
// KERNEL-NEXT: }
// KERNEL-NEXT: }
// KERNEL-NEXT: }
// KERNEL-NEXT: gpu.return

//   The standalone gather kernels (hector.data.unified.gather_kernel_ptx, one entry each, sm_90):
//   memref arguments expand to (allocated, aligned, offset, sizes..., strides...), so 5
//   parameters for the index and 7 for each 2-D table. In the aligned kernel the warp index is
//   gid >> 5, the shift is masked with 31 and the step loop advances 128 bytes at a time.
// PTX: .target sm_90
// PTX-LABEL: .visible .entry hector_gather_warp128_0_traversal(
// PTX-COUNT-18: .param .u64 {{.*}},
// PTX-NEXT: .param .u64 hector_gather_warp128_0_traversal_param_18
// PTX-NEXT: )
// PTX: shr.u64 {{.*}}, 5;
// PTX: and.b64 {{.*}}, 31;
// PTX: add.s64 {{.*}}, 128;
// PTX: ld.global.b32
// PTX-NEXT: st.global.b32
// PTX: ret;
// PTX: .target sm_90
// PTX-LABEL: .visible .entry hector_gather_none_0_traversal(
// PTX-NOT: shr.u64 {{.*}}, 5;
// PTX-NOT: , 128;
// PTX: ld.global.b32
// PTX: st.global.b32
// PTX: ret;
func.func @gather_aligned(%idx: memref<?xi32>, %x: memref<?x100xf32>, %out: memref<?x100xf32>) {
  "hector_intra.traversal_template"(%idx, %x, %out) {parallel = "node", fn = "copy", reduce = "none", slope = 0.0 : f32, block_size = 128 : i64, align = "warp128", operandSegmentSizes = array<i32: 1, 0, 0, 1, 0, 1>} : (memref<?xi32>, memref<?x100xf32>, memref<?x100xf32>) -> ()
  return
}

// ---- without align (and with align = "none"): one thread per element, gid / 100 and
// ---- gid mod 100, threads = M * 100 ---------------------------------------------------------

// CHECK-LABEL: func.func @gather_flat
// CHECK: %[[M:.*]] = memref.dim %{{.*}}, %{{.*}} : memref<?xi32>
// CHECK-NEXT: %[[D:.*]] = arith.constant 100 : index
// CHECK-NEXT: arith.muli %[[M]], %[[D]] : index
// CHECK: gpu.launch_func @hector_kernels::@gather_flat_0_traversal
// CHECK: %[[M2:.*]] = memref.dim %{{.*}}, %{{.*}} : memref<?xi32>
// CHECK-NEXT: %[[D2:.*]] = arith.constant 100 : index
// CHECK-NEXT: arith.muli %[[M2]], %[[D2]] : index
// CHECK: gpu.launch_func @hector_kernels::@gather_flat_1_traversal

// KERNEL-LABEL: gpu.func @gather_flat_0_traversal
// KERNEL: %[[C:.*]] = arith.constant 100 : index
// KERNEL-NEXT: %[[I:.*]] = arith.divui %{{.*}}, %[[C]] : index
// KERNEL-NEXT: %[[J:.*]] = arith.remui %{{.*}}, %[[C]] : index
// KERNEL-NOT: extract_aligned_pointer
// KERNEL-NOT: scf.for
// KERNEL: gpu.return
// KERNEL-LABEL: gpu.func @gather_flat_1_traversal
// KERNEL: %[[C:.*]] = arith.constant 100 : index
// KERNEL-NEXT: %[[I:.*]] = arith.divui %{{.*}}, %[[C]] : index
// KERNEL-NOT: extract_aligned_pointer
// KERNEL: gpu.return
func.func @gather_flat(%idx: memref<?xi32>, %x: memref<?x100xf32>, %out: memref<?x100xf32>) {
  "hector_intra.traversal_template"(%idx, %x, %out) {parallel = "node", fn = "copy", reduce = "none", slope = 0.0 : f32, block_size = 128 : i64, operandSegmentSizes = array<i32: 1, 0, 0, 1, 0, 1>} : (memref<?xi32>, memref<?x100xf32>, memref<?x100xf32>) -> ()
  "hector_intra.traversal_template"(%idx, %x, %out) {parallel = "node", fn = "copy", reduce = "none", slope = 0.0 : f32, block_size = 128 : i64, align = "none", operandSegmentSizes = array<i32: 1, 0, 0, 1, 0, 1>} : (memref<?xi32>, memref<?x100xf32>, memref<?x100xf32>) -> ()
  return
}

// -----

// ---- the aligned mapping applies to any elementwise row function: a scaled, edge-parallel
// ---- sum reads x aligned and accumulates atomically -----------------------------------------

// KERNEL-LABEL: gpu.func @gather_scaled_0_traversal
// KERNEL: memref.extract_aligned_pointer_as_index
// KERNEL: scf.for
// KERNEL: %[[V:.*]] = memref.load %{{.*}}[%[[R:.*]], %[[E:.*]]] : memref<?x20xf32>
// KERNEL: arith.mulf %[[V]]
// KERNEL: memref.atomic_rmw addf %{{.*}}, %{{.*}}[%{{.*}}, %[[E]]] : (f32, memref<?x20xf32>) -> f32
func.func @gather_scaled(%src: memref<?xi32>, %dst: memref<?xi32>, %x: memref<?x20xf32>, %s: memref<?x1xf32>, %out: memref<?x20xf32>) {
  "hector_intra.traversal_template"(%src, %dst, %x, %s, %out) {parallel = "edge", fn = "scale", reduce = "sum", slope = 0.0 : f32, block_size = 256 : i64, align = "warp128", operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 1>} : (memref<?xi32>, memref<?xi32>, memref<?x20xf32>, memref<?x1xf32>, memref<?x20xf32>) -> ()
  return
}
