// squared_error on CUDA: one pass over out and target. When out, target and grad share one dtype and are 16-byte
// aligned each thread moves 16-byte vectors (8 bf16/f16 or 4 f32), else one element at a time through the CPU
// reference's conversions (engine/element.h). The fp32 steps are the CPU reference's, so grad is bit-identical to
// it; per-thread sums in double are folded in a fixed order (deterministic_sum.cuh).
#include <algorithm>

#include "engine/element.h"
#include "ops/elementwise/cuda_common.cuh"
#include "ops/elementwise/deterministic_sum.cuh"
#include "ops/elementwise/squared_error.h"

namespace te::detail {
namespace {
constexpr int kThreads = 256;
// A cap fixed in the code, not read from the device: the grid, and so the summation order, depends on n only.
// Four 256-thread CTAs per SM of an H200 keep enough 16-byte loads in flight to stream at copy bandwidth.
constexpr int64_t kMaxBlocks = 132 * 4;

// One element: adds d² to acc and returns the gradient value (fp32, not yet rounded). The square of an f32 is exact
// in double, so a fused multiply-add gives the same sum.
__device__ __forceinline__ float squared_error_term(float out, float target, float grad_scale, double& acc) {
  const float d = out - target;
  acc += static_cast<double>(d) * d;
  return grad_scale * d;
}

// out, target, grad: T, 16-byte aligned. Thread t handles vectors t, t + stride, … in order, then element
// nvec·N + t of the n mod N left over.
template <class T>
__global__ void squared_error_vec_kernel(const T* out, const T* target, float grad_scale, T* grad, int64_t n,
                                         double* partial) {
  constexpr int N = 16 / sizeof(T);
  const int64_t nvec = n / N, tid = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  double acc = 0;
  for (int64_t v = tid; v < nvec; v += int64_t(gridDim.x) * blockDim.x) {
    float o[N], t[N], g[N];
    cuda::load_vec<T, N>(out, v * N, o);
    cuda::load_vec<T, N>(target, v * N, t);
#pragma unroll
    for (int k = 0; k < N; ++k) g[k] = squared_error_term(o[k], t[k], grad_scale, acc);
    cuda::store_vec<T, N, true>(grad, v * N, g);
  }
  const int64_t i = nvec * N + tid;
  if (i < n) grad[i] = cuda::from_f<T>(squared_error_term(cuda::to_f(out[i]), cuda::to_f(target[i]), grad_scale, acc));
  cuda::block_sum_to_partial<kThreads>(acc, partial);
}

// Any dtypes, any alignment: the dtype switch per element of add_kernel and cast_kernel.
__global__ void squared_error_kernel(SquaredErrorArgs a, double* partial) {
  double acc = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < a.n; i += int64_t(gridDim.x) * blockDim.x)
    store_f32(
        a.grad, a.grad_dtype, i,
        squared_error_term(load_f32(a.out, a.out_dtype, i), load_f32(a.target, a.target_dtype, i), a.grad_scale, acc));
  cuda::block_sum_to_partial<kThreads>(acc, partial);
}

int blocks_for(int64_t work_items) {
  return static_cast<int>(std::clamp<int64_t>((work_items + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

}  // namespace

void squared_error_cuda(const SquaredErrorArgs& a, float* sum, Device device, const Stream& stream) {
  const bool vec = a.out_dtype == a.target_dtype && a.out_dtype == a.grad_dtype && cuda::aligned16(a.out) &&
                   cuda::aligned16(a.target) && cuda::aligned16(a.grad);
  const int64_t per_item = vec ? 16 / (dtype_bits(a.out_dtype) / 8) : 1;
  const int blocks = blocks_for((a.n + per_item - 1) / per_item);
  // Doubles in i64 storage (the dtype table has no f64), from the stream-ordered allocator.
  Tensor partial = Tensor::empty({blocks}, DType::i64, device, stream);
  double* p = static_cast<double*>(partial.data_ptr());
  const cudaStream_t st = cuda::raw_stream(stream);
  if (vec) {
    cuda::dispatch_hp(a.out_dtype, "squared_error", [&](auto tag) {
      using T = decltype(tag);
      squared_error_vec_kernel<T><<<blocks, kThreads, 0, st>>>(
          static_cast<const T*>(a.out), static_cast<const T*>(a.target), a.grad_scale, static_cast<T*>(a.grad), a.n, p);
    });
  } else {
    squared_error_kernel<<<blocks, kThreads, 0, st>>>(a, p);
  }
  TE_CUDA_CHECK_LAUNCH();
  cuda::sum_partials(p, blocks, sum, stream);
}

namespace {
__global__ void loss_and_skip_kernel(const float* sum, double divisor, float* loss, int32_t* skip) {
  loss_and_skip_of(sum, divisor, loss, skip);
}
}  // namespace

void loss_and_skip_cuda(const float* sum, double divisor, float* loss, int32_t* skip, const Stream& stream) {
  loss_and_skip_kernel<<<1, 1, 0, cuda::raw_stream(stream)>>>(sum, divisor, loss, skip);
  TE_CUDA_CHECK_LAUNCH();
}

}  // namespace te::detail
