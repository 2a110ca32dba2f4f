#include "models/step_control.h"

#include <cstring>

#include "ops/elementwise/squared_error.h"

namespace te {

namespace {
constexpr int64_t kScalarBytes = sizeof(OptimizerScalars);
static_assert(kScalarBytes % alignof(float) == 0);
}  // namespace

StepControl::StepControl(Device device, const Stream& stream) : host_(device.is_cuda()) {
  Tensor all = host_.view({kScalarBytes + int64_t{sizeof(float)}}, DType::u8);
  std::memset(all.data_ptr(), 0, static_cast<size_t>(all.nbytes()));
  host_scalars_ = Tensor::borrow(all.data_ptr(), {kScalarBytes}, DType::u8, Device::cpu());
  host_loss_ = reinterpret_cast<float*>(all.data<uint8_t>() + kScalarBytes);
  scalars_ = Tensor::zeros({kScalarBytes}, DType::u8, device, stream);
  loss_ = Tensor::zeros({1}, DType::f32, device, stream);
  skip_ = Tensor::zeros({1}, DType::i32, device, stream);
}

void StepControl::set_scalars(const OptimizerSpec& o, int64_t step, double lr) {
  // The spec's hyper-parameters pass through f32 first, as the optimizer has always received them.
  auto f = [](double x) -> double { return static_cast<float>(x); };
  const OptimizerScalars s = o.type == OptimizerType::adamw
                                 ? adamw_scalars(step, {f(lr), f(o.beta1), f(o.beta2), f(o.eps), f(o.weight_decay)})
                                 : sgd_scalars({f(lr), f(o.momentum), f(o.weight_decay)});
  std::memcpy(host_scalars_.data_ptr(), &s, sizeof s);
}

void StepControl::upload(const Stream& stream) { copy_enqueued(scalars_, host_scalars_, stream); }

void StepControl::gate(const Tensor& sum, double divisor, const Stream& stream) {
  loss_and_skip(sum, divisor, loss_, skip_, stream);
  Tensor host_loss = Tensor::borrow(host_loss_, {1}, DType::f32, Device::cpu());
  copy_enqueued(host_loss, loss_, stream);
}

}  // namespace te
