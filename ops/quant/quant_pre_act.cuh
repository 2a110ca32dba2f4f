// The activation a fused activation → quantize kernel applies to each loaded element: act_forward's formula rounded
// once to the 16-bit input dtype by cuda::round_pair, the rounding act_forward's store uses (its NaN is the
// canonical one), so the quantized bytes equal act_forward followed by quantize. Two elements at a time: one
// conversion per pair instead of one per element (conversions share the 16-per-clock pipe with GELU's MUFU ex2/rcp).
#pragma once
#include <cstdint>
#include <type_traits>

#include "engine/dtype.h"
#include "ops/act/act_math.h"
#include "ops/elementwise/cuda_common.cuh"
#include "ops/quant/quant_kernels.h"

namespace te::quant_fast {

// a and b become the rounded activations; returns the pair's bits.
template <QuantPreAct Act, DType kIn>
__device__ __forceinline__ uint32_t act_round_pair(float& a, float& b) {
  static_assert(kIn == DType::bf16 || kIn == DType::f16);
  using T = std::conditional_t<kIn == DType::bf16, cuda::BF16, cuda::F16>;
  const auto act = [](float x) { return Act == QuantPreAct::gelu ? act_math::gelu(x) : act_math::relu(x); };
  const uint32_t bits = cuda::round_pair<T>(act(a), act(b));
  const float2 r = cuda::unpack_pair<T>(bits);
  a = r.x, b = r.y;
  return bits;
}

// The activation of eight 16-bit elements packed in a 16-byte word (the tile kernel's load unit).
template <QuantPreAct Act, DType kIn>
__device__ __forceinline__ uint4 act_round_word(uint4 w) {
  uint32_t h[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = cuda::unpack_pair<std::conditional_t<kIn == DType::bf16, cuda::BF16, cuda::F16>>(h[j]);
    float a = f.x, b = f.y;
    h[j] = act_round_pair<Act, kIn>(a, b);
  }
  return make_uint4(h[0], h[1], h[2], h[3]);
}

// Calls f(std::integral_constant<QuantPreAct, act>{}): the launch sites pick one kernel instantiation per activation.
template <class F>
void with_pre_act(QuantPreAct act, F&& f) {
  switch (act) {
    case QuantPreAct::none: f(std::integral_constant<QuantPreAct, QuantPreAct::none>{}); break;
    case QuantPreAct::gelu: f(std::integral_constant<QuantPreAct, QuantPreAct::gelu>{}); break;
    case QuantPreAct::relu: f(std::integral_constant<QuantPreAct, QuantPreAct::relu>{}); break;
  }
}

}  // namespace te::quant_fast
