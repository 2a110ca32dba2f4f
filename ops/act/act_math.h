// The activation formulas, shared verbatim by the CPU reference and the CUDA kernels (TE_HD).
#pragma once
#include <cmath>

#include "engine/hd.h"

namespace te::act_math {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;

TE_HD float gelu(float x) {
  const float u = kSqrt2OverPi * (x + kGeluCoeff * x * x * x);
  return 0.5f * x * (1.f + tanhf(u));
}
// d/dx of gelu: 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2), t = tanh(u).
TE_HD float dgelu(float x) {
  const float x2 = x * x;
  const float t = tanhf(kSqrt2OverPi * x * (1.f + kGeluCoeff * x2));
  return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kSqrt2OverPi * (1.f + 3.f * kGeluCoeff * x2);
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
