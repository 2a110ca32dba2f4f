// The 128x128 tile kernel of the fast quantize paths (quantize_fast.cu), as a template over where the tile's
// values come from, so a producer that computes a tensor tile by tile (the optimizer writing a weight's next FP8
// copies, graph/optimizer_quantize.cu) quantizes it with the same code, and so the same bytes, as quantizing the
// tensor afterwards would. A CTA owns a tile: the tile is parked in shared memory in the 16-bit value dtype (34 KB),
// the row-wise copy comes from there, 8 elements per lane, then each thread walks 32 rows of two columns for the
// column-wise copy (the four quarters of a 128-row block meet in shared memory). A 2D tile is one block: its amax
// is folded while the tile is parked, and both copies use its one scale.
//
// A tile source has
//   prepare()                      called once per thread first: the source the thread uses (e.g. with scalars
//                                  read from memory into registers);
//   uint4 load(x, m0, k0, i, tid)  chunk i of the tile at (m0, k0), as tile_chunk cuts it: eight 16-bit values
//                                  (zeros outside x);
//   uint4 finish(uint4)            what becomes of a loaded chunk before it is parked (all loads are issued first).
#pragma once
#include <cuda_runtime.h>

#include "ops/quant/quant_fast_common.cuh"
#include "ops/quant/quant_pre_act.cuh"

namespace te::quant_fast {

// x's elements, through a fused activation when Act is not none (rounded to the input dtype, as act_forward
// stores it: both copies then hold the bytes of act_forward followed by quantize).
template <QuantPreAct Act, DType kIn>
struct InputTile {
  __device__ __forceinline__ InputTile prepare() const { return *this; }
  __device__ __forceinline__ uint4 load(const QuantInput& x, int64_t m0, int64_t k0, int i, int tid) const {
    return load_tile_chunk(x, m0, k0, i, tid);
  }
  __device__ __forceinline__ uint4 finish(uint4 raw) const {
    if constexpr (Act != QuantPreAct::none) raw = act_round_word<Act, kIn>(raw);
    return raw;
  }
};

// Row-wise codes and scale for one lane's 8 elements at (m, k) of row-wise block size B (G = B/8 lanes share a
// block; every lane of the warp must call this, `in` false for lanes outside x).
template <int B>
__device__ __forceinline__ void rowwise8(const QuantParams& p, const QuantOutputs& out, DType in_dtype,
                                         const BlockScale& pt, int64_t m, int64_t k, int64_t K, bool in,
                                         const float (&v)[8]) {
  constexpr int G = B / 8;
  const QuantCopyOut& row = out.row;
  float a = 0.f;
  for (int j = 0; j < 8; ++j) a = amax_fold(a, v[j]);
  for (int off = 1; off < G; off <<= 1) a = fmaxf(a, __shfl_xor_sync(0xFFFFFFFFu, a, off));
  if (!in) return;
  BlockScale bs = pt;  // per-tensor, or the 2D tile's scale (stored once per tile by the caller)
  if (p.format != QuantFormat::fp8_per_tensor && p.format != QuantFormat::fp8_block_2d) {
    bs = block_scale(p, in_dtype, a, 1.f);
    if ((threadIdx.x & (G - 1)) == 0) store_block_scale(p, row.scale_inv, scale_offset(row.layout, m, k / B), bs);
  }
  const uint2 q = make_uint2(fp8_quad(v, bs.factor, p.data_dtype), fp8_quad(v + 4, bs.factor, p.data_dtype));
  *reinterpret_cast<uint2*>(row.data + data_offset(row.layout, m, k)) = q;
  if (out.row_image) store_image8(p, out, out.row_image, m * K + k, q.x, q.y, decoded_block_scale(p, bs));
}

// 32 codes (one column, 32 rows) to 32 consecutive bytes at dst; `rows` < 32 at the bottom edge of x.
__device__ __forceinline__ void store_code_run(uint8_t* dst, const uint32_t (&q)[8], int rows) {
  if (rows == 32 && (reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
    reinterpret_cast<uint4*>(dst)[0] = make_uint4(q[0], q[1], q[2], q[3]);
    reinterpret_cast<uint4*>(dst)[1] = make_uint4(q[4], q[5], q[6], q[7]);
    return;
  }
#pragma unroll
  for (int j = 0; j < 32; ++j)  // constant indices keep q in registers
    if (j < rows) dst[j] = static_cast<uint8_t>(q[j / 4] >> (8 * (j % 4)));
}

// Column-wise (and optionally row-wise) copies of one 128x128 tile of 16-bit values; block size B along M for the
// column copy (and along K for the row copy). The values come from `src` (a tile source, below): x itself, x through
// a fused activation, or a producer that computes them; x gives the shape (M, K) either way. The format and the
// value dtype are template parameters: with them constant the per-element code is a few instructions (run-time
// switches inlined per element made this kernel 440 KB of straight-line code, and its warps waited on instruction
// fetch: 8% of copy bandwidth).
template <QuantFormat F, bool kBf16, class Source>
__global__ void __launch_bounds__(kTileThreads, 3)
    tile_kernel(const Source src, QuantInput x, QuantParams p_in, QuantOutputs out) {
  constexpr int B = F == QuantFormat::mxfp8 ? 32 : kTile;
  constexpr DType kIn = kBf16 ? DType::bf16 : DType::f16;
  constexpr bool per_tensor = F == QuantFormat::fp8_per_tensor;
  constexpr bool two_d = F == QuantFormat::fp8_block_2d;
  QuantParams p = p_in;
  p.format = F;  // block_scale folds to this format's case
  __shared__ __align__(16) uint16_t s[kTile * kTilePitch];
  __shared__ float part_amax[4][kTile];
  store_tensor_scales(p, out, kIn);
  // M tiles run fastest: CTAs resident together write whole rows of xᵀ (long runs) instead of 128-byte pieces of
  // every row at a power-of-two stride.
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kTile, k0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int tid = threadIdx.x;
  BlockScale row_pt = per_tensor ? tensor_scale(p, kIn, out.row_amax) : BlockScale{0.f, 0.f, 0};
  // 1. Load (tile_chunk: 16 lanes per 128 columns of a row).
  const auto source = src.prepare();
  uint4 raw[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) raw[i] = source.load(x, m0, k0, i, tid);
  float tile_a = 0.f;  // 2D: this thread's share of the tile amax (zeros outside x change no maximum)
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    int rr, cc;
    tile_chunk(i, tid, rr, cc);
    raw[i] = source.finish(raw[i]);  // zeros stay zeros
    *reinterpret_cast<uint4*>(&s[rr * kTilePitch + cc]) = raw[i];
    if constexpr (two_d) {
      float v[8];
      unpack8(raw[i], kIn, v);
      for (int j = 0; j < 8; ++j) tile_a = amax_fold(tile_a, v[j]);
    }
  }
  if constexpr (two_d) {
    for (int off = 16; off > 0; off >>= 1) tile_a = fmaxf(tile_a, __shfl_xor_sync(0xFFFFFFFFu, tile_a, off));
    if ((tid & 31) == 0) part_amax[0][tid / 32] = tile_a;
  }
  __syncthreads();
  if constexpr (two_d) {
    float a = part_amax[0][0];
    for (int w = 1; w < kTileThreads / 32; ++w) a = fmaxf(a, part_amax[0][w]);
    row_pt = block_scale(p, kIn, a, 1.f);
    if (tid == 0) {  // one scale per tile, shared by the two copies (A = xᵀ indexes the column-wise one)
      if (p.rowwise) store_block_scale(p, out.row.scale_inv, scale_offset(out.row.layout, m0, k0 / kTile), row_pt);
      if (p.columnwise) store_block_scale(p, out.col.scale_inv, scale_offset(out.col.layout, k0, m0 / kTile), row_pt);
    }
  }
  // 2. Row-wise, from shared memory (re-reading it frees raw's 32 registers: 3 CTAs per SM instead of 2).
  if (p.rowwise) {
#pragma unroll 2
    for (int i = 0; i < 8; ++i) {
      int rr, cc;
      tile_chunk(i, tid, rr, cc);
      const int64_t m = m0 + rr, k = k0 + cc;
      float v[8];
      unpack8(*reinterpret_cast<const uint4*>(&s[rr * kTilePitch + cc]), kIn, v);
      rowwise8<B>(p, out, kIn, row_pt, m, k, x.K, m < x.M && k < x.K, v);
    }
  }
  if (!p.columnwise) return;  // 2D row-wise only
  // 3. Column-wise: thread = (column pair cp, quarter qr of the 128 rows): columns 2cp and 2cp+1 of rows
  //    qr*32 .. +32, read as one 32-bit word per row (a warp reads 32 consecutive words: no bank conflict). The
  //    words stay packed (32 registers, not 64 floats) and are converted again for the cast: fewer registers,
  //    more CTAs per SM.
  const int cp = tid % 64, qr = tid / 64, c0 = 2 * cp;
  const int64_t k = k0 + c0, mq = m0 + qr * 32;
  uint32_t w[32];
  float a0 = 0.f, a1 = 0.f;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    w[j] = *reinterpret_cast<const uint32_t*>(&s[(qr * 32 + j) * kTilePitch + c0]);
    a0 = amax_fold(a0, half_bits_to_f32<kBf16>(w[j] & 0xFFFFu));
    a1 = amax_fold(a1, half_bits_to_f32<kBf16>(w[j] >> 16));
  }
  const QuantCopyOut& col = out.col;
  const CopyLayout& L = col.layout;         // A = xᵀ: row r = k, column c = m
  const bool col_in = k < x.K && mq < x.M;  // K % 8 == 0 here, so column k + 1 is inside x with column k
  float f0, f1, d0, d1;                     // the two columns' factors and decoded scales
  if constexpr (per_tensor) {
    const BlockScale bs = tensor_scale(p, kIn, out.col_amax ? out.col_amax : out.row_amax);
    f0 = f1 = bs.factor;
    d0 = d1 = bs.scale_inv;
  } else if constexpr (two_d) {
    f0 = f1 = row_pt.factor;
    d0 = d1 = decoded_block_scale(p, row_pt);
  } else {
    if constexpr (B == kTile) {  // the four quarters of a column meet in shared memory
      part_amax[qr][c0] = a0;
      part_amax[qr][c0 + 1] = a1;
      __syncthreads();
      a0 = fmaxf(fmaxf(part_amax[0][c0], part_amax[1][c0]), fmaxf(part_amax[2][c0], part_amax[3][c0]));
      a1 = fmaxf(fmaxf(part_amax[0][c0 + 1], part_amax[1][c0 + 1]), fmaxf(part_amax[2][c0 + 1], part_amax[3][c0 + 1]));
    }
    const BlockScale b0 = block_scale(p, kIn, a0, 1.f), b1 = block_scale(p, kIn, a1, 1.f);
    f0 = b0.factor, f1 = b1.factor;
    d0 = decoded_block_scale(p, b0), d1 = decoded_block_scale(p, b1);
    if (col_in && (B == 32 || qr == 0)) {
      store_block_scale(p, col.scale_inv, scale_offset(L, k, mq / B), b0);
      store_block_scale(p, col.scale_inv, scale_offset(L, k + 1, mq / B), b1);
    }
  }
  if (!col_in) return;
  uint32_t q0[8], q1[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    float v0[4], v1[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      v0[r] = half_bits_to_f32<kBf16>(w[4 * j + r] & 0xFFFFu);
      v1[r] = half_bits_to_f32<kBf16>(w[4 * j + r] >> 16);
    }
    q0[j] = fp8_quad(v0, f0, p.data_dtype);
    q1[j] = fp8_quad(v1, f1, p.data_dtype);
  }
  const int rows = static_cast<int>(x.M - mq < 32 ? x.M - mq : 32);
  if (out.col_image) {  // columns k, k + 1 of each row: one 32-bit store per row for a bf16 image
#pragma unroll
    for (int j = 0; j < 32; ++j)
      if (j < rows) {
        const float v0 = fp8_image(p, q0[j / 4], j % 4, d0), v1 = fp8_image(p, q1[j / 4], j % 4, d1);
        const int64_t i = (mq + j) * x.K + k;
        if (out.image.dtype == DType::bf16) {
          *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(out.col_image) + i) = bf16x2_bits(v0, v1);
        } else {
          store_f32(out.col_image, out.image.dtype, i, v0);
          store_f32(out.col_image, out.image.dtype, i + 1, v1);
        }
      }
  }
  if constexpr (F == QuantFormat::mxfp8) {  // x's [M, K] order: columns k, k+1 of a row as one 16-bit store
#pragma unroll
    for (int j = 0; j < 32; ++j)
      if (j < rows) {
        const uint32_t sh = 8 * (j % 4);
        const uint32_t pair = ((q0[j / 4] >> sh) & 0xFFu) | (((q1[j / 4] >> sh) & 0xFFu) << 8);
        *reinterpret_cast<uint16_t*>(col.data + data_offset(L, k, mq + j)) = static_cast<uint16_t>(pair);
      }
  } else {  // xᵀ: 32 consecutive bytes of rows k and k + 1
    store_code_run(col.data + data_offset(L, k, mq), q0, rows);
    store_code_run(col.data + data_offset(L, k + 1, mq), q1, rows);
  }
}

}  // namespace te::quant_fast
