// The element update of each optimizer, shared by the CPU reference and the CUDA kernel so both run the same
// expression. Every product and sum is rounded on its own (x86-64 without -mfma does not contract on the host;
// on the device the __f*_rn intrinsics forbid contraction), so the two agree bit for bit.
#pragma once
#include <cmath>

#include "engine/element.h"
#include "engine/hd.h"
#include "graph/optimizer.h"

namespace te::detail {

#ifdef __CUDA_ARCH__
#define TE_OPT_RN(dev, host) return dev
#else
#define TE_OPT_RN(dev, host) return host
#endif
TE_HD float mul_rn(float a, float b) { TE_OPT_RN(__fmul_rn(a, b), a * b); }
TE_HD float add_rn(float a, float b) { TE_OPT_RN(__fadd_rn(a, b), a + b); }
TE_HD float sub_rn(float a, float b) { TE_OPT_RN(__fsub_rn(a, b), a - b); }
TE_HD float div_rn(float a, float b) { TE_OPT_RN(__fdiv_rn(a, b), a / b); }
TE_HD float sqrt_rn(float a) { TE_OPT_RN(__fsqrt_rn(a), std::sqrt(a)); }
#undef TE_OPT_RN

TE_HD void sgd_update(float& p, float g, float& buf, const SgdScalars& s) {
  const float gd = add_rn(g, mul_rn(s.weight_decay, p));
  buf = add_rn(mul_rn(s.momentum, buf), gd);
  p = sub_rn(p, mul_rn(s.lr, buf));
}

TE_HD void adamw_update(float& p, float g, float& m, float& v, const AdamWScalars& s) {
  p = mul_rn(p, s.decay);
  m = add_rn(mul_rn(s.beta1, m), mul_rn(s.one_minus_beta1, g));
  v = add_rn(mul_rn(s.beta2, v), mul_rn(s.one_minus_beta2, mul_rn(g, g)));
  const float mhat = div_rn(m, s.bc1);
  const float denom = add_rn(sqrt_rn(div_rn(v, s.bc2)), s.eps);
  p = sub_rn(p, mul_rn(s.lr, div_rn(mhat, denom)));
}

// Element i of one slot: load the gradient, update master and state, write the model-dtype copy.
TE_HD void update_element(const SlotPtrs& t, int64_t i, OptimizerKind kind, const OptimizerScalars& s) {
  const float g = load_f32(t.g, t.gt, i);
  if (kind == OptimizerKind::adamw)
    adamw_update(t.p[i], g, t.s1[i], t.s2[i], s.adamw);
  else
    sgd_update(t.p[i], g, t.s1[i], s.sgd);
  if (t.value) store_f32(t.value, t.vt, i, t.p[i]);
}

// Element i of a skipped step (OptimizerStep::skip): the gradient becomes 0, the model-dtype copy its master's.
TE_HD void skip_element(const SlotPtrs& t, int64_t i) {
  store_f32(const_cast<void*>(t.g), t.gt, i, 0.0f);
  if (t.value) store_f32(t.value, t.vt, i, t.p[i]);
}

}  // namespace te::detail
