#include "engine/tensor.h"

#include <cstring>
#include <numeric>

#include "engine/element.h"
#include "engine/error.h"
#include "engine/philox.h"
#include "te_config.h"
#if TE_WITH_CUDA
#include "engine/cuda_check.h"
#include "engine/tensor_kernels.h"
#endif

namespace te {

int64_t shape_numel(const Shape& s) {
  // Every byte count derived from a shape must fit in int64 (nbytes multiplies by up to 64 bits per element), so a
  // shape that no memory could hold is refused here, where any tensor, request or file shape is first counted,
  // instead of wrapping to a small number that passes later checks.
  // Zero dimensions count as one here, so that the strides of an empty tensor fit too: {0, 2^62, 2^62} is refused
  // like {2^62, 2^62}. Every dimension is checked: {0, -5} is as wrong as {-5, 0}.
  int64_t n = 1;
  bool too_big = false, empty = false;
  for (int64_t d : s) {
    if (d < 0) TE_INPUT_ERROR("shape " << shape_str(s) << " has a negative dimension", "dimensions are sizes (>= 0)");
    empty = empty || d == 0;
    too_big = too_big || __builtin_mul_overflow(n, std::max<int64_t>(d, 1), &n) || n > kMaxNumel;
  }
  if (too_big)
    TE_INPUT_ERROR("shape " << shape_str(s) << " has more than 2^56 elements (zero dimensions counted as one): no "
                               "memory holds it",
                   "check the shape (a wrapped or uninitialised size?)");
  return empty ? 0 : n;
}

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (int i = static_cast<int>(s.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= std::max<int64_t>(s[i], 1);
  }
  return st;
}

namespace {
void check_shape(const Shape& shape) {
  for (int64_t d : shape) TE_CHECK(d >= 0, "negative dimension in shape " << shape_str(shape));
}

// Calls f(logical index, element offset) for every element of a strided layout, in row-major order.
template <class F>
void for_each_offset(const Shape& shape, const Shape& strides, int64_t base, F&& f) {
  const int64_t n = shape_numel(shape);
  if (n == 0) return;
  const int nd = static_cast<int>(shape.size());
  std::vector<int64_t> idx(nd, 0);
  int64_t off = base;
  for (int64_t i = 0; i < n; ++i) {
    f(i, off);
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) {
        off += strides[d];
        break;
      }
      off -= strides[d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
}

#if TE_WITH_CUDA
cuda::StridedLayout layout_of(const Tensor& t) {
  TE_CHECK(t.dim() <= cuda::kMaxDims, "tensors have at most " << cuda::kMaxDims << " dims, got " << t.dim());
  cuda::StridedLayout l{};
  l.dims = t.dim();
  for (int i = 0; i < t.dim(); ++i) {
    l.shape[i] = t.size(i);
    l.stride[i] = t.stride(i);
  }
  return l;
}
cudaStream_t cuda_stream(const Stream& s) { return static_cast<cudaStream_t>(s.handle()); }
#endif
}  // namespace

int Tensor::wrap_dim(int d) const {
  int n = dim();
  int w = d < 0 ? d + n : d;
  TE_CHECK(w >= 0 && w < n, "dimension " << d << " out of range for a tensor of shape " << shape_str(shape_));
  return w;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, const Stream& stream) {
  check_shape(shape);
  const int64_t n = shape_numel(shape);  // before the strides: it bounds them
  Tensor t;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  t.storage_ = Storage::allocate(static_cast<size_t>(dtype_storage_bytes(dtype, n)), device, stream);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device, const Stream& stream) {
  Tensor t = empty(shape, dtype, device, stream);
  if (device.is_cpu()) {
    std::memset(t.data_ptr(), 0, t.nbytes());
  } else {
#if TE_WITH_CUDA
    TE_CUDA_CHECK(cudaMemsetAsync(t.data_ptr(), 0, t.nbytes(), cuda_stream(stream)));
#endif
  }
  return t;
}

Tensor Tensor::from_f32(const std::vector<float>& values, const Shape& shape, DType dtype, Device device) {
  TE_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape),
           values.size() << " values do not fill shape " << shape_str(shape));
  Tensor host = zeros(shape, dtype, Device::cpu());
  void* dst = host.data_ptr();
  for (size_t i = 0; i < values.size(); ++i) store_f32(dst, dtype, static_cast<int64_t>(i), values[i]);
  return device.is_cpu() ? host : host.to(device);
}

Tensor Tensor::borrow(void* data, const Shape& shape, DType dtype, Device device) {
  check_shape(shape);
  const int64_t n = shape_numel(shape);  // before the strides: it bounds them
  Tensor t;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  t.storage_ = Storage::borrow(data, static_cast<size_t>(dtype_storage_bytes(dtype, n)), device);
  return t;
}

void* Tensor::data_ptr() const {
  TE_CHECK(storage_ != nullptr, "data of an undefined tensor");
  const int bits = dtype_bits(dtype_);
  return static_cast<char*>(storage_->data()) + (offset_ * bits) / 8;
}

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_) || numel() <= 1; }

Tensor Tensor::contiguous(const Stream& stream) const {
  if (is_contiguous()) return *this;
  Tensor out = empty(shape_, dtype_, device(), stream);
  out.copy_from(*this, stream);
  return out;
}

Tensor Tensor::slice(int d, int64_t start, int64_t end, int64_t step) const {
  int w = wrap_dim(d);
  TE_CHECK(step > 0, "slice step must be positive, got " << step);
  TE_CHECK(0 <= start && start <= end && end <= shape_[w],
           "slice [" << start << ", " << end << ") out of range for dim " << d << " of " << shape_str(shape_));
  Tensor t = *this;
  t.offset_ += start * strides_[w];
  t.shape_[w] = (end - start + step - 1) / step;
  t.strides_[w] *= step;
  if (dtype_bits(dtype_) < 8) {
    TE_CHECK(t.is_contiguous() && (t.offset_ % 2) == 0,
             "fp4 views must stay contiguous and start on a byte; got a view of " << shape_str(t.shape_));
  }
  return t;
}

Tensor Tensor::narrow(int d, int64_t start, int64_t length) const { return slice(d, start, start + length); }

Tensor Tensor::transpose(int d0, int d1) const {
  TE_CHECK(dtype_bits(dtype_) >= 8, "transpose of a packed fp4 tensor: use the quantizer's column-wise copy");
  Tensor t = *this;
  int a = wrap_dim(d0), b = wrap_dim(d1);
  std::swap(t.shape_[a], t.shape_[b]);
  std::swap(t.strides_[a], t.strides_[b]);
  return t;
}

Tensor Tensor::reshape(const Shape& new_shape) const {
  Shape shape = new_shape;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      TE_CHECK(infer < 0, "reshape to " << shape_str(new_shape) << ": only one dimension may be -1");
      infer = static_cast<int>(i);
    } else {
      TE_CHECK(shape[i] >= 0, "reshape to " << shape_str(new_shape) << ": negative dimension");
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    TE_CHECK(known > 0 && numel() % known == 0, "reshape " << shape_str(shape_) << " to " << shape_str(new_shape));
    shape[infer] = numel() / known;
  }
  TE_CHECK(shape_numel(shape) == numel(),
           "reshape " << shape_str(shape_) << " to " << shape_str(new_shape) << ": element counts differ");
  TE_CHECK_HINT(is_contiguous(), "reshape of a non-contiguous tensor " << shape_str(shape_) << " is not a view",
                "call contiguous() first");
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

Tensor Tensor::view_dtype(DType dtype) const {
  TE_CHECK(dtype_bits(dtype) == dtype_bits(dtype_),
           "view_dtype " << dtype_name(dtype_) << " → " << dtype_name(dtype) << ": widths differ");
  Tensor t = *this;
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::to(Device dst_device, const Stream& stream) const {
  Tensor out = empty(shape_, dtype_, dst_device, stream);
  out.copy_from(*this, stream);
  return out;
}

void Tensor::copy_from(const Tensor& src, const Stream& stream) {
  TE_CHECK(src.shape_ == shape_ && src.dtype_ == dtype_,
           "copy_from " << src.str() << " into " << str() << ": shape and dtype must match");
  if (numel() == 0) return;
  const int bits = dtype_bits(dtype_);
  if (bits < 8)
    TE_CHECK(is_contiguous() && src.is_contiguous(), "fp4 copies need contiguous tensors");
  const Device sd = src.device(), dd = device();
  if (sd.is_cpu() && dd.is_cpu()) {
    if (is_contiguous() && src.is_contiguous()) {
      std::memmove(data_ptr(), src.data_ptr(), nbytes());
      return;
    }
    const int eb = bits / 8;
    std::vector<int64_t> src_offsets(numel());
    for_each_offset(src.shape_, src.strides_, 0, [&](int64_t i, int64_t off) { src_offsets[i] = off; });
    const char* s = static_cast<const char*>(src.data_ptr());
    char* d = static_cast<char*>(data_ptr());
    for_each_offset(shape_, strides_, 0,
                    [&](int64_t i, int64_t off) { std::memcpy(d + off * eb, s + src_offsets[i] * eb, eb); });
    return;
  }
#if TE_WITH_CUDA
  cudaStream_t st = cuda_stream(stream);
  if (sd.is_cuda() && dd.is_cuda() && sd == dd) {
    if (is_contiguous() && src.is_contiguous()) {
      TE_CUDA_CHECK(cudaMemcpyAsync(data_ptr(), src.data_ptr(), nbytes(), cudaMemcpyDeviceToDevice, st));
    } else {
      cuda::strided_copy(data_ptr(), layout_of(*this), src.data_ptr(), layout_of(src), bits / 8, numel(), stream);
    }
    return;
  }
  // Across devices: contiguous staging on each side, one memcpy between them.
  Tensor s = src.contiguous(sd.is_cuda() ? stream : Stream());
  Tensor d = is_contiguous() ? *this : empty(shape_, dtype_, dd, dd.is_cuda() ? stream : Stream());
  TE_CUDA_CHECK(cudaMemcpyAsync(d.data_ptr(), s.data_ptr(), nbytes(), cudaMemcpyDefault, st));
  if (dd.is_cpu() || sd.is_cpu()) TE_CUDA_CHECK(cudaStreamSynchronize(st));  // host memory is pageable
  if (d.storage_ != storage_) copy_from(d, stream);
#else
  (void)stream;
  TE_THROW("copy between " << sd.str() << " and " << dd.str() << " in a build without CUDA", "use device: cpu");
#endif
}

void Tensor::fill(double value, const Stream& stream) {
  if (!is_contiguous()) {
    Tensor tmp = empty(shape_, dtype_, device(), stream);
    tmp.fill(value, stream);
    copy_from(tmp, stream);
    return;
  }
  const float v = static_cast<float>(value);
  if (device().is_cpu()) {
    void* dst = data_ptr();
    for (int64_t i = 0, n = numel(); i < n; ++i) store_f32(dst, dtype_, i, v);
    return;
  }
#if TE_WITH_CUDA
  cuda::fill(data_ptr(), dtype_, numel(), v, stream);
#endif
}

namespace {
void fill_random_impl(Tensor& t, uint64_t seed, bool normal, float a, float b, const Stream& stream) {
  TE_CHECK(t.dtype() != DType::fp4_e2m1 || t.is_contiguous(), "fp4 random fill needs a contiguous tensor");
  if (!t.is_contiguous()) {
    Tensor tmp = Tensor::empty(t.shape(), t.dtype(), t.device(), stream);
    fill_random_impl(tmp, seed, normal, a, b, stream);
    t.copy_from(tmp, stream);
    return;
  }
  if (t.device().is_cpu()) {
    const int64_t n = t.numel();
    const auto value = [&](int64_t i) { return random_fill_value(seed, static_cast<uint64_t>(i), normal, a, b); };
    if (t.dtype() == DType::fp4_e2m1) {
      auto* bytes = static_cast<uint8_t*>(t.data_ptr());
      for (int64_t k = 0; k < (n + 1) / 2; ++k) bytes[k] = fp4_byte_of(k, n, value);
      return;
    }
    void* dst = t.data_ptr();
    for (int64_t i = 0; i < n; ++i) store_f32(dst, t.dtype(), i, value(i));
    return;
  }
#if TE_WITH_CUDA
  cuda::fill_random(t.data_ptr(), t.dtype(), t.numel(), seed, normal, a, b, stream);
#endif
}
}  // namespace

void Tensor::fill_normal(uint64_t seed, float mean, float stddev, const Stream& stream) {
  fill_random_impl(*this, seed, true, mean, stddev, stream);
}
void Tensor::fill_uniform(uint64_t seed, float lo, float hi, const Stream& stream) {
  fill_random_impl(*this, seed, false, lo, hi, stream);
}

std::vector<float> Tensor::to_f32_vector(const Stream& stream) const {
  Tensor h = device().is_cpu() ? contiguous() : to(Device::cpu(), stream);
  std::vector<float> out(static_cast<size_t>(numel()));
  const void* src = h.data_ptr();
  for (size_t i = 0; i < out.size(); ++i) out[i] = load_f32(src, dtype_, static_cast<int64_t>(i));
  return out;
}

std::string Tensor::str() const {
  if (!defined()) return "<undefined tensor>";
  return shape_str(shape_) + " " + std::string(dtype_name(dtype_)) + " " + device().str();
}

}  // namespace te
