// RUN: hector-opt %s --verify-diagnostics -p hector-gpu-kernels-on-host

// On the host an MMA (a warp's collective) runs between barriers (lowering/gpu/mma_on_host.py),
// so, like a barrier, it may only sit in the kernel's body or in scf.for loops without results.
module attributes {gpu.container_module} {
  gpu.module @hector_kernels {
    gpu.func @k(%a: vector<4x2xbf16>, %b: vector<2x2xbf16>, %c: vector<2x2xf32>, %flag: i1) kernel {
      // expected-error @+1 {{a nvgpu.mma.sync may only be inside scf.for loops without results to run on the host}}
      scf.if %flag {
        %d = nvgpu.mma.sync (%a, %b, %c) {mmaShape = [16, 8, 16]} : (vector<4x2xbf16>, vector<2x2xbf16>, vector<2x2xf32>) -> vector<2x2xf32>
      }
      gpu.return
    }
  }
  func.func @f(%a: vector<4x2xbf16>, %b: vector<2x2xbf16>, %c: vector<2x2xf32>, %flag: i1) {
    %c1 = arith.constant 1 : index
    gpu.launch_func @hector_kernels::@k blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1) args(%a : vector<4x2xbf16>, %b : vector<2x2xbf16>, %c : vector<2x2xf32>, %flag : i1)
    return
  }
}
