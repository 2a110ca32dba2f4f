#include "ops/quant/delayed_scaling.h"

#include "engine/error.h"

namespace te {

DelayedScaling DelayedScaling::fresh(int history_len, Device device, const Stream& stream) {
  DelayedScaling s;
  s.scale = Tensor::zeros({1}, DType::f32, device, stream);
  s.scale.fill(1.0, stream);
  s.amax_history = Tensor::zeros({history_len}, DType::f32, device, stream);
  s.step_amax = Tensor::zeros({1}, DType::f32, device, stream);
  s.count = Tensor::zeros({1}, DType::i64, device, stream);
  return s;
}

DelayedScaling DelayedScaling::copy_to(Device device, const Stream& stream) const {
  return {scale.to(device, stream), amax_history.to(device, stream), step_amax.to(device, stream),
          count.to(device, stream)};  // Tensor::to always copies
}

void DelayedScaling::check(int history_len) const {
  const Shape one{1}, len{history_len};
  auto is = [](const Tensor& t, DType d, const Shape& s) { return t.defined() && t.dtype() == d && t.shape() == s; };
  auto str = [](const Tensor& t) { return t.defined() ? t.str() : std::string("undefined"); };
  TE_CHECK(is(scale, DType::f32, one) && is(amax_history, DType::f32, len) && is(step_amax, DType::f32, one) &&
               is(count, DType::i64, one),
           "delayed-scaling state: expected scale f32 [1], amax_history f32 " << shape_str(len)
               << ", step_amax f32 [1], count i64 [1]; got " << str(scale) << ", " << str(amax_history) << ", "
               << str(step_amax) << ", " << str(count));
}

}  // namespace te
