// Optimizers: steps against hand-computed values, argument checks, and CUDA = CPU bit for bit (GPU only).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/gpu.h"
#include "graph/optimizer.h"
#include "ops/elementwise/elementwise.h"
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

// A parameter set like a model's, on `device`: sizes that are not multiples of the four-element vector unit, one
// master that starts one element into its storage (unaligned: the scalar path), and more parameters than one
// launch's argument table holds.
struct ModelLikeParams {
  std::vector<Tensor> master, grad, m, v, value;
  std::vector<ParamSlot> slots() const {
    std::vector<ParamSlot> out;
    for (size_t i = 0; i < master.size(); ++i) out.push_back({master[i], grad[i], m[i], v[i], value[i]});
    return out;
  }
};

ModelLikeParams model_like_params(DType grad_dtype, DType value_dtype, Device device = Device::cpu()) {
  ModelLikeParams p;
  for (int i = 0; i < 61; ++i) {
    const Shape shape = i == 4 ? Shape{29} : Shape{i % 3 == 0 ? 96 : 7, 1 + i % 5};
    const uint64_t seed = static_cast<uint64_t>(i);
    if (i == 4)
      p.master.push_back(test_ops::make({30}, DType::f32, 100 + seed).to(device).narrow(0, 1, 29));
    else
      p.master.push_back(test_ops::make(shape, DType::f32, 100 + seed).to(device));
    p.grad.push_back(cast(test_ops::make(shape, DType::f32, 300 + seed), grad_dtype).to(device));
    p.m.push_back(Tensor::zeros(shape, DType::f32, device));
    p.v.push_back(Tensor::zeros(shape, DType::f32, device));
    p.value.push_back(Tensor::zeros(shape, value_dtype, device));
  }
  return p;
}

TEST(Optimizer, MultiTensorStepEqualsOneCallPerParameterThenCast) {
  for (bool adamw : {true, false}) {
    ModelLikeParams all = model_like_params(DType::f32, DType::bf16);
    ModelLikeParams one = model_like_params(DType::f32, DType::bf16);
    for (int64_t step = 1; step <= 2; ++step) {
      const std::vector<ParamSlot> slots = all.slots();
      if (adamw) adamw_step(slots, step, {}); else sgd_momentum_step(slots, SgdConfig{});
      for (size_t i = 0; i < one.master.size(); ++i) {
        if (adamw) adamw_step(one.master[i], one.grad[i], one.m[i], one.v[i], step, {});
        else sgd_momentum_step(one.master[i], one.grad[i], one.m[i], SgdConfig{});
        cast(one.master[i], one.value[i]);
      }
    }
    for (size_t i = 0; i < all.master.size(); ++i) {
      ASSERT_TRUE(test_ops::bit_equal(all.master[i], one.master[i])) << i;
      ASSERT_TRUE(test_ops::bit_equal(all.m[i], one.m[i])) << i;
      ASSERT_TRUE(test_ops::bit_equal(all.value[i], one.value[i])) << i;
      if (adamw) {
        ASSERT_TRUE(test_ops::bit_equal(all.v[i], one.v[i])) << i;
      }
    }
  }
}

TEST(Optimizer, MultiTensorBadSlotNamesTheTensor) {
  ModelLikeParams p = model_like_params(DType::f32, DType::bf16);
  std::vector<ParamSlot> slots = p.slots();
  slots[5].value = Tensor::zeros({3}, DType::bf16);
  try {
    adamw_step(slots, 1, {});
    FAIL() << "a model-dtype copy of the wrong shape was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model-dtype copy"), std::string::npos) << e.what();
  }
  slots = p.slots();
  slots[2].state2 = Tensor();
  EXPECT_THROW(adamw_step(slots, 1, {}), Error);
  EXPECT_NO_THROW(sgd_momentum_step(slots, SgdConfig{}));  // SGD has no second state
}

// A step skipped on the device (OptimizerStep::skip, a non-finite loss): masters and moments stay, every gradient
// becomes 0 and every model-dtype copy is written from its master; with update off and no skip nothing changes; the
// scalars read from memory give adamw_step's bytes. On a GPU (when present) the same bytes as the CPU.
ModelLikeParams skipped_and_stepped(Device device) {
  ModelLikeParams p = model_like_params(DType::f32, DType::bf16, device);
  for (Tensor& v : p.value) v.fill(7.0);  // stale copies: the skip must rewrite them
  const OptimizerScalars host_scalars = adamw_scalars(1, {});
  Tensor scalars = Tensor::borrow(const_cast<OptimizerScalars*>(&host_scalars), {int64_t{sizeof host_scalars}},
                                  DType::u8, Device::cpu())
                       .to(device);
  Tensor flag = Tensor::from_f32({1.f}, {1}, DType::i32).to(device);
  const auto* sp = static_cast<const OptimizerScalars*>(scalars.data_ptr());
  const ModelLikeParams before = model_like_params(DType::f32, DType::bf16);
  optimizer_step(p.slots(), {OptimizerKind::adamw, sp, flag.data<int32_t>(), true});
  for (size_t i = 0; i < p.master.size(); ++i) {
    EXPECT_TRUE(test_ops::bit_equal(p.master[i].to(Device::cpu()), before.master[i])) << i;
    EXPECT_TRUE(test_ops::bit_equal(p.m[i].to(Device::cpu()), before.m[i])) << i;
    EXPECT_EQ(p.grad[i].to(Device::cpu()).to_f32_vector(), std::vector<float>(p.grad[i].numel(), 0.f)) << i;
    EXPECT_TRUE(test_ops::bit_equal(p.value[i].to(Device::cpu()), cast(before.master[i], DType::bf16))) << i;
  }
  // Fresh gradients; no skip, no update: nothing moves. Then the update itself, as adamw_step does it.
  p = model_like_params(DType::f32, DType::bf16, device);
  flag.fill(0.0);
  optimizer_step(p.slots(), {OptimizerKind::adamw, sp, flag.data<int32_t>(), false});
  for (size_t i = 0; i < p.master.size(); ++i)
    EXPECT_TRUE(test_ops::bit_equal(p.master[i].to(Device::cpu()), before.master[i])) << i;
  optimizer_step(p.slots(), {OptimizerKind::adamw, sp, flag.data<int32_t>(), true});
  ModelLikeParams ref = model_like_params(DType::f32, DType::bf16);
  adamw_step(ref.slots(), 1, {});
  for (size_t i = 0; i < p.master.size(); ++i) {
    EXPECT_TRUE(test_ops::bit_equal(p.master[i].to(Device::cpu()), ref.master[i])) << i;
    EXPECT_TRUE(test_ops::bit_equal(p.value[i].to(Device::cpu()), ref.value[i])) << i;
  }
  return p;
}

TEST(Optimizer, SkippedStepZeroesGradientsAndKeepsTheModel) { (void)skipped_and_stepped(Device::cpu()); }

TEST(OptimizerGpu, SkippedStepOnTheDevice) {
  TE_REQUIRE_GPU();
  (void)skipped_and_stepped(Device::cuda(0));
}

TEST(OptimizerGpu, MultiTensorCudaEqualsCpuBitForBit) {
  TE_REQUIRE_GPU();
  for (DType gt : {DType::f32, DType::bf16})
    for (DType vt : {DType::bf16, DType::f16, DType::f32})
      for (bool adamw : {true, false}) {
        ModelLikeParams host = model_like_params(gt, vt);
        ModelLikeParams dev = model_like_params(gt, vt, Device::cuda(0));
        for (int64_t step = 1; step <= 3; ++step) {
          if (adamw) {
            adamw_step(host.slots(), step, {});
            adamw_step(dev.slots(), step, {});
          } else {
            sgd_momentum_step(host.slots(), SgdConfig{});
            sgd_momentum_step(dev.slots(), SgdConfig{});
          }
        }
        for (size_t i = 0; i < host.master.size(); ++i) {
          ASSERT_TRUE(test_ops::bit_equal(dev.master[i].to(Device::cpu()), host.master[i])) << i;
          ASSERT_TRUE(test_ops::bit_equal(dev.value[i].to(Device::cpu()), host.value[i])) << i;
          ASSERT_TRUE(test_ops::bit_equal(dev.m[i].to(Device::cpu()), host.m[i])) << i;
        }
      }
}

}  // namespace
}  // namespace te
