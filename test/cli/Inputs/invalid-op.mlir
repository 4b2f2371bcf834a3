func.func @f(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %0 = "hector_inter.unary"(%x) {fn = "softsign", slope = 0.0 : f32} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}
