// Public entry points of the elementwise ops: argument checks, contiguous() for strided views, then the CPU
// reference or the CUDA launcher.
#include "ops/elementwise/elementwise.h"

#include "engine/error.h"
#include "ops/elementwise/elementwise_checks.h"
#include "ops/elementwise/elementwise_impl.h"
#include "te_config.h"

namespace te {
using detail::check_hp;
using detail::check_out;
using detail::on_cuda;
#if !TE_WITH_CUDA
using detail::no_cuda;
#endif

void add(const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& out, const Stream& stream) {
  check_hp(a, "add", "a");
  check_hp(b, "add", "b");
  TE_CHECK(a.shape() == b.shape() && a.dim() >= 1,
           "add: a " << a.str() << " and b " << b.str() << " must have the same shape (at least 1-D)");
  TE_CHECK(b.device() == a.device(), "add: a and b are on different devices: " << a.str() << ", " << b.str());
  const int64_t cols = a.size(-1), rows = cols ? a.numel() / cols : 0;
  if (bias.defined()) {
    check_hp(bias, "add", "bias");
    TE_CHECK(bias.dim() == 1 && bias.size(0) == cols && bias.device() == a.device(),
             "add: bias must be [" << cols << "] on " << a.device().str() << "; got " << bias.str());
  }
  check_out(out, a.shape(), a, "add");
  check_hp(out, "add", "out");
  const Tensor ac = a.contiguous(stream), bc = b.contiguous(stream);
  const Tensor biasc = bias.defined() ? bias.contiguous(stream) : Tensor();
  const void* bp = biasc.defined() ? biasc.data_ptr() : nullptr;
  const DType bt = biasc.defined() ? biasc.dtype() : DType::f32;
  if (on_cuda(a, stream)) {
#if TE_WITH_CUDA
    cuda::add(ac.data_ptr(), ac.dtype(), bc.data_ptr(), bc.dtype(), bp, bt, out.data_ptr(), out.dtype(), rows, cols,
              stream);
#else
    no_cuda("add");
#endif
  } else {
    cpu::add(ac.data_ptr(), ac.dtype(), bc.data_ptr(), bc.dtype(), bp, bt, out.data_ptr(), out.dtype(), rows, cols);
  }
}

Tensor add(const Tensor& a, const Tensor& b, const Tensor& bias, const Stream& stream) {
  check_hp(a, "add", "a");
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device(), stream);
  add(a, b, bias, out, stream);
  return out;
}

namespace {
bool castable(DType t) {
  return is_high_precision(t) || t == DType::fp8_e4m3 || t == DType::fp8_e5m2;
}
}  // namespace

void cast(const Tensor& x, Tensor& out, const Stream& stream) {
  TE_CHECK_HINT(x.defined() && castable(x.dtype()),
                "cast: x must be f32/bf16/f16/fp8; got " << (x.defined() ? x.str() : std::string("undefined")),
                "quantized formats with scales go through ops/quant");
  check_out(out, x.shape(), x, "cast");
  TE_CHECK(castable(out.dtype()), "cast: out dtype " << dtype_name(out.dtype()) << " is not f32/bf16/f16/fp8");
  const Tensor xc = x.contiguous(stream);
  if (on_cuda(x, stream)) {
#if TE_WITH_CUDA
    cuda::cast(xc.data_ptr(), xc.dtype(), out.data_ptr(), out.dtype(), xc.numel(), stream);
#else
    no_cuda("cast");
#endif
  } else {
    cpu::cast(xc.data_ptr(), xc.dtype(), out.data_ptr(), out.dtype(), xc.numel());
  }
}

Tensor cast(const Tensor& x, DType dtype, const Stream& stream) {
  TE_CHECK(x.defined(), "cast: x is undefined");
  Tensor out = Tensor::empty(x.shape(), dtype, x.device(), stream);
  cast(x, out, stream);
  return out;
}

void transpose_2d(const Tensor& x, Tensor& out, const Stream& stream) {
  TE_CHECK(x.defined() && x.dim() == 2, "transpose_2d: x must be 2-D; got "
                                            << (x.defined() ? x.str() : std::string("undefined")));
  const int bits = dtype_bits(x.dtype());
  TE_CHECK_HINT(bits % 8 == 0, "transpose_2d: " << dtype_name(x.dtype()) << " packs several elements per byte",
                "transpose fp4 data through ops/quant");
  check_out(out, {x.size(1), x.size(0)}, x, "transpose_2d");
  TE_CHECK(out.dtype() == x.dtype(), "transpose_2d: out dtype " << dtype_name(out.dtype()) << " differs from x "
                                                                << dtype_name(x.dtype()));
  const Tensor xc = x.contiguous(stream);
  if (on_cuda(x, stream)) {
#if TE_WITH_CUDA
    cuda::transpose_2d(xc.data_ptr(), out.data_ptr(), bits / 8, x.size(0), x.size(1), stream);
#else
    no_cuda("transpose_2d");
#endif
  } else {
    cpu::transpose_2d(xc.data_ptr(), out.data_ptr(), bits / 8, x.size(0), x.size(1));
  }
}

Tensor transpose_2d(const Tensor& x, const Stream& stream) {
  TE_CHECK(x.defined() && x.dim() == 2, "transpose_2d: x must be 2-D");
  Tensor out = Tensor::empty({x.size(1), x.size(0)}, x.dtype(), x.device(), stream);
  transpose_2d(x, out, stream);
  return out;
}

void scale_tensor(const Tensor& x, float alpha, Tensor& out, const Stream& stream) {
  check_hp(x, "scale_tensor", "x");
  check_out(out, x.shape(), x, "scale_tensor");
  check_hp(out, "scale_tensor", "out");
  const Tensor xc = x.contiguous(stream);
  if (on_cuda(x, stream)) {
#if TE_WITH_CUDA
    cuda::scale(xc.data_ptr(), xc.dtype(), alpha, out.data_ptr(), out.dtype(), xc.numel(), stream);
#else
    no_cuda("scale_tensor");
#endif
  } else {
    cpu::scale(xc.data_ptr(), xc.dtype(), alpha, out.data_ptr(), out.dtype(), xc.numel());
  }
}

Tensor scale_tensor(const Tensor& x, float alpha, const Stream& stream) {
  check_hp(x, "scale_tensor", "x");
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device(), stream);
  scale_tensor(x, alpha, out, stream);
  return out;
}

Tensor sum_squares(const Tensor& x, const Stream& stream) {
  check_hp(x, "sum_squares", "x");
  const Tensor xc = x.contiguous(stream);
  Tensor out = Tensor::empty({1}, DType::f32, x.device(), stream);
  if (on_cuda(x, stream)) {
#if TE_WITH_CUDA
    // Scratch from the stream-ordered allocator (i64 storage holding doubles: the dtype table has no f64).
    Tensor partial = Tensor::empty({kSumSquaresPartials}, DType::i64, x.device(), stream);
    cuda::sum_squares(xc.data_ptr(), xc.dtype(), xc.numel(), static_cast<double*>(partial.data_ptr()),
                      out.data<float>(), stream);
#else
    no_cuda("sum_squares");
#endif
  } else {
    cpu::sum_squares(xc.data_ptr(), xc.dtype(), xc.numel(), out.data<float>());
  }
  return out;
}

}  // namespace te
