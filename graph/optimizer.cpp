// Optimizer entry points: argument checks, per-step scalars, dispatch to the CPU reference or the CUDA kernel.
#include "graph/optimizer.h"

#include <cmath>

#include "engine/error.h"
#include "te_config.h"

namespace te {

namespace {
void check_tensors(const char* who, const Tensor& param, const Tensor& grad, std::initializer_list<const Tensor*> state) {
  TE_CHECK_HINT(param.defined() && param.dtype() == DType::f32 && param.is_contiguous(),
                who << ": the parameter must be contiguous f32 master weights, got "
                    << (param.defined() ? param.str() : std::string("undefined")),
                "keep fp32 master weights and refresh low-precision copies after the step");
  TE_CHECK_HINT(grad.defined() && grad.shape() == param.shape() && is_high_precision(grad.dtype()) &&
                    grad.is_contiguous() && grad.device() == param.device(),
                who << ": gradient " << (grad.defined() ? grad.str() : std::string("undefined"))
                    << " does not match parameter " << param.str(),
                "pass a contiguous f32/bf16/f16 gradient of the parameter's shape on its device");
  for (const Tensor* s : state)
    TE_CHECK_HINT(s->defined() && s->dtype() == DType::f32 && s->shape() == param.shape() && s->is_contiguous() &&
                      s->device() == param.device(),
                  who << ": state tensor " << (s->defined() ? s->str() : std::string("undefined"))
                      << " does not match parameter " << param.str(),
                  "allocate state as Tensor::zeros(param.shape(), DType::f32, param.device())");
}
}  // namespace

void sgd_momentum_step(Tensor& param, const Tensor& grad, Tensor& momentum_buf, const SgdConfig& c,
                       const Stream& stream) {
  check_tensors("sgd_momentum_step", param, grad, {&momentum_buf});
  const SgdScalars s{static_cast<float>(c.lr), static_cast<float>(c.momentum), static_cast<float>(c.weight_decay)};
  float* p = param.data<float>();
  float* buf = momentum_buf.data<float>();
  if (param.device().is_cuda()) {
#if TE_WITH_CUDA
    detail::sgd_momentum_cuda(p, grad.data_ptr(), grad.dtype(), buf, param.numel(), s, stream);
#endif
    return;
  }
  (void)stream;
  detail::sgd_momentum_cpu(p, grad.data_ptr(), grad.dtype(), buf, param.numel(), s);
}

void adamw_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, int64_t step,
                const AdamWConfig& c, const Stream& stream) {
  check_tensors("adamw_step", param, grad, {&exp_avg, &exp_avg_sq});
  TE_CHECK_HINT(step >= 1, "adamw_step: step " << step << " must count from 1", "pass the 1-based step number");
  auto f = [](double x) { return static_cast<float>(x); };
  AdamWScalars s;
  s.lr = f(c.lr);
  s.beta1 = f(c.beta1);
  s.one_minus_beta1 = f(1.0 - c.beta1);
  s.beta2 = f(c.beta2);
  s.one_minus_beta2 = f(1.0 - c.beta2);
  s.eps = f(c.eps);
  s.decay = f(1.0 - c.lr * c.weight_decay);
  s.bc1 = f(1.0 - std::pow(c.beta1, static_cast<double>(step)));
  s.bc2 = f(1.0 - std::pow(c.beta2, static_cast<double>(step)));
  float* p = param.data<float>();
  float* m = exp_avg.data<float>();
  float* v = exp_avg_sq.data<float>();
  if (param.device().is_cuda()) {
#if TE_WITH_CUDA
    detail::adamw_cuda(p, grad.data_ptr(), grad.dtype(), m, v, param.numel(), s, stream);
#endif
    return;
  }
  (void)stream;
  detail::adamw_cpu(p, grad.data_ptr(), grad.dtype(), m, v, param.numel(), s);
}

}  // namespace te
