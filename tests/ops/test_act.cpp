// GELU (tanh), SwiGLU and ReLU forward/backward and the bias gradient against float64 references computed here,
// on CPU and CUDA, contiguous and strided inputs, plus a finite-difference check of every backward.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/act/act.h"
#include "ops_test_util.h"

namespace te {
namespace {
using namespace test;

double gelu64(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
double silu64(double x) { return x / (1 + std::exp(-x)); }

// y [M, F] from x [M, F_in] in float64.
std::vector<double> ref_forward(ActKind k, const std::vector<double>& x, int64_t M, int64_t F) {
  std::vector<double> y(static_cast<size_t>(M * F));
  const int64_t in = k == ActKind::swiglu ? 2 * F : F;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t j = 0; j < F; ++j) {
      const double a = x[m * in + j];
      y[m * F + j] = k == ActKind::gelu ? gelu64(a)
                     : k == ActKind::relu ? (a > 0 ? a : 0.0)
                                          : silu64(a) * x[m * in + F + j];
    }
  return y;
}

// Analytic float64 backward; validated against finite differences by ActGradCheck.
std::vector<double> ref_backward(ActKind k, const std::vector<double>& dy, const std::vector<double>& x, int64_t M,
                                 int64_t F) {
  const int64_t in = k == ActKind::swiglu ? 2 * F : F;
  std::vector<double> dx(static_cast<size_t>(M * in));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t j = 0; j < F; ++j) {
      const double a = x[m * in + j], d = dy[m * F + j];
      if (k == ActKind::gelu) {
        const double c = std::sqrt(2 / M_PI), t = std::tanh(c * (a + 0.044715 * a * a * a));
        dx[m * in + j] = d * (0.5 * (1 + t) + 0.5 * a * (1 - t * t) * c * (1 + 3 * 0.044715 * a * a));
      } else if (k == ActKind::relu) {
        dx[m * in + j] = a > 0 ? d : 0.0;
      } else {
        const double s = 1 / (1 + std::exp(-a)), b = x[m * in + F + j];
        dx[m * in + j] = d * b * s * (1 + a * (1 - s));
        dx[m * in + F + j] = d * a * s;
      }
    }
  return dx;
}

struct ActCase {
  ActKind kind;
  DType tx, tout;
  int64_t M, F;
  Layout layout;
  bool cuda;
};
std::string act_case_name(const ::testing::TestParamInfo<ActCase>& i) {
  const ActCase& c = i.param;
  return std::string(act_kind_name(c.kind)) + "_" + std::string(dtype_name(c.tx)) + "_o" +
         std::string(dtype_name(c.tout)) + "_" + std::to_string(c.M) + "x" + std::to_string(c.F) + "_" +
         layout_name(c.layout) + (c.cuda ? "_cuda" : "_cpu");
}
std::vector<ActCase> act_cases() {
  std::vector<ActCase> v;
  const std::pair<DType, DType> dts[] = {
      {DType::f32, DType::f32}, {DType::bf16, DType::bf16}, {DType::f16, DType::f16}, {DType::f32, DType::bf16}};
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {3, 7}, {17, 100}, {33, 1000}, {64, 4096}};
  for (bool cuda : {false, true})
    for (ActKind k : {ActKind::gelu, ActKind::swiglu, ActKind::relu})
      for (auto [tx, to] : dts)
        for (auto [M, F] : shapes)
          for (Layout l : {Layout::contiguous, Layout::col_slice}) v.push_back({k, tx, to, M, F, l, cuda});
  for (bool cuda : {false, true})
    for (ActKind k : {ActKind::gelu, ActKind::swiglu})
      v.push_back({k, DType::bf16, DType::bf16, 48, 40, Layout::transposed, cuda});
  return v;
}

class ActTest : public ::testing::TestWithParam<ActCase> {};

TEST_P(ActTest, ForwardBackwardBiasGradMatchFloat64) {
  const ActCase c = GetParam();
  if (c.cuda) TE_REQUIRE_GPU();
  const Device dev = device_for(c.cuda);
  const int64_t in = c.kind == ActKind::swiglu ? 2 * c.F : c.F;
  const Tensor x = random_2d(c.M, in, c.tx, 100 + c.F, dev, c.layout, 2.f);
  Tensor y = act_forward(c.kind, x, c.tout);
  ASSERT_EQ(y.shape(), (Shape{c.M, c.F}));
  const auto xd = to_f64(x);
  EXPECT_LE(rel_l2(ref_forward(c.kind, xd, c.M, c.F), y.to_f32_vector()), tol_for(c.tout));

  const Tensor dy = random_2d(c.M, c.F, c.tx, 200 + c.M, dev, c.layout);
  Tensor dx = act_backward(c.kind, dy, x);
  const auto dyd = to_f64(dy);
  EXPECT_LE(rel_l2(ref_backward(c.kind, dyd, xd, c.M, c.F), dx.to_f32_vector()), tol_for(c.tx));

  Tensor db = bias_grad(dy, DType::f32);
  std::vector<double> rdb(static_cast<size_t>(c.F), 0.0);
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t j = 0; j < c.F; ++j) rdb[j] += dyd[m * c.F + j];
  EXPECT_LE(rel_l2(rdb, db.to_f32_vector()), kTolF32);
}

INSTANTIATE_TEST_SUITE_P(Ops, ActTest, ::testing::ValuesIn(act_cases()), act_case_name);

class ActGradCheck : public ::testing::TestWithParam<std::tuple<ActKind, bool>> {};

TEST_P(ActGradCheck, BackwardMatchesFiniteDifferences) {
  const auto [kind, cuda] = GetParam();
  if (cuda) TE_REQUIRE_GPU();
  const Device dev = device_for(cuda);
  const int64_t M = 3, F = 5, in = kind == ActKind::swiglu ? 2 * F : F;
  const Tensor x = random_2d(M, in, DType::f32, 41, dev, Layout::contiguous, 1.5f);
  const Tensor dy = random_2d(M, F, DType::f32, 42, dev, Layout::contiguous);
  const Tensor dx = act_backward(kind, dy, x);
  auto xd = to_f64(x);
  const auto dyd = to_f64(dy);
  std::vector<double> g(xd.size());
  for (size_t i = 0; i < xd.size(); ++i) {
    const double keep = xd[i];
    double l[2];
    for (int s = 0; s < 2; ++s) {
      xd[i] = keep + (s ? -kFiniteDiffStep : kFiniteDiffStep);
      const auto y = ref_forward(kind, xd, M, F);
      l[s] = 0;
      for (size_t j = 0; j < y.size(); ++j) l[s] += dyd[j] * y[j];
    }
    xd[i] = keep;
    g[i] = (l[0] - l[1]) / (2 * kFiniteDiffStep);
  }
  EXPECT_LE(rel_l2(g, dx.to_f32_vector()), kTolFiniteDiff);
}

INSTANTIATE_TEST_SUITE_P(Ops, ActGradCheck,
                         ::testing::Combine(::testing::Values(ActKind::gelu, ActKind::swiglu, ActKind::relu),
                                            ::testing::Bool()),
                         [](const auto& i) {
                           return std::string(act_kind_name(std::get<0>(i.param))) +
                                  (std::get<1>(i.param) ? "_cuda" : "_cpu");
                         });

TEST(Act, RejectsBadArguments) {
  EXPECT_THROW(act_forward(ActKind::swiglu, Tensor::zeros({2, 5}, DType::f32), DType::f32), Error);  // odd 2F
  Tensor x = Tensor::zeros({2, 6}, DType::f32);
  EXPECT_THROW(act_backward(ActKind::gelu, Tensor::zeros({2, 5}, DType::f32), x), Error);
  EXPECT_EQ(act_kind_from_name("swiglu"), ActKind::swiglu);
}

// CUDA and CPU run the same formulas (act_math.h); libm expf and the device quotient may differ by a few ulp.
TEST(Act, CudaMatchesCpuClosely) {
  TE_REQUIRE_GPU();
  for (ActKind k : {ActKind::gelu, ActKind::swiglu, ActKind::relu}) {
    const Tensor x = random_2d(129, 2 * 136, DType::f32, 9, Device::cpu(), Layout::contiguous, 3.f);
    const auto cpu = act_forward(k, x, DType::f32).to_f32_vector();
    const auto gpu = act_forward(k, x.to(Device::cuda(0)), DType::f32).to_f32_vector();
    EXPECT_LE(rel_l2(std::vector<double>(cpu.begin(), cpu.end()), gpu), 1e-6) << act_kind_name(k);
  }
}

// GELU and ReLU backward may overwrite dy with dx (the model's backward does, to save its largest buffer): the bytes
// equal the out-of-place result on every device; SwiGLU, whose dx is twice dy's width, refuses.
TEST(Act, InPlaceBackwardEqualsOutOfPlace) {
  std::vector<Device> devices{Device::cpu()};
  if (cuda_device_count() > 0) devices.push_back(Device::cuda(0));
  for (Device d : devices)
    for (ActKind k : {ActKind::gelu, ActKind::relu})
      for (DType t : {DType::bf16, DType::f32}) {
        const Tensor x = random_2d(67, 256, t, 5, d, Layout::contiguous, 3.f);
        const Tensor dy = random_2d(67, 256, t, 6, d, Layout::contiguous, 1.f);
        const Tensor expect = act_backward(k, dy, x);
        Tensor inout = dy.clone();
        act_backward(k, inout, x, inout);
        EXPECT_EQ(inout.to(Device::cpu()).to_f32_vector(), expect.to(Device::cpu()).to_f32_vector())
            << act_kind_name(k) << " " << dtype_name(t) << " " << d.str();
      }
  Tensor x = Tensor::zeros({2, 8}, DType::f32), dy = Tensor::zeros({2, 4}, DType::f32);
  EXPECT_THROW(act_backward(ActKind::swiglu, dy, x, dy), Error);
}

}  // namespace
}  // namespace te
