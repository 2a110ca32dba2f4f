// CPU reference of the elementwise ops: fp32 arithmetic, one rounding to the output dtype (engine/element.h).
#include <algorithm>
#include <cstdint>
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
  // f32 → f32 / bf16 and bf16 → f32 (the CPU GEMM's results, the CPU quantize's inputs and images) without a dtype
  // switch per element: the same values and roundings.
  if (tx == DType::f32 && tout == DType::f32) {
    if (n > 0) std::memmove(out, x, static_cast<size_t>(n) * sizeof(float));  // may be in place
    return;
  }
  if (tx == DType::f32 && tout == DType::bf16) {
    for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(out)[i] = bf16_from_f32(static_cast<const float*>(x)[i]);
    return;
  }
  if (tx == DType::bf16 && tout == DType::f32) {
    for (int64_t i = 0; i < n; ++i) static_cast<float*>(out)[i] = bf16_to_f32(static_cast<const uint16_t*>(x)[i]);
    return;
  }
  for (int64_t i = 0; i < n; ++i) store_f32(out, tout, i, load_f32(x, tx, i));
}

namespace {
// In tiles of 32 × 32 elements, so that both the rows read and the columns written stay in cache.
template <class E>
void transpose_tiled(const void* x, void* out, int64_t rows, int64_t cols) {
  constexpr int64_t kTile = 32;
  const auto* src = static_cast<const E*>(x);
  auto* dst = static_cast<E*>(out);
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile)
      for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r)
        for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c) dst[c * rows + r] = src[r * cols + c];
}
}  // namespace

void transpose_2d(const void* x, void* out, int elem_bytes, int64_t rows, int64_t cols) {
  switch (elem_bytes) {
    case 1: return transpose_tiled<uint8_t>(x, out, rows, cols);
    case 2: return transpose_tiled<uint16_t>(x, out, rows, cols);
    case 4: return transpose_tiled<uint32_t>(x, out, rows, cols);
    case 8: return transpose_tiled<uint64_t>(x, out, rows, cols);
  }
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
