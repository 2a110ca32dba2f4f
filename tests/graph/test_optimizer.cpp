// Optimizers: steps against hand-computed values, argument checks, and CUDA = CPU bit for bit (GPU only).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "common/gpu.h"
#include "graph/optimizer.h"
#include "test_ops.h"

namespace te {
namespace {

TEST(Optimizer, SgdMomentumTwoStepsByHand) {
  Tensor p = Tensor::from_f32({1.f, -2.f}, {2}, DType::f32);
  Tensor g = Tensor::from_f32({0.5f, 0.25f}, {2}, DType::f32);
  Tensor buf = Tensor::zeros({2}, DType::f32);
  SgdConfig c{0.1, 0.9, 0.1};
  sgd_momentum_step(p, g, buf, c);
  // g' = 0.5 + 0.1*1 = 0.6; buf = 0.6; p = 1 - 0.06 = 0.94.   g' = 0.25 - 0.2 = 0.05; buf = 0.05; p = -2.005
  EXPECT_NEAR(p.data<float>()[0], 0.94f, 1e-7);
  EXPECT_NEAR(buf.data<float>()[0], 0.6f, 1e-7);
  EXPECT_NEAR(p.data<float>()[1], -2.005f, 1e-6);
  sgd_momentum_step(p, g, buf, c);
  // g' = 0.5 + 0.094 = 0.594; buf = 0.54 + 0.594 = 1.134; p = 0.94 - 0.1134 = 0.8266
  EXPECT_NEAR(buf.data<float>()[0], 1.134f, 1e-6);
  EXPECT_NEAR(p.data<float>()[0], 0.8266f, 1e-6);
}

TEST(Optimizer, AdamWTwoStepsByHand) {
  Tensor p = Tensor::from_f32({1.f}, {1}, DType::f32);
  Tensor m = Tensor::zeros({1}, DType::f32), v = Tensor::zeros({1}, DType::f32);
  AdamWConfig c{0.1, 0.9, 0.999, 1e-8, 0.01};
  Tensor g1 = Tensor::from_f32({0.5f}, {1}, DType::f32);
  adamw_step(p, g1, m, v, 1, c);
  // p = 0.999; m = 0.05; v = 0.00025; m̂ = 0.5; v̂ = 0.25; p = 0.999 - 0.1 * 0.5 / (0.5 + 1e-8) = 0.899000002
  EXPECT_NEAR(m.data<float>()[0], 0.05f, 1e-8);
  EXPECT_NEAR(v.data<float>()[0], 0.00025, 1e-6 * 0.00025);
  EXPECT_NEAR(p.data<float>()[0], 0.899000002, 1e-6);
  Tensor g2 = Tensor::from_f32({-0.25f}, {1}, DType::f32);
  adamw_step(p, g2, m, v, 2, c);
  // p = 0.899000002 * 0.999 = 0.898101002; m = 0.045 - 0.025 = 0.02; v = 0.00024975 + 0.0000625 = 0.00031225;
  // m̂ = 0.02 / 0.19 = 0.1052631579; v̂ = 0.00031225 / 0.001999 = 0.1562031016; √v̂ = 0.3952253808;
  // p = 0.898101002 - 0.1 * 0.1052631579 / 0.3952253908 = 0.898101002 - 0.0266337... = 0.8714672
  EXPECT_NEAR(m.data<float>()[0], 0.02f, 1e-8);
  EXPECT_NEAR(v.data<float>()[0], 0.00031225, 1e-6 * 0.00031225);
  const double expect = 0.898101002 - 0.1 * (0.02 / 0.19) / (std::sqrt(0.00031225 / 0.001999) + 1e-8);
  EXPECT_NEAR(p.data<float>()[0], expect, 2e-6);
}

TEST(Optimizer, ReadsBf16Gradients) {
  Tensor p = Tensor::from_f32({1.f}, {1}, DType::f32);
  Tensor g = Tensor::from_f32({0.5f}, {1}, DType::bf16);
  Tensor buf = Tensor::zeros({1}, DType::f32);
  sgd_momentum_step(p, g, buf, {0.1, 0.0, 0.0});
  EXPECT_EQ(p.data<float>()[0], 1.f - 0.1f * 0.5f);
}

TEST(Optimizer, BadArgumentsAreErrors) {
  Tensor p = Tensor::zeros({4}, DType::f32), g = Tensor::zeros({4}, DType::f32), s = Tensor::zeros({4}, DType::f32);
  Tensor p16 = Tensor::zeros({4}, DType::bf16), g3 = Tensor::zeros({3}, DType::f32), s3 = Tensor::zeros({3}, DType::f32);
  EXPECT_THROW(sgd_momentum_step(p16, g, s, {}), Error);
  EXPECT_THROW(sgd_momentum_step(p, g3, s, {}), Error);
  EXPECT_THROW(sgd_momentum_step(p, g, s3, {}), Error);
  Tensor m = Tensor::zeros({4}, DType::f32), v = Tensor::zeros({4}, DType::f32);
  EXPECT_THROW(adamw_step(p, g, m, v, 0, {}), Error);
}

TEST(OptimizerGpu, CudaEqualsCpuBitForBit) {
  TE_REQUIRE_GPU();
  const Shape shape{1000, 37};
  for (DType gt : {DType::f32, DType::bf16}) {
    Tensor p = test_ops::make(shape, DType::f32, 1), m = Tensor::zeros(shape, DType::f32);
    Tensor v = Tensor::zeros(shape, DType::f32), buf = Tensor::zeros(shape, DType::f32);
    Tensor q = p.clone();
    Tensor dp = p.to(Device::cuda(0)), dq = q.to(Device::cuda(0));
    Tensor dm = m.to(Device::cuda(0)), dv = v.to(Device::cuda(0)), dbuf = buf.to(Device::cuda(0));
    for (int64_t step = 1; step <= 3; ++step) {
      Tensor gf = test_ops::make(shape, DType::f32, 10 + static_cast<uint64_t>(step));
      std::vector<float> gv(static_cast<size_t>(gf.numel()));
      std::memcpy(gv.data(), gf.data_ptr(), gv.size() * 4);
      Tensor gh = Tensor::from_f32(gv, shape, gt), gd = gh.to(Device::cuda(0));
      adamw_step(p, gh, m, v, step, {});
      adamw_step(dp, gd, dm, dv, step, {});
      sgd_momentum_step(q, gh, buf, {});
      sgd_momentum_step(dq, gd, dbuf, {});
    }
    EXPECT_TRUE(test_ops::bit_equal(dp.to(Device::cpu()), p)) << dtype_name(gt);
    EXPECT_TRUE(test_ops::bit_equal(dm.to(Device::cpu()), m)) << dtype_name(gt);
    EXPECT_TRUE(test_ops::bit_equal(dv.to(Device::cpu()), v)) << dtype_name(gt);
    EXPECT_TRUE(test_ops::bit_equal(dq.to(Device::cpu()), q)) << dtype_name(gt);
    EXPECT_TRUE(test_ops::bit_equal(dbuf.to(Device::cpu()), buf)) << dtype_name(gt);
  }
}

}  // namespace
}  // namespace te
