// An independent oracle for the quantizers: NUMERICS.md §2–§3 re-derived from the text with plain C++ (frexp /
// ldexp instead of bit masks, explicit index formulas for each layout, the RHT as a ±1 matrix in double).
// It shares only the element casts (engine/float_convert.h, tested in engine_tests) and the Philox stream.
#pragma once
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/float_convert.h"
#include "engine/philox.h"
#include "ops/quant/quantizer.h"

namespace te::oracle {

inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t r4(int64_t a) { return cdiv(a, 4) * 4; }

struct Copy {
  std::vector<uint8_t> data, scale;  // raw bytes in the §3 layout, padding zero
};
struct Expected {
  Copy row, col;
  float row_amax = 0, col_amax = 0;
};

inline float amax(const std::vector<float>& v) {
  float a = 0;
  for (float x : v)
    if (!std::isnan(x)) a = std::fmax(a, std::fabs(x));
  return a;
}
inline float scale_rule(float amax, float fmax, bool pow2, float eps, float vinf) {
  if (amax < eps) amax = eps;
  if (amax == 0 || !std::isfinite(amax)) return 1.f;
  float s = fmax / amax;
  if (std::isinf(s)) s = vinf;
  if (pow2) {
    int e;
    std::frexp(s, &e);
    s = std::ldexp(1.f, e - 1);
  }
  return s;
}
inline uint8_t mx_exponent(float amax, float fmax) {
  const float v = amax * (1.f / fmax);
  if (std::isnan(v)) return 0xFF;
  if (std::isinf(v)) return 0xFE;
  if (v == 0) return 0;
  int e;
  const float f = std::frexp(v, &e);  // v = f * 2^e, f in [0.5, 1)
  int biased = (f == 0.5f ? e - 1 : e) + 127;
  return static_cast<uint8_t>(std::min(biased, 254));
}
inline float hp_max(DType t) { return t == DType::bf16 ? 0x1.FEp127f : (t == DType::f16 ? 65504.f : FLT_MAX); }
inline uint8_t fp8(float v, DType t) { return t == DType::fp8_e5m2 ? e5m2_from_f32(v) : e4m3_from_f32(v); }

// R = diag(s) H16 / 4, the sign list as NUMERICS/TE print it.
inline void rht(const float* v, float* y) {
  static const int s[16] = {1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1};
  for (int i = 0; i < 16; ++i) {
    double acc = 0;
    for (int j = 0; j < 16; ++j) {
      int h = 1;
      for (int b = 0; b < 4; ++b)
        if (((i >> b) & 1) && ((j >> b) & 1)) h = -h;
      acc += static_cast<double>(v[j]) * s[j] * h;
    }
    y[i] = bf16_to_f32(bf16_from_f32(static_cast<float>(acc / 4)));
  }
}
// The SR uniform of element idx from its Philox word: the 16-bit half idx % 2, at the centre of its cell.
inline float sr_u16(uint32_t word, uint64_t idx) {
  const uint32_t b = (idx & 1) ? word >> 16 : word & 0xFFFFu;
  return static_cast<float>((b + 0.5) / 65536.0);
}
inline uint8_t e2m1_sr(float x, float u) {
  if (std::isnan(x)) return 7;
  const uint8_t sign = std::signbit(x) ? 8 : 0;
  const float a = std::fabs(x);
  if (a >= 6) return sign | 7;
  static const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  int i = 0;
  while (i < 7 && grid[i + 1] <= a) ++i;
  const float p = (a - grid[i]) / (grid[i + 1] - grid[i]);
  return sign | static_cast<uint8_t>(u < p ? i + 1 : i);
}

// Quantizes X [M, K] (values already in the input dtype) under `cfg`.
inline Expected quantize(const std::vector<float>& X, int64_t M, int64_t K, DType in, const QuantizerConfig& cfg,
                         Usage usages) {
  Expected ex;
  const QuantFormat f = cfg.format;
  const bool fp4 = f == QuantFormat::nvfp4_1d || f == QuantFormat::nvfp4_2d;
  const DType dt = fp4 ? DType::fp4_e2m1 : cfg.data_dtype;
  const float fmax = dt == DType::fp8_e5m2 ? 57344.f : (fp4 ? 6.f : 448.f);
  ex.row_amax = ex.col_amax = amax(X);
  for (int copy = 0; copy < 2; ++copy) {
    if (!has_usage(usages, copy ? Usage::columnwise : Usage::rowwise)) continue;
    const int64_t R = copy ? K : M, C = copy ? M : K;
    std::vector<float> A(static_cast<size_t>(R * C));
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) A[r * C + c] = copy ? X[c * K + r] : X[r * K + c];
    if (copy && cfg.random_hadamard) {
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c + 16 <= C; c += 16) {
          float y[16];
          rht(&A[r * C + c], y);
          std::memcpy(&A[r * C + c], y, sizeof y);
        }
      ex.col_amax = amax(A);
    }
    Copy& out = copy ? ex.col : ex.row;
    const float tensor_amax = copy ? ex.col_amax : ex.row_amax;
    const int B = quant_format_info(f).block;
    const bool two_d = quant_format_info(f).two_d;
    auto block_amax = [&](int64_t r, int64_t b) {
      float a = 0;
      const int64_t r0 = two_d ? r / B * B : r, r1 = two_d ? std::min(R, r0 + B) : r + 1;
      for (int64_t rr = r0; rr < r1; ++rr)
        for (int64_t c = b * B; c < std::min(C, (b + 1) * B); ++c)
          if (!std::isnan(A[rr * C + c])) a = std::fmax(a, std::fabs(A[rr * C + c]));
      return a;
    };
    auto put_f32 = [&](int64_t idx, float v) { std::memcpy(&out.scale[idx * 4], &v, 4); };
    if (f == QuantFormat::fp8_per_tensor) {
      const float s = scale_rule(tensor_amax, fmax, cfg.pow2_scales, cfg.eps, FLT_MAX);
      out.data.resize(R * C);
      out.scale.resize(4);
      put_f32(0, 1.f / s);
      for (int64_t i = 0; i < R * C; ++i) out.data[i] = fp8(A[i] * s, dt);
    } else if (f == QuantFormat::fp8_block_1d || f == QuantFormat::fp8_block_2d) {
      const int64_t nb = cdiv(C, B);
      const int64_t rows = two_d ? cdiv(R, B) : nb, ld = two_d ? r4(nb) : r4(R);
      out.data.resize(R * C);
      out.scale.assign(rows * ld * 4, 0);
      for (int64_t r = 0; r < R; ++r)
        for (int64_t b = 0; b < nb; ++b) {
          const float s = scale_rule(block_amax(r, b), fmax, cfg.pow2_scales, cfg.eps, hp_max(in));
          put_f32(two_d ? (r / B) * ld + b : b * ld + r, 1.f / s);
          for (int64_t c = b * B; c < std::min(C, (b + 1) * B); ++c) out.data[r * C + c] = fp8(A[r * C + c] * s, dt);
        }
    } else if (f == QuantFormat::mxfp8) {
      const int64_t nb = cdiv(C, 32);
      out.data.resize(R * C);
      out.scale.assign(R * nb, 0);
      for (int64_t r = 0; r < R; ++r)
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t e = mx_exponent(block_amax(r, b), fmax);
          out.scale[copy ? b * R + r : r * nb + b] = e;  // row-wise [M][K/32]; column-wise [M/32][K]
          const float factor = std::ldexp(1.f, 127 - e);
          for (int64_t c = b * 32; c < std::min(C, (b + 1) * 32); ++c)
            out.data[copy ? c * R + r : r * C + c] = fp8(A[r * C + c] * factor, dt);  // column-wise stays [M, K]
        }
    } else {  // NVFP4
      float s_enc = std::fmin((448.f * 6.f) / tensor_amax, FLT_MAX);
      if (tensor_amax == 0 || s_enc == 0) s_enc = 1;
      const float s_dec = 1.f / s_enc;
      const int64_t nb = cdiv(C, 16), ld = cdiv(C, 2) * 2;
      out.data.assign(R * ld / 2, 0);
      out.scale.assign(R * nb, 0);
      for (int64_t r = 0; r < R; ++r)
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t sb = e4m3_from_f32(std::fmin(block_amax(r, b) * (s_enc * (1.f / 6.f)), FLT_MAX));
          out.scale[r * nb + b] = sb;
          const float factor = std::fmin(1.f / (e4m3_to_f32(sb) * s_dec), FLT_MAX);
          for (int64_t c = b * 16; c < std::min(C, (b + 1) * 16); ++c) {
            const float v = A[r * C + c] * factor;
            const uint64_t idx = static_cast<uint64_t>(r * C + c);
            const uint8_t q = cfg.stochastic_rounding
                                  ? e2m1_sr(v, sr_u16(philox4x32(cfg.seed, idx >> 3, 2 + copy).v[(idx >> 1) & 3], idx))
                                  : e2m1_from_f32(v);
            const int64_t n = r * ld + c;
            out.data[n / 2] |= static_cast<uint8_t>((n & 1) ? q << 4 : q);
          }
        }
    }
  }
  return ex;
}

}  // namespace te::oracle
