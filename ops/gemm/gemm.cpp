// GEMM front end: shape validation, output allocation, CPU/CUDA dispatch (see gemm.h).
#include "ops/gemm/gemm.h"

#include "engine/error.h"
#include "ops/elementwise/elementwise.h"
#include "ops/gemm/gemm_internal.h"
#include "te_config.h"

namespace te {

std::string_view gemm_role_name(GemmRole r) {
  switch (r) {
    case GemmRole::fprop: return "fprop";
    case GemmRole::dgrad: return "dgrad";
    case GemmRole::wgrad: return "wgrad";
  }
  return "?";
}

int64_t GemmOperand::rows() const {
  if (is_quantized()) return quantized().rows();
  const Shape& sh = tensor().shape();
  int64_t m = 1;
  for (size_t i = 0; i + 1 < sh.size(); ++i) m *= sh[i];
  return m;
}
int64_t GemmOperand::cols() const {
  if (is_quantized()) return quantized().cols();
  return tensor().dim() == 0 ? 1 : tensor().size(-1);
}
Device GemmOperand::device() const { return is_quantized() ? quantized().device() : tensor().device(); }

std::string GemmOperand::str() const {
  if (!is_quantized()) return tensor().str();
  const QuantizedTensor& q = quantized();
  return shape_str(q.shape) + " " + std::string(quant_format_name(q.format)) + "(" +
         std::string(dtype_name(q.data_dtype)) + ", " + std::string(usage_name(q.usages())) + ") " +
         q.device().str();
}

const Tensor& GemmOperand::image(Usage u) const {
  static const Tensor none;
  if (!is_quantized()) return none;
  return u == Usage::rowwise ? quantized().rowwise_image : quantized().columnwise_image;
}

std::optional<ImageSpec> gemm_image_spec(QuantFormat format, Device device) {
  if (device.is_cpu()) return ImageSpec{DType::f32, true};
  if (byte_scales(format))  // MXFP8 / NVFP4: no Hopper tensor-core path, the GEMM reads bf16 images
    return ImageSpec{DType::bf16, false};
  return std::nullopt;
}

namespace detail {

Tensor as_2d(const Tensor& t, const Stream& stream) {
  if (t.dim() == 2) return t;
  TE_CHECK(t.dim() >= 1, "GEMM operand must have at least one dimension, got a scalar");
  return t.contiguous(stream).reshape({-1, t.size(-1)});
}

GemmShape gemm_shape(const GemmOperand& a, const GemmOperand& b, GemmRole role) {
  if (!a.is_quantized()) TE_CHECK(a.tensor().defined(), "GEMM " << gemm_role_name(role) << ": operand a is undefined");
  if (!b.is_quantized()) TE_CHECK(b.tensor().defined(), "GEMM " << gemm_role_name(role) << ": operand b is undefined");
  GemmShape s{};
  switch (role) {
    case GemmRole::fprop:  // x [M, K], W [N, K]
      s = {a.rows(), b.rows(), a.cols(), 0, 0};
      TE_CHECK_HINT(b.cols() == s.K, "GEMM fprop: x " << a.str() << " and W " << b.str() << " disagree on K",
                    "fprop computes x[M, K] · W[N, K]ᵀ");
      s.P = s.M, s.Q = s.N;
      break;
    case GemmRole::dgrad:  // dy [M, N], W [N, K]
      s = {a.rows(), a.cols(), b.cols(), 0, 0};
      TE_CHECK_HINT(b.rows() == s.N, "GEMM dgrad: dy " << a.str() << " and W " << b.str() << " disagree on N",
                    "dgrad computes dy[M, N] · W[N, K]");
      s.P = s.M, s.Q = s.K;
      break;
    case GemmRole::wgrad:  // dy [M, N], x [M, K]
      s = {a.rows(), a.cols(), b.cols(), 0, 0};
      TE_CHECK_HINT(b.rows() == s.M, "GEMM wgrad: dy " << a.str() << " and x " << b.str() << " disagree on M",
                    "wgrad computes dy[M, N]ᵀ · x[M, K]");
      s.P = s.N, s.Q = s.K;
      break;
  }
  return s;
}

}  // namespace detail

Shape gemm_out_shape(const GemmOperand& a, const GemmOperand& b, GemmRole role) {
  const detail::GemmShape s = detail::gemm_shape(a, b, role);
  if (role != GemmRole::wgrad) {
    // Keep a's leading dims: y [..., N] for x [..., K].
    Shape lead = a.is_quantized() ? a.quantized().shape : a.tensor().shape();
    if (lead.size() >= 2) {
      lead.back() = s.Q;
      return lead;
    }
  }
  return {s.P, s.Q};
}

static DType default_out_dtype(const GemmOperand& a) {
  if (a.is_quantized()) return is_high_precision(a.quantized().original_dtype) ? a.quantized().original_dtype : DType::bf16;
  return a.tensor().dtype();
}

void gemm(const GemmOperand& a, const GemmOperand& b, GemmRole role, Tensor& out, const GemmOptions& opts,
          GemmContext& ctx, const Stream& stream) {
  const detail::GemmShape s = detail::gemm_shape(a, b, role);
  const Device dev = a.device();
  TE_CHECK_HINT(b.device() == dev, "GEMM " << gemm_role_name(role) << ": operands on different devices: a "
                                           << a.str() << ", b " << b.str(),
                "move both operands to one device");
  TE_CHECK_HINT(ctx.device() == dev || dev.is_cpu(),
                "GEMM " << gemm_role_name(role) << ": context is for " << ctx.device().str() << ", operands on "
                        << dev.str(),
                "use one GemmContext per device");
  if (!out.defined()) {
    TE_CHECK_HINT(!opts.accumulate, "GEMM " << gemm_role_name(role) << ": accumulate needs an initialised out",
                  "pass the tensor to accumulate into");
    out = Tensor::empty(gemm_out_shape(a, b, role), opts.out_dtype.value_or(default_out_dtype(a)), dev, stream);
  }
  TE_CHECK_HINT(is_high_precision(out.dtype()),
                "GEMM " << gemm_role_name(role) << ": output dtype " << dtype_name(out.dtype()) << " not supported",
                "use f32, bf16 or f16");
  TE_CHECK(!opts.out_dtype || *opts.out_dtype == out.dtype(),
           "GEMM " << gemm_role_name(role) << ": opts.out_dtype " << dtype_name(*opts.out_dtype) << " but out is "
                   << out.str());
  TE_CHECK_HINT(out.dim() >= 1 && out.numel() == s.P * s.Q && out.size(-1) == s.Q,
                "GEMM " << gemm_role_name(role) << " of a " << a.str() << " and b " << b.str() << ": out "
                        << out.str() << " should be [" << s.P << ", " << s.Q << "]",
                "allocate out with gemm_out_shape()");
  TE_CHECK(out.device() == dev, "GEMM " << gemm_role_name(role) << ": out " << out.str() << " not on " << dev.str());
  if (opts.bias.defined()) {
    TE_CHECK_HINT(opts.bias.numel() == s.Q && is_high_precision(opts.bias.dtype()) && opts.bias.device() == dev,
                  "GEMM " << gemm_role_name(role) << ": bias " << opts.bias.str() << " should be [" << s.Q
                          << "] f32/bf16/f16 on " << dev.str(),
                  "bias has one value per output column");
  }
  if (a.is_quantized() && b.is_quantized()) {
    // Hopper has no 128x128 × 128x128 kernel; rejected on every device so CPU and GPU accept the same calls.
    TE_CHECK_HINT(!(a.quantized().format == QuantFormat::fp8_block_2d &&
                    b.quantized().format == QuantFormat::fp8_block_2d),
                  "GEMM " << gemm_role_name(role) << ": fp8 block 2D × 2D (" << a.str() << ", " << b.str()
                          << ") is not supported",
                  "quantize activations and gradients with 1x128 (fp8_block_1d) scales; only weights use 2D");
  }
  if (opts.residual.defined()) {
    TE_CHECK_HINT(opts.residual.shape() == out.shape() && is_high_precision(opts.residual.dtype()) &&
                      opts.residual.device() == dev,
                  "GEMM " << gemm_role_name(role) << ": residual " << opts.residual.str()
                          << " should be shaped like out " << out.str() << ", f32/bf16/f16",
                  "pass the tensor the GEMM's output is added to");
    TE_CHECK_HINT(!opts.accumulate, "GEMM " << gemm_role_name(role) << ": a residual with accumulate",
                  "add the residual or accumulate into out, not both");
  }
  ctx.mutable_stats().calls++;
  if (s.P == 0 || s.Q == 0) return;
  bool residual_added = false;
  if (dev.is_cpu()) {
    detail::gemm_cpu(a, b, role, out, opts, ctx);
  } else {
#if TE_WITH_CUDA
    residual_added = detail::gemm_cuda(a, b, role, out, opts, ctx, stream);
#else
    TE_THROW("GEMM on " << dev.str() << " in a build without CUDA", "use device: cpu");
#endif
  }
  if (opts.residual.defined() && !residual_added) add(opts.residual, out, Tensor(), out, stream);
}

Tensor gemm(const GemmOperand& a, const GemmOperand& b, GemmRole role, const GemmOptions& opts, GemmContext& ctx,
            const Stream& stream) {
  Tensor out;
  gemm(a, b, role, out, opts, ctx, stream);
  return out;
}

#if !TE_WITH_CUDA
struct GemmContext::Impl {};
GemmContext::GemmContext(Device device, int64_t workspace_bytes) : device_(device), workspace_bytes_(workspace_bytes) {
  TE_CHECK_HINT(device.is_cpu(), "GemmContext for " << device.str() << " in a build without CUDA", "use device: cpu");
}
GemmContext::~GemmContext() = default;
GemmContext::Impl& GemmContext::impl() {
  if (!impl_) impl_ = std::make_unique<Impl>();
  return *impl_;
}
#endif

}  // namespace te
