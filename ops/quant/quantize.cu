// CUDA quantizers, bit-exact with quantize_ref.cpp: every scale and element goes through quant_block.h.
// One CTA owns a 128x128 tile of x (f32 in shared memory, loaded with 16-byte vectors when the layout allows) and
// writes every requested copy from it in one pass:
//   2D tile amaxes → row-wise copy (a warp per tile row, 4 elements per lane, block amax by xor-shuffles within
//   the lanes of one block) → RHT of 16-token groups in place (NVFP4 column-wise) → column-wise copy (a warp per
//   tile column). 128 is a multiple of every block size, so no block straddles two CTAs.
// Amax reductions use max only (order-independent), so every launch gives the same bits.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "engine/cuda_check.h"
#include "engine/device.h"
#include "engine/error.h"
#include "ops/quant/quant_block.h"
#include "ops/quant/quant_fast_common.cuh"
#include "ops/quant/quant_kernels.h"
#include "ops/quant/quant_pre_act.cuh"
#include "ops/quant/dequantize_fast.h"
#include "ops/quant/quantize_fast.h"
#include "ops/quant/quantize_nvfp4.h"

namespace te {
namespace {

constexpr int kTile = 128, kThreads = 256, kWarps = kThreads / 32, kLd = kTile + 1;
cudaStream_t st(const Stream& s) { return static_cast<cudaStream_t>(s.handle()); }
__device__ __forceinline__ void atomic_max_nonneg(float* addr, float v) {
  atomicMax(reinterpret_cast<unsigned int*>(addr), __float_as_uint(v));  // non-negative floats order as uints
}
__device__ __forceinline__ void atomic_max_nonneg_u(unsigned* addr, float v) { atomicMax(addr, __float_as_uint(v)); }

// Loads tile [m0, m0+128) x [k0, k0+128) of x into s (zeros outside x).
__device__ void load_tile(const QuantInput& x, int64_t m0, int64_t k0, float* s) {
  const int esize = x.dtype == DType::f32 ? 4 : 2, V = 16 / esize;
  const bool vec = x.stride_k == 1 && x.K % V == 0 && x.stride_m % V == 0 &&
                   (reinterpret_cast<uintptr_t>(x.data) & 15) == 0;
  if (vec) {
    for (int i = threadIdx.x; i < kTile * kTile / V; i += kThreads) {
      const int rr = i / (kTile / V), cc = (i % (kTile / V)) * V;
      const int64_t m = m0 + rr, k = k0 + cc;
      float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      if (m < x.M && k < x.K) {
        const uint4 raw = *reinterpret_cast<const uint4*>(static_cast<const char*>(x.data) +
                                                         (m * x.stride_m + k) * esize);
        for (int j = 0; j < V; ++j) v[j] = load_f32(&raw, x.dtype, j);
      }
      for (int j = 0; j < V; ++j) s[rr * kLd + cc + j] = v[j];
    }
  } else {
    for (int i = threadIdx.x; i < kTile * kTile; i += kThreads) {
      const int rr = i / kTile, cc = i % kTile;
      const int64_t m = m0 + rr, k = k0 + cc;
      s[rr * kLd + cc] = (m < x.M && k < x.K) ? load_f32(x.data, x.dtype, m * x.stride_m + k * x.stride_k) : 0.f;
    }
  }
}

struct CopyCtx {
  const QuantParams* p;
  const QuantCopyOut* out;
  DType in;
  float tensor_amax;  // per-tensor amax of this copy (per-tensor fp8, NVFP4)
  float s_enc;
  uint32_t copy;
  void* image;  // the copy's image in x's [M, K] order, or null
  const ImageSpec* spec;
};

// Element (r, c) of a copy's view A goes to image index r * C + c (row-wise) or c * R + r (A = xᵀ).
__device__ __forceinline__ void store_image(const CopyCtx& ctx, int64_t r, int64_t c, float v) {
  const CopyLayout& L = ctx.out->layout;
  store_f32(ctx.image, ctx.spec->dtype, ctx.copy ? c * L.R + r : r * L.C + c, v);
}

// One row segment of A (128 elements from c0, 4 per lane) of row r: block amax, scale, codes, stores.
// `v` holds this lane's 4 values; `tile_amax` is the 2D tile amax (2D formats) for this lane's block.
__device__ void quantize_segment(const CopyCtx& ctx, int64_t r, int64_t c0, const float (&v)[4], float tile_amax,
                                 float* mx_factor_out, float* mx_decoded_out) {
  const QuantParams& p = *ctx.p;
  const CopyLayout& L = ctx.out->layout;
  const int lane = threadIdx.x & 31;
  const int B = L.block ? L.block : kTile;
  const int G = B / 4;  // lanes per block
  float a = 0.f;
  for (int j = 0; j < 4; ++j) a = amax_fold(a, v[j]);
  for (int off = 1; off < G; off <<= 1) a = fmaxf(a, __shfl_xor_sync(0xFFFFFFFFu, a, off));
  if (r >= L.R) return;
  const int64_t c = c0 + 4 * lane;
  const int64_t b = L.block ? c / B : 0;
  if (b * B >= L.C) return;
  float amax = L.two_d ? tile_amax : a;
  if (p.format == QuantFormat::fp8_per_tensor) amax = ctx.tensor_amax;
  const BlockScale bs = block_scale(p, ctx.in, amax, ctx.s_enc);
  if (L.block != 0 && lane % G == 0) store_block_scale(p, ctx.out->scale_inv, scale_offset(L, r, b), bs);
  if (c >= L.C) return;
  const float decoded = decoded_block_scale(p, bs);
  if (mx_factor_out) {  // MXFP8 column-wise: data is written later in x's [M, K] order
    *mx_factor_out = bs.factor;
    *mx_decoded_out = decoded;
    return;
  }
  uint8_t q[4];
  for (int j = 0; j < 4; ++j)
    q[j] = (c + j < L.C) ? encode_element(p, v[j], bs.factor, static_cast<uint64_t>(r * L.C + c + j), ctx.copy) : 0;
  if (ctx.image) {
    const float s_dec = image_s_dec(*ctx.spec, ctx.s_enc);
    for (int j = 0; j < 4 && c + j < L.C; ++j) store_image(ctx, r, c + j, image_value(p, q[j], decoded, s_dec));
  }
  uint8_t* data = ctx.out->data;
  const int64_t n = data_offset(L, r, c);
  if (L.fp4) {
    const uint8_t b0 = static_cast<uint8_t>(q[0] | (q[1] << 4)), b1 = static_cast<uint8_t>(q[2] | (q[3] << 4));
    const int64_t byte = n >> 1;  // n is even: c is a multiple of 4 and data_ld is even
    if (c + 2 < L.C && (byte & 1) == 0) {
      *reinterpret_cast<uint16_t*>(data + byte) = static_cast<uint16_t>(b0 | (b1 << 8));
    } else {
      data[byte] = b0;
      if (c + 2 < L.C) data[byte + 1] = b1;
    }
  } else if (c + 3 < L.C && (n & 3) == 0) {
    *reinterpret_cast<uint32_t*>(data + n) = q[0] | (q[1] << 8) | (q[2] << 16) | (static_cast<uint32_t>(q[3]) << 24);
  } else {
    for (int j = 0; j < 4 && c + j < L.C; ++j) data[n + j] = q[j];
  }
}

__global__ void __launch_bounds__(kThreads) quantize_kernel(QuantInput x, QuantParams p, QuantOutputs out) {
  extern __shared__ float smem[];
  float* s = smem;                                              // [128][129] tile of x
  unsigned* tile_amax = reinterpret_cast<unsigned*>(s + kTile * kLd);  // [8][8] 2D block amaxes (bits)
  float* mx_factor = reinterpret_cast<float*>(tile_amax + 64);  // [4][128] MXFP8 column-wise factors
  float* mx_decoded = mx_factor + 4 * kTile;                    // [4][128] and their decoded scales (images)
  // M tiles run fastest (see quantize_fast.cu: long write runs for the column-wise copy).
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kTile, k0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  // Block geometry from the layouts (the format table is host data).
  const CopyLayout& L0 = p.rowwise ? out.row.layout : out.col.layout;
  const int block = L0.block;
  const bool two_d = L0.two_d;
  if (threadIdx.x < 64) tile_amax[threadIdx.x] = 0u;
  if (p.format == QuantFormat::fp8_per_tensor && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
    // One scale_inv per tensor, written even when the tensor is empty.
    const BlockScale bs = block_scale(p, x.dtype, out.row_amax ? *out.row_amax : 0.f, 1.f);
    if (p.rowwise) store_block_scale(p, out.row.scale_inv, 0, bs);
    if (p.columnwise) store_block_scale(p, out.col.scale_inv, 0, bs);
  }
  load_tile(x, m0, k0, s);
  __syncthreads();

  if (two_d) {  // amax of each B x B tile inside this CTA tile (shared by both copies: no RHT in 2D)
    const int B = block, nt = kTile / B;
    const int cc = threadIdx.x % kTile;
    float a = 0.f;
    int cur = -1;
    for (int rr = threadIdx.x / kTile; rr < kTile; rr += kThreads / kTile) {
      const int t = (rr / B) * nt + cc / B;
      if (t != cur) {
        if (cur >= 0) atomic_max_nonneg_u(&tile_amax[cur], a);
        cur = t, a = 0.f;
      }
      a = amax_fold(a, s[rr * kLd + cc]);
    }
    atomic_max_nonneg_u(&tile_amax[cur], a);
    __syncthreads();
  }
  const bool fp4 = nvfp4_format(p.format);
  auto tile_amax_of = [&](int rr, int cc) {
    return two_d ? __uint_as_float(tile_amax[(rr / block) * (kTile / block) + cc / block]) : 0.f;
  };

  if (p.rowwise) {
    CopyCtx ctx{&p, &out.row, x.dtype, out.row_amax ? *out.row_amax : 0.f, 1.f, 0, out.row_image, &out.image};
    if (fp4) ctx.s_enc = nvfp4_global_encode_scale(ctx.tensor_amax);
    for (int rr = warp; rr < kTile; rr += kWarps) {
      float v[4];
      for (int j = 0; j < 4; ++j) v[j] = s[rr * kLd + 4 * lane + j];
      quantize_segment(ctx, m0 + rr, k0, v, tile_amax_of(rr, 4 * lane), nullptr, nullptr);
    }
  }
  if (!p.columnwise) return;
  if (p.rht) {  // RHT(xᵀ): each full group of 16 tokens of each feature, in place
    __syncthreads();
    for (int t = threadIdx.x; t < kTile * (kTile / 16); t += kThreads) {
      const int cc = t % kTile, g = t / kTile;
      if (m0 + g * 16 + 16 > x.M) continue;
      float v[16], y[16];
      for (int j = 0; j < 16; ++j) v[j] = s[(g * 16 + j) * kLd + cc];
      rht16_forward(v, y);
      for (int j = 0; j < 16; ++j) s[(g * 16 + j) * kLd + cc] = y[j];
    }
    __syncthreads();
  }
  const bool mx_col = p.format == QuantFormat::mxfp8;
  CopyCtx ctx{&p, &out.col, x.dtype, out.col_amax ? *out.col_amax : 0.f, 1.f, 1, out.col_image, &out.image};
  if (fp4) ctx.s_enc = nvfp4_global_encode_scale(ctx.tensor_amax);
  for (int cc = warp; cc < kTile; cc += kWarps) {  // A row r = k0 + cc, A columns c = m0 + 4*lane + j
    float v[4];
    for (int j = 0; j < 4; ++j) v[j] = s[(4 * lane + j) * kLd + cc];
    const int mx = (lane / 8) * kTile + cc;
    quantize_segment(ctx, k0 + cc, m0, v, tile_amax_of(4 * lane, cc), mx_col ? &mx_factor[mx] : nullptr,
                     mx_col ? &mx_decoded[mx] : nullptr);
  }
  if (!mx_col) return;
  __syncthreads();
  // MXFP8 column-wise data keeps x's [M, K] order: write it row by row with the factors of its 32-row blocks.
  const CopyLayout& L = out.col.layout;  // A = xᵀ [K, M], stored [M, K] (ld = K)
  for (int rr = warp; rr < kTile; rr += kWarps) {
    const int64_t m = m0 + rr, k = k0 + 4 * lane;
    if (m >= x.M || k >= x.K) continue;
    uint8_t q[4];
    for (int j = 0; j < 4; ++j) q[j] = cast_fp8(s[rr * kLd + 4 * lane + j] * mx_factor[(rr / 32) * kTile + 4 * lane + j], p.data_dtype);
    if (out.col_image)
      for (int j = 0; j < 4 && k + j < x.K; ++j)
        store_f32(out.col_image, out.image.dtype, m * x.K + k + j,
                  image_value(p, q[j], mx_decoded[(rr / 32) * kTile + 4 * lane + j], 1.0f));
    const int64_t n = data_offset(L, k, m);
    if (k + 3 < x.K && (n & 3) == 0) {
      *reinterpret_cast<uint32_t*>(out.col.data + n) = q[0] | (q[1] << 8) | (q[2] << 16) | (static_cast<uint32_t>(q[3]) << 24);
    } else {
      for (int j = 0; j < 4 && k + j < x.K; ++j) out.col.data[n + j] = q[j];
    }
  }
}

// amax[0] = max(amax[0], max|x|); with col_amax: max|RHT(xᵀ)| over full 16-token groups, raw values elsewhere.
// Dense 16-byte-aligned input is read with 16-byte loads; one atomic per CTA after a warp and CTA reduction.
__global__ void amax_kernel(QuantInput x, float* amax, float* col_amax) {
  __shared__ float warp_a[32], warp_ac[32];
  float a = 0.f, ac = 0.f;
  const int64_t n = x.M * x.K;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const bool dense = x.stride_k == 1 && x.stride_m == x.K;  // no index arithmetic per element
  const int esize = x.dtype == DType::f32 ? 4 : 2, V = 16 / esize;
  const bool vec = dense && (reinterpret_cast<uintptr_t>(x.data) & 15) == 0;
  const int64_t nvec = vec ? n / V : 0;
  for (int64_t i = first; i < nvec; i += stride) {
    const uint4 raw = reinterpret_cast<const uint4*>(x.data)[i];
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {  // by constant word: the load stays in registers
      if (V == 4) {
        a = amax_fold(a, __uint_as_float(w[j]));
      } else {
        const uint16_t lo = static_cast<uint16_t>(w[j] & 0xFFFFu), hi = static_cast<uint16_t>(w[j] >> 16);
        a = amax_fold(a, x.dtype == DType::bf16 ? bf16_to_f32(lo) : f16_to_f32(lo));
        a = amax_fold(a, x.dtype == DType::bf16 ? bf16_to_f32(hi) : f16_to_f32(hi));
      }
    }
  }
  for (int64_t i = nvec * V + first; i < n; i += stride) {
    const int64_t off = dense ? i : (i / x.K) * x.stride_m + (i % x.K) * x.stride_k;
    a = amax_fold(a, load_f32(x.data, x.dtype, off));
  }
  if (col_amax) {  // one task per (feature k, group g of 16 tokens)
    const int64_t groups = (x.M + 15) / 16, tasks = groups * x.K;
    for (int64_t t = first; t < tasks; t += stride) {
      const int64_t k = t % x.K, m0 = (t / x.K) * 16;
      float v[16], y[16];
      const int cnt = static_cast<int>(x.M - m0 < 16 ? x.M - m0 : 16);
      // Constant bounds (zeros past the tokens fold to nothing): v and y stay in registers.
#pragma unroll
      for (int j = 0; j < 16; ++j) v[j] = j < cnt ? load_f32(x.data, x.dtype, (m0 + j) * x.stride_m + k * x.stride_k) : 0.f;
      if (cnt == 16) {
        rht16_forward(v, y);
#pragma unroll
        for (int j = 0; j < 16; ++j) ac = amax_fold(ac, y[j]);
      } else {
#pragma unroll
        for (int j = 0; j < 16; ++j) ac = amax_fold(ac, v[j]);
      }
    }
  }
  for (int off = 16; off > 0; off >>= 1) {
    a = fmaxf(a, __shfl_xor_sync(0xFFFFFFFFu, a, off));
    ac = fmaxf(ac, __shfl_xor_sync(0xFFFFFFFFu, ac, off));
  }
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  if ((threadIdx.x & 31) == 0) warp_a[warp] = a, warp_ac[warp] = ac;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < warps; ++w) a = fmaxf(a, warp_a[w]), ac = fmaxf(ac, warp_ac[w]);
    atomic_max_nonneg(amax, a);
    if (col_amax) atomic_max_nonneg(col_amax, ac);
  }
}

// amax[0] = max(amax[0], max|act(x)|), act(x) rounded to x's dtype as the fused quantize pass rounds it (x dense,
// 16-byte aligned, K % 8 == 0, 16-bit): the per-tensor amax a fused activation → NVFP4 pass scales with.
template <QuantPreAct Act, DType kIn>
__global__ void __launch_bounds__(kThreads) act_amax_kernel(QuantInput x, float* amax) {
  __shared__ float warp_a[kWarps];
  float a = 0.f;
  const int64_t nvec = x.M * x.K / 8;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < nvec;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v[8];
    quant_fast::unpack8(quant_fast::act_round_word<Act, kIn>(reinterpret_cast<const uint4*>(x.data)[i]), kIn, v);
#pragma unroll
    for (int j = 0; j < 8; ++j) a = amax_fold(a, v[j]);
  }
  for (int off = 16; off > 0; off >>= 1) a = fmaxf(a, __shfl_xor_sync(0xFFFFFFFFu, a, off));
  if ((threadIdx.x & 31) == 0) warp_a[threadIdx.x / 32] = a;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) a = fmaxf(a, warp_a[w]);
    atomic_max_nonneg(amax, a);
  }
}

// One thread per (A row r, group g of 16 along C): dequantize, undo the RHT on full groups, store in [M, K].
__global__ void dequant_kernel(DequantArgs a, void* out, DType out_dtype) {
  const CopyLayout& L = a.layout;
  const int64_t groups = (L.C + 15) / 16, tasks = L.R * groups;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < tasks;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c0 = (t % groups) * 16, r = t / groups;  // consecutive threads: consecutive groups of one row
    const int cnt = static_cast<int>(L.C - c0 < 16 ? L.C - c0 : 16);
    float v[16], y[16];
    for (int j = 0; j < cnt; ++j) v[j] = dequant_element(a, r, c0 + j);
    if (a.rht && cnt == 16) {
      rht16_inverse(v, y);
      for (int j = 0; j < 16; ++j) v[j] = y[j];
    }
    for (int j = 0; j < cnt; ++j) {
      const int64_t c = c0 + j;
      store_f32(out, out_dtype, a.columnwise ? c * a.K + r : r * a.K + c, canonical_nan(v[j]));
    }
  }
}

__global__ void fold_max_kernel(float* dst, const float* src) { *dst = amax_fold(*dst, *src); }
__global__ void delayed_update_kernel(DelayedUpdateArgs a) { delayed_scale_update(a); }

int grid_for(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<int>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

}  // namespace

void quant_amax_cuda(const QuantInput& x, const QuantParams& p, float* amax_out, float* col_amax_out,
                     const Stream& stream) {
  // Enough CTAs to fill the GPU a few times over; each folds a grid-stride share (one atomic per CTA).
  const int64_t blocks = grid_stride_blocks(x.M * x.K / 8, 256, 8);
  if (p.pre_act != QuantPreAct::none) {
    TE_CHECK(col_amax_out == nullptr && (x.dtype == DType::bf16 || x.dtype == DType::f16) && x.stride_k == 1 &&
                 x.stride_m == x.K && x.K % 8 == 0 && (reinterpret_cast<uintptr_t>(x.data) & 15) == 0,
             "amax of a fused activation: " << x.M << "x" << x.K << " " << dtype_name(x.dtype)
                                            << " is not a dense 16-bit row-wise input (Quantizer::can_fuse_activation)");
    quant_fast::with_pre_act(p.pre_act, [&](auto act) {
      constexpr QuantPreAct A = decltype(act)::value;
      if constexpr (A != QuantPreAct::none) {  // excluded above
        const unsigned grid = static_cast<unsigned>(blocks);
        if (x.dtype == DType::bf16) act_amax_kernel<A, DType::bf16><<<grid, kThreads, 0, st(stream)>>>(x, amax_out);
        else act_amax_kernel<A, DType::f16><<<grid, kThreads, 0, st(stream)>>>(x, amax_out);
      }
    });
    TE_CUDA_CHECK_LAUNCH();
    return;
  }
  if (col_amax_out && nvfp4_rht_amax_cuda(x, amax_out, col_amax_out, stream)) return;
  amax_kernel<<<static_cast<unsigned>(blocks), 256, 0, st(stream)>>>(x, amax_out, col_amax_out);
  TE_CUDA_CHECK_LAUNCH();
}

void quantize_cuda(const QuantInput& x, const QuantParams& p_in, const QuantOutputs& out, const Stream& stream) {
  if (quantize_fast_cuda(x, p_in, out, stream)) return;
  if (quantize_nvfp4_columnwise_cuda(x, p_in, out, stream)) return;  // the column-wise copy (and the row-wise one)
  QuantParams p = p_in;
  if (quantize_nvfp4_rowwise_cuda(x, p, out, stream)) {  // the column-wise copy, if asked, comes next
    if (!p.columnwise) return;
    p.rowwise = false;  // the tile kernel may now take the column-wise copy alone
    if (quantize_nvfp4_columnwise_cuda(x, p, out, stream)) return;
  }
  const int64_t tiles_m = ceil_div(x.M, kTile), tiles_k = ceil_div(x.K, kTile);
  TE_CHECK(tiles_k <= 65535, "quantize: K = " << x.K << " exceeds the CUDA grid (at most " << 65535 * kTile << " columns)");
  const size_t smem = (kTile * kLd + 64 + 8 * kTile) * sizeof(float);
  // Set on every launch: cheap, and correct whichever device is current.
  TE_CUDA_CHECK(cudaFuncSetAttribute(quantize_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  // An empty tensor still writes a per-tensor scale_inv: keep one CTA.
  const dim3 grid(static_cast<unsigned>(tiles_m < 1 ? 1 : tiles_m), static_cast<unsigned>(tiles_k < 1 ? 1 : tiles_k));
  quantize_kernel<<<grid, kThreads, smem, st(stream)>>>(x, p, out);
  TE_CUDA_CHECK_LAUNCH();
}

void dequantize_cuda(const DequantArgs& a, void* out, DType out_dtype, const Stream& stream) {
  const int64_t tasks = a.layout.R * ceil_div(a.layout.C, 16);
  if (tasks == 0) return;
  if (dequantize_fast_cuda(a, out, out_dtype, stream)) return;
  dequant_kernel<<<grid_for(tasks, 256), 256, 0, st(stream)>>>(a, out, out_dtype);
  TE_CUDA_CHECK_LAUNCH();
}

void fold_max_cuda(float* dst, const float* src, const Stream& stream) {
  fold_max_kernel<<<1, 1, 0, st(stream)>>>(dst, src);
  TE_CUDA_CHECK_LAUNCH();
}

void delayed_update_cuda(const DelayedUpdateArgs& a, const Stream& stream) {
  delayed_update_kernel<<<1, 1, 0, st(stream)>>>(a);
  TE_CUDA_CHECK_LAUNCH();
}

}  // namespace te
