// Not valid MLIR: a bare dialect name where an op is expected.
func.func @f() {
  hector_inter
  return
}
