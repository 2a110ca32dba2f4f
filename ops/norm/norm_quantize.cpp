// Fused norm + quantize: picks the fused CUDA kernel when it applies, else norm then Quantizer::quantize.
#include "ops/norm/norm_quantize.h"

#include "engine/error.h"
#include "ops/quant/quant_layout.h"
#include "te_config.h"
#if TE_WITH_CUDA
#include "ops/norm/norm_quantize_impl.h"
#endif

namespace te {
namespace {

[[maybe_unused]] bool fusable_format(const Tensor& x, DType out_dtype, const Quantizer& q, Usage usages) {
  const QuantizerConfig& c = q.config();
  return x.defined() && x.device().is_cuda() && c.format == QuantFormat::fp8_block_1d && usages == Usage::rowwise &&
         (c.data_dtype == DType::fp8_e4m3 || c.data_dtype == DType::fp8_e5m2) && is_high_precision(x.dtype()) &&
         is_high_precision(out_dtype) && x.dim() >= 1 && x.size(-1) > 0;
}

}  // namespace

bool norm_quantize_fusable(const Tensor& x, const Tensor& gamma, const Tensor& beta, DType out_dtype,
                           const Quantizer& quantizer, Usage usages) {
#if TE_WITH_CUDA
  if (!fusable_format(x, out_dtype, quantizer, usages) || !gamma.defined() || !is_high_precision(gamma.dtype()))
    return false;
  const int64_t H = x.size(-1);
  // The contiguous copy norm_forward would make is 16-byte aligned; a contiguous x is checked as it is.
  NormFwdArgs a{NormKind::layernorm, x.is_contiguous() ? x.data_ptr() : nullptr, x.dtype(), gamma.data_ptr(),
                beta.defined() ? beta.data_ptr() : nullptr, gamma.dtype(), nullptr, out_dtype, nullptr, nullptr,
                x.numel() / H, H, 0.f};
  return cuda::norm_quantize_fusable(a);
#else
  (void)x, (void)gamma, (void)beta, (void)out_dtype, (void)quantizer, (void)usages;
  return false;
#endif
}

NormQuantized norm_forward_then_quantize(NormKind kind, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                         float eps, DType out_dtype, Quantizer& quantizer, Usage usages,
                                         const Stream& stream, const AmaxReducer& reduce,
                                         std::optional<ImageSpec> images) {
  NormForward f = norm_forward(kind, x, gamma, beta, eps, out_dtype, stream);  // [..., H] out_dtype
  NormQuantized r;
  r.out = quantizer.quantize(f.out, usages, stream, reduce, images);
  r.mean = f.mean;
  r.rstd = f.rstd;
  return r;
}

NormQuantized norm_forward_quantized(NormKind kind, const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                                     DType out_dtype, Quantizer& quantizer, Usage usages, const Stream& stream,
                                     const AmaxReducer& reduce, std::optional<ImageSpec> images) {
  if (images || !norm_quantize_fusable(x, gamma, beta, out_dtype, quantizer, usages))
    return norm_forward_then_quantize(kind, x, gamma, beta, eps, out_dtype, quantizer, usages, stream, reduce, images);
#if TE_WITH_CUDA
  // Validate exactly as the plain forward does (shapes, dtypes, devices), using a zero-size stand-in output.
  const int64_t H = x.size(-1), M = x.numel() / H;
  const bool ln = kind == NormKind::layernorm;
  TE_CHECK(!stream.device().is_cuda() || x.device() == stream.device(),
           "norm_forward_quantized: x " << x.str() << " is not on the stream's device " << stream.device().str());
  TE_CHECK_HINT(gamma.dim() == 1 && gamma.size(0) == H && gamma.device() == x.device() && gamma.is_contiguous(),
                "norm_forward_quantized: gamma must be a contiguous [" << H << "] tensor on " << x.device().str()
                                                                      << "; got " << gamma.str(),
                "pass the norm weight");
  if (beta.defined())
    TE_CHECK_HINT(ln && beta.shape() == gamma.shape() && beta.dtype() == gamma.dtype() &&
                      beta.device() == x.device() && beta.is_contiguous(),
                  "norm_forward_quantized: beta must be a contiguous [" << H << "] " << dtype_name(gamma.dtype())
                                                                        << " tensor (LayerNorm only); got "
                                                                        << beta.str(),
                  "pass Tensor() for RMSNorm");
  const QuantizerConfig& c = quantizer.config();
  NormQuantized r;
  r.fused = true;
  r.rstd = Tensor::empty({M}, DType::f32, x.device(), stream);
  if (ln) r.mean = Tensor::empty({M}, DType::f32, x.device(), stream);
  QuantizedTensor& q = r.out;
  q.format = c.format;
  q.shape = x.shape();
  q.original_dtype = out_dtype;
  q.data_dtype = c.data_dtype;
  const CopyLayout L = copy_layout(c.format, Usage::rowwise, M, H);
  q.rowwise_data = Tensor::empty(copy_data_shape(L), c.data_dtype, x.device(), stream);        // [M, H] fp8
  q.rowwise_scale_inv = Tensor::empty(copy_scale_shape(L), DType::f32, x.device(), stream);    // [H/128, round4(M)]
  const Tensor xc = x.contiguous(stream);
  cuda::NormQuantArgs a{{kind, xc.data_ptr(), xc.dtype(), gamma.data_ptr(), beta.defined() ? beta.data_ptr() : nullptr,
                         gamma.dtype(), nullptr, out_dtype, ln ? r.mean.data<float>() : nullptr, r.rstd.data<float>(),
                         M, H, eps},
                        static_cast<uint8_t*>(q.rowwise_data.data_ptr()),
                        q.rowwise_scale_inv.data<float>(),
                        L.scale_ld,
                        c.data_dtype == DType::fp8_e5m2,
                        c.pow2_scales,
                        c.eps};
  TE_CHECK(L.scale_index == ScaleIndex::block_major && L.scale_ld == round_up4(M),
           "norm_forward_quantized: unexpected block-1D scale layout for [" << M << ", " << H << "]");
  cuda::norm_quantize_forward(a, stream);
  return r;
#else
  return norm_forward_then_quantize(kind, x, gamma, beta, eps, out_dtype, quantizer, usages, stream, reduce);
#endif
}

}  // namespace te
