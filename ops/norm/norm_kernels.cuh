// Row kernels shared by the plain norm forward (norm.cu) and the fused norm + quantize forward
// (norm_quantize.cu). Both use the same launch shape and the same per-row code, so the fused path's
// high-precision values are bit-identical to the plain path's output before it is quantized.
#pragma once
#include <algorithm>

#include "ops/elementwise/cuda_common.cuh"
#include "ops/norm/norm_impl.h"

namespace te::cuda::norm_detail {

// Chunks of VEC elements each thread keeps in registers; rows longer than kItems * blockDim * VEC re-read the
// rest (from L1/L2) instead of spilling.
constexpr int kItems = 4;

// 16-byte vectors when every pointer and the row length allow it, else scalar.
template <class TX>
constexpr int vec_width() { return 16 / static_cast<int>(sizeof(TX)); }

// Threads per row: enough that kItems chunks cover the row, a multiple of 32, at most kMaxThreads (the kernels'
// __launch_bounds__, which leaves each thread 128 registers: the cached row never spills).
constexpr int kMaxThreads = 512;
constexpr int kMinBlocks = 2;  // caps registers at 64 per thread: occupancy hides the row's load latency
inline int threads_for(int64_t chunks) {
  const int64_t t = (chunks + kItems - 1) / kItems;
  return static_cast<int>(std::clamp<int64_t>((t + 31) / 32 * 32, 32, kMaxThreads));
}

// Statistics of one row, the row cached in v for chunk c = threadIdx.x + i * blockDim.x (i < kItems).
// Two passes in registers: mean, then sum of squared deviations (no cancellation as in E[x²] - E[x]²).
template <class TX, int VEC>
__device__ __forceinline__ void row_stats(const TX* xr, int64_t nch, int64_t H, bool rms, float eps,
                                          Vec<TX, VEC> (&v)[kItems], float* smem, float& mu, float& rstd) {
  const int tid = threadIdx.x, bd = blockDim.x;
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int64_t c = tid + int64_t(i) * bd;
    if (c < nch) {
      v[i] = *reinterpret_cast<const Vec<TX, VEC>*>(xr + c * VEC);  // kept raw: half the registers for 16-bit x
#pragma unroll
      for (int k = 0; k < VEC; ++k) s += to_f(v[i].v[k]);
    }
  }
  for (int64_t c = tid + int64_t(kItems) * bd; c < nch; c += bd) {
    float t[VEC];
    load_vec<TX, VEC>(xr, c * VEC, t);
#pragma unroll
    for (int k = 0; k < VEC; ++k) s += t[k];
  }
  mu = rms ? 0.f : block_sum(s, smem) / static_cast<float>(H);
  float q = 0.f;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int64_t c = tid + int64_t(i) * bd;
    if (c < nch) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float d = to_f(v[i].v[k]) - mu;
        q += d * d;
      }
    }
  }
  for (int64_t c = tid + int64_t(kItems) * bd; c < nch; c += bd) {
    float t[VEC];
    load_vec<TX, VEC>(xr, c * VEC, t);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float d = t[k] - mu;
      q += d * d;
    }
  }
  const float var = block_sum(q, smem) / static_cast<float>(H);
  rstd = 1.0f / sqrtf(var + eps);
}

template <class TX, int VEC>
__device__ __forceinline__ void unpack(const Vec<TX, VEC>& r, float (&out)[VEC]) {
#pragma unroll
  for (int k = 0; k < VEC; ++k) out[k] = to_f(r.v[k]);
}

// y = (x - mu) * rstd * gamma (+ beta) for one chunk, in the CPU reference's order.
template <class TP, int VEC>
__device__ __forceinline__ void normalize_chunk(const float (&xv)[VEC], const TP* gamma, const TP* beta, int64_t e,
                                                float mu, float rstd, float (&y)[VEC]) {
  float g[VEC];
  load_vec<TP, VEC>(gamma, e, g);
#pragma unroll
  for (int k = 0; k < VEC; ++k) y[k] = __fmul_rn(__fmul_rn(__fsub_rn(xv[k], mu), rstd), g[k]);
  if (beta) {
    float b[VEC];
    load_vec<TP, VEC>(beta, e, b);
#pragma unroll
    for (int k = 0; k < VEC; ++k) y[k] = __fadd_rn(y[k], b[k]);
  }
}

}  // namespace te::cuda::norm_detail
