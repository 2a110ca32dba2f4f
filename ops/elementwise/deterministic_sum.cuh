// Deterministic sums in double on CUDA (CUDA builds only). A kernel over a grid that depends only on the problem
// size gives every thread a fixed share; block_sum_to_partial folds each block's per-thread sums in a fixed tree into
// partial[blockIdx.x]; sum_partials adds the partials in a fixed order. The same inputs give the same bits on every
// run, whatever the timing (no atomics).
#pragma once
#include "ops/elementwise/cuda_common.cuh"

namespace te::cuda {

// A shuffle tree per warp, then thread 0 adds the warps in index order. Every thread of the block must call it;
// blockDim.x == kThreads, a multiple of 32.
template <int kThreads>
__device__ __forceinline__ void block_sum_to_partial(double acc, double* partial) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, one block");
  __shared__ double warp_sums[kThreads / 32];
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xFFFFFFFFu, acc, off);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0;
    for (int w = 0; w < kThreads / 32; ++w) s += warp_sums[w];
    partial[blockIdx.x] = s;
  }
}

// *out = Σ partial[0, n), rounded once to f32, on `stream`: one warp, each lane adding a strided share in index
// order, then a shuffle tree. n >= 0 (0 writes 0).
void sum_partials(const double* partial, int n, float* out, const Stream& stream);

}  // namespace te::cuda
