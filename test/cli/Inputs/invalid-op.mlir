func.func @f(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %0 = "hector_inter.unary"(%x) {fn = "tanh"} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}
