// Exact conversions between f32 and every storage format (docs/NUMERICS.md §1), identical on host and device.
// Narrow float formats round to nearest even and saturate (finite overflow and ±Inf clamp to ±max, NaN stays NaN)
// — the semantics of PTX cvt.rn.satfinite. f16/bf16 round to nearest even, overflow to Inf, keep NaN payloads.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "engine/hd.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#endif

namespace te {

TE_HD uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
TE_HD float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
TE_HD bool f32_is_nan(float f) { return (f32_bits(f) & 0x7FFFFFFFu) > 0x7F800000u; }

// ---- bf16: the top half of an f32 -----------------------------------------------------------------
TE_HD uint16_t bf16_from_f32(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet, keep payload
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
TE_HD float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }
// a and b rounded to bf16 (nearest even) and back, as bf16_to_f32(bf16_from_f32(.)): on the GPU one hardware
// conversion for the pair. A NaN may come back with another payload there, so only for values whose NaN payload
// nothing reads (the GPU's arithmetic canonicalises NaNs anyway).
TE_HD void bf16_round_pair(float& a, float& b) {
#if defined(__CUDA_ARCH__)
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  a = __low2float(h);
  b = __high2float(h);
#else
  a = bf16_to_f32(bf16_from_f32(a));
  b = bf16_to_f32(bf16_from_f32(b));
#endif
}

// ---- f16: s1 e5 m10, subnormals, overflow to Inf -------------------------------------------------------
TE_HD uint16_t f16_from_f32(float f) {
  uint32_t u = f32_bits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  u &= 0x7FFFFFFFu;
  if (u > 0x7F800000u) return sign | 0x7E00u | static_cast<uint16_t>((u >> 13) & 0x3FFu);  // NaN: quiet + payload
  if (u >= 0x477FF000u) return sign | 0x7C00u;                                            // >= 65520 rounds to Inf
  if (u < 0x38800000u) {                                                                  // f16 subnormal (< 2^-14)
    float a = f32_from_bits(u) * 16777216.0f;                                             // / 2^-24, exact
    return sign | static_cast<uint16_t>(rintf(a));
  }
  uint32_t mant = u & 0x7FFFFFu;
  uint32_t h = ((((u >> 23) - 127u + 15u)) << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h += 1u;
  return sign | static_cast<uint16_t>(h);
}
// Two 16-bit values packed for one 32-bit store, the lower element in the low half.
TE_HD uint32_t bf16x2_bits(float lo, float hi) {
  return bf16_from_f32(lo) | (static_cast<uint32_t>(bf16_from_f32(hi)) << 16);
}
TE_HD uint32_t f16x2_bits(float lo, float hi) {
  return f16_from_f32(lo) | (static_cast<uint32_t>(f16_from_f32(hi)) << 16);
}
TE_HD float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1F) return f32_from_bits(sign | 0x7F800000u | (m << 13));
  if (e == 0) {
    float v = static_cast<float>(m) * (1.0f / 16777216.0f);  // m * 2^-24, exact
    return sign ? -v : v;
  }
  return f32_from_bits(sign | ((e - 15u + 127u) << 23) | (m << 13));
}

// ---- narrow minifloats: one generic encoder, parameterised by the format --------------------------------
struct MiniFloat {
  int exp_bits, man_bits, bias;
  uint8_t max_code;  // magnitude code of the largest finite value
  uint8_t nan_code;  // canonical NaN code (0 where the format has none: fp4 maps NaN to +max)
};
inline constexpr MiniFloat kE4M3{4, 3, 7, 0x7E, 0x7F};
inline constexpr MiniFloat kE5M2{5, 2, 15, 0x7B, 0x7F};
inline constexpr MiniFloat kE2M1{2, 1, 1, 0x07, 0x00};

// 2^e for e in f32's normal range [-126, 127], built from its bits: multiplying by it is exact wherever the product
// stays normal, which is what the minifloat conversions below need (ldexpf gives the same values, far slower).
TE_HD float pow2_normal(int e) { return f32_from_bits(static_cast<uint32_t>(e + 127) << 23); }

TE_HD float minifloat_to_f32(uint8_t code, MiniFloat fmt) {
  const int total = 1 + fmt.exp_bits + fmt.man_bits;
  const uint32_t sign = (code >> (total - 1)) & 1u;
  const uint32_t mag = code & ((1u << (total - 1)) - 1u);
  if (fmt.nan_code && mag > fmt.max_code) {
    if (fmt.exp_bits == 5 && mag == 0x7C) return sign ? -INFINITY : INFINITY;  // E5M2 Inf
    return f32_from_bits(0x7FC00000u | (sign << 31));
  }
  const uint32_t e = mag >> fmt.man_bits, m = mag & ((1u << fmt.man_bits) - 1u);
  float v;
  if (e == 0) {
    v = static_cast<float>(m) * pow2_normal(1 - fmt.bias - fmt.man_bits);
  } else {
    v = static_cast<float>((1u << fmt.man_bits) | m) * pow2_normal(static_cast<int>(e) - fmt.bias - fmt.man_bits);
  }
  return sign ? -v : v;
}

// Round to nearest even, saturating; the result is a code of 1+exp_bits+man_bits bits (sign on top).
TE_HD uint8_t minifloat_from_f32(float f, MiniFloat fmt) {
  const int total = 1 + fmt.exp_bits + fmt.man_bits;
  uint32_t u = f32_bits(f);
  const uint32_t sign = (u >> 31) << (total - 1);
  u &= 0x7FFFFFFFu;
  if (u > 0x7F800000u) return fmt.nan_code ? fmt.nan_code : fmt.max_code;  // NaN (fp4 has none: +max)
  const float a = f32_from_bits(u);
  const float max_val = minifloat_to_f32(fmt.max_code, fmt);
  if (a >= max_val) return static_cast<uint8_t>(sign | fmt.max_code);  // saturate (Inf too)
  const int min_normal_exp = 1 - fmt.bias;
  uint32_t mag;
  if (static_cast<int>(u >> 23) - 127 < min_normal_exp) {
    // subnormal range of the target: integer multiple of the quantum 2^(emin - man_bits), rounded to even.
    mag = static_cast<uint32_t>(rintf(a * pow2_normal(fmt.man_bits - min_normal_exp)));
  } else {
    const uint32_t shift = 23u - fmt.man_bits;
    const uint32_t mant = u & 0x7FFFFFu;
    const uint32_t exp = (u >> 23) - 127u + fmt.bias;
    mag = (exp << fmt.man_bits) | (mant >> shift);
    const uint32_t rest = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (mag & 1u))) mag += 1u;  // carry into the exponent is correct
  }
  if (mag > fmt.max_code) mag = fmt.max_code;
  return static_cast<uint8_t>(sign | mag);
}

TE_HD uint8_t e4m3_from_f32(float f) { return minifloat_from_f32(f, kE4M3); }
TE_HD uint8_t e5m2_from_f32(float f) { return minifloat_from_f32(f, kE5M2); }
#if defined(__CUDA_ARCH__)
// |f| clamped to 6 and its e2m1 binade: 1 / gap, and 2^23 + the binade's first code (what t = a / gap is added to).
struct E2m1Binade {
  float a, inv_gap, magic;
};
__device__ inline E2m1Binade e2m1_binade(float f) {
  const float a = fminf(fabsf(f), 6.0f);
  return {a, a < 2.0f ? 2.0f : (a < 4.0f ? 1.0f : 0.5f), a < 2.0f ? 8388608.0f : (a < 4.0f ? 8388610.0f : 8388612.0f)};
}
#endif
// E2M1 has seven magnitudes above zero, so round-to-nearest-even is a count of the midpoints |f| passes; a midpoint
// itself goes to the neighbour with the even code (0.25 → 0, 0.75 → 1.0, 1.25 → 1.0, 1.75 → 2, 2.5 → 2, 3.5 → 4,
// 5 → 4). The same codes as minifloat_from_f32(f, kE2M1), in a handful of compares (the NVFP4 kernels call it for
// every element); NaN → 0x7 without its sign, as there.
// On the GPU the same codes come from the binade's gap instead: t = |f| / gap is exact (gap 0.5 below 2, 1 in [2, 4),
// 2 from 4, with |f| clamped to 6) and the code is t rounded to nearest even plus the binade's first code, since
// the e2m1 codes are evenly spaced within each binade and an even t is an even code. Adding 2^23 + offset rounds t
// in the f32 adder, so no conversion instruction is needed.
TE_HD uint8_t e2m1_from_f32(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7;
#if defined(__CUDA_ARCH__)
  const E2m1Binade b = e2m1_binade(f);
  return static_cast<uint8_t>(((u >> 28) & 0x8u) | (__float_as_uint(__fmaf_rn(b.a, b.inv_gap, b.magic)) & 0x7u));
#else
  const float a = f32_from_bits(u & 0x7FFFFFFFu);
  const uint32_t mag = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) + (a >= 3.5f) + (a > 5.0f);
  return static_cast<uint8_t>(((u >> 28) & 0x8u) | mag);
#endif
}
TE_HD float e4m3_to_f32(uint8_t c) { return minifloat_to_f32(c, kE4M3); }
TE_HD float e5m2_to_f32(uint8_t c) { return minifloat_to_f32(c, kE5M2); }
TE_HD float e2m1_to_f32(uint8_t c) { return minifloat_to_f32(c & 0xF, kE2M1); }

// ---- E8M0: a biased power of two, 0xFF = NaN, no zero --------------------------------------------------
TE_HD float e8m0_to_f32(uint8_t e) {
  if (e == 0xFF) return f32_from_bits(0x7FC00000u);
  if (e == 0) return f32_from_bits(0x00400000u);  // 2^-127 is an f32 subnormal
  return f32_from_bits(static_cast<uint32_t>(e) << 23);
}
// Exact for powers of two; other values are rounded up to the next power of two (the MXFP8 rule).
TE_HD uint8_t e8m0_from_f32_ceil(float v) {
  uint32_t u = f32_bits(v);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0xFF;
  if ((u & 0x7FFFFFFFu) == 0x7F800000u) return 0xFE;
  u &= 0x7FFFFFFFu;
  if (u == 0) return 0;
  uint32_t e = u >> 23, m = u & 0x7FFFFFu;
  if (e == 0) return m > 0x400000u ? 1 : 0;  // subnormal: 2^-127 is 0x400000
  if (m != 0 && e < 0xFE) e += 1;
  return static_cast<uint8_t>(e);
}

}  // namespace te
