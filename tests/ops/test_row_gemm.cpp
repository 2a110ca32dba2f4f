// The row-independent CPU GEMM (ops/gemm/row_gemm.h): each row of C equals that row computed alone, whatever the
// row count and position; every kernel (AVX-512, AVX2, portable) gives the same bytes; the result is accurate.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "ops/gemm/row_gemm.h"

namespace te::detail {
namespace {

std::vector<float> row_gemm_values(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// Rows of every count 1…40 and a few large ones, at offsets 0 and 5 of A, against each row alone (m = 1), for both
// layouts of B. Shapes with odd P and L exercise the padded panel columns and the tail rows.
TEST(RowGemm, EachRowEqualsThatRowAlone) {
  for (bool transposed : {true, false}) {
    for (auto [p, l] : {std::pair<int64_t, int64_t>{100, 70}, {384, 256}, {33, 600}}) {
      SCOPED_TRACE(::testing::Message() << "P " << p << " L " << l << (transposed ? " Bt" : " B"));
      const int64_t max_rows = 205;
      const std::vector<float> a = row_gemm_values(static_cast<size_t>(max_rows * l), 1);
      const std::vector<float> b = row_gemm_values(static_cast<size_t>(p * l), 2);
      std::vector<std::vector<float>> alone(max_rows, std::vector<float>(static_cast<size_t>(p)));
      for (int64_t r = 0; r < max_rows; ++r) row_gemm(a.data() + r * l, b.data(), transposed, 1, p, l, alone[r].data());
      std::vector<int64_t> counts;
      for (int64_t m = 1; m <= 40; ++m) counts.push_back(m);
      counts.insert(counts.end(), {97, 200});
      int differing = 0;
      for (int64_t m : counts)
        for (int64_t off : {0, 5}) {
          if (off + m > max_rows) continue;
          std::vector<float> c(static_cast<size_t>(m * p));
          row_gemm(a.data() + off * l, b.data(), transposed, m, p, l, c.data());
          for (int64_t r = 0; r < m; ++r)
            differing += std::memcmp(c.data() + r * p, alone[off + r].data(), sizeof(float) * p) != 0;
        }
      EXPECT_EQ(differing, 0);
    }
  }
}

TEST(RowGemm, EveryKernelGivesTheSameBytes) {
  const int64_t m = 50, p = 70, l = 530;  // l past one pass (the sums carry over between passes)
  const std::vector<float> a = row_gemm_values(static_cast<size_t>(m * l), 3), b = row_gemm_values(static_cast<size_t>(p * l), 4);
  std::vector<float> want(static_cast<size_t>(m * p)), got(want.size());
  row_gemm(a.data(), b.data(), true, m, p, l, want.data(), RowGemmIsa::portable);
  for (RowGemmIsa isa : {RowGemmIsa::automatic, RowGemmIsa::avx2, RowGemmIsa::avx512}) {
    row_gemm(a.data(), b.data(), true, m, p, l, got.data(), isa);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * want.size()), 0) << static_cast<int>(isa);
  }
}

// Against float64 dot products: f32 accumulation over L terms of unit variance.
TEST(RowGemm, MatchesFloat64Reference) {
  const int64_t m = 130, p = 90, l = 300;  // m·p·l past the threshold that spreads the work over the pool
  const std::vector<float> a = row_gemm_values(static_cast<size_t>(m * l), 5), b = row_gemm_values(static_cast<size_t>(l * p), 6);
  std::vector<float> c(static_cast<size_t>(m * p));
  row_gemm(a.data(), b.data(), false, m, p, l, c.data());
  double worst = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < p; ++j) {
      double s = 0;
      for (int64_t k = 0; k < l; ++k) s += static_cast<double>(a[i * l + k]) * b[k * p + j];
      worst = std::max(worst, std::abs(s - c[i * p + j]));
    }
  EXPECT_LT(worst, 1e-3);
}

}  // namespace
}  // namespace te::detail
