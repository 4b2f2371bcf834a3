// A training function on memrefs whose backward is missing: input of placement-plan-saved-invalid.mlir.
module {
func.func @layer_train(%src: memref<?xi32>, %dst: memref<?xi32>, %etype: memref<?xi32>, %ntype: memref<?xi32>, %ptr: memref<?xi32>, %n1: memref<?x1xf32>, %n2: memref<?x1xf32>, %cs: memref<?xi32>, %ce: memref<?xi32>, %ec: memref<?xi32>, %es: memref<?xi32>, %x: memref<?x2xf32>, %out: memref<?x2xf32>, %saved: memref<?x2xf32>) attributes {hector.num_saved = 1 : i64, hector.outputs = 2 : i64, hector.result_kinds = ["node", "node"], hector.train_of = "layer"} {
  return
}
}
