// squared_error: argument checks and the CPU reference.
#include "ops/elementwise/squared_error.h"

#include "engine/element.h"
#include "engine/error.h"
#include "ops/elementwise/elementwise_checks.h"
#include "te_config.h"

namespace te {
namespace detail {

// Index order and the fp32 steps of the op-by-op chain; the square of an f32 is exact in double.
void squared_error_cpu(const SquaredErrorArgs& a, float* sum) {
  double acc = 0;
  for (int64_t i = 0; i < a.n; ++i) {
    const float d = load_f32(a.out, a.out_dtype, i) - load_f32(a.target, a.target_dtype, i);
    store_f32(a.grad, a.grad_dtype, i, a.grad_scale * d);
    acc += static_cast<double>(d) * d;
  }
  *sum = static_cast<float>(acc);
}

}  // namespace detail

SquaredError squared_error(const Tensor& out, const Tensor& target, float grad_scale, DType grad_dtype,
                           const Stream& stream) {
  detail::check_hp(out, "squared_error", "out");
  detail::check_hp(target, "squared_error", "target");
  TE_CHECK_HINT(
      out.shape() == target.shape() && out.device() == target.device(),
      "squared_error: out " << out.str() << " and target " << target.str() << " must have the same shape on one device",
      "the target is [tokens, hidden] like the model output (this rank's tokens under SP)");
  TE_CHECK_HINT(is_high_precision(grad_dtype),
                "squared_error: grad dtype " << dtype_name(grad_dtype) << " is not f32/bf16/f16",
                "use the model dtype");
  const bool cuda = detail::on_cuda(out, stream);
  const Tensor oc = out.contiguous(stream), tc = target.contiguous(stream);
  SquaredError r;
  r.grad = Tensor::empty(out.shape(), grad_dtype, out.device(), stream);
  r.sum = Tensor::empty({1}, DType::f32, out.device(), stream);
  const detail::SquaredErrorArgs args{oc.data_ptr(),     oc.dtype(), tc.data_ptr(), tc.dtype(),
                                      r.grad.data_ptr(), grad_dtype, grad_scale,    oc.numel()};
  if (cuda) {
#if TE_WITH_CUDA
    detail::squared_error_cuda(args, r.sum.data<float>(), out.device(), stream);
#else
    detail::no_cuda("squared_error");
#endif
  } else {
    detail::squared_error_cpu(args, r.sum.data<float>());
  }
  return r;
}

void loss_and_skip(const Tensor& sum, double divisor, Tensor& loss, Tensor& skip, const Stream& stream) {
  auto check = [&](const Tensor& t, DType dtype, const char* what) {
    TE_CHECK_HINT(t.defined() && t.numel() == 1 && t.dtype() == dtype && t.device() == sum.device(),
                  "loss_and_skip: " << what << " " << (t.defined() ? t.str() : std::string("undefined")),
                  "pass a one-element " << dtype_name(dtype) << " tensor on " << sum.device().str());
  };
  check(sum, DType::f32, "sum");
  check(loss, DType::f32, "loss");
  check(skip, DType::i32, "skip");
  if (detail::on_cuda(sum, stream)) {
#if TE_WITH_CUDA
    detail::loss_and_skip_cuda(sum.data<float>(), divisor, loss.data<float>(), skip.data<int32_t>(), stream);
#else
    detail::no_cuda("loss_and_skip");
#endif
  } else {
    detail::loss_and_skip_of(sum.data<float>(), divisor, loss.data<float>(), skip.data<int32_t>());
  }
}

}  // namespace te
