// Counter-based random numbers (Philox4x32-10): value i depends only on (seed, i), so host and device produce the
// same stream, in any order, on any number of threads. Used for seeded init and NVFP4 stochastic rounding.
// The normal transform uses only +, *, fmaf and bit tricks so host and device agree bit for bit.
#pragma once
#include <cstdint>

#include "engine/float_convert.h"
#include "engine/hd.h"

namespace te {

struct Philox4 {
  uint32_t v[4];
};

TE_HD uint32_t mulhilo32(uint32_t a, uint32_t b, uint32_t* hi) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  return static_cast<uint32_t>(p);
}

// One Philox4x32-10 block for counter (ctr_lo, ctr_hi) under the 64-bit key `seed`.
TE_HD Philox4 philox4x32(uint64_t seed, uint64_t ctr_lo, uint64_t ctr_hi = 0) {
  uint32_t c0 = static_cast<uint32_t>(ctr_lo), c1 = static_cast<uint32_t>(ctr_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(ctr_hi), c3 = static_cast<uint32_t>(ctr_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, hi1;
    uint32_t lo0 = mulhilo32(0xD2511F53u, c0, &hi0);
    uint32_t lo1 = mulhilo32(0xCD9E8D57u, c2, &hi1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// Uniform in [0, 1) with 24 random bits (exact in f32).
TE_HD float uniform_from_bits(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }

// ln(x) for x > 0 (normal), built from bits and a polynomial (fmaf only): deterministic across host and device.
TE_HD float portable_log(float x) {
  uint32_t u = f32_bits(x);
  int e = static_cast<int>((u >> 23) & 0xFF) - 127;
  float m = f32_from_bits((u & 0x7FFFFFu) | 0x3F800000u);  // [1, 2)
  if (m > 1.41421356f) { m = m * 0.5f; e += 1; }          // [0.707, 1.414)
  float s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
  // atanh series: ln(m) = 2 (s + s^3/3 + s^5/5 + ...), |s| < 0.172
  float p = fmaf(s2, 0.11111111f, 0.14285715f);
  p = fmaf(s2, p, 0.2f);
  p = fmaf(s2, p, 0.33333334f);
  p = fmaf(s2, p, 1.0f);
  return fmaf(static_cast<float>(e), 0.69314718f, 2.0f * s * p);
}

// sin and cos of 2*pi*t for t in [0, 1), quadrant reduction on t (exact) then polynomials.
TE_HD void portable_sincos_2pi(float t, float* s, float* c) {
  float q = t * 4.0f;  // exact
  int quadrant = static_cast<int>(q);
  float r = (q - static_cast<float>(quadrant)) * 1.57079637f;  // [0, pi/2)
  float r2 = r * r;
  float sp = fmaf(r2, fmaf(r2, fmaf(r2, fmaf(r2, 2.7557319e-6f, -1.98412698e-4f), 8.33333333e-3f),
                           -1.66666667e-1f), 1.0f) * r;
  float cp = fmaf(r2, fmaf(r2, fmaf(r2, fmaf(r2, 2.4801587e-5f, -1.38888889e-3f), 4.16666667e-2f), -0.5f), 1.0f);
  switch (quadrant & 3) {
    case 0: *s = sp; *c = cp; break;
    case 1: *s = cp; *c = -sp; break;
    case 2: *s = -sp; *c = -cp; break;
    default: *s = -cp; *c = sp; break;
  }
}

// Standard normal number i of the stream `seed` (Box-Muller over one Philox block).
TE_HD float normal_at(uint64_t seed, uint64_t i) {
  Philox4 r = philox4x32(seed, i >> 1);
  float u1 = (static_cast<float>(r.v[0] >> 8) + 1.0f) * (1.0f / 16777216.0f);  // (0, 1]
  float u2 = uniform_from_bits(r.v[1]);
  float rad = sqrtf(-2.0f * portable_log(u1));
  float s, c;
  portable_sincos_2pi(u2, &s, &c);
  return (i & 1) ? rad * s : rad * c;
}

TE_HD float uniform_at(uint64_t seed, uint64_t i) {
  Philox4 r = philox4x32(seed, i >> 2, 1);
  return uniform_from_bits(r.v[i & 3]);
}

// Element i of a random fill: a + b·N(0,1) when `normal`, else uniform on [a, b).
TE_HD float random_fill_value(uint64_t seed, uint64_t i, bool normal, float a, float b) {
  return normal ? a + b * normal_at(seed, i) : a + (b - a) * uniform_at(seed, i);
}

}  // namespace te
