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
      %cst_18 = stablehlo.constant dense<2.000000e+00> : tensor<2xf32>
      %37 = stablehlo.multiply %2, %cst_18 : tensor<2xf32>
      stablehlo.return %37 : tensor<2xf32>
    }, {
      stablehlo.return %2 : tensor<2xf32>
    }) : (tensor<i1>) -> tensor<2xf32>
    %6 = stablehlo.multiply %5, %5 : tensor<2xf32>
    %cst_2 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %7 = stablehlo.reduce(%6 init: %cst_2) applies stablehlo.add across dimensions = [0] : (tensor<2xf32>, tensor<f32>) -> tensor<f32>
    %cst_3 = stablehlo.constant dense<2.000000e+00> : tensor<f32>
    %8 = stablehlo.divide %7, %cst_3 : tensor<f32>
    %cst_4 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %cst_5 = stablehlo.constant dense<2.000000e+00> : tensor<f32>
    %9 = stablehlo.divide %cst_4, %cst_5 : tensor<f32>
    %cst_6 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %10 = stablehlo.compare EQ, %cst_4, %cst_6, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %cst_7 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %11 = stablehlo.select %10, %cst_7, %9 : tensor<i1>, tensor<f32>
    %12 = stablehlo.reshape %11 : (tensor<f32>) -> tensor<1xf32>
    %13 = stablehlo.broadcast_in_dim %12, dims = [0] : (tensor<1xf32>) -> tensor<2xf32>
    %14 = stablehlo.multiply %13, %5 : tensor<2xf32>
    %cst_8 = stablehlo.constant dense<0.000000e+00> : tensor<2xf32>
    %15 = stablehlo.compare EQ, %13, %cst_8, FLOAT : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xi1>
    %cst_9 = stablehlo.constant dense<0.000000e+00> : tensor<2xf32>
    %16 = stablehlo.compare EQ, %5, %cst_9, FLOAT : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xi1>
    %17 = stablehlo.or %15, %16 : tensor<2xi1>
    %cst_10 = stablehlo.constant dense<0.000000e+00> : tensor<2xf32>
    %18 = stablehlo.select %17, %cst_10, %14 : tensor<2xi1>, tensor<2xf32>
    %19 = stablehlo.multiply %13, %5 : tensor<2xf32>
    %cst_11 = stablehlo.constant dense<0.000000e+00> : tensor<2xf32>
    %20 = stablehlo.compare EQ, %13, %cst_11, FLOAT : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xi1>
    %cst_12 = stablehlo.constant dense<0.000000e+00> : tensor<2xf32>
    %21 = stablehlo.compare EQ, %5, %cst_12, FLOAT : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xi1>
    %22 = stablehlo.or %20, %21 : tensor<2xi1>
    %cst_13 = stablehlo.constant dense<0.000000e+00> : tensor<2xf32>
    %23 = stablehlo.select %22, %cst_13, %19 : tensor<2xi1>, tensor<2xf32>
    %24 = stablehlo.add %18, %23 : tensor<2xf32>
    %25 = "stablehlo.if"(%4) ({
      %cst_18 = stablehlo.constant dense<2.000000e+00> : tensor<2xf32>
      %37 = stablehlo.multiply %24, %cst_18 : tensor<2xf32>
      stablehlo.return %37 : tensor<2xf32>
    }, {
      stablehlo.return %24 : tensor<2xf32>
    }) : (tensor<i1>) -> tensor<2xf32>
    %26 = stablehlo.multiply %2, %2 : tensor<2xf32>
    %cst_14 = stablehlo.constant dense<1.000000e+00> : tensor<2xf32>
    %27 = stablehlo.subtract %cst_14, %26 : tensor<2xf32>
    %28 = stablehlo.multiply %25, %27 : tensor<2xf32>
    %cst_15 = stablehlo.constant dense<0.000000e+00> : tensor<2xf32>
    %29 = stablehlo.compare EQ, %25, %cst_15, FLOAT : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xi1>
    %cst_16 = stablehlo.constant dense<0.000000e+00> : tensor<2xf32>
    %30 = stablehlo.compare EQ, %27, %cst_16, FLOAT : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xi1>
    %31 = stablehlo.or %29, %30 : tensor<2xi1>
    %cst_17 = stablehlo.constant dense<0.000000e+00> : tensor<2xf32>
    %32 = stablehlo.select %31, %cst_17, %28 : tensor<2xi1>, tensor<2xf32>
    %33 = stablehlo.reshape %32 : (tensor<2xf32>) -> tensor<2x1xf32>
    %34 = stablehlo.transpose %arg0, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>
    %35 = stablehlo.dot_general %34, %33, contracting_dims = [1] x [0] : (tensor<3x2xf32>, tensor<2x1xf32>) -> tensor<3x1xf32>
    %36 = stablehlo.reshape %35 : (tensor<3x1xf32>) -> tensor<3xf32>
    return %36 : tensor<3xf32>
  }
}
