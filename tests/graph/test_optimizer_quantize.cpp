// The fused AdamW step → quantize (graph/optimizer_quantize.h) against the two passes it replaces — the
// multi-tensor step writing the model-dtype copy, then quantizing that copy into both usages — byte for byte:
// masters, moments, gradients, both FP8 copies and their scales, for bf16 and f16, whole and partial 128x128
// tiles, pow2 and exact scales, a step skipped on the device, and several steps in a row. What has no fused path
// (SGD among it) is refused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/gpu.h"
#include "engine/error.h"
#include "graph/optimizer_quantize.h"
#include "ops/elementwise/elementwise.h"
#include "test_ops.h"

namespace te {
namespace {

struct OneWeight {
  Tensor master, grad, m, v;
  ParamSlot slot(Tensor value = Tensor()) const { return {master, grad, m, v, value}; }
};

OneWeight random_weight(const Shape& shape, uint64_t seed, const Stream& s) {
  const Device d = Device::cuda(0);
  OneWeight w{Tensor::empty(shape, DType::f32, d, s), Tensor::empty(shape, DType::f32, d, s),
              Tensor::zeros(shape, DType::f32, d, s), Tensor::zeros(shape, DType::f32, d, s)};
  w.master.fill_normal(seed, 0.f, 0.05f, s);
  w.grad.fill_normal(seed + 1, 0.f, 0.01f, s);
  return w;
}

OneWeight copy_of(const OneWeight& w, const Stream& s) {
  return {w.master.clone(s), w.grad.clone(s), w.m.clone(s), w.v.clone(s)};
}

void expect_same_bytes(const Tensor& a, const Tensor& b, const std::string& what, const Stream& s) {
  EXPECT_TRUE(test_ops::bit_equal(a.to(Device::cpu(), s), b.to(Device::cpu(), s))) << what;
}

struct Case {
  Shape shape;
  DType value;
  bool pow2;
};

class OptimizerQuantizeGpu : public ::testing::TestWithParam<Case> {};

TEST_P(OptimizerQuantizeGpu, EqualsStepThenQuantize) {
  TE_REQUIRE_GPU();
  const Case c = GetParam();
  const Stream s;
  QuantizerConfig cfg;
  cfg.format = QuantFormat::fp8_block_2d;
  cfg.pow2_scales = c.pow2;
  Quantizer q(cfg);
  OneWeight fused = random_weight(c.shape, 11, s);
  OneWeight plain = copy_of(fused, s);
  Tensor value = cast(fused.master, c.value, s);
  QuantizedTensor cached = q.quantize(value, Usage::both, s);  // the cache a forward made
  Tensor flag = Tensor::zeros({1}, DType::i32, Device::cuda(0), s);
  for (int64_t step = 1; step <= 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const OptimizerScalars host = adamw_scalars(step, {.lr = 0.01, .weight_decay = 0.1});
    Tensor scalars =
        Tensor::borrow(const_cast<OptimizerScalars*>(&host), {int64_t{sizeof host}}, DType::u8, Device::cpu())
            .to(Device::cuda(0), s);
    flag.fill(step == 2 ? 1.0 : 0.0, s);  // the second step is skipped on the device
    const OptimizerStep st{OptimizerKind::adamw, static_cast<const OptimizerScalars*>(scalars.data_ptr()),
                           flag.data<int32_t>(), true};
    ASSERT_TRUE(optimizer_quantize_supported(fused.slot(), q, cached));
    optimizer_quantize_step(fused.slot(), st, q, cached, s);
    const ParamSlot plain_slot = plain.slot(value);
    optimizer_step({&plain_slot, 1}, st, s);
    const QuantizedTensor expect = q.quantize(value, Usage::both, s);
    expect_same_bytes(fused.master, plain.master, "master", s);
    expect_same_bytes(fused.grad, plain.grad, "gradient", s);
    expect_same_bytes(fused.m, plain.m, "first state", s);
    expect_same_bytes(fused.v, plain.v, "second moment", s);
    expect_same_bytes(cached.rowwise_data, expect.rowwise_data, "row-wise data", s);
    expect_same_bytes(cached.rowwise_scale_inv, expect.rowwise_scale_inv, "row-wise scales", s);
    expect_same_bytes(cached.columnwise_data, expect.columnwise_data, "column-wise data", s);
    expect_same_bytes(cached.columnwise_scale_inv, expect.columnwise_scale_inv, "column-wise scales", s);
    // Fresh gradients for the next step, the same on both sides.
    fused.grad.fill_normal(100 + static_cast<uint64_t>(step), 0.f, 0.01f, s);
    plain.grad.copy_from(fused.grad, s);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, OptimizerQuantizeGpu,
                         ::testing::Values(Case{{256, 384}, DType::bf16, true},
                                           Case{{200, 136}, DType::bf16, true},  // partial tiles on both dims
                                           Case{{128, 256}, DType::f16, false}),
                         [](const ::testing::TestParamInfo<Case>& i) { return "case" + std::to_string(i.index); });

// What the fused path cannot take is reported by optimizer_quantize_supported and refused by name.
TEST(OptimizerQuantizeGpu, UnsupportedSlotsAreRefused) {
  TE_REQUIRE_GPU();
  const Stream s;
  QuantizerConfig block2d;
  block2d.format = QuantFormat::fp8_block_2d;
  Quantizer q(block2d);
  OneWeight w = random_weight({128, 128}, 3, s);
  const QuantizedTensor cached = q.quantize(cast(w.master, DType::bf16, s), Usage::both, s);
  EXPECT_TRUE(optimizer_quantize_supported(w.slot(), q, cached));
  EXPECT_FALSE(optimizer_quantize_supported(w.slot(cast(w.master, DType::bf16, s)), q, cached));  // a value copy
  OneWeight sgd = copy_of(w, s);
  sgd.v = Tensor();  // SGD's slot: one state
  EXPECT_FALSE(optimizer_quantize_supported(sgd.slot(), q, cached));
  QuantizerConfig block1d;
  block1d.format = QuantFormat::fp8_block_1d;
  Quantizer q1(block1d);
  EXPECT_FALSE(optimizer_quantize_supported(w.slot(), q1, q1.quantize(cast(w.master, DType::bf16, s), Usage::both, s)));
  OneWeight odd = random_weight({128, 132}, 4, s);  // last dim not a multiple of 8
  EXPECT_FALSE(
      optimizer_quantize_supported(odd.slot(), q, q.quantize(cast(odd.master, DType::bf16, s), Usage::both, s)));
  const OptimizerScalars host = adamw_scalars(1, {});
  Tensor scalars =
      Tensor::borrow(const_cast<OptimizerScalars*>(&host), {int64_t{sizeof host}}, DType::u8, Device::cpu())
          .to(Device::cuda(0), s);
  const OptimizerStep st{OptimizerKind::adamw, static_cast<const OptimizerScalars*>(scalars.data_ptr()), nullptr, true};
  try {
    optimizer_quantize_step(odd.slot(), st, q, q.quantize(cast(odd.master, DType::bf16, s), Usage::both, s), s);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[128, 132]"), std::string::npos) << e.what();
  }
}

TEST(OptimizerQuantize, NoFusedPathOnTheCpu) {
  QuantizerConfig block2d;
  block2d.format = QuantFormat::fp8_block_2d;
  Quantizer q(block2d);
  const Tensor master = Tensor::zeros({128, 128}, DType::f32);
  const QuantizedTensor cached = q.quantize(cast(master, DType::bf16), Usage::both);
  const ParamSlot slot{master, master.clone(), master.clone(), master.clone(), Tensor()};
  EXPECT_FALSE(optimizer_quantize_supported(slot, q, cached));
}

}  // namespace
}  // namespace te
