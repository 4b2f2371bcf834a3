// A valid module for tests of what the commands do around it (output, exit codes).
func.func @identity(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  return %x : tensor<?x8xf32>
}
