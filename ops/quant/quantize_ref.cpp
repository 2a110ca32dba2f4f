// CPU reference quantizers: plain loops over the view of each copy, written for reading. They are the oracle the
// CUDA kernels must match bit for bit; all per-element and per-block arithmetic comes from quant_block.h.
#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/element.h"
#include "engine/error.h"
#include "ops/elementwise/elementwise_impl.h"
#include "ops/quant/quant_block.h"
#include "ops/quant/quant_kernels.h"

namespace te {
namespace {

// x as a dense f32 matrix [M, K] (exact: bf16/f16 widen without rounding).
std::vector<float> load_matrix(const QuantInput& x) {
  std::vector<float> X(static_cast<size_t>(x.M * x.K));
  for (int64_t m = 0; m < x.M; ++m)
    for (int64_t k = 0; k < x.K; ++k) X[m * x.K + k] = load_f32(x.data, x.dtype, m * x.stride_m + k * x.stride_k);
  return X;
}

// The matrix A [R, C] that one copy quantizes along C: x itself, or xᵀ for the column-wise copy, optionally with
// the Hadamard transform applied to each full group of 16 along C (a trailing partial group is left as is).
std::vector<float> copy_view(const std::vector<float>& X, int64_t M, int64_t K, bool columnwise, bool rht) {
  if (!columnwise) return X;
  std::vector<float> A(X.size());  // [K, M]
  cpu::transpose_2d(X.data(), A.data(), 4, M, K);
  if (rht) {
    for (int64_t r = 0; r < K; ++r)
      for (int64_t c0 = 0; c0 + 16 <= M; c0 += 16) {
        float y[16];
        rht16_forward(&A[r * M + c0], y);
        std::copy(y, y + 16, &A[r * M + c0]);
      }
  }
  return A;
}

float amax_of(const std::vector<float>& v) {
  float a = 0.f;
  for (float x : v) a = amax_fold(a, x);
  return a;
}

// The image of a copy's view A [R, C] (row-major, f32) stored in x's [M, K] order: A itself for the row-wise copy,
// its transpose for the column-wise one.
void store_image(const std::vector<float>& A, int64_t R, int64_t C, bool transposed, void* image, DType dtype) {
  if (A.empty()) return;  // an empty tensor's image has no bytes (and memcpy must not see a null source)
  if (dtype == DType::f32) {
    if (transposed) cpu::transpose_2d(A.data(), image, 4, R, C);
    else std::memcpy(image, A.data(), A.size() * sizeof(float));
    return;
  }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) store_f32(image, dtype, transposed ? c * R + r : r * C + c, A[r * C + c]);
}

// Quantizes A [R, C] into one copy. Block amax: 1D over the block's elements of row r; 2D over the B x B tile.
// With `image`, also the copy's exact image in x's [M, K] order (A's transpose for the column-wise copy): each
// code's value from a table, times its block's decoded scale (element_value, as the CUDA kernels compute it).
void quantize_copy(const std::vector<float>& A, const QuantParams& p, DType in, float copy_amax,
                   const QuantCopyOut& out, uint32_t copy, void* image, const ImageSpec& spec) {
  const CopyLayout& L = out.layout;
  const int64_t R = L.R, C = L.C, B = L.block ? L.block : std::max<int64_t>(C, 1), nb = L.blocks_per_row();
  if (L.fp4) std::memset(out.data, 0, static_cast<size_t>(dtype_storage_bytes(DType::fp4_e2m1, R * L.data_ld)));
  const float s_enc = nvfp4_format(p.format) ? nvfp4_global_encode_scale(copy_amax) : 1.0f;
  if (p.format == QuantFormat::fp8_per_tensor)  // written even for an empty tensor
    store_block_scale(p, out.scale_inv, 0, block_scale(p, in, copy_amax, s_enc));

  float values[256];
  std::vector<float> img(image ? static_cast<size_t>(R * C) : 0);
  if (image) fill_code_values(p.format, p.data_dtype, values);

  // Amax of every block (2D: every tile, indexed by its first row's tile).
  std::vector<float> block_amax(static_cast<size_t>(R * nb), 0.f);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t owner = L.two_d ? (r / B) * B : r;  // the row that holds the tile's amax
      float& a = block_amax[owner * nb + c / B];
      a = amax_fold(a, A[r * C + c]);
    }

  for (int64_t r = 0; r < R; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t owner = L.two_d ? (r / B) * B : r;
      const float amax = p.format == QuantFormat::fp8_per_tensor ? copy_amax : block_amax[owner * nb + b];
      const BlockScale bs = block_scale(p, in, amax, s_enc);
      store_block_scale(p, out.scale_inv, scale_offset(L, r, b), bs);
      const float decoded = decoded_block_scale(p, bs), s_dec = image_s_dec(spec, s_enc);
      for (int64_t c = b * B; c < std::min(C, (b + 1) * B); ++c) {
        const uint8_t q = encode_element(p, A[r * C + c], bs.factor, static_cast<uint64_t>(r * C + c), copy);
        const int64_t i = data_offset(L, r, c);
        if (L.fp4)
          out.data[i >> 1] |= static_cast<uint8_t>((i & 1) ? q << 4 : q);
        else
          out.data[i] = q;
        if (image) img[r * C + c] = canonical_nan(element_value(p.format, values[q], decoded, s_dec));
      }
    }
  if (image) store_image(img, R, C, copy != 0, image, spec.dtype);
}

}  // namespace

void quant_amax_ref(const QuantInput& x, const QuantParams& p, float* amax_out, float* col_amax_out,
                    const Stream&) {
  TE_CHECK(p.pre_act == QuantPreAct::none, "the CPU reference has no fused activation (the Quantizer never asks)");
  const std::vector<float> X = load_matrix(x);
  *amax_out = amax_fold(*amax_out, amax_of(X));
  if (col_amax_out) {
    const std::vector<float> A = copy_view(X, x.M, x.K, true, p.rht);
    *col_amax_out = amax_fold(*col_amax_out, amax_of(A));
  }
}

void quantize_ref(const QuantInput& x, const QuantParams& p, const QuantOutputs& out, const Stream&) {
  TE_CHECK(p.pre_act == QuantPreAct::none, "the CPU reference has no fused activation (the Quantizer never asks)");
  const std::vector<float> X = load_matrix(x);  // [M, K] f32
  const float row_amax = out.row_amax ? *out.row_amax : 0.f;
  if (p.rowwise) quantize_copy(X, p, x.dtype, row_amax, out.row, 0, out.row_image, out.image);
  if (p.columnwise) {
    const std::vector<float> A = copy_view(X, x.M, x.K, true, p.rht);  // [K, M]
    quantize_copy(A, p, x.dtype, out.col_amax ? *out.col_amax : row_amax, out.col, 1, out.col_image, out.image);
  }
}

namespace {

// Row r of a copy's view A [R, C], dequantized into `row`: dequant_element's steps, with each block's scale decoded
// once and the element codes looked up in `values` (the value of every code).
void dequantize_row(const DequantArgs& a, int64_t r, const float* values, float s_dec, float* row) {
  const CopyLayout& L = a.layout;
  const int64_t B = L.block ? L.block : L.C;
  for (int64_t b = 0; b < L.blocks_per_row(); ++b) {
    const float scale = dequant_block_scale(a, r, b);
    for (int64_t c = b * B; c < std::min(L.C, (b + 1) * B); ++c)
      row[c] = element_value(a.format, values[dequant_code(a, r, c)], scale, s_dec);
  }
}

}  // namespace

void dequantize_ref(const DequantArgs& a, void* out, DType out_dtype, const Stream&) {
  const CopyLayout& L = a.layout;
  float values[256];
  fill_code_values(a.format, a.data_dtype, values);
  const float s_dec = dequant_s_dec(a);
  std::vector<float> A(static_cast<size_t>(L.R * L.C));  // the copy's view [R, C]
  for (int64_t r = 0; r < L.R; ++r) dequantize_row(a, r, values, s_dec, A.data() + r * L.C);
  if (a.rht) {
    for (int64_t r = 0; r < L.R; ++r)
      for (int64_t c0 = 0; c0 + 16 <= L.C; c0 += 16) {
        float v[16];
        rht16_inverse(&A[r * L.C + c0], v);
        std::copy(v, v + 16, &A[r * L.C + c0]);
      }
  }
  for (int64_t m = 0; m < a.M; ++m)
    for (int64_t k = 0; k < a.K; ++k)
      store_f32(out, out_dtype, m * a.K + k, canonical_nan(a.columnwise ? A[k * L.C + m] : A[m * L.C + k]));
}

void fold_max_ref(float* dst, const float* src, const Stream&) { *dst = amax_fold(*dst, *src); }

void delayed_update_ref(const DelayedUpdateArgs& a, const Stream&) { delayed_scale_update(a); }

}  // namespace te
