#include "ops/quant/quantized_tensor.h"

#include "engine/error.h"
#include "ops/quant/quant_kernels.h"

namespace te {

int64_t QuantizedTensor::rows() const {
  int64_t m = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) m *= shape[i];
  return m;
}
int64_t QuantizedTensor::cols() const { return shape.empty() ? 1 : shape.back(); }

Usage QuantizedTensor::usages() const {
  Usage u = Usage::none;
  if (rowwise_data.defined()) u = u | Usage::rowwise;
  if (columnwise_data.defined()) u = u | Usage::columnwise;
  return u;
}

Device QuantizedTensor::device() const {
  return rowwise_data.defined() ? rowwise_data.device() : columnwise_data.device();
}

int64_t QuantizedTensor::nbytes() const {
  int64_t n = 0;
  for (const Tensor* t : {&rowwise_data, &rowwise_scale_inv, &columnwise_data, &columnwise_scale_inv})
    if (t->defined()) n += t->nbytes();
  if (rowwise_amax.defined()) n += rowwise_amax.nbytes();
  // The per-tensor fp8 copies share one amax tensor; NVFP4 may have a second one (after RHT).
  if (columnwise_amax.defined() && columnwise_amax.storage() != rowwise_amax.storage()) n += columnwise_amax.nbytes();
  return n;
}

Tensor QuantizedTensor::dequantize(std::optional<DType> dtype, const Stream& stream) const {
  return dequantize_usage(has(Usage::rowwise) ? Usage::rowwise : Usage::columnwise, dtype, stream);
}

Tensor QuantizedTensor::dequantize_usage(Usage from, std::optional<DType> dtype, const Stream& stream) const {
  TE_CHECK_HINT((from == Usage::rowwise || from == Usage::columnwise) && has(from),
                "dequantize: the " << usage_name(from) << " copy of this " << quant_format_name(format) << " tensor "
                                   << shape_str(shape) << " is absent (has " << usage_name(usages()) << ")",
                "quantize with that usage, or dequantize from the copy that exists");
  const DType out_dtype = dtype.value_or(original_dtype);
  TE_CHECK(is_high_precision(out_dtype), "dequantize: output dtype " << dtype_name(out_dtype)
                                                                    << " must be f32, bf16 or f16");
  const bool col = from == Usage::columnwise;
  const Tensor& data = col ? columnwise_data : rowwise_data;
  const Tensor& scale = col ? columnwise_scale_inv : rowwise_scale_inv;
  const Tensor& amax = col ? columnwise_amax : rowwise_amax;
  DequantArgs a{format,
                data_dtype,
                data.data<uint8_t>(),
                scale.data_ptr(),
                amax.defined() ? amax.data<float>() : nullptr,
                copy_layout(format, from, rows(), cols()),
                col,
                col && columnwise_rht,
                rows(),
                cols()};
  Tensor out = Tensor::empty(shape, out_dtype, device(), stream);
  quant_kernels(format, device().kind).dequant(a, out.data_ptr(), out_dtype, stream);
  return out;
}

}  // namespace te
