// Tensor: shared storage + shape + strides (in elements) + offset (in elements) + dtype + device.
// Views (slice, narrow, transpose, reshape where legal) share storage; contiguous() copies only when needed.
// fp4 (two elements per byte) supports contiguous tensors and dim-0 narrows that start on a byte.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/dtype.h"
#include "engine/storage.h"
#include "engine/stream.h"

namespace te {

using Shape = std::vector<int64_t>;
// Elements of a shape. Throws te::InputError for a negative dimension or more than kMaxNumel elements (their byte
// count could overflow int64), zero dimensions counted as one (an empty tensor's strides must fit as well).
constexpr int64_t kMaxNumel = int64_t{1} << 56;
int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[2, 3]"
// Row-major strides of a shape that shape_numel accepts (zero dimensions step as one).
Shape contiguous_strides(const Shape& s);

class Tensor {
 public:
  Tensor() = default;  // undefined
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu(), const Stream& stream = Stream());
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu(), const Stream& stream = Stream());
  // Host floats converted to `dtype` (round to nearest even, saturating for narrow formats), placed on `device`.
  static Tensor from_f32(const std::vector<float>& values, const Shape& shape, DType dtype,
                         Device device = Device::cpu());
  // A view of memory the caller owns (not freed by the tensor).
  static Tensor borrow(void* data, const Shape& shape, DType dtype, Device device);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int dim() const { return static_cast<int>(shape_.size()); }
  int64_t size(int d) const { return shape_.at(wrap_dim(d)); }
  int64_t stride(int d) const { return strides_.at(wrap_dim(d)); }
  int64_t numel() const { return shape_numel(shape_); }
  int64_t offset() const { return offset_; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  // Bytes of the elements when packed contiguously (fp4: two per byte).
  int64_t nbytes() const { return dtype_storage_bytes(dtype_, numel()); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  // Address of element 0 (the offset applied).
  void* data_ptr() const;
  template <class T>
  T* data() const { return static_cast<T*>(data_ptr()); }

  bool is_contiguous() const;
  Tensor contiguous(const Stream& stream = Stream()) const;
  Tensor slice(int d, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int d, int64_t start, int64_t length) const;
  Tensor transpose(int d0, int d1) const;
  // A view with a new shape; one -1 is inferred. Throws when the strides make a view impossible (call contiguous()).
  Tensor reshape(const Shape& shape) const;
  // A view of the same bytes as another dtype of the same width (e.g. bf16 ↔ f16 ↔ i16 bit copies).
  Tensor view_dtype(DType dtype) const;

  // A contiguous copy on `device`.
  Tensor to(Device device, const Stream& stream = Stream()) const;
  Tensor clone(const Stream& stream = Stream()) const { return to(device(), stream); }
  // Element-wise copy of a same-shape, same-dtype tensor, any strides, any devices.
  void copy_from(const Tensor& src, const Stream& stream = Stream());
  void fill(double value, const Stream& stream = Stream());
  // Seeded init: element i (row-major logical index) gets the same value on CPU and CUDA for a given seed.
  void fill_normal(uint64_t seed, float mean = 0.f, float stddev = 1.f, const Stream& stream = Stream());
  void fill_uniform(uint64_t seed, float lo = 0.f, float hi = 1.f, const Stream& stream = Stream());
  // Host copy converted to f32 (tests, I/O, statistics). Synchronises `stream`.
  std::vector<float> to_f32_vector(const Stream& stream = Stream()) const;
  std::string str() const;  // "[2, 3] bf16 cuda:0"

 private:
  int wrap_dim(int d) const;
  std::shared_ptr<Storage> storage_;
  Shape shape_, strides_;
  int64_t offset_ = 0;
  DType dtype_ = DType::f32;
};

}  // namespace te
