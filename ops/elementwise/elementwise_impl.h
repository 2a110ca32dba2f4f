// Private: the CPU reference and CUDA launchers behind ops/elementwise/elementwise.h (the other CPU references borrow
// cpu::transpose_2d for their buffers). Every pointer is a contiguous buffer; checks are done by the public entry
// points.
#pragma once
#include <cstdint>

#include "engine/dtype.h"
#include "engine/stream.h"

namespace te {
inline constexpr int kSumSquaresPartials = 264;  // CTAs of the CUDA sum_squares (fixed: the order is fixed)
namespace cpu {
// a, b, out: [rows, cols]; bias: [cols] or nullptr.
void add(const void* a, DType ta, const void* b, DType tb, const void* bias, DType tbias, void* out, DType tout,
         int64_t rows, int64_t cols);
void cast(const void* x, DType tx, void* out, DType tout, int64_t n);
void transpose_2d(const void* x, void* out, int elem_bytes, int64_t rows, int64_t cols);
void scale(const void* x, DType tx, float alpha, void* out, DType tout, int64_t n);
void sum_squares(const void* x, DType tx, int64_t n, float* out);
}  // namespace cpu
namespace cuda {
void add(const void* a, DType ta, const void* b, DType tb, const void* bias, DType tbias, void* out, DType tout,
         int64_t rows, int64_t cols, const Stream& stream);
void cast(const void* x, DType tx, void* out, DType tout, int64_t n, const Stream& stream);
void transpose_2d(const void* x, void* out, int elem_bytes, int64_t rows, int64_t cols, const Stream& stream);
void scale(const void* x, DType tx, float alpha, void* out, DType tout, int64_t n, const Stream& stream);
// partial: kSumSquaresPartials doubles of scratch on the device.
void sum_squares(const void* x, DType tx, int64_t n, double* partial, float* out, const Stream& stream);
}  // namespace cuda
}  // namespace te
