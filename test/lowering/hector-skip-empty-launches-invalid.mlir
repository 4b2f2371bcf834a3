// RUN: hector-opt %s --verify-diagnostics -p hector-skip-empty-launches

// A guarded launch must be able to pass its single dependency on when it is skipped.
module attributes {gpu.container_module} {
  gpu.module @hector_kernels {
    gpu.func @k(%out: memref<?xf32>) kernel {
      gpu.return
    }
  }
  func.func @f(%out: memref<?xf32>) {
    %c1 = arith.constant 1 : index
    %t0 = gpu.wait async
    %t1 = gpu.wait async
    // expected-error@+1 {{an async gpu.launch_func must have exactly one dependency to be guarded}}
    %t2 = gpu.launch_func async [%t0, %t1] @hector_kernels::@k blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1) args(%out : memref<?xf32>)
    gpu.wait [%t2]
    return
  }
}
