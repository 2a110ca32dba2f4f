// The CPU quantize the engine runs. For the FP8 formats (per tensor, 1x128 and 128x128 blocks, MXFP8) it performs the
// reference's arithmetic (quant_block.h, the same f32 operations on the same values) organised for speed: x is read
// in panels of rows (the row-wise copy) or of 128 columns (the column-wise copy, whose rows are x's columns), widened
// to f32 in a small buffer; each block's amax comes from a contiguous span, each block gets one scale, and the encode
// loop has the element format fixed at compile time. The temporaries hold one panel, not the tensor, so a large tensor
// asks the system for few fresh pages. NVFP4 (Hadamard transform, stochastic rounding, two codes a byte) and anything
// else take the reference (quantize_ref.cpp), which stays the oracle these paths are tested against.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/element.h"
#include "ops/elementwise/elementwise_impl.h"
#include "ops/quant/quant_block.h"
#include "ops/quant/quant_kernels.h"

namespace te {
namespace {

bool fast_path(const QuantParams& p) { return !nvfp4_format(p.format) && p.pre_act == QuantPreAct::none; }

constexpr int64_t kPanel = 128;  // rows of A per panel: the 2D tile height, so a tile never spans two panels

// x[m, k0 .. k0 + n) widened to f32 (exact for bf16/f16).
void load_span(const QuantInput& x, int64_t m, int64_t k0, int64_t n, float* dst) {
  const int64_t first = m * x.stride_m + k0 * x.stride_k;
  if (x.stride_k == 1)
    return cpu::cast(static_cast<const char*>(x.data) + dtype_storage_bytes(x.dtype, first), x.dtype, dst, DType::f32,
                     n);
  for (int64_t k = 0; k < n; ++k) dst[k] = load_f32(x.data, x.dtype, first + k * x.stride_k);
}

// Columns [k0, k0 + n) of x (n <= kPanel) widened and transposed: dst[j * M + m] = x[m, k0 + j]. Sixteen rows at a
// time, so each row's span is read once and the writes stay within a few cache lines per column.
void load_columns(const QuantInput& x, int64_t k0, int64_t n, float* dst) {
  constexpr int64_t kRows = 16;
  float tile[kRows][kPanel];
  for (int64_t m0 = 0; m0 < x.M; m0 += kRows) {
    const int64_t rows = std::min(kRows, x.M - m0);
    for (int64_t i = 0; i < rows; ++i) load_span(x, m0 + i, k0, n, tile[i]);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < rows; ++i) dst[j * x.M + m0 + i] = tile[i][j];
  }
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

// Rows [p0, p0 + n) of a copy's image ([n, C] f32 in `img`) stored in x's [M, K] order: as they are (A = x), or as
// columns p0.. of x (A = xᵀ, R = K), each element written once in the order of the destination.
void store_panel_image(const float* img, int64_t p0, int64_t n, int64_t R, int64_t C, bool transposed, void* image,
                       DType dtype) {
  if (!transposed)
    return cpu::cast(img, DType::f32, static_cast<char*>(image) + dtype_storage_bytes(dtype, p0 * C), dtype, n * C);
  const auto scatter = [&](auto&& put) {  // put(destination index, value)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < n; ++i) put(c * R + p0 + i, img[i * C + c]);
  };
  if (dtype == DType::f32)
    scatter([&](int64_t at, float v) { static_cast<float*>(image)[at] = v; });
  else if (dtype == DType::bf16)
    scatter([&](int64_t at, float v) { static_cast<uint16_t*>(image)[at] = bf16_from_f32(v); });
  else
    scatter([&](int64_t at, float v) { store_f32(image, dtype, at, v); });
}

// One copy of A [R, C] (x, or xᵀ for the column-wise copy), written a panel of rows at a time: the rows of A that
// `load(r0, n, rows)` puts in `rows` ([n, C] f32). quantize_copy's results for a non-NVFP4 format.
template <DType kData, typename Load>
void quantize_copy_fast(const QuantParams& p, DType in, float copy_amax, const QuantCopyOut& out, int64_t panel,
                        Load load, void* image, bool transposed_image, const ImageSpec& spec) {
  const CopyLayout& L = out.layout;
  const int64_t R = L.R, C = L.C, B = L.block ? L.block : std::max<int64_t>(C, 1), nb = L.blocks_per_row();
  const bool per_tensor = p.format == QuantFormat::fp8_per_tensor;
  if (per_tensor) store_block_scale(p, out.scale_inv, 0, block_scale(p, in, copy_amax, 1.0f));
  if (R == 0 || C == 0) return;

  float values[256];
  if (image) fill_code_values(p.format, p.data_dtype, values);
  const float s_dec = image_s_dec(spec, 1.0f);
  const int64_t group = L.two_d ? B : 1;  // rows that share a scale (a 2D tile's)
  std::vector<float> rows(static_cast<size_t>(panel * C)), img(image ? rows.size() : 0), amax(static_cast<size_t>(nb));
  std::vector<uint8_t> row_codes(static_cast<size_t>(C));

  for (int64_t p0 = 0; p0 < R; p0 += panel) {
    const int64_t pn = std::min(panel, R - p0);
    load(p0, pn, rows.data());
    for (int64_t g0 = 0; g0 < pn; g0 += group) {
      const int64_t g1 = std::min(pn, g0 + group);
      // Block amax: a row's blocks, or a tile's rows folded together (max does not depend on the order).
      std::fill(amax.begin(), amax.end(), 0.f);
      if (!per_tensor)
        for (int64_t i = g0; i < g1; ++i)
          for (int64_t b = 0; b < nb; ++b) amax[b] = span_amax(&rows[i * C + b * B], std::min(B, C - b * B), amax[b]);
      for (int64_t b = 0; b < nb; ++b) {
        const BlockScale bs = block_scale(p, in, per_tensor ? copy_amax : amax[b], 1.0f);
        if (!per_tensor) store_block_scale(p, out.scale_inv, scale_offset(L, p0 + g0, b), bs);
        const float decoded = decoded_block_scale(p, bs);
        const int64_t c0 = b * B, n = std::min(B, C - c0);
        for (int64_t i = g0; i < g1; ++i) {
          const int64_t r = p0 + i;
          uint8_t* codes = L.store_transposed ? row_codes.data() + c0 : out.data + data_offset(L, r, c0);
          encode_span<kData>(&rows[i * C + c0], n, bs.factor, codes);
          if (L.store_transposed)
            for (int64_t c = c0; c < c0 + n; ++c) out.data[data_offset(L, r, c)] = row_codes[c];
          if (image)
            for (int64_t j = 0; j < n; ++j)
              img[i * C + c0 + j] = canonical_nan(element_value(p.format, values[codes[j]], decoded, s_dec));
        }
      }
    }
    // The panel's image in x's [M, K] order: A's rows are x's rows, or (column-wise) x's columns.
    if (image) store_panel_image(img.data(), p0, pn, R, C, transposed_image, image, spec.dtype);
  }
}

template <DType kData>
void quantize_fp8(const QuantInput& x, const QuantParams& p, const QuantOutputs& out) {
  const float row_amax = out.row_amax ? *out.row_amax : 0.f;
  if (p.rowwise)
    quantize_copy_fast<kData>(
        p, x.dtype, row_amax, out.row, kPanel,
        [&](int64_t r0, int64_t n, float* rows) {
          for (int64_t i = 0; i < n; ++i) load_span(x, r0 + i, 0, x.K, rows + i * x.K);
        },
        out.row_image, false, out.image);
  if (p.columnwise)
    quantize_copy_fast<kData>(
        p, x.dtype, out.col_amax ? *out.col_amax : row_amax, out.col, kPanel,
        [&](int64_t r0, int64_t n, float* rows) { load_columns(x, r0, n, rows); }, out.col_image, true, out.image);
}

}  // namespace

void quant_amax_cpu(const QuantInput& x, const QuantParams& p, float* amax_out, float* col_amax_out,
                    const Stream& stream) {
  if (col_amax_out || !fast_path(p)) return quant_amax_ref(x, p, amax_out, col_amax_out, stream);
  if (x.M == 0 || x.K == 0) return;  // max over nothing: the amax stays as it is
  std::vector<float> row(static_cast<size_t>(x.K));
  float a = 0.f;
  for (int64_t m = 0; m < x.M; ++m) {
    load_span(x, m, 0, x.K, row.data());
    a = span_amax(row.data(), x.K, a);
  }
  *amax_out = amax_fold(*amax_out, a);
}

void quantize_cpu(const QuantInput& x, const QuantParams& p, const QuantOutputs& out, const Stream& stream) {
  if (!fast_path(p)) return quantize_ref(x, p, out, stream);
  if (p.data_dtype == DType::fp8_e5m2)
    quantize_fp8<DType::fp8_e5m2>(x, p, out);
  else
    quantize_fp8<DType::fp8_e4m3>(x, p, out);
}

}  // namespace te
