// CPU reference of the elementwise ops: fp32 arithmetic, one rounding to the output dtype (engine/element.h).
#include <cstring>

#include "engine/element.h"
#include "ops/elementwise/elementwise_impl.h"

namespace te::cpu {

void add(const void* a, DType ta, const void* b, DType tb, const void* bias, DType tbias, void* out, DType tout,
         int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      float v = load_f32(a, ta, i) + load_f32(b, tb, i);
      if (bias) v += load_f32(bias, tbias, c);
      store_f32(out, tout, i, v);
    }
}

void cast(const void* x, DType tx, void* out, DType tout, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store_f32(out, tout, i, load_f32(x, tx, i));
}

void transpose_2d(const void* x, void* out, int elem_bytes, int64_t rows, int64_t cols) {
  const auto* src = static_cast<const unsigned char*>(x);
  auto* dst = static_cast<unsigned char*>(out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      std::memcpy(dst + (c * rows + r) * elem_bytes, src + (r * cols + c) * elem_bytes, elem_bytes);
}

void scale(const void* x, DType tx, float alpha, void* out, DType tout, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store_f32(out, tout, i, alpha * load_f32(x, tx, i));
}

void sum_squares(const void* x, DType tx, int64_t n, float* out) {
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = load_f32(x, tx, i);
    acc += v * v;
  }
  *out = static_cast<float>(acc);
}

}  // namespace te::cpu
