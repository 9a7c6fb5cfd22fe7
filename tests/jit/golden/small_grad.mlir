module @jit_dsmall_dw attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<2x3xf32>, %arg1: tensor<3xf32>) -> tensor<3xf32> {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2xf32>
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<2xf32>
    %1 = stablehlo.add %0, %cst : tensor<2xf32>
    %2 = stablehlo.tanh %1 : tensor<2xf32>
    %cst_0 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %3 = stablehlo.reduce(%2 init: %cst_0) applies stablehlo.add across dimensions = [0] : (tensor<2xf32>, tensor<f32>) -> tensor<f32>
    %cst_1 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %4 = stablehlo.compare GT, %3, %cst_1, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %5 = "stablehlo.if"(%4) ({
      %cst_7 = stablehlo.constant dense<2.000000e+00> : tensor<2xf32>
      %20 = stablehlo.multiply %2, %cst_7 : tensor<2xf32>
      stablehlo.return %20 : tensor<2xf32>
    }, {
      stablehlo.return %2 : tensor<2xf32>
    }) : (tensor<i1>) -> tensor<2xf32>
    %cst_2 = stablehlo.constant dense<5.000000e-01> : tensor<2xf32>
    %6 = stablehlo.multiply %cst_2, %5 : tensor<2xf32>
    %7 = stablehlo.add %6, %6 : tensor<2xf32>
    %8 = "stablehlo.if"(%4) ({
      %cst_7 = stablehlo.constant dense<2.000000e+00> : tensor<2xf32>
      %20 = stablehlo.multiply %7, %cst_7 : tensor<2xf32>
      stablehlo.return %20 : tensor<2xf32>
    }, {
      stablehlo.return %7 : tensor<2xf32>
    }) : (tensor<i1>) -> tensor<2xf32>
    %9 = stablehlo.multiply %2, %2 : tensor<2xf32>
    %cst_3 = stablehlo.constant dense<1.000000e+00> : tensor<2xf32>
    %10 = stablehlo.subtract %cst_3, %9 : tensor<2xf32>
    %11 = stablehlo.multiply %8, %10 : tensor<2xf32>
    %cst_4 = stablehlo.constant dense<0.000000e+00> : tensor<2xf32>
    %12 = stablehlo.compare EQ, %8, %cst_4, FLOAT : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xi1>
    %cst_5 = stablehlo.constant dense<0.000000e+00> : tensor<2xf32>
    %13 = stablehlo.compare EQ, %10, %cst_5, FLOAT : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xi1>
    %14 = stablehlo.or %12, %13 : tensor<2xi1>
    %cst_6 = stablehlo.constant dense<0.000000e+00> : tensor<2xf32>
    %15 = stablehlo.select %14, %cst_6, %11 : tensor<2xi1>, tensor<2xf32>
    %16 = stablehlo.reshape %15 : (tensor<2xf32>) -> tensor<2x1xf32>
    %17 = stablehlo.transpose %arg0, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>
    %18 = stablehlo.dot_general %17, %16, contracting_dims = [1] x [0] : (tensor<3x2xf32>, tensor<2x1xf32>) -> tensor<3x1xf32>
    %19 = stablehlo.reshape %18 : (tensor<3x1xf32>) -> tensor<3xf32>
    return %19 : tensor<3xf32>
  }
}
