// The training loss Σ (out − target)² and its gradient in one pass (models/rank_model.cpp): out and target are read
// once and the gradient written once, where the op-by-op chain made eight passes.
//
//   d    = float(out) − float(target)                 fp32
//   grad = grad_scale · d, rounded once to grad_dtype  (out's shape, contiguous)
//   sum  = Σ d² accumulated in double, rounded once to f32 [1] on out's device (the loss stays on the GPU until one
//          number is read)
//
// grad has the bits of the chain cast(out → f32), scale_tensor(cast(target → f32), −1), add, scale_tensor(grad_scale),
// cast(→ grad_dtype) (a − b is a + (−b) in IEEE arithmetic; each step rounds the same fp32 value once). On the CPU
// sum is sum_squares() of that difference, bit for bit; CUDA adds the same exact squares in another fixed order
// (deterministic_sum.cuh): the same bits on every run, within double rounding of the CPU. NaN or Inf in either input
// gives a non-finite sum.
//
// out, target: the same shape, each f32/bf16/f16 (they may differ), on one device; any strides (views are made
// contiguous first). grad_dtype: f32/bf16/f16. The stream is the last argument.
#pragma once
#include <cfloat>
#include <cstdint>

#include "engine/hd.h"
#include "engine/stream.h"
#include "engine/tensor.h"

namespace te {

struct SquaredError {
  Tensor grad;  // grad_scale · (out − target): out's shape, grad_dtype
  Tensor sum;   // Σ (out − target)²: f32 [1]
};
SquaredError squared_error(const Tensor& out, const Tensor& target, float grad_scale, DType grad_dtype,
                           const Stream& stream = Stream());

// The step's loss and the flag that skips its update, from `sum` on its device, with no host synchronisation (a
// training step reads the loss on the host only after it has finished, and can be captured as a CUDA graph):
//   loss = f32(f64(sum[0]) / divisor)   f32 [1]
//   skip = loss is not finite           i32 [1] (1 or 0)
// Both on sum's device, written in place.
void loss_and_skip(const Tensor& sum, double divisor, Tensor& loss, Tensor& skip, const Stream& stream = Stream());

namespace detail {
// One problem on contiguous buffers of n elements.
struct SquaredErrorArgs {
  const void* out;
  DType out_dtype;
  const void* target;
  DType target_dtype;
  void* grad;
  DType grad_dtype;
  float grad_scale;
  int64_t n;
};
void squared_error_cpu(const SquaredErrorArgs& args, float* sum);
// sum: f32 [1] on `device`; the per-block partials come from the stream-ordered allocator.
void squared_error_cuda(const SquaredErrorArgs& args, float* sum, Device device, const Stream& stream);
void loss_and_skip_cuda(const float* sum, double divisor, float* loss, int32_t* skip, const Stream& stream);
// The expression both sides evaluate.
TE_HD void loss_and_skip_of(const float* sum, double divisor, float* loss, int32_t* skip) {
  const float l = static_cast<float>(static_cast<double>(*sum) / divisor);
  *loss = l;
  *skip = (l >= -FLT_MAX && l <= FLT_MAX) ? 0 : 1;  // false for NaN and ±Inf
}
}  // namespace detail

}  // namespace te
