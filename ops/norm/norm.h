// LayerNorm and RMSNorm over the last dimension, forward and backward (CPU reference + CUDA).
//
//   x      [..., H]  f32 | bf16 | f16, any strides (M = product of the leading dims; rows are made contiguous)
//   gamma  [H]       the parameter dtype (f32 | bf16 | f16)
//   beta   [H]       LayerNorm only, same dtype as gamma; undefined means 0. Must be undefined for RMSNorm.
//   out    [..., H]  contiguous, f32 | bf16 | f16 (may differ from x)
//   mean   [M] f32   LayerNorm only (undefined for RMSNorm); saved for backward
//   rstd   [M] f32   1 / sqrt(var + eps) (LayerNorm: biased variance; RMSNorm: mean of squares)
//
// LayerNorm: y = (x - mean) * rstd * gamma + beta. RMSNorm: y = x * rstd * gamma.
// Statistics and arithmetic are fp32; each output element is rounded once. Backward gives dx (x's dtype unless the
// caller supplies another), dgamma and dbeta reduced over rows in fp32 (deterministic: fixed reduction order) and
// rounded once to their tensor's dtype. Fused quantized outputs are in ops/norm/norm_quantize.h.
// The stream is the last argument; every tensor lives on one device (the stream's, when it is a CUDA stream).
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

#include "engine/stream.h"
#include "engine/tensor.h"

namespace te {

enum class NormKind : uint8_t { layernorm, rmsnorm };
std::string_view norm_kind_name(NormKind k);                         // "layernorm" | "rmsnorm"
std::optional<NormKind> norm_kind_from_name(std::string_view name);  // and the aliases "ln", "rms"

// Forward into caller-owned buffers (planned memory): out, rstd (and mean for LayerNorm) allocated as above.
void norm_forward(NormKind kind, const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, Tensor& out,
                  Tensor& mean, Tensor& rstd, const Stream& stream = Stream());

struct NormForward {
  Tensor out;   // [..., H] out_dtype
  Tensor mean;  // [M] f32 (undefined for RMSNorm)
  Tensor rstd;  // [M] f32
};
NormForward norm_forward(NormKind kind, const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                         DType out_dtype, const Stream& stream = Stream());

// Backward into caller-owned buffers.
//   dy [..., H] x's shape, f32 | bf16 | f16;  mean/rstd as saved by the forward;  gamma as in the forward.
//   dx [..., H] contiguous, f32 | bf16 | f16;  dgamma [H], dbeta [H] (LayerNorm) f32 | bf16 | f16, either may be
//   undefined to skip it (dbeta must be undefined for RMSNorm).
void norm_backward(NormKind kind, const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                   const Tensor& gamma, Tensor& dx, Tensor& dgamma, Tensor& dbeta, const Stream& stream = Stream());

struct NormBackward {
  Tensor dx;      // x's dtype
  Tensor dgamma;  // gamma's dtype
  Tensor dbeta;   // gamma's dtype (undefined for RMSNorm)
};
NormBackward norm_backward(NormKind kind, const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                           const Tensor& gamma, const Stream& stream = Stream());

}  // namespace te
