// Activation + quantize: act_forward into out_dtype, then the quantizer (one pass producing every usage).
#include "ops/act/act_quantize.h"

namespace te {

QuantizedTensor act_forward_quantized(ActKind kind, const Tensor& x, DType out_dtype, Quantizer& quantizer,
                                      const Stream& stream, const AmaxReducer& reduce) {
  const Tensor y = act_forward(kind, x, out_dtype, stream);  // [..., F] out_dtype
  return quantizer.quantize(y, stream, reduce);
}

}  // namespace te
