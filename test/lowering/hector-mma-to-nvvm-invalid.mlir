// RUN: hector-opt %s --split-input-file --verify-diagnostics -p 'hector-mma-to-nvvm{chip=sm_75}'

// The PTX stage's MMA lowering (lowering/gpu/mma_nvvm.py) refuses a chip without mma.sync on
// 16-bit types, naming it (LLVM's NVPTX back end would abort the process on the intrinsic),
// and any MMA but m16n8k16 of bf16/f16 into f32, before touching the module.

module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @f(%a: vector<4x2xbf16>, %b: vector<2x2xbf16>, %c: vector<2x2xf32>, %o: memref<2x2xf32>) kernel {
      // expected-error @+1 {{tensor-core MMA (mma.sync m16n8k16 on bf16/f16) needs sm_80 or newer; the target is sm_75}}
      %d = nvgpu.mma.sync (%a, %b, %c) {mmaShape = [16, 8, 16]} : (vector<4x2xbf16>, vector<2x2xbf16>, vector<2x2xf32>) -> vector<2x2xf32>
      gpu.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @f(%a: vector<2x2xf16>, %b: vector<1x2xf16>, %c: vector<2x2xf16>) kernel {
      // expected-error @+1 {{hector-mma-to-nvvm lowers m16n8k16 MMAs of bf16 or f16 into f32 only, got shape [16, 8, 8] on f16 into f16}}
      %d = nvgpu.mma.sync (%a, %b, %c) {mmaShape = [16, 8, 8]} : (vector<2x2xf16>, vector<1x2xf16>, vector<2x2xf16>) -> vector<2x2xf16>
      gpu.return
    }
  }
}
