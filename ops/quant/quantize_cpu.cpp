// The CPU quantize the engine runs. For the FP8 formats (per tensor, 1x128 and 128x128 blocks, MXFP8) it performs the
// reference's arithmetic (quant_block.h, the same f32 operations on the same values) organised for speed: x widened
// to f32 once, each block's amax over a contiguous span, one scale per block, and an encode loop with the element
// format fixed at compile time. NVFP4 (Hadamard transform, stochastic rounding, two codes a byte) and anything else
// the reference handles take the reference (quantize_ref.cpp), which stays the oracle these paths are tested against.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/element.h"
#include "ops/elementwise/elementwise_impl.h"
#include "ops/quant/quant_block.h"
#include "ops/quant/quant_kernels.h"

namespace te {
namespace {

bool fast_path(const QuantParams& p) { return !nvfp4_format(p.format) && p.pre_act == QuantPreAct::none; }

// x as a dense f32 matrix [M, K]; widening bf16/f16 is exact.
std::vector<float> load_dense(const QuantInput& x) {
  std::vector<float> X(static_cast<size_t>(x.M * x.K));
  for (int64_t m = 0; m < x.M; ++m) {
    float* dst = X.data() + m * x.K;
    if (x.stride_k == 1 && x.dtype == DType::bf16) {
      const uint16_t* src = static_cast<const uint16_t*>(x.data) + m * x.stride_m;
      for (int64_t k = 0; k < x.K; ++k) dst[k] = bf16_to_f32(src[k]);
    } else if (x.stride_k == 1 && x.dtype == DType::f32) {
      std::memcpy(dst, static_cast<const float*>(x.data) + m * x.stride_m, static_cast<size_t>(x.K) * sizeof(float));
    } else {
      for (int64_t k = 0; k < x.K; ++k) dst[k] = load_f32(x.data, x.dtype, m * x.stride_m + k * x.stride_k);
    }
  }
  return X;
}

// max|a[i]| from `acc`, NaN skipped: amax_fold's result (a NaN compares false, so it never replaces an accumulator).
// Eight accumulators, folded at the end: the max of a set does not depend on the order, and they vectorise.
float span_amax(const float* a, int64_t n, float acc) {
  float lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) {
      const float v = std::fabs(a[i + j]);
      lanes[j] = v > lanes[j] ? v : lanes[j];
    }
  for (; i < n; ++i) {
    const float v = std::fabs(a[i]);
    acc = v > acc ? v : acc;
  }
  for (float v : lanes) acc = v > acc ? v : acc;
  return acc;
}

// minifloat_from_f32's code for E4M3 / E5M2 (round to nearest even, saturating, NaN to the canonical code without
// its sign) with selects instead of data-dependent branches. Normal results round in the integer adder (the half-way
// carry looks at the kept mantissa's last bit); results below the smallest normal are a multiple of the subnormal
// quantum, rounded by adding 2^23 in the f32 adder. Tested against the generic encoder through the quantizer
// (tests/quant/test_quantize_cpu.cpp).
template <DType kData>
inline uint8_t fp8_code(float f) {
  constexpr bool e4m3 = kData == DType::fp8_e4m3;
  constexpr int man = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15, shift = 23 - man;
  constexpr uint32_t max_code = e4m3 ? 0x7E : 0x7B;
  constexpr uint32_t max_bits = e4m3 ? 0x43E00000u : 0x47600000u;               // 448, 57344
  constexpr uint32_t min_normal = static_cast<uint32_t>(127 - bias + 1) << 23;  // 2^-6, 2^-14
  constexpr float to_quanta = e4m3 ? 512.0f : 65536.0f;                         // 1 / the subnormal quantum
  const uint32_t u = f32_bits(f), a = u & 0x7FFFFFFFu;
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t normal = ((a + ((1u << (shift - 1)) - 1u) + ((a >> shift) & 1u)) >> shift) - ((127u - bias) << man);
  const uint32_t sub = f32_bits(f32_from_bits(a) * to_quanta + 8388608.0f) - 0x4B000000u;
  uint32_t mag = a < min_normal ? sub : normal;
  mag = mag > max_code ? max_code : mag;
  mag = a >= max_bits ? max_code : mag;
  return static_cast<uint8_t>(a > 0x7F800000u ? 0x7Fu : (sign | mag));
}

// codes[i] = cast_fp8(a[i] * factor) with the element format fixed.
template <DType kData>
void encode_span(const float* a, int64_t n, float factor, uint8_t* codes) {
  for (int64_t i = 0; i < n; ++i) codes[i] = fp8_code<kData>(a[i] * factor);
}

// One copy of A [R, C] (x, or xᵀ for the column-wise copy): quantize_copy's results for a non-NVFP4 format.
template <DType kData>
void quantize_copy_fast(const std::vector<float>& A, const QuantParams& p, DType in, float copy_amax,
                        const QuantCopyOut& out, bool transposed_image, void* image, const ImageSpec& spec) {
  const CopyLayout& L = out.layout;
  const int64_t R = L.R, C = L.C, B = L.block ? L.block : std::max<int64_t>(C, 1), nb = L.blocks_per_row();
  const bool per_tensor = p.format == QuantFormat::fp8_per_tensor;
  if (per_tensor) store_block_scale(p, out.scale_inv, 0, block_scale(p, in, copy_amax, 1.0f));
  if (R == 0 || C == 0) return;

  float values[256];
  std::vector<float> img(image ? static_cast<size_t>(R * C) : 0);
  if (image)
    for (int code = 0; code < 256; ++code)
      values[code] = code_value(p.format, p.data_dtype, static_cast<uint8_t>(code));
  const float s_dec = image_s_dec(spec, 1.0f);

  // Block amax: a row's blocks, or (2D) a tile's rows folded together; max is order-independent.
  const int64_t group = L.two_d ? B : 1;  // rows that share a scale
  std::vector<float> amax(static_cast<size_t>(nb));
  std::vector<uint8_t> row_codes(static_cast<size_t>(C));
  for (int64_t r0 = 0; r0 < R; r0 += group) {
    const int64_t r1 = std::min(R, r0 + group);
    std::fill(amax.begin(), amax.end(), 0.f);
    if (!per_tensor)
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t b = 0; b < nb; ++b) amax[b] = span_amax(&A[r * C + b * B], std::min(B, C - b * B), amax[b]);
    for (int64_t b = 0; b < nb; ++b) {
      const BlockScale bs = block_scale(p, in, per_tensor ? copy_amax : amax[b], 1.0f);
      if (!per_tensor) store_block_scale(p, out.scale_inv, scale_offset(L, r0, b), bs);
      const float decoded = decoded_block_scale(p, bs);
      const int64_t c0 = b * B, n = std::min(B, C - c0);
      for (int64_t r = r0; r < r1; ++r) {
        const float* a = &A[r * C + c0];
        uint8_t* codes = L.store_transposed ? row_codes.data() + c0 : out.data + data_offset(L, r, c0);
        encode_span<kData>(a, n, bs.factor, codes);
        if (L.store_transposed)
          for (int64_t c = c0; c < c0 + n; ++c) out.data[data_offset(L, r, c)] = row_codes[c];
        if (image)
          for (int64_t i = 0; i < n; ++i)
            img[r * C + c0 + i] = canonical_nan(element_value(p.format, values[codes[i]], decoded, s_dec));
      }
    }
  }
  if (!image) return;
  if (spec.dtype == DType::f32) {
    if (transposed_image)
      cpu::transpose_2d(img.data(), image, 4, R, C);
    else
      std::memcpy(image, img.data(), img.size() * sizeof(float));
    return;
  }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c)
      store_f32(image, spec.dtype, transposed_image ? c * R + r : r * C + c, img[r * C + c]);
}

void quantize_copy_any(const std::vector<float>& A, const QuantParams& p, DType in, float copy_amax,
                       const QuantCopyOut& out, bool transposed_image, void* image, const ImageSpec& spec) {
  if (p.data_dtype == DType::fp8_e5m2)
    quantize_copy_fast<DType::fp8_e5m2>(A, p, in, copy_amax, out, transposed_image, image, spec);
  else
    quantize_copy_fast<DType::fp8_e4m3>(A, p, in, copy_amax, out, transposed_image, image, spec);
}

}  // namespace

void quant_amax_cpu(const QuantInput& x, const QuantParams& p, float* amax_out, float* col_amax_out,
                    const Stream& stream) {
  if (col_amax_out || !fast_path(p)) return quant_amax_ref(x, p, amax_out, col_amax_out, stream);
  const std::vector<float> X = load_dense(x);
  *amax_out = amax_fold(*amax_out, span_amax(X.data(), static_cast<int64_t>(X.size()), 0.f));
}

void quantize_cpu(const QuantInput& x, const QuantParams& p, const QuantOutputs& out, const Stream& stream) {
  if (!fast_path(p)) return quantize_ref(x, p, out, stream);
  const std::vector<float> X = load_dense(x);  // [M, K]
  const float row_amax = out.row_amax ? *out.row_amax : 0.f;
  if (p.rowwise) quantize_copy_any(X, p, x.dtype, row_amax, out.row, false, out.row_image, out.image);
  if (p.columnwise) {
    std::vector<float> A(X.size());  // xᵀ [K, M]
    cpu::transpose_2d(X.data(), A.data(), 4, x.M, x.K);
    quantize_copy_any(A, p, x.dtype, out.col_amax ? *out.col_amax : row_amax, out.col, true, out.col_image, out.image);
  }
}

}  // namespace te
