// CUDA attention for bf16/f16 QKV (layout: ops/attention/attention.h): flash-attention style tiles of 64 query rows
// × 64 keys on the tensor cores (WMMA 16×16×16, f32 accumulation), the softmax online in f32, so no score matrix
// ever reaches global memory. These are the general kernels (any head_dim ≤ 128, any alignment), staging every
// product through shared memory; head_dim 64 and 128 take the register-resident kernels of attention_mma.cu. Each
// warp owns 16 rows of a tile; the block shares the key/value (forward, dQ) or query/gradient (dK/dV) tiles through
// shared memory.
//
// Numerics, as in flash attention: scores and statistics in f32; the probabilities P and the score gradients dS are
// rounded to the input type before their GEMMs (P · V, dS · K, Pᵀ · dO, dSᵀ · Q); row sums use the f32 P. The
// backward is deterministic: dQ comes from a kernel over query tiles and dK/dV from one over key tiles (the scores
// recomputed in each), so every output element is summed by one warp in a fixed order and nothing uses atomics.
// Head dims up to 128; a head_dim below the tile's (32, 64 or 128) is zero-padded in shared memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "ops/attention/attention_common.cuh"
#include "ops/attention/attention_impl.h"

namespace te::cuda {
namespace {
namespace wmma = nvcuda::wmma;
using namespace attention_detail;

constexpr int kRows = kTile;  // query rows of a tile (4 warps × 16)
constexpr int kKeys = kTile;  // keys of a tile
constexpr int kLdS = kKeys + 4;  // f32 score tiles: padded rows against bank conflicts (ldm a multiple of 4)
constexpr int kLdP = kKeys + 8;  // 16-bit probability tiles (ldm a multiple of 8)

template <int KD>
constexpr int ld_tile() { return KD + 8; }  // 16-bit [64, KD] tiles of Q, K, V, dO

// rows × KD tile from `src` (rows of `stride` elements, `col` the first column), zero where the row is past `valid`
// or the column past head_dim.
template <class T, int KD>
__device__ void load_tile(T* tile, const T* src, int64_t stride, int64_t row0, int valid, int64_t col,
                          int64_t head_dim) {
  constexpr int ld = ld_tile<KD>();
  for (int e = threadIdx.x; e < kRows * KD; e += kThreads) {
    const int r = e / KD, c = e % KD;
    tile[r * ld + c] = (r < valid && c < head_dim) ? src[(row0 + r) * stride + col + c] : T(0.0f);
  }
}

// C[the warp's 16 rows, columns 16·n … 16·n + 15] = A · Bᵀ over K: both operands row-major shared-memory tiles
// (A from the warp's first row, B's rows 16·n on); a row-major tile read as a column-major matrix is its transpose.
template <class T, int K>
__device__ void warp_product_nt(const T* a, const T* b, int ld, float* c, int ldc, int n) {
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  for (int k = 0; k < K; k += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
    wmma::load_matrix_sync(fa, a + k, ld);
    wmma::load_matrix_sync(fb, b + n * 16 * ld + k, ld);
    wmma::mma_sync(acc, fa, fb, acc);
  }
  wmma::store_matrix_sync(c + n * 16, acc, ldc, wmma::mem_row_major);
}

// acc += A · B: A the warp's 16 rows of a row-major 16-bit tile over K columns, B a row-major tile's columns
// 16·n … 16·n + 15.
template <class T, int K>
__device__ void warp_product_nn(wmma::fragment<wmma::accumulator, 16, 16, 16, float>& acc, const T* a, int lda,
                                const T* b, int ldb, int n) {
  for (int k = 0; k < K; k += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
    wmma::load_matrix_sync(fa, a + k, lda);
    wmma::load_matrix_sync(fb, b + k * ldb + n * 16, ldb);
    wmma::mma_sync(acc, fa, fb, acc);
  }
}

template <class T>
__device__ __forceinline__ T to_t(float v);
template <>
__device__ __forceinline__ __nv_bfloat16 to_t<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half to_t<__half>(float v) { return __float2half_rn(v); }

// Writes rows × head_dim of an f32 tile (ld `ld`), times row_scale[r] when given, rounded into dst.
template <class T, int KD>
__device__ void store_tile(T* dst, int64_t stride, int64_t row0, int valid, int64_t col, int64_t head_dim,
                           const float* tile, int ld, const float* row_scale) {
  for (int e = threadIdx.x; e < kRows * KD; e += kThreads) {
    const int r = e / KD, c = e % KD;
    if (r < valid && c < head_dim)
      dst[(row0 + r) * stride + col + c] = to_t<T>(tile[r * ld + c] * (row_scale ? row_scale[r] : 1.0f));
  }
}

template <class T, int KD>
struct FwdSmem {
  static constexpr int ld = ld_tile<KD>(), ldo = KD + 4;
  static constexpr size_t q = 0, k = q + kRows * ld * sizeof(T), v = k + kKeys * ld * sizeof(T),
                          s = v + kKeys * ld * sizeof(T), p = s + kRows * kLdS * sizeof(float),
                          o = p + kRows * kLdP * sizeof(T), stats = o + kRows * ldo * sizeof(float),
                          bytes = stats + 3 * kRows * sizeof(float);
};

// grid (query tiles, heads, batch). lse [batch, heads, seq].
template <class T, int KD>
__global__ void __launch_bounds__(kThreads) attention_fwd_kernel(Geometry g, bool causal, float scale,
                                                                 const T* __restrict__ qkv, T* __restrict__ out,
                                                                 float* __restrict__ lse) {
  using L = FwdSmem<T, KD>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem + L::q);
  T* sK = reinterpret_cast<T*>(smem + L::k);
  T* sV = reinterpret_cast<T*>(smem + L::v);
  float* sS = reinterpret_cast<float*>(smem + L::s);
  T* sP = reinterpret_cast<T*>(smem + L::p);
  float* sO = reinterpret_cast<float*>(smem + L::o);
  float* sM = reinterpret_cast<float*>(smem + L::stats);  // running max, sum, and this tile's rescale per row
  float* sL = sM + kRows;
  float* sA = sL + kRows;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t S = g.seq, q0 = int64_t(blockIdx.x) * kRows, h = blockIdx.y, b = blockIdx.z;
  const int rows = tile_extent(S, q0);
  const int64_t base = b * S, grp = h / g.group;
  load_tile<T, KD>(sQ, qkv, g.qkv_cols, base + q0, rows, g.q_col(h), g.head_dim);
  for (int e = threadIdx.x; e < kRows * L::ldo; e += kThreads) sO[e] = 0.0f;
  if (threadIdx.x < kRows) {
    sM[threadIdx.x] = -INFINITY;
    sL[threadIdx.x] = 0.0f;
  }
  const int64_t key_end = causal ? q0 + rows : S;
  const int r0 = warp * 16;
  for (int64_t k0 = 0; k0 < key_end; k0 += kKeys) {
    __syncthreads();  // the previous tile's keys and values are no longer read
    const int keys = tile_extent(S, k0);
    load_tile<T, KD>(sK, qkv, g.qkv_cols, base + k0, keys, g.k_col(grp), g.head_dim);
    load_tile<T, KD>(sV, qkv, g.qkv_cols, base + k0, keys, g.v_col(grp), g.head_dim);
    __syncthreads();
    for (int n = 0; n < kKeys / 16; ++n)
      warp_product_nt<T, KD>(sQ + r0 * L::ld, sK, L::ld, sS + r0 * kLdS, kLdS, n);
    __syncwarp();
    for (int rr = 0; rr < 16; ++rr) {
      const int r = r0 + rr;
      const int64_t i = q0 + r;
      float s[2];
      for (int half = 0; half < 2; ++half) {
        const int c = lane + 32 * half;
        const int64_t j = k0 + c;
        const bool seen = c < keys && (!causal || j <= i);
        s[half] = seen ? sS[r * kLdS + c] * scale : -INFINITY;
      }
      const float m_old = sM[r], m_new = fmaxf(m_old, warp_max(fmaxf(s[0], s[1])));
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a row with no key seen yet stays at zero
      const float p0 = expf(s[0] - m_use), p1 = expf(s[1] - m_use);
      sP[r * kLdP + lane] = to_t<T>(p0);
      sP[r * kLdP + lane + 32] = to_t<T>(p1);
      const float sum = warp_sum(p0 + p1);
      __syncwarp();
      if (lane == 0) {
        const float alpha = expf(m_old - m_use);  // 0 while m_old is -inf
        sA[r] = alpha;
        sL[r] = sL[r] * alpha + sum;
        sM[r] = m_new;
      }
    }
    __syncwarp();
    for (int e = lane; e < 16 * KD; e += 32) sO[(r0 + e / KD) * L::ldo + e % KD] *= sA[r0 + e / KD];
    __syncwarp();
    for (int n = 0; n < KD / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, sO + r0 * L::ldo + n * 16, L::ldo, wmma::mem_row_major);
      warp_product_nn<T, kKeys>(acc, sP + r0 * kLdP, kLdP, sV, L::ld, n);
      wmma::store_matrix_sync(sO + r0 * L::ldo + n * 16, acc, L::ldo, wmma::mem_row_major);
    }
  }
  __syncthreads();
  if (threadIdx.x < kRows) {
    const int r = threadIdx.x;
    if (r < rows) lse[(b * g.heads + h) * S + q0 + r] = sM[r] + logf(sL[r]);
    sA[r] = 1.0f / sL[r];
  }
  __syncthreads();
  store_tile<T, KD>(out, g.out_cols, base + q0, rows, h * g.head_dim, g.head_dim, sO, L::ldo, sA);
}

// delta [batch, heads, seq] = Σ_c dO · O per row and head: one warp per (token, head).
template <class T>
__global__ void attention_delta_kernel(Geometry g, int64_t tokens, const T* __restrict__ dout,
                                       const T* __restrict__ out, float* __restrict__ delta) {
  const int64_t w = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (w >= tokens * g.heads) return;
  const int64_t t = w / g.heads, h = w % g.heads;
  float acc = 0.0f;
  for (int64_t c = lane; c < g.head_dim; c += 32) {
    const int64_t at = t * g.out_cols + h * g.head_dim + c;
    acc += static_cast<float>(dout[at]) * static_cast<float>(out[at]);
  }
  acc = warp_sum(acc);
  if (lane == 0) delta[((t / g.seq) * g.heads + h) * g.seq + t % g.seq] = acc;
}

template <class T, int KD>
struct BwdSmem {
  static constexpr int ld = ld_tile<KD>();
  static constexpr size_t a = 0, b = a + kRows * ld * sizeof(T), c = b + kRows * ld * sizeof(T),
                          d = c + kRows * ld * sizeof(T), s = d + kRows * ld * sizeof(T),
                          dp = s + kRows * kLdS * sizeof(float), p = dp + kRows * kLdS * sizeof(float),
                          ds = p + kRows * kLdP * sizeof(T), stats = ds + kRows * kLdP * sizeof(T),
                          bytes = stats + 2 * kRows * sizeof(float);
  static_assert(2 * kRows * ld * sizeof(T) >= kRows * (KD + 4) * sizeof(float), "output staging fits in two tiles");
};

// p = softmax probability and ds = p · (dp − delta) · scale of one (query i, key j) pair; zero where masked.
struct ScoreGrad {
  float p, ds;
};
__device__ __forceinline__ ScoreGrad score_grad(bool seen, float s, float dp, float scale, float lse, float delta) {
  if (!seen) return {0.0f, 0.0f};
  const float p = expf(s * scale - lse);
  return {p, p * (dp - delta) * scale};
}

// dQ: grid (query tiles, heads, batch). Tiles: a = Q, b = dO, c = K, d = V.
template <class T, int KD>
__global__ void __launch_bounds__(kThreads) attention_dq_kernel(Geometry g, bool causal, float scale,
                                                                const T* __restrict__ qkv, const T* __restrict__ dout,
                                                                const float* __restrict__ lse,
                                                                const float* __restrict__ delta, T* __restrict__ dqkv) {
  using L = BwdSmem<T, KD>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem + L::a);
  T* sdO = reinterpret_cast<T*>(smem + L::b);
  T* sK = reinterpret_cast<T*>(smem + L::c);
  T* sV = reinterpret_cast<T*>(smem + L::d);
  float* sS = reinterpret_cast<float*>(smem + L::s);
  float* sdP = reinterpret_cast<float*>(smem + L::dp);
  T* sdS = reinterpret_cast<T*>(smem + L::ds);
  float* sLse = reinterpret_cast<float*>(smem + L::stats);
  float* sDelta = sLse + kRows;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * 16;
  const int64_t S = g.seq, q0 = int64_t(blockIdx.x) * kRows, h = blockIdx.y, b = blockIdx.z;
  const int rows = tile_extent(S, q0);
  const int64_t base = b * S, grp = h / g.group, stat0 = (b * g.heads + h) * S + q0;
  load_tile<T, KD>(sQ, qkv, g.qkv_cols, base + q0, rows, g.q_col(h), g.head_dim);
  load_tile<T, KD>(sdO, dout, g.out_cols, base + q0, rows, h * g.head_dim, g.head_dim);
  if (threadIdx.x < kRows) {
    sLse[threadIdx.x] = threadIdx.x < rows ? lse[stat0 + threadIdx.x] : 0.0f;
    sDelta[threadIdx.x] = threadIdx.x < rows ? delta[stat0 + threadIdx.x] : 0.0f;
  }
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> dq[KD / 16];
  for (auto& f : dq) wmma::fill_fragment(f, 0.0f);
  const int64_t key_end = causal ? q0 + rows : S;
  for (int64_t k0 = 0; k0 < key_end; k0 += kKeys) {
    __syncthreads();
    const int keys = tile_extent(S, k0);
    load_tile<T, KD>(sK, qkv, g.qkv_cols, base + k0, keys, g.k_col(grp), g.head_dim);
    load_tile<T, KD>(sV, qkv, g.qkv_cols, base + k0, keys, g.v_col(grp), g.head_dim);
    __syncthreads();
    for (int n = 0; n < kKeys / 16; ++n) {
      warp_product_nt<T, KD>(sQ + r0 * L::ld, sK, L::ld, sS + r0 * kLdS, kLdS, n);
      warp_product_nt<T, KD>(sdO + r0 * L::ld, sV, L::ld, sdP + r0 * kLdS, kLdS, n);
    }
    __syncwarp();
    for (int e = lane; e < 16 * kKeys; e += 32) {
      const int r = r0 + e / kKeys, c = e % kKeys;
      const bool seen = r < rows && c < keys && (!causal || k0 + c <= q0 + r);
      sdS[r * kLdP + c] =
          to_t<T>(score_grad(seen, sS[r * kLdS + c], sdP[r * kLdS + c], scale, sLse[r], sDelta[r]).ds);
    }
    __syncwarp();
    for (int n = 0; n < KD / 16; ++n) warp_product_nn<T, kKeys>(dq[n], sdS + r0 * kLdP, kLdP, sK, L::ld, n);
  }
  __syncthreads();
  float* stage = reinterpret_cast<float*>(smem + L::c);  // the K and V tiles are done with
  for (int n = 0; n < KD / 16; ++n)
    wmma::store_matrix_sync(stage + r0 * (KD + 4) + n * 16, dq[n], KD + 4, wmma::mem_row_major);
  __syncthreads();
  store_tile<T, KD>(dqkv, g.qkv_cols, base + q0, rows, g.q_col(h), g.head_dim, stage, KD + 4, nullptr);
}

// dK and dV of a key/value group, summed over its query heads: grid (key tiles, kv groups, batch).
// Tiles: a = K, b = V, c = Q, d = dO; the warp's rows are keys, its columns queries (the scores transposed).
template <class T, int KD>
__global__ void __launch_bounds__(kThreads) attention_dkv_kernel(Geometry g, bool causal, float scale,
                                                                 const T* __restrict__ qkv,
                                                                 const T* __restrict__ dout,
                                                                 const float* __restrict__ lse,
                                                                 const float* __restrict__ delta,
                                                                 T* __restrict__ dqkv) {
  using L = BwdSmem<T, KD>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* sK = reinterpret_cast<T*>(smem + L::a);
  T* sV = reinterpret_cast<T*>(smem + L::b);
  T* sQ = reinterpret_cast<T*>(smem + L::c);
  T* sdO = reinterpret_cast<T*>(smem + L::d);
  float* sS = reinterpret_cast<float*>(smem + L::s);
  float* sdP = reinterpret_cast<float*>(smem + L::dp);
  T* sP = reinterpret_cast<T*>(smem + L::p);
  T* sdS = reinterpret_cast<T*>(smem + L::ds);
  float* sLse = reinterpret_cast<float*>(smem + L::stats);
  float* sDelta = sLse + kRows;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * 16;
  const int64_t S = g.seq, k0 = int64_t(blockIdx.x) * kKeys, grp = blockIdx.y, b = blockIdx.z;
  const int keys = tile_extent(S, k0);
  const int64_t base = b * S;
  load_tile<T, KD>(sK, qkv, g.qkv_cols, base + k0, keys, g.k_col(grp), g.head_dim);
  load_tile<T, KD>(sV, qkv, g.qkv_cols, base + k0, keys, g.v_col(grp), g.head_dim);
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> dk[KD / 16], dv[KD / 16];
  for (auto& f : dk) wmma::fill_fragment(f, 0.0f);
  for (auto& f : dv) wmma::fill_fragment(f, 0.0f);
  const int64_t q_begin = causal ? (k0 / kRows) * kRows : 0;
  for (int64_t h = grp * g.group; h < (grp + 1) * g.group; ++h) {
    for (int64_t q0 = q_begin; q0 < S; q0 += kRows) {
      __syncthreads();
      const int rows = tile_extent(S, q0);
      const int64_t stat0 = (b * g.heads + h) * S + q0;
      load_tile<T, KD>(sQ, qkv, g.qkv_cols, base + q0, rows, g.q_col(h), g.head_dim);
      load_tile<T, KD>(sdO, dout, g.out_cols, base + q0, rows, h * g.head_dim, g.head_dim);
      if (threadIdx.x < kRows) {
        sLse[threadIdx.x] = threadIdx.x < rows ? lse[stat0 + threadIdx.x] : 0.0f;
        sDelta[threadIdx.x] = threadIdx.x < rows ? delta[stat0 + threadIdx.x] : 0.0f;
      }
      __syncthreads();
      for (int n = 0; n < kRows / 16; ++n) {
        warp_product_nt<T, KD>(sK + r0 * L::ld, sQ, L::ld, sS + r0 * kLdS, kLdS, n);
        warp_product_nt<T, KD>(sV + r0 * L::ld, sdO, L::ld, sdP + r0 * kLdS, kLdS, n);
      }
      __syncwarp();
      for (int e = lane; e < 16 * kRows; e += 32) {
        const int r = r0 + e / kRows, c = e % kRows;  // key k0 + r, query q0 + c
        const bool seen = r < keys && c < rows && (!causal || k0 + r <= q0 + c);
        const ScoreGrad sg = score_grad(seen, sS[r * kLdS + c], sdP[r * kLdS + c], scale, sLse[c], sDelta[c]);
        sP[r * kLdP + c] = to_t<T>(sg.p);
        sdS[r * kLdP + c] = to_t<T>(sg.ds);
      }
      __syncwarp();
      for (int n = 0; n < KD / 16; ++n) {
        warp_product_nn<T, kRows>(dv[n], sP + r0 * kLdP, kLdP, sdO, L::ld, n);
        warp_product_nn<T, kRows>(dk[n], sdS + r0 * kLdP, kLdP, sQ, L::ld, n);
      }
    }
  }
  __syncthreads();
  float* stage = reinterpret_cast<float*>(smem + L::c);  // the Q and dO tiles are done with
  for (int n = 0; n < KD / 16; ++n)
    wmma::store_matrix_sync(stage + r0 * (KD + 4) + n * 16, dk[n], KD + 4, wmma::mem_row_major);
  __syncthreads();
  store_tile<T, KD>(dqkv, g.qkv_cols, base + k0, keys, g.k_col(grp), g.head_dim, stage, KD + 4, nullptr);
  __syncthreads();
  for (int n = 0; n < KD / 16; ++n)
    wmma::store_matrix_sync(stage + r0 * (KD + 4) + n * 16, dv[n], KD + 4, wmma::mem_row_major);
  __syncthreads();
  store_tile<T, KD>(dqkv, g.qkv_cols, base + k0, keys, g.v_col(grp), g.head_dim, stage, KD + 4, nullptr);
}

// Calls f.template operator()<T, KD>() for the element type and the smallest tile head dim that holds head_dim.
template <class F>
void dispatch(DType t, int64_t head_dim, F&& f) {
  dispatch_16bit(t, [&](auto tag) {
    using T = decltype(tag);
    if (head_dim <= 32) f.template operator()<T, 32>();
    else if (head_dim <= 64) f.template operator()<T, 64>();
    else f.template operator()<T, 128>();
  });
}

// The grid's z dimension holds the sequences, at most 65535 per launch: more run as chunks of whole sequences, each
// with its rows of every buffer (tokens × columns; the statistics are [batch, heads, seq]).
constexpr int64_t kMaxSequencesPerLaunch = 65535;

template <class F>
bool run_in_chunks(const AttentionLayout& l, int64_t tokens, F&& chunk) {
  const int64_t batch = tokens / l.seq;
  if (batch <= kMaxSequencesPerLaunch) return false;
  for (int64_t b0 = 0; b0 < batch; b0 += kMaxSequencesPerLaunch)
    chunk(b0 * l.seq, std::min(kMaxSequencesPerLaunch, batch - b0) * l.seq);
  return true;
}

template <class P>
P* rows_from(P* p, int64_t row, int64_t cols, DType t) {
  using Byte = std::conditional_t<std::is_const_v<P>, const char, char>;
  return reinterpret_cast<P*>(reinterpret_cast<Byte*>(p) + dtype_storage_bytes(t, row * cols));
}

}  // namespace

void attention_forward(const AttentionLayout& l, bool causal, float scale, int64_t tokens, const void* qkv, DType t,
                       void* out, float* lse, const Stream& stream) {
  if (run_in_chunks(l, tokens, [&](int64_t row, int64_t rows) {
        attention_forward(l, causal, scale, rows, rows_from(qkv, row, l.qkv_cols(), t), t,
                          rows_from(out, row, l.out_cols(), t), lse + row * l.heads, stream);
      }))
    return;
  if (mma_path_applies(l, t, {qkv, out})) {
    forward_mma(l, causal, scale, tokens, qkv, t, out, lse, stream);
    return;
  }
  const Geometry g = geometry_of(l);
  dispatch(t, l.head_dim, [&]<class T, int KD>() {
    launch<attention_fwd_kernel<T, KD>>(FwdSmem<T, KD>::bytes, tiles(l.seq, l.heads, tokens / l.seq), kThreads,
                                        stream, g, causal, scale, static_cast<const T*>(qkv), static_cast<T*>(out),
                                        lse);
  });
}

void attention_backward(const AttentionLayout& l, bool causal, float scale, int64_t tokens, const void* dout,
                        const void* qkv, const void* out, const float* lse, DType t, void* dqkv, float* delta,
                        const Stream& stream) {
  if (run_in_chunks(l, tokens, [&](int64_t row, int64_t rows) {
        attention_backward(l, causal, scale, rows, rows_from(dout, row, l.out_cols(), t),
                           rows_from(qkv, row, l.qkv_cols(), t), rows_from(out, row, l.out_cols(), t),
                           lse + row * l.heads, t, rows_from(dqkv, row, l.qkv_cols(), t), delta + row * l.heads, stream);
      }))
    return;
  const Geometry g = geometry_of(l);
  const int64_t batch = tokens / l.seq, warps = tokens * l.heads;
  dispatch_16bit(t, [&](auto tag) {
    using T = decltype(tag);
    attention_delta_kernel<T><<<static_cast<unsigned>((warps * 32 + 255) / 256), 256, 0, raw_stream(stream)>>>(
        g, tokens, static_cast<const T*>(dout), static_cast<const T*>(out), delta);
  });
  TE_CUDA_CHECK_LAUNCH();
  if (mma_path_applies(l, t, {dout, qkv, out, dqkv})) {
    backward_mma(l, causal, scale, tokens, dout, qkv, lse, delta, t, dqkv, stream);
    return;
  }
  dispatch(t, l.head_dim, [&]<class T, int KD>() {
    const auto* x = static_cast<const T*>(qkv);
    const auto* dy = static_cast<const T*>(dout);
    launch<attention_dq_kernel<T, KD>>(BwdSmem<T, KD>::bytes, tiles(l.seq, l.heads, batch), kThreads, stream, g,
                                       causal, scale, x, dy, lse, static_cast<const float*>(delta),
                                       static_cast<T*>(dqkv));
    launch<attention_dkv_kernel<T, KD>>(BwdSmem<T, KD>::bytes, tiles(l.seq, l.kv_heads, batch), kThreads, stream, g,
                                        causal, scale, x, dy, lse, static_cast<const float*>(delta),
                                        static_cast<T*>(dqkv));
  });
}

}  // namespace te::cuda
