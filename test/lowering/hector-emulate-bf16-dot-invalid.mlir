// RUN: hector-opt %s --verify-diagnostics -p hector-emulate-bf16-dot

// The pair micro-kernel makes 512-bit dots only (16 f32 lanes); the 256-bit form is refused.
func.func @narrow_dot(%acc: vector<8xf32>, %a: vector<16xbf16>, %b: vector<16xbf16>) -> vector<8xf32> {
  // expected-error@+1 {{x86vector.avx512.dot with 16 f32 lanes can be emulated, got vector<8xf32>}}
  %0 = x86vector.avx512.dot %acc, %a, %b : vector<16xbf16> -> vector<8xf32>
  return %0 : vector<8xf32>
}
