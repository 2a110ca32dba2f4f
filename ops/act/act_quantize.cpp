// Activation + quantize: one fused CUDA pass where the quantizer has one (FP8 block 1D / MXFP8, row-wise and/or
// column-wise, of a contiguous 16-bit tensor, GELU or ReLU; NVFP4 1D row-wise after an amax pass over the
// activation), else act_forward into out_dtype followed by the
// quantizer. Both give the same bytes: the fused kernel rounds the activation to out_dtype before quantizing, as
// act_forward does (and, row-wise only, can store that rounded activation too).
#include "ops/act/act_quantize.h"

namespace te {

QuantizedTensor act_forward_quantized(ActKind kind, const Tensor& x, DType out_dtype, Quantizer& quantizer,
                                      Usage usages, const Stream& stream, const AmaxReducer& reduce, Tensor* act_out,
                                      std::optional<ImageSpec> images) {
  const bool fusable = kind != ActKind::swiglu && out_dtype == x.dtype() && (!act_out || usages == Usage::rowwise);
  if (fusable && quantizer.can_fuse_activation(x, usages))
    return quantizer.quantize_activation(kind == ActKind::gelu ? QuantPreAct::gelu : QuantPreAct::relu, x, usages,
                                         stream, reduce, act_out, images);
  const Tensor y = act_forward(kind, x, out_dtype, stream);  // [..., F] out_dtype
  if (act_out) *act_out = y;
  return quantizer.quantize(y, usages, stream, reduce, images);
}

}  // namespace te
