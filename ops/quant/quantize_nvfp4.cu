// NVFP4 1D fast paths of quantize_cuda, the per-block and per-element math quant_block.h's (block_scale,
// nvfp4_element's steps, rht16_forward), so the bytes equal the CPU reference's:
//   row-wise    — a lane owns one 1x16 block (two 16-byte loads of 16-bit input), so the block amax, its E4M3 scale
//                 and the 16 codes need no shuffles and the codes leave as one 8-byte store; stochastic rounding draws
//                 one Philox block per 8 elements, the same bits sr_uniform gives each element. With a fused
//                 activation (GELU, ReLU) each loaded word becomes act_forward's rounded output first, and the
//                 per-tensor amax was taken over those same values (quant_amax_cuda).
//   column-wise — a CTA parks a 128x128 tile in shared memory (as the FP8 tile kernel does); a thread takes two
//                 adjacent features and two 16-token blocks of each, applies the Hadamard transform to each full
//                 block, writes each block's 16 codes as one 8-byte store and the image as bf16 pairs. Asked for
//                 both copies, the same kernel first writes the row-wise one from the parked tile (x read once).
// These passes are bound by instructions, not bytes, so the per-element steps are kept short: stochastic rounding or
// not is chosen per thread rather than per element, the e2m1 casts round in the f32 adder (float_convert.h,
// scale_math.h), and a bf16 image without the per-tensor factor is looked up rather than multiplied and rounded.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "engine/cuda_check.h"
#include "engine/device.h"
#include "engine/error.h"
#include "ops/elementwise/cuda_common.cuh"
#include "ops/quant/quant_fast_common.cuh"
#include "ops/quant/quant_pre_act.cuh"
#include "ops/quant/quantize_nvfp4.h"

namespace te {
namespace {

using namespace quant_fast;

constexpr int kThreads = 256, kBlock = 16;

// The bf16 images of one block's codes when no per-tensor factor enters them (ImageSpec::tensor_factor off, the
// form a GEMM with the factor in alpha reads): code c's value times the block's decoded scale S has at most 6
// significant bits (e2m1's 2 × E4M3's 4) and lies in [2^-10, 2688], so the f32 product's top half is its bf16 value
// — image_value's bytes without its rounding (S is finite, so no NaN either). The 8 magnitudes' images sit in two
// byte_perm tables, low bytes and high bytes, so a pair of codes becomes a bf16 pair in three byte permutes.
struct ImageTable {
  uint32_t lo[2], hi[2];  // byte c of lo (hi): the low (high) byte of the image of magnitude code c
};
__device__ __forceinline__ ImageTable exact_image_table(float S) {
  auto pair = [&](float m0, float m1) {  // bf16(m0 S) | bf16(m1 S) << 16
    return __byte_perm(__float_as_uint(m0 * S), __float_as_uint(m1 * S), 0x7632);
  };
  const uint32_t x01 = pair(0.0f, 0.5f), x23 = pair(1.0f, 1.5f), x45 = pair(2.0f, 3.0f), x67 = pair(4.0f, 6.0f);
  return {{__byte_perm(x01, x23, 0x6420), __byte_perm(x45, x67, 0x6420)},
          {__byte_perm(x01, x23, 0x7531), __byte_perm(x45, x67, 0x7531)}};
}
// The bf16 pair of images of the two codes in q's low byte (the first in bits 0-3): the magnitudes looked up, the
// sign bits moved from bits 3 and 7 to 15 and 31.
__device__ __forceinline__ uint32_t exact_image_pair(const ImageTable& t, uint32_t q) {
  const uint32_t sel = q & 0x77u;  // selector nibbles 0, 1: the magnitudes (nibbles 2, 3 zero)
  const uint32_t lo = __byte_perm(t.lo[0], t.lo[1], sel), hi = __byte_perm(t.hi[0], t.hi[1], sel);
  const uint32_t sign = ((q & 0x88u) * 0x1001000u) & 0x80008000u;
  return __byte_perm(lo, hi, 0x5140) | sign;
}
// Whether a copy's image takes the exact table (bf16 without the per-tensor factor).
__device__ __forceinline__ bool exact_images(const QuantOutputs& out) {
  return out.image.dtype == DType::bf16 && !out.image.tensor_factor;
}

// One 1x16 block of the row-wise copy, x[m, k .. k + 16) as v: its scale, its 16 codes (one 8-byte store) and its
// image (two 16-byte stores when bf16). The block's first element index m * K + k is its SR counter (a multiple of
// 16, so each half of the block draws one Philox block).
template <bool kSr>
__device__ __forceinline__ void nvfp4_row_block(const QuantParams& p, const QuantOutputs& out, DType in, const float* v,
                                                int64_t m, int64_t k, int64_t K, float s_enc, float s_dec_image) {
  float a = 0.f;
#pragma unroll
  for (int j = 0; j < kBlock; ++j) a = amax_fold(a, v[j]);
  const BlockScale bs = block_scale(p, in, a, s_enc);
  store_block_scale(p, out.row.scale_inv, scale_offset(out.row.layout, m, k / kBlock), bs);
  const int64_t index = m * K + k;
  uint32_t w[2] = {0, 0};  // code j in nibble j % 8 of word j / 8
#pragma unroll
  for (int j = 0; j < kBlock; j += 8) {
    Philox4 r{};
    if constexpr (kSr) r = sr_block(p.seed, index + j, 0u);
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      const float y = v[j + t] * bs.factor;
      const uint32_t q = kSr ? e2m1_from_f32_sr(y, sr_uniform_of(r, t)) : e2m1_from_f32(y);
      w[j / 8] |= q << (4 * t);
    }
  }
  *reinterpret_cast<uint2*>(out.row.data + data_offset(out.row.layout, m, k) / 2) = make_uint2(w[0], w[1]);
  if (!out.row_image) return;
  const float decoded = decoded_block_scale(p, bs);
  auto img = [&](int j) {
    return image_value(p, static_cast<uint8_t>((w[j / 8] >> (4 * (j % 8))) & 0xFu), decoded, s_dec_image);
  };
  if (out.image.dtype == DType::bf16) {
    uint32_t h[8];  // codes 2j, 2j + 1 as a bf16 pair
    if (exact_images(out)) {
      const ImageTable t = exact_image_table(decoded);
#pragma unroll
      for (int j = 0; j < 8; ++j) h[j] = exact_image_pair(t, w[j / 4] >> (8 * (j % 4)));
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) h[j] = bf16x2_bits(img(2 * j), img(2 * j + 1));
    }
    uint4* dst = reinterpret_cast<uint4*>(static_cast<uint16_t*>(out.row_image) + index);
    dst[0] = make_uint4(h[0], h[1], h[2], h[3]);
    dst[1] = make_uint4(h[4], h[5], h[6], h[7]);
  } else {
#pragma unroll
    for (int j = 0; j < kBlock; ++j) store_f32(out.row_image, out.image.dtype, index + j, img(j));
  }
}

// Act: the fused activation applied to each loaded word (act_round_word: act_forward's bytes), which out.act_out
// then receives as well when set (x dense).
template <DType kIn, QuantPreAct Act>
__global__ void __launch_bounds__(kThreads) nvfp4_rowwise_kernel(QuantInput x, QuantParams p, QuantOutputs out) {
  const int64_t per_row = x.K / kBlock, total = x.M * per_row;
  const float s_enc = nvfp4_global_encode_scale(*out.row_amax);
  const float s_dec_image = image_s_dec(out.image, s_enc);
  const char* base = static_cast<const char*>(x.data);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t m = i / per_row, k = (i % per_row) * kBlock;
    float v[kBlock];
    uint4 w0 = *reinterpret_cast<const uint4*>(base + (m * x.stride_m + k) * 2);
    uint4 w1 = *reinterpret_cast<const uint4*>(base + (m * x.stride_m + k + 8) * 2);
    if constexpr (Act != QuantPreAct::none) {
      w0 = act_round_word<Act, kIn>(w0);
      w1 = act_round_word<Act, kIn>(w1);
      if (out.act_out) {
        uint4* act = reinterpret_cast<uint4*>(static_cast<uint16_t*>(out.act_out) + m * x.K + k);
        act[0] = w0;
        act[1] = w1;
      }
    }
    unpack8(w0, kIn, v);
    unpack8(w1, kIn, v + 8);
    if (p.sr)
      nvfp4_row_block<true>(p, out, kIn, v, m, k, x.K, s_enc, s_dec_image);
    else
      nvfp4_row_block<false>(p, out, kIn, v, m, k, x.K, s_enc, s_dec_image);
  }
}

// Parks the 128x128 tile of 16-bit x at (m0, k0) in s (zeros outside x): eight 16-byte loads per thread.
__device__ __forceinline__ void park_tile(const QuantInput& x, int64_t m0, int64_t k0, uint16_t* s) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    int rr, cc;
    tile_chunk(i, threadIdx.x, rr, cc);
    *reinterpret_cast<uint4*>(&s[rr * kTilePitch + cc]) = load_tile_chunk(x, m0, k0, i, threadIdx.x);
  }
}

// One feature's 16-token block of the column-wise copy: its (Hadamard-transformed) values y in, its scale stored,
// its codes and decoded scale out. Tokens past x are zeros in the parked tile, so they need no test: their codes are
// 0 (what the nibbles past the block's tokens hold) and only the stores look at cnt.
struct ColumnBlock {
  uint32_t w[2];  // code j in nibble j (zero past the block's tokens)
  float decoded;
};
template <bool kSr>
__device__ __forceinline__ ColumnBlock nvfp4_column_block(const QuantParams& p, DType in, const QuantCopyOut& col,
                                                          float s_enc, const float* y, int cnt, int64_t k, int64_t mg) {
  const CopyLayout& L = col.layout;
  float a = 0.f;
#pragma unroll
  for (int j = 0; j < 16; ++j) a = amax_fold(a, y[j]);
  const BlockScale bs = block_scale(p, in, a, s_enc);
  store_block_scale(p, col.scale_inv, scale_offset(L, k, mg / kBlock), bs);
  const int64_t index = k * L.C + mg;  // the SR counter of the block's first element
  uint32_t w[2] = {0, 0};
  // Codes j .. j + 8 into w[j / 8], element t's uniform from uniform(t).
  auto encode8 = [&](int j, auto uniform) {
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      const float yv = y[j + t] * bs.factor;
      const uint32_t code = kSr ? e2m1_from_f32_sr(yv, uniform(t)) : e2m1_from_f32(yv);
      w[j / 8] |= code << (4 * t);
    }
  };
#pragma unroll
  for (int j = 0; j < 16; j += 8) {
    if (!kSr) {
      encode8(j, [](int) { return 0.f; });
    } else if ((index & 7) == 0) {  // 8 consecutive elements share one Philox block
      const Philox4 rnd = sr_block(p.seed, index + j, 1u);
      encode8(j, [&](int t) { return sr_uniform_of(rnd, t); });
    } else {
      encode8(j, [&](int t) { return sr_uniform(p.seed, index + j + t, 1u); });
    }
  }
  // Codes: nibble n = k * data_ld + mg (even), 16 of them in 8 bytes.
  uint8_t* dst = col.data + data_offset(L, k, mg) / 2;
  if (cnt == 16 && (reinterpret_cast<uintptr_t>(dst) & 7) == 0) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
  } else {
#pragma unroll
    for (int j = 0; j < 16; j += 2)  // constant bounds: w stays in registers
      if (j < cnt) dst[j / 2] = static_cast<uint8_t>(w[j / 8] >> (4 * (j % 8)));
  }
  return {{w[0], w[1]}, decoded_block_scale(p, bs)};
}

// The row-wise copy of the parked tile at (m0, k0): 128 rows of 8 blocks, a warp's 8 lanes per row.
template <bool kBf16, bool kSr>
__device__ __forceinline__ void nvfp4_tile_rows(const QuantInput& x, const QuantParams& p, const QuantOutputs& out,
                                                const uint16_t* s, int64_t m0, int64_t k0) {
  constexpr DType kIn = kBf16 ? DType::bf16 : DType::f16;
  const float s_enc = nvfp4_global_encode_scale(*out.row_amax);
  const float s_dec_image = image_s_dec(out.image, s_enc);
#pragma unroll 1
  for (int u = threadIdx.x; u < kTile * (kTile / kBlock); u += kTileThreads) {
    const int rr = u / (kTile / kBlock), cb = (u % (kTile / kBlock)) * kBlock;
    const int64_t m = m0 + rr, k = k0 + cb;
    if (m >= x.M || k >= x.K) continue;
    float v[kBlock];
    unpack8(*reinterpret_cast<const uint4*>(&s[rr * kTilePitch + cb]), kIn, v);
    unpack8(*reinterpret_cast<const uint4*>(&s[rr * kTilePitch + cb + 8]), kIn, v + 8);
    nvfp4_row_block<kSr>(p, out, kIn, v, m, k, x.K, s_enc, s_dec_image);
  }
}

// The column-wise copy of the parked tile at (m0, k0): a thread takes features k, k + 1 and two 16-token blocks of
// each, and the image leaves as one bf16 pair per token, so a warp's 64 features make each image store one
// contiguous 128-byte row segment of x's [M, K] order. One feature's block is converted at a time (its codes kept),
// so a thread holds 16 values.
template <bool kBf16, bool kSr>
__device__ __forceinline__ void nvfp4_tile_columns(const QuantInput& x, const QuantParams& p, const QuantOutputs& out,
                                                   const uint16_t* s, int64_t m0, int64_t k0) {
  constexpr DType kIn = kBf16 ? DType::bf16 : DType::f16;
  const QuantCopyOut& col = out.col;
  const float s_enc = nvfp4_global_encode_scale(out.col_amax ? *out.col_amax : 0.f);
  const float s_dec_image = image_s_dec(out.image, s_enc);
  const int cc = 2 * (threadIdx.x % (kTile / 2));
  const int64_t k = k0 + cc;  // features k, k + 1 (K is a multiple of 8: both or neither)
  if (k >= x.K) return;
  const bool bf16_image = out.image.dtype == DType::bf16;
#pragma unroll 1
  for (int g = 0; g < 2; ++g) {
    const int r0 = (threadIdx.x / (kTile / 2)) * 32 + g * 16;  // first token of these blocks within the tile
    const int64_t mg = m0 + r0;
    if (mg >= x.M) break;
    const int cnt = static_cast<int>(x.M - mg < 16 ? x.M - mg : 16);
    ColumnBlock b[2];
#pragma unroll
    for (int f = 0; f < 2; ++f) {
      float v[16], y[16];
#pragma unroll
      for (int j = 0; j < 16; ++j) v[j] = half_bits_to_f32<kBf16>(s[(r0 + j) * kTilePitch + cc + f]);
      if (p.rht && cnt == 16) {
        rht16_forward(v, y);
      } else {
#pragma unroll
        for (int j = 0; j < 16; ++j) y[j] = v[j];
      }
      b[f] = nvfp4_column_block<kSr>(p, kIn, col, s_enc, y, cnt, k + f, mg);
    }
    if (!out.col_image) continue;
    if (exact_images(out)) {  // each feature's images as token pairs, then swapped into feature pairs per token
      const ImageTable t0 = exact_image_table(b[0].decoded), t1 = exact_image_table(b[1].decoded);
#pragma unroll
      for (int j = 0; j < 16; j += 2) {
        if (j >= cnt) break;
        const uint32_t a0 = exact_image_pair(t0, b[0].w[j / 8] >> (4 * (j % 8)));  // feature k, tokens j, j + 1
        const uint32_t a1 = exact_image_pair(t1, b[1].w[j / 8] >> (4 * (j % 8)));  // feature k + 1
        uint32_t* row = reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(out.col_image) + (mg + j) * x.K + k);
        row[0] = __byte_perm(a0, a1, 0x5410);
        if (j + 1 < cnt) row[x.K / 2] = __byte_perm(a0, a1, 0x7632);
      }
      continue;
    }
#pragma unroll
    for (int j = 0; j < 16; ++j) {  // the image in x's [M, K] order: columns k, k + 1 of token mg + j
      if (j >= cnt) break;
      const uint8_t c0 = static_cast<uint8_t>((b[0].w[j / 8] >> (4 * (j % 8))) & 0xFu);
      const uint8_t c1 = static_cast<uint8_t>((b[1].w[j / 8] >> (4 * (j % 8))) & 0xFu);
      const float i0 = image_value(p, c0, b[0].decoded, s_dec_image),
                  i1 = image_value(p, c1, b[1].decoded, s_dec_image);
      const int64_t at = (mg + j) * x.K + k;
      if (bf16_image) {
        *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(out.col_image) + at) = bf16x2_bits(i0, i1);
      } else {
        store_f32(out.col_image, out.image.dtype, at, i0);
        store_f32(out.col_image, out.image.dtype, at + 1, i1);
      }
    }
  }
}

// The column-wise copy (A = xᵀ: row r = feature k, column c = token m) of one 128x128 tile of 16-bit x. With
// p.rowwise the kernel first writes the row-wise copy of the tile (K a multiple of 16), so x is read once for both.
// Stochastic rounding or not is decided once per thread, so each path's loops run without per-element branches.
template <bool kBf16>
__global__ void __launch_bounds__(kTileThreads) nvfp4_columnwise_kernel(QuantInput x, QuantParams p, QuantOutputs out) {
  __shared__ __align__(16) uint16_t s[kTile * kTilePitch];
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kTile, k0 = static_cast<int64_t>(blockIdx.y) * kTile;
  park_tile(x, m0, k0, s);
  __syncthreads();
  if (p.rowwise) {
    if (p.sr)
      nvfp4_tile_rows<kBf16, true>(x, p, out, s, m0, k0);
    else
      nvfp4_tile_rows<kBf16, false>(x, p, out, s, m0, k0);
  }
  if (p.sr)
    nvfp4_tile_columns<kBf16, true>(x, p, out, s, m0, k0);
  else
    nvfp4_tile_columns<kBf16, false>(x, p, out, s, m0, k0);
}

// amax[0] = max(amax[0], max|x|) and col_amax[0] = max(col_amax[0], max|RHT(xᵀ)|) over full 16-token groups (raw
// values in a last, shorter group) of one 128x128 tile: the tensor read once, with 16-byte loads, where the generic
// amax kernel reads it twice, the second time one strided element per load. A thread folds the row amax over the
// chunks it loads, then takes one feature and four 16-token groups of the parked tile.
template <bool kBf16>
__global__ void __launch_bounds__(kTileThreads) nvfp4_rht_amax_kernel(QuantInput x, float* amax, float* col_amax) {
  __shared__ __align__(16) uint16_t s[kTile * kTilePitch];
  __shared__ float warp_a[kTileThreads / 32], warp_ac[kTileThreads / 32];
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kTile, k0 = static_cast<int64_t>(blockIdx.y) * kTile;
  float a = 0.f, ac = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    int rr, cc;
    tile_chunk(i, threadIdx.x, rr, cc);
    const uint4 chunk = load_tile_chunk(x, m0, k0, i, threadIdx.x);
    *reinterpret_cast<uint4*>(&s[rr * kTilePitch + cc]) = chunk;
    float v[8];
    unpack8(chunk, kBf16 ? DType::bf16 : DType::f16, v);
#pragma unroll
    for (int j = 0; j < 8; ++j) a = amax_fold(a, v[j]);
  }
  __syncthreads();
  const int cc = threadIdx.x % kTile;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r0 = (threadIdx.x / kTile + 2 * i) * 16;
    const int64_t mg = m0 + r0;
    if (mg >= x.M) break;
    float v[16], y[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) v[j] = half_bits_to_f32<kBf16>(s[(r0 + j) * kTilePitch + cc]);
    if (mg + 16 <= x.M) {
      rht16_forward(v, y);
#pragma unroll
      for (int j = 0; j < 16; ++j) ac = amax_fold(ac, y[j]);
    } else {
#pragma unroll
      for (int j = 0; j < 16; ++j) ac = amax_fold(ac, v[j]);  // the tokens past x are zeros
    }
  }
  for (int off = 16; off > 0; off >>= 1) {
    a = fmaxf(a, __shfl_xor_sync(0xFFFFFFFFu, a, off));
    ac = fmaxf(ac, __shfl_xor_sync(0xFFFFFFFFu, ac, off));
  }
  const int warp = threadIdx.x / 32;
  if ((threadIdx.x & 31) == 0) warp_a[warp] = a, warp_ac[warp] = ac;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kTileThreads / 32; ++w) a = fmaxf(a, warp_a[w]), ac = fmaxf(ac, warp_ac[w]);
    atomicMax(reinterpret_cast<unsigned*>(amax), __float_as_uint(a));  // non-negative floats order as uints
    atomicMax(reinterpret_cast<unsigned*>(col_amax), __float_as_uint(ac));
  }
}

// The row-wise copy's conditions: 16-bit rows that allow 16-byte loads, whole 1x16 blocks, aligned outputs, the amax.
bool rowwise_eligible(const QuantInput& x, const QuantOutputs& out) {
  return (x.dtype == DType::bf16 || x.dtype == DType::f16) && x.stride_k == 1 && x.K % kBlock == 0 &&
         x.stride_m % 8 == 0 && (reinterpret_cast<uintptr_t>(x.data) & 15) == 0 && x.M > 0 &&
         (reinterpret_cast<uintptr_t>(out.row.data) & 7) == 0 &&
         (reinterpret_cast<uintptr_t>(out.row_image) & 15) == 0 && out.row_amax != nullptr;
}
// The tile kernels' input: 16-bit rows that allow 16-byte loads, K a multiple of 8, a grid of tiles CUDA can launch.
bool tile_eligible(const QuantInput& x) {
  return (x.dtype == DType::bf16 || x.dtype == DType::f16) && x.stride_k == 1 && x.K % 8 == 0 && x.stride_m % 8 == 0 &&
         (reinterpret_cast<uintptr_t>(x.data) & 15) == 0 && x.M > 0 && quant_tile_grid_fits(x.K);
}
dim3 tile_grid(const QuantInput& x) {
  return dim3(static_cast<unsigned>(ceil_div(x.M, kTile)), static_cast<unsigned>(ceil_div(x.K, kTile)));
}

}  // namespace

bool quantize_nvfp4_columnwise_cuda(const QuantInput& x, const QuantParams& p, const QuantOutputs& out,
                                    const Stream& stream) {
  const bool eligible = p.format == QuantFormat::nvfp4_1d && p.columnwise && p.pre_act == QuantPreAct::none &&
                        tile_eligible(x) && !out.col.layout.store_transposed &&
                        (reinterpret_cast<uintptr_t>(out.col_image) & 3) == 0 &&
                        (!p.rowwise || rowwise_eligible(x, out));
  if (!eligible) return false;
  const dim3 grid = tile_grid(x);
  cudaStream_t st = static_cast<cudaStream_t>(stream.handle());
  if (x.dtype == DType::bf16) nvfp4_columnwise_kernel<true><<<grid, kTileThreads, 0, st>>>(x, p, out);
  else nvfp4_columnwise_kernel<false><<<grid, kTileThreads, 0, st>>>(x, p, out);
  TE_CUDA_CHECK_LAUNCH();
  return true;
}

bool nvfp4_rht_amax_cuda(const QuantInput& x, float* amax, float* col_amax, const Stream& stream) {
  if (!tile_eligible(x) || amax == nullptr || col_amax == nullptr) return false;
  cudaStream_t st = static_cast<cudaStream_t>(stream.handle());
  if (x.dtype == DType::bf16) nvfp4_rht_amax_kernel<true><<<tile_grid(x), kTileThreads, 0, st>>>(x, amax, col_amax);
  else nvfp4_rht_amax_kernel<false><<<tile_grid(x), kTileThreads, 0, st>>>(x, amax, col_amax);
  TE_CUDA_CHECK_LAUNCH();
  return true;
}

bool quantize_nvfp4_rowwise_cuda(const QuantInput& x, const QuantParams& p, const QuantOutputs& out,
                                 const Stream& stream) {
  if (p.format != QuantFormat::nvfp4_1d) return false;
  const bool fused = p.pre_act != QuantPreAct::none;
  const bool eligible = p.rowwise && rowwise_eligible(x, out);
  TE_CHECK(eligible || !fused, "fused activation → NVFP4 asked for an input without a fast path: " << x.M << "x" << x.K);
  TE_CHECK(!fused || (!p.columnwise && x.stride_m == x.K),
           "fused activation → NVFP4: row-wise only, of a dense input (Quantizer::can_fuse_activation)");
  TE_CHECK(!out.act_out || fused, "quantize: the activation output goes with a fused activation");
  if (!eligible) return false;
  const int64_t lanes = x.M * (x.K / kBlock);
  const unsigned blocks = static_cast<unsigned>(grid_stride_blocks(lanes, kThreads, 32));
  cudaStream_t st = static_cast<cudaStream_t>(stream.handle());
  auto launch = [&](auto act) {
    constexpr QuantPreAct A = decltype(act)::value;
    if (x.dtype == DType::bf16) nvfp4_rowwise_kernel<DType::bf16, A><<<blocks, kThreads, 0, st>>>(x, p, out);
    else nvfp4_rowwise_kernel<DType::f16, A><<<blocks, kThreads, 0, st>>>(x, p, out);
  };
  with_pre_act(p.pre_act, launch);
  TE_CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace te
