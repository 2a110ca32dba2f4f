// Per-tensor and per-block scale arithmetic (shared/NUMERICS.md §2), identical on host and device. Every
// quantize kernel — CPU reference, CUDA, and fused norm/activation epilogues — computes scales through here.
#pragma once
#include <cfloat>
#include <cstdint>

#include "engine/float_convert.h"
#include "engine/hd.h"

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
  const float a = fabsf(x);
  return f32_is_nan(a) ? acc : (a > acc ? a : acc);
}

// Largest finite value of a high-precision input dtype (the block-scaling value_for_inf).
TE_HD float hp_max_finite_bits(int dtype_bits_tag) {
  // tag: 0 = f32, 1 = bf16, 2 = f16
  return dtype_bits_tag == 1 ? f32_from_bits(0x7F7F0000u) : (dtype_bits_tag == 2 ? 65504.0f : FLT_MAX);
}

}  // namespace te
