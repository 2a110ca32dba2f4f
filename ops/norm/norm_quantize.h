// LayerNorm/RMSNorm forward whose output goes straight into a QuantizedTensor (fused norm + quantize).
//
// The caller decides whether to quantize (e.g. when the sequence-parallel gather can move quantized data) and
// passes the Quantizer; the norm never assumes it may. Shapes and dtypes are those of ops/norm/norm.h; the
// QuantizedTensor has logical shape x.shape(), original dtype `out_dtype`, and the copies `usages` names.
//
// Result bytes always equal norm_forward(..., out_dtype) followed by quantizer.quantize(usages): the high-precision
// value is rounded to out_dtype before it is quantized, exactly as the unfused path stores and re-reads it.
// A fused CUDA kernel handles FP8 block-1D row-wise output (one pass over x, no high-precision round trip
// through memory); every other configuration runs norm then Quantizer::quantize.
#pragma once
#include "engine/stream.h"
#include "engine/tensor.h"
#include "ops/norm/norm.h"
#include "ops/quant/quantizer.h"

namespace te {

struct NormQuantized {
  QuantizedTensor out;  // the `usages` copies of norm(x) [..., H]
  Tensor mean;          // [M] f32 (undefined for RMSNorm)
  Tensor rstd;          // [M] f32
  bool fused = false;   // true when the fused kernel produced `out`
};

// `reduce` is handed to Quantizer::quantize (per-tensor amax across a group) on the unfused path. With `images` the
// copies carry their exact images (Quantizer::quantize); the fused kernel writes none, so that path is unfused.
NormQuantized norm_forward_quantized(NormKind kind, const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                                     DType out_dtype, Quantizer& quantizer, Usage usages,
                                     const Stream& stream = Stream(), const AmaxReducer& reduce = {},
                                     std::optional<ImageSpec> images = std::nullopt);

// Whether norm_forward_quantized would use the fused kernel for this configuration.
bool norm_quantize_fusable(const Tensor& x, const Tensor& gamma, const Tensor& beta, DType out_dtype,
                           const Quantizer& quantizer, Usage usages);

// The unfused path on purpose (norm, then quantize): the baseline the fused kernel is compared and timed against.
NormQuantized norm_forward_then_quantize(NormKind kind, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                         float eps, DType out_dtype, Quantizer& quantizer, Usage usages,
                                         const Stream& stream = Stream(), const AmaxReducer& reduce = {},
                                         std::optional<ImageSpec> images = std::nullopt);

}  // namespace te
