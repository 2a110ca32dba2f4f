// Residual add (+ bias), cast, 2D transpose and scale: against float64 / exact expectations, strided inputs,
// and CUDA bit-identical to CPU.
#include <gtest/gtest.h>

#include "engine/float_convert.h"
#include "ops/elementwise/elementwise.h"
#include "ops_test_util.h"

namespace te {
namespace {
using namespace test;

struct EwCase {
  DType ta, tb, tout;
  int64_t M, N;
  Layout layout;
  bool bias;
  bool cuda;
};
std::string ew_case_name(const ::testing::TestParamInfo<EwCase>& i) {
  const EwCase& c = i.param;
  return std::string(dtype_name(c.ta)) + "_" + std::string(dtype_name(c.tb)) + "_o" + std::string(dtype_name(c.tout)) +
         "_" + std::to_string(c.M) + "x" + std::to_string(c.N) + "_" + layout_name(c.layout) +
         (c.bias ? "_bias" : "") + (c.cuda ? "_cuda" : "_cpu");
}
std::vector<EwCase> ew_cases() {
  std::vector<EwCase> v;
  for (bool cuda : {false, true})
    for (auto [ta, tb, to] : {std::tuple{DType::f32, DType::f32, DType::f32}, std::tuple{DType::bf16, DType::bf16, DType::bf16},
                              std::tuple{DType::f16, DType::f16, DType::f16}, std::tuple{DType::bf16, DType::f32, DType::f32}})
      for (auto [M, N] : {std::pair<int64_t, int64_t>{1, 1}, {7, 13}, {65, 129}, {130, 1000}})
        for (Layout l : {Layout::contiguous, Layout::col_slice, Layout::transposed})
          for (bool bias : {false, true}) v.push_back({ta, tb, to, M, N, l, bias, cuda});
  return v;
}

class ElementwiseTest : public ::testing::TestWithParam<EwCase> {};

TEST_P(ElementwiseTest, AddCastTransposeScale) {
  const EwCase c = GetParam();
  if (c.cuda) TE_REQUIRE_GPU();
  const Device dev = device_for(c.cuda);
  const Tensor a = random_2d(c.M, c.N, c.ta, 1, dev, c.layout), b = random_2d(c.M, c.N, c.tb, 2, dev, c.layout);
  Tensor bias;
  if (c.bias) bias = random_2d(1, c.N, c.tb, 3, dev, Layout::contiguous).reshape({c.N});
  Tensor out = Tensor::empty({c.M, c.N}, c.tout, dev);
  add(a, b, bias, out);
  const auto ad = to_f64(a), bd = to_f64(b);
  const auto biasd = c.bias ? to_f64(bias) : std::vector<double>{};
  std::vector<double> ref(ad.size());
  for (int64_t i = 0; i < c.M * c.N; ++i) ref[i] = ad[i] + bd[i] + (c.bias ? biasd[i % c.N] : 0.0);
  EXPECT_LE(rel_l2(ref, out.to_f32_vector()), tol_for(c.tout));

  // scale: one fp32 multiply, rounded once.
  const Tensor s = scale_tensor(a, 0.37f);
  std::vector<double> sref(ad.size());
  for (size_t i = 0; i < ad.size(); ++i) sref[i] = 0.37 * ad[i];
  EXPECT_LE(rel_l2(sref, s.to_f32_vector()), tol_for(c.ta));

  // transpose: exact.
  const Tensor t = transpose_2d(a);
  ASSERT_EQ(t.shape(), (Shape{c.N, c.M}));
  const auto tv = t.to_f32_vector();
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j) ASSERT_EQ(tv[j * c.M + i], static_cast<float>(ad[i * c.N + j]));

  // cast: equals the engine's conversion of the same values (round to nearest even), bit for bit.
  for (DType to : {DType::f32, DType::bf16, DType::f16, DType::fp8_e4m3}) {
    const Tensor y = cast(a, to);
    const Tensor expect = Tensor::from_f32(a.to_f32_vector(), {c.M, c.N}, to);
    EXPECT_EQ(bytes_of(y), bytes_of(expect)) << dtype_name(to);
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, ElementwiseTest, ::testing::ValuesIn(ew_cases()), ew_case_name);

// CUDA elementwise ops use the CPU reference's conversions: bit-identical results.
TEST(Elementwise, CudaBitIdenticalToCpu) {
  TE_REQUIRE_GPU();
  const Tensor a = random_2d(67, 301, DType::bf16, 5, Device::cpu(), Layout::contiguous, 100.f);
  const Tensor b = random_2d(67, 301, DType::f32, 6, Device::cpu(), Layout::contiguous);
  const Tensor bias = random_2d(1, 301, DType::f16, 7, Device::cpu(), Layout::contiguous).reshape({301});
  const Device g = Device::cuda(0);
  EXPECT_EQ(bytes_of(add(a, b, bias)), bytes_of(add(a.to(g), b.to(g), bias.to(g))));
  EXPECT_EQ(bytes_of(scale_tensor(b, 3.3f)), bytes_of(scale_tensor(b.to(g), 3.3f)));
  EXPECT_EQ(bytes_of(transpose_2d(a)), bytes_of(transpose_2d(a.to(g))));
  for (DType to : {DType::f16, DType::fp8_e4m3, DType::fp8_e5m2})
    EXPECT_EQ(bytes_of(cast(a, to)), bytes_of(cast(a.to(g), to))) << dtype_name(to);
}

// Σ x² (the training loss): CPU against a long-double sum of the same values; CUDA within float rounding of the
// CPU (another fixed summation order) and bit-identical from run to run.
TEST(Elementwise, SumSquares) {
  for (Layout l : {Layout::contiguous, Layout::transposed}) {
    const Tensor x = random_2d(513, 257, DType::bf16, 9, Device::cpu(), l, 4.f);
    long double ref = 0;
    for (float v : x.to_f32_vector()) ref += static_cast<long double>(v) * v;
    const float cpu = sum_squares(x).to_f32_vector()[0];
    EXPECT_NEAR(cpu, static_cast<double>(ref), 1e-6 * static_cast<double>(ref)) << layout_name(l);
    if (cuda_device_count() == 0) continue;
    const Tensor g = x.to(Device::cuda(0));
    const float a = sum_squares(g).to_f32_vector()[0], b = sum_squares(g).to_f32_vector()[0];
    EXPECT_NEAR(a, cpu, 1e-6 * cpu) << layout_name(l);
    EXPECT_EQ(f32_bits(a), f32_bits(b)) << "not deterministic";
  }
  EXPECT_EQ(sum_squares(Tensor::zeros({0}, DType::f32)).to_f32_vector()[0], 0.f);
}

TEST(Elementwise, RejectsBadArguments) {
  Tensor a = Tensor::zeros({3, 4}, DType::f32);
  EXPECT_THROW(add(a, Tensor::zeros({4, 3}, DType::f32)), Error);
  EXPECT_THROW(add(a, a, Tensor::zeros({3}, DType::f32)), Error);
  EXPECT_THROW(transpose_2d(Tensor::zeros({2, 3, 4}, DType::f32)), Error);
  Tensor out = Tensor::zeros({3, 4}, DType::f32).transpose(0, 1);
  EXPECT_THROW(cast(Tensor::zeros({4, 3}, DType::f32), out), Error);  // out must be contiguous
}

}  // namespace
}  // namespace te
