// Per-tensor and per-block scale arithmetic (docs/NUMERICS.md §2), identical on host and device. Every
// quantize kernel — CPU reference, CUDA, and fused norm/activation epilogues — computes scales through here.
#pragma once
#include <cfloat>
#include <cstdint>

#include "engine/float_convert.h"
#include "engine/hd.h"
#include "engine/philox.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#endif

namespace te {

// scale multiplies HP values before the cast; scale_inv = 1/scale is stored for the GEMM.
TE_HD float compute_scale(float amax, float fmt_max, bool pow2, float eps, float value_for_inf) {
  if (amax < eps) amax = eps;
  const uint32_t ab = f32_bits(amax) & 0x7FFFFFFFu;
  if (ab == 0 || ab >= 0x7F800000u) return 1.0f;  // 0, Inf or NaN
  float scale = fmt_max / amax;
  if ((f32_bits(scale) & 0x7FFFFFFFu) == 0x7F800000u) scale = value_for_inf;
  if (pow2) scale = f32_from_bits(f32_bits(scale) & 0xFF800000u);
  return scale;
}

// amax accumulation: max|x| starting from 0, NaN ignored (fmaxf semantics).
TE_HD float amax_fold(float acc, float x) {
#ifdef __CUDA_ARCH__
  return fmaxf(acc, fabsf(x));  // one FMNMX: fmaxf returns the other operand of a NaN, and acc is never NaN
#else
  const float a = fabsf(x);
  return f32_is_nan(a) ? acc : (a > acc ? a : acc);
#endif
}

}  // namespace te

// ---- MXFP8 (docs/NUMERICS.md §2) --------------------------------------------------------------------------
namespace te {

// Scale byte of a 32-element block: v = amax * fl(1/fmt_max), rounded up to a power of two as E8M0 (NaN → 0xFF,
// Inf → 0xFE, 0 → 0). An f32-subnormal v rounds up to 1 only above 2^-127 (the hardware cvt.rp rule, as TE).
TE_HD uint8_t mxfp8_scale_byte(float amax, float fmt_max) { return e8m0_from_f32_ceil(amax * (1.0f / fmt_max)); }
// Encode factor 2^(127-e) built from bits: e = 254 gives the f32 subnormal 2^-127, e = 255 NaN.
TE_HD float mxfp8_encode_factor(uint8_t e) {
  if (e == 0xFF) return f32_from_bits(0x7FC00000u);
  if (e == 0xFE) return f32_from_bits(0x00400000u);
  return f32_from_bits(static_cast<uint32_t>(254 - e) << 23);
}

// ---- NVFP4 two-level scaling (docs/NUMERICS.md §2) --------------------------------------------------------
// Per-tensor encode scale S_enc = 448*6 / amax, capped at FLT_MAX; amax 0 (or Inf, which gives 0) → 1.
TE_HD float nvfp4_global_encode_scale(float amax) {
  float s = (448.0f * 6.0f) / amax;
  if (!(s <= FLT_MAX)) s = FLT_MAX;  // Inf (amax 0 gives Inf: handled below) and the cap
  if (amax == 0.0f || s == 0.0f) s = 1.0f;
  return s;
}
// E4M3 code of a block's decode scale: e4m3(min(block_amax * (S_enc * fl(1/6)), FLT_MAX)). The block amax is never
// NaN (amax_fold skips NaNs), so v is finite and >= 0, and the GPU's saturating hardware cast gives the software
// cast's code.
TE_HD uint8_t nvfp4_block_scale_code(float block_amax, float s_enc) {
  float v = block_amax * (s_enc * (1.0f / 6.0f));
  if (v > FLT_MAX) v = FLT_MAX;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
#else
  return e4m3_from_f32(v);
#endif
}
// The value of a code nvfp4_block_scale_code made (never the NaN code): exact in f16, so one hardware conversion on
// the GPU.
TE_HD float nvfp4_block_scale_value(uint8_t block_scale_code) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(block_scale_code, __NV_E4M3)));
#else
  return e4m3_to_f32(block_scale_code);
#endif
}
// Factor multiplying x before the e2m1 cast: min(1 / (float(S_dec_b) * S_dec), FLT_MAX).
TE_HD float nvfp4_encode_factor(uint8_t block_scale_code, float s_dec) {
  float f = 1.0f / (nvfp4_block_scale_value(block_scale_code) * s_dec);
  return f > FLT_MAX ? FLT_MAX : f;
}

// Stochastic rounding to e2m1 with a uniform u in (0, 1): between the two neighbouring magnitudes lo <= |x| < hi,
// round up when u < (|x| - lo) / (hi - lo). With the power-of-two gap g of |x|'s binade, t = |x| / g is exact (a
// multiply by 1/g) and so is its fraction t - floor(t). NaN → +6 (as RN); |x| >= 6 saturates; the sign is kept
// (so -0 stays -0).
TE_HD uint8_t e2m1_from_f32_sr(float x, float u) {
  const uint32_t bits = f32_bits(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return 0x7;
  const uint8_t sign = static_cast<uint8_t>((bits >> 28) & 0x8u);
#if defined(__CUDA_ARCH__)
  // The same steps without conversion instructions: |x| clamped to 6 (t = 3, fraction 0: code 7), floor(t) + the
  // offset as the low bits of t + 2^23 + offset added rounding toward zero (t >= 0), floor(t) back by subtracting.
  const E2m1Binade b = e2m1_binade(x);
  const float t = b.a * b.inv_gap, low = __fadd_rz(t, b.magic);
  const uint32_t up = u < t - (low - b.magic) ? 1u : 0u;
  return static_cast<uint8_t>(sign | ((__float_as_uint(low) & 0x7u) + up));
#else
  const float a = fabsf(x);
  if (a >= 6.0f) return sign | 0x7;
  // Gap 0.5 below 2 (codes 0..4 are 0, 0.5, .., 2), 1 in [2, 4) (codes 4..6 are 2, 3, 4 = t + 2), 2 in [4, 6)
  // (codes 6, 7 are 4, 6 = t + 4): the code is the rounded t plus the binade's offset.
  const float inv_gap = a < 2.0f ? 2.0f : (a < 4.0f ? 1.0f : 0.5f);
  const uint32_t offset = a < 2.0f ? 0u : (a < 4.0f ? 2u : 4u);
  const float t = a * inv_gap, lo = floorf(t);
  const uint32_t up = u < t - lo ? 1u : 0u;
  return static_cast<uint8_t>(sign | (static_cast<uint32_t>(lo) + up + offset));
#endif
}
// SR draws 16 random bits per element: one Philox block serves 8 consecutive elements of a copy (counter (i / 8,
// 2 + copy), copy 0 row-wise and 1 column-wise; element i takes half i % 2 of word (i / 2) % 4). The uniform is the
// centre of its 2^-16 cell, (b + 1/2) / 2^16, so P(up) is the fraction rounded to the nearest 2^-16 and E[q] is x
// within 2^-17 of the gap. Kernels that own 8 aligned elements draw the block once.
TE_HD Philox4 sr_block(uint64_t seed, uint64_t index, uint32_t copy) { return philox4x32(seed, index >> 3, 2u + copy); }
// Element `index`'s uniform from its block: 1 + (b + 1/2) / 2^16 built from bits, minus 1 (both exact).
TE_HD float sr_uniform_of(const Philox4& block, uint64_t index) {
  const uint32_t b = (block.v[(index >> 1) & 3] >> (16 * (index & 1))) & 0xFFFFu;
  return f32_from_bits(0x3F800040u | (b << 7)) - 1.0f;
}
// The uniform of element `index` of copy `copy`: it depends only on (seed, index, copy), so any thread layout and the
// CPU draw the same numbers.
TE_HD float sr_uniform(uint64_t seed, uint64_t index, uint32_t copy) {
  return sr_uniform_of(sr_block(seed, index, copy), index);
}

// ---- Random Hadamard transform (NVFP4 column-wise copy) ---------------------------------------------------
// R = diag(s) * H16 * 1/4 with H16 the Sylvester Hadamard matrix (H[i][j] = (-1)^popcount(i & j)) and
// s_j = -1 where bit j of 0xD7E8 is set. Forward: y = v * R. The signs are applied first, then H16 as four butterfly
// stages in f32 (stage h = 1, 2, 4, 8 replaces each pair (w_i, w_i+h), bit h of i clear, by (w_i + w_i+h,
// w_i - w_i+h)), then * 1/4 and the rounding through bf16: 64 adds where the matrix product takes 256, and only
// sign flips and adds in a fixed order, so host and device agree bit for bit.
// R is orthogonal (R Rᵀ = I), so rht16_inverse (v * Rᵀ) undoes it up to the bf16 rounding.
constexpr uint32_t kRhtSignMask = 0xD7E8u;
TE_HD bool hadamard_negative(int i, int j) {  // parity of popcount(i & j) for 4-bit indices
  unsigned x = static_cast<unsigned>(i & j) & 0xFu;
  x ^= x >> 2;
  x ^= x >> 1;
  return (x & 1u) != 0;
}

TE_HD void rht16_forward(const float* v, float* y) {
  float w[16];
  TE_UNROLL
  for (int j = 0; j < 16; ++j) w[j] = ((kRhtSignMask >> j) & 1u) ? -v[j] : v[j];
  TE_UNROLL
  for (int h = 1; h < 16; h <<= 1) {
    TE_UNROLL
    for (int i = 0; i < 16; ++i) {
      if (i & h) continue;
      const float a = w[i], b = w[i + h];
      w[i] = a + b;
      w[i + h] = a - b;
    }
  }
  TE_UNROLL
  for (int i = 0; i < 16; i += 2) {
    y[i] = w[i] * 0.25f;
    y[i + 1] = w[i + 1] * 0.25f;
    bf16_round_pair(y[i], y[i + 1]);
  }
}
// v = y * Rᵀ: v_i = s_i / 4 * sum_j H[i][j] y_j (f32, not rounded).
TE_HD void rht16_inverse(const float* y, float* v) {
  TE_UNROLL
  for (int i = 0; i < 16; ++i) {
    float acc = 0.0f;
    TE_UNROLL
    for (int j = 0; j < 16; ++j) acc += hadamard_negative(i, j) ? -y[j] : y[j];
    acc *= 0.25f;
    v[i] = ((kRhtSignMask >> i) & 1u) ? -acc : acc;
  }
}

}  // namespace te
