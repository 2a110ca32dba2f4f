// Public entry points of the activations: checks, contiguous inputs, then CPU or CUDA.
#include "ops/act/act.h"

#include "engine/error.h"
#include "ops/act/act_impl.h"
#include "te_config.h"

namespace te {
namespace {

void check_hp(const Tensor& t, const char* op, const char* what) {
  TE_CHECK_HINT(t.defined() && is_high_precision(t.dtype()) && t.dim() >= 1,
                op << ": " << what << " must be a defined f32/bf16/f16 tensor of at least 1 dim; got " << t.str(),
                "cast it with te::cast first");
}
void check_device(const Tensor& x, const Stream& stream, const char* op) {
  TE_CHECK(!stream.device().is_cuda() || x.device() == stream.device(),
           op << ": " << x.str() << " is not on the stream's device " << stream.device().str());
#if !TE_WITH_CUDA
  TE_CHECK_HINT(x.device().is_cpu(), op << ": this build has no CUDA; got " << x.str(),
                "rebuild with -Dcuda=enabled or use cpu tensors");
#endif
}
Shape with_last(Shape s, int64_t last) {
  s.back() = last;
  return s;
}

}  // namespace

std::string_view act_kind_name(ActKind k) {
  switch (k) {
    case ActKind::gelu: return "gelu";
    case ActKind::swiglu: return "swiglu";
    case ActKind::relu: return "relu";
  }
  return "?";
}

std::optional<ActKind> act_kind_from_name(std::string_view n) {
  if (n == "gelu" || n == "gelu_tanh") return ActKind::gelu;
  if (n == "swiglu") return ActKind::swiglu;
  if (n == "relu") return ActKind::relu;
  return std::nullopt;
}

int64_t act_out_cols(ActKind k, int64_t in_cols) {
  if (k != ActKind::swiglu) return in_cols;
  TE_CHECK_HINT(in_cols % 2 == 0, "swiglu: the input's last dim must be even (2F); got " << in_cols,
                "the FC1 output of a SwiGLU MLP has 2F columns");
  return in_cols / 2;
}

void act_forward(ActKind kind, const Tensor& x, Tensor& out, const Stream& stream) {
  check_hp(x, "act_forward", "x");
  check_device(x, stream, "act_forward");
  const int64_t F = act_out_cols(kind, x.size(-1));
  const Shape oshape = with_last(x.shape(), F);
  check_hp(out, "act_forward", "out");
  TE_CHECK_HINT(out.shape() == oshape && out.is_contiguous() && out.device() == x.device(),
                act_kind_name(kind) << ": out must be a contiguous " << shape_str(oshape) << " tensor on "
                                    << x.device().str() << "; got " << out.str(),
                "allocate it with Tensor::empty");
  const int64_t M = F ? out.numel() / F : 0;
  if (M == 0 || F == 0) return;
  const Tensor xc = x.contiguous(stream);
  if (x.device().is_cuda()) {
#if TE_WITH_CUDA
    cuda::act_forward(kind, xc.data_ptr(), xc.dtype(), out.data_ptr(), out.dtype(), M, F, stream);
#endif
  } else {
    cpu::act_forward(kind, xc.data_ptr(), xc.dtype(), out.data_ptr(), out.dtype(), M, F);
  }
}

Tensor act_forward(ActKind kind, const Tensor& x, DType out_dtype, const Stream& stream) {
  check_hp(x, "act_forward", "x");
  Tensor out = Tensor::empty(with_last(x.shape(), act_out_cols(kind, x.size(-1))), out_dtype, x.device(), stream);
  act_forward(kind, x, out, stream);
  return out;
}

void act_backward(ActKind kind, const Tensor& dy, const Tensor& x, Tensor& dx, const Stream& stream) {
  check_hp(x, "act_backward", "x");
  check_hp(dy, "act_backward", "dy");
  check_device(x, stream, "act_backward");
  const int64_t F = act_out_cols(kind, x.size(-1));
  const Shape oshape = with_last(x.shape(), F);
  TE_CHECK_HINT(dy.shape() == oshape && dy.dtype() == x.dtype() && dy.device() == x.device(),
                act_kind_name(kind) << " backward: dy must be " << shape_str(oshape) << " "
                                    << dtype_name(x.dtype()) << " on " << x.device().str() << "; got " << dy.str(),
                "cast dy to x's dtype");
  check_hp(dx, "act_backward", "dx");
  TE_CHECK_HINT(dx.shape() == x.shape() && dx.is_contiguous() && dx.device() == x.device(),
                act_kind_name(kind) << " backward: dx must be a contiguous " << shape_str(x.shape())
                                    << " tensor on " << x.device().str() << "; got " << dx.str(),
                "allocate it with Tensor::empty");
  TE_CHECK_HINT(kind != ActKind::swiglu || dx.data_ptr() != dy.data_ptr(),
                "swiglu backward: dx [.., 2F] cannot overwrite dy [.., F]", "give dx its own buffer");
  const int64_t M = F ? dy.numel() / F : 0;
  if (M == 0 || F == 0) return;
  const Tensor xc = x.contiguous(stream), dyc = dy.contiguous(stream);
  if (x.device().is_cuda()) {
#if TE_WITH_CUDA
    cuda::act_backward(kind, dyc.data_ptr(), xc.data_ptr(), xc.dtype(), dx.data_ptr(), dx.dtype(), M, F, stream);
#endif
  } else {
    cpu::act_backward(kind, dyc.data_ptr(), xc.data_ptr(), xc.dtype(), dx.data_ptr(), dx.dtype(), M, F);
  }
}

Tensor act_backward(ActKind kind, const Tensor& dy, const Tensor& x, const Stream& stream) {
  check_hp(x, "act_backward", "x");
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device(), stream);
  act_backward(kind, dy, x, dx, stream);
  return dx;
}

void bias_grad(const Tensor& dy, Tensor& dbias, const Stream& stream) {
  check_hp(dy, "bias_grad", "dy");
  check_device(dy, stream, "bias_grad");
  const int64_t F = dy.size(-1), M = F ? dy.numel() / F : 0;
  TE_CHECK_HINT(dbias.defined() && is_high_precision(dbias.dtype()) && dbias.dim() == 1 && dbias.size(0) == F &&
                    dbias.is_contiguous() && dbias.device() == dy.device(),
                "bias_grad: dbias must be a contiguous [" << F << "] f32/bf16/f16 tensor on " << dy.device().str()
                                                          << "; got " << dbias.str(),
                "allocate it with Tensor::empty");
  if (F == 0) return;
  if (M == 0) {
    dbias.fill(0.0, stream);
    return;
  }
  const Tensor dyc = dy.contiguous(stream);
  if (dy.device().is_cuda()) {
#if TE_WITH_CUDA
    cuda::bias_grad(dyc.data_ptr(), dyc.dtype(), dbias.data_ptr(), dbias.dtype(), M, F, stream);
#endif
  } else {
    cpu::bias_grad(dyc.data_ptr(), dyc.dtype(), dbias.data_ptr(), dbias.dtype(), M, F);
  }
}

Tensor bias_grad(const Tensor& dy, DType dtype, const Stream& stream) {
  check_hp(dy, "bias_grad", "dy");
  Tensor db = Tensor::empty({dy.size(-1)}, dtype, dy.device(), stream);
  bias_grad(dy, db, stream);
  return db;
}

}  // namespace te
