// Activation forward whose output is quantized into the copies `usages` names (row-wise and/or column-wise),
// e.g. the FC2 input of an MLP under an FP8/FP4 recipe. The caller decides whether to quantize and passes the
// Quantizer. Bytes equal act_forward(..., out_dtype) followed by quantizer.quantize(usages): the activation is rounded
// to out_dtype first. GELU/ReLU into FP8 block 1D or MXFP8 (either or both copies) on the GPU run as one fused
// pass, into NVFP4 1D row-wise as an amax pass and one fused quantize pass (Quantizer::quantize_activation).
#pragma once
#include "ops/act/act.h"
#include "ops/quant/quantizer.h"

namespace te {

// x [..., F_in] (see act.h) → QuantizedTensor of logical shape [..., F], original dtype out_dtype. With `act_out`,
// also the activation itself in out_dtype (a training forward keeps it): written by the same fused pass. With
// `images`, the copies' exact images too (Quantizer::quantize).
QuantizedTensor act_forward_quantized(ActKind kind, const Tensor& x, DType out_dtype, Quantizer& quantizer,
                                      Usage usages, const Stream& stream = Stream(), const AmaxReducer& reduce = {},
                                      Tensor* act_out = nullptr, std::optional<ImageSpec> images = std::nullopt);

}  // namespace te
