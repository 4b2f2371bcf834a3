// RUN: hector-opt %s -p hector-merge-identical-functions | FileCheck %s

// Two identical outlined bodies keep one copy; their callers then become identical and are
// merged in the next round. A body that differs (a constant), public functions and
// declarations stay.

// CHECK-LABEL: func.func @entry
// CHECK: call @scale(%arg0)
// CHECK: call @scale(%arg0)
// CHECK: call @other(%arg0)
// CHECK: call @outer(%arg0)
// CHECK: call @outer(%arg0)
// CHECK: call @public_copy(%arg0)
// CHECK: call @external(%arg0)
// A copy with a quoted name is found and replaced too.
// CHECK: call @scale(%arg0)
func.func @entry(%m: memref<4xf32>) {
  call @scale(%m) : (memref<4xf32>) -> ()
  call @scale_copy(%m) : (memref<4xf32>) -> ()
  call @other(%m) : (memref<4xf32>) -> ()
  call @outer(%m) : (memref<4xf32>) -> ()
  call @outer_copy(%m) : (memref<4xf32>) -> ()
  call @public_copy(%m) : (memref<4xf32>) -> ()
  call @external(%m) : (memref<4xf32>) -> ()
  call @"scale copy"(%m) : (memref<4xf32>) -> ()
  return
}

// CHECK-LABEL: func.func private @scale(
// CHECK: arith.constant 2.0
func.func private @scale(%m: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %two = arith.constant 2.0 : f32
  %v = memref.load %m[%c0] : memref<4xf32>
  %r = arith.mulf %v, %two : f32
  memref.store %r, %m[%c0] : memref<4xf32>
  return
}

// CHECK-NOT: func.func private @scale_copy
// CHECK-NOT: func.func private @"scale copy"
func.func private @"scale copy"(%m: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %two = arith.constant 2.0 : f32
  %v = memref.load %m[%c0] : memref<4xf32>
  %r = arith.mulf %v, %two : f32
  memref.store %r, %m[%c0] : memref<4xf32>
  return
}

func.func private @scale_copy(%m: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %two = arith.constant 2.0 : f32
  %v = memref.load %m[%c0] : memref<4xf32>
  %r = arith.mulf %v, %two : f32
  memref.store %r, %m[%c0] : memref<4xf32>
  return
}

// CHECK-LABEL: func.func private @other(
// CHECK: arith.constant 3.0
func.func private @other(%m: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %three = arith.constant 3.0 : f32
  %v = memref.load %m[%c0] : memref<4xf32>
  %r = arith.mulf %v, %three : f32
  memref.store %r, %m[%c0] : memref<4xf32>
  return
}

// Identical once @scale_copy is @scale.
// CHECK-LABEL: func.func private @outer(
// CHECK-NEXT: call @scale(%arg0)
func.func private @outer(%m: memref<4xf32>) {
  call @scale(%m) : (memref<4xf32>) -> ()
  return
}

// CHECK-NOT: func.func private @outer_copy
func.func private @outer_copy(%m: memref<4xf32>) {
  call @scale_copy(%m) : (memref<4xf32>) -> ()
  return
}

// Public: part of the module's interface, kept although @outer has the same body.
// CHECK-LABEL: func.func @public_copy(
// CHECK-NEXT: call @scale(%arg0)
func.func @public_copy(%m: memref<4xf32>) {
  call @scale(%m) : (memref<4xf32>) -> ()
  return
}

// Declarations are left alone.
// CHECK: func.func private @external(memref<4xf32>)
// CHECK-NEXT: func.func private @external_copy(memref<4xf32>)
func.func private @external(memref<4xf32>)
func.func private @external_copy(memref<4xf32>)
