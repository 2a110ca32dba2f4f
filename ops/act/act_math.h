// The activation formulas, shared verbatim by the CPU reference and the CUDA kernels (TE_HD).
#pragma once
#include <cmath>

#include "engine/hd.h"

namespace te::act_math {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;

// x / d for d ≥ 1 (GELU's and the sigmoid's denominators); on the device x · rcp.approx.ftz(d) (≤ 2 ulp; 0 once
// d > 2^126, where the quotient is below any output dtype's resolution of x anyway). __fdividef's non-ftz form adds
// subnormal handling that d ≥ 1 never needs; the product stays non-ftz, so a subnormal x keeps its value. gelu and
// dgelu give the same bits as with __fdividef and exp2f for every f32 x (checked exhaustively on an H200).
TE_HD float quotient(float x, float d) {
#ifdef __CUDA_ARCH__
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
  return __fmul_rn(x, r);
#else
  return x / d;
#endif
}

// exp(-2u), u = sqrt(2/pi) (x + 0.044715 x^3). On the device as 2^(x (a + b x^2)) with -2 sqrt(2/pi) log2(e) folded
// into the constants: one MUFU.EX2 (≤ 2 ulp) instead of expf's range reduction, several times fewer instructions;
// both are far below the resolution of any activation dtype.
TE_HD float exp_neg2u(float x) {
#ifdef __CUDA_ARCH__
  constexpr float a = -2.f * kSqrt2OverPi * 1.4426950408889634f, b = a * kGeluCoeff;
  // ex2.approx.ftz: exp2f's ex2.approx.f32 also handles subnormal results, which only occur for arguments below
  // -126, where 1 + exp(-2u) is 1 either way (and a subnormal argument gives 1 either way).
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * fmaf(b, x * x, a)));
  return e;
#else
  return expf(-2.f * kSqrt2OverPi * (x + kGeluCoeff * x * x * x));
#endif
}

// 0.5 x (1 + tanh(u)) = x · sigmoid(2u) = x / (1 + exp(-2u)): the same function with one exp and one division
// instead of tanh, and no cancellation in 1 + tanh(u) for negative x.
TE_HD float gelu(float x) { return quotient(x, 1.f + exp_neg2u(x)); }
// d/dx of gelu: 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2), t = tanh(u); with s = sigmoid(2u),
// 1 + t = 2s and 1 - t^2 = 4 s (1 - s).
TE_HD float dgelu(float x) {
  const float x2 = x * x;
  const float s = quotient(1.f, 1.f + exp_neg2u(x));
  return s + 2.f * x * s * (1.f - s) * kSqrt2OverPi * (1.f + 3.f * kGeluCoeff * x2);
}
TE_HD float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }
TE_HD float silu(float x) { return x * sigmoid(x); }
// d/dx of silu: s (1 + x (1 - s)), s = sigmoid(x).
TE_HD float dsilu(float x) {
  const float s = sigmoid(x);
  return s * (1.f + x * (1.f - s));
}
TE_HD float relu(float x) { return x > 0.f ? x : 0.f; }
TE_HD float drelu(float x) { return x > 0.f ? 1.f : 0.f; }

}  // namespace te::act_math
