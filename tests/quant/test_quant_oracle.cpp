// Every format × usage × shape × input dtype against the independent oracle: data bytes, scale bytes (padding
// included), amax — bit for bit. Then the round trip through dequantize within each format's error bound.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "quant_oracle.h"
#include "quant_test_util.h"

namespace te {
namespace {

using Param = std::tuple<int, Shape, DType, Usage>;  // format case index, shape, input dtype, usages

class QuantOracle : public ::testing::TestWithParam<Param> {};

TEST_P(QuantOracle, BytesMatchIndependentOracle) {
  const auto& [fi, shape, dtype, usages] = GetParam();
  const qtest::FormatCase fc = qtest::format_cases()[fi];
  const bool rht_case = fc.cfg.random_hadamard;
  if (rht_case && dtype == DType::f32) GTEST_SKIP() << "the double-sum RHT oracle is exact only for bf16/f16 input";
  std::vector<float> X;
  Tensor x = qtest::make_input(shape, dtype, 7 + fi, /*specials=*/!rht_case, &X);
  const int64_t K = shape.back(), M = shape_numel(shape) / std::max<int64_t>(K, 1);
  Quantizer q(fc.cfg);
  QuantizedTensor qt = q.quantize(x, usages);
  const oracle::Expected ex = oracle::quantize(X, M, K, dtype, fc.cfg, usages);
  if (has_usage(usages, Usage::rowwise)) {
    EXPECT_EQ(qtest::bytes(qt.rowwise_data), ex.row.data) << fc.name << " row-wise data";
    EXPECT_EQ(qtest::bytes(qt.rowwise_scale_inv), ex.row.scale) << fc.name << " row-wise scale_inv";
  } else {
    EXPECT_FALSE(qt.rowwise_data.defined());
  }
  if (has_usage(usages, Usage::columnwise)) {
    EXPECT_EQ(qtest::bytes(qt.columnwise_data), ex.col.data) << fc.name << " column-wise data";
    EXPECT_EQ(qtest::bytes(qt.columnwise_scale_inv), ex.col.scale) << fc.name << " column-wise scale_inv";
  } else {
    EXPECT_FALSE(qt.columnwise_data.defined());
  }
  if (qt.rowwise_amax.defined()) {
    EXPECT_EQ(qt.rowwise_amax.to_f32_vector()[0], ex.row_amax);
  }
  if (qt.columnwise_amax.defined()) {
    EXPECT_EQ(qt.columnwise_amax.to_f32_vector()[0], ex.col_amax);
  }
}

std::string oracle_case_name(const ::testing::TestParamInfo<Param>& info) {
  const auto& [fi, shape, dtype, usages] = info.param;
  std::string s = std::string(qtest::format_cases()[fi].name) + "_";
  for (int64_t d : shape) s += std::to_string(d) + "x";
  return s + std::string(dtype_name(dtype)) + "_" + std::string(usage_name(usages));
}

INSTANTIATE_TEST_SUITE_P(
    AllFormats, QuantOracle,
    ::testing::Combine(::testing::Range(0, static_cast<int>(qtest::format_cases().size())),
                       ::testing::Values(Shape{1, 16}, Shape{3, 5}, Shape{33, 130}, Shape{2, 64, 48}, Shape{0, 32},
                                         Shape{257, 384}, Shape{130, 7}),
                       ::testing::Values(DType::bf16, DType::f16, DType::f32),
                       ::testing::Values(Usage::rowwise, Usage::columnwise, Usage::both)),
    oracle_case_name);

// Round trip: rel-L2 of dequantize(quantize(x)) against x, per format, from each copy.
class QuantRoundTrip : public ::testing::TestWithParam<std::tuple<int, Shape>> {};

TEST_P(QuantRoundTrip, DequantizeWithinFormatBound) {
  const auto& [fi, shape] = GetParam();
  const qtest::FormatCase fc = qtest::format_cases()[fi];
  std::vector<float> X;
  Tensor x = qtest::make_input(shape, DType::f32, 99, false, &X);
  Quantizer q(fc.cfg);
  QuantizedTensor qt = q.quantize(x, Usage::both);
  const QuantFormat f = fc.cfg.format;
  const bool fp4 = f == QuantFormat::nvfp4_1d || f == QuantFormat::nvfp4_2d;
  // Per-element relative error of the element format (half an ulp), and what survives a per-tensor scale over
  // values spread across 9 binades (small values fall into subnormals).
  double bound = fp4 ? 0.16 : (fc.cfg.data_dtype == DType::fp8_e5m2 ? 0.09 : 0.045);
  if (f == QuantFormat::fp8_per_tensor) bound *= 1.2;
  for (Usage u : {Usage::rowwise, Usage::columnwise}) {
    Tensor d = qt.dequantize_usage(u, DType::f32);
    EXPECT_EQ(d.shape(), shape);
    const std::vector<float> D = d.to_f32_vector();
    double num = 0, den = 0;
    for (size_t i = 0; i < X.size(); ++i) {
      num += (D[i] - X[i]) * double(D[i] - X[i]);
      den += double(X[i]) * X[i];
    }
    EXPECT_LE(std::sqrt(num / den), bound) << fc.name << " from " << usage_name(u);
    EXPECT_GT(std::sqrt(num / den), 0.0) << "a lossy format cannot be exact on random data";
  }
  // Formats whose copies share the scales (per tensor, 2D tiles) dequantize to the same values from either copy.
  if (f == QuantFormat::fp8_per_tensor || f == QuantFormat::fp8_block_2d || f == QuantFormat::nvfp4_2d) {
    EXPECT_EQ(qt.dequantize_usage(Usage::rowwise, DType::f32).to_f32_vector(),
              qt.dequantize_usage(Usage::columnwise, DType::f32).to_f32_vector());
  }
  // dequantize() defaults to the original dtype.
  EXPECT_EQ(qt.dequantize().dtype(), DType::f32);
}

INSTANTIATE_TEST_SUITE_P(AllFormats, QuantRoundTrip,
                         ::testing::Combine(::testing::Range(0, static_cast<int>(qtest::format_cases().size())),
                                            ::testing::Values(Shape{64, 256}, Shape{48, 100})));

}  // namespace
}  // namespace te
