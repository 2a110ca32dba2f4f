// Scale rules against hand-computed values, delayed scaling over several steps, the Hadamard transform,
// stochastic rounding, the can_gather_quantized table, and strided input.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>

#include "engine/error.h"
#include "ops/quant/quant_layout.h"
#include "ops/quant/scale_math.h"
#include "quant_oracle.h"
#include "quant_test_util.h"

namespace te {
namespace {

float f32_at(const Tensor& t, int64_t i) { return t.to_f32_vector()[i]; }
uint8_t byte_at(const Tensor& t, int64_t i) { return qtest::bytes(t)[i]; }

TEST(QuantRules, PerTensorCurrentScaling) {
  Tensor x = Tensor::from_f32({1.f, -2.f, 0.5f, NAN}, {2, 2}, DType::f32);
  Quantizer q(qtest::cfg_of(QuantFormat::fp8_per_tensor));
  QuantizedTensor qt = q.quantize(x, Usage::both);
  EXPECT_EQ(f32_at(qt.rowwise_amax, 0), 2.f);                  // NaN ignored
  EXPECT_EQ(f32_at(qt.rowwise_scale_inv, 0), 1.f / 224.f);     // 448 / 2 = 224
  EXPECT_EQ(byte_at(qt.rowwise_data, 1), 0xFE);                // -2 * 224 = -448
  EXPECT_EQ(byte_at(qt.rowwise_data, 3), 0x7F);                // NaN stays NaN
  EXPECT_EQ(byte_at(qt.columnwise_data, 1), byte_at(qt.rowwise_data, 2));  // [K, M] byte transpose
  // An AmaxReducer sees the amax before the cast and its result decides the scale.
  QuantizedTensor red = q.quantize(x, Usage::both, Stream(), [](Tensor& a, const Stream&) { a.fill(4.0); });
  EXPECT_EQ(f32_at(red.rowwise_scale_inv, 0), 1.f / 112.f);
  // All-zero tensor: scale 1.
  QuantizedTensor z = q.quantize(Tensor::zeros({3, 3}, DType::bf16), Usage::both);
  EXPECT_EQ(f32_at(z.rowwise_scale_inv, 0), 1.f);
}

TEST(QuantRules, BlockScalesHandComputed) {
  // Row 0: amax 3 → 448/3 = 149.33 → pow2 128. Row 1: all zero → 1. Row 2: holds Inf → scale 1, Inf → 448.
  std::vector<float> v(3 * 128, 0.f);
  v[5] = 3.f;
  v[6] = -1.f;
  v[2 * 128 + 1] = INFINITY;
  v[2 * 128 + 2] = -2.f;
  Tensor x = Tensor::from_f32(v, {3, 128}, DType::bf16);
  Quantizer q(qtest::cfg_of(QuantFormat::fp8_block_1d, DType::fp8_e4m3, true));
  QuantizedTensor qt = q.quantize(x, Usage::rowwise);
  ASSERT_EQ(qt.rowwise_scale_inv.shape(), (Shape{1, 4}));  // [ceil(K/128)][round4(M)]
  const std::vector<float> s = qt.rowwise_scale_inv.to_f32_vector();
  EXPECT_EQ(s, (std::vector<float>{1.f / 128, 1.f, 1.f, 0.f}));  // last entry is padding
  const std::vector<uint8_t> d = qtest::bytes(qt.rowwise_data);
  EXPECT_EQ(d[5], e4m3_from_f32(384.f));
  EXPECT_EQ(d[6], e4m3_from_f32(-128.f));
  EXPECT_EQ(d[2 * 128 + 1], 0x7E);  // Inf saturates to 448
  EXPECT_EQ(d[2 * 128 + 2], 0xC0);  // -2
  // Without pow2, value_for_inf = max finite of the input dtype when 448/amax overflows (amax subnormal).
  std::vector<float> tiny(128, 0.f);
  tiny[0] = 1e-40f;
  Quantizer q32(qtest::cfg_of(QuantFormat::fp8_block_1d));
  EXPECT_EQ(f32_at(q32.quantize(Tensor::from_f32(tiny, {1, 128}, DType::f32), Usage::rowwise).rowwise_scale_inv, 0),
            1.f / FLT_MAX);
}

TEST(QuantRules, Mxfp8AndNvfp4ScalesHandComputed) {
  // MXFP8: amax 1 → v = 1/448 in (2^-9, 2^-8) → biased exponent 118 + 1 = 119; amax 448 → 1/448*448 ≈ 1 → 127.
  std::vector<float> v(2 * 32, 0.f);
  v[3] = 1.f;
  v[32] = 448.f;
  Quantizer mx(qtest::cfg_of(QuantFormat::mxfp8));
  QuantizedTensor m = mx.quantize(Tensor::from_f32(v, {2, 32}, DType::f32), Usage::rowwise);
  EXPECT_EQ(qtest::bytes(m.rowwise_scale_inv), (std::vector<uint8_t>{119, 127}));
  EXPECT_EQ(mxfp8_scale_byte(448.f, 448.f), 127);  // fl(1/448) * 448 rounds to exactly 1 in f32
  EXPECT_EQ(qtest::bytes(m.rowwise_data)[3], e4m3_from_f32(256.f));  // 1 * 2^(127-119)
  // NVFP4: global amax 2688 → S_enc = 1; block amax 6 → e4m3(1) = 0x38; 6 → code 7; 2688 → block scale 448.
  std::vector<float> w(32, 0.f);
  w[0] = 6.f;
  w[1] = -1.5f;
  w[16] = 2688.f;
  Quantizer nv(qtest::cfg_of(QuantFormat::nvfp4_1d));
  QuantizedTensor n = nv.quantize(Tensor::from_f32(w, {1, 32}, DType::f32), Usage::rowwise);
  EXPECT_EQ(f32_at(n.rowwise_amax, 0), 2688.f);
  EXPECT_EQ(qtest::bytes(n.rowwise_scale_inv), (std::vector<uint8_t>{0x38, 0x7E}));
  const std::vector<uint8_t> d = qtest::bytes(n.rowwise_data);
  EXPECT_EQ(d[0], 0xB7);  // element 0 (low nibble) 6 → 7, element 1 (high nibble) -1.5 → 0xB
  EXPECT_EQ(d[8], 0x07);  // 2688 / 448 = 6
  // Odd K: the missing last nibble of each row is zero.
  Tensor odd = Tensor::from_f32({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3}, DType::f32);
  QuantizedTensor o = nv.quantize(odd, Usage::rowwise);
  EXPECT_EQ(o.rowwise_data.shape(), (Shape{2, 4}));
  for (int r = 0; r < 2; ++r) EXPECT_EQ(qtest::bytes(o.rowwise_data)[r * 2 + 1] & 0xF0, 0);
}

TEST(QuantRules, DelayedScalingHistory) {
  QuantizerConfig c = qtest::cfg_of(QuantFormat::fp8_per_tensor);
  c.scaling = ScalingKind::delayed;
  c.amax_history_len = 2;
  Quantizer q(c);
  auto step = [&](float a) {
    QuantizedTensor qt = q.quantize(Tensor::from_f32({a, -a / 2}, {1, 2}, DType::f32), Usage::rowwise);
    q.update_scale_after_step();
    return f32_at(qt.rowwise_scale_inv, 0);  // the scale used during the step
  };
  EXPECT_EQ(step(1.f), 1.f);  // initial scale 1
  EXPECT_EQ(f32_at(q.delayed().scale, 0), 448.f);
  EXPECT_EQ(step(4.f), 1.f / 448.f);
  EXPECT_EQ(f32_at(q.delayed().scale, 0), 112.f);  // history [1, 4]
  step(2.f);                               // history [2, 4]: max 4
  EXPECT_EQ(f32_at(q.delayed().scale, 0), 112.f);
  step(2.f);  // history [2, 2]
  EXPECT_EQ(f32_at(q.delayed().scale, 0), 224.f);
  q.update_scale_after_step();  // a step without a cast: zero amax does not enter the history
  EXPECT_EQ(f32_at(q.delayed().scale, 0), 224.f);
  EXPECT_EQ(q.delayed().amax_history.to_f32_vector(), (std::vector<float>{2.f, 2.f}));
  // Two casts in one step fold into one step amax; the reducer sees it.
  q.quantize(Tensor::from_f32({8.f}, {1, 1}, DType::f32), Usage::rowwise);
  q.quantize(Tensor::from_f32({1.f}, {1, 1}, DType::f32), Usage::rowwise);
  float seen = 0;
  q.update_scale_after_step(Stream(), [&](Tensor& a, const Stream&) { seen = f32_at(a, 0); });
  EXPECT_EQ(seen, 8.f);
  EXPECT_EQ(f32_at(q.delayed().scale, 0), 56.f);

  c.amax_algo = AmaxAlgo::most_recent;
  c.margin = 1;
  Quantizer r(c);
  r.quantize(Tensor::from_f32({4.f}, {1, 1}, DType::f32), Usage::rowwise);
  r.update_scale_after_step();
  r.quantize(Tensor::from_f32({1.f}, {1, 1}, DType::f32), Usage::rowwise);
  r.update_scale_after_step();
  EXPECT_EQ(f32_at(r.delayed().scale, 0), 224.f);  // 448 / 2 / 1
}

// A training step skipped on the device (a non-finite loss): its update only drops the step amax, leaving history,
// count and scale as if nothing had been quantized; the next step folds as usual. set_delayed writes in place.
TEST(QuantRules, DelayedScalingSkippedStepDropsTheAmax) {
  QuantizerConfig c = qtest::cfg_of(QuantFormat::fp8_per_tensor);
  c.scaling = ScalingKind::delayed;
  c.amax_history_len = 2;
  Quantizer q(c);
  const int32_t skip = 1, go = 0;
  q.quantize(Tensor::from_f32({4.f}, {1, 1}, DType::f32), Usage::rowwise);
  q.update_scale_after_step(Stream(), {}, &go);
  EXPECT_EQ(f32_at(q.delayed().scale, 0), 112.f);
  q.quantize(Tensor::from_f32({NAN, 64.f}, {1, 2}, DType::f32), Usage::rowwise);  // the skipped step's garbage
  q.update_scale_after_step(Stream(), {}, &skip);
  EXPECT_EQ(f32_at(q.delayed().step_amax, 0), 0.f);
  EXPECT_EQ(f32_at(q.delayed().scale, 0), 112.f);
  EXPECT_EQ(q.delayed().count.data<int64_t>()[0], 1);
  q.quantize(Tensor::from_f32({2.f}, {1, 1}, DType::f32), Usage::rowwise);
  q.update_scale_after_step(Stream(), {}, &go);
  EXPECT_EQ(q.delayed().amax_history.to_f32_vector(), (std::vector<float>{4.f, 2.f}));
  // In place: the buffers keep their addresses (a captured step reads them), the values are the given state's.
  const void* history = q.delayed().amax_history.data_ptr();
  const DelayedScaling fresh = DelayedScaling::fresh(2, Device::cpu());
  q.set_delayed(fresh, Device::cpu());
  EXPECT_EQ(q.delayed().amax_history.data_ptr(), history);
  EXPECT_EQ(f32_at(q.delayed().scale, 0), 1.f);
  EXPECT_EQ(q.delayed().count.data<int64_t>()[0], 0);
}

TEST(QuantRules, HadamardIsOrthogonalAndMatchesMatrix) {
  for (uint64_t seed = 0; seed < 50; ++seed) {
    float v[16], y[16], y_ref[16], back[16];
    for (int i = 0; i < 16; ++i) v[i] = bf16_to_f32(bf16_from_f32(normal_at(seed, i)));
    rht16_forward(v, y);
    oracle::rht(v, y_ref);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(y[i], y_ref[i]);
    rht16_inverse(y, back);
    double err = 0, norm = 0;
    for (int i = 0; i < 16; ++i) {
      err += (back[i] - v[i]) * double(back[i] - v[i]);
      norm += double(v[i]) * v[i];
    }
    EXPECT_LE(std::sqrt(err / norm), 1.0 / 256) << "R Rᵀ = I up to the bf16 rounding of y";
  }
}

// NUMERICS §2.7's draw: element i takes the 16-bit half i % 2 of word (i / 2) % 4 of the Philox block at counter
// (i / 8, 2 + copy), centred in its 2^-16 cell.
TEST(QuantRules, StochasticRoundingDrawsSixteenBitsPerElement) {
  for (uint32_t copy : {0u, 1u})
    for (uint64_t i = 0; i < 64; ++i) {
      const uint32_t word = philox4x32(99, i / 8, 2 + copy).v[(i / 2) % 4];
      const uint32_t b = i % 2 ? word >> 16 : word & 0xFFFFu;
      ASSERT_EQ(sr_uniform(99, i, copy), static_cast<float>((b + 0.5) / 65536.0)) << i << " copy " << copy;
    }
  EXPECT_EQ(sr_uniform_of(Philox4{{0, 0, 0, 0xFFFF0000u}}, 7), static_cast<float>(65535.5 / 65536.0));
  EXPECT_EQ(sr_uniform_of(Philox4{{0, 0, 0, 0}}, 0), static_cast<float>(0.5 / 65536.0));
}

TEST(QuantRules, StochasticRoundingUnbiasedAndReproducible) {
  for (float x : {0.3f, 1.2f, -2.6f, 4.9f, 0.05f}) {
    double sum = 0;
    const int n = 200000;
    for (int i = 0; i < n; ++i) sum += e2m1_to_f32(e2m1_from_f32_sr(x, sr_uniform(42, i, 0)));
    EXPECT_NEAR(sum / n, x, 0.01) << x;
  }
  // Through the quantizer: constant columns, block amax 6 and global amax 6 make the encode factor exactly 1.
  const std::vector<float> row = {6, 0.3f, 1.2f, 2.6f, 4.9f, -0.7f, -3.3f, 5.5f, 0.1f, 0.2f, 1.7f, -2.2f, 3.1f, 0.05f, -5, 1};
  const int M = 4096;
  std::vector<float> v;
  for (int m = 0; m < M; ++m) v.insert(v.end(), row.begin(), row.end());
  QuantizerConfig c = qtest::cfg_of(QuantFormat::nvfp4_1d);
  c.stochastic_rounding = true;
  c.seed = 7;
  Quantizer q(c);
  Tensor x = Tensor::from_f32(v, {M, 16}, DType::f32);
  QuantizedTensor a = q.quantize(x, Usage::rowwise), b = q.quantize(x, Usage::rowwise);
  EXPECT_EQ(qtest::bytes(a.rowwise_data), qtest::bytes(b.rowwise_data)) << "same seed, same bytes";
  const std::vector<float> d = a.dequantize(DType::f32).to_f32_vector();
  for (int k = 0; k < 16; ++k) {
    double mean = 0;
    for (int m = 0; m < M; ++m) mean += d[m * 16 + k];
    EXPECT_NEAR(mean / M, row[k], 0.06) << "column " << k;
  }
  c.seed = 8;
  Quantizer q2(c);
  EXPECT_NE(qtest::bytes(q2.quantize(x, Usage::rowwise).rowwise_data), qtest::bytes(a.rowwise_data))
      << "another seed differs";
}

// e2m1_from_f32_sr multiplies by the binade's inverse gap and builds the code from the rounded quotient; the
// definition it replaces divided by the gap and encoded the chosen value. Both must give the same code for every x
// and u: each f32 of |x| < 8 (every 1021st bit pattern, both signs) against uniforms at 0, just below and at the
// fraction where rounding up starts, and the largest one.
uint8_t e2m1_sr_by_division(float x, float u) {
  if (std::isnan(x)) return 0x7;
  const uint8_t sign = std::signbit(x) ? 0x8 : 0x0;
  const float a = std::fabs(x);
  if (a >= 6.0f) return sign | 0x7;
  const float gap = a < 2.0f ? 0.5f : (a < 4.0f ? 1.0f : 2.0f);
  const float lo = std::floor(a / gap) * gap;
  const float p = (a - lo) / gap;
  return static_cast<uint8_t>(sign | e2m1_from_f32(u < p ? lo + gap : lo));
}

TEST(QuantRules, StochasticRoundingEqualsTheDivisionForm) {
  for (uint32_t bits = 0; bits < 0x41000000u; bits += 1021) {
    const float a = f32_from_bits(bits);
    const float gap = a < 2.0f ? 0.5f : (a < 4.0f ? 1.0f : 2.0f);
    const float p = a / gap - std::floor(a / gap);
    for (float u : {0.0f, std::nextafter(p, 0.0f), p, std::nextafter(p, 1.0f), 1.0f - 0x1p-24f}) {
      if (!(u >= 0.0f && u < 1.0f)) continue;
      ASSERT_EQ(e2m1_from_f32_sr(a, u), e2m1_sr_by_division(a, u)) << a << " u " << u;
      ASSERT_EQ(e2m1_from_f32_sr(-a, u), e2m1_sr_by_division(-a, u)) << -a << " u " << u;
    }
  }
  EXPECT_EQ(e2m1_from_f32_sr(NAN, 0.5f), 0x7);
  EXPECT_EQ(e2m1_from_f32_sr(-INFINITY, 0.5f), 0xF);
}

TEST(QuantRules, CanGatherQuantizedTable) {
  struct Row {
    QuantFormat f;
    Shape shape;
    Usage u;
    bool expect;
  };
  const Row rows[] = {
      {QuantFormat::fp8_per_tensor, {3, 5}, Usage::both, true},
      {QuantFormat::fp8_block_1d, {100, 4096}, Usage::rowwise, true},
      {QuantFormat::fp8_block_1d, {100, 4096}, Usage::columnwise, false},
      {QuantFormat::fp8_block_1d, {256, 4096}, Usage::both, true},
      {QuantFormat::fp8_block_1d, {2, 64, 7}, Usage::columnwise, true},  // M = 128
      {QuantFormat::fp8_block_2d, {100, 4096}, Usage::rowwise, false},
      {QuantFormat::fp8_block_2d, {128, 100}, Usage::both, true},
      {QuantFormat::mxfp8, {96, 100}, Usage::both, true},
      {QuantFormat::mxfp8, {48, 100}, Usage::columnwise, false},
      {QuantFormat::mxfp8, {48, 100}, Usage::rowwise, true},
      {QuantFormat::nvfp4_1d, {48, 7}, Usage::both, true},
      {QuantFormat::nvfp4_1d, {40, 7}, Usage::columnwise, false},
      {QuantFormat::nvfp4_2d, {40, 16}, Usage::rowwise, false},
      {QuantFormat::nvfp4_2d, {0, 16}, Usage::both, true},
      {QuantFormat::fp8_block_1d, {0, 5}, Usage::both, true},
  };
  for (const Row& r : rows) {
    Quantizer q(qtest::cfg_of(r.f));
    EXPECT_EQ(q.can_gather_quantized(r.shape, r.u), r.expect)
        << quant_format_name(r.f) << " " << shape_str(r.shape) << " " << usage_name(r.u);
  }
}

TEST(QuantRules, StridedInputEqualsContiguous) {
  for (const auto& fc : qtest::format_cases()) {
    Quantizer q(fc.cfg);
    // A transposed view [M, K] with stride_k = M, and a permuted 3-D view whose leading dims do not collapse.
    Tensor base = qtest::make_input({70, 48}, DType::bf16, 5, true);
    Tensor t = base.transpose(0, 1);  // [48, 70]
    Tensor b3 = qtest::make_input({6, 4, 40}, DType::f16, 6, true);
    Tensor p = b3.transpose(0, 1);  // [4, 6, 40]
    for (const Tensor& view : {t, p, base.slice(1, 0, 48, 2)}) {
      QuantizedTensor a = q.quantize(view, Usage::both), b = q.quantize(view.contiguous(), Usage::both);
      EXPECT_EQ(qtest::bytes(a.rowwise_data), qtest::bytes(b.rowwise_data)) << fc.name << " " << view.str();
      EXPECT_EQ(qtest::bytes(a.rowwise_scale_inv), qtest::bytes(b.rowwise_scale_inv)) << fc.name;
      EXPECT_EQ(qtest::bytes(a.columnwise_data), qtest::bytes(b.columnwise_data)) << fc.name;
      EXPECT_EQ(qtest::bytes(a.columnwise_scale_inv), qtest::bytes(b.columnwise_scale_inv)) << fc.name;
    }
  }
}

TEST(QuantRules, BadConfigurationsAreClearErrors) {
  QuantizerConfig c = qtest::cfg_of(QuantFormat::fp8_block_2d);
  c.random_hadamard = true;
  EXPECT_THROW({ Quantizer bad(c); }, Error);
  EXPECT_THROW({ Quantizer bad(qtest::cfg_of(QuantFormat::mxfp8, DType::bf16)); }, Error);
  Quantizer q(qtest::cfg_of(QuantFormat::mxfp8));
  EXPECT_THROW(q.quantize(Tensor::zeros({4, 4}, DType::fp8_e4m3), Usage::rowwise), Error);
  QuantizedTensor qt = q.quantize(Tensor::zeros({4, 32}, DType::bf16), Usage::rowwise);
  EXPECT_THROW(qt.dequantize_usage(Usage::columnwise), Error);
}

}  // namespace
}  // namespace te
