// A node-wise tensor reduced as if edge-wise, then gathered: the second use is the error.
func.func @f(%g: !hector_inter.graph, %x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %0 = "hector_inter.sum_to_dst"(%g, %x) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  %1 = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %1 : tensor<?x4xf32>
}
