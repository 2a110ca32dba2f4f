// Per-element and per-block steps of every quantize/dequantize kernel, shared verbatim by the CPU reference and
// the CUDA kernels (TE_HD), so that both perform the same f32 operations in the same order.
#pragma once
#include <cfloat>
#include <cstdint>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#endif

#include "engine/element.h"
#include "ops/quant/quant_kernels.h"
#include "ops/quant/scale_math.h"

namespace te {

TE_HD float quant_fmt_max(DType data_dtype) {
  return data_dtype == DType::fp8_e5m2 ? 57344.0f : (data_dtype == DType::fp4_e2m1 ? 6.0f : 448.0f);
}
TE_HD uint8_t cast_fp8(float v, DType data_dtype) {
  return data_dtype == DType::fp8_e5m2 ? e5m2_from_f32(v) : e4m3_from_f32(v);
}
TE_HD float fp8_to_f32(uint8_t q, DType data_dtype) {
  return data_dtype == DType::fp8_e5m2 ? e5m2_to_f32(q) : e4m3_to_f32(q);
}
// The block-scaling value_for_inf: largest finite value of the input dtype.
TE_HD float hp_max_finite(DType in) {
  return in == DType::bf16 ? f32_from_bits(0x7F7F0000u) : (in == DType::f16 ? 65504.0f : FLT_MAX);
}
TE_HD float block_fp8_scale(float amax, const QuantParams& p, DType in) {
  return compute_scale(amax, quant_fmt_max(p.data_dtype), p.pow2, p.eps, hp_max_finite(in));
}
// Per-tensor fp8: the stored (delayed) scale, or the current-scaling scale from the (reduced) amax.
TE_HD float per_tensor_scale(const QuantParams& p, const float* amax) {
  return p.scale ? *p.scale : compute_scale(*amax, quant_fmt_max(p.data_dtype), p.pow2, p.eps, FLT_MAX);
}
// NVFP4 element code: round to nearest, or stochastic with the Philox uniform of (seed, element index, copy).
TE_HD uint8_t nvfp4_element(float x, float factor, bool sr, uint64_t seed, uint64_t index, uint32_t copy) {
  const float v = x * factor;
  return sr ? e2m1_from_f32_sr(v, sr_uniform(seed, index, copy)) : e2m1_from_f32(v);
}

// The scale of one block (per-tensor fp8: of the tensor): what multiplies x before the cast, and what is stored.
struct BlockScale {
  float factor;     // x * factor is cast to the element format
  float scale_inv;  // fp8 formats: stored fp32 scale_inv
  uint8_t code;     // MXFP8: E8M0 byte; NVFP4: E4M3 code of the block decode scale
};
// `amax`: the block amax (per tensor: the tensor amax); `s_enc`: NVFP4's global encode scale of this copy.
TE_HD BlockScale block_scale(const QuantParams& p, DType in, float amax, float s_enc) {
  BlockScale bs{1.0f, 1.0f, 0};
  switch (p.format) {
    case QuantFormat::fp8_per_tensor:
      bs.factor = p.scale ? *p.scale : compute_scale(amax, quant_fmt_max(p.data_dtype), p.pow2, p.eps, FLT_MAX);
      bs.scale_inv = 1.0f / bs.factor;
      break;
    case QuantFormat::fp8_block_1d:
    case QuantFormat::fp8_block_2d:
      bs.factor = block_fp8_scale(amax, p, in);
      bs.scale_inv = 1.0f / bs.factor;
      break;
    case QuantFormat::mxfp8:
      bs.code = mxfp8_scale_byte(amax, quant_fmt_max(p.data_dtype));
      bs.factor = mxfp8_encode_factor(bs.code);
      break;
    case QuantFormat::nvfp4_1d:
    case QuantFormat::nvfp4_2d:
      bs.code = nvfp4_block_scale_code(amax, s_enc);
      bs.factor = nvfp4_encode_factor(bs.code, 1.0f / s_enc);
      break;
  }
  return bs;
}
TE_HD void store_block_scale(const QuantParams& p, void* scale_inv, int64_t index, const BlockScale& bs) {
  if (byte_scales(p.format))
    static_cast<uint8_t*>(scale_inv)[index] = bs.code;
  else
    static_cast<float*>(scale_inv)[index] = bs.scale_inv;
}
// The code of one element (fp4: a nibble). `index` = r * C + c in the copy's view (the SR counter).
TE_HD uint8_t encode_element(const QuantParams& p, float x, float factor, uint64_t index, uint32_t copy) {
  if (nvfp4_format(p.format))
    return nvfp4_element(x, factor, p.sr, p.seed, index, copy);
  return cast_fp8(x * factor, p.data_dtype);
}

// Delayed scaling after a step (docs/NUMERICS.md §2): a non-zero step amax enters the history; the new scale
// is fmt_max * 2^-margin / amax(history) when that is finite and > 0 (Inf → FLT_MAX), else unchanged. A skipped
// step (a non-finite loss) only drops its amax: the state is what it would be had its quantizes not run.
TE_HD void delayed_scale_update(const DelayedUpdateArgs& a) {
  if (a.skip != nullptr && *a.skip != 0) {
    *a.step_amax = 0.0f;
    return;
  }
  const float step = *a.step_amax;
  if (step > 0.0f) {
    a.history[*a.count % a.len] = step;
    *a.count += 1;
  }
  float h = 0.0f;
  const int64_t n = *a.count < a.len ? *a.count : a.len;
  if (n > 0) {
    if (a.most_recent) {
      h = a.history[(*a.count - 1) % a.len];
    } else {
      for (int64_t i = 0; i < n; ++i) h = amax_fold(h, a.history[i]);
    }
  }
  if (h > 0.0f && h <= FLT_MAX) {
    float s = ldexpf(a.fmt_max, -a.margin) / h;
    if (s > FLT_MAX) s = FLT_MAX;
    *a.scale = s;
  }
  *a.step_amax = 0.0f;
}

// NaN arithmetic keeps the operand's payload on x86 but gives the canonical NaN on the GPU: dequantize returns
// one NaN (0x7FC00000) so that outputs compare bit for bit.
TE_HD float canonical_nan(float v) { return f32_is_nan(v) ? f32_from_bits(0x7FC00000u) : v; }

// An element's value in three steps that every kernel shares, dequantizing or writing an image: the decoded scale of
// its block, the value of its code, and their product (NVFP4: × S_dec after that).
// The decoded scale of a one-byte block scale code (MXFP8: E8M0 power of two; NVFP4: E4M3).
TE_HD float scale_of_code(QuantFormat f, uint8_t code) {
  return f == QuantFormat::mxfp8 ? e8m0_to_f32(code) : e4m3_to_f32(code);
}
// The value of an element code (fp4: a nibble). On Hopper the fp8 codes go through the hardware converter (every
// e4m3 and e5m2 value is exact in f16, and a NaN code gives a NaN, which every reader canonicalises) and an e2m1
// magnitude is a nibble of one packed word of doubled values: the software decode's values, in a few instructions
// instead of its branches (images and dequantizes decode one code per element).
TE_HD float code_value(QuantFormat f, DType data_dtype, uint8_t code) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if (nvfp4_format(f)) {
    const float m = static_cast<float>((0xC8643210u >> (4 * (code & 7))) & 0xFu) * 0.5f;  // 0 .5 1 1.5 2 3 4 6
    return (code & 8) ? -m : m;
  }
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(code, data_dtype == DType::fp8_e5m2 ? __NV_E5M2 : __NV_E4M3)));
#else
  return nvfp4_format(f) ? e2m1_to_f32(code) : fp8_to_f32(code, data_dtype);
#endif
}
// The value of every element code of a copy, for the CPU paths' table lookups instead of a decode per element.
inline void fill_code_values(QuantFormat f, DType data_dtype, float (&values)[256]) {
  for (int code = 0; code < 256; ++code) values[code] = code_value(f, data_dtype, static_cast<uint8_t>(code));
}
TE_HD float element_value(QuantFormat f, float code_value, float block_scale, float s_dec) {
  return nvfp4_format(f) ? code_value * block_scale * s_dec : code_value * block_scale;
}

// Dequantize side. Block b (along C) of row r of A: the stored fp32 scale_inv, or its one-byte code decoded.
TE_HD float dequant_block_scale(const DequantArgs& a, int64_t r, int64_t b) {
  const int64_t si = scale_offset(a.layout, r, b);
  if (byte_scales(a.format)) return scale_of_code(a.format, static_cast<const uint8_t*>(a.scale_inv)[si]);
  return static_cast<const float*>(a.scale_inv)[si];
}
// The code of A[r][c] (fp4: its nibble).
TE_HD uint8_t dequant_code(const DequantArgs& a, int64_t r, int64_t c) {
  const int64_t di = data_offset(a.layout, r, c);
  if (!nvfp4_format(a.format)) return a.data[di];
  const uint8_t byte = a.data[di >> 1];
  return (di & 1) ? (byte >> 4) : (byte & 0xF);
}
// NVFP4's per-tensor decode factor S_dec (1 for the other formats).
TE_HD float dequant_s_dec(const DequantArgs& a) {
  return nvfp4_format(a.format) ? 1.0f / nvfp4_global_encode_scale(*a.amax) : 1.0f;
}

// Quantize side: the decoded scale of a block as a dequantization reads it back, and the image value of one code
// under it, NVFP4 times `s_dec` (1 when the image leaves the per-tensor factor out).
TE_HD float decoded_block_scale(const QuantParams& p, const BlockScale& bs) {
  if (nvfp4_format(p.format)) return nvfp4_block_scale_value(bs.code);
  return byte_scales(p.format) ? scale_of_code(p.format, bs.code) : bs.scale_inv;
}
TE_HD float image_value(const QuantParams& p, uint8_t code, float block_scale, float s_dec) {
  return canonical_nan(element_value(p.format, code_value(p.format, p.data_dtype, code), block_scale, s_dec));
}
// The s_dec an image of an NVFP4 copy with global encode scale `s_enc` multiplies by (dequant_s_dec's value).
TE_HD float image_s_dec(const ImageSpec& spec, float s_enc) { return spec.tensor_factor ? 1.0f / s_enc : 1.0f; }

// The value of A[r][c] of one copy, before undoing any RHT.
TE_HD float dequant_element(const DequantArgs& a, int64_t r, int64_t c) {
  const int64_t b = a.layout.block ? c / a.layout.block : 0;
  return element_value(a.format, code_value(a.format, a.data_dtype, dequant_code(a, r, c)),
                       dequant_block_scale(a, r, b), dequant_s_dec(a));
}

}  // namespace te
