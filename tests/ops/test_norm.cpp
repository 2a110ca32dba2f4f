// LayerNorm/RMSNorm forward and backward against a float64 reference computed here, on CPU and CUDA, for
// contiguous and strided inputs, plus a finite-difference check of every backward.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/norm/norm.h"
#include "ops_test_util.h"

namespace te {
namespace {
using namespace test;

constexpr float kEps = 1e-5f;

struct RefFwd {
  std::vector<double> y, mean, rstd;
};
// Independent float64 reference.
RefFwd ref_forward(bool ln, const std::vector<double>& x, const std::vector<double>& g, const std::vector<double>& b,
                   int64_t M, int64_t H, double eps) {
  RefFwd r;
  r.y.resize(x.size());
  for (int64_t m = 0; m < M; ++m) {
    double mu = 0, var = 0;
    if (ln) {
      for (int64_t j = 0; j < H; ++j) mu += x[m * H + j];
      mu /= H;
    }
    for (int64_t j = 0; j < H; ++j) var += (x[m * H + j] - mu) * (x[m * H + j] - mu);
    var /= H;
    const double rs = 1.0 / std::sqrt(var + eps);
    r.mean.push_back(mu);
    r.rstd.push_back(rs);
    for (int64_t j = 0; j < H; ++j) r.y[m * H + j] = (x[m * H + j] - mu) * rs * g[j] + (b.empty() ? 0.0 : b[j]);
  }
  return r;
}

struct RefBwd {
  std::vector<double> dx, dg, db;
};
RefBwd ref_backward(bool ln, const std::vector<double>& dy, const std::vector<double>& x,
                    const std::vector<double>& g, int64_t M, int64_t H, double eps) {
  RefFwd f = ref_forward(ln, x, g, {}, M, H, eps);
  RefBwd r{std::vector<double>(x.size()), std::vector<double>(H, 0.0), std::vector<double>(H, 0.0)};
  for (int64_t m = 0; m < M; ++m) {
    double s1 = 0, s2 = 0;
    for (int64_t j = 0; j < H; ++j) {
      const double xh = (x[m * H + j] - f.mean[m]) * f.rstd[m], gg = dy[m * H + j] * g[j];
      s1 += gg;
      s2 += gg * xh;
      r.dg[j] += dy[m * H + j] * xh;
      r.db[j] += dy[m * H + j];
    }
    for (int64_t j = 0; j < H; ++j) {
      const double xh = (x[m * H + j] - f.mean[m]) * f.rstd[m], gg = dy[m * H + j] * g[j];
      r.dx[m * H + j] = f.rstd[m] * (gg - (ln ? s1 / H : 0.0) - xh * s2 / H);
    }
  }
  return r;
}

struct NormCase {
  NormKind kind;
  DType tx, tp, tout;
  int64_t M, H;
  Layout layout;
  bool cuda;
};
std::string norm_case_name(const ::testing::TestParamInfo<NormCase>& i) {
  const NormCase& c = i.param;
  return std::string(norm_kind_name(c.kind)) + "_" + std::string(dtype_name(c.tx)) + "_p" +
         std::string(dtype_name(c.tp)) + "_o" + std::string(dtype_name(c.tout)) + "_" + std::to_string(c.M) + "x" +
         std::to_string(c.H) + "_" + layout_name(c.layout) + (c.cuda ? "_cuda" : "_cpu");
}

std::vector<NormCase> norm_cases() {
  std::vector<NormCase> v;
  struct D {
    DType tx, tp, tout;
  };
  const D dts[] = {{DType::f32, DType::f32, DType::f32},
                   {DType::bf16, DType::bf16, DType::bf16},
                   {DType::f16, DType::f16, DType::f16},
                   {DType::bf16, DType::f32, DType::bf16},
                   {DType::f32, DType::f32, DType::bf16}};
  // Not multiples of 8/16/128; 4100 runs the scalar path past the register cache; 33000 bf16 the vector path past it.
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {3, 5}, {17, 100}, {33, 1000}, {5, 4100}, {64, 4096}, {3, 33000}};
  for (bool cuda : {false, true})
    for (NormKind k : {NormKind::layernorm, NormKind::rmsnorm})
      for (const D& d : dts)
        for (auto [M, H] : shapes)
          for (Layout l : {Layout::contiguous, Layout::col_slice})
            v.push_back({k, d.tx, d.tp, d.tout, M, H, l, cuda});
  for (bool cuda : {false, true})
    v.push_back({NormKind::layernorm, DType::bf16, DType::bf16, DType::bf16, 40, 96, Layout::transposed, cuda});
  // Many blocks of the staged LayerNorm forward's two rows each, an odd last row, and (2^21 + 3 rows) a grid capped at
  // 2^20 blocks whose blocks stride over several groups (RMSNorm, f16 x and f32 parameters with bf16 x take the
  // per-row kernel, here with many rows too).
  for (NormKind k : {NormKind::layernorm, NormKind::rmsnorm})
    for (const D& d : dts)
      for (auto [M, H] : {std::pair<int64_t, int64_t>{3001, 4096}, {5000, 1000}})
        v.push_back({k, d.tx, d.tp, d.tout, M, H, Layout::contiguous, true});
  v.push_back({NormKind::layernorm, DType::bf16, DType::bf16, DType::bf16, (int64_t(1) << 21) + 3, 8, Layout::contiguous, true});
  return v;
}

class NormTest : public ::testing::TestWithParam<NormCase> {};

TEST_P(NormTest, ForwardAndBackwardMatchFloat64) {
  const NormCase c = GetParam();
  if (c.cuda) TE_REQUIRE_GPU();
  const Device dev = device_for(c.cuda);
  const bool ln = c.kind == NormKind::layernorm;
  const Tensor x = random_2d(c.M, c.H, c.tx, 11 + c.H, dev, c.layout, 2.f, 0.5f);  // offset mean: exercises centering
  Tensor gamma = Tensor::empty({c.H}, c.tp, dev), beta;
  gamma.fill_normal(21, 1.f, 0.5f);
  if (ln) {
    beta = Tensor::empty({c.H}, c.tp, dev);
    beta.fill_normal(22, 0.f, 0.5f);
  }
  NormForward f = norm_forward(c.kind, x, gamma, beta, kEps, c.tout);
  const auto xd = to_f64(x), gd = to_f64(gamma);
  const auto bd = ln ? to_f64(beta) : std::vector<double>{};
  const RefFwd r = ref_forward(ln, xd, gd, bd, c.M, c.H, kEps);
  const double tol = tol_for(c.tout);
  EXPECT_LE(rel_l2(r.y, f.out.to_f32_vector()), tol);
  EXPECT_LE(rel_l2(r.rstd, f.rstd.to_f32_vector()), kTolF32);
  if (ln) {
    EXPECT_LE(rel_l2(r.mean, f.mean.to_f32_vector()), kTolF32);
  }

  const Tensor dy = random_2d(c.M, c.H, c.tx, 31 + c.M, dev, c.layout);
  NormBackward b = norm_backward(c.kind, dy, x, f.mean, f.rstd, gamma);
  const RefBwd rb = ref_backward(ln, to_f64(dy), xd, gd, c.M, c.H, kEps);
  const double btol = tol_for({c.tx, c.tp});
  // RMSNorm with H = 1: dx = g*dy*rstd*(1 - xhat^2) and 1 - xhat^2 = eps/(x^2+eps) cancels catastrophically in f32
  // (the gradient is ~1e-5 of its terms); the finite-difference check covers the formula on H = 7.
  if (!(c.kind == NormKind::rmsnorm && c.H == 1)) {
    EXPECT_LE(rel_l2(rb.dx, b.dx.to_f32_vector()), btol);
  }
  EXPECT_LE(rel_l2(rb.dg, b.dgamma.to_f32_vector()), tol_for(c.tp));
  if (ln) {
    EXPECT_LE(rel_l2(rb.db, b.dbeta.to_f32_vector()), tol_for(c.tp));
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, NormTest, ::testing::ValuesIn(norm_cases()), norm_case_name);

// d/dx, d/dgamma, d/dbeta of L = sum(dy * norm(x)) by central differences of the float64 forward, against the
// library's backward run in f32.
class NormGradCheck : public ::testing::TestWithParam<std::tuple<NormKind, bool>> {};

TEST_P(NormGradCheck, BackwardMatchesFiniteDifferences) {
  const auto [kind, cuda] = GetParam();
  if (cuda) TE_REQUIRE_GPU();
  const Device dev = device_for(cuda);
  const bool ln = kind == NormKind::layernorm;
  const int64_t M = 3, H = 7;
  const Tensor x = random_2d(M, H, DType::f32, 5, dev, Layout::contiguous, 1.5f, 0.3f);
  const Tensor dy = random_2d(M, H, DType::f32, 6, dev, Layout::contiguous);
  Tensor gamma = Tensor::empty({H}, DType::f32, dev), beta;
  gamma.fill_normal(7, 1.f, 0.5f);
  if (ln) {
    beta = Tensor::empty({H}, DType::f32, dev);
    beta.fill_normal(8);
  }
  NormForward f = norm_forward(kind, x, gamma, beta, kEps, DType::f32);
  NormBackward b = norm_backward(kind, dy, x, f.mean, f.rstd, gamma);

  auto xd = to_f64(x), gd = to_f64(gamma), dyd = to_f64(dy);
  auto bd = ln ? to_f64(beta) : std::vector<double>(H, 0.0);
  auto loss = [&] {
    RefFwd r = ref_forward(ln, xd, gd, bd, M, H, kEps);
    double s = 0;
    for (size_t i = 0; i < r.y.size(); ++i) s += dyd[i] * r.y[i];
    return s;
  };
  auto fd = [&](std::vector<double>& v) {
    std::vector<double> g(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      const double keep = v[i];
      v[i] = keep + kFiniteDiffStep;
      const double lp = loss();
      v[i] = keep - kFiniteDiffStep;
      const double lm = loss();
      v[i] = keep;
      g[i] = (lp - lm) / (2 * kFiniteDiffStep);
    }
    return g;
  };
  EXPECT_LE(rel_l2(fd(xd), b.dx.to_f32_vector()), kTolFiniteDiff);
  EXPECT_LE(rel_l2(fd(gd), b.dgamma.to_f32_vector()), kTolFiniteDiff);
  if (ln) {
    EXPECT_LE(rel_l2(fd(bd), b.dbeta.to_f32_vector()), kTolFiniteDiff);
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, NormGradCheck,
                         ::testing::Combine(::testing::Values(NormKind::layernorm, NormKind::rmsnorm),
                                            ::testing::Bool()),
                         [](const auto& i) {
                           return std::string(norm_kind_name(std::get<0>(i.param))) +
                                  (std::get<1>(i.param) ? "_cuda" : "_cpu");
                         });

TEST(Norm, RejectsBadArguments) {
  Tensor x = Tensor::zeros({4, 8}, DType::bf16);
  Tensor g = Tensor::zeros({7}, DType::bf16), b = Tensor::zeros({8}, DType::bf16);
  EXPECT_THROW(norm_forward(NormKind::layernorm, x, g, Tensor(), kEps, DType::bf16), Error);
  Tensor g8 = Tensor::zeros({8}, DType::bf16);
  EXPECT_THROW(norm_forward(NormKind::rmsnorm, x, g8, b, kEps, DType::bf16), Error);  // rmsnorm has no beta
  EXPECT_THROW(norm_forward(NormKind::layernorm, Tensor::zeros({4, 8}, DType::i32), g8, b, kEps, DType::bf16), Error);
  EXPECT_EQ(norm_kind_from_name("rms"), NormKind::rmsnorm);
  EXPECT_FALSE(norm_kind_from_name("batchnorm").has_value());
}

}  // namespace
}  // namespace te
