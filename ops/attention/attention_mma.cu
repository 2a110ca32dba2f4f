// Register-resident attention kernels for head_dim 64 and 128 (bf16/f16), flash-attention 2 style: each warp owns
// 16 rows; scores, probabilities and the output accumulate in mma.m16n8k16 fragments and never touch shared memory,
// which holds only the tiles every warp reads (copied asynchronously, the next tile's copy overlapping this tile's
// products). Numerics as the general kernels of attention.cu describe: f32 scores, statistics and accumulators;
// probabilities and score gradients rounded to the input type for their products; a deterministic backward (dQ
// from a kernel over query tiles, dK/dV from one over key tiles, no atomics).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ops/attention/attention_common.cuh"
#include "ops/attention/warp_mma.cuh"

namespace te::cuda::attention_detail {
namespace {
using namespace warp_mma;

constexpr int kBwdQueries = 32;  // query rows per step of the dK/dV kernel (keeps its accumulators in registers)
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
constexpr int ld_of() {
  return D + 8;  // shared rows padded by 16 bytes: the 8 rows of an ldmatrix fall in 8 different bank groups
}

// ROWS × D elements from rows [row0, row0 + ROWS) of a matrix with `stride` elements per row, columns
// [col, col + D), into a shared tile; rows at or past `valid` become zeros.
template <class T, int ROWS, int D>
__device__ __forceinline__ void load_tile(T* tile, const T* src, int64_t stride, int64_t row0, int valid,
                                          int64_t col) {
  constexpr int kChunks = ROWS * D / 8, kPerRow = D / 8;
#pragma unroll
  for (int c = threadIdx.x; c < kChunks; c += kThreads) {
    const int r = c / kPerRow, k = (c % kPerRow) * 8;
    const bool ok = r < valid;
    copy16_async(tile + r * ld_of<D>() + k, ok ? src + (row0 + r) * stride + col + k : src, ok);
  }
}

// Writes the warp's 16 × D accumulator rows (times row_scale[0] / [1] for the thread's two rows), rounded, to rows
// row0 + warp·16 … of dst at column col; rows at or past `valid` (tile-relative) are skipped.
template <class T, int D>
__device__ __forceinline__ void store_rows(T* dst, int64_t stride, int64_t row0, int valid, int64_t col,
                                           const float (&acc)[D / 8][4], const float (&row_scale)[2]) {
  const int lane = threadIdx.x % 32, r = (threadIdx.x / 32) * 16 + lane / 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    if (r + 8 * half >= valid) continue;
    T* out = dst + (row0 + r + 8 * half) * stride + col + 2 * (lane % 4);
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<uint32_t*>(out + n * 8) =
          pack<T>(acc[n][2 * half] * row_scale[half], acc[n][2 * half + 1] * row_scale[half]);
  }
}

// The query tile of this block. Causal tiles cost in proportion to their index, so the most expensive start first
// and the cheap ones fill the last wave.
__device__ __forceinline__ unsigned query_tile(bool causal) {
  return causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
}

// What a block over one query tile of one head reads: its rows, its group's key and value columns, and the key
// tiles it visits (causal attention stops at the diagonal). Used by the forward and the dQ kernel.
struct QueryTile {
  int64_t seq, q0, head, batch, base, kc, vc;
  int rows, key_tiles;
  __device__ QueryTile(const Geometry& g, bool causal)
      : seq(g.seq),
        q0(int64_t(query_tile(causal)) * kTile),
        head(blockIdx.y),
        batch(blockIdx.z),
        base(batch * seq),
        kc(g.k_col(head / g.group)),
        vc(g.v_col(head / g.group)),
        rows(tile_extent(seq, q0)),
        key_tiles(static_cast<int>(((causal ? q0 + rows : seq) + kTile - 1) / kTile)) {}
  // Key tile t's keys and values into the shared tiles k and v (asynchronous; the caller commits).
  template <class T, int D>
  __device__ void load_kv(T* k, T* v, const T* qkv, int64_t qkv_cols, int t) const {
    const int64_t k0 = int64_t(t) * kTile;
    load_tile<T, kTile, D>(k, qkv, qkv_cols, base + k0, tile_extent(seq, k0), kc);
    load_tile<T, kTile, D>(v, qkv, qkv_cols, base + k0, tile_extent(seq, k0), vc);
  }
  // Whether key tile t needs its keys checked against the sequence's end or the causal diagonal.
  __device__ bool edge(bool causal, int t) const {
    const int64_t k0 = int64_t(t) * kTile;
    return k0 + kTile > seq || (causal && k0 + kTile > q0);
  }
};

template <int D>
struct FwdLayout {  // shared memory of the forward, in elements
  static constexpr int tile = kTile * ld_of<D>();
  static constexpr int q = 0, k = tile, v = 3 * tile;  // K and V double-buffered
  template <class T>
  static constexpr size_t bytes() {
    return 5 * tile * sizeof(T);
  }
};

// grid (query tiles, heads, batch).
template <class T, int D>
__global__ void __launch_bounds__(kThreads, 2) forward_kernel(Geometry g, bool causal, float scale,
                                                              const T* __restrict__ qkv, T* __restrict__ out,
                                                              float* __restrict__ lse) {
  using L = FwdLayout<D>;
  constexpr int ld = ld_of<D>(), kN = kTile / 8;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const QueryTile w(g, causal);
  const int64_t S = w.seq, q0 = w.q0;
  load_tile<T, kTile, D>(smem + L::q, qkv, g.qkv_cols, w.base + q0, w.rows, g.q_col(w.head));
  w.load_kv<T, D>(smem + L::k, smem + L::v, qkv, g.qkv_cols, 0);
  commit_async();

  uint32_t qf[D / 16][4];
  float o[D / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int r_lo = warp * 16 + lane / 4;  // the thread's rows: r_lo and r_lo + 8 of the tile
  const float scale_log2 = scale * kLog2e;
  for (int t = 0; t < w.key_tiles; ++t) {
    const int buf = t & 1;
    // The next tile into the other buffer, which every warp finished with last iteration.
    if (t + 1 < w.key_tiles)
      w.load_kv<T, D>(smem + L::k + (buf ^ 1) * L::tile, smem + L::v + (buf ^ 1) * L::tile, qkv, g.qkv_cols, t + 1);
    commit_async();
    wait_async<1>();  // this tile's copies (and Q's) are done; the next tile's may still be in flight
    __syncthreads();
    if (t == 0) {
#pragma unroll
      for (int k = 0; k < D / 16; ++k) load_a(qf[k], smem + L::q + warp * 16 * ld, ld, k * 16);
    }
    float s[kN][4] = {};
    gemm_abt<T, kTile, D>(s, qf, smem + L::k + buf * L::tile, ld);

    const int64_t k0 = int64_t(t) * kTile;
    const bool edge = w.edge(causal, t);
#pragma unroll
    for (int n = 0; n < kN; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t j = k0 + n * 8 + 2 * (lane % 4) + (e & 1), i = q0 + r_lo + (e >= 2 ? 8 : 0);
        s[n][e] = (edge && (j >= S || (causal && j > i))) ? -INFINITY : s[n][e] * scale_log2;  // log2 units
      }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float mx = m[half];
#pragma unroll
      for (int n = 0; n < kN; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * half], s[n][2 * half + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float mu = mx == -INFINITY ? 0.f : mx;  // no key seen yet: everything stays zero
      const float alpha = exp2f(m[half] - mu);
      m[half] = mx;
      l[half] *= alpha;
#pragma unroll
      for (int n = 0; n < kN; ++n) {
        const float p0 = exp2f(s[n][2 * half] - mu), p1 = exp2f(s[n][2 * half + 1] - mu);
        s[n][2 * half] = p0;
        s[n][2 * half + 1] = p1;
        l[half] += p0 + p1;
      }
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        o[n][2 * half] *= alpha;
        o[n][2 * half + 1] *= alpha;
      }
    }
    uint32_t pf[kTile / 16][4];
    to_a<T, kTile>(pf, s);
    gemm_pb<T, D, kTile>(o, pf, smem + L::v + buf * L::tile, ld);
    __syncthreads();  // every warp is done with this buffer before the next iteration refills it
  }
  float inv[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    l[half] += __shfl_xor_sync(0xffffffffu, l[half], 1);
    l[half] += __shfl_xor_sync(0xffffffffu, l[half], 2);
    inv[half] = 1.f / l[half];
    const int r = r_lo + 8 * half;
    if (lane % 4 == 0 && r < w.rows)
      lse[(w.batch * g.heads + w.head) * S + q0 + r] = m[half] / kLog2e + logf(l[half]);
  }
  store_rows<T, D>(out, g.out_cols, w.base + q0, w.rows, w.head * g.head_dim, o, inv);
}

template <int D>
struct DqLayout {  // Q and dO once; K and V double-buffered
  static constexpr int tile = kTile * ld_of<D>();
  static constexpr int q = 0, dout = tile, k = 2 * tile, v = 4 * tile;
  template <class T>
  static constexpr size_t bytes() {
    return 6 * tile * sizeof(T);
  }
};

// dQ = Σ over key tiles of dS · K, dS = P ⊙ (dP − delta) · scale, P and dP = dO · Vᵀ recomputed.
// grid (query tiles, heads, batch).
template <class T, int D>
__global__ void __launch_bounds__(kThreads, 2) dq_kernel(Geometry g, bool causal, float scale,
                                                         const T* __restrict__ qkv, const T* __restrict__ dout,
                                                         const float* __restrict__ lse,
                                                         const float* __restrict__ delta, T* __restrict__ dqkv) {
  using L = DqLayout<D>;
  constexpr int ld = ld_of<D>(), kN = kTile / 8;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const QueryTile w(g, causal);
  const int64_t S = w.seq, q0 = w.q0;
  const int r_lo = warp * 16 + lane / 4;
  load_tile<T, kTile, D>(smem + L::q, qkv, g.qkv_cols, w.base + q0, w.rows, g.q_col(w.head));
  load_tile<T, kTile, D>(smem + L::dout, dout, g.out_cols, w.base + q0, w.rows, w.head * g.head_dim);
  w.load_kv<T, D>(smem + L::k, smem + L::v, qkv, g.qkv_cols, 0);
  commit_async();
  float lse2[2], dlt[2];  // the thread's rows' statistics (log2 units for lse)
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = r_lo + 8 * half;
    const int64_t at = (w.batch * g.heads + w.head) * S + q0 + r;
    lse2[half] = r < w.rows ? lse[at] * kLog2e : INFINITY;  // padding rows: P = 0
    dlt[half] = r < w.rows ? delta[at] : 0.f;
  }
  const float scale_log2 = scale * kLog2e;
  float dq[D / 8][4] = {};
  for (int t = 0; t < w.key_tiles; ++t) {
    const int buf = t & 1;
    if (t + 1 < w.key_tiles)
      w.load_kv<T, D>(smem + L::k + (buf ^ 1) * L::tile, smem + L::v + (buf ^ 1) * L::tile, qkv, g.qkv_cols, t + 1);
    commit_async();
    wait_async<1>();
    __syncthreads();
    const T* sk = smem + L::k + buf * L::tile;
    float s[kN][4] = {}, dp[kN][4] = {};
    gemm_abt<T, kTile, D>(s, smem + L::q + warp * 16 * ld, sk, ld);
    gemm_abt<T, kTile, D>(dp, smem + L::dout + warp * 16 * ld, smem + L::v + buf * L::tile, ld);
    const int64_t k0 = int64_t(t) * kTile;
    const bool edge = w.edge(causal, t);
#pragma unroll
    for (int n = 0; n < kN; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int half = e >= 2;
        const int64_t j = k0 + n * 8 + 2 * (lane % 4) + (e & 1), i = q0 + r_lo + 8 * half;
        const bool seen = !edge || (j < S && (!causal || j <= i));
        const float p = seen ? exp2f(s[n][e] * scale_log2 - lse2[half]) : 0.f;
        s[n][e] = p * (dp[n][e] - dlt[half]) * scale;  // dS
      }
    uint32_t dsf[kTile / 16][4];
    to_a<T, kTile>(dsf, s);
    gemm_pb<T, D, kTile>(dq, dsf, sk, ld);
    __syncthreads();
  }
  const float one[2] = {1.f, 1.f};
  store_rows<T, D>(dqkv, g.qkv_cols, w.base + q0, w.rows, g.q_col(w.head), dq, one);
}

template <int D>
struct DkvLayout {  // K and V once; Q and dO tiles of kBwdQueries rows double-buffered; their statistics
  static constexpr int kv_tile = kTile * ld_of<D>(), q_tile = kBwdQueries * ld_of<D>();
  static constexpr int k = 0, v = kv_tile, q = 2 * kv_tile, dout = q + 2 * q_tile, end = dout + 2 * q_tile;
  template <class T>
  static constexpr size_t stats() {  // byte offset of lse (×2 buffers) then delta (×2)
    return end * sizeof(T);
  }
  template <class T>
  static constexpr size_t bytes() {
    return stats<T>() + 4 * kBwdQueries * sizeof(float);
  }
};

// dK and dV of one key/value group, summed over its query heads and every query tile: rows are keys, columns
// queries (the scores transposed). grid (key tiles, kv groups, batch).
template <class T, int D>
__global__ void __launch_bounds__(kThreads, 2) dkv_kernel(Geometry g, bool causal, float scale,
                                                          const T* __restrict__ qkv, const T* __restrict__ dout,
                                                          const float* __restrict__ lse,
                                                          const float* __restrict__ delta, T* __restrict__ dqkv) {
  using L = DkvLayout<D>;
  constexpr int ld = ld_of<D>(), kN = kBwdQueries / 8;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  float* s_lse = reinterpret_cast<float*>(smem_raw + L::template stats<T>());  // [2][kBwdQueries], log2 units
  float* s_delta = s_lse + 2 * kBwdQueries;                                     // [2][kBwdQueries]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t S = g.seq, k0 = int64_t(blockIdx.x) * kTile, grp = blockIdx.y, b = blockIdx.z, base = b * S;
  const int keys = tile_extent(S, k0);
  const int64_t kc = g.k_col(grp), vc = g.v_col(grp);
  const int r_lo = warp * 16 + lane / 4;  // key rows r_lo, r_lo + 8 of the tile

  // The work list: (head of the group, query tile) pairs; causal attention skips the tiles before this key tile.
  const int64_t q_begin = causal ? (k0 / kBwdQueries) * kBwdQueries : 0;
  const int per_head = static_cast<int>((S - q_begin + kBwdQueries - 1) / kBwdQueries);
  const int steps = per_head * static_cast<int>(g.group);
  auto issue = [&](int step, int buf) {  // the Q and dO tile of a step, and its rows' statistics
    const int64_t h = grp * g.group + step / per_head, q0 = q_begin + int64_t(step % per_head) * kBwdQueries;
    const int rows = S - q0 < kBwdQueries ? static_cast<int>(S - q0) : kBwdQueries;
    load_tile<T, kBwdQueries, D>(smem + L::q + buf * L::q_tile, qkv, g.qkv_cols, base + q0, rows, g.q_col(h));
    load_tile<T, kBwdQueries, D>(smem + L::dout + buf * L::q_tile, dout, g.out_cols, base + q0, rows,
                                 h * g.head_dim);
    if (threadIdx.x < kBwdQueries) {
      const int64_t at = (b * g.heads + h) * S + q0 + threadIdx.x;
      const bool ok = static_cast<int>(threadIdx.x) < rows;
      s_lse[buf * kBwdQueries + threadIdx.x] = ok ? lse[at] * kLog2e : INFINITY;
      s_delta[buf * kBwdQueries + threadIdx.x] = ok ? delta[at] : 0.f;
    }
  };
  load_tile<T, kTile, D>(smem + L::k, qkv, g.qkv_cols, base + k0, keys, kc);
  load_tile<T, kTile, D>(smem + L::v, qkv, g.qkv_cols, base + k0, keys, vc);
  issue(0, 0);
  commit_async();

  const float scale_log2 = scale * kLog2e;
  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  for (int step = 0; step < steps; ++step) {
    const int buf = step & 1;
    if (step + 1 < steps) issue(step + 1, buf ^ 1);
    commit_async();
    wait_async<1>();
    __syncthreads();  // also publishes the statistics written with plain stores
    const T* sq = smem + L::q + buf * L::q_tile;
    const T* sdo = smem + L::dout + buf * L::q_tile;
    const int64_t q0 = q_begin + int64_t(step % per_head) * kBwdQueries;
    float st[kN][4] = {}, dpt[kN][4] = {};
    gemm_abt<T, kBwdQueries, D>(st, smem + L::k + warp * 16 * ld, sq, ld);
    gemm_abt<T, kBwdQueries, D>(dpt, smem + L::v + warp * 16 * ld, sdo, ld);
#pragma unroll
    for (int n = 0; n < kN; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = n * 8 + 2 * (lane % 4) + (e & 1);
        const int64_t j = k0 + r_lo + (e >= 2 ? 8 : 0), i = q0 + c;
        const bool seen = j < S && (!causal || j <= i);  // padding queries have lse = ∞, so P = 0
        const float p = seen ? exp2f(st[n][e] * scale_log2 - s_lse[buf * kBwdQueries + c]) : 0.f;
        dpt[n][e] = p * (dpt[n][e] - s_delta[buf * kBwdQueries + c]) * scale;  // dSᵀ
        st[n][e] = p;                                                           // Pᵀ
      }
    uint32_t pf[kBwdQueries / 16][4], dsf[kBwdQueries / 16][4];
    to_a<T, kBwdQueries>(pf, st);
    to_a<T, kBwdQueries>(dsf, dpt);
    gemm_pb<T, D, kBwdQueries>(dv, pf, sdo, ld);
    gemm_pb<T, D, kBwdQueries>(dk, dsf, sq, ld);
    __syncthreads();
  }
  const float one[2] = {1.f, 1.f};
  store_rows<T, D>(dqkv, g.qkv_cols, base + k0, keys, kc, dk, one);
  store_rows<T, D>(dqkv, g.qkv_cols, base + k0, keys, vc, dv, one);
}

// Calls f.template operator()<T, D>() for the element type and head dim (64 or 128).
template <class F>
void dispatch_mma(DType t, int64_t head_dim, F&& f) {
  dispatch_16bit(t, [&](auto tag) {
    using T = decltype(tag);
    if (head_dim == 64) f.template operator()<T, 64>();
    else f.template operator()<T, 128>();
  });
}

}  // namespace

bool mma_path_applies(const AttentionLayout& l, DType t, std::initializer_list<const void*> buffers) {
  if (!cuda_attention_register_resident(t, l.head_dim)) return false;
  for (const void* p : buffers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;  // rows are then 16-byte aligned too (D % 8 == 0)
  return true;
}

void forward_mma(const AttentionLayout& l, bool causal, float scale, int64_t tokens, const void* qkv, DType t,
                 void* out, float* lse, const Stream& stream) {
  const Geometry g = geometry_of(l);
  dispatch_mma(t, l.head_dim, [&]<class T, int D>() {
    launch<forward_kernel<T, D>>(FwdLayout<D>::template bytes<T>(), tiles(l.seq, l.heads, tokens / l.seq), kThreads,
                                 stream, g, causal, scale, static_cast<const T*>(qkv), static_cast<T*>(out), lse);
  });
}

void backward_mma(const AttentionLayout& l, bool causal, float scale, int64_t tokens, const void* dout,
                  const void* qkv, const float* lse, const float* delta, DType t, void* dqkv, const Stream& stream) {
  const Geometry g = geometry_of(l);
  const int64_t batch = tokens / l.seq;
  dispatch_mma(t, l.head_dim, [&]<class T, int D>() {
    const auto* x = static_cast<const T*>(qkv);
    const auto* dy = static_cast<const T*>(dout);
    launch<dq_kernel<T, D>>(DqLayout<D>::template bytes<T>(), tiles(l.seq, l.heads, batch), kThreads, stream, g,
                            causal, scale, x, dy, lse, delta, static_cast<T*>(dqkv));
    launch<dkv_kernel<T, D>>(DkvLayout<D>::template bytes<T>(), tiles(l.seq, l.kv_heads, batch), kThreads, stream,
                             g, causal, scale, x, dy, lse, delta, static_cast<T*>(dqkv));
  });
}

}  // namespace te::cuda::attention_detail
