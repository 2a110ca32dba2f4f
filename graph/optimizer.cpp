// Optimizer entry points: argument checks, per-step scalars, dispatch to the CPU reference or the CUDA kernel.
#include "graph/optimizer.h"

#include <cmath>
#include <vector>

#include "engine/error.h"
#include "te_config.h"

namespace te {

namespace {
std::string describe(const Tensor& t) { return t.defined() ? t.str() : std::string("undefined"); }

void check_slot(const char* who, const ParamSlot& s, bool adamw) {
  const Tensor& param = s.master;
  TE_CHECK_HINT(param.defined() && param.dtype() == DType::f32 && param.is_contiguous(),
                who << ": the parameter must be contiguous f32 master weights, got " << describe(param),
                "keep fp32 master weights and refresh low-precision copies after the step");
  const Tensor& grad = s.grad;
  TE_CHECK_HINT(grad.defined() && grad.shape() == param.shape() && is_high_precision(grad.dtype()) &&
                    grad.is_contiguous() && grad.device() == param.device(),
                who << ": gradient " << describe(grad) << " does not match parameter " << param.str(),
                "pass a contiguous f32/bf16/f16 gradient of the parameter's shape on its device");
  std::vector<const Tensor*> state{&s.state1};
  if (adamw) state.push_back(&s.state2);
  for (const Tensor* t : state)
    TE_CHECK_HINT(t->defined() && t->dtype() == DType::f32 && t->shape() == param.shape() && t->is_contiguous() &&
                      t->device() == param.device(),
                  who << ": state tensor " << describe(*t) << " does not match parameter " << param.str(),
                  "allocate state as Tensor::zeros(param.shape(), DType::f32, param.device())");
  if (s.value.defined())
    TE_CHECK_HINT(is_high_precision(s.value.dtype()) && s.value.shape() == param.shape() && s.value.is_contiguous() &&
                      s.value.device() == param.device(),
                  who << ": model-dtype copy " << s.value.str() << " does not match parameter " << param.str(),
                  "pass a contiguous f32/bf16/f16 tensor of the parameter's shape on its device, or none");
}

void run(const char* who, std::span<const ParamSlot> slots, const OptimizerStep& step, const Stream& stream) {
  const bool adamw = step.kind == OptimizerKind::adamw;
  std::vector<detail::SlotPtrs> ptrs;
  ptrs.reserve(slots.size());
  for (const ParamSlot& s : slots) {
    check_slot(who, s, adamw);
    TE_CHECK_HINT(
        s.master.device() == slots.front().master.device(),
        who << ": parameters on " << slots.front().master.device().str() << " and " << s.master.device().str(),
        "step the parameters of each device separately");
    ptrs.push_back({s.master.data<float>(), s.grad.data_ptr(), s.state1.data<float>(),
                    adamw ? s.state2.data<float>() : nullptr, s.value.defined() ? s.value.data_ptr() : nullptr,
                    s.master.numel(), s.grad.dtype(), s.value.defined() ? s.value.dtype() : DType::f32});
  }
  if (ptrs.empty()) return;
  if (slots.front().master.device().is_cuda()) {
#if TE_WITH_CUDA
    detail::optimizer_cuda(ptrs, step, stream);
#endif
    return;
  }
  (void)stream;
  detail::optimizer_cpu(ptrs, step);
}

// A step with host scalars: they are copied where the kernel reads them (a small device buffer on a GPU, ordered on
// `stream` like the launch).
void run_with_scalars(const char* who, std::span<const ParamSlot> slots, OptimizerKind kind, const OptimizerScalars& s,
                      const Stream& stream) {
  if (slots.empty()) return;
  const Device device = slots.front().master.device();
  Tensor host = Tensor::borrow(const_cast<OptimizerScalars*>(&s), {int64_t{sizeof s}}, DType::u8, Device::cpu());
  const Tensor where = device.is_cuda() ? host.to(device, stream) : host;
  run(who, slots, {kind, static_cast<const OptimizerScalars*>(where.data_ptr()), nullptr, true}, stream);
}
}  // namespace

OptimizerScalars sgd_scalars(const SgdConfig& c) {
  OptimizerScalars s{};
  s.sgd = {static_cast<float>(c.lr), static_cast<float>(c.momentum), static_cast<float>(c.weight_decay)};
  return s;
}

OptimizerScalars adamw_scalars(int64_t step, const AdamWConfig& c) {
  TE_CHECK_HINT(step >= 1, "adamw_step: step " << step << " must count from 1", "pass the 1-based step number");
  auto f = [](double x) { return static_cast<float>(x); };
  OptimizerScalars s{};
  AdamWScalars& a = s.adamw;
  a.lr = f(c.lr);
  a.beta1 = f(c.beta1);
  a.one_minus_beta1 = f(1.0 - c.beta1);
  a.beta2 = f(c.beta2);
  a.one_minus_beta2 = f(1.0 - c.beta2);
  a.eps = f(c.eps);
  a.decay = f(1.0 - c.lr * c.weight_decay);
  a.bc1 = f(1.0 - std::pow(c.beta1, static_cast<double>(step)));
  a.bc2 = f(1.0 - std::pow(c.beta2, static_cast<double>(step)));
  return s;
}

void optimizer_step(std::span<const ParamSlot> slots, const OptimizerStep& step, const Stream& stream) {
  TE_CHECK(step.scalars != nullptr, "optimizer_step: no scalars");
  run("optimizer_step", slots, step, stream);
}

void sgd_momentum_step(std::span<const ParamSlot> slots, const SgdConfig& c, const Stream& stream) {
  run_with_scalars("sgd_momentum_step", slots, OptimizerKind::sgd_momentum, sgd_scalars(c), stream);
}

void adamw_step(std::span<const ParamSlot> slots, int64_t step, const AdamWConfig& c, const Stream& stream) {
  run_with_scalars("adamw_step", slots, OptimizerKind::adamw, adamw_scalars(step, c), stream);
}

void sgd_momentum_step(Tensor& param, const Tensor& grad, Tensor& momentum_buf, const SgdConfig& c,
                       const Stream& stream) {
  const ParamSlot slot{param, grad, momentum_buf, Tensor(), Tensor()};
  sgd_momentum_step(std::span<const ParamSlot>(&slot, 1), c, stream);
}

void adamw_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, int64_t step,
                const AdamWConfig& c, const Stream& stream) {
  const ParamSlot slot{param, grad, exp_avg, exp_avg_sq, Tensor()};
  adamw_step(std::span<const ParamSlot>(&slot, 1), step, c, stream);
}

}  // namespace te
