// RUN: hector-opt %s --split-input-file --verify-diagnostics -p hector-gpu-kernels-on-host

// Kernels with barriers run on the host block by block, each run of ops between barriers a
// loop over the block's threads. That needs barriers at the kernel's top level or in loops
// without results, and no thread's value alive across a barrier (the tiled GEMM rebuilds its
// coordinates in every phase); anything else is refused at the op, before the kernel moves.

module attributes {gpu.container_module} {
  gpu.module @hector_kernels {
    gpu.func @k(%out: memref<?xf32>, %c: i1) kernel {
      // expected-error@+1 {{a gpu.barrier may only be inside scf.for loops without results to run on the host}}
      scf.if %c {
        gpu.barrier
      }
      gpu.return
    }
  }
  func.func @f(%out: memref<?xf32>, %c: i1) {
    %c1 = arith.constant 1 : index
    gpu.launch_func @hector_kernels::@k blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1) args(%out : memref<?xf32>, %c : i1)
    return
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @hector_kernels {
    gpu.func @k(%out: memref<?xf32>) workgroup(%s: memref<32xf32, #gpu.address_space<workgroup>>) kernel {
      // expected-error@+1 {{a value crosses a gpu.barrier: the kernel cannot run on the host phase by phase}}
      %t = gpu.thread_id x
      %v = memref.load %out[%t] : memref<?xf32>
      memref.store %v, %s[%t] : memref<32xf32, #gpu.address_space<workgroup>>
      gpu.barrier
      memref.store %v, %out[%t] : memref<?xf32>
      gpu.return
    }
  }
  func.func @f(%out: memref<?xf32>) {
    %c1 = arith.constant 1 : index
    gpu.launch_func @hector_kernels::@k blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1) args(%out : memref<?xf32>)
    return
  }
}
