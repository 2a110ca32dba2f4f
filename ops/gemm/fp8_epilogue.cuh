// The epilogue the fp8 kernels apply to one thread's f32 sums, in cuBLASLt's order: times a factor, plus bias[col],
// plus the output's old value when accumulating. A kernel hands its outputs over as `each(fn)`, which calls
// fn(float& v, int64_t row, int64_t col) for each of them inside the matrix.
//
// Each dtype is resolved once per pass over the outputs, not once per value. load_f32/store_f32's dtype switches
// inlined per value spread an epilogue over hundreds of kilobytes of code, mostly jumped over, and its instruction
// fetches stalled the warps at the end of every tile. On an H100 the warpgroup kernel ran 820 TFLOP/s with a bias
// switch per pair of outputs, 690 with one per output and about 400 with a bias and an accumulate switch per output,
// though none of them ran (no bias, no accumulation).
#pragma once
#include <cstdint>
#include <type_traits>

#include "engine/element.h"
#include "ops/gemm/fp8_gemm_args.h"

namespace te::cuda {

template <DType t>
using DTypeConstant = std::integral_constant<DType, t>;

// f(DTypeConstant<dtype>) for the bias and output dtypes, f32, bf16 and f16 (te::gemm admits no other bias,
// fp8_args_unsupported no other output); any other dtype is f32's.
template <class F>
__device__ __forceinline__ void with_high_precision(DType dtype, F&& f) {
  if (dtype == DType::bf16)
    f(DTypeConstant<DType::bf16>{});
  else if (dtype == DType::f16)
    f(DTypeConstant<DType::f16>{});
  else
    f(DTypeConstant<DType::f32>{});
}

// v = factor · v + bias[col].
template <class Each>
__device__ __forceinline__ void scale_and_bias(const Fp8GemmArgs& g, float factor, Each&& each) {
  each([&](float& v, int64_t, int64_t) { v *= factor; });
  if (!g.bias) return;
  with_high_precision(g.bias_dtype, [&](auto t) {
    each([&](float& v, int64_t, int64_t col) { v += load_f32(g.bias, decltype(t)::value, col); });
  });
}

// out[row, col] = v, plus its old value when accumulating.
template <class Each>
__device__ __forceinline__ void store_outputs(const Fp8GemmArgs& g, Each&& each) {
  with_high_precision(g.out_dtype, [&](auto t) {
    constexpr DType kOut = decltype(t)::value;
    each([&](float& v, int64_t row, int64_t col) {
      const int64_t o = row * g.Q + col;
      store_f32(g.out, kOut, o, g.accumulate ? v + load_f32(g.out, kOut, o) : v);
    });
  });
}

// out[row, col] = residual[row, col] + v, v rounded to out's dtype first: the bytes of this GEMM's output followed by
// add(residual, out) (one f32 add, one rounding).
template <class Each>
__device__ __forceinline__ void store_outputs_plus(const Fp8GemmArgs& g, const void* residual, DType residual_dtype,
                                                   Each&& each) {
  with_high_precision(g.out_dtype, [&](auto t) {
    constexpr DType kOut = decltype(t)::value;
    with_high_precision(residual_dtype, [&](auto r) {
      each([&](float& v, int64_t row, int64_t col) {
        const int64_t o = row * g.Q + col;
        store_f32(g.out, kOut, o, load_f32(residual, decltype(r)::value, o) + round_as(kOut, v));
      });
    });
  });
}

}  // namespace te::cuda
