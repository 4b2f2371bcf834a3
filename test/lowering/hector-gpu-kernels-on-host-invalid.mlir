// RUN: hector-opt %s --verify-diagnostics -p hector-gpu-kernels-on-host

// The host runner only runs kernels indexed along x.
module attributes {gpu.container_module} {
  gpu.module @hector_kernels {
    gpu.func @k(%out: memref<?xf32>) kernel {
      // expected-error@+1 {{only x-dimension kernels run on the host}}
      %y = gpu.block_id y
      gpu.return
    }
  }
  func.func @f(%out: memref<?xf32>) {
    %c1 = arith.constant 1 : index
    gpu.launch_func @hector_kernels::@k blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1) args(%out : memref<?xf32>)
    return
  }
}
