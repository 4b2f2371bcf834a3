// HGT layer (hector.models.HGTLayer(16, 16, synthetic:mag schema, heads=2)) after linear reordering
// and compact materialization (training), as hector.compile builds it: input of placement-plan-saved.mlir.
module {
  func.func @hgt_layer(%arg0: !hector_inter.graph, %arg1: tensor<?x16xf32> {hector.kind = "node"}, %arg2: tensor<4x16x16xf32> {hector.kind = "weight"}, %arg3: tensor<4x16xf32> {hector.kind = "weight"}, %arg4: tensor<4x16x16xf32> {hector.kind = "weight"}, %arg5: tensor<4x16xf32> {hector.kind = "weight"}, %arg6: tensor<4x16x16xf32> {hector.kind = "weight"}, %arg7: tensor<4x16xf32> {hector.kind = "weight"}, %arg8: tensor<8x16x16xf32> {hector.kind = "weight"}, %arg9: tensor<8x16x16xf32> {hector.kind = "weight"}, %arg10: tensor<4x16x16xf32> {hector.kind = "weight"}, %arg11: tensor<4x16xf32> {hector.kind = "weight"}, %arg12: tensor<?x1xf32> {hector.kind = "node"}, %arg13: tensor<?x1xf32> {hector.kind = "node"}) -> tensor<?x16xf32> {
    %0 = "hector_inter.typed_linear"(%arg0, %arg1, %arg4) {slice = "ntype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<4x16x16xf32>) -> tensor<?x16xf32>
    %1 = "hector_inter.add"(%0, %arg5, %arg0) : (tensor<?x16xf32>, tensor<4x16xf32>, !hector_inter.graph) -> tensor<?x16xf32>
    %2 = "hector_inter.etype_src_weight"(%arg0, %arg2) : (!hector_inter.graph, tensor<4x16x16xf32>) -> tensor<8x16x16xf32>
    %3 = "hector_inter.weight_product"(%2, %arg8) {variant = "xw"} : (tensor<8x16x16xf32>, tensor<8x16x16xf32>) -> tensor<8x16x16xf32>
    %4 = "hector_inter.compact_gather_src"(%arg0, %arg1) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
    %5 = "hector_inter.typed_linear"(%arg0, %4, %3) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<8x16x16xf32>) -> tensor<?x16xf32>
    %6 = "hector_inter.etype_src_weight"(%arg0, %arg3) : (!hector_inter.graph, tensor<4x16xf32>) -> tensor<8x16xf32>
    %7 = "hector_inter.weight_product"(%6, %arg8) {variant = "xw"} : (tensor<8x16xf32>, tensor<8x16x16xf32>) -> tensor<8x16xf32>
    %8 = "hector_inter.add"(%5, %7, %arg0) : (tensor<?x16xf32>, tensor<8x16xf32>, !hector_inter.graph) -> tensor<?x16xf32>
    %9 = "hector_inter.expand_compact"(%arg0, %8) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
    %10 = "hector_inter.etype_src_weight"(%arg0, %arg6) : (!hector_inter.graph, tensor<4x16x16xf32>) -> tensor<8x16x16xf32>
    %11 = "hector_inter.weight_product"(%10, %arg9) {variant = "xw"} : (tensor<8x16x16xf32>, tensor<8x16x16xf32>) -> tensor<8x16x16xf32>
    %12 = "hector_inter.compact_gather_src"(%arg0, %arg1) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
    %13 = "hector_inter.typed_linear"(%arg0, %12, %11) {slice = "etype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<8x16x16xf32>) -> tensor<?x16xf32>
    %14 = "hector_inter.etype_src_weight"(%arg0, %arg7) : (!hector_inter.graph, tensor<4x16xf32>) -> tensor<8x16xf32>
    %15 = "hector_inter.weight_product"(%14, %arg9) {variant = "xw"} : (tensor<8x16xf32>, tensor<8x16x16xf32>) -> tensor<8x16xf32>
    %16 = "hector_inter.add"(%13, %15, %arg0) : (tensor<?x16xf32>, tensor<8x16xf32>, !hector_inter.graph) -> tensor<?x16xf32>
    %17 = "hector_inter.expand_compact"(%arg0, %16) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
    %18 = "hector_inter.gather_dst"(%arg0, %1) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
    %19 = "hector_inter.dot"(%18, %9) : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x2xf32>
    %20 = "hector_inter.edge_softmax"(%arg0, %19) {by = "dst"} : (!hector_inter.graph, tensor<?x2xf32>) -> tensor<?x2xf32>
    %21 = "hector_inter.scale"(%17, %20) : (tensor<?x16xf32>, tensor<?x2xf32>) -> tensor<?x16xf32>
    %22 = "hector_inter.sum_to_dst"(%arg0, %21) : (!hector_inter.graph, tensor<?x16xf32>) -> tensor<?x16xf32>
    %23 = "hector_inter.unary"(%22) {fn = "gelu", slope = 0.000000e+00 : f32} : (tensor<?x16xf32>) -> tensor<?x16xf32>
    %24 = "hector_inter.typed_linear"(%arg0, %23, %arg10) {slice = "ntype"} : (!hector_inter.graph, tensor<?x16xf32>, tensor<4x16x16xf32>) -> tensor<?x16xf32>
    %25 = "hector_inter.add"(%24, %arg11, %arg0) : (tensor<?x16xf32>, tensor<4x16xf32>, !hector_inter.graph) -> tensor<?x16xf32>
    %26 = "hector_inter.scale"(%25, %arg12) : (tensor<?x16xf32>, tensor<?x1xf32>) -> tensor<?x16xf32>
    %27 = "hector_inter.scale"(%arg1, %arg13) : (tensor<?x16xf32>, tensor<?x1xf32>) -> tensor<?x16xf32>
    %28 = "hector_inter.add"(%26, %27) : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    return %28 : tensor<?x16xf32>
  }
}
