module @jit_small attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<4x3xf64>, %arg1: tensor<3xf64>) -> tensor<f64> {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<4x3xf64>, tensor<3xf64>) -> tensor<4xf64>
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<4xf64>
    %1 = stablehlo.add %0, %cst : tensor<4xf64>
    %2 = stablehlo.tanh %1 : tensor<4xf64>
    %cst_0 = stablehlo.constant dense<0.000000e+00> : tensor<f64>
    %3 = stablehlo.reduce(%2 init: %cst_0) applies stablehlo.add across dimensions = [0] : (tensor<4xf64>, tensor<f64>) -> tensor<f64>
    %cst_1 = stablehlo.constant dense<0.000000e+00> : tensor<f64>
    %4 = stablehlo.compare GT, %3, %cst_1, FLOAT : (tensor<f64>, tensor<f64>) -> tensor<i1>
    %5 = "stablehlo.if"(%4) ({
      %cst_4 = stablehlo.constant dense<2.000000e+00> : tensor<4xf64>
      %9 = stablehlo.multiply %2, %cst_4 : tensor<4xf64>
      stablehlo.return %9 : tensor<4xf64>
    }, {
      stablehlo.return %2 : tensor<4xf64>
    }) : (tensor<i1>) -> tensor<4xf64>
    %6 = stablehlo.multiply %5, %5 : tensor<4xf64>
    %cst_2 = stablehlo.constant dense<0.000000e+00> : tensor<f64>
    %7 = stablehlo.reduce(%6 init: %cst_2) applies stablehlo.add across dimensions = [0] : (tensor<4xf64>, tensor<f64>) -> tensor<f64>
    %cst_3 = stablehlo.constant dense<4.000000e+00> : tensor<f64>
    %8 = stablehlo.divide %7, %cst_3 : tensor<f64>
    return %8 : tensor<f64>
  }
}
