// RUN: hector-opt %s --split-input-file --verify-diagnostics
// RUN: %python %S/../cli/Inputs/exit_code.py hector-opt %s --split-input-file | FileCheck %s
// RUN: %python %S/../cli/Inputs/exit_code.py hector-opt %s --split-input-file --no-hector-verify -p canonicalize | FileCheck %s
// RUN: not hector-opt %s --split-input-file 2>/dev/null | FileCheck %s --check-prefix=OUT

// MLIR's parser accepts `index` as the element type of a dense array attribute and then
// asserts on its bit width: the process aborts (exit 134) instead of reporting an error. Hector
// rejects such input before parsing it, at the element type, with an ordinary diagnostic and
// exit 1, whatever the pipeline; every other chunk is still processed.

// CHECK-NOT: Assertion
// CHECK: hector-verify-source-invalid.mlir:[[@LINE+2]]:39: error: dense array attributes cannot hold 'index' elements (MLIR's parser would abort on them); use a sized integer type, e.g. array<i64: ...>
// expected-error @+1 {{dense array attributes cannot hold 'index' elements}}
module attributes {test.sizes = array<index: 1, 2>} {
}

// -----

// The empty form, on a function.
// CHECK: hector-verify-source-invalid.mlir:[[@LINE+2]]:43: error: dense array attributes
// expected-error @+1 {{dense array attributes cannot hold 'index' elements}}
func.func @f() attributes {test.a = array<index>} {
  return
}

// -----

// Through a type alias, with spaces and a line break. (An alias used before its declaration
// is MLIR's own clean error, "undefined symbol alias id".)
!idx = index
// CHECK: hector-verify-source-invalid.mlir:[[@LINE+3]]:3: error: dense array attributes
module attributes {test.a = array <
// expected-error @+1 {{dense array attributes cannot hold 'index' elements}}
  !idx : 3>} {
}

// -----

// Through an attribute alias, in an op's generic attribute dictionary.
// CHECK: hector-verify-source-invalid.mlir:[[@LINE+2]]:12: error: dense array attributes
// expected-error @+1 {{dense array attributes cannot hold 'index' elements}}
#a = array<index: 7>
func.func @g() {
  "test.op"() {v = #a} : () -> ()
  return
}

// -----

// A generic op named by a dialect alone: MLIR's parser aborts ("LLVM ERROR: gpu created with
// unregistered dialect") when that dialect is registered. Escapes are read as MLIR reads them.
// CHECK: hector-verify-source-invalid.mlir:[[@LINE+3]]:3: error: operation name 'gpu' has no op part (expected 'dialect.op')
func.func @h() {
  // expected-error @+1 {{operation name 'gpu' has no op part (expected 'dialect.op')}}
  "gpu"() : () -> ()
  // CHECK: hector-verify-source-invalid.mlir:[[@LINE+2]]:8: error: operation name 'func.' has no op part
  // expected-error @+1 {{operation name 'func.' has no op part}}
  %0 = "func\2E"() : () -> i32
  return
}

// -----

// Not an attribute: the same words in a string and in this comment, array<index: 1>, and a
// dense array of a sized integer type are fine.
// OUT: module attributes {test.s = "array<index: 1>", test.t = array<i64: 1, 2>}
module attributes {test.s = "array<index: 1>", test.t = array<i64: 1, 2>} {
}

// -----

// The same words in a location's name are not an op.
// OUT: func.func @named_location
func.func @named_location() {
  return loc("gpu"("here":1:2))
}

// CHECK-NOT: error
// CHECK: exit code: 1
