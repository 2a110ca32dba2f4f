// Row kernels shared by the plain norm forward (norm.cu) and the fused norm + quantize forward
// (norm_quantize.cu). Both use the same block size and the same per-row code (the reduction order depends only on
// the block size), so the fused path's statistics and high-precision values are bit-identical to the plain path's.
#pragma once
#include <algorithm>
#include <type_traits>

#include "ops/elementwise/cuda_common.cuh"
#include "ops/norm/norm_impl.h"

namespace te::cuda::norm_detail {

// Chunks of VEC elements each thread keeps in registers; rows longer than kItems * blockDim * VEC re-read the
// rest (from L1/L2) instead of spilling. 8 chunks (32 registers of 16-bit x; the kernels stay at 64 registers,
// 16 chunks took 128 and spilled): a row of H = 4096 bf16 is one block of two warps, 16 such blocks per SM keep
// 128 KB of loads in flight; H ≤ 2048 is a single warp, whose statistics need no barrier.
constexpr int kItems = 8;

// 16-byte vectors when every pointer and the row length allow it, else scalar.
template <class TX>
constexpr int vec_width() { return 16 / static_cast<int>(sizeof(TX)); }

// Elements of x's dtype in one 16-byte vector (vec_width for a run-time dtype).
inline int vector_elems(DType tx) { return 128 / dtype_bits(tx); }

// The vector path's inputs: H a multiple of x's 16-byte vector, x aligned to it and gamma/beta to vectors of as
// many elements. Each forward adds its output's condition.
inline bool vector_inputs(const NormFwdArgs& a) {
  const int vec = vector_elems(a.tx), param_bytes = vec * dtype_bits(a.tp) / 8;
  const auto aligned = [](const void* p, int bytes) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % bytes == 0; };
  return a.cols % vec == 0 && aligned(a.x, 16) && aligned(a.gamma, param_bytes) && aligned(a.beta, param_bytes);
}

// Threads per row: enough that `items` chunks each cover the row, a multiple of 32, at most kMaxThreads (the
// kernels' __launch_bounds__, which leaves each thread 128 registers: the cached row never spills).
constexpr int kMaxThreads = 512;
inline int threads_for(int64_t chunks, int items = kItems) {
  const int64_t t = (chunks + items - 1) / items;
  return static_cast<int>(std::clamp<int64_t>((t + 31) / 32 * 32, 32, kMaxThreads));
}

// The chunk (VEC elements, 16 bytes) that holds item i of this thread. Four consecutive lanes own a whole
// 128-element block per round of CB/4 items (lane r of the group takes chunks 4j + r of the block), so the fused
// quantize finds a block's 128 values in four lanes: two shuffles and one scale per block instead of four shuffles
// and a scale per chunk (the old lane-per-chunk layout). A warp's load still reads 64-byte runs (measured as fast
// as 512 contiguous bytes for the plain forward). Item order is chunk order, so a thread's valid items are a prefix.
template <int VEC>
__device__ __forceinline__ int chunk_of(int i) {
  if constexpr (VEC == 1) return threadIdx.x + i * blockDim.x;  // scalar rows (unaligned x): never fused
  constexpr int kChunksPerBlock = 128 / VEC, kPerRound = kChunksPerBlock / 4;
  static_assert(VEC == 1 || kItems % kPerRound == 0);
  const int round = i / kPerRound, j = i % kPerRound;
  return kChunksPerBlock * (round * static_cast<int>(blockDim.x / 4) + static_cast<int>(threadIdx.x / 4)) + 4 * j +
         static_cast<int>(threadIdx.x % 4);
}

template <class TX, int VEC>
__device__ __forceinline__ void unpack(const Vec<TX, VEC>& r, float (&out)[VEC]) {
#pragma unroll
  for (int k = 0; k < VEC; ++k) out[k] = to_f(r.v[k]);
}

// VEC elements of T as raw 32-bit words (8 or 16 bytes). Held across a loop, 16-bit elements stay packed two to a
// register as words, where Vec<T, VEC> of 16-bit fields cost instructions and registers (measured in the staged
// forward: Vec chunks alone +1 %; with Vec parameters and runtime kind tests, +6 %).
template <class T, int VEC>
struct Words {
  static constexpr int kWords = VEC * static_cast<int>(sizeof(T)) / 4;
  static_assert(kWords == 2 || kWords == 4);
  uint32_t w[kWords];
  __device__ __forceinline__ void load(const T* p) {  // p aligned to the vector
    if constexpr (kWords == 4) {
      const uint4 u = *reinterpret_cast<const uint4*>(p);
      w[0] = u.x, w[1] = u.y, w[2] = u.z, w[3] = u.w;
    } else {
      const uint2 u = *reinterpret_cast<const uint2*>(p);
      w[0] = u.x, w[1] = u.y;
    }
  }
  // Opaque to the optimiser: a value held across a loop is otherwise unpacked once, outside it, into twice the
  // registers (the held parameters then spilled).
  __device__ __forceinline__ void keep_packed() {
#pragma unroll
    for (int j = 0; j < kWords; ++j) asm volatile("" : "+r"(w[j]));
  }
  __device__ __forceinline__ void unpack(float (&out)[VEC]) const {  // the exact to_f values
#pragma unroll
    for (int j = 0; j < kWords; ++j) {
      if constexpr (std::is_same_v<T, float>) out[j] = __uint_as_float(w[j]);
      else if constexpr (std::is_same_v<T, BF16>) out[2 * j] = __uint_as_float(w[j] << 16), out[2 * j + 1] = __uint_as_float(w[j] & 0xFFFF0000u);
      else out[2 * j] = to_f(T{static_cast<uint16_t>(w[j])}), out[2 * j + 1] = to_f(T{static_cast<uint16_t>(w[j] >> 16)});
    }
  }
};

// Loads the chunks of row xr this thread keeps in registers: chunk_of(i), i < kItems (the first kItems * blockDim.x
// chunks of the row; longer rows re-read the rest).
template <class TX, int VEC>
__device__ __forceinline__ void load_row(const TX* xr, int nch, Vec<TX, VEC> (&v)[kItems]) {
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int c = chunk_of<VEC>(i);
    if (c < nch) v[i] = *reinterpret_cast<const Vec<TX, VEC>*>(xr + c * VEC);  // raw: half the registers for 16-bit x
  }
}

// (count, mean, sum of squared deviations) of a set of values; merged with Chan et al.'s pairwise formula.
struct Moments {
  float n, mean, m2;
};
__device__ __forceinline__ Moments merge(const Moments& a, const Moments& b) {
  const float n = a.n + b.n;
  if (n == 0.f) return a;
  const float d = b.mean - a.mean, wb = b.n / n;
  return {n, a.mean + d * wb, a.m2 + b.m2 + d * d * a.n * wb};
}

// Merges every thread's moments; all threads get the same result (warp tree to lane 0, then each thread folds the
// per-warp results in warp order; a one-warp block broadcasts lane 0's). One barrier pair per row at most.
__device__ __forceinline__ Moments block_moments(Moments m, float* smem) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const Moments other{__shfl_down_sync(0xffffffffu, m.n, o), __shfl_down_sync(0xffffffffu, m.mean, o),
                        __shfl_down_sync(0xffffffffu, m.m2, o)};
    m = merge(m, other);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  if (nwarps == 1)  // a warp per row: lane 0 holds the result
    return Moments{__shfl_sync(0xffffffffu, m.n, 0), __shfl_sync(0xffffffffu, m.mean, 0),
                   __shfl_sync(0xffffffffu, m.m2, 0)};
  __syncthreads();  // smem may still be read for the previous row
  if (lane == 0) smem[3 * warp] = m.n, smem[3 * warp + 1] = m.mean, smem[3 * warp + 2] = m.m2;
  __syncthreads();
  Moments r{smem[0], smem[1], smem[2]};
  for (int w = 1; w < nwarps; ++w) r = merge(r, Moments{smem[3 * w], smem[3 * w + 1], smem[3 * w + 2]});
  return r;
}

// (count, mean, M2) of one chunk's VEC values (RMSNorm: mean 0, M2 the sum of squares).
template <int VEC>
__device__ __forceinline__ Moments chunk_moments(const float (&t)[VEC], bool rms) {
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < VEC; ++k) s += rms ? t[k] * t[k] : t[k];
  if (rms) return {float(VEC), 0.f, s};
  const float mean = s * (1.f / VEC);
  float q = 0.f;
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const float d = t[k] - mean;
    q += d * d;
  }
  return {float(VEC), mean, q};
}

// Statistics of one row in one pass over this thread's cached chunks (cached(i, t) unpacks item i into t) and the
// re-read rest: each chunk's (mean, M2) merged into the thread's (no cancellation as in E[x²] - E[x]², and no second
// pass over the row, so the raw chunks are all the registers the row needs), then one block merge. Cached chunk i is
// present only if chunks 0..i-1 are, so its merge weight 1/(i+1) is a constant. RMSNorm: mean 0, rstd from the mean
// of squares. smem holds at least 3 * 32 floats.
template <class TX, int VEC, class Cached>
__device__ __forceinline__ void row_stats_of(const Cached& cached, const TX* xr, int nch, int64_t H, bool rms,
                                             float eps, float* smem, float& mu, float& rstd) {
  const int tid = threadIdx.x, bd = blockDim.x;
  Moments m{0.f, 0.f, 0.f};
#pragma unroll
  for (int i = 0; i < kItems; ++i)
    if (chunk_of<VEC>(i) < nch) {
      float t[VEC];
      cached(i, t);
      const Moments c = chunk_moments<VEC>(t, rms);
      const float d = c.mean - m.mean, wb = 1.f / float(i + 1);  // both counts VEC·i and VEC
      m = Moments{m.n + VEC, m.mean + d * wb, m.m2 + c.m2 + d * d * m.n * wb};
    }
  for (int c = tid + kItems * bd; c < nch; c += bd) {
    float t[VEC];
    load_vec<TX, VEC>(xr, int64_t(c) * VEC, t);
    m = merge(m, chunk_moments<VEC>(t, rms));
  }
  m = block_moments(m, smem);
  mu = rms ? 0.f : m.mean;
  rstd = 1.0f / sqrtf(m.m2 / static_cast<float>(H) + eps);
}
// The same over chunks cached by load_row.
template <class TX, int VEC>
__device__ __forceinline__ void row_stats(const Vec<TX, VEC> (&v)[kItems], const TX* xr, int nch, int64_t H,
                                          bool rms, float eps, float* smem, float& mu, float& rstd) {
  row_stats_of<TX, VEC>([&](int i, float (&t)[VEC]) { unpack<TX, VEC>(v[i], t); }, xr, nch, H, rms, eps, smem, mu,
                        rstd);
}

// Thread 0 stores the row's statistics; mean_out is nullptr for RMSNorm unless kHasMean says the caller always has one.
template <bool kHasMean = false>
__device__ __forceinline__ void store_row_stats(float* mean_out, float* rstd_out, int64_t row, float mu, float rstd) {
  if (threadIdx.x == 0) {
    if (kHasMean || mean_out) mean_out[row] = mu;
    rstd_out[row] = rstd;
  }
}

// y = (x - mu) * rstd * gamma (+ beta) for one chunk (beta: fused multiply-add).
template <int VEC>
__device__ __forceinline__ void normalize_chunk(const float (&xv)[VEC], const float (&g)[VEC], bool has_beta,
                                                const float (&b)[VEC], float mu, float rstd, float (&y)[VEC]) {
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const float xhat = __fmul_rn(__fsub_rn(xv[k], mu), rstd);
    y[k] = has_beta ? __fmaf_rn(xhat, g[k], b[k]) : __fmul_rn(xhat, g[k]);
  }
}

// gamma and beta of chunk c as floats (b untouched when there is no beta).
template <class TP, int VEC>
__device__ __forceinline__ void load_params(const TP* gamma, const TP* beta, int c, float (&g)[VEC], float (&b)[VEC]) {
  load_vec<TP, VEC>(gamma, int64_t(c) * VEC, g);
  if (beta) load_vec<TP, VEC>(beta, int64_t(c) * VEC, b);
}

}  // namespace te::cuda::norm_detail
