// RGAT layer (hector.models.RGATLayer(16, 8, 8 relations, heads=2)) after linear reordering and
// compact materialization (training), as hector.compile builds it: input of placement-plan-saved.mlir.
module {
  func.func @rgat_layer(%arg0: !hector_inter.graph, %arg1: tensor<?x16xf32> {hector.kind = "node"}, %arg2: tensor<8x16x16xf32> {hector.kind = "weight"}, %arg3: tensor<16x2xf32> {hector.kind = "weight"}, %arg4: tensor<16x2xf32> {hector.kind = "weight"}, %arg5: tensor<16xf32> {hector.kind = "weight"}) -> tensor<?x16xf32> {
    %0 = "hector_inter.compact_gather_src"(%arg0, %arg1) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
    %1 = "hector_inter.typed_linear"(%arg0, %0, %arg2) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<8x16x16xf32>) -> tensor<?x16xf32>
    %2 = "hector_inter.expand_compact"(%arg0, %1) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
    %3 = "hector_inter.gather_dst"(%arg0, %arg1) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
    %4 = "hector_inter.weight_product"(%arg2, %arg3) {variant = "xw"} : (tensor<8x16x16xf32>, tensor<16x2xf32>) -> tensor<8x16x2xf32>
    %5 = "hector_inter.typed_linear"(%arg0, %3, %4) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<8x16x2xf32>) -> tensor<?x2xf32>
    %6 = "hector_inter.typed_linear"(%arg0, %1, %arg4) {slice = "none"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<16x2xf32>) -> tensor<?x2xf32>
    %7 = "hector_inter.expand_compact"(%arg0, %6) : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
    %8 = "hector_inter.add"(%5, %7) : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
    %9 = "hector_inter.unary"(%8) {fn = "leaky_relu", slope = 2.000000e-01 : f32} : (tensor<?x2xf32>) -> tensor<?x2xf32>
    %10 = "hector_inter.edge_softmax"(%arg0, %9) {by = "dst"} : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
    %11 = "hector_inter.scale"(%2, %10) : (tensor<?x16xf32>, tensor<?x2xf32>) -> tensor<?x16xf32>
    %12 = "hector_inter.sum_to_dst"(%arg0, %11) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
    %13 = "hector_inter.add"(%12, %arg5) : (tensor<?x16xf32>, tensor<16xf32>) -> tensor<?x16xf32>
    return %13 : tensor<?x16xf32>
  }
}
