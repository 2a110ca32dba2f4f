// Device pieces shared by the fast quantize kernels (quantize_rowwise.cu, quantize_fast.cu): fp8 codes from the
// hardware pair conversion, 16-bit unpacking, and the per-tensor scale. The per-block math stays quant_block.h's,
// so CPU ≡ CUDA bit for bit.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "ops/quant/quant_block.h"

namespace te::quant_fast {

// Two codes from the hardware cvt.rn.satfinite pair conversion (same rounding and saturation as
// e4m3_from_f32/e5m2_from_f32), without the NaN rule: a NaN keeps its sign here, while the software code (and so the
// CPU reference) writes the positive NaN code. Callers that may see a NaN fix it with nan_fixed_pair.
template <bool kE5M2>
__device__ __forceinline__ uint32_t fp8_pair_raw(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, kE5M2 ? __NV_E5M2 : __NV_E4M3);
#else
  return cast_fp8(a, kE5M2 ? DType::fp8_e5m2 : DType::fp8_e4m3) |
         (static_cast<uint32_t>(cast_fp8(b, kE5M2 ? DType::fp8_e5m2 : DType::fp8_e4m3)) << 8);
#endif
}
// The positive NaN code where a or b is NaN. A constant, not a call to the software cast: inlined at every pair,
// that call made the kernels hundreds of KB.
__device__ __forceinline__ uint32_t nan_fixed_pair(uint32_t r, float a, float b) {
  static_assert(kE4M3.nan_code == kE5M2.nan_code);
  if (isnan(a)) r = (r & 0xFF00u) | kE4M3.nan_code;
  if (isnan(b)) r = (r & 0x00FFu) | (static_cast<uint32_t>(kE4M3.nan_code) << 8);
  return r;
}
__device__ __forceinline__ uint32_t fp8_pair(float a, float b, DType dt) {
  const uint32_t r = dt == DType::fp8_e5m2 ? fp8_pair_raw<true>(a, b) : fp8_pair_raw<false>(a, b);
  return nan_fixed_pair(r, a, b);
}

// Four codes packed little-endian (element j in byte j).
__device__ __forceinline__ uint32_t fp8_quad(const float* v, float factor, DType dt) {
  return fp8_pair(v[0] * factor, v[1] * factor, dt) | (fp8_pair(v[2] * factor, v[3] * factor, dt) << 16);
}

// One 16-bit value to f32 on the hardware converter (an f16 NaN's payload may differ from the software decode's; a
// NaN is left out of every amax and quantizes to the NaN code either way, so the bytes match the CPU reference).
template <bool kBf16>
__device__ __forceinline__ float half_bits_to_f32(uint32_t h) {
  if constexpr (kBf16) return __uint_as_float(h << 16);
  else return __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
}
__device__ __forceinline__ float half_bits_to_f32(uint32_t h, DType dt) {
  return dt == DType::bf16 ? half_bits_to_f32<true>(h) : half_bits_to_f32<false>(h);
}

// Eight 16-bit values of one 16-byte load, by constant word and half (no address of a register array is taken, so
// everything stays in registers).
__device__ __forceinline__ void unpack8(const uint4& r, DType dt, float* v) {
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    v[2 * j] = half_bits_to_f32(w[j] & 0xFFFFu, dt);
    v[2 * j + 1] = half_bits_to_f32(w[j] >> 16, dt);
  }
}

// A 128x128 tile of 16-bit x parked in shared memory by 256 threads (the FP8 tile kernel, NVFP4's column-wise
// kernel): chunk c = i * 256 + tid (i < 8) is tile row c / 16, columns (c % 16) * 8 .. + 8, one 16-byte load.
constexpr int kTile = kQuantTile, kTileThreads = 256, kTilePitch = kTile + 8;  // smem row pitch in 16-bit elements
__device__ __forceinline__ void tile_chunk(int i, int tid, int& rr, int& cc) {
  const int c = i * kTileThreads + tid;
  rr = c / 16;
  cc = (c % 16) * 8;
}
// Chunk i of the tile at (m0, k0): zeros outside x.
__device__ __forceinline__ uint4 load_tile_chunk(const QuantInput& x, int64_t m0, int64_t k0, int i, int tid) {
  int rr, cc;
  tile_chunk(i, tid, rr, cc);
  const int64_t m = m0 + rr, k = k0 + cc;
  return (m < x.M && k < x.K)
             ? *reinterpret_cast<const uint4*>(static_cast<const char*>(x.data) + (m * x.stride_m + k) * 2)
             : make_uint4(0, 0, 0, 0);
}

// The per-tensor factor of a copy (every block uses it), or 0 for block formats.
__device__ __forceinline__ BlockScale tensor_scale(const QuantParams& p, DType in, const float* amax) {
  return block_scale(p, in, amax ? *amax : 0.f, 1.f);
}

// Per-tensor fp8: the first thread of the grid stores the copies' scale_inv.
__device__ __forceinline__ void store_tensor_scales(const QuantParams& p, const QuantOutputs& out, DType in) {
  if (p.format != QuantFormat::fp8_per_tensor || blockIdx.x != 0 || blockIdx.y != 0 || threadIdx.x != 0) return;
  const BlockScale bs = tensor_scale(p, in, out.row_amax);  // written even when the tensor is empty
  if (p.rowwise) store_block_scale(p, out.row.scale_inv, 0, bs);
  if (p.columnwise) store_block_scale(p, out.col.scale_inv, 0, bs);
}

// The image of fp8 code `byte` of `word` (element j in byte j % 4) under its block's decoded scale.
__device__ __forceinline__ float fp8_image(const QuantParams& p, uint32_t word, int byte, float decoded) {
  return image_value(p, static_cast<uint8_t>(word >> (8 * byte)), decoded, 1.0f);
}
// The image of 8 consecutive fp8 codes (two words) under one decoded scale at image[i ..], [M, K] order: one 16-byte
// store for a bf16 image at an 8-aligned i.
__device__ __forceinline__ void store_image8(const QuantParams& p, const QuantOutputs& out, void* image, int64_t i,
                                             uint32_t w0, uint32_t w1, float decoded) {
  const uint32_t w[2] = {w0, w1};
  if (out.image.dtype == DType::bf16 && (i & 7) == 0) {
    uint32_t h[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t word = w[j / 2];
      const int b = 2 * (j % 2);
      h[j] = bf16x2_bits(fp8_image(p, word, b, decoded), fp8_image(p, word, b + 1, decoded));
    }
    *reinterpret_cast<uint4*>(static_cast<uint16_t*>(image) + i) = make_uint4(h[0], h[1], h[2], h[3]);
    return;
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) store_f32(image, out.image.dtype, i + j, fp8_image(p, w[j / 4], j % 4, decoded));
}

}  // namespace te::quant_fast
