// squared_error (the training loss and its gradient in one pass): grad bit-identical to the op-by-op chain it
// replaces (cast, scale by −1, add, scale, cast) on the CPU and on CUDA, the sum against float64 and bit-identical to
// sum_squares of the chain's difference on the CPU, odd sizes, strided and misaligned inputs, NaN/Inf, bad input.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/float_convert.h"
#include "ops/elementwise/elementwise.h"
#include "ops/elementwise/squared_error.h"
#include "ops_test_util.h"

namespace te {
namespace {
using namespace test;

// The chain models/rank_model.cpp ran before squared_error, op by op on the inputs' device.
struct Chain {
  Tensor grad, sum;
};
Chain old_chain(const Tensor& out, const Tensor& target, float grad_scale, DType grad_dtype) {
  const Tensor diff = add(cast(out, DType::f32), scale_tensor(cast(target, DType::f32), -1.f));
  return {cast(scale_tensor(diff, grad_scale), grad_dtype), sum_squares(diff)};
}

struct SeCase {
  DType tout, ttarget, tgrad;
  int64_t M, N;
  Layout layout;
  bool cuda;
};
std::string se_case_name(const ::testing::TestParamInfo<SeCase>& i) {
  const SeCase& c = i.param;
  return std::string(dtype_name(c.tout)) + "_" + std::string(dtype_name(c.ttarget)) + "_g" +
         std::string(dtype_name(c.tgrad)) + "_" + std::to_string(c.M) + "x" + std::to_string(c.N) + "_" +
         layout_name(c.layout) + (c.cuda ? "_cuda" : "_cpu");
}
std::vector<SeCase> se_cases() {
  std::vector<SeCase> v;
  for (bool cuda : {false, true})
    for (auto [to, tt, tg] : {std::tuple{DType::bf16, DType::bf16, DType::bf16},
                              {DType::f16, DType::f16, DType::f16},
                              {DType::f32, DType::f32, DType::f32},
                              {DType::bf16, DType::f32, DType::bf16},
                              {DType::f32, DType::f32, DType::bf16}})
      // 1 and 7x13: fewer elements than one vector and a tail; 64x128: whole vectors only.
      for (auto [M, N] : {std::pair<int64_t, int64_t>{1, 1}, {7, 13}, {64, 128}, {65, 129}, {130, 1000}})
        for (Layout l : {Layout::contiguous, Layout::col_slice, Layout::transposed})
          v.push_back({to, tt, tg, M, N, l, cuda});
  return v;
}

class SquaredErrorTest : public ::testing::TestWithParam<SeCase> {};

TEST_P(SquaredErrorTest, MatchesTheOpByOpChainAndFloat64) {
  const SeCase c = GetParam();
  if (c.cuda) TE_REQUIRE_GPU();
  const Device dev = device_for(c.cuda);
  const Tensor out = random_2d(c.M, c.N, c.tout, 11, dev, c.layout, 2.f);
  const Tensor target = random_2d(c.M, c.N, c.ttarget, 12, dev, c.layout, 1.5f, 0.25f);
  const float grad_scale = static_cast<float>(2.0 / (3.0 * c.M * c.N));  // 2/n with n not a power of two
  const SquaredError se = squared_error(out, target, grad_scale, c.tgrad);
  ASSERT_EQ(se.grad.shape(), out.shape());
  ASSERT_EQ(se.grad.dtype(), c.tgrad);
  ASSERT_TRUE(se.grad.is_contiguous());
  ASSERT_EQ(se.sum.shape(), (Shape{1}));

  // grad: the bits of the chain on the same device.
  const Chain chain = old_chain(out, target, grad_scale, c.tgrad);
  EXPECT_EQ(bytes_of(se.grad), bytes_of(chain.grad));

  // sum and grad against float64 on the same input values.
  const auto od = to_f64(out), td = to_f64(target);
  double ref_sum = 0;
  std::vector<double> ref_grad(od.size());
  for (size_t i = 0; i < od.size(); ++i) {
    ref_sum += (od[i] - td[i]) * (od[i] - td[i]);
    ref_grad[i] = static_cast<double>(grad_scale) * (od[i] - td[i]);
  }
  const float sum = se.sum.to_f32_vector()[0];
  EXPECT_NEAR(sum, ref_sum, 1e-6 * ref_sum);
  EXPECT_LE(rel_l2(ref_grad, se.grad.to_f32_vector()), tol_for(c.tgrad));

  if (!c.cuda) {
    // The CPU adds the same squares in the same order as sum_squares of the chain's difference.
    EXPECT_EQ(f32_bits(sum), f32_bits(chain.sum.to_f32_vector()[0]));
    return;
  }
  // CUDA: grad bit-identical to the CPU reference; the sum in another fixed order, the same on every run.
  const SquaredError cpu = squared_error(out.to(Device::cpu()), target.to(Device::cpu()), grad_scale, c.tgrad);
  EXPECT_EQ(bytes_of(se.grad), bytes_of(cpu.grad));
  const float cpu_sum = cpu.sum.to_f32_vector()[0];
  EXPECT_NEAR(sum, cpu_sum, 1e-6 * cpu_sum);
  const float again = squared_error(out, target, grad_scale, c.tgrad).sum.to_f32_vector()[0];
  EXPECT_EQ(f32_bits(again), f32_bits(sum)) << "not deterministic";
}

INSTANTIATE_TEST_SUITE_P(Ops, SquaredErrorTest, ::testing::ValuesIn(se_cases()), se_case_name);

// Views that start off a 16-byte boundary take the scalar path (CUDA) and give the same bytes.
TEST(SquaredError, MisalignedInputsMatchAligned) {
  for (bool cuda : {false, true}) {
    if (cuda && cuda_device_count() == 0) continue;
    const Device dev = device_for(cuda);
    const int64_t n = 8 * 300 + 5;
    const Tensor out = random_2d(1, n + 1, DType::bf16, 21, dev, Layout::contiguous).reshape({n + 1});
    const Tensor target = random_2d(1, n + 1, DType::bf16, 22, dev, Layout::contiguous).reshape({n + 1});
    const Tensor out_off = out.narrow(0, 1, n), target_off = target.narrow(0, 1, n);  // 2 bytes past the start
    const Tensor out_al = out_off.clone(), target_al = target_off.clone();            // fresh, aligned storage
    const SquaredError a = squared_error(out_off, target_off, 0.5f, DType::bf16);
    const SquaredError b = squared_error(out_al, target_al, 0.5f, DType::bf16);
    EXPECT_EQ(bytes_of(a.grad), bytes_of(b.grad)) << dev.str();
    const float sa = a.sum.to_f32_vector()[0], sb = b.sum.to_f32_vector()[0];
    EXPECT_NEAR(sa, sb, 1e-6 * sb) << dev.str();  // CUDA: another grid, so another (fixed) order
    if (!cuda) {
      EXPECT_EQ(f32_bits(sa), f32_bits(sb));
    }
  }
}

TEST(SquaredError, NonFiniteInputGivesNonFiniteSum) {
  for (bool cuda : {false, true}) {
    if (cuda && cuda_device_count() == 0) continue;
    const Device dev = device_for(cuda);
    for (float bad : {NAN, INFINITY, -INFINITY}) {
      for (bool in_target : {false, true}) {
        std::vector<float> o(1000, 0.5f), t(1000, 0.25f);
        (in_target ? t : o)[637] = bad;
        const Tensor out = Tensor::from_f32(o, {10, 100}, DType::bf16).to(dev);
        const Tensor target = Tensor::from_f32(t, {10, 100}, DType::bf16).to(dev);
        const SquaredError se = squared_error(out, target, 1e-3f, DType::bf16);
        EXPECT_FALSE(std::isfinite(se.sum.to_f32_vector()[0])) << bad << (in_target ? " in target" : " in out");
        EXPECT_FALSE(std::isfinite(se.grad.to_f32_vector()[637]));
        const float finite = Tensor::from_f32({1e-3f * 0.25f}, {1}, DType::bf16).to_f32_vector()[0];
        EXPECT_EQ(se.grad.to_f32_vector()[0], finite);  // the other elements are untouched by the bad one
      }
    }
  }
}

TEST(SquaredError, EmptyInputGivesZero) {
  for (bool cuda : {false, true}) {
    if (cuda && cuda_device_count() == 0) continue;
    const Tensor z = Tensor::zeros({0, 16}, DType::bf16, device_for(cuda));
    const SquaredError se = squared_error(z, z, 1.f, DType::bf16);
    EXPECT_EQ(se.grad.shape(), (Shape{0, 16}));
    EXPECT_EQ(se.sum.to_f32_vector()[0], 0.f);
  }
}

TEST(SquaredError, RejectsBadArguments) {
  const Tensor a = Tensor::zeros({3, 4}, DType::bf16);
  EXPECT_THROW(squared_error(a, Tensor::zeros({4, 3}, DType::bf16), 1.f, DType::bf16), Error);  // shapes differ
  EXPECT_THROW(squared_error(a, Tensor::zeros({3, 4}, DType::fp8_e4m3), 1.f, DType::bf16), Error);
  EXPECT_THROW(squared_error(Tensor::zeros({3, 4}, DType::i32), a, 1.f, DType::bf16), Error);
  EXPECT_THROW(squared_error(a, a, 1.f, DType::fp8_e4m3), Error);  // grad dtype
  EXPECT_THROW(squared_error(Tensor(), a, 1.f, DType::bf16), Error);
}

}  // namespace
}  // namespace te
