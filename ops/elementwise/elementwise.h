// Elementwise ops on high-precision tensors: residual add (+ bias), cast, 2D transpose, scale.
// Inputs may have any strides (non-contiguous views are made contiguous first); outputs are contiguous tensors
// the caller allocates (the `Tensor&` overloads, for planned buffers) or that the op allocates (the returning
// overloads). Arithmetic is fp32 with one rounding to the output dtype, so CPU and CUDA agree bit-for-bit.
// The stream is the last argument; tensors must live on the stream's device.
#pragma once
#include "engine/stream.h"
#include "engine/tensor.h"

namespace te {

// out = a + b (+ bias broadcast over rows). a, b, out: same shape [..., N]; bias: [N] or undefined.
// Dtypes: a, b, bias, out each f32/bf16/f16 (they may differ).
void add(const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& out, const Stream& stream = Stream());
// out dtype = a's dtype.
Tensor add(const Tensor& a, const Tensor& b, const Tensor& bias = Tensor(), const Stream& stream = Stream());

// out = x converted to out's dtype (round to nearest even; narrow formats saturate, see NUMERICS.md §1).
// x, out: same shape; f32/bf16/f16/fp8_e4m3/fp8_e5m2.
void cast(const Tensor& x, Tensor& out, const Stream& stream = Stream());
Tensor cast(const Tensor& x, DType dtype, const Stream& stream = Stream());

// out[j, i] = x[i, j]: x [R, C] → out [C, R], contiguous; any dtype of 1, 2, 4 or 8 bytes (bit copy).
void transpose_2d(const Tensor& x, Tensor& out, const Stream& stream = Stream());
Tensor transpose_2d(const Tensor& x, const Stream& stream = Stream());

// out = alpha * x (fp32 multiply). x, out: same shape, f32/bf16/f16.
void scale_tensor(const Tensor& x, float alpha, Tensor& out, const Stream& stream = Stream());
Tensor scale_tensor(const Tensor& x, float alpha, const Stream& stream = Stream());

// Σ x² over every element, accumulated in double in a fixed order (the same bits on every run), returned as f32 [1]
// on x's device: a loss stays on the GPU until one number is read.
Tensor sum_squares(const Tensor& x, const Stream& stream = Stream());

}  // namespace te
