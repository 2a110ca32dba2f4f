// Public entry points of LayerNorm/RMSNorm: shape/dtype checks, contiguous rows, then CPU or CUDA.
#include "ops/norm/norm.h"

#include "engine/error.h"
#include "ops/norm/norm_impl.h"
#include "te_config.h"

namespace te {
namespace {

void check_hp(const Tensor& t, const char* what) {
  TE_CHECK_HINT(t.defined() && is_high_precision(t.dtype()),
                "norm: " << what << " must be a defined f32/bf16/f16 tensor; got " << t.str(),
                "cast it with te::cast first");
}

void check_vec(const Tensor& t, int64_t n, DType dtype, Device dev, const char* what) {
  TE_CHECK_HINT(
      t.defined() && t.dim() == 1 && t.size(0) == n && t.dtype() == dtype && t.device() == dev && t.is_contiguous(),
      "norm: " << what << " must be a contiguous [" << n << "] " << dtype_name(dtype) << " tensor on " << dev.str()
               << "; got " << t.str(),
      "allocate it with Tensor::empty");
}

void check_device(const Tensor& x, const Stream& stream) {
  TE_CHECK(!stream.device().is_cuda() || x.device() == stream.device(),
           "norm: x " << x.str() << " is not on the stream's device " << stream.device().str());
#if !TE_WITH_CUDA
  TE_CHECK_HINT(x.device().is_cpu(), "norm: this build has no CUDA; got " << x.str(),
                "rebuild with -Dcuda=enabled or use cpu tensors");
#endif
}

}  // namespace

std::string_view norm_kind_name(NormKind k) { return k == NormKind::layernorm ? "layernorm" : "rmsnorm"; }

std::optional<NormKind> norm_kind_from_name(std::string_view n) {
  if (n == "layernorm" || n == "ln" || n == "LayerNorm") return NormKind::layernorm;
  if (n == "rmsnorm" || n == "rms" || n == "RMSNorm") return NormKind::rmsnorm;
  return std::nullopt;
}

void norm_forward(NormKind kind, const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, Tensor& out,
                  Tensor& mean, Tensor& rstd, const Stream& stream) {
  check_hp(x, "x");
  TE_CHECK(x.dim() >= 1 && x.size(-1) > 0, "norm: x must have a non-empty last dim; got " << x.str());
  check_device(x, stream);
  const int64_t H = x.size(-1), M = x.numel() / H;
  const bool ln = kind == NormKind::layernorm;
  check_hp(gamma, "gamma");
  check_vec(gamma, H, gamma.dtype(), x.device(), "gamma");
  if (beta.defined()) {
    TE_CHECK_HINT(ln, "norm: rmsnorm has no beta; got " << beta.str(), "pass Tensor() as beta");
    check_vec(beta, H, gamma.dtype(), x.device(), "beta (gamma's dtype)");
  }
  TE_CHECK_HINT(eps >= 0.f, "norm: eps must be >= 0; got " << eps, "LayerNorm commonly uses 1e-5");
  check_hp(out, "out");
  TE_CHECK_HINT(out.shape() == x.shape() && out.is_contiguous() && out.device() == x.device(),
                "norm: out must be a contiguous " << shape_str(x.shape()) << " tensor on " << x.device().str()
                                                  << "; got " << out.str(),
                "allocate it with Tensor::empty");
  check_vec(rstd, M, DType::f32, x.device(), "rstd");
  if (ln) check_vec(mean, M, DType::f32, x.device(), "mean");
  if (M == 0) return;
  const Tensor xc = x.contiguous(stream);
  const NormFwdArgs a{kind,           xc.data_ptr(), xc.dtype(),  gamma.data_ptr(),
                      beta.defined() ? beta.data_ptr() : nullptr, gamma.dtype(), out.data_ptr(), out.dtype(),
                      ln ? mean.data<float>() : nullptr, rstd.data<float>(), M, H, eps};
  if (x.device().is_cuda()) {
#if TE_WITH_CUDA
    cuda::norm_forward(a, stream);
#endif
  } else {
    cpu::norm_forward(a);
  }
}

NormForward norm_forward(NormKind kind, const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                         DType out_dtype, const Stream& stream) {
  check_hp(x, "x");
  TE_CHECK(x.dim() >= 1 && x.size(-1) > 0, "norm: x must have a non-empty last dim; got " << x.str());
  const int64_t M = x.numel() / x.size(-1);
  NormForward r;
  r.out = Tensor::empty(x.shape(), out_dtype, x.device(), stream);
  r.rstd = Tensor::empty({M}, DType::f32, x.device(), stream);
  if (kind == NormKind::layernorm) r.mean = Tensor::empty({M}, DType::f32, x.device(), stream);
  norm_forward(kind, x, gamma, beta, eps, r.out, r.mean, r.rstd, stream);
  return r;
}

void norm_backward(NormKind kind, const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                   const Tensor& gamma, Tensor& dx, Tensor& dgamma, Tensor& dbeta, const Stream& stream) {
  check_hp(x, "x");
  check_hp(dy, "dy");
  TE_CHECK(x.dim() >= 1 && x.size(-1) > 0, "norm: x must have a non-empty last dim; got " << x.str());
  check_device(x, stream);
  TE_CHECK_HINT(dy.shape() == x.shape() && dy.dtype() == x.dtype() && dy.device() == x.device(),
                "norm backward: dy " << dy.str() << " must match x " << x.str() << " in shape, dtype and device",
                "cast dy to x's dtype");
  const int64_t H = x.size(-1), M = x.numel() / H;
  const bool ln = kind == NormKind::layernorm;
  check_hp(gamma, "gamma");
  check_vec(gamma, H, gamma.dtype(), x.device(), "gamma");
  check_vec(rstd, M, DType::f32, x.device(), "rstd");
  if (ln) check_vec(mean, M, DType::f32, x.device(), "mean");
  check_hp(dx, "dx");
  TE_CHECK_HINT(dx.shape() == x.shape() && dx.is_contiguous() && dx.device() == x.device(),
                "norm backward: dx must be a contiguous " << shape_str(x.shape()) << " tensor on " << x.device().str()
                                                          << "; got " << dx.str(),
                "allocate it with Tensor::empty");
  TE_CHECK_HINT(ln || !dbeta.defined(), "norm backward: rmsnorm has no dbeta", "pass an undefined dbeta");
  const DType tdg = dgamma.defined() ? dgamma.dtype() : (dbeta.defined() ? dbeta.dtype() : DType::f32);
  if (dgamma.defined()) check_vec(dgamma, H, tdg, x.device(), "dgamma");
  if (dbeta.defined()) check_vec(dbeta, H, tdg, x.device(), "dbeta (dgamma's dtype)");
  TE_CHECK(is_high_precision(tdg), "norm backward: dgamma/dbeta must be f32/bf16/f16; got " << dtype_name(tdg));
  if (M == 0) {
    if (dgamma.defined()) dgamma.fill(0.0, stream);
    if (dbeta.defined()) dbeta.fill(0.0, stream);
    return;
  }
  const Tensor xc = x.contiguous(stream), dyc = dy.contiguous(stream);
  const NormBwdArgs a{kind,
                      dyc.data_ptr(),
                      xc.data_ptr(),
                      xc.dtype(),
                      ln ? mean.data<float>() : nullptr,
                      rstd.data<float>(),
                      gamma.data_ptr(),
                      gamma.dtype(),
                      dx.data_ptr(),
                      dx.dtype(),
                      dgamma.defined() ? dgamma.data_ptr() : nullptr,
                      dbeta.defined() ? dbeta.data_ptr() : nullptr,
                      tdg,
                      M,
                      H};
  if (x.device().is_cuda()) {
#if TE_WITH_CUDA
    cuda::norm_backward(a, stream);
#endif
  } else {
    cpu::norm_backward(a);
  }
}

NormBackward norm_backward(NormKind kind, const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                           const Tensor& gamma, const Stream& stream) {
  check_hp(x, "x");
  check_hp(gamma, "gamma");
  NormBackward r;
  r.dx = Tensor::empty(x.shape(), x.dtype(), x.device(), stream);
  r.dgamma = Tensor::empty(gamma.shape(), gamma.dtype(), x.device(), stream);
  if (kind == NormKind::layernorm) r.dbeta = Tensor::empty(gamma.shape(), gamma.dtype(), x.device(), stream);
  norm_backward(kind, dy, x, mean, rstd, gamma, r.dx, r.dgamma, r.dbeta, stream);
  return r;
}

}  // namespace te
